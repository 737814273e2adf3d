//! `erdma-cluster`: erdma-doctor's checks on every host of a cluster in one
//! command, launched by mpirun with one rank per host (docs/cluster-check.md).
//!
//! Every rank runs the checks in-process and sends its `erdma-doctor --json`
//! document to rank 0, which groups the problems by check across hosts (one
//! line names every host with it), compares the hosts with each other
//! (ranks sharing a host, differing rdma-core/CUDA/NCCL versions, differing
//! recommended NCCL environments) and prints one report; `--out DIR` keeps
//! every host's document. This module is the pure part (no MPI): parsing the
//! gathered documents, the comparisons, the report and the exit status.
//! With `--pairs`, every pair of ranks' NICs is then measured with erdma-perf
//! ([`pairs`], every NIC as a rail, the payload checked) and the matrix joins
//! the report. With `--nccl`, the collectives run in-process on every host
//! alone and then on all hosts ([`nccl`]); the RDMA counters read around the
//! stages prove where their bytes went ([`traffic`]).

use std::collections::BTreeMap;

use clap::Parser;
use serde_json::{Value, json};

use crate::doctor::Status;
use crate::meta::RunMeta;

pub mod baseline;
pub mod command;
pub mod diagnose;
pub mod drain;
pub mod html;
pub mod job;
pub mod judge;
pub mod latency;
pub mod live;
pub mod nccl;
pub mod ncclpairs;
pub mod pairs;
pub mod retest;
pub mod rounds;
pub mod schedule;
pub mod simulate;
pub mod steps;
pub mod traffic;
use baseline::Comparison;
use pairs::Matrix;

/// Exit status: every check passed on every host.
pub const EXIT_OK: i32 = crate::doctor::EXIT_OK;
/// At least one warning (a check on a host, or a difference between hosts).
pub const EXIT_WARN: i32 = crate::doctor::EXIT_WARN;
/// At least one failure on some host.
pub const EXIT_FAIL: i32 = crate::doctor::EXIT_FAIL;
/// Bad arguments.
pub const EXIT_USAGE: i32 = crate::doctor::EXIT_USAGE;
/// The report or the files under `--out` could not be written, or a rank's
/// document could not be read.
pub const EXIT_OUTPUT: i32 = crate::doctor::EXIT_OUTPUT;
/// A rank was lost: it did not take part in a stage within `--timeout`
/// (stopped, hung or gone), or MPI failed; the live ranks name it and exit.
pub const EXIT_LOST: i32 = 5;

/// The launcher's variables give this process another rank or size than
/// MPI (`RANK=1 WORLD_SIZE=2 erdma-cluster`, `srun` without `--mpi=pmix`):
/// every process would check a cluster of one and pass. As the collectives.
pub const EXIT_LAUNCH: i32 = 6;

/// What a launcher says this process is, read before MPI starts (Open MPI
/// may set its own variables while it starts): the first of RANK and
/// WORLD_SIZE, Open MPI's, Slurm's and PMI's variables that is set, in the
/// collectives' order; `None` when none is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LaunchSaid {
    /// The variables, e.g. `SLURM_PROCID/SLURM_NTASKS`.
    pub names: String,
    /// Their values as set.
    pub values: (String, String),
}

/// [`LaunchSaid`] from `get` (the environment); `RANK` or `WORLD_SIZE`
/// alone counts, with the other empty.
pub fn launch_said(get: &dyn Fn(&str) -> Option<String>) -> Option<LaunchSaid> {
    let pairs = [
        ("RANK", "WORLD_SIZE"),
        ("OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE"),
        ("SLURM_PROCID", "SLURM_NTASKS"),
        ("PMI_RANK", "PMI_SIZE"),
    ];
    pairs.iter().enumerate().find_map(|(i, (r, s))| {
        let (rv, sv) = (get(r), get(s));
        // RANK or WORLD_SIZE alone is a broken launch script, not none.
        let set = if i == 0 {
            rv.is_some() || sv.is_some()
        } else {
            rv.is_some() && sv.is_some()
        };
        set.then(|| LaunchSaid {
            names: format!("{r}/{s}"),
            values: (rv.unwrap_or_default(), sv.unwrap_or_default()),
        })
    })
}

/// Why the launcher's word disagrees with MPI's `rank` of `size`, in one
/// line with the fix; `None` when it agrees (or nothing was said).
pub fn launch_disagrees(said: Option<&LaunchSaid>, rank: usize, size: usize) -> Option<String> {
    let said = said?;
    let (r, s) = (&said.values.0, &said.values.1);
    let n = |v: &str| v.trim().parse::<usize>().ok();
    if n(r) == Some(rank) && n(s) == Some(size) {
        return None;
    }
    Some(format!(
        "the environment says rank {r:?} of {s:?} ({}) but MPI says rank {rank} of {size}: start erdma-cluster with mpirun or srun --mpi=pmix, and unset {}",
        said.names, said.names
    ))
}

/// `--timeout`'s default, in seconds: every MPI wait of every stage.
pub const DEFAULT_TIMEOUT_S: u64 = 120;

/// The smallest `--timeout` with `--pairs`: a round's erdma-perf runs take
/// up to their own 30 s timeout before the ranks meet again.
pub const MIN_PAIRS_TIMEOUT_S: u64 = 45;

/// Command-line options.
#[derive(Debug, Parser)]
#[command(
    name = "erdma-cluster",
    version,
    about = "erdma-doctor on every host of a cluster, under mpirun (one rank per host), \
             with one report",
    after_help = "Run: mpirun -np N --map-by ppr:1:node erdma-cluster [--out DIR] [--pairs] \
                  [--nccl] [--baseline DIR]\n\
                  Exit status: 0 every check ok on every host; 1 a warning; 2 a failure (a pair or \
                  NCCL run failed or ran out of time at --nccl-deadline, a stage under --fail-below x its --baseline, bytes not over RDMA, \
                  a host/NIC/link verdict the retest confirmed); 3 bad arguments; 4 a \
                  report could not be written or read, or --drain=apply's scontrol failed; 5 a rank was lost (no answer within \
                  --timeout in a stage: stopped, hung or gone) or MPI failed."
)]
pub struct Args {
    /// Print one JSON document (the hosts, the problems, every host's report).
    #[arg(long)]
    pub json: bool,
    /// Also write every host's erdma-doctor document (doctor-HOST.json) and
    /// the whole report (cluster.json) into this directory.
    #[arg(long, value_name = "DIR")]
    pub out: Option<std::path::PathBuf>,
    /// Skip checks or groups, as erdma-doctor --skip does.
    #[arg(long, value_name = "NAME", value_delimiter = ',')]
    pub skip: Vec<String>,
    /// The NIC pair stage.
    #[command(flatten)]
    pub pair: pairs::PairArgs,
    /// The NCCL stage.
    #[command(flatten)]
    pub nccl: nccl::NcclArgs,
    /// The simulator (`--simulate`): no MPI, no network.
    #[command(flatten)]
    pub sim: simulate::SimArgs,
    /// Compare each pair's bandwidth with the same pair under DIR, written by
    /// an earlier run's --out (perf-CLIENT-SERVER.json), and each NCCL
    /// stage's busbw with its nccl-*.json there; needs --pairs or --nccl.
    #[arg(long, value_name = "DIR")]
    pub baseline: Option<std::path::PathBuf>,
    /// With --baseline: a pair under R times its baseline bandwidth fails.
    #[arg(
        long,
        value_name = "R",
        default_value_t = 0.9,
        value_parser = crate::compare::cli::positive,
        requires = "baseline"
    )]
    pub fail_below: f64,
    /// What the pairs are judged against besides each other: `auto` each
    /// port's active rate (speed x width; not for Soft-RoCE or Soft-iWARP,
    /// whose rate is nominal), `off`, or a rate in Gb/s for every port. A
    /// NIC's pairs whose median is under 90% of it are a cluster verdict
    /// (a failure). With --baseline the baseline is the reference instead.
    #[arg(long, value_name = "auto|off|GBPS", default_value = "auto")]
    pub port_rate: PortRate,
    /// The smallest slowdown the pair stage reports, e.g. 5% or 0.05: the
    /// floor under every line of the diagnosis (a host's effect, a path's,
    /// a cell's), in place of the defaults 3%, 5% and 10%. What a run
    /// can see also follows from its noise and its number of cells: the
    /// report's note per NIC says what this run could see.
    #[arg(long, value_name = "PCT", value_parser = simulate::min_effect)]
    pub min_effect: Option<f64>,
    /// Seconds every exchange between the ranks may wait (each stage's
    /// meeting of the ranks): a rank that does not arrive in time is named
    /// as lost by the others, which exit with status 5. With --pairs at
    /// least 45 (a round's erdma-perf runs take up to 30 s).
    #[arg(
        long,
        value_name = "SECS",
        default_value_t = DEFAULT_TIMEOUT_S,
        value_parser = clap::value_parser!(u64).range(1..=86_400)
    )]
    pub timeout: u64,
    /// Continue the interrupted job whose --out was DIR: the pair rounds
    /// already under DIR/rounds/ are kept, not run again (the same hosts,
    /// ranks, --pair-test and NICs, else exit 3); needs --pairs.
    #[arg(long, value_name = "DIR", requires = "pairs")]
    pub resume: Option<std::path::PathBuf>,
    /// Drain the Slurm nodes of the host and NIC verdicts the retest
    /// confirmed, the verdict as the reason: `--drain` prints the scontrol
    /// commands (a dry run, on stderr), `--drain=apply` runs them.
    #[arg(
        long,
        value_name = "MODE",
        num_args = 0..=1,
        require_equals = true,
        default_missing_value = "dry-run",
        value_enum
    )]
    pub drain: Option<drain::Mode>,
}

/// What the stages after the checks found: the pair matrix (`--pairs`) and
/// its comparison with a baseline (`--baseline`).
#[derive(Debug, Clone, Copy, Default)]
pub struct Stages<'a> {
    /// The pair matrix.
    pub pairs: Option<&'a Matrix>,
    /// The matrix against the baseline.
    pub baseline: Option<&'a Comparison>,
    /// The NCCL stage (`--nccl`).
    pub nccl: Option<&'a nccl::Report>,
    /// The traffic proof around the pair and NCCL stages.
    pub traffic: Option<&'a traffic::Proof>,
    /// The ranks lost during the job, with why.
    pub lost: &'a [(usize, String)],
    /// The pair stage's schedule: `{"schedule": text, "predicted_wall_s",
    /// "pair_wall_s"}` (the real job's).
    pub schedule: Option<&'a Value>,
    /// The retest rounds of the real job (their verdicts then set the exit
    /// status).
    pub retest: Option<&'a judge::Retested>,
    /// What the pairs are judged against besides each other (`--port-rate`).
    pub port_rate: PortRate,
    /// The smallest slowdown reported (`--min-effect`).
    pub min_effect: Option<f64>,
    /// The NCCL pairs' collective and library ([`ncclpairs::describe`]),
    /// when the matrix has their rail.
    pub nccl_pairs: Option<&'a Value>,
    /// The latency matrix and its verdicts (`--latency`).
    pub latency: Option<&'a latency::Report>,
}

/// `--port-rate`: the rate the pair stage's cells are judged against (a
/// NIC's, a host's or the cluster's median under 90% of it is a verdict).
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub enum PortRate {
    /// Each port's active rate (speed x width) as erdma-doctor reads it;
    /// none for emulated devices (Soft-RoCE, Soft-iWARP).
    #[default]
    Auto,
    /// No rate: the hosts are judged among themselves only.
    Off,
    /// This rate (Gb/s) for every port: what the network gives, where the
    /// ports report a nominal rate (a cloud instance's bandwidth).
    Gbps(f64),
}

impl std::str::FromStr for PortRate {
    type Err = String;

    fn from_str(s: &str) -> Result<PortRate, String> {
        match s {
            "auto" => Ok(PortRate::Auto),
            "off" => Ok(PortRate::Off),
            g => match g.parse::<f64>() {
                Ok(v) if v > 0.0 && v.is_finite() => Ok(PortRate::Gbps(v)),
                _ => Err(format!(
                    "'{s}': auto (the ports' own rate), off, or a rate in Gb/s such as 100"
                )),
            },
        }
    }
}

impl Stages<'_> {
    /// The worst status of the stages, if any ran.
    fn status(&self) -> Option<Status> {
        let p = self.pairs.map(Matrix::status);
        let b = self.baseline.map(Comparison::status);
        let n = self.nccl.map(nccl::Report::status);
        let t = self.traffic.map(traffic::Proof::status);
        let l = self.latency.map(latency::Report::status);
        p.max(b).max(n).max(t).max(l)
    }
}

/// One rank's erdma-doctor document.
#[derive(Debug, Clone)]
pub struct HostReport {
    /// The MPI rank that ran it.
    pub rank: usize,
    /// Its machine's name in the report ([`machine_names`]): the full host
    /// name, with the machine id's start when another machine has the same.
    pub name: String,
    /// The document (`erdma-doctor --json`).
    pub doc: Value,
    /// Whether another rank reported the same host.
    pub shares_host: bool,
}

impl HostReport {
    /// The rank's machine, by name ([`HostReport::name`]).
    pub fn host(&self) -> &str {
        &self.name
    }

    /// How the rank is named in the report: its host, with the rank added
    /// when several ranks share the host.
    pub fn label(&self) -> String {
        if self.shares_host {
            format!("{} (rank {})", self.host(), self.rank)
        } else {
            self.host().to_owned()
        }
    }

    /// The worst status of the rank's checks.
    pub fn status(&self) -> Status {
        status_of(&self.doc["status"])
    }

    fn checks(&self) -> impl Iterator<Item = &Value> {
        self.doc["checks"].as_array().into_iter().flatten()
    }
}

fn status_of(v: &Value) -> Status {
    match v.as_str() {
        Some("ok") => Status::Ok,
        Some("skip") => Status::Skip,
        Some("warn") => Status::Warn,
        _ => Status::Fail,
    }
}

/// Reads the documents gathered from the ranks (index = rank).
pub fn parse_reports(raw: &[Vec<u8>]) -> Result<Vec<HostReport>, String> {
    let mut reports = raw
        .iter()
        .enumerate()
        .map(|(rank, bytes)| {
            let doc: Value = serde_json::from_slice(bytes)
                .map_err(|e| format!("rank {rank}: its report is not JSON: {e}"))?;
            if doc["tool"] != "erdma-doctor" || !doc["checks"].is_array() {
                return Err(format!("rank {rank}: not an erdma-doctor report"));
            }
            Ok(HostReport {
                rank,
                name: String::new(),
                doc,
                shares_host: false,
            })
        })
        .collect::<Result<Vec<_>, String>>()?;
    let ids: Vec<Machine> = reports.iter().map(|r| Machine::of(&r.doc)).collect();
    for (r, name) in reports.iter_mut().zip(machine_names(&ids)) {
        r.name = name;
    }
    let shared: Vec<usize> = ranks_by_host(&reports)
        .into_values()
        .filter(|ranks| ranks.len() > 1)
        .flatten()
        .collect();
    for r in shared {
        reports[r].shares_host = true;
    }
    Ok(reports)
}

/// A problem found on one or more hosts, or a difference between hosts.
#[derive(Debug, Clone, PartialEq)]
pub struct Problem {
    /// The check id (`rdma.ports`) or cross-host check (`cluster.versions`).
    pub id: String,
    /// Warn or fail.
    pub status: Status,
    /// The hosts it concerns, as `host` or `host (rank N)`.
    pub hosts: Vec<String>,
    /// What was found (on the first of the hosts).
    pub found: String,
    /// How to fix it.
    pub fix: String,
}

/// The ranks that ran on each host (indexes into `reports`, which are ranks).
fn ranks_by_host(reports: &[HostReport]) -> BTreeMap<&str, Vec<usize>> {
    let mut by: BTreeMap<&str, Vec<usize>> = BTreeMap::new();
    for r in reports {
        by.entry(r.host()).or_default().push(r.rank);
    }
    by
}

/// Every check that warned or failed on some host, once, with all the hosts
/// where it did (in the order of the checks, failures first).
pub fn grouped_problems(reports: &[HostReport]) -> Vec<Problem> {
    let mut order: Vec<String> = Vec::new();
    let mut by_id: BTreeMap<(String, Status), Problem> = BTreeMap::new();
    for r in reports {
        for c in r.checks() {
            let status = status_of(&c["status"]);
            if status < Status::Warn {
                continue;
            }
            let id = c["id"].as_str().unwrap_or("?").to_owned();
            if !order.contains(&id) {
                order.push(id.clone());
            }
            by_id
                .entry((id.clone(), status))
                .or_insert_with(|| Problem {
                    id,
                    status,
                    hosts: Vec::new(),
                    found: c["found"].as_str().unwrap_or("").to_owned(),
                    fix: c["fix"].as_str().unwrap_or("").to_owned(),
                })
                .hosts
                .push(r.label());
        }
    }
    let mut out: Vec<Problem> = Vec::new();
    for status in [Status::Fail, Status::Warn] {
        for id in &order {
            if let Some(p) = by_id.remove(&(id.clone(), status)) {
                out.push(p);
            }
        }
    }
    out
}

/// What must be the same on every host: the value found in `details` of a
/// check (rdma-core, CUDA driver and NCCL versions).
const SAME_EVERYWHERE: &[(&str, &str, &str, &str)] = &[
    (
        "rdma.library",
        "rdma_core",
        "rdma-core",
        "install the same rdma-core on every host (or run the same container image)",
    ),
    (
        "gpu.driver",
        "driver_cuda_version",
        "CUDA driver version",
        "install the same NVIDIA driver on every host",
    ),
    (
        "gpu.nccl",
        "version",
        "NCCL",
        "use the same NCCL on every host: NCCL versions can refuse to talk to each other",
    ),
];

/// Differences between the hosts: ranks sharing a host, versions that
/// differ, and recommended NCCL variables whose values differ (one `mpirun
/// -x NAME=VALUE` sets the same value on every rank).
pub fn cross_checks(reports: &[HostReport]) -> Vec<Problem> {
    let mut out = Vec::new();
    let shared: Vec<(&str, Vec<usize>)> = ranks_by_host(reports)
        .into_iter()
        .filter(|(_, ranks)| ranks.len() > 1)
        .collect();
    if !shared.is_empty() {
        let found: Vec<String> = shared
            .iter()
            .map(|(h, ranks)| {
                let list: Vec<String> = ranks.iter().map(|r| r.to_string()).collect();
                format!("{h}: ranks {}", list.join(","))
            })
            .collect();
        out.push(Problem {
            id: "cluster.one-rank-per-host".into(),
            status: Status::Warn,
            hosts: shared.iter().map(|(h, _)| h.to_string()).collect(),
            found: format!("several ranks on one host ({})", found.join("; ")),
            fix: "start one rank per host: mpirun --map-by ppr:1:node, or -H host1,host2,... \
                  with -np equal to the number of hosts"
                .into(),
        });
    }
    for (check, key, what, fix) in SAME_EVERYWHERE {
        let values: Vec<(String, String)> = reports
            .iter()
            .filter_map(|r| {
                let c = r.checks().find(|c| c["id"] == *check)?;
                let v = &c["details"][*key];
                (!v.is_null()).then(|| (r.label(), plain(v)))
            })
            .collect();
        if let Some(p) = differing(values, what, fix, "cluster.versions") {
            out.push(p);
        }
    }
    let mut env: BTreeMap<String, Vec<(String, String)>> = BTreeMap::new();
    for r in reports {
        for e in r.doc["recommended"]["env"].as_array().into_iter().flatten() {
            if let (Some(k), Some(v)) = (e["name"].as_str(), e["value"].as_str()) {
                env.entry(k.to_owned())
                    .or_default()
                    .push((r.label(), v.to_owned()));
            }
        }
    }
    for (k, values) in env {
        let fix = format!(
            "set {k} per host (a wrapper script or the hosts' environment), not with one \
             mpirun -x, or make the hosts alike"
        );
        if let Some(p) = differing(values, &k, &fix, "cluster.nccl-env") {
            out.push(p);
        }
    }
    out
}

fn plain(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

/// A warning when the hosts' values are not all equal: each value with the
/// hosts that have it.
fn differing(values: Vec<(String, String)>, what: &str, fix: &str, id: &str) -> Option<Problem> {
    let mut by_value: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for (host, v) in values {
        by_value.entry(v).or_default().push(host);
    }
    if by_value.len() < 2 {
        return None;
    }
    let found = by_value
        .iter()
        .map(|(v, hosts)| format!("{v} on {}", hosts.join(", ")))
        .collect::<Vec<_>>()
        .join("; ");
    Some(Problem {
        id: id.to_owned(),
        status: Status::Warn,
        hosts: by_value.into_values().flatten().collect(),
        found: format!("{what} differs: {found}"),
        fix: fix.to_owned(),
    })
}

/// The worst of every host's result and of the differences between hosts.
pub fn worst(reports: &[HostReport], across: &[Problem]) -> Status {
    reports
        .iter()
        .map(HostReport::status)
        .chain(across.iter().map(|p| p.status))
        .max()
        .unwrap_or(Status::Ok)
}

/// The job judged once: the verdicts, the worst status and the exit
/// status that every renderer (text, JSON, report.html, `--drain`) reads,
/// so that none of them judges again.
#[derive(Debug, Clone)]
pub struct Judgement {
    /// The pair and NCCL verdicts ([`judge::judge`]); none when neither
    /// stage ran.
    pub judged: Option<judge::Judged>,
    /// The worst of the checks, the differences, the stages and the verdicts.
    pub status: Status,
    /// The job's exit status: [`EXIT_LOST`] once a rank was lost (the
    /// others went on, so the report is there but not of the whole
    /// cluster), else the worst status's.
    pub exit: i32,
}

impl Judgement {
    /// Judges the job once: the checks of `reports`, the differences
    /// `across` and the `stages`.
    pub fn of(reports: &[HostReport], across: &[Problem], stages: &Stages) -> Judgement {
        let judged = judge::judge(reports, stages);
        let verdicts = judged.as_ref().map_or(Status::Ok, judge::Judged::status);
        let w = worst(reports, across).max(verdicts);
        let status = stages.status().map_or(w, |s| w.max(s));
        let exit = if stages.lost.is_empty() {
            status.exit_code()
        } else {
            EXIT_LOST
        };
        Judgement {
            judged,
            status,
            exit,
        }
    }
}

/// The report rank 0 prints.
pub fn render_text(
    meta: &RunMeta,
    reports: &[HostReport],
    problems: &[Problem],
    across: &[Problem],
    stages: &Stages,
    judgement: &Judgement,
) -> String {
    let names: Vec<String> = reports.iter().map(HostReport::label).collect();
    let hosts = ranks_by_host(reports).len();
    let mut s = format!(
        "# erdma-cluster {}: erdma-doctor on {} host{} ({} rank{}), {}\n",
        meta.version,
        hosts,
        if hosts == 1 { "" } else { "s" },
        reports.len(),
        if reports.len() == 1 { "" } else { "s" },
        meta.date
    );
    let w = names.iter().map(|n| n.len()).max().unwrap_or(4).max(4);
    s.push_str(&format!(
        "{:<w$}  status  {:>3} {:>4} {:>4} {:>4}\n",
        "host", "ok", "warn", "fail", "skip"
    ));
    for (r, name) in reports.iter().zip(&names) {
        let n = |k: &str| r.doc["summary"][k].as_u64().unwrap_or(0);
        s.push_str(&format!(
            "{:<w$}  {:<6}  {:>3} {:>4} {:>4} {:>4}\n",
            name,
            r.status().as_str(),
            n("ok"),
            n("warn"),
            n("fail"),
            n("skip")
        ));
    }
    if !problems.is_empty() {
        s.push_str(
            "# problems, each with the hosts that have it (erdma-doctor there shows details)\n",
        );
        for p in problems {
            push_problem(&mut s, p, reports.len());
        }
    }
    if !across.is_empty() {
        s.push_str("# differences between the hosts\n");
        for p in across {
            push_problem(&mut s, p, reports.len());
        }
    }
    if let Some(v) = stages.nccl_pairs {
        s.push_str(&ncclpairs::describe_text(v));
    }
    if let Some(m) = stages.pairs {
        s.push_str(&m.render_text(&names));
    }
    if let Some(l) = stages.latency {
        s.push_str(&l.render_text(&names));
    }
    if let Some(c) = stages.baseline {
        s.push_str(&c.render_text());
    }
    if let Some(n) = stages.nccl {
        s.push_str(&n.render_text());
    }
    if let Some(t) = stages.traffic {
        s.push_str(&t.render_text());
    }
    s.push_str(&judge::render_text(
        reports,
        stages,
        judgement.judged.as_ref(),
    ));
    let lost = match stages.lost.len() {
        0 => String::new(),
        1 => ", a rank lost".into(),
        n => format!(", {n} ranks lost"),
    };
    s.push_str(&format!(
        "# result: {}{lost} (exit {})\n",
        judgement.status.as_str(),
        judgement.exit
    ));
    s
}

fn push_problem(s: &mut String, p: &Problem, ranks: usize) {
    let hosts = if p.hosts.len() == ranks && ranks > 1 {
        "all".to_owned()
    } else if p.hosts.len() > 8 {
        format!(
            "{}, ... ({} more)",
            p.hosts[..8].join(", "),
            p.hosts.len() - 8
        )
    } else {
        p.hosts.join(", ")
    };
    s.push_str(&format!(
        "{:<5} {:<20} {}/{} ({}): {}\n",
        p.status.as_str(),
        p.id,
        p.hosts.len().min(ranks),
        ranks,
        hosts,
        p.found
    ));
    if !p.fix.is_empty() {
        s.push_str(&format!("      fix: {}\n", p.fix));
    }
}

fn problem_json(p: &Problem) -> Value {
    json!({"id": p.id, "status": p.status, "hosts": p.hosts, "found": p.found, "fix": p.fix})
}

/// The `--json` document (also cluster.json under `--out`).
pub fn render_json(
    meta: &RunMeta,
    reports: &[HostReport],
    problems: &[Problem],
    across: &[Problem],
    stages: &Stages,
    judgement: &Judgement,
) -> Value {
    let mut m = meta.to_json();
    m.insert("status".into(), json!(judgement.status));
    m.insert("exit_status".into(), json!(judgement.exit));
    m.insert(
        "hosts".into(),
        reports
            .iter()
            .zip(file_names(reports))
            .map(|(r, file)| {
                json!({"rank": r.rank, "host": r.host(), "label": r.label(), "status": r.status(),
                       "summary": r.doc["summary"], "file": file})
            })
            .collect(),
    );
    m.insert(
        "problems".into(),
        problems.iter().map(problem_json).collect(),
    );
    m.insert("across".into(), across.iter().map(problem_json).collect());
    m.insert(
        "reports".into(),
        reports.iter().map(|r| r.doc.clone()).collect(),
    );
    if let Some(p) = stages.pairs {
        let mut v = p.to_json();
        if let Some(n) = stages.nccl_pairs {
            v["nccl"] = n.clone();
        }
        m.insert("pairs".into(), v);
    }
    if let Some(l) = stages.latency {
        let names: Vec<String> = reports.iter().map(HostReport::label).collect();
        m.insert("latency".into(), l.to_json(&names));
    }
    if let Some(c) = stages.baseline {
        m.insert("baseline".into(), c.to_json());
    }
    if let Some(n) = stages.nccl {
        m.insert("nccl".into(), n.to_json());
    }
    if let Some(t) = stages.traffic {
        m.insert("traffic".into(), t.to_json());
    }
    judge::add_json(&mut m, stages, judgement.judged.as_ref());
    Value::Object(m)
}

/// The pair matrix judged by [`diagnose`] (docs/cluster-diagnosis.md),
/// against the baseline when given, with the retest's runs when the job
/// ran them: the ranks' labels and the verdicts. Runs that shared a port
/// count at their rate times the runs sharing it; [`judge`] adds the NCCL
/// stage's verdicts and decides what they do to the exit status.
pub fn pair_verdicts(
    reports: &[HostReport],
    stages: &Stages,
) -> Option<(Vec<String>, diagnose::Diagnosis)> {
    let m = stages.pairs?;
    let names: Vec<String> = reports.iter().map(HostReport::label).collect();
    let n = names.len();
    if m.gbps.len() != n {
        return None;
    }
    // Every rail is judged (a NIC fault shows on its rail only); rail 0
    // alone has a baseline (perf-A-B.json).
    // Each rank's port rate on each rail, the first reference; with a
    // baseline the baseline is.
    let port = |devices: &dyn Fn(usize) -> Option<String>| -> Vec<Option<f64>> {
        match (stages.baseline, stages.port_rate) {
            (Some(_), _) | (None, PortRate::Off) => Vec::new(),
            (None, PortRate::Gbps(g)) => vec![Some(g); n],
            (None, PortRate::Auto) => (0..n)
                .map(|r| port_rate(reports.get(r)?, devices(r).as_deref()))
                .collect(),
        }
    };
    let mut rails: Vec<diagnose::Rail> = m
        .rails
        .iter()
        .filter(|r| r.gbps.len() == n)
        .map(|r| diagnose::Rail {
            gbps: r.gbps.clone(),
            port: port(&|i| r.devices.get(i).cloned().flatten()),
            ..Default::default()
        })
        .collect();
    if rails.is_empty() {
        rails.push(diagnose::Rail {
            gbps: m.gbps.clone(),
            port: port(&|_| None),
            ..Default::default()
        });
    }
    let index = |k: usize| m.rails.iter().position(|r| r.rail == k);
    for r in m.runs.iter().filter(|r| r.role == "client" && r.share > 1) {
        if let (Some(k), Some(g)) = (r.rail.and_then(index), r.gbps)
            && let Some(cell) = rails.get_mut(k).and_then(|x| x.gbps.get_mut(r.client))
        {
            cell[r.server] = Some(g * r.share as f64);
        }
    }
    for (c, s, k, g) in stages
        .retest
        .into_iter()
        .flat_map(judge::Retested::measured)
    {
        if let Some(rail) = index(k).and_then(|i| rails.get_mut(i))
            && c < n
            && s < n
        {
            rail.extra.entry((c, s)).or_default().push(g);
        }
    }
    let rail = &mut rails[0];
    if let Some(c) = stages.baseline {
        let labels = safe_labels(reports);
        let at = |l: &str| labels.iter().position(|x| x == l);
        let mut base = vec![vec![None; n]; n];
        for r in &c.rows {
            if let (Some(i), Some(j)) = (at(&r.client), at(&r.server)) {
                base[i][j] = r.base;
            }
        }
        rail.baseline = Some(base);
    }
    let mut d = diagnose::diagnose(&diagnose::Input {
        names: &names,
        rails: &rails,
        lost: stages.lost,
        port_gbps: None,
        fail_below: stages.baseline.map_or(0.9, |c| c.fail_below),
        min_effect: stages.min_effect,
    });
    if let Some(k) = index(ncclpairs::RAIL) {
        ncclpairs::name_rail(&mut d, k);
    }
    Some((names, d))
}

/// The active rate of `device` (none: erdma-perf's default, the host's
/// first) as the rank's erdma-doctor document reports it (`rdma.ports`'s
/// details, `rate_gbps`), in Gb/s; none when unknown, or when the device is
/// emulated (Soft-RoCE, Soft-iWARP: a nominal rate far above what they
/// move, so the rig's jobs are judged among themselves only).
pub fn port_rate(report: &HostReport, device: Option<&str>) -> Option<f64> {
    let c = report.checks().find(|c| c["id"] == "rdma.ports")?;
    let dev = device.map(|d| d.split(':').next().unwrap_or(d));
    let d = c["details"]
        .as_array()?
        .iter()
        .find(|d| dev.is_none_or(|x| d["device"] == x))?;
    if d["emulated"].as_bool() != Some(false) {
        return None;
    }
    d["rate_gbps"].as_f64().filter(|g| *g > 0.0)
}

/// The file name of each rank's document under `--out`: `doctor-HOST.json`,
/// `doctor-HOST-rankN.json` when ranks share a host. Host names are reduced
/// to `[A-Za-z0-9._-]` so that a name cannot leave the directory.
pub fn file_names(reports: &[HostReport]) -> Vec<String> {
    safe_labels(reports)
        .iter()
        .map(|l| format!("doctor-{l}.json"))
        .collect()
}

/// Each rank's name in file names: its host reduced to `[A-Za-z0-9._-]`
/// (no leading dot), with `-rankN` when ranks share the host.
fn safe_labels(reports: &[HostReport]) -> Vec<String> {
    let labels = reports
        .iter()
        .map(|r| {
            let safe = safe_name(r.host());
            if r.shares_host {
                format!("{safe}-rank{}", r.rank)
            } else {
                safe
            }
        })
        .collect();
    unique_labels(labels, |i| format!("rank{}", reports[i].rank))
}

/// `labels` made distinct for file names: a label that another shares
/// (hosts whose names differ only in characters [`safe_name`] replaces,
/// `node1!a` and `node1?a`) or that is empty gets `-` and `tag(i)` (its
/// rank), again until none is shared, so that no two files are one.
pub fn unique_labels(mut labels: Vec<String>, tag: impl Fn(usize) -> String) -> Vec<String> {
    for round in 0..4 {
        let shared: Vec<bool> = labels
            .iter()
            .map(|l| l.is_empty() || labels.iter().filter(|m| *m == l).count() > 1)
            .collect();
        if !shared.contains(&true) {
            break;
        }
        for (i, l) in labels.iter_mut().enumerate() {
            if shared[i] {
                *l = if l.is_empty() || round == 3 {
                    // Nothing of the name left, or still shared: the tag
                    // and the index alone.
                    format!("{}-{i}", tag(i))
                } else {
                    format!("{l}-{}", tag(i))
                };
            }
        }
    }
    labels
}

/// A host name as it may stand in a file name under `--out`: reduced to
/// `[A-Za-z0-9._-]`, no leading dot, so that a name cannot leave the
/// directory or hide its file.
pub fn safe_name(host: &str) -> String {
    let safe: String = host
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || "-_.".contains(c) {
                c
            } else {
                '_'
            }
        })
        .collect();
    safe.trim_start_matches('.').to_owned()
}

/// Writes every rank's document, each pair run's erdma-perf document
/// (`perf-CLIENT-SERVER.json`), cluster.json and the page a person reads,
/// report.html ([`html`]), into `dir` (created), each through
/// [`crate::outfile::write`]: a failed write leaves the earlier file, a
/// symbolic link at a name is replaced, not followed.
pub fn write_out(
    dir: &std::path::Path,
    reports: &[HostReport],
    pairs: Option<&Matrix>,
    whole: &Value,
) -> Result<(), String> {
    let fail = |what: &std::path::Path, e: std::io::Error| {
        format!(
            "writing {}: {e}: check the free space and that the directory is writable; the earlier file is kept",
            what.display()
        )
    };
    std::fs::create_dir_all(dir).map_err(|e| fail(dir, e))?;
    for (r, name) in reports.iter().zip(file_names(reports)) {
        let p = dir.join(name);
        crate::outfile::write(&p, format!("{:#}\n", r.doc).as_bytes()).map_err(|e| fail(&p, e))?;
    }
    let labels = safe_labels(reports);
    for (c, s, suffix, doc) in pairs.into_iter().flat_map(Matrix::client_docs) {
        let (Some(c), Some(s)) = (labels.get(c), labels.get(s)) else {
            continue;
        };
        let p = dir.join(format!("perf-{c}-{s}{suffix}.json"));
        crate::outfile::write(&p, format!("{doc:#}\n").as_bytes()).map_err(|e| fail(&p, e))?;
    }
    let p = dir.join("cluster.json");
    crate::outfile::write(&p, format!("{whole:#}\n").as_bytes()).map_err(|e| fail(&p, e))?;
    let p = dir.join("report.html");
    crate::outfile::write(&p, html::render(whole).as_bytes()).map_err(|e| fail(&p, e))
}

/// What the ranks sent of the stages after the pairs (each index = rank).
#[derive(Debug, Clone, Default)]
pub struct Gathered {
    /// The NCCL stage's plan and each rank's runs (`--nccl`).
    pub nccl: Option<(nccl::Plan, Vec<Vec<u8>>)>,
    /// Each rank's RDMA counters around the pair stage, `{"before",
    /// "after"}` (null but on each host's first rank).
    pub pair_counters: Option<Vec<Vec<u8>>>,
    /// The host of each rank as the NCCL stage split them, when not the
    /// doctor's (a test hook takes each rank for a host).
    pub nccl_hosts: Option<Vec<String>>,
    /// The ranks lost during the job (no answer within `--timeout`), with
    /// why; the others went on without them.
    pub lost: Vec<(usize, String)>,
    /// The pair stage's schedule: `{"schedule": text, "predicted_wall_s",
    /// "pair_wall_s"}`.
    pub schedule: Option<Value>,
    /// The retest rounds' plan and each rank's retest runs.
    pub retest: Option<(retest::Plan, Vec<Vec<u8>>)>,
    /// The directed (client, server) cells the pair stage's schedule was
    /// to measure (`--budget`); none: every cell (the full matrix).
    pub planned: Option<Vec<(usize, usize)>>,
    /// The NCCL pairs' collective and library
    /// ([`ncclpairs::describe`]), when they ran (`--nccl-pairs`).
    pub nccl_pairs: Option<Value>,
    /// Each rank's latency runs (`--latency`) and the latency rounds'
    /// wall time in seconds.
    pub latency: Option<(Vec<Vec<u8>>, f64)>,
}

/// The check a lost rank's report gets (its own, or one made for it when
/// it was lost before sending one), so that the report lists it once
/// among the problems, with a fix.
pub fn mark_lost(raw: &mut [Vec<u8>], lost: &[(usize, String)]) {
    for (r, why) in lost {
        let Some(bytes) = raw.get_mut(*r) else {
            continue;
        };
        let mut doc: Value = serde_json::from_slice(bytes).unwrap_or(Value::Null);
        if doc["tool"] != "erdma-doctor" || !doc["checks"].is_array() {
            doc = serde_json::json!({
                "tool": "erdma-doctor", "host": format!("unknown (rank {r})"),
                "status": "fail", "checks": [],
            });
        }
        let check = serde_json::json!({
            "id": "cluster.lost", "group": "cluster", "status": "fail",
            "found": format!("rank {r} lost: {why}; the others went on without it"),
            "fix": "look at the host (is the process stopped, hung, killed, out of memory?), \
                    then rerun the job; with --out, --resume DIR keeps the pair rounds measured",
            "details": null,
        });
        if let Some(c) = doc["checks"].as_array_mut() {
            c.push(check);
        }
        doc["status"] = "fail".into();
        *bytes = doc.to_string().into_bytes();
    }
}

/// Writes each NCCL run's -J document under `dir` (nccl-cluster-TEST.json,
/// nccl-host-HOST-TEST.json).
pub fn write_nccl(dir: &std::path::Path, rep: Option<&nccl::Report>) -> Result<(), String> {
    for (name, doc) in rep.into_iter().flat_map(nccl::Report::files) {
        let p = dir.join(name);
        crate::outfile::write(&p, format!("{doc:#}\n").as_bytes()).map_err(|e| {
            format!(
                "writing {}: {e}: check the free space and that the directory is writable; the earlier file is kept",
                p.display()
            )
        })?;
    }
    Ok(())
}

/// Rank 0's work once the documents are gathered: prints the report (text
/// or JSON) to `out`, writes `--out`; returns the exit status.
/// `pairs`: what each rank sent of the pair stage (`--pairs`).
pub fn report(
    args: &Args,
    meta: &RunMeta,
    raw: &[Vec<u8>],
    pairs: Option<&[Vec<u8>]>,
    out: &mut dyn std::io::Write,
    err: &mut dyn std::io::Write,
) -> i32 {
    report_with(args, meta, raw, pairs, &Gathered::default(), out, err)
}

/// Each rank's machine name ([`machine_names`]) from the gathered doctor
/// documents ("?" for one that is not JSON: [`report`] says so).
pub fn host_names(raw: &[Vec<u8>]) -> Vec<String> {
    let ids: Vec<Machine> = raw
        .iter()
        .map(|b| {
            serde_json::from_slice::<Value>(b)
                .map_or_else(|_| Machine::default(), |d| Machine::of(&d))
        })
        .collect();
    machine_names(&ids)
}

/// What tells a machine from another (issue 35): its machine id
/// (`/etc/machine-id`, else the boot id) and its full host name, not the
/// short one (`node1.rack-a` and `node1.rack-b` are two machines).
#[derive(Debug, Clone, Default, PartialEq, Eq, PartialOrd, Ord)]
pub struct Machine {
    /// `/etc/machine-id` (or the boot id); empty when unknown.
    pub id: String,
    /// The full host name (`gethostname`); the short one of an older
    /// document; "?" when none.
    pub name: String,
}

impl Machine {
    /// This process's machine.
    pub fn this() -> Machine {
        let id = crate::input::read_text("/etc/machine-id")
            .map(|s| s.trim().to_owned())
            .ok()
            .filter(|s| !s.is_empty())
            .unwrap_or_else(crate::nccltests::bootstrap::hosthash::boot_id);
        Machine {
            id,
            name: full_hostname(),
        }
    }

    /// The machine a rank's erdma-doctor document names: `machine_id` and
    /// `hostname` (what erdma-cluster adds), else its short `host`.
    pub fn of(doc: &Value) -> Machine {
        let s = |k: &str| doc[k].as_str().filter(|v| !v.is_empty());
        Machine {
            id: s("machine_id").unwrap_or("").to_owned(),
            name: s("hostname").or(s("host")).unwrap_or("?").to_owned(),
        }
    }

    /// As one line for an exchange between the ranks: `ID NAME`.
    pub fn to_line(&self) -> String {
        format!("{} {}", self.id, self.name)
    }

    /// From [`Machine::to_line`]; "?" for what is not one (a lost rank).
    pub fn from_line(line: &str) -> Machine {
        match line.split_once(' ') {
            Some((id, name)) if !name.is_empty() => Machine {
                id: id.to_owned(),
                name: name.to_owned(),
            },
            _ => Machine {
                id: String::new(),
                name: "?".into(),
            },
        }
    }
}

/// This host's full name (`gethostname`, not cut at the first dot).
pub fn full_hostname() -> String {
    let mut buf = [0u8; 1024];
    // SAFETY: buf is writable for its whole length; gethostname writes at
    // most that many bytes.
    let rc = unsafe { libc::gethostname(buf.as_mut_ptr().cast(), buf.len()) };
    if rc != 0 {
        return crate::nccltests::bootstrap::hosthash::short_hostname();
    }
    let end = buf.iter().position(|&b| b == 0).unwrap_or(buf.len());
    String::from_utf8_lossy(&buf[..end]).into_owned()
}

/// Each rank's machine name: its full host name, so that ranks of one
/// machine share it and two machines never do; a name two machines (two
/// ids) share gets `~` and the first 8 characters of the id (or the rank
/// when the id is unknown).
pub fn machine_names(ids: &[Machine]) -> Vec<String> {
    ids.iter()
        .enumerate()
        .map(|(r, m)| {
            let clash = ids.iter().any(|o| o.name == m.name && o.id != m.id);
            if !clash {
                return m.name.clone();
            }
            let tag: String = m.id.chars().take(8).collect();
            if tag.is_empty() {
                format!("{}~rank{r}", m.name)
            } else {
                format!("{}~{tag}", m.name)
            }
        })
        .collect()
}

/// Each rank's index among the ranks of its host (0 for the first): the
/// pair stage gives each its own TCP port in a run, so that two servers on
/// one host do not meet on one port.
pub fn host_slots(hosts: &[String]) -> Vec<usize> {
    hosts
        .iter()
        .enumerate()
        .map(|(i, h)| hosts[..i].iter().filter(|x| *x == h).count())
        .collect()
}

/// Whether each rank is the first of its host (it reads the host's
/// counters for the traffic proof; the others would repeat them).
pub fn first_of_host(hosts: &[String]) -> Vec<bool> {
    hosts
        .iter()
        .enumerate()
        .map(|(i, h)| !hosts[..i].contains(h))
        .collect()
}

/// Whether a successful pair run used `nic` on `host` (a run without a
/// device name used the host's first, erdma-perf's default).
fn used_ok(m: &Matrix, hosts: &[String], host: &str, nic: &str) -> bool {
    m.runs.iter().filter(|r| r.error.is_none()).any(|r| {
        let (rank, dev) = if r.role == "client" {
            (r.client, &r.client_device)
        } else {
            (r.server, &r.server_device)
        };
        hosts.get(rank).is_some_and(|h| h == host)
            && dev
                .as_deref()
                .is_none_or(|d| d == nic.split(':').next().unwrap_or(nic))
    })
}

/// The NCCL stage and the traffic proof from what the ranks sent.
fn later_stages(
    args: &Args,
    reports: &[HostReport],
    m: Option<&Matrix>,
    g: &Gathered,
) -> Result<(Option<nccl::Report>, Option<traffic::Proof>), String> {
    let hosts: Vec<String> = reports.iter().map(|r| r.host().to_owned()).collect();
    let first = first_of_host(&hosts);
    let mut proof = traffic::Proof::default();
    let mut any = false;
    if let Some(raw) = &g.pair_counters {
        any = true;
        for (r, bytes) in raw.iter().enumerate().filter(|(r, _)| first[*r]) {
            let v: Value = serde_json::from_slice(bytes).unwrap_or(Value::Null);
            let e = traffic::Expect::default();
            for mut row in traffic::rows(&hosts[r], "pairs", &v["before"], &v["after"], &e) {
                let used = m.is_some_and(|m| used_ok(m, &hosts, &row.host, &row.nic));
                traffic::judge_pairs(&mut row, used);
                proof.rows.push(row);
            }
        }
    }
    let Some((plan, raw)) = &g.nccl else {
        return Ok((None, any.then_some(proof)));
    };
    let hosts = g.nccl_hosts.clone().unwrap_or(hosts);
    let first = first_of_host(&hosts);
    let slowest = m.and_then(|m| m.gbps.iter().flatten().flatten().copied().reduce(f64::min));
    let nics = args
        .pair
        .devices
        .first()
        .map_or(1, |d| d.split('+').count());
    let ctx = nccl::Context {
        args: &args.nccl,
        hosts: &hosts,
        expected: nccl::expected_busbw(slowest, nics),
        baseline: args.baseline.as_deref().map(|d| (d, args.fail_below)),
        lost: &g.lost,
        deadline_s: nccl::deadline_s(&args.nccl, args.timeout),
    };
    let (rep, runs) = nccl::Report::from_ranks(&ctx, plan.clone(), raw)?;
    let docs: Vec<Value> = reports.iter().map(|r| r.doc.clone()).collect();
    let causes = traffic::causes(&docs);
    let nhosts = nccl::distinct_hosts(&hosts).len();
    for st in &rep.stages {
        let nranks = st.ranks.len() * plan.gpus;
        let host_bytes = match (st.scope.as_str(), &st.doc) {
            ("cluster", Some(d)) => nccl::expected_host_bytes(&st.collective, d, nhosts, nranks),
            ("cluster", None) => None,
            _ => Some(0),
        };
        let e = traffic::Expect {
            host_bytes,
            must_use_rdma: plan.backend == "nccl",
            causes: causes.clone(),
        };
        let label = format!("nccl {} {}", st.name, st.collective);
        for &r in st.ranks.iter().filter(|&&r| first[r]) {
            let Some(run) = runs[r]
                .iter()
                .find(|x| x.test == st.collective && x.scope == st.scope)
            else {
                continue;
            };
            proof.rows.extend(traffic::rows(
                &hosts[r],
                &label,
                &run.before,
                &run.after,
                &e,
            ));
        }
    }
    Ok((Some(rep), Some(proof)))
}

/// [`report`] with the later stages' gathered data.
pub fn report_with(
    args: &Args,
    meta: &RunMeta,
    raw: &[Vec<u8>],
    pairs: Option<&[Vec<u8>]>,
    g: &Gathered,
    out: &mut dyn std::io::Write,
    err: &mut dyn std::io::Write,
) -> i32 {
    let mut raw = raw.to_vec();
    mark_lost(&mut raw, &g.lost);
    let parsed = parse_reports(&raw).and_then(|r| {
        let m = pairs
            .map(|p| Matrix::from_ranks(&args.pair.pair_test, p))
            .transpose()?
            .map(|m| match &g.planned {
                Some(cells) => m.with_planned(cells),
                None => m,
            });
        Ok((r, m))
    });
    let (reports, matrix) = match parsed {
        Ok(x) => x,
        Err(e) => {
            let _ = writeln!(err, "erdma-cluster: {e}");
            return EXIT_OUTPUT;
        }
    };
    let m = matrix.as_ref();
    let labels = safe_labels(&reports);
    let against = args
        .baseline
        .as_deref()
        .zip(m)
        .map(|(dir, m)| baseline::compare(dir, args.fail_below, &labels, m));
    let (nccl_report, proof) = match later_stages(args, &reports, m, g) {
        Ok(x) => x,
        Err(e) => {
            let _ = writeln!(err, "erdma-cluster: {e}");
            return EXIT_OUTPUT;
        }
    };
    let lat = match &g.latency {
        Some((raw, wall)) => {
            let names: Vec<String> = reports.iter().map(HostReport::label).collect();
            match latency::Report::from_ranks(raw, g.planned.as_deref(), &names, Some(*wall)) {
                Ok(r) => Some(r),
                Err(e) => {
                    let _ = writeln!(err, "erdma-cluster: {e}");
                    return EXIT_OUTPUT;
                }
            }
        }
        None => None,
    };
    let retested = match &g.retest {
        Some((plan, raw)) => match judge::Retested::from_ranks(plan.clone(), raw) {
            Ok(r) => Some(r),
            Err(e) => {
                let _ = writeln!(err, "erdma-cluster: {e}");
                return EXIT_OUTPUT;
            }
        },
        None => None,
    };
    let stages = Stages {
        pairs: m,
        baseline: against.as_ref(),
        nccl: nccl_report.as_ref(),
        traffic: proof.as_ref(),
        lost: &g.lost,
        schedule: g.schedule.as_ref(),
        retest: retested.as_ref(),
        port_rate: args.port_rate,
        min_effect: args.min_effect,
        nccl_pairs: g.nccl_pairs.as_ref(),
        latency: lat.as_ref(),
    };
    let problems = grouped_problems(&reports);
    let across = cross_checks(&reports);
    // Judged once: the text, the JSON, report.html, --drain and the exit
    // status all read this one value.
    let judgement = Judgement::of(&reports, &across, &stages);
    let whole = render_json(meta, &reports, &problems, &across, &stages, &judgement);
    let text = if args.json {
        format!("{whole}\n")
    } else {
        // Host names and values come from other machines: no control
        // character reaches the terminal raw (JSON escapes its own).
        crate::cli::terminal_safe(&render_text(
            meta, &reports, &problems, &across, &stages, &judgement,
        ))
        .into_owned()
    };
    if let Err(e) = out.write_all(text.as_bytes()).and_then(|_| out.flush()) {
        let _ = writeln!(
            err,
            "erdma-cluster: writing the report failed: {e}: check where stdout goes"
        );
        return EXIT_OUTPUT;
    }
    if let Some(dir) = &args.out
        && let Err(e) =
            write_out(dir, &reports, m, &whole).and_then(|()| write_nccl(dir, nccl_report.as_ref()))
    {
        let _ = writeln!(err, "erdma-cluster: {e}");
        return EXIT_OUTPUT;
    }
    if let Some(mode) = args.drain
        && !drain_verdicts(&reports, judgement.judged.as_ref(), mode, err)
    {
        return EXIT_OUTPUT;
    }
    judgement.exit
}

/// `--drain`: the nodes of the confirmed host and NIC verdicts of the pair
/// stage ([`drain`]); false when a scontrol command failed.
fn drain_verdicts(
    reports: &[HostReport],
    judged: Option<&judge::Judged>,
    mode: drain::Mode,
    err: &mut dyn std::io::Write,
) -> bool {
    let list = match judged {
        Some(j) => {
            let n = j.diagnosis.verdicts.len() - j.from_nccl;
            let confirmed = j.diagnosis.verdicts[..n]
                .iter()
                .map(|v| (v, j.retest_ran && j.confirmed(v)));
            drain::drains(confirmed, |i| {
                reports
                    .get(i)
                    .map(|r| r.host().to_owned())
                    .or_else(|| j.names.get(i).cloned())
            })
        }
        None => Vec::new(),
    };
    drain::run(&list, mode, err)
}

/// The checks of the command line that clap cannot make: [`check_skips`],
/// [`check_timeout`] and [`check_baseline`].
pub fn check_args(args: &Args) -> Result<(), String> {
    if args.nccl.nccl || args.nccl.nccl_pairs {
        nccl::check(&args.nccl)?;
    }
    check_skips(args)?;
    check_timeout(args)?;
    check_budget(args)?;
    check_baseline(args)
}

/// Rank 0's retest plan after the main rounds: the first pass's verdicts
/// (`pair_raw`: each rank's runs, `raw_reports`: the doctor documents),
/// against the baseline when given, and their retest rounds
/// ([`retest::plan`]); no retest when the runs cannot be read.
pub fn retest_plan(args: &Args, raw_reports: &[Vec<u8>], pair_raw: &[Vec<u8>]) -> retest::Plan {
    let (Ok(reports), Ok(m)) = (
        parse_reports(raw_reports),
        Matrix::from_ranks(&args.pair.pair_test, pair_raw),
    ) else {
        return retest::Plan::default();
    };
    let labels = safe_labels(&reports);
    let against = args
        .baseline
        .as_deref()
        .map(|dir| baseline::compare(dir, args.fail_below, &labels, &m));
    let stages = Stages {
        pairs: Some(&m),
        baseline: against.as_ref(),
        port_rate: args.port_rate,
        min_effect: args.min_effect,
        ..Default::default()
    };
    let n = reports.len();
    let mut d = pair_verdicts(&reports, &stages)
        .map(|x| x.1)
        .unwrap_or_default();
    suspect_hook(&mut d, n);
    retest::plan(&d, n, schedule::retest_rounds(n))
}

/// The argument of test hook `name` in `ERDMA_CLUSTER_HOOK` (hooks
/// separated by commas, each `name:ARG`), trimmed; none when not given.
/// Every erdma-cluster hook is read through it.
pub fn hook(name: &str) -> Option<String> {
    hook_in(&std::env::var("ERDMA_CLUSTER_HOOK").ok()?, name)
}

/// [`hook`] from the variable's value `all`.
fn hook_in(all: &str, name: &str) -> Option<String> {
    all.split(',').find_map(|h| {
        h.trim()
            .strip_prefix(name)
            .and_then(|r| r.strip_prefix(':'))
            .map(|r| r.trim().to_owned())
    })
}

/// `ERDMA_CLUSTER_HOOK=suspect:R` (tests; with others, comma-separated):
/// rank R is a suspect of the first pass whatever was measured, so that a
/// job without RDMA devices (or with the rig's wide spread) still plans,
/// gathers and runs its retest rounds for it.
fn suspect_hook(d: &mut diagnose::Diagnosis, n: usize) {
    if let Some(r) = hook("suspect")
        .and_then(|r| r.parse::<usize>().ok())
        .filter(|&r| r < n)
    {
        d.verdicts.push(diagnose::Verdict {
            kind: diagnose::Kind::Host,
            hosts: vec![r],
            nic: None,
            why: "named by ERDMA_CLUSTER_HOOK=suspect (a test)".into(),
            numbers: Default::default(),
            retested: false,
            seen_again: false,
        });
    }
}

/// `--budget` needs a schedule to pick: the pair stage's or the simulator's.
pub fn check_budget(args: &Args) -> Result<(), String> {
    match args.sim.budget {
        Some(b) if !args.pair.pairs && !args.nccl.nccl_pairs && args.sim.simulate.is_none() => {
            Err(format!(
                "--budget {b}: needs --pairs or --nccl-pairs (the real job's pair stages) or --simulate"
            ))
        }
        _ => Ok(()),
    }
}

/// The pair stage's schedule for `size` ranks with `rails` NICs each
/// whose slowest port runs at `gbps` (none: unknown): `--budget`, the run
/// length of `--perf-args` (or the job's own, [`steps::run_source`]),
/// `--rails-serial` and `--directions-serial`; or why it cannot be.
pub fn job_plan(
    args: &Args,
    size: usize,
    rails: usize,
    gbps: Option<f64>,
) -> Result<steps::JobPlan, String> {
    let o = pairs::options(&args.pair, 0)?;
    steps::JobPlan::new(
        size,
        args.sim.budget.map(|m| m * 60.0),
        pairs::combos(rails, args.pair.cross_rails),
        steps::run_source(&o, &args.pair.perf_args, gbps),
        layout(args),
    )
}

/// How the pair stage lays out its steps (`--rails-serial`,
/// `--directions-serial`).
pub fn layout(args: &Args) -> steps::Layout {
    steps::Layout {
        rails_at_once: !args.pair.rails_serial,
        directions_at_once: !args.pair.directions_serial,
    }
}

/// [`job_plan`], or the full matrix when the budget cannot hold the
/// rails the ranks found (more than `--devices` named) or the runs whose
/// length the ports' rates did not let the job choose: the schedule the
/// job runs.
pub fn job_plan_or_full(
    args: &Args,
    size: usize,
    rails: usize,
    gbps: Option<f64>,
) -> steps::JobPlan {
    job_plan(args, size, rails, gbps).unwrap_or_else(|_| {
        let run = pairs::options(&args.pair, 0).map_or(steps::RunSource::Assumed, |o| {
            steps::run_source(&o, &args.pair.perf_args, gbps)
        });
        steps::JobPlan::full(
            size,
            pairs::combos(rails, args.pair.cross_rails),
            run,
            layout(args),
        )
    })
}

/// With `--budget`: the schedule fits it and its ports (the main rounds
/// and the most retest rounds, one rank per host: a host's further ranks
/// are checked per run) fit below 65536.
pub fn check_job(args: &Args, size: usize) -> Result<(), String> {
    if args.sim.budget.is_none() || size < 2 {
        return Ok(());
    }
    let rails = (0..args.pair.devices.len())
        .filter_map(|r| pairs::given_rails(&args.pair, r).map(|v| v.len()))
        .max()
        .unwrap_or(1);
    // The ports' rates are not known before the ranks meet; they set only
    // the iterations of a run whose length the job chooses, not the
    // schedule: any rate checks it.
    let plan = job_plan(args, size, rails, Some(100.0))?;
    let need = plan.all_ports(1);
    if u32::from(args.pair.pair_port) + need > 65535 {
        return Err(format!(
            "--pair-port {}: {size} ranks under --budget need {need} ports from there: take a lower port",
            args.pair.pair_port
        ));
    }
    Ok(())
}

/// `--baseline DIR` names a directory (a typo must fail the CI gate at
/// once, not turn every pair into a warning), with a stage to compare.
pub fn check_baseline(args: &Args) -> Result<(), String> {
    let Some(dir) = &args.baseline else {
        return Ok(());
    };
    if !args.pair.pairs && !args.nccl.nccl {
        return Err("--baseline: needs --pairs or --nccl (the stages it compares)".into());
    }
    match std::fs::metadata(dir) {
        Ok(m) if m.is_dir() => Ok(()),
        Ok(_) => Err(format!(
            "--baseline {}: not a directory: name the directory an earlier run's --out wrote",
            dir.display()
        )),
        Err(e) => Err(format!(
            "--baseline {}: {e}: name the directory an earlier run's --out wrote",
            dir.display()
        )),
    }
}

/// `--timeout` against the stages it must cover.
pub fn check_timeout(args: &Args) -> Result<(), String> {
    if args.pair.pairs && args.timeout < MIN_PAIRS_TIMEOUT_S {
        return Err(format!(
            "--timeout {} with --pairs: at least {MIN_PAIRS_TIMEOUT_S} (a round's erdma-perf runs take up to 30 s)",
            args.timeout
        ));
    }
    Ok(())
}

/// Whether every `--skip` name is a check or group of erdma-doctor.
pub fn check_skips(args: &Args) -> Result<(), String> {
    match args.skip.iter().find(|s| !crate::doctor::known(s)) {
        Some(bad) => Err(format!(
            "--skip {bad}: no such check or group: see erdma-doctor --list"
        )),
        None => Ok(()),
    }
}

#[cfg(test)]
mod tests;
