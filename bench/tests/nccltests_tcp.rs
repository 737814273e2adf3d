//! Launch without MPI: ranks from RANK/WORLD_SIZE, rendezvous over TCP at
//! MASTER_ADDR:MASTER_PORT, collectives by the host backend. A dying or
//! hung rank must make every process fail within the timeout.
#![allow(clippy::disallowed_methods)] // a test reads and writes its files directly

mod nccltests_common;
use nccltests_common::*;
use std::time::Duration;

#[test]
fn three_processes_over_tcp() {
    let args = [
        "--backend",
        "host",
        "-g",
        "2",
        "-b",
        "64",
        "-e",
        "16K",
        "-f",
        "4",
        "-n",
        "3",
        "-d",
        "all",
    ];
    let res = run_tcp(
        3,
        "reduce_scatter_perf",
        &args,
        &[],
        &port(1),
        Duration::from_secs(60),
    );
    for (code, out, err, _) in &res {
        assert_eq!(*code, 0, "{out}\n{err}");
    }
    let out = &res[0].1;
    assert_eq!(out_of_bounds(out), (0, "OK".into()));
    assert_eq!(
        out.matches("#  Rank ").count(),
        6,
        "every rank's device line on rank 0:\n{out}"
    );
    assert!(out.contains("host memory (host backend, TCP bootstrap)"));
    let wrong = check_rows(out);
    assert_eq!(wrong.len(), 5 * 12);
    assert!(wrong.iter().all(|(a, b)| a == "0" && b == "0"));
    assert!(
        res[1].1.is_empty() && res[2].1.is_empty(),
        "only rank 0 prints"
    );
}

#[test]
fn wrong_data_on_one_rank_fails_everywhere() {
    let args = ["--backend", "host", "-b", "1K", "-e", "1K", "-n", "1"];
    let res = run_tcp(
        2,
        "all_reduce_perf",
        &args,
        &[("ERDMA_BENCH_HOOK", "corrupt:1")],
        &port(2),
        Duration::from_secs(60),
    );
    assert!(res.iter().all(|r| r.0 == 7), "{res:?}");
    assert_eq!(out_of_bounds(&res[0].1), (2, "FAILED".into()));
}

#[test]
fn a_killed_rank_makes_the_others_fail_quickly() {
    let json = temp_json("tcp-killed");
    let args = [
        "--backend",
        "host",
        "-b",
        "64",
        "-e",
        "64K",
        "-f",
        "4",
        "-n",
        "5",
        "-T",
        "60",
        "-J",
        json.to_str().unwrap(),
    ];
    let res = run_tcp(
        3,
        "all_reduce_perf",
        &args,
        &[("ERDMA_BENCH_HOOK", "kill:1")],
        &port(3),
        Duration::from_secs(60),
    );
    assert_eq!(res[1].0, -9, "rank 1 dies by SIGKILL");
    // Rank 0's JSON is complete and says why the run stopped.
    let j: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&json).expect("JSON")).expect("valid JSON");
    std::fs::remove_file(&json).unwrap();
    assert!(j["errors"][0].as_str().unwrap().contains("rank 1 ("), "{j}");
    for r in [0, 2] {
        let (code, out, _, t) = &res[r];
        assert_ne!(*code, 0, "rank {r}: {out}");
        // Ended by the death, not by -T (60 s).
        assert!(*t < bound::PROMPT, "rank {r} took {t:?}");
        assert!(
            out.contains("TCP connection to rank 1 (") && out.contains(") lost: "),
            "rank {r}: {out}"
        );
    }
}

#[test]
fn a_hung_rank_times_out_with_status_4() {
    let args = [
        "--backend",
        "host",
        "-b",
        "64",
        "-e",
        "64",
        "-n",
        "3",
        "-T",
        "2",
    ];
    let res = run_tcp(
        2,
        "all_reduce_perf",
        &args,
        &[("ERDMA_BENCH_HOOK", "stall:1")],
        &port(4),
        Duration::from_secs(60),
    );
    // Every rank exits 4 with the same verdict, naming rank 1.
    for (r, (code, out, _, t)) in res.iter().enumerate() {
        assert_eq!(*code, 4, "rank {r}: {out}");
        assert!(
            out.contains("Test timeout (2s) rank 1 (pid ")
                && out.contains("did not complete AllReduce float sum 64 B"),
            "rank {r}: {out}"
        );
        assert!(*t < bound::after(2), "rank {r}: {t:?}");
    }
}

#[test]
fn bad_launch_environment_is_reported() {
    let o = run(
        "all_reduce_perf",
        &["--backend", "host"],
        &[
            ("RANK", "5"),
            ("WORLD_SIZE", "2"),
            ("MASTER_ADDR", "127.0.0.1"),
        ],
    );
    assert_eq!(o.status.code(), Some(6));
    assert!(stdout(&o).contains("RANK=5 is not below WORLD_SIZE=2"));
    let o = run(
        "all_reduce_perf",
        &["--backend", "host", "--bootstrap", "tcp"],
        &[],
    );
    assert_eq!(o.status.code(), Some(6));
    assert!(stdout(&o).contains("--bootstrap tcp needs RANK and WORLD_SIZE"));
}
