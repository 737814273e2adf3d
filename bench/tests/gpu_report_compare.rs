//! `scripts/gpu/nccltests_report.py compare`, the side-by-side verdict of the
//! GPU comparisons (compare-nccl-tests.sh), on synthetic reports: its
//! mode-matched analysis of host-bound sizes and its resolution line.
#![allow(clippy::disallowed_methods)] // a test reads and writes its files directly

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

/// `compare` reports the geometric mean of the per-size ratios (the issue-12 bar for
/// host-bound sizes).
#[test]
fn compare_prints_the_geometric_mean_of_the_ratios() {
    let Some(out) = compare("geo", &[5.0, 5.0, 5.0], &[5.5, 5.5, 5.5]) else {
        return;
    };
    let line = out
        .lines()
        .find(|l| l.starts_with("geometric mean of the ratios, below 16777216 B, oop:"))
        .unwrap_or_else(|| panic!("no geometric mean line:\n{out}"));
    assert!(line.contains(": 1.100 over 8 sizes"), "{line}");
}

/// `run` records exit status, wall time and peak RSS of a command; `walls` tabulates
/// them per collective and case, ours against nccl-tests, and names failed runs.
#[test]
fn run_and_walls_tabulate_wall_time_and_peak_rss() {
    let dir = std::env::temp_dir().join(format!("walls-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let tsv = dir.join("walls.tsv");
    let run = |label: &str, script: &str| {
        Command::new("python3")
            .arg(report_py())
            .args(["run", "--tsv"])
            .arg(&tsv)
            .args(["--label", label, "--out"])
            .arg(dir.join("out.txt"))
            .args(["--", "python3", "-c", script])
            .status()
            .map(|s| s.code())
    };
    let Ok(code) = run(
        "all_reduce default nccl-tests 1",
        "import time; time.sleep(0.2)",
    ) else {
        eprintln!("skipped: no python3");
        return;
    };
    assert_eq!(code, Some(0));
    // 64 MiB touched: the peak RSS must show it.
    let touch = "b = bytearray(64 << 20)\nfor i in range(0, len(b), 4096): b[i] = 1";
    assert_eq!(run("all_reduce default ours 1", touch).unwrap(), Some(0));
    assert_eq!(
        run("all_gather default ours 1", "raise SystemExit(3)").unwrap(),
        Some(3)
    );
    run("all_gather default nccl-tests 1", "pass").unwrap();
    let lines = std::fs::read_to_string(&tsv).expect("tsv");
    let first: Vec<&str> = lines.lines().next().unwrap_or("").split('\t').collect();
    assert_eq!(first.len(), 4, "{lines}");
    assert!(first[2].parse::<f64>().is_ok_and(|w| w >= 0.2), "{lines}");
    let out = Command::new("python3")
        .arg(report_py())
        .arg("walls")
        .arg(&tsv)
        .output()
        .expect("walls");
    let text = String::from_utf8_lossy(&out.stdout);
    let _ = std::fs::remove_dir_all(&dir);
    let row = |coll: &str| {
        text.lines()
            .find(|l| l.starts_with(&format!("| {coll} | default |")))
            .unwrap_or_else(|| panic!("no {coll} row:\n{text}"))
            .split('|')
            .map(str::trim)
            .collect::<Vec<_>>()
    };
    let ar = row("all_reduce");
    // Cells after the leading empty one: collective, case, runs, theirs wall, ours wall,
    // ratio, spread, theirs RSS, ours RSS, RSS ratio, failed runs.
    assert_eq!(ar[3], "1+1");
    let (rss_theirs, rss_ours): (f64, f64) = (ar[8].parse().unwrap(), ar[9].parse().unwrap());
    assert!(rss_ours >= rss_theirs + 60.0, "{text}");
    assert_eq!(ar[11], "none");
    assert_eq!(row("all_gather")[11], "ours exit 3");
}
