//! erdma-doctor as Slurm's HealthCheckProgram and `erdma-cluster --drain`,
//! in a real single-node Slurm (scripts/slurm/start.sh, slurmd running the
//! health check every 2 s): a failing check (memlock 64 KiB without
//! CAP_IPC_LOCK) drains the node with the check and its fix as the reason,
//! fixing it resumes the node; a node an administrator drained stays drained
//! with their reason; `--dry-run` and `--drain` print the command and change
//! nothing; `erdma-cluster --drain=apply` on a simulated host verdict drains
//! the node, and the health check does not resume it. Without Slurm or root
//! the test says so and skips, unless ERDMA_REQUIRE_SLURM=1.
#![allow(clippy::disallowed_methods)] // a test reads and writes its files directly

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::{Duration, Instant};

const DOCTOR: &str = env!("CARGO_BIN_EXE_erdma-doctor");
const CLUSTER: &str = env!("CARGO_BIN_EXE_erdma-cluster");
/// Not slurm.rs's 6817: the two test binaries may run at once.
const PORT: &str = "6837";
/// Only the limits group: this machine may have no RDMA device or GPU.
const SKIP: &str = "rdma,gpu,nccl,container";
/// Runs a command without CAP_IPC_LOCK (root's lifts memlock).
const NO_IPC_LOCK: &str =
    "setpriv --inh-caps=-ipc_lock --ambient-caps=-ipc_lock --bounding-set=-ipc_lock --";

fn scripts() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../scripts/slurm")
}

fn missing() -> Option<&'static str> {
    let on_path = |b: &str| {
        Command::new("sh")
            .args(["-c", &format!("command -v {b}")])
            .output()
            .is_ok_and(|o| o.status.success())
    };
    if !["slurmctld", "slurmd", "scontrol", "setpriv"]
        .iter()
        .all(|b| on_path(b))
    {
        return Some(
            "slurmctld/slurmd/scontrol/setpriv missing (apt-get install slurm-wlm util-linux)",
        );
    }
    // SAFETY: geteuid has no preconditions and cannot fail.
    if unsafe { libc::geteuid() } != 0 {
        return Some("slurmd runs as root here, and this test is not root");
    }
    None
}

/// The running Slurm; stopped when dropped.
struct Slurm {
    dir: PathBuf,
    conf: PathBuf,
    node: String,
}

impl Drop for Slurm {
    fn drop(&mut self) {
        let _ = Command::new(scripts().join("stop.sh"))
            .arg(&self.dir)
            .status();
    }
}

impl Slurm {
    fn scontrol(&self, args: &[&str]) -> Output {
        Command::new("timeout")
            .arg("30")
            .arg("scontrol")
            .args(args)
            .env("SLURM_CONF", &self.conf)
            .output()
            .expect("run scontrol")
    }
    /// (State=, Reason= without the [user@time]).
    fn node(&self) -> (String, String) {
        let o = self.scontrol(&["show", "node", &self.node]);
        let t = String::from_utf8_lossy(&o.stdout);
        let state = t
            .split_whitespace()
            .find_map(|w| w.strip_prefix("State="))
            .unwrap_or("?")
            .to_owned();
        let reason = t
            .lines()
            .find_map(|l| l.trim_start().strip_prefix("Reason="))
            .map(|r| r.rsplit_once(" [").map_or(r, |(a, _)| a).to_owned())
            .unwrap_or_default();
        (state, reason)
    }
    fn drained(&self) -> bool {
        self.node().0.split('+').any(|s| s.starts_with("DRAIN"))
    }
    /// Health check runs so far (lines in its log).
    fn runs(&self) -> usize {
        std::fs::read_to_string(self.dir.join("hc.log"))
            .map(|s| s.lines().count())
            .unwrap_or(0)
    }
    /// Waits (at most 180 s) until `f`; panics with the node's state.
    fn wait(&self, what: &str, f: impl Fn(&Slurm) -> bool) {
        let t0 = Instant::now();
        while !f(self) {
            assert!(
                t0.elapsed() < Duration::from_secs(180),
                "{what}: not within 180 s; node {:?}; health check log:\n{}",
                self.node(),
                std::fs::read_to_string(self.dir.join("hc.log")).unwrap_or_default()
            );
            std::thread::sleep(Duration::from_millis(250));
        }
    }
    /// Waits for `n` more health check runs.
    fn wait_runs(&self, n: usize) {
        let from = self.runs();
        self.wait(&format!("{n} more health check runs"), |s| {
            s.runs() >= from + n
        });
    }
    /// erdma-doctor --slurm ARGS directly, memlock 64 KiB without CAP_IPC_LOCK when `fail`.
    fn doctor(&self, fail: bool, args: &str) -> Output {
        let cmd = format!("{DOCTOR} --slurm --skip {SKIP} {args}");
        let cmd = if fail {
            format!("{NO_IPC_LOCK} sh -c 'ulimit -S -l 64; exec {cmd}'")
        } else {
            cmd
        };
        Command::new("sh")
            .args(["-c", &cmd])
            .env("SLURM_CONF", &self.conf)
            .output()
            .unwrap()
    }
}

fn start() -> Option<Slurm> {
    if let Some(why) = missing() {
        let why = format!("SKIPPED slurm_health: {why}");
        assert!(
            std::env::var("ERDMA_REQUIRE_SLURM").as_deref() != Ok("1"),
            "{why}, and ERDMA_REQUIRE_SLURM=1"
        );
        eprintln!("{why}");
        return None;
    }
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("slurm-health");
    let _ = Command::new(scripts().join("stop.sh")).arg(&dir).status();
    std::fs::create_dir_all(&dir).unwrap();
    let conf = dir.join("slurm.conf");
    // The health check: healthy unless DIR/fail exists (then memlock is
    // 64 KiB and CAP_IPC_LOCK dropped); each run appends its line to hc.log.
    let d = dir.display();
    let hc = dir.join("hc.sh");
    std::fs::write(
        &hc,
        format!(
            "#!/bin/sh\nPATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin\n\
             SLURM_CONF={d}/slurm.conf; export SLURM_CONF\n\
             if [ -e {d}/fail ]; then\n  \
             {NO_IPC_LOCK} sh -c 'ulimit -S -l 64; exec {DOCTOR} --slurm --skip {SKIP}' >>{d}/hc.log 2>&1\n\
             else\n  {DOCTOR} --slurm --skip {SKIP} >>{d}/hc.log 2>&1\nfi\nexit 0\n"
        ),
    )
    .unwrap();
    Command::new("chmod").arg("+x").arg(&hc).status().unwrap();
    let out = Command::new("timeout")
        .arg("90")
        .arg(scripts().join("start.sh"))
        .arg(&dir)
        .env("ERDMA_SLURM_PORT", PORT)
        .env(
            "ERDMA_SLURM_CONF_EXTRA",
            format!(
                "HealthCheckProgram={}\nHealthCheckInterval=2\nHealthCheckNodeState=ANY",
                hc.display()
            ),
        )
        .output()
        .expect("run scripts/slurm/start.sh");
    let node = String::from_utf8(Command::new("hostname").arg("-s").output().unwrap().stdout)
        .unwrap()
        .trim()
        .to_owned();
    let s = Slurm { dir, conf, node };
    assert!(
        out.status.success(),
        "scripts/slurm/start.sh failed ({}): {}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    Some(s)
}

#[test]
fn doctor_drains_and_resumes_only_its_own_and_cluster_drains_a_verdict() {
    let Some(s) = start() else { return };
    let fail_flag = s.dir.join("fail");
    s.wait_runs(1);
    assert!(!s.drained(), "healthy node drained: {:?}", s.node());

    // 1. slurmd's health check: a failing check drains, with check and fix.
    std::fs::write(&fail_flag, "").unwrap();
    s.wait("drained by the failing health check", Slurm::drained);
    let (state, reason) = s.node();
    eprintln!("failing memlock: {state}: {reason}");
    assert!(
        reason.starts_with("erdma-doctor: limits.memlock: "),
        "{reason}"
    );
    assert!(reason.contains("memlock"), "the fix: {reason}");
    // 2. Fixed: resumed.
    std::fs::remove_file(&fail_flag).unwrap();
    s.wait("resumed once the checks pass", |s| !s.drained());
    eprintln!("fixed: {:?}", s.node());

    // 3. An administrator's drain stays, passing or failing.
    let o = s.scontrol(&[
        "update",
        &format!("nodename={}", s.node),
        "state=drain",
        "reason=disk replaced",
    ]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    s.wait_runs(2);
    assert_eq!(s.node().1, "disk replaced", "{:?}", s.node());
    assert!(s.drained());
    std::fs::write(&fail_flag, "").unwrap();
    s.wait_runs(2);
    assert_eq!(
        s.node().1,
        "disk replaced",
        "reason overwritten: {:?}",
        s.node()
    );
    std::fs::remove_file(&fail_flag).unwrap();
    // Direct runs say why they leave it.
    let o = s.doctor(false, "");
    let out = String::from_utf8_lossy(&o.stdout);
    assert_eq!(o.status.code(), Some(0), "{out}");
    assert!(
        out.contains("drained by someone else (reason: disk replaced): not resumed"),
        "{out}"
    );
    let o = s.doctor(true, "");
    assert_eq!(o.status.code(), Some(2));
    let o = s.scontrol(&["update", &format!("nodename={}", s.node), "state=resume"]);
    assert!(o.status.success());
    s.wait_runs(1);
    assert!(!s.drained());

    // 4. --dry-run prints the command and changes nothing.
    let o = s.doctor(true, "--dry-run");
    let out = String::from_utf8_lossy(&o.stdout);
    assert_eq!(o.status.code(), Some(2), "{out}");
    assert!(
        out.starts_with(&format!(
            "scontrol update nodename={} state=drain reason=\"erdma-doctor: limits.memlock: ",
            s.node
        )),
        "{out}"
    );
    assert!(!s.drained());
    // Errors: one line, exit 6.
    let o = s.doctor(false, "--node no-such-node");
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(6), "{err}");
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(
        err.starts_with("erdma-doctor: --slurm: scontrol show node no-such-node failed"),
        "{err}"
    );
    let o = Command::new(DOCTOR)
        .args(["--slurm", "--skip", SKIP])
        .env("PATH", "/nonexistent")
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(6), "{err}");
    assert!(err.contains("cannot run scontrol"), "{err}");

    // 5. erdma-cluster --drain on a simulated host verdict: a dry run by default ...
    let o = Command::new(CLUSTER)
        .args(["--simulate", "4", "--inject", "host:h1:0.5", "--drain"])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(0), "{err}");
    let lines: Vec<&str> = err.lines().collect();
    assert_eq!(lines.len(), 1, "{err}");
    assert!(
        lines[0].starts_with(
            "erdma-cluster: --drain (dry run): scontrol update nodename=h1 state=drain reason=\"erdma-cluster: host verdict: NIC 0: sends and receives at 0.5"
        ),
        "{err}"
    );
    assert!(!s.drained());
    // ... and with apply, the real node (the simulated h1 named as it) drained.
    let o = Command::new(CLUSTER)
        .args([
            "--simulate",
            "4",
            "--inject",
            "host:h1:0.5",
            "--drain=apply",
            "--json",
        ])
        .env("ERDMA_CLUSTER_HOOK", format!("sim-names:a/{}/c/d", s.node))
        .env("SLURM_CONF", &s.conf)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(0), "{err}");
    serde_json::from_slice::<serde_json::Value>(&o.stdout).expect("--json stays one document");
    assert!(
        err.starts_with(&format!(
            "erdma-cluster: --drain: ran scontrol update nodename={} ",
            s.node
        )),
        "{err}"
    );
    let (state, reason) = s.node();
    eprintln!("erdma-cluster --drain=apply: {state}: {reason}");
    assert!(s.drained(), "{state}");
    assert!(
        reason.starts_with("erdma-cluster: host verdict: NIC 0: sends and receives at 0.5"),
        "{reason}"
    );
    // The health check passes but does not resume erdma-cluster's drain.
    s.wait_runs(2);
    assert!(s.drained() && s.node().1 == reason, "{:?}", s.node());
    // A failing apply: one line, exit 4.
    let o = Command::new(CLUSTER)
        .args([
            "--simulate",
            "4",
            "--inject",
            "host:h1:0.5",
            "--drain=apply",
        ])
        .env("SLURM_CONF", &s.conf)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(4), "{err}");
    assert!(
        err.contains("--drain: scontrol update nodename=h1 ") && err.contains("failed"),
        "{err}"
    );
}
