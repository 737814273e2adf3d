//! `ERDMA_NCCL_LIBRARY` naming a real shared library that is not NCCL (libc): refused with
//! the missing symbol named. (Its own test binary: the loaded library is cached per process.)

#![cfg(feature = "nccl")]

use erdma::nccl::{NCCL_LIBRARY_ENV, Nccl, NcclError};

#[test]
fn override_to_libc_is_not_nccl() {
    // SAFETY: this is the only test of this binary and no other thread reads the environment.
    unsafe { std::env::set_var(NCCL_LIBRARY_ENV, "libc.so.6") };
    let e = Nccl::load().unwrap_err();
    assert_eq!(
        e,
        NcclError::NotNccl {
            library: "libc.so.6".into(),
            symbol: "ncclGetVersion",
        }
    );
    assert_eq!(e.exit_status(), 3);
    assert_eq!(Nccl::load().unwrap_err(), e);
}
