//! Helpers of the nic_bw_matrix tests: the example's binary and `mpirun`.

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
