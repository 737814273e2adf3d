//! One job, two networks: the pair stage from its plan to what rank 0
//! judges, the same code whether erdma-perf measures each run between the
//! ranks (the job under MPI) or the model does (`--simulate`). Only the
//! [`Network`] differs; the schedule ([`steps::JobPlan`]), the rounds and
//! their ports, the retest plan ([`super::retest_plan`], that is
//! [`super::retest::plan`] on the first pass's verdicts), the retest rounds
//! and then the report, the verdicts judged once ([`super::Judgement`]) and
//! the exit status ([`super::report_with`]) are this module's and its
//! callers' for both (docs/cluster-diagnosis.md, "The stages").

use std::collections::BTreeMap;

use serde_json::Value;

use super::retest;
use super::steps::{self, JobPlan, Round};

/// What measures the pair stage's runs: erdma-perf between the ranks, or
/// the model.
pub trait Network {
    /// Whether this process is rank 0 (it gets the runs and judges them).
    fn root(&self) -> bool;

    /// Runs round `r` (`round`: its steps; `retest`: of the retest), the
    /// first step's ports from `port` with `width` ports per server in a
    /// step ([`steps::ports`]). On rank 0: every rank's runs of the round
    /// as the JSON array the rank sends ([`super::pairs::PairRun::to_json`]),
    /// index = rank, `[]` for a lost rank; `None` on the other ranks.
    fn round(
        &mut self,
        r: usize,
        round: &Round,
        port: u32,
        width: usize,
        retest: bool,
    ) -> Option<Vec<Vec<u8>>>;

    /// Rank 0's retest plan (`mine`; `None` on the other ranks) on every
    /// rank; the empty plan when it cannot be agreed.
    fn agree(&mut self, mine: Option<retest::Plan>) -> retest::Plan;
}

/// The TCP ports of the pair stage: the first, and the most ranks on one
/// host (each server of a host listens on its own).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Ports {
    /// `--pair-port`.
    pub first: u32,
    /// The most ranks on one host.
    pub block: u32,
}

impl Ports {
    /// From `--pair-port` and each rank's slot on its host
    /// ([`super::host_slots`]).
    pub fn new(first: u16, slots: &[usize]) -> Ports {
        Ports {
            first: u32::from(first),
            block: slots.iter().max().map_or(1, |m| m + 1) as u32,
        }
    }
}

/// What the pair stage leaves on rank 0 for the report.
#[derive(Debug, Clone, Default)]
pub struct PairStage {
    /// Every rank's runs of the main rounds, resumed ones included, in
    /// round order (index = rank, each a JSON array): what
    /// [`super::pairs::Matrix::from_ranks`] reads. Empty off rank 0.
    pub raw: Vec<Vec<u8>>,
    /// The retest plan and every rank's retest runs (rank 0).
    pub retest: Option<(retest::Plan, Vec<Vec<u8>>)>,
}

/// Runs the pair stage of `plan` on `net` for `ranks` ranks: the main
/// rounds (those in `done`, measured by an interrupted job, skipped with
/// their ports kept; `after` gets each other round's runs on rank 0 as
/// soon as it ends), then rank 0's retest plan from the first pass
/// (`first_pass`, on rank 0 only), agreed by every rank, and its rounds
/// on the ports after the main rounds'.
pub fn pair_stage(
    plan: &JobPlan,
    net: &mut dyn Network,
    ranks: usize,
    ports: Ports,
    mut done: BTreeMap<usize, Vec<Value>>,
    after: &mut dyn FnMut(usize, &[Vec<u8>]),
    first_pass: &dyn Fn(&[Vec<u8>]) -> retest::Plan,
) -> PairStage {
    let rounds = plan.rounds();
    let width = steps::width(&rounds);
    let mut port = ports.first;
    for (r, round) in rounds.iter().enumerate() {
        if !done.contains_key(&r)
            && let Some(all) = net.round(r, round, port, width, false)
        {
            after(r, &all);
            done.insert(r, all.iter().map(|b| parse(b)).collect());
        }
        port += round.len() as u32 * ports.block * width as u32;
    }
    let root = net.root();
    let raw = if root {
        super::rounds::per_rank(&done, ranks)
    } else {
        Vec::new()
    };
    let mine = root.then(|| first_pass(&raw));
    let agreed = net.agree(mine);
    let retest_plan = if agreed.fits(ranks) {
        agreed
    } else {
        retest::Plan::default()
    };
    let rr = plan.retest_rounds(&retest_plan.rounds);
    let width = steps::width(&rr);
    let mut port = ports.first + plan.main_ports(ports.block);
    let mut per: Vec<Vec<Value>> = vec![Vec::new(); ranks];
    for (r, round) in rr.iter().enumerate() {
        if let Some(all) = net.round(r, round, port, width, true) {
            for (i, b) in all.iter().enumerate().take(ranks) {
                match parse(b) {
                    Value::Array(v) => per[i].extend(v),
                    // Kept as it came: the report names the rank.
                    _ => per[i].push(Value::Null),
                }
            }
        }
        port += round.len() as u32 * ports.block * width as u32;
    }
    let retested = per
        .into_iter()
        .map(|v| Value::Array(v).to_string().into_bytes())
        .collect();
    PairStage {
        raw,
        retest: root.then_some((retest_plan, retested)),
    }
}

/// A rank's bytes as JSON (null when they are not: the report then names
/// the rank).
fn parse(b: &[u8]) -> Value {
    serde_json::from_slice(b).unwrap_or(Value::Null)
}

/// The schedule as the report shows it: `{"schedule", "predicted_wall_s",
/// "pair_wall_s"}` (the last measured, or the model's when simulated).
pub fn schedule_json(plan: &JobPlan, pair_wall_s: f64) -> Value {
    serde_json::json!({"schedule": plan.describe(), "predicted_wall_s": plan.predicted_wall_s(),
                       "pair_wall_s": pair_wall_s})
}
