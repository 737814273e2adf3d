//! erdma-cluster in the rig: `mpirun -np 2` in the VM, both ranks seeing the
//! real rxe and siw devices. rig/test.sh runs it with --include-ignored.

#![cfg(feature = "mpi")]

mod cluster_common;

use cluster_common::{check, mpirun};

#[test]
#[ignore = "needs RDMA devices: run in the rig"]
fn two_ranks_gather_real_reports() {
    let (code, text, err) = mpirun(2, &["--json", "--skip", "gpu"]);
    // Both ranks on one VM: a warning at least, no failure.
    assert_eq!(code, Some(1), "{text}{err}");
    let v: serde_json::Value = serde_json::from_str(text.trim()).expect(&text);
    assert_eq!(v["reports"].as_array().unwrap().len(), 2);
    for i in 0..2 {
        let devices = check(&v, i, "rdma.devices");
        assert_eq!(devices["status"], "ok", "{devices}");
    }
    let problems = v["problems"].as_array().unwrap();
    let siw = std::env::var("ERDMA_RIG_SIW").is_ok_and(|s| !s.is_empty());
    if siw {
        // With NCCL_IB_HCA unset NCCL would try the iWARP siw devices: the
        // healthy rig's one warning (as erdma-doctor alone says), on both ranks.
        assert_eq!(problems.len(), 1, "{problems:?}");
        assert_eq!(problems[0]["id"], "rdma.mode");
        assert_eq!(problems[0]["hosts"].as_array().unwrap().len(), 2);
    } else {
        assert!(problems.is_empty(), "{problems:?}");
    }
    let across = v["across"].as_array().unwrap();
    assert_eq!(across.len(), 1, "{across:?}");
    assert_eq!(across[0]["id"], "cluster.one-rank-per-host");
}
