//! eRDMA's mode and what it means for NCCL: RoCE-style (compat mode, or RoCEv2
//! on Linux >= 6.14: GID index 1 = ::ffff:IPv4, QPs connected by modify_qp, what
//! NCCL's IB transport does) or iWARP (the default: QPs connect only through
//! RDMA CM, which NCCL does not use). Other iWARP devices (siw) that NCCL
//! would pick up are flagged the same way.

use erdma::Protocol;

use crate::doctor::host;
use crate::doctor::model::{Check, Ctx, Group, Outcome};
use crate::doctor::ncclenv::NameList;
use crate::doctor::recommend;

/// The check.
pub const CHECK: Check = Check {
    id: "rdma.mode",
    group: Group::Rdma,
    about: "eRDMA mode (iWARP vs RoCE-style) and whether NCCL can use each device",
    run,
};

fn run(cx: &Ctx) -> Outcome {
    let h = cx.host;
    let rdma = h.rdma();
    if rdma.devices.iter().all(|d| d.ports.is_empty()) {
        return Outcome::skip("no RDMA port (see rdma.devices)");
    }
    let hca = cx.env("NCCL_IB_HCA").map(|v| NameList::parse(&v));
    let compat = host::read(h, "/sys/module/erdma/parameters/compat_mode");
    let mut notes = Vec::new();
    let mut erdma_iwarp = Vec::new();
    let mut other_iwarp_used = Vec::new();
    let mut other_iwarp_excluded = Vec::new();
    let mut roce = Vec::new();
    for d in &rdma.devices {
        let Some(p) = d.ports.first() else { continue };
        let proto = d.protocol(p);
        let used = hca
            .as_ref()
            .is_none_or(|l| l.selects(&d.name, Some(p.port)));
        match (proto, d.is_erdma()) {
            (Protocol::Iwarp, true) => erdma_iwarp.push(d.name.clone()),
            (Protocol::Iwarp, false) if used => other_iwarp_used.push(d.name.clone()),
            (Protocol::Iwarp, false) => other_iwarp_excluded.push(d.name.clone()),
            (Protocol::Roce, _) | (Protocol::InfiniBand, _) => {
                let gid = match &p.nccl_gid {
                    Ok(g) if proto == Protocol::Roce => format!(", NCCL's GID index {}", g.index),
                    _ => String::new(),
                };
                let kind = if d.is_erdma() {
                    "eRDMA RoCE-style mode"
                } else if proto == Protocol::Roce {
                    "RoCE"
                } else {
                    "InfiniBand"
                };
                roce.push(format!("{} {kind}{gid}", d.name));
            }
            (Protocol::Other, _) => notes.push(format!("{} has an unknown transport", d.name)),
        }
    }
    let mut found = Vec::new();
    if !roce.is_empty() {
        found.push(roce.join(", "));
    }
    if !other_iwarp_excluded.is_empty() {
        found.push(format!(
            "{} iWARP (left out by NCCL_IB_HCA)",
            other_iwarp_excluded.join(", ")
        ));
    }
    if let Some(c) = &compat {
        found.push(format!("erdma compat_mode={}", c.trim()));
    }
    found.extend(notes);
    let details = serde_json::json!({
        "roce_or_ib": roce, "erdma_iwarp": erdma_iwarp,
        "iwarp_used_by_nccl": other_iwarp_used, "iwarp_excluded": other_iwarp_excluded,
        "erdma_compat_mode": compat,
    });
    if !erdma_iwarp.is_empty() {
        found.insert(
            0,
            format!(
                "{} in iWARP mode: only RDMA CM connects (our tools' --cm); NCCL's IB transport cannot",
                erdma_iwarp.join(", ")
            ),
        );
        return Outcome::warn(
            found.join("; "),
            "for NCCL switch eRDMA to its RoCE-style mode: modprobe -r erdma && modprobe erdma \
             compat_mode=1 (Alibaba's driver; RoCEv2 mode on Linux >= 6.14), then NCCL_IB_GID_INDEX=1",
        )
        .details(details);
    }
    if !other_iwarp_used.is_empty() {
        found.insert(
            0,
            format!(
                "{} iWARP: NCCL's IB transport would use {} and fail to connect (it needs RoCE/IB GIDs)",
                other_iwarp_used.join(", "),
                if other_iwarp_used.len() == 1 { "it" } else { "them" }
            ),
        );
        let usable = recommend::usable_ports(rdma);
        let fix = if usable.is_empty() {
            format!(
                "no device suits NCCL's IB transport: NCCL_IB_HCA=^{}, or NCCL_IB_DISABLE=1 (sockets)",
                other_iwarp_used.join(",")
            )
        } else {
            format!(
                "leave them out: -x NCCL_IB_HCA={}",
                recommend::ib_hca_value(rdma, &usable)
            )
        };
        return Outcome::warn(found.join("; "), fix).details(details);
    }
    Outcome::ok(found.join("; ")).details(details)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::doctor::model::Status;
    use crate::doctor::testing::FakeHost;

    #[test]
    fn siw_used_by_nccl_warns_until_excluded() {
        let mut h = FakeHost::rig();
        let o = h.run(CHECK);
        assert_eq!(o.status, Status::Warn, "{o:?}");
        assert!(
            o.found
                .starts_with("siw0, siw1 iWARP: NCCL's IB transport would use them")
        );
        assert_eq!(
            o.fix.as_deref(),
            Some("leave them out: -x NCCL_IB_HCA=rxe0,rxe1")
        );
        h.set_env("NCCL_IB_HCA", "rxe");
        let o = h.run(CHECK);
        assert_eq!(o.status, Status::Ok, "{o:?}");
        assert_eq!(
            o.found,
            "rxe0 RoCE, NCCL's GID index 1, rxe1 RoCE, NCCL's GID index 1; siw0, siw1 iWARP (left out by NCCL_IB_HCA)"
        );
    }

    #[test]
    fn erdma_modes() {
        let mut h = FakeHost::erdma_gpu();
        h.file("/sys/module/erdma/parameters/compat_mode", "Y\n");
        let o = h.run(CHECK);
        assert_eq!(o.status, Status::Ok);
        assert!(
            o.found
                .starts_with("erdma_0 eRDMA RoCE-style mode, NCCL's GID index 1")
        );
        assert!(o.found.ends_with("erdma compat_mode=Y"));
        // iWARP mode: the device is iWARP by its transport.
        for d in &mut h.rdma.devices {
            d.transport = erdma::Transport::Iwarp;
        }
        let o = h.run(CHECK);
        assert_eq!(o.status, Status::Warn);
        assert!(o.found.starts_with("erdma_0, erdma_1 in iWARP mode"));
        assert!(o.fix.unwrap().contains("compat_mode=1"));
    }

    #[test]
    fn no_ports_skip() {
        assert_eq!(FakeHost::bare().run(CHECK).status, Status::Skip);
    }
}
