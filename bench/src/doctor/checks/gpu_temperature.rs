//! GPU temperature against its limits: the maximum operating temperature
//! (warn) and the slowdown threshold (fail).

use crate::doctor::gpuhealth::{self, Finding};
use crate::doctor::model::{Check, Ctx, Group, Outcome};

/// The check.
pub const CHECK: Check = Check {
    id: "gpu.temperature",
    group: Group::Gpu,
    about: "GPU temperature under its operating and slowdown limits",
    run,
};

/// Without a maximum operating temperature, warn this close to slowdown.
const MARGIN_C: u32 = 5;

fn run(cx: &Ctx) -> Outcome {
    let gpus = match gpuhealth::reporting(cx, "GPU temperature", |g| &g.temperature) {
        Ok(g) => g,
        Err(o) => return o,
    };
    let mut findings = Vec::new();
    let mut hottest: Option<(u32, u32)> = None;
    for g in &gpus {
        let Ok(t) = g.temperature else { continue };
        if hottest.is_none_or(|(h, _)| t > h) {
            hottest = Some((t, g.index));
        }
        let cool = format!(
            "check the cooling (fans, airflow, inlet temperature) of GPU {}; drain the host and open a ticket if it stays hot",
            g.index
        );
        match (
            g.temp_slowdown.as_ref().ok(),
            g.temp_max_operating.as_ref().ok(),
        ) {
            (Some(&s), _) if t >= s => findings.push(Finding::fail(
                g,
                format!("{t} °C, at or over its slowdown temperature {s} °C"),
                cool,
            )),
            (_, Some(&m)) if t >= m => findings.push(Finding::warn(
                g,
                format!("{t} °C, at or over its maximum operating temperature {m} °C"),
                cool,
            )),
            (Some(&s), None) if t + MARGIN_C >= s => findings.push(Finding::warn(
                g,
                format!("{t} °C, within {MARGIN_C} °C of its slowdown temperature {s} °C"),
                cool,
            )),
            _ => {}
        }
    }
    let details = gpuhealth::per_gpu_details(&gpus, |g| {
        serde_json::json!({
            "temperature_c": g.temperature.as_ref().ok(),
            "slowdown_c": g.temp_slowdown.as_ref().ok(),
            "shutdown_c": g.temp_shutdown.as_ref().ok(),
            "max_operating_c": g.temp_max_operating.as_ref().ok(),
        })
    });
    let ok = match hottest {
        Some((t, i)) => {
            let lim = gpus
                .iter()
                .find(|g| g.index == i)
                .and_then(|g| g.temp_slowdown.as_ref().ok())
                .map(|s| format!(" (slowdown at {s} °C)"))
                .unwrap_or_default();
            format!(
                "{}: hottest GPU {i} at {t} °C{lim}",
                gpuhealth::count_gpus(gpus.len())
            )
        }
        None => gpuhealth::count_gpus(gpus.len()),
    };
    gpuhealth::fold(ok, findings, details)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::doctor::gpuhealth::{GpuState, NOT_SUPPORTED};
    use crate::doctor::model::Status;
    use crate::doctor::testing::{FakeHost, gpu_host};

    fn host(edit: impl Fn(&mut GpuState)) -> FakeHost {
        gpu_host(2, |g| edit(&mut g[1]))
    }

    #[test]
    fn cool_gpus_are_ok() {
        let o = host(|g| g.temperature = Ok(41)).run(CHECK);
        assert_eq!(o.status, Status::Ok);
        assert_eq!(
            o.found,
            "2 GPUs: hottest GPU 1 at 41 °C (slowdown at 90 °C)"
        );
        assert_eq!(o.details["gpus"][1]["shutdown_c"], 92);
    }

    #[test]
    fn hot_gpus_warn_then_fail() {
        let o = host(|g| g.temperature = Ok(88)).run(CHECK);
        assert_eq!(o.status, Status::Warn);
        assert_eq!(
            o.found,
            "GPU 1 (00000000:19:00.0): 88 °C, at or over its maximum operating temperature 87 °C"
        );
        let o = host(|g| g.temperature = Ok(90)).run(CHECK);
        assert_eq!(o.status, Status::Fail);
        assert!(
            o.found
                .ends_with("90 °C, at or over its slowdown temperature 90 °C")
        );
        assert!(o.fix.unwrap().starts_with("check the cooling"));
        let o = host(|g| {
            g.temperature = Ok(86);
            g.temp_max_operating = Err(NOT_SUPPORTED.into());
        })
        .run(CHECK);
        assert_eq!(o.status, Status::Warn);
        assert!(
            o.found
                .ends_with("86 °C, within 5 °C of its slowdown temperature 90 °C")
        );
    }
}
