//! Tests that run anywhere, with or without RDMA: what the library reports
//! must match what the host has (on a host without RDMA: an empty list with
//! the reason, never an error or a panic).

use std::path::Path;
use std::process::Command;

use erdma::*;

#[test]
fn device_list_matches_the_host() {
    let list = devices();
    let kernel_rdma = Path::new("/sys/class/infiniband_verbs/abi_version").exists();
    if !Path::new("/usr/lib/x86_64-linux-gnu/libibverbs.so.1").exists()
        && !Path::new("/usr/lib64/libibverbs.so.1").exists()
        && !Path::new("/usr/lib/libibverbs.so.1").exists()
    {
        assert!(matches!(
            list.reason(),
            Some(NoDevicesReason::LibraryMissing(_))
        ));
    } else if !kernel_rdma {
        assert!(list.is_empty());
        assert_eq!(list.reason(), Some(&NoDevicesReason::KernelWithoutRdma));
        let s = list.reason().unwrap().to_string();
        assert!(
            s.starts_with("kernel without RDMA: ibv_get_device_list failed with ENOSYS"),
            "{s}"
        );
    } else if list.is_empty() {
        assert_eq!(list.reason(), Some(&NoDevicesReason::NoDevices));
    } else {
        assert!(list.reason().is_none());
        assert!(list.iter().all(|d| !d.name().is_empty()));
    }
    if list.is_empty() {
        let e = Context::open("erdma_0").unwrap_err();
        assert!(matches!(e, Error::NoSuchDevice { .. }), "{e}");
        let s = e.to_string();
        assert!(!s.contains('\n'), "one line: {s}");
        assert!(s.contains(&list.reason().unwrap().to_string()), "{s}");
    }
}

#[test]
fn unknown_device_is_an_error_not_a_panic() {
    let e = Context::open("no_such_device_42").unwrap_err();
    assert!(matches!(e, Error::NoSuchDevice { .. }), "{e}");
}

const CHILD: &str = "ERDMA_TEST_MISSING_LIB_CHILD";

/// libibverbs missing, simulated by pointing the loader at a path that does
/// not exist (the env override exists for this). Runs in a child process so
/// the process-wide library handle starts fresh.
#[test]
fn missing_libibverbs_is_reported() {
    if std::env::var_os(CHILD).is_some() {
        let list = devices();
        assert!(list.is_empty());
        let r = list.reason().unwrap();
        assert!(matches!(r, NoDevicesReason::LibraryMissing(_)), "{r}");
        assert!(
            r.to_string()
                .starts_with("libibverbs missing: install rdma-core/ibverbs-providers"),
            "{r}"
        );
        let e = Context::open("erdma_0").unwrap_err();
        assert!(e.to_string().contains("libibverbs missing"), "{e}");
        let e = erdma::cm::CmListener::bind("127.0.0.1:0".parse().unwrap()).unwrap_err();
        assert!(
            matches!(
                e,
                Error::LibraryMissing {
                    library: "librdmacm",
                    ..
                }
            ),
            "{e}"
        );
        assert!(!e.to_string().contains('\n'));
        return;
    }
    let out = Command::new(std::env::current_exe().unwrap())
        .args(["--exact", "missing_libibverbs_is_reported", "--nocapture"])
        .env(CHILD, "1")
        .env(erdma::sys::LIBIBVERBS_ENV, "/nonexistent/libibverbs.so.1")
        .env(erdma::sys::LIBRDMACM_ENV, "/nonexistent/librdmacm.so.1")
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "child failed:\n{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(String::from_utf8_lossy(&out.stdout).contains("1 passed"));
}
