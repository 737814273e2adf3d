//! The nccl_all_reduce example under a real `mpirun -np 2`: where NCCL, the driver or GPUs
//! are missing, every rank prints one line and the job exits with the documented status,
//! without a panic or a hang. Where they exist, the all-reduce must succeed.

#![cfg(feature = "mpi")]

use std::path::PathBuf;
use std::process::Command;
use std::time::{Duration, Instant};

/// target/<profile>/examples/nccl_all_reduce, next to this test's deps/ directory.
fn example_binary() -> PathBuf {
    let exe = std::env::current_exe().expect("test binary path");
    let profile_dir = exe
        .parent()
        .and_then(|deps| deps.parent())
        .expect("target dir");
    profile_dir.join("examples").join("nccl_all_reduce")
}

fn run_np2(extra_env: &[(&str, &str)]) -> (Option<i32>, String, Duration) {
    let bin = example_binary();
    assert!(
        bin.exists(),
        "{} not built (cargo test builds examples)",
        bin.display()
    );
    let mut cmd = Command::new("timeout");
    cmd.args([
        "120",
        "mpirun",
        "--allow-run-as-root",
        "--oversubscribe",
        "-np",
        "2",
    ]);
    for (k, v) in extra_env {
        cmd.env(k, v);
        cmd.args(["-x", k]);
    }
    cmd.arg(&bin);
    let start = Instant::now();
    let out = cmd
        .output()
        .expect("run timeout/mpirun (Open MPI installed?)");
    let text =
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    (out.status.code(), text, start.elapsed())
}

fn rank_lines(text: &str) -> Vec<&str> {
    text.lines().filter(|l| l.starts_with("rank ")).collect()
}

#[test]
fn np2_fails_cleanly_or_succeeds() {
    let (code, text, took) = run_np2(&[]);
    assert!(!text.contains("panicked"), "{text}");
    assert!(took < Duration::from_secs(110), "hung: {text}");
    let lines = rank_lines(&text);
    assert_eq!(lines.len(), 2, "one line per rank expected:\n{text}");
    for r in 0..2 {
        assert_eq!(
            lines
                .iter()
                .filter(|l| l.starts_with(&format!("rank {r}/2: ")))
                .count(),
            1,
            "{text}"
        );
    }
    if code == Some(0) {
        assert!(lines.iter().all(|l| l.ends_with(": OK")), "{text}");
    } else {
        // 2 no driver/GPU, 3 no NCCL, 5 fewer GPUs than ranks on the node.
        assert!(matches!(code, Some(2 | 3 | 5)), "status {code:?}:\n{text}");
        assert!(lines.iter().all(|l| !l.ends_with(": OK")), "{text}");
    }
}

#[test]
fn np2_with_a_library_that_is_not_nccl_exits_3() {
    let (code, text, _) = run_np2(&[("ERDMA_NCCL_LIBRARY", "libc.so.6")]);
    assert_eq!(code, Some(3), "{text}");
    let lines = rank_lines(&text);
    assert_eq!(lines.len(), 2, "{text}");
    for l in lines {
        assert!(
            l.ends_with("libc.so.6 is not a usable NCCL library: it lacks ncclGetVersion; hint: point ERDMA_NCCL_LIBRARY at libnccl.so.2 (NCCL >= 2.19)"),
            "{l}"
        );
    }
}
