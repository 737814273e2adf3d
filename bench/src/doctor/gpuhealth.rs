//! GPU health as plain data: what NVML and the kernel log said about each
//! GPU ([`GpuHealth`], filled by [`super::nvml`] on a real host and built by
//! hand in tests), and the pure parts of judging it (XID lines and what each
//! XID asks for). The `gpu.*` health checks read only this.

use super::model::{Ctx, Outcome, Status};

/// One value read from NVML, or why not (`not supported` when the GPU or
/// driver does not report it).
pub type Reading<T> = Result<T, String>;

/// What `not supported` readings say (NVML's `NVML_ERROR_NOT_SUPPORTED`).
pub const NOT_SUPPORTED: &str = "not supported";

/// Everything the GPU health checks look at.
#[derive(Debug, Clone, PartialEq)]
pub struct GpuHealth {
    /// NVML's view of the GPUs, or why NVML could not be used (one line).
    pub nvml: Result<NvmlView, String>,
    /// The NVRM Xid lines of the kernel log since boot, or why it could not
    /// be read.
    pub kernel_log: Result<KernelLog, String>,
}

impl GpuHealth {
    /// No NVML (a host without the NVIDIA driver) and no kernel log read.
    pub fn absent(why: &str) -> GpuHealth {
        GpuHealth {
            nvml: Err(why.to_owned()),
            kernel_log: Err("not read: no NVIDIA driver".to_owned()),
        }
    }
}

/// The driver and the GPUs as NVML lists them (every GPU of the host:
/// NVML ignores `CUDA_VISIBLE_DEVICES`).
#[derive(Debug, Clone, PartialEq)]
pub struct NvmlView {
    /// The driver version (`580.65.06`).
    pub driver_version: Reading<String>,
    /// `nvmlDeviceGetCount`.
    pub count: u32,
    /// One per index `0..count`.
    pub gpus: Vec<GpuState>,
}

/// ECC mode: current and after the next reboot.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub struct EccMode {
    /// ECC on now.
    pub current: bool,
    /// ECC on after the next reboot or reset.
    pub pending: bool,
}

/// ECC error counts of one counter type (volatile: since the driver
/// loaded or the GPU was reset; aggregate: the GPU's lifetime).
#[derive(Debug, Clone, PartialEq, Default, serde::Serialize)]
pub struct EccCounts {
    /// Corrected errors, all memories (`nvmlDeviceGetTotalEccErrors`).
    pub corrected: Option<u64>,
    /// Uncorrected errors, all memories.
    pub uncorrected: Option<u64>,
    /// Corrected in device memory (DRAM, HBM).
    pub dram_corrected: Option<u64>,
    /// Uncorrected in device memory.
    pub dram_uncorrected: Option<u64>,
    /// Corrected in on-chip SRAM (Turing and newer).
    pub sram_corrected: Option<u64>,
    /// Uncorrected in on-chip SRAM.
    pub sram_uncorrected: Option<u64>,
}

/// The row remapper (A100, H100 and newer: `nvmlDeviceGetRemappedRows`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub struct RowRemap {
    /// Rows remapped for correctable errors.
    pub correctable: u32,
    /// Rows remapped for uncorrectable errors.
    pub uncorrectable: u32,
    /// A remap waits for a GPU reset.
    pub pending: bool,
    /// A remap failed (no spare row left).
    pub failure: bool,
    /// Banks by spare rows left: max, high, partial, low, none
    /// (`nvmlDeviceGetRowRemapperHistogram`), when read.
    pub histogram: Option<[u32; 5]>,
}

/// Dynamic page retirement (GPUs before A100).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub struct RetiredPages {
    /// Retired for multiple single-bit errors.
    pub single_bit: u32,
    /// Retired for a double-bit error.
    pub double_bit: u32,
    /// A retirement waits for a reboot or reset.
    pub pending: bool,
}

/// One NVLink of a GPU.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct NvLink {
    /// Link number.
    pub link: u32,
    /// Up.
    pub active: bool,
    /// Error counters: replay, recovery, CRC flit, CRC data
    /// (`nvmlDeviceGetNvLinkErrorCounter`), when read.
    pub errors: Option<NvLinkErrors>,
}

/// An NVLink's error counters.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize)]
pub struct NvLinkErrors {
    /// Data link replays.
    pub replay: u64,
    /// Data link recoveries (the link retrained).
    pub recovery: u64,
    /// Flits with CRC errors.
    pub crc_flit: u64,
    /// Data with CRC errors.
    pub crc_data: u64,
}

impl NvLinkErrors {
    fn total(&self) -> u64 {
        self.replay + self.recovery + self.crc_flit + self.crc_data
    }
}

/// The clocks event (throttle) reason bits of `nvmlDeviceGetCurrentClocksEventReasons`.
pub mod reasons {
    /// Nothing runs on the GPU.
    pub const GPU_IDLE: u64 = 0x1;
    /// Held by the applications clocks setting.
    pub const APPLICATIONS_CLOCKS: u64 = 0x2;
    /// The software power cap (the power limit): normal under full load.
    pub const SW_POWER_CAP: u64 = 0x4;
    /// Hardware slowdown (temperature, power brake, or the power supply).
    pub const HW_SLOWDOWN: u64 = 0x8;
    /// Sync boost (GPUs held to the slowest of a group).
    pub const SYNC_BOOST: u64 = 0x10;
    /// Software thermal slowdown (over the maximum operating temperature).
    pub const SW_THERMAL: u64 = 0x20;
    /// Hardware thermal slowdown (too hot).
    pub const HW_THERMAL: u64 = 0x40;
    /// Hardware power brake (an external signal, e.g. the power supply).
    pub const HW_POWER_BRAKE: u64 = 0x80;
    /// Display clock setting.
    pub const DISPLAY_CLOCK: u64 = 0x100;

    /// Each bit with the name `nvidia-smi -q` prints for it.
    pub const NAMES: &[(u64, &str)] = &[
        (GPU_IDLE, "Idle"),
        (APPLICATIONS_CLOCKS, "Applications Clocks Setting"),
        (SW_POWER_CAP, "SW Power Cap"),
        (HW_SLOWDOWN, "HW Slowdown"),
        (SYNC_BOOST, "Sync Boost"),
        (SW_THERMAL, "SW Thermal Slowdown"),
        (HW_THERMAL, "HW Thermal Slowdown"),
        (HW_POWER_BRAKE, "HW Power Brake Slowdown"),
        (DISPLAY_CLOCK, "Display Clock Setting"),
    ];

    /// The names of the bits set in `mask`.
    pub fn names(mask: u64) -> Vec<&'static str> {
        NAMES
            .iter()
            .filter(|(b, _)| mask & b != 0)
            .map(|(_, n)| *n)
            .collect()
    }
}

/// One GPU as NVML reports it.
#[derive(Debug, Clone, PartialEq)]
pub struct GpuState {
    /// NVML index (as nvidia-smi numbers GPUs; not CUDA's order).
    pub index: u32,
    /// Why NVML could not open or read this GPU at all (`GPU is lost`).
    pub lost: Option<String>,
    /// Name (`NVIDIA H100 80GB HBM3`).
    pub name: Reading<String>,
    /// PCI bus id as NVML writes it (`00000000:18:00.0`).
    pub pci: Reading<String>,
    /// UUID (`GPU-...`).
    pub uuid: Reading<String>,
    /// Persistence mode.
    pub persistence: Reading<bool>,
    /// ECC mode.
    pub ecc_mode: Reading<EccMode>,
    /// ECC errors since the driver loaded or the GPU was reset.
    pub ecc_volatile: EccCounts,
    /// ECC errors in the GPU's lifetime.
    pub ecc_aggregate: EccCounts,
    /// The row remapper.
    pub remap: Reading<RowRemap>,
    /// Page retirement.
    pub retired: Reading<RetiredPages>,
    /// The NVLinks present (links NVML reports no state for are left out).
    pub nvlinks: Vec<NvLink>,
    /// Clocks event reasons ([`reasons`]).
    pub clocks_event_reasons: Reading<u64>,
    /// GPU temperature, °C.
    pub temperature: Reading<u32>,
    /// Slowdown threshold, °C.
    pub temp_slowdown: Reading<u32>,
    /// Shutdown threshold, °C.
    pub temp_shutdown: Reading<u32>,
    /// Maximum operating temperature, °C.
    pub temp_max_operating: Reading<u32>,
    /// Power draw, mW.
    pub power_mw: Reading<u32>,
    /// Enforced power limit, mW.
    pub power_limit_mw: Reading<u32>,
    /// Default power limit, mW.
    pub power_default_mw: Reading<u32>,
}

impl GpuState {
    /// A healthy H100 SXM at index `i` (tests and the fake host start from it).
    pub fn healthy(i: u32) -> GpuState {
        GpuState {
            index: i,
            lost: None,
            name: Ok("NVIDIA H100 80GB HBM3".into()),
            pci: Ok(format!("00000000:{:02X}:00.0", 0x18 + i)),
            uuid: Ok(format!("GPU-00000000-0000-0000-0000-00000000000{i}")),
            persistence: Ok(true),
            ecc_mode: Ok(EccMode {
                current: true,
                pending: true,
            }),
            ecc_volatile: EccCounts::zero(),
            ecc_aggregate: EccCounts::zero(),
            remap: Ok(RowRemap {
                correctable: 0,
                uncorrectable: 0,
                pending: false,
                failure: false,
                histogram: Some([2560, 0, 0, 0, 0]),
            }),
            retired: Err(NOT_SUPPORTED.into()),
            nvlinks: (0..18)
                .map(|link| NvLink {
                    link,
                    active: true,
                    errors: Some(NvLinkErrors::default()),
                })
                .collect(),
            clocks_event_reasons: Ok(reasons::GPU_IDLE),
            temperature: Ok(33),
            temp_slowdown: Ok(90),
            temp_shutdown: Ok(92),
            temp_max_operating: Ok(87),
            power_mw: Ok(72_000),
            power_limit_mw: Ok(700_000),
            power_default_mw: Ok(700_000),
        }
    }

    /// `GPU 3` or `GPU 3 (00000000:1B:00.0)`.
    pub fn label(&self) -> String {
        match &self.pci {
            Ok(p) => format!("GPU {} ({p})", self.index),
            Err(_) => format!("GPU {}", self.index),
        }
    }
}

impl EccCounts {
    /// Every counter read, all zero.
    pub fn zero() -> EccCounts {
        EccCounts {
            corrected: Some(0),
            uncorrected: Some(0),
            dram_corrected: Some(0),
            dram_uncorrected: Some(0),
            sram_corrected: Some(0),
            sram_uncorrected: Some(0),
        }
    }
}

/// The kernel log's NVRM Xid lines since boot.
#[derive(Debug, Clone, PartialEq)]
pub struct KernelLog {
    /// Where they were read (`journalctl -k -b`, `dmesg`).
    pub source: String,
    /// When the log starts later than boot (a ring buffer that wrapped),
    /// seconds after boot of its first line.
    pub starts_after_boot_s: Option<f64>,
    /// The lines with `NVRM: Xid`.
    pub lines: Vec<String>,
}

/// One XID as the kernel logged it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Xid {
    /// The GPU's PCI address as NVRM writes it (`0000:18:00`).
    pub pci: String,
    /// The XID.
    pub code: u32,
    /// The rest of the line after the code.
    pub text: String,
}

/// Parses `... NVRM: Xid (PCI:0000:18:00): 79, pid=..., GPU has fallen off the bus.`
/// (the `PCI:` prefix is absent on some drivers); `None` for other lines.
pub fn parse_xid(line: &str) -> Option<Xid> {
    let rest = &line[line.find("NVRM: Xid")? + "NVRM: Xid".len()..];
    let rest = rest.trim_start().strip_prefix('(')?;
    let (pci, rest) = rest.split_once(')')?;
    let pci = pci.trim().trim_start_matches("PCI:").to_owned();
    let rest = rest.trim_start().strip_prefix(':')?.trim_start();
    let digits: String = rest.chars().take_while(char::is_ascii_digit).collect();
    let code = digits.parse().ok()?;
    let text = rest[digits.len()..]
        .trim_start_matches([',', ' '])
        .trim()
        .to_owned();
    Some(Xid { pci, code, text })
}

/// `(domain, bus, device)` of a PCI address, from NVML's
/// `00000000:18:00.0` or NVRM's `0000:18:00`.
pub fn pci_key(addr: &str) -> Option<(u32, u32, u32)> {
    let mut it = addr.split(':');
    let (d, b, rest) = (it.next()?, it.next()?, it.next()?);
    let dev = rest.split('.').next()?;
    Some((
        u32::from_str_radix(d, 16).ok()?,
        u32::from_str_radix(b, 16).ok()?,
        u32::from_str_radix(dev, 16).ok()?,
    ))
}

/// How bad an XID is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum XidSeverity {
    /// Informational (follows another error).
    Info,
    /// Usually the application; the GPU recovers.
    App,
    /// The GPU needs a reset, a reboot or a ticket.
    Hardware,
}

/// What an XID means and what to do (NVIDIA's XID catalog).
pub fn xid_action(code: u32, text: &str) -> (XidSeverity, &'static str, &'static str) {
    use XidSeverity::*;
    match code {
        13 => (
            App,
            "graphics engine exception",
            "usually the application (an illegal access); if it recurs with other applications, run dcgmi diag -r 3 and ticket",
        ),
        31 => (
            App,
            "GPU memory page fault",
            "usually the application (an illegal address); if it recurs with other applications, run dcgmi diag -r 3 and ticket",
        ),
        43 => (
            App,
            "GPU stopped processing",
            "the application's kernel was stopped; nothing to do unless it recurs",
        ),
        45 => (
            Info,
            "preemptive cleanup after an earlier error",
            "see the XID before it",
        ),
        48 => (
            Hardware,
            "double-bit ECC error",
            "drain the host and reset the GPU (nvidia-smi -r -i N) to remap the row; ticket if it recurs",
        ),
        61 | 62 => (
            Hardware,
            "internal micro-controller breakpoint or halt",
            "drain the host and reset the GPU (nvidia-smi -r -i N) or reboot; ticket if it recurs",
        ),
        63 => (
            Hardware,
            "ECC page retirement or row remapping recorded",
            "drain the host and reset the GPU (nvidia-smi -r -i N) to apply the remap (see gpu.remap)",
        ),
        64 => (
            Hardware,
            "ECC page retirement or row remapping failed",
            "drain the host and open a ticket to replace the GPU",
        ),
        74 => (
            Hardware,
            "NVLink error",
            "drain the host and reset the GPU (nvidia-smi -r -i N); ticket if it recurs (NVLink cable, board or NVSwitch)",
        ),
        79 => (
            Hardware,
            "GPU has fallen off the bus",
            "drain the host, reboot it, and open a ticket if it recurs (PCIe, power or the GPU)",
        ),
        92 => (
            Hardware,
            "high single-bit ECC error rate",
            "drain the host and reset the GPU; ticket if it recurs",
        ),
        94 => (
            App,
            "contained ECC error (the application using the memory was stopped)",
            "reset the GPU (nvidia-smi -r -i N) when it is idle, to remap the row",
        ),
        95 => (
            Hardware,
            "uncontained ECC error",
            "drain the host and reset the GPU (nvidia-smi -r -i N); ticket if it recurs",
        ),
        119 | 120 => (
            Hardware,
            "GSP firmware error or timeout",
            "drain the host and reset the GPU (nvidia-smi -r -i N) or reboot; ticket if it recurs",
        ),
        140 => (
            Hardware,
            "unrecovered ECC error",
            "drain the host and reset the GPU (nvidia-smi -r -i N); ticket if it recurs",
        ),
        154 if text.contains("Reboot") => (
            Hardware,
            "recovery action: node reboot required",
            "drain the host and reboot it",
        ),
        154 if text.contains("Reset") => (
            Hardware,
            "recovery action: GPU reset required",
            "drain the host and reset the GPU (nvidia-smi -r -i N)",
        ),
        154 => (
            Hardware,
            "GPU recovery action changed",
            "drain the host and follow the recovery action in the XID's text",
        ),
        _ => (
            App,
            "see NVIDIA's XID catalog",
            "look the XID up in NVIDIA's XID catalog (docs.nvidia.com/deploy/xid-errors); ticket if it recurs",
        ),
    }
}

/// What the GPU health checks share: NVML's view, or the outcome to return
/// when there is none (skipped with the reason), or no GPU.
pub fn gpus<'a>(cx: &'a Ctx) -> Result<&'a NvmlView, Outcome> {
    match &cx.host.gpu_health().nvml {
        Err(e) => Err(Outcome::skip(format!("GPU health not checked: {e}"))),
        Ok(v) if v.gpus.is_empty() => Err(Outcome::skip("no NVIDIA GPU: NVML lists none")),
        Ok(v) => Ok(v),
    }
}

/// The GPUs NVML could read (lost ones are `gpu.count`'s).
pub fn readable(v: &NvmlView) -> impl Iterator<Item = &GpuState> {
    v.gpus.iter().filter(|g| g.lost.is_none())
}

/// The GPUs NVML could read, or the outcome [`gpus`] gives when there are
/// none to check.
pub fn readable_gpus<'a>(cx: &'a Ctx) -> Result<Vec<&'a GpuState>, Outcome> {
    Ok(readable(gpus(cx)?).collect())
}

/// [`readable_gpus`] for a check of one reading: skipped
/// (`{what} not reported: {why}`) when no readable GPU gives it.
pub fn reporting<'a, T: 'a>(
    cx: &'a Ctx,
    what: &str,
    reading: impl Fn(&'a GpuState) -> &'a Reading<T>,
) -> Result<Vec<&'a GpuState>, Outcome> {
    let gpus = readable_gpus(cx)?;
    match unread(gpus.iter().map(|g| reading(g))) {
        Some((n, why)) if n == gpus.len() => {
            Err(Outcome::skip(format!("{what} not reported: {why}")))
        }
        _ => Ok(gpus),
    }
}

/// A per-GPU check's details: `{"gpus": [{"index", "pci", ...}]}`, each
/// GPU's own fields (a JSON object) after its index and PCI address.
pub fn per_gpu_details(
    gpus: &[&GpuState],
    fields: impl Fn(&GpuState) -> serde_json::Value,
) -> serde_json::Value {
    let list: Vec<serde_json::Value> = gpus
        .iter()
        .map(|g| {
            let mut one = serde_json::json!({ "index": g.index, "pci": g.pci.as_ref().ok() });
            if let (Some(one), serde_json::Value::Object(more)) = (one.as_object_mut(), fields(g)) {
                one.extend(more);
            }
            one
        })
        .collect();
    serde_json::json!({ "gpus": list })
}

/// `n GPU(s)`.
pub fn count_gpus(n: usize) -> String {
    format!("{n} GPU{}", if n == 1 { "" } else { "s" })
}

/// Which GPUs a reading could not be got from, with the first reason
/// (`not supported on 8 GPUs`), or `None` when every GPU gave it.
pub fn unread<'a, T: 'a>(
    readings: impl Iterator<Item = &'a Reading<T>>,
) -> Option<(usize, String)> {
    let errs: Vec<&String> = readings.filter_map(|r| r.as_ref().err()).collect();
    errs.first().map(|e| (errs.len(), (*e).clone()))
}

/// The NVLink errors of a link, summed (for the found line).
pub fn nvlink_error_total(l: &NvLink) -> u64 {
    l.errors.map(|e| e.total()).unwrap_or(0)
}

/// One problem of one GPU.
#[derive(Debug, Clone, PartialEq)]
pub struct Finding {
    /// Warn or fail.
    pub status: Status,
    /// What was found (`GPU 2 (...): 3 uncorrectable ...`).
    pub found: String,
    /// The action.
    pub fix: String,
}

impl Finding {
    /// A failure of `g`.
    pub fn fail(g: &GpuState, found: impl AsRef<str>, fix: impl Into<String>) -> Finding {
        Finding {
            status: Status::Fail,
            found: format!("{}: {}", g.label(), found.as_ref()),
            fix: fix.into(),
        }
    }
    /// A warning about `g`.
    pub fn warn(g: &GpuState, found: impl AsRef<str>, fix: impl Into<String>) -> Finding {
        Finding {
            status: Status::Warn,
            ..Finding::fail(g, found, fix)
        }
    }
}

/// The outcome of per-GPU findings: ok with `ok_found` when none; else the
/// worst status, every finding (worst first) and each distinct action once.
pub fn fold(ok_found: String, mut findings: Vec<Finding>, details: serde_json::Value) -> Outcome {
    if findings.is_empty() {
        return Outcome::ok(ok_found).details(details);
    }
    findings.sort_by_key(|f| std::cmp::Reverse(f.status));
    let found: Vec<&str> = findings.iter().map(|f| f.found.as_str()).collect();
    let mut fixes: Vec<&str> = Vec::new();
    for f in &findings {
        if !fixes.contains(&f.fix.as_str()) {
            fixes.push(&f.fix);
        }
    }
    let (found, fix) = (found.join("; "), fixes.join("; "));
    match findings[0].status {
        Status::Fail => Outcome::fail(found, fix),
        _ => Outcome::warn(found, fix),
    }
    .details(details)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn xid_lines_parse() {
        let x = parse_xid(
            "[ 1234.5] host kernel: NVRM: Xid (PCI:0000:18:00): 79, pid='<unknown>', name=<unknown>, GPU has fallen off the bus.",
        )
        .unwrap();
        assert_eq!(x.pci, "0000:18:00");
        assert_eq!(x.code, 79);
        assert_eq!(
            x.text,
            "pid='<unknown>', name=<unknown>, GPU has fallen off the bus."
        );
        let x = parse_xid("NVRM: Xid (0000:3b:00): 13, Graphics SM Warp Exception").unwrap();
        assert_eq!((x.pci.as_str(), x.code), ("0000:3b:00", 13));
        for bad in [
            "NVRM: loading NVIDIA UNIX x86_64 Kernel Module  580.65.06",
            "NVRM: Xid (PCI:0000:18:00): pid=1",
            "NVRM: Xid PCI:0000:18:00: 79",
            "NVRM: Xid (PCI:0000:18:00",
            "",
        ] {
            assert_eq!(parse_xid(bad), None, "{bad}");
        }
    }

    #[test]
    fn pci_addresses_compare_across_writings() {
        assert_eq!(pci_key("00000000:1B:00.0"), Some((0, 0x1b, 0)));
        assert_eq!(pci_key("0000:1b:00"), pci_key("00000000:1B:00.0"));
        assert_eq!(pci_key("nonsense"), None);
        assert_eq!(pci_key("0000:zz:00"), None);
    }

    #[test]
    fn xids_by_severity() {
        assert_eq!(xid_action(79, "").0, XidSeverity::Hardware);
        assert_eq!(xid_action(13, "").0, XidSeverity::App);
        assert_eq!(xid_action(45, "").0, XidSeverity::Info);
        assert!(
            xid_action(154, "from 0x0 (None) to 0x2 (Node Reboot Required)")
                .2
                .contains("reboot")
        );
        assert!(
            xid_action(154, "to 0x1 (GPU Reset Required)")
                .2
                .contains("reset the GPU")
        );
        assert!(xid_action(9999, "").2.contains("XID catalog"));
    }

    #[test]
    fn reason_names() {
        assert_eq!(
            reasons::names(reasons::GPU_IDLE | reasons::HW_THERMAL),
            ["Idle", "HW Thermal Slowdown"]
        );
        assert!(reasons::names(0).is_empty());
    }
}
