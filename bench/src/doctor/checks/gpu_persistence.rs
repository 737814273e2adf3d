//! Persistence mode: on, so the driver keeps the GPUs initialised between
//! jobs (off: every job pays the start-up, and settings are lost).

use crate::doctor::gpuhealth::{self, Finding};
use crate::doctor::model::{Check, Ctx, Group, Outcome};

/// The check.
pub const CHECK: Check = Check {
    id: "gpu.persistence",
    group: Group::Gpu,
    about: "persistence mode on",
    run,
};

fn run(cx: &Ctx) -> Outcome {
    let gpus = match gpuhealth::reporting(cx, "persistence mode", |g| &g.persistence) {
        Ok(g) => g,
        Err(o) => return o,
    };
    let findings: Vec<Finding> = gpus
        .iter()
        .filter(|g| g.persistence == Ok(false))
        .map(|g| {
            Finding::warn(
                g,
                "persistence mode off",
                "run the persistence daemon (systemctl enable --now nvidia-persistenced), or nvidia-smi -pm 1",
            )
        })
        .collect();
    let details = gpuhealth::per_gpu_details(&gpus, |g| {
        serde_json::json!({
            "persistence": g.persistence.as_ref().ok(),
        })
    });
    let ok = format!("persistence mode on, {}", gpuhealth::count_gpus(gpus.len()));
    gpuhealth::fold(ok, findings, details)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::doctor::model::Status;
    use crate::doctor::testing::{FakeHost, healthy_gpus};

    #[test]
    fn off_warns() {
        let mut h = FakeHost::bare();
        h.gpu_health = healthy_gpus(3);
        assert_eq!(h.run(CHECK).found, "persistence mode on, 3 GPUs");
        if let Ok(v) = &mut h.gpu_health.nvml {
            v.gpus[0].persistence = Ok(false);
            v.gpus[2].persistence = Ok(false);
        }
        let o = h.run(CHECK);
        assert_eq!(o.status, Status::Warn);
        assert_eq!(
            o.found,
            "GPU 0 (00000000:18:00.0): persistence mode off; GPU 2 (00000000:1A:00.0): persistence mode off"
        );
        assert!(o.fix.unwrap().contains("nvidia-persistenced"));
    }
}
