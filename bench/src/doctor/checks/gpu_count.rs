//! The GPUs NVML lists against what the host should have (`--expect-gpus N`,
//! or `$ERDMA_EXPECT_GPUS`), and GPUs NVML cannot open (fallen off the bus).

use crate::doctor::gpuhealth::{self, Finding};
use crate::doctor::model::{Check, Ctx, Outcome};

/// The check.
pub const CHECK: Check = Check {
    id: "gpu.count",
    group: Group::Gpu,
    about: "NVML lists the GPUs expected (--expect-gpus), none lost",
    run,
};

use crate::doctor::model::Group;

/// The environment variable that stands for `--expect-gpus`.
pub const EXPECT_ENV: &str = "ERDMA_EXPECT_GPUS";

/// `--expect-gpus`, else `$ERDMA_EXPECT_GPUS`; `Err` when that is not a number.
pub fn expected(cx: &Ctx) -> Result<Option<u32>, String> {
    if let Some(n) = cx.expect_gpus {
        return Ok(Some(n));
    }
    match cx.env(EXPECT_ENV) {
        None => Ok(None),
        Some(v) => v
            .trim()
            .parse()
            .map(Some)
            .map_err(|_| format!("{EXPECT_ENV}={v} is not a GPU count")),
    }
}

const MISSING_FIX: &str = "drain the host and reboot it; open a ticket if a GPU is still missing \
                           (lspci -d 10de: shows whether it is on the bus)";

fn run(cx: &Ctx) -> Outcome {
    let expect = match expected(cx) {
        Ok(e) => e,
        Err(e) => {
            return Outcome::fail(
                e,
                format!("set {EXPECT_ENV} to the number of GPUs the host should have, or unset it"),
            );
        }
    };
    let v = match &cx.host.gpu_health().nvml {
        Err(e) => {
            return match expect {
                Some(n) if n > 0 => Outcome::fail(
                    format!(
                        "expected {}, but NVML is not available: {e}",
                        gpuhealth::count_gpus(n as usize)
                    ),
                    "install or load the NVIDIA driver (nvidia-smi must work); if it is installed, drain the host and reboot it",
                ),
                _ => Outcome::skip(format!("GPU health not checked: {e}")),
            };
        }
        Ok(v) => v,
    };
    let details = serde_json::json!({
        "count": v.count,
        "expected": expect,
        "driver_version": v.driver_version.as_ref().ok(),
        "gpus": v.gpus.iter().map(|g| serde_json::json!({
            "index": g.index, "name": g.name.as_ref().ok(), "pci": g.pci.as_ref().ok(),
            "uuid": g.uuid.as_ref().ok(), "lost": g.lost,
        })).collect::<Vec<_>>(),
    });
    let mut findings: Vec<Finding> = v
        .gpus
        .iter()
        .filter_map(|g| {
            let why = g.lost.as_ref()?;
            Some(Finding::fail(
                g,
                why,
                "drain the host and reboot it; open a ticket if the GPU is still lost (see gpu.xid: Xid 79)",
            ))
        })
        .collect();
    let n = v.count;
    match expect {
        Some(e) if n < e => findings.push(Finding {
            status: crate::doctor::Status::Fail,
            found: format!("{n} of {} expected", gpuhealth::count_gpus(e as usize)),
            fix: MISSING_FIX.into(),
        }),
        Some(e) if n > e => findings.push(Finding {
            status: crate::doctor::Status::Warn,
            found: format!(
                "{}, more than the {e} expected",
                gpuhealth::count_gpus(n as usize)
            ),
            fix: format!("check --expect-gpus (or {EXPECT_ENV}) for this host"),
        }),
        _ => {}
    }
    if n == 0 && expect.is_none() {
        return Outcome::skip("no NVIDIA GPU: NVML lists none").details(details);
    }
    let mut names: Vec<(String, usize)> = Vec::new();
    for g in gpuhealth::readable(v) {
        let name = g.name.clone().unwrap_or_else(|_| "unknown".into());
        match names.iter_mut().find(|(x, _)| *x == name) {
            Some((_, k)) => *k += 1,
            None => names.push((name, 1)),
        }
    }
    let kinds: Vec<String> = names.iter().map(|(x, k)| format!("{k}x {x}")).collect();
    let ok = format!(
        "{}{}{}; driver {}",
        gpuhealth::count_gpus(n as usize),
        if kinds.is_empty() {
            String::new()
        } else {
            format!(": {}", kinds.join(", "))
        },
        match expect {
            Some(e) => format!(" (expected {e})"),
            None => " (no --expect-gpus to compare with)".into(),
        },
        v.driver_version.as_deref().unwrap_or("unknown"),
    );
    gpuhealth::fold(ok, findings, details)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::doctor::model::Status;
    use crate::doctor::testing::{FakeHost, NO_NVML, healthy_gpus};

    #[test]
    fn counted_against_the_expectation() {
        let mut h = FakeHost::bare();
        h.gpu_health = healthy_gpus(8);
        let o = h.run(CHECK);
        assert_eq!(o.status, Status::Ok);
        assert_eq!(
            o.found,
            "8 GPUs: 8x NVIDIA H100 80GB HBM3 (no --expect-gpus to compare with); driver 580.65.06"
        );
        assert_eq!(o.details["count"], 8);
        h.expect_gpus = Some(8);
        assert!(h.run(CHECK).found.contains("(expected 8)"));
        h.expect_gpus = Some(9);
        let o = h.run(CHECK);
        assert_eq!(o.status, Status::Fail);
        assert_eq!(o.found, "8 of 9 GPUs expected");
        assert!(o.fix.unwrap().starts_with("drain the host and reboot it"));
        h.expect_gpus = Some(4);
        let o = h.run(CHECK);
        assert_eq!(o.status, Status::Warn);
        assert_eq!(o.found, "8 GPUs, more than the 4 expected");
    }

    #[test]
    fn the_environment_stands_for_the_flag() {
        let mut h = FakeHost::bare();
        h.gpu_health = healthy_gpus(7);
        h.set_env(EXPECT_ENV, "8");
        assert_eq!(h.run(CHECK).found, "7 of 8 GPUs expected");
        h.expect_gpus = Some(7); // the flag wins
        assert_eq!(h.run(CHECK).status, Status::Ok);
        h.expect_gpus = None;
        h.set_env(EXPECT_ENV, "eight");
        let o = h.run(CHECK);
        assert_eq!(o.status, Status::Fail);
        assert_eq!(o.found, "ERDMA_EXPECT_GPUS=eight is not a GPU count");
    }

    #[test]
    fn a_lost_gpu_fails() {
        let mut h = FakeHost::bare();
        h.gpu_health = healthy_gpus(2);
        if let Ok(v) = &mut h.gpu_health.nvml {
            v.gpus[1] = crate::doctor::gpuhealth::GpuState {
                lost: Some("NVML: GPU is lost (fell off the bus)".into()),
                ..v.gpus[1].clone()
            };
        }
        let o = h.run(CHECK);
        assert_eq!(o.status, Status::Fail);
        assert_eq!(
            o.found,
            "GPU 1 (00000000:19:00.0): NVML: GPU is lost (fell off the bus)"
        );
        assert!(o.fix.unwrap().contains("ticket"));
    }

    #[test]
    fn without_nvml_skipped_unless_gpus_are_expected() {
        let mut h = FakeHost::bare();
        let o = h.run(CHECK);
        assert_eq!(o.status, Status::Skip);
        assert_eq!(o.found, format!("GPU health not checked: {NO_NVML}"));
        h.expect_gpus = Some(8);
        let o = h.run(CHECK);
        assert_eq!(o.status, Status::Fail);
        assert!(
            o.found
                .starts_with("expected 8 GPUs, but NVML is not available"),
            "{}",
            o.found
        );
        h.expect_gpus = Some(0);
        assert_eq!(h.run(CHECK).status, Status::Skip);
    }
}
