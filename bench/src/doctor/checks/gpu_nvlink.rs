//! NVLink: every link of every GPU up, and no link errors (replay,
//! recovery, CRC).

use crate::doctor::gpuhealth::{self, Finding};
use crate::doctor::model::{Check, Ctx, Group, Outcome};

/// The check.
pub const CHECK: Check = Check {
    id: "gpu.nvlink",
    group: Group::Gpu,
    about: "NVLinks up, no NVLink errors",
    run,
};

fn run(cx: &Ctx) -> Outcome {
    let gpus = match gpuhealth::readable_gpus(cx) {
        Ok(g) => g,
        Err(o) => return o,
    };
    if gpus.iter().all(|g| g.nvlinks.is_empty()) {
        return Outcome::skip("no NVLink: NVML reports no link on these GPUs (PCIe only)");
    }
    let mut findings = Vec::new();
    let (mut up, mut all) = (0, 0);
    for g in &gpus {
        let i = g.index;
        let down: Vec<String> = g
            .nvlinks
            .iter()
            .filter(|l| !l.active)
            .map(|l| l.link.to_string())
            .collect();
        all += g.nvlinks.len();
        up += g.nvlinks.len() - down.len();
        if !down.is_empty() && down.len() == g.nvlinks.len() {
            findings.push(Finding::fail(
                g,
                format!("all {} NVLinks down", g.nvlinks.len()),
                format!(
                    "on NVSwitch systems start the fabric manager (systemctl start nvidia-fabricmanager); \
                     else drain the host and reset the GPU (nvidia-smi -r -i {i}); open a ticket if they stay down"
                ),
            ));
        } else if !down.is_empty() {
            findings.push(Finding::fail(
                g,
                format!(
                    "NVLink {} down ({} of {} up)",
                    down.join(", "),
                    g.nvlinks.len() - down.len(),
                    g.nvlinks.len()
                ),
                format!(
                    "drain the host and reset the GPU (nvidia-smi -r -i {i}); open a ticket if a link stays down \
                     (board, cable or NVSwitch)"
                ),
            ));
        }
        let errs: Vec<String> = g
            .nvlinks
            .iter()
            .filter(|l| gpuhealth::nvlink_error_total(l) > 0)
            .filter_map(|l| {
                let e = l.errors?;
                let parts: Vec<String> = [
                    (e.replay, "replay"),
                    (e.recovery, "recovery"),
                    (e.crc_flit, "CRC flit"),
                    (e.crc_data, "CRC data"),
                ]
                .iter()
                .filter(|(n, _)| *n > 0)
                .map(|(n, w)| format!("{n} {w}"))
                .collect();
                Some(format!("link {}: {}", l.link, parts.join(", ")))
            })
            .collect();
        if !errs.is_empty() {
            findings.push(Finding::warn(
                g,
                format!("NVLink errors ({})", errs.join("; ")),
                format!(
                    "if they grow between runs (nvidia-smi nvlink -e -i {i}), drain the host and open a ticket \
                     (link, board or NVSwitch)"
                ),
            ));
        }
    }
    let details = gpuhealth::per_gpu_details(&gpus, |g| {
        serde_json::json!({
            "links": g.nvlinks,
        })
    });
    let ok = format!(
        "{up} of {all} NVLinks up on {}, no NVLink error",
        gpuhealth::count_gpus(gpus.len())
    );
    gpuhealth::fold(ok, findings, details)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::doctor::gpuhealth::{GpuState, NvLinkErrors};
    use crate::doctor::model::Status;
    use crate::doctor::testing::{FakeHost, gpu_host, healthy_gpus};

    fn host(edit: impl Fn(&mut GpuState)) -> FakeHost {
        gpu_host(2, |g| edit(&mut g[0]))
    }

    #[test]
    fn all_up_is_ok() {
        let o = host(|_| {}).run(CHECK);
        assert_eq!(o.status, Status::Ok);
        assert_eq!(o.found, "36 of 36 NVLinks up on 2 GPUs, no NVLink error");
        assert_eq!(o.details["gpus"][0]["links"][17]["active"], true);
    }

    #[test]
    fn a_link_down_fails() {
        let o = host(|g| {
            g.nvlinks[3].active = false;
            g.nvlinks[7].active = false;
        })
        .run(CHECK);
        assert_eq!(o.status, Status::Fail);
        assert_eq!(
            o.found,
            "GPU 0 (00000000:18:00.0): NVLink 3, 7 down (16 of 18 up)"
        );
        assert!(
            o.fix
                .unwrap()
                .starts_with("drain the host and reset the GPU (nvidia-smi -r -i 0)")
        );
        let o = host(|g| g.nvlinks.iter_mut().for_each(|l| l.active = false)).run(CHECK);
        assert!(o.found.ends_with("all 18 NVLinks down"));
        assert!(o.fix.unwrap().contains("nvidia-fabricmanager"));
    }

    #[test]
    fn link_errors_warn() {
        let o = host(|g| {
            g.nvlinks[2].errors = Some(NvLinkErrors {
                replay: 3,
                recovery: 1,
                ..Default::default()
            })
        })
        .run(CHECK);
        assert_eq!(o.status, Status::Warn);
        assert_eq!(
            o.found,
            "GPU 0 (00000000:18:00.0): NVLink errors (link 2: 3 replay, 1 recovery)"
        );
    }

    #[test]
    fn pcie_gpus_are_skipped() {
        let mut h = FakeHost::bare();
        h.gpu_health = healthy_gpus(1);
        if let Ok(v) = &mut h.gpu_health.nvml {
            v.gpus[0].nvlinks.clear();
        }
        assert_eq!(h.run(CHECK).status, Status::Skip);
    }
}
