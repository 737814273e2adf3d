//! RDMA devices are found and open; eRDMA is recognized by vendor 0x1ded and
//! part 0x107f (udev may rename it), and an eRDMA PCI function without an RDMA
//! device means its driver is not loaded.

use crate::doctor::hints;
use crate::doctor::host::{self, Host, RdmaDevice};
use crate::doctor::model::{Check, Ctx, Group, Outcome};

/// The check.
pub const CHECK: Check = Check {
    id: "rdma.devices",
    group: Group::Rdma,
    about: "RDMA devices are found and open (eRDMA matched by vendor/part id)",
    run,
};

/// eRDMA PCI functions (1ded:107f) that have no RDMA device.
fn erdma_functions_without_device(h: &dyn Host) -> Vec<String> {
    host::list(h, "/sys/bus/pci/devices")
        .into_iter()
        .filter(|a| {
            let id = |f: &str| host::read(h, &format!("/sys/bus/pci/devices/{a}/{f}"));
            id("vendor").is_some_and(|v| v.trim() == "0x1ded")
                && id("device").is_some_and(|v| v.trim() == "0x107f")
        })
        .filter(|a| host::list(h, &format!("/sys/bus/pci/devices/{a}/infiniband")).is_empty())
        .collect()
}

/// `name (what)` for one device.
fn describe(d: &RdmaDevice) -> String {
    let proto = d
        .ports
        .first()
        .map(|p| match d.protocol(p) {
            erdma::Protocol::Roce => "RoCE",
            erdma::Protocol::Iwarp => "iWARP",
            erdma::Protocol::InfiniBand => "InfiniBand",
            erdma::Protocol::Other => "other",
        })
        .unwrap_or("?");
    if d.is_erdma() {
        let renamed = if d.name.starts_with("erdma") {
            ""
        } else {
            ", renamed by udev"
        };
        format!("{} (eRDMA{renamed}, {proto})", d.name)
    } else {
        format!(
            "{} ({proto}, vendor {:#x} part {})",
            d.name,
            d.vendor_id.unwrap_or(0),
            d.vendor_part_id.unwrap_or(0)
        )
    }
}

fn run(cx: &Ctx) -> Outcome {
    let h = cx.host;
    let rdma = h.rdma();
    if rdma.library.is_err() {
        return Outcome::skip("needs libibverbs (see rdma.library)");
    }
    let orphans = erdma_functions_without_device(h);
    let details = serde_json::json!({
        "devices": rdma.devices.iter().map(|d| serde_json::json!({
            "name": d.name, "transport": d.transport.to_string(), "erdma": d.is_erdma(),
            "vendor_id": d.vendor_id, "vendor_part_id": d.vendor_part_id, "error": d.open_error,
        })).collect::<Vec<_>>(),
        "erdma_pci_without_device": orphans,
    });
    if !orphans.is_empty() {
        return Outcome::fail(
            format!(
                "eRDMA NIC at {} has no RDMA device: the erdma driver is not loaded",
                orphans.join(", ")
            ),
            "modprobe erdma (install Alibaba's eRDMA driver package if the module is missing)",
        )
        .details(details);
    }
    if rdma.devices.is_empty() {
        let why = rdma
            .none_reason
            .clone()
            .unwrap_or_else(|| "no RDMA device".into());
        let why = why.split(';').next().unwrap_or(&why).to_owned();
        return Outcome::fail(why, hints::no_devices_fix(h)).details(details);
    }
    let broken: Vec<String> = rdma
        .devices
        .iter()
        .filter_map(|d| d.open_error.as_ref().map(|e| format!("{}: {e}", d.name)))
        .collect();
    if !broken.is_empty() {
        return Outcome::fail(
            broken.join("; "),
            "see the error; in Docker check --privileged / --device=/dev/infiniband",
        )
        .details(details);
    }
    let n = rdma.devices.len();
    let list: Vec<String> = rdma.devices.iter().map(describe).collect();
    let erdma = rdma.devices.iter().filter(|d| d.is_erdma()).count();
    let tail = if erdma == 0 {
        "; no eRDMA device (vendor 0x1ded part 0x107f)"
    } else {
        ""
    };
    Outcome::ok(format!(
        "{n} device{}: {}{tail}",
        if n == 1 { "" } else { "s" },
        list.join(", ")
    ))
    .details(details)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::doctor::model::Status;
    use crate::doctor::testing::FakeHost;

    #[test]
    fn rig_devices_listed() {
        let o = FakeHost::rig().run(CHECK);
        assert_eq!(o.status, Status::Ok);
        assert!(o.found.starts_with("4 devices: rxe0 (RoCE"), "{}", o.found);
        assert!(
            o.found
                .ends_with("no eRDMA device (vendor 0x1ded part 0x107f)")
        );
    }

    #[test]
    fn erdma_by_ids_even_when_renamed() {
        let mut h = FakeHost::erdma_gpu();
        h.rdma.devices[1].name = "rocep26s0".into();
        let o = h.run(CHECK);
        assert!(o.found.contains("erdma_0 (eRDMA, RoCE)"), "{}", o.found);
        assert!(o.found.contains("rocep26s0 (eRDMA, renamed by udev, RoCE)"));
        // A device named erdma_* that is not eRDMA by its ids is not counted.
        let mut h = FakeHost::rig();
        h.rdma.devices[0].name = "erdma_9".into();
        assert!(h.run(CHECK).found.contains("no eRDMA device"));
    }

    #[test]
    fn no_devices_fails_with_reason() {
        let o = FakeHost::bare().run(CHECK);
        assert_eq!(o.status, Status::Fail);
        assert!(o.found.starts_with("kernel without RDMA"), "{}", o.found);
        assert!(o.fix.unwrap().contains("modprobe"));
    }

    #[test]
    fn a_container_without_devices_is_told_whether_the_host_has_any() {
        let mut h = FakeHost::bare();
        h.file("/.dockerenv", "");
        h.dir("/sys/class/infiniband_verbs");
        h.set_devices(Vec::new());
        // The H200 container: no device on the host either.
        let fix = h.run(CHECK).fix.unwrap();
        assert!(
            fix.starts_with("the host has no RDMA device either"),
            "{fix}"
        );
        // Devices on the host that the container cannot open: its flags.
        h.dir("/sys/class/infiniband/erdma_0");
        let fix = h.run(CHECK).fix.unwrap();
        assert!(
            fix.starts_with("start the container with --privileged"),
            "{fix}"
        );
    }

    #[test]
    fn erdma_nic_without_driver_fails() {
        let h = FakeHost::bare();
        h.pci("0000:00:06.0", "/sys/devices/pci0000:00/0000:00:06.0", 0);
        h.file("/sys/devices/pci0000:00/0000:00:06.0/vendor", "0x1ded\n");
        h.file("/sys/devices/pci0000:00/0000:00:06.0/device", "0x107f\n");
        let o = h.run(CHECK);
        assert_eq!(o.status, Status::Fail);
        assert!(
            o.found.contains("0000:00:06.0 has no RDMA device"),
            "{}",
            o.found
        );
        assert!(o.fix.unwrap().starts_with("modprobe erdma"));
    }

    #[test]
    fn open_errors_fail_and_missing_library_skips() {
        let mut h = FakeHost::rig();
        h.rdma.devices[2].open_error = Some("ibv_open_device failed: EACCES".into());
        let o = h.run(CHECK);
        assert_eq!(o.status, Status::Fail);
        assert!(o.found.starts_with("siw0: ibv_open_device"));
        h.rdma.library = Err("libibverbs missing".into());
        assert_eq!(h.run(CHECK).status, Status::Skip);
    }
}
