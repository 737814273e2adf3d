//! NCCL_SOCKET_IFNAME against the interfaces that are up and have an address,
//! with NCCL's syntax (prefixes, `=` exact, `^` exclude). NCCL bootstraps over
//! this interface and its IB transport needs it too ("NET/IB : No IP interface
//! found"), so naming a missing interface fails. Unset, NCCL picks `ib*`, else
//! anything but docker*, lo and virbr*.

use std::net::IpAddr;

use crate::doctor::host::Interface;
use crate::doctor::model::{Check, Ctx, Group, Outcome};
use crate::doctor::ncclenv::NameList;
use crate::doctor::recommend;

/// The check.
pub const CHECK: Check = Check {
    id: "nccl.socket-ifname",
    group: Group::Nccl,
    about: "NCCL_SOCKET_IFNAME names an interface that is up with an address",
    run,
};

/// Whether NCCL would consider this address (`NCCL_SOCKET_FAMILY` filters;
/// IPv6 loopback is skipped).
fn usable_addr(a: &IpAddr, family: Option<&str>) -> bool {
    match (a, family) {
        (IpAddr::V6(v6), _) if v6.is_loopback() => false,
        (IpAddr::V4(_), Some("AF_INET6")) | (IpAddr::V6(_), Some("AF_INET")) => false,
        _ => true,
    }
}

/// The interfaces NCCL would use for the list `spec`.
fn matching<'a>(ifs: &'a [Interface], spec: &str, family: Option<&str>) -> Vec<&'a Interface> {
    let list = NameList::parse(spec);
    ifs.iter()
        .filter(|i| i.running && i.addrs.iter().any(|a| usable_addr(a, family)))
        .filter(|i| list.selects(&i.name, None))
        .collect()
}

/// NCCL's own choice when the variable is unset.
fn auto_pick<'a>(ifs: &'a [Interface], family: Option<&str>) -> Vec<&'a Interface> {
    for spec in ["ib", "^docker,lo,virbr", "docker", "lo", "virbr"] {
        let m = matching(ifs, spec, family);
        if !m.is_empty() {
            return m;
        }
    }
    Vec::new()
}

fn show(i: &Interface) -> String {
    match i.addrs.first() {
        Some(a) => format!("{} {a}", i.name),
        None => i.name.clone(),
    }
}

fn run(cx: &Ctx) -> Outcome {
    let h = cx.host;
    let ifs = h.interfaces();
    let family = cx.env("NCCL_SOCKET_FAMILY");
    let fam = family.as_deref();
    let usable = recommend::usable_ports(h.rdma());
    let suggestion = recommend::socket_ifname(h, &usable);
    let fix = match &suggestion {
        Some(s) => format!("-x NCCL_SOCKET_IFNAME={s} (the RDMA port's interface)"),
        None => "name an interface that is up with an IP address (ip -br addr)".to_owned(),
    };
    let raw = cx.env("NCCL_SOCKET_IFNAME");
    let with_addr: Vec<String> = ifs
        .iter()
        .filter(|i| i.running && !i.addrs.is_empty())
        .map(show)
        .collect();
    // NCCL ignores a value of one character (strlen > 1).
    let Some(raw) = raw.filter(|v| v.len() > 1) else {
        let picked = auto_pick(ifs, fam);
        let names: Vec<String> = picked.iter().map(|i| show(i)).collect();
        let details = serde_json::json!({"value": null, "nccl_picks": names});
        if picked.is_empty() {
            return Outcome::fail("unset, and no interface is up with an address", fix)
                .details(details);
        }
        if picked.iter().all(|i| i.name.starts_with("lo")) {
            return Outcome::warn(
                "unset: NCCL would use lo only, which other hosts cannot reach",
                fix,
            )
            .details(details);
        }
        let first = &picked[0].name;
        let rest = if names.len() > 1 {
            format!(" (first of {})", names.join(", "))
        } else {
            String::new()
        };
        return Outcome::ok(format!("unset: NCCL uses {first}{rest}")).details(details);
    };
    let list = NameList::parse(&raw);
    let chosen = matching(ifs, &raw, fam);
    let names: Vec<String> = chosen.iter().map(|i| show(i)).collect();
    let details = serde_json::json!({"value": raw, "selected": names});
    let mut problems = Vec::new();
    if !list.exclude {
        for e in &list.entries {
            let all: Vec<&Interface> = ifs
                .iter()
                .filter(|i| list.entry_matches(e, &i.name, None))
                .collect();
            if all.is_empty() {
                problems.push(format!("{}: no such interface", e.name));
            } else if !all
                .iter()
                .any(|i| i.running && i.addrs.iter().any(|a| usable_addr(a, fam)))
            {
                let what: Vec<String> = all
                    .iter()
                    .map(|i| {
                        format!(
                            "{} {}",
                            i.name,
                            if i.running {
                                "has no address"
                            } else {
                                "is down"
                            }
                        )
                    })
                    .collect();
                problems.push(what.join(", "));
            }
        }
    }
    let avail = if with_addr.is_empty() {
        "none".to_owned()
    } else {
        with_addr.join(", ")
    };
    if chosen.is_empty() {
        let mut found = format!(
            "NCCL_SOCKET_IFNAME={raw} matches no interface that is up with an address (there are: {avail}): NCCL init fails"
        );
        if !problems.is_empty() {
            found = format!("{}; {found}", problems.join("; "));
        }
        return Outcome::fail(found, fix).details(details);
    }
    let found = format!("NCCL_SOCKET_IFNAME={raw}: {}", names.join(", "));
    if !problems.is_empty() {
        return Outcome::fail(format!("{}; {found}", problems.join("; ")), fix).details(details);
    }
    if chosen.iter().all(|i| i.name.starts_with("lo")) {
        return Outcome::warn(
            format!("{found}: loopback only, other hosts cannot reach it"),
            fix,
        )
        .details(details);
    }
    Outcome::ok(found).details(details)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::doctor::model::Status;
    use crate::doctor::testing::{FakeHost, iface};

    fn with(v: &str) -> Outcome {
        let mut h = FakeHost::rig();
        h.set_env("NCCL_SOCKET_IFNAME", v);
        h.run(CHECK)
    }

    #[test]
    fn unset_shows_nccls_pick() {
        let o = FakeHost::rig().run(CHECK);
        assert_eq!(o.status, Status::Ok);
        assert!(
            o.found
                .starts_with("unset: NCCL uses veth0 (first of veth0 10.99.0.1, "),
            "{}",
            o.found
        );
        let mut h = FakeHost::rig();
        h.interfaces.push(iface("ib0", "10.0.0.1"));
        assert_eq!(h.run(CHECK).found, "unset: NCCL uses ib0");
        let o = FakeHost::bare().run(CHECK);
        assert_eq!(o.status, Status::Warn, "lo only");
    }

    #[test]
    fn set_values() {
        assert_eq!(
            with("veth0").found,
            "NCCL_SOCKET_IFNAME=veth0: veth0 10.99.0.1"
        );
        assert_eq!(with("=veth1").status, Status::Ok);
        let o = with("eth9");
        assert_eq!(o.status, Status::Fail);
        assert!(
            o.found.starts_with(
                "eth9: no such interface; NCCL_SOCKET_IFNAME=eth9 matches no interface"
            ),
            "{}",
            o.found
        );
        assert_eq!(
            o.fix.as_deref(),
            Some("-x NCCL_SOCKET_IFNAME=veth0 (the RDMA port's interface)")
        );
        let o = with("veth0,eth9");
        assert_eq!(o.status, Status::Fail, "a missing name among good ones");
        assert_eq!(with("^veth").status, Status::Warn, "only lo is left");
        assert_eq!(
            with("x").found,
            FakeHost::rig().run(CHECK).found,
            "one character: ignored"
        );
    }

    #[test]
    fn down_or_no_address() {
        let mut h = FakeHost::rig();
        h.interfaces[1].running = false;
        h.set_env("NCCL_SOCKET_IFNAME", "veth0");
        let o = h.run(CHECK);
        assert_eq!(o.status, Status::Fail);
        assert!(o.found.starts_with("veth0 is down"), "{}", o.found);
        h.interfaces[1].running = true;
        h.interfaces[1].addrs.clear();
        assert!(h.run(CHECK).found.starts_with("veth0 has no address"));
        h.set_env("NCCL_SOCKET_FAMILY", "AF_INET6");
        h.set_env("NCCL_SOCKET_IFNAME", "veth1");
        assert_eq!(
            h.run(CHECK).status,
            Status::Fail,
            "IPv4 only, AF_INET6 asked"
        );
    }
}
