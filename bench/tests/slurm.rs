//! Under a real Slurm: a single-node cluster (slurmctld + slurmd, started
//! by scripts/slurm/start.sh, stopped by stop.sh even when a test fails)
//! where `srun` starts the collectives (the TCP rendezvous read from
//! SLURM_PROCID/SLURM_NTASKS, no MPI) and erdma-cluster (Open MPI through
//! Slurm's PMIx: `srun --mpi=pmix`). Without Slurm (Debian's slurm-wlm) or
//! root the tests say so and skip, unless ERDMA_REQUIRE_SLURM=1
//! (scripts/test.sh, whose setup installs it), where that fails.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::Mutex;

/// One Slurm at a time: the daemons listen on fixed ports.
static SLURM: Mutex<()> = Mutex::new(());

/// A running single-node Slurm; dropping it stops the daemons.
struct Slurm {
    dir: PathBuf,
    conf: PathBuf,
}

fn scripts() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../scripts/slurm")
}

/// Why Slurm cannot run here, if it cannot.
fn missing() -> Option<&'static str> {
    let on_path = |b: &str| {
        Command::new("sh")
            .args(["-c", &format!("command -v {b}")])
            .output()
            .is_ok_and(|o| o.status.success())
    };
    if !on_path("slurmctld") || !on_path("slurmd") || !on_path("srun") {
        return Some(
            "slurmctld/slurmd/srun not installed (apt-get install slurm-wlm; scripts/setup.sh installs it)",
        );
    }
    // SAFETY: geteuid has no preconditions and cannot fail.
    if unsafe { libc::geteuid() } != 0 {
        return Some("slurmd must run as root to start jobs, and this test is not root");
    }
    None
}

/// Starts Slurm, or None (after saying why) when it cannot run here.
fn start(test: &str) -> Option<Slurm> {
    if let Some(why) = missing() {
        let why = format!("SKIPPED {test}: {why}");
        assert!(
            std::env::var("ERDMA_REQUIRE_SLURM").as_deref() != Ok("1"),
            "{why}, and ERDMA_REQUIRE_SLURM=1"
        );
        eprintln!("{why}");
        return None;
    }
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("slurm-{test}"));
    // Daemons left by a killed run of this test would hold the ports.
    let _ = Command::new(scripts().join("stop.sh")).arg(&dir).status();
    let out = Command::new("timeout")
        .arg("60")
        .arg(scripts().join("start.sh"))
        .arg(&dir)
        .output()
        .expect("run scripts/slurm/start.sh");
    let slurm = Slurm {
        conf: dir.join("slurm.conf"),
        dir,
    };
    assert!(
        out.status.success(),
        "scripts/slurm/start.sh failed ({}): {}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    Some(slurm)
}

impl Slurm {
    /// `srun ARGS` in this cluster, bounded by 120 s.
    fn srun(&self, args: &[&str]) -> Output {
        let mut c = Command::new("timeout");
        c.args(["120", "srun"]).args(args);
        // A test run inside a Slurm job must not join that job.
        for (k, _) in std::env::vars() {
            if k.starts_with("SLURM_") {
                c.env_remove(k);
            }
        }
        c.env("SLURM_CONF", &self.conf)
            .env("OMPI_ALLOW_RUN_AS_ROOT", "1")
            .env("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1")
            .env("OMPI_MCA_btl_vader_single_copy_mechanism", "none")
            .output()
            .expect("run srun")
    }
}

impl Drop for Slurm {
    fn drop(&mut self) {
        let _ = Command::new(scripts().join("stop.sh"))
            .arg(&self.dir)
            .status();
    }
}

/// `#wrong` columns of the result rows (out-of-place and in-place).
fn wrong_columns(stdout: &str) -> Vec<Vec<u64>> {
    stdout
        .lines()
        .filter(|l| !l.trim_start().starts_with('#') && !l.trim().is_empty())
        .map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            [8, 12]
                .iter()
                .map(|&i| f.get(i).and_then(|w| w.parse().ok()).expect(l))
                .collect()
        })
        .collect()
}

#[test]
fn srun_starts_the_collectives_without_mpi() {
    let _one = SLURM.lock().unwrap_or_else(|p| p.into_inner());
    let Some(slurm) = start("srun_starts_the_collectives_without_mpi") else {
        return;
    };
    let out = slurm.srun(&[
        "-N1",
        "-n2",
        PERF,
        "--backend",
        "host",
        "-b",
        "8",
        "-e",
        "1M",
        "-f",
        "4",
        "-c",
        "1",
    ]);
    assert_two_ranks_right(&out, "TCP bootstrap");
}

/// all_reduce_perf's binary.
const PERF: &str = env!("CARGO_BIN_EXE_all_reduce_perf");

/// srun's output of `all_reduce_perf -b 8 -e 1M -f 4 -c 1`: success, ranks
/// 0 and 1 (their device lines containing `marker`), no third, 9 sizes, 0 wrong.
fn assert_two_ranks_right(out: &Output, marker: &str) {
    let stdout = String::from_utf8_lossy(&out.stdout);
    let all = format!("{stdout}{}", String::from_utf8_lossy(&out.stderr));
    assert!(
        out.status.success(),
        "srun all_reduce_perf: {}\n{all}",
        out.status
    );
    for r in 0..2 {
        assert!(
            all.lines()
                .any(|l| l.contains(&format!("Rank  {r} Group  0")) && l.contains(marker)),
            "rank {r} missing or without '{marker}':\n{all}"
        );
    }
    assert!(!all.contains("Rank  2 "), "more than 2 ranks:\n{all}");
    let rows = wrong_columns(&stdout);
    // 8 B to 1 MiB by factors of 4: 8, 32, ..., 512 KiB.
    assert_eq!(rows.len(), 9, "result rows:\n{stdout}");
    assert!(
        rows.iter().flatten().all(|&w| w == 0),
        "wrong values:\n{stdout}"
    );
    assert!(stdout.contains("Out of bounds values : 0 OK"), "{stdout}");
}

/// With MPI through Slurm's PMIx, the MPI backend (and bootstrap).
#[cfg(feature = "mpi")]
#[test]
fn srun_pmix_starts_the_collectives_with_mpi() {
    let _one = SLURM.lock().unwrap_or_else(|p| p.into_inner());
    let Some(slurm) = start("srun_pmix_starts_the_collectives_with_mpi") else {
        return;
    };
    let out = slurm.srun(&[
        "--mpi=pmix",
        "-N1",
        "-n2",
        PERF,
        "--backend",
        "mpi",
        "-b",
        "8",
        "-e",
        "1M",
        "-f",
        "4",
        "-c",
        "1",
    ]);
    assert_two_ranks_right(&out, "mpi backend");
}

#[cfg(feature = "mpi")]
#[test]
fn srun_pmix_starts_erdma_cluster() {
    let _one = SLURM.lock().unwrap_or_else(|p| p.into_inner());
    let Some(slurm) = start("srun_pmix_starts_erdma_cluster") else {
        return;
    };
    let bin = env!("CARGO_BIN_EXE_erdma-cluster");
    let out = slurm.srun(&["--mpi=pmix", "-N1", "-n2", bin, "--json"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    let doc: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "srun erdma-cluster --json ({}): not one JSON document ({e}):\n{}\n{stderr}",
            out.status,
            String::from_utf8_lossy(&out.stdout)
        )
    });
    // 0/1/2: the report was made (its checks' worst status; a machine
    // without RDMA devices fails some); 3-5 would be a broken launch.
    let code = out.status.code().expect("srun exited");
    assert!(code <= 2, "exit {code}: {stderr}");
    assert_eq!(doc["exit_status"].as_i64(), Some(i64::from(code)), "{doc}");
    let hosts = doc["hosts"].as_array().expect("hosts");
    let ranks: Vec<i64> = hosts.iter().filter_map(|h| h["rank"].as_i64()).collect();
    assert_eq!(ranks, [0, 1], "{doc}");
    let me =
        String::from_utf8(Command::new("hostname").arg("-s").output().unwrap().stdout).unwrap();
    for h in hosts {
        assert_eq!(h["host"].as_str(), Some(me.trim()), "{h}");
    }
}

/// The build without MPI has no multi-rank path: under `srun -n2` it
/// refuses (exit 3, one line from rank 0) rather than print two clusters
/// of one.
#[cfg(not(feature = "mpi"))]
#[test]
fn srun_refuses_erdma_cluster_without_mpi() {
    let _one = SLURM.lock().unwrap_or_else(|p| p.into_inner());
    let Some(slurm) = start("srun_refuses_erdma_cluster_without_mpi") else {
        return;
    };
    let out = slurm.srun(&["-N1", "-n2", env!("CARGO_BIN_EXE_erdma-cluster"), "--json"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.stdout.is_empty(),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
    let ours: Vec<&str> = stderr
        .lines()
        .filter(|l| l.starts_with("erdma-cluster:"))
        .collect();
    assert_eq!(ours.len(), 1, "{stderr}");
    assert!(
        ours[0].contains("2 tasks (Slurm)") && ours[0].contains("srun --mpi=pmix"),
        "{stderr}"
    );
    // srun reports the tasks' exit status.
    assert_eq!(out.status.code(), Some(3), "{stderr}");
}
