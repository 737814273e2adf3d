//! The Prometheus text format (version 0.0.4) of every RDMA port, read from
//! sysfs on each call: what `erdma-stat --serve` answers at `/metrics`.
//!
//! Families (all prefixed `erdma_`; `device` and `port` labels on port metrics):
//! - `port_{receive,transmit}_{bytes,packets}_total`: the RDMA traffic counters
//!   erdma-stat shows (eRDMA's hw_counters, IB `port_*_data` in bytes, EFA's ...),
//!   absent when the driver has none; `port_stat_available` says which (0/1).
//! - `port_netdev_{receive,transmit}_{bytes,packets}_total`: the port's interface
//!   (ALL its traffic, RDMA or not: TCP on it shows here and not above).
//! - `port_hw_stat_total`, `device_hw_stat_total`, `port_ib_stat_total`:
//!   every file of `hw_counters/` and `counters/`, raw (`counter` label = file name).
//! - `port_state`, `port_up`, `port_physical_state`, `port_rate_bytes_per_second`,
//!   `port_info` (link layer and netdev).
//! - `rdma_devices`, `rdma_unavailable` (why nothing can be counted), the doctor's
//!   checks (`doctor_check_status`, one series per status, the current one 1),
//!   `exporter_build_info`, `scrape_read_errors`, `scrape_duration_seconds`.

use std::fmt::Write as _;
use std::io::Read;
use std::path::{Path, PathBuf};

use super::counters::{Metric, PortCounters};
use crate::doctor::{Report, Status};

/// Where the RDMA devices are, unless `ERDMA_STAT_SYSFS` says otherwise (tests).
pub const SYSFS_INFINIBAND: &str = "/sys/class/infiniband";
/// The environment variable that points the exporter at another directory of
/// devices laid out like `/sys/class/infiniband` (for tests).
pub const SYSFS_ENV: &str = "ERDMA_STAT_SYSFS";
/// At most this many devices, ports per device and counter files per
/// directory are exported: a scrape's size stays bounded whatever sysfs holds.
pub const MAX_ENTRIES: usize = 256;
/// At most this many bytes are read of one sysfs file.
const MAX_FILE: u64 = 256;

/// The directory of devices to read.
pub fn sysfs_root() -> PathBuf {
    std::env::var_os(SYSFS_ENV)
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(SYSFS_INFINIBAND))
}

/// A small sysfs file's text (trimmed), `None` when unreadable.
fn read_small(p: &Path) -> Option<String> {
    // Through the one reader: regular files only, never blocking on a FIFO.
    let f = crate::input::open(p).ok()?;
    let mut s = String::new();
    f.take(MAX_FILE).read_to_string(&mut s).ok()?;
    Some(s.trim().to_owned())
}

/// The sorted entry names of a directory (at most [`MAX_ENTRIES`]), empty when unreadable.
fn names(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(dir)
        .map(|rd| {
            rd.flatten()
                .filter_map(|e| e.file_name().into_string().ok())
                .collect()
        })
        .unwrap_or_default();
    v.sort();
    v.truncate(MAX_ENTRIES);
    v
}

/// A label value escaped as the text format wants (`\\`, `\"`, `\n`).
pub fn escape(v: &str) -> String {
    let mut s = String::with_capacity(v.len());
    for c in v.chars() {
        match c {
            '\\' => s.push_str("\\\\"),
            '"' => s.push_str("\\\""),
            '\n' => s.push_str("\\n"),
            c if c.is_control() => s.push(' '),
            c => s.push(c),
        }
    }
    s
}

/// The `{a="x",b="y"}` of `labels`.
fn labels(l: &[(&str, &str)]) -> String {
    let inner: Vec<String> = l
        .iter()
        .map(|(k, v)| format!("{k}=\"{}\"", escape(v)))
        .collect();
    format!("{{{}}}", inner.join(","))
}

/// One metric family being written: HELP and TYPE once, then its samples.
struct Family {
    name: &'static str,
    kind: &'static str,
    help: &'static str,
    samples: Vec<String>,
}

impl Family {
    fn new(name: &'static str, kind: &'static str, help: &'static str) -> Family {
        Family {
            name,
            kind,
            help,
            samples: Vec::new(),
        }
    }
    fn add(&mut self, l: &[(&str, &str)], v: impl std::fmt::Display) {
        let ls = if l.is_empty() {
            String::new()
        } else {
            labels(l)
        };
        self.samples.push(format!("{}{ls} {v}", self.name));
    }
    /// Appends the family to `out` (nothing when it has no samples).
    fn write(&self, out: &mut String) {
        if self.samples.is_empty() {
            return;
        }
        let _ = writeln!(out, "# HELP {} {}", self.name, self.help);
        let _ = writeln!(out, "# TYPE {} {}", self.name, self.kind);
        for s in &self.samples {
            out.push_str(s);
            out.push('\n');
        }
    }
}

/// The number of a sysfs state line (`4: ACTIVE` -> 4, `5: LinkUp` -> 5).
pub fn state_number(s: &str) -> Option<u32> {
    s.split(':').next()?.trim().parse().ok()
}

/// Bytes per second of a sysfs `rate` line (`100 Gb/sec (4X EDR)`, `2.5 Gb/sec (1X SDR)`).
pub fn rate_bytes(s: &str) -> Option<f64> {
    let mut w = s.split_whitespace();
    let n: f64 = w.next()?.parse().ok()?;
    let unit = w.next()?;
    let mult = match unit {
        "Gb/sec" => 1e9,
        "Mb/sec" => 1e6,
        "Kb/sec" => 1e3,
        _ => return None,
    };
    (n.is_finite() && n >= 0.0).then_some(n * mult / 8.0)
}

/// The doctor's findings to export, with the age of the evaluation.
pub struct Checks<'a> {
    /// The report.
    pub report: &'a Report,
    /// Seconds since it was made.
    pub age_s: f64,
}

/// The families of the traffic counters, one per [`Metric`].
const TRAFFIC: [(&str, &str); 4] = [
    (
        "erdma_port_receive_bytes_total",
        "Bytes received by the port over RDMA (the driver's counter, in bytes).",
    ),
    (
        "erdma_port_transmit_bytes_total",
        "Bytes sent by the port over RDMA (the driver's counter, in bytes).",
    ),
    (
        "erdma_port_receive_packets_total",
        "Packets received by the port over RDMA.",
    ),
    (
        "erdma_port_transmit_packets_total",
        "Packets sent by the port over RDMA.",
    ),
];
const NETDEV: [(&str, &str); 4] = [
    (
        "erdma_port_netdev_receive_bytes_total",
        "Bytes received by the port's network interface: all its traffic, RDMA or not.",
    ),
    (
        "erdma_port_netdev_transmit_bytes_total",
        "Bytes sent by the port's network interface: all its traffic, RDMA or not.",
    ),
    (
        "erdma_port_netdev_receive_packets_total",
        "Packets received by the port's network interface: all its traffic, RDMA or not.",
    ),
    (
        "erdma_port_netdev_transmit_packets_total",
        "Packets sent by the port's network interface: all its traffic, RDMA or not.",
    ),
];

/// The whole `/metrics` text for the devices under `root`, with the
/// doctor's checks when given. Without devices it says why
/// (`erdma_rdma_unavailable{reason}`: no RDMA core loaded, or no device).
pub fn render(root: &Path, checks: Option<Checks<'_>>) -> String {
    let t0 = std::time::Instant::now();
    let mut errors = 0u64;
    let mut traffic: Vec<Family> = TRAFFIC
        .iter()
        .map(|(n, h)| Family::new(n, "counter", h))
        .collect();
    let mut netdev: Vec<Family> = NETDEV
        .iter()
        .map(|(n, h)| Family::new(n, "counter", h))
        .collect();
    let mut avail = Family::new(
        "erdma_port_stat_available",
        "gauge",
        "1 when the driver has this RDMA traffic counter (rx_bytes, tx_bytes, rx_packets, tx_packets), 0 when it cannot be counted (siw has none, rxe no bytes).",
    );
    let mut hw = Family::new(
        "erdma_port_hw_stat_total",
        "counter",
        "Every file of the port's hw_counters directory, raw (counter = the file's name; rdma-core and the provider's counters, eRDMA's included).",
    );
    let mut dev_hw = Family::new(
        "erdma_device_hw_stat_total",
        "counter",
        "Every file of the device's own hw_counters directory, raw (counter = the file's name).",
    );
    let mut ib = Family::new(
        "erdma_port_ib_stat_total",
        "counter",
        "Every file of the port's IB counters directory, raw (port_*_data count 4-byte words).",
    );
    let mut state = Family::new(
        "erdma_port_state",
        "gauge",
        "The port's logical state number (1 DOWN, 2 INIT, 3 ARMED, 4 ACTIVE, 5 ACTIVE_DEFER).",
    );
    let mut up = Family::new(
        "erdma_port_up",
        "gauge",
        "1 when the port is ACTIVE, else 0.",
    );
    let mut phys = Family::new(
        "erdma_port_physical_state",
        "gauge",
        "The port's physical state number (5 LinkUp, 3 Disabled, 2 Polling).",
    );
    let mut rate = Family::new(
        "erdma_port_rate_bytes_per_second",
        "gauge",
        "The port's link rate in bytes per second.",
    );
    let mut info = Family::new(
        "erdma_port_info",
        "gauge",
        "Always 1: the port's link layer and network interface as labels.",
    );
    let mut unavailable = Family::new(
        "erdma_rdma_unavailable",
        "gauge",
        "1 when no RDMA device can be counted, with the reason as a label.",
    );

    let devices = names(root);
    let mut n_devices = 0u64;
    if devices.is_empty() {
        let reason = if root.is_dir() {
            format!(
                "no RDMA device under {}: load the driver (modprobe erdma) or check the instance's eRDMA interface",
                root.display()
            )
        } else {
            format!(
                "no {}: the kernel has no RDMA core loaded (modprobe ib_core and the driver)",
                root.display()
            )
        };
        unavailable.add(&[("reason", &reason)], 1);
    }
    for dev in &devices {
        let dir = root.join(dev);
        n_devices += 1;
        for c in names(&dir.join("hw_counters")) {
            if c == "lifespan" {
                continue;
            }
            match read_small(&dir.join("hw_counters").join(&c)).and_then(|s| s.parse::<u64>().ok())
            {
                Some(v) => dev_hw.add(&[("device", dev), ("counter", &c)], v),
                None => errors += 1,
            }
        }
        let ports = super::sysfs_ports(&dir);
        for p in ports.iter().take(MAX_ENTRIES) {
            let ps = p.to_string();
            let pdir = dir.join("ports").join(&ps);
            let l = [("device", dev.as_str()), ("port", ps.as_str())];
            let st = read_small(&pdir.join("state"));
            if let Some(n) = st.as_deref().and_then(state_number) {
                state.add(&l, n);
                up.add(&l, u32::from(n == 4));
            } else {
                errors += 1;
            }
            if let Some(n) = read_small(&pdir.join("phys_state"))
                .as_deref()
                .and_then(state_number)
            {
                phys.add(&l, n);
            }
            if let Some(r) = read_small(&pdir.join("rate"))
                .as_deref()
                .and_then(rate_bytes)
            {
                rate.add(&l, r);
            }
            let link = read_small(&pdir.join("link_layer")).unwrap_or_default();
            let nd = read_small(&pdir.join("gid_attrs/ndevs/0")).unwrap_or_default();
            info.add(
                &[
                    ("device", dev),
                    ("port", &ps),
                    ("link_layer", &link),
                    ("netdev", &nd),
                ],
                1,
            );
            // The traffic counters, resolved as erdma-stat resolves them.
            let pc = PortCounters::resolve(dev, *p, &dir, ports.len() == 1, None);
            let s = pc.sample();
            for (i, m) in Metric::ALL.iter().enumerate() {
                avail.add(
                    &[("device", dev), ("port", &ps), ("stat", m.key())],
                    u32::from(s.rdma[i].is_some()),
                );
                if let Some(v) = s.rdma[i] {
                    traffic[i].add(&l, v);
                }
            }
            // The interface, when the port has one (a name from sysfs: no path in it).
            if !nd.is_empty() && !nd.contains('/') && nd != "." && nd != ".." {
                let stats = Path::new("/sys/class/net").join(&nd).join("statistics");
                for (i, m) in Metric::ALL.iter().enumerate() {
                    if let Some(v) =
                        read_small(&stats.join(m.key())).and_then(|s| s.parse::<u64>().ok())
                    {
                        netdev[i].add(&[("device", dev), ("port", &ps), ("netdev", &nd)], v);
                    }
                }
            }
            for (sub, fam) in [("hw_counters", &mut hw), ("counters", &mut ib)] {
                for c in names(&pdir.join(sub)) {
                    if c == "lifespan" {
                        continue;
                    }
                    match read_small(&pdir.join(sub).join(&c)).and_then(|s| s.parse::<u64>().ok()) {
                        Some(v) => fam.add(&[("device", dev), ("port", &ps), ("counter", &c)], v),
                        None => errors += 1,
                    }
                }
            }
        }
    }

    let mut out = String::with_capacity(16 << 10);
    let mut build = Family::new(
        "erdma_exporter_build_info",
        "gauge",
        "Always 1: the exporter's version as a label.",
    );
    build.add(&[("version", env!("CARGO_PKG_VERSION"))], 1);
    build.write(&mut out);
    let mut nd = Family::new(
        "erdma_rdma_devices",
        "gauge",
        "The number of RDMA devices found in sysfs.",
    );
    nd.add(&[], n_devices);
    nd.write(&mut out);
    unavailable.write(&mut out);
    for f in [&info, &state, &up, &phys, &rate, &avail] {
        f.write(&mut out);
    }
    for f in traffic.iter().chain(netdev.iter()) {
        f.write(&mut out);
    }
    for f in [&hw, &dev_hw, &ib] {
        f.write(&mut out);
    }
    if let Some(c) = checks {
        write_checks(&mut out, &c);
    }
    let mut e = Family::new(
        "erdma_scrape_read_errors",
        "gauge",
        "Sysfs files that could not be read or parsed in this scrape.",
    );
    e.add(&[], errors);
    e.write(&mut out);
    let mut d = Family::new(
        "erdma_scrape_duration_seconds",
        "gauge",
        "How long this scrape took to read sysfs and render.",
    );
    d.add(&[], format!("{:.6}", t0.elapsed().as_secs_f64()));
    d.write(&mut out);
    out
}

/// The doctor's checks: `erdma_doctor_check_status{check,group,status}` (the
/// current status 1, the others 0) and the evaluation's age.
fn write_checks(out: &mut String, c: &Checks<'_>) {
    let mut f = Family::new(
        "erdma_doctor_check_status",
        "gauge",
        "erdma-doctor's checks: 1 for the check's current status (ok, warn, fail, skip), 0 for the others.",
    );
    for (check, o) in &c.report.results {
        for s in [Status::Ok, Status::Warn, Status::Fail, Status::Skip] {
            f.add(
                &[
                    ("check", check.id),
                    ("group", check.group.as_str()),
                    ("status", s.as_str()),
                ],
                u32::from(o.status == s),
            );
        }
    }
    f.write(out);
    let mut a = Family::new(
        "erdma_doctor_checks_age_seconds",
        "gauge",
        "Seconds since erdma-doctor's checks were evaluated (they are rerun on a scrape once older than --checks-every).",
    );
    a.add(&[], format!("{:.3}", c.age_s));
    a.write(out);
}

#[cfg(test)]
mod tests {
    use super::*;

    // The counters' fake sysfs tree (prefixed: both test modules run in one process).
    use crate::stat::counters::tests::Dir;

    fn value(text: &str, series: &str) -> Option<String> {
        text.lines()
            .find_map(|l| l.strip_prefix(series)?.strip_prefix(' ').map(str::to_owned))
    }

    #[test]
    fn erdma_rxe_and_siw_ports() {
        let d = Dir::new("prom-three");
        for (n, v) in [
            ("tx_bytes_cnt", "1000"),
            ("rx_bytes_cnt", "2000"),
            ("tx_packets_cnt", "10"),
            ("rx_packets_cnt", "20"),
            ("retrans_cnt", "3"),
            ("lifespan", "10"),
        ] {
            d.put(&format!("erdma_0/ports/1/hw_counters/{n}"), v);
        }
        d.put("erdma_0/ports/1/state", "4: ACTIVE");
        d.put("erdma_0/ports/1/phys_state", "5: LinkUp");
        d.put("erdma_0/ports/1/rate", "25 Gb/sec (1X EDR)");
        d.put("erdma_0/ports/1/link_layer", "Ethernet");
        d.put("rxe0/ports/1/hw_counters/sent_pkts", "5");
        d.put("rxe0/ports/1/hw_counters/bad\"name", "x");
        d.put("rxe0/ports/1/state", "1: DOWN");
        std::fs::create_dir_all(d.0.join("siw0/ports/1")).unwrap();
        let t = render(&d.0, None);
        let e = |s: &str| value(&t, s);
        assert_eq!(e("erdma_rdma_devices").as_deref(), Some("3"));
        assert_eq!(
            e(r#"erdma_port_transmit_bytes_total{device="erdma_0",port="1"}"#).as_deref(),
            Some("1000")
        );
        assert_eq!(
            e(r#"erdma_port_hw_stat_total{device="erdma_0",port="1",counter="retrans_cnt"}"#)
                .as_deref(),
            Some("3")
        );
        assert!(!t.contains("lifespan"), "{t}");
        assert_eq!(
            e(r#"erdma_port_rate_bytes_per_second{device="erdma_0",port="1"}"#).as_deref(),
            Some("3125000000")
        );
        assert_eq!(
            e(r#"erdma_port_up{device="erdma_0",port="1"}"#).as_deref(),
            Some("1")
        );
        assert_eq!(
            e(r#"erdma_port_up{device="rxe0",port="1"}"#).as_deref(),
            Some("0")
        );
        // rxe: packets only; siw: nothing, said as 0s.
        assert_eq!(
            e(r#"erdma_port_stat_available{device="rxe0",port="1",stat="tx_packets"}"#).as_deref(),
            Some("1")
        );
        assert_eq!(
            e(r#"erdma_port_stat_available{device="rxe0",port="1",stat="tx_bytes"}"#).as_deref(),
            Some("0")
        );
        for k in ["rx_bytes", "tx_bytes", "rx_packets", "tx_packets"] {
            let s = format!(r#"erdma_port_stat_available{{device="siw0",port="1",stat="{k}"}}"#);
            assert_eq!(e(&s).as_deref(), Some("0"), "{s}");
        }
        assert!(!t.contains(r#"erdma_port_transmit_bytes_total{device="rxe0""#));
        // The unparsable file counts as a read error, not a 0; siw0 has no state file.
        assert_eq!(e("erdma_scrape_read_errors").as_deref(), Some("2"));
        assert!(!t.contains("erdma_rdma_unavailable"));
        // Each family's HELP and TYPE once.
        let types = t.lines().filter(|l| l.starts_with("# TYPE ")).count();
        let helps = t.lines().filter(|l| l.starts_with("# HELP ")).count();
        assert_eq!(types, helps);
        let mut seen = std::collections::HashSet::new();
        for l in t.lines().filter(|l| l.starts_with("# TYPE ")) {
            assert!(seen.insert(l), "twice: {l}");
        }
    }

    #[test]
    fn no_devices_says_why() {
        let d = Dir::new("prom-none");
        let t = render(&d.0, None);
        assert!(t.contains("erdma_rdma_devices 0"), "{t}");
        assert!(
            t.contains(r#"erdma_rdma_unavailable{reason="no RDMA device under"#),
            "{t}"
        );
        let t = render(&d.0.join("absent"), None);
        assert!(t.contains("the kernel has no RDMA core loaded"), "{t}");
    }

    #[test]
    fn escapes_and_parsers() {
        assert_eq!(escape("a\"b\\c\nd"), "a\\\"b\\\\c\\nd");
        assert_eq!(state_number("4: ACTIVE"), Some(4));
        assert_eq!(state_number("garbage"), None);
        assert_eq!(rate_bytes("2.5 Gb/sec (1X SDR)"), Some(312_500_000.0));
        assert_eq!(rate_bytes("10 Mb/sec"), Some(1_250_000.0));
        assert_eq!(rate_bytes("NaN Gb/sec"), None);
        assert_eq!(rate_bytes("-1 Gb/sec"), None);
        assert_eq!(rate_bytes(""), None);
    }
}
