//! In a container: which of the docker run flags eRDMA and NCCL need are
//! missing, judged from what they change inside (`--network=host`: the RDMA
//! ports' interfaces are visible; `--privileged`/`--device`: /dev/infiniband;
//! `--ipc=host`: /dev/shm size; `--ulimit memlock=-1`; `--gpus all`: the
//! NVIDIA device nodes).

use crate::doctor::hints::{self, bytes};
use crate::doctor::host::{self, Limit};
use crate::doctor::model::{Check, Ctx, Group, Outcome};

/// The check.
pub const CHECK: Check = Check {
    id: "container.flags",
    group: Group::Container,
    about: "in a container: the docker run flags RDMA and NCCL need",
    run,
};

/// The flags Alibaba's procedure uses, in its order.
pub const DOCKER_RUN: &str = "docker run --network=host --privileged --ipc=host --ulimit memlock=-1 --ulimit stack=67108864 --gpus all";

fn run(cx: &Ctx) -> Outcome {
    let h = cx.host;
    let Some(c) = hints::container(h) else {
        return Outcome::ok("not in a container");
    };
    let mut missing: Vec<(&str, String)> = Vec::new();
    // Host network: the RDMA ports' interfaces exist in this network namespace.
    let netdevs: Vec<&str> = h
        .rdma()
        .devices
        .iter()
        .flat_map(|d| d.ports.iter().filter_map(|p| p.netdev.as_deref()))
        .collect();
    let absent: Vec<&str> = netdevs
        .iter()
        .copied()
        .filter(|n| !host::exists(h, &format!("/sys/class/net/{n}")))
        .collect();
    if !absent.is_empty() {
        missing.push((
            "--network=host",
            format!(
                "the RDMA interfaces {} are not in this network namespace",
                absent.join(", ")
            ),
        ));
    }
    let sysfs_devs = !host::list(h, "/sys/class/infiniband").is_empty();
    let uverbs = host::list(h, "/dev/infiniband")
        .iter()
        .any(|n| n.starts_with("uverbs"));
    if sysfs_devs && !uverbs {
        missing.push(("--privileged", "no /dev/infiniband/uverbs*".into()));
    }
    if let Some(n) = h.fs_size("/dev/shm").filter(|n| *n < 256 << 20) {
        missing.push(("--ipc=host", format!("/dev/shm is {}", bytes(n))));
    }
    if let Some(l) = h.rlimit(Limit::Memlock)
        && let Some(soft) = l.soft
        && !hints::has_cap_ipc_lock(h)
    {
        missing.push(("--ulimit memlock=-1", format!("memlock is {}", bytes(soft))));
    }
    if cx.wants("gpu.driver") && h.gpus().is_err() && !host::exists(h, "/dev/nvidiactl") {
        missing.push(("--gpus all", "no /dev/nvidiactl and no CUDA driver".into()));
    }
    let details = serde_json::json!({
        "kind": c.kind, "evidence": c.evidence,
        "missing": missing.iter().map(|(f, why)| serde_json::json!({"flag": f, "why": why})).collect::<Vec<_>>(),
    });
    let what = format!("{} container ({})", c.kind, c.evidence);
    if missing.is_empty() {
        return Outcome::ok(format!("{what}: started with the flags RDMA and NCCL need"))
            .details(details);
    }
    let list: Vec<String> = missing
        .iter()
        .map(|(f, why)| format!("{f} ({why})"))
        .collect();
    let flags: Vec<&str> = missing.iter().map(|(f, _)| *f).collect();
    Outcome::warn(
        format!("{what}; missing {}", list.join(", ")),
        format!("restart it with {}: {DOCKER_RUN} ...", flags.join(" ")),
    )
    .details(details)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::doctor::host::RLimit;
    use crate::doctor::model::Status;
    use crate::doctor::testing::{CAPS_DOCKER, FakeHost};

    #[test]
    fn not_a_container() {
        assert_eq!(FakeHost::rig().run(CHECK).found, "not in a container");
    }

    #[test]
    fn a_well_started_container() {
        let h = FakeHost::erdma_gpu();
        h.file("/.dockerenv", "");
        for n in ["eth0", "eth1"] {
            h.dir(&format!("/sys/class/net/{n}"));
        }
        let o = h.run(CHECK);
        assert_eq!(o.status, Status::Ok, "{o:?}");
    }

    #[test]
    fn a_plain_docker_run_misses_everything() {
        let mut h = FakeHost::erdma_gpu();
        h.file("/.dockerenv", "");
        h.remove("/sys/class/net");
        h.remove("/dev/infiniband");
        h.remove("/dev/nvidiactl");
        h.gpus = Err("libcuda.so.1 not found".into());
        h.fs.insert("/dev/shm".into(), 64 << 20);
        h.memlock = Some(RLimit {
            soft: Some(8 << 20),
            hard: Some(8 << 20),
        });
        h.file("/proc/self/status", &format!("CapEff:\t{CAPS_DOCKER}\n"));
        let o = h.run(CHECK);
        assert_eq!(o.status, Status::Warn);
        assert_eq!(
            o.found,
            "docker container (/.dockerenv); missing --network=host (the RDMA interfaces eth0, eth1 are \
             not in this network namespace), --privileged (no /dev/infiniband/uverbs*), --ipc=host \
             (/dev/shm is 64 MiB), --ulimit memlock=-1 (memlock is 8 MiB), --gpus all (no /dev/nvidiactl \
             and no CUDA driver)"
        );
        assert!(o.fix.as_deref().unwrap().starts_with(
            "restart it with --network=host --privileged --ipc=host --ulimit memlock=-1 --gpus all: docker run"
        ));
        // With the GPU checks skipped, --gpus is not asked for.
        let o = h.run_skipping(CHECK, &["gpu"]);
        assert!(!o.found.contains("--gpus"));
    }
}
