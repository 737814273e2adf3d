//! End to end: two MPI-backend runs of all_reduce_perf under real mpirun
//! write -J and --csv files; erdma-compare reads them side by side.
#![cfg(feature = "mpi")]
#![allow(clippy::disallowed_methods)] // a test reads and writes its files directly

mod nccltests_common;
use nccltests_common::*;
use std::process::Command;

fn compare(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_erdma-compare"))
        .args(args)
        .output()
        .expect("run erdma-compare")
}

/// One run writing `stem.json` and `stem.csv`; None without mpirun.
fn mpi_run(stem: &std::path::Path, env: &[(&str, &str)]) -> Option<(String, String)> {
    let (json, csv) = (stem.with_extension("json"), stem.with_extension("csv"));
    let mut c = mpirun()?;
    c.args(["-np", "2"]);
    // Only the NCCL_* variables given here: the caller's (scripts/test.sh
    // sets NCCL_HOME) would show in both runs' context.
    for (k, _) in std::env::vars().filter(|(k, _)| k.starts_with("NCCL_")) {
        c.env_remove(k);
    }
    for (k, v) in env {
        c.env(k, v).args(["-x", k]);
    }
    c.arg(bin("all_reduce_perf")).args([
        "--backend",
        "mpi",
        "-b",
        "1K",
        "-e",
        "64K",
        "-f",
        "4",
        "-n",
        "5",
        "-w",
        "1",
    ]);
    c.arg("-J").arg(&json).arg("--csv").arg(&csv);
    let o = c.output().expect("mpirun");
    assert!(
        o.status.success(),
        "{}{}",
        stdout(&o),
        String::from_utf8_lossy(&o.stderr)
    );
    Some((json.to_string_lossy().into(), csv.to_string_lossy().into()))
}

#[test]
fn two_mpi_runs_side_by_side() {
    let dir = std::env::temp_dir().join(format!("compare-mpi-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let Some((a_json, a_csv)) = mpi_run(&dir.join("a"), &[]) else {
        return;
    };
    let Some((b_json, b_csv)) = mpi_run(&dir.join("b"), &[("NCCL_ALGO", "Ring")]) else {
        return;
    };

    // The table: 4 sizes, both runs, a ratio for the second.
    let o = compare(&[&a_json, &b_csv]);
    let out = String::from_utf8_lossy(&o.stdout).into_owned();
    assert_eq!(
        o.status.code(),
        Some(0),
        "{out}{}",
        String::from_utf8_lossy(&o.stderr)
    );
    assert!(
        out.contains("# all_reduce_perf float sum out-of-place\n"),
        "{out}"
    );
    let rows: Vec<&str> = out.lines().filter(|l| !l.starts_with('#')).collect();
    let sizes: Vec<&str> = rows
        .iter()
        .map(|l| l.split('|').next().unwrap().trim())
        .collect();
    assert_eq!(sizes, ["1 KiB", "4 KiB", "16 KiB", "64 KiB"], "{out}");
    // What differs between the runs' contexts: NCCL_ALGO.
    let env = out.lines().find(|l| l.starts_with("#   env")).expect(&out);
    assert!(env.contains("[1] (none) [2] NCCL_ALGO=Ring"), "{env}");
    assert!(
        out.contains("#   ranks") && out.contains("#   backend"),
        "{out}"
    );

    // The ratios are the runs' own times: a's time / b's time.
    let o = compare(&["--json", &a_json, &b_csv]);
    let j: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let a: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&a_json).unwrap()).unwrap();
    let mut b = csv::Reader::from_path(&b_csv).unwrap();
    let b_times: Vec<f64> = b
        .records()
        .map(|r| r.unwrap())
        .filter(|r| &r[8] == "out-of-place")
        .map(|r| r[9].parse().unwrap())
        .collect();
    let rows = j["rows"].as_array().unwrap();
    assert_eq!(rows.len(), 4);
    for (i, r) in rows.iter().enumerate() {
        let ta = a["results"][i]["out_of_place"]["time"].as_f64().unwrap();
        let ratio = r["runs"][1]["ratio"].as_f64().unwrap();
        assert!(
            (ratio - ta / b_times[i]).abs() < 1e-4 * ratio,
            "{r} {ta} {}",
            b_times[i]
        );
    }

    // --fail-below: the same run against itself always passes; against
    // an impossible bar it fails with status 1.
    assert_eq!(
        compare(&[&a_json, &a_csv, "--fail-below", "0.999"])
            .status
            .code(),
        Some(0)
    );
    let o = compare(&[&a_json, &b_json, "--fail-below", "1000"]);
    assert_eq!(o.status.code(), Some(1));
    std::fs::remove_dir_all(dir).unwrap();
}
