//! `devinfo`: what `ibv_devinfo` prints (same field names, values and
//! layout, rdma-core 44's format), plus `--json`; and on a host without
//! RDMA one line saying why.
//!
//! Exit status:
//! - 0: success
//! - 1: an RDMA call failed (opening or querying a device or port)
//! - 2: bad command-line arguments
//! - 3: no RDMA device (kernel without RDMA, or no device visible)
//! - 4: libibverbs missing (install rdma-core/ibverbs-providers)
//! - 5: the device (`-d`) or port (`-i`) asked for does not exist

mod json;
mod report;
mod text;

use std::io::Write;

use clap::Parser;
use erdma::{DeviceList, NoDevicesReason};

pub use report::{DeviceReport, GidReport, PortReport, ReportError, gather};
pub use text::{device_text, list_text};

/// Success.
pub const EXIT_OK: i32 = 0;
/// An RDMA call failed.
pub const EXIT_FAILED: i32 = 1;
/// Bad arguments.
pub const EXIT_USAGE: i32 = 2;
/// No RDMA device (kernel without RDMA, or none visible).
pub const EXIT_NO_DEVICES: i32 = 3;
/// libibverbs missing.
pub const EXIT_NO_LIBRARY: i32 = 4;
/// The device or port asked for does not exist.
pub const EXIT_NOT_FOUND: i32 = 5;

/// Command-line options (those of `ibv_devinfo`, plus `--json`).
#[derive(Debug, Parser)]
#[command(
    name = "devinfo",
    version,
    about = "Print RDMA device attributes, as ibv_devinfo does",
    after_help = "Exit status: 0 ok, 1 an RDMA call failed, 2 bad arguments, 3 no RDMA device \
                  (kernel without RDMA or none visible), 4 libibverbs missing, 5 no such device or port."
)]
pub struct Args {
    /// Use IB device DEV (default: all devices).
    #[arg(short = 'd', long = "ib-dev", value_name = "DEV")]
    pub device: Option<String>,
    /// Use port PORT of the device (default: all ports).
    #[arg(short = 'i', long = "ib-port", value_name = "PORT", value_parser = parse_port)]
    pub port: Option<u32>,
    /// Print only the device names.
    #[arg(short = 'l', long = "list")]
    pub list: bool,
    /// Print all the attributes of the device(s).
    #[arg(short = 'v', long = "verbose")]
    pub verbose: bool,
    /// Print the attributes (all of them) as JSON.
    #[arg(long)]
    pub json: bool,
}

/// A port number as ibv_devinfo takes it (strtol base 0: 1, 0x1, 01), > 0.
fn parse_port(s: &str) -> Result<u32, String> {
    let t = s.trim();
    let v = if let Some(h) = t.strip_prefix("0x").or_else(|| t.strip_prefix("0X")) {
        u32::from_str_radix(h, 16)
    } else if t.len() > 1 && t.starts_with('0') {
        u32::from_str_radix(&t[1..], 8)
    } else {
        t.parse::<u32>()
    };
    match v {
        Ok(p) if p > 0 && p <= 255 => Ok(p),
        _ => Err(format!("'{s}' is not a port number (1..255)")),
    }
}

/// The exit status and one-line message for an empty device list.
pub fn no_devices(reason: Option<&NoDevicesReason>) -> (i32, String) {
    match reason {
        Some(r @ NoDevicesReason::LibraryMissing(_)) => (EXIT_NO_LIBRARY, r.to_string()),
        Some(r) => (EXIT_NO_DEVICES, r.to_string()),
        None => (EXIT_NO_DEVICES, NoDevicesReason::NoDevices.to_string()),
    }
}

/// Runs devinfo on `list`, writing to `out` and `err`; returns the exit status.
pub fn run(args: &Args, list: &DeviceList, out: &mut dyn Write, err: &mut dyn Write) -> i32 {
    if list.is_empty() {
        let (code, msg) = no_devices(list.reason());
        if args.json {
            let v = serde_json::json!({"devices": [], "error": msg});
            let _ = writeln!(out, "{v}");
        } else {
            let _ = writeln!(err, "{msg}");
        }
        return code;
    }
    if args.list {
        let _ = out.write_all(list_text(&list.names()).as_bytes());
        return EXIT_OK;
    }
    let selected: Vec<&erdma::Device> = match &args.device {
        Some(name) => match list.find(name) {
            Ok(d) => vec![d],
            Err(e) => {
                let _ = writeln!(err, "IB device '{name}' wasn't found: {e}");
                return EXIT_NOT_FOUND;
            }
        },
        None => list.iter().collect(),
    };
    let mut code = EXIT_OK;
    let mut docs = Vec::new();
    for dev in selected {
        match gather(dev, args.port, args.verbose || args.json) {
            Ok(r) => {
                if args.json {
                    docs.push(json::device_json(&r));
                    if let Some((p, e)) = &r.port_error {
                        let _ = writeln!(err, "Failed to query port {p} props: {e}");
                        code = EXIT_FAILED;
                    }
                } else {
                    let (t, failure) = device_text(&r, args.verbose);
                    let _ = out.write_all(t.as_bytes());
                    if let Some(f) = failure {
                        let _ = writeln!(err, "{f}");
                        code = EXIT_FAILED;
                    }
                }
            }
            Err(ReportError::Open(e)) => {
                let _ = writeln!(err, "Failed to open device {}: {e}", dev.name());
                code = EXIT_FAILED;
            }
            Err(ReportError::Query(e)) => {
                let _ = writeln!(err, "Failed to query device props of {}: {e}", dev.name());
                code = EXIT_FAILED;
            }
            Err(ReportError::BadPort { port, count }) => {
                let _ = writeln!(
                    err,
                    "Invalid port requested for device {}: port {port}, the device has {count}",
                    dev.name()
                );
                code = code.max(EXIT_NOT_FOUND);
            }
        }
    }
    if args.json {
        let v = serde_json::json!({ "devices": docs });
        let _ = writeln!(
            out,
            "{}",
            serde_json::to_string_pretty(&v).unwrap_or_default()
        );
    }
    code
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(a: &[&str]) -> Result<Args, clap::Error> {
        Args::try_parse_from(std::iter::once("devinfo").chain(a.iter().copied()))
    }

    #[test]
    fn options_like_ibv_devinfo() {
        let a = args(&["-d", "rxe0", "-i", "1", "-v"]).unwrap();
        assert_eq!(a.device.as_deref(), Some("rxe0"));
        assert_eq!(a.port, Some(1));
        assert!(a.verbose && !a.list && !a.json);
        assert_eq!(args(&["--ib-port=0x2"]).unwrap().port, Some(2));
        assert!(args(&["-i", "0"]).is_err());
        assert!(args(&["-i", "-1"]).is_err());
        assert!(args(&["-i", "banana"]).is_err());
        assert!(args(&["--bogus"]).is_err());
        assert!(args(&["-l", "--json"]).unwrap().json);
    }

    fn run_on(list: &DeviceList, a: &[&str]) -> (i32, String, String) {
        let (mut o, mut e) = (Vec::new(), Vec::new());
        let code = run(&args(a).unwrap(), list, &mut o, &mut e);
        (
            code,
            String::from_utf8(o).unwrap(),
            String::from_utf8(e).unwrap(),
        )
    }

    #[test]
    fn no_rdma_is_one_line_and_a_status() {
        let l = DeviceList::empty(NoDevicesReason::KernelWithoutRdma);
        let (code, out, err) = run_on(&l, &[]);
        assert_eq!(code, EXIT_NO_DEVICES);
        assert!(out.is_empty());
        assert_eq!(err.lines().count(), 1);
        assert!(err.starts_with("kernel without RDMA"), "{err}");
        let (code, _, err) = run_on(&l, &["-l"]);
        assert_eq!(code, EXIT_NO_DEVICES);
        assert_eq!(err.lines().count(), 1);

        let l = DeviceList::empty(NoDevicesReason::LibraryMissing("x".into()));
        let (code, _, err) = run_on(&l, &["-v", "-d", "erdma_0"]);
        assert_eq!(code, EXIT_NO_LIBRARY);
        assert!(
            err.starts_with("libibverbs missing: install rdma-core/ibverbs-providers"),
            "{err}"
        );

        let l = DeviceList::empty(NoDevicesReason::NoDevices);
        let (code, out, err) = run_on(&l, &["--json"]);
        assert_eq!(code, EXIT_NO_DEVICES);
        assert!(err.is_empty());
        let v: serde_json::Value = serde_json::from_str(&out).unwrap();
        assert_eq!(v["devices"].as_array().unwrap().len(), 0);
        assert!(v["error"].as_str().unwrap().starts_with("no RDMA devices"));
    }

    #[test]
    fn this_host() {
        // Whatever this host has, devinfo answers with a documented status.
        let l = erdma::devices();
        let (code, _, err) = run_on(&l, &[]);
        if l.is_empty() {
            assert!(code == EXIT_NO_DEVICES || code == EXIT_NO_LIBRARY);
            assert_eq!(err.lines().count(), 1);
        } else {
            assert!(code == EXIT_OK || code == EXIT_FAILED, "{err}");
        }
    }
}
