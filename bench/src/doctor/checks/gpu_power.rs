//! Power: the enforced limit not below the default (a lowered cap makes a
//! GPU slower than its peers), and the draw against the limit.

use crate::doctor::gpuhealth::{self, Finding};
use crate::doctor::model::{Check, Ctx, Group, Outcome};

/// The check.
pub const CHECK: Check = Check {
    id: "gpu.power",
    group: Group::Gpu,
    about: "GPU power limit at its default, draw under the limit",
    run,
};

fn w(mw: u32) -> String {
    format!("{:.0} W", f64::from(mw) / 1000.0)
}

fn run(cx: &Ctx) -> Outcome {
    let gpus = match gpuhealth::reporting(cx, "GPU power limits", |g| &g.power_limit_mw) {
        Ok(g) => g,
        Err(o) => return o,
    };
    let mut findings = Vec::new();
    let (mut draw, mut limit) = (0u64, 0u64);
    for g in &gpus {
        let i = g.index;
        let (Ok(&lim), def) = (g.power_limit_mw.as_ref(), g.power_default_mw.as_ref().ok()) else {
            continue;
        };
        limit += u64::from(lim);
        draw += u64::from(*g.power_mw.as_ref().unwrap_or(&0));
        if let Some(&d) = def
            && lim < d
        {
            findings.push(Finding::warn(
                g,
                format!("power limit {} below its default {}", w(lim), w(d)),
                format!(
                    "restore it: nvidia-smi -pl {} -i {i} (and find what lowered it)",
                    d / 1000
                ),
            ));
        }
    }
    let details = gpuhealth::per_gpu_details(&gpus, |g| {
        serde_json::json!({
            "power_mw": g.power_mw.as_ref().ok(),
            "limit_mw": g.power_limit_mw.as_ref().ok(),
            "default_limit_mw": g.power_default_mw.as_ref().ok(),
        })
    });
    let ok = format!(
        "{}: limits at their defaults; drawing {} of {}",
        gpuhealth::count_gpus(gpus.len()),
        w(draw.min(u64::from(u32::MAX)) as u32),
        w(limit.min(u64::from(u32::MAX)) as u32)
    );
    gpuhealth::fold(ok, findings, details)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::doctor::gpuhealth::NOT_SUPPORTED;
    use crate::doctor::model::Status;
    use crate::doctor::testing::{FakeHost, healthy_gpus};

    #[test]
    fn default_limits_are_ok_and_lowered_ones_warn() {
        let mut h = FakeHost::bare();
        h.gpu_health = healthy_gpus(2);
        let o = h.run(CHECK);
        assert_eq!(o.status, Status::Ok);
        assert_eq!(
            o.found,
            "2 GPUs: limits at their defaults; drawing 144 W of 1400 W"
        );
        if let Ok(v) = &mut h.gpu_health.nvml {
            v.gpus[1].power_limit_mw = Ok(400_000);
        }
        let o = h.run(CHECK);
        assert_eq!(o.status, Status::Warn);
        assert_eq!(
            o.found,
            "GPU 1 (00000000:19:00.0): power limit 400 W below its default 700 W"
        );
        assert!(
            o.fix
                .unwrap()
                .starts_with("restore it: nvidia-smi -pl 700 -i 1")
        );
        if let Ok(v) = &mut h.gpu_health.nvml {
            for g in &mut v.gpus {
                g.power_limit_mw = Err(NOT_SUPPORTED.into());
            }
        }
        assert_eq!(h.run(CHECK).status, Status::Skip);
    }
}
