//! The device nodes verbs open: `/dev/infiniband/uverbsN` for every device and
//! `rdma_cm` for RDMA CM (iWARP needs it). A container started without
//! `--privileged` or `--device=/dev/infiniband` shows up here.

use erdma::Transport;

use super::rdma_library::uverbs_nodes;
use crate::doctor::hints;
use crate::doctor::host;
use crate::doctor::model::{Check, Ctx, Group, Outcome};

/// The check.
pub const CHECK: Check = Check {
    id: "rdma.dev-nodes",
    group: Group::Rdma,
    about: "/dev/infiniband/uverbs* and rdma_cm are there",
    run,
};

fn run(cx: &Ctx) -> Outcome {
    let h = cx.host;
    let sysfs_devs = host::list(h, "/sys/class/infiniband");
    if sysfs_devs.is_empty() {
        return Outcome::skip("no RDMA device in /sys/class/infiniband");
    }
    let nodes = uverbs_nodes(h);
    let no_uverbs: Vec<&String> = sysfs_devs
        .iter()
        .filter(|d| !nodes.iter().any(|(n, _)| n == *d))
        .collect();
    let missing: Vec<String> = nodes
        .iter()
        .filter(|(_, u)| !host::exists(h, &format!("/dev/infiniband/{u}")))
        .map(|(d, u)| format!("/dev/infiniband/{u} ({d})"))
        .collect();
    let present: Vec<String> = nodes
        .iter()
        .filter(|(_, u)| host::exists(h, &format!("/dev/infiniband/{u}")))
        .map(|(d, u)| format!("{u} ({d})"))
        .collect();
    let rdma_cm = host::exists(h, "/dev/infiniband/rdma_cm");
    let iwarp = h
        .rdma()
        .devices
        .iter()
        .any(|d| d.transport == Transport::Iwarp);
    let details = serde_json::json!({
        "uverbs": nodes.iter().map(|(d, u)| serde_json::json!({"device": d, "node": u})).collect::<Vec<_>>(),
        "missing": missing, "no_uverbs": no_uverbs, "rdma_cm": rdma_cm,
    });
    if !no_uverbs.is_empty() {
        let names: Vec<&str> = no_uverbs.iter().map(|s| s.as_str()).collect();
        return Outcome::fail(
            format!(
                "no uverbs device for {}: ib_uverbs is not loaded",
                names.join(", ")
            ),
            "modprobe ib_uverbs (on the host)",
        )
        .details(details);
    }
    if !missing.is_empty() {
        return Outcome::fail(
            format!(
                "missing {}: verbs cannot open the device",
                missing.join(", ")
            ),
            hints::fix(
                h,
                "docker run --privileged (or --device=/dev/infiniband)",
                "check udev's /dev/infiniband (modprobe ib_uverbs; ls -l /dev/infiniband)",
            ),
        )
        .details(details);
    }
    let mut found = present.join(", ");
    if !rdma_cm {
        let why = "no /dev/infiniband/rdma_cm: RDMA CM (iWARP, eRDMA's default mode, our tools' --cm) cannot connect";
        let fix = hints::fix(
            h,
            "docker run --privileged (or --device=/dev/infiniband/rdma_cm)",
            "modprobe rdma_ucm",
        );
        found = format!("{found}; {why}");
        return if iwarp {
            Outcome::fail(found, fix)
        } else {
            Outcome::warn(found, fix)
        }
        .details(details);
    }
    Outcome::ok(format!("{found}, rdma_cm")).details(details)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::doctor::model::Status;
    use crate::doctor::testing::FakeHost;

    #[test]
    fn all_nodes_present() {
        let o = FakeHost::rig().run(CHECK);
        assert_eq!(o.status, Status::Ok);
        assert_eq!(
            o.found,
            "uverbs0 (rxe0), uverbs1 (rxe1), uverbs2 (siw0), uverbs3 (siw1), rdma_cm"
        );
    }

    #[test]
    fn hidden_nodes_fail_with_the_docker_flag() {
        let h = FakeHost::rig();
        h.remove("/dev/infiniband");
        let o = h.run(CHECK);
        assert_eq!(o.status, Status::Fail);
        assert!(
            o.found
                .starts_with("missing /dev/infiniband/uverbs0 (rxe0)")
        );
        assert!(o.fix.as_deref().unwrap().starts_with("check udev"));
        h.file("/.dockerenv", "");
        let o = h.run(CHECK);
        assert_eq!(
            o.fix.as_deref(),
            Some("docker run --privileged (or --device=/dev/infiniband)")
        );
    }

    #[test]
    fn rdma_cm_missing_fails_with_iwarp_warns_without() {
        let mut h = FakeHost::rig();
        h.remove("/dev/infiniband/rdma_cm");
        assert_eq!(h.run(CHECK).status, Status::Fail);
        let devs = h.rdma.devices[..2].to_vec();
        h.remove("/sys/class/infiniband");
        h.remove("/sys/class/infiniband_verbs");
        h.set_devices(devs);
        h.remove("/dev/infiniband/rdma_cm");
        let o = h.run(CHECK);
        assert_eq!(o.status, Status::Warn, "{o:?}");
        assert_eq!(o.fix.as_deref(), Some("modprobe rdma_ucm"));
    }

    #[test]
    fn uverbs_module_missing() {
        let h = FakeHost::rig();
        h.remove("/sys/class/infiniband_verbs");
        let o = h.run(CHECK);
        assert_eq!(o.status, Status::Fail);
        assert!(o.found.contains("ib_uverbs is not loaded"));
    }

    #[test]
    fn no_rdma_skips() {
        assert_eq!(FakeHost::bare().run(CHECK).status, Status::Skip);
    }
}
