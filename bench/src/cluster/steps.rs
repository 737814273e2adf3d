//! The real job's pair stage as steps: which erdma-perf runs go at once,
//! on which TCP port each listens, and how long the schedule takes in the
//! model of [`schedule`] (docs/cluster-diagnosis.md).
//!
//! A round of a [`schedule::Plan`] (directed flows) becomes steps by its
//! [`Layout`]: by default every rail in one step (a host's NICs are
//! independent devices: each rail's runs go at once, one erdma-perf run per
//! rail) and a pair's two directions in one step (one run each way at
//! once: a port is full duplex, and each direction keeps its own number);
//! `--rails-serial` runs the rails one after another (NICs behind one PCIe
//! switch), `--directions-serial` each direction its own step (the lower
//! rank the client first, as `pairs::run_rounds` runs them). After each
//! step the ranks meet. A run's length is `-D`'s, assumed for `-n`, or
//! chosen from the noise model ([`RunSource::Chosen`]).

use super::schedule::{self, Model, Plan};

/// One run of a step: the client's rank and NIC index, the server's.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct Flow {
    /// The client rank.
    pub client: usize,
    /// The server rank.
    pub server: usize,
    /// The client's NIC (rail index).
    pub ci: usize,
    /// The server's NIC.
    pub si: usize,
}

/// One round: its steps, each the flows that run at once.
pub type Round = Vec<Vec<Flow>>;

/// How a round's runs are laid out in steps (the job's options).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Layout {
    /// Every rail's runs in one step (each NIC its own device), not one
    /// step per rail combination (`--rails-serial` turns it off).
    pub rails_at_once: bool,
    /// A pair's two directions in one step, one run each way
    /// (`--directions-serial` turns it off: each direction its own step).
    pub directions_at_once: bool,
}

impl Layout {
    /// Both at once (the default).
    pub const AT_ONCE: Layout = Layout {
        rails_at_once: true,
        directions_at_once: true,
    };
    /// Rails one after another, each direction its own step (the schedule
    /// before issue 35).
    pub const SERIAL: Layout = Layout {
        rails_at_once: false,
        directions_at_once: false,
    };
}

/// The rail combinations of one step each: `combos` in order, one a step,
/// when the rails run one after another; else grouped by their shift
/// (server NIC - client NIC, modulo the NICs), rail k against rail k first:
/// within a group no two combinations share a client NIC or a server NIC,
/// so `--cross-rails`' n x n combinations take n steps, each NIC sending
/// once and receiving once in each.
pub fn rail_groups(combos: &[(usize, usize)], at_once: bool) -> Vec<Vec<(usize, usize)>> {
    if !at_once {
        return combos.iter().map(|&c| vec![c]).collect();
    }
    let n = combos.iter().map(|&(c, s)| c.max(s) + 1).max().unwrap_or(1);
    let mut groups: Vec<Vec<(usize, usize)>> = vec![Vec::new(); n];
    for &(ci, si) in combos {
        groups[(si + n - ci) % n].push((ci, si));
    }
    groups.retain(|g| !g.is_empty());
    groups
}

/// The steps of one round of directed `flows` (duplicates dropped): one
/// per group of [`rail_groups`], or two per group (lower rank the client,
/// then the higher) when the directions do not run at once.
pub fn round_steps(flows: &[(usize, usize)], combos: &[(usize, usize)], layout: Layout) -> Round {
    let mut flows: Vec<(usize, usize)> = flows.iter().copied().filter(|(c, s)| c != s).collect();
    flows.sort_unstable();
    flows.dedup();
    let mut steps = Vec::new();
    for group in rail_groups(combos, layout.rails_at_once) {
        let of = |keep: &dyn Fn(&(usize, usize)) -> bool| -> Vec<Flow> {
            group
                .iter()
                .flat_map(|&(ci, si)| {
                    flows
                        .iter()
                        .filter(|f| keep(f))
                        .map(move |&(client, server)| Flow {
                            client,
                            server,
                            ci,
                            si,
                        })
                })
                .collect()
        };
        if layout.directions_at_once {
            steps.push(of(&|_| true));
        } else {
            steps.push(of(&|(c, s)| c < s));
            steps.push(of(&|(c, s)| c > s));
        }
    }
    steps
}

/// The most runs one rank serves in one step of `rounds` (at least 1): each
/// takes its own port.
pub fn width(rounds: &[Round]) -> usize {
    let mut w = 1;
    for step in rounds.iter().flatten() {
        let mut servers: Vec<usize> = step.iter().map(|f| f.server).collect();
        servers.sort_unstable();
        for g in servers.chunk_by(|a, b| a == b) {
            w = w.max(g.len());
        }
    }
    w
}

/// The ports of one step: `block` (the most ranks on one host) times
/// `width` ports from `base`; a flow listens on `base + (slot of its
/// server) x width + (its index among that server's flows)`, so that no two
/// servers of one host share a port. Returns each flow's port and the
/// step's first port after it.
pub fn ports(
    step: &[Flow],
    base: u32,
    slots: &[usize],
    block: u32,
    width: usize,
) -> (Vec<u32>, u32) {
    let mut seen: Vec<usize> = Vec::new();
    let at = step
        .iter()
        .map(|f| {
            let j = seen.iter().filter(|&&s| s == f.server).count();
            seen.push(f.server);
            let slot = slots.get(f.server).copied().unwrap_or(0);
            base + (slot * width + j) as u32
        })
        .collect();
    (at, base + block * width as u32)
}

/// How many flows share the busier port of `f` in `step` (the client's
/// sends, the server's receives on that NIC): the diagnosis scales a flow's
/// rate by it, as the simulator's model does.
pub fn share(step: &[Flow], f: &Flow) -> usize {
    let sends = step
        .iter()
        .filter(|g| g.client == f.client && g.ci == f.ci)
        .count();
    let receives = step
        .iter()
        .filter(|g| g.server == f.server && g.si == f.si)
        .count();
    sends.max(receives).max(1)
}

/// What sets the length of the pair stage's runs.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum RunSource {
    /// `--perf-args -D SECS`.
    Duration(f64),
    /// `-n` given, or no port rate known: erdma-perf runs a count of
    /// iterations of no known length; the model's default length is assumed.
    Assumed,
    /// Chosen from the noise model ([`Model::min_run`], or longer where
    /// `--budget` leaves room): the job gives erdma-perf `-n` iterations of
    /// `size` bytes that last the run at `gbps` (the slowest port's rate)
    /// shared by the round's partners ([`JobPlan::iterations`]).
    Chosen {
        /// The slowest port's active rate, Gb/s.
        gbps: f64,
        /// The message size, bytes (erdma-perf's `-s`).
        size: u64,
    },
}

/// The real job's schedule: the plan, how its rounds run, and the model
/// its prediction rests on.
#[derive(Debug, Clone, PartialEq)]
pub struct JobPlan {
    /// Which pairs meet in which round.
    pub plan: Plan,
    /// Whether a pair's two directions run at once (the default, and
    /// always with `--budget`).
    pub together: bool,
    /// Whether the rails run at once (not `--rails-serial`).
    pub rails_at_once: bool,
    /// The rail combinations of every pair.
    pub combos: Vec<(usize, usize)>,
    /// What set `plan.run_s`.
    pub run: RunSource,
    /// The time model.
    pub model: Model,
    /// Whether `--budget` chose the plan.
    pub budgeted: bool,
}

impl JobPlan {
    /// The full matrix without a budget in `layout`, its runs of `run`'s
    /// length ([`JobPlan::new`]).
    pub fn full(
        hosts: usize,
        combos: Vec<(usize, usize)>,
        run: RunSource,
        layout: Layout,
    ) -> JobPlan {
        let model = Model::default();
        let run_s = match run {
            RunSource::Duration(d) => d,
            RunSource::Assumed => model.default_run_s,
            RunSource::Chosen { .. } => model.min_run(1),
        };
        JobPlan {
            plan: Plan::full(hosts, 1, run_s),
            together: layout.directions_at_once,
            rails_at_once: layout.rails_at_once,
            combos,
            run,
            model,
            budgeted: false,
        }
    }

    /// The plan of a job of `hosts` ranks: without a budget the full
    /// matrix in `layout`, with one the schedule that fits it
    /// ([`schedule::choose_for_job`]; both directions at once). Runs of
    /// `-D`'s length, the default assumed, or (`RunSource::Chosen`) the
    /// shortest that measures within the noise, longer where the budget
    /// leaves room.
    pub fn new(
        hosts: usize,
        budget_s: Option<f64>,
        combos: Vec<(usize, usize)>,
        run: RunSource,
        layout: Layout,
    ) -> Result<JobPlan, String> {
        let Some(b) = budget_s else {
            return Ok(JobPlan::full(hosts, combos, run, layout));
        };
        let model = Model::default();
        let fixed = match run {
            RunSource::Duration(d) => Some(d),
            RunSource::Assumed => Some(model.default_run_s),
            RunSource::Chosen { .. } => None,
        };
        let steps = rail_groups(&combos, layout.rails_at_once).len();
        let plan = schedule::choose_for_job(hosts, b, &model, fixed, steps, 1)?;
        Ok(JobPlan {
            plan,
            together: true,
            rails_at_once: layout.rails_at_once,
            combos,
            run,
            model,
            budgeted: true,
        })
    }

    /// Whether the run length is assumed (erdma-perf runs `-n` iterations
    /// of no known length).
    pub fn run_assumed(&self) -> bool {
        self.run == RunSource::Assumed
    }

    /// The `-n` the job gives erdma-perf when it chose the run length: the
    /// iterations of its message size that take `plan.run_s` at the
    /// slowest port's rate shared by the round's partners (at least 5,
    /// erdma-perf's least).
    pub fn iterations(&self) -> Option<u64> {
        let RunSource::Chosen { gbps, size } = self.run else {
            return None;
        };
        let bytes = self.plan.run_s * gbps * 1e9 / 8.0 / self.plan.partners.max(1) as f64;
        Some(((bytes / size.max(1) as f64).ceil() as u64).clamp(5, 100_000_000))
    }

    /// Steps in one round.
    pub fn steps_per_round(&self) -> usize {
        rail_groups(&self.combos, self.rails_at_once).len() * if self.together { 1 } else { 2 }
    }

    /// The layout of the steps.
    pub fn layout(&self) -> Layout {
        Layout {
            rails_at_once: self.rails_at_once,
            directions_at_once: self.together,
        }
    }

    /// The rounds of the main pass.
    pub fn rounds(&self) -> Vec<Round> {
        (0..self.plan.rounds)
            .map(|r| round_steps(&self.plan.round(r), &self.combos, self.layout()))
            .collect()
    }

    /// Every directed (client, server) cell the main rounds measure.
    pub fn planned(&self) -> Vec<(usize, usize)> {
        (0..self.plan.rounds)
            .flat_map(|r| self.plan.round(r))
            .collect()
    }

    /// The rounds of a retest: each pair both directions.
    pub fn retest_rounds(&self, pairs: &[Vec<(usize, usize)>]) -> Vec<Round> {
        pairs
            .iter()
            .map(|round| {
                let flows: Vec<(usize, usize)> =
                    round.iter().flat_map(|&(a, b)| [(a, b), (b, a)]).collect();
                round_steps(&flows, &self.combos, self.layout())
            })
            .collect()
    }

    /// Predicted seconds of the pair stage, the retest rounds at their most.
    pub fn predicted_wall_s(&self) -> f64 {
        let rounds = self.plan.rounds + self.plan.retest_rounds;
        (rounds * self.steps_per_round()) as f64 * self.model.round_s(self.plan.run_s)
    }

    /// One line: the schedule and its predicted wall time.
    pub fn describe(&self) -> String {
        let p = &self.plan;
        let what = match (p.pattern, self.together) {
            (schedule::Pattern::Full, false) => {
                "full matrix (circle method, each direction its own run)".to_owned()
            }
            (schedule::Pattern::Full, true) => {
                "full matrix (circle method, both directions at once)".to_owned()
            }
            (pattern, _) => format!("{} pairings (both directions at once)", pattern.as_str()),
        };
        let rails = if self.combos.len() < 2 {
            ""
        } else if self.rails_at_once {
            " (rails at once)"
        } else {
            " (rails one after another)"
        };
        let run = match (self.run, self.iterations()) {
            (RunSource::Assumed, _) => {
                " (assumed: give --perf-args -D SECS for a firm prediction)".to_owned()
            }
            (RunSource::Chosen { gbps, size }, Some(n)) => {
                format!(" (chosen by the job: -n {n} x {size} B at {gbps:.0} Gb/s)")
            }
            _ => String::new(),
        };
        let wall = self.predicted_wall_s();
        format!(
            "{what}, {} partner{} per round, {} rounds + at most {} retest rounds, {} step{} \
             each{rails} of {:.2} s runs{run} + {:.2} s overhead: predicted \
             wall {:.0} s ({:.1} min){}",
            p.partners,
            if p.partners == 1 { "" } else { "s" },
            p.rounds,
            p.retest_rounds,
            self.steps_per_round(),
            if self.steps_per_round() == 1 { "" } else { "s" },
            p.run_s,
            self.model.overhead_s,
            wall,
            wall / 60.0,
            if self.budgeted {
                ", within --budget"
            } else {
                ""
            }
        )
    }

    /// The ports the main pass takes (each step `block x width`).
    pub fn main_ports(&self, block: u32) -> u32 {
        let rounds = self.rounds();
        let steps: usize = rounds.iter().map(Vec::len).sum();
        steps as u32 * block * width(&rounds) as u32
    }

    /// The ports the main pass and the most retest rounds may take with
    /// `block` ranks on the busiest host (a retest round has one partner
    /// per rank: width of one rail group's runs).
    pub fn all_ports(&self, block: u32) -> u32 {
        let per_step = rail_groups(&self.combos, self.rails_at_once)
            .iter()
            .map(Vec::len)
            .max()
            .unwrap_or(1) as u32;
        let retest = (self.plan.retest_rounds * self.steps_per_round()) as u32 * block * per_step;
        self.main_ports(block) + retest
    }
}

/// The run length of the pair stage from erdma-perf's options `o` (given
/// as `perf_args`) and the slowest port's rate `gbps` of the ranks' rails
/// (none when a rank could not tell): `-D`'s seconds (its warm-up and
/// cool-down inside it); assumed when `-n` was given or no rate is known;
/// else chosen by the job ([`RunSource::Chosen`]).
pub fn run_source(
    o: &crate::perf::options::Options,
    perf_args: &str,
    gbps: Option<f64>,
) -> RunSource {
    if let Some(d) = o.duration {
        return RunSource::Duration(f64::from(d));
    }
    let gave_n = perf_args
        .split_whitespace()
        .any(|t| t.starts_with("--iters") || (t.starts_with("-n") && !t.starts_with("--")));
    match gbps.filter(|g| g.is_finite() && *g > 0.0) {
        Some(gbps) if !gave_n => RunSource::Chosen { gbps, size: o.size },
        _ => RunSource::Assumed,
    }
}

/// Today's schedule ([`schedule::partner`]) as steps, for the check that the
/// plan without a budget is the same set of runs in the same order.
pub fn circle_steps(size: usize, combos: &[(usize, usize)]) -> Vec<Round> {
    let n = size.div_ceil(2) * 2;
    (0..schedule::rounds(size))
        .map(|r| {
            let mut steps = Vec::new();
            for &(ci, si) in combos {
                for d in 0..2 {
                    let mut step = Vec::new();
                    for rank in 0..size {
                        if let Some(p) = schedule::partner(rank, r, n, size) {
                            let client = if d == 0 { rank.min(p) } else { rank.max(p) };
                            let server = if client == rank { p } else { rank };
                            if client == rank {
                                step.push(Flow {
                                    client,
                                    server,
                                    ci,
                                    si,
                                });
                            }
                        }
                    }
                    step.sort_unstable();
                    steps.push(step);
                }
            }
            steps
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn without_a_budget_the_plan_is_todays_runs() {
        for size in 2..=9 {
            for combos in [schedule::combos(1, false), schedule::combos(2, true)] {
                let jp = JobPlan::new(
                    size,
                    None,
                    combos.clone(),
                    RunSource::Duration(1.0),
                    Layout::SERIAL,
                )
                .unwrap();
                assert_eq!(jp.rounds(), circle_steps(size, &combos), "size {size}");
                assert_eq!(width(&jp.rounds()), 1);
                // The same ports as pairs::run_rounds: 2 x rounds x combos x block.
                assert_eq!(
                    jp.main_ports(3),
                    2 * (schedule::rounds(size) * combos.len()) as u32 * 3
                );
            }
        }
    }

    #[test]
    fn budget_steps_run_both_directions_and_partners_at_once() {
        // 9 hosts, 1 rail, runs of 1 s, 9 s: 8 partners (2 rounds) + 4
        // retests of 1.3 s = 7.8 s fit 95% of it, 4 partners (9.1 s) not.
        let jp = JobPlan::new(
            9,
            Some(9.0),
            schedule::combos(1, false),
            RunSource::Duration(1.0),
            Layout::AT_ONCE,
        )
        .unwrap();
        assert!(jp.together);
        assert_eq!(jp.plan.partners, 8);
        let rounds = jp.rounds();
        assert_eq!(rounds.len(), 2);
        let mut seen = vec![vec![0; 9]; 9];
        for f in rounds.iter().flatten().flatten() {
            seen[f.client][f.server] += 1;
        }
        for (i, row) in seen.iter().enumerate() {
            for (j, &m) in row.iter().enumerate() {
                assert_eq!(m, usize::from(i != j), "{i}->{j}");
            }
        }
        let w = width(&rounds);
        assert_eq!(w, 8);
        // Ranks 0 and 1 share a host: their servers never share a port.
        let slots = [0, 1, 0, 0, 0, 0, 0, 0, 0];
        let (at, next) = ports(&rounds[0][0], 1000, &slots, 2, w);
        assert_eq!(next, 1000 + 2 * 8);
        let mut by_host: Vec<(usize, u32)> = rounds[0][0]
            .iter()
            .zip(&at)
            .map(|(f, &p)| (if f.server <= 1 { 0 } else { f.server }, p))
            .collect();
        by_host.sort_unstable();
        let n = by_host.len();
        by_host.dedup();
        assert_eq!(by_host.len(), n, "two servers of one host on one port");
        assert!(at.iter().all(|&p| (1000..1016).contains(&p)));
        assert!((jp.predicted_wall_s() - 6.0 * 1.3).abs() < 1e-9);
        assert!(
            jp.describe().contains("within --budget"),
            "{}",
            jp.describe()
        );
    }

    #[test]
    fn retest_pairs_become_both_directions_and_shares_count_flows() {
        let jp = JobPlan::new(
            4,
            None,
            schedule::combos(2, false),
            RunSource::Assumed,
            Layout::SERIAL,
        )
        .unwrap();
        assert!(jp.run_assumed());
        assert!(jp.describe().contains("assumed"), "{}", jp.describe());
        let r = jp.retest_rounds(&[vec![(2, 0), (1, 3)]]);
        // Two rails, each direction its own step.
        assert_eq!(r[0].len(), 4);
        assert_eq!(
            r[0][0],
            vec![
                Flow {
                    client: 0,
                    server: 2,
                    ci: 0,
                    si: 0
                },
                Flow {
                    client: 1,
                    server: 3,
                    ci: 0,
                    si: 0
                }
            ]
        );
        assert_eq!(
            r[0][3][0],
            Flow {
                client: 2,
                server: 0,
                ci: 1,
                si: 1
            }
        );
        let step = [
            Flow {
                client: 0,
                server: 1,
                ci: 0,
                si: 0,
            },
            Flow {
                client: 0,
                server: 2,
                ci: 0,
                si: 0,
            },
            Flow {
                client: 3,
                server: 2,
                ci: 0,
                si: 0,
            },
            Flow {
                client: 3,
                server: 1,
                ci: 1,
                si: 1,
            },
        ];
        assert_eq!(share(&step, &step[0]), 2);
        assert_eq!(share(&step, &step[2]), 2);
        assert_eq!(share(&step, &step[3]), 1);
        assert_eq!(jp.all_ports(1), 2 * 3 * 2 + 2 * 2 * 2);
    }

    /// Every directed cell on every rail combination exactly once in the
    /// main rounds; with the rails at once no two runs of a step share a
    /// NIC's send or receive side (each flow's share 1).
    fn each_cell_once(jp: &JobPlan, hosts: usize) {
        let mut seen = std::collections::BTreeMap::new();
        for step in jp.rounds().iter().flatten() {
            for f in step {
                *seen.entry(*f).or_insert(0) += 1;
                assert_eq!(share(step, f), 1, "{f:?} in {step:?}");
            }
        }
        assert_eq!(seen.len(), hosts * (hosts - 1) * jp.combos.len());
        assert!(seen.values().all(|&n| n == 1));
    }

    #[test]
    fn the_layout_sets_the_steps_and_the_predicted_time() {
        let run = RunSource::Duration(1.0);
        for (layout, steps) in [
            (Layout::AT_ONCE, 1),
            (
                Layout {
                    rails_at_once: false,
                    directions_at_once: true,
                },
                2,
            ),
            (
                Layout {
                    rails_at_once: true,
                    directions_at_once: false,
                },
                2,
            ),
            (Layout::SERIAL, 4),
        ] {
            let jp = JobPlan::new(5, None, schedule::combos(2, false), run, layout).unwrap();
            assert_eq!(jp.steps_per_round(), steps, "{layout:?}");
            assert!(jp.rounds().iter().all(|r| r.len() == steps));
            // (5 rounds + 3 retest rounds) x steps x (1 s + 0.3 s).
            let want = (5 + 3) as f64 * steps as f64 * 1.3;
            assert!((jp.predicted_wall_s() - want).abs() < 1e-9, "{layout:?}");
            each_cell_once(&jp, 5);
            assert_eq!(
                jp.describe().contains("rails at once"),
                layout.rails_at_once
            );
            assert_eq!(
                jp.describe().contains("each direction its own run"),
                !layout.directions_at_once
            );
        }
        // --cross-rails at once: n groups of n combinations, no NIC twice.
        for n in [2, 3, 4] {
            let combos = schedule::combos(n, true);
            let groups = rail_groups(&combos, true);
            assert_eq!(groups.len(), n, "{groups:?}");
            let mut all: Vec<_> = groups.concat();
            all.sort_unstable();
            let mut want = combos.clone();
            want.sort_unstable();
            assert_eq!(all, want);
            let jp = JobPlan::new(4, None, combos, run, Layout::AT_ONCE).unwrap();
            assert_eq!(jp.steps_per_round(), n);
            each_cell_once(&jp, 4);
            // The server of every flow of a step: one port per flow.
            assert_eq!(width(&jp.rounds()), n);
        }
        assert_eq!(rail_groups(&schedule::combos(3, true), false).len(), 9);
    }

    #[test]
    fn the_run_length_comes_from_d_n_or_the_noise() {
        let parse = |args: &str| {
            let mut argv = vec!["erdma-perf".to_owned(), "write_bw".to_owned()];
            argv.extend(args.split_whitespace().map(str::to_owned));
            match crate::perf::options::parse(&argv).unwrap() {
                crate::perf::options::Parsed::Run(o) => *o,
                crate::perf::options::Parsed::Print(_) => unreachable!(),
            }
        };
        let o = parse("-D 3");
        assert_eq!(
            run_source(&o, "-D 3", Some(100.0)),
            RunSource::Duration(3.0)
        );
        let o = parse("-n 100");
        assert_eq!(run_source(&o, "-n 100", Some(100.0)), RunSource::Assumed);
        assert_eq!(
            run_source(&o, "--iters=100", Some(100.0)),
            RunSource::Assumed
        );
        let o = parse("");
        assert_eq!(run_source(&o, "", None), RunSource::Assumed);
        assert_eq!(run_source(&o, "--no_peak", Some(0.0)), RunSource::Assumed);
        let chosen = run_source(&o, "--no_peak", Some(100.0));
        assert_eq!(
            chosen,
            RunSource::Chosen {
                gbps: 100.0,
                size: 65536
            }
        );
        // The shortest run within the noise (0.2 s): 2.5 GB at 100 Gb/s,
        // 38,147 messages of 64 KiB.
        let jp =
            JobPlan::new(4, None, schedule::combos(1, false), chosen, Layout::AT_ONCE).unwrap();
        assert_eq!(jp.plan.run_s, 0.2);
        assert_eq!(jp.iterations(), Some(38_147));
        assert!(
            jp.describe().contains("-n 38147 x 65536 B at 100 Gb/s"),
            "{}",
            jp.describe()
        );
        // -D and an assumed length give erdma-perf no -n.
        let jp = JobPlan::new(
            4,
            None,
            schedule::combos(1, false),
            RunSource::Assumed,
            Layout::AT_ONCE,
        )
        .unwrap();
        assert_eq!(jp.iterations(), None);
        // Partners sharing a port: the iterations of the rate's share.
        let jp = JobPlan::new(
            16,
            Some(9.0),
            schedule::combos(1, false),
            chosen,
            Layout::AT_ONCE,
        )
        .unwrap();
        let k = jp.plan.partners as f64;
        let bytes = jp.plan.run_s * 100e9 / 8.0 / k;
        assert_eq!(jp.iterations(), Some((bytes / 65536.0).ceil() as u64));
    }

    /// Issue 35's bars in the job's own prediction: 1000 hosts, 2 or 8
    /// NICs, the full matrix within 45 minutes and `--budget 10` within
    /// 10, with one partner per round (a capacity cut shows); the serial
    /// layout with runs of the default length is the schedule before it.
    #[test]
    fn a_thousand_hosts_within_the_bars() {
        let chosen = RunSource::Chosen {
            gbps: 400.0,
            size: 65536,
        };
        for nics in [2, 8] {
            let combos = schedule::combos(nics, false);
            let full = JobPlan::new(1000, None, combos.clone(), chosen, Layout::AT_ONCE).unwrap();
            // (999 + 10) rounds x 1 step x (0.2 + 0.3) s.
            assert!((full.predicted_wall_s() - 504.5).abs() < 1e-9);
            let budget =
                JobPlan::new(1000, Some(600.0), combos.clone(), chosen, Layout::AT_ONCE).unwrap();
            assert!(budget.predicted_wall_s() <= 570.0 + 1e-9);
            assert!(budget.plan.finds_capacity_cuts());
            assert_eq!(budget.plan.pattern, schedule::Pattern::Full);
            let before =
                JobPlan::new(1000, None, combos, RunSource::Assumed, Layout::SERIAL).unwrap();
            let want = 1009.0 * (2 * nics) as f64 * 2.3;
            assert!((before.predicted_wall_s() - want).abs() < 1e-6);
        }
    }
}
