//! The `*_perf` binaries in one process: arguments, report layout, JSON,
//! CSV, exit statuses, and the wrong-data path.
#![allow(clippy::disallowed_methods)] // a test reads and writes its files directly

mod nccltests_common;
use nccltests_common::*;

#[test]
fn help_and_bad_arguments() {
    let o = run("all_reduce_perf", &["-h"], &[]);
    assert_eq!(o.status.code(), Some(0));
    assert!(stdout(&o).starts_with("USAGE: all_reduce_perf \n\t[-t,--nthreads <num threads>]"));
    assert!(stdout(&o).contains("--backend <nccl/mpi/host>"));
    let o = run("all_reduce_perf", &["-b", "1T"], &[]);
    assert_eq!(o.status.code(), Some(255));
    assert_eq!(
        String::from_utf8_lossy(&o.stderr),
        "invalid size specified for 'minbytes'\n"
    );
    let o = run("all_reduce_perf", &["--bogus"], &[]);
    assert_eq!(
        o.status.code(),
        Some(0),
        "getopt errors print usage and exit 0, as nccl-tests"
    );
    assert!(String::from_utf8_lossy(&o.stderr).contains("unrecognized option '--bogus'"));
}

#[test]
fn every_collective_runs_and_checks_on_four_local_ranks() {
    for name in ALL {
        let o = run(
            name,
            &[
                "--backend",
                "host",
                "-t",
                "2",
                "-g",
                "2",
                "-b",
                "64",
                "-e",
                "4K",
                "-f",
                "8",
                "-n",
                "2",
                "-r",
                "-1",
            ],
            &[],
        );
        let out = stdout(&o);
        assert_eq!(o.status.code(), Some(0), "{name}:\n{out}");
        let wrong = check_rows(&out);
        for (oop, ip) in &wrong {
            assert_eq!(oop, "0", "{name}");
            assert!(ip == "0" || ip == "N/A", "{name}");
        }
        assert_eq!(out_of_bounds(&out), (0, "OK".into()));
        assert!(out.starts_with("# nccl-tests version 2.19.6 "));
        assert!(out.contains(&format!("# Collective test concluded: {name}\n#\n\n")));
        assert_eq!(out.matches("#  Rank ").count(), 4, "{name}");
    }
}

#[test]
fn all_types_and_ops_are_exact() {
    let o = run(
        "all_reduce_perf",
        &[
            "--backend",
            "host",
            "-t",
            "3",
            "-b",
            "256",
            "-e",
            "256",
            "-n",
            "1",
            "-d",
            "all",
            "-o",
            "all",
        ],
        &[],
    );
    let out = stdout(&o);
    assert_eq!(o.status.code(), Some(0), "{out}");
    let rows = rows(&out);
    assert_eq!(rows.len(), 12 * 6);
    assert!(rows.iter().all(|r| r[8] == "0" && r[12] == "0"), "{out}");
}

#[test]
fn json_schema_3() {
    let dir = std::env::temp_dir().join(format!("nccltests-cli-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("r.json");
    let p = path.to_str().unwrap();
    let o = run(
        "all_reduce_perf",
        &[
            "--backend",
            "host",
            "-b",
            "8",
            "-e",
            "24",
            "-i",
            "8",
            "-n",
            "2",
            "-J",
            p,
        ],
        &[],
    );
    assert_eq!(o.status.code(), Some(0));
    assert!(stdout(&o).starts_with(&format!("# Writing JSON output to {p}\n")));
    let j: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    let sample: serde_json::Value =
        serde_json::from_str(include_str!("data/h200-all_reduce_perf-1G.json")).unwrap();
    // Same keys in the same shape as the real H200 file.
    let keys = |v: &serde_json::Value| v.as_object().unwrap().keys().cloned().collect::<Vec<_>>();
    // nccl-tests' keys, plus our context under one extra key.
    let mut top = keys(&j);
    top.retain(|k| k != "erdma");
    assert_eq!(top, keys(&sample));
    assert!(j["erdma"].is_object());
    assert_eq!(keys(&j["config"]), keys(&sample["config"]));
    assert_eq!(keys(&j["results"][0]), keys(&sample["results"][0]));
    assert_eq!(
        keys(&j["results"][0]["in_place"]),
        keys(&sample["results"][0]["in_place"])
    );
    assert_eq!(
        keys(&j["config"]["devices"][0]),
        keys(&sample["config"]["devices"][0])
    );
    assert_eq!(j["version"], 3);
    assert_eq!(j["config"]["blocking_collectives"], "false");
    assert_eq!(j["config"]["step_bytes"], 8);
    assert_eq!(j["results"].as_array().unwrap().len(), 3);
    assert_eq!(j["results"][0]["root"], "    -1");
    assert_eq!(j["results"][0]["out_of_place"]["nwrong"], 0.0);
    assert_eq!(j["out_of_bounds"]["okay"], "true");
    assert_eq!(j["average_bus_bandwidth"]["okay"], "unchecked");
    assert_eq!(j["errors"], serde_json::json!([""]));
    // Raw text quirks: compact, %lf doubles.
    let raw = std::fs::read_to_string(&path).unwrap();
    assert!(raw.starts_with("{\"version\":3,\"start_time\":\""));
    assert!(raw.contains("\"nwrong\":0.000000}"));
    // Not overwritten: the second run writes r.json.0.
    let o = run(
        "all_reduce_perf",
        &[
            "--backend",
            "host",
            "-b",
            "8",
            "-e",
            "8",
            "-n",
            "1",
            "-c",
            "0",
            "-J",
            p,
        ],
        &[],
    );
    assert!(stdout(&o).contains(&format!("# Writing JSON output to {p}.0\n")));
    let j0: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(format!("{p}.0")).unwrap()).unwrap();
    assert_eq!(
        j0["results"][0]["in_place"]["nwrong"],
        serde_json::Value::Null
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn csv_rows_per_size_and_placement() {
    let path = std::env::temp_dir().join(format!("nccltests-{}.csv", std::process::id()));
    let p = path.to_str().unwrap();
    let o = run(
        "reduce_perf",
        &[
            "--backend",
            "host",
            "-t",
            "2",
            "-b",
            "64",
            "-e",
            "1K",
            "-f",
            "4",
            "-n",
            "1",
            "--csv",
            p,
        ],
        &[],
    );
    assert_eq!(o.status.code(), Some(0));
    let mut r = csv::Reader::from_path(&path).unwrap();
    let head: Vec<String> = r.headers().unwrap().iter().map(String::from).collect();
    assert_eq!(head[0], "collective");
    let recs: Vec<csv::StringRecord> = r.records().map(Result::unwrap).collect();
    assert_eq!(recs.len(), 3 * 2);
    assert_eq!(&recs[0][8], "out-of-place");
    assert_eq!(&recs[1][8], "in-place");
    assert_eq!(&recs[0][2], "2");
    assert_eq!(&recs[0][13], "0");
    // The run's context, the same on every row.
    assert_eq!(
        &head[15..],
        [
            "nccl_version",
            "gpus",
            "gpu_model",
            "hosts",
            "nccl_env",
            "date",
            "command"
        ]
    );
    assert_eq!(&recs[0][16], "2", "two threads, two ranks");
    assert!(
        !recs[0][18].is_empty() && recs[0][20].ends_with('Z'),
        "{:?}",
        recs[0]
    );
    assert!(recs[0][21].contains("--csv"), "{:?}", recs[0]);
    assert!(
        recs.iter()
            .all(|r| r.iter().skip(15).eq(recs[0].iter().skip(15)))
    );
    std::fs::remove_file(path).unwrap();
}

#[test]
fn wrong_data_fails_with_status_7() {
    let o = run(
        "all_gather_perf",
        &[
            "--backend",
            "host",
            "-t",
            "2",
            "-b",
            "1K",
            "-e",
            "4K",
            "-f",
            "2",
            "-n",
            "1",
        ],
        &[("ERDMA_BENCH_HOOK", "corrupt:1")],
    );
    let out = stdout(&o);
    assert_eq!(o.status.code(), Some(7), "{out}");
    assert_eq!(out_of_bounds(&out), (6, "FAILED".into()));
    assert!(rows(&out).iter().all(|r| r[8] == "1" && r[12] == "1"));
    assert!(out.contains(": Test failure common.cu:1454\n"));
}

#[test]
fn min_bandwidth_check() {
    let o = run(
        "all_reduce_perf",
        &[
            "--backend",
            "host",
            "-t",
            "2",
            "-b",
            "8",
            "-e",
            "8",
            "-n",
            "1",
        ],
        &[("NCCL_TESTS_MIN_BW", "1e9")],
    );
    assert_eq!(o.status.code(), Some(7));
    assert!(stdout(&o).contains("# Avg bus bandwidth    : "));
    assert!(stdout(&o).contains(" FAILED\n#\n# Collective test concluded"));
    let o = run(
        "all_reduce_perf",
        &["--backend", "host", "-b", "8", "-e", "8", "-n", "1"],
        &[("NCCL_TESTS_MIN_BW", "0")],
    );
    assert_eq!(o.status.code(), Some(0));
    assert!(stdout(&o).contains(" OK\n#\n# Collective test concluded"));
}

#[test]
fn options_that_change_the_table() {
    let o = run(
        "all_reduce_perf",
        &[
            "--backend",
            "host",
            "-t",
            "2",
            "-b",
            "8",
            "-e",
            "64",
            "-f",
            "8",
            "-n",
            "4",
            "-m",
            "2",
            "-z",
            "1",
            "-C",
            "1",
            "-I",
            "1",
            "-K",
            "1",
            "-N",
            "2",
            "-u",
            "1",
            "-M",
            "1",
        ],
        &[],
    );
    let out = stdout(&o);
    assert_eq!(o.status.code(), Some(0), "{out}");
    assert!(
        out.contains("# Blocking Enabled: wait and barrier after each inner iteration (-m) \n")
    );
    assert!(out.contains("cputime"));
    assert!(out.contains("i_min    i_max    i_p99    i_cv%"));
    // Per device, as nccl-tests takes the largest GPU: one rank's send and
    // receive buffers of 64 + 8 (-u) bytes.
    assert!(out.contains("# GPU memory usage     : Initialization 0.00 B | User-Allocated 144 B | Collective 0.00 B | Total  144 B\n"), "{out}");
    let rs = rows(&out);
    assert_eq!(rs.len(), 4, "two cycles of two sizes");
    assert!(rs.iter().all(|r| r.len() == 21), "{rs:?}");
    let o = run(
        "broadcast_perf",
        &[
            "--backend",
            "host",
            "-t",
            "2",
            "-b",
            "64",
            "-e",
            "64",
            "-n",
            "2",
            "-G",
            "3",
            "-r",
            "1",
        ],
        &[],
    );
    assert_eq!(o.status.code(), Some(0));
    let rs = rows(&stdout(&o));
    assert_eq!(
        (rs.len(), rs[0][4].as_str(), rs[0][8].as_str()),
        (1, "1", "0")
    );
}

#[test]
fn memory_report_at_nccl_tests_measurement_points() {
    // Per device (rank): 1 MiB send + 1 MiB receive. Without -p they are
    // User-Allocated; with -p 1 nccl-tests' threadInit reads free memory
    // only after the buffers, so they count as Initialization.
    for (p, line) in [
        (
            "0",
            "Initialization 0.00 B | User-Allocated 2.00 MB | Collective 0.00 B | Total  2.00 MB",
        ),
        (
            "1",
            "Initialization 2.00 MB | User-Allocated 0.00 B | Collective 0.00 B | Total  2.00 MB",
        ),
    ] {
        let args = [
            "--backend",
            "host",
            "-t",
            "2",
            "-b",
            "1M",
            "-e",
            "1M",
            "-n",
            "1",
            "-M",
            "1",
            "-p",
            p,
        ];
        let o = run("all_reduce_perf", &args, &[]);
        let out = stdout(&o);
        assert_eq!(o.status.code(), Some(0), "{out}");
        assert!(
            out.contains(&format!("# GPU memory usage     : {line}\n")),
            "-p {p}:\n{out}"
        );
    }
}

#[test]
fn too_few_devices_and_invalid_root() {
    let o = run(
        "broadcast_perf",
        &[
            "--backend",
            "host",
            "-t",
            "2",
            "-b",
            "64",
            "-e",
            "64",
            "-r",
            "5",
        ],
        &[],
    );
    assert_eq!(o.status.code(), Some(3));
    assert!(stdout(&o).contains("invalid argument: root 5 is not a rank (0..2)"));
    let o = run(
        "hypercube_perf",
        &["--backend", "host", "-t", "3", "-b", "64", "-e", "64"],
        &[],
    );
    // No rows: the average is 0/0, printed "-nan", and (as in nccl-tests)
    // a NaN never fails the bandwidth check.
    assert_eq!(o.status.code(), Some(0));
    assert!(stdout(&o).contains("nRanks 3 is not a power of 2, skipping"));
    assert!(stdout(&o).contains("# Avg bus bandwidth    : -nan \n"));
}

/// `-D` runs GPU kernels: with a host backend it is refused (exit 5), never
/// silently replaced by a host reduction.
#[test]
fn device_implementation_needs_the_nccl_backend() {
    for backend in ["host", "mpi"] {
        let o = run(
            "all_reduce_perf",
            &[
                "--backend",
                backend,
                "-D",
                "1",
                "-R",
                "2",
                "-b",
                "8",
                "-e",
                "8",
            ],
            &[],
        );
        assert_eq!(o.status.code(), Some(5), "{backend}: {}", stdout(&o));
        let all = format!("{}{}", stdout(&o), String::from_utf8_lossy(&o.stderr));
        assert!(
            all.contains("-D 1 (NCCL device-API kernels) needs --backend nccl"),
            "{all}"
        );
    }
}
