//! ECC: on, and no uncorrectable error since the driver loaded or the GPU
//! was reset (volatile); corrected and lifetime (aggregate) counts, DRAM and
//! SRAM apart, in the details.

use crate::doctor::gpuhealth::{self, EccCounts, Finding, NOT_SUPPORTED};
use crate::doctor::model::{Check, Ctx, Group, Outcome};

/// The check.
pub const CHECK: Check = Check {
    id: "gpu.ecc",
    group: Group::Gpu,
    about: "ECC on, no uncorrectable ECC error since the GPU was reset",
    run,
};

/// Uncorrected errors: the total, else DRAM + SRAM.
fn uncorrected(c: &EccCounts) -> Option<u64> {
    c.uncorrected
        .or(match (c.dram_uncorrected, c.sram_uncorrected) {
            (None, None) => None,
            (d, s) => Some(d.unwrap_or(0) + s.unwrap_or(0)),
        })
}

fn corrected(c: &EccCounts) -> Option<u64> {
    c.corrected.or(match (c.dram_corrected, c.sram_corrected) {
        (None, None) => None,
        (d, s) => Some(d.unwrap_or(0) + s.unwrap_or(0)),
    })
}

fn where_(c: &EccCounts) -> String {
    match (c.dram_uncorrected, c.sram_uncorrected) {
        (Some(d), Some(s)) => format!(" (DRAM {d}, SRAM {s})"),
        _ => String::new(),
    }
}

fn run(cx: &Ctx) -> Outcome {
    let gpus = match gpuhealth::readable_gpus(cx) {
        Ok(g) => g,
        Err(o) => return o,
    };
    if !gpus.is_empty()
        && gpus
            .iter()
            .all(|g| g.ecc_mode.as_ref().err().map(String::as_str) == Some(NOT_SUPPORTED))
    {
        return Outcome::skip("ECC not supported on these GPUs");
    }
    let mut findings = Vec::new();
    let (mut life_unc, mut life_corr, mut vol_corr) = (0u64, 0u64, 0u64);
    for g in &gpus {
        let i = g.index;
        match &g.ecc_mode {
            Ok(m) if !m.current => findings.push(Finding::warn(
                g,
                "ECC is off",
                format!("turn ECC on: nvidia-smi -e 1 -i {i}, then reset the GPU (nvidia-smi -r -i {i}) or reboot"),
            )),
            Ok(m) if m.pending != m.current => findings.push(Finding::warn(
                g,
                "ECC will be off after the next reset",
                format!("keep ECC on: nvidia-smi -e 1 -i {i}"),
            )),
            _ => {}
        }
        if let Some(n) = uncorrected(&g.ecc_volatile).filter(|n| *n > 0) {
            findings.push(Finding::fail(
                g,
                format!(
                    "{n} uncorrectable ECC error{} since the GPU was reset{}",
                    if n == 1 { "" } else { "s" },
                    where_(&g.ecc_volatile)
                ),
                format!(
                    "drain the host and reset the GPU (nvidia-smi -r -i {i}) to remap the rows (see gpu.remap); \
                     open a ticket if they come back"
                ),
            ));
        }
        life_unc += uncorrected(&g.ecc_aggregate).unwrap_or(0);
        life_corr += corrected(&g.ecc_aggregate).unwrap_or(0);
        vol_corr += corrected(&g.ecc_volatile).unwrap_or(0);
    }
    let details = gpuhealth::per_gpu_details(&gpus, |g| {
        serde_json::json!({
            "ecc_mode": g.ecc_mode.as_ref().ok(), "ecc_mode_error": g.ecc_mode.as_ref().err(),
            "volatile": g.ecc_volatile, "aggregate": g.ecc_aggregate,
        })
    });
    let ok = format!(
        "ECC on, {}: no uncorrectable error since reset ({vol_corr} corrected); lifetime {life_unc} uncorrectable, {life_corr} corrected",
        gpuhealth::count_gpus(gpus.len())
    );
    gpuhealth::fold(ok, findings, details)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::doctor::gpuhealth::{EccMode, GpuState};
    use crate::doctor::model::Status;
    use crate::doctor::testing::{FakeHost, gpu_host, healthy_gpus};

    fn host(edit: impl Fn(&mut GpuState)) -> FakeHost {
        gpu_host(4, |g| edit(&mut g[2]))
    }

    #[test]
    fn clean_gpus_are_ok_with_their_lifetime_counts() {
        let o = host(|g| {
            g.ecc_aggregate.corrected = Some(17);
            g.ecc_aggregate.uncorrected = Some(1);
        })
        .run(CHECK);
        assert_eq!(o.status, Status::Ok);
        assert_eq!(
            o.found,
            "ECC on, 4 GPUs: no uncorrectable error since reset (0 corrected); lifetime 1 uncorrectable, 17 corrected"
        );
        assert_eq!(o.details["gpus"][2]["aggregate"]["corrected"], 17);
    }

    #[test]
    fn uncorrectable_since_reset_fails_with_reset_and_ticket() {
        let o = host(|g| {
            g.ecc_volatile.uncorrected = Some(3);
            g.ecc_volatile.dram_uncorrected = Some(2);
            g.ecc_volatile.sram_uncorrected = Some(1);
        })
        .run(CHECK);
        assert_eq!(o.status, Status::Fail);
        assert_eq!(
            o.found,
            "GPU 2 (00000000:1A:00.0): 3 uncorrectable ECC errors since the GPU was reset (DRAM 2, SRAM 1)"
        );
        let fix = o.fix.unwrap();
        assert!(
            fix.starts_with("drain the host and reset the GPU (nvidia-smi -r -i 2)"),
            "{fix}"
        );
        assert!(fix.contains("ticket"), "{fix}");
        // Without the total, DRAM + SRAM.
        let o = host(|g| {
            g.ecc_volatile.uncorrected = None;
            g.ecc_volatile.sram_uncorrected = Some(1);
        })
        .run(CHECK);
        assert!(
            o.found.contains(": 1 uncorrectable ECC error since"),
            "{}",
            o.found
        );
    }

    #[test]
    fn ecc_off_warns() {
        let o = host(|g| {
            g.ecc_mode = Ok(EccMode {
                current: false,
                pending: false,
            })
        })
        .run(CHECK);
        assert_eq!(o.status, Status::Warn);
        assert_eq!(o.found, "GPU 2 (00000000:1A:00.0): ECC is off");
        assert!(
            o.fix
                .unwrap()
                .starts_with("turn ECC on: nvidia-smi -e 1 -i 2")
        );
    }

    #[test]
    fn gpus_without_ecc_are_skipped() {
        let mut h = FakeHost::bare();
        h.gpu_health = healthy_gpus(1);
        if let Ok(v) = &mut h.gpu_health.nvml {
            v.gpus[0].ecc_mode = Err(NOT_SUPPORTED.into());
        }
        assert_eq!(h.run(CHECK).found, "ECC not supported on these GPUs");
        assert_eq!(FakeHost::bare().run(CHECK).status, Status::Skip);
    }
}
