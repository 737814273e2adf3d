//! NCCL_TESTS_SPLIT / NCCL_TESTS_SPLIT_MASK with the host-memory backends:
//! as in nccl-tests, each process gets a color, the processes of one color
//! form one communicator (ranks ordered by world rank), each communicator
//! reduces among its own members, rank 0 prints, and busbw uses the size
//! of rank 0's communicator.
#![allow(clippy::disallowed_methods)] // a test reads and writes its files directly

mod nccltests_common;
use nccltests_common::*;

/// (variable, value, Group of each of 4 processes, size of rank 0's group).
#[cfg(feature = "mpi")]
const SPLITS: [(&str, &str, [i32; 4], usize); 5] = [
    ("NCCL_TESTS_SPLIT", "MOD 2", [0, 1, 0, 1], 2),
    ("NCCL_TESTS_SPLIT", "AND 1", [0, 1, 0, 1], 2),
    ("NCCL_TESTS_SPLIT", "DIV 2", [0, 0, 1, 1], 2),
    ("NCCL_TESTS_SPLIT", "DIV 3", [0, 0, 0, 1], 3),
    ("NCCL_TESTS_SPLIT_MASK", "0x2", [0, 0, 2, 2], 2),
];

/// mpirun -np 4 with `env` exported; (exit status, stdout, stdout and
/// stderr for messages).
#[cfg(feature = "mpi")]
fn mpi4(name: &str, args: &[&str], env: &[(&str, &str)]) -> Option<(i32, String, String)> {
    let mut c = mpirun()?;
    c.args(["-np", "4"]);
    for (k, v) in env {
        c.args(["-x", &format!("{k}={v}")]);
    }
    let o = c.arg(bin(name)).args(args).output().expect("mpirun");
    let out = stdout(&o);
    let all = format!("{out}{}", String::from_utf8_lossy(&o.stderr));
    Some((o.status.code().unwrap_or(-1), out, all))
}

#[cfg(feature = "mpi")]
#[test]
fn mpi_backend_each_color_reduces_alone() {
    for (var, value, colors, n) in SPLITS {
        let json = temp_json(&format!("split-mpi-{n}-{}", colors[3]));
        let args = [
            "--backend",
            "mpi",
            "-b",
            "1K",
            "-e",
            "64K",
            "-f",
            "8",
            "-n",
            "3",
            "-o",
            "all",
            "-c",
            "1",
            "-J",
            json.to_str().unwrap(),
        ];
        let Some((code, out, all)) = mpi4("all_reduce_perf", &args, &[(var, value)]) else {
            return;
        };
        let what = format!("{var}={value}");
        assert_eq!(code, 0, "{what}:\n{all}");
        assert_eq!(groups(&out), colors, "{what}:\n{all}");
        let wrong = check_rows(&out);
        assert_eq!(wrong.len(), 3 * 6, "{what}: 3 sizes x 6 ops:\n{all}");
        assert!(
            wrong.iter().all(|(a, b)| a == "0" && b == "0"),
            "{what}:\n{all}"
        );
        assert_eq!(out_of_bounds(&out), (0, "OK".into()), "{what}");
        assert_allreduce_factor(&bandwidths(&json), n, &what);
    }
}

#[cfg(feature = "mpi")]
#[test]
fn every_collective_splits_under_mpirun() {
    for name in ALL {
        let args = [
            "--backend",
            "mpi",
            "-b",
            "1K",
            "-e",
            "4K",
            "-f",
            "4",
            "-n",
            "1",
            "-r",
            "-1",
            "-c",
            "1",
        ];
        let Some((code, out, all)) = mpi4(name, &args, &[("NCCL_TESTS_SPLIT", "MOD 2")]) else {
            return;
        };
        assert_eq!(code, 0, "{name}:\n{all}");
        assert_eq!(groups(&out), [0, 1, 0, 1], "{name}");
        assert_eq!(out_of_bounds(&out), (0, "OK".into()), "{name}:\n{all}");
        // Rooted collectives sweep the 2 roots of a 2-rank communicator.
        let rooted = [
            "broadcast_perf",
            "reduce_perf",
            "gather_perf",
            "scatter_perf",
        ];
        let per_size = if rooted.contains(&name) { 2 } else { 1 };
        assert_eq!(rows(&out).len(), 2 * per_size, "{name}:\n{all}");
    }
}

#[cfg(feature = "mpi")]
#[test]
fn host_backend_splits_processes_with_their_threads() {
    // 4 processes x 2 threads: rank 0's communicator has 2 processes (4
    // ranks) with MOD 2, 3 processes (6 ranks) with DIV 3.
    for (value, colors, n) in [
        ("MOD 2", [0, 0, 1, 1, 0, 0, 1, 1], 4),
        ("DIV 3", [0, 0, 0, 0, 0, 0, 1, 1], 6),
    ] {
        let json = temp_json(&format!("split-host-{n}"));
        let args = [
            "--backend",
            "host",
            "-t",
            "2",
            "-b",
            "1K",
            "-e",
            "16K",
            "-f",
            "4",
            "-n",
            "2",
            "-c",
            "1",
            "-J",
            json.to_str().unwrap(),
        ];
        let Some((code, out, all)) = mpi4("all_reduce_perf", &args, &[("NCCL_TESTS_SPLIT", value)])
        else {
            return;
        };
        assert_eq!(code, 0, "{value}:\n{all}");
        assert_eq!(groups(&out), colors, "{value}");
        let wrong = check_rows(&out);
        assert_eq!(wrong.len(), 3, "{value}:\n{all}");
        assert!(
            wrong.iter().all(|(a, b)| a == "0" && b == "0"),
            "{value}:\n{all}"
        );
        assert_allreduce_factor(&bandwidths(&json), n, value);
    }
}

#[cfg(feature = "mpi")]
#[test]
fn wrong_data_in_a_split_still_fails() {
    for backend in ["mpi", "host"] {
        let args = ["--backend", backend, "-b", "1K", "-e", "1K", "-n", "1"];
        let env = [
            ("NCCL_TESTS_SPLIT", "MOD 2"),
            ("ERDMA_BENCH_HOOK", "corrupt:1"),
        ];
        let Some((code, out, all)) = mpi4("all_reduce_perf", &args, &env) else {
            return;
        };
        assert_eq!(code, 7, "{backend}:\n{all}");
        // Rank 1 of each communicator (world processes 2 and 3) has one
        // wrong element per placement; #wrong sums over the run, and the
        // footer counts each wrong (rank, placement), as nccl-tests does.
        let wrong = check_rows(&out);
        assert_eq!(wrong, [("2".into(), "2".into())], "{backend}:\n{all}");
        assert!(
            out.contains("# Out of bounds values : 4 FAILED"),
            "{backend}:\n{all}"
        );
    }
}

#[cfg(feature = "mpi")]
#[test]
fn uneven_groups_with_a_root_sweep_are_refused_not_hung() {
    let args = [
        "--backend",
        "mpi",
        "-b",
        "1K",
        "-e",
        "1K",
        "-n",
        "1",
        "-r",
        "-1",
    ];
    let Some((code, _, all)) = mpi4("reduce_perf", &args, &[("NCCL_TESTS_SPLIT", "DIV 3")]) else {
        return;
    };
    assert_eq!(code, 6, "{all}");
    assert!(
        all.contains("NCCL_TESTS_SPLIT made communicators of different sizes that would run different numbers of tests (1 and 3)"),
        "{all}"
    );
}

#[test]
fn one_process_is_one_color_whatever_its_threads() {
    // The color is the process's: with one process every thread shares
    // color 0 (nccl-tests computes `proc % 2` = 0), so -t 4 is one
    // communicator of 4 ranks.
    let json = temp_json("split-one-process");
    let args = [
        "--backend",
        "host",
        "-t",
        "4",
        "-b",
        "1K",
        "-e",
        "4K",
        "-f",
        "4",
        "-n",
        "2",
        "-c",
        "1",
        "-J",
        json.to_str().unwrap(),
    ];
    let o = run("all_reduce_perf", &args, &[("NCCL_TESTS_SPLIT", "MOD 2")]);
    let out = stdout(&o);
    assert_eq!(o.status.code(), Some(0), "{out}");
    assert_eq!(groups(&out), [0, 0, 0, 0]);
    assert!(
        check_rows(&out).iter().all(|(a, b)| a == "0" && b == "0"),
        "{out}"
    );
    assert_allreduce_factor(&bandwidths(&json), 4, "one process, -t 4");
}

#[test]
fn tcp_bootstrap_refuses_a_split_host_run() {
    let args = ["--backend", "host", "-b", "1K", "-e", "1K", "-n", "1"];
    let res = run_tcp(
        2,
        "all_reduce_perf",
        &args,
        &[("NCCL_TESTS_SPLIT", "MOD 2")],
        &port(5),
        std::time::Duration::from_secs(60),
    );
    for (code, out, err, _) in &res {
        assert_ne!(*code, 0, "{out}\n{err}");
        assert!(
            out.contains("NCCL_TESTS_SPLIT with the host backend needs the MPI bootstrap (launch with mpirun), not TCP"),
            "{out}\n{err}"
        );
    }
}
