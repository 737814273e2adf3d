//! Verdicts from the pair matrices: which host, NIC, link or direction is
//! slow, judged against the cluster itself (no per-SKU table), the port rate
//! and a baseline when given, each with the numbers behind it
//! (docs/cluster-diagnosis.md, "The diagnosis").
//!
//! Per NIC (rail): the reference is the median of the hosts' row medians;
//! the spread is the MAD of the cells above the reference on a log scale
//! (faults only slow things down, so the upper half is noise alone; rates
//! vary by factors, so a cell twice the reference and one half of it are
//! as far from it), and a cell is low under
//! `exp(-max(k * spread, -ln(1 - MIN_EFFECT)))` of the reference (for
//! a spread of a few percent about `1 - k * spread`), `k` growing with the
//! number of cells judged ([`k_sigma`]), or under `fail_below` of its
//! baseline). A host is at fault on a NIC when the
//! median of its row and the median of its column are low (one side only:
//! it sends or receives slowly); the low cells no host explains are links
//! (both directions low) or directions (one low, the other not). Every
//! cell's value is the best of its runs, so a retest that measures well
//! clears a cell one unlucky run made low.

pub mod fit;

use std::collections::BTreeMap;

use serde_json::{Value, json};

use fit::Fit;

/// The chance that noise alone puts any of the values judged together
/// (one NIC's cells, or the hosts' NCCL numbers) under the low line.
pub const FALSE_ALARM: f64 = 0.01;
/// The smallest slowdown called a fault, relative to the reference.
pub const MIN_EFFECT: f64 = 0.10;

/// The smallest slowdown of a host's (or NIC's) effect in the fit
/// ([`fit`]) called a fault: the effect rests on a whole row or column, so
/// it is known far better than one cell, and a host 5% slow slows every
/// collective of the cluster by 5%.
pub const MIN_HOST_EFFECT: f64 = 0.03;
/// The smallest slowdown of a path (a residual the hosts' effects do not
/// explain) called a fault.
pub const MIN_PATH_EFFECT: f64 = 0.05;

/// The smallest slowdowns a run reports: the floors under the statistical
/// lines (a line is `max(k x standard error, floor)`). `--min-effect`
/// sets all three to one value; without it they are [`MIN_EFFECT`] (the
/// line per cell), [`MIN_HOST_EFFECT`] and [`MIN_PATH_EFFECT`].
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Floors {
    /// The line per cell (and a host's row or column median against it).
    pub cell: f64,
    /// A host's (or NIC's) effect in the fit.
    pub host: f64,
    /// A path's residual in the fit.
    pub path: f64,
    /// Whether `--min-effect` set them (the sensitivity note says so).
    pub given: bool,
}

impl Floors {
    /// The floors for `min_effect` (`--min-effect`, a fraction in (0, 1)),
    /// the defaults when none.
    pub fn of(min_effect: Option<f64>) -> Floors {
        match min_effect {
            Some(x) => Floors {
                cell: x,
                host: x,
                path: x,
                given: true,
            },
            None => Floors {
                cell: MIN_EFFECT,
                host: MIN_HOST_EFFECT,
                path: MIN_PATH_EFFECT,
                given: false,
            },
        }
    }
}

/// `-ln(1 - x)`: a slowdown of `x` on the log scale the lines live on.
fn log_floor(x: f64) -> f64 {
    -(1.0 - x).ln()
}

/// The fewest hosts the fit is used with: below, a row has at most 6
/// cells, one gross fault among them moves its median, and the residuals
/// are too few to measure the noise (4 hosts: 12 cells, 7 effects). In the
/// rig's 4-host jobs a link at a tenth of the others made a healthy
/// direction's residual "low". Those clusters keep the line per cell.
pub const MIN_FIT_HOSTS: usize = 8;

/// The fewest measurements of a path (the first pass, each retest of it)
/// with a low run that make it flapping: one is what the noise gives now
/// and then (each run's line is set for a 1% chance of any on its NIC),
/// or one event that hit both directions at once; two are not.
pub const FLAP_MIN_LOW: usize = 2;

/// The lowest low line: however wide the spread, a cell under this share
/// of the reference is low.
pub const MIN_LOWLINE: f64 = 0.05;

/// How many robust standard deviations under the reference a value must be
/// when `judged` values are judged at once: `sqrt(2 ln(judged / FALSE_ALARM))`.
/// For normal noise P(z < -k) <= exp(-k^2/2) / 2, so the chance that any of
/// the values falls under the line is at most `FALSE_ALARM / 2`: 3.8 for
/// the 12 cells of 4 hosts, 6.1 for the million of 1000 hosts. A fixed k
/// (5 before) is either too strict for a few hosts (in the rig the cells
/// of a link slowed to a tenth of the others passed: the emulated
/// devices' spread times 5 put the line under them) or too lax for many.
pub fn k_sigma(judged: usize) -> f64 {
    (2.0 * (judged.max(1) as f64 / FALSE_ALARM).ln()).sqrt()
}

/// The spread and low line of `judged` values from the logs of those at or
/// above the reference (`ln(value / reference)`, each >= 0): the spread is
/// their MAD as a standard deviation, the line
/// `exp(-max(k_sigma(judged) * spread, -ln(1 - MIN_EFFECT)))`, never under
/// [`MIN_LOWLINE`]. Shared by the pair cells and the NCCL hosts.
pub fn low_line(above: &mut [f64], judged: usize) -> (f64, f64) {
    low_line_at(above, judged, MIN_EFFECT)
}

/// [`low_line`] with the floor `min_effect` instead of [`MIN_EFFECT`].
pub fn low_line_at(above: &mut [f64], judged: usize, min_effect: f64) -> (f64, f64) {
    // The median of |x| for x normal is 0.674 sigma: 1.4826 turns it into sigma.
    let spread = upper_median(above).map_or(0.0, |m| 1.4826 * m);
    let threshold = (k_sigma(judged) * spread).max(log_floor(min_effect));
    // On a linear scale a spread of 20% (an emulated device's runs) put the
    // line at 0 or under, so that a link at a tenth of the reference passed
    // (seen in the rig: healthy cells 0.052-0.086 Gb/s, the slowed link at
    // 0.007); on the log scale the same spread puts it near 0.2. The floor
    // stays for wider spreads still.
    (spread, (-threshold).exp().max(MIN_LOWLINE))
}

/// The reference and the low line a rail's cells are judged by when no
/// baseline is given and the fit is not used (clusters under
/// [`MIN_FIT_HOSTS`] hosts): a cell is low when its ratio to the reference
/// is under the line. A fault test asks this before it expects a verdict:
/// a slowed cell above the line is hidden by the job's own noise.
pub fn cell_line(rail: &Rail) -> Option<(f64, f64)> {
    let n = rail.gbps.len();
    view(rail, &vec![false; n], 1.0, Floors::of(None)).map(|v| (v.reference, v.lowline))
}

/// What a verdict blames.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Kind {
    /// A host or rank that did not answer (dead or hung) or whose runs all failed.
    Lost,
    /// A host: all its NICs (or its only one) send and receive slowly.
    Host,
    /// One NIC of a host.
    Nic,
    /// The path between two hosts, both directions.
    Link,
    /// One direction of the path between two hosts.
    Direction,
    /// The path between two hosts slow in some of its runs and not in
    /// others (low at [`FLAP_MIN_LOW`] measurements at least, and one cell
    /// both low and normal): an intermittent fault that a cell's best run
    /// would hide.
    Flapping,
    /// Every pair on one NIC (rail) alike: the cluster's median under 90%
    /// of the ports' rate (a setting such as the MTU or flow control, the
    /// fabric, a rate limit). Names no host.
    Cluster,
}

impl Kind {
    /// The name in the JSON document.
    pub fn as_str(self) -> &'static str {
        match self {
            Kind::Lost => "lost",
            Kind::Host => "host",
            Kind::Nic => "nic",
            Kind::Link => "link",
            Kind::Direction => "direction",
            Kind::Flapping => "flapping",
            Kind::Cluster => "cluster",
        }
    }
}

/// One verdict.
#[derive(Debug, Clone, PartialEq)]
pub struct Verdict {
    /// What is blamed.
    pub kind: Kind,
    /// The hosts (indexes): one for lost/host/nic, two for link (lower
    /// first) and direction (client, server).
    pub hosts: Vec<usize>,
    /// The NIC, when the verdict is about one NIC; none when about all.
    pub nic: Option<usize>,
    /// Why, with the numbers, in one line (host names filled in).
    pub why: String,
    /// The numbers behind it.
    pub numbers: BTreeMap<String, f64>,
    /// Whether a retest measured it again.
    pub retested: bool,
    /// Whether the retest's own runs of it were low too: a host's (or
    /// NIC's) slow side against the hosts not blamed on that NIC, a link's
    /// or direction's low cells. A verdict the retest measured but did not
    /// see again rests on the first pass alone.
    pub seen_again: bool,
}

impl Verdict {
    /// The `verdicts` entry of the JSON document.
    pub fn to_json(&self, names: &[String]) -> Value {
        let hosts: Vec<&str> = self
            .hosts
            .iter()
            .map(|&h| names.get(h).map_or("?", String::as_str))
            .collect();
        json!({"kind": self.kind.as_str(), "hosts": hosts, "nic": self.nic, "why": self.why,
               "numbers": self.numbers, "retested": self.retested,
               "seen_again": self.seen_again})
    }
}

/// One NIC's (rail's) measurements of every pair.
#[derive(Debug, Clone, Default)]
pub struct Rail {
    /// `gbps[client][server]` of the first pass (none: not measured or failed).
    pub gbps: Vec<Vec<Option<f64>>>,
    /// Later runs of a cell (retests), Gb/s.
    pub extra: BTreeMap<(usize, usize), Vec<f64>>,
    /// The baseline's `gbps[client][server]`, when given.
    pub baseline: Option<Vec<Vec<Option<f64>>>>,
    /// Each host's port rate on this rail, Gb/s (active speed x width),
    /// where it is known and trustworthy (empty: none is): a cell's
    /// reference is the slower of its two ports.
    pub port: Vec<Option<f64>>,
}

impl Rail {
    /// An empty rail of `n` hosts.
    pub fn new(n: usize) -> Rail {
        Rail {
            gbps: vec![vec![None; n]; n],
            ..Rail::default()
        }
    }

    /// Every run of a cell: the first pass, then the retests.
    fn samples(&self, c: usize, s: usize) -> impl Iterator<Item = f64> + '_ {
        self.gbps[c][s]
            .into_iter()
            .chain(self.extra.get(&(c, s)).into_iter().flatten().copied())
    }

    /// The best run of a cell.
    fn best(&self, c: usize, s: usize) -> Option<f64> {
        self.samples(c, s).reduce(f64::max)
    }

    fn retested(&self, c: usize, s: usize) -> bool {
        self.extra.get(&(c, s)).is_some_and(|v| !v.is_empty())
    }
}

/// What the diagnosis judges.
#[derive(Debug, Clone, Copy)]
pub struct Input<'a> {
    /// Host names (index = host).
    pub names: &'a [String],
    /// One entry per NIC.
    pub rails: &'a [Rail],
    /// Hosts already known lost, with why.
    pub lost: &'a [(usize, String)],
    /// The ports' rate, Gb/s, when known.
    pub port_gbps: Option<f64>,
    /// A cell under this ratio of its baseline is low.
    pub fail_below: f64,
    /// The smallest slowdown reported (`--min-effect`, a fraction): the
    /// floor of every line ([`Floors`]); none: the default floors.
    pub min_effect: Option<f64>,
}

/// The verdicts and notes about the whole cluster.
#[derive(Debug, Clone, Default)]
pub struct Diagnosis {
    /// Lost first, then hosts, NICs, links, directions.
    pub verdicts: Vec<Verdict>,
    /// About the cluster as a whole (e.g. its median far under the port rate).
    pub notes: Vec<String>,
}

/// The verdict on rail `i` against the ports' rate: the median of its
/// cells (not `skip`ped hosts'), each over the slower of its two ports'
/// rates (`rail.port`, else `uniform` for every port), under 90% (1 -
/// [`MIN_EFFECT`]); none when no rate is known.
fn port_verdict(i: usize, rail: &Rail, uniform: Option<f64>, skip: &[bool]) -> Option<Verdict> {
    let n = rail.gbps.len();
    let rate = |h: usize| rail.port.get(h).copied().flatten().or(uniform);
    let mut ratios = Vec::new();
    let mut rates = Vec::new();
    for c in (0..n).filter(|&c| !skip.get(c).copied().unwrap_or(false)) {
        for s in (0..n).filter(|&s| s != c && !skip.get(s).copied().unwrap_or(false)) {
            if let (Some(g), Some(pc), Some(ps)) = (rail.best(c, s), rate(c), rate(s)) {
                let p = pc.min(ps);
                if p > 0.0 {
                    ratios.push(g / p);
                    rates.push(p);
                }
            }
        }
    }
    let ratio = upper_median(&mut ratios)?;
    let port = upper_median(&mut rates)?;
    if ratio >= 1.0 - MIN_EFFECT {
        return None;
    }
    Some(Verdict {
        kind: Kind::Cluster,
        hosts: Vec::new(),
        nic: Some(i),
        why: format!(
            "NIC {i}: the cluster's pairs measure {:.0}% of the ports' rate (median; the ports: \
             {port:.2} Gb/s, active speed x width), under {:.0}%: every pair is slow alike (a \
             setting such as the MTU or flow control, the fabric, a rate limit, or the test's \
             options)",
            100.0 * ratio,
            100.0 * (1.0 - MIN_EFFECT)
        ),
        numbers: BTreeMap::from([
            (format!("nic{i}_port_ratio"), ratio),
            (format!("nic{i}_port_gbps"), port),
        ]),
        retested: false,
        seen_again: false,
    })
}

/// The upper median (of two middle values the larger): a host with half its
/// cells low because of other hosts' faults is not itself low.
pub(crate) fn upper_median(v: &mut [f64]) -> Option<f64> {
    if v.is_empty() {
        return None;
    }
    let mid = v.len() / 2;
    let (_, m, _) = v.select_nth_unstable_by(mid, f64::total_cmp);
    Some(*m)
}

/// One NIC's reference, spread and per-cell scores.
struct View {
    reference: f64,
    spread: f64,
    lowline: f64,
    /// Score of each cell (1 = the reference), NaN when not measured.
    score: Vec<f64>,
    n: usize,
    /// The cells' median ratio to their baseline (at most 1), when given.
    drift: Option<f64>,
    /// The two-way fit of the cells (none with fewer than 4 hosts).
    fit: Option<Fit>,
    /// k for the hosts' effects (two per host), the cells, the pairs.
    k_hosts: f64,
    k_cells: f64,
    k_pairs: f64,
    /// The smallest slowdowns reported.
    floors: Floors,
}

impl View {
    fn score(&self, c: usize, s: usize) -> Option<f64> {
        let v = self.score[c * self.n + s];
        (!v.is_nan()).then_some(v)
    }

    fn low(&self, c: usize, s: usize) -> Option<bool> {
        self.score(c, s).map(|v| v < self.lowline)
    }

    /// Host `h`'s effect as a client (`sends`) or server in the fit, and
    /// the line under which it is a fault (both on the log scale).
    fn effect(&self, h: usize, sends: bool) -> Option<(f64, f64)> {
        let f = self.fit.as_ref()?;
        let (e, cells) = if sends {
            (f.send[h], f.send_cells[h])
        } else {
            (f.receive[h], f.receive_cells[h])
        };
        let line = (self.k_hosts * f.effect_se(cells)).max(log_floor(self.floors.host));
        (!e.is_nan() && cells >= 2).then_some((e, line))
    }

    fn effect_low(&self, h: usize, sends: bool) -> bool {
        self.effect(h, sends).is_some_and(|(e, line)| e < -line)
    }

    /// What this NIC's run could see, in one line: the noise the fit
    /// measured and the smallest slowdown of a host, a link and one
    /// direction that it names (for a host with a whole row and column,
    /// a pair with both cells measured). None without a fit.
    fn sensitivity(&self, nic: usize) -> Option<String> {
        let f = self.fit.as_ref()?;
        let cells = f.send_cells.iter().copied().max().unwrap_or(0);
        let host = (self.k_hosts * f.effect_se(cells)).max(log_floor(self.floors.host));
        let floor = log_floor(self.floors.path);
        let sigma = f.sigma * (1.0 + 2.0 * 1.2533 * 1.2533 / cells.max(1) as f64).sqrt();
        let link = (self.k_pairs * sigma / std::f64::consts::SQRT_2).max(floor);
        let direction = (self.k_cells * sigma).max(floor);
        let pct = |x: f64| 100.0 * -(-x).exp_m1();
        let floors = if self.floors.given {
            format!("--min-effect {:.1}%", 100.0 * self.floors.host)
        } else {
            format!(
                "floors {:.0}% for a host, {:.0}% for a path",
                100.0 * self.floors.host,
                100.0 * self.floors.path
            )
        };
        Some(format!(
            "NIC {nic}: noise {:.1}% per run ({} hosts); this run names a host or NIC {:.1}% slow \
             or more, a link {:.1}%, one direction {:.1}% (smaller faults pass unseen; {floors})",
            100.0 * f.sigma,
            f.n,
            pct(host),
            pct(link),
            pct(direction)
        ))
    }

    /// Whether the cell's residual (what the hosts' effects do not explain)
    /// is low on its own.
    fn residual_low(&self, c: usize, s: usize) -> bool {
        let Some(f) = &self.fit else { return false };
        let line = (self.k_cells * f.residual_sigma(c, s)).max(log_floor(self.floors.path));
        f.residual(c, s).is_some_and(|r| r < -line)
    }

    /// One run `x` (Gb/s) of the cell `(c, s)` judged on its own: whether
    /// it is low, and whether it is normal (above half the line: a run
    /// of a path that is not slow). With the fit, its deviation from
    /// what the fit expects of the cell (`overall + send[c] +
    /// receive[s]`) against the cell's line (k for the cells times the
    /// cell's residual sigma, never under the path floor); without, its
    /// ratio to the reference against the line per cell. A path a little
    /// slow in every run has runs low and runs between, none normal: not
    /// flapping.
    fn run_state(&self, c: usize, s: usize, x: f64) -> (bool, bool) {
        if x <= 0.0 {
            return (true, false);
        }
        let by_line = || {
            let r = x / self.reference;
            (r < self.lowline, r > (1.0 + self.lowline) / 2.0)
        };
        let Some(f) = &self.fit else {
            return by_line();
        };
        let (e_c, e_s) = (f.send[c], f.receive[s]);
        if e_c.is_nan() || e_s.is_nan() {
            return by_line();
        }
        let line = (self.k_cells * f.residual_sigma(c, s)).max(log_floor(self.floors.path));
        let d = x.ln() - f.overall - e_c - e_s;
        (d < -line, d > -line / 2.0)
    }

    /// Whether both directions of a pair are low together: their mean
    /// residual (noise sigma / sqrt 2) under the pairs' line, and the two not
    /// told apart (a slow direction has one low and one normal residual).
    fn link_low(&self, a: usize, b: usize) -> bool {
        let Some(f) = &self.fit else { return false };
        let (Some(ab), Some(ba)) = (f.residual(a, b), f.residual(b, a)) else {
            return false;
        };
        let pair_sigma =
            (f.residual_sigma(a, b) + f.residual_sigma(b, a)) / 2.0 / std::f64::consts::SQRT_2;
        let line = (self.k_pairs * pair_sigma).max(log_floor(self.floors.path));
        // The difference of the two has sigma * sqrt 2; k for one test.
        let same = (ab - ba).abs() < k_sigma(1) * f.sigma * std::f64::consts::SQRT_2;
        (ab + ba) / 2.0 < -line && same
    }
}

fn view(rail: &Rail, skip: &[bool], fail_below: f64, floors: Floors) -> Option<View> {
    let n = rail.gbps.len();
    let live = |h: usize| !skip[h];
    let mut row_medians = Vec::new();
    let mut row = Vec::with_capacity(n);
    for c in (0..n).filter(|&c| live(c)) {
        row.clear();
        row.extend(
            (0..n)
                .filter(|&s| s != c && live(s))
                .filter_map(|s| rail.best(c, s)),
        );
        row_medians.extend(upper_median(&mut row));
    }
    let reference = upper_median(&mut row_medians).filter(|r| *r > 0.0)?;
    let mut above = Vec::new();
    let mut score = vec![f64::NAN; n * n];
    let mut judged = 0;
    for c in (0..n).filter(|&c| live(c)) {
        for s in (0..n).filter(|&s| s != c && live(s)) {
            if let Some(v) = rail.best(c, s) {
                if v >= reference {
                    above.push((v / reference).ln());
                }
                score[c * n + s] = v / reference;
                judged += 1;
            }
        }
    }
    let (spread, lowline) = low_line_at(&mut above, judged, floors.cell);
    let live_hosts = skip.iter().filter(|s| !**s).count();
    // The fit works on the logs of the rates (NaN: not measured).
    let logs = || -> Vec<f64> {
        let ln = |x: f64| {
            if x > 0.0 {
                (x * reference).ln()
            } else {
                f64::NAN
            }
        };
        score.iter().map(|&x| ln(x)).collect()
    };
    let fit = (live_hosts >= MIN_FIT_HOSTS)
        .then(|| Fit::new(logs(), n))
        .flatten();
    let drift = rail
        .baseline
        .as_ref()
        .and_then(|base| baseline_drift(rail, base, &score, n));
    if let (Some(base), Some(drift)) = (&rail.baseline, drift) {
        for c in 0..n {
            for s in 0..n {
                let (Some(v), Some(Some(b))) =
                    (rail.best(c, s), base.get(c).and_then(|r| r.get(s)))
                else {
                    continue;
                };
                if *b > 0.0 && !score[c * n + s].is_nan() {
                    // Under fail_below of its baseline (the whole cluster's
                    // slowdown since taken out) scores under the lowline.
                    let against = v / b / drift * lowline / fail_below;
                    score[c * n + s] = score[c * n + s].min(against);
                }
            }
        }
    }
    Some(View {
        reference,
        spread,
        lowline,
        score,
        n,
        drift,
        fit,
        k_hosts: k_sigma(2 * live_hosts),
        k_cells: k_sigma(judged),
        // The pairs' test comes on top of the cells' tests: k for all the
        // cells keeps the two together at the cells' false alarm rate.
        k_pairs: k_sigma(judged),
        floors,
    })
}

/// The cells' upper median ratio to their baseline, at most 1: a cluster
/// slower everywhere than when the baseline was taken (other load, a
/// setting) is judged host against host, not every host against its old
/// self (the pair comparison still fails every pair under `--fail-below`).
fn baseline_drift(rail: &Rail, base: &[Vec<Option<f64>>], score: &[f64], n: usize) -> Option<f64> {
    let mut ratios: Vec<f64> = (0..n)
        .flat_map(|c| (0..n).map(move |s| (c, s)))
        .filter(|&(c, s)| !score[c * n + s].is_nan())
        .filter_map(|(c, s)| {
            let b = (*base.get(c)?.get(s)?)?;
            (b > 0.0).then(|| rail.best(c, s).map(|v| v / b))?
        })
        .collect();
    upper_median(&mut ratios)
        .filter(|d| *d > 0.0)
        .map(|d| d.min(1.0))
}

/// Which side of a host is slow on one NIC.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Side {
    Both,
    Sends,
    Receives,
}

struct HostFlag {
    host: usize,
    rail: usize,
    side: Side,
    row: f64,
    col: f64,
    cells: usize,
    retested: bool,
    seen_again: bool,
}

/// The hosts slow on one NIC, the clearest first: each host is judged on
/// its cells with the hosts already flagged left out, so that cells a
/// slower host explains do not flag its partners (with 4 hosts and one
/// slow, a partner's row kept one cell of the slow host among three, and
/// the upper median then rested on one healthy cell: in the rig a healthy
/// rank receiving once at 0.66 of the median from one rank was flagged,
/// and its retest, as noisy, "confirmed" it).
fn host_flags(rail_i: usize, rail: &Rail, v: &View, skip: &[bool]) -> Vec<HostFlag> {
    let live = || (0..v.n).filter(|&h| !skip[h]);
    let mut first: Vec<HostFlag> = live()
        .filter_map(|h| host_flag(h, rail_i, rail, v, skip, &[]))
        .collect();
    first.sort_by(|a, b| a.row.min(a.col).total_cmp(&b.row.min(b.col)));
    let mut out: Vec<HostFlag> = Vec::new();
    for f in first {
        let worse: Vec<usize> = out.iter().map(|k| k.host).collect();
        out.extend(host_flag(f.host, rail_i, rail, v, skip, &worse));
    }
    out.sort_by_key(|f| f.host);
    let flagged: Vec<usize> = out.iter().map(|f| f.host).collect();
    for f in &mut out {
        f.seen_again = seen_again(f, rail, v, &flagged);
    }
    out
}

/// Host `h`'s flag on one NIC, judged on its cells with the hosts
/// `without` (and the lost ones) left out; none when it is not slow.
fn host_flag(
    h: usize,
    rail_i: usize,
    rail: &Rail,
    v: &View,
    skip: &[bool],
    without: &[usize],
) -> Option<HostFlag> {
    let n = v.n;
    let partner = |o: usize| o != h && !skip[o] && !without.contains(&o);
    let mut row: Vec<f64> = (0..n)
        .filter(|&s| partner(s))
        .filter_map(|s| v.score(h, s))
        .collect();
    let mut col: Vec<f64> = (0..n)
        .filter(|&c| partner(c))
        .filter_map(|c| v.score(c, h))
        .collect();
    let (nr, nc) = (row.len(), col.len());
    let (rm, cm) = (upper_median(&mut row)?, upper_median(&mut col)?);
    // Low by the line for cells (the row's and column's medians, and
    // against the baseline), or by the fit (the host's effect against its
    // standard error: a host a few percent slow, whose cells stay above
    // the line for cells).
    let rl = rm < v.lowline || v.effect_low(h, true);
    let cl = cm < v.lowline || v.effect_low(h, false);
    let side = match (rl && nr >= 2, cl && nc >= 2) {
        (true, true) => Side::Both,
        (true, false) if nr >= 3 => Side::Sends,
        (false, true) if nc >= 3 => Side::Receives,
        _ => return None,
    };
    Some(HostFlag {
        host: h,
        rail: rail_i,
        side,
        row: rm,
        col: cm,
        cells: nr + nc,
        retested: (0..n).any(|o| rail.retested(h, o) || rail.retested(o, h)),
        seen_again: false,
    })
}

/// Whether the retest's runs of a flagged host's slow side(s), against
/// hosts not flagged on this NIC, were low too (their upper median under
/// the low line). The cell values are the best of all runs, so a host
/// flagged by its first pass stays flagged when the retest pairs it with a
/// good host and measures that pair well: only the retest's own numbers
/// tell whether it saw the fault (in the rig a healthy rank, flagged for
/// one low cell next to a slowed rank, was "confirmed" by a retest that
/// measured it at full rate against the one good rank).
fn seen_again(f: &HostFlag, rail: &Rail, v: &View, flagged: &[usize]) -> bool {
    let h = f.host;
    let others = || (0..v.n).filter(|o| *o != h && !flagged.contains(o));
    let runs = |cells: Vec<(usize, usize)>| -> Vec<f64> {
        cells
            .iter()
            .filter_map(|k| rail.extra.get(k))
            .flatten()
            .map(|x| x / v.reference)
            .collect()
    };
    let mut sides = Vec::new();
    if f.side != Side::Receives {
        sides.push(runs(others().map(|o| (h, o)).collect()));
    }
    if f.side != Side::Sends {
        sides.push(runs(others().map(|o| (o, h)).collect()));
    }
    let by_line = sides
        .iter_mut()
        .all(|r| upper_median(r).is_some_and(|m| m < v.lowline));
    by_line || seen_by_fit(f, rail, v, flagged)
}

/// Whether the retest's runs of a flagged host's slow side(s) show its
/// effect again: each run against a host not flagged, taken as its
/// deviation from what the fit expects of the partner with a healthy host
/// (`overall + partner's effect`), and their median under the host's line
/// at the standard error of that many runs (k for the hosts flagged).
fn seen_by_fit(f: &HostFlag, rail: &Rail, v: &View, flagged: &[usize]) -> bool {
    let Some(fit) = &v.fit else { return false };
    let h = f.host;
    let others = || (0..v.n).filter(|o| *o != h && !flagged.contains(o));
    let runs = |sends: bool| -> Vec<f64> {
        others()
            .flat_map(|o| {
                let (cell, partner) = if sends {
                    ((h, o), fit.receive[o])
                } else {
                    ((o, h), fit.send[o])
                };
                rail.extra
                    .get(&cell)
                    .into_iter()
                    .flatten()
                    .filter(move |x| **x > 0.0 && !partner.is_nan())
                    .map(move |x| x.ln() - fit.overall - partner)
            })
            .collect()
    };
    // A host slow on both sides is judged on its runs of both together
    // (one test of twice the runs): two tests at 95% each saw a 5% host
    // again 9 times in 10.
    let mut d = match f.side {
        Side::Sends => runs(true),
        Side::Receives => runs(false),
        Side::Both => [runs(true), runs(false)].concat(),
    };
    let line = (k_sigma(flagged.len()) * fit.effect_se(d.len())).max(log_floor(v.floors.host));
    // The plain median: the upper one of two runs is their better, which
    // halved the chance of seeing a 5% host again.
    fit::median(&mut d).is_some_and(|x| x < -line)
}

/// A low pair of cells no host explains.
struct PairFlag {
    a: usize,
    b: usize,
    rail: usize,
    /// (a->b low, b->a low)
    low: (bool, bool),
}

fn pair_flags(rail_i: usize, v: &View, skip: &[bool], flags: &[HostFlag]) -> Vec<PairFlag> {
    let n = v.n;
    let mut sends = vec![false; n];
    let mut receives = vec![false; n];
    for f in flags {
        sends[f.host] |= f.side != Side::Receives;
        receives[f.host] |= f.side != Side::Sends;
    }
    let explained = |c: usize, s: usize| sends[c] || receives[s];
    let mut out = Vec::new();
    for a in (0..n).filter(|&a| !skip[a]) {
        for b in (a + 1..n).filter(|&b| !skip[b]) {
            let link = v.link_low(a, b);
            let low = |c, s| link || v.low(c, s) == Some(true) || v.residual_low(c, s);
            let ab = low(a, b) && !explained(a, b);
            let ba = low(b, a) && !explained(b, a);
            if ab || ba {
                out.push(PairFlag {
                    a,
                    b,
                    rail: rail_i,
                    low: (ab, ba),
                });
            }
        }
    }
    out
}

/// One path's runs (both directions, on one NIC or added over all),
/// each judged on its own ([`View::run_state`]). The runs of a cell are
/// its first pass (occasion 0) and its retests (occasions 1, 2, ...: the
/// retest measures a pair's two directions on every NIC together).
#[derive(Debug, Clone, Copy, Default)]
struct FlapCount {
    /// Runs of the path (the cells no host flag explains).
    runs: usize,
    /// Of which low.
    low: usize,
    /// Of which normal (above half the line).
    normal: usize,
    /// Runs of the retest.
    retest_runs: usize,
    /// Of which low.
    retest_low: usize,
    /// The occasions with a low run (bit i: occasion i, the last bit
    /// standing for the 63rd and later).
    low_occasions: u64,
    /// Whether one cell had a low run and a normal run: the path changed
    /// between runs (a steady fault is low in every run of its cell).
    mixed: bool,
}

impl FlapCount {
    fn add(&mut self, o: &FlapCount) {
        self.runs += o.runs;
        self.low += o.low;
        self.normal += o.normal;
        self.retest_runs += o.retest_runs;
        self.retest_low += o.retest_low;
        self.low_occasions |= o.low_occasions;
        self.mixed |= o.mixed;
    }

    /// Slow in some runs and not in others: low at [`FLAP_MIN_LOW`]
    /// occasions or more (one occasion's lows may be one event that hit
    /// both directions at once), and one cell both low and normal.
    fn flapping(&self) -> bool {
        self.low_occasions.count_ones() as usize >= FLAP_MIN_LOW && self.mixed
    }
}

/// The sides of hosts a NIC's host flags explain: (sends, receives).
type Explained = (Vec<bool>, Vec<bool>);

/// A NIC's index, its view and the sides its host flags explain.
type Judged<'v> = (usize, &'v View, Explained);

/// The sides of hosts that NIC `rail`'s host flags explain.
fn explained(n: usize, flags: &[HostFlag], rail: usize) -> Explained {
    let mut sends = vec![false; n];
    let mut receives = vec![false; n];
    for f in flags.iter().filter(|f| f.rail == rail) {
        sends[f.host] |= f.side != Side::Receives;
        receives[f.host] |= f.side != Side::Sends;
    }
    (sends, receives)
}

/// The runs of the path `(a, b)` on one NIC, its cells that a host flag
/// explains (`ex`) left out.
fn path_runs(rail: &Rail, v: &View, ex: &Explained, (a, b): (usize, usize)) -> FlapCount {
    let mut k = FlapCount::default();
    for (c, s) in [(a, b), (b, a)] {
        if ex.0[c] || ex.1[s] {
            continue;
        }
        let first = rail.gbps[c][s].into_iter().map(|x| (x, 0));
        let again = rail.extra.get(&(c, s)).into_iter().flatten();
        let (mut low_here, mut normal_here) = (false, false);
        for (x, occasion) in first.chain(again.enumerate().map(|(j, &x)| (x, j + 1))) {
            let (low, normal) = v.run_state(c, s, x);
            k.runs += 1;
            k.low += usize::from(low);
            k.normal += usize::from(normal);
            if occasion > 0 {
                k.retest_runs += 1;
                k.retest_low += usize::from(low);
            }
            if low {
                k.low_occasions |= 1 << occasion.min(63);
            }
            low_here |= low;
            normal_here |= normal;
        }
        k.mixed |= low_here && normal_here;
    }
    k
}

/// The flapping paths over every NIC (`rails`: each NIC's index, view
/// and explained sides): every path with a low run on some NIC, its runs
/// added over all NICs, kept when [`FlapCount::flapping`].
fn flapping_paths(
    input: &Input,
    rails: &[Judged],
    skip: &[bool],
) -> BTreeMap<(usize, usize), Vec<(usize, FlapCount)>> {
    let n = skip.len();
    let mut candidates = std::collections::BTreeSet::new();
    // The first pass's runs and low runs over every path and NIC: how
    // often the cluster's runs are low with no steady fault behind them
    // (rare deep drops of the noise, collisions).
    let (mut first_runs, mut first_low) = (0usize, 0usize);
    let mut pairs = 0usize;
    for (i, v, ex) in rails {
        let rail = &input.rails[*i];
        for a in (0..n).filter(|&a| !skip[a]) {
            for b in (a + 1..n).filter(|&b| !skip[b]) {
                let k = path_runs(rail, v, ex, (a, b));
                first_runs += k.runs - k.retest_runs;
                first_low += k.low - (k.retest_low);
                pairs += 1;
                if k.low > 0 {
                    candidates.insert((a, b));
                }
            }
        }
    }
    let pairs = pairs / rails.len().max(1);
    let mut out = BTreeMap::new();
    for pair in candidates {
        let per: Vec<(usize, FlapCount)> = rails
            .iter()
            .map(|(i, v, ex)| (*i, path_runs(&input.rails[*i], v, ex, pair)))
            .collect();
        let mut all = FlapCount::default();
        per.iter().for_each(|(_, k)| all.add(k));
        // The chance of a low run on a healthy path: the other paths'
        // first-pass rate, or the line's own (a 1% chance of any low cell
        // on a NIC) where they had none.
        let own = (all.runs - all.retest_runs, all.low - all.retest_low);
        let runs = first_runs.saturating_sub(own.0).max(1);
        let p = (first_low.saturating_sub(own.1) as f64 / runs as f64)
            .max(FALSE_ALARM / 2.0 / runs as f64);
        // As many low runs by chance on any of the paths judged.
        let chance = binomial_tail(all.runs, all.low, p) * pairs as f64;
        if all.flapping() && chance < FALSE_ALARM {
            out.insert(pair, per);
        }
    }
    out
}

/// `P(X >= k)` for `X` binomial of `n` runs at `p` each (`p` under 1).
fn binomial_tail(n: usize, k: usize, p: f64) -> f64 {
    if k == 0 {
        return 1.0;
    }
    if k > n {
        return 0.0;
    }
    // P(X = j), j from 0 up, by the ratio of successive terms; the tail
    // summed on its own (1 - the rest loses a tail of 1e-17).
    let p = p.clamp(0.0, 0.999);
    let mut term = (1.0 - p).powi(n as i32);
    let mut tail = 0.0;
    for j in 0..=n {
        if j >= k {
            tail += term;
        }
        term *= (n - j) as f64 / (j + 1) as f64 * p / (1.0 - p);
    }
    tail
}

/// The flapping verdicts, one per path of [`flapping_paths`]; seen again
/// when a run of the retest was low.
fn flap_verdicts(paths: &BTreeMap<(usize, usize), Vec<(usize, FlapCount)>>) -> Vec<Verdict> {
    let mut out = Vec::new();
    for (&(a, b), per) in paths {
        let mut all = FlapCount::default();
        per.iter().for_each(|(_, k)| all.add(k));
        let FlapCount {
            runs,
            low,
            normal,
            retest_runs,
            retest_low,
            ..
        } = all;
        let occasions = all.low_occasions.count_ones();
        let mut numbers = BTreeMap::from([
            ("runs".to_owned(), runs as f64),
            ("low_runs".to_owned(), low as f64),
            ("normal_runs".to_owned(), normal as f64),
            ("low_occasions".to_owned(), f64::from(occasions)),
            ("retest_runs".to_owned(), retest_runs as f64),
            ("retest_low_runs".to_owned(), retest_low as f64),
        ]);
        let mut nics = Vec::new();
        for (rail, k) in per {
            numbers.insert(format!("nic{rail}_low_runs"), k.low as f64);
            numbers.insert(format!("nic{rail}_runs"), k.runs as f64);
            nics.push(format!("NIC {rail}: {} of {}", k.low, k.runs));
        }
        let retested = retest_runs > 0;
        let seen = retest_low > 0;
        // The hosts lead the verdict's line (render_text); the why says
        // the runs.
        let mut why = format!(
            "slow in {low} of its {runs} runs ({}), at {occasions} measurements, and normal in \
             {normal}, each run judged on its own against what the hosts' effects predict: \
             intermittent (a cell's best run would clear it)",
            nics.join(", ")
        );
        why.push_str(match (retested, seen) {
            (false, _) => "; not retested",
            (true, true) => "; the retest saw it low again",
            (true, false) => "; the retest measured it again and did not see it low",
        });
        out.push(Verdict {
            kind: Kind::Flapping,
            hosts: vec![a, b],
            nic: None,
            why,
            numbers,
            retested,
            seen_again: seen,
        });
    }
    out
}

/// Judges every NIC's matrix; see the module documentation.
pub fn diagnose(input: &Input) -> Diagnosis {
    let n = input.names.len();
    let mut d = Diagnosis::default();
    let mut ports = Vec::new();
    let mut skip = vec![false; n];
    for (h, why) in input.lost {
        if *h < n && !skip[*h] {
            skip[*h] = true;
            d.verdicts.push(lost(*h, why.clone()));
        }
    }
    // A host none of whose runs measured anything, while others' did, is
    // lost too.
    let measured = |r: &Rail| r.gbps.iter().flatten().any(Option::is_some);
    let some = input.rails.iter().any(measured);
    for (h, gone) in skip.iter_mut().enumerate() {
        let any = |r: &Rail| (0..n).any(|o| r.best(h, o).is_some() || r.best(o, h).is_some());
        if !*gone && n > 2 && some && !input.rails.iter().any(any) {
            *gone = true;
            d.verdicts.push(lost(
                h,
                "no run with this host measured anything (every run failed)".into(),
            ));
        }
    }
    let mut hosts = Vec::new();
    let mut links = Vec::new();
    let mut views = Vec::new();

    for (i, rail) in input.rails.iter().enumerate() {
        if rail.gbps.len() != n {
            continue;
        }
        let Some(v) = view(rail, &skip, input.fail_below, Floors::of(input.min_effect)) else {
            continue;
        };
        let flags = host_flags(i, rail, &v, &skip);
        links.extend(pair_flags(i, &v, &skip, &flags));
        hosts.extend(flags);
        ports.extend(port_verdict(i, rail, input.port_gbps, &skip));
        if let Some(drift) = v.drift.filter(|x| *x < input.fail_below) {
            d.notes.push(format!(
                "NIC {i}: the pairs are at {:.0}% of their baseline (median): the whole cluster \
                 is slower than when the baseline was taken (the comparison fails those pairs); \
                 the verdicts compare the hosts with each other",
                100.0 * drift
            ));
        }
        d.notes.extend(v.sensitivity(i));
        views.push((i, v));
    }
    // Paths slow in some runs and normal in others: flapping, not the
    // link or direction their best runs may still show.
    let judged: Vec<Judged> = views
        .iter()
        .map(|(i, v)| (*i, v, explained(n, &hosts, *i)))
        .collect();
    let flapping = flapping_paths(input, &judged, &skip);
    links.retain(|p| !flapping.contains_key(&(p.a, p.b)));
    let view_of = |r: usize| views.iter().find(|(i, _)| *i == r).map(|(_, v)| v);
    let nrails = input.rails.len();
    d.verdicts.extend(host_verdicts(&hosts, nrails, &view_of));
    d.verdicts
        .extend(pair_verdicts(&links, nrails, input, &view_of));
    d.verdicts.extend(flap_verdicts(&flapping));
    d.verdicts.extend(ports);
    d.verdicts
        .sort_by(|a, b| (a.kind, &a.hosts, a.nic).cmp(&(b.kind, &b.hosts, b.nic)));
    d
}

/// The verdict for host `h`, lost (dead or hung) for the reason `why`.
pub fn lost(h: usize, why: String) -> Verdict {
    Verdict {
        kind: Kind::Lost,
        hosts: vec![h],
        nic: None,
        why,
        numbers: BTreeMap::new(),
        retested: false,
        seen_again: false,
    }
}

/// Groups the flags of one host (or pair) by NIC: on every NIC (with more
/// than one) it is one verdict about all; otherwise one per NIC.
fn by_rails<K: Ord + Copy, F>(flags: &[F], key: impl Fn(&F) -> K) -> BTreeMap<K, Vec<&F>> {
    let mut m: BTreeMap<K, Vec<&F>> = BTreeMap::new();
    for f in flags {
        m.entry(key(f)).or_default().push(f);
    }
    m
}

fn host_verdicts<'v>(
    flags: &[HostFlag],
    nrails: usize,
    view_of: &dyn Fn(usize) -> Option<&'v View>,
) -> Vec<Verdict> {
    let mut out = Vec::new();
    for (host, fs) in by_rails(flags, |f| f.host) {
        let all = fs.len() == nrails;
        let groups: Vec<Vec<&HostFlag>> = if all {
            vec![fs]
        } else {
            fs.into_iter().map(|f| vec![f]).collect()
        };
        for g in groups {
            let mut why = Vec::new();
            let mut numbers = BTreeMap::new();
            for f in &g {
                let Some(v) = view_of(f.rail) else { continue };
                let side = match f.side {
                    Side::Both => "sends and receives",
                    Side::Sends => "sends (receives normally)",
                    Side::Receives => "receives (sends normally)",
                };
                why.push(format!(
                    "NIC {}: {side} at {:.2} (row median) and {:.2} (column median) of the \
                     cluster's median {:.2} Gb/s, low line {:.2}, {} cells",
                    f.rail, f.row, f.col, v.reference, v.lowline, f.cells
                ));
                numbers.insert(format!("nic{}_row", f.rail), f.row);
                numbers.insert(format!("nic{}_column", f.rail), f.col);
                numbers.insert(format!("nic{}_median_gbps", f.rail), v.reference);
                numbers.insert(format!("nic{}_lowline", f.rail), v.lowline);
                numbers.insert(format!("nic{}_spread", f.rail), v.spread);
                if let (Some((send, line)), Some((receive, _))) =
                    (v.effect(f.host, true), v.effect(f.host, false))
                {
                    why.push(format!(
                        "the fit's effects {:+.1}% sending, {:+.1}% receiving (a host's line {:.1}%)",
                        100.0 * send.exp_m1(),
                        100.0 * receive.exp_m1(),
                        100.0 * (-line).exp_m1()
                    ));
                    numbers.insert(format!("nic{}_send_effect", f.rail), send.exp());
                    numbers.insert(format!("nic{}_receive_effect", f.rail), receive.exp());
                    numbers.insert(format!("nic{}_effect_line", f.rail), (-line).exp());
                    if let Some(fit) = &v.fit {
                        numbers.insert(format!("nic{}_noise", f.rail), fit.sigma);
                    }
                }
            }
            let retested = g.iter().any(|f| f.retested);
            let seen = g.iter().all(|f| f.seen_again);
            let one = g.len() == 1 && !all;
            let kind = if one { Kind::Nic } else { Kind::Host };
            let mut why = why.join("; ");
            if nrails == 1 {
                why.push_str(" (one NIC measured: the host or its NIC)");
            }
            why.push_str(retest_words(retested, seen));
            out.push(Verdict {
                kind,
                hosts: vec![host],
                nic: one.then(|| g[0].rail),
                why,
                numbers,
                retested,
                seen_again: seen,
            });
        }
    }
    out
}

fn pair_verdicts<'v>(
    flags: &[PairFlag],
    nrails: usize,
    input: &Input,
    view_of: &dyn Fn(usize) -> Option<&'v View>,
) -> Vec<Verdict> {
    let names = input.names;
    let mut out = Vec::new();
    for ((a, b, low), fs) in by_rails(flags, |f| (f.a, f.b, f.low)) {
        let all = fs.len() == nrails && nrails > 1;
        let groups: Vec<Vec<&PairFlag>> = if all {
            vec![fs]
        } else {
            fs.into_iter().map(|f| vec![f]).collect()
        };
        for g in groups {
            let (kind, hosts) = match low {
                (true, true) => (Kind::Link, vec![a, b]),
                (true, false) => (Kind::Direction, vec![a, b]),
                _ => (Kind::Direction, vec![b, a]),
            };
            let mut why = Vec::new();
            let mut numbers = BTreeMap::new();
            let mut retested = false;
            let mut seen = false;
            let mut flapping = false;
            for f in &g {
                let (Some(v), Some(rail)) = (view_of(f.rail), input.rails.get(f.rail)) else {
                    continue;
                };
                let runs = |c: usize, s: usize| -> Vec<f64> { rail.samples(c, s).collect() };
                let show = |c: usize, s: usize| {
                    let r = runs(c, s);
                    let list: Vec<String> = r.iter().map(|g| format!("{g:.2}")).collect();
                    format!(
                        "{} -> {} {} Gb/s",
                        names[c],
                        names[s],
                        if list.is_empty() {
                            "-".into()
                        } else {
                            list.join(", ")
                        }
                    )
                };
                retested |= rail.retested(a, b) || rail.retested(b, a);
                // A cell's value is the best of its runs: a low one the
                // retest measured was low in every run.
                seen |= (f.low.0 && rail.retested(a, b)) || (f.low.1 && rail.retested(b, a));
                for (c, s) in [(a, b), (b, a)] {
                    let r = runs(c, s);
                    if r.len() > 1 {
                        let (lo, hi) = r
                            .iter()
                            .fold((f64::MAX, f64::MIN), |(l, h), &x| (l.min(x), h.max(x)));
                        flapping |= (hi - lo) / v.reference > 1.0 - v.lowline;
                    }
                }
                why.push(format!(
                    "NIC {}: {}, {} against the cluster's median {:.2} Gb/s (low line {:.2})",
                    f.rail,
                    show(a, b),
                    show(b, a),
                    v.reference,
                    v.lowline
                ));
                numbers.insert(
                    format!("nic{}_ab_gbps", f.rail),
                    rail.best(a, b).unwrap_or(f64::NAN),
                );
                numbers.insert(
                    format!("nic{}_ba_gbps", f.rail),
                    rail.best(b, a).unwrap_or(f64::NAN),
                );
                numbers.insert(format!("nic{}_median_gbps", f.rail), v.reference);
                numbers.insert(format!("nic{}_spread", f.rail), v.spread);
            }
            numbers.retain(|_, v| v.is_finite());
            let mut why = why.join("; ");
            if flapping {
                why.push_str("; its runs differ more than the noise: flapping");
            }
            why.push_str(retest_words(retested, seen));
            out.push(Verdict {
                kind,
                hosts,
                nic: (!all && nrails > 1).then(|| g[0].rail),
                why,
                numbers,
                retested,
                seen_again: seen,
            });
        }
    }
    out
}

/// What a verdict's why says about its retest.
fn retest_words(retested: bool, seen: bool) -> &'static str {
    match (retested, seen) {
        (false, _) => "; not retested",
        (true, true) => "; the retest saw it again",
        (true, false) => "; the retest measured it again and did not see it",
    }
}

/// The text section: one line per verdict.
pub fn render_text(d: &Diagnosis, names: &[String]) -> String {
    let mut s = String::from("# verdicts: what is slow or lost, and why\n");
    if d.verdicts.is_empty() {
        s.push_str("none: every host, NIC and link within the cluster's spread\n");
    }
    for v in &d.verdicts {
        let hosts: Vec<&str> = v.hosts.iter().map(|&h| names[h].as_str()).collect();
        let what = match v.kind {
            Kind::Direction => hosts.join(" -> "),
            _ => hosts.join(" <-> "),
        };
        // The why starts with the NIC(s) it is about.
        s.push_str(&format!("{:<9} {what}: {}\n", v.kind.as_str(), v.why));
    }
    for n in &d.notes {
        s.push_str(&format!("note      {n}\n"));
    }
    s
}

/// The `verdicts` array of the JSON document.
pub fn to_json(d: &Diagnosis, names: &[String]) -> Value {
    d.verdicts.iter().map(|v| v.to_json(names)).collect()
}

#[cfg(test)]
mod tests;
