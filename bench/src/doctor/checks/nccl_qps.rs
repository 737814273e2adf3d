//! NCCL_IB_QPS_PER_CONNECTION: queue pairs per connection, 1 to 128 (NCCL's
//! NCCL_IB_MAX_QPS); Alibaba recommends 8 on eRDMA, whose bandwidth per QP is
//! limited.

use crate::doctor::model::{Check, Ctx, Group, Outcome};
use crate::doctor::ncclenv::parse_param;

/// The check.
pub const CHECK: Check = Check {
    id: "nccl.qps",
    group: Group::Nccl,
    about: "NCCL_IB_QPS_PER_CONNECTION is a number from 1 to 128 (8 on eRDMA)",
    run,
};

fn run(cx: &Ctx) -> Outcome {
    let erdma = cx.host.rdma().devices.iter().any(|d| d.is_erdma());
    let raw = cx.env("NCCL_IB_QPS_PER_CONNECTION");
    let details = serde_json::json!({"value": raw, "erdma": erdma});
    let Some(v) = raw else {
        return if erdma {
            Outcome::warn(
                "unset (1 QP per connection): one eRDMA QP does not reach the NIC's bandwidth",
                "-x NCCL_IB_QPS_PER_CONNECTION=8 (Alibaba's recommendation for eRDMA)",
            )
        } else {
            Outcome::ok("unset (NCCL's default, 1)")
        }
        .details(details);
    };
    match parse_param(&v) {
        (Some(n), true) if (1..=128).contains(&n) => {
            if erdma && n < 4 {
                Outcome::warn(
                    format!("NCCL_IB_QPS_PER_CONNECTION={n}: few QPs for eRDMA"),
                    "-x NCCL_IB_QPS_PER_CONNECTION=8 (Alibaba's recommendation for eRDMA)",
                )
            } else {
                Outcome::ok(format!("NCCL_IB_QPS_PER_CONNECTION={n}"))
            }
        }
        (Some(n), false) if (1..=128).contains(&n) => Outcome::warn(
            format!("NCCL_IB_QPS_PER_CONNECTION={v} is not a plain number: NCCL reads {n}"),
            format!("-x NCCL_IB_QPS_PER_CONNECTION={n}"),
        ),
        (n, _) => Outcome::fail(
            format!(
                "NCCL_IB_QPS_PER_CONNECTION={v}: NCCL reads {} (must be 1 to 128)",
                n.map(|x| x.to_string())
                    .unwrap_or("an overflow, default 1".into())
            ),
            "-x NCCL_IB_QPS_PER_CONNECTION=8",
        ),
    }
    .details(details)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::doctor::model::Status;
    use crate::doctor::testing::FakeHost;

    #[test]
    fn values() {
        let mut h = FakeHost::rig();
        assert_eq!(h.run(CHECK).status, Status::Ok);
        h.set_env("NCCL_IB_QPS_PER_CONNECTION", "4");
        assert_eq!(h.run(CHECK).status, Status::Ok);
        h.set_env("NCCL_IB_QPS_PER_CONNECTION", "8x");
        assert_eq!(h.run(CHECK).status, Status::Warn);
        for bad in ["0", "129", "eight", "-1"] {
            h.set_env("NCCL_IB_QPS_PER_CONNECTION", bad);
            assert_eq!(h.run(CHECK).status, Status::Fail, "{bad}");
        }
        let mut h = FakeHost::erdma_gpu();
        assert_eq!(h.run(CHECK).status, Status::Warn);
        h.set_env("NCCL_IB_QPS_PER_CONNECTION", "8");
        assert_eq!(h.run(CHECK).status, Status::Ok);
    }
}
