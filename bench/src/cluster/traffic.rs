//! The traffic proof of erdma-cluster (the guide's `eadm stat` step,
//! automated): every host's RDMA port counters (erdma-stat's sources) read
//! before and after each stage, and per host and NIC the bytes moved
//! against the bytes the stage had to send between hosts. Only RDMA
//! counters count: a netdev's counters carry TCP too, so they prove
//! nothing. A counter the driver lacks is "cannot prove", never 0.

use std::collections::BTreeMap;

use serde_json::{Value, json};

use crate::doctor::Status;
use crate::stat::counters::{Metric, PortCounters};

/// Below this share of the expected bytes a cross-host stage moved
/// "(almost) nothing" over RDMA.
pub const MIN_SHARE: f64 = 0.1;

/// Bytes per packet assumed for a NIC that counts packets only (rxe): the
/// largest RoCE MTU, so that the expected packets are a lower bound.
pub const PACKET_BYTES: u64 = 4096;

/// Words in a counter's name that make it an error counter (rxe's
/// `retry_exceeded_err`, `out_of_seq_request`, `rcvd_seq_err`; eRDMA's and
/// others' retransmit and drop counters).
const ERROR_WORDS: [&str; 8] = [
    "retrans",
    "retry",
    "drop",
    "out_of_seq",
    "seq_err",
    "discard",
    "timeout",
    "_err",
];

/// Every RDMA port of this host with its counters, as JSON (what a rank
/// sends): `[{nic, port, rx_bytes, tx_bytes, rx_packets, tx_packets, errors}]`.
pub fn snapshot() -> Value {
    let list = erdma::devices();
    let mut out = Vec::new();
    for d in list.iter() {
        let dir = d.sysfs_path().to_path_buf();
        let ports = crate::stat::sysfs_ports(&dir);
        for &p in &ports {
            let pc = PortCounters::resolve(d.name(), p, &dir, ports.len() == 1, None);
            let s = pc.sample();
            let mut v = json!({"nic": d.name(), "port": p, "errors": error_counters(&dir, p)});
            for (i, m) in Metric::ALL.iter().enumerate() {
                v[m.key()] = json!(s.rdma[i]);
            }
            out.push(v);
        }
    }
    Value::Array(out)
}

/// The error counters of a port (and of the device, for single-port ones).
fn error_counters(dir: &std::path::Path, port: u8) -> BTreeMap<String, u64> {
    let mut m = BTreeMap::new();
    for sub in [
        format!("ports/{port}/hw_counters"),
        "hw_counters".to_owned(),
    ] {
        let Ok(rd) = std::fs::read_dir(dir.join(&sub)) else {
            continue;
        };
        for e in rd.flatten() {
            let name = e.file_name().to_string_lossy().into_owned();
            if !is_error_counter(&name) {
                continue;
            }
            let v = crate::input::read_text(e.path())
                .ok()
                .and_then(|s| s.trim().parse::<u64>().ok());
            if let Some(v) = v {
                m.entry(name).or_insert(v);
            }
        }
    }
    m
}

/// Whether a counter's name says it counts errors.
pub fn is_error_counter(name: &str) -> bool {
    ERROR_WORDS.iter().any(|w| name.contains(w))
}

/// One host and NIC during one stage.
#[derive(Debug, Clone, PartialEq)]
pub struct Row {
    /// The host.
    pub host: String,
    /// The NIC (`erdma_0`, `rxe0`; `name:port` for ports past the first).
    pub nic: String,
    /// `pairs`, `nccl host HOST all_reduce`, `nccl cluster all_reduce`.
    pub stage: String,
    /// Bytes sent (None: no counter).
    pub tx_bytes: Option<u64>,
    /// Bytes received.
    pub rx_bytes: Option<u64>,
    /// Packets sent.
    pub tx_packets: Option<u64>,
    /// Packets received.
    pub rx_packets: Option<u64>,
    /// The NIC's share of what the host had to send (None: not known).
    pub expected_bytes: Option<u64>,
    /// Error counters that moved.
    pub errors: BTreeMap<String, u64>,
    /// `ok`, `fail`, `warn` or `cannot prove`.
    pub verdict: String,
    /// Why, in one line.
    pub why: String,
}

/// What a stage had to move: the bytes each host sends to others (None:
/// unknown), whether it is a real NCCL run (a shortfall fails it) and the
/// likely causes to name when nothing moved.
#[derive(Debug, Clone, Default)]
pub struct Expect {
    /// Bytes each host had to send to the other hosts.
    pub host_bytes: Option<u64>,
    /// Nothing over RDMA is a failure (NCCL); else a finding (MPI over TCP).
    pub must_use_rdma: bool,
    /// The likely causes, from the doctor's NCCL checks.
    pub causes: String,
}

fn delta(before: &Value, after: &Value, key: &str) -> Option<u64> {
    let (b, a) = (before[key].as_u64()?, after[key].as_u64()?);
    a.checked_sub(b)
}

/// The rows of one host's NICs for `stage` from its two snapshots.
pub fn rows(host: &str, stage: &str, before: &Value, after: &Value, e: &Expect) -> Vec<Row> {
    let b = before.as_array().cloned().unwrap_or_default();
    let a = after.as_array().cloned().unwrap_or_default();
    let nics = a.len().max(1) as u64;
    let mut out = Vec::new();
    if a.is_empty() {
        out.push(Row {
            host: host.to_owned(),
            nic: "-".into(),
            stage: stage.to_owned(),
            tx_bytes: None,
            rx_bytes: None,
            tx_packets: None,
            rx_packets: None,
            expected_bytes: e.host_bytes,
            errors: BTreeMap::new(),
            verdict: "cannot prove".into(),
            why: "no RDMA device on this host to count on".into(),
        });
    }
    for now in &a {
        let Some(then) = b
            .iter()
            .find(|x| x["nic"] == now["nic"] && x["port"] == now["port"])
        else {
            continue;
        };
        let port = now["port"].as_u64().unwrap_or(1);
        let name = now["nic"].as_str().unwrap_or("?");
        let nic = if port == 1 {
            name.to_owned()
        } else {
            format!("{name}:{port}")
        };
        let mut errors = BTreeMap::new();
        for (k, v) in now["errors"].as_object().into_iter().flatten() {
            let moved = v
                .as_u64()
                .zip(then["errors"][k].as_u64())
                .and_then(|(x, y)| x.checked_sub(y));
            if let Some(d) = moved.filter(|&d| d > 0) {
                errors.insert(k.clone(), d);
            }
        }
        let r = Row {
            host: host.to_owned(),
            nic,
            stage: stage.to_owned(),
            tx_bytes: delta(then, now, "tx_bytes"),
            rx_bytes: delta(then, now, "rx_bytes"),
            tx_packets: delta(then, now, "tx_packets"),
            rx_packets: delta(then, now, "rx_packets"),
            expected_bytes: e.host_bytes.map(|h| h / nics),
            errors,
            verdict: String::new(),
            why: String::new(),
        };
        out.push(r);
    }
    // The host's NICs together against what the host had to send: NCCL
    // may use some of them only (NCCL_IB_HCA).
    let host_moved: u64 = out.iter().filter_map(moved_bytes).sum();
    for r in &mut out {
        if r.verdict.is_empty() {
            (r.verdict, r.why) = judge(r, e, host_moved);
        }
    }
    out
}

/// A row's verdict: the bytes (or packets) moved against the expectation.
/// What a row moved in bytes (packets x [`PACKET_BYTES`] where the
/// driver counts packets only); None without counters.
fn moved_bytes(r: &Row) -> Option<u64> {
    let bytes = r.tx_bytes.zip(r.rx_bytes).map(|(t, x)| t.max(x));
    let packets = r.tx_packets.zip(r.rx_packets).map(|(t, x)| t.max(x));
    bytes.or(packets.map(|p| p.saturating_mul(PACKET_BYTES)))
}

fn judge(r: &Row, e: &Expect, host_moved: u64) -> (String, String) {
    let bytes = r.tx_bytes.zip(r.rx_bytes).map(|(t, x)| t.max(x));
    let packets = r.tx_packets.zip(r.rx_packets).map(|(t, x)| t.max(x));
    let (moved, unit, scale) = match (bytes, packets) {
        (Some(b), _) => (b, "bytes", 1),
        (None, Some(p)) => (p, "packets (no byte counters)", PACKET_BYTES),
        (None, None) => {
            return (
                "cannot prove".into(),
                "the driver has no RDMA traffic counters for this port".into(),
            );
        }
    };
    let errs = if r.errors.is_empty() {
        String::new()
    } else {
        let list: Vec<String> = r.errors.iter().map(|(k, v)| format!("{k} +{v}")).collect();
        format!("; error counters moved: {}", list.join(", "))
    };
    match e.host_bytes {
        Some(want) if want > 0 => {
            let need = r.expected_bytes.unwrap_or(want) / scale;
            let share = host_moved as f64 / want.max(1) as f64;
            if share >= MIN_SHARE {
                (
                    "ok".into(),
                    format!(
                        "{moved} {unit} moved, about {need} expected per NIC; the host's NICs \
                         {host_moved} B of about {want} B{errs}"
                    ),
                )
            } else if e.must_use_rdma {
                (
                    "fail".into(),
                    format!(
                        "not over RDMA: {moved} {unit} moved, about {need} expected: {}{errs}",
                        e.causes
                    ),
                )
            } else {
                (
                    "warn".into(),
                    format!("not over RDMA: {moved} {unit} moved, about {need} expected{errs}"),
                )
            }
        }
        _ => {
            let v = if r.errors.is_empty() { "ok" } else { "warn" };
            (v.into(), format!("{moved} {unit} moved{errs}"))
        }
    }
}

/// A pair-stage row against what ran on its NIC: counters that did not
/// move while erdma-perf runs on the NIC succeeded fail (the counters, or
/// the runs, are not what they seem); a NIC no run used says so.
pub fn judge_pairs(r: &mut Row, used_ok: bool) {
    if r.verdict == "cannot prove" {
        return;
    }
    let moved = r.tx_bytes.or(r.tx_packets).unwrap_or(0) + r.rx_bytes.or(r.rx_packets).unwrap_or(0);
    if used_ok && moved == 0 {
        r.verdict = "fail".into();
        r.why = "the pair runs on this NIC succeeded but its counters did not move".into();
    } else if !used_ok && moved == 0 {
        r.why = "no successful pair run used this NIC".into();
    }
}

/// The `traffic` section: every row, its status and text.
#[derive(Debug, Clone, Default)]
pub struct Proof {
    /// Every host, NIC and stage.
    pub rows: Vec<Row>,
}

impl Proof {
    /// fail if a row failed; warn for "cannot prove", a finding or errors.
    pub fn status(&self) -> Status {
        self.rows
            .iter()
            .map(|r| match r.verdict.as_str() {
                "ok" => Status::Ok,
                "fail" => Status::Fail,
                _ => Status::Warn,
            })
            .max()
            .unwrap_or(Status::Ok)
    }

    /// The `traffic` object of the cluster's JSON document.
    pub fn to_json(&self) -> Value {
        json!({
            "status": self.status(),
            "rows": self.rows.iter().map(|r| json!({
                "host": r.host, "nic": r.nic, "stage": r.stage,
                "tx_bytes": r.tx_bytes, "rx_bytes": r.rx_bytes,
                "tx_packets": r.tx_packets, "rx_packets": r.rx_packets,
                "expected_bytes": r.expected_bytes, "errors": r.errors,
                "verdict": r.verdict, "why": r.why,
            })).collect::<Vec<_>>(),
        })
    }

    /// The text section.
    pub fn render_text(&self) -> String {
        let mut s = String::from(
            "# traffic proof: RDMA port counters around each stage (per host and NIC)\n",
        );
        let hw = self
            .rows
            .iter()
            .map(|r| r.host.len())
            .max()
            .unwrap_or(4)
            .max(4);
        let nw = self
            .rows
            .iter()
            .map(|r| r.nic.len())
            .max()
            .unwrap_or(3)
            .max(3);
        let sw = self
            .rows
            .iter()
            .map(|r| r.stage.len())
            .max()
            .unwrap_or(5)
            .max(5);
        s.push_str(&format!(
            "{:<hw$}  {:<nw$}  {:<sw$}  {:>14}  {:>14}  {:>14}  verdict\n",
            "host", "nic", "stage", "tx", "rx", "expected"
        ));
        let num = |b: Option<u64>, p: Option<u64>| match (b, p) {
            (Some(b), _) => format!("{b} B"),
            (None, Some(p)) => format!("{p} pkt"),
            _ => "n/a".into(),
        };
        for r in &self.rows {
            s.push_str(&format!(
                "{:<hw$}  {:<nw$}  {:<sw$}  {:>14}  {:>14}  {:>14}  {}: {}\n",
                r.host,
                r.nic,
                r.stage,
                num(r.tx_bytes, r.tx_packets),
                num(r.rx_bytes, r.rx_packets),
                r.expected_bytes.map_or("-".into(), |e| format!("{e} B")),
                r.verdict,
                r.why
            ));
        }
        s
    }
}

/// The likely causes of a cross-host NCCL run that did not use RDMA, from
/// the doctor's NCCL checks of the hosts (their warnings and failures), or
/// the usual suspects when those passed.
pub fn causes(reports: &[Value]) -> String {
    let mut found: Vec<String> = Vec::new();
    for r in reports {
        for c in r["checks"].as_array().into_iter().flatten() {
            let id = c["id"].as_str().unwrap_or("");
            let bad = matches!(c["status"].as_str(), Some("warn" | "fail"));
            if bad && id.starts_with("nccl") {
                let f = format!("{id}: {}", c["found"].as_str().unwrap_or(""));
                if !found.contains(&f) {
                    found.push(f);
                }
            }
        }
    }
    if found.is_empty() {
        "check NCCL_IB_DISABLE (must not be 1), NCCL_IB_HCA (must name the RDMA devices), \
         NCCL_IB_GID_INDEX, and whether NCCL fell back to sockets (NCCL_DEBUG=INFO says \
         NET/Socket)"
            .into()
    } else {
        format!("the doctor found {}", found.join("; "))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn snap(tx: Option<u64>, pkts: Option<u64>, retry: u64) -> Value {
        json!([{"nic": "rxe0", "port": 1, "tx_bytes": tx, "rx_bytes": tx,
                "tx_packets": pkts, "rx_packets": pkts,
                "errors": {"retry_exceeded_err": retry}}])
    }

    #[test]
    fn bytes_against_the_expectation() {
        let e = Expect {
            host_bytes: Some(1000),
            must_use_rdma: true,
            causes: "NCCL_IB_DISABLE=1".into(),
        };
        let ok = rows(
            "a",
            "nccl cluster all_reduce",
            &snap(Some(0), None, 0),
            &snap(Some(900), None, 0),
            &e,
        );
        assert_eq!(ok[0].verdict, "ok", "{ok:?}");
        assert_eq!(ok[0].tx_bytes, Some(900));
        let bad = rows(
            "a",
            "s",
            &snap(Some(0), None, 0),
            &snap(Some(5), None, 0),
            &e,
        );
        assert_eq!(bad[0].verdict, "fail");
        assert!(
            bad[0].why.starts_with(
                "not over RDMA: 5 bytes moved, about 1000 expected: NCCL_IB_DISABLE=1"
            ),
            "{}",
            bad[0].why
        );
        let mpi = Expect {
            must_use_rdma: false,
            ..e.clone()
        };
        assert_eq!(
            rows(
                "a",
                "s",
                &snap(Some(0), None, 0),
                &snap(Some(5), None, 0),
                &mpi
            )[0]
            .verdict,
            "warn"
        );
    }

    #[test]
    fn the_host_s_nics_together() {
        let e = Expect {
            host_bytes: Some(1000),
            must_use_rdma: true,
            causes: String::new(),
        };
        let two = |a: u64, b: u64| {
            json!([{"nic": "erdma_0", "port": 1, "tx_bytes": a, "rx_bytes": a, "errors": {}},
                   {"nic": "erdma_1", "port": 1, "tx_bytes": b, "rx_bytes": b, "errors": {}}])
        };
        // NCCL used erdma_0 only (NCCL_IB_HCA): the host moved its bytes.
        let r = rows("a", "s", &two(0, 0), &two(950, 0), &e);
        assert_eq!(
            (r[0].verdict.as_str(), r[1].verdict.as_str()),
            ("ok", "ok"),
            "{r:?}"
        );
        assert_eq!(r[0].expected_bytes, Some(500));
        let r = rows("a", "s", &two(0, 0), &two(20, 20), &e);
        assert_eq!(r[1].verdict, "fail", "{r:?}");
    }

    #[test]
    fn missing_counters_cannot_prove_and_packets_stand_in() {
        let e = Expect {
            host_bytes: Some(4096 * 100),
            must_use_rdma: true,
            causes: String::new(),
        };
        let none = rows("a", "s", &snap(None, None, 0), &snap(None, None, 0), &e);
        assert_eq!(none[0].verdict, "cannot prove");
        assert_eq!(none[0].tx_bytes, None, "never 0");
        let pk = rows(
            "a",
            "s",
            &snap(None, Some(10), 0),
            &snap(None, Some(60), 3),
            &e,
        );
        assert_eq!(pk[0].verdict, "ok", "{pk:?}");
        assert_eq!(pk[0].tx_packets, Some(50));
        assert_eq!(pk[0].errors.get("retry_exceeded_err"), Some(&3));
        assert!(pk[0].why.contains("retry_exceeded_err +3"), "{}", pk[0].why);
        let empty = rows("a", "s", &json!([]), &json!([]), &e);
        assert_eq!(empty[0].verdict, "cannot prove");
        assert_eq!(empty[0].nic, "-");
        let p = Proof { rows: none };
        assert_eq!(p.status(), Status::Warn);
        assert!(
            p.render_text()
                .contains("cannot prove: the driver has no RDMA"),
            "{}",
            p.render_text()
        );
        assert_eq!(Proof::default().status(), Status::Ok);
        assert_eq!(p.to_json()["rows"][0]["tx_bytes"], Value::Null);
    }

    #[test]
    fn pair_rows_against_their_runs() {
        let e = Expect::default();
        let mut still = rows(
            "a",
            "pairs",
            &snap(None, Some(5), 0),
            &snap(None, Some(5), 0),
            &e,
        );
        judge_pairs(&mut still[0], true);
        assert_eq!(still[0].verdict, "fail");
        let mut idle = rows(
            "a",
            "pairs",
            &snap(None, Some(5), 0),
            &snap(None, Some(5), 0),
            &e,
        );
        judge_pairs(&mut idle[0], false);
        assert_eq!(
            (idle[0].verdict.as_str(), idle[0].why.as_str()),
            ("ok", "no successful pair run used this NIC")
        );
        let mut moved = rows(
            "a",
            "pairs",
            &snap(None, Some(5), 0),
            &snap(None, Some(9), 0),
            &e,
        );
        judge_pairs(&mut moved[0], true);
        assert_eq!(moved[0].verdict, "ok");
        assert_eq!(moved[0].why, "4 packets (no byte counters) moved");
    }

    #[test]
    fn error_names() {
        for n in [
            "retry_exceeded_err",
            "out_of_seq_request",
            "rcvd_seq_err",
            "tx_drop_cnt",
            "retrans_cnt",
        ] {
            assert!(is_error_counter(n), "{n}");
        }
        for n in ["sent_pkts", "rcvd_pkts", "tx_bytes_cnt"] {
            assert!(!is_error_counter(n), "{n}");
        }
    }

    #[test]
    fn causes_from_the_doctor() {
        let r =
            json!({"checks": [{"id": "nccl.env", "status": "fail", "found": "NCCL_IB_DISABLE=1"}]});
        assert_eq!(causes(&[r]), "the doctor found nccl.env: NCCL_IB_DISABLE=1");
        assert!(causes(&[]).contains("NCCL_IB_HCA"));
    }
}
