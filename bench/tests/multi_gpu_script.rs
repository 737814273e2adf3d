//! `scripts/gpu/multi-gpu.sh` (the multi-GPU run of issue 4) in its dry-run
//! mode: `BACKEND=host` puts `--backend host` on every run, so the script's
//! whole logic - launch modes (-g, -t, mpirun, TCP), verdicts, busbw tables,
//! the side-by-side comparison and JSON parse checks, the killed and stalled
//! rank checks, the summary and its three output files - runs here on the
//! debug binaries Cargo built for this test, with 2 simulated GPUs. Our own
//! binaries stand in for the nccl-tests build (so the comparison checks
//! plumbing, not timing: BOUND is huge). The one-GPU mode (ONE_GPU_RANKS:
//! N processes sharing GPU 0, each with its own NCCL_HOSTID) runs the same
//! way, with wrappers that log each rank's NCCL settings. The NCCL run itself
//! needs a GPU: docs/perf/multi-gpu-README.md.
#![allow(clippy::disallowed_methods)] // a test reads and writes its files directly

use std::path::{Path, PathBuf};
use std::process::Command;

fn script() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../scripts/gpu/multi-gpu.sh")
}

fn bin_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_all_reduce_perf"))
        .parent()
        .expect("binary directory")
        .to_path_buf()
}

fn have(cmd: &str) -> bool {
    Command::new(cmd)
        .arg("--version")
        .output()
        .map(|o| o.status.success())
        .unwrap_or(false)
}

/// A fresh directory under the system temp dir.
fn scratch(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("multi-gpu-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).expect("scratch dir");
    d
}

/// Runs the script in dry-run mode; returns (exit status, stdout + stderr).
fn run_script(args: &[&Path], env: &[(&str, &str)]) -> (i32, String) {
    let mut c = Command::new("bash");
    c.arg(script())
        .args(args)
        .env("BACKEND", "host")
        .env("NGPUS", "2")
        .env("FAIL_T", "2")
        .env(
            "MPIRUN_ARGS",
            "--allow-run-as-root --oversubscribe --mca btl self,vader,tcp",
        )
        .env("OMPI_ALLOW_RUN_AS_ROOT", "1")
        .env("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1")
        .env_remove("ERDMA_BENCH_HOOK");
    for (k, v) in env {
        c.env(k, v);
    }
    let o = c.output().expect("bash");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
    (o.status.code().unwrap_or(-1), text)
}

/// The verdict table's rows: (check name, verdict).
fn verdicts(text: &str) -> Vec<(String, String)> {
    let summary = text
        .rsplit("=== summary")
        .next()
        .expect("a summary is printed");
    summary
        .lines()
        .skip_while(|l| !l.starts_with("| # | check | exit | s | verdict |"))
        .skip(2)
        .take_while(|l| l.starts_with("| "))
        .map(|l| {
            let f: Vec<&str> = l.split(" | ").collect();
            (f[1].to_string(), f[4].trim_end_matches(" |").to_string())
        })
        .collect()
}

fn verdict<'a>(v: &'a [(String, String)], name: &str) -> &'a str {
    &v.iter()
        .find(|(n, _)| n == name)
        .unwrap_or_else(|| panic!("no check named {name:?} in {v:#?}"))
        .1
}

fn usable() -> bool {
    if !have("python3") || !have("timeout") {
        eprintln!("python3 or timeout missing: skipping");
        return false;
    }
    true
}

#[test]
fn dry_run_passes_every_part_and_writes_three_files() {
    if !usable() {
        return;
    }
    let mpi = have("mpirun");
    let out = scratch("dry");
    let bins = bin_dir();
    let (code, text) = run_script(
        &[&bins, &bins],
        &[
            ("OUT", out.to_str().unwrap()),
            ("COLLS", "alltoall broadcast"),
            ("COMPARE_COLLS", "all_reduce sendrecv"),
            ("BOUND", "1e9"),
        ],
    );
    assert_eq!(code, 0, "{text}");
    let v = verdicts(&text);
    let expect_ok = |name: &str| {
        let got = verdict(&v, name);
        assert!(got.starts_with("ok"), "{name}: {got}\n{text}");
    };
    for name in [
        "all_reduce -g 2, busbw sweep",
        "all_reduce -g 2, checked to 4K",
        "all_reduce -t 2, busbw sweep",
        "all_reduce -t 2, checked to 4K",
        "alltoall -g 2, every root, checked",
        "broadcast -g 2, every root, checked",
        "TCP launch, 2 processes, checked",
        "TCP launch, kill -9 of rank 1 mid-run, -T 2",
        "TCP launch, SIGSTOP of rank 1 mid-run, -T 2",
    ] {
        expect_ok(name);
    }
    let under_mpirun = [
        "all_reduce mpirun -np 2, busbw sweep",
        "all_reduce mpirun -np 2, checked to 4K",
        "alltoall mpirun -np 2, checked to 4K",
        "broadcast mpirun -np 2, busbw sweep",
        "all_reduce side by side (mpirun)",
        "all_reduce nccl-tests text and -J JSON parse (mpirun)",
        "all_reduce ours text and -J JSON parse (mpirun)",
        "sendrecv side by side (mpirun)",
        "sendrecv ours text and -J JSON parse (mpirun)",
        "mpirun -np 2, rank 1 killed (kill:1 hook), -T 2",
        "mpirun -np 2, kill -9 of rank 1 mid-run, -T 2",
        "mpirun -np 2, SIGSTOP of rank 1 mid-run, -T 2",
        "mpirun -np 2, rank 1 stalls (stall:1 hook), -T 2",
    ];
    if mpi {
        for name in under_mpirun {
            expect_ok(name);
        }
        assert!(text.contains("| size (B) | AR -g | AR -t | AR mpirun | A2A | BC |"));
        assert_eq!(verdicts(&text).len(), 25, "{text}");
    } else {
        assert!(verdict(&v, "all_reduce mpirun -np 2").starts_with("SKIP: no mpirun"));
    }
    assert!(text.contains("== all "), "{text}");

    let mut files: Vec<String> = std::fs::read_dir(&out)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    files.sort();
    assert_eq!(files, ["multi-gpu.log", "raw.txt", "summary.md"]);
    let log = std::fs::read_to_string(out.join("multi-gpu.log")).unwrap();
    assert!(log.contains("NCCL_NVLS_ENABLE=0"));
    let summary = std::fs::read_to_string(out.join("summary.md")).unwrap();
    assert!(summary.contains("out-of-place busbw (GB/s)"));
    assert!(summary.contains("in-place busbw (GB/s)"));
    let raw = std::fs::read_to_string(out.join("raw.txt")).unwrap();
    assert!(raw.contains("# Collective test concluded: all_reduce_perf"));
    if mpi {
        assert!(summary.contains("### all_reduce, launch mpirun (exit 0)"));
        assert!(summary.contains("| size (B) | nccl-tests oop | ours oop | ratio |"));
        assert!(raw.contains("===== ours-all_reduce.json"));
        assert!(raw.contains("\"version\": 3") || raw.contains("\"version\":3"));
        assert!(raw.contains("mpirun noticed that process rank 1"));
    }
    std::fs::remove_dir_all(&out).unwrap();
}

/// A directory of the real binaries where all_reduce_perf is a shell
/// wrapper running `prelude` and then the real binary.
fn wrapped_bins(name: &str, prelude: &str) -> PathBuf {
    let dir = scratch(name);
    let bins = bin_dir();
    for entry in std::fs::read_dir(&bins).unwrap() {
        let name = entry.unwrap().file_name().to_string_lossy().into_owned();
        if name.ends_with("_perf") && name != "all_reduce_perf" {
            std::os::unix::fs::symlink(bins.join(&name), dir.join(&name)).unwrap();
        }
    }
    let wrapper = dir.join("all_reduce_perf");
    std::fs::write(
        &wrapper,
        format!(
            "#!/bin/sh\n{prelude}\nexec '{}' \"$@\"\n",
            bins.join("all_reduce_perf").display()
        ),
    )
    .unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&wrapper, std::fs::Permissions::from_mode(0o755)).unwrap();
    dir
}

/// A binary that reports wrong data makes its checked runs FAIL and the
/// script exit 1, while the unchecked sweeps (-c 0) still pass.
#[test]
fn wrong_data_fails_the_checked_runs() {
    if !usable() {
        return;
    }
    // Every rank's result corrupted (exit 7).
    let dir = wrapped_bins("wrong", "export ERDMA_BENCH_HOOK=corrupt:0,corrupt:1");
    let out = scratch("wrong-out");
    let (code, text) = run_script(
        &[&dir],
        &[("OUT", out.to_str().unwrap()), ("PARTS", "modes")],
    );
    assert_eq!(code, 1, "{text}");
    let v = verdicts(&text);
    assert_eq!(verdict(&v, "all_reduce -g 2, busbw sweep"), "ok");
    assert_eq!(
        verdict(&v, "all_reduce -g 2, checked to 4K"),
        "FAIL (exit 7, want 0)"
    );
    assert_eq!(
        verdict(&v, "all_reduce -t 2, checked to 4K"),
        "FAIL (exit 7, want 0)"
    );
    if have("mpirun") {
        assert_eq!(
            verdict(&v, "all_reduce mpirun -np 2, checked to 4K"),
            "FAIL (exit 7, want 0)"
        );
    }
    assert!(text.contains("== FAILED "), "{text}");
    std::fs::remove_dir_all(&dir).unwrap();
    std::fs::remove_dir_all(&out).unwrap();
}

/// Processes a run leaves behind (as ranks do when mpirun is stopped by a
/// timeout) are found and killed after the run, and the verdict says so.
#[test]
fn processes_left_running_are_killed() {
    if !usable() || !have("setsid") {
        return;
    }
    // A child in its own session outlives the run (an odd duration marks it).
    let mark = "117.125";
    let dir = wrapped_bins(
        "leftover",
        &format!("setsid sleep {mark} </dev/null >/dev/null 2>&1 &"),
    );
    let out = scratch("leftover-out");
    let (code, text) = run_script(
        &[&dir],
        &[("OUT", out.to_str().unwrap()), ("PARTS", "modes")],
    );
    assert_eq!(code, 0, "{text}");
    let v = verdicts(&text);
    assert_eq!(
        verdict(&v, "all_reduce -g 2, busbw sweep"),
        "ok (then killed 1 processes left running)",
        "{text}"
    );
    let alive: Vec<_> = std::fs::read_dir("/proc")
        .unwrap()
        .filter_map(|e| std::fs::read(e.ok()?.path().join("cmdline")).ok())
        .filter(|c| c == format!("sleep\0{mark}\0").as_bytes())
        .collect();
    assert!(alive.is_empty(), "{} left running", alive.len());
    std::fs::remove_dir_all(&dir).unwrap();
    std::fs::remove_dir_all(&out).unwrap();
}

#[test]
fn refuses_one_gpu_and_missing_binaries() {
    if !usable() {
        return;
    }
    let bins = bin_dir();
    let empty = scratch("empty");
    let out = empty.join("out");
    let out = [("OUT", out.to_str().unwrap())];
    let (code, text) = run_script(&[&bins], &[out[0], ("NGPUS", "1")]);
    assert_eq!(code, 2, "{text}");
    assert!(text.contains("needs 2 or more GPUs (found '1'"), "{text}");
    let (code, text) = run_script(&[&empty], &out);
    assert_eq!(code, 2, "{text}");
    assert!(text.contains("missing executable: "), "{text}");
    for bad in ["1", "65", "two", "-2"] {
        let (code, text) = run_script(&[&bins], &[out[0], ("ONE_GPU_RANKS", bad)]);
        assert_eq!(code, 2, "{bad}: {text}");
        assert!(
            text.contains(&format!(
                "ONE_GPU_RANKS must be the number of ranks to put on GPU 0, 2 to 64 (got '{bad}')"
            )),
            "{text}"
        );
    }
    let (code, text) = run_script(&[&bins], &[out[0], ("BUDGET", "7m")]);
    assert_eq!(code, 2, "{text}");
    assert!(
        text.contains("BUDGET must be a number of seconds"),
        "{text}"
    );
    if !have("nvidia-smi") {
        let (code, text) = run_script(
            &[&bins],
            &[out[0], ("ONE_GPU_RANKS", "2"), ("BACKEND", "nccl")],
        );
        assert_eq!(code, 2, "{text}");
        assert!(
            text.contains("the one-GPU mode (ONE_GPU_RANKS) needs a GPU"),
            "{text}"
        );
    }
    // A GPU that admits one process only (a stand-in nvidia-smi says so).
    let fake = empty.join("fake-bin");
    std::fs::create_dir_all(&fake).unwrap();
    let smi = fake.join("nvidia-smi");
    std::fs::write(
        &smi,
        "#!/bin/sh\ncase \"$*\" in\n  -L) echo 'GPU 0: stand-in (UUID: GPU-0)' ;;\n  \
         *compute_mode*) echo Exclusive_Process ;;\nesac\n",
    )
    .unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&smi, std::fs::Permissions::from_mode(0o755)).unwrap();
    let path = format!(
        "{}:{}",
        fake.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let (code, text) = run_script(
        &[&bins],
        &[
            out[0],
            ("ONE_GPU_RANKS", "2"),
            ("BACKEND", "nccl"),
            ("PATH", &path),
        ],
    );
    assert_eq!(code, 2, "{text}");
    assert!(
        text.contains("but its compute mode is 'Exclusive_Process'"),
        "{text}"
    );
    std::fs::remove_dir_all(&empty).unwrap();
}

/// Past BUDGET seconds no check starts: the rest are listed as skipped, the
/// summary is still printed last, and the run passes.
#[test]
fn checks_past_the_budget_are_skipped() {
    if !usable() {
        return;
    }
    // The first run alone takes longer than the whole budget.
    let dir = wrapped_bins("budget", "sleep 1.5");
    let out = scratch("budget-out");
    let (code, text) = run_script(
        &[&dir],
        &[
            ("OUT", out.to_str().unwrap()),
            ("PARTS", "modes"),
            ("BUDGET", "1"),
        ],
    );
    assert_eq!(code, 0, "{text}");
    let v = verdicts(&text);
    let skipped = v
        .iter()
        .filter(|(_, got)| got == "SKIP: over the time budget of 1 s")
        .count();
    assert!(skipped >= 3, "{v:#?}");
    assert!(
        text.contains(&format!(
            "== {skipped} checks not started: over the time budget of 1 s"
        )),
        "{text}"
    );
    assert!(
        text.trim_end()
            .ends_with("(skipped ones are listed as SKIP)"),
        "{text}"
    );
    std::fs::remove_dir_all(&dir).unwrap();
    std::fs::remove_dir_all(&out).unwrap();
}

/// The lines an `all_reduce_perf` wrapper logged (one per rank it started):
/// the one-GPU mode's per-rank NCCL settings, as each rank saw them.
const ENV_LOG_PRELUDE: &str = "echo \"launch=${OMPI_COMM_WORLD_RANK:+mpirun}${RANK:+tcp} \
rank=${OMPI_COMM_WORLD_RANK:-$RANK} hostid=$NCCL_HOSTID dev=$NCCL_TESTS_DEVICE \
if=$NCCL_SOCKET_IFNAME ib=$NCCL_IB_DISABLE nvls=$NCCL_NVLS_ENABLE\" >>";

fn env_log_bins(name: &str) -> (PathBuf, PathBuf) {
    let log = scratch(&format!("{name}-log")).join("env.txt");
    let dir = wrapped_bins(name, &format!("{ENV_LOG_PRELUDE} '{}'", log.display()));
    (dir, log)
}

/// Both ranks started by `launch` (mpirun or tcp) saw the one-GPU settings,
/// each with its own NCCL host id.
fn assert_rank_env(log: &Path, launch: &str) {
    let text = std::fs::read_to_string(log).expect("the wrapper logged the ranks' environment");
    for r in 0..2 {
        let want =
            format!("launch={launch} rank={r} hostid=multi-gpu-rank-{r} dev=0 if=lo ib=1 nvls=0");
        assert!(text.lines().any(|l| l == want), "no {want:?} in\n{text}");
    }
    assert!(
        text.lines().all(|l| l.contains(" dev=0 if=lo ib=1 nvls=0")),
        "{text}"
    );
}

/// The one-GPU mode (ONE_GPU_RANKS=2) with the MPI backend: -g/-t skipped
/// and said why, the other collectives checked over every root under
/// mpirun and the comparison, all through the per-rank NCCL_HOSTID wrapper
/// (the NCCL settings are harmless without NCCL). The failure paths are
/// in the next test: with the MPI backend the stall check races (both
/// ranks time out at once, and whichever aborts first silences the other,
/// so rank 1's own report is not always printed).
#[test]
fn one_gpu_mode_dry_run_with_the_mpi_backend() {
    if !usable() || !have("mpirun") {
        return;
    }
    let (dir, log) = env_log_bins("onegpu-mpi");
    let out = scratch("onegpu-mpi-out");
    let (code, text) = run_script(
        &[&dir, &dir],
        &[
            ("OUT", out.to_str().unwrap()),
            ("BACKEND", "mpi"),
            ("ONE_GPU_RANKS", "2"),
            ("PARTS", "modes colls compare"),
            ("COLLS", "alltoall broadcast"),
            ("COMPARE_COLLS", "all_reduce"),
            ("BOUND", "1e9"),
        ],
    );
    assert_eq!(code, 0, "{text}");
    let v = verdicts(&text);
    let why = "SKIP: one-GPU mode: one process cannot hold two ranks on one GPU";
    for name in ["all_reduce -g 2", "all_reduce -t 2"] {
        assert!(verdict(&v, name).starts_with(why), "{name}\n{text}");
    }
    for name in [
        "all_reduce mpirun -np 2, busbw sweep",
        "all_reduce mpirun -np 2, checked to 4K",
        "alltoall mpirun -np 2, busbw sweep",
        "alltoall mpirun -np 2, every root, checked to 4K",
        "broadcast mpirun -np 2, every root, checked to 4K",
        "all_reduce side by side (mpirun)",
        "all_reduce ours text and -J JSON parse (mpirun)",
    ] {
        let got = verdict(&v, name);
        assert!(got.starts_with("ok"), "{name}: {got}\n{text}");
    }
    // No -g runs of the other collectives; the failures would come before
    // the comparison.
    assert!(
        !v.iter().any(|(n, _)| n.contains("-g 2, every root")),
        "{v:#?}"
    );
    assert!(
        text.contains("parts in the order modes colls failures compare"),
        "{text}"
    );
    assert_eq!(v.len(), 11, "{v:#?}");
    assert!(text.contains("-r -1 -c 1"), "{text}");
    assert!(text.contains("2 ranks on one GPU"), "{text}");
    assert!(text.contains("== all "), "{text}");
    assert_rank_env(&log, "mpirun");
    for d in [&dir, &out, &log.parent().unwrap().to_path_buf()] {
        std::fs::remove_dir_all(d).unwrap();
    }
}

/// The one-GPU mode's failure paths (host backend): over the TCP launch
/// each process gets its own NCCL host id from its RANK, under mpirun from
/// its MPI rank, and a killed or stalled rank 1 is still reported.
#[test]
fn one_gpu_mode_failure_paths_set_each_rank_apart() {
    if !usable() {
        return;
    }
    let (dir, log) = env_log_bins("onegpu-tcp");
    let out = scratch("onegpu-tcp-out");
    let (code, text) = run_script(
        &[&dir],
        &[
            ("OUT", out.to_str().unwrap()),
            ("ONE_GPU_RANKS", "2"),
            ("PARTS", "failures"),
        ],
    );
    assert_eq!(code, 0, "{text}");
    let v = verdicts(&text);
    let mut names = vec![
        "TCP launch, 2 processes, checked",
        "TCP launch, kill -9 of rank 1 mid-run, -T 2",
        "TCP launch, SIGSTOP of rank 1 mid-run, -T 2",
    ];
    if have("mpirun") {
        names.extend([
            "mpirun -np 2, rank 1 killed (kill:1 hook), -T 2",
            "mpirun -np 2, kill -9 of rank 1 mid-run, -T 2",
            "mpirun -np 2, SIGSTOP of rank 1 mid-run, -T 2",
            "mpirun -np 2, rank 1 stalls (stall:1 hook), -T 2",
        ]);
    }
    for name in names {
        let got = verdict(&v, name);
        assert!(got.starts_with("ok"), "{name}: {got}\n{text}");
    }
    assert_rank_env(&log, "tcp");
    if have("mpirun") {
        assert_rank_env(&log, "mpirun");
    }
    for d in [&dir, &out, &log.parent().unwrap().to_path_buf()] {
        std::fs::remove_dir_all(d).unwrap();
    }
}
