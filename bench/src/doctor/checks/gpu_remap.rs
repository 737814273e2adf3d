//! Memory repair: remapped rows (A100, H100 and newer: a remap waiting for
//! a reset, or one that failed), and retired pages on older GPUs.

use crate::doctor::gpuhealth::{self, Finding};
use crate::doctor::model::{Check, Ctx, Group, Outcome};

/// The check.
pub const CHECK: Check = Check {
    id: "gpu.remap",
    group: Group::Gpu,
    about: "no pending or failed row remap (or page retirement)",
    run,
};

/// Retired pages from which a GPU is to be replaced (our policy).
pub const RETIRED_PAGES_LIMIT: u32 = 60;

fn run(cx: &Ctx) -> Outcome {
    let gpus = match gpuhealth::readable_gpus(cx) {
        Ok(g) => g,
        Err(o) => return o,
    };
    if gpus.iter().all(|g| g.remap.is_err() && g.retired.is_err()) {
        let why = gpus
            .first()
            .and_then(|g| g.remap.as_ref().err())
            .cloned()
            .unwrap_or_default();
        return Outcome::skip(format!(
            "neither row remapping nor page retirement reported by these GPUs ({why})"
        ));
    }
    let mut findings = Vec::new();
    let (mut rows, mut pages) = (0u64, 0u64);
    for g in &gpus {
        let i = g.index;
        let reset = format!(
            "drain the host and reset the GPU (nvidia-smi -r -i {i}) or reboot it, to apply the repair"
        );
        if let Ok(r) = &g.remap {
            rows += u64::from(r.correctable) + u64::from(r.uncorrectable);
            if r.failure {
                findings.push(Finding::fail(
                    g,
                    "row remapping failed (no spare row left in a bank)",
                    "drain the host and open a ticket to replace the GPU",
                ));
            } else if r.pending {
                findings.push(Finding::fail(
                    g,
                    format!(
                        "a row remap waits for a GPU reset ({} rows remapped for uncorrectable, {} for correctable errors)",
                        r.uncorrectable, r.correctable
                    ),
                    reset.clone(),
                ));
            }
        }
        if let Ok(p) = &g.retired {
            let n = p.single_bit + p.double_bit;
            pages += u64::from(n);
            if n >= RETIRED_PAGES_LIMIT {
                findings.push(Finding::fail(
                    g,
                    format!("{n} retired pages ({RETIRED_PAGES_LIMIT} or more)"),
                    "drain the host and open a ticket to replace the GPU",
                ));
            } else if p.pending {
                findings.push(Finding::fail(
                    g,
                    "a page retirement waits for a GPU reset",
                    reset,
                ));
            }
        }
    }
    let details = gpuhealth::per_gpu_details(&gpus, |g| {
        serde_json::json!({
            "remapped_rows": g.remap.as_ref().ok(), "remapped_rows_error": g.remap.as_ref().err(),
            "retired_pages": g.retired.as_ref().ok(), "retired_pages_error": g.retired.as_ref().err(),
        })
    });
    let ok = format!(
        "{}: no pending or failed repair ({rows} rows remapped, {pages} pages retired)",
        gpuhealth::count_gpus(gpus.len())
    );
    gpuhealth::fold(ok, findings, details)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::doctor::gpuhealth::{GpuState, NOT_SUPPORTED, RetiredPages, RowRemap};
    use crate::doctor::model::Status;
    use crate::doctor::testing::{FakeHost, gpu_host, healthy_gpus};

    fn host(edit: impl Fn(&mut GpuState)) -> FakeHost {
        gpu_host(2, |g| edit(&mut g[1]))
    }

    fn remap(unc: u32, pending: bool, failure: bool) -> Result<RowRemap, String> {
        Ok(RowRemap {
            correctable: 0,
            uncorrectable: unc,
            pending,
            failure,
            histogram: Some([2559, 1, 0, 0, 0]),
        })
    }

    #[test]
    fn remapped_rows_without_pending_are_ok() {
        let o = host(|g| g.remap = remap(2, false, false)).run(CHECK);
        assert_eq!(o.status, Status::Ok);
        assert_eq!(
            o.found,
            "2 GPUs: no pending or failed repair (2 rows remapped, 0 pages retired)"
        );
        assert_eq!(o.details["gpus"][1]["remapped_rows"]["uncorrectable"], 2);
        assert_eq!(o.details["gpus"][1]["remapped_rows"]["histogram"][0], 2559);
    }

    #[test]
    fn a_pending_remap_asks_for_a_reset() {
        let o = host(|g| g.remap = remap(1, true, false)).run(CHECK);
        assert_eq!(o.status, Status::Fail);
        assert_eq!(
            o.found,
            "GPU 1 (00000000:19:00.0): a row remap waits for a GPU reset (1 rows remapped for uncorrectable, 0 for correctable errors)"
        );
        assert!(
            o.fix
                .unwrap()
                .starts_with("drain the host and reset the GPU (nvidia-smi -r -i 1)")
        );
    }

    #[test]
    fn a_failed_remap_asks_for_a_ticket() {
        let o = host(|g| g.remap = remap(512, true, true)).run(CHECK);
        assert_eq!(o.status, Status::Fail);
        assert!(
            o.found
                .ends_with("row remapping failed (no spare row left in a bank)")
        );
        assert_eq!(
            o.fix.unwrap(),
            "drain the host and open a ticket to replace the GPU"
        );
    }

    #[test]
    fn retired_pages_on_older_gpus() {
        let older = |sbe, pending| {
            move |g: &mut GpuState| {
                g.remap = Err(NOT_SUPPORTED.into());
                g.retired = Ok(RetiredPages {
                    single_bit: sbe,
                    double_bit: 1,
                    pending,
                });
            }
        };
        assert_eq!(host(older(3, false)).run(CHECK).status, Status::Ok);
        let o = host(older(3, true)).run(CHECK);
        assert!(
            o.found.ends_with("a page retirement waits for a GPU reset"),
            "{}",
            o.found
        );
        let o = host(older(59, false)).run(CHECK);
        assert_eq!(o.status, Status::Fail);
        assert!(
            o.found.ends_with("60 retired pages (60 or more)"),
            "{}",
            o.found
        );
        let mut h = FakeHost::bare();
        h.gpu_health = healthy_gpus(1);
        if let Ok(v) = &mut h.gpu_health.nvml {
            v.gpus[0].remap = Err(NOT_SUPPORTED.into());
        }
        let o = h.run(CHECK);
        assert_eq!(o.status, Status::Skip);
        assert_eq!(
            o.found,
            "neither row remapping nor page retirement reported by these GPUs (not supported)"
        );
    }
}
