//! Faults and bad input common to every tool (issue 25): arguments that are
//! not UTF-8, `--help` to a full stdout, a closed stdout, inputs that are
//! not regular files or are too large (read under a `ulimit -v`, so that a
//! regression fails the test and not the machine), counts and sizes the
//! machine cannot hold, launch variables that disagree, output files that
//! are devices or FIFOs; and random command lines for every binary. Every
//! case is bounded in time.
#![allow(clippy::disallowed_methods)] // a test reads and writes its files directly

mod cgroup_common;
mod nccltests_common;
use cgroup_common::Cgroup;
use nccltests_common::*;
use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const LIMIT: Duration = Duration::from_secs(30);

/// Every binary, with its documented bad-arguments status.
const TOOLS: [(&str, i32); 16] = [
    ("erdma-perf", 2),
    ("erdma-stat", 2),
    ("erdma-compare", 2),
    ("erdma-doctor", 3),
    ("erdma-cluster", 3),
    ("devinfo", 2),
    ("all_reduce_perf", 255),
    ("all_gather_perf", 255),
    ("reduce_scatter_perf", 255),
    ("broadcast_perf", 255),
    ("reduce_perf", 255),
    ("alltoall_perf", 255),
    ("gather_perf", 255),
    ("scatter_perf", 255),
    ("sendrecv_perf", 255),
    ("hypercube_perf", 255),
];

fn no_crash(e: &Ended, what: &str) {
    assert!(
        !e.err.contains("panicked") && !e.out.contains("panicked") && e.code >= 0 && e.code != 101,
        "{what}: {e:?}"
    );
}

fn temp_dir(tag: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("cli-faults-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).expect("temp dir");
    d
}

/// `c` run by bash under `ulimit -v KB`: a regression that reads or
/// allocates without bound fails there, not on the machine.
fn under_ulimit(c: &Command, kb: u64) -> Command {
    let mut sh = Command::new("bash");
    sh.arg("-c")
        .arg(format!("ulimit -v {kb}; exec \"$0\" \"$@\""))
        .arg(c.get_program())
        .args(c.get_args())
        .env("MALLOC_ARENA_MAX", "2");
    for (k, v) in c.get_envs() {
        match v {
            Some(v) => sh.env(k, v),
            None => sh.env_remove(k),
        };
    }
    if let Some(d) = c.get_current_dir() {
        sh.current_dir(d);
    }
    sh
}

/// A binary with arguments under `ulimit -v KB`, ended within [`LIMIT`].
fn limited(kb: u64, name: &str, args: &[&str], env: &[(&str, &str)]) -> Ended {
    Proc::spawn(under_ulimit(&command(name, args, env), kb)).wait(LIMIT)
}

fn mkfifo(p: &Path) {
    let c = std::ffi::CString::new(p.as_os_str().as_bytes()).unwrap();
    // SAFETY: a NUL-terminated path.
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0, "mkfifo");
}

#[test]
fn a_non_utf8_argument_is_each_tools_bad_arguments_status() {
    for (tool, status) in TOOLS {
        let o = command(tool, &["-d"], &[])
            .arg(OsStr::from_bytes(b"\xff"))
            .stdin(Stdio::null())
            .output()
            .expect("run");
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(status), "{tool}: {err}");
        assert_eq!(err.lines().count(), 1, "{tool}: {err}");
        assert!(
            err.contains("invalid argument '\u{fffd}': not valid UTF-8"),
            "{tool}: {err}"
        );
    }
}

#[test]
fn help_and_version_to_a_full_stdout_are_status_1() {
    for (tool, _) in TOOLS {
        for flag in ["--help", "--version"] {
            if flag == "--version" && tool.ends_with("_perf") {
                continue; // nccl-tests has no --version
            }
            let full = std::fs::OpenOptions::new()
                .write(true)
                .open("/dev/full")
                .expect("/dev/full");
            let o = command(tool, &[flag], &[])
                .stdout(full)
                .output()
                .expect("run");
            let err = String::from_utf8_lossy(&o.stderr);
            assert_eq!(o.status.code(), Some(1), "{tool} {flag}: {err}");
            assert_eq!(
                err, "cannot write the report to stdout: No space left on device (os error 28)\n",
                "{tool} {flag}"
            );
        }
    }
}

#[test]
fn a_report_to_a_closed_stdout_is_an_error() {
    for (tool, args, status) in [
        ("erdma-doctor", vec!["--json"], 4),
        ("erdma-doctor", vec![], 4),
        ("erdma-cluster", vec![], 4),
        // The collectives: a report that cannot be written is status 1.
        (
            "all_reduce_perf",
            vec!["--backend", "host", "-b", "8", "-e", "8", "-n", "1"],
            1,
        ),
    ] {
        let o = Command::new("bash")
            .arg("-c")
            .arg("exec \"$0\" \"$@\" >&-")
            .arg(bin(tool))
            .args(&args)
            .env("OMPI_MCA_plm", "isolated")
            .output()
            .expect("run");
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(status), "{tool} {args:?}: {err}");
        assert!(err.contains("stdout is closed"), "{err}");
    }
}

#[test]
fn compare_reads_only_regular_files_under_the_cap() {
    let dir = temp_dir("compare");
    let good =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/h200-all_reduce_perf-1G.json");
    let good = good.to_str().unwrap();
    let fifo = dir.join("fifo");
    mkfifo(&fifo);
    let zero_link = dir.join("zero.json");
    std::os::unix::fs::symlink("/dev/zero", &zero_link).unwrap();
    // Sparse: over the cap without using the disk.
    let huge = dir.join("huge.log");
    std::fs::File::create(&huge)
        .unwrap()
        .set_len(300 << 20)
        .unwrap();
    let cases: [(&Path, &str); 5] = [
        (
            Path::new("/dev/zero"),
            "is a character device, not a regular file",
        ),
        (&fifo, "is a FIFO, not a regular file"),
        (&dir, "is a directory, not a regular file"),
        (&zero_link, "is a character device, not a regular file"),
        (&huge, "is larger than 256 MiB, the most an input may hold"),
    ];
    for (p, msg) in cases {
        let p = p.to_str().unwrap();
        // 1 GB of address space: reading /dev/zero or the sparse file
        // whole would fail here instead of eating the machine.
        let e = limited(1_000_000, "erdma-compare", &[good, p], &[]);
        no_crash(&e, p);
        assert_eq!(e.code, 3, "{p}: {e:?}");
        assert!(
            e.err.starts_with(&format!("erdma-compare: {p} {msg}")) && e.err.lines().count() == 1,
            "{p}: {e:?}"
        );
        assert!(e.secs < bound::prompt_s(), "{p}: {e:?}");
    }
    std::fs::remove_dir_all(dir).unwrap();
}

#[test]
fn a_json_document_over_the_document_cap_is_refused_not_parsed() {
    // Issue 33 row 5: a JSON document under the 256 MiB cap of logs was
    // parsed whole (3.5 GB for 200 MB; an abort under a ulimit). Documents
    // have a 16 MiB cap: 40 MB of `0,` (20 M values, ~1.3 GB parsed) must
    // be refused, in one line, under 1 GB of address space.
    let dir = temp_dir("bigjson");
    let big = dir.join("big.json");
    let mut text = String::with_capacity(41 << 20);
    text.push_str("{\"results\": [");
    while text.len() < 40 << 20 {
        text.push_str("0,");
    }
    text.push_str("0]}");
    std::fs::write(&big, text).unwrap();
    let p = big.to_str().unwrap();
    let e = limited(1_000_000, "erdma-compare", &[p], &[]);
    no_crash(&e, p);
    assert_eq!(e.code, 3, "{e:?}");
    assert!(
        e.err.starts_with(&format!(
            "erdma-compare: {p} is larger than 16 MiB, the most an input may hold"
        )) && e.err.lines().count() == 1,
        "{e:?}"
    );
    std::fs::remove_dir_all(dir).unwrap();
}

/// A nccl-tests log of `-N` cycles: the all_reduce table repeated to
/// `bytes`.
fn long_log(path: &Path, bytes: usize) {
    use std::fmt::Write;
    let mut text = String::from(
        "# nThread 1 nGpus 1 minBytes 8 maxBytes 134217728 step: 2(factor) warmup iters: 5 iters: 20 agg iters: 1 validation: 1 graph: 0\n\
         #\n\
         #                                                              out-of-place                       in-place\n\
         #       size         count      type   redop    root     time   algbw   busbw #wrong     time   algbw   busbw #wrong\n\
         #        (B)    (elements)                               (us)  (GB/s)  (GB/s)            (us)  (GB/s)  (GB/s)\n",
    );
    let mut block = String::new();
    for i in 3..=27 {
        let size = 1u64 << i;
        let bw = size as f64 / 10.5e3;
        writeln!(
            block,
            "{size:>12}  {:>12}     float     sum      -1    10.50  {bw:6.2}  {bw:6.2}      0    10.30  {bw:6.2}  {bw:6.2}      0",
            size / 4
        )
        .unwrap();
    }
    loop {
        text.push_str(&block);
        if text.len() >= bytes {
            break;
        }
    }
    text.push_str("# Out of bounds values : 0 OK\n# Avg bus bandwidth    : 1.234\n#\n");
    std::fs::write(path, text).unwrap();
}

#[test]
fn compare_of_a_long_log_stays_bounded() {
    let dir = temp_dir("long");
    let small = dir.join("small.log");
    let big = dir.join("big.log");
    long_log(&small, 1);
    const BIG: usize = 8 << 20;
    long_log(&big, BIG);
    // What the tool takes for a tiny log, then the same plus twice the
    // file: holding every row (~55 bytes of text, ~300 bytes as a Row;
    // 6x the file) cannot fit there, merging them as they are read does.
    let peak = |p: &Path| -> u64 {
        let o = Command::new("bash")
            .arg("-c")
            .arg("\"$0\" \"$@\" >/dev/null & pid=$!; peak=0; while kill -0 $pid 2>/dev/null; do v=$(awk '/VmHWM/{print $2}' /proc/$pid/status 2>/dev/null); [ -n \"$v\" ] && peak=$v; sleep 0.05; done; wait $pid; echo \"$? $peak\"")
            .arg(bin("erdma-compare"))
            .arg(p)
            .output()
            .expect("run");
        let text = String::from_utf8_lossy(&o.stdout);
        let mut it = text.split_whitespace();
        assert_eq!(it.next(), Some("0"), "{text}");
        it.next().and_then(|v| v.parse().ok()).unwrap_or(0)
    };
    let base_kb = peak(&small);
    let big_kb = peak(&big);
    let file_kb = (BIG / 1024) as u64;
    assert!(
        big_kb < base_kb + file_kb * 2,
        "peak RSS {big_kb} kB for a {file_kb} kB log (tiny log: {base_kb} kB)"
    );
    std::fs::remove_dir_all(dir).unwrap();
}

#[test]
fn cluster_baseline_must_be_a_directory() {
    let dir = temp_dir("baseline");
    let file = dir.join("f.json");
    std::fs::write(&file, "{}").unwrap();
    for (b, msg) in [
        ("/nonexistent-baseline", "No such file or directory"),
        (file.to_str().unwrap(), "not a directory"),
    ] {
        let e = Proc::spawn(command(
            "erdma-cluster",
            &["--pairs", "--baseline", b],
            &[("OMPI_MCA_plm", "isolated")],
        ))
        .wait(LIMIT);
        no_crash(&e, b);
        assert_eq!(e.code, 3, "{b}: {e:?}");
        assert!(
            e.err
                .starts_with(&format!("erdma-cluster: --baseline {b}: "))
                && e.err.contains(msg),
            "{e:?}"
        );
        assert_eq!(e.err.lines().count(), 1, "{e:?}");
    }
    std::fs::remove_dir_all(dir).unwrap();
}

/// erdma-cluster on this host alone with `--out DIR`; `fsize_kb`: under
/// `ulimit -f` (SIGXFSZ ignored, so a write over it fails as on a full
/// disk). Open MPI keeps its data in memory (`PMIX_MCA_gds=hash`), not in
/// files the limit would stop.
fn cluster_out(out: &Path, fsize_kb: Option<u64>) -> Ended {
    let c = command(
        "erdma-cluster",
        &["--skip", "gpu", "--out", out.to_str().unwrap()],
        &[("OMPI_MCA_plm", "isolated"), ("PMIX_MCA_gds", "hash")],
    );
    let Some(kb) = fsize_kb else {
        return Proc::spawn(c).wait(LIMIT);
    };
    let sh = cgroup_common::in_shell(&format!("trap '' XFSZ; ulimit -f {kb};"), &c);
    Proc::spawn(sh).wait(LIMIT)
}

/// The names in `dir` that are temporary files of a write.
fn temporaries(dir: &Path) -> Vec<String> {
    std::fs::read_dir(dir)
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(".tmp") || n.starts_with(".write-check"))
        .collect()
}

#[test]
fn cluster_out_is_checked_first_and_replaced_whole() {
    // Issue 33 row 9: --out checked before the first stage; each file
    // written to a temporary file and renamed: a link at its name is
    // replaced (its target kept), a failed write keeps the earlier report.
    let dir = temp_dir("out");
    let file = dir.join("a-file");
    std::fs::write(&file, "").unwrap();
    let e = cluster_out(&file, None);
    no_crash(&e, "--out a file");
    assert_eq!(e.code, 4, "{e:?}");
    assert!(
        e.err.contains(&format!(
            "erdma-cluster: --out {}: not a directory: name a directory",
            file.display()
        )) && e.out.is_empty(),
        "checked before the first stage: {e:?}"
    );
    let out = dir.join("out");
    let e = cluster_out(&out, None);
    no_crash(&e, "--out");
    assert!([0, 1, 2].contains(&e.code), "{e:?}");
    let outside = dir.join("outside");
    std::fs::write(&outside, "keep").unwrap();
    std::fs::remove_file(out.join("report.html")).unwrap();
    std::os::unix::fs::symlink(&outside, out.join("report.html")).unwrap();
    let e = cluster_out(&out, None);
    assert!([0, 1, 2].contains(&e.code), "{e:?}");
    assert_eq!(std::fs::read_to_string(&outside).unwrap(), "keep");
    let html = std::fs::symlink_metadata(out.join("report.html")).unwrap();
    assert!(html.is_file(), "the link replaced by the report");
    let before = std::fs::read(out.join("cluster.json")).unwrap();
    // 1 KiB: every document is larger, so each write fails part way.
    let e = cluster_out(&out, Some(1));
    no_crash(&e, "ulimit -f");
    assert_eq!(e.code, 4, "{e:?}");
    assert!(
        e.err
            .lines()
            .any(|l| l.starts_with("erdma-cluster: writing ")
                && l.contains("File too large")
                && l.ends_with("the earlier file is kept")),
        "{e:?}"
    );
    assert_eq!(std::fs::read(out.join("cluster.json")).unwrap(), before);
    assert!(temporaries(&out).is_empty(), "{:?}", temporaries(&out));
    std::fs::remove_dir_all(dir).unwrap();
}

#[test]
fn counts_the_machine_cannot_hold_are_refused_first() {
    for (name, args) in [
        ("all_reduce_perf", ["-g", "100000000"]),
        ("all_reduce_perf", ["-t", "100000000"]),
        ("all_reduce_perf", ["-g", "2147483647"]),
        ("reduce_perf", ["-g", "99999999999"]),
        ("all_reduce_perf", ["-t", "300000"]),
        // Issue 33 row 13: checked against the CPUs, not threads-max.
        ("all_reduce_perf", ["-t", "20000"]),
    ] {
        let mut a = vec!["--backend", "host", "-b", "8", "-e", "8", "-n", "1"];
        a.extend(args);
        let e = limited(4_000_000, name, &a, &[]);
        no_crash(&e, &format!("{a:?}"));
        assert_eq!(e.code, 255, "{a:?}: {e:?}");
        assert!(e.err.starts_with("invalid number of threads ("), "{e:?}");
        assert!(e.secs < bound::prompt_s(), "{e:?}");
    }
}

#[test]
fn threads_are_checked_against_the_cpus() {
    let cpus = std::thread::available_parallelism().unwrap().get();
    let over = (cpus * 4 + 1).to_string();
    let e = limited(
        4_000_000,
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
            "-t",
            &over,
        ],
        &[],
    );
    no_crash(&e, "-t");
    assert_eq!(e.code, 255, "{e:?}");
    assert!(
        e.err.starts_with(&format!(
            "invalid number of threads ({over}): this process may use {cpus} CPUs, at most {} threads",
            cpus * 4
        )),
        "{e:?}"
    );
    assert!(e.secs < 10.0, "{e:?}");
}

#[test]
fn a_json_document_keeps_only_the_variables_that_matter() {
    // Issue 33 row 12: -J documents (erdma-cluster's nccl-*.json) held the
    // whole environment, tokens included.
    let dir = temp_dir("env");
    let j = dir.join("run.json");
    let e = Proc::bench(
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
            "-J",
            j.to_str().unwrap(),
        ],
        &[
            ("MY_SERVICE_TOKEN", "s3cr3t"),
            ("NCCL_DEBUG", "WARN"),
            ("UNRELATED", "x"),
        ],
    )
    .wait(LIMIT);
    assert_eq!(e.code, 0, "{e:?}");
    let doc: serde_json::Value = serde_json::from_slice(&std::fs::read(&j).unwrap()).unwrap();
    let env: Vec<&str> = doc["env"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|v| v.as_str())
        .collect();
    assert!(env.contains(&"NCCL_DEBUG=WARN"), "{env:?}");
    assert!(
        !env.iter()
            .any(|v| v.contains("s3cr3t") || v.starts_with("UNRELATED=") || v.starts_with("HOME=")),
        "{env:?}"
    );
    std::fs::remove_dir_all(dir).unwrap();
}

#[test]
fn buffers_over_available_memory_exit_2_before_allocating() {
    let info = std::fs::read_to_string("/proc/meminfo").unwrap();
    let avail_kb: u64 = info
        .lines()
        .find_map(|l| l.strip_prefix("MemAvailable:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .expect("MemAvailable");
    // Each of the 3 buffers (send, receive, expected) 40% of what is free:
    // they do not fit together, yet each would be granted under overcommit.
    let size = format!("{}", avail_kb * 1024 * 2 / 5);
    let e = limited(
        4_000_000,
        "all_reduce_perf",
        &["--backend", "host", "-b", &size, "-e", &size, "-n", "1"],
        &[],
    );
    no_crash(&e, "sizes");
    assert_eq!(e.code, 2, "{e:?}");
    assert!(
        e.out.contains(": Test host memory failure malloc(")
            && e.out
                .contains("cannot hold the buffers of its ranks (MemAvailable "),
        "{e:?}"
    );
}

#[test]
fn memory_checks_read_the_cgroup_limit_and_count_every_rank_of_the_host() {
    // Issue 33 row 6: in a 1 GiB cgroup the check saw the host's free
    // memory and the kernel killed the run (137) without a word.
    let Some(cg) = Cgroup::new("room", 1 << 30) else {
        return;
    };
    let c = command(
        "all_reduce_perf",
        &["--backend", "host", "-b", "700M", "-e", "700M", "-n", "1"],
        &[],
    );
    let e = Proc::spawn(cg.wrap(&c)).wait(LIMIT);
    no_crash(&e, "host backend in a cgroup");
    assert_eq!(e.code, 2, "{e:?}");
    assert!(
        e.out
            .contains("cannot hold the buffers of its ranks (the memory cgroup "),
        "{e:?}"
    );
    // Two processes of 2 x 200 MB and the MPI backend's staged copies:
    // each fits alone, both do not; every rank of the host is counted.
    if !cfg!(feature = "mpi") {
        return;
    }
    let Some(mut c) = mpirun() else {
        return;
    };
    c.args(["-np", "2"]).arg(bin("all_reduce_perf")).args([
        "--backend",
        "mpi",
        "-b",
        "200M",
        "-e",
        "200M",
        "-n",
        "1",
        "-c",
        "0",
    ]);
    let e = Proc::spawn(cg.wrap(&c)).wait(LIMIT);
    assert_eq!(e.code, 2, "{e:?}");
    assert!(
        e.out
            .contains("of staged copies on each of this host's 2 rank(s)"),
        "{e:?}"
    );
}

#[test]
fn mpi_backend_memory_does_not_grow_with_iterations() {
    // Issue 33 row 1: one staged copy per in-place collective in flight,
    // -n 1000 of 4 MB took 4.1 GB per rank. In 768 MiB, 2 ranks of -n 80
    // of 8 MB: 1.3 GB of copies before the bounded pool, ~300 MB with it.
    if !cfg!(feature = "mpi") {
        return;
    }
    let Some(cg) = Cgroup::new("pool", 768 << 20) else {
        return;
    };
    let Some(mut c) = mpirun() else {
        return;
    };
    c.args(["-np", "2"]).arg(bin("all_reduce_perf")).args([
        "--backend",
        "mpi",
        "-b",
        "8M",
        "-e",
        "8M",
        "-n",
        "80",
        "-w",
        "1",
        "-c",
        "0",
    ]);
    let e = Proc::spawn(cg.wrap(&c)).wait(Duration::from_secs(300));
    assert_eq!(e.code, 0, "killed in the cgroup? {e:?}");
    assert!(e.out.contains("# Out of bounds values : 0 OK"), "{e:?}");
}

#[test]
fn launch_variables_that_disagree_exit_6() {
    let e = Proc::bench(
        "all_reduce_perf",
        &["--backend", "host", "-b", "8", "-e", "8", "-n", "1"],
        &[("WORLD_SIZE", "2")],
    )
    .wait(LIMIT);
    assert_eq!(e.code, 6, "{e:?}");
    assert!(e.out.contains("WORLD_SIZE is set but RANK is not"), "{e:?}");
    let e = Proc::bench(
        "all_reduce_perf",
        &[
            "--backend",
            "mpi",
            "-b",
            "8",
            "-e",
            "8",
            "-n",
            "1",
            "-T",
            "10",
        ],
        &[
            ("RANK", "0"),
            ("WORLD_SIZE", "2"),
            ("OMPI_MCA_plm", "isolated"),
        ],
    )
    .wait(LIMIT);
    assert_eq!(e.code, 6, "{e:?}");
    assert!(
        e.out.contains(
            "the environment says rank 0 of 2 (RANK/WORLD_SIZE) but MPI says rank 0 of 1"
        ),
        "{e:?}"
    );
}

#[test]
fn erdma_cluster_refuses_launcher_variables_mpi_denies_with_exit_6() {
    // Issue 33 row 7: each task ran a one-host job and passed.
    for (env, speaks) in [
        (
            &[
                ("RANK", "0"),
                ("WORLD_SIZE", "2"),
                ("MASTER_ADDR", "127.0.0.1"),
            ][..],
            true,
        ),
        (&[("RANK", "1"), ("WORLD_SIZE", "2")][..], false),
        (&[("SLURM_PROCID", "0"), ("SLURM_NTASKS", "2")][..], true),
    ] {
        let mut all = env.to_vec();
        all.push(("OMPI_MCA_plm", "isolated"));
        let e = Proc::spawn(command("erdma-cluster", &["--pairs"], &all)).wait(LIMIT);
        no_crash(&e, &format!("{env:?}"));
        assert_eq!(e.code, 6, "{env:?}: {e:?}");
        let lines: Vec<&str> = e
            .err
            .lines()
            .filter(|l| l.starts_with("erdma-cluster: "))
            .collect();
        if speaks {
            assert_eq!(lines.len(), 1, "{e:?}");
            assert!(
                lines[0].contains("but MPI says rank 0 of 1: start erdma-cluster with mpirun"),
                "{e:?}"
            );
        } else {
            assert!(lines.is_empty(), "{e:?}");
        }
        assert!(e.out.is_empty(), "no report: {e:?}");
    }
}

#[test]
fn device_and_fifo_outputs_are_written_in_place() {
    let dir = temp_dir("special");
    let e = Proc::bench(
        "all_reduce_perf",
        &[
            "--backend",
            "host",
            "-b",
            "8",
            "-e",
            "64",
            "-n",
            "1",
            "-w",
            "0",
            "-J",
            "/dev/null",
            "--csv",
            "/dev/null",
        ],
        &[],
    )
    .wait(LIMIT);
    assert_eq!(e.code, 0, "{e:?}");
    assert!(!Path::new("/dev/null.0").exists());
    // A FIFO with a reader gets the CSV through it. The read end is open
    // before the run starts (a reader thread that had not opened it yet on a
    // busy machine made the run's check see none: exit 6), non-blocking so
    // that opening it does not wait for the writer; the thread reads until
    // the run has ended and the pipe is drained.
    let fifo = dir.join("rows.csv");
    mkfifo(&fifo);
    let ended = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let reader = {
        use std::io::Read;
        use std::os::unix::fs::OpenOptionsExt;
        let mut f = std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_NONBLOCK)
            .open(&fifo)
            .unwrap();
        let ended = ended.clone();
        std::thread::spawn(move || {
            let mut text = Vec::new();
            let mut buf = [0u8; 4096];
            loop {
                let done = ended.load(std::sync::atomic::Ordering::Acquire);
                match f.read(&mut buf) {
                    Ok(0) | Err(_) if done => break,
                    Ok(0) | Err(_) => std::thread::sleep(Duration::from_millis(5)),
                    Ok(n) => text.extend_from_slice(&buf[..n]),
                }
            }
            String::from_utf8(text).unwrap()
        })
    };
    let e = Proc::bench(
        "all_reduce_perf",
        &[
            "--backend",
            "host",
            "-b",
            "8",
            "-e",
            "64",
            "-n",
            "1",
            "-w",
            "0",
            "--csv",
            fifo.to_str().unwrap(),
        ],
        &[],
    )
    .wait(LIMIT);
    ended.store(true, std::sync::atomic::Ordering::Release);
    assert_eq!(e.code, 0, "{e:?}");
    let text = reader.join().unwrap();
    assert!(
        text.starts_with("collective,") && text.lines().count() > 2,
        "{text}"
    );
    // Without a reader: an error naming it, not a wait.
    let e = Proc::bench(
        "all_reduce_perf",
        &[
            "--backend",
            "host",
            "-b",
            "8",
            "-e",
            "64",
            "-n",
            "1",
            "--csv",
            fifo.to_str().unwrap(),
        ],
        &[],
    )
    .wait(LIMIT);
    assert_ne!(e.code, 0, "{e:?}");
    assert!(e.out.contains("a FIFO without a reader"), "{e:?}");
    assert_eq!(
        std::fs::read_dir(&dir).unwrap().count(),
        1,
        "nothing but the FIFO"
    );
    std::fs::remove_dir_all(dir).unwrap();
}

/// A small seeded generator (xorshift): the same cases on every run.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    fn pick<'a, T>(&mut self, v: &'a [T]) -> &'a T {
        &v[(self.next() % v.len() as u64) as usize]
    }
}

/// Option names each tool knows (and some it does not).
fn vocabulary(tool: &str) -> &'static [&'static str] {
    match tool {
        // No test name: a valid one would wait for a peer on a host with
        // a device.
        "erdma-perf" => &[
            "-d",
            "-i",
            "-s",
            "-n",
            "-q",
            "-x",
            "-a",
            "-F",
            "--report_gbits",
            "-D",
            "--json",
            "--csv",
            "-p",
            "--use_cuda",
            "-m",
            "-t",
        ],
        "erdma-stat" => &["-d", "-i", "--json", "-p", "--bogus"],
        "erdma-compare" => &[
            "--baseline",
            "--fail-below",
            "--plot",
            "--json",
            "--csv",
            "-",
        ],
        "erdma-doctor" => &["--json", "--skip", "--list", "--print-env", "--nope"],
        "erdma-cluster" => &["--skip", "--pairs", "--baseline", "--fail-below", "--json"],
        "devinfo" => &["-d", "-i", "-v", "-l", "--json"],
        // Not the counts that make a valid run long (-n, -w, -m, -N, -t,
        // -g: their limits have their own tests).
        _ => &[
            "-b",
            "-e",
            "-f",
            "-o",
            "-d",
            "-r",
            "-z",
            "-a",
            "-u",
            "-T",
            "-M",
            "-C",
            "-S",
            "-p",
            "-J",
            "--csv",
            "--backend",
            "-x",
            "-Y",
        ],
    }
}

/// One random argument: an option, a number of any size or sign, a word,
/// or random bytes.
fn argument(rng: &mut Rng, tool: &str) -> std::ffi::OsString {
    use std::os::unix::ffi::OsStringExt;
    match rng.next() % 6 {
        0 | 1 => (*rng.pick(vocabulary(tool))).into(),
        2 => rng
            .pick(&[
                "0",
                "-1",
                "1",
                "8",
                "1K",
                "64",
                "1e30",
                "99999999999",
                "nan",
                "2147483648",
            ])
            .to_string()
            .into(),
        3 => rng
            .pick(&["host", "all", "sum", "float", "x", "", "--", "/dev/zero"])
            .to_string()
            .into(),
        _ => {
            let n = rng.next() % 12;
            std::ffi::OsString::from_vec((0..n).map(|_| (rng.next() & 0xff) as u8).collect())
        }
    }
}

#[test]
fn random_command_lines_never_crash_or_hang() {
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    let dir = temp_dir("random");
    let t0 = Instant::now();
    for (tool, _) in TOOLS {
        // erdma-cluster starts MPI on each run: fewer cases.
        let cases = if tool == "erdma-cluster" { 3 } else { 8 };
        for _ in 0..cases {
            let n = 1 + rng.next() % 6;
            let args: Vec<std::ffi::OsString> = (0..n).map(|_| argument(&mut rng, tool)).collect();
            let mut c = command(tool, &[], &[("OMPI_MCA_plm", "isolated")]);
            // Whatever file a random option names lands here.
            c.current_dir(&dir);
            if tool.ends_with("_perf") {
                // Whatever else comes, a run stays small and bounded.
                c.args(["--backend", "host", "-b", "8", "-e", "1K", "-T", "5"]);
            }
            c.args(&args);
            let sh = under_ulimit(&c, 4_000_000);
            // -T 5 bounds the collectives; the others end at once.
            let e = Proc::spawn(sh).wait(bound::after(5));
            let what = format!("{tool} {args:?}");
            no_crash(&e, &what);
            assert!(e.secs < bound::after_s(5), "{what}: {e:?}");
        }
    }
    // Each case is bounded above; the whole, for the record.
    eprintln!("fuzzed option sets: {:.1} s", t0.elapsed().as_secs_f64());
    std::fs::remove_dir_all(dir).unwrap();
}
