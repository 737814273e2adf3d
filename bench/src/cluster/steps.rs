//! The real job's pair stage as steps: which erdma-perf runs go at once,
//! on which TCP port each listens, and how long the schedule takes in the
//! model of [`schedule`] (docs/cluster-diagnosis.md).
//!
//! A round of a [`schedule::Plan`] (directed flows) becomes one step per
//! rail combination ([`schedule::combos`]): the rails run one after another,
//! so that each NIC's number is its own. Without `--budget` each step
//! holds one direction of every pair (the lower rank the client first, as
//! `pairs::run_rounds` runs them); with `--budget` a pair's two
//! directions, and the several partners of a round, run at once. After
//! each step the ranks meet.

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

/// The steps of one round of directed `flows` (duplicates dropped): one
/// per rail combination, or two (lower rank the client, then the higher)
/// when `together` is false.
pub fn round_steps(flows: &[(usize, usize)], combos: &[(usize, usize)], together: bool) -> Round {
    let mut flows: Vec<(usize, usize)> = flows.iter().copied().filter(|(c, s)| c != s).collect();
    flows.sort_unstable();
    flows.dedup();
    let mut steps = Vec::new();
    for &(ci, si) in combos {
        let of = |keep: &dyn Fn(&(usize, usize)) -> bool| -> Vec<Flow> {
            flows
                .iter()
                .filter(|f| keep(f))
                .map(|&(client, server)| Flow {
                    client,
                    server,
                    ci,
                    si,
                })
                .collect()
        };
        if together {
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

/// The real job's schedule: the plan, how its rounds run, and the model
/// its prediction rests on.
#[derive(Debug, Clone, PartialEq)]
pub struct JobPlan {
    /// Which pairs meet in which round.
    pub plan: Plan,
    /// Whether a pair's two directions run at once (`--budget`).
    pub together: bool,
    /// The rail combinations of every pair.
    pub combos: Vec<(usize, usize)>,
    /// Whether `plan.run_s` is assumed (erdma-perf runs `-n` iterations, of
    /// no known length) rather than `-D`'s.
    pub run_assumed: bool,
    /// The time model.
    pub model: Model,
    /// Whether `--budget` chose the plan.
    pub budgeted: bool,
}

impl JobPlan {
    /// The full matrix without a budget, each direction its own step.
    pub fn full(hosts: usize, combos: Vec<(usize, usize)>, run_s: Option<f64>) -> JobPlan {
        let model = Model::default();
        let run = run_s.unwrap_or(model.default_run_s);
        JobPlan {
            plan: Plan::full(hosts, 1, run),
            together: false,
            combos,
            run_assumed: run_s.is_none(),
            model,
            budgeted: false,
        }
    }

    /// The plan of a job of `hosts` ranks: without a budget today's full
    /// matrix (each direction its own step), with one the schedule that
    /// fits it ([`schedule::choose_for_job`]).
    pub fn new(
        hosts: usize,
        budget_s: Option<f64>,
        combos: Vec<(usize, usize)>,
        run_s: Option<f64>,
    ) -> Result<JobPlan, String> {
        let model = Model::default();
        let run = run_s.unwrap_or(model.default_run_s);
        let (plan, together) = match budget_s {
            None => (Plan::full(hosts, 1, run), false),
            Some(b) => (
                schedule::choose_for_job(hosts, b, &model, run, combos.len(), 1)?,
                true,
            ),
        };
        Ok(JobPlan {
            plan,
            together,
            combos,
            run_assumed: run_s.is_none(),
            model,
            budgeted: budget_s.is_some(),
        })
    }

    /// Steps in one round.
    pub fn steps_per_round(&self) -> usize {
        self.combos.len() * if self.together { 1 } else { 2 }
    }

    /// The rounds of the main pass.
    pub fn rounds(&self) -> Vec<Round> {
        (0..self.plan.rounds)
            .map(|r| round_steps(&self.plan.round(r), &self.combos, self.together))
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
                round_steps(&flows, &self.combos, self.together)
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
        let wall = self.predicted_wall_s();
        format!(
            "{what}, {} partner{} per round, {} rounds + at most {} retest rounds, {} step{} \
             each (rails one after another) of {:.2} s runs{} + {:.2} s overhead: predicted \
             wall {:.0} s ({:.1} min){}",
            p.partners,
            if p.partners == 1 { "" } else { "s" },
            p.rounds,
            p.retest_rounds,
            self.steps_per_round(),
            if self.steps_per_round() == 1 { "" } else { "s" },
            p.run_s,
            if self.run_assumed {
                " (assumed: give --perf-args -D SECS for a firm prediction)"
            } else {
                ""
            },
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
    /// per rank: width 1).
    pub fn all_ports(&self, block: u32) -> u32 {
        let retest = (self.plan.retest_rounds * self.steps_per_round()) as u32 * block;
        self.main_ports(block) + retest
    }
}

/// The seconds of one erdma-perf run of the pair stage: `-D`'s (its
/// warm-up and cool-down are inside it), none when it runs `-n`
/// iterations.
pub fn run_seconds(o: &crate::perf::options::Options) -> Option<f64> {
    o.duration.map(f64::from)
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
                let jp = JobPlan::new(size, None, combos.clone(), Some(1.0)).unwrap();
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
        let jp = JobPlan::new(9, Some(9.0), schedule::combos(1, false), Some(1.0)).unwrap();
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
        let jp = JobPlan::new(4, None, schedule::combos(2, false), None).unwrap();
        assert!(jp.run_assumed);
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
}
