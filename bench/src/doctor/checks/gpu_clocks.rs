//! Clocks event (throttle) reasons: hardware slowdowns (thermal, power
//! brake) and software thermal slowdown.

use crate::doctor::gpuhealth::{self, Finding, reasons};
use crate::doctor::model::{Check, Ctx, Group, Outcome};

/// The check.
pub const CHECK: Check = Check {
    id: "gpu.clocks",
    group: Group::Gpu,
    about: "GPU clocks not slowed by hardware or thermal events",
    run,
};

fn run(cx: &Ctx) -> Outcome {
    let gpus = match gpuhealth::reporting(cx, "clocks event reasons", |g| &g.clocks_event_reasons) {
        Ok(g) => g,
        Err(o) => return o,
    };
    let hw = reasons::HW_SLOWDOWN | reasons::HW_THERMAL | reasons::HW_POWER_BRAKE;
    let mut findings = Vec::new();
    for g in &gpus {
        let Ok(mask) = g.clocks_event_reasons else {
            continue;
        };
        let i = g.index;
        if mask & hw != 0 {
            findings.push(Finding::fail(
                g,
                format!("clocks slowed by {}", reasons::names(mask & hw).join(", ")),
                format!(
                    "check cooling and power (nvidia-smi -q -d PERFORMANCE,TEMPERATURE,POWER -i {i}); \
                     drain the host and open a ticket if it stays"
                ),
            ));
        } else if mask & reasons::SW_THERMAL != 0 {
            findings.push(Finding::warn(
                g,
                "clocks slowed by SW Thermal Slowdown (over its maximum operating temperature)",
                format!("check the cooling (fans, airflow, inlet temperature) of GPU {i}"),
            ));
        }
    }
    let active: Vec<String> = gpus
        .iter()
        .filter_map(|g| {
            let m = *g.clocks_event_reasons.as_ref().ok()?;
            let n = reasons::names(m & !reasons::GPU_IDLE);
            (!n.is_empty()).then(|| format!("GPU {}: {}", g.index, n.join(", ")))
        })
        .collect();
    let details = gpuhealth::per_gpu_details(&gpus, |g| {
        serde_json::json!({
            "clocks_event_reasons": g.clocks_event_reasons.as_ref().ok(),
            "active": g.clocks_event_reasons.as_ref().ok().map(|m| reasons::names(*m)),
        })
    });
    let ok = format!(
        "{}: no hardware or thermal slowdown{}",
        gpuhealth::count_gpus(gpus.len()),
        if active.is_empty() {
            String::new()
        } else {
            format!(" (active: {})", active.join("; "))
        }
    );
    gpuhealth::fold(ok, findings, details)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::doctor::gpuhealth::NOT_SUPPORTED;
    use crate::doctor::model::Status;
    use crate::doctor::testing::{FakeHost, healthy_gpus};

    fn host(masks: &[Result<u64, String>]) -> FakeHost {
        let mut h = FakeHost::bare();
        h.gpu_health = healthy_gpus(masks.len() as u32);
        if let Ok(v) = &mut h.gpu_health.nvml {
            for (g, m) in v.gpus.iter_mut().zip(masks) {
                g.clocks_event_reasons = m.clone();
            }
        }
        h
    }

    #[test]
    fn idle_and_power_cap_are_ok() {
        let o = host(&[Ok(reasons::GPU_IDLE), Ok(reasons::SW_POWER_CAP)]).run(CHECK);
        assert_eq!(o.status, Status::Ok);
        assert_eq!(
            o.found,
            "2 GPUs: no hardware or thermal slowdown (active: GPU 1: SW Power Cap)"
        );
        assert_eq!(o.details["gpus"][0]["active"][0], "Idle");
    }

    #[test]
    fn hardware_slowdown_fails_and_thermal_warns() {
        let o = host(&[
            Ok(reasons::GPU_IDLE),
            Ok(reasons::HW_SLOWDOWN | reasons::HW_THERMAL),
        ])
        .run(CHECK);
        assert_eq!(o.status, Status::Fail);
        assert_eq!(
            o.found,
            "GPU 1 (00000000:19:00.0): clocks slowed by HW Slowdown, HW Thermal Slowdown"
        );
        assert!(
            o.fix
                .unwrap()
                .contains("-i 1); drain the host and open a ticket")
        );
        let o = host(&[Ok(reasons::SW_THERMAL)]).run(CHECK);
        assert_eq!(o.status, Status::Warn);
        let o = host(&[Ok(reasons::HW_POWER_BRAKE)]).run(CHECK);
        assert!(o.found.ends_with("HW Power Brake Slowdown"));
    }

    #[test]
    fn unreported_is_skipped() {
        let o = host(&[Err(NOT_SUPPORTED.into())]).run(CHECK);
        assert_eq!(o.status, Status::Skip);
        assert_eq!(o.found, "clocks event reasons not reported: not supported");
    }
}
