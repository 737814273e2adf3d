//! rdma_pingpong's argument handling needs no RDMA device: an argument that
//! is not UTF-8 is a usage error (exit 2, one line and the usage), never a
//! panic (issue 16).

use std::os::unix::ffi::OsStrExt;
use std::path::PathBuf;
use std::process::Command;

/// target/<profile>/examples/rdma_pingpong, next to this test's deps/ directory.
fn example_binary() -> PathBuf {
    let exe = std::env::current_exe().expect("test binary path");
    let profile_dir = exe
        .parent()
        .and_then(|deps| deps.parent())
        .expect("target dir");
    profile_dir.join("examples").join("rdma_pingpong")
}

#[test]
fn a_non_utf8_argument_is_a_usage_error() {
    let bin = example_binary();
    assert!(
        bin.exists(),
        "{} not built (cargo test builds examples)",
        bin.display()
    );
    let out = Command::new(&bin)
        .arg("--connect")
        .arg(std::ffi::OsStr::from_bytes(b"host\xff:18515"))
        .output()
        .expect("run rdma_pingpong");
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(
        err.starts_with(
            "rdma_pingpong: argument host\u{fffd}:18515 is not valid UTF-8\nusage: rdma_pingpong"
        ),
        "{err}"
    );
    assert!(!err.contains("panicked"), "{err}");
}
