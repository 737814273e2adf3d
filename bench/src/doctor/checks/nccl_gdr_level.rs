//! NCCL_NET_GDR_LEVEL: NCCL uses GPU-direct RDMA only between a GPU and a NIC
//! at most this far apart (default PXB). On cloud hosts GPU and NIC are often
//! PHB or SYS apart, so without the variable GPU-direct stays off (Alibaba sets
//! 5 = SYS). Names are case-sensitive; an unknown value is ignored by NCCL.

use super::gpu_affinity::affinity;
use crate::doctor::model::{Check, Ctx, Group, Outcome};
use crate::doctor::ncclenv::{PathType, parse_gdr_level};

/// The check.
pub const CHECK: Check = Check {
    id: "nccl.gdr-level",
    group: Group::Nccl,
    about: "NCCL_NET_GDR_LEVEL is valid and lets GPU-direct reach the NICs",
    run,
};

fn run(cx: &Ctx) -> Outcome {
    let raw = cx.env("NCCL_NET_GDR_LEVEL");
    let level = raw.as_deref().and_then(parse_gdr_level);
    let details = serde_json::json!({"value": raw, "level": level.map(|l| l.as_str())});
    if let (Some(v), None) = (&raw, level) {
        return Outcome::warn(
            format!(
                "NCCL_NET_GDR_LEVEL={v} is not a level NCCL knows (LOC, PIX, PXB, PHB, SYS or 0-5; names are upper case): ignored, default PXB"
            ),
            "-x NCCL_NET_GDR_LEVEL=SYS",
        )
        .details(details);
    }
    let effective = level.unwrap_or(PathType::Pxb);
    let shown = match &raw {
        Some(v) if v != effective.as_str() => {
            format!("NCCL_NET_GDR_LEVEL={v} ({})", effective.as_str())
        }
        Some(v) => format!("NCCL_NET_GDR_LEVEL={v}"),
        None => "NCCL_NET_GDR_LEVEL unset (PXB)".to_owned(),
    };
    let near = match affinity(cx) {
        Ok(n) => n,
        Err(why) => {
            return Outcome::ok(format!("{shown}; GPU-NIC distance unknown: {why}"))
                .details(details);
        }
    };
    let beyond: Vec<String> = near
        .iter()
        .filter(|n| n.path > effective)
        .map(|n| format!("GPU {} ({} to {})", n.gpu, n.path.as_str(), n.nic))
        .collect();
    if beyond.is_empty() {
        return Outcome::ok(format!(
            "{shown}: GPU-direct RDMA reaches the nearest NIC of every GPU"
        ))
        .details(details);
    }
    let worst = near.iter().map(|n| n.path).max().unwrap_or(PathType::Sys);
    Outcome::warn(
        format!(
            "{shown}: GPU-direct RDMA is off for {}: traffic is staged through host memory",
            beyond.join(", ")
        ),
        format!("-x NCCL_NET_GDR_LEVEL={}", worst.as_str()),
    )
    .details(details)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::doctor::model::Status;
    use crate::doctor::testing::FakeHost;

    #[test]
    fn levels_against_the_topology() {
        let mut h = FakeHost::erdma_gpu();
        let o = h.run(CHECK);
        assert_eq!(o.status, Status::Ok, "PIX everywhere: {o:?}");
        h.rdma.devices.truncate(1);
        let o = h.run(CHECK);
        assert_eq!(o.status, Status::Warn);
        assert!(
            o.found.starts_with(
                "NCCL_NET_GDR_LEVEL unset (PXB): GPU-direct RDMA is off for GPU 4 (SYS to erdma_0)"
            ),
            "{}",
            o.found
        );
        assert_eq!(o.fix.as_deref(), Some("-x NCCL_NET_GDR_LEVEL=SYS"));
        h.set_env("NCCL_NET_GDR_LEVEL", "5");
        assert_eq!(h.run(CHECK).status, Status::Ok);
        assert!(h.run(CHECK).found.starts_with("NCCL_NET_GDR_LEVEL=5 (SYS)"));
        h.set_env("NCCL_NET_GDR_LEVEL", "sys");
        let o = h.run(CHECK);
        assert_eq!(o.status, Status::Warn);
        assert!(o.found.contains("names are upper case"));
    }

    #[test]
    fn without_gpus_only_the_syntax() {
        let mut h = FakeHost::rig();
        assert_eq!(h.run(CHECK).status, Status::Ok);
        h.set_env("NCCL_NET_GDR_LEVEL", "PHB");
        assert!(
            h.run(CHECK)
                .found
                .starts_with("NCCL_NET_GDR_LEVEL=PHB; GPU-NIC distance unknown")
        );
    }
}
