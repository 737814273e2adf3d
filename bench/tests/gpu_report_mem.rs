//! `scripts/gpu/nccltests_report.py check --mem`, the validator of the GPU
//! `-M 1` checks (scripts/gpu/check-all-reduce-perf.sh), on reports shaped
//! like the H200's, since the GPU run itself cannot happen here.
#![allow(clippy::disallowed_methods)] // a test reads and writes its files directly

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicUsize, Ordering};

const ROW: &str = "        8             2     float     sum      -1     6.50    0.00    0.00       0     0.40    0.02    0.00       0\n";
const FOOTER: &str = "# Out of bounds values : 0 OK\n# Avg bus bandwidth    : 0.00 \n#\n# Collective test concluded: all_reduce_perf\n";
/// 16 MiB send + 16 MiB receive.
const BUFFERS: &str = "33554432";

fn report_py() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../scripts/gpu/nccltests_report.py")
}

/// `check --mem BUFFERS [extra]` on a report ending in `mem_line`; (exit
/// status, what the validator printed).
fn check(mem_line: &str, extra: &[&str]) -> Option<(i32, String)> {
    static NEXT: AtomicUsize = AtomicUsize::new(0);
    let n = NEXT.fetch_add(1, Ordering::Relaxed);
    let path = std::env::temp_dir().join(format!("mem-report-{}-{n}.txt", std::process::id()));
    std::fs::write(&path, format!("{ROW}{FOOTER}{mem_line}\n#\n\n")).expect("write report");
    let o = Command::new("python3")
        .arg(report_py())
        .args(["check", path.to_str().unwrap(), "--mem", BUFFERS])
        .args(extra)
        .output();
    std::fs::remove_file(&path).expect("remove report");
    let Ok(o) = o else {
        eprintln!("python3 not found: skipping");
        return None;
    };
    let text = String::from_utf8_lossy(&o.stdout).into_owned();
    Some((o.status.code().unwrap_or(-1), text))
}

#[test]
fn plausible_reports_pass() {
    let plain = "# GPU memory usage     : Initialization 580 MB | User-Allocated 32.0 MB | Collective 0.00 B | Total  612 MB";
    let Some((code, out)) = check(plain, &[]) else {
        return;
    };
    assert_eq!(code, 0, "{out}");
    let parallel = "# GPU memory usage     : Initialization 612 MB | User-Allocated 0.00 B | Collective 2.00 MB | Total  614 MB";
    let (code, out) = check(parallel, &["--mem-parallel-init"]).unwrap();
    assert_eq!(code, 0, "{out}");
}

#[test]
fn implausible_reports_fail_naming_the_figure() {
    for (line, extra, why) in [
        (
            "# GPU memory usage     : Initialization 580 MB | Collective 0.00 B | Total  580 MB",
            &[][..],
            "memory items",
        ),
        (
            "# GPU memory usage     : Initialization 0.00 B | User-Allocated 32.0 MB | Collective 0.00 B | Total  32.0 MB",
            &[],
            "Initialization 0.00 B",
        ),
        (
            "# GPU memory usage     : Initialization 580 MB | User-Allocated 0.00 B | Collective 0.00 B | Total  580 MB",
            &[],
            "User-Allocated 0.00 B is not",
        ),
        (
            "# GPU memory usage     : Initialization 580 MB | User-Allocated 32.0 MB | Collective 0.00 B | Total  580 MB",
            &[],
            "Total 580 MB is not",
        ),
        (
            "# GPU memory usage     : Initialization 580 MB | User-Allocated 32.0 MB | Collective -2.00 MB | Total  610 MB",
            &[],
            "Collective -2.00 MB is negative",
        ),
        (
            "# GPU memory usage     : Initialization 580 MB | User-Allocated 32.0 MB | Collective 0.00 B | Total  612 MB",
            &["--mem-parallel-init"],
            "with -p 1 and no -R",
        ),
    ] {
        let Some((code, out)) = check(line, extra) else {
            return;
        };
        assert_eq!(code, 1, "{line}: {out}");
        assert!(out.contains(why), "{line}: want {why:?} in {out}");
    }
}
