//! /dev/shm: NCCL's shared-memory transport and proxies allocate there; Docker
//! gives a container 64 MiB unless it runs with --ipc=host (or --shm-size).

use crate::doctor::hints::{self, bytes};
use crate::doctor::model::{Check, Ctx, Group, Outcome};

/// The check.
pub const CHECK: Check = Check {
    id: "limits.shm",
    group: Group::Limits,
    about: "/dev/shm is large enough for NCCL (--ipc=host)",
    run,
};

/// Docker's default is 64 MiB; NCCL runs out of it with a few GPUs.
const SMALL: u64 = 256 << 20;

fn run(cx: &Ctx) -> Outcome {
    let h = cx.host;
    match h.fs_size("/dev/shm") {
        None => Outcome::fail(
            "/dev/shm is missing: NCCL cannot create its shared-memory segments",
            hints::fix(h, "docker run --ipc=host", "mount -t tmpfs tmpfs /dev/shm"),
        ),
        Some(n) if n < SMALL => Outcome::warn(
            format!(
                "/dev/shm is {}: NCCL's shared-memory buffers can exhaust it (\"No space left on device\", bus errors)",
                bytes(n)
            ),
            hints::fix(
                h,
                "docker run --ipc=host (or --shm-size=8g)",
                "mount -o remount,size=8g /dev/shm",
            ),
        ),
        Some(n) => Outcome::ok(format!("/dev/shm {}", bytes(n))),
    }
    .details(serde_json::json!({"bytes": h.fs_size("/dev/shm")}))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::doctor::model::Status;
    use crate::doctor::testing::FakeHost;

    #[test]
    fn sizes() {
        let mut h = FakeHost::bare();
        assert_eq!(h.run(CHECK).found, "/dev/shm 8 GiB");
        h.fs.insert("/dev/shm".into(), 64 << 20);
        h.file("/.dockerenv", "");
        let o = h.run(CHECK);
        assert_eq!(o.status, Status::Warn);
        assert!(o.found.starts_with("/dev/shm is 64 MiB"));
        assert!(o.fix.unwrap().starts_with("docker run --ipc=host"));
        h.fs.clear();
        assert_eq!(h.run(CHECK).status, Status::Fail);
    }
}
