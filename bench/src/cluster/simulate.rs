//! `erdma-cluster --simulate HOSTS[xNICS] --inject SPEC...`: the pair
//! stage's schedule, retest and diagnosis on modelled measurements (the
//! port rate, noise that grows with the flows sharing a port and shrinks with
//! the run length, injected faults), with no MPI and no network. It prints
//! the verdicts as the real job does, the predicted wall time of the real
//! job, and what it found against what was injected. The model is
//! [`Model`], stated in docs/cluster-diagnosis.md.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Instant;

use serde_json::{Value, json};

use super::diagnose::{self, Diagnosis, Input, Kind, Rail, Verdict};
use super::job::{self, Network};
use super::schedule::{Model, Plan, Rng};
use super::steps::{self, JobPlan, Round};

pub mod noise;

pub use noise::{Noise, RoundDraw};

/// Exit status: every injected fault found and classified right, and no
/// other verdict.
pub const EXIT_MATCH: i32 = 0;
/// A fault missed or misclassified, or a verdict about a healthy part.
pub const EXIT_MISMATCH: i32 = 2;

/// The simulator's options (part of erdma-cluster's command line).
#[derive(Debug, Clone, clap::Args)]
pub struct SimArgs {
    /// Simulate a cluster of HOSTS hosts with NICS NICs each (default 1),
    /// named h0, h1, ...: no MPI, no network.
    #[arg(long, value_name = "HOSTS[xNICS]")]
    pub simulate: Option<String>,
    /// Faults to inject: host:H:F, nic:H:K:F, link:A:B:F, direction:A:B:F
    /// (A -> B only), flap:A:B (every run at a random 20-80%),
    /// flap:A:B:F:P (the link at F in a fraction P of its runs, healthy in
    /// the others), dead:H, hang:H, fabric:F (every path; F: the rate
    /// factor, e.g. 0.8).
    #[arg(long, value_name = "SPEC", num_args = 1.., requires = "simulate")]
    pub inject: Vec<String>,
    /// The time the pair stage may take, in minutes: picks the schedule
    /// (with --pairs, the real job's; with --simulate, the simulated one's).
    #[arg(long, value_name = "MINUTES", value_parser = crate::compare::cli::positive)]
    pub budget: Option<f64>,
    /// Seed of the simulated noise, faults' draws and random pairings.
    #[arg(long, value_name = "N", default_value_t = 1, requires = "simulate")]
    pub seed: u64,
    /// Run-to-run noise of a flow, one or more models: S (e.g. 3%: normal,
    /// the half-width of its 95% range) or gauss:S; t:DF:S (Student t,
    /// heavy tails); drop:P:F (a run at F with probability P); round:S
    /// (one factor per round, shared by its flows); collide:P:F (flows
    /// colliding at F, with probability P when every host sends). See
    /// docs/cluster-diagnosis.md, "Noise models".
    #[arg(long, value_name = "SPEC", num_args = 1.., default_value = "3%", requires = "simulate")]
    pub noise: Vec<String>,
    /// The ports' rate, Gb/s.
    #[arg(long, value_name = "GBPS", default_value_t = 100.0, value_parser = crate::compare::cli::positive, requires = "simulate")]
    pub port_gbps: f64,
    /// Simulate this many clusters (seeds SEED, SEED+1, ...) and summarize.
    #[arg(long, value_name = "N", default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=100_000), requires = "simulate")]
    pub clusters: u32,
    /// Also time rank 0's share of the real job at this size: as many
    /// erdma-doctor documents as hosts (this host's own, renamed), grouped,
    /// the first NIC's simulated matrix judged, the report rendered (and
    /// written under --out).
    #[arg(long, requires = "simulate")]
    pub documents: bool,
    /// Run the simulated cluster through the real job's code: its schedule
    /// (--budget, --perf-args -D, --cross-rails as the job reads them), its
    /// rounds, retest plan, confirmation, verdicts, report and exit status,
    /// each run measured by the model instead of erdma-perf (for clusters
    /// of up to a few hundred hosts: every run is a record, as the job's).
    #[arg(long, requires = "simulate")]
    pub as_job: bool,
    /// Put the injected faults on other hosts in each cluster: a random
    /// draw per seed, hK naming the K-th host drawn (the clusters then
    /// differ in where the faults sit, not only in their noise).
    #[arg(long, requires = "simulate")]
    pub shuffle: bool,
}

/// `0.03` or `3%`, in [0, 0.5].
pub fn fraction(s: &str) -> Result<f64, String> {
    let (num, scale) = match s.strip_suffix('%') {
        Some(p) => (p, 100.0),
        None => (s, 1.0),
    };
    match num.trim().parse::<f64>() {
        Ok(v) if (0.0..=0.5).contains(&(v / scale)) => Ok(v / scale),
        _ => Err(format!(
            "'{s}': a fraction from 0 to 0.5, or a percentage such as 3%"
        )),
    }
}

/// `--min-effect`: `0.05` or `5%`, over 0 and at most 0.5.
pub fn min_effect(s: &str) -> Result<f64, String> {
    match fraction(s) {
        Ok(v) if v > 0.0 => Ok(v),
        _ => Err(format!(
            "'{s}': the smallest slowdown to report, over 0 and at most 50%, such as 5% or 0.05"
        )),
    }
}

/// Whether the command line asks for a simulation (checked before MPI
/// starts: a simulation needs no mpirun).
pub fn requested() -> bool {
    std::env::args_os().any(|a| {
        let a = a.to_string_lossy();
        a == "--simulate" || a.starts_with("--simulate=")
    })
}

/// One injected fault.
#[derive(Debug, Clone, PartialEq)]
pub enum Fault {
    /// Every NIC of the host at factor f.
    Host(usize, f64),
    /// One NIC of the host.
    Nic(usize, usize, f64),
    /// The path between two hosts, both directions, on every NIC.
    Link(usize, usize, f64),
    /// One direction (client, server), every NIC.
    Direction(usize, usize, f64),
    /// A link whose every run gets a random 20-80% of the rate.
    Flap(usize, usize),
    /// A link at factor f in a fraction p of its runs (each run drawn), at
    /// full rate in the others: `Intermittent(a, b, f, p)`.
    Intermittent(usize, usize, f64, f64),
    /// A host whose process is gone: its runs fail at once.
    Dead(usize),
    /// A host that hangs: its first run never ends.
    Hang(usize),
    /// Every path of the cluster at factor f (a wrong MTU, flow control
    /// off, a rate-limited network): only the ports' rate shows it.
    Fabric(f64),
}

/// The most simulated hosts.
pub const MAX_HOSTS: usize = 10_000;
/// The most matrix cells (hosts x hosts x NICs): 16 bytes each, 1.6 GB
/// (10,000 x 1: report.html is measured at that size).
pub const MAX_CELLS: usize = 100_000_000;

/// The simulated cluster's shape: `HOSTS[xNICS]`.
pub fn parse_shape(s: &str) -> Result<(usize, usize), String> {
    let (h, n) = s.split_once(['x', 'X']).unwrap_or((s, "1"));
    match (h.parse::<usize>(), n.parse::<usize>()) {
        (Ok(h), Ok(n)) if h * h * n > MAX_CELLS && (2..=MAX_HOSTS).contains(&h) => Err(format!(
            "--simulate {s}: {h} hosts x {n} NICs is more than the simulator holds ({} million matrix cells, 16 bytes each): take fewer NICs",
            MAX_CELLS / 1_000_000
        )),
        (Ok(h), Ok(n)) if (2..=MAX_HOSTS).contains(&h) && (1..=16).contains(&n) => Ok((h, n)),
        _ => Err(format!(
            "--simulate {s}: expected HOSTS[xNICS] with 2 to {MAX_HOSTS} hosts and 1 to 16 NICs, e.g. 1000x2"
        )),
    }
}

impl Fault {
    /// From `KIND:ARGS[:FACTOR]` (hosts named h0, h1, ...).
    pub fn parse(spec: &str, hosts: usize, nics: usize) -> Result<Fault, String> {
        let bad = |why: String| format!("--inject {spec}: {why}");
        let parts: Vec<&str> = spec.split(':').collect();
        let host = |s: &str| -> Result<usize, String> {
            s.strip_prefix('h')
                .and_then(|n| n.parse::<usize>().ok())
                .filter(|&n| n < hosts)
                .ok_or_else(|| {
                    bad(format!(
                        "'{s}' is not a host: name one of h0 to h{}",
                        hosts - 1
                    ))
                })
        };
        let factor = |s: &str| -> Result<f64, String> {
            s.parse::<f64>()
                .ok()
                .filter(|f| *f > 0.0 && *f < 1.0)
                .ok_or_else(|| {
                    bad(format!(
                        "'{s}' is not a factor: a rate ratio between 0 and 1, e.g. 0.8"
                    ))
                })
        };
        let pair = |a: &str, b: &str| -> Result<(usize, usize), String> {
            let (a, b) = (host(a)?, host(b)?);
            if a == b {
                return Err(bad("the two hosts are the same: name two".into()));
            }
            Ok((a, b))
        };
        let usage = match parts[0] {
            "host" => "host:HOST:FACTOR, e.g. host:h17:0.8",
            "nic" => "nic:HOST:NIC:FACTOR, e.g. nic:h17:1:0.8",
            "link" => "link:HOST:HOST:FACTOR, e.g. link:h3:h9:0.8",
            "direction" => "direction:FROM:TO:FACTOR, e.g. direction:h3:h9:0.8",
            "flap" => "flap:HOST:HOST[:FACTOR:FRACTION], e.g. flap:h3:h9 or flap:h3:h9:0.5:0.3",
            "dead" => "dead:HOST, e.g. dead:h5",
            "hang" => "hang:HOST, e.g. hang:h5",
            "fabric" => "fabric:FACTOR, e.g. fabric:0.8",
            k => {
                return Err(bad(format!(
                    "no fault kind '{k}': one of host, nic, link, direction, flap, dead, hang, fabric"
                )));
            }
        };
        let fault = match parts.as_slice() {
            ["host", h, f] => Fault::Host(host(h)?, factor(f)?),
            ["nic", h, k, f] => {
                let k = k
                    .parse::<usize>()
                    .ok()
                    .filter(|&k| k < nics)
                    .ok_or_else(|| bad(format!("'{k}' is not a NIC: 0 to {}", nics - 1)))?;
                Fault::Nic(host(h)?, k, factor(f)?)
            }
            ["link", a, b, f] => {
                let (a, b) = pair(a, b)?;
                Fault::Link(a.min(b), a.max(b), factor(f)?)
            }
            ["direction", a, b, f] => {
                let (a, b) = pair(a, b)?;
                Fault::Direction(a, b, factor(f)?)
            }
            ["flap", a, b] => {
                let (a, b) = pair(a, b)?;
                Fault::Flap(a.min(b), a.max(b))
            }
            ["flap", a, b, f, p] => {
                let (a, b) = pair(a, b)?;
                let p = p
                    .parse::<f64>()
                    .ok()
                    .filter(|p| *p > 0.0 && *p <= 1.0)
                    .ok_or_else(|| {
                        bad(format!(
                            "'{p}' is not a fraction of runs: over 0 and at most 1, e.g. 0.3"
                        ))
                    })?;
                Fault::Intermittent(a.min(b), a.max(b), factor(f)?, p)
            }
            ["dead", h] => Fault::Dead(host(h)?),
            ["hang", h] => Fault::Hang(host(h)?),
            ["fabric", f] => Fault::Fabric(factor(f)?),
            _ => return Err(bad(format!("expected {usage}"))),
        };
        Ok(fault)
    }

    /// The hosts the fault is about (none for the fabric).
    pub fn hosts(&self) -> Vec<usize> {
        match *self {
            Fault::Host(h, _) | Fault::Nic(h, _, _) | Fault::Dead(h) | Fault::Hang(h) => vec![h],
            Fault::Link(a, b, _)
            | Fault::Direction(a, b, _)
            | Fault::Flap(a, b)
            | Fault::Intermittent(a, b, _, _) => vec![a, b],
            Fault::Fabric(_) => Vec::new(),
        }
    }

    /// The same fault on other hosts: host h becomes `to[h]`.
    pub fn moved(&self, to: &[usize]) -> Fault {
        let a = |x: usize| to[x];
        match *self {
            Fault::Host(h, f) => Fault::Host(a(h), f),
            Fault::Nic(h, k, f) => Fault::Nic(a(h), k, f),
            Fault::Link(x, y, f) => Fault::Link(a(x).min(a(y)), a(x).max(a(y)), f),
            Fault::Direction(x, y, f) => Fault::Direction(a(x), a(y), f),
            Fault::Flap(x, y) => Fault::Flap(a(x).min(a(y)), a(x).max(a(y))),
            Fault::Intermittent(x, y, f, p) => {
                Fault::Intermittent(a(x).min(a(y)), a(x).max(a(y)), f, p)
            }
            Fault::Dead(h) => Fault::Dead(a(h)),
            Fault::Hang(h) => Fault::Hang(a(h)),
            Fault::Fabric(f) => Fault::Fabric(f),
        }
    }

    /// Whether `v` is the verdict that names this fault rightly.
    pub fn matches(&self, v: &Verdict, nics: usize) -> bool {
        let host = |h: usize| v.kind == Kind::Host && v.hosts == [h];
        match *self {
            Fault::Host(h, _) => host(h),
            Fault::Nic(h, k, _) if nics == 1 => {
                host(h) || (v.kind == Kind::Nic && v.hosts == [h] && v.nic == Some(k))
            }
            Fault::Nic(h, k, _) => v.kind == Kind::Nic && v.hosts == [h] && v.nic == Some(k),
            Fault::Link(a, b, _) | Fault::Flap(a, b) => v.kind == Kind::Link && v.hosts == [a, b],
            Fault::Intermittent(a, b, _, _) => v.kind == Kind::Flapping && v.hosts == [a, b],
            Fault::Direction(a, b, _) => v.kind == Kind::Direction && v.hosts == [a, b],
            Fault::Dead(h) | Fault::Hang(h) => v.kind == Kind::Lost && v.hosts == [h],
            Fault::Fabric(_) => v.kind == Kind::Cluster,
        }
    }
}

/// The simulated cluster: what each part's rate is.
#[derive(Debug, Clone)]
pub struct Truth {
    /// Hosts.
    pub hosts: usize,
    /// NICs per host.
    pub nics: usize,
    /// The ports' rate, Gb/s.
    pub port_gbps: f64,
    /// Factor of each NIC's port (index nic * hosts + host).
    port: Vec<f64>,
    /// Factor of paths: (client, server) -> factor.
    path: BTreeMap<(usize, usize), f64>,
    flap: BTreeSet<(usize, usize)>,
    /// Intermittent links: (a, b) with a < b -> (factor, fraction of runs).
    intermittent: BTreeMap<(usize, usize), (f64, f64)>,
    /// The runs' noise (`--noise`).
    pub noise: Noise,
    dead: Vec<bool>,
    hang: Vec<bool>,
    fabric: f64,
}

impl Truth {
    /// A healthy cluster with `faults` injected.
    pub fn new(hosts: usize, nics: usize, port_gbps: f64, faults: &[Fault]) -> Truth {
        let mut t = Truth {
            hosts,
            nics,
            port_gbps,
            port: vec![1.0; hosts * nics],
            path: BTreeMap::new(),
            flap: BTreeSet::new(),
            intermittent: BTreeMap::new(),
            noise: Noise::default(),
            dead: vec![false; hosts],
            hang: vec![false; hosts],
            fabric: 1.0,
        };
        for f in faults {
            match *f {
                Fault::Host(h, x) => (0..nics).for_each(|k| t.port[k * hosts + h] *= x),
                Fault::Nic(h, k, x) => t.port[k * hosts + h] *= x,
                Fault::Link(a, b, x) => {
                    *t.path.entry((a, b)).or_insert(1.0) *= x;
                    *t.path.entry((b, a)).or_insert(1.0) *= x;
                }
                Fault::Direction(a, b, x) => *t.path.entry((a, b)).or_insert(1.0) *= x,
                Fault::Flap(a, b) => {
                    t.flap.insert((a, b));
                }
                Fault::Intermittent(a, b, f, p) => {
                    t.intermittent.insert((a, b), (f, p));
                }
                Fault::Dead(h) => t.dead[h] = true,
                Fault::Hang(h) => t.hang[h] = true,
                Fault::Fabric(x) => t.fabric *= x,
            }
        }
        t
    }

    /// One measured flow client -> server on `nic`, scaled to the port
    /// (the flow's rate times the flows sharing the port): a slow port caps
    /// every flow through it (the slower end wins), a slow path scales its
    /// flow's rate (loss or retransmissions: see the docs on capacity cuts).
    fn measure(
        &self,
        nic: usize,
        (c, s): (usize, usize),
        sigma: f64,
        round: RoundDraw,
        rng: &mut Rng,
    ) -> f64 {
        self.measure_on((nic, nic), c, s, sigma, round, rng)
    }

    /// The same cluster with the runs' noise `noise`.
    pub fn with_noise(self, noise: Noise) -> Truth {
        Truth { noise, ..self }
    }

    /// [`Truth::measure`] from the client's NIC `ci` to the server's `si`.
    fn measure_on(
        &self,
        (ci, si): (usize, usize),
        c: usize,
        s: usize,
        sigma: f64,
        round: RoundDraw,
        rng: &mut Rng,
    ) -> f64 {
        let h = self.hosts;
        let mut f = self.port[ci * h + c].min(self.port[si * h + s]) * self.fabric;
        f *= self.path.get(&(c, s)).copied().unwrap_or(1.0);
        if self.flap.contains(&(c.min(s), c.max(s))) {
            f *= 0.2 + 0.6 * rng.unit();
        }
        if let Some(&(x, p)) = self.intermittent.get(&(c.min(s), c.max(s)))
            && rng.unit() < p
        {
            f *= x;
        }
        self.port_gbps * f * self.noise.factor(sigma, round, rng)
    }
}

/// What one simulated job found.
#[derive(Debug, Clone)]
pub struct Outcome {
    /// The final verdicts.
    pub diagnosis: Diagnosis,
    /// Whether the retest confirmed each verdict: these and the lost
    /// hosts fail the job, the others are its warnings.
    pub confirmed: Vec<bool>,
    /// Verdicts before the retest.
    pub suspects: usize,
    /// Retest rounds run and pairs measured in them.
    pub retest_rounds: usize,
    /// Pairs measured in the retest rounds.
    pub retest_pairs: usize,
    /// Suspects the allowed retest rounds could not hold.
    pub not_retested: usize,
    /// The simulated job's wall time (a hang costs one run deadline).
    pub wall_s: f64,
    /// The measurements, one per NIC.
    pub rails: Vec<Rail>,
}

/// The measurements of one simulated job as they accumulate.
struct Job<'t> {
    t: &'t Truth,
    rails: Vec<Rail>,
    lost: Vec<(usize, String)>,
    is_lost: Vec<bool>,
    deadline: f64,
    rng: Rng,
    /// What the current round's flows share.
    draw: RoundDraw,
}

impl Job<'_> {
    /// Runs one directed flow on every NIC (into the first pass, or as a
    /// retest), or marks a dead or hung host lost. Returns whether the run
    /// hung (the round then lasts until the deadline).
    fn flow(&mut self, (c, s): (usize, usize), sigma: f64, retest: bool) -> bool {
        if self.is_lost[c] || self.is_lost[s] {
            return false;
        }
        for h in [c, s] {
            let why = if self.t.dead[h] {
                "its runs failed at once: the process is gone (dead)".to_owned()
            } else if self.t.hang[h] {
                format!(
                    "no answer within the run's deadline of {:.0} s (hung); the job went on without it",
                    self.deadline
                )
            } else {
                continue;
            };
            self.is_lost[h] = true;
            self.lost.push((h, why));
            return self.t.hang[h];
        }
        for (k, rail) in self.rails.iter_mut().enumerate() {
            let v = self.t.measure(k, (c, s), sigma, self.draw, &mut self.rng);
            if retest {
                rail.extra.entry((c, s)).or_default().push(v);
            } else {
                rail.gbps[c][s] = Some(v);
            }
        }
        false
    }
}

/// Simulates one job: the plan's rounds, the first diagnosis, the retest
/// rounds with good hosts, the final diagnosis.
///
/// Each round takes `steps` steps of the job (its rails one after another,
/// each direction its own step without `--budget`:
/// [`JobPlan::steps_per_round`]); every step costs the model's overhead and
/// one run, as the job's prediction counts them.
pub fn run(
    t: &Truth,
    plan: &Plan,
    steps: usize,
    m: &Model,
    names: &[String],
    seed: u64,
    min_effect: Option<f64>,
) -> Outcome {
    let n = t.hosts;
    let mut job = Job {
        t,
        rails: (0..t.nics).map(|_| Rail::new(n)).collect(),
        lost: Vec::new(),
        is_lost: vec![false; n],
        deadline: m.deadline_s(plan.run_s),
        rng: Rng::new(seed.wrapping_mul(0x2545_F491_4F6C_DD1D) ^ 0x5EED),
        draw: RoundDraw::QUIET,
    };
    let sigma = m.sigma(plan.partners, plan.run_s);
    let mut wall = 0.0;
    for r in 0..plan.rounds {
        wall += steps as f64 * m.round_s(plan.run_s);
        let mut hung = false;
        let flows = plan.round(r);
        job.draw = t.noise.round_draw(flows.len(), n, &mut job.rng);
        for flow in flows {
            hung |= job.flow(flow, sigma, false);
        }
        if hung {
            wall += job.deadline - plan.run_s;
        }
    }
    let judge = |job: &Job| {
        diagnose::diagnose(&Input {
            names,
            rails: &job.rails,
            lost: &job.lost,
            port_gbps: Some(t.port_gbps),
            fail_below: 0.9,
            min_effect,
        })
    };
    let first = judge(&job);
    let suspects = first
        .verdicts
        .iter()
        .filter(|v| v.kind != Kind::Lost)
        .count();
    // The job's retest plan (the same suspects, partners and rounds).
    let retest_plan = super::retest::plan(&first, n, plan.retest_rounds);
    let rounds = retest_plan.rounds.clone();
    // Retests run one partner per host: the suspect's flow alone on its port.
    let sigma1 = m.sigma(1, plan.run_s);
    let mut pairs = 0;
    for round in &rounds {
        wall += steps as f64 * m.round_s(plan.run_s);
        job.draw = t.noise.round_draw(2 * round.len(), n, &mut job.rng);
        for &(a, b) in round {
            pairs += 1;
            job.flow((a, b), sigma1, true);
            job.flow((b, a), sigma1, true);
        }
    }
    let diagnosis = if rounds.is_empty() {
        first
    } else {
        judge(&job)
    };
    // Which verdicts the retest confirmed ([`super::retest::Plan::confirms`]):
    // with the lost hosts, the job's failures.
    let confirmed = diagnosis
        .verdicts
        .iter()
        .map(|v| retest_plan.confirms(v, &diagnosis, n))
        .collect();
    Outcome {
        diagnosis,
        confirmed,
        suspects,
        retest_rounds: rounds.len(),
        retest_pairs: pairs,
        not_retested: retest_plan.left,
        wall_s: wall,
        rails: job.rails,
    }
}

/// The model as the job's network ([`job::Network`]): every rank's runs
/// of a round measured from the [`Truth`], as the ranks would send them
/// (a client and a server record per run; a run shared by `k` flows on a
/// port at the model's rate over `k`, as erdma-perf would measure it). A
/// dead host's runs are not made and it is lost at once; a hung one is
/// lost after one run deadline, which the round then lasts.
pub struct ModelNet<'t> {
    t: &'t Truth,
    model: Model,
    run_s: f64,
    rng: Rng,
    lost: Vec<(usize, String)>,
    is_lost: Vec<bool>,
    wall_s: f64,
}

impl<'t> ModelNet<'t> {
    /// The network of `t`, runs of `run_s` seconds, noise of `model`,
    /// draws from `seed`.
    pub fn new(t: &'t Truth, model: Model, run_s: f64, seed: u64) -> ModelNet<'t> {
        ModelNet {
            t,
            model,
            run_s,
            rng: Rng::new(seed.wrapping_mul(0x2545_F491_4F6C_DD1D) ^ 0x5EED),
            lost: Vec::new(),
            is_lost: vec![false; t.hosts],
            wall_s: 0.0,
        }
    }

    /// The ranks lost so far, with why (as the job's live ranks name them).
    pub fn lost(&self) -> &[(usize, String)] {
        &self.lost
    }

    /// The modelled wall time of the rounds run so far, seconds.
    pub fn wall_s(&self) -> f64 {
        self.wall_s
    }

    /// Whether host `h` is lost now (marking it when its fault shows);
    /// true also when it hung here (`hung` set).
    fn gone(&mut self, h: usize, hung: &mut bool) -> bool {
        if self.is_lost[h] {
            return true;
        }
        let why = if self.t.dead[h] {
            "its runs failed at once: the process is gone (dead)".to_owned()
        } else if self.t.hang[h] {
            *hung = true;
            format!(
                "no answer within the run's deadline of {:.0} s (hung); the job went on without it",
                self.model.deadline_s(self.run_s)
            )
        } else {
            return false;
        };
        self.is_lost[h] = true;
        self.lost.push((h, why));
        true
    }
}

impl Network for ModelNet<'_> {
    fn root(&self) -> bool {
        true
    }

    fn round(
        &mut self,
        _r: usize,
        round: &Round,
        _port: u32,
        _width: usize,
        _retest: bool,
    ) -> Option<Vec<Vec<u8>>> {
        let mut per: Vec<Vec<Value>> = vec![Vec::new(); self.t.hosts];
        for step in round {
            self.wall_s += self.model.round_s(self.run_s);
            let mut hung = false;
            let draw = self
                .t
                .noise
                .round_draw(step.len(), self.t.hosts, &mut self.rng);
            for f in step {
                let (c, s) = (f.client, f.server);
                if self.gone(c, &mut hung) || self.gone(s, &mut hung) {
                    continue;
                }
                let share = steps::share(step, f);
                let sigma = self.model.sigma(share, self.run_s);
                let g = self
                    .t
                    .measure_on((f.ci, f.si), c, s, sigma, draw, &mut self.rng)
                    / share as f64;
                let rail = (f.ci == f.si).then_some(f.ci);
                let (cd, sd) = (sim_device(f.ci), sim_device(f.si));
                let run = |role: &str, gbps: Option<f64>| {
                    json!({"client": c, "server": s, "role": role, "gbps": gbps, "error": null,
                           "doc": null, "rail": rail, "client_device": cd, "server_device": sd,
                           "verified": true, "corrupt": false, "rerun": "", "share": share})
                };
                per[c].push(run("client", Some(g)));
                per[s].push(run("server", None));
            }
            if hung {
                self.wall_s += self.model.deadline_s(self.run_s) - self.run_s;
            }
        }
        Some(
            per.into_iter()
                .map(|v| Value::Array(v).to_string().into_bytes())
                .collect(),
        )
    }

    fn agree(&mut self, mine: Option<super::retest::Plan>) -> super::retest::Plan {
        mine.unwrap_or_default()
    }
}

/// The name of a simulated host's NIC `k`.
fn sim_device(k: usize) -> String {
    format!("sim{k}")
}

/// The erdma-doctor document of a simulated host: one check, `rdma.ports`,
/// its `nics` NICs' ports active at `port_gbps` (what the job judges the
/// pairs against), named as the host.
fn sim_doctor(name: &str, nics: usize, port_gbps: f64) -> Vec<u8> {
    let ports: Vec<Value> = (0..nics)
        .map(|k| {
            json!({"device": sim_device(k), "port": 1, "state": "PORT_ACTIVE",
                   "phys_state": "LINK_UP", "netdev": null, "rate_gbps": port_gbps,
                   "emulated": false})
        })
        .collect();
    let check = json!({"id": "rdma.ports", "group": "rdma", "status": "ok",
                       "found": "every simulated port PORT_ACTIVE, LINK_UP", "fix": null,
                       "details": ports});
    json!({"tool": "erdma-doctor", "version": env!("CARGO_PKG_VERSION"), "host": name,
           "status": "ok", "checks": [check], "summary": {"ok": 1, "warn": 0, "fail": 0, "skip": 0}})
    .to_string()
    .into_bytes()
}

/// `erdma-cluster --simulate ... --as-job`: the real job's pair stage and
/// report on the model's network ([`ModelNet`]): the job's schedule from
/// `args` as the job reads it, its rounds, retest, verdicts, text or JSON
/// and exit status (0 to 5 as the job's), with the simulated wall time as
/// the measured one.
pub fn job_main(
    args: &super::Args,
    out: &mut dyn std::io::Write,
    err: &mut dyn std::io::Write,
) -> i32 {
    let s = match setup(args) {
        Ok(s) => s,
        Err(e) => {
            let _ = writeln!(err, "erdma-cluster: {e}");
            return super::EXIT_USAGE;
        }
    };
    let plan = s.job.clone();
    let names = sim_names(s.hosts);
    let truth =
        Truth::new(s.hosts, s.nics, args.sim.port_gbps, &s.faults).with_noise(s.noise.clone());
    let (code, _) = run_job(args, &plan, &truth, &names, &s.model, out, err);
    code
}

/// The job of `plan` on the model's network of `truth`: the report (to
/// `out`) and exit status of [`super::report_with`], and the pair stage's
/// runs (for a test to compare).
pub fn run_job(
    args: &super::Args,
    plan: &JobPlan,
    truth: &Truth,
    names: &[String],
    model: &Model,
    out: &mut dyn std::io::Write,
    err: &mut dyn std::io::Write,
) -> (i32, job::PairStage) {
    let docs: Vec<Vec<u8>> = names
        .iter()
        .map(|n| sim_doctor(n, truth.nics, truth.port_gbps))
        .collect();
    let mut net = ModelNet::new(truth, model.clone(), plan.plan.run_s, args.sim.seed);
    let ports = job::Ports::new(args.pair.pair_port, &vec![0; names.len()]);
    let stage = job::pair_stage(
        plan,
        &mut net,
        names.len(),
        ports,
        BTreeMap::new(),
        &mut |_, _| {},
        &|raw| super::retest_plan(args, &docs, raw),
    );
    let gathered = super::Gathered {
        lost: net.lost().to_vec(),
        schedule: Some(job::schedule_json(plan, net.wall_s())),
        retest: stage.retest.clone(),
        planned: plan.budgeted.then(|| plan.planned()),
        ..Default::default()
    };
    let meta = crate::meta::RunMeta::now("erdma-cluster");
    let code = super::report_with(args, &meta, &docs, Some(&stage.raw), &gathered, out, err);
    (code, stage)
}

/// Injected faults against the verdicts: for each fault the verdict that
/// names it (if any), and the verdicts no fault explains.
pub fn score(
    faults: &[Fault],
    verdicts: &[Verdict],
    confirmed: &[bool],
    nics: usize,
) -> (Vec<Option<usize>>, Vec<usize>) {
    // Found: the verdict that names the fault fails the job, as the job's
    // (lost, or confirmed by the retest: a warning only is not a find).
    let fails = |i: usize| {
        let v: &Verdict = &verdicts[i];
        let c = confirmed.get(i).copied().unwrap_or(false);
        super::retest::verdict_status(v, c) == crate::doctor::Status::Fail
    };
    let found: Vec<Option<usize>> = faults
        .iter()
        .map(|f| (0..verdicts.len()).find(|&i| f.matches(&verdicts[i], nics) && fails(i)))
        .collect();
    let false_ones = (0..verdicts.len())
        .filter(|&i| !faults.iter().any(|f| f.matches(&verdicts[i], nics)))
        .collect();
    (found, false_ones)
}

/// Everything a simulation command needs, checked.
struct Setup {
    hosts: usize,
    nics: usize,
    specs: Vec<String>,
    faults: Vec<Fault>,
    plan: Plan,
    model: Model,
    /// The runs' noise (`--noise`).
    noise: Noise,
    /// The job's schedule for this cluster (`plan` is its pairs): its
    /// steps per round and its prediction.
    job: JobPlan,
}

/// The simulation of `args`: the cluster's shape and faults, and the
/// schedule the job would run on it ([`super::job_plan`]: `--budget`,
/// `--perf-args -D`, `--cross-rails`, as the job reads them).
fn setup(args: &super::Args) -> Result<Setup, String> {
    let a = &args.sim;
    let shape = a.simulate.as_deref().unwrap_or("");
    let (hosts, nics) = parse_shape(shape)?;
    let faults = a
        .inject
        .iter()
        .map(|s| Fault::parse(s, hosts, nics))
        .collect::<Result<Vec<_>, _>>()?;
    let noise = Noise::parse(&a.noise)?;
    let model = Model {
        noise: noise.spread,
        ..Model::default()
    };
    let job = super::job_plan(args, hosts, nics, Some(a.port_gbps))?;
    let plan = Plan {
        seed: a.seed,
        ..job.plan.clone()
    };
    Ok(Setup {
        hosts,
        nics,
        specs: a.inject.clone(),
        faults,
        plan,
        model,
        noise,
        job,
    })
}

/// One simulated cluster's line of the summary.
struct ClusterResult {
    seed: u64,
    outcome: Outcome,
    found: Vec<Option<usize>>,
    false_ones: Vec<usize>,
    /// Of the false verdicts, those the job would fail on (lost, cluster,
    /// or confirmed by the retest); the others are its warnings.
    false_failures: usize,
    /// Of the false verdicts, those naming a host of an injected fault:
    /// the fault's hosts blamed with the wrong kind.
    wrong_kind: usize,
    elapsed_s: f64,
}

impl ClusterResult {
    fn exact(&self) -> bool {
        self.found.iter().all(Option::is_some) && self.false_ones.is_empty()
    }
}

/// `erdma-cluster --simulate`: prints the report to `out`; returns the exit
/// status ([`EXIT_MATCH`], [`EXIT_MISMATCH`], usage 3, output 4).
pub fn main(args: &super::Args, out: &mut dyn std::io::Write, err: &mut dyn std::io::Write) -> i32 {
    let (a, json_out, out_dir, drain) = (&args.sim, args.json, args.out.as_deref(), args.drain);
    let s = match setup(args) {
        Ok(s) => s,
        Err(e) => {
            let _ = writeln!(err, "erdma-cluster: {e}");
            return super::EXIT_USAGE;
        }
    };
    let names = sim_names(s.hosts);
    let results: Vec<ClusterResult> = (0..u64::from(a.clusters))
        .map(|i| {
            let t0 = Instant::now();
            let seed = a.seed.wrapping_add(i);
            let plan = Plan {
                seed,
                ..s.plan.clone()
            };
            let faults: Vec<Fault> = if a.shuffle {
                let mut to: Vec<usize> = (0..s.hosts).collect();
                Rng::new(seed ^ 0x0053_4855_4646_4C45).shuffle(&mut to);
                s.faults.iter().map(|f| f.moved(&to)).collect()
            } else {
                s.faults.clone()
            };
            let truth =
                Truth::new(s.hosts, s.nics, a.port_gbps, &faults).with_noise(s.noise.clone());
            let steps = s.job.steps_per_round();
            let mut outcome = run(
                &truth,
                &plan,
                steps,
                &s.model,
                &names,
                seed,
                args.min_effect,
            );
            if i > 0 || !a.documents {
                // 16 MB per NIC at 1000 hosts: kept for --documents only.
                outcome.rails = Vec::new();
            }
            let (found, false_ones) = score(
                &faults,
                &outcome.diagnosis.verdicts,
                &outcome.confirmed,
                s.nics,
            );
            let verdicts = &outcome.diagnosis.verdicts;
            let false_failures = false_ones
                .iter()
                .filter(|&&i| {
                    let confirmed = outcome.confirmed.get(i).copied().unwrap_or(false);
                    super::retest::verdict_status(&verdicts[i], confirmed)
                        == crate::doctor::Status::Fail
                })
                .count();
            let injected: BTreeSet<usize> = faults.iter().flat_map(Fault::hosts).collect();
            let wrong_kind = false_ones
                .iter()
                .filter(|&&i| verdicts[i].hosts.iter().any(|h| injected.contains(h)))
                .count();
            ClusterResult {
                seed,
                outcome,
                found,
                false_ones,
                false_failures,
                wrong_kind,
                elapsed_s: t0.elapsed().as_secs_f64(),
            }
        })
        .collect();
    let gathered = match (a.documents, results[0].outcome.rails.first()) {
        (true, Some(rail)) => match gather(
            &names,
            rail,
            &first_flows(&s.plan, results[0].seed),
            out_dir,
        ) {
            Ok(g) => Some(g),
            Err(e) => {
                let _ = writeln!(err, "erdma-cluster: {e}");
                return super::EXIT_OUTPUT;
            }
        },
        _ => None,
    };
    let text = if json_out {
        let mut doc = render_json(a, &s, &names, &results);
        if let Some(g) = &gathered {
            doc["documents"] = g.to_json();
        }
        format!("{doc}\n")
    } else {
        let mut t = render_text(a, &s, &names, &results);
        if let Some(g) = &gathered {
            t.push_str(&g.to_text());
        }
        t
    };
    if let Err(e) = out.write_all(text.as_bytes()).and_then(|()| out.flush()) {
        let _ = writeln!(
            err,
            "erdma-cluster: writing the report failed: {e}: check where stdout goes"
        );
        return super::EXIT_OUTPUT;
    }
    // --drain: the first cluster's verdicts the job would drain (confirmed
    // by the retest, as the job's Plan::confirms decides).
    if let Some(mode) = drain {
        let d = &results[0].outcome.diagnosis;
        let confirmed = d
            .verdicts
            .iter()
            .zip(results[0].outcome.confirmed.iter().copied());
        let list = super::drain::drains(confirmed, |i| names.get(i).cloned());
        if !super::drain::run(&list, mode, err) {
            return super::EXIT_OUTPUT;
        }
    }
    if results.iter().all(ClusterResult::exact) {
        EXIT_MATCH
    } else {
        EXIT_MISMATCH
    }
}

/// The simulated hosts' names: h0, h1, ...; or, for tests of `--drain`
/// against a real Slurm, `ERDMA_CLUSTER_HOOK=sim-names:A/B/...` (as many
/// as hosts; `--inject` still names them hK).
fn sim_names(hosts: usize) -> Vec<String> {
    super::hook("sim-names")
        .map(|n| n.split('/').map(str::to_owned).collect::<Vec<_>>())
        .filter(|n| n.len() == hosts)
        .unwrap_or_else(|| (0..hosts).map(|i| format!("h{i}")).collect())
}

/// Every directed flow of the main rounds of the cluster of `seed`: the
/// cells its matrix was to measure.
fn first_flows(plan: &Plan, seed: u64) -> Vec<(usize, usize)> {
    let plan = Plan {
        seed,
        ..plan.clone()
    };
    (0..plan.rounds).flat_map(|r| plan.round(r)).collect()
}

/// Rank 0's share of a real job of this size (`--documents`).
struct Gathered {
    documents: usize,
    document_bytes: usize,
    gathered_bytes: usize,
    json_bytes: usize,
    text_bytes: usize,
    report_s: f64,
    written: bool,
}

impl Gathered {
    fn to_json(&self) -> Value {
        json!({"documents": self.documents, "document_bytes": self.document_bytes,
               "gathered_bytes": self.gathered_bytes, "json_bytes": self.json_bytes,
               "text_bytes": self.text_bytes, "report_s": self.report_s, "written": self.written})
    }

    fn to_text(&self) -> String {
        let mib = |b: usize| b as f64 / (1024.0 * 1024.0);
        format!(
            "# rank 0's report of {} erdma-doctor documents ({:.1} KiB each, {:.1} MiB gathered) and the NIC 0 matrix: \
             parsed, grouped, judged and rendered{} in {:.2} s (JSON {:.1} MiB, text {:.1} MiB)\n",
            self.documents,
            self.document_bytes as f64 / 1024.0,
            mib(self.gathered_bytes),
            if self.written {
                " and written under --out"
            } else {
                ""
            },
            self.report_s,
            mib(self.json_bytes),
            mib(self.text_bytes)
        )
    }
}

/// Times what rank 0 does with the gathered documents in a real job of
/// `names.len()` hosts: this host's erdma-doctor document (real size) once
/// per host under its simulated name, parsed, grouped across hosts, the
/// matrix of `rail` judged, the JSON and text reports rendered, and written
/// under `out_dir` when given.
fn gather(
    names: &[String],
    rail: &Rail,
    planned: &[(usize, usize)],
    out_dir: Option<&std::path::Path>,
) -> Result<Gathered, String> {
    use crate::meta::RunMeta;
    let host = crate::doctor::system::SystemHost::new();
    let report = crate::doctor::evaluate(&host, &[]);
    let mut doc = crate::doctor::render_json(&RunMeta::now("erdma-doctor"), &report);
    let raw: Vec<Vec<u8>> = names
        .iter()
        .map(|n| {
            doc["host"] = json!(n);
            doc.to_string().into_bytes()
        })
        .collect();
    let t0 = Instant::now();
    let reports = super::parse_reports(&raw)?;
    let problems = super::grouped_problems(&reports);
    let across = super::cross_checks(&reports);
    let m = super::Matrix {
        test: "write_bw".into(),
        gbps: rail.gbps.clone(),
        rails: Vec::new(),
        runs: Vec::new(),
        planned: None,
    }
    .with_planned(planned);
    let stages = super::Stages {
        pairs: Some(&m),
        baseline: None,
        nccl: None,
        traffic: None,
        lost: &[],
        schedule: None,
        retest: None,
        port_rate: super::PortRate::Off,
        min_effect: None,
        nccl_pairs: None,
        latency: None,
    };
    let meta = RunMeta::now("erdma-cluster");
    let judgement = super::Judgement::of(&reports, &across, &stages);
    let whole = super::render_json(&meta, &reports, &problems, &across, &stages, &judgement);
    let json_bytes = whole.to_string().len();
    let text_bytes =
        super::render_text(&meta, &reports, &problems, &across, &stages, &judgement).len();
    if let Some(dir) = out_dir {
        super::write_out(dir, &reports, Some(&m), &whole)?;
    }
    Ok(Gathered {
        documents: raw.len(),
        document_bytes: raw.first().map_or(0, Vec::len),
        gathered_bytes: raw.iter().map(Vec::len).sum(),
        json_bytes,
        text_bytes,
        report_s: t0.elapsed().as_secs_f64(),
        written: out_dir.is_some(),
    })
}

fn verdict_line(v: &Verdict, names: &[String]) -> String {
    let hosts: Vec<&str> = v.hosts.iter().map(|&h| names[h].as_str()).collect();
    let nic = v.nic.map_or_else(String::new, |k| format!(" NIC {k}"));
    format!("{} {}{nic}", v.kind.as_str(), hosts.join(" "))
}

fn render_text(a: &SimArgs, s: &Setup, names: &[String], results: &[ClusterResult]) -> String {
    let r0 = &results[0];
    let mut t = format!(
        "# erdma-cluster --simulate {}: {} simulated hosts (h0 ... h{}), {} NIC{} each, port {:.0} Gb/s, noise {}, seed {}\n",
        a.simulate.as_deref().unwrap_or(""),
        s.hosts,
        s.hosts - 1,
        s.nics,
        if s.nics == 1 { "" } else { "s" },
        a.port_gbps,
        s.noise.describe(),
        a.seed
    );
    if a.shuffle {
        t.push_str("# --shuffle: each cluster puts the faults on hosts of its own draw (hK of a spec: the K-th host drawn)\n");
    }
    let budget = a
        .budget
        .map_or_else(String::new, |b| format!(" (--budget {b} min)"));
    t.push_str(&format!("# schedule{budget}: {}\n", s.job.describe()));
    if !s.plan.finds_capacity_cuts() {
        t.push_str("# note: several flows share each port: a link whose capacity is cut shows only under its share (docs/cluster-diagnosis.md)\n");
    }
    let o = &r0.outcome;
    t.push_str(&format!(
        "# first pass: {} suspect{}; retest: {} round{}, {} pair{} with good hosts{}\n",
        o.suspects,
        if o.suspects == 1 { "" } else { "s" },
        o.retest_rounds,
        if o.retest_rounds == 1 { "" } else { "s" },
        o.retest_pairs,
        if o.retest_pairs == 1 { "" } else { "s" },
        if o.not_retested > 0 {
            format!(", {} request(s) did not fit", o.not_retested)
        } else {
            String::new()
        }
    ));
    t.push_str(&diagnose::render_text(&o.diagnosis, names));
    t.push_str("# injected against found\n");
    for (spec, v) in s.specs.iter().zip(&r0.found) {
        match v {
            Some(i) => t.push_str(&format!(
                "found   {spec}: {}\n",
                verdict_line(&o.diagnosis.verdicts[*i], names)
            )),
            None => t.push_str(&format!("missed  {spec}\n")),
        }
    }
    for &i in &r0.false_ones {
        t.push_str(&format!(
            "false   {}\n",
            verdict_line(&o.diagnosis.verdicts[i], names)
        ));
    }
    let found = r0.found.iter().filter(|f| f.is_some()).count();
    t.push_str(&format!(
        "# result: {found} of {} injected faults found and classified right, {} false verdict{}; simulated wall {:.0} s (predicted {:.0} s; a hang costs one run deadline), simulated in {:.2} s\n",
        s.faults.len(),
        r0.false_ones.len(),
        if r0.false_ones.len() == 1 { "" } else { "s" },
        o.wall_s,
        s.job.predicted_wall_s(),
        r0.elapsed_s
    ));
    if results.len() > 1 {
        t.push_str(&summary_text(results, s.faults.len()));
    }
    t
}

fn summary_text(results: &[ClusterResult], faults: usize) -> String {
    let exact = results.iter().filter(|r| r.exact()).count();
    let missed: usize = results
        .iter()
        .map(|r| r.found.iter().filter(|f| f.is_none()).count())
        .sum();
    let false_ones: usize = results.iter().map(|r| r.false_ones.len()).sum();
    let worst = results.iter().map(|r| r.elapsed_s).fold(0.0, f64::max);
    let mut t = format!(
        "# {} clusters (seeds {} ... {}): {exact} exact; {missed} of {} injected faults missed, {false_ones} false verdicts in all; slowest cluster simulated in {worst:.2} s\n",
        results.len(),
        results[0].seed,
        results[results.len() - 1].seed,
        faults * results.len()
    );
    for r in results.iter().filter(|r| !r.exact()) {
        t.push_str(&format!(
            "seed {}: {} missed, {} false\n",
            r.seed,
            r.found.iter().filter(|f| f.is_none()).count(),
            r.false_ones.len()
        ));
    }
    t
}

fn render_json(a: &SimArgs, s: &Setup, names: &[String], results: &[ClusterResult]) -> Value {
    let r0 = &results[0];
    let o = &r0.outcome;
    let injected: Vec<Value> = s
        .specs
        .iter()
        .zip(&r0.found)
        .map(|(spec, v)| json!({"spec": spec, "found": v.is_some(), "verdict": v}))
        .collect();
    let exact = results.iter().filter(|r| r.exact()).count();
    let clusters: Vec<Value> = results
        .iter()
        .map(|r| {
            json!({"seed": r.seed, "missed": r.found.iter().filter(|f| f.is_none()).count(),
                   "suspects": r.outcome.suspects,
                   "false_verdicts": r.false_ones.len(), "false_failures": r.false_failures,
                   "wrong_kind": r.wrong_kind, "confirmed": r.outcome.confirmed.iter().filter(|c| **c).count(),
                   "wall_s": r.outcome.wall_s,
                   "elapsed_s": r.elapsed_s})
        })
        .collect();
    json!({
        "tool": "erdma-cluster",
        "version": env!("CARGO_PKG_VERSION"),
        "simulate": {"hosts": s.hosts, "nics": s.nics, "port_gbps": a.port_gbps, "noise": s.model.noise,
                     "noise_models": a.noise, "noise_describe": s.noise.describe(),
                     "seed": a.seed, "inject": s.specs, "budget_min": a.budget, "shuffle": a.shuffle},
        "schedule": {"pattern": s.plan.pattern.as_str(), "partners": s.plan.partners,
                     "run_s": s.plan.run_s, "rounds": s.plan.rounds, "retest_rounds_max": s.plan.retest_rounds,
                     "overhead_s": s.job.model.overhead_s, "finds_capacity_cuts": s.plan.finds_capacity_cuts(),
                     "steps_per_round": s.job.steps_per_round(), "together": s.job.together,
                     "rails_at_once": s.job.rails_at_once, "iterations": s.job.iterations(),
                     "describe": s.job.describe()},
        "predicted_wall_s": s.job.predicted_wall_s(),
        "simulated_wall_s": o.wall_s,
        "retest": {"suspects": o.suspects, "rounds": o.retest_rounds, "pairs": o.retest_pairs,
                   "not_retested": o.not_retested},
        "verdicts": diagnose::to_json(&o.diagnosis, names),
        "notes": o.diagnosis.notes,
        "injected": injected,
        "false_verdicts": r0.false_ones.iter().map(|&i| o.diagnosis.verdicts[i].to_json(names)).collect::<Vec<_>>(),
        "clusters": clusters,
        "summary": {"clusters": results.len(), "exact": exact,
                    "missed": results.iter().map(|r| r.found.iter().filter(|f| f.is_none()).count()).sum::<usize>(),
                    "false_verdicts": results.iter().map(|r| r.false_ones.len()).sum::<usize>(),
                    "false_failures": results.iter().map(|r| r.false_failures).sum::<usize>(),
                    "wrong_kind": results.iter().map(|r| r.wrong_kind).sum::<usize>(),
                    "found_per_fault": (0..s.faults.len())
                        .map(|k| results.iter().filter(|r| r.found[k].is_some()).count())
                        .collect::<Vec<_>>(),
                    "suspects": results.iter().map(|r| r.outcome.suspects).sum::<usize>()},
        "status": if results.iter().all(ClusterResult::exact) { "ok" } else { "fail" },
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn specs_parse_and_bad_ones_say_why() {
        assert_eq!(min_effect("5%"), Ok(0.05));
        assert_eq!(min_effect("0.02"), Ok(0.02));
        for bad in ["0", "0%", "60%", "-1%", "x"] {
            let e = min_effect(bad).unwrap_err();
            assert!(e.contains("smallest slowdown") && e.contains(bad), "{e}");
        }
        assert_eq!(
            Fault::parse("host:h17:0.8", 20, 2),
            Ok(Fault::Host(17, 0.8))
        );
        assert_eq!(
            Fault::parse("nic:h1:1:0.5", 20, 2),
            Ok(Fault::Nic(1, 1, 0.5))
        );
        assert_eq!(
            Fault::parse("link:h9:h3:0.8", 20, 2),
            Ok(Fault::Link(3, 9, 0.8))
        );
        assert_eq!(
            Fault::parse("direction:h9:h3:0.8", 20, 2),
            Ok(Fault::Direction(9, 3, 0.8))
        );
        assert_eq!(Fault::parse("flap:h3:h9", 20, 2), Ok(Fault::Flap(3, 9)));
        assert_eq!(
            Fault::parse("flap:h9:h3:0.5:0.3", 20, 2),
            Ok(Fault::Intermittent(3, 9, 0.5, 0.3))
        );
        for bad in ["flap:h3:h9:0.5:0", "flap:h3:h9:0.5:1.5", "flap:h3:h9:2:0.3"] {
            assert!(Fault::parse(bad, 20, 2).is_err(), "{bad}");
        }
        assert_eq!(Fault::parse("dead:h5", 20, 2), Ok(Fault::Dead(5)));
        assert_eq!(Fault::parse("hang:h5", 20, 2), Ok(Fault::Hang(5)));
        for (spec, says) in [
            ("host:h20:0.8", "name one of h0 to h19"),
            ("host:h1:1.5", "not a factor"),
            ("nic:h1:2:0.8", "0 to 1"),
            ("link:h1:h1:0.8", "the same"),
            ("link:h1:0.8", "expected link:HOST:HOST:FACTOR"),
            ("slow:h1", "no fault kind 'slow'"),
        ] {
            let e = Fault::parse(spec, 20, 2).unwrap_err();
            assert!(
                e.starts_with(&format!("--inject {spec}: ")) && e.contains(says),
                "{e}"
            );
        }
        let to = [3, 0, 1, 2];
        assert_eq!(Fault::Link(0, 2, 0.8).moved(&to), Fault::Link(1, 3, 0.8));
        assert_eq!(
            Fault::Direction(0, 2, 0.8).moved(&to),
            Fault::Direction(3, 1, 0.8)
        );
        assert_eq!(Fault::Nic(1, 1, 0.8).moved(&to), Fault::Nic(0, 1, 0.8));
        assert_eq!(parse_shape("1000x2"), Ok((1000, 2)));
        assert_eq!(parse_shape("16"), Ok((16, 1)));
        assert!(parse_shape("1x2").is_err() && parse_shape("ax2").is_err());
        assert_eq!(parse_shape("4096x4"), Ok((4096, 4)));
        assert!(
            parse_shape("4096x6")
                .unwrap_err()
                .contains("take fewer NICs")
        );
        assert!(
            parse_shape("10001")
                .unwrap_err()
                .contains("2 to 10000 hosts")
        );
        assert_eq!(fraction("3%"), Ok(0.03));
        assert_eq!(fraction("0.05"), Ok(0.05));
        assert!(fraction("80%").is_err());
    }

    /// (kind, hosts, nic) of each verdict, sorted.
    fn keys(d: &Diagnosis) -> Vec<(String, Vec<usize>, Option<usize>)> {
        let mut k: Vec<_> = d
            .verdicts
            .iter()
            .map(|v| (v.kind.as_str().to_owned(), v.hosts.clone(), v.nic))
            .collect();
        k.sort();
        k
    }

    /// The exit status the job gives the simulator path's verdicts: lost
    /// 5, a confirmed verdict 2, another verdict 1, none 0.
    fn sim_exit(o: &Outcome) -> i32 {
        let v = &o.diagnosis.verdicts;
        if v.iter().any(|v| v.kind == Kind::Lost) {
            super::super::EXIT_LOST
        } else if o.confirmed.iter().any(|c| *c) || v.iter().any(|v| v.kind == Kind::Cluster) {
            super::super::EXIT_FAIL
        } else if v.is_empty() {
            super::super::EXIT_OK
        } else {
            super::super::EXIT_WARN
        }
    }

    #[test]
    fn the_job_and_the_simulator_agree_on_one_model_network() {
        // The same small cluster both ways: the simulator's compact path
        // (simulate::run) and the job's code (job::pair_stage on the
        // model's network, then report_with). The schedule's cells, the
        // verdicts and the exit status must be the same.
        use clap::Parser;
        let cases: &[(&str, &[&str], i32)] = &[
            ("8x2", &[], 0),
            ("8x2", &["link:h1:h2:0.5"], 2),
            ("8x2", &["nic:h5:1:0.6", "host:h3:0.7"], 2),
            ("6", &["direction:h4:h0:0.6"], 2),
            ("8", &["dead:h6", "link:h1:h2:0.5"], 5),
            // Uniformly 20% slow: no host differs, only the ports' rate
            // (rdma.ports of the documents, --port-gbps here) shows it.
            ("8x2", &["fabric:0.8"], 2),
        ];
        for &(shape, inject, want) in cases {
            let mut argv = vec!["erdma-cluster", "--simulate", shape, "--json", "--as-job"];
            if !inject.is_empty() {
                argv.push("--inject");
                argv.extend_from_slice(inject);
            }
            let args = super::super::Args::try_parse_from(&argv).unwrap();
            let st = setup(&args).unwrap();
            let names = sim_names(st.hosts);
            let truth = Truth::new(st.hosts, st.nics, 100.0, &st.faults);
            // The job's schedule and the simulator's: the same pairs.
            let jp = st.job.clone();
            let mut job_cells = jp.planned();
            let mut sim_cells = first_flows(&st.plan, args.sim.seed);
            job_cells.sort_unstable();
            sim_cells.sort_unstable();
            assert_eq!(job_cells, sim_cells, "{shape} {inject:?}");
            let (mut out, mut err) = (Vec::new(), Vec::new());
            let (code, stage) = run_job(&args, &jp, &truth, &names, &st.model, &mut out, &mut err);
            let doc: Value = serde_json::from_slice(&out).expect("the job's JSON");
            let o = run(
                &truth,
                &st.plan,
                st.job.steps_per_round(),
                &st.model,
                &names,
                args.sim.seed,
                None,
            );
            assert_eq!(code, want, "{shape} {inject:?}: {doc:#}");
            assert_eq!(sim_exit(&o), want, "{shape} {inject:?}");
            assert_eq!(doc["exit_status"], want);
            // The job's verdicts, as its JSON names them.
            let mut job_keys: Vec<(String, Vec<usize>, Option<usize>)> = doc["verdicts"]
                .as_array()
                .into_iter()
                .flatten()
                .map(|v| {
                    let hosts = v["hosts"]
                        .as_array()
                        .unwrap()
                        .iter()
                        .map(|h| names.iter().position(|n| h == n.as_str()).unwrap())
                        .collect();
                    (
                        v["kind"].as_str().unwrap().to_owned(),
                        hosts,
                        v["nic"].as_u64().map(|k| k as usize),
                    )
                })
                .collect();
            job_keys.sort();
            assert_eq!(job_keys, keys(&o.diagnosis), "{shape} {inject:?}: {doc:#}");
            // Every fault injected is a verdict of both.
            let nics = st.nics;
            for f in &st.faults {
                assert!(
                    o.diagnosis.verdicts.iter().any(|v| f.matches(v, nics)),
                    "{f:?}"
                );
            }
            // The retest ran on both, from the same plan maker.
            let (plan, _) = stage.retest.expect("the job's retest");
            assert_eq!(plan.rounds.len(), o.retest_rounds, "{shape} {inject:?}");
        }
    }

    #[test]
    fn a_uniformly_slow_cluster_fails_against_its_ports_without_a_baseline() {
        use clap::Parser;
        for (inject, rate, want) in [
            ("fabric:0.8", "auto", 2),
            ("fabric:0.95", "auto", 0),
            // The hosts among themselves only, or against what the network
            // gives (80 of the ports' nominal 100 Gb/s): no verdict.
            ("fabric:0.8", "off", 0),
            ("fabric:0.8", "80", 0),
        ] {
            let argv = ["erdma-cluster", "--simulate", "16x2", "--as-job", "--json"];
            let args = super::super::Args::try_parse_from(argv.iter().copied().chain([
                "--inject",
                inject,
                "--port-rate",
                rate,
            ]))
            .unwrap();
            let mut out = Vec::new();
            let code = job_main(&args, &mut out, &mut Vec::new());
            let doc: Value = serde_json::from_slice(&out).unwrap();
            assert_eq!(code, want, "{inject} {rate}: {:#}", doc["verdicts"]);
            let cluster: Vec<&Value> = doc["verdicts"]
                .as_array()
                .into_iter()
                .flatten()
                .filter(|v| v["kind"] == "cluster")
                .collect();
            if want == 0 {
                assert!(cluster.is_empty(), "{cluster:?}");
                continue;
            }
            // One per NIC, a failure, naming no host.
            assert_eq!(cluster.len(), 2, "{:#}", doc["verdicts"]);
            for v in cluster {
                assert_eq!(v["status"], "fail");
                assert_eq!(v["hosts"], serde_json::json!([]));
                let r = v["numbers"]
                    .as_object()
                    .unwrap()
                    .iter()
                    .find(|(k, _)| k.ends_with("_port_ratio"))
                    .and_then(|(_, x)| x.as_f64())
                    .unwrap();
                assert!((0.75..0.85).contains(&r), "{r}");
                assert!(
                    v["why"].as_str().unwrap().contains("of the ports' rate"),
                    "{v}"
                );
            }
        }
        let bad = super::super::Args::try_parse_from(["erdma-cluster", "--port-rate", "fast"]);
        assert!(
            bad.unwrap_err()
                .to_string()
                .contains("auto (the ports' own rate), off")
        );
        // The compact path finds it too, and a healthy cluster has no
        // cluster verdict.
        let t = Truth::new(64, 2, 100.0, &[Fault::Fabric(0.8)]);
        let m = Model::default();
        let plan = super::super::schedule::choose(64, None, &m, 1).unwrap();
        let names: Vec<String> = (0..64).map(|i| format!("h{i}")).collect();
        let o = run(&t, &plan, 1, &m, &names, 1, None);
        let (found, false_ones) = score(
            &[Fault::Fabric(0.8)],
            &o.diagnosis.verdicts,
            &o.confirmed,
            2,
        );
        assert!(
            found[0].is_some() && false_ones.is_empty(),
            "{:?}",
            o.diagnosis.verdicts
        );
        let healthy = run(
            &Truth::new(64, 2, 100.0, &[]),
            &plan,
            1,
            &m,
            &names,
            1,
            None,
        );
        assert!(
            healthy.diagnosis.verdicts.is_empty(),
            "{:?}",
            healthy.diagnosis.verdicts
        );
    }

    #[test]
    fn every_fault_kind_is_found_at_64_hosts() {
        let specs = [
            "host:h17:0.8",
            "nic:h42:1:0.8",
            "link:h3:h9:0.8",
            "direction:h30:h20:0.8",
            "flap:h50:h51",
            "dead:h5",
            "hang:h6",
        ];
        let faults: Vec<Fault> = specs
            .iter()
            .map(|s| Fault::parse(s, 64, 2).unwrap())
            .collect();
        let t = Truth::new(64, 2, 100.0, &faults);
        let m = Model::default();
        let plan = super::super::schedule::choose(64, None, &m, 1).unwrap();
        let names: Vec<String> = (0..64).map(|i| format!("h{i}")).collect();
        for seed in 0..3 {
            let o = run(&t, &plan, 1, &m, &names, seed, None);
            let (found, false_ones) = score(&faults, &o.diagnosis.verdicts, &o.confirmed, 2);
            assert!(
                found.iter().all(Option::is_some),
                "seed {seed}: {found:?}\n{}",
                diagnose::render_text(&o.diagnosis, &names)
            );
            assert!(
                false_ones.is_empty(),
                "{}",
                diagnose::render_text(&o.diagnosis, &names)
            );
            assert!(o.retest_rounds >= 2 && o.not_retested == 0);
            // The hang cost one deadline.
            assert!(
                o.wall_s
                    > plan.predicted_wall_s(&m) - plan.retest_rounds as f64 * m.round_s(plan.run_s)
            );
        }
    }

    /// An intermittent link (half rate in 50% of its runs) through the
    /// whole simulated job (64 hosts x 2 NICs, +-3%), 30 seeds: found as a
    /// `flapping` verdict the retest confirmed in most clusters (the first
    /// pass must see it slow once among its 4 runs, the retest's 4 runs
    /// once more: 94% each), and never as a
    /// verdict of another kind, nor any other verdict. Under noise alone
    /// with rare deep drops (`drop:0.1%:0.5`: 8 runs per cluster at half
    /// rate) no cluster fails.
    #[test]
    fn an_intermittent_link_is_flapping_through_the_job() {
        let m = Model::default();
        let plan = super::super::schedule::choose(64, None, &m, 1).unwrap();
        let names: Vec<String> = (0..64).map(|i| format!("h{i}")).collect();
        let fault = Fault::parse("flap:h12:h33:0.5:0.5", 64, 2).unwrap();
        let t = Truth::new(64, 2, 100.0, std::slice::from_ref(&fault));
        let mut found = 0;
        for seed in 0..30 {
            let o = run(&t, &plan, 1, &m, &names, seed, None);
            let (f, false_ones) = score(
                std::slice::from_ref(&fault),
                &o.diagnosis.verdicts,
                &o.confirmed,
                2,
            );
            let text = diagnose::render_text(&o.diagnosis, &names);
            assert!(false_ones.is_empty(), "seed {seed}: {text}");
            found += usize::from(f[0].is_some());
        }
        // Expected about 25 (seen slow in the first pass 94%, a cell
        // changed in the retest 94%, a retest run slow 94%).
        assert!(found >= 21, "{found} of 30 found and confirmed");
        let noise = Noise::parse(&["3%".to_owned(), "drop:0.1%:0.5".to_owned()]).unwrap();
        let quiet = Truth::new(64, 2, 100.0, &[]).with_noise(noise);
        for seed in 0..30 {
            let o = run(&quiet, &plan, 1, &m, &names, seed, None);
            let fails = o.confirmed.iter().filter(|c| **c).count();
            assert_eq!(
                fails,
                0,
                "seed {seed}: {}",
                diagnose::render_text(&o.diagnosis, &names)
            );
        }
    }
}
