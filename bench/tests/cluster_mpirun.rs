//! erdma-cluster under a real `mpirun -np 2` on one host (CI: no RDMA
//! device): both ranks' reports gathered, the shared host flagged, one exit
//! status for the job. The rig runs it with devices (rig_cluster.rs).

#![cfg(feature = "mpi")]

mod cluster_common;

use std::time::{Duration, Instant};

use cluster_common::{check, mpirun, mpirun_env};

fn has_rdma() -> bool {
    std::path::Path::new("/sys/class/infiniband_verbs/abi_version").exists()
}

#[test]
fn two_ranks_without_rdma_fail_together() {
    if has_rdma() {
        eprintln!("this host has RDMA: rig_cluster.rs checks it");
        return;
    }
    let dir = std::env::temp_dir().join(format!("erdma-cluster-mpirun-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let (code, out, err) = mpirun(
        2,
        &["--json", "--skip", "gpu", "--out", dir.to_str().unwrap()],
    );
    assert_eq!(code, Some(2), "{out}{err}");
    let v: serde_json::Value = serde_json::from_str(out.trim()).expect(&out);
    assert_eq!(v["tool"], "erdma-cluster");
    assert_eq!(v["exit_status"], 2);
    let hosts = v["hosts"].as_array().unwrap();
    assert_eq!(hosts.len(), 2, "{out}");
    assert_eq!(hosts[0]["rank"], 0);
    assert_eq!(hosts[1]["rank"], 1);
    let devices = v["problems"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["id"] == "rdma.devices")
        .expect("rdma.devices fails without RDMA");
    assert_eq!(devices["hosts"].as_array().unwrap().len(), 2, "{devices}");
    assert!(
        v["across"]
            .as_array()
            .unwrap()
            .iter()
            .any(|p| p["id"] == "cluster.one-rank-per-host"),
        "{out}"
    );
    // The GPU group was skipped on both ranks.
    for i in 0..2 {
        assert_eq!(check(&v, i, "gpu.driver")["status"], "skip");
    }
    let mut files: Vec<String> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    files.sort();
    assert_eq!(files.len(), 4, "{files:?}");
    assert!(
        files[0] == "cluster.json"
            && files[1].ends_with("-rank0.json")
            && files[3] == "report.html",
        "{files:?}"
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn the_text_report_names_each_fix_once() {
    if has_rdma() {
        return;
    }
    let (code, out, _) = mpirun(2, &["--skip", "gpu"]);
    assert_eq!(code, Some(2), "{out}");
    assert!(out.starts_with("# erdma-cluster "), "{out}");
    assert_eq!(out.matches("fail  rdma.devices").count(), 1, "{out}");
    assert!(out.contains("2/2 (all)"), "{out}");
    assert!(out.ends_with("# result: fail (exit 2)\n"), "{out}");
}

#[test]
fn bad_arguments_exit_3_and_are_said_once() {
    let (code, out, err) = mpirun(2, &["--skip", "nope"]);
    assert_eq!(code, Some(3), "{out}{err}");
    assert_eq!(
        err.matches("erdma-cluster: --skip nope").count(),
        1,
        "{err}"
    );
    let (code, _, err) = mpirun(2, &["--bogus"]);
    assert_eq!(code, Some(3), "{err}");
    assert_eq!(err.matches("--bogus").count(), 1, "{err}");
}

#[test]
fn an_unwritable_out_dir_exits_4_on_every_rank() {
    let (code, _, err) = mpirun(2, &["--skip", "gpu", "--out", "/proc/erdma-cluster-no"]);
    assert_eq!(code, Some(4), "{err}");
    assert!(
        err.contains("erdma-cluster: writing /proc/erdma-cluster-no"),
        "{err}"
    );
}

#[test]
fn pairs_without_rdma_fail_every_run_once() {
    if has_rdma() {
        eprintln!("this host has RDMA: rig_cluster.rs checks it");
        return;
    }
    let (code, out, err) = mpirun(
        2,
        &[
            "--json",
            "--skip",
            "gpu",
            "--pairs",
            "--perf-args",
            "-s 4096 -n 10",
        ],
    );
    assert_eq!(code, Some(2), "{out}{err}");
    let v: serde_json::Value = serde_json::from_str(out.trim()).expect(&out);
    let pairs = &v["pairs"];
    assert_eq!(pairs["test"], "write_bw");
    assert_eq!(pairs["status"], "fail");
    // Two directions, each seen from both sides.
    let runs = pairs["runs"].as_array().unwrap();
    assert_eq!(runs.len(), 4, "{pairs}");
    for r in runs {
        let e = r["error"].as_str().expect("every run failed");
        assert!(e.starts_with("no RDMA device"), "{e}");
    }
    assert_eq!(
        pairs["gbps"],
        serde_json::json!([[null, null], [null, null]])
    );
    // Against a baseline without documents: every direction a warning
    // (nothing to compare), the job still failed by its pairs.
    let empty = std::env::temp_dir().join(format!("erdma-cluster-nobase-{}", std::process::id()));
    // (A directory that does not exist is bad arguments: see cli_faults.)
    std::fs::create_dir_all(&empty).unwrap();
    let (code, out, err) = mpirun(
        2,
        &[
            "--json",
            "--skip",
            "gpu",
            "--pairs",
            "--baseline",
            empty.to_str().unwrap(),
        ],
    );
    assert_eq!(code, Some(2), "{out}{err}");
    let v: serde_json::Value = serde_json::from_str(out.trim()).expect(&out);
    assert_eq!(v["baseline"]["status"], "warn", "{out}");
    let rows = v["baseline"]["rows"].as_array().unwrap();
    assert_eq!(rows.len(), 2, "{out}");
    assert!(
        rows.iter()
            .all(|r| r["note"].as_str().unwrap().contains("no baseline document"))
    );
    std::fs::remove_dir_all(&empty).unwrap();
    // The text report says each error once.
    let (code, out, _) = mpirun(2, &["--skip", "gpu", "--pairs"]);
    assert_eq!(code, Some(2));
    assert!(out.contains("# NIC pairs: erdma-perf write_bw"), "{out}");
    assert_eq!(
        out.matches("fail  4 run(s): no RDMA device").count(),
        1,
        "{out}"
    );
}

#[test]
fn bad_pair_options_are_said_once() {
    let (code, out, err) = mpirun(2, &["--pairs", "--perf-args", "--no-such-option"]);
    assert_eq!(code, Some(3), "{out}{err}");
    assert_eq!(
        err.matches("erdma-cluster: --perf-args: ").count(),
        1,
        "{err}"
    );
    let (code, _, err) = mpirun(2, &["--pairs", "--pair-test", "send_lat"]);
    assert_eq!(code, Some(3), "{err}");
    let (code, _, err) = mpirun(2, &["--pairs", "--pair-port", "65535"]);
    assert_eq!(code, Some(3), "{err}");
    assert!(err.contains("take a lower port"), "{err}");
    // --baseline compares pairs or NCCL stages: it needs --pairs or
    // --nccl; --fail-below a ratio.
    let (code, _, err) = mpirun(2, &["--baseline", "/tmp"]);
    assert_eq!(code, Some(3), "{err}");
    assert!(err.contains("needs --pairs or --nccl"), "{err}");
    let (code, _, err) = mpirun(2, &["--pairs", "--baseline", "/tmp", "--fail-below", "0"]);
    assert_eq!(code, Some(3), "{err}");
    assert!(err.contains("is not a positive number"), "{err}");
}

/// A rank stopped after MPI init (SIGSTOP, as a hung host would be): the
/// live rank names it within --timeout and the census, and the job ends
/// with status 5 instead of hanging.
#[test]
fn a_stopped_rank_is_named_and_the_job_ends_with_5() {
    let t = Instant::now();
    let (code, _, err) = mpirun_env(
        2,
        &["--skip", "gpu", "--timeout", "3"],
        &[("ERDMA_CLUSTER_HOOK", "stop:1")],
    );
    assert_eq!(code, Some(5), "{err}");
    assert!(
        err.contains("erdma-cluster: rank 0: rank 1 lost: no answer within --timeout 3 s while "),
        "{err}"
    );
    // mpirun's start, 3 s, the census's 3 s, mpirun ending the job.
    assert!(t.elapsed() < Duration::from_secs(40), "{:?}", t.elapsed());
}

/// The NCCL stage without GPUs or RDMA: the collectives' driver in-process
/// on the MPI backend, 4 ranks taken for 2 hosts of 2 (the hosts-apart
/// test hook), so the per-host communicators are split as on a cluster;
/// every run's -J document under --out; the traffic proof cannot prove.
#[test]
fn nccl_stage_runs_on_the_mpi_backend_without_gpus() {
    if has_rdma() {
        eprintln!("this host has RDMA: rig_cluster.rs checks it");
        return;
    }
    let dir = std::env::temp_dir().join(format!("erdma-cluster-nccl-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let (code, out, err) = mpirun_env(
        4,
        &[
            "--json",
            "--skip",
            "gpu",
            "--nccl",
            "--nccl-tests",
            "all_reduce,all_gather",
            "--nccl-args",
            "-b 8 -e 64K -f 8 -n 5 -w 1 -c 1",
            "--out",
            dir.to_str().unwrap(),
        ],
        &[("ERDMA_CLUSTER_HOOK", "hosts-apart:2")],
    );
    // rdma.devices fails on every host: 2.
    assert_eq!(code, Some(2), "{out}{err}");
    let v: serde_json::Value = serde_json::from_str(out.trim()).expect(&out);
    let n = &v["nccl"];
    assert_eq!(n["backend"], "mpi");
    assert_eq!(
        n["why"],
        "backend mpi: no GPU; this stage measures MPI over TCP/shared memory, not NCCL"
    );
    assert_eq!(n["status"], "ok", "{n}");
    let stages = n["stages"].as_array().unwrap();
    let names: Vec<String> = stages
        .iter()
        .map(|s| {
            format!(
                "{} {}",
                s["name"].as_str().unwrap(),
                s["collective"].as_str().unwrap()
            )
        })
        .collect();
    let host = v["hosts"][0]["host"].as_str().unwrap();
    assert_eq!(
        names,
        [
            format!("host {host}-0 all_reduce"),
            format!("host {host}-1 all_reduce"),
            "cluster all_reduce".into(),
            format!("host {host}-0 all_gather"),
            format!("host {host}-1 all_gather"),
            "cluster all_gather".into(),
        ]
    );
    for s in stages {
        assert_eq!(s["status"], "ok", "{s}");
        let rows = s["rows"].as_array().unwrap();
        // 8, 64, 512, 4K, 32K bytes.
        assert_eq!(rows.len(), 5, "{s}");
        assert!(rows.iter().all(|r| r["wrong"] == 0), "{s}");
        // The communicator's ranks: 2 per host, 4 together; 2 ranks
        // move data, so busbw is above 0 at 32 KiB.
        assert!(rows[4]["busbw"].as_f64().unwrap() > 0.0, "{s}");
        let doc: serde_json::Value =
            serde_json::from_slice(&std::fs::read(dir.join(s["json"].as_str().unwrap())).unwrap())
                .unwrap();
        let procs = if s["scope"] == "host" { 2 } else { 4 };
        assert_eq!(doc["results"].as_array().unwrap().len(), 5);
        assert_eq!(s["ranks"].as_array().unwrap().len(), procs, "{s}");
        assert!(
            s["rerun"].as_str().unwrap().starts_with("mpirun -np "),
            "{s}"
        );
    }
    // 2 hosts, 4 ranks: all_reduce sends 2 x 3/4 of each size per host,
    // 1 warm-up + 2 x (5 + 1 check) = 13 times: 1.5 x 37448 x 13.
    let traffic = v["traffic"]["rows"].as_array().unwrap();
    // Per collective: each host stage its host, the cluster stage both.
    assert_eq!(traffic.len(), 2 * (1 + 1 + 2), "{traffic:?}");
    assert!(
        traffic
            .iter()
            .all(|r| r["verdict"] == "cannot prove" && r["tx_bytes"].is_null())
    );
    let cluster = traffic
        .iter()
        .find(|r| r["stage"] == "nccl cluster all_reduce")
        .unwrap();
    assert_eq!(cluster["expected_bytes"], 730_236, "{cluster}");
    assert_eq!(v["traffic"]["status"], "warn");
    let mut files: Vec<String> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .filter(|f| f.starts_with("nccl-"))
        .collect();
    files.sort();
    assert_eq!(files.len(), 6, "{files:?}");
    std::fs::remove_dir_all(&dir).unwrap();
}

/// The text report of the NCCL stage on one host of 2 ranks, and its
/// failure (buffers larger than the host) said once per stage; bad
/// --nccl-args are a usage error said once.
#[test]
fn nccl_stage_text_and_its_failures() {
    if has_rdma() {
        return;
    }
    let (code, out, err) = mpirun(
        2,
        &[
            "--skip",
            "gpu",
            "--nccl",
            "--nccl-args",
            "-b 1K -e 4K -f 2 -n 2 -w 1 -c 1",
        ],
    );
    assert_eq!(code, Some(2), "{out}{err}");
    assert!(
        out.contains("# NCCL stage: the collectives in-process, backend mpi: no GPU; this stage measures MPI over TCP/shared memory, not NCCL\n"),
        "{out}"
    );
    assert!(
        out.contains("\ncluster all_reduce  ok           4 KiB"),
        "{out}"
    );
    assert!(
        out.contains("expected: one host: the cluster stage does not cross the NICs"),
        "{out}"
    );
    assert!(
        out.contains("# traffic proof: RDMA port counters around each stage"),
        "{out}"
    );
    assert!(
        out.contains("cannot prove: no RDMA device on this host to count on"),
        "{out}"
    );
    let (code, out, err) = mpirun(
        2,
        &[
            "--skip",
            "gpu",
            "--nccl",
            "--nccl-args",
            "-b 8 -e 4000G -c 1",
        ],
    );
    assert_eq!(code, Some(2), "{out}{err}");
    // One line for the stage (each rank's message inside it: they name
    // the memory each saw, which may differ between the ranks).
    assert_eq!(
        out.matches("fail  cluster all_reduce: rank 0").count(),
        1,
        "{out}"
    );
    assert!(
        out.contains("this host cannot hold the buffers of its ranks"),
        "{out}"
    );
    let (code, _, err) = mpirun(2, &["--nccl", "--nccl-args", "-b 8 -g 2"]);
    assert_eq!(code, Some(3), "{err}");
    assert_eq!(
        // (Not with its "erdma-cluster: " prefix: mpirun's own lines may
        // land between the two writes of one message.)
        err.matches("--nccl-args: -g is set by erdma-cluster")
            .count(),
        1,
        "{err}"
    );
}

/// The pair stage kept round by round: 4 ranks (3 rounds, no RDMA: every
/// run fails at once, the rounds still happen), rank 1 stopped as round 1
/// starts (a host hung mid-stage). The others name it lost and end with
/// 5, round 0 kept under --out; `--resume` runs rounds 1 and 2 only, and
/// the report has every round's runs. A resume by another job is exit 3.
#[test]
fn a_rank_lost_mid_pairs_keeps_its_rounds_and_the_job_resumes() {
    if has_rdma() {
        eprintln!("this host has RDMA: rig_cluster.rs checks it");
        return;
    }
    let dir = std::env::temp_dir().join(format!("erdma-cluster-resume-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let d = dir.to_str().unwrap();
    let base = [
        "--json",
        "--skip",
        "gpu",
        "--pairs",
        "--timeout",
        "45",
        "--out",
        d,
    ];
    let t = Instant::now();
    let (code, _, err) = mpirun_env(4, &base, &[("ERDMA_CLUSTER_HOOK", "stop-in-round:1:1")]);
    assert_eq!(code, Some(5), "{err}");
    assert!(
        err.contains("rank 1 lost: no answer within --timeout 45 s"),
        "{err}"
    );
    assert!(
        err.contains(&format!("--resume {d} continues the job")),
        "{err}"
    );
    assert!(t.elapsed() < Duration::from_secs(150), "{:?}", t.elapsed());
    let rounds = dir.join("rounds");
    let mut files: Vec<String> = std::fs::read_dir(&rounds)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    files.sort();
    assert_eq!(files, ["round-000.json"], "{err}");
    let r0: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(rounds.join(&files[0])).unwrap()).unwrap();
    assert_eq!(r0["round"], 0);
    assert_eq!(r0["job"]["ranks"], 4);
    // Round 0: two pairs, both directions, both sides: 2 runs per rank.
    let kept: Vec<usize> = r0["runs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r.as_array().unwrap().len())
        .collect();
    assert_eq!(kept, [2, 2, 2, 2], "{r0}");

    let mut resume = base.to_vec();
    resume.extend(["--resume", d]);
    let (code, out, err) = mpirun(4, &resume);
    assert_eq!(code, Some(2), "{out}{err}");
    let v: serde_json::Value = serde_json::from_str(out.trim()).expect(&out);
    let runs = v["pairs"]["runs"].as_array().unwrap();
    // 3 rounds x 2 pairs x 2 directions x 2 sides, every ordered pair once
    // as a client run.
    assert_eq!(runs.len(), 24, "{out}");
    let mut clients: Vec<(u64, u64)> = runs
        .iter()
        .filter(|r| r["role"] == "client")
        .map(|r| (r["client"].as_u64().unwrap(), r["server"].as_u64().unwrap()))
        .collect();
    clients.sort();
    clients.dedup();
    assert_eq!(clients.len(), 12, "{clients:?}");
    let files = std::fs::read_dir(&rounds).unwrap().count();
    assert_eq!(files, 3, "round 0 kept, rounds 1 and 2 written");
    let doc: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("cluster.json")).unwrap()).unwrap();
    assert_eq!(doc["pairs"]["runs"].as_array().unwrap().len(), 24);

    // Another job (2 ranks) cannot resume these rounds.
    let (code, _, err) = mpirun(2, &resume);
    assert_eq!(code, Some(3), "{err}");
    assert_eq!(
        err.matches("another job: ranks was 4 and is now 2").count(),
        1,
        "{err}"
    );
    // --resume belongs to the pair stage.
    let (code, _, err) = mpirun(2, &["--resume", d]);
    assert_eq!(code, Some(3), "{err}");
    std::fs::remove_dir_all(&dir).unwrap();
}

/// `--budget` on 4 ranks without RDMA: rank 0 prints the schedule and its
/// predicted wall time once, the JSON has both beside the measured one;
/// a suspect named by the test hook is retested in rounds that rank 0
/// planned and gathered to every rank (both directions at once, with good
/// hosts), each run failing as every run does here.
#[test]
fn budget_prints_the_plan_and_the_retest_is_gathered_and_run() {
    if has_rdma() {
        eprintln!("this host has RDMA: rig_cluster.rs checks it");
        return;
    }
    let args = [
        "--json",
        "--skip",
        "gpu",
        "--pairs",
        "--perf-args",
        "-s 4096 -n 10",
        "--pair-port",
        "19700",
    ];
    let mut budget = args.to_vec();
    budget.extend(["--budget", "5"]);
    let (code, out, err) = mpirun_env(4, &budget, &[("ERDMA_CLUSTER_HOOK", "suspect:2")]);
    assert_eq!(code, Some(2), "{out}{err}");
    let plan = "erdma-cluster: pair stage: full matrix (circle method, both directions at once), \
                1 partner per round, 3 rounds + at most 2 retest rounds, 1 step each";
    assert_eq!(err.matches(plan).count(), 1, "{err}");
    assert!(err.contains("within --budget"), "{err}");
    let v: serde_json::Value = serde_json::from_str(out.trim()).expect(&out);
    // (3 + 2) rounds x 1 step x (2 s assumed + 0.3 s).
    let predicted = v["predicted_wall_s"].as_f64().expect("predicted_wall_s");
    assert!((predicted - 11.5).abs() < 1e-9, "{predicted}");
    assert!(v["pair_wall_s"].as_f64().unwrap() > 0.0, "{v}");
    assert!(
        v["schedule"]
            .as_str()
            .unwrap()
            .contains("both directions at once")
    );
    // 12 directed pairs, both sides each.
    assert_eq!(v["pairs"]["runs"].as_array().unwrap().len(), 24);
    let rt = &v["retest"];
    assert_eq!(
        rt["suspects"],
        serde_json::json!([{"kind": "host", "hosts": [2], "nic": null}])
    );
    let rounds = rt["rounds"].as_array().unwrap();
    assert_eq!(rounds.len(), 2, "{rt}");
    let mut partners = Vec::new();
    for r in rounds {
        let p = &r[0];
        assert_eq!(p[0], 2, "{rt}");
        partners.push(p[1].as_u64().unwrap());
    }
    assert!(partners[0] != partners[1] && !partners.contains(&2), "{rt}");
    // 2 pairs x 2 directions x 2 sides, each failing without a device.
    let runs = rt["runs"].as_array().unwrap();
    assert_eq!(runs.len(), 8, "{rt}");
    for r in runs {
        let e = r["error"].as_str().expect("every retest run failed");
        assert!(e.starts_with("no RDMA device"), "{e}");
    }
    // Without --budget: today's schedule, each direction its own run, and
    // the retest the same way.
    let (code, out, err) = mpirun_env(4, &args, &[("ERDMA_CLUSTER_HOOK", "suspect:1")]);
    assert_eq!(code, Some(2), "{out}{err}");
    assert!(
        err.contains("pair stage: full matrix (circle method, each direction its own run)"),
        "{err}"
    );
    let v: serde_json::Value = serde_json::from_str(out.trim()).expect(&out);
    // (3 + 2) rounds x 2 steps x 2.3 s.
    assert!(
        (v["predicted_wall_s"].as_f64().unwrap() - 23.0).abs() < 1e-9,
        "{v}"
    );
    assert_eq!(v["pairs"]["runs"].as_array().unwrap().len(), 24);
    assert_eq!(
        v["retest"]["runs"].as_array().unwrap().len(),
        8,
        "{}",
        v["retest"]
    );
}

#[test]
fn a_budget_too_small_or_without_pairs_is_said_once() {
    let (code, _, err) = mpirun(4, &["--pairs", "--budget", "0.01"]);
    assert_eq!(code, Some(3), "{err}");
    assert_eq!(err.matches("give a larger budget").count(), 1, "{err}");
    let (code, _, err) = mpirun(2, &["--budget", "5"]);
    assert_eq!(code, Some(3), "{err}");
    assert_eq!(err.matches("--budget 5: needs --pairs").count(), 1, "{err}");
}
