//! `erdma-doctor`: the eRDMA bring-up checklist as checks with answers. Each
//! check (one file in [`checks`]) prints one line: ok / warn / fail / skip,
//! what it found, and for warn and fail the one-line fix; then the NCCL
//! environment recommended for the devices found, as mpirun arguments.
//!
//! Exit status (the worst result):
//! - 0: every check ok or skipped
//! - 1: at least one warning (works, but slower or fragile)
//! - 2: at least one failure (will not work as configured)
//! - 3: bad arguments
//! - 4: the report could not be written (stdout closed)
//! - 6: `--slurm`: Slurm could not be asked or told (see [`slurm`])
//!
//! With `--slurm` (Slurm's `HealthCheckProgram`): 0 no check failed, 2 a
//! check failed (the node drained), 3 and 6 as above; see [`slurm`].

pub mod checks;
pub mod gpuhealth;
pub mod hints;
pub mod host;
pub mod model;
pub mod ncclenv;
pub mod nvml;
pub mod recommend;
pub mod slurm;
pub mod system;
pub mod topology;

#[cfg(test)]
pub(crate) mod testing;

use std::io::Write;

use clap::Parser;

use crate::meta::RunMeta;
pub use host::Host;
pub use model::{Check, Ctx, Group, Outcome, Status};
pub use recommend::Recommendation;

/// Every check ok or skipped.
pub const EXIT_OK: i32 = 0;
/// At least one warning.
pub const EXIT_WARN: i32 = 1;
/// At least one failure.
pub const EXIT_FAIL: i32 = 2;
/// Bad arguments.
pub const EXIT_USAGE: i32 = 3;
/// The report could not be written.
pub const EXIT_OUTPUT: i32 = 4;
/// `--slurm`: scontrol failed or the node is unknown to Slurm.
pub const EXIT_SLURM: i32 = slurm::EXIT_SLURM;

/// Command-line options.
#[derive(Debug, Parser)]
#[command(
    name = "erdma-doctor",
    version,
    about = "Check this host or container for RDMA (eRDMA), GPU and NCCL readiness",
    after_help = "Groups: rdma, limits, gpu, nccl, container (--list shows the checks).\n\
                  Exit status: 0 all ok (or skipped), 1 a warning, 2 a failure, 3 bad arguments, \
                  4 the report could not be written, 6 --slurm: scontrol failed or the node is unknown.\n\
                  --slurm (HealthCheckProgram): a failing check drains this node with reason \
                  'erdma-doctor: CHECK: FIX'; passing again resumes a node only erdma-doctor drained; \
                  warnings never drain; exit 0 no failure, 2 a failure."
)]
pub struct Args {
    /// One JSON document on stdout instead of the report.
    #[arg(long)]
    pub json: bool,
    /// Skip a group or a check (e.g. `gpu`, `gpu.peermem`); repeat or separate with commas.
    #[arg(long, value_name = "NAME", value_delimiter = ',')]
    pub skip: Vec<String>,
    /// Print only the recommended mpirun arguments, on one line
    /// (`mpirun $(erdma-doctor --print-env) ...`); exit 2 when no device suits NCCL.
    #[arg(long)]
    pub print_env: bool,
    /// List the checks and exit.
    #[arg(long)]
    pub list: bool,
    /// Slurm health check (HealthCheckProgram): drain this node when a check
    /// fails, with the check and its fix as the reason; resume it when the
    /// checks pass and erdma-doctor drained it (never a node drained by
    /// someone else). Prints one line.
    #[arg(long, conflicts_with_all = ["json", "print_env", "list"])]
    pub slurm: bool,
    /// --slurm: the Slurm node name (default: $SLURMD_NODENAME, else the short host name).
    #[arg(long, value_name = "NAME", requires = "slurm")]
    pub node: Option<String>,
    /// --slurm: print the scontrol command instead of running it.
    #[arg(long, requires = "slurm")]
    pub dry_run: bool,
    /// The GPUs this host should have: gpu.count fails with fewer (default:
    /// $ERDMA_EXPECT_GPUS, which also reaches erdma-cluster's ranks through
    /// mpirun -x; unset: no expectation).
    #[arg(long, value_name = "N")]
    pub expect_gpus: Option<u32>,
}

/// The results of a run.
#[derive(Debug)]
pub struct Report {
    /// Each check with what it found, in order.
    pub results: Vec<(Check, Outcome)>,
    /// The NCCL environment for the devices found.
    pub recommendation: Option<Recommendation>,
}

impl Report {
    /// The worst status.
    pub fn worst(&self) -> Status {
        self.results
            .iter()
            .map(|(_, o)| o.status)
            .max()
            .unwrap_or(Status::Ok)
    }

    fn count(&self, s: Status) -> usize {
        self.results.iter().filter(|(_, o)| o.status == s).count()
    }
}

/// Whether `name` is a group or a check id.
pub fn known(name: &str) -> bool {
    checks::ALL
        .iter()
        .any(|c| c.id == name || c.group.as_str() == name)
}

/// Runs every check not skipped. A check that panics is reported as failed
/// instead of ending the run. The GPU count expected is
/// `$ERDMA_EXPECT_GPUS` if set (see [`evaluate_with`]).
pub fn evaluate(host: &dyn Host, skipped: &[String]) -> Report {
    evaluate_with(host, skipped, None)
}

/// [`evaluate`] with `--expect-gpus` (`None`: `$ERDMA_EXPECT_GPUS` if set).
pub fn evaluate_with(host: &dyn Host, skipped: &[String], expect_gpus: Option<u32>) -> Report {
    let cx = Ctx {
        host,
        skipped,
        expect_gpus,
    };
    let results = checks::ALL
        .iter()
        .map(|c| {
            let out = if !cx.wants(c.id) {
                Outcome::skip("skipped (--skip)")
            } else {
                std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| (c.run)(&cx)))
                    .unwrap_or_else(|_| {
                        Outcome::fail(
                            "the check itself failed (a bug in erdma-doctor)",
                            "report it with the output of --json",
                        )
                    })
            };
            (*c, out)
        })
        .collect();
    Report {
        results,
        recommendation: recommend::recommend(host),
    }
}

/// The human-readable report.
pub fn render_text(meta: &RunMeta, r: &Report) -> String {
    let mut s = format!(
        "erdma-doctor {} on {}, {}\n",
        meta.version, meta.host, meta.date
    );
    let w = r.results.iter().map(|(c, _)| c.id.len()).max().unwrap_or(0);
    for (c, o) in &r.results {
        s.push_str(&format!(
            "{:<4}  {:<w$}  {}\n",
            o.status.as_str(),
            c.id,
            o.found
        ));
        if let Some(fix) = &o.fix {
            s.push_str(&format!("{:<4}  {:<w$}  fix: {fix}\n", "", ""));
        }
    }
    let worst = r.worst();
    s.push_str(&format!(
        "summary: {} ok, {} warn, {} fail, {} skip: exit {} ({worst})\n",
        r.count(Status::Ok),
        r.count(Status::Warn),
        r.count(Status::Fail),
        r.count(Status::Skip),
        worst.exit_code()
    ));
    match &r.recommendation {
        Some(rec) => {
            s.push_str(&format!(
                "\nrecommended NCCL environment for {} (hosts and sizes are placeholders):\n",
                rec.devices.join(", ")
            ));
            for l in rec.mpirun_lines() {
                s.push_str(&format!("  {l}\n"));
            }
        }
        None => s.push_str(
            "\nno recommended NCCL environment: no active RoCE-style or InfiniBand port for NCCL's IB transport\n",
        ),
    }
    s
}

/// The `--json` document.
pub fn render_json(meta: &RunMeta, r: &Report) -> serde_json::Value {
    let mut m = meta.to_json();
    let worst = r.worst();
    m.insert("status".into(), serde_json::json!(worst));
    m.insert("exit_status".into(), serde_json::json!(worst.exit_code()));
    m.insert(
        "summary".into(),
        serde_json::json!({
            "ok": r.count(Status::Ok), "warn": r.count(Status::Warn),
            "fail": r.count(Status::Fail), "skip": r.count(Status::Skip),
        }),
    );
    m.insert(
        "checks".into(),
        r.results
            .iter()
            .map(|(c, o)| {
                serde_json::json!({
                    "id": c.id, "group": c.group, "status": o.status, "found": o.found,
                    "fix": o.fix, "details": o.details,
                })
            })
            .collect(),
    );
    m.insert(
        "recommended".into(),
        match &r.recommendation {
            Some(rec) => serde_json::json!({
                "devices": rec.devices,
                "env": rec.env.iter().map(|(k, v)| serde_json::json!({"name": k, "value": v})).collect::<Vec<_>>(),
                "mca": rec.mca.iter().map(|(k, v)| serde_json::json!({"name": k, "value": v})).collect::<Vec<_>>(),
                "mpirun_args": rec.args_line(),
            }),
            None => serde_json::Value::Null,
        },
    );
    serde_json::Value::Object(m)
}

/// Runs the tool on `host`; returns the exit status.
pub fn run(args: &Args, host: &dyn Host, out: &mut dyn Write, err: &mut dyn Write) -> i32 {
    if let Some(bad) = args.skip.iter().find(|s| !known(s)) {
        let _ = writeln!(
            err,
            "erdma-doctor: --skip {bad}: no such check or group: see erdma-doctor --list"
        );
        return EXIT_USAGE;
    }
    if args.slurm {
        let report = evaluate_with(host, &args.skip, args.expect_gpus);
        let node = args.node.clone().unwrap_or_else(slurm::node_name);
        return slurm::health_check(&report, &node, args.dry_run, out, err);
    }
    if args.list {
        let mut s = String::new();
        for c in checks::ALL {
            s.push_str(&format!("{:<20} {}\n", c.id, c.about));
        }
        return match out.write_all(s.as_bytes()) {
            Ok(()) => EXIT_OK,
            Err(_) => EXIT_OUTPUT,
        };
    }
    if args.print_env {
        return match recommend::recommend(host) {
            Some(r) => match writeln!(out, "{}", r.args_line()) {
                Ok(()) => EXIT_OK,
                Err(_) => EXIT_OUTPUT,
            },
            None => {
                let _ = writeln!(
                    err,
                    "erdma-doctor: no recommended environment: no active RoCE-style or InfiniBand port \
                     for NCCL's IB transport: run erdma-doctor to see why"
                );
                EXIT_FAIL
            }
        };
    }
    let meta = RunMeta::now("erdma-doctor");
    let report = evaluate_with(host, &args.skip, args.expect_gpus);
    let text = if args.json {
        format!("{}\n", render_json(&meta, &report))
    } else {
        render_text(&meta, &report)
    };
    match out.write_all(text.as_bytes()).and_then(|_| out.flush()) {
        Ok(()) => report.worst().exit_code(),
        Err(e) => {
            let _ = writeln!(
                err,
                "erdma-doctor: writing the report failed: {e}: check where stdout goes"
            );
            EXIT_OUTPUT
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use testing::FakeHost;

    fn args(a: &[&str]) -> Args {
        Args::try_parse_from(std::iter::once("erdma-doctor").chain(a.iter().copied())).unwrap()
    }

    fn run_on(h: &FakeHost, a: &[&str]) -> (i32, String, String) {
        let (mut o, mut e) = (Vec::new(), Vec::new());
        let code = run(&args(a), h, &mut o, &mut e);
        (
            code,
            String::from_utf8(o).unwrap(),
            String::from_utf8(e).unwrap(),
        )
    }

    #[test]
    fn bare_host_reports_every_absence() {
        let (code, out, _) = run_on(&FakeHost::bare(), &[]);
        assert_eq!(code, EXIT_FAIL);
        let lines: Vec<&str> = out.lines().collect();
        for c in checks::ALL {
            assert!(
                lines
                    .iter()
                    .any(|l| l.split_whitespace().nth(1) == Some(c.id)),
                "{} missing:\n{out}",
                c.id
            );
        }
        assert!(out.contains("fail  rdma.devices"));
        assert!(out.contains("fail  gpu.driver"));
        assert!(out.contains("no recommended NCCL environment"));
    }

    #[test]
    fn healthy_rig_with_the_recommended_env_is_all_ok() {
        let mut h = FakeHost::rig();
        let (code, _, _) = run_on(&h, &["--skip", "gpu"]);
        assert_eq!(code, EXIT_WARN, "siw would be used by NCCL");
        let (code, line, _) = run_on(&h, &["--print-env"]);
        assert_eq!(code, EXIT_OK);
        for kv in line.split_whitespace().filter(|t| t.starts_with("NCCL_")) {
            let (k, v) = kv.split_once('=').unwrap();
            h.set_env(k, v);
        }
        let (code, out, _) = run_on(&h, &["--skip", "gpu"]);
        assert_eq!(code, EXIT_OK, "{out}");
        assert!(out.contains("recommended NCCL environment for rxe0:1, rxe1:1"));
    }

    #[test]
    fn json_document() {
        let (code, out, _) = run_on(&FakeHost::erdma_gpu(), &["--json"]);
        let v: serde_json::Value = serde_json::from_str(&out).unwrap();
        assert_eq!(v["tool"], "erdma-doctor");
        for k in ["version", "host", "date", "command", "summary", "checks"] {
            assert!(v.get(k).is_some(), "{k}");
        }
        assert_eq!(v["exit_status"], code);
        assert_eq!(v["checks"].as_array().unwrap().len(), checks::ALL.len());
        assert_eq!(v["recommended"]["env"][0]["name"], "NCCL_IB_HCA");
        assert_eq!(v["checks"][0]["id"], "rdma.library");
    }

    #[test]
    fn skip_and_bad_arguments() {
        let (code, out, _) = run_on(&FakeHost::bare(), &["--skip", "rdma,gpu.driver"]);
        assert!(out.contains("skip  rdma.ports") && out.contains("skip  gpu.driver"));
        assert_eq!(code, EXIT_FAIL, "gpu.nccl still fails");
        let (code, _, err) = run_on(&FakeHost::bare(), &["--skip", "nope"]);
        assert_eq!(code, EXIT_USAGE);
        assert!(err.starts_with("erdma-doctor: --skip nope: no such check or group"));
        let (code, out, _) = run_on(&FakeHost::bare(), &["--list"]);
        assert_eq!(code, EXIT_OK);
        assert_eq!(out.lines().count(), checks::ALL.len());
        let (code, _, err) = run_on(&FakeHost::bare(), &["--print-env"]);
        assert_eq!(code, EXIT_FAIL);
        assert!(err.starts_with("erdma-doctor: no recommended environment"));
    }

    /// The GPU health checks reach erdma-cluster's report, cluster.json and
    /// report.html as every check does: a host with an XID 79 and a pending
    /// row remap is named with both actions; the healthy hosts are not.
    #[test]
    fn gpu_health_flows_into_the_cluster_report() {
        use crate::doctor::gpuhealth::{KernelLog, RowRemap};
        let meta = |host: &str| RunMeta {
            tool: "erdma-doctor".into(),
            version: "0.1.0".into(),
            host: host.into(),
            date: "2026-12-06T01:00:00Z".into(),
            command: vec!["erdma-cluster".into()],
        };
        let doc = |host: &str, h: &FakeHost| {
            render_json(&meta(host), &evaluate_with(h, &[], Some(8)))
                .to_string()
                .into_bytes()
        };
        let good = FakeHost::erdma_gpu();
        let mut sick = FakeHost::erdma_gpu();
        sick.gpu_health.kernel_log = Ok(KernelLog {
            source: "journalctl -k -b".into(),
            starts_after_boot_s: None,
            lines: vec![
                "NVRM: Xid (PCI:0000:1a:00): 79, pid='<unknown>', GPU has fallen off the bus."
                    .into(),
            ],
        });
        if let Ok(v) = &mut sick.gpu_health.nvml {
            v.gpus[5].remap = Ok(RowRemap {
                correctable: 0,
                uncorrectable: 1,
                pending: true,
                failure: false,
                histogram: None,
            });
        }
        let raw = vec![doc("h0", &good), doc("h1", &sick), doc("h2", &good)];
        let dir =
            std::env::temp_dir().join(format!("erdma-doctor-gpu-cluster-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let args =
            crate::cluster::Args::try_parse_from(["erdma-cluster", "--out", dir.to_str().unwrap()])
                .unwrap();
        let (mut o, mut e) = (Vec::new(), Vec::new());
        let code = crate::cluster::report(&args, &meta("h0"), &raw, None, &mut o, &mut e);
        let out = String::from_utf8(o).unwrap();
        assert_eq!(code, EXIT_FAIL, "{out}");
        for (id, found) in [
            ("gpu.xid", "Xid 79 x1 (GPU has fallen off the bus"),
            ("gpu.remap", "a row remap waits for a GPU reset"),
        ] {
            let line = out
                .lines()
                .find(|l| l.starts_with(&format!("fail  {id}")))
                .unwrap_or_else(|| panic!("no {id}:\n{out}"));
            assert!(line.contains("1/3 (h1)"), "{line}");
            assert!(out.contains(found), "{out}");
        }
        let whole: serde_json::Value =
            serde_json::from_slice(&std::fs::read(dir.join("cluster.json")).unwrap()).unwrap();
        let h1 = whole["reports"]
            .as_array()
            .unwrap()
            .iter()
            .find(|r| r["host"] == "h1")
            .unwrap();
        let remap = h1["checks"]
            .as_array()
            .unwrap()
            .iter()
            .find(|c| c["id"] == "gpu.remap")
            .unwrap();
        assert_eq!(remap["status"], "fail");
        assert_eq!(
            remap["details"]["gpus"][5]["remapped_rows"]["pending"],
            true
        );
        let html = std::fs::read_to_string(dir.join("report.html")).unwrap();
        assert!(
            html.contains("gpu.xid") && html.contains("gpu.remap"),
            "report.html lacks the GPU checks"
        );
        assert!(
            html.contains("nvidia-smi -r -i 5"),
            "the action is in report.html"
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn closed_stdout_is_exit_4() {
        struct Closed;
        impl Write for Closed {
            fn write(&mut self, _: &[u8]) -> std::io::Result<usize> {
                Err(std::io::Error::from(std::io::ErrorKind::BrokenPipe))
            }
            fn flush(&mut self) -> std::io::Result<()> {
                Ok(())
            }
        }
        let mut e = Vec::new();
        assert_eq!(
            run(&args(&[]), &FakeHost::bare(), &mut Closed, &mut e),
            EXIT_OUTPUT
        );
    }
}
