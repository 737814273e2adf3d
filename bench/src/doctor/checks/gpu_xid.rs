//! XID errors since boot: the NVRM Xid lines of the kernel log (NVML keeps
//! no XID history), each with what it means and the action.

use crate::doctor::gpuhealth::{self, Finding, XidSeverity};
use crate::doctor::model::{Check, Ctx, Group, Outcome, Status};

/// The check.
pub const CHECK: Check = Check {
    id: "gpu.xid",
    group: Group::Gpu,
    about: "no XID error in the kernel log since boot",
    run,
};

fn run(cx: &Ctx) -> Outcome {
    let v = match gpuhealth::gpus(cx) {
        Ok(v) => v,
        Err(o) => return o,
    };
    let log = match &cx.host.gpu_health().kernel_log {
        Ok(l) => l,
        Err(e) => return Outcome::skip(format!("XIDs not checked: {e}")),
    };
    // (pci, code) -> (count, first text), in the order first seen.
    let mut seen: Vec<(String, u32, usize, String)> = Vec::new();
    for x in log.lines.iter().filter_map(|l| gpuhealth::parse_xid(l)) {
        match seen.iter_mut().find(|s| s.0 == x.pci && s.1 == x.code) {
            Some(s) => s.2 += 1,
            None => seen.push((x.pci, x.code, 1, x.text)),
        }
    }
    let gpu_of = |pci: &str| {
        let key = gpuhealth::pci_key(pci);
        v.gpus
            .iter()
            .find(|g| key.is_some() && g.pci.as_deref().ok().and_then(gpuhealth::pci_key) == key)
    };
    let mut findings = Vec::new();
    let mut xids = Vec::new();
    for (pci, code, n, text) in &seen {
        let (sev, what, action) = gpuhealth::xid_action(*code, text);
        let g = gpu_of(pci);
        xids.push(serde_json::json!({
            "pci": pci, "gpu": g.map(|g| g.index), "xid": code, "count": n,
            "meaning": what, "text": text,
        }));
        if sev == XidSeverity::Info {
            continue;
        }
        let who = match g {
            Some(g) => g.label(),
            None => format!("PCI {pci} (a GPU NVML does not list now)"),
        };
        let idx = g.map_or("N".to_owned(), |g| g.index.to_string());
        findings.push(Finding {
            status: if sev == XidSeverity::Hardware {
                Status::Fail
            } else {
                Status::Warn
            },
            found: format!("{who}: Xid {code} x{n} ({what}: {text})"),
            fix: action.replace("-i N", &format!("-i {idx}")),
        });
    }
    let since = match log.starts_after_boot_s {
        Some(s) => format!(
            "in {} (it starts {s:.0} s after boot: older lines are gone)",
            log.source
        ),
        None => format!("since boot ({})", log.source),
    };
    let ok = if seen.is_empty() {
        format!("no XID {since}")
    } else {
        format!("only informational XIDs {since}")
    };
    let details = serde_json::json!({
        "source": log.source, "starts_after_boot_s": log.starts_after_boot_s, "xids": xids,
    });
    gpuhealth::fold(ok, findings, details)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::doctor::gpuhealth::KernelLog;
    use crate::doctor::testing::{FakeHost, healthy_gpus};

    fn host(lines: &[&str]) -> FakeHost {
        let mut h = FakeHost::bare();
        h.gpu_health = healthy_gpus(8);
        h.gpu_health.kernel_log = Ok(KernelLog {
            source: "journalctl -k -b".into(),
            starts_after_boot_s: None,
            lines: lines.iter().map(|l| l.to_string()).collect(),
        });
        h
    }

    #[test]
    fn no_xid_is_ok() {
        let o = host(&[]).run(CHECK);
        assert_eq!(o.status, Status::Ok);
        assert_eq!(o.found, "no XID since boot (journalctl -k -b)");
        let o = host(&["[ 9.1] h kernel: NVRM: Xid (PCI:0000:18:00): 45, pid=7, Ch 00000010"])
            .run(CHECK);
        assert_eq!(o.status, Status::Ok, "45 only follows other errors");
        assert_eq!(o.details["xids"][0]["gpu"], 0);
    }

    #[test]
    fn a_gpu_off_the_bus_fails_with_its_action() {
        let line = "[ 5021.2] h kernel: NVRM: Xid (PCI:0000:1b:00): 79, pid='<unknown>', name=<unknown>, GPU has fallen off the bus.";
        let o = host(&[line, line]).run(CHECK);
        assert_eq!(o.status, Status::Fail);
        assert_eq!(
            o.found,
            "GPU 3 (00000000:1B:00.0): Xid 79 x2 (GPU has fallen off the bus: pid='<unknown>', \
             name=<unknown>, GPU has fallen off the bus.)"
        );
        assert!(o.fix.unwrap().starts_with("drain the host, reboot it"));
        assert_eq!(o.details["xids"][0]["count"], 2);
    }

    #[test]
    fn ecc_and_application_xids() {
        let o = host(&[
            "NVRM: Xid (PCI:0000:18:00): 13, pid=4242, name=python, Graphics SM Warp Exception",
            "NVRM: Xid (PCI:0000:19:00): 48, pid=4242, name=python, An uncorrectable double bit error",
            "NVRM: Xid (PCI:0000:99:00): 94, pid=1, Contained: SM (0x1)",
        ])
        .run(CHECK);
        assert_eq!(o.status, Status::Fail);
        // Failures first, then the warnings; each action once, with the GPU's index.
        assert!(
            o.found
                .starts_with("GPU 1 (00000000:19:00.0): Xid 48 x1 (double-bit ECC error"),
            "{}",
            o.found
        );
        assert!(
            o.found.contains("; GPU 0 (00000000:18:00.0): Xid 13 x1"),
            "{}",
            o.found
        );
        assert!(
            o.found
                .contains("PCI 0000:99:00 (a GPU NVML does not list now): Xid 94"),
            "{}",
            o.found
        );
        let fix = o.fix.unwrap();
        assert!(
            fix.starts_with("drain the host and reset the GPU (nvidia-smi -r -i 1)"),
            "{fix}"
        );
        assert!(
            fix.contains("(nvidia-smi -r -i N) when it is idle"),
            "{fix}"
        );
        let o = host(&["NVRM: Xid (PCI:0000:18:00): 13, Graphics Exception"]).run(CHECK);
        assert_eq!(o.status, Status::Warn);
    }

    #[test]
    fn unreadable_log_or_no_nvml_is_skipped_with_the_reason() {
        let mut h = host(&[]);
        h.gpu_health.kernel_log = Err("the kernel log could not be read (...)".into());
        let o = h.run(CHECK);
        assert_eq!(o.status, Status::Skip);
        assert_eq!(
            o.found,
            "XIDs not checked: the kernel log could not be read (...)"
        );
        let o = FakeHost::bare().run(CHECK);
        assert_eq!(o.status, Status::Skip);
        assert!(
            o.found
                .starts_with("GPU health not checked: libnvidia-ml.so.1 not found")
        );
        let mut h = host(&[]);
        h.gpu_health.kernel_log = Ok(KernelLog {
            source: "dmesg".into(),
            starts_after_boot_s: Some(86400.0),
            lines: vec![],
        });
        assert_eq!(
            h.run(CHECK).found,
            "no XID in dmesg (it starts 86400 s after boot: older lines are gone)"
        );
    }
}
