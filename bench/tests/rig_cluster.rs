//! erdma-cluster in the rig: `mpirun -np 2` in the VM, both ranks seeing the
//! real rxe and siw devices. rig/test.sh runs it with --include-ignored.

#![cfg(feature = "mpi")]

use std::process::Command;

#[test]
#[ignore = "needs RDMA devices: run in the rig"]
fn two_ranks_gather_real_reports() {
    let mut c = Command::new("timeout");
    c.args([
        "300",
        "mpirun",
        "--allow-run-as-root",
        "--oversubscribe",
        "-np",
        "2",
    ])
    .args(["--mca", "pml", "ob1", "--mca", "btl", "self,vader,tcp"])
    .arg(env!("CARGO_BIN_EXE_erdma-cluster"))
    .args(["--json", "--skip", "gpu"])
    .env("OMPI_ALLOW_RUN_AS_ROOT", "1")
    .env("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1");
    for (k, _) in std::env::vars() {
        if k.starts_with("NCCL_") {
            c.env_remove(k);
        }
    }
    let out = c.output().expect("run mpirun");
    let text = String::from_utf8_lossy(&out.stdout);
    let err = String::from_utf8_lossy(&out.stderr);
    // Both ranks on one VM: a warning at least, no failure.
    assert_eq!(out.status.code(), Some(1), "{text}{err}");
    let v: serde_json::Value = serde_json::from_str(text.trim()).expect(&text);
    let reports = v["reports"].as_array().unwrap();
    assert_eq!(reports.len(), 2);
    for r in reports {
        let devices = r["checks"]
            .as_array()
            .unwrap()
            .iter()
            .find(|c| c["id"] == "rdma.devices")
            .unwrap();
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
