//! GPU-NIC affinity from sysfs: for each GPU the nearest RDMA NIC, the PCIe
//! path between them (PIX: same PCIe switch; PXB; PHB: same CPU socket; SYS:
//! across sockets) and the NUMA node, as NCCL will see it.

use crate::doctor::model::{Check, Ctx, Group, Outcome};
use crate::doctor::topology::{Nearest, nearest_nics};

/// The check.
pub const CHECK: Check = Check {
    id: "gpu.affinity",
    group: Group::Gpu,
    about: "nearest RDMA NIC of each GPU (NUMA node, PCIe switch)",
    run,
};

/// `0-3,5`.
fn ranges(v: &[usize]) -> String {
    let mut out: Vec<String> = Vec::new();
    let mut i = 0;
    while i < v.len() {
        let mut j = i;
        while j + 1 < v.len() && v[j + 1] == v[j] + 1 {
            j += 1;
        }
        out.push(if i == j {
            v[i].to_string()
        } else {
            format!("{}-{}", v[i], v[j])
        });
        i = j + 1;
    }
    out.join(",")
}

/// The GPUs with their nearest NIC, or why that cannot be told.
pub fn affinity(cx: &Ctx) -> Result<Vec<Nearest>, String> {
    let h = cx.host;
    let gpus = match h.gpus() {
        Ok(g) if !g.gpus.is_empty() => &g.gpus,
        _ => return Err("no GPU (see gpu.driver)".into()),
    };
    let nics: Vec<_> = h.rdma().devices.iter().collect();
    if nics.is_empty() {
        return Err("no RDMA device".into());
    }
    let near = nearest_nics(h, gpus, &nics);
    if near.is_empty() {
        return Err(
            "sysfs shows no PCI function for the RDMA devices (software devices such as rxe/siw) or the GPUs"
                .into(),
        );
    }
    Ok(near)
}

fn run(cx: &Ctx) -> Outcome {
    let near = match affinity(cx) {
        Ok(n) => n,
        Err(e) => return Outcome::skip(e),
    };
    // (NIC, path, NUMA node) -> the GPUs that have it.
    type Key = (String, &'static str, Option<i32>);
    let mut groups: Vec<(Key, Vec<usize>)> = Vec::new();
    for n in &near {
        let key = (n.nic.clone(), n.path.as_str(), n.gpu_numa);
        match groups.iter_mut().find(|(k, _)| *k == key) {
            Some((_, v)) => v.push(n.gpu),
            None => groups.push((key, vec![n.gpu])),
        }
    }
    let text: Vec<String> = groups
        .iter()
        .map(|((nic, path, numa), gpus)| {
            let numa = numa.map(|x| format!(", NUMA {x}")).unwrap_or_default();
            format!("GPU {} -> {nic} {path}{numa}", ranges(gpus))
        })
        .collect();
    let details = serde_json::Value::Array(
        near.iter()
            .map(|n| {
                serde_json::json!({"gpu": n.gpu, "gpu_pci": n.gpu_pci, "numa": n.gpu_numa,
                               "nic": n.nic, "path": n.path.as_str()})
            })
            .collect(),
    );
    Outcome::ok(text.join("; ")).details(details)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::doctor::model::Status;
    use crate::doctor::testing::FakeHost;

    #[test]
    fn each_gpu_finds_the_nic_on_its_switch() {
        let o = FakeHost::erdma_gpu().run(CHECK);
        assert_eq!(o.status, Status::Ok, "{o:?}");
        assert_eq!(
            o.found,
            "GPU 0-3 -> erdma_0 PIX, NUMA 0; GPU 4-7 -> erdma_1 PIX, NUMA 1"
        );
    }

    #[test]
    fn one_nic_far_from_half_the_gpus() {
        let mut h = FakeHost::erdma_gpu();
        h.rdma.devices.truncate(1);
        let o = h.run(CHECK);
        assert_eq!(
            o.found,
            "GPU 0-3 -> erdma_0 PIX, NUMA 0; GPU 4-7 -> erdma_0 SYS, NUMA 1"
        );
    }

    #[test]
    fn software_devices_and_no_gpu_skip() {
        assert_eq!(FakeHost::rig().run(CHECK).status, Status::Skip);
        let mut h = FakeHost::rig();
        h.gpus = FakeHost::erdma_gpu().gpus.clone();
        let o = h.run(CHECK);
        assert_eq!(o.status, Status::Skip);
        assert!(o.found.contains("no PCI function"));
        assert_eq!(ranges(&[0, 1, 2, 5, 7, 8]), "0-2,5,7-8");
    }
}
