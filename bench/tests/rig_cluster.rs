//! erdma-cluster in the rig: `mpirun -np 2` in the VM, both ranks seeing the
//! real rxe and siw devices. rig/test.sh runs it with --include-ignored.
#![allow(clippy::disallowed_methods)] // a test reads and writes its files directly
#![cfg(feature = "mpi")]

mod cluster_common;

use cluster_common::{check, mpirun, mpirun_env};
use erdma_bench::cluster::diagnose::{Rail, cell_line};

#[test]
#[ignore = "needs RDMA devices: run in the rig"]
fn two_ranks_gather_real_reports() {
    let _vm = busy();
    let (code, text, err) = mpirun(2, &["--json", "--skip", "gpu"]);
    // Both ranks on one VM: a warning at least, no failure.
    assert_eq!(code, Some(1), "{text}{err}");
    let v: serde_json::Value = serde_json::from_str(text.trim()).expect(&text);
    assert_eq!(v["reports"].as_array().unwrap().len(), 2);
    for i in 0..2 {
        let devices = check(&v, i, "rdma.devices");
        assert_eq!(devices["status"], "ok", "{devices}");
    }
    let problems = v["problems"].as_array().unwrap();
    let siw = std::env::var("ERDMA_RIG_SIW").is_ok_and(|s| !s.is_empty());
    if siw {
        // With NCCL_IB_HCA unset NCCL would try the iWARP siw devices: the
        // healthy rig's one warning (as erdma-doctor alone says), on both ranks.
        assert_eq!(problems.len(), 1, "{problems:?}");
        assert_eq!(problems[0]["id"], "rdma.mode");
        assert_eq!(problems[0]["hosts"].as_array().unwrap().len(), 2);
    } else {
        assert!(problems.is_empty(), "{problems:?}");
    }
    let across = v["across"].as_array().unwrap();
    assert_eq!(across.len(), 1, "{across:?}");
    assert_eq!(across[0]["id"], "cluster.one-rank-per-host");
}

/// One `erdma-cluster --pairs` job on two devices of the rig, with `extra`
/// options.
fn pairs_job(
    devices: &str,
    perf_args: &str,
    port: &str,
    extra: &[&str],
) -> (Option<i32>, String, String) {
    ranks_job(2, devices, perf_args, port, extra, &[])
}

/// `erdma-cluster --skip gpu --pairs` of `np` ranks on `devices` (as
/// `--devices` takes them), erdma-perf's `perf_args`, ports from `port`,
/// with `extra` options and `env` for every rank.
fn ranks_job(
    np: usize,
    devices: &str,
    perf_args: &str,
    port: &str,
    extra: &[&str],
    env: &[(&str, &str)],
) -> (Option<i32>, String, String) {
    let mut args = vec![
        "--skip",
        "gpu",
        "--pairs",
        "--devices",
        devices,
        "--perf-args",
        perf_args,
        "--pair-port",
        port,
    ];
    args.extend_from_slice(extra);
    mpirun_env(np, &args, env)
}

/// `erdma-cluster --pairs` on two devices of the rig: the matrix (both
/// directions measured), and each client's erdma-perf document under --out;
/// with `baseline_port`, two more jobs compare themselves with that one.
fn pairs_on(devices: &str, perf_args: &str, tag: &str, port: &str, baseline_port: Option<&str>) {
    // One pair job at a time: two would share the 2-CPU VM (and its ports).
    static ONE: std::sync::Mutex<()> = std::sync::Mutex::new(());
    let _one = ONE.lock().unwrap_or_else(|e| e.into_inner());
    let dir =
        std::env::temp_dir().join(format!("erdma-cluster-pairs-{tag}-{}", std::process::id()));
    let job = || {
        let _ = std::fs::remove_dir_all(&dir);
        let (code, text, err) = pairs_job(
            devices,
            perf_args,
            port,
            &["--json", "--out", dir.to_str().unwrap()],
        );
        let v: serde_json::Value = serde_json::from_str(text.trim()).expect(&text);
        (code, text, err, v)
    };
    let (mut code, mut text, mut err, mut v) = job();
    if v["pairs"]["status"] != "ok" && siw_stall_only(&v) {
        // siw's flake (see siw_stall_only): a run lost in its connection
        // exchange, never in its transfer. Once more; a second is a failure.
        eprintln!("siw stalled in a connection exchange: the job once more\n{err}");
        (code, text, err, v) = job();
    }
    let pairs = &v["pairs"];
    assert_eq!(pairs["status"], "ok", "{pairs:#}{err}");
    // Both ranks on one VM: the shared-host warning, nothing worse.
    assert_eq!(code, Some(1), "{text}{err}");
    for (i, j) in [(0, 1), (1, 0)] {
        let g = pairs["gbps"][i][j].as_f64().expect("a bandwidth");
        assert!(g > 0.0, "{i} -> {j}: {g}");
    }
    assert_eq!(pairs["runs"].as_array().unwrap().len(), 4, "{pairs:#}");
    let mut perf: Vec<String> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .filter(|n| n.starts_with("perf-"))
        .collect();
    perf.sort();
    assert_eq!(perf.len(), 2, "{perf:?}");
    for f in &perf {
        let doc: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(dir.join(f)).unwrap()).unwrap();
        assert_eq!(doc["tool"], "erdma-perf", "{f}");
        assert_eq!(doc["role"], "client", "{f}");
        assert!(
            doc["results"][0]["bw_avg_gbps"].as_f64().unwrap() > 0.0,
            "{f}"
        );
    }
    // What the documents are kept for: erdma-compare reads them (one
    // direction against the other, the same test and size).
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_erdma-compare"))
        .args(perf.iter().map(|f| dir.join(f)))
        .output()
        .expect("run erdma-compare");
    let text = String::from_utf8_lossy(&out.stdout);
    let why = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{text}{why}");
    assert!(
        text.contains("RDMA_Write BW") && text.contains("64 KiB"),
        "{text}"
    );
    if let Some(port) = baseline_port {
        against_baseline(devices, perf_args, port, &dir);
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// Stage 4: the same pairs measured again, against the documents of `dir`:
/// within a generous bound (ok), then under an impossible one (a failure).
fn against_baseline(devices: &str, perf_args: &str, port: &str, dir: &std::path::Path) {
    let base = dir.to_str().unwrap();
    let (code, text, err) = pairs_job(
        devices,
        perf_args,
        port,
        &["--json", "--baseline", base, "--fail-below", "0.01"],
    );
    let v: serde_json::Value = serde_json::from_str(text.trim()).expect(&text);
    let b = &v["baseline"];
    assert_eq!(b["status"], "ok", "{b:#}{err}");
    assert_eq!(code, Some(1), "the shared-host warning only: {text}{err}");
    let rows = b["rows"].as_array().unwrap();
    assert_eq!(rows.len(), 2, "{b:#}");
    for r in rows {
        assert!(r["ratio"].as_f64().unwrap() > 0.01, "{r}");
        assert!(r["baseline_gbps"].as_f64().unwrap() > 0.0, "{r}");
    }
    let (code, text, err) = pairs_job(
        devices,
        perf_args,
        port,
        &["--baseline", base, "--fail-below", "1000"],
    );
    assert_eq!(code, Some(2), "{text}{err}");
    assert!(text.contains("# against the baseline"), "{text}");
    assert_eq!(
        text.matches("under 1000 of the baseline").count(),
        2,
        "{text}"
    );
    assert!(text.contains("# result: fail (exit 2)"), "{text}");
}

#[test]
#[ignore = "needs RDMA devices: run in the rig"]
fn pairs_over_rxe_with_gids() {
    let _vm = busy();
    let gid = std::env::var("ERDMA_RIG_RXE_GID_INDEX").unwrap_or_else(|_| "1".into());
    pairs_on(
        "rxe0,rxe1",
        // -u 18: rxe's ACK timeout at about 1 s, as in the 4-rank tests (at
        // the default 67 ms a loaded VM's rxe retransmits what is still
        // queued and its responder answers with REM_INV_REQ_ERR).
        &format!("-x {gid} -s 65536 -n 200 -u 18 --report_gbits"),
        "rxe",
        "18600",
        Some("18620"),
    );
}

#[test]
#[ignore = "needs RDMA devices: run in the rig"]
fn pairs_over_siw_through_rdma_cm() {
    let _vm = busy();
    if std::env::var("ERDMA_RIG_SIW").map_or(true, |s| s.is_empty()) {
        eprintln!("no siw in this rig run");
        return;
    }
    // No -R given: siw is iWARP, the stage adds it.
    pairs_on(
        "siw0,siw1",
        "-s 65536 -n 200 --report_gbits",
        "siw",
        "18700",
        None,
    );
}

/// Every NIC as a rail: each rank has both rxe devices (rank 0 rxe0+rxe1,
/// rank 1 rxe1+rxe0: rails of one kind, since a RoCE NIC cannot reach an
/// iWARP one and -x is one GID index for the job), the payload checked,
/// the rxe packet counters moving during the pair stage; then the NCCL
/// stage on the MPI backend with the ranks taken for two hosts
/// (hosts-apart:1): Open MPI moves the data over TCP/shared memory, not
/// rxe, and the traffic proof says so ("not over RDMA", a warning).
#[test]
#[ignore = "needs RDMA devices: run in the rig"]
fn rails_counters_and_the_mpi_stage_not_over_rdma() {
    let _vm = busy();
    let gid = std::env::var("ERDMA_RIG_RXE_GID_INDEX").unwrap_or_else(|_| "1".into());
    // -u 18: see pairs_over_rxe_with_gids (a loaded run failed with
    // REM_INV_REQ_ERR at the default ACK timeout).
    let perf = format!("-x {gid} -s 65536 -n 100 -u 18 --report_gbits");
    let (code, text, err) = ranks_job(
        2,
        "rxe0+rxe1,rxe1+rxe0",
        &perf,
        "18800",
        &[
            "--json",
            "--nccl",
            "--nccl-args",
            "-b 64K -e 256K -f 4 -n 5 -w 1 -c 1",
        ],
        &[("ERDMA_CLUSTER_HOOK", "hosts-apart:1")],
    );
    let v: serde_json::Value = serde_json::from_str(text.trim())
        .unwrap_or_else(|e| panic!("{e}: exit {code:?}\n{text}{err}"));
    let pairs = &v["pairs"];
    assert_eq!(pairs["status"], "ok", "{pairs:#}{err}");
    let rails = pairs["rails"].as_array().unwrap();
    assert_eq!(rails.len(), 2, "{pairs:#}");
    assert_eq!(rails[1]["devices"], serde_json::json!(["rxe1", "rxe0"]));
    for r in rails {
        for (i, j) in [(0, 1), (1, 0)] {
            assert!(r["gbps"][i][j].as_f64().unwrap() > 0.0, "{r}");
        }
    }
    let runs = pairs["runs"].as_array().unwrap();
    assert_eq!(runs.len(), 8, "2 rails x 2 directions x 2 sides");
    assert!(runs.iter().all(|r| r["verified"] == true), "{pairs:#}");
    let rows = v["traffic"]["rows"].as_array().unwrap();
    for nic in ["rxe0", "rxe1"] {
        let r = rows
            .iter()
            .find(|r| r["stage"] == "pairs" && r["nic"] == nic)
            .unwrap_or_else(|| panic!("no pairs row of {nic}: {rows:?}"));
        // rxe under emulation retries now and then (completer_retry_err):
        // a warning that names the counter, not a failure.
        let why = r["why"].as_str().unwrap();
        assert!(
            r["verdict"] == "ok"
                || (r["verdict"] == "warn" && why.contains("error counters moved: ")),
            "{r}"
        );
        // rxe counts packets only: bytes unknown, never 0.
        assert!(r["tx_bytes"].is_null(), "{r}");
        assert!(r["tx_packets"].as_u64().unwrap() > 100, "{r}");
    }
    let n = &v["nccl"];
    assert_eq!(n["backend"], "mpi", "{n}");
    assert_eq!(n["status"], "ok", "{n}");
    let cluster = rows
        .iter()
        .find(|r| r["stage"] == "nccl cluster all_reduce" && r["nic"] == "rxe0")
        .unwrap_or_else(|| panic!("{rows:?}"));
    assert_eq!(cluster["verdict"], "warn", "{cluster}");
    assert!(
        cluster["why"]
            .as_str()
            .unwrap()
            .starts_with("not over RDMA: "),
        "{cluster}"
    );
    // The shared-host warning and the finding: a warning, no failure.
    assert_eq!(code, Some(1), "{text}{err}");
}

/// The corruption hook in rank 1's receive path: the first block it checks
/// (as the server of rank 0's RDMA WRITEs) reads as corrupted, and the
/// report names the pair, NICs and direction.
#[test]
#[ignore = "needs RDMA devices: run in the rig"]
fn a_corrupted_payload_fails_the_pair() {
    let _vm = busy();
    let gid = std::env::var("ERDMA_RIG_RXE_GID_INDEX").unwrap_or_else(|_| "1".into());
    let perf = format!("-x {gid} -s 65536 -n 100 -u 18");
    let (code, text, err) = ranks_job(
        2,
        "rxe0,rxe1",
        &perf,
        "18850",
        &[],
        &[("ERDMA_CLUSTER_HOOK", "corrupt:1")],
    );
    assert_eq!(code, Some(2), "{text}{err}");
    let line = text
        .lines()
        .find(|l| l.starts_with("fail  payload corrupted: "))
        .unwrap_or_else(|| panic!("{text}{err}"));
    assert!(
        line.contains("/rxe0 -> ") && line.contains("/rxe1 (found by the server): "),
        "{line}"
    );
    assert!(line.contains("the data was corrupted"), "{line}");
    // Only that direction: the other one checked every byte as sent.
    assert!(text.contains("payload: "), "{text}");
}

/// Both siw devices of each rank as rails (iWARP: RDMA CM without asking):
/// both rails measured, every byte checked; siw has no counters, so the
/// traffic proof says "cannot prove" (a warning), never 0.
#[test]
#[ignore = "needs RDMA devices: run in the rig"]
fn rails_over_siw_cannot_prove_their_bytes() {
    let _vm = busy();
    if std::env::var("ERDMA_RIG_SIW").map_or(true, |s| s.is_empty()) {
        eprintln!("no siw in this rig run");
        return;
    }
    let (code, text, err) = pairs_job(
        "siw0+siw1,siw1+siw0",
        "-s 65536 -n 200 --report_gbits",
        "18900",
        &["--json"],
    );
    let v: serde_json::Value = serde_json::from_str(text.trim()).expect(&text);
    let pairs = &v["pairs"];
    assert_eq!(pairs["status"], "ok", "{pairs:#}{err}");
    assert_eq!(pairs["rails"].as_array().unwrap().len(), 2, "{pairs:#}");
    assert!(
        pairs["runs"]
            .as_array()
            .unwrap()
            .iter()
            .all(|r| r["verified"] == true)
    );
    let rows = v["traffic"]["rows"].as_array().unwrap();
    for nic in ["siw0", "siw1"] {
        let r = rows
            .iter()
            .find(|r| r["stage"] == "pairs" && r["nic"] == nic)
            .unwrap_or_else(|| panic!("no pairs row of {nic}: {rows:?}"));
        assert_eq!(r["verdict"], "cannot prove", "{r}");
        assert!(r["tx_bytes"].is_null() && r["tx_packets"].is_null(), "{r}");
    }
    assert_eq!(code, Some(1), "warnings only: {text}{err}");
}

/// Four ranks on the rig's one host, two rails each (`devices`, see
/// [`distinct_rails`]): each round runs two pairs at once, so two servers
/// listen on the host in every run (each on its own port); the NCCL stage
/// takes ranks 0,1 and 2,3 as two hosts.
///
/// siw's known flake (issue 11: now and then a connection or its RDMA CM
/// exchange fails under load; 1 or 2 of the 24 runs of a job, in 3 of 6
/// jobs while other VMs loaded the host; both the job and its rerun once,
/// with builds beside the VM) fails a run or two; a job whose every failure
/// is that runs again, at most twice, logged, so that the test is about the
/// stage, not that race.
fn four_ranks(devices: &str, perf_args: &str, port: &str) -> serde_json::Value {
    let t0 = std::time::Instant::now();
    let (mut code, mut text, mut err) = four_ranks_job(devices, perf_args, port);
    for attempt in 1..=2u16 {
        let flake = serde_json::from_str::<serde_json::Value>(text.trim())
            .is_ok_and(|v| siw_stall_only(&v));
        if !flake {
            break;
        }
        eprintln!("RETRY {attempt}: only stalled RDMA CM exchanges failed (siw): once more");
        let port = (port.parse::<u16>().unwrap() + 100 * attempt).to_string();
        (code, text, err) = four_ranks_job(devices, perf_args, &port);
    }
    let v: serde_json::Value = serde_json::from_str(text.trim())
        .unwrap_or_else(|e| panic!("{e}: exit {code:?}\n{text}{err}"));
    let pairs = &v["pairs"];
    assert_eq!(pairs["status"], "ok", "{pairs:#}{err}");
    let rails = pairs["rails"].as_array().unwrap();
    assert_eq!(rails.len(), 2, "{pairs:#}");
    for r in rails {
        for i in 0..4 {
            for j in (0..4).filter(|&j| j != i) {
                assert!(r["gbps"][i][j].as_f64().unwrap() > 0.0, "{i}->{j}: {r}");
            }
        }
    }
    // For the record: the healthy rig's matrices and verdicts.
    for r in rails {
        eprintln!("rail {} gbps {}", r["rail"], r["gbps"]);
    }
    eprintln!("verdicts {}", v["verdicts"]);
    eprintln!("job took {:.0} s", t0.elapsed().as_secs_f64());
    let runs = pairs["runs"].as_array().unwrap();
    assert_eq!(runs.len(), 48, "12 pairs x 2 rails x 2 sides");
    assert!(runs.iter().all(|r| r["verified"] == true), "{pairs:#}");
    let n = &v["nccl"];
    assert_eq!(n["status"], "ok", "{n}");
    // A pair verdict the retest confirmed fails the job (exit 2). In the
    // emulated rig a healthy run now and then stalls and the retest can
    // measure the same pair slow again (seen once over siw: 0 -> 3 at
    // 0.005 and 0.02 Gb/s against a median of 0.03): the diagnosis doing
    // its job on the rig's noise, not the stage failing, so it is allowed
    // here (the verdicts are printed above); any failed check is not.
    let confirmed = v["verdicts"]
        .as_array()
        .unwrap()
        .iter()
        .any(|d| d["status"] == "fail");
    let checks = v["reports"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|r| r["checks"].as_array().unwrap())
        .chain(v["across"].as_array().unwrap());
    let failed: Vec<&serde_json::Value> = checks.filter(|c| c["status"] == "fail").collect();
    assert!(failed.is_empty(), "{failed:?}");
    let ok = code == Some(0) || code == Some(1) || (code == Some(2) && confirmed);
    assert!(ok, "{text}{err}");
    v
}

fn four_ranks_job(devices: &str, perf_args: &str, port: &str) -> (Option<i32>, String, String) {
    ranks_job(
        4,
        devices,
        perf_args,
        port,
        &[
            "--json",
            "--nccl",
            "--nccl-args",
            "-b 64K -e 64K -n 5 -w 1 -c 1",
        ],
        &[("ERDMA_CLUSTER_HOOK", "hosts-apart:2")],
    )
}

/// Whether the pair stage failed, and only in connecting or in the
/// exchange before the transfer (siw's flake: an RDMA CM exchange that
/// stalls, a connect that times out, LOC_QP_OP_ERR on the first record)
/// and in the partners' sides of those runs; never a corrupted payload.
fn siw_stall_only(v: &serde_json::Value) -> bool {
    let runs = v["pairs"]["runs"].as_array().into_iter().flatten();
    let failed: Vec<&serde_json::Value> = runs.filter(|r| !r["error"].is_null()).collect();
    let setup = |e: &str| {
        [
            "RDMA CM",
            "rdma_cm connect",
            "did not complete in",
            "timed out after",
            "while this side waited for the connection record",
            "connection record to",
        ]
        .iter()
        .any(|k| e.contains(k))
    };
    !failed.is_empty()
        && failed
            .iter()
            .all(|r| r["corrupt"] != true && r["error"].as_str().is_some_and(setup))
}

/// The rails of four ranks over the rig's four devices of a driver: rank i
/// has DRV<i> and DRV<i+1 mod 4>, so that on each rail every rank's NIC is
/// its own and every pair crosses the wire (the bridge), as between hosts.
fn distinct_rails(drv: &str) -> String {
    (0..4)
        .map(|i| format!("{drv}{i}+{drv}{}", (i + 1) % 4))
        .collect::<Vec<_>>()
        .join(",")
}

/// siw connects only through RDMA CM, which picks the device by the route
/// from the client's address: each rank's rail must be a device of its own
/// (siw cannot reach its own address over the wire), and each client must
/// connect from its rail's address, not the one the kernel would choose.
/// (Four ranks over rxe, one device each, are the fault tests below: the
/// same two servers per run on one host, GIDs instead of RDMA CM.)
#[test]
#[ignore = "needs RDMA devices: run in the rig"]
fn four_ranks_sharing_a_host_over_siw() {
    if std::env::var("ERDMA_RIG_SIW").map_or(true, |s| s.is_empty()) {
        eprintln!("no siw in this rig run");
        return;
    }
    let _quiet = quiet();
    let v = four_ranks(
        &distinct_rails("siw"),
        "-s 65536 -n 20 --report_gbits",
        "19500",
    );
    let runs = v["pairs"]["runs"].as_array().unwrap();
    // Rank 2's client on rail 0 is siw2, towards rank 0's siw0: the route
    // the kernel picks without a source address leaves from siw1.
    let r = runs
        .iter()
        .find(|r| {
            r["role"] == "client" && r["client_device"] == "siw2" && r["server_device"] == "siw0"
        })
        .unwrap_or_else(|| panic!("no siw2 -> siw0 run: {runs:?}"));
    assert!(
        r["rerun"]
            .as_str()
            .unwrap()
            .contains("--source_ip 10.99.1.3"),
        "{r}"
    );
}

/// Issue 23: four ranks over rxe, both NICs of each rank as rails (rank i:
/// rxe<i> + rxe<i+1 mod 4>, so no pair meets on one device): all 12
/// ordered pairs on both rails measured and every byte checked, two pairs
/// at once in every run (two servers per host, each on its own port), and
/// the NCCL stage with ranks 0,1 and 2,3 taken as two hosts.
#[test]
#[ignore = "needs RDMA devices: run in the rig"]
fn four_ranks_over_rxe_with_both_nics_as_rails() {
    let _quiet = quiet();
    let gid = std::env::var("ERDMA_RIG_RXE_GID_INDEX").unwrap_or_else(|_| "1".into());
    // -u 18: rxe's ACK timeout at about 1 s, as in the fault tests (two
    // pairs at once in the emulated VM queue long enough for the default
    // 67 ms to retry what is still on its way).
    let v = four_ranks(
        &distinct_rails("rxe"),
        &format!("-x {gid} -s 65536 -n 20 -u 18 --report_gbits"),
        "19300",
    );
    let stages = v["nccl"]["stages"].as_array().unwrap();
    assert_eq!(stages.len(), 3, "two hosts alone, then all: {stages:?}");
}

/// The tests that judge speeds run alone in the VM (`quiet`), as does the
/// four-rank job over siw (4 of its 48 runs timed out in RDMA CM's exchange
/// when it shared the two CPUs with another job); the others share it
/// (`busy`): another job's CPU use would look like a slow NIC.
static VM: std::sync::RwLock<()> = std::sync::RwLock::new(());

fn quiet() -> std::sync::RwLockWriteGuard<'static, ()> {
    VM.write().unwrap_or_else(|e| e.into_inner())
}

fn busy() -> std::sync::RwLockReadGuard<'static, ()> {
    VM.read().unwrap_or_else(|e| e.into_inner())
}

/// rig/guest/shape.sh (tc on the rig's veths, as root in the VM).
const SHAPE: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../rig/guest/shape.sh");

/// A slowdown of part of the rig's wire, undone (`shape.sh clear`) when
/// dropped, also when the test fails.
struct Shaped;

impl Shaped {
    fn new(args: &[&str]) -> Shaped {
        let out = std::process::Command::new("bash")
            .arg(SHAPE)
            .args(args)
            .output()
            .expect("run rig/guest/shape.sh");
        let why = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "shape.sh {args:?}: {why}");
        Shaped
    }
}

impl Drop for Shaped {
    fn drop(&mut self) {
        let ok = std::process::Command::new("bash")
            .args([SHAPE, "clear"])
            .status()
            .is_ok_and(|s| s.success());
        if !ok {
            eprintln!("shape.sh clear failed: later tests may run slowed");
        }
    }
}

/// The rates a slowed link and a slowed NIC are held to. Four ranks on the
/// rig's two CPUs measure 0.01-0.11 Gb/s per pair with nothing slowed, a
/// median of 0.02-0.05 from job to job (flows vary 60-150% under
/// emulation, and less when the host is busy). A link held to 8 Mbit/s
/// measured 0.002-0.003 Gb/s (the htb class and rxe's retransmissions);
/// a NIC's tbf at 8 Mbit/s 0.006-0.0075, a third of a slow job's median:
/// 4 Mbit/s keeps it far under.
const SLOW_LINK: &str = "8mbit";
const SLOW_NIC: &str = "4mbit";

/// `erdma-cluster --pairs` with four ranks, rank i on rxe<i> (one rail),
/// `extra` options: every one of the 12 ordered pairs measured and
/// checked; the matrix and verdicts are printed (the record of what the
/// diagnosis saw).
fn one_rxe_each(port: &str, extra: &[&str]) -> (serde_json::Value, Vec<String>, Option<i32>) {
    let gid = std::env::var("ERDMA_RIG_RXE_GID_INDEX").unwrap_or_else(|_| "1".into());
    let t0 = std::time::Instant::now();
    // -u 18: an ACK timeout of 1 s, over the queueing delay of a slowed
    // link (at the default 67 ms rxe retransmits what is still queued, and
    // its responder answers the duplicates with REM_INV_REQ_ERR).
    let perf = format!("-x {gid} -s 65536 -n 25 -u 18 --report_gbits");
    let mut args = vec!["--json"];
    args.extend_from_slice(extra);
    let (code, text, err) = ranks_job(4, "rxe0,rxe1,rxe2,rxe3", &perf, port, &args, &[]);
    let v: serde_json::Value = serde_json::from_str(text.trim())
        .unwrap_or_else(|e| panic!("{e}: exit {code:?}\n{text}{err}"));
    let pairs = &v["pairs"];
    assert_eq!(pairs["status"], "ok", "{pairs:#}{err}");
    assert_eq!(
        pairs["rails"][0]["devices"],
        serde_json::json!(["rxe0", "rxe1", "rxe2", "rxe3"]),
        "{pairs:#}"
    );
    for row in pairs["gbps"].as_array().unwrap() {
        let cells: Vec<String> = row
            .as_array()
            .unwrap()
            .iter()
            .map(|g| g.as_f64().map_or("-".into(), |g| format!("{g:.4}")))
            .collect();
        eprintln!("gbps {}", cells.join(" "));
    }
    eprintln!("job took {:.0} s", t0.elapsed().as_secs_f64());
    // The schedule's model against this job (docs/cluster-diagnosis.md).
    eprintln!(
        "pair stage: predicted {} s, measured {} s",
        v["predicted_wall_s"], v["pair_wall_s"]
    );
    eprintln!("verdicts {}", v["verdicts"]);
    let runs = pairs["runs"].as_array().unwrap();
    assert_eq!(runs.len(), 24, "12 pairs x 2 sides");
    assert!(runs.iter().all(|r| r["verified"] == true), "{pairs:#}");
    let names: Vec<String> = v["hosts"]
        .as_array()
        .unwrap()
        .iter()
        .map(|h| h["label"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(names.len(), 4);
    (v, names, code)
}

/// The matrix's cells, `gbps[client][server]`.
fn cells(v: &serde_json::Value) -> Vec<Vec<f64>> {
    v["pairs"]["gbps"]
        .as_array()
        .unwrap()
        .iter()
        .map(|row| {
            let row = row.as_array().unwrap();
            row.iter().map(|g| g.as_f64().unwrap_or(f64::NAN)).collect()
        })
        .collect()
}

/// Whether verdict `d`, which names the slowed ranks `ranks` but is not
/// the fault's own verdict, is explained by the rig's noise: a healthy cell
/// (not in `slow`) of one of those ranks, sending or receiving, under the
/// verdict's low line times its median (`nicK_lowline`, `nicK_median_gbps`).
fn noise_explains(
    d: &serde_json::Value,
    g: &[Vec<f64>],
    slow: &[(usize, usize)],
    ranks: &[usize],
) -> bool {
    let numbers = d["numbers"].as_object();
    let number = |suffix: &str| {
        numbers
            .into_iter()
            .flatten()
            .find(|(k, _)| k.ends_with(suffix))
            .and_then(|(_, v)| v.as_f64())
    };
    let (Some(line), Some(median)) = (number("_lowline"), number("_median_gbps")) else {
        return false;
    };
    ranks.iter().any(|&r| {
        (0..g.len()).filter(|&o| o != r).any(|o| {
            [(r, o), (o, r)]
                .iter()
                .any(|cell| !slow.contains(cell) && g[cell.0][cell.1] < line * median)
        })
    })
}

/// What a fault test asserts: the cells `slow` (client, server) are under
/// a third of the median of the other cells (tc's slowdown is in the
/// matrix, far outside the rig's noise), a verdict names exactly the ranks
/// `guilty`, as one of `kinds`, and the retest confirmed it (it measured
/// the fault again against ranks judged good and saw it: status "fail",
/// the job's exit 2). Any other verdict that names one of them must be
/// the rig's own noise, shown by the matrix: a healthy (not slowed) cell of
/// that rank under the verdict's own low line (seen with one core busy:
/// rank 1 -> 0 at 0.62 of the median beside the slowed link 1 <-> 2, rank
/// 1's row median then 0.62, under the line 0.69, and the retest saw it
/// again: a host verdict on rank 1 as well as the link's). A verdict on a
/// slowed rank that its healthy cells do not explain fails the test.
///
/// Not asserted: that there is no verdict about other ranks. Under
/// emulation the healthy cells of one job spread by a factor of 2 (flows
/// vary 60-150%), and a healthy rank is blamed now and then (seen: rank 1
/// at 0.79 of the median next to the slowed rank 3, low line 0.90); the
/// retest then measures it well and its verdict stays a warning. With a
/// fixed 5 sigma the same spread put the low line under the slowed cells
/// (no verdict at all in one run of each test); the line now depends on the
/// number of cells judged (docs/cluster-diagnosis.md).
/// The test prints the matrix and the verdicts for the record.
fn fault_seen(
    v: &serde_json::Value,
    names: &[String],
    slow: &[(usize, usize)],
    guilty: &[usize],
    kinds: &[&str],
) {
    let g = cells(v);
    let mut rest: Vec<f64> = (0..4)
        .flat_map(|c| (0..4).map(move |s| (c, s)))
        .filter(|&(c, s)| c != s && !slow.contains(&(c, s)))
        .map(|(c, s)| g[c][s])
        .collect();
    rest.sort_by(f64::total_cmp);
    let median = rest[rest.len() / 2];
    for &(c, s) in slow {
        assert!(
            g[c][s] < median / 3.0,
            "{c} -> {s}: {} Gb/s, the others' median {median}: {g:?}",
            g[c][s]
        );
    }
    let want: Vec<&str> = guilty.iter().map(|&r| names[r].as_str()).collect();
    let mut found = false;
    for d in v["verdicts"].as_array().expect("a verdicts array") {
        let mut hosts: Vec<&str> = d["hosts"]
            .as_array()
            .unwrap()
            .iter()
            .map(|h| h.as_str().unwrap())
            .collect();
        hosts.sort_unstable();
        // The fault's verdict names all its ranks, as the fault's kind.
        if hosts == want {
            assert!(kinds.iter().any(|k| d["kind"] == *k), "{d}");
            assert_eq!(d["status"], "fail", "confirmed by the retest: {d}");
            assert_eq!(d["seen_again"], true, "{d}");
            found = true;
        } else if hosts.iter().any(|h| want.contains(h)) {
            let ranks: Vec<usize> = guilty
                .iter()
                .copied()
                .filter(|&r| hosts.contains(&names[r].as_str()))
                .collect();
            assert!(
                noise_explains(d, &g, slow, &ranks),
                "a verdict on the slowed ranks {ranks:?} that their healthy cells do not explain: {d}\n{g:?}"
            );
        }
    }
    assert!(
        found,
        "no verdict names {want:?}: {:#}\n{g:?}",
        v["verdicts"]
    );
}

/// Whether the slowed cells of each rail (`slow`: the rail's index and its
/// slowed cells, client and server) are under the low line that the job's
/// own cells give ([`cell_line`]): where they are not, this job's noise
/// hides the fault from any diagnosis at the job's false-alarm rate (seen
/// with the build machine loaded far past one busy core: healthy cells
/// 0.006-0.11 Gb/s, the link slowed to 0.0017, the line at its 0.05 floor
/// and the slowed cells at 0.07 of the reference); the error says so.
fn fault_visible(v: &serde_json::Value, slow: &[(usize, &[(usize, usize)])]) -> Result<(), String> {
    for &(r, cells) in slow {
        let g = v["pairs"]["rails"][r]["gbps"]
            .as_array()
            .expect("a rail's matrix");
        let mut rail = Rail::new(g.len());
        for (c, row) in g.iter().enumerate() {
            for (s, x) in row.as_array().expect("a row").iter().enumerate() {
                rail.gbps[c][s] = x.as_f64();
            }
        }
        let (reference, line) = cell_line(&rail).ok_or(format!("rail {r}: no reference"))?;
        for &(c, s) in cells {
            let x = rail.gbps[c][s].unwrap_or(f64::NAN) / reference;
            if x.is_nan() || x >= line {
                return Err(format!(
                    "rail {r}: slowed cell {c} -> {s} at {x:.3} of the reference \
                     {reference:.4} Gb/s, not under this job's low line {line:.3}: {g:?}"
                ));
            }
        }
    }
    Ok(())
}

/// Runs a fault test's `job` until its fault is visible in the job's own
/// numbers ([`fault_visible`]; `json` finds the job's document), at most
/// three times: the emulated rig's noise varies from job to job with the
/// build machine's load, and a job where the noise is as wide as the
/// fault tests nothing. Three such jobs in a row fail the test.
fn until_visible<R>(
    slow: &[(usize, &[(usize, usize)])],
    job: impl Fn() -> R,
    json: impl Fn(&R) -> &serde_json::Value,
) -> R {
    let mut why = Vec::new();
    for attempt in 1..=3 {
        let r = job();
        match fault_visible(json(&r), slow) {
            Ok(()) => return r,
            Err(e) => {
                eprintln!("job {attempt} of 3: the rig's noise hid the fault: {e}");
                why.push(e);
            }
        }
    }
    panic!(
        "the rig's noise hid the fault in 3 jobs of 3:\n{}",
        why.join("\n")
    );
}

/// Issue 24: the link rxe1 <-> rxe2 slowed by tc (both directions, nothing
/// else): ranks 1 and 2 (rxe1, rxe2) measure each other slowly, the other
/// cells as before; a verdict names that link (or a direction of it), the
/// retest confirms it and the job fails (exit 2).
#[test]
#[ignore = "needs RDMA devices: run in the rig"]
fn a_slow_link_shows_between_its_two_ranks() {
    let _quiet = quiet();
    let _tc = Shaped::new(&["link", "rxe1", "rxe2", SLOW_LINK]);
    let slow = [(1, 2), (2, 1)];
    let (v, names, code) = until_visible(&[(0, &slow)], || one_rxe_each("19600", &[]), |r| &r.0);
    fault_seen(&v, &names, &slow, &[1, 2], &["link", "direction"]);
    assert_eq!(code, Some(2), "a confirmed verdict fails the job");
    same_job_simulated(&v, code, "link:h1:h2:0.1", &[1, 2]);
}

/// Issue 35: the job just run on the rig, run again by the simulator
/// through the job's own code (`--simulate 4 --as-job`, the same
/// `--perf-args`, the fault tc made injected as `inject`): the same
/// schedule (rounds, steps, retest bound and predicted time), a confirmed
/// verdict on the same ranks `guilty` in both, and the same exit status.
/// Verdicts the rig's noise adds beside the fault are not compared (the
/// model's noise is 3%, the emulated NICs' flows vary 60-150%).
fn same_job_simulated(rig: &serde_json::Value, code: Option<i32>, inject: &str, guilty: &[usize]) {
    let gid = std::env::var("ERDMA_RIG_RXE_GID_INDEX").unwrap_or_else(|_| "1".into());
    let perf = format!("-x {gid} -s 65536 -n 25 -u 18 --report_gbits");
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_erdma-cluster"))
        .args([
            "--simulate",
            "4",
            "--as-job",
            "--json",
            "--perf-args",
            &perf,
        ])
        .args(["--inject", inject])
        .output()
        .expect("run erdma-cluster --simulate");
    let text = String::from_utf8_lossy(&out.stdout);
    let sim: serde_json::Value = serde_json::from_str(text.trim())
        .unwrap_or_else(|e| panic!("{e}: {text}{}", String::from_utf8_lossy(&out.stderr)));
    eprintln!(
        "simulated: exit {:?}, verdicts {}",
        out.status.code(),
        sim["verdicts"]
    );
    assert_eq!(sim["schedule"], rig["schedule"], "the same schedule");
    assert_eq!(sim["predicted_wall_s"], rig["predicted_wall_s"]);
    assert_eq!(out.status.code(), code, "the same exit status");
    assert_eq!(sim["exit_status"], rig["exit_status"]);
    // The fault's verdict, by rank (the rig's ranks share one host: its
    // labels name them by rank; the simulated hosts are h0 ... h3).
    let confirmed = |doc: &serde_json::Value, name: &dyn Fn(usize) -> String| {
        let want: Vec<String> = guilty.iter().map(|&r| name(r)).collect();
        doc["verdicts"].as_array().is_some_and(|vs| {
            vs.iter().any(|d| {
                let mut hosts: Vec<String> = d["hosts"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .filter_map(|h| h.as_str().map(str::to_owned))
                    .collect();
                hosts.sort();
                hosts == want && d["status"] == "fail" && d["confirmed"] == true
            })
        })
    };
    let rig_names: Vec<String> = rig["hosts"]
        .as_array()
        .unwrap()
        .iter()
        .map(|h| h["label"].as_str().unwrap().to_owned())
        .collect();
    assert!(
        confirmed(rig, &|r| rig_names[r].clone()),
        "{:#}",
        rig["verdicts"]
    );
    assert!(
        confirmed(&sim, &|r| format!("h{r}")),
        "{:#}",
        sim["verdicts"]
    );
    // The retest plans: the fault is a suspect of both first passes.
    let suspect = |doc: &serde_json::Value| {
        doc["retest"]["suspects"].as_array().is_some_and(|s| {
            s.iter().any(|x| {
                let mut h: Vec<u64> = x["hosts"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .filter_map(serde_json::Value::as_u64)
                    .collect();
                h.sort_unstable();
                h == guilty.iter().map(|&r| r as u64).collect::<Vec<_>>()
            })
        })
    };
    assert!(
        suspect(rig) && suspect(&sim),
        "{}\n{}",
        rig["retest"],
        sim["retest"]
    );
}

/// Issue 24: rank 3's NIC (rxe3) slowed by tc, what it sends and what it
/// receives: every cell of rank 3 slow, the others as before; a verdict
/// names rank 3 alone (its host or NIC), the retest confirms it and the
/// job fails (exit 2). Verdicts about other ranks are not judged here:
/// the emulated rig's flows differ within a job, and some differences
/// last (one run measured rank 1 -> rank 2 at 0.66 of the median in both
/// passes, a direction the retest then confirms as it would on hardware).
#[test]
#[ignore = "needs RDMA devices: run in the rig"]
fn a_slow_nic_shows_in_its_ranks_row_and_column() {
    let _quiet = quiet();
    let _tc = Shaped::new(&["nic", "rxe3", SLOW_NIC]);
    // One step per direction (issue 35's --directions-serial): the rig's
    // four "hosts" share the VM's two CPUs, so both directions at once
    // widen the healthy cells' spread (0.0097-0.053 Gb/s in one run) until
    // rank 3's cells (0.0035) no longer stood out: no verdict at all.
    let slow = [(3, 0), (3, 1), (3, 2), (0, 3), (1, 3), (2, 3)];
    let (v, names, code) = until_visible(
        &[(0, &slow)],
        || one_rxe_each("19700", &["--directions-serial"]),
        |r| &r.0,
    );
    // Found as a host (one NIC per rank) or NIC fault since the spread is
    // on a log scale (before it, 0 of 5 runs: the linear line fell to
    // its floor; after, 4 of 4, lowline about 0.4, rank 3's cells at 0.04-0.08
    // of the median) and k follows the number of cells (with 5 sigma one
    // run's line fell to 0.067, under rank 3's cells at 0.069).
    fault_seen(&v, &names, &slow, &[3], &["host", "nic"]);
    assert_eq!(code, Some(2), "a confirmed verdict fails the job");
}

/// Issue 24: one NIC of two slowed. Rank i has rxe<i> (rail 0) and
/// rxe<i+1 mod 4> (rail 1); rxe3 slowed by tc is rank 3's NIC 0 and rank
/// 2's NIC 1. Each must be a `nic` verdict on its own rail (the other NIC
/// of the same rank measures normally: not a host), confirmed by the
/// retest, and no host verdict names ranks 2 or 3.
#[test]
#[ignore = "needs RDMA devices: run in the rig"]
fn one_slow_nic_of_two_is_a_nic_verdict() {
    let _quiet = quiet();
    let _tc = Shaped::new(&["nic", "rxe3", SLOW_NIC]);
    let gid = std::env::var("ERDMA_RIG_RXE_GID_INDEX").unwrap_or_else(|_| "1".into());
    let perf = format!("-x {gid} -s 65536 -n 25 -u 18 --report_gbits");
    let t0 = std::time::Instant::now();
    // rxe3 is rank 3's NIC 0 (rail 0) and rank 2's NIC 1 (rail 1).
    let (rank3, rank2) = (
        [(3, 0), (3, 1), (3, 2), (0, 3), (1, 3), (2, 3)],
        [(2, 0), (2, 1), (2, 3), (0, 2), (1, 2), (3, 2)],
    );
    // --rails-serial --directions-serial: rank i's rail 1 is rank i+1's
    // rail 0 (one device), so the rails are not independent NICs here, and
    // the four "hosts" share two CPUs (at once, no verdict at all in the
    // first run of issue 35's default).
    let job = || {
        let (code, text, err) = ranks_job(
            4,
            &distinct_rails("rxe"),
            &perf,
            "20000",
            &["--json", "--rails-serial", "--directions-serial"],
            &[],
        );
        let v: serde_json::Value = serde_json::from_str(text.trim())
            .unwrap_or_else(|e| panic!("{e}: exit {code:?}\n{text}{err}"));
        (v, code)
    };
    let (v, code) = until_visible(&[(0, &rank3), (1, &rank2)], job, |r| &r.0);
    for r in v["pairs"]["rails"].as_array().unwrap() {
        eprintln!("rail {} gbps {}", r["rail"], r["gbps"]);
    }
    eprintln!("job took {:.0} s", t0.elapsed().as_secs_f64());
    eprintln!("verdicts {}", v["verdicts"]);
    let name = |r: usize| v["hosts"][r]["label"].as_str().unwrap().to_owned();
    let verdicts = v["verdicts"].as_array().unwrap();
    for (rank, nic) in [(3, 0), (2, 1)] {
        let found = verdicts
            .iter()
            .find(|d| d["hosts"] == serde_json::json!([name(rank)]) && d["kind"] == "nic")
            .unwrap_or_else(|| panic!("no nic verdict on rank {rank}: {verdicts:#?}"));
        assert_eq!(found["nic"], nic, "{found}");
        assert_eq!(found["status"], "fail", "confirmed by the retest: {found}");
    }
    assert!(
        !verdicts.iter().any(|d| d["kind"] == "host"
            && (d["hosts"][0] == name(2).as_str() || d["hosts"][0] == name(3).as_str())),
        "{verdicts:#?}"
    );
    assert_eq!(code, Some(2), "a confirmed verdict fails the job");
}

/// Four ranks over rxe with `--budget`: both directions of a pair at once
/// (a client and a server thread in each rank), the plan printed first, the
/// retest planned by rank 0, gathered and run over the devices. Rank 3's
/// runs really move their bytes slower (`ERDMA_CLUSTER_HOOK=slow:3`: a
/// 256-byte path MTU on both sides of every run it takes part in) and it
/// is made a suspect (`suspect:3`), so the retest pairs it with two other
/// ranks whatever the first pass judged: in this emulated rig healthy
/// pairs spread from 0.018 to 0.050 Gb/s (one job, no hook) and the slowed
/// rank's cells were at 0.3 to 0.96 of their baseline, too close to the
/// spread for a verdict to be sure (docs/cluster-diagnosis.md). Whatever
/// the verdicts, the exit status follows them: a confirmed one fails.
#[test]
#[ignore = "needs RDMA devices: run in the rig"]
fn four_ranks_with_a_budget_retest_a_slowed_rank() {
    let gid = std::env::var("ERDMA_RIG_RXE_GID_INDEX").unwrap_or_else(|_| "1".into());
    // 100 iterations: a slowed run (0.008 Gb/s) takes 7 s, 15 s while
    // another 4-rank test shares the VM, within erdma-perf's 30 s timeout.
    // -u 18: rxe's ACK timeout at about 1 s, as in the other 4-rank rxe
    // tests (with the default 67 ms a run failed once with REM_INV_REQ_ERR
    // when both directions ran at once in the loaded VM).
    let perf = format!("-x {gid} -s 65536 -n 100 -u 18 --report_gbits");
    let (code, text, err) = ranks_job(
        4,
        "rxe0,rxe1",
        &perf,
        "19800",
        &["--json", "--budget", "10"],
        &[("ERDMA_CLUSTER_HOOK", "slow:3,suspect:3")],
    );
    let v: serde_json::Value = serde_json::from_str(text.trim())
        .unwrap_or_else(|e| panic!("{e}: exit {code:?}\n{text}{err}"));
    // The numbers, for the log.
    eprintln!("rank 3 slowed, Gb/s: {}", v["pairs"]["gbps"]);
    eprintln!("verdicts: {}", v["verdicts"]);
    let plan = "erdma-cluster: pair stage: full matrix (circle method, both directions at once), \
                1 partner per round, 3 rounds + at most 2 retest rounds";
    assert_eq!(err.matches(plan).count(), 1, "{err}");
    assert!(v["predicted_wall_s"].as_f64().unwrap() > 0.0, "{v}");
    assert!(v["pair_wall_s"].as_f64().unwrap() > 0.0, "{v}");
    let runs = v["pairs"]["runs"].as_array().unwrap();
    assert_eq!(runs.len(), 24, "12 directed pairs x 2 sides");
    for r in runs {
        assert_eq!(r["verified"], true, "{r}");
        // The slowed rank's runs ran with the small MTU, the others not.
        let slowed = r["client"] == 3 || r["server"] == 3;
        let mtu = if slowed { 256 } else { 1024 };
        if r["role"] == "client" {
            assert_eq!(r["doc"]["mtu"], mtu, "{}", r["rerun"]);
        }
    }
    let rt = &v["retest"];
    let suspects = rt["suspects"].as_array().unwrap();
    assert!(
        suspects.contains(&serde_json::json!({"kind": "host", "hosts": [3], "nic": null})),
        "{rt}"
    );
    // Rank 3 met two other ranks; every retest run checked its bytes.
    let mut met: Vec<u64> = rt["rounds"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|r| r.as_array().unwrap().iter())
        .filter(|p| p[0] == 3)
        .map(|p| p[1].as_u64().unwrap())
        .collect();
    met.sort_unstable();
    met.dedup();
    assert_eq!(met.len(), 2, "{rt}");
    let rruns = rt["runs"].as_array().unwrap();
    let pairs: usize = rt["rounds"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r.as_array().unwrap().len())
        .sum();
    assert_eq!(rruns.len(), 4 * pairs, "{rt}");
    assert!(rruns.iter().all(|r| r["verified"] == true), "{rt}");
    let failed = v["verdicts"]
        .as_array()
        .unwrap()
        .iter()
        .any(|x| x["status"] == "fail");
    let expect = if failed { 2 } else { 1 };
    assert_eq!(code, Some(expect), "{}\n{err}", v["verdicts"]);
}

/// Issue 37: `--latency` over rxe with the link rxe1 <-> rxe2 delayed by
/// tc netem (80 ms each way, nothing else): write_lat's median and p99 in
/// every one of the 12 cells, the delayed pair's cells far over the others'
/// (write_lat's median is half the round trip: +80 ms), and a latency
/// verdict naming that link (or a direction of it) alone.
///
/// The delay is large because the rig's latency is its CPUs': four ranks
/// on two emulated CPUs measured healthy medians from 0.07 to 20 ms in one
/// job (p99 up to 170 ms), so 30 ms of delay (39 and 43 ms cells) stayed
/// under the cluster's line (median + 3.5 scaled MAD) in one run of two.
#[test]
#[ignore = "needs RDMA devices: run in the rig"]
fn a_delayed_link_is_named_by_the_latency_cells() {
    let _quiet = quiet();
    let _tc = Shaped::new(&["delay", "rxe1", "rxe2", "80ms"]);
    let gid = std::env::var("ERDMA_RIG_RXE_GID_INDEX").unwrap_or_else(|_| "1".into());
    let perf = format!("-x {gid} -s 65536 -n 25 -u 18 --report_gbits");
    let t0 = std::time::Instant::now();
    let (code, text, err) = ranks_job(
        4,
        "rxe0,rxe1,rxe2,rxe3",
        &perf,
        "19900",
        &["--json", "--latency", "--latency-args", "-n 50"],
        // The ranks waiting in MPI give their CPU up: on the rig's two
        // CPUs they would otherwise take it from the ping-pong.
        &[("OMPI_MCA_mpi_yield_when_idle", "1")],
    );
    let v: serde_json::Value = serde_json::from_str(text.trim())
        .unwrap_or_else(|e| panic!("{e}: exit {code:?}\n{text}{err}"));
    eprintln!("job took {:.0} s", t0.elapsed().as_secs_f64());
    assert_eq!(
        err.matches("erdma-cluster: latency: 12 write_lat runs")
            .count(),
        1,
        "{err}"
    );
    let l = &v["latency"];
    assert!(l["errors"].as_array().unwrap().is_empty(), "{l:#}");
    let m = &l["median_us"];
    let cell = |c: usize, s: usize| {
        m[c][s]
            .as_f64()
            .unwrap_or_else(|| panic!("{c} -> {s}: {l:#}"))
    };
    let mut rest = Vec::new();
    for c in 0..4 {
        let row: Vec<String> = (0..4)
            .map(|s| {
                if c == s {
                    "-".into()
                } else {
                    format!(
                        "{:.1} ({:.1})",
                        cell(c, s),
                        l["p99_us"][c][s].as_f64().unwrap()
                    )
                }
            })
            .collect();
        eprintln!("latency us {}", row.join(" "));
        for s in (0..4).filter(|&s| s != c) {
            if !matches!((c, s), (1, 2) | (2, 1)) {
                rest.push(cell(c, s));
            }
        }
    }
    let worst = rest.iter().copied().fold(0.0, f64::max);
    for (c, s) in [(1, 2), (2, 1)] {
        assert!(
            cell(c, s) > 60_000.0 && cell(c, s) > worst + 30_000.0,
            "{c} -> {s}: {} us, the others at most {worst} us",
            cell(c, s)
        );
    }
    eprintln!("latency verdicts {}", l["verdicts"]);
    let names: Vec<&str> = v["hosts"]
        .as_array()
        .unwrap()
        .iter()
        .map(|h| h["label"].as_str().unwrap())
        .collect();
    let verdicts = l["verdicts"].as_array().unwrap();
    assert_eq!(verdicts.len(), 1, "{l:#}");
    let d = &verdicts[0];
    assert!(d["kind"] == "link" || d["kind"] == "direction", "{d}");
    let mut hosts: Vec<&str> = d["hosts"]
        .as_array()
        .unwrap()
        .iter()
        .map(|h| h.as_str().unwrap())
        .collect();
    hosts.sort_unstable();
    assert_eq!(hosts, [names[1], names[2]], "{d}");
    assert_eq!(l["status"], "warn");
    eprintln!(
        "pair stage {} s, latency rounds {} s",
        v["pair_wall_s"], l["wall_s"]
    );
}
