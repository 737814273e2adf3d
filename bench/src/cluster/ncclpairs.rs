//! The NCCL pairs (`--nccl-pairs`): the hosts meet in pairs by the pair
//! stage's schedule and budget (the same [`super::steps::JobPlan`], round
//! by round, through [`super::job::pair_stage`]) and run all_reduce
//! between the two hosts over communicators split per round
//! (MPI_Comm_split: one color per pair, all pairs of a round at once).
//! With GPUs the collectives run on NCCL, without them on the MPI backend
//! ([`super::nccl::plan`] decides, and the report says which). Each pair's
//! busbw at the largest size becomes both directions of the pair's cells
//! on a rail of its own, named `nccl` ([`RAIL`]), judged by the same
//! diagnosis and shown in the same heatmap as the NIC pairs.
//!
//! The MPI part (the split runs, gathering them on rank 0) is the
//! binary's; this module turns a round into split runs and a run into
//! the pair stage's [`PairRun`]s.

use serde_json::{Value, json};

use super::pairs::PairRun;
use super::steps::Round;

/// The rail index of the NCCL pairs in the matrix ([`super::pairs::NCCL_RAIL`]).
pub const RAIL: usize = super::pairs::NCCL_RAIL;

/// The device name each rank has on the [`RAIL`]: the rail's name.
pub const DEVICE: &str = "nccl";

/// The collective each pair runs ([`super::pairs::NCCL_TEST`]).
pub const TEST: &str = super::pairs::NCCL_TEST;

/// How many Gb/s one GB/s of busbw is in the matrix (its unit is Gb/s).
pub const GBPS_PER_GBYTES: f64 = 8.0;

/// The runs of one round as split runs: every pair the round's flows meet
/// once (lower rank first, either direction meets it), in matchings, so
/// that each rank is in at most one pair of a run (a `--budget` round may
/// give a rank several partners: they run one after another).
pub fn matchings(round: &Round) -> Vec<Vec<(usize, usize)>> {
    let mut pairs: Vec<(usize, usize)> = round
        .iter()
        .flatten()
        .filter(|f| f.client != f.server)
        .map(|f| (f.client.min(f.server), f.client.max(f.server)))
        .collect();
    pairs.sort_unstable();
    pairs.dedup();
    let mut out: Vec<Vec<(usize, usize)>> = Vec::new();
    for p in pairs {
        let free = |m: &Vec<(usize, usize)>| {
            m.iter()
                .all(|&(a, b)| a != p.0 && a != p.1 && b != p.0 && b != p.1)
        };
        match out.iter_mut().find(|m| free(m)) {
            Some(m) => m.push(p),
            None => out.push(vec![p]),
        }
    }
    out
}

/// Each of `n` ranks' color in the split run of `matching`: its pair's
/// index; a rank in no pair gets a color of its own (a communicator of one,
/// whose run moves nothing and is not reported): MPI_Comm_split is
/// collective, so every rank takes part.
pub fn colors(matching: &[(usize, usize)], n: usize) -> Vec<i32> {
    (0..n)
        .map(|r| {
            let at = matching.iter().position(|&(a, b)| a == r || b == r);
            at.unwrap_or(matching.len() + r) as i32
        })
        .collect()
}

/// The busbw (GB/s) at the largest size of a -J document.
pub fn busbw(doc: &Value) -> Option<f64> {
    super::nccl::rows(doc)
        .iter()
        .max_by_key(|r| r["size"].as_u64().unwrap_or(0))?["busbw"]
        .as_f64()
}

/// The number of wrong elements the data check found in `doc` (none when
/// it did not check).
fn wrong(doc: &Value) -> Option<u64> {
    let rows = super::nccl::rows(doc);
    if rows.is_empty() || rows.iter().any(|r| r["wrong"].is_null()) {
        return None;
    }
    Some(rows.iter().filter_map(|r| r["wrong"].as_u64()).sum())
}

/// One rank's share of a pair's split run, as [`PairRun`]s: the pair's
/// lower rank (its communicator's first, which has the -J document `doc`)
/// reports both directions as client sides, each with the pair's busbw x
/// [`GBPS_PER_GBYTES`]; the higher rank reports both as server sides.
/// `code`: the run's exit status on this rank, `error` why it failed;
/// `rerun`: the command that runs the pair again.
pub fn runs_of(
    me: usize,
    pair: (usize, usize),
    code: i32,
    error: Option<String>,
    doc: Option<Value>,
    rerun: &str,
) -> Vec<PairRun> {
    let (a, b) = pair;
    let first = me == a;
    let doc = doc.filter(|_| first).unwrap_or(Value::Null);
    let bad = wrong(&doc).filter(|w| *w > 0);
    let mut error = error;
    if error.is_none() && first && busbw(&doc).is_none() {
        error = Some(format!(
            "exit {code}: the run wrote no busbw: run the pair again alone ({rerun})"
        ));
    }
    if error.is_none()
        && let Some(w) = bad
    {
        error = Some(format!("{w} wrong element(s) in the data check"));
    }
    let gbps = busbw(&doc)
        .filter(|_| error.is_none())
        .map(|g| g * GBPS_PER_GBYTES);
    let checked = first && wrong(&doc) == Some(0) && error.is_none();
    [(a, b), (b, a)]
        .into_iter()
        .map(|(client, server)| PairRun {
            client,
            server,
            role: if first { "client" } else { "server" }.into(),
            gbps: if first { gbps } else { None },
            error: error.clone(),
            // The document once, with the first direction.
            doc: if first && client == a {
                doc.clone()
            } else {
                Value::Null
            },
            rail: Some(RAIL),
            client_device: Some(DEVICE.into()),
            server_device: Some(DEVICE.into()),
            verified: checked,
            corrupt: bad.is_some(),
            rerun: rerun.to_owned(),
            share: 1,
        })
        .collect()
}

/// The command that runs pair (`a`, `b`) again alone: the benchmark's
/// `argv` on the two ranks' hosts.
pub fn rerun(a: usize, b: usize, hosts: &[String], argv: &[String]) -> String {
    let host = |r: usize| hosts.get(r).map_or("?", String::as_str);
    let argv: Vec<&str> = argv
        .iter()
        .map(String::as_str)
        .take_while(|w| *w != "-J")
        .collect();
    format!(
        "ranks {a} and {b}: mpirun -np 2 --host {},{} {}",
        host(a),
        host(b),
        argv.join(" ")
    )
}

/// Each rank's NIC runs followed by its NCCL pair runs (index = rank, each
/// a JSON array): the matrix of both, the NCCL pairs on their own rail. A
/// rank whose bytes are not a JSON array keeps them (the matrix then names
/// the rank).
pub fn join(nics: Option<&[Vec<u8>]>, nccl: &[Vec<u8>]) -> Vec<Vec<u8>> {
    let Some(nics) = nics else {
        return nccl.to_vec();
    };
    let n = nics.len().max(nccl.len());
    (0..n)
        .map(|i| {
            let get = |v: &[Vec<u8>]| -> Result<Vec<Value>, Vec<u8>> {
                match v.get(i) {
                    None => Ok(Vec::new()),
                    Some(b) => match serde_json::from_slice::<Value>(b) {
                        Ok(Value::Array(a)) => Ok(a),
                        _ => Err(b.clone()),
                    },
                }
            };
            match (get(nics), get(nccl)) {
                (Ok(mut x), Ok(y)) => {
                    x.extend(y);
                    Value::Array(x).to_string().into_bytes()
                }
                (Err(b), _) | (_, Err(b)) => b,
            }
        })
        .collect()
}

/// The `nccl_pairs` object of the cluster's JSON document: the
/// collective, which library ran it and why, and the rail it is on.
pub fn describe(plan: &super::nccl::Plan) -> Value {
    json!({"collective": TEST, "backend": plan.backend, "gpus_per_rank": plan.gpus,
           "why": plan.why, "rail": RAIL, "rail_name": DEVICE,
           "unit": "Gb/s (busbw GB/s x 8)"})
}

/// The diagnosis's words for NIC `k` (the matrix's rail index of the
/// NCCL pairs) as the rail's name: `NIC k:` becomes `rail nccl:`.
pub fn name_rail(d: &mut super::diagnose::Diagnosis, k: usize) {
    let from = format!("NIC {k}:");
    let to = format!("rail {DEVICE}:");
    for v in &mut d.verdicts {
        v.why = v.why.replace(&from, &to);
    }
    for n in &mut d.notes {
        *n = n.replace(&from, &to);
    }
}

/// The schedule line of the NCCL pairs: the pair stage's rounds, each one
/// split run of all_reduce (every pair of the round at once; a rank with
/// several partners in a `--budget` round runs them one after another).
pub fn schedule_line(jp: &super::steps::JobPlan) -> String {
    let p = &jp.plan;
    let runs = main_runs(jp);
    format!(
        "{} rounds + at most {} retest rounds of the pair stage's schedule ({} partner{} per \
         round), {runs} split all_reduce run{} in the main rounds, every pair of a run at once: \
         predicted wall {:.0} s at an assumed {:.2} s per run + {:.2} s overhead",
        p.rounds,
        p.retest_rounds,
        p.partners,
        if p.partners == 1 { "" } else { "s" },
        if runs == 1 { "" } else { "s" },
        predicted_wall_s(jp),
        p.run_s,
        jp.model.overhead_s,
    )
}

/// The split runs of the main rounds.
fn main_runs(jp: &super::steps::JobPlan) -> usize {
    jp.rounds().iter().map(|r| matchings(r).len()).sum()
}

/// Predicted seconds of the NCCL pairs: each split run of the main rounds
/// and of the most retest rounds (one run each) at the schedule's run
/// length and overhead.
pub fn predicted_wall_s(jp: &super::steps::JobPlan) -> f64 {
    let runs = main_runs(jp) + jp.plan.retest_rounds;
    runs as f64 * jp.model.round_s(jp.plan.run_s)
}

/// The schedule as the report shows it (as [`super::job::schedule_json`]
/// does for the NIC pairs), `pair_wall_s` measured.
pub fn schedule_json(jp: &super::steps::JobPlan, pair_wall_s: f64) -> Value {
    json!({"schedule": schedule_line(jp), "predicted_wall_s": predicted_wall_s(jp),
           "pair_wall_s": pair_wall_s})
}

/// The line the text report gives the NCCL pairs.
pub fn describe_text(v: &Value) -> String {
    format!(
        "# NCCL pairs: {} between every pair the schedule meets, busbw at the largest size x 8 \
         in Gb/s on rail \"{}\"; {}\n",
        v["collective"].as_str().unwrap_or(TEST),
        DEVICE,
        v["why"].as_str().unwrap_or("")
    )
}

#[cfg(test)]
mod tests {
    use super::super::steps::{self, Flow};
    use super::*;

    fn flow(client: usize, server: usize) -> Flow {
        Flow {
            client,
            server,
            ci: 0,
            si: 0,
        }
    }

    #[test]
    fn a_round_becomes_matchings_of_its_pairs() {
        // Today's schedule: each direction its own step, one partner.
        let r = steps::round_steps(
            &[(0, 1), (1, 0), (2, 3), (3, 2)],
            &[(0, 0)],
            steps::Layout::SERIAL,
        );
        assert_eq!(matchings(&r), vec![vec![(0, 1), (2, 3)]]);
        // Two partners per round (a budget's): two matchings.
        let r: Round = vec![vec![flow(0, 1), flow(1, 2), flow(2, 3), flow(3, 0)]];
        let m = matchings(&r);
        assert_eq!(m, vec![vec![(0, 1), (2, 3)], vec![(0, 3), (1, 2)]]);
        for one in &m {
            let mut seen: Vec<usize> = one.iter().flat_map(|&(a, b)| [a, b]).collect();
            seen.sort_unstable();
            seen.dedup();
            assert_eq!(seen.len(), 2 * one.len(), "a rank twice in {one:?}");
        }
        assert!(matchings(&Vec::new()).is_empty());
    }

    #[test]
    fn the_schedule_is_the_pair_stages_one_run_per_round() {
        // 4 hosts, the full matrix: 3 rounds, one split run each.
        let jp = steps::JobPlan::full(
            4,
            vec![(0, 0)],
            steps::RunSource::Duration(2.0),
            steps::Layout::SERIAL,
        );
        let line = schedule_line(&jp);
        assert!(line.starts_with("3 rounds + at most"), "{line}");
        assert!(line.contains("3 split all_reduce runs"), "{line}");
        let per = jp.model.round_s(2.0);
        assert_eq!(
            predicted_wall_s(&jp),
            (3 + jp.plan.retest_rounds) as f64 * per
        );
        // 5 hosts: 5 rounds, each leaves one host out.
        assert_eq!(
            main_runs(&steps::JobPlan::full(
                5,
                vec![(0, 0)],
                steps::RunSource::Assumed,
                steps::Layout::SERIAL
            )),
            5
        );
    }

    #[test]
    fn every_rank_gets_a_color_the_idle_one_its_own() {
        let c = colors(&[(0, 2), (1, 3)], 5);
        assert_eq!(c, vec![0, 1, 0, 1, 6]);
    }

    fn doc(busbw: f64, wrong: u64) -> Value {
        json!({"results": [
            {"size": 1024, "count": 256, "type": "float",
             "out_of_place": {"alg_bw": 0.1, "bus_bw": 0.1, "time": 10.0, "nwrong": 0}},
            {"size": 1048576, "count": 262144, "type": "float",
             "out_of_place": {"alg_bw": busbw, "bus_bw": busbw, "time": 100.0, "nwrong": wrong}},
        ]})
    }

    #[test]
    fn the_pairs_first_rank_reports_both_directions() {
        let runs = runs_of(1, (1, 3), 0, None, Some(doc(2.5, 0)), "again");
        assert_eq!(runs.len(), 2);
        assert_eq!((runs[0].client, runs[0].server), (1, 3));
        assert_eq!((runs[1].client, runs[1].server), (3, 1));
        for r in &runs {
            assert_eq!(r.role, "client");
            assert_eq!(r.gbps, Some(20.0));
            assert_eq!(r.rail, Some(RAIL));
            assert_eq!(r.client_device.as_deref(), Some("nccl"));
            assert!(r.verified && !r.corrupt && r.error.is_none());
        }
        assert!(!runs[0].doc.is_null() && runs[1].doc.is_null());
        // The other rank: server sides, no number of its own.
        let other = runs_of(3, (1, 3), 0, None, None, "again");
        assert!(other.iter().all(|r| r.role == "server" && r.gbps.is_none()));
        assert!(other.iter().all(|r| r.error.is_none()));
    }

    #[test]
    fn a_failed_or_wrong_run_has_no_number() {
        let e = Some("exit 4: timeout".to_owned());
        let runs = runs_of(0, (0, 1), 4, e, Some(doc(2.5, 0)), "again");
        assert!(runs.iter().all(|r| r.gbps.is_none()));
        assert_eq!(runs[0].error.as_deref(), Some("exit 4: timeout"));
        let runs = runs_of(0, (0, 1), 0, None, Some(doc(2.5, 3)), "again");
        assert!(runs.iter().all(|r| r.gbps.is_none() && r.corrupt));
        assert_eq!(
            runs[0].error.as_deref(),
            Some("3 wrong element(s) in the data check")
        );
        let runs = runs_of(0, (0, 1), 0, None, None, "again");
        assert!(runs[0].error.as_deref().unwrap().contains("no busbw"));
    }

    #[test]
    fn the_matrix_reads_the_pairs_on_the_nccl_rail() {
        let run = |me: usize, p: (usize, usize), g: f64| {
            let v: Vec<Value> = runs_of(me, p, 0, None, Some(doc(g, 0)), "x")
                .iter()
                .map(PairRun::to_json)
                .collect();
            v
        };
        let mut per = vec![Vec::new(); 3];
        per[0].extend(run(0, (0, 1), 1.0));
        per[1].extend(run(1, (0, 1), 1.0));
        per[0].extend(run(0, (0, 2), 2.0));
        per[1].extend(run(1, (1, 2), 3.0));
        let nccl: Vec<Vec<u8>> = per
            .iter()
            .map(|v| Value::Array(v.clone()).to_string().into_bytes())
            .collect();
        // With NIC runs on rail 0 before them.
        let nic = json!([{"client": 0, "server": 1, "role": "client", "gbps": 90.0, "rail": 0}]);
        let nics = vec![nic.to_string().into_bytes(), b"[]".to_vec(), b"[]".to_vec()];
        let m =
            super::super::pairs::Matrix::from_ranks("write_bw", &join(Some(&nics), &nccl)).unwrap();
        assert_eq!(m.rails.len(), 2);
        assert_eq!(m.gbps[0][1], Some(90.0));
        let r = &m.rails[1];
        assert_eq!(r.rail, RAIL);
        assert_eq!(r.gbps[0][1], Some(8.0));
        assert_eq!(r.gbps[1][0], Some(8.0));
        assert_eq!(r.gbps[2][0], Some(16.0));
        assert_eq!(r.gbps[1][2], Some(24.0));
        // Garbage from a rank is kept for the matrix to name.
        let bad = join(
            Some(&nics),
            &[b"[]".to_vec(), b"{".to_vec(), b"[]".to_vec()],
        );
        assert_eq!(bad[1], b"{");
        assert_eq!(join(None, &nccl), nccl);
    }

    #[test]
    fn the_rerun_names_both_hosts_and_drops_the_document() {
        let argv: Vec<String> = ["all_reduce_perf", "-b", "1M", "-J", "/tmp/x.json"]
            .iter()
            .map(|s| s.to_string())
            .collect();
        let hosts = vec!["a".to_owned(), "b".to_owned()];
        assert_eq!(
            rerun(0, 1, &hosts, &argv),
            "ranks 0 and 1: mpirun -np 2 --host a,b all_reduce_perf -b 1M"
        );
    }
}
