//! erdma-doctor and erdma-stat on the build host, which (in CI) has neither
//! RDMA nor a GPU: doctor completes, reports each absence with its fix and
//! exits 2; stat says why there is nothing to show and still runs a command
//! under --during. Where the host does have RDMA or a GPU, only what holds on
//! any host is asserted.

use std::path::Path;
use std::process::Command;

const DOCTOR: &str = env!("CARGO_BIN_EXE_erdma-doctor");
const STAT: &str = env!("CARGO_BIN_EXE_erdma-stat");

fn run(bin: &str, args: &[&str], env: &[(&str, &str)]) -> (i32, String, String) {
    let out = Command::new(bin)
        .args(args)
        .envs(env.iter().copied())
        .output()
        .expect("run");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn status_of<'a>(out: &'a str, id: &str) -> &'a str {
    out.lines()
        .find(|l| l.split_whitespace().nth(1) == Some(id))
        .and_then(|l| l.split_whitespace().next())
        .unwrap_or_else(|| panic!("no {id} line:\n{out}"))
}

fn no_rdma() -> bool {
    !Path::new("/sys/class/infiniband_verbs").exists()
}

#[test]
fn doctor_reports_every_absence() {
    let (code, out, err) = run(DOCTOR, &[], &[("NCCL_IB_HCA", "")]);
    assert!(err.is_empty(), "nothing on stderr: {err}");
    let (list_code, list, _) = run(DOCTOR, &["--list"], &[]);
    assert_eq!(list_code, 0);
    for id in list.lines().map(|l| l.split_whitespace().next().unwrap()) {
        let st = status_of(&out, id);
        assert!(["ok", "warn", "fail", "skip"].contains(&st), "{id}: {st}");
    }
    // Every warn and fail line is followed by its fix.
    let lines: Vec<&str> = out.lines().collect();
    for (i, l) in lines.iter().enumerate() {
        if l.starts_with("warn") || l.starts_with("fail") {
            assert!(lines[i + 1].trim_start().starts_with("fix: "), "{l}");
        }
    }
    assert!(out.contains("summary: "));
    if no_rdma() {
        assert_eq!(code, 2, "{out}");
        assert_eq!(status_of(&out, "rdma.devices"), "fail");
        assert!(out.contains("kernel without RDMA"), "{out}");
        assert_eq!(status_of(&out, "rdma.ports"), "skip");
        assert!(out.contains("no recommended NCCL environment"));
    }
    if !erdma::cuda::is_available() {
        assert_eq!(status_of(&out, "gpu.driver"), "fail");
        assert_eq!(status_of(&out, "gpu.peermem"), "skip");
    }
}

#[test]
fn doctor_json_and_arguments() {
    let (code, out, _) = run(DOCTOR, &["--json"], &[]);
    let v: serde_json::Value = serde_json::from_str(&out).expect("one JSON document");
    for k in [
        "tool", "version", "host", "date", "command", "status", "checks",
    ] {
        assert!(v.get(k).is_some(), "{k} missing");
    }
    assert_eq!(v["tool"], "erdma-doctor");
    assert_eq!(v["exit_status"], code);
    assert_eq!(v["command"][1], "--json");
    let (code, _, err) = run(DOCTOR, &["--skip", "nonsense"], &[]);
    assert_eq!(code, 3);
    assert_eq!(err.lines().count(), 1, "{err}");
    let (code, _, _) = run(DOCTOR, &["--bogus"], &[]);
    assert_eq!(code, 3);
    let (code, out, _) = run(DOCTOR, &["--help"], &[]);
    assert_eq!(code, 0);
    assert!(out.contains("Exit status: 0 all ok"));
}

/// On a host without the NVIDIA driver (CI) the GPU health checks skip,
/// saying NVML is missing; --expect-gpus turns gpu.count into a failure
/// with the action, and a bad ERDMA_EXPECT_GPUS is named.
#[test]
fn gpu_health_without_nvml() {
    if Path::new("/dev/nvidiactl").exists() {
        return;
    }
    const HEALTH: [&str; 9] = [
        "gpu.count",
        "gpu.xid",
        "gpu.ecc",
        "gpu.remap",
        "gpu.nvlink",
        "gpu.clocks",
        "gpu.temperature",
        "gpu.power",
        "gpu.persistence",
    ];
    let (_, out, _) = run(DOCTOR, &["--json"], &[]);
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    for id in HEALTH {
        let c = v["checks"]
            .as_array()
            .unwrap()
            .iter()
            .find(|c| c["id"] == id)
            .unwrap_or_else(|| panic!("{id} missing"));
        assert_eq!(c["status"], "skip", "{c}");
        assert_eq!(c["group"], "gpu");
        assert!(
            c["found"]
                .as_str()
                .unwrap()
                .starts_with("GPU health not checked: libnvidia-ml.so.1 not found"),
            "{c}"
        );
    }
    let (code, out, _) = run(
        DOCTOR,
        &[
            "--expect-gpus",
            "8",
            "--skip",
            "rdma,limits,nccl,container,gpu.driver,gpu.nccl",
        ],
        &[],
    );
    assert_eq!(code, 2, "{out}");
    assert_eq!(status_of(&out, "gpu.count"), "fail");
    assert!(
        out.contains("expected 8 GPUs, but NVML is not available"),
        "{out}"
    );
    assert!(
        out.contains("fix: install or load the NVIDIA driver"),
        "{out}"
    );
    let (_, out, _) = run(
        DOCTOR,
        &["--skip", "rdma,limits,nccl,container"],
        &[("ERDMA_EXPECT_GPUS", "x")],
    );
    assert_eq!(status_of(&out, "gpu.count"), "fail");
    assert!(
        out.contains("ERDMA_EXPECT_GPUS=x is not a GPU count"),
        "{out}"
    );
    let (code, _, _) = run(DOCTOR, &["--expect-gpus", "-1"], &[]);
    assert_eq!(code, 3);
}

#[test]
fn doctor_without_libibverbs() {
    let (code, out, _) = run(
        DOCTOR,
        &["--skip", "gpu"],
        &[("ERDMA_LIBIBVERBS", "/nonexistent/libibverbs.so.1")],
    );
    assert_eq!(code, 2, "{out}");
    assert_eq!(status_of(&out, "rdma.library"), "fail");
    assert!(
        out.contains("libibverbs missing: install rdma-core"),
        "{out}"
    );
    assert_eq!(status_of(&out, "rdma.devices"), "skip");
}

#[test]
fn stat_without_rdma() {
    if !no_rdma() {
        return;
    }
    let (code, out, err) = run(STAT, &[], &[]);
    assert_eq!(code, 3);
    assert!(out.is_empty());
    assert!(err.starts_with("erdma-stat: kernel without RDMA"), "{err}");
    assert_eq!(err.lines().count(), 1);
    let (code, _, err) = run(STAT, &[], &[("ERDMA_LIBIBVERBS", "/nonexistent")]);
    assert_eq!(code, 4, "{err}");
    // --during still runs the command and passes its status through.
    let (code, out, _) = run(
        STAT,
        &["--during", "--", "sh", "-c", "echo hello; exit 7"],
        &[],
    );
    assert_eq!(code, 7);
    assert!(out.starts_with("hello\n"), "{out}");
    assert!(out.contains("exited 7 after"));
    assert!(out.contains("no RDMA device here: nothing was counted"));
    let (code, out, err) = run(
        STAT,
        &["--json", "--during", "--", "sh", "-c", "echo hello"],
        &[],
    );
    assert_eq!(code, 0);
    assert!(
        err.contains("hello"),
        "the command's stdout goes to stderr: {err}"
    );
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["mode"], "during");
    assert_eq!(v["run"], serde_json::json!(["sh", "-c", "echo hello"]));
    let (code, _, _) = run(STAT, &["--during", "--", "/nonexistent/cmd"], &[]);
    assert_eq!(code, 127);
    let (code, _, _) = run(STAT, &["--during", "--", "sh", "-c", "kill -KILL $$"], &[]);
    assert_eq!(code, 128 + 9);
    let (code, _, _) = run(STAT, &["--during"], &[]);
    assert_eq!(code, 125, "--during without a command");
    let (code, _, _) = run(STAT, &["-i", "0"], &[]);
    assert_eq!(code, 2);
}
