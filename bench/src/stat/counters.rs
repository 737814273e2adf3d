//! Which sysfs counter gives a port's rx/tx bytes and packets, per driver:
//! eRDMA's `hw_counters` (mainline names, and `hw_`-prefixed ones of Alibaba's
//! out-of-tree driver, per port or per device), the generic IB `counters/`
//! (`port_*_data` counts 4-byte words), rxe's `sent_pkts`/`rcvd_pkts` (no byte
//! counters), EFA's and bnxt_re's `tx_bytes`/`tx_pkts`. siw exports none. A
//! counter that is not there is `None` (reported as missing, never as 0).

use std::path::{Path, PathBuf};

/// The four numbers per port.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Metric {
    /// Bytes received.
    RxBytes,
    /// Bytes sent.
    TxBytes,
    /// Packets received.
    RxPackets,
    /// Packets sent.
    TxPackets,
}

impl Metric {
    /// All four, in print order.
    pub const ALL: [Metric; 4] = [
        Metric::RxBytes,
        Metric::TxBytes,
        Metric::RxPackets,
        Metric::TxPackets,
    ];

    /// JSON key.
    pub fn key(self) -> &'static str {
        match self {
            Metric::RxBytes => "rx_bytes",
            Metric::TxBytes => "tx_bytes",
            Metric::RxPackets => "rx_packets",
            Metric::TxPackets => "tx_packets",
        }
    }

    /// The netdev statistics file with the same meaning.
    fn netdev_file(self) -> &'static str {
        self.key()
    }
}

/// Candidate files per metric, best first: (path under the device's sysfs
/// directory, `{p}` = port; multiplier to bytes or packets).
fn candidates(m: Metric) -> &'static [(&'static str, u64)] {
    match m {
        Metric::RxBytes => &[
            ("ports/{p}/hw_counters/rx_bytes_cnt", 1),
            ("ports/{p}/hw_counters/hw_rx_bytes_cnt", 1),
            ("hw_counters/rx_bytes_cnt", 1),
            ("hw_counters/hw_rx_bytes_cnt", 1),
            ("ports/{p}/counters/port_rcv_data", 4),
            ("ports/{p}/hw_counters/rx_bytes", 1),
        ],
        Metric::TxBytes => &[
            ("ports/{p}/hw_counters/tx_bytes_cnt", 1),
            ("ports/{p}/hw_counters/hw_tx_bytes_cnt", 1),
            ("hw_counters/tx_bytes_cnt", 1),
            ("hw_counters/hw_tx_bytes_cnt", 1),
            ("ports/{p}/counters/port_xmit_data", 4),
            ("ports/{p}/hw_counters/tx_bytes", 1),
        ],
        Metric::RxPackets => &[
            ("ports/{p}/hw_counters/rx_packets_cnt", 1),
            ("ports/{p}/hw_counters/hw_rx_packets_cnt", 1),
            ("hw_counters/rx_packets_cnt", 1),
            ("hw_counters/hw_rx_packets_cnt", 1),
            ("ports/{p}/counters/port_rcv_packets", 1),
            ("ports/{p}/hw_counters/rcvd_pkts", 1),
            ("ports/{p}/hw_counters/rx_pkts", 1),
        ],
        Metric::TxPackets => &[
            ("ports/{p}/hw_counters/tx_packets_cnt", 1),
            ("ports/{p}/hw_counters/hw_tx_packets_cnt", 1),
            ("hw_counters/tx_packets_cnt", 1),
            ("hw_counters/hw_tx_packets_cnt", 1),
            ("ports/{p}/counters/port_xmit_packets", 1),
            ("ports/{p}/hw_counters/sent_pkts", 1),
            ("ports/{p}/hw_counters/tx_pkts", 1),
        ],
    }
}

/// Legacy 32-bit IB counters stop at this value instead of wrapping.
const SATURATED_32: u64 = u32::MAX as u64;

/// One counter file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Source {
    /// The file.
    pub path: PathBuf,
    /// Its name relative to the device (`ports/1/hw_counters/tx_bytes_cnt`).
    pub name: String,
    /// Multiplier (4 for `port_*_data`).
    pub scale: u64,
}

impl Source {
    /// The value now (scaled); `None` when unreadable.
    pub fn read(&self) -> Option<u64> {
        read_u64(&self.path).map(|v| v.saturating_mul(self.scale))
    }

    /// Whether a raw value is a saturated 32-bit IB counter.
    fn saturated(&self, scaled: u64) -> bool {
        self.scale == 4 && scaled / 4 == SATURATED_32
    }
}

fn read_u64(p: &Path) -> Option<u64> {
    crate::input::read_text(p).ok()?.trim().parse().ok()
}

/// One port and where its numbers come from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PortCounters {
    /// Device name.
    pub device: String,
    /// Port number.
    pub port: u8,
    /// The RDMA counter for each of [`Metric::ALL`], `None` when the driver has none.
    pub rdma: [Option<Source>; 4],
    /// The interface whose counters stand in for missing byte counters
    /// (all traffic on it, not only RDMA), with its statistics directory.
    pub netdev: Option<(String, PathBuf)>,
}

impl PortCounters {
    /// Resolves the counters of `port` of the device at `dev_dir`; `single_port`
    /// allows device-level counters. `netdev` (name, its `statistics` dir) is
    /// used only when the port has no byte counter.
    pub fn resolve(
        device: &str,
        port: u8,
        dev_dir: &Path,
        single_port: bool,
        netdev: Option<(String, PathBuf)>,
    ) -> PortCounters {
        let rdma = Metric::ALL.map(|m| {
            candidates(m).iter().find_map(|(pat, scale)| {
                if !pat.starts_with("ports/") && !single_port {
                    return None;
                }
                let name = pat.replace("{p}", &port.to_string());
                let path = dev_dir.join(&name);
                read_u64(&path).map(|_| Source {
                    path,
                    name,
                    scale: *scale,
                })
            })
        });
        let no_bytes = rdma[0].is_none() && rdma[1].is_none();
        let netdev = netdev.filter(|(_, dir)| no_bytes && dir.join("rx_bytes").exists());
        PortCounters {
            device: device.to_owned(),
            port,
            rdma,
            netdev,
        }
    }

    /// Reads every counter once.
    pub fn sample(&self) -> Sample {
        Sample {
            rdma: std::array::from_fn(|i| self.rdma[i].as_ref().and_then(Source::read)),
            netdev: self
                .netdev
                .as_ref()
                .map(|(_, dir)| Metric::ALL.map(|m| read_u64(&dir.join(m.netdev_file())))),
        }
    }

    /// Whether any RDMA counter exists.
    pub fn has_any(&self) -> bool {
        self.rdma.iter().any(Option::is_some)
    }

    /// What the port has, one line: `hw_counters: rcvd_pkts, sent_pkts; no byte counters`.
    pub fn describe(&self) -> String {
        let names: Vec<&str> = self
            .rdma
            .iter()
            .flatten()
            .map(|s| s.name.rsplit('/').next().unwrap_or(&s.name))
            .collect();
        let mut out = if names.is_empty() {
            "no RDMA counters".to_owned()
        } else {
            names.join(", ")
        };
        if self.rdma[0].is_none() && self.rdma[1].is_none() && !names.is_empty() {
            out.push_str("; no byte counters");
        }
        if let Some((nd, _)) = &self.netdev {
            out.push_str(&format!(
                "; bytes from netdev {nd}: ALL its traffic, not only RDMA"
            ));
        }
        out
    }
}

/// Counter values at one moment.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Sample {
    /// RDMA counters (scaled), `None` when missing or unreadable.
    pub rdma: [Option<u64>; 4],
    /// The netdev's counters, when it stands in.
    pub netdev: Option<[Option<u64>; 4]>,
}

/// The change of one counter between two samples.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Delta {
    /// The counter moved this much.
    Value(u64),
    /// There is no such counter (or it could not be read).
    Missing,
    /// It went backwards (driver reset, wrap) or is a saturated 32-bit counter.
    Unreliable,
}

impl Delta {
    /// The value, when there is one.
    pub fn value(self) -> Option<u64> {
        match self {
            Delta::Value(v) => Some(v),
            _ => None,
        }
    }
}

fn delta(a: Option<u64>, b: Option<u64>, saturated: bool) -> Delta {
    match (a, b) {
        _ if saturated => Delta::Unreliable,
        (Some(x), Some(y)) if y >= x => Delta::Value(y - x),
        (Some(_), Some(_)) => Delta::Unreliable,
        _ => Delta::Missing,
    }
}

/// The changes between `before` and `after`: RDMA counters, then the netdev's.
pub fn deltas(
    pc: &PortCounters,
    before: &Sample,
    after: &Sample,
) -> ([Delta; 4], Option<[Delta; 4]>) {
    let rdma = std::array::from_fn(|i| {
        let sat = pc.rdma[i]
            .as_ref()
            .is_some_and(|s| after.rdma[i].is_some_and(|v| s.saturated(v)));
        delta(before.rdma[i], after.rdma[i], sat)
    });
    let nd = match (before.netdev, after.netdev) {
        (Some(b), Some(a)) => Some(std::array::from_fn(|i| delta(b[i], a[i], false))),
        _ => None,
    };
    (rdma, nd)
}

#[cfg(test)]
pub(super) mod tests {
    use super::*;

    /// A fake sysfs tree under the temporary directory, removed when
    /// dropped (the exporter's tests use it too).
    pub(in crate::stat) struct Dir(pub(in crate::stat) PathBuf);
    impl Dir {
        pub(in crate::stat) fn new(tag: &str) -> Dir {
            let p = std::env::temp_dir().join(format!("erdma-stat-{tag}-{}", std::process::id()));
            let _ = std::fs::remove_dir_all(&p);
            std::fs::create_dir_all(&p).unwrap();
            Dir(p)
        }
        pub(in crate::stat) fn put(&self, rel: &str, v: &str) {
            let p = self.0.join(rel);
            std::fs::create_dir_all(p.parent().unwrap()).unwrap();
            std::fs::write(p, format!("{v}\n")).unwrap();
        }
    }
    impl Drop for Dir {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }

    #[test]
    fn erdma_mainline_and_out_of_tree_names() {
        let d = Dir::new("erdma");
        for (n, v) in [
            ("tx_bytes_cnt", "1000"),
            ("rx_bytes_cnt", "2000"),
            ("tx_packets_cnt", "10"),
            ("rx_packets_cnt", "20"),
        ] {
            d.put(&format!("a/ports/1/hw_counters/{n}"), v);
            d.put(&format!("b/hw_counters/hw_{n}"), v);
        }
        let a = PortCounters::resolve("erdma_0", 1, &d.0.join("a"), true, None);
        assert_eq!(
            a.sample().rdma,
            [Some(2000), Some(1000), Some(20), Some(10)]
        );
        assert_eq!(
            a.describe(),
            "rx_bytes_cnt, tx_bytes_cnt, rx_packets_cnt, tx_packets_cnt"
        );
        let b = PortCounters::resolve("erdma_0", 1, &d.0.join("b"), true, None);
        assert_eq!(
            b.sample().rdma,
            [Some(2000), Some(1000), Some(20), Some(10)]
        );
        assert_eq!(
            b.rdma[1].as_ref().unwrap().name,
            "hw_counters/hw_tx_bytes_cnt"
        );
        // Device-level counters are not attributed to one port of several.
        let b2 = PortCounters::resolve("x", 1, &d.0.join("b"), false, None);
        assert!(!b2.has_any());
    }

    #[test]
    fn ib_words_rxe_packets_and_netdev_fallback() {
        let d = Dir::new("ib");
        d.put("mlx/ports/1/counters/port_xmit_data", "250");
        d.put("mlx/ports/1/counters/port_rcv_data", "4294967295");
        let m = PortCounters::resolve("mlx5_0", 1, &d.0.join("mlx"), true, None);
        let s = m.sample();
        assert_eq!(s.rdma[1], Some(1000), "4-byte words");
        let (dl, _) = deltas(&m, &s, &s);
        assert_eq!(dl[0], Delta::Unreliable, "saturated 32-bit counter");
        assert_eq!(dl[1], Delta::Value(0));
        assert_eq!(dl[2], Delta::Missing);

        d.put("rxe/ports/1/hw_counters/sent_pkts", "5");
        d.put("rxe/ports/1/hw_counters/rcvd_pkts", "7");
        d.put("net/veth0/statistics/rx_bytes", "100");
        d.put("net/veth0/statistics/tx_bytes", "200");
        d.put("net/veth0/statistics/rx_packets", "3");
        d.put("net/veth0/statistics/tx_packets", "4");
        let nd = Some(("veth0".to_owned(), d.0.join("net/veth0/statistics")));
        let r = PortCounters::resolve("rxe0", 1, &d.0.join("rxe"), true, nd.clone());
        assert_eq!(r.sample().rdma, [None, None, Some(7), Some(5)]);
        assert_eq!(
            r.sample().netdev,
            Some([Some(100), Some(200), Some(3), Some(4)])
        );
        assert_eq!(
            r.describe(),
            "rcvd_pkts, sent_pkts; no byte counters; bytes from netdev veth0: ALL its traffic, not only RDMA"
        );
        let before = r.sample();
        d.put("rxe/ports/1/hw_counters/sent_pkts", "9");
        d.put("net/veth0/statistics/tx_bytes", "150");
        let (dl, nd_d) = deltas(&r, &before, &r.sample());
        assert_eq!(
            dl,
            [
                Delta::Missing,
                Delta::Missing,
                Delta::Value(0),
                Delta::Value(4)
            ]
        );
        assert_eq!(nd_d.unwrap()[1], Delta::Unreliable, "went backwards");
        // A port with byte counters does not use the netdev.
        let m = PortCounters::resolve("mlx5_0", 1, &d.0.join("mlx"), true, nd);
        assert!(m.netdev.is_none());
    }

    #[test]
    fn siw_has_nothing() {
        let d = Dir::new("siw");
        std::fs::create_dir_all(d.0.join("siw/ports/1")).unwrap();
        let s = PortCounters::resolve("siw0", 1, &d.0.join("siw"), true, None);
        assert!(!s.has_any());
        assert_eq!(s.describe(), "no RDMA counters");
        assert_eq!(s.sample().rdma, [None; 4]);
    }
}
