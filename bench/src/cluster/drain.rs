//! `erdma-cluster --drain[=dry-run|apply]`: the hosts of confirmed host and
//! NIC verdicts taken out of Slurm's service, the verdict as the reason
//! (`erdma-cluster: host verdict: ...`). Opt-in; `--drain` alone is a dry
//! run that prints the `scontrol` commands (on stderr, so that `--json`
//! stays one document); `--drain=apply` runs them. Only verdicts the retest
//! confirmed count (in `--simulate`, those the retest saw again); lost
//! hosts, links, directions and the NCCL stage's warnings drain nothing.
//! The Slurm node name is the host name up to its first dot.

use std::io::Write;

use super::diagnose::{Kind, Verdict};
use crate::doctor::slurm::{MAX_REASON, shell_line};

/// What `--drain` does.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Mode {
    /// Print the scontrol commands, run nothing.
    DryRun,
    /// Run them.
    Apply,
}

/// The start of every reason erdma-cluster gives.
pub const REASON_PREFIX: &str = "erdma-cluster:";

/// One node to drain.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Drain {
    /// The Slurm node name.
    pub node: String,
    /// The reason given to Slurm.
    pub reason: String,
}

impl Drain {
    /// `scontrol update nodename=N state=drain reason=R` as arguments.
    pub fn args(&self) -> Vec<String> {
        vec![
            "update".into(),
            format!("nodename={}", self.node),
            "state=drain".into(),
            format!("reason={}", self.reason),
        ]
    }
}

/// A host name as a Slurm node name: up to the first dot, and only if it
/// is a plain name (letters, digits, `-`, `_`); `None` otherwise.
pub fn node_of(host: &str) -> Option<String> {
    let short = host.split('.').next()?;
    (!short.is_empty()
        && short.len() <= 64
        && short
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_'))
    .then(|| short.to_owned())
}

/// The drains of `verdicts` (each with whether the retest confirmed it);
/// `host_of(i)` names host index `i`. One drain per node (its first
/// verdict's reason, with how many more).
pub fn drains<'a>(
    verdicts: impl IntoIterator<Item = (&'a Verdict, bool)>,
    host_of: impl Fn(usize) -> Option<String>,
) -> Vec<Drain> {
    let mut out: Vec<(Drain, usize)> = Vec::new();
    for (v, confirmed) in verdicts {
        if !confirmed || !matches!(v.kind, Kind::Host | Kind::Nic) {
            continue;
        }
        let Some(node) = v
            .hosts
            .first()
            .and_then(|&h| host_of(h))
            .and_then(|h| node_of(&h))
        else {
            continue;
        };
        if let Some((_, more)) = out.iter_mut().find(|(d, _)| d.node == node) {
            *more += 1;
            continue;
        }
        let what = match (v.kind, v.nic) {
            (Kind::Nic, Some(k)) => format!("NIC {k} verdict"),
            _ => "host verdict".to_owned(),
        };
        let reason = format!("{REASON_PREFIX} {what}: {}", v.why);
        out.push((Drain { node, reason }, 0));
    }
    out.into_iter()
        .map(|(mut d, more)| {
            if more > 0 {
                d.reason = format!("{} (+{more} more verdicts)", d.reason);
            }
            d.reason = clean(&d.reason);
            d
        })
        .collect()
}

/// One line, no double quotes, at most [`MAX_REASON`] characters.
fn clean(r: &str) -> String {
    let s: String = r
        .chars()
        .map(|c| if c == '"' || c.is_control() { '\'' } else { c })
        .collect();
    if s.chars().count() > MAX_REASON {
        s.chars().take(MAX_REASON - 3).collect::<String>() + "..."
    } else {
        s
    }
}

/// Prints (dry run) or runs the drains; one line each on `err`. Returns
/// false when a scontrol command failed (each failure said in one line).
pub fn run(drains: &[Drain], mode: Mode, err: &mut dyn Write) -> bool {
    if drains.is_empty() {
        let _ = writeln!(
            err,
            "erdma-cluster: --drain: no confirmed host or NIC verdict: no node to drain"
        );
        return true;
    }
    let mut ok = true;
    for d in drains {
        let line = shell_line(&d.args());
        match mode {
            Mode::DryRun => {
                let _ = writeln!(err, "erdma-cluster: --drain (dry run): {line}");
            }
            Mode::Apply => {
                let r = std::process::Command::new("scontrol")
                    .args(d.args())
                    .stdin(std::process::Stdio::null())
                    .output();
                match r {
                    Ok(o) if o.status.success() => {
                        let _ = writeln!(err, "erdma-cluster: --drain: ran {line}");
                    }
                    Ok(o) => {
                        ok = false;
                        let e = String::from_utf8_lossy(&o.stderr);
                        let _ = writeln!(
                            err,
                            "erdma-cluster: --drain: {line} failed ({}): {}: check slurmctld, SLURM_CONF and the node name",
                            o.status,
                            e.lines().next().unwrap_or("").trim()
                        );
                    }
                    Err(e) => {
                        ok = false;
                        let _ = writeln!(
                            err,
                            "erdma-cluster: --drain: cannot run scontrol: {e}: install Slurm's client or put it on PATH"
                        );
                    }
                }
            }
        }
    }
    ok
}

#[cfg(test)]
mod tests {
    use super::*;

    fn v(kind: Kind, hosts: Vec<usize>, nic: Option<usize>, why: &str) -> Verdict {
        Verdict {
            kind,
            hosts,
            nic,
            why: why.into(),
            numbers: Default::default(),
            retested: true,
            seen_again: true,
        }
    }

    #[test]
    fn confirmed_host_and_nic_verdicts_only() {
        let names = ["n0.example.com", "n1", "bad name", "n3"];
        let all = [
            (v(Kind::Host, vec![1], None, "slow \"really\""), true),
            (v(Kind::Nic, vec![1], Some(0), "nic"), true),
            (v(Kind::Nic, vec![0], Some(1), "rail 1 slow"), true),
            (v(Kind::Host, vec![3], None, "not confirmed"), false),
            (v(Kind::Link, vec![0, 3], None, "link"), true),
            (v(Kind::Lost, vec![3], None, "lost"), true),
            (v(Kind::Host, vec![2], None, "unsafe name"), true),
        ];
        let d = drains(all.iter().map(|(v, c)| (v, *c)), |i| {
            names.get(i).map(|s| s.to_string())
        });
        assert_eq!(
            d,
            vec![
                Drain {
                    node: "n1".into(),
                    reason: "erdma-cluster: host verdict: slow 'really' (+1 more verdicts)".into()
                },
                Drain {
                    node: "n0".into(),
                    reason: "erdma-cluster: NIC 1 verdict: rail 1 slow".into()
                },
            ]
        );
        assert_eq!(
            shell_line(&d[1].args()),
            "scontrol update nodename=n0 state=drain reason=\"erdma-cluster: NIC 1 verdict: rail 1 slow\""
        );
        let mut e = Vec::new();
        assert!(run(&d, Mode::DryRun, &mut e));
        let e = String::from_utf8(e).unwrap();
        assert_eq!(e.lines().count(), 2);
        assert!(e.starts_with("erdma-cluster: --drain (dry run): scontrol update nodename=n1 "));
        let mut e = Vec::new();
        assert!(run(&[], Mode::Apply, &mut e));
        assert!(String::from_utf8(e).unwrap().contains("no node to drain"));
        assert_eq!(node_of("a;rm -rf"), None);
        assert_eq!(node_of(".x"), None);
    }
}
