//! NCCL_IB_DISABLE (any non-zero number turns the RDMA transport off) and
//! NCCL_NET (`Socket` forces TCP): either leaves the NICs idle.

use crate::doctor::model::{Check, Ctx, Group, Outcome};
use crate::doctor::ncclenv::parse_param;

/// The check.
pub const CHECK: Check = Check {
    id: "nccl.ib-disable",
    group: Group::Nccl,
    about: "NCCL_IB_DISABLE is not 1 and NCCL_NET does not force sockets",
    run,
};

fn run(cx: &Ctx) -> Outcome {
    let disable = cx.env("NCCL_IB_DISABLE");
    let net = cx.env("NCCL_NET");
    let details = serde_json::json!({"NCCL_IB_DISABLE": disable, "NCCL_NET": net});
    if let Some(v) = &disable {
        match parse_param(v) {
            (Some(n), _) if n != 0 => {
                return Outcome::fail(
                    format!("NCCL_IB_DISABLE={v}: NCCL will not use RDMA, only TCP sockets"),
                    "-x NCCL_IB_DISABLE=0 (or unset it)",
                )
                .details(details);
            }
            (_, false) => {
                return Outcome::warn(
                    format!(
                        "NCCL_IB_DISABLE={v} is not a number (NCCL reads it as 0: RDMA stays on)"
                    ),
                    "-x NCCL_IB_DISABLE=0",
                )
                .details(details);
            }
            _ => {}
        }
    }
    if let Some(n) = &net
        && n.eq_ignore_ascii_case("socket")
    {
        return Outcome::fail(
            format!("NCCL_NET={n}: NCCL will use TCP sockets, not RDMA"),
            "unset NCCL_NET (or -x NCCL_NET=IB)",
        )
        .details(details);
    }
    let shown = match (&disable, &net) {
        (None, None) => "unset: the RDMA transport is on".to_owned(),
        _ => format!(
            "{}{}: the RDMA transport is on",
            disable
                .as_ref()
                .map(|v| format!("NCCL_IB_DISABLE={v}"))
                .unwrap_or_default(),
            net.as_ref()
                .map(|v| format!("{}NCCL_NET={v}", if disable.is_some() { ", " } else { "" }))
                .unwrap_or_default()
        ),
    };
    Outcome::ok(shown).details(details)
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
        h.set_env("NCCL_IB_DISABLE", "0");
        assert_eq!(
            h.run(CHECK).found,
            "NCCL_IB_DISABLE=0: the RDMA transport is on"
        );
        h.set_env("NCCL_IB_DISABLE", "1");
        assert_eq!(h.run(CHECK).status, Status::Fail);
        h.set_env("NCCL_IB_DISABLE", "yes");
        assert_eq!(h.run(CHECK).status, Status::Warn);
        h.set_env("NCCL_IB_DISABLE", "0");
        h.set_env("NCCL_NET", "Socket");
        assert_eq!(h.run(CHECK).status, Status::Fail);
        h.set_env("NCCL_NET", "IB");
        assert_eq!(
            h.run(CHECK).found,
            "NCCL_IB_DISABLE=0, NCCL_NET=IB: the RDMA transport is on"
        );
    }
}
