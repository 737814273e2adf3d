//! NCCL_IB_HCA against the real devices, with NCCL's syntax: a
//! comma-separated list of `name[:port]`, names matched as prefixes, `=` for
//! exact names, `^` to exclude. Naming a device or port that does not exist
//! fails; a list that selects no active port leaves NCCL on TCP sockets.

use crate::doctor::model::{Check, Ctx, Group, Outcome};
use crate::doctor::ncclenv::{NameList, nccl_ports};
use crate::doctor::recommend;

/// The check.
pub const CHECK: Check = Check {
    id: "nccl.ib-hca",
    group: Group::Nccl,
    about: "NCCL_IB_HCA names real devices and ports",
    run,
};

fn run(cx: &Ctx) -> Outcome {
    let rdma = cx.host.rdma();
    let raw = cx.env("NCCL_IB_HCA");
    let selected = nccl_ports(rdma, raw.as_deref());
    let sel_names: Vec<String> = selected
        .iter()
        .map(|(d, p)| format!("{}:{}", d.name, p.port))
        .collect();
    let usable = recommend::usable_ports(rdma);
    let suggestion = (!usable.is_empty())
        .then(|| format!("-x NCCL_IB_HCA={}", recommend::ib_hca_value(rdma, &usable)));
    let details = serde_json::json!({"value": raw, "selected": sel_names});
    let Some(raw) = raw else {
        if rdma.devices.is_empty() {
            return Outcome::skip("unset; no RDMA device");
        }
        return Outcome::ok(format!(
            "unset: NCCL uses every active port: {}",
            if sel_names.is_empty() {
                "none".to_owned()
            } else {
                sel_names.join(", ")
            }
        ))
        .details(details);
    };
    let list = NameList::parse(&raw);
    let devs = &rdma.devices;
    let mut problems = Vec::new();
    for e in &list.entries {
        let by_name: Vec<_> = devs
            .iter()
            .filter(|d| list.entry_matches(e, &d.name, None))
            .collect();
        if let Some(p) = &e.bad_port {
            problems.push(format!(
                "{}:{p}: the port is not a number (NCCL reads 0)",
                e.name
            ));
        } else if by_name.is_empty() {
            let names: Vec<&str> = devs.iter().map(|d| d.name.as_str()).collect();
            problems.push(format!(
                "{}{}: no such device (devices: {})",
                if list.exact { "=" } else { "" },
                e.name,
                if names.is_empty() {
                    "none".to_owned()
                } else {
                    names.join(", ")
                }
            ));
        } else if e.port != -1
            && !by_name
                .iter()
                .any(|d| d.ports.iter().any(|p| i32::from(p.port) == e.port))
        {
            problems.push(format!("{}:{}: no such port", e.name, e.port));
        }
    }
    let empty = selected.is_empty();
    let found = if empty {
        format!("NCCL_IB_HCA={raw} selects no active port: NCCL falls back to TCP sockets")
    } else {
        format!("NCCL_IB_HCA={raw} selects {}", sel_names.join(", "))
    };
    let fix = suggestion.unwrap_or_else(|| "unset NCCL_IB_HCA".into());
    match (problems.is_empty(), empty, list.exclude) {
        (true, false, _) => Outcome::ok(found),
        // An exclusion naming nothing is harmless unless nothing is left.
        (false, false, true) => Outcome::warn(format!("{found}; {}", problems.join("; ")), fix),
        (true, true, _) => Outcome::fail(found, fix),
        (false, _, _) => Outcome::fail(format!("{}; {found}", problems.join("; ")), fix),
    }
    .details(details)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::doctor::model::Status;
    use crate::doctor::testing::FakeHost;

    fn with(v: &str) -> Outcome {
        let mut h = FakeHost::rig();
        h.set_env("NCCL_IB_HCA", v);
        h.run(CHECK)
    }

    #[test]
    fn unset_and_good_values() {
        let o = FakeHost::rig().run(CHECK);
        assert_eq!(
            o.found,
            "unset: NCCL uses every active port: rxe0:1, rxe1:1, siw0:1, siw1:1"
        );
        assert_eq!(with("rxe").found, "NCCL_IB_HCA=rxe selects rxe0:1, rxe1:1");
        assert_eq!(with("=rxe0:1,rxe1").status, Status::Ok);
        assert_eq!(
            with("^siw").found,
            "NCCL_IB_HCA=^siw selects rxe0:1, rxe1:1"
        );
    }

    #[test]
    fn missing_device_or_port_fails() {
        let o = with("mlx5_0");
        assert_eq!(o.status, Status::Fail);
        assert!(
            o.found
                .starts_with("mlx5_0: no such device (devices: rxe0, rxe1, siw0, siw1)"),
            "{}",
            o.found
        );
        assert!(
            o.found
                .ends_with("selects no active port: NCCL falls back to TCP sockets")
        );
        assert_eq!(o.fix.as_deref(), Some("-x NCCL_IB_HCA=rxe0,rxe1"));
        let o = with("rxe0,erdma_0");
        assert_eq!(
            o.status,
            Status::Fail,
            "one missing device among good ones still fails"
        );
        assert!(o.found.starts_with("erdma_0: no such device"));
        assert!(with("=rxe").found.starts_with("=rxe: no such device"));
        let o = with("rxe0:2");
        assert_eq!(o.status, Status::Fail);
        assert!(o.found.starts_with("rxe0:2: no such port"));
        assert!(with("rxe0:one").found.contains("not a number"));
    }

    #[test]
    fn exclusions() {
        let o = with("^mlx5");
        assert_eq!(o.status, Status::Warn, "{o:?}");
        assert_eq!(with("^rxe,siw").status, Status::Fail, "excludes everything");
    }
}
