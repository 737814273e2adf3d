//! `erdma-cluster --simulate` run as a user runs it (no mpirun): the
//! injected faults found at 16 and 1000 hosts, the JSON document's
//! verdicts and predicted wall time, bad specs refused with one line.
#![allow(clippy::disallowed_methods)] // a test reads and writes its files directly

use std::process::Command;

use serde_json::Value;

fn sim(args: &[&str]) -> (Option<i32>, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_erdma-cluster"))
        .arg("--simulate")
        .args(args)
        .output()
        .expect("run erdma-cluster");
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// (kind, hosts, nic) of every verdict.
fn verdicts(doc: &Value) -> Vec<(String, Vec<String>, Option<u64>)> {
    doc["verdicts"]
        .as_array()
        .expect("verdicts")
        .iter()
        .map(|v| {
            let hosts = v["hosts"].as_array().unwrap();
            (
                v["kind"].as_str().unwrap().to_owned(),
                hosts
                    .iter()
                    .map(|h| h.as_str().unwrap().to_owned())
                    .collect(),
                v["nic"].as_u64(),
            )
        })
        .collect()
}

fn v(kind: &str, hosts: &[&str], nic: Option<u64>) -> (String, Vec<String>, Option<u64>) {
    (
        kind.into(),
        hosts.iter().map(|h| h.to_string()).collect(),
        nic,
    )
}

#[test]
fn sixteen_hosts_every_fault_kind() {
    let (code, out, err) = sim(&[
        "16x2",
        "--json",
        "--inject",
        "host:h1:0.8",
        "nic:h2:1:0.8",
        "link:h3:h9:0.8",
        "direction:h10:h4:0.8",
        "flap:h11:h12",
        "dead:h5",
        "hang:h6",
    ]);
    assert_eq!(code, Some(0), "{out}{err}");
    let doc: Value = serde_json::from_str(&out).expect(&out);
    assert_eq!(
        verdicts(&doc),
        vec![
            v("lost", &["h5"], None),
            v("lost", &["h6"], None),
            v("host", &["h1"], None),
            v("nic", &["h2"], Some(1)),
            v("link", &["h3", "h9"], None),
            v("link", &["h11", "h12"], None),
            v("direction", &["h10", "h4"], None),
        ]
    );
    let flap = &doc["verdicts"][5]["why"];
    assert!(flap.as_str().unwrap().contains("flapping"), "{flap}");
    // The job's steps (issue 35): 15 rounds and up to 4 retest rounds,
    // each one step (both rails and both directions at once) of the
    // shortest run within the noise, 0.2 s + 0.3 s, -n 38147 of 64 KiB.
    let wall = doc["predicted_wall_s"].as_f64().unwrap();
    assert!((wall - 19.0 * 0.5).abs() < 1e-6, "{wall}");
    assert_eq!(doc["schedule"]["steps_per_round"], 1);
    assert_eq!(doc["schedule"]["rails_at_once"], true);
    assert_eq!(doc["schedule"]["iterations"], 38147);
    assert_eq!(doc["summary"]["false_verdicts"], 0);
    assert!(doc["retest"]["rounds"].as_u64().unwrap() >= 2);
    // The job's own driver on the model predicts the same and runs one
    // step a round: its simulated pair wall is at most the prediction.
    let (code, out, err) = sim(&["16x2", "--as-job", "--json", "--inject", "link:h3:h9:0.8"]);
    assert_eq!(code, Some(2), "{out}{err}");
    let job: Value = serde_json::from_str(out.trim()).expect(&out);
    assert_eq!(job["predicted_wall_s"].as_f64(), Some(wall));
    assert!(
        job["pair_wall_s"].as_f64().unwrap() <= wall + 1e-9,
        "{}",
        job["pair_wall_s"]
    );
    let s = job["schedule"].as_str().unwrap();
    assert!(
        s.contains("1 step each (rails at once) of 0.20 s runs"),
        "{s}"
    );
    // The schedule before issue 35's: each of 2 rails x 2 directions its
    // own step, -n given (2 s assumed).
    let (code, out, err) = sim(&[
        "16x2",
        "--json",
        "--rails-serial",
        "--directions-serial",
        "--perf-args",
        "-n 5000",
    ]);
    assert_eq!(code, Some(0), "{out}{err}");
    let doc: Value = serde_json::from_str(&out).expect(&out);
    let wall = doc["predicted_wall_s"].as_f64().unwrap();
    assert!((wall - 19.0 * 4.0 * 2.3).abs() < 1e-6, "{wall}");
    assert_eq!(doc["schedule"]["steps_per_round"], 4);
    assert_eq!(doc["schedule"]["iterations"], Value::Null);
}

#[test]
fn a_thousand_hosts_in_one_run() {
    let (code, out, err) = sim(&[
        "1000",
        "--seed",
        "7",
        "--inject",
        "host:h17:0.8",
        "link:h3:h9:0.8",
        "direction:h100:h200:0.8",
        "dead:h999",
    ]);
    assert_eq!(code, Some(0), "{out}{err}");
    for line in [
        "found   host:h17:0.8: host h17\n",
        "found   link:h3:h9:0.8: link h3 h9\n",
        "found   direction:h100:h200:0.8: direction h100 h200\n",
        "found   dead:h999: lost h999\n",
        "# result: 4 of 4 injected faults found and classified right, 0 false verdicts",
        "999 rounds + at most 10 retest rounds, 1 step each of 0.20 s runs (chosen by the job",
    ] {
        assert!(out.contains(line), "{line}\n{out}");
    }
}

#[test]
fn the_budget_picks_shorter_runs_and_prints_the_time() {
    let (code, out, err) = sim(&[
        "200",
        "--budget",
        "2",
        "--json",
        "--inject",
        "link:h3:h9:0.8",
    ]);
    assert_eq!(code, Some(0), "{out}{err}");
    let doc: Value = serde_json::from_str(&out).expect(&out);
    assert!(doc["predicted_wall_s"].as_f64().unwrap() <= 120.0);
    assert_eq!(verdicts(&doc), vec![v("link", &["h3", "h9"], None)]);
    let (code, _, err) = sim(&["1000", "--budget", "0.05"]);
    assert_eq!(code, Some(3));
    assert!(err.contains("give a larger budget"), "{err}");
}

#[test]
fn a_missed_fault_is_exit_2() {
    // 2% slower is inside the noise: not found, and the status says so.
    let (code, out, _) = sim(&["16", "--inject", "link:h3:h9:0.98"]);
    assert_eq!(code, Some(2), "{out}");
    assert!(out.contains("missed  link:h3:h9:0.98"), "{out}");
}

#[test]
fn bad_specs_are_one_line_and_exit_3() {
    for (args, says) in [
        (
            &["16", "--inject", "host:h16:0.8"][..],
            "--inject host:h16:0.8: 'h16' is not a host",
        ),
        (
            &["16", "--inject", "link:h1:0.8"][..],
            "expected link:HOST:HOST:FACTOR",
        ),
        (
            &["16", "--inject", "wobble:h1"][..],
            "no fault kind 'wobble'",
        ),
        (&["1x2"][..], "--simulate 1x2: expected HOSTS[xNICS]"),
        (&["16", "--noise", "90%"][..], "a fraction from 0 to 0.5"),
    ] {
        let (code, out, err) = sim(args);
        assert_eq!(code, Some(3), "{args:?}: {out}{err}");
        assert!(out.is_empty(), "{out}");
        assert!(err.contains(says), "{args:?}: {err}");
        if !says.contains("fraction") {
            assert_eq!(err.lines().count(), 1, "{err}");
        }
    }
}

#[test]
fn rank_zero_report_of_the_simulated_documents() {
    let dir = std::env::temp_dir().join(format!("erdma-cluster-sim-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let (code, out, err) = sim(&[
        "16",
        "--documents",
        "--json",
        "--out",
        dir.to_str().unwrap(),
        "--inject",
        "link:h1:h2:0.8",
    ]);
    assert_eq!(code, Some(0), "{out}{err}");
    let doc: Value = serde_json::from_str(&out).expect(&out);
    let g = &doc["documents"];
    assert_eq!(g["documents"], 16, "{g}");
    assert!(g["document_bytes"].as_u64().unwrap() > 500, "{g}");
    assert_eq!(g["written"], true);
    // The real job's files: a doctor document per host and cluster.json,
    // whose verdicts (one run per cell, the first NIC) name the link.
    assert!(dir.join("doctor-h15.json").is_file());
    let whole: Value =
        serde_json::from_slice(&std::fs::read(dir.join("cluster.json")).unwrap()).unwrap();
    assert_eq!(
        whole["verdicts"][0]["kind"], "link",
        "{}",
        whole["verdicts"]
    );
    assert_eq!(
        whole["verdicts"][0]["hosts"],
        serde_json::json!(["h1", "h2"])
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn shuffled_faults_are_found_wherever_they_sit() {
    let (code, out, err) = sim(&[
        "24x2",
        "--shuffle",
        "--clusters",
        "4",
        "--json",
        "--inject",
        "host:h1:0.8",
        "nic:h2:0:0.8",
        "direction:h3:h4:0.8",
        "dead:h5",
    ]);
    assert_eq!(code, Some(0), "{out}{err}");
    let doc: Value = serde_json::from_str(&out).expect(&out);
    assert_eq!(doc["summary"]["exact"], 4, "{}", doc["summary"]);
    // The first cluster's verdicts name the drawn hosts, not h1 ... h5.
    let named: Vec<(String, Vec<String>, Option<u64>)> = verdicts(&doc);
    assert_eq!(named.len(), 4, "{named:?}");
    assert_ne!(
        named.iter().map(|v| v.1.clone()).collect::<Vec<_>>(),
        vec![
            vec!["h5".to_string()],
            vec!["h1".into()],
            vec!["h2".into()],
            vec!["h3".into(), "h4".into()]
        ]
    );
}

#[test]
fn cells_a_random_schedule_left_out_are_not_measured_not_failed() {
    // 32 hosts in 16 s, the job's 2 s runs: one round of random pairings
    // (8 partners each) and 5 retest rounds fit, leaving most of the 992
    // cells out.
    let dir = std::env::temp_dir().join(format!("erdma-cluster-sim-nm-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let (code, out, err) = sim(&[
        "32",
        "--budget",
        "0.27",
        "--perf-args",
        "-n 5000",
        "--documents",
        "--out",
        dir.to_str().unwrap(),
        "--inject",
        "host:h1:0.5",
    ]);
    assert_eq!(code, Some(0), "{out}{err}");
    assert!(out.contains("random pairings"), "{out}");
    let whole: Value =
        serde_json::from_slice(&std::fs::read(dir.join("cluster.json")).unwrap()).unwrap();
    let p = &whole["pairs"];
    assert_eq!(p["status"], "ok", "no cell failed: {}", p["not_measured"]);
    let left: Vec<(u64, u64)> = p["not_measured"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| (c[0].as_u64().unwrap(), c[1].as_u64().unwrap()))
        .collect();
    assert!(left.len() > 300 && left.len() < 992, "{}", left.len());
    for &(c, s) in &left {
        assert!(p["gbps"][c as usize][s as usize].is_null(), "{c} -> {s}");
    }
    let measured = (0..32)
        .flat_map(|c| (0..32).map(move |s| (c, s)))
        .filter(|&(c, s)| p["gbps"][c][s].is_f64())
        .count();
    assert_eq!(
        measured + left.len(),
        32 * 31,
        "every cell measured or left out"
    );
    assert_eq!(whole["verdicts"][0]["hosts"], serde_json::json!(["h1"]));
    let html = std::fs::read_to_string(dir.join("report.html")).unwrap();
    assert_eq!(
        html.matches("class=\"cell unmeasured\"").count(),
        left.len()
    );
    assert!(!html.contains("class=\"cell failed\""), "no failed cell");
    std::fs::remove_dir_all(&dir).unwrap();
}
