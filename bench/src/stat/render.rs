//! Tables and JSON for erdma-stat. Missing counters print as `missing` (JSON
//! `null`), counters that went backwards as `reset`; rows from an interface's
//! counters are marked with `*` and a note: they count all its traffic.

use super::counters::{Delta, Metric, PortCounters, Sample, deltas};
use crate::doctor::hints::bytes;
use crate::meta::RunMeta;

const NETDEV_NOTE: &str = "* interface counters: ALL traffic on that interface (TCP too), shown because the device has no byte counters";

fn cell(d: Delta, byte: bool, per_sec: Option<f64>) -> String {
    match (d, per_sec) {
        (Delta::Missing, _) => "missing".into(),
        (Delta::Unreliable, _) => "reset".into(),
        (Delta::Value(v), None) if byte => bytes(v),
        (Delta::Value(v), None) => v.to_string(),
        (Delta::Value(v), Some(s)) if byte => format!("{}/s", bytes((v as f64 / s) as u64)),
        (Delta::Value(v), Some(s)) => format!("{:.0}/s", v as f64 / s),
    }
}

fn row(label: &str, port: &str, d: &[Delta; 4], per_sec: Option<f64>) -> String {
    let c: Vec<String> = Metric::ALL
        .iter()
        .zip(d)
        .map(|(m, d)| cell(*d, matches!(m, Metric::RxBytes | Metric::TxBytes), per_sec))
        .collect();
    format!(
        "{label:<12} {port:>4} {:>14} {:>14} {:>12} {:>12}\n",
        c[0], c[1], c[2], c[3]
    )
}

fn header(first: &str, rate: bool) -> String {
    let (b, p) = if rate {
        ("B/s", "pkt/s")
    } else {
        ("bytes", "packets")
    };
    format!(
        "{first:<12} {:>4} {:>14} {:>14} {:>12} {:>12}\n",
        "port",
        format!("rx {b}"),
        format!("tx {b}"),
        format!("rx {p}"),
        format!("tx {p}")
    )
}

/// Rows for the changes of every port between two samples.
fn table(
    ports: &[PortCounters],
    a: &[Sample],
    b: &[Sample],
    per_sec: Option<f64>,
) -> (String, bool) {
    let mut s = String::new();
    let mut any_nd = false;
    for (i, pc) in ports.iter().enumerate() {
        let (d, nd) = deltas(pc, &a[i], &b[i]);
        s.push_str(&row(&pc.device, &pc.port.to_string(), &d, per_sec));
        if let (Some(nd), Some((name, _))) = (nd, &pc.netdev) {
            any_nd = true;
            s.push_str(&row(&format!("  {name}*"), "", &nd, per_sec));
        }
    }
    (s, any_nd)
}

fn sources(ports: &[PortCounters]) -> String {
    ports
        .iter()
        .map(|p| format!("{}:{}: {}\n", p.device, p.port, p.describe()))
        .collect()
}

/// Totals since the counters started.
pub fn totals_text(ports: &[PortCounters], s: &[Sample]) -> String {
    let zero: Vec<Sample> = s
        .iter()
        .map(|x| Sample {
            rdma: x.rdma.map(|v| v.map(|_| 0)),
            netdev: x.netdev.map(|n| n.map(|v| v.map(|_| 0))),
        })
        .collect();
    let (t, nd) = table(ports, &zero, s, None);
    let mut out = header("device", false) + &t;
    if nd {
        out.push_str(NETDEV_NOTE);
        out.push('\n');
    }
    out + &sources(ports)
}

/// The first lines of live mode.
pub fn live_header(ports: &[PortCounters], interval: f64) -> String {
    format!(
        "every {interval} s, Ctrl-C to stop\n{}{}",
        sources(ports),
        header("device", true)
    )
}

/// One interval of live mode.
pub fn live_rows(ports: &[PortCounters], a: &[Sample], b: &[Sample], secs: f64) -> String {
    let (t, nd) = table(ports, a, b, Some(secs.max(1e-9)));
    if nd && ports.len() > 1 {
        format!("{t}\n")
    } else {
        t
    }
}

fn values_json(d: &[Delta; 4], secs: Option<f64>) -> serde_json::Value {
    let mut m = serde_json::Map::new();
    for (metric, d) in Metric::ALL.iter().zip(d) {
        m.insert(metric.key().into(), serde_json::json!(d.value()));
        if let Some(s) = secs.filter(|s| *s > 0.0) {
            m.insert(
                format!("{}_per_s", metric.key()),
                serde_json::json!(d.value().map(|v| v as f64 / s)),
            );
        }
        if *d == Delta::Unreliable {
            m.insert(format!("{}_reset", metric.key()), serde_json::json!(true));
        }
    }
    serde_json::Value::Object(m)
}

fn ports_json(
    ports: &[PortCounters],
    a: &[Sample],
    b: &[Sample],
    secs: Option<f64>,
) -> serde_json::Value {
    ports
        .iter()
        .enumerate()
        .map(|(i, pc)| {
            let (d, nd) = deltas(pc, &a[i], &b[i]);
            let counters: serde_json::Map<String, serde_json::Value> = Metric::ALL
                .iter()
                .zip(&pc.rdma)
                .map(|(m, s)| (m.key().to_owned(), serde_json::json!(s.as_ref().map(|s| &s.name))))
                .collect();
            serde_json::json!({
                "device": pc.device, "port": pc.port, "rdma": values_json(&d, secs),
                "counters": counters,
                "missing": Metric::ALL.iter().zip(&pc.rdma).filter(|(_, s)| s.is_none()).map(|(m, _)| m.key()).collect::<Vec<_>>(),
                "netdev": match (nd, &pc.netdev) {
                    (Some(nd), Some((name, _))) => serde_json::json!({
                        "name": name, "includes_non_rdma_traffic": true, "values": values_json(&nd, secs),
                    }),
                    _ => serde_json::Value::Null,
                },
            })
        })
        .collect()
}

fn doc(meta: &RunMeta, mode: &str, extra: serde_json::Value) -> serde_json::Value {
    let mut m = meta.to_json();
    m.insert("mode".into(), mode.into());
    if let serde_json::Value::Object(e) = extra {
        m.extend(e);
    }
    serde_json::Value::Object(m)
}

/// `--json` totals.
pub fn totals_json(meta: &RunMeta, ports: &[PortCounters], s: &[Sample]) -> serde_json::Value {
    let zero: Vec<Sample> = s
        .iter()
        .map(|x| Sample {
            rdma: x.rdma.map(|v| v.map(|_| 0)),
            netdev: x.netdev.map(|n| n.map(|v| v.map(|_| 0))),
        })
        .collect();
    doc(
        meta,
        "totals",
        serde_json::json!({"ports": ports_json(ports, &zero, s, None)}),
    )
}

/// One live interval, for `--json`.
pub fn interval_json(
    ports: &[PortCounters],
    a: &[Sample],
    b: &[Sample],
    secs: f64,
) -> serde_json::Value {
    serde_json::json!({"seconds": secs, "ports": ports_json(ports, a, b, Some(secs))})
}

/// The live `--json` document.
pub fn live_json(
    meta: &RunMeta,
    _ports: &[PortCounters],
    interval: f64,
    rows: Vec<serde_json::Value>,
) -> serde_json::Value {
    doc(
        meta,
        "live",
        serde_json::json!({"interval_s": interval, "intervals": rows}),
    )
}

/// What the devices moved while the command ran.
pub fn during_text(
    ports: &[PortCounters],
    a: &[Sample],
    b: &[Sample],
    secs: f64,
    command: &[String],
    how: &str,
) -> String {
    let (t, nd) = table(ports, a, b, None);
    let mut out = format!(
        "erdma-stat: `{}` {how} after {secs:.2} s; RDMA traffic during it:\n",
        command.join(" ")
    );
    if ports.is_empty() {
        out.push_str("no RDMA device here: nothing was counted\n");
        return out;
    }
    out.push_str(&header("device", false));
    out.push_str(&t);
    if nd {
        out.push_str(NETDEV_NOTE);
        out.push('\n');
    }
    out + &sources(ports)
}

/// The `--during --json` document.
pub fn during_json(
    meta: &RunMeta,
    ports: &[PortCounters],
    a: &[Sample],
    b: &[Sample],
    secs: f64,
    command: &[String],
    exit_status: i32,
) -> serde_json::Value {
    doc(
        meta,
        "during",
        serde_json::json!({
            "run": command, "exit_status": exit_status, "seconds": secs,
            "ports": ports_json(ports, a, b, Some(secs)),
        }),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::stat::counters::Source;
    use std::path::PathBuf;

    fn rxe() -> PortCounters {
        let src = |n: &str| Source {
            path: PathBuf::from("/nonexistent"),
            name: format!("ports/1/hw_counters/{n}"),
            scale: 1,
        };
        PortCounters {
            device: "rxe0".into(),
            port: 1,
            rdma: [None, None, Some(src("rcvd_pkts")), Some(src("sent_pkts"))],
            netdev: Some(("veth0".into(), PathBuf::from("/nonexistent"))),
        }
    }

    fn samples() -> (Sample, Sample) {
        (
            Sample {
                rdma: [None, None, Some(10), Some(20)],
                netdev: Some([Some(1000), Some(2000), Some(5), Some(6)]),
            },
            Sample {
                rdma: [None, None, Some(110), Some(220)],
                netdev: Some([
                    Some(1000 + 3 * 1048576),
                    Some(2000 + 1024),
                    Some(105),
                    Some(206),
                ]),
            },
        )
    }

    #[test]
    fn during_table_marks_missing_and_netdev_rows() {
        let (a, b) = samples();
        let t = during_text(
            &[rxe()],
            &[a],
            &[b],
            2.5,
            &["x".into(), "y".into()],
            "exited 0",
        );
        let lines: Vec<&str> = t.lines().collect();
        assert_eq!(
            lines[0],
            "erdma-stat: `x y` exited 0 after 2.50 s; RDMA traffic during it:"
        );
        assert!(
            lines[2].starts_with("rxe0") && lines[2].contains("missing"),
            "{t}"
        );
        assert!(lines[2].trim_end().ends_with("100          200"), "{t}");
        assert!(
            lines[3].starts_with("  veth0*")
                && lines[3].contains("3 MiB")
                && lines[3].contains("1 KiB"),
            "{t}"
        );
        assert!(t.contains("ALL traffic on that interface"));
        assert!(
            t.contains("rxe0:1: rcvd_pkts, sent_pkts; no byte counters; bytes from netdev veth0")
        );
    }

    #[test]
    fn json_has_nulls_for_missing_and_labels_the_netdev() {
        let (a, b) = samples();
        let meta = RunMeta::now("erdma-stat");
        let v = during_json(&meta, &[rxe()], &[a], &[b], 2.0, &["x".into()], 3);
        assert_eq!(v["tool"], "erdma-stat");
        assert_eq!(v["exit_status"], 3);
        let p = &v["ports"][0];
        assert!(p["rdma"]["rx_bytes"].is_null());
        assert_eq!(p["rdma"]["tx_packets"], 200);
        assert_eq!(p["rdma"]["tx_packets_per_s"], 100.0);
        assert_eq!(p["missing"], serde_json::json!(["rx_bytes", "tx_bytes"]));
        assert_eq!(p["netdev"]["includes_non_rdma_traffic"], true);
        assert_eq!(p["netdev"]["values"]["rx_bytes"], 3 * 1048576);
        assert_eq!(p["counters"]["tx_packets"], "ports/1/hw_counters/sent_pkts");
    }

    #[test]
    fn live_rows_are_rates() {
        let (a, b) = samples();
        let t = live_rows(&[rxe()], &[a], &[b], 2.0);
        assert!(
            t.contains("50/s") && t.contains("100/s") && t.contains("1.5 MiB/s"),
            "{t}"
        );
    }
}
