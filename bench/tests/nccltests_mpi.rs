//! Under real mpirun with the MPI backend (`--backend mpi`): rows, footer,
//! JSON and exit statuses for 1, 2 and 4 processes, wrong data, a killed
//! rank and a hung rank.
#![cfg(feature = "mpi")]
#![allow(clippy::disallowed_methods)] // a test reads and writes its files directly

mod nccltests_common;
use nccltests_common::*;
use std::time::{Duration, Instant};

fn mpi(
    np: usize,
    name: &str,
    args: &[&str],
    env: &[(&str, &str)],
) -> Option<(i32, String, Duration)> {
    let mut c = mpirun()?;
    c.arg("-np").arg(np.to_string());
    for (k, v) in env {
        c.args(["-x", &format!("{k}={v}")]);
    }
    c.arg(bin(name)).args(["--backend", "mpi"]).args(args);
    let t = Instant::now();
    let o = c.output().expect("mpirun");
    let text = format!("{}{}", stdout(&o), String::from_utf8_lossy(&o.stderr));
    Some((o.status.code().unwrap_or(-1), text, t.elapsed()))
}

#[test]
fn mpirun_1_2_4_processes() {
    for np in [1, 2, 4] {
        let Some((code, out, _)) = mpi(
            np,
            "all_reduce_perf",
            &["-b", "8", "-e", "64K", "-f", "8", "-n", "3", "-o", "all"],
            &[],
        ) else {
            return;
        };
        assert_eq!(code, 0, "np={np}:\n{out}");
        assert_eq!(out.matches("#  Rank ").count(), np);
        assert_eq!(
            out.matches("# Collective test concluded").count(),
            1,
            "only rank 0 prints"
        );
        let wrong = check_rows(&out);
        assert_eq!(wrong.len(), 5 * 6);
        assert!(wrong.iter().all(|(a, b)| a == "0" && b == "0"), "{out}");
        let row = &rows(&out)[4];
        let (bytes, time_us, busbw): (f64, f64, f64) = (
            row[0].parse().unwrap(),
            row[5].parse().unwrap(),
            row[7].parse().unwrap(),
        );
        if np == 1 {
            assert_eq!(busbw, 0.0, "one rank moves nothing over the bus");
        } else {
            // all_reduce's bus factor 2(n-1)/n on the printed time; busbw is
            // printed with two decimals, so a slow (loaded) machine may
            // print 0.00 for a small but nonzero value.
            let want = 2.0 * (np as f64 - 1.0) / np as f64 * bytes / time_us / 1e3;
            assert!(want > 0.0, "{out}");
            assert!(
                (busbw - want).abs() <= 0.005 + want * 0.02,
                "np={np}: busbw {busbw} against {want:.4} from the time column\n{out}"
            );
        }
    }
}

#[test]
fn every_collective_type_and_op_under_mpirun() {
    // all_reduce_perf runs after the loop, on 3 ranks.
    for name in ALL.into_iter().filter(|&n| n != "all_reduce_perf") {
        let Some((code, out, _)) = mpi(
            4,
            name,
            &[
                "-b", "1K", "-e", "1K", "-n", "1", "-d", "all", "-o", "all", "-r", "-1",
            ],
            &[],
        ) else {
            return;
        };
        assert_eq!(code, 0, "{name}:\n{out}");
        assert_eq!(out_of_bounds(&out), (0, "OK".into()), "{name}");
    }
    let Some((code, out, _)) = mpi(
        3,
        "all_reduce_perf",
        &[
            "-b", "256", "-e", "256", "-n", "1", "-d", "all", "-o", "all",
        ],
        &[],
    ) else {
        return;
    };
    assert_eq!(code, 0, "{out}");
    assert_eq!(rows(&out).len(), 72);
}

#[test]
fn json_under_mpirun() {
    let path = std::env::temp_dir().join(format!("nccltests-mpi-{}.json", std::process::id()));
    let p = path.to_str().unwrap();
    let Some((code, out, _)) = mpi(
        2,
        "all_reduce_perf",
        &["-b", "1K", "-e", "4K", "-f", "2", "-n", "2", "-J", p],
        &[],
    ) else {
        return;
    };
    assert_eq!(code, 0, "{out}");
    let j: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    assert_eq!(j["config"]["devices"].as_array().unwrap().len(), 2);
    assert_eq!(j["results"].as_array().unwrap().len(), 3);
    assert!(j["results"][2]["out_of_place"]["bus_bw"].as_f64().unwrap() > 0.0);
    // Our context, beside nccl-tests' keys.
    let e = &j["erdma"];
    assert_eq!(
        (e["program"].as_str(), e["backend"].as_str()),
        (Some("all_reduce_perf"), Some("mpi"))
    );
    assert_eq!(e["gpus"], 2);
    assert_eq!(e["hosts"].as_array().unwrap().len(), 1);
    assert!(e["nccl_version"].is_null());
    assert!(e["nccl_env"].is_object());
    std::fs::remove_file(path).unwrap();
}

#[test]
fn wrong_data_gives_failed_and_status_7() {
    let Some((code, out, _)) = mpi(
        2,
        "all_reduce_perf",
        &["-b", "1K", "-e", "1K", "-n", "1"],
        &[("ERDMA_BENCH_HOOK", "corrupt:1")],
    ) else {
        return;
    };
    assert_eq!(code, 7, "{out}");
    assert!(out.contains("# Out of bounds values : 2 FAILED"));
}

#[test]
fn killed_rank_ends_the_job() {
    let Some((code, out, t)) = mpi(
        3,
        "all_reduce_perf",
        &["-b", "64", "-e", "64K", "-f", "4", "-n", "5", "-T", "60"],
        &[("ERDMA_BENCH_HOOK", "kill:2")],
    ) else {
        return;
    };
    assert_ne!(code, 0, "{out}");
    // Ended by the death, not by -T (60 s).
    assert!(t < bound::PROMPT + bound::MPIRUN, "{t:?}");
}

#[test]
fn hung_rank_times_out_with_status_4() {
    let Some((code, out, t)) = mpi(
        2,
        "all_reduce_perf",
        &["-b", "64", "-e", "64", "-n", "3", "-T", "2"],
        &[("ERDMA_BENCH_HOOK", "stall:1")],
    ) else {
        return;
    };
    assert_eq!(code, 4, "{out}");
    assert!(out.contains("Test timeout (2s) rank"), "{out}");
    // Both ranks time out together; the first waits before aborting the
    // job, so the stalled rank's own line (the one that names it) appears.
    assert!(out.contains("rank 1 (pid"), "{out}");
    assert!(t < bound::after(2) + bound::MPIRUN, "{t:?}");
}

#[test]
fn memory_report_counts_host_buffers() {
    // Initialization: nothing (a communicator holds no buffers here);
    // User-Allocated: 1 MiB send + 1 MiB receive; Collective: the scratch
    // copies of the 2 in-place calls in flight (MPI forbids aliasing).
    for (p, line) in [
        (
            "0",
            "Initialization 0.00 B | User-Allocated 2.00 MB | Collective 2.00 MB | Total  4.00 MB",
        ),
        // -p 1: nccl-tests' threadInit reads after the buffers too.
        (
            "1",
            "Initialization 2.00 MB | User-Allocated 0.00 B | Collective 2.00 MB | Total  4.00 MB",
        ),
    ] {
        let args = [
            "-b", "1M", "-e", "1M", "-o", "sum", "-n", "2", "-M", "1", "-p", p,
        ];
        let Some((code, out, _)) = mpi(2, "all_reduce_perf", &args, &[]) else {
            return;
        };
        assert_eq!(code, 0, "{out}");
        assert!(
            out.contains(&format!("# GPU memory usage     : {line}\n")),
            "-p {p}:\n{out}"
        );
    }
}
