//! `erdma-doctor --slurm`: the checks as Slurm's `HealthCheckProgram`. A
//! failing check drains this node with the check and its fix as the reason
//! (`erdma-doctor: <check>: <fix>`); once every check passes again, a node
//! drained by erdma-doctor (its reason starts with [`REASON_PREFIX`]) is
//! resumed. A node drained by anyone else is left as it is, its reason kept.
//! Warnings do not drain (they work, slower).
//!
//! Exit status: 0 no check failed, 2 a check failed (the node is drained or
//! already was), 3 bad arguments, 6 Slurm could not be asked or told
//! (`scontrol` missing, slurmctld unreachable, the node unknown).

use std::io::Write;
use std::process::Command;

use super::{Report, Status};

/// The start of every reason erdma-doctor gives; only such a drain is undone.
pub const REASON_PREFIX: &str = "erdma-doctor:";
/// `scontrol` failed or the node is unknown to Slurm.
pub const EXIT_SLURM: i32 = 6;
/// The longest reason given to Slurm (longer ones are cut, with `...`).
pub const MAX_REASON: usize = 240;

/// What Slurm says of a node.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeState {
    /// `State=` as scontrol prints it (`IDLE+DRAIN`, `MIXED`, ...).
    pub state: String,
    /// `Reason=` without the trailing `[user@time]`, empty when none.
    pub reason: String,
}

impl NodeState {
    /// Whether the node is drained or draining.
    pub fn drained(&self) -> bool {
        self.state
            .split('+')
            .any(|s| s == "DRAIN" || s == "DRAINED" || s == "DRAINING")
    }
    /// Whether erdma-doctor drained it.
    pub fn ours(&self) -> bool {
        self.reason.starts_with(REASON_PREFIX)
    }
}

/// Parses `scontrol show node NAME` (the multi-line form).
pub fn parse_node(text: &str) -> Option<NodeState> {
    let mut state = None;
    let mut reason = String::new();
    for line in text.lines() {
        let t = line.trim_start();
        if let Some(r) = t.strip_prefix("Reason=") {
            // `Reason=text [root@2026-12-05T21:00:00]`
            let r = match r.rfind(" [") {
                Some(i) if r.ends_with(']') => &r[..i],
                _ => r,
            };
            reason = r.trim().to_owned();
            continue;
        }
        for w in t.split_whitespace() {
            if let Some(s) = w.strip_prefix("State=") {
                state = Some(s.to_owned());
            }
        }
    }
    Some(NodeState {
        state: state?,
        reason,
    })
}

/// The reason for a report with failures: the first failing check and its
/// fix, and how many more fail; `None` when none fails.
pub fn reason(r: &Report) -> Option<String> {
    let failing: Vec<_> = r
        .results
        .iter()
        .filter(|(_, o)| o.status == Status::Fail)
        .collect();
    let (c, o) = failing.first()?;
    let mut s = format!(
        "{REASON_PREFIX} {}: {}",
        c.id,
        o.fix.as_deref().unwrap_or(&o.found)
    );
    if failing.len() > 1 {
        s.push_str(&format!(" (+{} more failing)", failing.len() - 1));
    }
    // scontrol's argument is one token: no quotes or line breaks in it.
    let mut s: String = s
        .chars()
        .map(|c| if c == '"' || c.is_control() { '\'' } else { c })
        .collect();
    if s.chars().count() > MAX_REASON {
        s = s.chars().take(MAX_REASON - 3).collect::<String>() + "...";
    }
    Some(s)
}

/// What to do with the node.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Action {
    /// Drain it with this reason.
    Drain(String),
    /// Resume it (erdma-doctor drained it, the checks pass now).
    Resume,
    /// Nothing: why, one line.
    Leave(String),
}

/// The action for a node in `now` given the checks' `reason` (None: passing).
pub fn decide(now: &NodeState, reason: Option<String>) -> Action {
    match (reason, now.drained(), now.ours()) {
        (Some(r), false, _) => Action::Drain(r),
        (Some(r), true, true) if r != now.reason => Action::Drain(r),
        (Some(_), true, true) => Action::Leave("already drained by erdma-doctor for this".into()),
        (Some(_), true, false) => Action::Leave(format!(
            "already drained by someone else (reason: {}): left as it is",
            now.reason
        )),
        (None, true, true) => Action::Resume,
        (None, true, false) => Action::Leave(format!(
            "drained by someone else (reason: {}): not resumed",
            now.reason
        )),
        (None, false, _) => Action::Leave("healthy".into()),
    }
}

/// The `scontrol` arguments of an action on `node` (none for [`Action::Leave`]).
pub fn scontrol_args(node: &str, a: &Action) -> Option<Vec<String>> {
    let n = format!("nodename={node}");
    match a {
        Action::Drain(r) => Some(vec![
            "update".into(),
            n,
            "state=drain".into(),
            format!("reason={r}"),
        ]),
        Action::Resume => Some(vec!["update".into(), n, "state=resume".into()]),
        Action::Leave(_) => None,
    }
}

/// This node's Slurm name: `SLURMD_NODENAME` (set for programs slurmd
/// starts), else the host name up to its first dot.
pub fn node_name() -> String {
    if let Some(n) = std::env::var("SLURMD_NODENAME")
        .ok()
        .filter(|n| !n.is_empty())
    {
        return n;
    }
    let mut buf = [0u8; 256];
    // SAFETY: buf is writable for its length; gethostname NUL-terminates
    // within it or the last byte stays 0 (buf.len() - 1 passed).
    let rc = unsafe { libc::gethostname(buf.as_mut_ptr().cast(), buf.len() - 1) };
    if rc != 0 {
        return String::new();
    }
    let end = buf.iter().position(|&b| b == 0).unwrap_or(buf.len());
    let full = String::from_utf8_lossy(&buf[..end]).into_owned();
    full.split('.').next().unwrap_or("").to_owned()
}

/// Runs `scontrol ARGS` (bounded output); Ok(stdout) or the one-line error.
fn scontrol(args: &[String]) -> Result<String, String> {
    let out = Command::new("scontrol")
        .args(args)
        .stdin(std::process::Stdio::null())
        .output()
        .map_err(|e| {
            format!("cannot run scontrol: {e}: install Slurm's client or put it on PATH")
        })?;
    if !out.status.success() {
        let e = String::from_utf8_lossy(&out.stderr);
        let e = e.lines().next().unwrap_or("").trim();
        return Err(format!(
            "scontrol {} failed ({}): {e}: check slurmctld and SLURM_CONF",
            args.join(" "),
            out.status
        ));
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// Health-check mode: the report's failures drain `node`, their absence
/// resumes a node erdma-doctor drained. `dry_run` prints the scontrol
/// command instead of running it. Prints one line of what it did.
pub fn health_check(
    report: &Report,
    node: &str,
    dry_run: bool,
    out: &mut dyn Write,
    err: &mut dyn Write,
) -> i32 {
    let status = if report.worst() == Status::Fail {
        super::EXIT_FAIL
    } else {
        super::EXIT_OK
    };
    if node.is_empty() {
        let _ = writeln!(
            err,
            "erdma-doctor: --slurm: this host has no name: give the Slurm node with --node"
        );
        return EXIT_SLURM;
    }
    let now = match scontrol(&["show".into(), "node".into(), node.into()]) {
        Ok(t) => match parse_node(&t) {
            Some(s) => s,
            None => {
                let _ = writeln!(
                    err,
                    "erdma-doctor: --slurm: scontrol show node {node} has no State=: is {node} this node's Slurm name? (give it with --node)"
                );
                return EXIT_SLURM;
            }
        },
        Err(e) => {
            let _ = writeln!(err, "erdma-doctor: --slurm: {e}");
            return EXIT_SLURM;
        }
    };
    let action = decide(&now, reason(report));
    let Some(args) = scontrol_args(node, &action) else {
        let Action::Leave(why) = &action else {
            unreachable!("only Leave has no command")
        };
        let _ = writeln!(out, "erdma-doctor: node {node} ({}): {why}", now.state);
        return status;
    };
    let line = shell_line(&args);
    if dry_run {
        let _ = writeln!(out, "{line}");
        return status;
    }
    if let Err(e) = scontrol(&args) {
        let _ = writeln!(err, "erdma-doctor: --slurm: {e}");
        return EXIT_SLURM;
    }
    let _ = writeln!(out, "erdma-doctor: ran {line}");
    status
}

/// `scontrol ARGS` as one shell line (`reason="..."` quoted).
pub fn shell_line(args: &[String]) -> String {
    let quoted: Vec<String> = args
        .iter()
        .map(|a| match a.split_once('=') {
            Some((k, v))
                if v.contains(|c: char| c.is_whitespace() || "'$`\\;&|<>()*?".contains(c)) =>
            {
                format!("{k}=\"{}\"", v.replace(['"', '\\', '$', '`'], "'"))
            }
            _ => a.clone(),
        })
        .collect();
    format!("scontrol {}", quoted.join(" "))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::doctor::model::{Check, Group, Outcome};

    fn report(results: Vec<(&'static str, Outcome)>) -> Report {
        fn run(_: &crate::doctor::Ctx) -> Outcome {
            Outcome::ok("")
        }
        Report {
            results: results
                .into_iter()
                .map(|(id, o)| {
                    (
                        Check {
                            id,
                            group: Group::Limits,
                            about: "",
                            run,
                        },
                        o,
                    )
                })
                .collect(),
            recommendation: None,
        }
    }

    const SHOW: &str = "NodeName=n1 Arch=x86_64 CoresPerSocket=1\n   CPUAlloc=0 CPUEfctv=8 CPUTot=8 CPULoad=0.50\n   State=IDLE+DRAIN ThreadsPerCore=1 TmpDisk=0 Weight=1 Owner=N/A MCS_label=N/A\n   Partitions=debug\n   Reason=erdma-doctor: limits.memlock: raise it [root@2026-12-05T21:00:00]\n";

    #[test]
    fn parses_scontrol_show_node() {
        let s = parse_node(SHOW).unwrap();
        assert_eq!(s.state, "IDLE+DRAIN");
        assert_eq!(s.reason, "erdma-doctor: limits.memlock: raise it");
        assert!(s.drained() && s.ours());
        let idle = parse_node("NodeName=n1\n   State=IDLE ThreadsPerCore=1\n").unwrap();
        assert!(!idle.drained() && idle.reason.is_empty());
        assert_eq!(parse_node("garbage"), None);
        assert_eq!(parse_node(""), None);
    }

    #[test]
    fn drains_resumes_and_leaves_others_alone() {
        let failing = report(vec![
            (
                "limits.memlock",
                Outcome::fail("64 KiB", "docker run --ulimit memlock=-1 \"now\""),
            ),
            ("limits.shm", Outcome::fail("small", "bigger")),
            ("limits.nofile", Outcome::warn("1024", "raise")),
        ]);
        let r = reason(&failing).unwrap();
        assert_eq!(
            r,
            "erdma-doctor: limits.memlock: docker run --ulimit memlock=-1 'now' (+1 more failing)"
        );
        let passing = report(vec![("limits.nofile", Outcome::warn("1024", "raise"))]);
        assert_eq!(reason(&passing), None, "a warning does not drain");
        let idle = NodeState {
            state: "IDLE".into(),
            reason: String::new(),
        };
        let ours = parse_node(SHOW).unwrap();
        let admin = NodeState {
            state: "IDLE+DRAIN".into(),
            reason: "disk replaced".into(),
        };
        assert_eq!(decide(&idle, Some(r.clone())), Action::Drain(r.clone()));
        assert_eq!(decide(&ours, None), Action::Resume);
        assert!(matches!(decide(&admin, None), Action::Leave(w) if w.contains("not resumed")));
        assert!(
            matches!(decide(&admin, Some(r.clone())), Action::Leave(w) if w.contains("someone else"))
        );
        assert!(matches!(decide(&idle, None), Action::Leave(_)));
        // Drained by us for another reason: the reason is updated.
        assert_eq!(decide(&ours, Some(r.clone())), Action::Drain(r.clone()));
        let args = scontrol_args("n1", &Action::Drain(r)).unwrap();
        assert_eq!(
            shell_line(&args),
            "scontrol update nodename=n1 state=drain reason=\"erdma-doctor: limits.memlock: docker run --ulimit memlock=-1 'now' (+1 more failing)\""
        );
        assert_eq!(
            shell_line(&scontrol_args("n1", &Action::Resume).unwrap()),
            "scontrol update nodename=n1 state=resume"
        );
        let long = report(vec![("limits.shm", Outcome::fail("x", "y".repeat(1000)))]);
        assert_eq!(reason(&long).unwrap().chars().count(), MAX_REASON);
    }
}
