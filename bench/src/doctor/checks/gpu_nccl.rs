//! NCCL is found (ERDMA_NCCL_LIBRARY, else libnccl.so.2, as the tools load it)
//! and new enough: 2.19 or later (what erdma supports and Alibaba recommends
//! for eRDMA).

use crate::doctor::model::{Check, Ctx, Group, Outcome};

/// The check.
pub const CHECK: Check = Check {
    id: "gpu.nccl",
    group: Group::Gpu,
    about: "NCCL (libnccl.so.2) is found and >= 2.19",
    run,
};

fn run(cx: &Ctx) -> Outcome {
    match cx.host.nccl() {
        Ok(n) => Outcome::ok(format!("NCCL {} ({})", n.version, n.path))
            .details(serde_json::json!({"version": n.version, "path": n.path})),
        Err(e) => Outcome::fail(
            e.clone(),
            "install NCCL >= 2.19 (apt-get install libnccl2, or pip install nvidia-nccl-cu12 and \
             point ERDMA_NCCL_LIBRARY or LD_LIBRARY_PATH at its lib/)",
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::doctor::model::Status;
    use crate::doctor::testing::FakeHost;

    #[test]
    fn found_or_not() {
        assert_eq!(
            FakeHost::erdma_gpu().run(CHECK).found,
            "NCCL 2.21.5 (libnccl.so.2)"
        );
        let o = FakeHost::bare().run(CHECK);
        assert_eq!(o.status, Status::Fail);
        assert!(o.fix.unwrap().contains(">= 2.19"));
    }
}
