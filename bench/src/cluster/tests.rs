//! The cluster report from real erdma-doctor documents of fake hosts.

use super::*;
use crate::doctor::{self, testing::FakeHost};

fn meta(host: &str) -> RunMeta {
    RunMeta {
        tool: "erdma-doctor".into(),
        version: "0.1.0".into(),
        host: host.into(),
        date: "2026-12-03T19:00:00Z".into(),
        command: vec!["erdma-cluster".into()],
    }
}

/// The bytes a rank sends: its erdma-doctor document.
fn doc(host: &str, h: &FakeHost) -> Vec<u8> {
    doctor::render_json(&meta(host), &doctor::evaluate(h, &[]))
        .to_string()
        .into_bytes()
}

fn good() -> FakeHost {
    let mut h = FakeHost::erdma_gpu();
    h.nccl = Ok(crate::doctor::host::NcclLibrary {
        version: "2.28.3".into(),
        path: "libnccl.so.2".into(),
    });
    h
}

fn run(raw: &[Vec<u8>], a: &[&str]) -> (i32, String, String) {
    let args =
        Args::try_parse_from(std::iter::once("erdma-cluster").chain(a.iter().copied())).unwrap();
    let (mut o, mut e) = (Vec::new(), Vec::new());
    let code = report(&args, &meta("h0"), raw, None, &mut o, &mut e);
    (
        code,
        String::from_utf8(o).unwrap(),
        String::from_utf8(e).unwrap(),
    )
}

#[test]
fn a_bare_host_among_good_ones_is_named_with_its_fixes() {
    let g = good();
    let raw = vec![doc("h0", &g), doc("h1", &FakeHost::bare()), doc("h2", &g)];
    let (code, out, err) = run(&raw, &[]);
    assert_eq!(code, EXIT_FAIL, "{out}{err}");
    assert!(out.contains("erdma-doctor on 3 hosts (3 ranks)"), "{out}");
    let row = |h: &str| out.lines().find(|l| l.starts_with(h)).unwrap().to_owned();
    assert!(row("h1 ").contains("fail"), "{out}");
    assert!(!row("h0 ").contains("fail"), "{out}");
    // One line per failing check, naming only the bare host, then its fix.
    let devices = out
        .lines()
        .position(|l| l.starts_with("fail  rdma.devices"))
        .expect(&out);
    assert!(
        out.lines().nth(devices).unwrap().contains("1/3 (h1)"),
        "{out}"
    );
    assert!(
        out.lines()
            .nth(devices + 1)
            .unwrap()
            .trim_start()
            .starts_with("fix: "),
        "{out}"
    );
    assert!(out.ends_with("# result: fail (exit 2)\n"), "{out}");
}

#[test]
fn alike_good_hosts_pass() {
    let g = good();
    let raw = vec![doc("h0", &g), doc("h1", &g)];
    let reports = parse_reports(&raw).unwrap();
    assert!(
        cross_checks(&reports).is_empty(),
        "{:?}",
        cross_checks(&reports)
    );
    let (code, out, _) = run(&raw, &[]);
    // The fake host's worst is what erdma-doctor says of it alone.
    let alone = reports[0].status().exit_code();
    assert_eq!(code, alone, "{out}");
    assert!(!out.contains("differences between the hosts"), "{out}");
}

#[test]
fn ranks_sharing_a_host_are_a_warning_and_get_rank_labels() {
    let g = good();
    let raw = vec![doc("h0", &g), doc("h0", &g), doc("h1", &g)];
    let reports = parse_reports(&raw).unwrap();
    let labels: Vec<String> = reports.iter().map(HostReport::label).collect();
    assert_eq!(labels, ["h0 (rank 0)", "h0 (rank 1)", "h1"]);
    let across = cross_checks(&reports);
    assert_eq!(across.len(), 1, "{across:?}");
    assert_eq!(across[0].id, "cluster.one-rank-per-host");
    assert!(across[0].found.contains("h0: ranks 0,1"), "{:?}", across[0]);
    assert!(across[0].fix.contains("--map-by ppr:1:node"));
    assert!(worst(&reports, &across) >= Status::Warn);
    assert_eq!(
        file_names(&reports),
        [
            "doctor-h0-rank0.json",
            "doctor-h0-rank1.json",
            "doctor-h1.json"
        ]
    );
}

#[test]
fn differing_nccl_versions_and_env_are_named_per_host() {
    let g = good();
    let mut old = good();
    old.nccl = Ok(crate::doctor::host::NcclLibrary {
        version: "2.19.3".into(),
        path: "libnccl.so.2".into(),
    });
    let mut raw = vec![doc("h0", &g), doc("h1", &old), doc("h2", &g)];
    // h2 recommends another GID index (another image or kernel).
    let mut d: Value = serde_json::from_slice(&raw[2]).unwrap();
    for e in d["recommended"]["env"].as_array_mut().unwrap() {
        if e["name"] == "NCCL_IB_GID_INDEX" {
            e["value"] = json!("3");
        }
    }
    raw[2] = d.to_string().into_bytes();
    let across = cross_checks(&parse_reports(&raw).unwrap());
    let nccl = across
        .iter()
        .find(|p| p.found.starts_with("NCCL differs"))
        .expect("NCCL version");
    assert_eq!(nccl.found, "NCCL differs: 2.19.3 on h1; 2.28.3 on h0, h2");
    let gid = across
        .iter()
        .find(|p| p.id == "cluster.nccl-env")
        .expect("GID index");
    assert!(
        gid.found.starts_with("NCCL_IB_GID_INDEX differs: "),
        "{gid:?}"
    );
    assert!(gid.found.contains("3 on h2"), "{gid:?}");
    let (code, out, _) = run(&raw, &[]);
    assert!(code >= EXIT_WARN, "{out}");
    assert!(
        out.contains("# differences between the hosts\nwarn  cluster.versions"),
        "{out}"
    );
}

#[test]
fn json_holds_every_report_and_the_problems() {
    let raw = vec![doc("h0", &good()), doc("h1", &FakeHost::bare())];
    let (code, out, _) = run(&raw, &["--json"]);
    assert_eq!(code, EXIT_FAIL);
    let v: Value = serde_json::from_str(out.trim()).unwrap();
    assert_eq!(v["tool"], "erdma-doctor"); // the meta given to report()
    assert_eq!(v["exit_status"], 2);
    assert_eq!(v["hosts"].as_array().unwrap().len(), 2);
    assert_eq!(v["reports"][1]["host"], "h1");
    let p = v["problems"].as_array().unwrap();
    assert!(
        p.iter()
            .any(|p| p["id"] == "rdma.devices" && p["hosts"] == json!(["h1"])),
        "{p:?}"
    );
}

#[test]
fn out_writes_one_file_per_host_and_the_whole() {
    let dir = std::env::temp_dir().join(format!("erdma-cluster-test-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let raw = vec![doc("h0", &good()), doc("../evil/h1", &good())];
    let (_, _, err) = run(&raw, &["--out", dir.to_str().unwrap()]);
    assert_eq!(err, "");
    let mut names: Vec<String> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    names.sort();
    assert_eq!(
        names,
        [
            "cluster.json",
            "doctor-_evil_h1.json",
            "doctor-h0.json",
            "report.html"
        ]
    );
    let whole: Value =
        serde_json::from_slice(&std::fs::read(dir.join("cluster.json")).unwrap()).unwrap();
    assert_eq!(whole["reports"].as_array().unwrap().len(), 2);
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn an_unwritable_out_dir_is_exit_4() {
    let raw = vec![doc("h0", &good())];
    let (code, _, err) = run(&raw, &["--out", "/proc/erdma-cluster-no"]);
    assert_eq!(code, EXIT_OUTPUT);
    assert!(
        err.starts_with("erdma-cluster: writing /proc/erdma-cluster-no"),
        "{err}"
    );
}

#[test]
fn control_characters_in_host_names_are_escaped_in_the_text() {
    // Issue 33 row 10: ESC, BEL, CR (and a direction override) in a host
    // name reached the terminal raw.
    let evil = "n\u{1b}]0;owned\u{7}\rx\u{202e}";
    let raw = vec![doc("h0", &good()), doc(evil, &good())];
    let (_, out, _) = run(&raw, &[]);
    assert!(
        !out.contains(['\u{1b}', '\u{7}', '\r', '\u{202e}']),
        "{out:?}"
    );
    assert!(
        out.contains("n\\u{1b}]0;owned\\u{7}\\u{d}x\\u{202e}"),
        "{out}"
    );
    assert_eq!(crate::cli::terminal_safe("a\tb\nc"), "a\tb\nc");
}

#[test]
fn launcher_variables_must_agree_with_mpi() {
    let env = |pairs: &'static [(&'static str, &'static str)]| {
        move |k: &str| {
            pairs
                .iter()
                .find(|(n, _)| *n == k)
                .map(|(_, v)| v.to_string())
        }
    };
    let said = launch_said(&env(&[("RANK", "1"), ("WORLD_SIZE", "2")]));
    let e = launch_disagrees(said.as_ref(), 0, 1).unwrap();
    assert_eq!(
        e,
        "the environment says rank \"1\" of \"2\" (RANK/WORLD_SIZE) but MPI says rank 0 of 1: start erdma-cluster with mpirun or srun --mpi=pmix, and unset RANK/WORLD_SIZE"
    );
    assert_eq!(launch_disagrees(said.as_ref(), 1, 2), None);
    // Open MPI's variables come before Slurm's (mpirun inside an allocation).
    let said = launch_said(&env(&[
        ("SLURM_PROCID", "0"),
        ("SLURM_NTASKS", "4"),
        ("OMPI_COMM_WORLD_RANK", "3"),
        ("OMPI_COMM_WORLD_SIZE", "8"),
    ]));
    assert_eq!(launch_disagrees(said.as_ref(), 3, 8), None);
    let said = launch_said(&env(&[("SLURM_PROCID", "2"), ("SLURM_NTASKS", "4")]));
    assert!(
        launch_disagrees(said.as_ref(), 0, 1)
            .unwrap()
            .contains("(SLURM_PROCID/SLURM_NTASKS)")
    );
    let said = launch_said(&env(&[("WORLD_SIZE", "2")]));
    assert!(
        launch_disagrees(said.as_ref(), 0, 1)
            .unwrap()
            .contains("rank \"\" of \"2\"")
    );
    assert_eq!(launch_said(&env(&[("SLURM_PROCID", "0")])), None);
    assert_eq!(launch_disagrees(None, 0, 1), None);
}

#[test]
fn hosts_whose_names_reduce_alike_get_files_of_their_own() {
    // Issue 33 row 8: names differing in odd characters shared a file.
    assert_eq!(
        unique_labels(
            vec!["node1_a".into(), "node1_a".into(), "b".into(), "".into()],
            |i| format!("rank{i}")
        ),
        ["node1_a-rank0", "node1_a-rank1", "b", "rank3-3"]
    );
    // A host named like another's rank label.
    let l = unique_labels(vec!["x-rank1".into(), "x-rank1".into()], |i| {
        format!("rank{i}")
    });
    assert_ne!(l[0], l[1]);
    let raw = vec![doc("node1!a", &good()), doc("node1?a", &good())];
    let dir = std::env::temp_dir().join(format!("erdma-cluster-collide-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let (_, _, err) = run(&raw, &["--out", dir.to_str().unwrap()]);
    assert!(err.is_empty(), "{err}");
    let mut names: Vec<String> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with("doctor-"))
        .collect();
    names.sort();
    assert_eq!(
        names,
        ["doctor-node1_a-rank0.json", "doctor-node1_a-rank1.json"]
    );
    let whole: Value =
        serde_json::from_slice(&std::fs::read(dir.join("cluster.json")).unwrap()).unwrap();
    assert_eq!(whole["hosts"][1]["file"], "doctor-node1_a-rank1.json");
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn garbage_from_a_rank_is_exit_4_naming_the_rank() {
    let raw = vec![doc("h0", &good()), b"\x00garbage".to_vec()];
    let (code, _, err) = run(&raw, &[]);
    assert_eq!(code, EXIT_OUTPUT);
    assert!(err.contains("rank 1: its report is not JSON"), "{err}");
    let raw = vec![br#"{"tool":"erdma-perf"}"#.to_vec()];
    assert!(
        parse_reports(&raw)
            .unwrap_err()
            .contains("rank 0: not an erdma-doctor report")
    );
}

#[test]
fn unknown_skip_names_are_refused() {
    let a = Args::try_parse_from(["erdma-cluster", "--skip", "gpu,nope"]).unwrap();
    assert!(check_skips(&a).unwrap_err().contains("--skip nope"));
    let a = Args::try_parse_from(["erdma-cluster", "--skip", "gpu,rdma.mtu"]).unwrap();
    assert!(check_skips(&a).is_ok());
}

#[test]
fn timeout_is_bounded_and_covers_the_pair_runs() {
    let parse = |a: &[&str]| {
        Args::try_parse_from(std::iter::once("erdma-cluster").chain(a.iter().copied()))
    };
    assert_eq!(parse(&[]).unwrap().timeout, DEFAULT_TIMEOUT_S);
    assert!(parse(&["--timeout", "0"]).is_err());
    assert!(parse(&["--timeout", "86401"]).is_err());
    assert!(check_timeout(&parse(&["--timeout", "3"]).unwrap()).is_ok());
    let short = parse(&["--pairs", "--timeout", "44"]).unwrap();
    assert!(check_timeout(&short).unwrap_err().contains("at least 45"));
    assert!(check_timeout(&parse(&["--pairs", "--timeout", "45"]).unwrap()).is_ok());
}

/// The pair matrix's verdicts join the text and JSON reports.
#[test]
fn pair_matrix_verdicts_in_the_reports() {
    let raw: Vec<Vec<u8>> = ["a", "b", "c", "d"]
        .iter()
        .map(|h| doc(h, &good()))
        .collect();
    let reports = parse_reports(&raw).unwrap();
    let mut gbps = vec![vec![Some(20.0); 4]; 4];
    for (i, row) in gbps.iter_mut().enumerate() {
        row[i] = None;
    }
    gbps[1][3] = Some(12.0);
    let m = Matrix {
        test: "write_bw".into(),
        gbps,
        rails: Vec::new(),
        runs: Vec::new(),
        planned: None,
    };
    let stages = Stages {
        pairs: Some(&m),
        ..Default::default()
    };
    let v = render_json(
        &meta("a"),
        &reports,
        &[],
        &[],
        &stages,
        &Judgement::of(&reports, &[], &stages),
    );
    let verdicts = v["verdicts"].as_array().unwrap();
    assert_eq!(verdicts.len(), 1, "{v}");
    assert_eq!(verdicts[0]["kind"], "direction");
    assert_eq!(verdicts[0]["hosts"], serde_json::json!(["b", "d"]));
    let text = render_text(
        &meta("a"),
        &reports,
        &[],
        &[],
        &stages,
        &Judgement::of(&reports, &[], &stages),
    );
    assert!(
        text.contains("direction b -> d: NIC 0: b -> d 12.00 Gb/s, d -> b 20.00 Gb/s"),
        "{text}"
    );
    // Without the pair stage: no verdicts key.
    let none = render_json(
        &meta("a"),
        &reports,
        &[],
        &[],
        &Stages::default(),
        &Judgement::of(&reports, &[], &Stages::default()),
    );
    assert!(none.get("verdicts").is_none());
}

#[test]
fn every_rail_is_judged_and_a_slow_nic_is_named_with_its_index() {
    let hosts = ["a", "b", "c", "d", "e", "f"];
    let raw: Vec<Vec<u8>> = hosts.iter().map(|h| doc(h, &good())).collect();
    let reports = parse_reports(&raw).unwrap();
    let full = |v: f64| {
        let mut g = vec![vec![Some(v); 6]; 6];
        for (i, row) in g.iter_mut().enumerate() {
            row[i] = None;
        }
        g
    };
    let rail0 = full(20.0);
    let mut rail1 = full(20.0);
    // Host c's second NIC is slow both ways, against every partner.
    for (j, row) in rail1.iter_mut().enumerate() {
        if j != 2 {
            row[2] = Some(14.0);
        }
    }
    for (j, cell) in rail1[2].iter_mut().enumerate() {
        if j != 2 {
            *cell = Some(14.0);
        }
    }
    let rail = |k: usize, gbps: Vec<Vec<Option<f64>>>| pairs::Rail {
        rail: k,
        devices: vec![Some(format!("rxe{k}")); 6],
        gbps,
    };
    let m = Matrix {
        test: "write_bw".into(),
        gbps: rail0.clone(),
        rails: vec![rail(0, rail0), rail(1, rail1)],
        runs: Vec::new(),
        planned: None,
    };
    let stages = Stages {
        pairs: Some(&m),
        ..Default::default()
    };
    let v = render_json(
        &meta("a"),
        &reports,
        &[],
        &[],
        &stages,
        &Judgement::of(&reports, &[], &stages),
    );
    let verdicts = v["verdicts"].as_array().unwrap();
    assert_eq!(verdicts.len(), 1, "{v}");
    assert_eq!(verdicts[0]["kind"], "nic", "{v}");
    assert_eq!(verdicts[0]["nic"], 1, "{v}");
    assert_eq!(verdicts[0]["hosts"], serde_json::json!(["c"]));
}

#[test]
fn ranks_sharing_a_host_get_their_own_slot() {
    let hosts: Vec<String> = ["a", "b", "a", "a", "b"].map(String::from).to_vec();
    assert_eq!(host_slots(&hosts), vec![0, 0, 1, 2, 1]);
    assert_eq!(first_of_host(&hosts), vec![true, true, false, false, false]);
}

/// One pair run's side as a rank sends it (rail 0, checked).
fn side(client: usize, server: usize, role: &str, gbps: Option<f64>) -> Value {
    pairs::PairRun {
        client,
        server,
        role: role.into(),
        gbps: if role == "client" { gbps } else { None },
        error: None,
        doc: Value::Null,
        rail: Some(0),
        client_device: Some("rxe0".into()),
        server_device: Some("rxe0".into()),
        verified: true,
        corrupt: false,
        rerun: String::new(),
        share: 1,
    }
    .to_json()
}

/// Each rank's runs of every directed pair in `cells` (client, server, Gb/s).
fn ranks_runs(n: usize, cells: &[(usize, usize, f64)]) -> Vec<Vec<u8>> {
    let mut per = vec![Vec::new(); n];
    for &(c, s, g) in cells {
        per[c].push(side(c, s, "client", Some(g)));
        per[s].push(side(c, s, "server", None));
    }
    per.into_iter()
        .map(|v| Value::Array(v).to_string().into_bytes())
        .collect()
}

/// A job of 4 good hosts whose host c (rank 2) is slow both ways in the
/// main rounds; the retest measures c against a and b at `retest_gbps`
/// (none: no retest round could be held). Returns (exit, text, JSON).
fn retested_job(retest_gbps: Option<f64>) -> (i32, String, Value) {
    let raw: Vec<Vec<u8>> = ["a", "b", "c", "d"]
        .iter()
        .map(|h| doc(h, &good()))
        .collect();
    let mut cells = Vec::new();
    for c in 0..4 {
        for s in (0..4).filter(|&s| s != c) {
            cells.push((c, s, if c == 2 || s == 2 { 12.0 } else { 20.0 }));
        }
    }
    let pair_raw = ranks_runs(4, &cells);
    let first = diagnose::Diagnosis {
        verdicts: vec![diagnose::Verdict {
            kind: diagnose::Kind::Host,
            hosts: vec![2],
            nic: None,
            why: String::new(),
            numbers: Default::default(),
            retested: false,
            seen_again: false,
        }],
        notes: Vec::new(),
    };
    let plan = retest::plan(&first, 4, if retest_gbps.is_some() { 2 } else { 0 });
    let again: Vec<(usize, usize, f64)> = plan
        .rounds
        .iter()
        .flatten()
        .flat_map(|&(x, y)| [(x, y), (y, x)])
        .map(|(x, y)| (x, y, retest_gbps.unwrap_or(0.0)))
        .collect();
    let g = Gathered {
        retest: Some((plan, ranks_runs(4, &again))),
        schedule: Some(
            serde_json::json!({"schedule": "full matrix", "predicted_wall_s": 13.0,
                                          "pair_wall_s": 14.5}),
        ),
        ..Default::default()
    };
    let args = Args::try_parse_from(["erdma-cluster", "--pairs"]).unwrap();
    let (mut o, mut e) = (Vec::new(), Vec::new());
    let code = report_with(&args, &meta("a"), &raw, Some(&pair_raw), &g, &mut o, &mut e);
    let text = String::from_utf8(o).unwrap();
    let args = Args::try_parse_from(["erdma-cluster", "--pairs", "--json"]).unwrap();
    let mut j = Vec::new();
    report_with(&args, &meta("a"), &raw, Some(&pair_raw), &g, &mut j, &mut e);
    (code, text, serde_json::from_slice(&j).unwrap())
}

#[test]
fn a_verdict_the_retest_confirms_fails_the_job() {
    let (code, text, v) = retested_job(Some(12.1));
    assert_eq!(code, EXIT_FAIL, "{text}");
    assert_eq!(v["predicted_wall_s"], 13.0);
    assert_eq!(v["pair_wall_s"], 14.5);
    let verdicts = v["verdicts"].as_array().unwrap();
    assert_eq!(verdicts.len(), 1, "{v}");
    assert_eq!(verdicts[0]["hosts"], serde_json::json!(["c"]));
    assert_eq!(verdicts[0]["status"], "fail");
    assert_eq!(verdicts[0]["retested"], true);
    // The retest met two good hosts, both directions, both sides.
    assert_eq!(v["retest"]["rounds"].as_array().unwrap().len(), 2, "{v}");
    assert_eq!(v["retest"]["runs"].as_array().unwrap().len(), 8);
    assert!(
        text.contains("# schedule: full matrix; measured 14.5 s"),
        "{text}"
    );
    assert!(
        text.contains("retest    c -> a NIC 0: 12.10 Gb/s (first pass 12.00 Gb/s)"),
        "{text}"
    );
    assert!(
        text.contains("confirmed by the retest: a failure"),
        "{text}"
    );
    assert!(text.ends_with("# result: fail (exit 2)\n"), "{text}");
    // The retest section: the suspect with what became of it, who met whom.
    assert!(
        text.contains("suspect   host c: confirmed by the retest\n"),
        "{text}"
    );
    let rounds: Vec<&str> = text.lines().filter(|l| l.starts_with("round ")).collect();
    assert_eq!(rounds.len(), 2, "{text}");
    for (k, l) in rounds.iter().enumerate() {
        assert!(l.starts_with(&format!("round {:<3} ", k + 1)), "{l}");
        assert!(l.contains(" <-> ") && l.contains('c'), "{l}");
    }
    assert_eq!(verdicts[0]["confirmed"], true);
    // report.html of the same document shows what the retest saw.
    let page = super::html::render(&v);
    assert!(
        page.contains("<span class=\"badge b-fail\">confirmed by the retest</span>"),
        "{page}"
    );
    assert_eq!(
        page.matches("<td>c &#8594; ").count() + page.matches(" &#8594; c</td>").count(),
        4
    );
    assert_eq!(
        page.matches(">12.1 (").count(),
        4,
        "each retest run: {page}"
    );
    assert_eq!(page.matches(">12.0 (").count(), 4, "beside its first pass");
}

#[test]
fn a_retest_that_measures_well_clears_and_one_not_held_warns() {
    // c measures well against a and b: no host verdict; its cells with d,
    // which the retest did not measure, are left as a link it could not
    // confirm (a warning, as the hosts' own nccl.qps warning is).
    let (code, text, v) = retested_job(Some(20.0));
    assert_eq!(code, EXIT_WARN, "{text}");
    let verdicts = v["verdicts"].as_array().unwrap();
    assert_eq!(verdicts.len(), 1, "{text}");
    assert_eq!(verdicts[0]["kind"], "link", "{text}");
    assert_eq!(verdicts[0]["hosts"], serde_json::json!(["c", "d"]));
    assert_eq!(verdicts[0]["status"], "warn");
    assert_eq!(verdicts[0]["confirmed"], false);
    assert!(
        text.contains("retest    a -> c NIC 0: 20.00 Gb/s (first pass 12.00 Gb/s)"),
        "{text}"
    );
    assert!(
        text.contains("suspect   host c: cleared: no such verdict after the retest\n"),
        "{text}"
    );
    let (code, text, v) = retested_job(None);
    assert_eq!(code, EXIT_WARN, "{text}");
    assert_eq!(v["verdicts"][0]["status"], "warn", "{v}");
    assert!(
        text.contains("not confirmed (no retest measured it): a warning"),
        "{text}"
    );
    assert!(
        text.contains("suspect   host c: still a verdict, not confirmed (not measured again)\n"),
        "{text}"
    );
    assert!(!text.contains("round 1"), "no round held: {text}");
}

#[test]
fn hooks_are_read_by_name_among_others() {
    let all = "hosts-apart:2, stop-in-round:1:2,slow:3";
    assert_eq!(super::hook_in(all, "slow").as_deref(), Some("3"));
    assert_eq!(super::hook_in(all, "stop-in-round").as_deref(), Some("1:2"));
    assert_eq!(super::hook_in(all, "hosts-apart").as_deref(), Some("2"));
    // A name is not a prefix of another hook's.
    assert_eq!(super::hook_in(all, "stop"), None);
    assert_eq!(super::hook_in("stop:0", "stop").as_deref(), Some("0"));
    assert_eq!(super::hook_in("", "slow"), None);
}

#[test]
fn the_port_rate_comes_from_the_doctor_and_not_from_emulated_devices() {
    let mut h = FakeHost::rig();
    h.rdma.devices[0].vendor_id = Some(0x15b3);
    let reports = parse_reports(&[doc("a", &h)]).unwrap();
    assert_eq!(port_rate(&reports[0], Some("rxe0")), Some(2.5));
    // erdma-perf's default device: the host's first.
    assert_eq!(port_rate(&reports[0], None), Some(2.5));
    // Soft-iWARP: a nominal rate, no reference.
    assert_eq!(port_rate(&reports[0], Some("siw0:1")), None);
    assert_eq!(port_rate(&reports[0], Some("mlx5_9")), None);
    // Soft-RoCE's vendor id: the rig's devices are judged among themselves.
    h.rdma.devices[0].vendor_id = Some(0x00ff_ffff);
    let reports = parse_reports(&[doc("a", &h)]).unwrap();
    assert_eq!(port_rate(&reports[0], Some("rxe0")), None);
}

/// A rank's document as erdma-cluster sends it: the doctor's, with the
/// machine id and the full host name.
fn doc_on(short: &str, full: &str, id: &str) -> Vec<u8> {
    let mut d: Value = serde_json::from_slice(&doc(short, &good())).unwrap();
    d["hostname"] = full.into();
    d["machine_id"] = id.into();
    d.to_string().into_bytes()
}

#[test]
fn a_host_is_its_machine_not_its_short_name() {
    // Two machines whose short names are one: two hosts, two files.
    let raw = vec![
        doc_on("node1", "node1.rack-a", "aaaa1111"),
        doc_on("node1", "node1.rack-b", "bbbb2222"),
        doc_on("node2", "node2.rack-a", "cccc3333"),
        // A second rank on the first machine.
        doc_on("node1", "node1.rack-a", "aaaa1111"),
    ];
    let reports = parse_reports(&raw).unwrap();
    let names: Vec<&str> = reports.iter().map(HostReport::host).collect();
    assert_eq!(
        names,
        [
            "node1.rack-a",
            "node1.rack-b",
            "node2.rack-a",
            "node1.rack-a"
        ]
    );
    assert_eq!(host_names(&raw), names);
    let shared: Vec<bool> = reports.iter().map(|r| r.shares_host).collect();
    assert_eq!(shared, [true, false, false, true]);
    let files = file_names(&reports);
    assert_eq!(
        files,
        [
            "doctor-node1.rack-a-rank0.json",
            "doctor-node1.rack-b.json",
            "doctor-node2.rack-a.json",
            "doctor-node1.rack-a-rank3.json"
        ]
    );
    let across = cross_checks(&reports);
    let one = across
        .iter()
        .find(|p| p.id == "cluster.one-rank-per-host")
        .unwrap();
    assert_eq!(one.hosts, ["node1.rack-a"]);
    // Two machines with one full name (cloned images): told apart by id.
    let ids = [
        Machine {
            id: "0123456789ab".into(),
            name: "gpu".into(),
        },
        Machine {
            id: "fedcba987654".into(),
            name: "gpu".into(),
        },
        Machine {
            id: String::new(),
            name: "gpu".into(),
        },
        Machine {
            id: "0123456789ab".into(),
            name: "gpu".into(),
        },
    ];
    assert_eq!(
        machine_names(&ids),
        ["gpu~01234567", "gpu~fedcba98", "gpu~rank2", "gpu~01234567"]
    );
    // The line the ranks exchange, both ways; an empty one (a lost rank).
    assert_eq!(Machine::from_line(&ids[0].to_line()), ids[0]);
    assert_eq!(Machine::from_line("").name, "?");
    // An older document without them: its short name, as before.
    let old = parse_reports(&[doc("a", &good())]).unwrap();
    assert_eq!(old[0].host(), "a");
    // This process: a full name at least as long as the short one.
    let me = Machine::this();
    assert!(
        me.name
            .starts_with(&crate::nccltests::bootstrap::hosthash::short_hostname())
    );
}

/// The NIC pairs and the NCCL pairs in one matrix: the NCCL pairs on their
/// own rail, named "nccl" in the text, the JSON, report.html and the
/// diagnosis's words; a host slow in NCCL only (its NICs fine) is named
/// on that rail.
#[test]
fn nccl_pairs_are_a_rail_of_their_own_judged_with_the_nics() {
    let hosts = ["a", "b", "c", "d"];
    let raw: Vec<Vec<u8>> = hosts.iter().map(|h| doc(h, &good())).collect();
    let mut cells = Vec::new();
    for c in 0..4 {
        for s in (0..4).filter(|&s| s != c) {
            cells.push((c, s, 20.0));
        }
    }
    let nics = ranks_runs(4, &cells);
    // NCCL: host c's pairs at 1 GB/s, the others at 10 (busbw).
    let nccl_doc = |busbw: f64| {
        serde_json::json!({"results": [{"size": 1048576, "count": 262144, "type": "float",
            "out_of_place": {"alg_bw": busbw, "bus_bw": busbw, "time": 1.0, "nwrong": 0}}]})
    };
    let mut per = vec![Vec::new(); 4];
    for a in 0..4 {
        for b in (a + 1)..4 {
            let g = if a == 2 || b == 2 { 1.0 } else { 10.0 };
            for me in [a, b] {
                per[me].extend(
                    ncclpairs::runs_of(me, (a, b), 0, None, Some(nccl_doc(g)), "x")
                        .iter()
                        .map(pairs::PairRun::to_json),
                );
            }
        }
    }
    let nccl: Vec<Vec<u8>> = per
        .into_iter()
        .map(|v| Value::Array(v).to_string().into_bytes())
        .collect();
    let pair_raw = ncclpairs::join(Some(&nics), &nccl);
    let plan = nccl::Plan {
        backend: "mpi".into(),
        gpus: 1,
        why: "backend mpi: no GPU; this stage measures MPI over TCP/shared memory, not NCCL".into(),
        no_host_stage: None,
        args: "-b 64K -e 64K -n 2 -w 1 -c 1".into(),
        skip: None,
    };
    let g = Gathered {
        nccl_pairs: Some(ncclpairs::describe(&plan)),
        ..Default::default()
    };
    let report = |a: &[&str]| {
        let args = Args::try_parse_from(a).unwrap();
        let (mut o, mut e) = (Vec::new(), Vec::new());
        let code = report_with(&args, &meta("a"), &raw, Some(&pair_raw), &g, &mut o, &mut e);
        (code, String::from_utf8(o).unwrap())
    };
    let (_, text) = report(&["erdma-cluster", "--pairs", "--nccl-pairs"]);
    assert!(
        text.contains("# NCCL pairs: all_reduce between every pair the schedule meets"),
        "{text}"
    );
    assert!(text.contains("not NCCL\n"), "{text}");
    assert!(text.contains("rail 0 (rxe0, rxe0, rxe0, rxe0)\n"), "{text}");
    assert!(
        text.contains("rail nccl: all_reduce busbw x 8 in Gb/s"),
        "{text}"
    );
    let (_, j) = report(&["erdma-cluster", "--pairs", "--nccl-pairs", "--json"]);
    let v: Value = serde_json::from_str(&j).unwrap();
    assert_eq!(v["pairs"]["nccl"]["backend"], "mpi");
    let rails = v["pairs"]["rails"].as_array().unwrap();
    assert_eq!(rails[1]["rail"], ncclpairs::RAIL);
    assert_eq!(rails[1]["gbps"][0][1], 80.0);
    assert_eq!(rails[1]["gbps"][3][2], 8.0);
    let verdicts = v["verdicts"].as_array().unwrap();
    assert_eq!(verdicts.len(), 1, "{v}");
    assert_eq!(verdicts[0]["hosts"], serde_json::json!(["c"]));
    assert_eq!(verdicts[0]["nic"], 1, "{v}");
    assert!(
        verdicts[0]["why"]
            .as_str()
            .unwrap()
            .starts_with("rail nccl:"),
        "{}",
        verdicts[0]
    );
    let page = html::render(&v);
    assert!(
        page.contains("<h3>rail nccl: all_reduce busbw x 8 in Gb/s"),
        "{page}"
    );
}

/// `--latency`: the latency runs gathered beside the pair matrix become
/// their own matrix (median and p99), a delayed link is a warning verdict
/// in the text and the JSON, and the job's status is at least a warning.
#[test]
fn latency_cells_and_a_delayed_link_in_the_report() {
    let hosts = ["a", "b", "c", "d"];
    let raw: Vec<Vec<u8>> = hosts.iter().map(|h| doc(h, &good())).collect();
    let mut cells = Vec::new();
    for c in 0..4 {
        for s in (0..4).filter(|&s| s != c) {
            cells.push((c, s, 20.0));
        }
    }
    let pair_raw = ranks_runs(4, &cells);
    // Latency: 3 us everywhere but a <-> d, delayed to 13 us.
    let mut per = vec![Vec::new(); 4];
    for &(c, s, _) in &cells {
        let m = if (c, s) == (0, 3) || (c, s) == (3, 0) {
            13.0
        } else {
            3.0 + 0.1 * c as f64
        };
        let mut run: Value = side(c, s, "client", None);
        run["doc"] = serde_json::json!({"results": [{"t_typical_us": m, "t_p99_us": m + 2.0}]});
        per[c].push(run);
        per[s].push(side(c, s, "server", None));
    }
    let lat: Vec<Vec<u8>> = per
        .into_iter()
        .map(|v| Value::Array(v).to_string().into_bytes())
        .collect();
    let g = Gathered {
        latency: Some((lat, 2.5)),
        ..Default::default()
    };
    let report = |a: &[&str]| {
        let args = Args::try_parse_from(a).unwrap();
        let (mut o, mut e) = (Vec::new(), Vec::new());
        let code = report_with(&args, &meta("a"), &raw, Some(&pair_raw), &g, &mut o, &mut e);
        (code, String::from_utf8(o).unwrap())
    };
    let (_, text) = report(&["erdma-cluster", "--pairs", "--latency"]);
    assert!(
        text.contains("# latency: erdma-perf write_lat, median (p99) in us"),
        "{text}"
    );
    assert!(text.contains("13.00 (15.00)"), "{text}");
    assert!(
        text.contains("warn  latency link      a <-> d: latency 13.00 us and 13.00 us"),
        "{text}"
    );
    let (_, j) = report(&["erdma-cluster", "--pairs", "--latency", "--json"]);
    let v: Value = serde_json::from_str(&j).unwrap();
    let l = &v["latency"];
    assert_eq!(l["status"], "warn", "{l}");
    assert_eq!(l["median_us"][0][3], 13.0);
    assert_eq!(l["p99_us"][3][0], 15.0);
    assert_eq!(l["wall_s"], 2.5);
    assert_eq!(l["verdicts"][0]["kind"], "link");
    assert_eq!(l["verdicts"][0]["hosts"], serde_json::json!(["a", "d"]));
    // The doctor's checks of these fake hosts warn or pass; the latency
    // verdict makes the job at least a warning.
    assert_ne!(v["status"], "ok", "{}", v["status"]);
    let page = html::render(&v);
    assert!(page.contains("<h2 id=\"latency\">Latency"), "{page}");
    assert!(
        page.contains("<b>link</b> a &lt;-&gt; d: latency 13.00 us"),
        "{page}"
    );
    assert!(page.contains(">13 (15)</td>"), "{page}");
    let opt = roxmltree::ParsingOptions {
        allow_dtd: true,
        ..Default::default()
    };
    if let Err(e) = roxmltree::Document::parse_with_options(&page, opt) {
        panic!("report.html is not well-formed: {e}\n{page}");
    }
}
