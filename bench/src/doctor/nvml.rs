//! The real host's [`GpuHealth`]: NVML through `nvml-wrapper` (which
//! dlopens `libnvidia-ml.so.1` at run time, so the tools start on hosts
//! without the NVIDIA driver), and the NVRM Xid lines of the kernel log
//! (`journalctl -k -b`, else `dmesg`: NVML keeps no XID history).

use std::io::Read;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use nvml_wrapper::Nvml;
use nvml_wrapper::enum_wrappers::device::{
    EccCounter, MemoryError, MemoryLocation, RetirementCause, TemperatureSensor,
    TemperatureThreshold,
};
use nvml_wrapper::enum_wrappers::nv_link::ErrorCounter;
use nvml_wrapper::error::NvmlError;
use nvml_wrapper_sys::bindings::{nvmlReturn_enum_NVML_SUCCESS, nvmlRowRemapperHistogramValues_t};

use super::gpuhealth::{
    EccCounts, EccMode, GpuHealth, GpuState, KernelLog, NOT_SUPPORTED, NvLink, NvLinkErrors,
    NvmlView, Reading, RetiredPages, RowRemap,
};

/// How long the kernel log may take to read.
const LOG_TIMEOUT: Duration = Duration::from_secs(20);

/// NVML and the kernel log of this host.
pub fn gather() -> GpuHealth {
    let nvml = gather_nvml();
    let kernel_log = match &nvml {
        Ok(_) => kernel_log(),
        Err(_) => Err("not read: NVML is not available".to_owned()),
    };
    GpuHealth { nvml, kernel_log }
}

fn err_text(e: NvmlError) -> String {
    match e {
        NvmlError::NotSupported => NOT_SUPPORTED.to_owned(),
        NvmlError::FailedToLoadSymbol(_) => "not in this driver's NVML".to_owned(),
        e => e.to_string(),
    }
}

fn reading<T>(r: Result<T, NvmlError>) -> Reading<T> {
    r.map_err(err_text)
}

fn init_error(e: NvmlError) -> String {
    match e {
        // The one reason on hosts without GPUs: short, it is on nine lines.
        NvmlError::LibloadingError(_) => "libnvidia-ml.so.1 not found (no NVIDIA driver)".to_owned(),
        NvmlError::DriverNotLoaded => {
            "NVML: the NVIDIA kernel driver is not loaded: modprobe nvidia (or reinstall the driver)"
                .to_owned()
        }
        NvmlError::NoPermission => "NVML: no permission to open the GPUs (/dev/nvidia*)".to_owned(),
        NvmlError::LibRmVersionMismatch => {
            "NVML: the driver library and the kernel module differ in version: reboot (or reload \
             the nvidia modules) after a driver update"
                .to_owned()
        }
        e => format!("NVML could not be initialised: {e}"),
    }
}

fn gather_nvml() -> Result<NvmlView, String> {
    let nvml = Nvml::init().map_err(init_error)?;
    let count = nvml
        .device_count()
        .map_err(|e| format!("NVML: counting the GPUs failed: {e}"))?;
    let gpus = (0..count).map(|i| gather_gpu(&nvml, i)).collect();
    Ok(NvmlView {
        driver_version: reading(nvml.sys_driver_version()),
        count,
        gpus,
    })
}

fn lost(i: u32, why: String) -> GpuState {
    fn no<T>(why: &str) -> Reading<T> {
        Err(why.to_owned())
    }
    let w = why.as_str();
    GpuState {
        index: i,
        lost: Some(why.clone()),
        name: no(w),
        pci: no(w),
        uuid: no(w),
        persistence: no(w),
        ecc_mode: no(w),
        ecc_volatile: EccCounts::default(),
        ecc_aggregate: EccCounts::default(),
        remap: no(w),
        retired: no(w),
        nvlinks: Vec::new(),
        clocks_event_reasons: no(w),
        temperature: no(w),
        temp_slowdown: no(w),
        temp_shutdown: no(w),
        temp_max_operating: no(w),
        power_mw: no(w),
        power_limit_mw: no(w),
        power_default_mw: no(w),
    }
}

fn gather_gpu(nvml: &Nvml, i: u32) -> GpuState {
    let d = match nvml.device_by_index(i) {
        Ok(d) => d,
        Err(e) => return lost(i, format!("NVML cannot open it: {e}")),
    };
    // A GPU that fell off the bus answers GpuLost to everything.
    if let Err(NvmlError::GpuLost) = d.name() {
        return lost(i, "NVML: GPU is lost (fell off the bus)".to_owned());
    }
    let ecc = |counter: EccCounter| {
        let total = |t| d.total_ecc_errors(t, counter).ok();
        let loc = |t, l| d.memory_error_counter(t, counter, l).ok();
        EccCounts {
            corrected: total(MemoryError::Corrected),
            uncorrected: total(MemoryError::Uncorrected),
            dram_corrected: loc(MemoryError::Corrected, MemoryLocation::Device),
            dram_uncorrected: loc(MemoryError::Uncorrected, MemoryLocation::Device),
            sram_corrected: loc(MemoryError::Corrected, MemoryLocation::SRAM),
            sram_uncorrected: loc(MemoryError::Uncorrected, MemoryLocation::SRAM),
        }
    };
    let retired = || -> Result<RetiredPages, NvmlError> {
        Ok(RetiredPages {
            single_bit: d
                .retired_pages(RetirementCause::MultipleSingleBitEccErrors)?
                .len() as u32,
            double_bit: d.retired_pages(RetirementCause::DoubleBitEccError)?.len() as u32,
            pending: d.are_pages_pending_retired()?,
        })
    };
    let mut nvlinks = Vec::new();
    for link in 0..nvml_wrapper_sys::bindings::NVML_NVLINK_MAX_LINKS {
        let l = d.link_wrapper_for(link);
        let Ok(active) = l.is_active() else { continue };
        let counter = |c| l.error_counter(c);
        let errors = (|| -> Result<NvLinkErrors, NvmlError> {
            Ok(NvLinkErrors {
                replay: counter(ErrorCounter::DlReplay)?,
                recovery: counter(ErrorCounter::DlRecovery)?,
                crc_flit: counter(ErrorCounter::DlCrcFlit)?,
                crc_data: counter(ErrorCounter::DlCrcData)?,
            })
        })()
        .ok();
        nvlinks.push(NvLink {
            link,
            active,
            errors,
        });
    }
    GpuState {
        index: i,
        lost: None,
        name: reading(d.name()),
        pci: reading(d.pci_info().map(|p| p.bus_id)),
        uuid: reading(d.uuid()),
        persistence: reading(d.is_in_persistent_mode()),
        ecc_mode: reading(d.is_ecc_enabled().map(|m| EccMode {
            current: m.currently_enabled,
            pending: m.pending_enabled,
        })),
        ecc_volatile: ecc(EccCounter::Volatile),
        ecc_aggregate: ecc(EccCounter::Aggregate),
        remap: remapped_rows(nvml, &d),
        retired: reading(retired()),
        nvlinks,
        clocks_event_reasons: clocks_event_reasons(nvml, &d),
        temperature: reading(d.temperature(TemperatureSensor::Gpu)),
        temp_slowdown: reading(d.temperature_threshold(TemperatureThreshold::Slowdown)),
        temp_shutdown: reading(d.temperature_threshold(TemperatureThreshold::Shutdown)),
        temp_max_operating: reading(d.temperature_threshold(TemperatureThreshold::GpuMax)),
        power_mw: reading(d.power_usage()),
        power_limit_mw: reading(d.enforced_power_limit()),
        power_default_mw: reading(d.power_management_limit_default()),
    }
}

/// A failed NVML return code as text (through the wrapper's own mapping).
fn ret_text(code: u32) -> String {
    match nvml_wrapper::error::nvml_try(code) {
        Ok(()) => "NVML returned success where it failed".to_owned(),
        Err(e) => err_text(e),
    }
}

/// `nvmlDeviceGetRemappedRows` and `nvmlDeviceGetRowRemapperHistogram`:
/// in NVML's bindings but not in the wrapper's safe API.
fn remapped_rows(nvml: &Nvml, d: &nvml_wrapper::Device) -> Reading<RowRemap> {
    let lib = nvml.lib();
    let f = lib
        .nvmlDeviceGetRemappedRows
        .as_ref()
        .map_err(|_| "not in this driver's NVML".to_owned())?;
    let (mut corr, mut unc, mut pending, mut failure) = (0u32, 0u32, 0u32, 0u32);
    // SAFETY: the handle comes from this NVML instance, which outlives the
    // call; the four outputs are writable c_uints.
    let rc = unsafe { f(d.handle(), &mut corr, &mut unc, &mut pending, &mut failure) };
    if rc != nvmlReturn_enum_NVML_SUCCESS {
        return Err(ret_text(rc));
    }
    let histogram = lib
        .nvmlDeviceGetRowRemapperHistogram
        .as_ref()
        .ok()
        .and_then(|h| {
            let mut v = nvmlRowRemapperHistogramValues_t {
                max: 0,
                high: 0,
                partial: 0,
                low: 0,
                none: 0,
            };
            // SAFETY: as above; v is a writable histogram struct.
            let rc = unsafe { h(d.handle(), &mut v) };
            (rc == nvmlReturn_enum_NVML_SUCCESS)
                .then_some([v.max, v.high, v.partial, v.low, v.none])
        });
    Ok(RowRemap {
        correctable: corr,
        uncorrectable: unc,
        pending: pending != 0,
        failure: failure != 0,
        histogram,
    })
}

/// `nvmlDeviceGetCurrentClocksEventReasons` (NVML 12.2 and newer), else the
/// older name of the same call, `...ClocksThrottleReasons`.
fn clocks_event_reasons(nvml: &Nvml, d: &nvml_wrapper::Device) -> Reading<u64> {
    let lib = nvml.lib();
    let f = match lib.nvmlDeviceGetCurrentClocksEventReasons.as_ref() {
        Ok(f) => f,
        Err(_) => return reading(d.current_throttle_reasons().map(|r| r.bits())),
    };
    let mut v: std::os::raw::c_ulonglong = 0;
    // SAFETY: the handle comes from this NVML instance; v is writable.
    let rc = unsafe { f(d.handle(), &mut v) };
    if rc != nvmlReturn_enum_NVML_SUCCESS {
        return Err(ret_text(rc));
    }
    Ok(v)
}

/// Runs `cmd`, killing it after `LOG_TIMEOUT`; its stdout, or why not.
fn output_within(cmd: &mut Command) -> Result<String, String> {
    let mut child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| e.to_string())?;
    let mut out = child.stdout.take().ok_or("no stdout")?;
    let mut err = child.stderr.take().ok_or("no stderr")?;
    let reader = std::thread::spawn(move || {
        let mut s = Vec::new();
        let _ = out.read_to_end(&mut s);
        s
    });
    let err_reader = std::thread::spawn(move || {
        let mut s = Vec::new();
        let _ = err.read_to_end(&mut s);
        s
    });
    let deadline = Instant::now() + LOG_TIMEOUT;
    let status = loop {
        match child.try_wait() {
            Ok(Some(st)) => break st,
            Ok(None) if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(20)),
            Ok(None) => {
                let _ = child.kill();
                let _ = child.wait();
                return Err(format!("took over {} s", LOG_TIMEOUT.as_secs()));
            }
            Err(e) => return Err(e.to_string()),
        }
    };
    let out = String::from_utf8_lossy(&reader.join().unwrap_or_default()).into_owned();
    let err = String::from_utf8_lossy(&err_reader.join().unwrap_or_default()).into_owned();
    let err_line = err.lines().next().unwrap_or("").trim().to_owned();
    if !status.success() {
        return Err(format!("{status}: {err_line}"));
    }
    // journalctl without access to the system journal exits 0 with a hint.
    if out.trim().is_empty() {
        return Err(if err_line.is_empty() {
            "printed nothing".to_owned()
        } else {
            err_line
        });
    }
    Ok(out)
}

/// The NVRM Xid lines since boot: the journal's kernel messages of this
/// boot, else the kernel ring buffer (which may have wrapped).
fn kernel_log() -> Result<KernelLog, String> {
    let journal = output_within(Command::new("journalctl").args(["-k", "-b", "-q", "--no-pager"]));
    let (source, text, starts) = match journal {
        Ok(t) => ("journalctl -k -b".to_owned(), t, None),
        Err(je) => match output_within(&mut Command::new("dmesg")) {
            Ok(t) => {
                let starts = first_timestamp(&t).filter(|s| *s > 1.0);
                ("dmesg".to_owned(), t, starts)
            }
            Err(de) => {
                return Err(format!(
                    "the kernel log could not be read (journalctl -k -b: {je}; dmesg: {de}): \
                     run as root or in group adm/systemd-journal to check XIDs"
                ));
            }
        },
    };
    Ok(KernelLog {
        source,
        starts_after_boot_s: starts,
        lines: text
            .lines()
            .filter(|l| l.contains("NVRM: Xid"))
            .map(str::to_owned)
            .collect(),
    })
}

/// The seconds after boot of the first `[  12.345678] ...` line.
fn first_timestamp(log: &str) -> Option<f64> {
    let l = log.lines().next()?.trim_start().strip_prefix('[')?;
    l.split(']').next()?.trim().parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ring_buffer_start() {
        assert_eq!(
            first_timestamp("[    0.000000] Linux version 6.8\n[ 1.0] x"),
            Some(0.0)
        );
        assert_eq!(first_timestamp("[ 5021.25] NVRM: ..."), Some(5021.25));
        assert_eq!(first_timestamp("no stamp"), None);
    }

    #[test]
    fn commands_that_fail_or_hang_are_reasons() {
        let e = output_within(&mut Command::new("/nonexistent/journalctl")).unwrap_err();
        assert!(e.contains("No such file"), "{e}");
        let e =
            output_within(Command::new("sh").args(["-c", "echo nope >&2; exit 1"])).unwrap_err();
        assert!(e.ends_with(": nope"), "{e}");
        let e = output_within(Command::new("sh").args(["-c", "echo 'Hint: no access' >&2"]))
            .unwrap_err();
        assert_eq!(e, "Hint: no access");
        let out = output_within(Command::new("printf").arg("a\\nNVRM: Xid x\\n")).unwrap();
        assert_eq!(out, "a\nNVRM: Xid x\n");
    }

    /// This machine has no NVIDIA driver: NVML's absence is a reason, not a panic.
    #[test]
    fn without_the_driver_nvml_is_a_reason() {
        if std::path::Path::new("/dev/nvidiactl").exists() {
            return;
        }
        let h = gather();
        let e = h.nvml.unwrap_err();
        assert!(
            e.starts_with("libnvidia-ml.so.1 not found") || e.starts_with("NVML"),
            "{e}"
        );
        assert!(h.kernel_log.is_err());
    }
}
