//! `scripts/gpu/nccltests_report.py compare`, the side-by-side verdict of the
//! GPU comparisons (compare-nccl-tests.sh), on synthetic reports: its
//! mode-matched analysis of host-bound sizes and its resolution line.

use std::path::{Path, PathBuf};
use std::process::Command;

const FOOTER: &str = "# Out of bounds values : 0 OK\n# Avg bus bandwidth    : 0.00 \n#\n";

fn report_py() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../scripts/gpu/nccltests_report.py")
}

/// A report whose out-of-place times are `level` x (1 + a per-size wobble)
/// and in-place times a tenth of that.
fn report(level: f64, wobble: u64) -> String {
    let mut s = String::new();
    for (i, size) in (3..11).map(|p| 1u64 << p).enumerate() {
        let w = 1.0 + 0.004 * (((wobble + i as u64) % 5) as f64 - 2.0);
        let t = level * w;
        s += &format!(
            "{size:>12} {:>13} {:>9} {:>7} {:>7} {t:>8.2} {:>7} {:>7} {:>7} {:>8.2} {:>7} {:>7} {:>7}\n",
            size / 4,
            "float",
            "sum",
            -1,
            "0.00",
            "0.00",
            0,
            t / 10.0,
            "0.00",
            "0.00",
            0
        );
    }
    s + FOOTER
}

/// Runs `compare` over reports at the given levels; its output.
fn compare(tag: &str, theirs: &[f64], ours: &[f64]) -> Option<String> {
    let dir = std::env::temp_dir().join(format!("cmp-{tag}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let write = |who: &str, levels: &[f64]| -> Vec<String> {
        levels
            .iter()
            .enumerate()
            .map(|(i, &l)| {
                let p = dir.join(format!("{who}-{i}.txt"));
                std::fs::write(&p, report(l, i as u64)).expect("write report");
                p.to_string_lossy().into_owned()
            })
            .collect()
    };
    let (t, o) = (write("theirs", theirs), write("ours", ours));
    let out = Command::new("python3")
        .arg(report_py())
        .arg("compare")
        .arg("--theirs")
        .args(&t)
        .arg("--ours")
        .args(&o)
        .output();
    std::fs::remove_dir_all(&dir).expect("remove temp dir");
    let Ok(out) = out else {
        eprintln!("python3 not found: skipping");
        return None;
    };
    Some(String::from_utf8_lossy(&out.stdout).into_owned())
}

#[test]
fn bimodal_runs_are_compared_within_each_mode() {
    // Both tools: 8 fast runs (about 5 us) and 4 slow ones (about 6.5 us),
    // interleaved differently; within a mode the tools are equal.
    let theirs = [
        5.0, 6.5, 5.02, 4.98, 6.52, 5.01, 5.0, 6.48, 4.99, 5.0, 6.5, 5.03,
    ];
    let ours = [
        6.5, 5.0, 4.99, 6.51, 5.02, 6.49, 5.0, 5.01, 6.5, 4.98, 5.0, 5.0,
    ];
    let Some(out) = compare("bimodal", &theirs, &ours) else {
        return;
    };
    assert!(out.contains("mode-matched (host-bound sizes)"), "{out}");
    assert!(
        out.contains("runs in the fast mode: nccl-tests 8/12, ours 8/12"),
        "{out}"
    );
    let fast = out
        .lines()
        .find(|l| l.starts_with("- fast mode (8 + 8 runs)"))
        .unwrap_or_else(|| panic!("{out}"));
    assert!(fast.contains("geometric mean 1.00"), "{fast}");
    assert!(
        out.contains("resolution: nccl-tests' even runs against its odd runs (6 vs 6)"),
        "{out}"
    );
}

#[test]
fn unimodal_runs_keep_the_plain_medians() {
    let theirs = [5.0, 5.02, 4.98, 5.01, 5.0, 4.99, 5.03, 4.97];
    let ours = [5.01, 5.0, 4.99, 5.02, 4.98, 5.0, 5.0, 5.01];
    let Some(out) = compare("unimodal", &theirs, &ours) else {
        return;
    };
    assert!(
        out.contains("mode-matched: the host-bound runs are not bimodal"),
        "{out}"
    );
}
