//! Every port is PORT_ACTIVE with its physical link LINK_UP.

use erdma::{LinkLayer, PhysState, PortState};

use crate::doctor::model::{Check, Ctx, Group, Outcome};

/// The check.
pub const CHECK: Check = Check {
    id: "rdma.ports",
    group: Group::Rdma,
    about: "every port is PORT_ACTIVE and LINK_UP",
    run,
};

fn run(cx: &Ctx) -> Outcome {
    let rdma = cx.host.rdma();
    let ports: Vec<_> = rdma
        .devices
        .iter()
        .flat_map(|d| d.ports.iter().map(move |p| (d, p)))
        .collect();
    if ports.is_empty() {
        return Outcome::skip("no RDMA port (see rdma.devices)");
    }
    let mut bad = Vec::new();
    let mut good = Vec::new();
    let mut fixes = Vec::new();
    let mut details = Vec::new();
    for (d, p) in &ports {
        let ok = p.state == PortState::Active && p.phys_state == PhysState::LinkUp;
        let name = format!("{}:{}", d.name, p.port);
        // The rate a cluster's pairs are judged against (erdma-cluster):
        // none for an emulated device, whose nominal rate means nothing.
        let emulated = crate::doctor::host::emulated(d.vendor_id);
        details.push(serde_json::json!({
            "device": d.name, "port": p.port, "state": p.state.to_string(),
            "phys_state": p.phys_state.to_string(), "netdev": p.netdev,
            "rate_gbps": p.rate_gbps, "emulated": emulated,
        }));
        if ok {
            good.push(name);
            continue;
        }
        let nd = p
            .netdev
            .as_deref()
            .map(|n| format!(" ({n})"))
            .unwrap_or_default();
        bad.push(format!("{name} {}/{}{nd}", p.state, p.phys_state));
        let fix = match (&p.netdev, p.link_layer, p.state) {
            (Some(n), _, _) => format!("ip link set {n} up, and check its link (ip link show {n})"),
            (None, LinkLayer::InfiniBand, PortState::Init) => {
                format!("{name}: start a subnet manager (opensm)")
            }
            (None, _, _) => format!("{name}: check the cable/attachment and the interface"),
        };
        if !fixes.contains(&fix) {
            fixes.push(fix);
        }
    }
    let details = serde_json::Value::Array(details);
    if bad.is_empty() {
        return Outcome::ok(format!("{} PORT_ACTIVE, LINK_UP", good.join(", "))).details(details);
    }
    let mut found = bad.join(", ");
    if !good.is_empty() {
        found.push_str(&format!("; {} active", good.join(", ")));
    }
    Outcome::fail(found, fixes.join("; ")).details(details)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::doctor::model::Status;
    use crate::doctor::testing::FakeHost;

    #[test]
    fn active_ports_pass() {
        let o = FakeHost::rig().run(CHECK);
        assert_eq!(o.status, Status::Ok);
        assert_eq!(
            o.found,
            "rxe0:1, rxe1:1, siw0:1, siw1:1 PORT_ACTIVE, LINK_UP"
        );
    }

    #[test]
    fn down_port_fails_with_the_interface() {
        let mut h = FakeHost::rig();
        let p = &mut h.rdma.devices[0].ports[0];
        p.state = PortState::Down;
        p.phys_state = PhysState::Disabled;
        let o = h.run(CHECK);
        assert_eq!(o.status, Status::Fail);
        assert!(
            o.found.starts_with("rxe0:1 PORT_DOWN/DISABLED (veth0)"),
            "{}",
            o.found
        );
        assert_eq!(
            o.fix.as_deref(),
            Some("ip link set veth0 up, and check its link (ip link show veth0)")
        );
    }

    #[test]
    fn each_port_s_rate_and_whether_it_is_emulated() {
        let mut h = FakeHost::rig();
        h.rdma.devices[0].vendor_id = Some(0x15b3);
        let o = h.run(CHECK);
        let d = o.details.as_array().unwrap();
        // A device of a real vendor: its rate is a reference.
        assert_eq!(d[0]["device"], "rxe0");
        assert_eq!(d[0]["rate_gbps"], 2.5);
        assert_eq!(d[0]["emulated"], false);
        // Soft-iWARP's vendor id: an emulated device, its rate nominal.
        let siw = d.iter().find(|x| x["device"] == "siw0").unwrap();
        assert_eq!(siw["rate_gbps"], 25.0);
        assert_eq!(siw["emulated"], true);
        assert!(crate::doctor::host::emulated(Some(0xffffff)));
        assert!(!crate::doctor::host::emulated(None));
    }

    #[test]
    fn no_ports_skip() {
        assert_eq!(FakeHost::bare().run(CHECK).status, Status::Skip);
    }
}
