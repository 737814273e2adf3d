//! erdma-cluster under a real `mpirun -np 2` on one host (CI: no RDMA
//! device): both ranks' reports gathered, the shared host flagged, one exit
//! status for the job. The rig runs it with devices (rig_cluster.rs).
#![allow(clippy::disallowed_methods)] // a test reads and writes its files directly
#![cfg(feature = "mpi")]

mod cgroup_common;
mod cluster_common;

use std::time::{Duration, Instant};

use cgroup_common::Cgroup;
use cluster_common::{check, launcher, mpirun, mpirun_env, mpirun_with, output};
use erdma_bench::cluster::diagnose::{Rail, cell_line};

fn has_rdma() -> bool {
    std::path::Path::new("/sys/class/infiniband_verbs/abi_version").exists()
}

/// A JSON pair-stage job of short runs (without RDMA each fails at once),
/// then `extra`.
fn pair_job<'a>(extra: &[&'a str]) -> Vec<&'a str> {
    let mut a = vec![
        "--json",
        "--skip",
        "gpu",
        "--pairs",
        "--perf-args",
        "-s 4096 -n 10",
    ];
    a.extend_from_slice(extra);
    a
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
    let (code, out, err) = mpirun(2, &pair_job(&[]));
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

/// A rank stopped after MPI init (SIGSTOP, as a hung host would be): rank
/// 0 names it lost after --timeout, reports the hosts that answered (the
/// lost one without a report of its own) and the job ends with status 5
/// instead of hanging.
#[test]
fn a_stopped_rank_is_named_and_the_job_ends_with_5() {
    let t = Instant::now();
    let (code, out, err) = mpirun_env(
        2,
        &["--skip", "gpu", "--timeout", "3"],
        &[("ERDMA_CLUSTER_HOOK", "stop:1")],
    );
    assert_eq!(code, Some(5), "{out}{err}");
    assert!(
        out.contains(
            "rank 1 lost: no answer within --timeout 3 s while gathering the hosts' checks"
        ),
        "{out}"
    );
    assert!(out.contains("unknown (rank 1)"), "{out}");
    assert!(out.contains(", a rank lost (exit 5)"), "{out}");
    // mpirun's start, 3 s, mpirun ending the job.
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
/// starts (a host hung mid-stage). Rank 0 names it lost after --timeout,
/// the others go on without it (its later runs are not started), the
/// report says so (a `lost` verdict, the cluster.lost problem) and the job
/// ends with 5; the rounds are kept under --out, those that lost rank 1
/// marked so. `--resume` runs rounds 1 and 2 again and the report has
/// every round's runs. A resume by another job is exit 3.
#[test]
fn a_rank_lost_mid_pairs_the_others_finish_and_the_job_resumes() {
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
    let (code, out, err) = mpirun_env(4, &base, &[("ERDMA_CLUSTER_HOOK", "stop-in-round:1:1")]);
    assert_eq!(code, Some(5), "{out}{err}");
    // One rank-0 wait of --timeout, not one per round.
    assert!(t.elapsed() < Duration::from_secs(100), "{:?}", t.elapsed());
    let v: serde_json::Value = serde_json::from_str(out.trim()).expect(&out);
    assert_eq!(v["exit_status"], 5, "{v:#}");
    let lost: Vec<&serde_json::Value> = v["verdicts"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|x| x["kind"] == "lost")
        .collect();
    assert_eq!(lost.len(), 1, "{v:#}");
    let who = lost[0]["hosts"][0].as_str().unwrap();
    assert!(who.ends_with(" (rank 1)"), "{who}");
    assert!(
        lost[0]["why"]
            .as_str()
            .unwrap()
            .contains("no answer within --timeout 45 s while meeting between pair rounds"),
        "{}",
        lost[0]
    );
    let problem = v["problems"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["id"] == "cluster.lost")
        .unwrap_or_else(|| panic!("{v:#}"));
    assert!(
        problem["found"]
            .as_str()
            .unwrap()
            .starts_with("rank 1 lost: ")
    );
    // Rank 1 took part in round 0 only (4 run sides); the others ran every
    // round's runs but those with rank 1 after it was named lost: its
    // partner's sides of round 1's one step (both directions at once), begun
    // before the meeting after it named rank 1 lost.
    let runs = v["pairs"]["runs"].as_array().unwrap();
    let with_1 = |r: &&serde_json::Value| r["client"] == 1 || r["server"] == 1;
    assert!(runs.iter().filter(with_1).count() <= 6, "{v:#}");
    assert!(runs.len() >= 2 * 3 * 2 + 4, "{}", runs.len());
    let rounds = dir.join("rounds");
    let read = |f: &str| -> serde_json::Value {
        serde_json::from_str(&std::fs::read_to_string(rounds.join(f)).unwrap()).unwrap()
    };
    let r0 = read("round-000.json");
    assert_eq!(r0["round"], 0);
    assert_eq!(r0["job"]["ranks"], 4);
    assert_eq!(r0["lost"], serde_json::json!([]));
    // Round 0: two pairs, both directions, both sides: 2 runs per rank.
    let kept: Vec<usize> = r0["runs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r.as_array().unwrap().len())
        .collect();
    assert_eq!(kept, [2, 2, 2, 2], "{r0}");
    for f in ["round-001.json", "round-002.json"] {
        assert_eq!(read(f)["lost"], serde_json::json!([1]), "{f}");
    }

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
    assert_eq!(files, 3, "round 0 kept, rounds 1 and 2 written again");
    assert_eq!(read("round-001.json")["lost"], serde_json::json!([]));
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

/// A rank killed mid-stage (SIGKILL, as a crashed host): under
/// `mpirun --enable-recovery` the other three finish the pair stage
/// without it and rank 0's report names it lost (exit_status 5 in the
/// document; Open MPI's mpirun itself then exits 0, as documented).
#[test]
fn a_rank_killed_mid_pairs_the_others_finish() {
    if has_rdma() {
        eprintln!("this host has RDMA: rig_cluster.rs checks it");
        return;
    }
    let (v, wall) = killed_job(&["--pairs", "--timeout", "45"], "kill-in-round:2:1");
    assert!(wall < Duration::from_secs(100), "{wall:?}");
    // The live ranks met every partner but rank 2 in every round.
    let runs = v["pairs"]["runs"].as_array().unwrap();
    let mut clients: Vec<(u64, u64)> = runs
        .iter()
        .filter(|r| r["role"] == "client" && r["client"] != 2 && r["server"] != 2)
        .map(|r| (r["client"].as_u64().unwrap(), r["server"].as_u64().unwrap()))
        .collect();
    clients.sort();
    clients.dedup();
    assert_eq!(
        clients.len(),
        6,
        "the 3 live ranks' 6 directions: {clients:?}"
    );
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
    let args = pair_job(&[
        "--pair-port",
        "19700",
        "--rails-serial",
        "--directions-serial",
    ]);
    let budget = pair_job(&["--pair-port", "19700", "--budget", "5"]);
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
    // The full matrix planned every cell: none is left out, each failed.
    assert_eq!(v["pairs"]["not_measured"], serde_json::json!([]), "{v}");
    assert_eq!(v["pairs"]["status"], "fail");
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
    // Without --budget, --directions-serial: the schedule before issue 35,
    // each direction its own run, and the retest the same way.
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
    assert!(v["pairs"].get("not_measured").is_none(), "no schedule: {v}");
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

/// `erdma-cluster --json --skip gpu ARGS` of 4 ranks under `mpirun
/// --enable-recovery` with `ERDMA_CLUSTER_HOOK=hook` killing rank 2: the
/// report (exit status 5 in it, rank 2 its one lost verdict) and the wall
/// time. Open MPI's mpirun itself then exits 0 (documented).
fn killed_job(args: &[&str], hook: &str) -> (serde_json::Value, Duration) {
    let t = Instant::now();
    let all: Vec<&str> = ["--json", "--skip", "gpu"]
        .iter()
        .chain(args)
        .copied()
        .collect();
    let (code, out, err) = mpirun_with(
        4,
        &["--enable-recovery"],
        &all,
        &[("ERDMA_CLUSTER_HOOK", hook)],
    );
    let wall = t.elapsed();
    let v: serde_json::Value =
        serde_json::from_str(out.trim()).unwrap_or_else(|e| panic!("{e}: {code:?}\n{out}{err}"));
    assert_eq!(v["exit_status"], 5, "{v:#}");
    let lost = lost_verdicts(&v);
    assert_eq!(lost.len(), 1, "{lost:?}");
    assert!(lost[0].0.ends_with(" (rank 2)"), "{lost:?}");
    (v, wall)
}

/// The lost verdicts of a report: (host, why).
fn lost_verdicts(v: &serde_json::Value) -> Vec<(String, String)> {
    v["verdicts"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|x| x["kind"] == "lost")
        .map(|x| {
            (
                x["hosts"][0].as_str().unwrap().to_owned(),
                x["why"].as_str().unwrap().to_owned(),
            )
        })
        .collect()
}

/// The NCCL stage's stage `name` of `collective` in a report.
fn nccl_stage<'a>(v: &'a serde_json::Value, name: &str, coll: &str) -> &'a serde_json::Value {
    v["nccl"]["stages"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["name"].as_str().unwrap().starts_with(name) && s["collective"] == coll)
        .unwrap_or_else(|| panic!("no stage {name} {coll}: {}", v["nccl"]))
}

/// A rank that hangs in the NCCL stage (SIGSTOP as the cluster run
/// starts, after the hosts' runs): the others' collectives end after -T
/// (= --timeout), their timeout census finds it silent, rank 0 names it
/// lost without waiting for it again, and the job goes on to the report
/// and exits 5. The pair stage's runs stay in the report and under --out;
/// the cluster stage fails naming it, the hosts' runs that ended stay ok.
#[test]
fn a_rank_stopped_in_the_nccl_stage_is_lost_and_the_report_kept() {
    if has_rdma() {
        eprintln!("this host has RDMA: rig_cluster.rs checks it");
        return;
    }
    let dir = std::env::temp_dir().join(format!("erdma-cluster-nccl-stop-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let t = Instant::now();
    let (code, out, err) = mpirun_env(
        4,
        &[
            "--json",
            "--skip",
            "gpu",
            "--pairs",
            "--nccl",
            "--nccl-args",
            "-b 8 -e 4K -f 8 -n 2 -w 1 -c 1",
            // The least --pairs takes: the collectives' -T too.
            "--timeout",
            "45",
            "--out",
            dir.to_str().unwrap(),
        ],
        &[("ERDMA_CLUSTER_HOOK", "hosts-apart:2,stop-in-nccl:1")],
    );
    let wall = t.elapsed();
    assert_eq!(code, Some(5), "{out}{err}");
    // One --timeout (the collectives' -T) and the census's 3 s, not two
    // timeouts, nor mpirun's end.
    assert!(wall < Duration::from_secs(80), "{wall:?}");
    let v: serde_json::Value = serde_json::from_str(out.trim()).expect(&out);
    assert_eq!(v["exit_status"], 5);
    let lost = lost_verdicts(&v);
    assert_eq!(lost.len(), 1, "{lost:?}");
    assert!(lost[0].0.ends_with(" (rank 1)"), "{lost:?}");
    assert!(
        lost[0]
            .1
            .contains("silent in the NCCL stage's timeout census"),
        "{lost:?}"
    );
    // The pair stage: 12 directions, both sides, each failing without RDMA.
    assert_eq!(v["pairs"]["runs"].as_array().unwrap().len(), 24, "{v:#}");
    let kept: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("cluster.json")).unwrap()).unwrap();
    assert_eq!(kept["pairs"]["runs"].as_array().unwrap().len(), 24);
    assert_eq!(kept["exit_status"], 5);
    assert_eq!(std::fs::read_dir(dir.join("rounds")).unwrap().count(), 3);
    // The hosts' runs ended before rank 1 stopped; the cluster run failed
    // on every live rank with the census's verdict, rank 1 lost.
    assert_eq!(v["nccl"]["status"], "fail");
    let hosts: Vec<&serde_json::Value> = v["nccl"]["stages"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|s| s["scope"] == "host")
        .collect();
    assert_eq!(hosts.len(), 2, "{}", v["nccl"]);
    for h in hosts {
        assert_eq!(h["status"], "ok", "{h}");
        assert_eq!(h["rows"].as_array().unwrap().len(), 4, "{h}");
    }
    let c = nccl_stage(&v, "cluster", "all_reduce");
    assert_eq!(c["status"], "fail");
    let e = c["error"].as_str().unwrap();
    assert!(
        e.contains("rank 0: exit 4: ") && e.contains("rank 1 (pid "),
        "{e}"
    );
    assert!(e.contains("did not respond: stopped"), "{e}");
    assert!(
        e.contains("rank 1: lost: silent in the NCCL stage's timeout census"),
        "{e}"
    );
    let files: Vec<String> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .filter(|f| f.starts_with("nccl-host-"))
        .collect();
    assert_eq!(files.len(), 2, "{files:?}");
    eprintln!("stopped in the NCCL stage: the job took {wall:?}");
    std::fs::remove_dir_all(&dir).unwrap();
}

/// A rank killed in the NCCL stage (SIGKILL, under `mpirun
/// --enable-recovery`): the same, and the runs left after the cluster run
/// that lost it are not started (each would wait a timeout) but reported
/// as not run. Short: no pair stage, --timeout 5.
#[test]
fn a_rank_killed_in_the_nccl_stage_the_others_report_it() {
    if has_rdma() {
        eprintln!("this host has RDMA: rig_cluster.rs checks it");
        return;
    }
    let (v, wall) = killed_job(
        &[
            "--nccl",
            "--nccl-tests",
            "all_reduce,all_gather",
            "--nccl-args",
            "-b 8 -e 4K -f 8 -n 2 -w 1 -c 1",
            "--timeout",
            "5",
        ],
        "kill-in-nccl:2",
    );
    assert!(wall < Duration::from_secs(40), "{wall:?}");
    assert_eq!(nccl_stage(&v, "host ", "all_reduce")["status"], "ok");
    let c = nccl_stage(&v, "cluster", "all_reduce");
    assert_eq!(c["status"], "fail");
    assert!(
        c["error"].as_str().unwrap().contains("rank 2: lost: "),
        "{c}"
    );
    for name in ["host ", "cluster"] {
        let s = nccl_stage(&v, name, "all_gather");
        assert_eq!(s["status"], "fail", "{s}");
        assert!(s["rows"].as_array().unwrap().is_empty(), "{s}");
        assert!(
            s["error"].as_str().unwrap().starts_with(
                "rank 0,1,3: not run: a rank was lost earlier in the NCCL stage; rank 2: lost: "
            ),
            "{s}"
        );
    }
    eprintln!("killed in the NCCL stage: the job took {wall:?}");
}

/// erdma-cluster under mpirun as several app contexts (`-np N env K=V
/// erdma-cluster ARGS : ...`): each `(ranks, env)` its own environment
/// (a hook for some ranks only), `env` for all.
fn mpirun_apps(
    apps: &[(usize, &[(&str, &str)])],
    args: &[&str],
    env: &[(&str, &str)],
) -> (Option<i32>, String, String) {
    let mut c = launcher(&[], env);
    for (i, (np, app_env)) in apps.iter().enumerate() {
        if i > 0 {
            c.arg(":");
        }
        c.arg("-np").arg(np.to_string()).arg("env");
        c.args(app_env.iter().map(|(k, v)| format!("{k}={v}")));
        c.arg(env!("CARGO_BIN_EXE_erdma-cluster")).args(args);
    }
    output(c)
}

/// Issue 24: the NCCL stage's host verdict, end to end. Six ranks taken
/// for three hosts of two (`hosts-apart:2`: a host of one rank moves
/// nothing, so has no busbw), the stage on the MPI backend; host 0's ranks
/// run with `ERDMA_BENCH_HOOK=slow:0:1000` (its first rank waits 1 s before
/// each collective). Each host's own stage must report its own time (they
/// once all showed the cluster's mean: the time reduction spanned every
/// process, as nccl-tests' NCCL_TESTS_SPLIT does), and the slow host gets
/// a `host` verdict from the NCCL stage (a warning) naming it alone.
///
/// Built to hold on a busy machine (issue 33). Six ranks polling in MPI on
/// two cores: the healthy hosts' times follow the scheduler. With a 5 ms
/// hook and one core busy host 1 measured 2.4 ms against host 0's 9.2 ms
/// (the test wanted under a quarter); with the machine at load 14, 12.8
/// and 52 ms against a 500 ms hook. A wide spread between healthy hosts
/// rightly widens the judge's line, down to its floor (0.05 of the
/// reference): the hook must put host 0 under that floor however busy the
/// machine, and 1 s does (0.0024 with one core busy, 0.05 at load 14).
#[test]
fn a_slow_host_in_the_nccl_stage_is_named() {
    if has_rdma() {
        eprintln!("this host has RDMA: rig_cluster.rs checks it");
        return;
    }
    // One size, few iterations: host 0's stages take 1 s per collective.
    let args = [
        "--json",
        "--skip",
        "gpu",
        "--nccl",
        "--nccl-tests",
        "all_reduce",
        "--nccl-args",
        "-b 64K -e 64K -n 2 -w 1 -c 1",
    ];
    let slow: &[(&str, &str)] = &[("ERDMA_BENCH_HOOK", "slow:0:1000")];
    let (code, out, err) = mpirun_apps(
        &[(2, slow), (4, &[])],
        &args,
        &[("ERDMA_CLUSTER_HOOK", "hosts-apart:2")],
    );
    // rdma.devices fails on every host: 2.
    assert_eq!(code, Some(2), "{out}{err}");
    let v: serde_json::Value = serde_json::from_str(out.trim()).expect(&out);
    let host = v["hosts"][0]["host"].as_str().unwrap().to_owned();
    let stages = v["nccl"]["stages"].as_array().unwrap();
    let time = |name: &str| -> f64 {
        let s = stages.iter().find(|s| s["name"] == name).expect(name);
        assert_eq!(s["status"], "ok", "{s}");
        s["rows"].as_array().unwrap().last().unwrap()["time_us"]
            .as_f64()
            .unwrap()
    };
    let (t0, t1, t2) = (
        time(&format!("host {host}-0")),
        time(&format!("host {host}-1")),
        time(&format!("host {host}-2")),
    );
    eprintln!("64 KiB all_reduce: host 0 {t0} us, host 1 {t1} us, host 2 {t2} us");
    // 1 s per collective on host 0; the others milliseconds.
    assert!(t0 > 900_000.0, "{t0} {t1} {t2}");
    assert!(t1 < t0 / 4.0 && t2 < t0 / 4.0, "{t0} {t1} {t2}");
    let verdicts: Vec<&serde_json::Value> = v["verdicts"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|x| x["source"] == "nccl")
        .collect();
    assert_eq!(verdicts.len(), 1, "{}", v["verdicts"]);
    let h = verdicts[0];
    assert_eq!(h["kind"], "host", "{h}");
    assert_eq!(h["hosts"], serde_json::json!([format!("{host}-0")]), "{h}");
    assert_eq!(h["status"], "warn", "{h}");
    assert!(h["numbers"]["nccl_busbw"].as_f64().unwrap() > 0.0, "{h}");
}

/// Issue 37: the NCCL pairs without GPUs or RDMA. Four ranks as four
/// hosts meet pair by pair (the pair stage's full schedule: 3 rounds, the
/// two pairs of a round at once on communicators split per pair) and run
/// all_reduce on the MPI backend, which the report names. Rank 2 is slowed
/// by the driver's slow hook (it waits 2 s before each collective, so
/// every pair it is in measures far under the others whatever the load:
/// with 500 ms and the other tests of this file beside it, the healthy
/// pairs measured 0.29 Gb/s and more against rank 2's 0.017, and no
/// verdict. With 2 s the whole file passed (17 of 17, 227 s); with three
/// busy loops beside this test alone on the 2-core machine the healthy
/// pairs measured 0.0008 to 0.022 Gb/s against 0.00015 to 0.00026, a
/// spread the diagnosis rightly does not judge: such a job runs again,
/// three at most, see [`slow_rank_visible`]):
/// the matrix on the "nccl" rail is full, and the diagnosis names rank 2
/// (a host verdict, the retest seeing it again) and no other host.
#[test]
fn nccl_pairs_fill_the_matrix_and_name_a_slow_host() {
    if has_rdma() {
        eprintln!("this host has RDMA: rig_cluster.rs checks it");
        return;
    }
    let job = || {
        let t0 = Instant::now();
        let (code, out, err) = mpirun_env(
            4,
            &[
                "--json",
                "--skip",
                "gpu",
                "--nccl-pairs",
                "--nccl-args",
                "-b 64K -e 64K -n 2 -w 1 -c 1",
            ],
            &[
                ("ERDMA_CLUSTER_HOOK", "slow:2,nccl-slow-ms:2000"),
                // The ranks waiting in MPI give their CPU up: on a busy
                // machine the healthy pairs' collectives then take
                // milliseconds, not the scheduler's quanta.
                ("OMPI_MCA_mpi_yield_when_idle", "1"),
            ],
        );
        eprintln!("4 ranks, NCCL pairs with a slow rank: {:?}", t0.elapsed());
        (code, out, err)
    };
    // The slowed rank's pairs must stand out of this job's noise (under
    // a quarter of the healthy pairs and under the line the job's own
    // cells give) before the diagnosis can be asked to name it: a job on
    // a machine loaded far past one busy core (healthy pairs at 0.0008 to
    // 0.022 Gb/s) runs again, three jobs at most.
    let mut why = Vec::new();
    let (code, out, err, v) = loop {
        let (code, out, err) = job();
        let v: serde_json::Value = serde_json::from_str(out.trim()).expect(&out);
        match slow_rank_visible(&v["pairs"]["rails"][0]["gbps"], 2) {
            Ok(()) => break (code, out, err, v),
            Err(e) if why.len() < 2 => {
                eprintln!("the job's noise hid the slowed rank: {e}");
                why.push(e);
            }
            Err(e) => panic!("the job's noise hid the slowed rank in 3 jobs of 3: {why:?} {e}"),
        }
    };
    // rdma.devices fails on every host, and the confirmed host verdict: 2.
    assert_eq!(code, Some(2), "{out}{err}");
    assert_eq!(
        err.matches("erdma-cluster: NCCL pairs: 3 rounds").count(),
        1,
        "{err}"
    );
    let p = &v["pairs"];
    assert_eq!(p["nccl"]["backend"], "mpi", "{}", p["nccl"]);
    assert_eq!(p["nccl"]["rail_name"], "nccl");
    assert!(
        p["nccl"]["why"].as_str().unwrap().contains("not NCCL"),
        "{}",
        p["nccl"]
    );
    let rails = p["rails"].as_array().unwrap();
    assert_eq!(rails.len(), 1, "{p}");
    assert_eq!(rails[0]["rail"], 1000);
    let g = &rails[0]["gbps"];
    let cell = |i: usize, j: usize| g[i][j].as_f64().unwrap_or_else(|| panic!("{i}->{j}: {g}"));
    for i in 0..4 {
        for j in (0..4).filter(|&j| j != i) {
            // One all_reduce per pair: both directions alike.
            assert_eq!(cell(i, j), cell(j, i));
        }
    }
    assert_eq!(p["status"], "ok", "{p}");
    let label = v["hosts"][2]["label"].as_str().unwrap();
    let hosts: Vec<&serde_json::Value> = v["verdicts"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|x| x["kind"] == "host")
        .collect();
    assert_eq!(hosts.len(), 1, "{}\n{g}", v["verdicts"]);
    assert_eq!(
        hosts[0]["hosts"],
        serde_json::json!([label]),
        "{}",
        hosts[0]
    );
    assert!(
        hosts[0]["why"].as_str().unwrap().starts_with("rail nccl:"),
        "{}",
        hosts[0]
    );
    assert_eq!(hosts[0]["retested"], true, "{}", hosts[0]);
}

/// Issue 33 row 2: the NCCL stage's default sizes are chosen for the
/// backend and the memory of each host. In a cgroup of 896 MiB, 2 ranks
/// of the old fixed sizes (-e 64M: 3 buffers and 256 MiB of staged copies
/// each, 896 MiB in all) are refused by the collectives' memory check and
/// the stage fails; with the defaults the job picks 1M..4M (the largest
/// whose buffers take at most half the room of the cgroup), says so in
/// the JSON, the text and report.html, and both runs pass.
#[test]
fn the_nccl_stage_sizes_fit_the_memory_of_the_host() {
    if has_rdma() {
        eprintln!("this host has RDMA: rig_cluster.rs checks it");
        return;
    }
    let Some(cg) = Cgroup::new("nccl-sizes", 896 << 20) else {
        return;
    };
    let dir = std::env::temp_dir().join(format!("erdma-cluster-sizes-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let job = |extra: &[&str]| {
        let mut c = launcher(&[], &[]);
        c.args(["-np", "2"])
            .arg(env!("CARGO_BIN_EXE_erdma-cluster"))
            .args(["--json", "--skip", "gpu", "--nccl", "--out"])
            .arg(&dir)
            .args(extra);
        let (code, out, err) = output(cg.wrap(&c));
        // rdma.devices fails without RDMA: 2 (never 137, killed).
        assert_eq!(code, Some(2), "{out}{err}");
        let v: serde_json::Value = serde_json::from_str(out.trim()).expect(&out);
        v
    };
    // The old behaviour: -e 64M does not fit, the memory check says so.
    let v = job(&["--nccl-args", "-b 1M -e 64M -f 4 -w 2 -n 10 -c 1"]);
    let c = nccl_stage(&v, "cluster", "all_reduce");
    assert_eq!(c["status"], "fail", "{c}");
    let e = c["error"].as_str().unwrap();
    assert!(
        e.contains("cannot hold the buffers of its ranks (the memory cgroup "),
        "{e}"
    );
    // The defaults: chosen for backend mpi and the cgroup's room.
    let v = job(&[]);
    let n = &v["nccl"];
    assert_eq!(n["backend"], "mpi");
    assert_eq!(n["args"], "-b 1M -e 4M -f 4 -w 2 -n 10 -c 1", "{n}");
    assert_eq!(n["skipped"], serde_json::Value::Null, "{n}");
    let why = n["why"].as_str().unwrap();
    let sizes = "sizes 1M..4M chosen for backend mpi and 0.";
    assert!(why.contains(sizes), "{why}");
    assert!(
        why.contains(" GB available (rank ")
            && why.contains("'s host, for its 2 rank(s); the buffers take at most 1/2; "),
        "{why}"
    );
    for name in ["host ", "cluster"] {
        let s = nccl_stage(&v, name, "all_reduce");
        assert_eq!(s["status"], "ok", "{s}");
        let sizes: Vec<u64> = s["rows"]
            .as_array()
            .unwrap()
            .iter()
            .map(|r| r["size"].as_u64().unwrap())
            .collect();
        assert_eq!(sizes, [1 << 20, 4 << 20], "{s}");
        assert!(
            s["rerun"]
                .as_str()
                .unwrap()
                .ends_with("--nccl-args '-b 1M -e 4M -f 4 -w 2 -n 10 -c 1'"),
            "{s}"
        );
    }
    let html = std::fs::read_to_string(dir.join("report.html")).unwrap();
    assert!(html.contains(sizes), "report.html does not say the sizes");
    let whole: serde_json::Value =
        serde_json::from_slice(&std::fs::read(dir.join("cluster.json")).unwrap()).unwrap();
    assert_eq!(whole["nccl"]["why"], why);
    std::fs::remove_dir_all(&dir).unwrap();
}

/// Issue 33 row 11: a run that would not end ends at its --nccl-deadline.
/// `-N 100000000` cycles of one size: the ranks agree after the size they
/// were running; `-n 2000000000` iterations of one size: stopped within
/// it, -T (--timeout) after the deadline. Every stage fails as out of time
/// naming its ranks, the report is written, no rank is lost and the next
/// run (the cluster's after the host's) starts in step.
#[test]
fn an_endless_nccl_run_ends_at_its_deadline() {
    if has_rdma() {
        return;
    }
    endless_run_ends("-b 8 -e 8 -N 100000000 -n 1 -w 0 -c 0");
    endless_run_ends("-b 8 -e 8 -n 2000000000 -w 0 -c 0");
}

fn endless_run_ends(nccl_args: &str) {
    let t = Instant::now();
    let (code, out, err) = mpirun(
        2,
        &[
            "--json",
            "--skip",
            "gpu",
            "--nccl",
            "--nccl-args",
            nccl_args,
            "--nccl-deadline",
            "3",
            "--timeout",
            "5",
        ],
    );
    let took = t.elapsed();
    assert_eq!(code, Some(2), "{out}{err}");
    let v: serde_json::Value = serde_json::from_str(out.trim()).expect(&out);
    for name in ["host ", "cluster"] {
        let s = nccl_stage(&v, name, "all_reduce");
        assert_eq!(s["status"], "fail", "{s}");
        let e = s["error"].as_str().unwrap();
        assert!(
            e.starts_with(
                "the stage ran out of time (--nccl-deadline 3 s; the rows measured before are kept): rank 0,1: exit 4: "
            ) && e.contains(": Test deadline (3s) ran out of time")
                && !e.contains("lost"),
            "{e}"
        );
        // Stopped after a size: its rows so far came back.
        assert!(!s["rows"].as_array().unwrap().is_empty(), "{s}");
    }
    let problems = v["problems"].as_array().unwrap();
    assert!(
        problems.iter().all(|p| p["id"] != "cluster.lost"),
        "{problems:?}"
    );
    // Two runs of at most 3 + 5 s, the rest the job's own start and
    // checks: far from endless, with room for a busy machine.
    assert!(took < Duration::from_secs(150), "{nccl_args}: {took:?}");
}

/// Whether rank `slow`'s cells of a 4-rank matrix `g` (Gb/s) stand out of
/// the job's noise: every one under a quarter of the others' slowest and
/// under the line the job's own cells give (`diagnose::cell_line`).
fn slow_rank_visible(g: &serde_json::Value, slow: usize) -> Result<(), String> {
    let n = g.as_array().map_or(0, Vec::len);
    let mut rail = Rail::new(n);
    for (c, row) in rail.gbps.iter_mut().enumerate() {
        for (s, x) in row.iter_mut().enumerate() {
            *x = g[c][s].as_f64();
        }
    }
    let (mut slowed, mut healthy) = (Vec::new(), Vec::new());
    for c in 0..n {
        for s in (0..n).filter(|&s| s != c) {
            let x = rail.gbps[c][s].ok_or(format!("{c} -> {s} not measured: {g}"))?;
            if c == slow || s == slow {
                slowed.push(x);
            } else {
                healthy.push(x);
            }
        }
    }
    let fastest_slow = slowed.iter().copied().fold(0.0, f64::max);
    let slowest_fast = healthy.iter().copied().fold(f64::MAX, f64::min);
    eprintln!(
        "busbw x 8: rank {slow}'s pairs at most {fastest_slow} Gb/s, the others at least {slowest_fast}"
    );
    let (reference, line) = cell_line(&rail).ok_or(format!("no reference: {g}"))?;
    if fastest_slow < slowest_fast / 4.0 && fastest_slow / reference < line {
        Ok(())
    } else {
        Err(format!(
            "rank {slow} at most {fastest_slow} Gb/s, the others at least {slowest_fast}, \
             the line {line:.3} of {reference}: {g}"
        ))
    }
}
