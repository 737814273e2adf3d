//! The eRDMA MTU rule (Alibaba's documentation): with NCCL's LL128 protocol the
//! interface MTU must be 8500 (jumbo) or 1400; any other value corrupts data,
//! unless LL128 is turned off (NCCL_PROTO=^LL128).

use crate::doctor::host;
use crate::doctor::model::{Check, Ctx, Group, Outcome};
use crate::doctor::ncclenv::ll128_disabled;

/// The check.
pub const CHECK: Check = Check {
    id: "rdma.mtu",
    group: Group::Rdma,
    about: "eRDMA interface MTU is 8500 or 1400 (else LL128 corrupts data)",
    run,
};

fn run(cx: &Ctx) -> Outcome {
    let h = cx.host;
    let rdma = h.rdma();
    let mut seen = Vec::new();
    let mut bad = Vec::new();
    let mut unknown = Vec::new();
    for d in rdma.devices.iter().filter(|d| d.is_erdma()) {
        for p in &d.ports {
            let name = format!("{}:{}", d.name, p.port);
            let Some(nd) = &p.netdev else {
                unknown.push(name);
                continue;
            };
            match host::read(h, &format!("/sys/class/net/{nd}/mtu")).map(|m| m.trim().to_owned()) {
                Some(m) if m == "8500" || m == "1400" => seen.push(format!("{name} {nd} MTU {m}")),
                Some(m) => bad.push((name, nd.clone(), m)),
                None => unknown.push(format!("{name} ({nd})")),
            }
        }
    }
    if seen.is_empty() && bad.is_empty() && unknown.is_empty() {
        // The rule is eRDMA's; say what the other devices run at.
        let others: Vec<String> = rdma
            .devices
            .iter()
            .flat_map(|d| d.ports.iter().map(move |p| (d, p)))
            .map(|(d, p)| {
                let mtu = p
                    .netdev
                    .as_deref()
                    .and_then(|nd| {
                        host::read(h, &format!("/sys/class/net/{nd}/mtu")).map(|m| (nd, m))
                    })
                    .map(|(nd, m)| format!("{nd} MTU {}, ", m.trim()))
                    .unwrap_or_default();
                let act = p.active_mtu.map(|m| m.to_string()).unwrap_or("?".into());
                format!("{}:{} {mtu}active MTU {act}", d.name, p.port)
            })
            .collect();
        return Outcome::skip(if others.is_empty() {
            "no eRDMA device".to_owned()
        } else {
            format!(
                "no eRDMA device (the rule is eRDMA's): {}",
                others.join(", ")
            )
        });
    }
    let ll128_off = ll128_disabled(cx.env("NCCL_PROTO").as_deref());
    let details = serde_json::json!({
        "ok": seen, "bad": bad.iter().map(|(n, nd, m)| serde_json::json!({"port": n, "netdev": nd, "mtu": m})).collect::<Vec<_>>(),
        "unknown": unknown, "ll128_disabled": ll128_off,
    });
    if !bad.is_empty() {
        let list: Vec<String> = bad
            .iter()
            .map(|(n, nd, m)| format!("{n} {nd} MTU {m}"))
            .collect();
        if ll128_off {
            seen.push(format!("{} (LL128 off by NCCL_PROTO)", list.join(", ")));
            return Outcome::ok(seen.join(", ")).details(details);
        }
        let nds: Vec<&str> = bad.iter().map(|(_, nd, _)| nd.as_str()).collect();
        return Outcome::fail(
            format!("{}: NCCL's LL128 protocol corrupts data unless the MTU is 8500 or 1400", list.join(", ")),
            format!(
                "ip link set {} mtu 8500 (on every host; or 1400), or disable LL128: -x NCCL_PROTO=^LL128",
                nds.join(" / ")
            ),
        )
        .details(details);
    }
    if !unknown.is_empty() {
        return Outcome::warn(
            format!("cannot tell the interface MTU of {}", unknown.join(", ")),
            "check that the eRDMA interface's MTU is 8500 or 1400 (ip link), or set -x NCCL_PROTO=^LL128",
        )
        .details(details);
    }
    Outcome::ok(seen.join(", ")).details(details)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::doctor::model::Status;
    use crate::doctor::testing::FakeHost;

    #[test]
    fn erdma_mtu_rule() {
        let mut h = FakeHost::erdma_gpu();
        assert_eq!(
            h.run(CHECK).found,
            "erdma_0:1 eth0 MTU 8500, erdma_1:1 eth1 MTU 8500"
        );
        h.file("/sys/class/net/eth1/mtu", "1400\n");
        assert_eq!(h.run(CHECK).status, Status::Ok);
        h.file("/sys/class/net/eth1/mtu", "1500\n");
        let o = h.run(CHECK);
        assert_eq!(o.status, Status::Fail);
        assert!(o.found.starts_with("erdma_1:1 eth1 MTU 1500: NCCL's LL128"));
        assert!(o.fix.unwrap().starts_with("ip link set eth1 mtu 8500"));
        h.set_env("NCCL_PROTO", "^LL128");
        assert_eq!(h.run(CHECK).status, Status::Ok);
        h.remove("/sys/class/net/eth1/mtu");
        assert_eq!(h.run(CHECK).status, Status::Warn);
    }

    #[test]
    fn other_devices_skip_with_their_mtu() {
        let o = FakeHost::rig().run(CHECK);
        assert_eq!(o.status, Status::Skip);
        assert!(
            o.found.contains("rxe0:1 veth0 MTU 1500, active MTU 1024"),
            "{}",
            o.found
        );
    }
}
