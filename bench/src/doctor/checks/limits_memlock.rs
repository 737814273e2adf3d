//! The locked-memory limit: every registered buffer (ibv_reg_mr, NCCL's
//! buffers, all_reduce_perf's) is pinned and counted against it, unless the
//! process has CAP_IPC_LOCK (root, --privileged), for which the kernel skips
//! the limit.

use crate::doctor::hints::{self, bytes};
use crate::doctor::host::Limit;
use crate::doctor::model::{Check, Ctx, Group, Outcome};

/// The check.
pub const CHECK: Check = Check {
    id: "limits.memlock",
    group: Group::Limits,
    about: "memlock (ulimit -l) lets RDMA register (pin) enough memory",
    run,
};

/// Below this NCCL cannot even register its own buffers.
const TOO_SMALL: u64 = 64 << 20;

fn run(cx: &Ctx) -> Outcome {
    let h = cx.host;
    let Some(lim) = h.rlimit(Limit::Memlock) else {
        return Outcome::warn(
            "cannot read RLIMIT_MEMLOCK",
            "check ulimit -l: it should be unlimited",
        );
    };
    let hard = lim.hard.map(bytes).unwrap_or("unlimited".into());
    let details = serde_json::json!({"soft": lim.soft, "hard": lim.hard, "cap_ipc_lock": hints::has_cap_ipc_lock(h)});
    let Some(soft) = lim.soft else {
        return Outcome::ok("unlimited: any amount of memory can be registered").details(details);
    };
    if hints::has_cap_ipc_lock(h) {
        return Outcome::ok(format!(
            "{} (hard {hard}), not enforced: this process has CAP_IPC_LOCK (root/privileged); \
             processes started without it are limited",
            bytes(soft)
        ))
        .details(details);
    }
    let raise = if lim.hard.is_none() {
        "ulimit -l unlimited (the hard limit allows it)".to_owned()
    } else {
        "raise memlock to unlimited in /etc/security/limits.conf (* - memlock unlimited) and log in again"
            .to_owned()
    };
    let fix = hints::fix(h, "docker run --ulimit memlock=-1", &raise);
    let fix = if hints::container(h).is_some() && lim.hard.is_none() {
        format!("{raise}, or {fix}")
    } else {
        fix
    };
    let allows = format!(
        "{} (hard {hard}): at most {} of buffers can be registered (pinned) by this process",
        bytes(soft),
        bytes(soft)
    );
    if soft < TOO_SMALL {
        return Outcome::fail(
            format!("{allows}; NCCL's own buffers need more: ibv_reg_mr fails with ENOMEM"),
            fix,
        )
        .details(details);
    }
    if hints::mem_total(h).is_some_and(|m| soft >= m) {
        return Outcome::ok(format!("{allows}, as much as the host's memory")).details(details);
    }
    Outcome::warn(
        format!("{allows}; larger registrations (e.g. all_reduce_perf -e 8G) fail with ENOMEM"),
        fix,
    )
    .details(details)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::doctor::host::RLimit;
    use crate::doctor::model::Status;
    use crate::doctor::testing::{CAPS_DOCKER, FakeHost};

    fn limited(soft: u64, hard: Option<u64>) -> FakeHost {
        let mut h = FakeHost::bare();
        h.memlock = Some(RLimit {
            soft: Some(soft),
            hard,
        });
        h.file("/proc/self/status", &format!("CapEff:\t{CAPS_DOCKER}\n"));
        h
    }

    #[test]
    fn unlimited_ok() {
        let o = FakeHost::bare().run(CHECK);
        assert_eq!(o.status, Status::Ok);
        assert!(o.found.starts_with("unlimited"));
    }

    #[test]
    fn ulimit_64_fails_with_the_fix() {
        let h = limited(64 << 10, None);
        let o = h.run(CHECK);
        assert_eq!(o.status, Status::Fail);
        assert!(
            o.found
                .starts_with("64 KiB (hard unlimited): at most 64 KiB"),
            "{}",
            o.found
        );
        assert_eq!(
            o.fix.as_deref(),
            Some("ulimit -l unlimited (the hard limit allows it)")
        );
        h.file("/.dockerenv", "");
        let o = h.run(CHECK);
        assert!(o.fix.unwrap().contains("docker run --ulimit memlock=-1"));
        let h = limited(64 << 10, Some(64 << 10));
        assert!(h.run(CHECK).fix.unwrap().contains("limits.conf"));
    }

    #[test]
    fn middling_limit_warns_and_cap_ipc_lock_lifts_it() {
        let h = limited(1 << 30, Some(1 << 30));
        assert_eq!(h.run(CHECK).status, Status::Warn);
        let h = limited(64 << 30, Some(64 << 30));
        assert_eq!(h.run(CHECK).status, Status::Ok, "more than MemTotal");
        let mut h = FakeHost::bare();
        h.memlock = Some(RLimit {
            soft: Some(64 << 10),
            hard: Some(64 << 10),
        });
        let o = h.run(CHECK);
        assert_eq!(o.status, Status::Ok);
        assert!(o.found.contains("CAP_IPC_LOCK"));
    }
}
