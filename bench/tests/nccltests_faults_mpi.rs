//! Faults under real mpirun (issue 16): a stopped rank ends every rank
//! within -T with status 4 naming it, processes started with different
//! options stop at once (6) naming the option, MPI's own errors
//! (MPI_ERR_TRUNCATE) have a documented status, and sizes that do not fit
//! exit 2. Bounded in time; mpirun and the stopped rank are killed when a
//! test fails.
#![cfg(feature = "mpi")]
#![allow(clippy::disallowed_methods)] // a test reads and writes its files directly

mod nccltests_common;
use nccltests_common::*;
use std::time::{Duration, Instant};

const LIMIT: Duration = Duration::from_secs(90);

/// mpirun of `progs` (an MPMD launch when several): (np, args) each.
fn mpirun_job(progs: &[(usize, &[&str])], env: &[(&str, &str)]) -> Option<Proc> {
    let mut c = mpirun()?;
    for (k, v) in env {
        c.args(["-x", &format!("{k}={v}")]);
    }
    for (i, (np, args)) in progs.iter().enumerate() {
        if i > 0 {
            c.arg(":");
        }
        c.arg("-np")
            .arg(np.to_string())
            .arg(bin("all_reduce_perf"))
            .args(*args);
    }
    Some(Proc::spawn(c))
}

#[test]
fn a_stopped_rank_is_named_by_every_rank_with_status_4() {
    let json = temp_json("mpi-stopped");
    let j = json.to_str().unwrap();
    for (backend, np) in [("host", 3), ("mpi", 2)] {
        let args = [
            "--backend",
            backend,
            "-b",
            "64K",
            "-e",
            "64K",
            "-n",
            "200000",
            "-T",
            "3",
            "-J",
            j,
        ];
        let Some(mut p) = mpirun_job(&[(np, &args)], &[]) else {
            return;
        };
        assert!(
            p.wait_stdout(|o| measuring(o) && rank_pid(o, 1).is_some(), LIMIT),
            "{}",
            p.stdout()
        );
        let pid = rank_pid(&p.stdout(), 1).unwrap();
        signal(pid, libc::SIGSTOP);
        p.also_kill.push(pid);
        let t = Instant::now();
        let e = p.wait(LIMIT);
        let took = t.elapsed();
        assert_eq!(e.code, 4, "--backend {backend}: {e:?}");
        let named = format!("Test timeout (3s) rank 1 (pid {pid} on ");
        let lines = e
            .out
            .lines()
            .filter(|l| l.contains(&named) && l.contains(") did not respond: stopped"))
            .count();
        // Every live rank says it (mpirun kills the rest after the first
        // MPI_Abort, so they speak first).
        assert_eq!(lines, np - 1, "--backend {backend}: {e:?}");
        // mpirun's start, -T, the census's 3 s, 1 s to let the others print.
        assert!(took < bound::after(3) + bound::MPIRUN, "{took:?}");
        let r: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(&json).expect("JSON"))
                .expect("valid JSON");
        assert!(r["errors"][0].as_str().unwrap().starts_with(&named), "{r}");
        std::fs::remove_file(&json).unwrap();
    }
}

#[test]
fn processes_with_different_options_stop_at_once_with_status_6() {
    let base = ["-b", "8", "-e", "64K", "-n", "2", "-T", "30"];
    let with = |extra: &[&'static str]| -> Vec<&'static str> { [&base[..], extra].concat() };
    for (a, b, what) in [
        (
            with(&["--backend", "host", "-c", "1"]),
            with(&["--backend", "host", "-c", "0"]),
            "-c is 1 on process 0 but 0 on process 1",
        ),
        (
            with(&["--backend", "mpi"]),
            with(&["--backend", "host"]),
            "--backend is mpi on process 0 but host on process 1",
        ),
        (
            with(&["--backend", "host", "-n", "5"]),
            with(&["--backend", "host", "-n", "50"]),
            "-n is 5 on process 0 but 50 on process 1",
        ),
        (
            with(&["--backend", "host", "-T", "10"]),
            with(&["--backend", "host", "-T", "0"]),
            "-T is 10 on process 0 but 0 on process 1",
        ),
        (
            with(&["--backend", "mpi", "-e", "64K"]),
            with(&["--backend", "mpi", "-e", "1M"]),
            "-e is 65536 on process 0 but 1048576 on process 1",
        ),
    ] {
        let Some(p) = mpirun_job(&[(1, &a), (1, &b)], &[]) else {
            return;
        };
        let e = p.wait(LIMIT);
        assert_eq!(e.code, 6, "{what}: {e:?}");
        assert!(
            e.out.contains(&format!(
                ": the processes were started with different options: {what}: every process must get the same options"
            )),
            "{what}: {e:?}"
        );
        assert!(
            e.secs < (bound::PROMPT + bound::MPIRUN).as_secs_f64(),
            "{what}: {e:?}"
        );
    }
}

#[test]
fn mpi_err_truncate_is_status_6() {
    // The start-up comparison would catch this first (the test above):
    // skip it to see what MPI itself reports for ranks out of step.
    let a = [
        "--backend",
        "mpi",
        "-b",
        "1M",
        "-e",
        "1M",
        "-n",
        "2",
        "-T",
        "20",
    ];
    let b = [
        "--backend",
        "mpi",
        "-b",
        "64K",
        "-e",
        "64K",
        "-n",
        "2",
        "-T",
        "20",
    ];
    let Some(p) = mpirun_job(
        &[(1, &a), (1, &b)],
        &[("ERDMA_BENCH_HOOK", "skip-option-check")],
    ) else {
        return;
    };
    let e = p.wait(LIMIT);
    assert_eq!(e.code, 6, "{e:?}");
    assert!(
        e.out.contains(": Test MPI failure ")
            && e.out.contains(
                "'MPI_ERR_TRUNCATE: message truncated': the ranks passed different sizes"
            ),
        "{e:?}"
    );
}

#[test]
fn sizes_that_do_not_fit_exit_2_under_mpirun() {
    let args = ["--backend", "mpi", "-b", "1e15", "-e", "1e15", "-n", "1"];
    let Some(p) = mpirun_job(&[(2, &args)], &[]) else {
        return;
    };
    let e = p.wait(LIMIT);
    assert_eq!(e.code, 2, "{e:?}");
    assert!(
        e.out.contains(": Test host memory failure malloc("),
        "{e:?}"
    );
    assert!(
        !e.out.contains("panicked") && !e.err.contains("panicked"),
        "{e:?}"
    );
}
