//! The GID index NCCL will use on each RoCE-style port it selects, against
//! NCCL_IB_GID_INDEX: unset (or -1) NCCL picks the IPv4-mapped RoCE v2 entry
//! itself (`Context::select_gid`); a forced index that is empty, outside the
//! table or another entry than that one is a warning.

use erdma::{GidType, Protocol};

use crate::doctor::model::{Check, Ctx, Group, Outcome};
use crate::doctor::ncclenv::{nccl_ports, parse_param};

/// The check.
pub const CHECK: Check = Check {
    id: "rdma.gid-index",
    group: Group::Rdma,
    about: "the GID index NCCL will use vs NCCL_IB_GID_INDEX",
    run,
};

fn describe(g: &erdma::GidEntry) -> String {
    let ll = if g.gid.is_link_local() {
        ", link-local"
    } else {
        ""
    };
    format!("{} ({}{ll})", g.gid, g.gid_type)
}

fn run(cx: &Ctx) -> Outcome {
    let rdma = cx.host.rdma();
    let hca = cx.env("NCCL_IB_HCA");
    let ports: Vec<_> = nccl_ports(rdma, hca.as_deref())
        .into_iter()
        .filter(|(d, p)| d.protocol(p) == Protocol::Roce)
        .collect();
    if ports.is_empty() {
        return Outcome::skip("no RoCE-style port among the ports NCCL would use");
    }
    let forced = cx.env("NCCL_IB_GID_INDEX");
    let parsed = forced.as_deref().map(parse_param);
    let mut warnings = Vec::new();
    let mut fine = Vec::new();
    let mut picks = Vec::new();
    let mut details = Vec::new();
    for (d, p) in &ports {
        let name = format!("{}:{}", d.name, p.port);
        let pick = p.nccl_gid.as_ref();
        let good_pick = pick
            .ok()
            .filter(|g| g.gid.to_ipv4().is_some() && g.gid_type == GidType::RoceV2);
        if let Some(g) = good_pick {
            picks.push(g.index);
        }
        let pick_text = match pick {
            Ok(g) => format!("{} {}", g.index, describe(g)),
            Err(e) => format!("none ({e})"),
        };
        details.push(serde_json::json!({
            "port": name, "nccl_pick": pick.ok().map(|g| g.index),
            "forced": parsed.and_then(|p| p.0),
        }));
        let forced_index = match parsed {
            None | Some((Some(-1), _)) => None,
            Some((v, _)) => Some(v),
        };
        match forced_index {
            None => match good_pick {
                Some(g) => fine.push(format!("{name} {}", describe(g))),
                None => warnings.push(format!(
                    "{name}: NCCL would use GID {pick_text}: no IPv4 RoCE v2 entry (is an IPv4 \
                     address configured on {}?)",
                    p.netdev.as_deref().unwrap_or("its interface")
                )),
            },
            Some(None) | Some(Some(i64::MIN..=-1)) => warnings.push(format!(
                "{name}: index out of range; NCCL would use {pick_text}"
            )),
            Some(Some(v)) => {
                let entry = p.gids.iter().find(|g| i64::from(g.index) == v);
                match entry {
                    _ if v >= i64::from(p.gid_table_len) => warnings.push(format!(
                        "{name}: index {v} is outside the GID table ({} entries); NCCL's own choice: {pick_text}",
                        p.gid_table_len
                    )),
                    None => warnings.push(format!(
                        "{name}: entry {v} is empty; NCCL's own choice: {pick_text}"
                    )),
                    Some(g) if good_pick.is_some_and(|b| b.index == g.index) => {
                        fine.push(format!("{name} {v} = {}", describe(g)))
                    }
                    Some(g) if good_pick.is_none() && g.gid.to_ipv4().is_some() => {
                        fine.push(format!("{name} {v} = {}", describe(g)))
                    }
                    Some(g) => warnings.push(format!(
                        "{name}: index {v} is {}; NCCL's own choice: {pick_text}",
                        describe(g)
                    )),
                }
            }
        }
    }
    let details = serde_json::Value::Array(details);
    let shown = match (&forced, parsed) {
        (Some(f), Some((_, false))) => {
            format!(
                "NCCL_IB_GID_INDEX={f} (not a number: NCCL reads it as {:?})",
                parsed.and_then(|p| p.0)
            )
        }
        (Some(f), _) => format!("NCCL_IB_GID_INDEX={f}"),
        (None, _) => "NCCL_IB_GID_INDEX unset (NCCL picks)".to_owned(),
    };
    if warnings.is_empty() {
        return Outcome::ok(format!("{shown}: {}", fine.join(", "))).details(details);
    }
    let same =
        !picks.is_empty() && picks.len() == ports.len() && picks.windows(2).all(|w| w[0] == w[1]);
    let fix = match (forced.is_some(), same) {
        (true, true) => format!(
            "-x NCCL_IB_GID_INDEX={} (or leave it unset: NCCL picks the IPv4 RoCE v2 entry)",
            picks[0]
        ),
        (true, false) => {
            "unset NCCL_IB_GID_INDEX: NCCL then picks the IPv4 RoCE v2 entry per port".to_owned()
        }
        (false, _) => {
            "configure an IPv4 address on the port's interface (RoCE v2 GIDs follow it)".to_owned()
        }
    };
    Outcome::warn(format!("{shown}: {}", warnings.join("; ")), fix).details(details)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::doctor::model::Status;
    use crate::doctor::testing::FakeHost;

    #[test]
    fn unset_uses_nccls_pick() {
        let mut h = FakeHost::rig();
        h.set_env("NCCL_IB_HCA", "rxe");
        let o = h.run(CHECK);
        assert_eq!(o.status, Status::Ok, "{o:?}");
        assert_eq!(
            o.found,
            "NCCL_IB_GID_INDEX unset (NCCL picks): rxe0:1 ::ffff:10.99.0.1 (RoCE v2), rxe1:1 ::ffff:10.99.0.2 (RoCE v2)"
        );
    }

    #[test]
    fn right_index_ok_wrong_index_warns() {
        let mut h = FakeHost::rig();
        h.set_env("NCCL_IB_GID_INDEX", "1");
        assert_eq!(h.run(CHECK).status, Status::Ok);
        h.set_env("NCCL_IB_GID_INDEX", "0");
        let o = h.run(CHECK);
        assert_eq!(o.status, Status::Warn);
        assert!(
            o.found.contains(
                "rxe0:1: index 0 is fe80::aff:fe63:1 (RoCE v2, link-local); NCCL's own choice: 1"
            ),
            "{}",
            o.found
        );
        assert!(o.fix.unwrap().starts_with("-x NCCL_IB_GID_INDEX=1"));
        h.set_env("NCCL_IB_GID_INDEX", "5");
        assert!(h.run(CHECK).found.contains("entry 5 is empty"));
        h.set_env("NCCL_IB_GID_INDEX", "4096");
        assert!(
            h.run(CHECK)
                .found
                .contains("outside the GID table (1024 entries)")
        );
        h.set_env("NCCL_IB_GID_INDEX", "-1");
        assert_eq!(h.run(CHECK).status, Status::Ok);
        h.set_env("NCCL_IB_GID_INDEX", "one");
        let o = h.run(CHECK);
        assert_eq!(o.status, Status::Warn);
        assert!(o.found.contains("not a number"), "{}", o.found);
    }

    #[test]
    fn no_ipv4_gid_warns() {
        let mut h = FakeHost::rig();
        let p = &mut h.rdma.devices[0].ports[0];
        p.gids.truncate(1);
        p.nccl_gid = Ok(p.gids[0].clone());
        let o = h.run(CHECK);
        assert_eq!(o.status, Status::Warn);
        assert!(
            o.found.contains("is an IPv4 address configured on veth0"),
            "{}",
            o.found
        );
    }

    #[test]
    fn iwarp_only_skips() {
        let mut h = FakeHost::rig();
        h.set_env("NCCL_IB_HCA", "siw");
        assert_eq!(h.run(CHECK).status, Status::Skip);
    }
}
