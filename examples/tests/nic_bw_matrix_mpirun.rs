//! The nic_bw_matrix example under a real `mpirun -np 2` on a host without
//! RDMA devices (CI): every rank prints one line and the job exits 3, no
//! panic, no hang. The rig runs it for real (rig_nic_bw_matrix.rs).

#![cfg(feature = "mpi")]

mod common;

use std::time::Duration;

use common::mpirun;

#[test]
fn without_rdma_every_rank_says_why() {
    if std::path::Path::new("/sys/class/infiniband_verbs/abi_version").exists() {
        eprintln!("this host has RDMA: the no-device path is checked on hosts without it");
        return;
    }
    let (code, text, took) = mpirun(2, &["-n", "5"]);
    assert!(!text.contains("panicked"), "{text}");
    assert!(took < Duration::from_secs(200), "hung: {text}");
    let lines: Vec<&str> = text.lines().filter(|l| l.starts_with("rank ")).collect();
    assert_eq!(lines.len(), 2, "one line per rank:\n{text}");
    assert!(lines.iter().all(|l| l.contains("RDMA")), "{text}");
    assert_eq!(code, Some(3), "{text}");
}

#[test]
fn bad_arguments_exit_2() {
    let (code, text, _) = mpirun(2, &["-s", "zero"]);
    assert_eq!(code, Some(2), "{text}");
    assert!(text.contains("-s zero: not a number"), "{text}");
}
