//! Stage 3 of erdma-cluster (`--nccl`): the collectives' driver (the
//! all_reduce_perf work-alike) in-process, in the same job, each rank
//! driving all GPUs of its host (`-g N`): (a) every host alone, its ranks
//! only (a communicator split by host), so that a slow NVLink or PCIe
//! shows as a host problem and is not blamed on the network; (b) all ranks
//! together. On hosts without GPUs the same stages run with the MPI backend
//! on host memory and the report says that they measure MPI, not NCCL.
//!
//! The MPI part (gathering the GPU counts and the runs) is the binary's;
//! this module plans the runs, runs one rank's share and renders the stage.

use std::collections::BTreeMap;

use serde_json::{Value, json};

use crate::doctor::Status;
use crate::nccltests::colls::{self, Collective};

/// The short sweep of `--nccl-args` (the guide's, cut to 6 sizes ending at
/// 1 GiB), data checked.
pub const DEFAULT_ARGS: &str = "-b 1M -e 1G -f 4 -w 2 -n 10 -c 1";

/// The largest size the default sweep takes on host memory (the `mpi` and
/// `host` backends), however much memory there is: each size x4 takes 4x
/// as long, and 64 MiB already leaves the caches (about 450 MB a rank
/// with the MPI backend's staged copies).
pub const HOST_MAX_BYTES: usize = 64 << 20;

/// The share of a host's room ([`crate::nccltests::alloc::room`]:
/// MemAvailable, or its memory cgroup's room when less) that the default
/// sweep's buffers may take, all ranks of the host together: 1/2. The rest
/// is for the processes themselves, MPI's shared memory and whatever else
/// the host runs; the collectives' own check then still passes.
pub const ROOM_SHARE_DIVISOR: u64 = 2;

/// What each rank holds besides its buffers while a run lasts (its
/// communicator, MPI's buffers for it), counted with them when sizes are
/// chosen.
pub const RANK_OVERHEAD_BYTES: usize = 16 << 20;

/// The largest sizes (`-e`) the default sweep on host memory tries, the
/// largest first; `-b` is 1 MiB, or `-e` when smaller.
const HOST_CANDIDATES: [usize; 12] = [
    64 << 20,
    16 << 20,
    4 << 20,
    1 << 20,
    256 << 10,
    64 << 10,
    16 << 10,
    4 << 10,
    1 << 10,
    256,
    64,
    16,
];

/// The sizes a stage runs: its options, the sentence that says how they
/// were chosen (None: given by `--nccl-args`), and why it cannot run at
/// all (no size fits some host).
#[derive(Debug, Clone, PartialEq)]
pub struct Fit {
    /// The benchmark's options, sizes included.
    pub args: String,
    /// `sizes 1M..4M chosen for backend mpi and 1.20 GB available (...)`.
    pub sizes: Option<String>,
    /// Why the stage is skipped.
    pub skip: Option<String>,
}

/// `4194304` -> `4M` (the collectives' own size suffixes).
fn size_word(b: usize) -> String {
    match b {
        b if b >= 1 << 30 && b % (1 << 30) == 0 => format!("{}G", b >> 30),
        b if b >= 1 << 20 && b % (1 << 20) == 0 => format!("{}M", b >> 20),
        b if b >= 1 << 10 && b % (1 << 10) == 0 => format!("{}K", b >> 10),
        b => format!("{b}B"),
    }
}

/// The sizes of the stage on `backend`: `--nccl-args` when given; on NCCL
/// [`DEFAULT_ARGS`] (the driver lowers `-e` to what a GPU holds); on host
/// memory the largest `-e` (at most [`HOST_MAX_BYTES`]) whose buffers,
/// staged copies and [`RANK_OVERHEAD_BYTES`], for every rank of a host,
/// fit in 1/[`ROOM_SHARE_DIVISOR`] of that host's room, on every host:
/// the same memory check the collectives make
/// ([`crate::nccltests::alloc::check_fits`]). `rooms[i]`: the bytes rank
/// i's host may still take, as rank i saw it (None: unknown);
/// `ranks_on_host[i]`: the ranks sharing rank i's host.
pub fn fit(a: &NcclArgs, backend: &str, ranks_on_host: &[usize], rooms: &[Option<u64>]) -> Fit {
    use crate::nccltests::alloc::{Room, check_fits, host_holds};
    use crate::nccltests::options::BackendKind;
    if a.nccl_args != DEFAULT_ARGS {
        return Fit {
            args: a.nccl_args.clone(),
            sizes: None,
            skip: None,
        };
    }
    let kind = match backend {
        "mpi" => BackendKind::Mpi,
        "host" => BackendKind::Host,
        _ => {
            return Fit {
                args: DEFAULT_ARGS.into(),
                sizes: Some(format!(
                    "sizes 1M..1G chosen for backend {backend} (GPU memory: the collectives lower -e to what each GPU holds)"
                )),
                skip: None,
            };
        }
    };
    let args_of = |e: usize| {
        format!(
            "-b {} -e {} -f 4 -w 2 -n 10 -c 1",
            size_word(e.min(1 << 20)),
            size_word(e)
        )
    };
    let range = |e: usize| {
        let b = e.min(1 << 20);
        if b == e {
            format!("size {}", size_word(e))
        } else {
            format!("sizes {}..{}", size_word(b), size_word(e))
        }
    };
    // Each rank's host: its room (as that rank saw it) and its ranks.
    let hosts: Vec<(usize, u64, usize)> = rooms
        .iter()
        .zip(ranks_on_host)
        .enumerate()
        .filter_map(|(r, (room, &n))| Some((r, (*room)?, n.max(1))))
        .collect();
    let fits = |e: usize| {
        let (buffers, staged) = host_holds(kind, e, true);
        hosts.iter().all(|&(_, room, n)| {
            let share = Room {
                bytes: room / ROOM_SHARE_DIVISOR,
                source: String::new(),
            };
            check_fits(e, buffers, staged + RANK_OVERHEAD_BYTES, n, Some(&share)).is_ok()
        })
    };
    // The host with the least room per rank says how much there was.
    let least = hosts
        .iter()
        .min_by_key(|&&(_, room, n)| room / n as u64)
        .copied();
    let Some((rank, room, n)) = least else {
        return Fit {
            args: args_of(HOST_MAX_BYTES),
            sizes: Some(format!(
                "{} chosen for backend {backend} (the memory available is unknown)",
                range(HOST_MAX_BYTES)
            )),
            skip: None,
        };
    };
    let gb = room as f64 / 1e9;
    match HOST_CANDIDATES.into_iter().find(|&e| fits(e)) {
        Some(e) => Fit {
            args: args_of(e),
            sizes: Some(format!(
                "{} chosen for backend {backend} and {gb:.2} GB available (rank {rank}'s host, for its {n} rank(s); the buffers take at most 1/{ROOM_SHARE_DIVISOR}; give --nccl-args for others)",
                range(e)
            )),
            skip: None,
        },
        None => {
            let smallest = HOST_CANDIDATES[HOST_CANDIDATES.len() - 1];
            let (buffers, staged) = host_holds(kind, smallest, true);
            let need = (smallest * buffers + staged + RANK_OVERHEAD_BYTES) * n;
            Fit {
                args: args_of(smallest),
                sizes: None,
                skip: Some(format!(
                    "the NCCL stage skipped: it cannot fit at any size on backend {backend}: {gb:.2} GB available on rank {rank}'s host for its {n} rank(s), and even {} needs {need} bytes in 1/{ROOM_SHARE_DIVISOR} of it; free memory there or raise its memory cgroup's limit",
                    range(smallest)
                )),
            }
        }
    }
}

/// The collectives `--nccl-tests` may name.
pub const TESTS: [&str; 10] = [
    "all_reduce",
    "all_gather",
    "reduce_scatter",
    "broadcast",
    "reduce",
    "alltoall",
    "gather",
    "scatter",
    "sendrecv",
    "hypercube",
];

/// The options of the NCCL stage (part of erdma-cluster's command line).
#[derive(Debug, Clone, clap::Args)]
pub struct NcclArgs {
    /// Also run the collectives (all_reduce_perf in-process): every host
    /// alone, then all hosts together (after the pairs).
    #[arg(long)]
    pub nccl: bool,
    /// Also run all_reduce between the hosts pair by pair (the pair
    /// stage's schedule and --budget, communicators split per round):
    /// busbw per pair in the matrix, on a rail named "nccl".
    #[arg(long)]
    pub nccl_pairs: bool,
    /// The collectives to run, each as its *_perf benchmark.
    #[arg(long, value_name = "T1,T2,...", value_delimiter = ',', default_value = "all_reduce",
          value_parser = TESTS)]
    pub nccl_tests: Vec<String>,
    /// The benchmark's options (sizes, iterations, -c); -g, -J, -T and
    /// --backend are set by erdma-cluster.
    #[arg(long, value_name = "OPTIONS", default_value = DEFAULT_ARGS, allow_hyphen_values = true)]
    pub nccl_args: String,
    /// The collectives' library: auto is NCCL when every rank sees a GPU,
    /// else MPI on host memory.
    #[arg(long, value_name = "BACKEND", default_value = "auto",
          value_parser = ["auto", "nccl", "mpi", "host"])]
    pub nccl_backend: String,
    /// Seconds each run of the stage (one collective on a host, or on all)
    /// may take in all, whatever --nccl-args asks: past it the run stops,
    /// its stage fails as out of time naming its ranks (the job's exit
    /// status 2) and the next run starts. Default: 5 x --timeout.
    #[arg(long, value_name = "SECS", value_parser = clap::value_parser!(u64).range(1..=604_800))]
    pub nccl_deadline: Option<u64>,
}

/// `--nccl-deadline`'s default: this many times `--timeout`.
pub const DEADLINE_TIMEOUTS: u64 = 5;

/// The total deadline of each run, in seconds: `--nccl-deadline`, or
/// [`DEADLINE_TIMEOUTS`] x `timeout_s` (`--timeout`).
pub fn deadline_s(a: &NcclArgs, timeout_s: u64) -> u64 {
    a.nccl_deadline
        .unwrap_or_else(|| timeout_s.saturating_mul(DEADLINE_TIMEOUTS))
}

/// The collective of a `--nccl-tests` name (`all_reduce` -> AllReduce).
pub fn collective(name: &str) -> Option<&'static Collective> {
    let want = name.replace('_', "");
    colls::ALL
        .into_iter()
        .find(|c| c.name.eq_ignore_ascii_case(&want))
}

/// Options erdma-cluster sets itself (or that would take the run from
/// it: -t threads, --bootstrap), by their short name: the collectives' own
/// parser ([`crate::nccltests::options::options_in`]) names each however
/// it is spelled (`-g2`, `--ngpus=2`, `--ngp 2`).
const OWN: [&str; 6] = ["-g", "-J", "-T", "--backend", "-t", "--bootstrap"];

/// `--nccl-args` checked: no option erdma-cluster sets, and the benchmark's
/// own parser accepts the rest (said once by rank 0 as a usage error).
pub fn check(a: &NcclArgs) -> Result<(), String> {
    let words: Vec<String> = a.nccl_args.split_whitespace().map(String::from).collect();
    let (opts, operands) = crate::nccltests::options::options_in(&words)
        .map_err(|e| format!("--nccl-args '{}': {e}", a.nccl_args))?;
    if let Some((name, _)) = opts.iter().find(|(n, _)| OWN.contains(&n.as_str())) {
        return Err(format!(
            "--nccl-args: {name} is set by erdma-cluster (-g: the host's GPUs, -J: under --out, \
             -T: --timeout, --backend: --nccl-backend, -t and --bootstrap: one thread per rank \
             over MPI); leave it out"
        ));
    }
    if let Some(w) = operands.first() {
        return Err(format!(
            "--nccl-args '{}': '{w}' is not an option of the collectives: leave it out",
            a.nccl_args
        ));
    }
    let argv = argv(&a.nccl_args, "all_reduce", "mpi", 1, None, 60);
    let kind = crate::nccltests::options::prescan_backend(&argv);
    let (features, version) = crate::nccltests::backend::probe_features(kind);
    let mut printed = crate::nccltests::options::Printed::default();
    match crate::nccltests::options::parse(&argv, features, version, &mut printed) {
        // -N 0 repeats for ever: a stage must end.
        crate::nccltests::options::Parsed::Run(o) if o.run_cycles == 0 => Err(format!(
            "--nccl-args '{}': -N 0 runs for ever and a stage must end: give -N 1 or more",
            a.nccl_args
        )),
        crate::nccltests::options::Parsed::Run(_) => Ok(()),
        crate::nccltests::options::Parsed::Exit(_) => {
            let why = printed
                .stderr
                .lines()
                .chain(printed.stdout.lines())
                .find(|l| !l.trim().is_empty())
                .unwrap_or("not a run")
                .trim()
                .to_owned();
            Err(format!("--nccl-args '{}': {why}", a.nccl_args))
        }
    }
}

/// The benchmark's command line for one run with its options `args`
/// ([`Plan::args`]).
pub fn argv(
    args: &str,
    test: &str,
    backend: &str,
    gpus: usize,
    json: Option<&str>,
    timeout_s: u64,
) -> Vec<String> {
    let mut v = vec![format!("{test}_perf")];
    v.extend(args.split_whitespace().map(String::from));
    v.extend([
        "-g".into(),
        gpus.to_string(),
        "--backend".into(),
        backend.into(),
    ]);
    v.extend(["-T".into(), timeout_s.min(i32::MAX as u64).to_string()]);
    if let Some(j) = json {
        v.extend(["-J".into(), j.into()]);
    }
    v
}

/// Which library runs the stage, on how many GPUs per rank, and why.
#[derive(Debug, Clone, PartialEq)]
pub struct Plan {
    /// `nccl`, `mpi` or `host`.
    pub backend: String,
    /// `-g`: GPUs each rank drives (1 without GPUs).
    pub gpus: usize,
    /// Why this backend, in one line.
    pub why: String,
    /// Why the per-host stages do not run (None: they run).
    pub no_host_stage: Option<String>,
    /// The benchmark's options every run gets ([`fit`]).
    pub args: String,
    /// Why no run of the stage is started: no size fits some host ([`fit`]).
    pub skip: Option<String>,
}

/// The plan from every rank's GPU count (index = rank), the ranks per
/// host (`ranks_on_host[i]`: how many ranks share rank i's host) and the
/// memory each rank's host may still take (`rooms[i]`, see [`fit`]).
pub fn plan(a: &NcclArgs, gpus: &[usize], ranks_on_host: &[usize], rooms: &[Option<u64>]) -> Plan {
    let mut p = plan_backend(a, gpus, ranks_on_host);
    let f = fit(a, &p.backend, ranks_on_host, rooms);
    if let Some(sizes) = &f.sizes {
        p.why.push_str(&format!("; {sizes}"));
    }
    p.args = f.args;
    p.skip = f.skip;
    // A host's communicator of one rank on one GPU moves nothing (busbw
    // is 0 by definition): skip the per-host stages when every host is so.
    let biggest = ranks_on_host.iter().max().copied().unwrap_or(1) * p.gpus;
    if biggest < 2 {
        p.no_host_stage = Some(format!(
            "per-host stages skipped: every host has one rank on {}: nothing moves within a host",
            if p.backend == "nccl" {
                "one GPU"
            } else {
                "host memory"
            }
        ));
    }
    p
}

fn plan_backend(a: &NcclArgs, gpus: &[usize], ranks_on_host: &[usize]) -> Plan {
    let per_rank: Vec<usize> = gpus
        .iter()
        .zip(ranks_on_host)
        // Ranks sharing fewer GPUs than they are (NCCL_HOSTID tests) each
        // take one: NCCL_TESTS_DEVICE then names it.
        .map(|(&g, &r)| if g == 0 { 0 } else { (g / r.max(1)).max(1) })
        .collect();
    let min = per_rank.iter().copied().min().unwrap_or(0);
    let no_gpu: Vec<String> = per_rank
        .iter()
        .enumerate()
        .filter(|(_, g)| **g == 0)
        .map(|(r, _)| r.to_string())
        .collect();
    let mpi_why = |what: &str| {
        format!(
            "backend {what}: no GPU{}; this stage measures {} over TCP/shared memory, not NCCL",
            if no_gpu.len() == gpus.len() {
                String::new()
            } else {
                format!(" on rank(s) {}", no_gpu.join(","))
            },
            if what == "mpi" {
                "MPI"
            } else {
                "the host backend"
            }
        )
    };
    match a.nccl_backend.as_str() {
        "auto" if min > 0 => Plan {
            backend: "nccl".into(),
            gpus: min,
            why: format!("backend nccl: {min} GPU(s) per rank"),
            no_host_stage: None,
            args: String::new(),
            skip: None,
        },
        // Built without MPI (a cluster of one): the host backend.
        "auto" if !cfg!(feature = "mpi") => Plan {
            backend: "host".into(),
            gpus: 1,
            why: mpi_why("host"),
            no_host_stage: None,
            args: String::new(),
            skip: None,
        },
        "auto" | "mpi" => Plan {
            backend: "mpi".into(),
            gpus: 1,
            why: if min > 0 {
                "backend mpi (--nccl-backend): this stage measures MPI, not NCCL".into()
            } else {
                mpi_why("mpi")
            },
            no_host_stage: None,
            args: String::new(),
            skip: None,
        },
        "host" => Plan {
            backend: "host".into(),
            gpus: 1,
            why: mpi_why("host"),
            no_host_stage: None,
            args: String::new(),
            skip: None,
        },
        _ => Plan {
            backend: "nccl".into(),
            gpus: min.max(1),
            why: format!(
                "backend nccl (--nccl-backend): {} GPU(s) per rank",
                min.max(1)
            ),
            no_host_stage: None,
            args: String::new(),
            skip: None,
        },
    }
}

/// One run as one rank saw it (what it sends to rank 0).
#[derive(Debug, Clone, PartialEq)]
pub struct RankRun {
    /// The collective (`all_reduce`).
    pub test: String,
    /// `host` or `cluster`.
    pub scope: String,
    /// The benchmark's exit status on this rank.
    pub code: i32,
    /// The lines of its output that say what went wrong (empty when ok).
    pub error: Option<String>,
    /// The -J document, when this rank wrote it (its group's first rank).
    pub json: Option<Value>,
    /// The RDMA counters before and after ([`super::traffic::snapshot`];
    /// null on all but the first rank of each host).
    pub before: Value,
    /// See `before`.
    pub after: Value,
}

impl RankRun {
    /// As JSON.
    pub fn to_json(&self) -> Value {
        json!({"test": self.test, "scope": self.scope, "code": self.code, "error": self.error,
               "json": self.json, "before": self.before, "after": self.after})
    }

    /// From [`RankRun::to_json`].
    pub fn from_json(v: &Value) -> Option<RankRun> {
        Some(RankRun {
            test: v["test"].as_str()?.to_owned(),
            scope: v["scope"].as_str()?.to_owned(),
            code: v["code"].as_i64()? as i32,
            error: v["error"].as_str().map(str::to_owned),
            json: Some(v["json"].clone()).filter(|j| !j.is_null()),
            before: v["before"].clone(),
            after: v["after"].clone(),
        })
    }
}

/// The line that says why a run failed: the benchmark's error lines
/// (nccl-tests prints `HOST: error` then ` .. HOST pid N: Test failure`).
pub fn error_of(code: i32, text: &str) -> Option<String> {
    if code == 0 {
        return None;
    }
    let lines: Vec<&str> = text
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#') && !l.contains("Test failure"))
        .collect();
    let why = lines
        .iter()
        .rev()
        .find(|l| !l.starts_with(|c: char| c.is_ascii_digit()))
        .or(lines.last())
        .map_or_else(|| "no output".to_owned(), |l| l.to_string());
    Some(format!("exit {code}: {why}"))
}

/// One row of the -J document (out-of-place, as nccl-tests' summary).
pub fn rows(doc: &Value) -> Vec<Value> {
    doc["results"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|r| {
            let p = if r["out_of_place"].is_object() {
                &r["out_of_place"]
            } else {
                &r["in_place"]
            };
            let num = |v: &Value| v.as_f64().or_else(|| v.as_str()?.parse().ok());
            Some(json!({
                "size": r["size"].as_u64()?, "count": r["count"], "type": r["type"],
                "algbw": num(&p["alg_bw"]), "busbw": num(&p["bus_bw"]),
                "time_us": num(&p["time"]).or_else(|| num(&p["cpu_time"])),
                "wrong": num(&p["nwrong"]).map(|w| w as u64),
            }))
        })
        .collect()
}

/// The iterations of each size that move data: warm-up, then out-of-place
/// and in-place each `-n` x `-m` timed (plus one checking run with -c).
pub fn iterations_per_size(doc: &Value) -> u64 {
    let c = &doc["config"];
    let n = |k: &str| c[k].as_u64().unwrap_or(0);
    let check = u64::from(n("validation") != 0);
    n("warmup_iters") + 2 * (n("iterations") * n("aggregated_iterations").max(1) + check)
}

/// Bytes every rank sends per iteration of `size` among `nranks` (busbw's
/// factor times algbw's bytes: for the ring all_reduce 2(n-1)/n x size).
pub fn bytes_per_rank(coll: &Collective, size: u64, nranks: usize) -> f64 {
    size as f64 * (coll.alg_bytes_factor)(nranks) * (coll.bus_factor)(nranks)
}

/// What a host had to send to the other hosts during a cluster run, in
/// bytes (None when there is no document to count from; 0 on one host).
/// `nranks`: the communicator's ranks (ranks x GPUs).
pub fn expected_host_bytes(test: &str, doc: &Value, hosts: usize, nranks: usize) -> Option<u64> {
    let coll = collective(test)?;
    doc["results"].as_array()?;
    if hosts < 2 {
        return Some(0);
    }
    let iters = iterations_per_size(doc) as f64;
    let sizes = rows(doc);
    let total: f64 = sizes
        .iter()
        .filter_map(|r| r["size"].as_u64())
        .map(|s| bytes_per_rank(coll, s, nranks) * iters)
        .sum();
    Some(total as u64)
}

/// One stage of the report: a collective on one host, or on all.
#[derive(Debug, Clone)]
pub struct Stage {
    /// `host HOST` or `cluster`.
    pub name: String,
    /// `host` or `cluster`.
    pub scope: String,
    /// The host names it ran on.
    pub hosts: Vec<String>,
    /// The ranks it ran on.
    pub ranks: Vec<usize>,
    /// The collective.
    pub collective: String,
    /// ok or fail.
    pub status: Status,
    /// Why it failed, once per distinct message, with its ranks.
    pub error: Option<String>,
    /// The file under --out.
    pub json_file: String,
    /// Its -J document (from the group's first rank).
    pub doc: Option<Value>,
    /// busbw from the pairs (GB/s) and why (or why none).
    pub expected: (Option<f64>, String),
    /// The baseline's rows of the same file.
    pub baseline_rows: Option<Vec<Value>>,
    /// Whether the largest size is under --fail-below x the baseline.
    pub below_baseline: Option<String>,
    /// Why the baseline has no rows for this stage (its document is
    /// missing, not a regular file, too large, not JSON or without
    /// results), naming the document: the stage is then not compared.
    pub baseline_warning: Option<String>,
    /// The command that reruns only this stage.
    pub rerun: String,
}

/// The whole stage as rank 0 assembles it.
#[derive(Debug, Clone)]
pub struct Report {
    /// The plan every rank ran.
    pub plan: Plan,
    /// Every run.
    pub stages: Vec<Stage>,
}

/// The context rank 0 assembles the stages in.
pub struct Context<'a> {
    /// The options.
    pub args: &'a NcclArgs,
    /// Each rank's host name.
    pub hosts: &'a [String],
    /// busbw the pairs predict: (GB/s, why) or why none.
    pub expected: (Option<f64>, String),
    /// `--baseline` and `--fail-below`.
    pub baseline: Option<(&'a std::path::Path, f64)>,
    /// The ranks lost during the job, with why (their runs are missing).
    pub lost: &'a [(usize, String)],
    /// Each run's total deadline ([`deadline_s`]), in seconds.
    pub deadline_s: u64,
}

/// The distinct host names, in rank order.
pub fn distinct_hosts(hosts: &[String]) -> Vec<String> {
    let mut v: Vec<String> = Vec::new();
    for h in hosts {
        if !v.contains(h) {
            v.push(h.clone());
        }
    }
    v
}

/// The runs this rank takes part in, in order: (test, scope, color).
/// Color: the index of the host among the distinct hosts (host scope).
pub fn schedule(
    a: &NcclArgs,
    plan: &Plan,
    hosts: &[String],
    rank: usize,
) -> Vec<(String, String, Option<i32>)> {
    let distinct = distinct_hosts(hosts);
    let color = distinct.iter().position(|h| *h == hosts[rank]).unwrap_or(0) as i32;
    let mut v = Vec::new();
    if plan.skip.is_some() {
        return v;
    }
    for t in &a.nccl_tests {
        if plan.no_host_stage.is_none() {
            v.push((t.clone(), "host".into(), Some(color)));
        }
        v.push((t.clone(), "cluster".into(), None));
    }
    v
}

/// This rank's share of the stage: every run of [`schedule`] in-process,
/// `count` read around each (the traffic proof's counters). Each run's -J
/// document goes to a file of this process's own (the group's first rank
/// writes it) and is read back. After each cluster run every rank calls
/// `meet` (the ranks' exchange, bounded by `--timeout`): when it says a
/// rank was lost, the runs left are not started (their collectives would
/// each wait a timeout for it) and are reported as [`NOT_RUN`].
pub fn run_rank(
    a: &NcclArgs,
    plan: &Plan,
    hosts: &[String],
    rank: usize,
    timeout_s: u64,
    count: &mut dyn FnMut() -> Value,
    meet: &mut dyn FnMut() -> bool,
) -> Vec<RankRun> {
    let mut out = Vec::new();
    let mut go_on = true;
    for (test, scope, color) in schedule(a, plan, hosts, rank) {
        if !go_on {
            out.push(RankRun {
                test,
                scope,
                code: NOT_RUN,
                error: Some("not run: a rank was lost earlier in the NCCL stage".into()),
                json: None,
                before: Value::Null,
                after: Value::Null,
            });
            continue;
        }
        if scope == "cluster" {
            lost_hook(rank);
        }
        let tmp = std::env::temp_dir().join(format!(
            "erdma-cluster-{}-{test}-{scope}.json",
            std::process::id()
        ));
        let _ = std::fs::remove_file(&tmp);
        let path = tmp.to_string_lossy().into_owned();
        let argv = argv(
            &plan.args,
            &test,
            &plan.backend,
            plan.gpus,
            Some(&path),
            timeout_s,
        );
        let before = count();
        let done = match collective(&test) {
            Some(c) => {
                crate::nccltests::run::run_embedded(c, &argv, color, deadline_s(a, timeout_s))
            }
            // Not reached: clap took the names from TESTS.
            None => crate::nccltests::run::Embedded {
                code: 2,
                text: format!("no collective {test}"),
            },
        };
        let after = count();
        let json = crate::input::read_json(&tmp).ok();
        let _ = std::fs::remove_file(&tmp);
        // The ranks meet only after a cluster run: it ends on every rank
        // together, while the hosts' runs may end far apart (a slow host
        // is what they are there to find).
        let cluster = scope == "cluster";
        out.push(RankRun {
            error: error_of(done.code, &done.text),
            test,
            scope,
            code: done.code,
            json,
            before,
            after,
        });
        if cluster {
            go_on = meet();
        }
    }
    out
}

/// [`RankRun::code`] of a run not started (a rank was lost before it).
pub const NOT_RUN: i32 = -1;

/// `ERDMA_CLUSTER_HOOK=stop-in-nccl:R` (tests; with others,
/// comma-separated): rank R stops itself (SIGSTOP) as its first cluster
/// run of the NCCL stage starts (after the hosts' runs), as a host that
/// hangs mid-stage would; `kill-in-nccl:R`: it dies (SIGKILL), as a host
/// that crashes would.
fn lost_hook(rank: usize) {
    static FIRED: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);
    let Some((sig, r)) = super::hook("stop-in-nccl")
        .map(|r| (libc::SIGSTOP, r))
        .or_else(|| super::hook("kill-in-nccl").map(|r| (libc::SIGKILL, r)))
    else {
        return;
    };
    if r.parse::<usize>().ok() == Some(rank)
        && !FIRED.swap(true, std::sync::atomic::Ordering::SeqCst)
    {
        // SAFETY: raise has no memory-safety preconditions.
        unsafe {
            libc::raise(sig);
        }
    }
}

impl Report {
    /// From the runs each rank sent (index = rank; each a JSON array).
    pub fn from_ranks(
        ctx: &Context,
        plan: Plan,
        raw: &[Vec<u8>],
    ) -> Result<(Report, Vec<Vec<RankRun>>), String> {
        let mut per_rank = Vec::new();
        for (rank, bytes) in raw.iter().enumerate() {
            if bytes.is_empty() && ctx.lost.iter().any(|(r, _)| *r == rank) {
                // A lost rank sent nothing: its stages say it was lost.
                per_rank.push(Vec::new());
                continue;
            }
            let v: Value = serde_json::from_slice(bytes)
                .map_err(|e| format!("rank {rank}: its NCCL runs are not JSON: {e}"))?;
            let runs = v
                .as_array()
                .into_iter()
                .flatten()
                .map(|r| {
                    RankRun::from_json(r)
                        .ok_or_else(|| format!("rank {rank}: an NCCL run is malformed"))
                })
                .collect::<Result<Vec<_>, _>>()?;
            per_rank.push(runs);
        }
        let distinct = distinct_hosts(ctx.hosts);
        // One file per host even when two names reduce to one label.
        let labels = super::unique_labels(
            distinct.iter().map(|h| super::safe_name(h)).collect(),
            |i| format!("host{i}"),
        );
        let mut stages = Vec::new();
        let tests = if plan.skip.is_some() {
            &[][..]
        } else {
            &ctx.args.nccl_tests[..]
        };
        for t in tests {
            for (h, label) in distinct
                .iter()
                .zip(&labels)
                .filter(|_| plan.no_host_stage.is_none())
            {
                let ranks: Vec<usize> = (0..ctx.hosts.len())
                    .filter(|&r| ctx.hosts[r] == *h)
                    .collect();
                stages.push(stage(
                    ctx,
                    &plan,
                    &per_rank,
                    t,
                    "host",
                    &format!("host {h}"),
                    vec![h.clone()],
                    ranks,
                    &format!("nccl-host-{label}-{t}.json"),
                ));
            }
            let all: Vec<usize> = (0..ctx.hosts.len()).collect();
            stages.push(stage(
                ctx,
                &plan,
                &per_rank,
                t,
                "cluster",
                "cluster",
                distinct.clone(),
                all,
                &format!("nccl-cluster-{t}.json"),
            ));
        }
        Ok((Report { plan, stages }, per_rank))
    }

    /// Fail when a run failed or is under the baseline; warn when the
    /// stage was skipped (no size fits a host); ok otherwise.
    pub fn status(&self) -> Status {
        let skipped = self.plan.skip.is_some().then_some(Status::Warn);
        self.stages
            .iter()
            .map(|s| s.status)
            .chain(skipped)
            .max()
            .unwrap_or(Status::Ok)
    }

    /// The documents to write under `--out`: (file name, document).
    pub fn files(&self) -> impl Iterator<Item = (&str, &Value)> {
        self.stages
            .iter()
            .filter_map(|s| Some((s.json_file.as_str(), s.doc.as_ref()?)))
    }

    /// The `nccl` object of the cluster's JSON document.
    pub fn to_json(&self) -> Value {
        json!({
            "backend": self.plan.backend,
            "gpus_per_rank": self.plan.gpus,
            "why": self.plan.why,
            "host_stage_skipped": self.plan.no_host_stage,
            "args": self.plan.args,
            "skipped": self.plan.skip,
            "status": self.status(),
            "stages": self.stages.iter().map(|s| json!({
                "name": s.name, "scope": s.scope, "hosts": s.hosts, "ranks": s.ranks,
                "collective": s.collective, "status": s.status, "error": s.error,
                "json": s.json_file,
                "rows": s.doc.as_ref().map(rows).unwrap_or_default(),
                "expected_busbw": s.expected.0, "expected_why": s.expected.1,
                "baseline_rows": s.baseline_rows, "below_baseline": s.below_baseline,
                "baseline_warning": s.baseline_warning,
                "rerun": s.rerun,
            })).collect::<Vec<_>>(),
        })
    }

    /// The text section.
    pub fn render_text(&self) -> String {
        let mut s = format!(
            "# NCCL stage: the collectives in-process, {}\n",
            self.plan.why
        );
        if let Some(why) = &self.plan.skip {
            s.push_str(&format!("warn  {why}\n"));
        }
        let w = self
            .stages
            .iter()
            .map(|s| s.name.len() + s.collective.len() + 1)
            .max()
            .unwrap_or(5)
            .max(5);
        s.push_str(&format!(
            "{:<w$}  status  {:>10}  {:>12}  {:>12}  {:>12}\n",
            "stage", "size", "busbw GB/s", "expected", "baseline"
        ));
        for st in &self.stages {
            let rows = st.doc.as_ref().map(rows).unwrap_or_default();
            let last = rows.last();
            let size = last
                .and_then(|r| r["size"].as_u64())
                .map_or("-".into(), human_bytes);
            let bw = last
                .and_then(|r| r["busbw"].as_f64())
                .map_or("-".into(), |b| format!("{b:.2}"));
            let exp = st.expected.0.map_or("-".into(), |e| format!("{e:.2}"));
            let base = st
                .baseline_rows
                .as_ref()
                .and_then(|b| b.last())
                .and_then(|r| r["busbw"].as_f64())
                .map_or("-".into(), |b| format!("{b:.2}"));
            s.push_str(&format!(
                "{:<w$}  {:<6}  {size:>10}  {bw:>12}  {exp:>12}  {base:>12}\n",
                format!("{} {}", st.name, st.collective),
                st.status.as_str()
            ));
        }
        if let Some(why) = &self.plan.no_host_stage {
            s.push_str(&format!("{why}\n"));
        }
        if let Some(st) = self.stages.iter().find(|s| s.scope == "cluster") {
            s.push_str(&format!("expected: {}\n", st.expected.1));
        }
        for st in &self.stages {
            if let Some(e) = &st.error {
                s.push_str(&format!(
                    "fail  {} {}: {e}\n      rerun: {}\n",
                    st.name, st.collective, st.rerun
                ));
            }
            if let Some(b) = &st.below_baseline {
                s.push_str(&format!("fail  {} {}: {b}\n", st.name, st.collective));
            }
            if let Some(w) = &st.baseline_warning {
                s.push_str(&format!("warn  {} {}: {w}\n", st.name, st.collective));
            }
        }
        s
    }
}

#[allow(clippy::too_many_arguments)]
fn stage(
    ctx: &Context,
    plan: &Plan,
    per_rank: &[Vec<RankRun>],
    test: &str,
    scope: &str,
    name: &str,
    hosts: Vec<String>,
    ranks: Vec<usize>,
    file: &str,
) -> Stage {
    let mine = |r: usize| {
        per_rank[r]
            .iter()
            .find(|x| x.test == test && x.scope == scope)
    };
    let doc = ranks.iter().find_map(|&r| mine(r)?.json.clone());
    // A run that ended well on one rank ended on all of its ranks (the
    // driver's last barrier spans them): a rank lost after it did run it.
    let completed = ranks.iter().any(|&r| mine(r).is_some_and(|x| x.code == 0));
    let mut errors: BTreeMap<String, Vec<usize>> = BTreeMap::new();
    for &r in &ranks {
        match mine(r) {
            Some(run) => {
                if let Some(e) = &run.error {
                    errors.entry(e.clone()).or_default().push(r);
                }
            }
            None => {
                let why = match ctx.lost.iter().find(|(l, _)| *l == r) {
                    Some(_) if completed => continue,
                    Some((_, why)) => format!("lost: {why}"),
                    None => "no result from this rank".into(),
                };
                errors.entry(why).or_default().push(r)
            }
        }
    }
    // Each message once with its ranks, the lowest rank's first.
    let mut errors: Vec<(String, Vec<usize>)> = errors.into_iter().collect();
    errors.sort_by_key(|(_, rs)| rs[0]);
    let error = (!errors.is_empty()).then(|| {
        errors
            .iter()
            .map(|(e, rs)| {
                let list: Vec<String> = rs.iter().map(|r| r.to_string()).collect();
                format!("rank {}: {e}", list.join(","))
            })
            .collect::<Vec<_>>()
            .join("; ")
    });
    let expected = if scope == "cluster" && hosts.len() > 1 {
        ctx.expected.clone()
    } else if scope == "cluster" {
        (
            None,
            "one host: the cluster stage does not cross the NICs".into(),
        )
    } else {
        (
            None,
            "within one host (NVLink/PCIe, or shared memory), not the NICs".into(),
        )
    };
    let (baseline_rows, baseline_warning) = match ctx.baseline {
        Some((dir, _)) => match baseline_rows(&dir.join(file)) {
            Ok(rows) => (Some(rows), None),
            Err(why) => (None, Some(why)),
        },
        None => (None, None),
    };
    let below_baseline = ctx.baseline.and_then(|(_, r)| {
        let got = doc.as_ref().map(rows)?;
        below(&got, baseline_rows.as_deref()?, r)
    });
    let mut status = if error.is_some() || doc.is_none() {
        Status::Fail
    } else {
        Status::Ok
    };
    if below_baseline.is_some() {
        status = Status::Fail;
    }
    let error = error.or_else(|| doc.is_none().then(|| "no -J document came back".to_owned()));
    // Stopped at its deadline (TestError::Deadline): said first.
    let error = error.map(|e| {
        if e.contains(": Test deadline (") {
            format!(
                "the stage ran out of time (--nccl-deadline {} s; the rows measured before are kept): {e}",
                ctx.deadline_s
            )
        } else {
            e
        }
    });
    let args = format!(
        "--nccl --nccl-tests {test} --nccl-backend {} --nccl-args '{}'",
        plan.backend, plan.args
    );
    let rerun = if scope == "host" {
        format!(
            "mpirun -np {} -H {}:{} erdma-cluster {args}",
            ranks.len(),
            hosts[0],
            ranks.len()
        )
    } else {
        format!(
            "mpirun -np {} --map-by ppr:1:node erdma-cluster {args}",
            ranks.len()
        )
    };
    Stage {
        name: name.to_owned(),
        scope: scope.to_owned(),
        hosts,
        ranks,
        collective: test.to_owned(),
        status,
        error,
        json_file: file.to_owned(),
        doc,
        expected,
        baseline_rows,
        below_baseline,
        baseline_warning,
        rerun,
    }
}

/// The rows of a stage's baseline document, read through the capped
/// reader (regular files only: a FIFO or `/dev/zero` is refused at once);
/// or why there are none, naming the document.
fn baseline_rows(path: &std::path::Path) -> Result<Vec<Value>, String> {
    let not_compared = "this stage is not compared with the baseline";
    let doc = crate::input::read_json(path).map_err(|e| {
        if e.not_found() {
            format!("no baseline document {}: {not_compared}", path.display())
        } else {
            format!("baseline: {e}: {not_compared}")
        }
    })?;
    let rows = rows(&doc);
    if rows.is_empty() {
        return Err(format!(
            "baseline: {} has no nccl-tests results: {not_compared}",
            path.display()
        ));
    }
    Ok(rows)
}

/// The largest size both have: busbw under `r` x the baseline's, said.
fn below(got: &[Value], base: &[Value], r: f64) -> Option<String> {
    let size_bw = |v: &Value| Some((v["size"].as_u64()?, v["busbw"].as_f64()?));
    let b: BTreeMap<u64, f64> = base.iter().filter_map(size_bw).collect();
    let (size, bw, want) = got
        .iter()
        .filter_map(size_bw)
        .filter_map(|(s, g)| Some((s, g, *b.get(&s)?)))
        .next_back()?;
    (bw < r * want).then(|| {
        format!(
            "busbw {bw:.2} GB/s at {} under {r} x the baseline's {want:.2} GB/s",
            human_bytes(size)
        )
    })
}

/// busbw the pair stage predicts for the cluster stage: the slowest NIC's
/// rate times the NICs per host, in GB/s (`slowest_gbps`: Gb/s).
pub fn expected_busbw(slowest_gbps: Option<f64>, nics: usize) -> (Option<f64>, String) {
    match slowest_gbps {
        Some(g) => (
            Some(g * nics.max(1) as f64 / 8.0),
            format!(
                "the slowest pair run {g:.2} Gb/s x {} NIC(s) per host / 8",
                nics.max(1)
            ),
        ),
        None => (
            None,
            "no pair measured (run with --pairs for an expectation)".into(),
        ),
    }
}

/// 1048576 -> "1 MiB".
pub fn human_bytes(b: u64) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut v = b;
    let mut u = 0;
    while v >= 1024 && v.is_multiple_of(1024) && u < UNITS.len() - 1 {
        v /= 1024;
        u += 1;
    }
    format!("{v} {}", UNITS[u])
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(tests: &[&str], backend: &str) -> NcclArgs {
        NcclArgs {
            nccl: true,
            nccl_pairs: false,
            nccl_tests: tests.iter().map(|s| s.to_string()).collect(),
            nccl_args: "-b 8 -e 64 -f 2 -c 1".into(),
            nccl_backend: backend.into(),
            nccl_deadline: None,
        }
    }

    #[test]
    fn names_map_to_collectives() {
        for t in TESTS {
            assert!(collective(t).is_some(), "{t}");
        }
        assert_eq!(collective("all_reduce").unwrap().name, "AllReduce");
        assert!(collective("nope").is_none());
    }

    #[test]
    fn plan_picks_nccl_only_with_gpus_everywhere() {
        let a = args(&["all_reduce"], "auto");
        let p = plan(&a, &[8, 8], &[1, 1], &[]);
        assert_eq!((p.backend.as_str(), p.gpus), ("nccl", 8));
        let p = plan(&a, &[8, 0], &[1, 1], &[]);
        assert_eq!((p.backend.as_str(), p.gpus), ("mpi", 1));
        assert!(p.why.contains("no GPU on rank(s) 1"), "{}", p.why);
        let p = plan(&a, &[0, 0], &[2, 2], &[]);
        assert_eq!(
            p.why,
            "backend mpi: no GPU; this stage measures MPI over TCP/shared memory, not NCCL"
        );
        // Two ranks on a host of 8 GPUs: 4 each.
        assert_eq!(plan(&a, &[8, 8], &[2, 2], &[]).gpus, 4);
        assert_eq!(plan(&a, &[1, 1], &[2, 2], &[]).gpus, 1);
    }

    #[test]
    fn own_options_are_refused() {
        let mut a = args(&["all_reduce"], "auto");
        assert!(check(&a).is_ok());
        a.nccl_args = "-b 8 -g 2".into();
        assert!(
            check(&a)
                .unwrap_err()
                .contains("-g is set by erdma-cluster")
        );
        a.nccl_args = "-b 8 --bogus".into();
        let e = check(&a).unwrap_err();
        assert!(e.starts_with("--nccl-args '-b 8 --bogus': "), "{e}");
        // Issue 33 row 11: however spelled, by the collectives' parser.
        for (given, name) in [
            ("-g2", "-g"),
            ("-T1", "-T"),
            ("-J/path", "-J"),
            ("-t2", "-t"),
            ("--ngpus=2", "-g"),
            ("--ngp 2", "-g"),
            ("-c 1 -b8 -g 1", "-g"),
            ("--backend=host", "--backend"),
            ("--bootstrap tcp", "--bootstrap"),
        ] {
            a.nccl_args = given.into();
            let e = check(&a).unwrap_err();
            assert!(
                e.contains(&format!("{name} is set by erdma-cluster")),
                "{given}: {e}"
            );
        }
        a.nccl_args = "-b 8 garbage".into();
        assert_eq!(
            check(&a).unwrap_err(),
            "--nccl-args '-b 8 garbage': 'garbage' is not an option of the collectives: leave it out"
        );
        a.nccl_args = "-N 0".into();
        assert!(check(&a).unwrap_err().contains("-N 0 runs for ever"));
        a.nccl_args = "-N0 -b 8".into();
        assert!(check(&a).unwrap_err().contains("-N 0 runs for ever"));
        a.nccl_args = "-N 2 -b 8 -e 8".into();
        assert!(check(&a).is_ok());
    }

    #[test]
    fn the_default_sizes_fit_the_memory_of_each_host() {
        let mut a = args(&["all_reduce"], "auto");
        a.nccl_args = DEFAULT_ARGS.into();
        let gb = |g: f64| Some((g * 1e9) as u64);
        // Plenty on host memory: at most 64M.
        let p = plan(&a, &[0, 0], &[2, 2], &[gb(22.0), gb(22.0)]);
        assert_eq!(p.args, "-b 1M -e 64M -f 4 -w 2 -n 10 -c 1");
        assert!(
            p.why.ends_with(
                "; sizes 1M..64M chosen for backend mpi and 22.00 GB available (rank 0's host, for its 2 rank(s); the buffers take at most 1/2; give --nccl-args for others)"
            ),
            "{}",
            p.why
        );
        let v = argv(&p.args, "all_reduce", "mpi", 1, None, 120).join(" ");
        assert!(v.starts_with("all_reduce_perf -b 1M -e 64M "), "{v}");
        // 64M held 2 x (3 x 64M + 256M of staged copies) = 896 MiB: in
        // 1 GB (the half, 500 MB) the MPI backend fits 4M; the host with
        // the least per rank decides. The host backend (no staged copies)
        // fits 16M in 0.6 GB.
        let p = plan(&a, &[0, 0, 0], &[2, 2, 1], &[gb(9.0), gb(1.0), gb(0.6)]);
        assert_eq!(p.args, "-b 1M -e 4M -f 4 -w 2 -n 10 -c 1", "{p:?}");
        assert!(
            p.why.contains("sizes 1M..4M chosen for backend mpi and 1.00 GB available (rank 1's host, for its 2 rank(s)"),
            "{}",
            p.why
        );
        a.nccl_backend = "host".into();
        let p = plan(&a, &[0, 0], &[2, 2], &[gb(0.6), gb(0.6)]);
        assert_eq!(p.args, "-b 1M -e 16M -f 4 -w 2 -n 10 -c 1", "{p:?}");
        // Below 1M: -b is -e.
        let p = plan(&a, &[0, 0], &[2, 2], &[gb(0.08), None]);
        assert_eq!(p.args, "-b 1M -e 1M -f 4 -w 2 -n 10 -c 1", "{p:?}");
        assert!(
            p.why
                .contains("; size 1M chosen for backend host and 0.08 GB"),
            "{}",
            p.why
        );
        assert_eq!(p.skip, None);
        // Nothing fits: the stage is skipped, saying why; no run planned.
        let p = plan(&a, &[0, 0], &[2, 2], &[gb(0.05), gb(0.05)]);
        let why = p.skip.clone().unwrap();
        assert!(
            why.starts_with("the NCCL stage skipped: it cannot fit at any size on backend host: 0.05 GB available on rank 0's host for its 2 rank(s), and even size 16B needs 33554528 bytes in 1/2 of it"),
            "{why}"
        );
        let hosts: Vec<String> = ["a", "a"].map(String::from).to_vec();
        assert!(schedule(&a, &p, &hosts, 0).is_empty());
        let ctx = Context {
            args: &a,
            hosts: &hosts,
            expected: expected_busbw(None, 1),
            baseline: None,
            lost: &[],
            deadline_s: 600,
        };
        let empty = b"[]".to_vec();
        let (rep, _) = Report::from_ranks(&ctx, p, &[empty.clone(), empty]).unwrap();
        assert!(rep.stages.is_empty());
        assert_eq!(rep.status(), Status::Warn);
        assert_eq!(rep.to_json()["skipped"], why.as_str());
        assert!(rep.render_text().contains(&format!("\nwarn  {why}\n")));
        // Memory unknown: 64M, said so. NCCL: 1G, GPU memory.
        let p = plan(&a, &[0, 0], &[1, 1], &[None, None]);
        assert!(
            p.why.ends_with(
                "; sizes 1M..64M chosen for backend host (the memory available is unknown)"
            ),
            "{}",
            p.why
        );
        a.nccl_backend = "auto".into();
        let p = plan(&a, &[1, 1], &[1, 1], &[gb(0.01), gb(0.01)]);
        assert_eq!((p.args.as_str(), p.skip.is_none()), (DEFAULT_ARGS, true));
        assert!(p.why.ends_with("; sizes 1M..1G chosen for backend nccl (GPU memory: the collectives lower -e to what each GPU holds)"), "{}", p.why);
        // Given by the user: kept, whatever the memory (the collectives'
        // own check refuses what does not fit).
        a.nccl_args = "-b 8 -e 1G".into();
        let p = plan(&a, &[0, 0], &[1, 1], &[gb(0.01), gb(0.01)]);
        assert_eq!((p.args.as_str(), p.skip.is_none()), ("-b 8 -e 1G", true));
    }

    #[test]
    fn argv_and_schedule() {
        let a = args(&["all_reduce", "all_gather"], "auto");
        assert_eq!(
            argv(
                &a.nccl_args,
                "all_gather",
                "mpi",
                1,
                Some("/tmp/x.json"),
                120
            )
            .join(" "),
            "all_gather_perf -b 8 -e 64 -f 2 -c 1 -g 1 --backend mpi -T 120 -J /tmp/x.json"
        );
        let hosts: Vec<String> = ["a", "b", "a"].map(String::from).to_vec();
        let p = plan(&a, &[0, 0, 0], &[2, 1, 2], &[]);
        assert_eq!(p.no_host_stage, None);
        let s = schedule(&a, &p, &hosts, 2);
        assert_eq!(s.len(), 4);
        assert_eq!(s[0], ("all_reduce".into(), "host".into(), Some(0)));
        assert_eq!(s[1], ("all_reduce".into(), "cluster".into(), None));
        assert_eq!(schedule(&a, &p, &hosts, 1)[2].2, Some(1));
        let one = plan(&a, &[0, 0], &[1, 1], &[]);
        assert!(
            one.no_host_stage
                .as_deref()
                .unwrap()
                .contains("one rank on host memory")
        );
        assert_eq!(
            schedule(&a, &one, &hosts[..2], 0).len(),
            2,
            "cluster runs only"
        );
    }

    fn doc(busbw: f64) -> Value {
        json!({"config": {"warmup_iters": 1, "iterations": 5, "aggregated_iterations": 1, "validation": 1},
               "devices": [{}, {}],
               "results": [{"size": 1024, "count": 256, "type": "float",
                            "out_of_place": {"time": 10.0, "alg_bw": 1.0, "bus_bw": busbw, "nwrong": 0.0}}]})
    }

    #[test]
    fn a_missing_or_bad_baseline_document_is_named_never_waited_for() {
        let d = std::env::temp_dir().join(format!("nccl-bad-base-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        let f = d.join("nccl-cluster-all_reduce.json");
        let e = baseline_rows(&f).unwrap_err();
        assert!(
            e.starts_with("no baseline document /")
                && e.contains("nccl-cluster-all_reduce.json: this stage is not compared"),
            "{e}"
        );
        // /dev/zero behind a link and a FIFO: refused at once, not read.
        std::os::unix::fs::symlink("/dev/zero", &f).unwrap();
        let e = baseline_rows(&f).unwrap_err();
        assert!(
            e.contains("all_reduce.json is a character device, not a regular file"),
            "{e}"
        );
        std::fs::remove_file(&f).unwrap();
        let c = std::ffi::CString::new(f.to_str().unwrap()).unwrap();
        // SAFETY: a NUL-terminated path.
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
        let t = std::time::Instant::now();
        let e = baseline_rows(&f).unwrap_err();
        assert!(e.contains("is a FIFO, not a regular file"), "{e}");
        assert!(t.elapsed().as_secs() < 10, "a FIFO waited for");
        std::fs::remove_file(&f).unwrap();
        std::fs::write(&f, "garbage").unwrap();
        let e = baseline_rows(&f).unwrap_err();
        assert!(e.contains("all_reduce.json is not a JSON document"), "{e}");
        std::fs::write(&f, "{}").unwrap();
        let e = baseline_rows(&f).unwrap_err();
        assert!(e.contains("has no nccl-tests results"), "{e}");
        std::fs::File::create(&f)
            .unwrap()
            .set_len(crate::input::MAX_DOCUMENT_BYTES + 1)
            .unwrap();
        let e = baseline_rows(&f).unwrap_err();
        assert!(e.contains("is larger than 16 MiB"), "{e}");
        std::fs::write(&f, doc(10.0).to_string()).unwrap();
        assert_eq!(baseline_rows(&f).unwrap().len(), 1);
        std::fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn expected_bytes_of_a_ring_all_reduce() {
        // 1 warm-up + 2 x (5 timed + 1 check) = 13 iterations, 2(n-1)/n = 1.
        assert_eq!(iterations_per_size(&doc(1.0)), 13);
        assert_eq!(
            expected_host_bytes("all_reduce", &doc(1.0), 2, 2),
            Some(13 * 1024)
        );
        // 4 ranks: 2 x 3/4 = 1.5 x the size.
        assert_eq!(
            expected_host_bytes("all_reduce", &doc(1.0), 2, 4),
            Some(13 * 1536)
        );
        assert_eq!(expected_host_bytes("all_reduce", &doc(1.0), 1, 2), Some(0));
        assert_eq!(expected_host_bytes("all_reduce", &json!({}), 2, 2), None);
    }

    fn run(test: &str, scope: &str, code: i32, json: Option<Value>) -> Value {
        RankRun {
            test: test.into(),
            scope: scope.into(),
            code,
            error: error_of(
                code,
                "h: Invalid usage: boom\n .. h pid 1: Test failure common.cu:1454\n",
            ),
            json,
            before: Value::Null,
            after: Value::Null,
        }
        .to_json()
    }

    #[test]
    fn report_from_gathered_runs() {
        let a = args(&["all_reduce"], "auto");
        let hosts: Vec<String> = ["a", "b"].map(String::from).to_vec();
        let base = std::env::temp_dir().join(format!("nccl-base-{}", std::process::id()));
        std::fs::create_dir_all(&base).unwrap();
        std::fs::write(
            base.join("nccl-cluster-all_reduce.json"),
            doc(10.0).to_string(),
        )
        .unwrap();
        let ctx = Context {
            args: &a,
            hosts: &hosts,
            expected: expected_busbw(Some(80.0), 2),
            baseline: Some((&base, 0.9)),
            lost: &[],
            deadline_s: 600,
        };
        let r0 = json!([
            run("all_reduce", "host", 0, Some(doc(5.0))),
            run("all_reduce", "cluster", 0, Some(doc(8.0)))
        ]);
        let r1 = json!([
            run("all_reduce", "host", 2, Some(doc(5.0))),
            run("all_reduce", "cluster", 0, None)
        ]);
        let raw: Vec<Vec<u8>> = [r0, r1]
            .iter()
            .map(|v| v.to_string().into_bytes())
            .collect();
        let plan = plan(&a, &[2, 2], &[1, 1], &[]);
        let (rep, _) = Report::from_ranks(&ctx, plan, &raw).unwrap();
        std::fs::remove_dir_all(&base).unwrap();
        assert_eq!(rep.stages.len(), 3);
        assert_eq!(rep.stages[0].status, Status::Ok);
        assert_eq!(rep.stages[1].status, Status::Fail);
        assert_eq!(
            rep.stages[1].error.as_deref(),
            Some("rank 1: exit 2: h: Invalid usage: boom")
        );
        let c = &rep.stages[2];
        assert_eq!(c.expected.0, Some(20.0));
        assert_eq!(
            c.below_baseline.as_deref(),
            Some("busbw 8.00 GB/s at 1 KiB under 0.9 x the baseline's 10.00 GB/s")
        );
        assert_eq!(c.status, Status::Fail);
        assert_eq!(rep.status(), Status::Fail);
        let j = rep.to_json();
        assert_eq!(j["backend"], "nccl");
        assert_eq!(j["stages"][2]["rows"][0]["busbw"], 8.0);
        assert_eq!(j["stages"][2]["json"], "nccl-cluster-all_reduce.json");
        assert_eq!(rep.files().count(), 3);
        let t = rep.render_text();
        assert!(
            t.contains(
                "cluster all_reduce  fail         1 KiB          8.00         20.00         10.00"
            ),
            "{t}"
        );
        assert!(
            t.contains("rerun: mpirun -np 1 -H b:1 erdma-cluster --nccl"),
            "{t}"
        );
    }

    #[test]
    fn a_lost_rank_fails_only_the_stages_it_did_not_finish() {
        let a = args(&["all_reduce", "all_gather"], "mpi");
        let hosts: Vec<String> = ["a", "a", "b", "b"].map(String::from).to_vec();
        let lost = [(1, "silent in the census".to_owned())];
        let ctx = Context {
            args: &a,
            hosts: &hosts,
            expected: expected_busbw(None, 1),
            baseline: None,
            lost: &lost,
            deadline_s: 600,
        };
        let not_run = |test: &str, scope: &str| {
            RankRun {
                test: test.into(),
                scope: scope.into(),
                code: NOT_RUN,
                error: Some("not run: a rank was lost earlier in the NCCL stage".into()),
                json: None,
                before: Value::Null,
                after: Value::Null,
            }
            .to_json()
        };
        let live = |first: bool| {
            json!([
                run("all_reduce", "host", 0, first.then(|| doc(5.0))),
                run("all_reduce", "cluster", 4, None),
                not_run("all_gather", "host"),
                not_run("all_gather", "cluster"),
            ])
        };
        let raw: Vec<Vec<u8>> = [live(true), Value::Null, live(true), live(false)]
            .iter()
            .enumerate()
            // The lost rank sent nothing.
            .map(|(r, v)| {
                if r == 1 {
                    Vec::new()
                } else {
                    v.to_string().into_bytes()
                }
            })
            .collect();
        let plan = plan(&a, &[0; 4], &[2; 4], &[]);
        let (rep, _) = Report::from_ranks(&ctx, plan.clone(), &raw).unwrap();
        let by = |name: &str, test: &str| {
            rep.stages
                .iter()
                .find(|s| s.name == name && s.collective == test)
                .unwrap()
        };
        // Host a's run ended well on rank 0: rank 1 ran it before it was lost.
        assert_eq!(by("host a", "all_reduce").status, Status::Ok);
        assert_eq!(by("host a", "all_reduce").error, None);
        let c = by("cluster", "all_reduce");
        assert_eq!(c.status, Status::Fail);
        let e = c.error.as_deref().unwrap();
        assert!(
            e.contains("rank 1: lost: silent in the census")
                && e.starts_with("rank 0,2,3: exit 4: "),
            "{e}"
        );
        let g = by("host a", "all_gather").error.as_deref().unwrap();
        assert_eq!(
            g,
            "rank 0: not run: a rank was lost earlier in the NCCL stage; rank 1: lost: silent in the census"
        );
        // A rank that sent nothing without being lost is still an error.
        let no_lost = Context { lost: &[], ..ctx };
        let e = Report::from_ranks(&no_lost, plan, &raw).unwrap_err();
        assert!(e.starts_with("rank 1: its NCCL runs are not JSON"), "{e}");
    }
}
