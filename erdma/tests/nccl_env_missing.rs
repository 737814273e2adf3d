//! `ERDMA_NCCL_LIBRARY` naming a file that does not exist: a typed error naming that path,
//! and no fallback to the default names. (Its own test binary: the loaded library is cached
//! per process.)

#![cfg(feature = "nccl")]

use erdma::nccl::{NCCL_LIBRARY_ENV, Nccl, NcclError};

#[test]
fn override_to_a_missing_file_is_reported_with_its_path() {
    let path = "/nonexistent/erdma-test/libnccl.so.2";
    // SAFETY: this is the only test of this binary and no other thread reads the environment.
    unsafe { std::env::set_var(NCCL_LIBRARY_ENV, path) };
    let e = Nccl::load().unwrap_err();
    match &e {
        NcclError::LibraryNotFound { tried, .. } => assert_eq!(tried, &[path.to_string()]),
        other => panic!("expected LibraryNotFound, got {other:?}"),
    }
    assert!(
        e.to_string().starts_with(&format!("{path} not found: ")),
        "{e}"
    );
    assert_eq!(e.exit_status(), 3);
    // The same error on every call (cached), never a panic.
    assert_eq!(Nccl::load().unwrap_err(), e);
}
