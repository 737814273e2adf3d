//! Open files: every rank holds sockets to its peers, /dev/shm segments and
//! device files; a soft limit below 1024 runs out in larger jobs.

use crate::doctor::hints;
use crate::doctor::host::Limit;
use crate::doctor::model::{Check, Ctx, Group, Outcome};

/// The check.
pub const CHECK: Check = Check {
    id: "limits.nofile",
    group: Group::Limits,
    about: "open files (ulimit -n) is at least 1024",
    run,
};

fn run(cx: &Ctx) -> Outcome {
    let h = cx.host;
    let Some(lim) = h.rlimit(Limit::Nofile) else {
        return Outcome::warn("cannot read RLIMIT_NOFILE", "check ulimit -n");
    };
    let show = |v: Option<u64>| v.map(|n| n.to_string()).unwrap_or("unlimited".into());
    let found = format!("{} (hard {})", show(lim.soft), show(lim.hard));
    let details = serde_json::json!({"soft": lim.soft, "hard": lim.hard});
    match lim.soft {
        Some(n) if n < 1024 => {
            let raise = match lim.hard {
                Some(hd) if hd < 65536 => {
                    format!("raise nofile in /etc/security/limits.conf (hard is {hd})")
                }
                _ => "ulimit -n 65536".to_owned(),
            };
            Outcome::warn(
                format!(
                    "{found}: too few for NCCL's sockets and shared-memory files in larger jobs"
                ),
                hints::fix(h, "docker run --ulimit nofile=65536:65536", &raise),
            )
            .details(details)
        }
        _ => Outcome::ok(found).details(details),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::doctor::host::RLimit;
    use crate::doctor::model::Status;
    use crate::doctor::testing::FakeHost;

    #[test]
    fn limits() {
        let mut h = FakeHost::bare();
        assert_eq!(h.run(CHECK).found, "1048576 (hard 1048576)");
        h.nofile = Some(RLimit {
            soft: Some(256),
            hard: Some(4096),
        });
        let o = h.run(CHECK);
        assert_eq!(o.status, Status::Warn);
        assert!(o.fix.unwrap().contains("hard is 4096"));
        h.nofile = None;
        assert_eq!(h.run(CHECK).status, Status::Warn);
    }
}
