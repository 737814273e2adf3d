//! Facts several checks share: whether this runs in a container (the fixes
//! then name `docker run` flags), the CAP_IPC_LOCK capability, memory size.

use super::host::{self, Host};

/// A container this process runs in, and what gave it away.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Container {
    /// `docker`, `podman`, `kubernetes`, `containerd`, `lxc`, or `container`.
    pub kind: String,
    /// The evidence (`/.dockerenv`, `/proc/1/cgroup`, ...).
    pub evidence: String,
}

/// Detects a container from the usual marks: `/.dockerenv`,
/// `/run/.containerenv` (podman), `$container`, Kubernetes' variables, and
/// container names in `/proc/1/cgroup` (cgroup v1 paths).
pub fn container(h: &dyn Host) -> Option<Container> {
    let found = |kind: &str, evidence: &str| {
        Some(Container {
            kind: kind.to_owned(),
            evidence: evidence.to_owned(),
        })
    };
    if host::exists(h, "/.dockerenv") {
        return found("docker", "/.dockerenv");
    }
    if host::exists(h, "/run/.containerenv") {
        return found("podman", "/run/.containerenv");
    }
    if let Some(c) = h.env("container").filter(|c| !c.is_empty()) {
        return found(&c, "$container");
    }
    if h.env("KUBERNETES_SERVICE_HOST").is_some() {
        return found("kubernetes", "$KUBERNETES_SERVICE_HOST");
    }
    let cg = host::read(h, "/proc/1/cgroup").unwrap_or_default();
    for (mark, kind) in [
        ("kubepods", "kubernetes"),
        ("docker", "docker"),
        ("libpod", "podman"),
        ("containerd", "containerd"),
        ("lxc", "lxc"),
    ] {
        if cg.contains(mark) {
            return found(kind, "/proc/1/cgroup");
        }
    }
    None
}

/// `docker` when in a container, else `host`: picks the fix that applies.
pub fn fix(h: &dyn Host, docker: &str, host_fix: &str) -> String {
    match container(h) {
        Some(_) => docker.to_owned(),
        None => host_fix.to_owned(),
    }
}

/// The fix when no RDMA device is visible.
pub fn no_devices_fix(h: &dyn Host) -> String {
    if !host::exists(h, "/sys/class/infiniband_verbs") {
        return "load the RDMA drivers on the host: modprobe erdma ib_uverbs (eRDMA), or rdma_rxe + \
                rdma link add (Soft-RoCE); a container shares the host's kernel"
            .to_owned();
    }
    // A container sees the host's devices in /sys/class/infiniband even
    // without the flags that let it open them: none there means none on the
    // host, which no container flag fixes.
    let host_has_none = host::list(h, "/sys/class/infiniband").is_empty();
    let docker = if host_has_none {
        "the host has no RDMA device either (/sys/class/infiniband is empty): on the host, give \
         the instance an eRDMA-enabled network interface and load its driver (modprobe erdma), \
         then start the container with --privileged --network=host"
    } else {
        "start the container with --privileged (or --device=/dev/infiniband) --network=host"
    };
    fix(
        h,
        docker,
        "load the NIC's RDMA driver: modprobe erdma (eRDMA), or rdma_rxe + rdma link add (Soft-RoCE)",
    )
}

/// Whether this process has CAP_IPC_LOCK (bit 14 of `CapEff`): then the
/// kernel does not apply the memlock limit to memory registration.
pub fn has_cap_ipc_lock(h: &dyn Host) -> bool {
    let status = host::read(h, "/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("CapEff:"))
        .and_then(|v| u64::from_str_radix(v.trim(), 16).ok())
        .is_some_and(|caps| caps & (1 << 14) != 0)
}

/// Physical memory in bytes (`MemTotal`).
pub fn mem_total(h: &dyn Host) -> Option<u64> {
    host::read(h, "/proc/meminfo")?
        .lines()
        .find_map(|l| l.strip_prefix("MemTotal:"))?
        .trim()
        .trim_end_matches("kB")
        .trim()
        .parse::<u64>()
        .ok()
        .map(|kb| kb * 1024)
}

/// Bytes as `64 KiB`, `8 MiB`, `1.5 GiB`.
pub fn bytes(n: u64) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut v = n as f64;
    let mut u = 0;
    while v >= 1024.0 && u < UNITS.len() - 1 {
        v /= 1024.0;
        u += 1;
    }
    if u == 0 || v.fract() == 0.0 {
        format!("{v:.0} {}", UNITS[u])
    } else {
        format!("{v:.1} {}", UNITS[u])
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::doctor::testing::{CAPS_DOCKER, FakeHost};

    #[test]
    fn containers_by_their_marks() {
        let h = FakeHost::bare();
        assert_eq!(container(&h), None);
        h.file("/proc/1/cgroup", "12:pids:/kubepods/burstable/pod1/abc\n");
        assert_eq!(container(&h).unwrap().kind, "kubernetes");
        h.file("/.dockerenv", "");
        assert_eq!(
            container(&h).unwrap(),
            Container {
                kind: "docker".into(),
                evidence: "/.dockerenv".into()
            }
        );
        let mut h = FakeHost::bare();
        h.set_env("container", "podman");
        assert_eq!(container(&h).unwrap().kind, "podman");
    }

    #[test]
    fn capabilities_memory_and_units() {
        let h = FakeHost::bare();
        assert!(has_cap_ipc_lock(&h));
        h.file("/proc/self/status", &format!("CapEff:\t{CAPS_DOCKER}\n"));
        assert!(!has_cap_ipc_lock(&h));
        assert_eq!(mem_total(&h), Some(16_000_000 * 1024));
        assert_eq!(bytes(64 << 10), "64 KiB");
        assert_eq!(bytes(1536 << 20), "1.5 GiB");
        assert_eq!(bytes(0), "0 B");
    }
}
