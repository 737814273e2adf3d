//! The retest rounds of the real job and what the verdicts do to its exit
//! status (docs/cluster-diagnosis.md, "The retest").
//!
//! After the main rounds rank 0 judges what was measured ([`super::diagnose`]),
//! pairs every suspect with hosts judged good (two at least, where there
//! are) and every suspect pair with itself again, in at most about log2 N
//! rounds ([`schedule::retest_pairs`]), and tells the other ranks the
//! [`Plan`] through a gather. The final verdicts rest on both passes: a
//! verdict the retest measured again and still found is confirmed (a
//! failure), one it could not retest stays a warning that says so.

use std::collections::{BTreeMap, BTreeSet};

use serde_json::{Value, json};

use super::diagnose::{Diagnosis, Kind, Verdict, low_line, upper_median};
use super::schedule;
use crate::doctor::Status;

/// The retest requests from the first verdicts: a suspect host (or NIC)
/// meets two good hosts, or as many as its effect needs ([`meetings`]); a
/// suspect pair is measured again and each end meets a good host.
pub fn requests(d: &Diagnosis) -> Vec<(usize, Option<usize>)> {
    let mut req = Vec::new();
    for v in &d.verdicts {
        match v.kind {
            Kind::Host | Kind::Nic => {
                req.extend(std::iter::repeat_n((v.hosts[0], None), meetings(v)));
            }
            Kind::Link | Kind::Direction => {
                let (a, b) = (v.hosts[0], v.hosts[1]);
                req.extend([(a, Some(b)), (a, None), (b, None)]);
            }
            // An intermittent path is measured again FLAP_RETESTS times
            // (rounds apart): a link slow in 30% of its runs shows in one
            // of 4 more runs (two directions, two NICs) 76 times in 100, in
            // one of 12 99 times. (A first pass with one run per cell
            // names no flapping suspect: it is a link or direction then.)
            Kind::Flapping => {
                let (a, b) = (v.hosts[0], v.hosts[1]);
                req.extend(std::iter::repeat_n((a, Some(b)), FLAP_RETESTS));
                req.extend([(a, None), (b, None)]);
            }
            // A lost host is not measured again; the cluster's rate
            // against its ports is every pair's, not a suspect's.
            Kind::Lost | Kind::Cluster => {}
        }
    }
    req
}

/// How many times the retest measures a flapping path again.
pub const FLAP_RETESTS: usize = 3;

/// The most good hosts one suspect host meets in the retest.
pub const MAX_MEETINGS: usize = 8;

/// How many good hosts a suspect host (or NIC) meets in the retest: enough
/// that the median of its runs, at the noise the fit measured, is under the
/// host's line 95 times in 100 when its effect is what the first pass
/// measured (`m >= (1.2533 sigma (k + 1.645) / effect)^2`, k for one host,
/// as `diagnose` judges the retest's runs); two at least, and
/// [`MAX_MEETINGS`] at most. A host 5% slow at 1.5% noise meets 4; with two,
/// as before, the retest saw it again about half of the time (issue 36).
pub fn meetings(v: &Verdict) -> usize {
    let need = |nic: &str| -> Option<f64> {
        let send = v.numbers.get(&format!("{nic}_send_effect"))?;
        let receive = v.numbers.get(&format!("{nic}_receive_effect"))?;
        let noise = v.numbers.get(&format!("{nic}_noise"))?;
        let effect = -send.min(*receive).ln();
        (effect > 0.0).then(|| {
            let k = super::diagnose::k_sigma(1) + 1.645;
            (1.2533 * noise * k / effect).powi(2)
        })
    };
    let nics: BTreeSet<&str> = v
        .numbers
        .keys()
        .filter_map(|k| k.strip_suffix("_send_effect"))
        .collect();
    let most = nics.into_iter().filter_map(need).fold(0.0, f64::max);
    (most.ceil() as usize).clamp(2, MAX_MEETINGS)
}

/// One verdict of the first pass, as the retest plan names it.
#[derive(Debug, Clone, PartialEq)]
pub struct Suspect {
    /// host, nic, link or direction.
    pub kind: String,
    /// The ranks it names.
    pub hosts: Vec<usize>,
    /// The NIC, when about one.
    pub nic: Option<usize>,
}

/// What rank 0 decided to retest, sent to every rank.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Plan {
    /// The first pass's verdicts that the retest is about.
    pub suspects: Vec<Suspect>,
    /// Each retest round's pairs (both directions are measured).
    pub rounds: Vec<Vec<(usize, usize)>>,
    /// Requests that did not fit the allowed rounds (or found no good host).
    pub left: usize,
    /// Hosts judged good (in no first-pass verdict).
    pub good: usize,
}

impl Plan {
    /// Both plans as one (the NIC pairs' and the NCCL pairs', each run on
    /// its own network): the suspects and rounds of both, in order.
    pub fn merge(mut self, other: Plan) -> Plan {
        self.suspects.extend(other.suspects);
        self.rounds.extend(other.rounds);
        self.left += other.left;
        self.good = self.good.min(other.good);
        self
    }
}

/// The retest of the first pass's diagnosis `d` of `hosts` ranks, in at
/// most `max_rounds` rounds.
pub fn plan(d: &Diagnosis, hosts: usize, max_rounds: usize) -> Plan {
    let blamed: BTreeSet<usize> = d
        .verdicts
        .iter()
        .flat_map(|v| v.hosts.iter().copied())
        .collect();
    let good: Vec<usize> = (0..hosts).filter(|h| !blamed.contains(h)).collect();
    // The worst suspects first: when the rounds or the good hosts run out,
    // the clearest fault is the one retested.
    let mut worst_first = d.clone();
    worst_first
        .verdicts
        .sort_by(|a, b| severity(a).total_cmp(&severity(b)));
    let req = requests(&worst_first);
    let partners = with_stand_ins(&good, &worst_first, hosts);
    let (mut rounds, left) = schedule::retest_pairs(&req, &partners, hosts, max_rounds);
    rounds.retain(|r| !r.is_empty());
    Plan {
        suspects: d
            .verdicts
            .iter()
            .filter(|v| !matches!(v.kind, Kind::Lost | Kind::Cluster))
            .map(|v| Suspect {
                kind: v.kind.as_str().to_owned(),
                hosts: v.hosts.clone(),
                nic: v.nic,
            })
            .collect(),
        rounds,
        left: left.len(),
        good: good.len(),
    }
}

/// The hosts a suspect may meet in the retest: the good ones, and when
/// there are fewer than two, the mildest suspects after them (not the lost
/// ones). In a small cluster the noise can make every host a suspect of
/// the first pass (seen in the rig: 4 ranks, a link slowed by tc and a
/// noisy pair beside it, no good host left, so the slowed link, low
/// again in its retest, could not be confirmed); a stand-in the retest
/// clears is judged good after it, and [`Plan::confirms`] counts the
/// meetings with hosts the final diagnosis finds good.
fn with_stand_ins(good: &[usize], worst_first: &Diagnosis, hosts: usize) -> Vec<usize> {
    let mut partners = good.to_vec();
    if good.len() >= 2 {
        return partners;
    }
    let lost: BTreeSet<usize> = worst_first
        .verdicts
        .iter()
        .filter(|v| v.kind == Kind::Lost)
        .flat_map(|v| v.hosts.iter().copied())
        .collect();
    // Mildest last in `worst_first`: walk it backwards, each host once.
    for v in worst_first.verdicts.iter().rev() {
        for &h in &v.hosts {
            if h < hosts && !lost.contains(&h) && !partners.contains(&h) {
                partners.push(h);
            }
        }
    }
    partners
}

/// How far under the cluster a verdict's cells are (its lowest row or
/// column median, or a link's lowest direction over the median); 0 (first)
/// when it has no numbers: nothing says it is mild.
fn severity(v: &Verdict) -> f64 {
    let mut worst = if v.numbers.is_empty() { 0.0 } else { 1.0f64 };
    for (k, x) in &v.numbers {
        if k.ends_with("_row") || k.ends_with("_column") {
            worst = worst.min(*x);
        }
        let nic = k.strip_suffix("_ab_gbps").or(k.strip_suffix("_ba_gbps"));
        if let Some(m) = nic.and_then(|p| v.numbers.get(&format!("{p}_median_gbps"))) {
            worst = worst.min(x / m);
        }
    }
    worst
}

impl Plan {
    /// As JSON (what rank 0 sends the others, and the report's `retest`).
    pub fn to_json(&self) -> Value {
        json!({
            "suspects": self.suspects.iter().map(|s| json!({
                "kind": s.kind, "hosts": s.hosts, "nic": s.nic})).collect::<Vec<_>>(),
            "rounds": self.rounds,
            "left": self.left,
            "good": self.good,
        })
    }

    /// From [`Plan::to_json`]; `None` when it is not one.
    pub fn from_json(v: &Value) -> Option<Plan> {
        let idx = |v: &Value| v.as_u64().map(|x| x as usize);
        let suspects = v["suspects"]
            .as_array()?
            .iter()
            .map(|s| {
                Some(Suspect {
                    kind: s["kind"].as_str()?.to_owned(),
                    hosts: s["hosts"]
                        .as_array()?
                        .iter()
                        .map(idx)
                        .collect::<Option<_>>()?,
                    nic: idx(&s["nic"]),
                })
            })
            .collect::<Option<Vec<_>>>()?;
        let rounds = v["rounds"]
            .as_array()?
            .iter()
            .map(|r| {
                r.as_array()?
                    .iter()
                    .map(|p| Some((idx(&p[0])?, idx(&p[1])?)))
                    .collect::<Option<Vec<_>>>()
            })
            .collect::<Option<Vec<_>>>()?;
        Some(Plan {
            suspects,
            rounds,
            left: idx(&v["left"])?,
            good: idx(&v["good"])?,
        })
    }

    /// Whether every pair names ranks under `hosts` and no rank is in two
    /// pairs of one round (a plan from another job is refused).
    pub fn fits(&self, hosts: usize) -> bool {
        self.rounds.iter().all(|r| {
            let mut busy = vec![false; hosts];
            r.iter().all(|&(a, b)| {
                let ok = a < hosts && b < hosts && a != b && !busy[a] && !busy[b];
                if ok {
                    busy[a] = true;
                    busy[b] = true;
                }
                ok
            })
        })
    }

    /// Pairs measured in all rounds.
    pub fn pairs(&self) -> usize {
        self.rounds.iter().map(Vec::len).sum()
    }
}

impl Plan {
    /// Whether the retest confirms `v`, a verdict of the `last` diagnosis of
    /// a job of `hosts` ranks: the retest's own runs of it were low too
    /// ([`Verdict::seen_again`]), and it paired one of its hosts with a host
    /// judged good after the retest, so that the verdict does not rest on
    /// suspects measuring each other (two ranks cannot confirm anything).
    /// Good: not named by `v`, and its own NIC not blamed (no host, NIC or
    /// lost verdict in `last`); a link or direction verdict between it and
    /// a third host says nothing about its other paths (seen in the rig: a
    /// quiet job's one slower direction 3 -> 0, at 0.81 of the median in
    /// both passes, left no good host for the slowed link 1 <-> 2).
    pub fn confirms(&self, v: &Verdict, last: &Diagnosis, hosts: usize) -> bool {
        let blamed: BTreeSet<usize> = last
            .verdicts
            .iter()
            .filter(|x| matches!(x.kind, Kind::Host | Kind::Nic | Kind::Lost))
            .flat_map(|x| x.hosts.iter().copied())
            .collect();
        let good = |h: usize| h < hosts && !blamed.contains(&h) && !v.hosts.contains(&h);
        v.seen_again
            && self.rounds.iter().flatten().any(|&(a, b)| {
                (v.hosts.contains(&a) && good(b)) || (v.hosts.contains(&b) && good(a))
            })
    }
}

/// What a final verdict does to the exit status once the job retested: a
/// lost host, the cluster under its ports' rate (every pair measured it:
/// no retest can clear it) or a verdict the retest `confirmed`
/// ([`Plan::confirms`]) fails, any other warns.
pub fn verdict_status(v: &Verdict, confirmed: bool) -> Status {
    if matches!(v.kind, Kind::Lost | Kind::Cluster) || confirmed {
        Status::Fail
    } else {
        Status::Warn
    }
}

/// The worst of the verdicts of a job of `hosts` ranks after the retest
/// `plan` ([`verdict_status`]); ok when there is none.
pub fn status(d: &Diagnosis, plan: &Plan, hosts: usize) -> Status {
    d.verdicts
        .iter()
        .map(|v| verdict_status(v, plan.confirms(v, d, hosts)))
        .max()
        .unwrap_or(Status::Ok)
}

/// The words a verdict's line ends with once the job retested.
pub fn outcome(v: &Verdict, confirmed: bool) -> &'static str {
    match (v.kind, confirmed, v.retested, v.seen_again) {
        (Kind::Lost, ..) => "a failure",
        (Kind::Cluster, ..) => "against the ports' rate: a failure",
        (_, true, ..) => "confirmed by the retest: a failure",
        (_, false, true, true) => {
            "not confirmed (the retest saw it, but not against a host judged good): a warning"
        }
        (_, false, true, false) => {
            "not confirmed (the retest measured it again and did not see it): a warning"
        }
        (_, false, false, _) => "not confirmed (no retest measured it): a warning",
    }
}

/// What became of a first-pass suspect, from its final verdict's
/// (confirmed, seen again, measured again), or none (cleared): the words
/// of the text report and of report.html alike.
pub fn suspect_words(fate: Option<(bool, bool, bool)>) -> &'static str {
    match fate {
        None => "cleared: no such verdict after the retest",
        Some((true, ..)) => "confirmed by the retest",
        Some((false, true, _)) => {
            "still a verdict, not confirmed (seen again, but not against a good host)"
        }
        Some((false, false, true)) => "still a verdict, not confirmed (measured again, not seen)",
        Some((false, false, false)) => "still a verdict, not confirmed (not measured again)",
    }
}

/// Host verdicts from the NCCL stage of every host alone: `busbw[i]` is
/// host i's busbw (GB/s) at the largest size. The reference is the upper
/// median and the low line is the pair diagnosis's
/// ([`low_line`]: the spread on a log scale from the hosts above the
/// reference, k growing with the number of hosts). Needs 3 hosts (with 2,
/// which one is slow is not known). `hosts` of each verdict index `busbw`.
pub fn busbw_outliers(busbw: &[f64]) -> Vec<Verdict> {
    if busbw.len() < 3 {
        return Vec::new();
    }
    let Some(reference) = upper_median(&mut busbw.to_vec()).filter(|r| *r > 0.0) else {
        return Vec::new();
    };
    let mut above: Vec<f64> = busbw
        .iter()
        .filter(|&&b| b >= reference)
        .map(|b| (b / reference).ln())
        .collect();
    let (spread, lowline) = low_line(&mut above, busbw.len());
    busbw
        .iter()
        .enumerate()
        .filter(|(_, b)| **b / reference < lowline)
        .map(|(h, &b)| {
            let numbers = BTreeMap::from([
                ("nccl_busbw".to_owned(), b),
                ("nccl_median_busbw".to_owned(), reference),
                ("nccl_lowline".to_owned(), lowline),
                ("nccl_spread".to_owned(), spread),
            ]);
            Verdict {
                kind: Kind::Host,
                hosts: vec![h],
                nic: None,
                why: format!(
                    "NCCL alone on the host: busbw {b:.2} GB/s, {:.2} of the hosts' median \
                     {reference:.2} GB/s (low line {lowline:.2}, {} hosts): its GPUs, NVLink/PCIe \
                     or NCCL settings, not the network",
                    b / reference,
                    busbw.len()
                ),
                numbers,
                retested: false,
                seen_again: false,
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn verdict(kind: Kind, hosts: &[usize], retested: bool) -> Verdict {
        Verdict {
            kind,
            hosts: hosts.to_vec(),
            nic: None,
            why: String::new(),
            numbers: BTreeMap::new(),
            retested,
            seen_again: retested,
        }
    }

    #[test]
    fn a_suspect_host_meets_two_good_hosts_and_a_pair_itself() {
        let d = Diagnosis {
            verdicts: vec![
                verdict(Kind::Host, &[1], false),
                verdict(Kind::Link, &[3, 5], false),
            ],
            notes: Vec::new(),
        };
        let p = plan(&d, 8, 3);
        assert_eq!(p.good, 5);
        assert_eq!(p.left, 0);
        assert_eq!(p.suspects.len(), 2);
        assert!(p.fits(8));
        let met = |h: usize| -> Vec<usize> {
            let mut v: Vec<usize> = p
                .rounds
                .iter()
                .flatten()
                .filter_map(|&(a, b)| (a == h).then_some(b).or((b == h).then_some(a)))
                .collect();
            v.sort_unstable();
            v
        };
        let one = met(1);
        assert_eq!(one.len(), 2, "{p:?}");
        assert!(one.iter().all(|g| ![1, 3, 5].contains(g)), "{one:?}");
        assert!(met(3).contains(&5), "the link itself again: {p:?}");
        assert!(p.rounds.len() <= 3);
        // Through the gather and back.
        let back = Plan::from_json(&p.to_json()).unwrap();
        assert_eq!(back, p);
        assert!(Plan::from_json(&json!({"rounds": 3})).is_none());
        assert!(!back.fits(5), "rank 5 of a 5-rank job");
    }

    #[test]
    fn no_verdict_no_retest_and_too_few_good_hosts_are_counted() {
        assert_eq!(
            plan(&Diagnosis::default(), 4, 2),
            Plan {
                good: 4,
                ..Plan::default()
            }
        );
        // 3 ranks, one suspect: 2 good hosts, one round each allowed 2.
        let d = Diagnosis {
            verdicts: vec![verdict(Kind::Host, &[0], false)],
            notes: Vec::new(),
        };
        let p = plan(&d, 3, 1);
        assert_eq!((p.pairs(), p.left), (1, 1));
    }

    #[test]
    fn the_worst_suspect_is_retested_first() {
        let mut mild = verdict(Kind::Host, &[0], false);
        mild.numbers.insert("nic0_row".into(), 0.8);
        let mut bad = verdict(Kind::Host, &[2], false);
        bad.numbers.insert("nic0_column".into(), 0.3);
        let d = Diagnosis {
            verdicts: vec![mild, bad],
            notes: Vec::new(),
        };
        // One good host (1), one round: host 2 meets it.
        let p = plan(&d, 3, 1);
        assert_eq!(p.rounds, vec![vec![(2, 1)]]);
        // The suspects keep the diagnosis's order.
        assert_eq!(p.suspects[0].hosts, vec![0]);
    }

    #[test]
    fn confirmed_verdicts_fail_and_unconfirmed_ones_warn() {
        let mut d = Diagnosis::default();
        let p = Plan {
            suspects: vec![Suspect {
                kind: "nic".into(),
                hosts: vec![2],
                nic: None,
            }],
            rounds: vec![vec![(2, 3)], vec![(0, 1)]],
            left: 0,
            good: 2,
        };
        assert_eq!(status(&d, &p, 4), Status::Ok);
        d.verdicts.push(verdict(Kind::Direction, &[0, 1], false));
        assert_eq!(status(&d, &p, 4), Status::Warn);
        assert!(outcome(&d.verdicts[0], false).contains("no retest measured it"));
        // Measured again and not seen: not confirmed.
        d.verdicts[0].retested = true;
        assert!(outcome(&d.verdicts[0], false).contains("did not see it"));
        // Seen again, but only by each other: not confirmed.
        d.verdicts[0].seen_again = true;
        assert!(!p.confirms(&d.verdicts[0], &d, 4));
        assert_eq!(status(&d, &p, 4), Status::Warn);
        assert!(outcome(&d.verdicts[0], false).contains("not against a host judged good"));
        // Host 2 met host 3, judged good: confirmed.
        d.verdicts.push(verdict(Kind::Nic, &[2], true));
        assert!(p.confirms(&d.verdicts[1], &d, 4));
        assert_eq!(status(&d, &p, 4), Status::Fail);
        assert!(outcome(&d.verdicts[1], true).starts_with("confirmed"));
        assert_eq!(
            verdict_status(&verdict(Kind::Lost, &[3], false), false),
            Status::Fail
        );
        // Two ranks: a direction retested against itself stays a warning.
        let two = plan(
            &Diagnosis {
                verdicts: vec![verdict(Kind::Direction, &[0, 1], false)],
                notes: Vec::new(),
            },
            2,
            2,
        );
        assert_eq!(two.rounds, vec![vec![(0, 1)]]);
        let d2 = Diagnosis {
            verdicts: vec![verdict(Kind::Direction, &[0, 1], true)],
            notes: Vec::new(),
        };
        assert!(!two.confirms(&d2.verdicts[0], &d2, 2));
    }

    /// Every host a suspect of the first pass (4 ranks: a slow link and a
    /// noisy pair, as in the rig): the mildest suspects stand in for good
    /// hosts, and a meeting with one the retest cleared confirms.
    #[test]
    fn with_no_good_host_the_mildest_suspects_stand_in() {
        let mut slow = verdict(Kind::Link, &[1, 2], false);
        slow.numbers = BTreeMap::from([
            ("nic0_ab_gbps".into(), 0.006),
            ("nic0_median_gbps".into(), 0.1),
        ]);
        let mut noisy = verdict(Kind::Link, &[0, 3], false);
        noisy.numbers = BTreeMap::from([
            ("nic0_ab_gbps".into(), 0.03),
            ("nic0_median_gbps".into(), 0.1),
        ]);
        let first = Diagnosis {
            verdicts: vec![noisy, slow],
            notes: Vec::new(),
        };
        let p = plan(&first, 4, 2);
        assert_eq!(p.good, 0);
        // The worst suspect pair first, each end meeting one of the other pair.
        assert_eq!(p.rounds[0][0], (1, 2), "{:?}", p.rounds);
        let met = |h: usize| {
            p.rounds
                .iter()
                .flatten()
                .filter(|&&(a, b)| a == h || b == h)
                .count()
        };
        assert!(met(1) >= 2 && met(2) >= 2, "{:?}", p.rounds);
        // The retest cleared 0 <-> 3 and saw 1 <-> 2 again: confirmed.
        let last = Diagnosis {
            verdicts: vec![verdict(Kind::Link, &[1, 2], true)],
            notes: Vec::new(),
        };
        assert!(p.confirms(&last.verdicts[0], &last, 4), "{:?}", p.rounds);
        // Had it kept 0 <-> 3 too, 0 and 3 still measure 1 and 2 well: a
        // path verdict does not blame a host's NIC.
        let both = Diagnosis {
            verdicts: vec![
                verdict(Kind::Link, &[0, 3], true),
                verdict(Kind::Link, &[1, 2], true),
            ],
            notes: Vec::new(),
        };
        assert!(p.confirms(&both.verdicts[1], &both, 4));
        // Had it found 0's and 3's NICs slow, nothing vouches for 1 <-> 2.
        let hosts = Diagnosis {
            verdicts: vec![
                verdict(Kind::Nic, &[0], true),
                verdict(Kind::Host, &[3], true),
                verdict(Kind::Link, &[1, 2], true),
            ],
            notes: Vec::new(),
        };
        assert!(!p.confirms(&hosts.verdicts[2], &hosts, 4));
    }

    #[test]
    fn a_host_far_below_the_others_busbw_is_named() {
        let v = busbw_outliers(&[20.0, 20.4, 19.8, 12.0, 20.1]);
        assert_eq!(v.len(), 1);
        assert_eq!((v[0].kind, v[0].hosts.as_slice()), (Kind::Host, &[3][..]));
        assert!(v[0].why.contains("busbw 12.00 GB/s"), "{}", v[0].why);
        assert_eq!(v[0].numbers["nccl_median_busbw"], 20.0);
        // Within the spread, or two hosts only: nothing.
        assert!(busbw_outliers(&[20.0, 20.4, 19.8, 18.9]).is_empty());
        assert!(busbw_outliers(&[20.0, 5.0]).is_empty());
    }

    /// The retest's meetings follow the effect and the noise: a host 5%
    /// slow at 1.5% noise meets 4 good hosts, one at half speed 2 (the
    /// least), one 1% slow the most; the slowest NIC's need decides.
    #[test]
    fn a_mild_suspect_meets_more_good_hosts() {
        let with = |pairs: &[(&str, f64)]| {
            let mut v = verdict(Kind::Host, &[3], false);
            v.numbers = pairs.iter().map(|(k, x)| (k.to_string(), *x)).collect();
            meetings(&v)
        };
        let host = |nic: usize, send: f64, receive: f64, noise: f64| {
            [
                (format!("nic{nic}_send_effect"), send),
                (format!("nic{nic}_receive_effect"), receive),
                (format!("nic{nic}_noise"), noise),
            ]
        };
        let one = |s, r, n| {
            let h = host(0, s, r, n);
            with(&h.iter().map(|(k, x)| (k.as_str(), *x)).collect::<Vec<_>>())
        };
        assert_eq!(one(0.95, 0.95, 0.0154), 4);
        assert_eq!(
            one(0.95, 1.0, 0.0154),
            4,
            "one side slow: that side decides"
        );
        assert_eq!(one(0.5, 0.5, 0.0154), 2);
        assert_eq!(one(0.99, 0.99, 0.0154), MAX_MEETINGS);
        // Two NICs: the one that needs more.
        let mut both: Vec<(String, f64)> = host(0, 0.5, 0.5, 0.0154).to_vec();
        both.extend(host(1, 0.95, 0.95, 0.0154));
        let refs: Vec<(&str, f64)> = both.iter().map(|(k, x)| (k.as_str(), *x)).collect();
        assert_eq!(with(&refs), 4);
        // No fit numbers (a small cluster, or a verdict of the line per
        // cell): two, as before.
        assert_eq!(with(&[]), 2);
        let d = Diagnosis {
            verdicts: vec![{
                let mut v = verdict(Kind::Host, &[3], false);
                v.numbers = host(0, 0.95, 0.95, 0.0154).into_iter().collect();
                v
            }],
            notes: vec![],
        };
        assert_eq!(requests(&d), vec![(3, None); 4]);
    }
}
