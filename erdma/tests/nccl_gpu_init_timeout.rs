//! A peer that never joins: creating the communicator fails with a timeout (status 4)
//! instead of hanging, for nonblocking communicators (polled, then aborted) and blocking
//! ones (created on a helper thread). Its own binary: the blocking case leaves the helper
//! thread waiting inside NCCL until the process exits. Ignored by default;
//! scripts/gpu/check-nccl-layer.sh runs it on the GPU machine.

#![cfg(feature = "nccl")]

use std::time::{Duration, Instant};

use erdma::cuda::Device;
use erdma::nccl::{Comm, Config, Nccl, NcclError};

fn lonely_rank(blocking: bool) -> (NcclError, Duration) {
    let nccl = Nccl::load().unwrap_or_else(|e| panic!("{e}"));
    let gpu = Device::new(0).unwrap_or_else(|e| panic!("{e}"));
    let id = nccl.unique_id().unwrap();
    let config = Config {
        blocking,
        timeout: Some(Duration::from_secs(3)),
        ..Config::default()
    };
    let t = Instant::now();
    // Rank 0 of 2; rank 1 never comes.
    let e = Comm::init_rank(nccl, &gpu, 2, 0, &id, &config).unwrap_err();
    (e, t.elapsed())
}

#[test]
#[ignore = "needs an NVIDIA GPU and NCCL: scripts/gpu/check-nccl-layer.sh runs it"]
fn init_times_out_nonblocking() {
    let (e, took) = lonely_rank(false);
    println!("nonblocking init: {e} (after {took:?})");
    assert!(
        matches!(e, NcclError::Timeout { aborted: true, .. }),
        "{e:?}"
    );
    assert_eq!(e.exit_status(), 4);
    assert!(
        took >= Duration::from_secs(3) && took < Duration::from_secs(30),
        "{took:?}"
    );
}

#[test]
#[ignore = "needs an NVIDIA GPU and NCCL: scripts/gpu/check-nccl-layer.sh runs it"]
fn init_times_out_when_blocking() {
    let (e, took) = lonely_rank(true);
    println!("blocking init: {e} (after {took:?})");
    assert!(
        matches!(e, NcclError::Timeout { aborted: false, .. }),
        "{e:?}"
    );
    assert_eq!(e.exit_status(), 4);
    assert!(
        e.to_string().contains("local ranks not done: 0 (GPU 0)"),
        "{e}"
    );
    assert!(
        took >= Duration::from_secs(3) && took < Duration::from_secs(10),
        "{took:?}"
    );
}
