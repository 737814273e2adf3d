//! Which pairs of hosts measure each other in which round, how long a round
//! takes, and the schedule `--budget MINUTES` picks (docs/cluster-diagnosis.md
//! states the time model and where its numbers come from).
//!
//! A round is a list of directed flows (client, server); in a round every
//! host is the client of at most `partners` flows and the server of at most
//! `partners` flows on each NIC: a port sends and receives at once (full
//! duplex), so a pair's two directions run together. In this module's own
//! time model ([`choose`], [`Plan::predicted_wall_s`]) all NICs of a host run
//! the same round on their own rail at once, as the job does by default
//! (`--rails-serial`: one after another); the job's prediction ([`super::steps::JobPlan`]) is the one
//! the job and the simulator print.

/// The time model of one round (docs/cluster-diagnosis.md, "The model").
#[derive(Debug, Clone, PartialEq)]
pub struct Model {
    /// Seconds per round besides the measurement: the ranks' barrier, the
    /// connections' exchange and QP setup, the warm-up iterations.
    pub overhead_s: f64,
    /// Run-to-run spread of one flow's rate that no run length removes
    /// (the fabric's own variation), as the half-width of its 95% range
    /// (2 sigma) relative to the rate: `--noise`.
    pub noise: f64,
    /// Short-run spread of one flow alone on a port over a 1 s run (2 sigma,
    /// relative); it shrinks as 1/sqrt(run length) and grows as sqrt(flows
    /// sharing the port).
    pub jitter: f64,
    /// Run length of a schedule without a budget, seconds.
    pub default_run_s: f64,
    /// The shortest run: warm-up and the first completions must not dominate.
    pub min_run_s: f64,
    /// What a run must measure a link to: the short-run spread stays within
    /// this (relative, 2 sigma).
    pub precision: f64,
}

impl Default for Model {
    fn default() -> Self {
        Model {
            overhead_s: 0.3,
            noise: 0.03,
            jitter: 0.01,
            default_run_s: 2.0,
            min_run_s: 0.2,
            precision: 0.03,
        }
    }
}

impl Model {
    /// One flow's relative standard deviation when `flows` share its port
    /// for `run_s` seconds: the fabric's spread and the short-run spread.
    pub fn sigma(&self, flows: usize, run_s: f64) -> f64 {
        let fabric = self.noise / 2.0;
        let short = self.jitter / 2.0 * (flows as f64 / run_s.max(1e-3)).sqrt();
        // Not f64::hypot: it binds glibc 2.35's hypot, and the binaries
        // must run on glibc 2.34 (the values are small fractions: no
        // overflow for hypot to avoid).
        (fabric * fabric + short * short).sqrt()
    }

    /// The shortest run that measures a flow to `precision` with `flows`
    /// flows on its port.
    pub fn min_run(&self, flows: usize) -> f64 {
        let r = self.jitter / self.precision;
        (flows as f64 * r * r).max(self.min_run_s)
    }

    /// The deadline of one run: a host that has not finished by then is
    /// lost (hung).
    pub fn deadline_s(&self, run_s: f64) -> f64 {
        3.0 * run_s + 10.0
    }

    /// Seconds of one round of runs of `run_s` seconds.
    pub fn round_s(&self, run_s: f64) -> f64 {
        self.overhead_s + run_s
    }
}

/// Which pairs a schedule measures.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Pattern {
    /// Every pair, both directions at once (the circle method).
    Full,
    /// Random pairings: each round `partners` random perfect matchings.
    Random,
    /// Neighbours: in round `d`, host i sends to host i+d (mod N) and
    /// receives from i-d (rail neighbours when hosts are listed in rack
    /// order).
    Neighbour,
}

impl Pattern {
    /// The name on the command line and in reports.
    pub fn as_str(self) -> &'static str {
        match self {
            Pattern::Full => "full",
            Pattern::Random => "random",
            Pattern::Neighbour => "neighbour",
        }
    }
}

/// A schedule: the pattern, how many partners a host has per round, how
/// long each run is and how many rounds, plus the retest rounds allowed.
#[derive(Debug, Clone, PartialEq)]
pub struct Plan {
    /// The pattern.
    pub pattern: Pattern,
    /// The hosts.
    pub hosts: usize,
    /// Flows per port per direction in a round.
    pub partners: usize,
    /// Measurement seconds of each run.
    pub run_s: f64,
    /// Rounds of the pattern.
    pub rounds: usize,
    /// At most this many retest rounds (about log2 of the hosts).
    pub retest_rounds: usize,
    /// Seed of the random pairings.
    pub seed: u64,
}

/// The round-robin schedule: this rank's partner in round `r` of `n` (even)
/// slots, or `None` when it sits out (odd rank counts).
pub fn partner(rank: usize, r: usize, n: usize, real: usize) -> Option<usize> {
    let m = n - 1;
    let p = if rank == m {
        r
    } else if rank == r {
        m
    } else {
        (2 * r + m - rank) % m
    };
    (p != rank && p < real && rank < real).then_some(p)
}

/// How many rounds `size` ranks need (each one run per direction).
pub fn rounds(size: usize) -> usize {
    if size < 2 {
        0
    } else {
        size.div_ceil(2) * 2 - 1
    }
}

/// The (client NIC index, server NIC index) of every run between two
/// ranks with `n` rails each: rail k against rail k, then with
/// `--cross-rails` every other combination.
pub fn combos(n: usize, cross: bool) -> Vec<(usize, usize)> {
    let mut v: Vec<(usize, usize)> = (0..n).map(|k| (k, k)).collect();
    if cross {
        for i in 0..n {
            for j in (0..n).filter(|&j| j != i) {
                v.push((i, j));
            }
        }
    }
    v
}

/// Rounds of the circle method for `hosts` (one partner each per round).
pub fn circle_rounds(hosts: usize) -> usize {
    rounds(hosts)
}

/// The retest rounds allowed: ceil(log2 hosts), at least 2 (a suspect meets
/// two good hosts).
pub fn retest_rounds(hosts: usize) -> usize {
    (usize::BITS - hosts.max(2).saturating_sub(1).leading_zeros()).max(2) as usize
}

impl Plan {
    /// The full matrix with `partners` per round and runs of `run_s`.
    pub fn full(hosts: usize, partners: usize, run_s: f64) -> Plan {
        let partners = partners.max(1);
        Plan {
            pattern: Pattern::Full,
            hosts,
            partners,
            run_s,
            rounds: circle_rounds(hosts).div_ceil(partners),
            retest_rounds: retest_rounds(hosts),
            seed: 0,
        }
    }

    /// Predicted seconds of the whole schedule, the retest rounds included
    /// (their maximum): what the job prints before it starts.
    pub fn predicted_wall_s(&self, m: &Model) -> f64 {
        (self.rounds + self.retest_rounds) as f64 * m.round_s(self.run_s)
    }

    /// Whether a slow link is measured on its own (one flow per port):
    /// a link whose capacity is cut only shows when its flow asks for more
    /// than the cut capacity (docs/cluster-diagnosis.md).
    pub fn finds_capacity_cuts(&self) -> bool {
        self.partners == 1
    }

    /// One line for the report.
    pub fn describe(&self, m: &Model) -> String {
        let what = match self.pattern {
            Pattern::Full => "full matrix (circle method, both directions at once)".to_owned(),
            Pattern::Random => "random pairings (both directions at once)".to_owned(),
            Pattern::Neighbour => "neighbours (host i sends to i+d, d = 1, 2, ...)".to_owned(),
        };
        let wall = self.predicted_wall_s(m);
        format!(
            "{what}, {} partner{} per round per NIC, {} rounds of {:.2} s runs + {:.2} s \
             overhead, at most {} retest rounds: predicted wall {:.0} s ({:.1} min)",
            self.partners,
            if self.partners == 1 { "" } else { "s" },
            self.rounds,
            self.run_s,
            m.overhead_s,
            self.retest_rounds,
            wall,
            wall / 60.0
        )
    }

    /// The directed flows of round `r`.
    pub fn round(&self, r: usize) -> Vec<(usize, usize)> {
        let n = self.hosts;
        let mut flows = Vec::new();
        match self.pattern {
            Pattern::Full => {
                let slots = n.div_ceil(2) * 2;
                let total = circle_rounds(n);
                for c in (r * self.partners..(r + 1) * self.partners).filter(|&c| c < total) {
                    for i in 0..n {
                        if let Some(p) = partner(i, c, slots, n)
                            && i < p
                        {
                            flows.extend([(i, p), (p, i)]);
                        }
                    }
                }
            }
            Pattern::Random => {
                for j in 0..self.partners {
                    let mut rng = Rng::new(self.seed ^ ((r * self.partners + j) as u64 + 1));
                    let mut order: Vec<usize> = (0..n).collect();
                    rng.shuffle(&mut order);
                    for p in order.chunks_exact(2) {
                        flows.extend([(p[0], p[1]), (p[1], p[0])]);
                    }
                }
            }
            Pattern::Neighbour => {
                for j in 0..self.partners {
                    let d = r * self.partners + j + 1;
                    if d < n {
                        flows.extend((0..n).map(|i| (i, (i + d) % n)));
                    }
                }
            }
        }
        flows
    }
}

/// The share of `--budget` a schedule may fill.
pub const BUDGET_SHARE: f64 = 0.95;

/// The schedule for `hosts` within `budget_s` seconds (none: the full
/// matrix with the default run length). Prefers, in order: the full matrix
/// with one partner per round (it also finds links whose capacity is cut),
/// the full matrix with 2, 4 or 8 partners per round, then as many rounds of
/// random pairings (8 partners) as fit. Each with the longest run (up to
/// the default) that fits, never shorter than [`Model::min_run`].
pub fn choose(hosts: usize, budget_s: Option<f64>, m: &Model, seed: u64) -> Result<Plan, String> {
    let Some(budget) = budget_s else {
        return Ok(Plan::full(hosts, 1, m.default_run_s));
    };
    // 5% of the budget is left for what the model does not hold (a hang's
    // deadline, stragglers at the barriers).
    let budget = budget * BUDGET_SHARE;
    let retest = retest_rounds(hosts);
    let fit = |rounds: usize| budget / (rounds + retest) as f64 - m.overhead_s;
    for k in [1, 2, 4, 8] {
        let p = Plan::full(hosts, k, m.default_run_s);
        let run = fit(p.rounds).min(m.default_run_s);
        if run >= m.min_run(k) {
            return Ok(Plan { run_s: run, ..p });
        }
    }
    let k = 8;
    let run = m.min_run(k);
    let rounds = (budget / m.round_s(run)).floor() as usize;
    if rounds <= retest {
        return Err(format!(
            "--budget {:.2}: {hosts} hosts need at least {:.0} s (one round of random pairs \
             and {retest} retest rounds of {:.2} s, within {:.0}% of the budget): give a larger budget",
            budget / BUDGET_SHARE / 60.0,
            (1 + retest) as f64 * m.round_s(run),
            m.round_s(run),
            100.0 * BUDGET_SHARE
        ));
    }
    Ok(Plan {
        pattern: Pattern::Random,
        hosts,
        partners: k,
        run_s: run,
        rounds: rounds - retest,
        retest_rounds: retest,
        seed,
    })
}

/// The real job's schedule for `hosts` within `budget_s` seconds, with
/// `steps` steps of runs in a round (each followed by a meeting of the
/// ranks). Its runs are `run_s` long when erdma-perf's options fix it
/// (`-D`, or the length assumed for `-n`: not shortened to fit), else
/// (`None`: the job chooses) the longest up to the model's default that
/// fits, never shorter than [`Model::min_run`] for the partners sharing a
/// port. Prefers, as [`choose`] does, the full matrix with 1, 2, 4 or 8
/// partners per round, then as many rounds of random pairings (8 partners)
/// as fit; the retest rounds are counted at their maximum.
pub fn choose_for_job(
    hosts: usize,
    budget_s: f64,
    m: &Model,
    run_s: Option<f64>,
    steps: usize,
    seed: u64,
) -> Result<Plan, String> {
    let budget = budget_s * BUDGET_SHARE;
    let retest = retest_rounds(hosts);
    let steps = steps.max(1) as f64;
    for k in [1, 2, 4, 8] {
        let p = Plan::full(hosts, k, run_s.unwrap_or(m.default_run_s));
        let rounds = (p.rounds + retest) as f64 * steps;
        match run_s {
            Some(run) if rounds * m.round_s(run) <= budget => return Ok(p),
            None => {
                let fit = (budget / rounds - m.overhead_s).min(m.default_run_s);
                if fit >= m.min_run(k) {
                    return Ok(Plan { run_s: fit, ..p });
                }
            }
            Some(_) => {}
        }
    }
    let run = run_s.unwrap_or_else(|| m.min_run(8));
    let round = steps * m.round_s(run);
    let rounds = (budget / round).floor() as usize;
    if rounds <= retest {
        return Err(format!(
            "--budget {:.2}: {hosts} hosts need at least {:.0} s (one round of random pairs and \
             {retest} retest rounds of {:.2} s each, within {:.0}% of the budget): give a larger \
             budget or shorter runs (--perf-args -D SECS or -n ITERS)",
            budget_s / 60.0,
            (1 + retest) as f64 * round / BUDGET_SHARE,
            round,
            100.0 * BUDGET_SHARE
        ));
    }
    Ok(Plan {
        pattern: Pattern::Random,
        hosts,
        partners: 8,
        run_s: run,
        rounds: rounds - retest,
        retest_rounds: retest,
        seed,
    })
}

/// Pairs for the retest rounds: each request is a suspect `a` to be measured
/// with `b`, or with a good host (`None`; never the same good host twice for
/// one suspect). Greedy, one partner per host per round, at most
/// `max_rounds` rounds; returns the rounds (pairs, both directions measured)
/// and the requests that did not fit.
pub fn retest_pairs(
    requests: &[(usize, Option<usize>)],
    good: &[usize],
    hosts: usize,
    max_rounds: usize,
) -> (Vec<Vec<(usize, usize)>>, Vec<usize>) {
    let mut pending: Vec<usize> = (0..requests.len()).collect();
    // A suspect pair's ends meet other hosts: the pair itself is measured
    // by its own request.
    let mut met: std::collections::BTreeSet<(usize, usize)> = requests
        .iter()
        .filter_map(|&(a, b)| b.map(|b| [(a, b), (b, a)]))
        .flatten()
        .collect();
    let mut rounds = Vec::new();
    let mut next_good = 0usize;
    for _ in 0..max_rounds {
        if pending.is_empty() {
            break;
        }
        let mut busy = vec![false; hosts];
        let mut pairs = Vec::new();
        pending.retain(|&i| {
            let (a, b) = requests[i];
            if busy[a] {
                return true;
            }
            let partner = match b {
                Some(b) => (!busy[b]).then_some(b),
                None => (0..good.len())
                    .map(|t| good[(next_good + t) % good.len()])
                    .find(|&g| g != a && !busy[g] && !met.contains(&(a, g))),
            };
            let Some(p) = partner else { return true };
            if b.is_none() {
                next_good = (next_good + 1) % good.len().max(1);
                met.insert((a, p));
            }
            busy[a] = true;
            busy[p] = true;
            pairs.push((a, p));
            false
        });
        rounds.push(pairs);
    }
    (rounds, pending)
}

/// A small seeded random generator (splitmix64): the schedule and the
/// simulator need reproducible draws only, and the workspace has no random
/// crate in its lock file; one function is less than a new dependency.
#[derive(Debug, Clone)]
pub struct Rng(u64);

impl Rng {
    /// A generator from `seed`.
    pub fn new(seed: u64) -> Rng {
        Rng(seed ^ 0x9E37_79B9_7F4A_7C15)
    }

    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in [0, 1).
    pub fn unit(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }

    /// Uniform in [0, n).
    pub fn below(&mut self, n: usize) -> usize {
        ((self.next_u64() as u128 * n as u128) >> 64) as usize
    }

    /// A standard normal draw (Box-Muller).
    pub fn normal(&mut self) -> f64 {
        let u = 1.0 - self.unit();
        let v = self.unit();
        (-2.0 * u.ln()).sqrt() * (std::f64::consts::TAU * v).cos()
    }

    /// Shuffles `v` (Fisher-Yates).
    pub fn shuffle<T>(&mut self, v: &mut [T]) {
        for i in (1..v.len()).rev() {
            v.swap(i, self.below(i + 1));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every directed cell exactly once, no host over its partners per
    /// round, for even and odd host counts and several partners.
    #[test]
    fn full_matrix_covers_every_cell_once() {
        for n in [2, 3, 7, 16] {
            for k in [1, 2, 4] {
                let p = Plan::full(n, k, 1.0);
                let mut seen = vec![vec![0; n]; n];
                for r in 0..p.rounds {
                    let (mut tx, mut rx) = (vec![0; n], vec![0; n]);
                    for (c, s) in p.round(r) {
                        seen[c][s] += 1;
                        tx[c] += 1;
                        rx[s] += 1;
                    }
                    assert!(tx.iter().chain(&rx).all(|&f| f <= k), "n {n} k {k} r {r}");
                }
                for (i, row) in seen.iter().enumerate() {
                    for (j, &m) in row.iter().enumerate() {
                        assert_eq!(m, usize::from(i != j), "n {n} k {k}: {i}->{j}");
                    }
                }
                assert_eq!(p.rounds, circle_rounds(n).div_ceil(k));
            }
        }
    }

    #[test]
    fn random_and_neighbour_rounds_respect_the_partners() {
        for pattern in [Pattern::Random, Pattern::Neighbour] {
            let p = Plan {
                pattern,
                hosts: 11,
                partners: 3,
                run_s: 1.0,
                rounds: 3,
                retest_rounds: 4,
                seed: 9,
            };
            for r in 0..p.rounds {
                let flows = p.round(r);
                assert!(!flows.is_empty());
                let (mut tx, mut rx) = (vec![0; 11], vec![0; 11]);
                for (c, s) in flows {
                    assert_ne!(c, s);
                    tx[c] += 1;
                    rx[s] += 1;
                }
                assert!(tx.iter().chain(&rx).all(|&f| f <= 3), "{pattern:?}");
            }
        }
    }

    #[test]
    fn budget_picks_the_schedule() {
        let m = Model::default();
        let full = choose(1000, None, &m, 1).unwrap();
        assert_eq!(
            (full.pattern, full.partners, full.rounds),
            (Pattern::Full, 1, 999)
        );
        assert!(full.predicted_wall_s(&m) < 3600.0);
        let ten = choose(1000, Some(600.0), &m, 1).unwrap();
        assert_eq!(ten.pattern, Pattern::Full);
        assert!(ten.predicted_wall_s(&m) <= 0.95 * 600.0 + 1e-6);
        assert!(ten.run_s >= m.min_run(ten.partners));
        let two = choose(1000, Some(120.0), &m, 1).unwrap();
        assert!(two.partners > 1 || two.pattern == Pattern::Random);
        assert!(two.predicted_wall_s(&m) <= 120.0 + 1e-6);
        let err = choose(1000, Some(3.0), &m, 1).unwrap_err();
        assert!(err.contains("give a larger budget"), "{err}");
        assert_eq!(retest_rounds(1000), 10);
        assert_eq!(retest_rounds(2), 2);
    }

    #[test]
    fn the_real_job_keeps_its_run_length_and_fits_the_budget() {
        let m = Model::default();
        // 4 hosts, 2 rails, 1 s runs: (3 + 2) rounds x 2 steps x 1.3 s = 13 s.
        let p = choose_for_job(4, 60.0, &m, Some(1.0), 2, 1).unwrap();
        assert_eq!((p.pattern, p.partners, p.rounds), (Pattern::Full, 1, 3));
        assert_eq!(p.run_s, 1.0);
        // 8 partners at once: 2 rounds + 4 retests of 1.3 s (7.8 s) fit 95%
        // of 9 s; 4 partners (10.4 s) do not.
        let p = choose_for_job(16, 9.0, &m, Some(1.0), 1, 1).unwrap();
        assert_eq!((p.pattern, p.partners, p.rounds), (Pattern::Full, 8, 2));
        // 1000 hosts in 10 minutes with 5 s runs: random pairings only
        // (the full matrix with 8 partners needs 135 rounds of 5.3 s).
        let p = choose_for_job(1000, 600.0, &m, Some(5.0), 1, 7).unwrap();
        assert_eq!(
            (p.pattern, p.rounds, p.retest_rounds),
            (Pattern::Random, 97, 10)
        );
        let e = choose_for_job(1000, 6.0, &m, Some(5.0), 1, 7).unwrap_err();
        assert!(e.contains("give a larger budget or shorter runs"), "{e}");
        // The job's own run length: 1000 hosts in 10 minutes, one step a
        // round: the full matrix with one partner, its runs stretched to
        // fill 95% of the budget (570 s / 1009 rounds - 0.3 s = 0.265 s),
        // above the shortest that measures within the noise (0.2 s).
        let p = choose_for_job(1000, 600.0, &m, None, 1, 7).unwrap();
        assert_eq!((p.pattern, p.partners, p.rounds), (Pattern::Full, 1, 999));
        assert!(
            (p.run_s - (570.0 / 1009.0 - 0.3)).abs() < 1e-9,
            "{}",
            p.run_s
        );
        assert!(p.predicted_wall_s(&m) <= 570.0 + 1e-9);
        // Two steps a round: one partner no longer fits 0.2 s runs; two
        // partners (500 + 10 rounds x 2 steps) do, each run at least
        // min_run(2) = 0.22 s.
        let p = choose_for_job(1000, 600.0, &m, None, 2, 7).unwrap();
        assert_eq!((p.pattern, p.partners), (Pattern::Full, 2));
        assert!(p.run_s >= m.min_run(2) && p.run_s <= m.default_run_s);
        // A large budget: runs no longer than the default.
        let p = choose_for_job(4, 600.0, &m, None, 1, 7).unwrap();
        assert_eq!(p.run_s, m.default_run_s);
    }

    #[test]
    fn retests_meet_two_different_good_hosts() {
        let good: Vec<usize> = (4..16).collect();
        let req = [(0, None), (0, None), (1, Some(2)), (1, None), (2, None)];
        let (rounds, left) = retest_pairs(&req, &good, 16, 4);
        assert!(left.is_empty());
        let mut partners_of_0 = Vec::new();
        for r in &rounds {
            let mut busy = [0; 16];
            for &(a, b) in r {
                busy[a] += 1;
                busy[b] += 1;
                if a == 0 {
                    partners_of_0.push(b);
                }
            }
            assert!(busy.iter().all(|&b| b <= 1));
        }
        partners_of_0.sort();
        partners_of_0.dedup();
        assert_eq!(partners_of_0.len(), 2);
        let (_, left) = retest_pairs(&req, &good, 16, 1);
        assert!(
            !left.is_empty(),
            "one round cannot hold two retests of host 0"
        );
    }

    #[test]
    fn rng_is_reproducible_and_spread() {
        let mut a = Rng::new(5);
        let mut b = Rng::new(5);
        assert_eq!(a.next_u64(), b.next_u64());
        let mean: f64 = (0..10_000).map(|_| a.normal()).sum::<f64>() / 10_000.0;
        assert!(mean.abs() < 0.05, "{mean}");
        assert!((0..1000).all(|_| a.below(7) < 7));
    }
}
