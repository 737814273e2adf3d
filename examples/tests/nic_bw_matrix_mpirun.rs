//! The nic_bw_matrix example under a real `mpirun -np 2` on a host without
//! RDMA devices (CI): every rank prints one line and the job exits 3, no
//! panic, no hang. The rig runs it for real (rig_nic_bw_matrix.rs).

#![cfg(feature = "mpi")]

use std::path::PathBuf;
use std::process::Command;
use std::time::{Duration, Instant};

/// target/<profile>/examples/nic_bw_matrix, next to this test's deps/ directory.
pub fn example_binary() -> PathBuf {
    let exe = std::env::current_exe().expect("test binary path");
    let profile_dir = exe.parent().and_then(|d| d.parent()).expect("target dir");
    profile_dir.join("examples").join("nic_bw_matrix")
}

/// `mpirun -np N` with Open MPI's TCP/shared-memory transports.
pub fn mpirun(np: usize, args: &[&str]) -> (Option<i32>, String, Duration) {
    let bin = example_binary();
    assert!(
        bin.exists(),
        "{} not built (cargo test builds examples)",
        bin.display()
    );
    let mut cmd = Command::new("timeout");
    cmd.args([
        "300",
        "mpirun",
        "--allow-run-as-root",
        "--oversubscribe",
        "-np",
    ])
    .arg(np.to_string())
    .args(["--mca", "pml", "ob1", "--mca", "btl", "self,vader,tcp"])
    .arg(&bin)
    .args(args)
    .env("OMPI_ALLOW_RUN_AS_ROOT", "1")
    .env("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1");
    let start = Instant::now();
    let out = cmd
        .output()
        .expect("run timeout/mpirun (Open MPI installed?)");
    let text =
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    (out.status.code(), text, start.elapsed())
}

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
