//! The real job's verdicts in its report: the pair diagnosis with what the
//! retest saw, the hosts the NCCL stage found slow alone, the schedule and
//! its predicted wall time beside the measured one, and what the verdicts
//! do to the exit status (docs/cluster-diagnosis.md, "The real job").

use serde_json::{Map, Value, json};

use super::diagnose::{self, Diagnosis};
use super::pairs::PairRun;
use super::{HostReport, Stages, retest};
use crate::doctor::Status;

/// The retest rounds of a real job: the plan rank 0 sent every rank and
/// the runs they made.
#[derive(Debug, Clone, Default)]
pub struct Retested {
    /// What was retested, in which rounds.
    pub plan: retest::Plan,
    /// Every retest run, both sides.
    pub runs: Vec<PairRun>,
}

impl Retested {
    /// From the plan and each rank's retest runs (index = rank, each a JSON
    /// array as the pair rounds' are).
    pub fn from_ranks(plan: retest::Plan, raw: &[Vec<u8>]) -> Result<Retested, String> {
        let m = super::Matrix::from_ranks("retest", raw)
            .map_err(|e| format!("the retest rounds: {e}"))?;
        Ok(Retested { plan, runs: m.runs })
    }

    /// The client sides that measured: (client, server, rail, Gb/s scaled
    /// by the runs sharing the port).
    pub fn measured(&self) -> impl Iterator<Item = (usize, usize, usize, f64)> + '_ {
        self.runs
            .iter()
            .filter(|r| r.role == "client")
            .filter_map(|r| Some((r.client, r.server, r.rail?, r.gbps? * r.share as f64)))
    }
}

/// Every verdict of the job: the pair diagnosis (with the retest when it
/// ran) and the NCCL stage's host verdicts; `names` covers the hosts of both.
#[derive(Debug, Clone)]
pub struct Judged {
    /// Each verdict's host names (index = host).
    pub names: Vec<String>,
    /// The verdicts and notes.
    pub diagnosis: Diagnosis,
    /// Whether the job ran its retest (the verdicts then set the exit status).
    pub retest_ran: bool,
    /// How many of the last verdicts come from the NCCL stage.
    pub from_nccl: usize,
    /// The retest's plan, when it ran.
    pub plan: Option<retest::Plan>,
    /// The ranks of the job.
    pub ranks: usize,
}

/// The busbw at the largest size of each host-alone NCCL stage that
/// passed: (host, GB/s).
fn alone_busbw(stages: &Stages) -> Vec<(String, f64)> {
    let Some(rep) = stages.nccl else {
        return Vec::new();
    };
    rep.stages
        .iter()
        .filter(|s| s.scope == "host" && s.status == Status::Ok)
        .filter_map(|s| {
            let rows = s.doc.as_ref().map(super::nccl::rows)?;
            let bw = rows.last()?["busbw"].as_f64()?;
            Some((s.hosts.first()?.clone(), bw))
        })
        .collect()
}

/// A note when the NCCL cluster stage is under the pair stage's
/// expectation: the verdicts (or none) that may explain it.
fn cluster_note(stages: &Stages, pair_verdicts: usize) -> Option<String> {
    let st = stages.nccl?.stages.iter().find(|s| s.scope == "cluster")?;
    let expected = st.expected.0?;
    let bw = st.doc.as_ref().map(super::nccl::rows)?.last()?["busbw"].as_f64()?;
    (bw < (1.0 - diagnose::MIN_EFFECT) * expected).then(|| {
        format!(
            "the NCCL cluster stage's busbw {bw:.2} GB/s is under the pair stage's expectation \
             {expected:.2} GB/s: {}",
            if pair_verdicts > 0 {
                "the pair verdicts above name what is slow"
            } else {
                "no pair verdict explains it (NCCL's settings, its algorithm or the GPUs' side)"
            }
        )
    })
}

/// The job's verdicts (see [`Judged`]); none when neither the pair nor the
/// NCCL stage ran.
pub fn judge(reports: &[HostReport], stages: &Stages) -> Option<Judged> {
    let pair = super::pair_verdicts(reports, stages);
    if pair.is_none() && stages.nccl.is_none() {
        return None;
    }
    let (mut names, mut d) = pair.unwrap_or_else(|| {
        (
            reports.iter().map(HostReport::label).collect(),
            lost_only(stages.lost),
        )
    });
    let pairs_found = d.verdicts.len();
    let alone = alone_busbw(stages);
    let bw: Vec<f64> = alone.iter().map(|(_, b)| *b).collect();
    let mut from_nccl = 0;
    for mut v in retest::busbw_outliers(&bw) {
        let host = &alone[v.hosts[0]].0;
        // The host's first rank names it, else its own name (a test hook
        // may take ranks for hosts).
        let at = reports
            .iter()
            .position(|r| r.host() == host)
            .unwrap_or_else(|| {
                names.push(host.clone());
                names.len() - 1
            });
        v.hosts = vec![at];
        d.verdicts.push(v);
        from_nccl += 1;
    }
    d.notes.extend(cluster_note(stages, pairs_found));
    if stages.pairs.is_none() && d.verdicts.is_empty() && d.notes.is_empty() {
        return None;
    }
    Some(Judged {
        names,
        diagnosis: d,
        retest_ran: stages.retest.is_some(),
        from_nccl,
        plan: stages.retest.map(|r| r.plan.clone()),
        ranks: reports.len(),
    })
}

/// Without the pair stage's diagnosis (which names them itself): a
/// `lost` verdict for each rank lost (in the NCCL stage, say).
fn lost_only(lost: &[(usize, String)]) -> Diagnosis {
    let mut d = Diagnosis::default();
    d.verdicts
        .extend(lost.iter().map(|(r, why)| diagnose::lost(*r, why.clone())));
    d
}

impl Judged {
    /// Whether the retest confirmed verdict `v` (see [`retest::Plan::confirms`]).
    pub(crate) fn confirmed(&self, v: &diagnose::Verdict) -> bool {
        self.plan
            .as_ref()
            .is_some_and(|p| p.confirms(v, &self.diagnosis, self.ranks))
    }

    /// What the verdicts do to the exit status: with the retest, each
    /// verdict's [`retest::verdict_status`]; without it only the NCCL
    /// stage's host verdicts, as warnings (the pair verdicts of a job
    /// that could not retest stay informative).
    pub fn status(&self) -> Status {
        let n = self.diagnosis.verdicts.len();
        self.diagnosis
            .verdicts
            .iter()
            .enumerate()
            .map(|(i, v)| match (self.retest_ran, i >= n - self.from_nccl) {
                (_, true) => Status::Warn,
                // Against the ports' rate: every pair measured it.
                (false, false) if v.kind == diagnose::Kind::Cluster => Status::Fail,
                (true, false) => retest::verdict_status(v, self.confirmed(v)),
                (false, false) => Status::Ok,
            })
            .max()
            .unwrap_or(Status::Ok)
    }

    /// The `verdicts` array, each with its `status` when it sets the exit
    /// status.
    pub fn to_json(&self) -> Value {
        let mut all = diagnose::to_json(&self.diagnosis, &self.names);
        let n = self.diagnosis.verdicts.len();
        if let Some(arr) = all.as_array_mut() {
            for (i, (j, v)) in arr.iter_mut().zip(&self.diagnosis.verdicts).enumerate() {
                let nccl = i >= n - self.from_nccl;
                j["source"] = json!(if nccl { "nccl" } else { "pairs" });
                if self.retest_ran || nccl {
                    let st = if nccl {
                        Status::Warn
                    } else {
                        retest::verdict_status(v, self.confirmed(v))
                    };
                    j["status"] = json!(st);
                }
                if self.retest_ran && !nccl {
                    j["confirmed"] = json!(self.confirmed(v));
                }
            }
        }
        all
    }

    /// The verdicts section, each line ending with what it does to the
    /// exit status once the job retested.
    pub fn render_text(&self) -> String {
        let mut d = self.diagnosis.clone();
        let n = d.verdicts.len();
        for (i, v) in d.verdicts.iter_mut().enumerate() {
            if i >= n - self.from_nccl {
                v.why.push_str(": a warning");
            } else if self.retest_ran {
                let confirmed = self.confirmed(v);
                v.why = format!("{}: {}", v.why, retest::outcome(v, confirmed));
            }
        }
        diagnose::render_text(&d, &self.names)
    }

    /// What became of a first-pass suspect: the final pair verdict of the
    /// same kind, hosts and NIC, confirmed or not, or none (cleared).
    pub fn suspect_outcome(&self, sp: &retest::Suspect) -> &'static str {
        let n = self.diagnosis.verdicts.len() - self.from_nccl;
        let same = |v: &&diagnose::Verdict| {
            let (mut a, mut b) = (v.hosts.clone(), sp.hosts.clone());
            a.sort_unstable();
            b.sort_unstable();
            v.kind.as_str() == sp.kind && a == b && v.nic == sp.nic
        };
        let found = self.diagnosis.verdicts[..n].iter().find(same);
        retest::suspect_words(found.map(|v| (self.confirmed(v), v.seen_again, v.retested)))
    }
}

/// What the retest saw, as text: the plan (each suspect with what became
/// of it when `judged` is given, each round's pairs), then each retest
/// run against the same cell's first pass.
pub fn retest_text(
    rt: &Retested,
    first: Option<&super::Matrix>,
    names: &[String],
    judged: Option<&Judged>,
) -> String {
    let p = &rt.plan;
    let name = |i: usize| names.get(i).map_or("?", String::as_str);
    let mut s = format!(
        "# retest: {} suspect{} of the first pass, {} round{}, {} pair{} (both directions), {} good host{}{}\n",
        p.suspects.len(),
        if p.suspects.len() == 1 { "" } else { "s" },
        p.rounds.len(),
        if p.rounds.len() == 1 { "" } else { "s" },
        p.pairs(),
        if p.pairs() == 1 { "" } else { "s" },
        p.good,
        if p.good == 1 { "" } else { "s" },
        if p.left > 0 {
            format!(", {} request(s) did not fit", p.left)
        } else {
            String::new()
        }
    );
    for sp in &p.suspects {
        let hosts: Vec<&str> = sp.hosts.iter().map(|&h| name(h)).collect();
        let nic = sp.nic.map_or_else(String::new, |k| format!(" NIC {k}"));
        let outcome = judged.map_or_else(String::new, |j| format!(": {}", j.suspect_outcome(sp)));
        s.push_str(&format!(
            "suspect   {} {}{nic}{outcome}\n",
            sp.kind,
            hosts.join(" ")
        ));
    }
    for (k, round) in p.rounds.iter().enumerate() {
        let met: Vec<String> = round
            .iter()
            .map(|&(a, b)| format!("{} <-> {}", name(a), name(b)))
            .collect();
        s.push_str(&format!("round {:<3} {}\n", k + 1, met.join(", ")));
    }
    for r in rt.runs.iter().filter(|r| r.role == "client") {
        let was = first
            .and_then(|m| m.rails.iter().find(|x| Some(x.rail) == r.rail))
            .and_then(|x| x.gbps.get(r.client)?.get(r.server).copied().flatten());
        let now = match (&r.gbps, &r.error) {
            (Some(g), _) => format!("{g:.2} Gb/s"),
            (None, Some(e)) => format!("failed: {e}"),
            (None, None) => "failed".into(),
        };
        s.push_str(&format!(
            "retest    {} -> {} NIC {}: {now} (first pass {})\n",
            name(r.client),
            name(r.server),
            match r.rail {
                Some(super::ncclpairs::RAIL) => super::ncclpairs::DEVICE.into(),
                Some(k) => k.to_string(),
                None => "cross".into(),
            },
            was.map_or("-".into(), |g| format!("{g:.2} Gb/s"))
        ));
    }
    s
}

/// The retest's `retest` object of the JSON document.
pub fn retest_json(rt: &Retested) -> Value {
    let mut v = rt.plan.to_json();
    v["runs"] = rt.runs.iter().map(PairRun::to_json).collect();
    v
}

/// The schedule line of the text report: what ran, predicted and measured.
pub fn schedule_text(s: &Value) -> String {
    let measured = s["pair_wall_s"]
        .as_f64()
        .map_or_else(String::new, |w| format!("; measured {w:.1} s"));
    format!(
        "# schedule: {}{measured}\n",
        s["schedule"].as_str().unwrap_or("?")
    )
}

/// Adds `schedule`, `predicted_wall_s`, `pair_wall_s`, `retest` and
/// `verdicts` (the job's, judged once: `judged`) to the JSON document.
pub fn add_json(m: &mut Map<String, Value>, stages: &Stages, judged: Option<&Judged>) {
    if let Some(s) = stages.schedule {
        for k in ["schedule", "predicted_wall_s", "pair_wall_s"] {
            if !s[k].is_null() {
                m.insert(k.into(), s[k].clone());
            }
        }
    }
    if let Some(rt) = stages.retest {
        m.insert("retest".into(), retest_json(rt));
    }
    if let Some(j) = judged {
        m.insert("verdicts".into(), j.to_json());
    }
}

/// The schedule, retest and verdict sections of the text report, from the
/// verdicts judged once (`judged`).
pub fn render_text(reports: &[HostReport], stages: &Stages, judged: Option<&Judged>) -> String {
    let mut s = String::new();
    if let Some(sc) = stages.schedule {
        s.push_str(&schedule_text(sc));
    }
    if let Some(rt) = stages.retest {
        let labels: Vec<String> = reports.iter().map(HostReport::label).collect();
        s.push_str(&retest_text(rt, stages.pairs, &labels, judged));
    }
    if let Some(j) = judged {
        s.push_str(&j.render_text());
    }
    s
}
