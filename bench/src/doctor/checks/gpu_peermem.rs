//! nvidia_peermem: eRDMA registers GPU memory with ibv_reg_mr on the CUDA
//! pointer, which works only with this peer-memory module (the dma-buf path
//! other NICs use is not in the eRDMA provider). Without it NCCL stages
//! through host memory (no GPU-direct RDMA).

use crate::doctor::host;
use crate::doctor::model::{Check, Ctx, Group, Outcome};

/// The check.
pub const CHECK: Check = Check {
    id: "gpu.peermem",
    group: Group::Gpu,
    about: "nvidia_peermem is loaded (GPU-direct RDMA on eRDMA)",
    run,
};

/// The peer-memory module that is loaded, if any (`nv_peer_mem` is Mellanox's
/// older out-of-tree one).
fn loaded(cx: &Ctx) -> Option<&'static str> {
    let modules = host::read(cx.host, "/proc/modules").unwrap_or_default();
    ["nvidia_peermem", "nv_peer_mem"].into_iter().find(|m| {
        host::exists(cx.host, &format!("/sys/module/{m}"))
            || modules
                .lines()
                .any(|l| l.split_whitespace().next() == Some(m))
    })
}

fn run(cx: &Ctx) -> Outcome {
    let h = cx.host;
    let gpus = h.gpus().as_ref().map(|g| g.gpus.len()).unwrap_or(0);
    let nics = h.rdma().devices.len();
    let module = loaded(cx);
    let details = serde_json::json!({"module": module});
    if let Some(m) = module {
        return Outcome::ok(format!(
            "{m} loaded: ibv_reg_mr on GPU memory works (GPU-direct RDMA)"
        ))
        .details(details);
    }
    if gpus == 0 || nics == 0 {
        return Outcome::skip(format!(
            "not loaded; not needed here ({})",
            if gpus == 0 {
                "no GPU"
            } else {
                "no RDMA device"
            }
        ))
        .details(details);
    }
    let erdma = h.rdma().devices.iter().any(|d| d.is_erdma());
    Outcome::warn(
        format!(
            "nvidia_peermem not loaded: {}; NCCL copies through host memory (no GPU-direct RDMA)",
            if erdma {
                "eRDMA cannot register GPU memory (its provider has no dma-buf)"
            } else {
                "GPU memory registration needs it unless the NIC supports dma-buf"
            }
        ),
        "modprobe nvidia_peermem on the host (part of the NVIDIA driver >= 470; add it to /etc/modules-load.d)",
    )
    .details(details)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::doctor::model::Status;
    use crate::doctor::testing::FakeHost;

    #[test]
    fn loaded_missing_and_not_needed() {
        let h = FakeHost::erdma_gpu();
        assert_eq!(h.run(CHECK).status, Status::Ok);
        h.remove("/sys/module/nvidia_peermem");
        let o = h.run(CHECK);
        assert_eq!(o.status, Status::Warn);
        assert!(o.found.contains("eRDMA cannot register GPU memory"));
        h.file("/proc/modules", "nvidia_peermem 16384 0 - Live 0x0\n");
        assert_eq!(h.run(CHECK).status, Status::Ok);
        let o = FakeHost::rig().run(CHECK);
        assert_eq!(o.status, Status::Skip);
        assert_eq!(o.found, "not loaded; not needed here (no GPU)");
    }
}
