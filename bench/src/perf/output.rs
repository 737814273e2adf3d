//! Output: perftest's text layout (so that its parsers read ours), our JSON
//! document (`--json`: tool, version, host, date, command, then the run),
//! CSV (`--csv`), and perftest's `--out_json` file with perftest's keys (as
//! valid JSON; perftest writes unquoted keys and trailing commas).

use std::io::Write;
use std::path::Path;

use serde_json::{Value, json};

use super::cases::{Kind, Verb};
use super::error::{PerfError, PerfResult};
use super::options::{Options, Verbosity};
use super::report::{BwReport, LatReport};
use super::wire::keys::Dest;

/// perftest's `RESULT_LINE`.
pub const RESULT_LINE: &str =
    "---------------------------------------------------------------------------------------";

/// Result header of BW tests (`RESULT_FMT`/`RESULT_FMT_G`).
pub fn bw_header(gbits: bool) -> &'static str {
    if gbits {
        " #bytes     #iterations    BW peak[Gb/sec]    BW average[Gb/sec]   MsgRate[Mpps]"
    } else {
        " #bytes     #iterations    BW peak[MB/sec]    BW average[MB/sec]   MsgRate[Mpps]"
    }
}

/// Result header of latency tests (`RESULT_FMT_LAT`, `RESULT_FMT_LAT_DUR`).
pub fn lat_header(duration: bool) -> &'static str {
    if duration {
        " #bytes        #iterations       t_avg[usec]    tps average"
    } else {
        " #bytes #iterations    t_min[usec]    t_max[usec]  t_typical[usec]    t_avg[usec]    t_stdev[usec]   99% percentile[usec]   99.9% percentile[usec] "
    }
}

/// A BW result line (`REPORT_FMT`, or `REPORT_FMT_EXT` below 0.1 Gb/s).
pub fn bw_line(r: &BwReport) -> String {
    if r.gbits && r.bw_avg < 0.1 {
        format!(
            " {:<7}    {}           {:<7.6}            {:<7.6}            {:<7.6}",
            r.size, r.iters, r.bw_peak, r.bw_avg, r.msg_rate
        )
    } else {
        format!(
            " {:<7}    {:<10}       {:<7.2}            {:<7.2}\t\t   {:<7.6}",
            r.size, r.iters, r.bw_peak, r.bw_avg, r.msg_rate
        )
    }
}

/// A latency result line (`REPORT_FMT_LAT`, `REPORT_FMT_LAT_DUR`).
pub fn lat_line(r: &LatReport) -> String {
    match r.tps {
        Some(tps) => format!(
            " {:<7}       {}            {:<7.2}        {:<7.2}",
            r.size, r.iters, r.t_avg, tps
        ),
        None => format!(
            " {:<7} {}          {:<7.2}        {:<7.2}      {:<7.2}  \t       {:<7.2}     \t{:<7.2}\t\t{:<7.2} \t\t{:<7.2}",
            r.size, r.iters, r.t_min, r.t_max, r.t_typical, r.t_avg, r.t_stdev, r.p99, r.p99_9
        ),
    }
}

/// C's `%#0Nx`: `0x`-prefixed and zero-padded to `width` characters, but a
/// zero value is just zeros.
pub fn hex_alt(v: u64, width: usize) -> String {
    if v == 0 {
        format!("{:0width$}", 0)
    } else {
        format!("{v:#0width$x}")
    }
}

/// One `ctx_print_pingpong_data` line (plus its GID line).
pub fn dest_lines(side: &str, d: &Dest, verb_fields: Option<Verb>, gid: bool) -> String {
    let mut s = format!(
        " {side} address: LID {} QPN {} PSN {}",
        hex_alt(u64::from(d.lid), 4),
        hex_alt(u64::from(d.qpn), 6),
        hex_alt(u64::from(d.psn), 6)
    );
    if verb_fields == Some(Verb::Read) {
        s.push_str(&format!(" OUT {}", hex_alt(u64::from(d.out_reads), 4)));
    }
    if matches!(verb_fields, Some(Verb::Read) | Some(Verb::Write)) {
        s.push_str(&format!(
            " RKey {} VAddr {}",
            hex_alt(u64::from(d.rkey), 8),
            hex_alt(d.vaddr, 16)
        ));
    }
    s.push('\n');
    if gid {
        // perftest prints the GID bytes with %02d.
        let g: Vec<String> = d.gid.iter().map(|b| format!("{b:02}")).collect();
        s.push_str(&format!(" GID: {}\n", g.join(":")));
    }
    s
}

/// The fields of perftest's test information block.
#[derive(Debug, Clone)]
pub struct TestInfo {
    /// `RDMA_Write BW`, ...
    pub title: String,
    /// Device name.
    pub device: String,
    /// QPs.
    pub qps: u32,
    /// `IB` or `IW`.
    pub transport: &'static str,
    /// Whether this side sends (prints the TX depth).
    pub sender: bool,
    /// TX depth.
    pub tx_depth: u32,
    /// RX depth when this side receives SENDs.
    pub rx_depth: Option<u32>,
    /// CQ moderation (BW tests).
    pub cq_mod: Option<u32>,
    /// MTU in bytes.
    pub mtu: u32,
    /// `IB`, `Ethernet`.
    pub link: &'static str,
    /// GID index when GIDs are used.
    pub gid_index: Option<u32>,
    /// Inline size, or (READ/atomics) outstanding reads.
    pub inline_or_reads: (bool, u32),
    /// `-R`.
    pub rdma_cm: bool,
    /// `Ethernet` or `rdma_cm`.
    pub method: &'static str,
    /// Server with `-R`: the waiting lines.
    pub cm_server: bool,
    /// Relaxed ordering.
    pub relaxed: bool,
}

impl TestInfo {
    /// perftest's `ctx_print_test_info`.
    pub fn text(&self) -> String {
        let onoff = |b: bool| if b { "ON" } else { "OFF" };
        let mut s = format!("{RESULT_LINE}\n                    {} Test\n", self.title);
        s.push_str(&format!(
            " Dual-port       : OFF\t\tDevice         : {}\n",
            self.device
        ));
        s.push_str(&format!(
            " Number of qps   : {}\t\tTransport type : {}\n",
            self.qps, self.transport
        ));
        s.push_str(" Connection type : RC\t\tUsing SRQ      : OFF\n");
        s.push_str(&format!(" PCIe relax order: {}\n", onoff(self.relaxed)));
        s.push_str(" ibv_wr* API     : OFF\n");
        if self.sender {
            s.push_str(&format!(" TX depth        : {}\n", self.tx_depth));
        }
        if let Some(rx) = self.rx_depth {
            s.push_str(&format!(" RX depth        : {rx}\n"));
        }
        if let Some(q) = self.cq_mod {
            s.push_str(&format!(" CQ Moderation   : {q}\n"));
        }
        s.push_str(&format!(" Mtu             : {}[B]\n", self.mtu));
        s.push_str(&format!(" Link type       : {}\n", self.link));
        if let Some(g) = self.gid_index {
            s.push_str(&format!(" GID index       : {g}\n"));
        }
        match self.inline_or_reads {
            (false, n) => s.push_str(&format!(" Max inline data : {n}[B]\n")),
            (true, n) => s.push_str(&format!(" Outstand reads  : {n}\n")),
        }
        s.push_str(&format!(" rdma_cm QPs\t : {}\n", onoff(self.rdma_cm)));
        s.push_str(&format!(" Data ex. method : {}", self.method));
        if self.cm_server {
            s.push_str(&format!(
                "\n{RESULT_LINE}\n Waiting for client rdma_cm QP to connect\n Please run the same command with the IB/RoCE interface IP"
            ));
        }
        s.push('\n');
        s.push_str(RESULT_LINE);
        s.push('\n');
        s
    }

    /// perftest's `write_test_info_to_file` keys.
    pub fn perftest_json(&self) -> Value {
        let mut m = serde_json::Map::new();
        m.insert(
            "test".into(),
            json!(format!("{}_Test", self.title.replace(' ', "_"))),
        );
        m.insert("Dual_port".into(), json!("OFF"));
        m.insert("Device".into(), json!(self.device));
        m.insert("Number_of_qps".into(), json!(self.qps));
        m.insert("Transport_type".into(), json!(self.transport));
        m.insert("Connection_type".into(), json!("RC"));
        m.insert("Using_SRQ".into(), json!("OFF"));
        m.insert(
            "PCIe_relax_order".into(),
            json!(if self.relaxed { "ON" } else { "OFF" }),
        );
        m.insert("ibv_wr_API".into(), json!("OFF"));
        if self.sender {
            m.insert("TX_depth".into(), json!(self.tx_depth));
        }
        if let Some(rx) = self.rx_depth {
            m.insert("RX_depth".into(), json!(rx));
        }
        if let Some(q) = self.cq_mod {
            m.insert("CQ_Moderation".into(), json!(q));
        }
        m.insert("Mtu".into(), json!(self.mtu));
        m.insert("Link_type".into(), json!(self.link));
        if let Some(g) = self.gid_index {
            m.insert("GID_index".into(), json!(g));
        }
        match self.inline_or_reads {
            (false, n) => m.insert("Max_inline_data".into(), json!(n)),
            (true, n) => m.insert("Outstand_reads".into(), json!(n)),
        };
        m.insert(
            "rdma_cm_QPs".into(),
            json!(if self.rdma_cm { "ON" } else { "OFF" }),
        );
        m.insert("Data_ex_method".into(), json!(self.method));
        Value::Object(m)
    }
}

/// A result row.
#[derive(Debug, Clone, Copy)]
pub enum Row {
    /// Bandwidth (this side's, or the peer's on a passive server).
    Bw(BwReport),
    /// Latency.
    Lat(LatReport),
}

/// Collects output: prints the text report as it goes (unless `--json` or
/// `--output`), keeps the rows for JSON, CSV and `--out_json`.
pub struct Output {
    full_text: bool,
    verbosity: Verbosity,
    json: bool,
    /// Rows reported.
    pub rows: Vec<Row>,
    /// The test information, once known.
    pub info: Option<TestInfo>,
    /// Extra facts for our JSON (`peer`, `memory`, `verify`, ...).
    pub facts: serde_json::Map<String, Value>,
}

impl Output {
    /// An output for these options.
    pub fn new(o: &Options) -> Output {
        Output {
            full_text: o.verbosity == Verbosity::Full && !o.json,
            verbosity: o.verbosity,
            json: o.json,
            rows: Vec::new(),
            info: None,
            facts: serde_json::Map::new(),
        }
    }

    /// Text of the full report (suppressed with `--json`/`--output`).
    pub fn text(&mut self, s: &str) {
        if self.full_text {
            let mut out = std::io::stdout().lock();
            let _ = out.write_all(s.as_bytes());
            let _ = out.flush();
        }
    }

    /// A text line.
    pub fn line(&mut self, s: &str) {
        self.text(&format!("{s}\n"));
    }

    /// Records (and prints) a result row.
    pub fn row(&mut self, r: Row) {
        match r {
            Row::Bw(b) => {
                self.line(&bw_line(&b));
                match self.verbosity {
                    Verbosity::Bandwidth => println!("{:.6}", b.bw_avg),
                    Verbosity::MessageRate => println!("{:.6}", b.msg_rate),
                    _ => {}
                }
            }
            Row::Lat(l) => {
                self.line(&lat_line(&l));
                if self.verbosity == Verbosity::Latency {
                    println!("{:.6}", l.t_avg);
                }
            }
        }
        self.rows.push(r);
    }

    /// Whether the JSON document goes to stdout at the end.
    pub fn wants_json(&self) -> bool {
        self.json
    }
}

/// The row as our JSON.
pub fn row_json(r: &Row) -> Value {
    match r {
        Row::Bw(b) => json!({
            "bytes": b.size,
            "iterations": b.iters,
            "bw_peak_gbps": b.gbps(b.bw_peak),
            "bw_avg_gbps": b.gbps(b.bw_avg),
            "bw_peak_mib_s": b.mibps(b.bw_peak),
            "bw_avg_mib_s": b.mibps(b.bw_avg),
            "msg_rate_mpps": b.msg_rate,
        }),
        Row::Lat(l) => match l.tps {
            Some(tps) => json!({
                "bytes": l.size, "iterations": l.iters, "t_avg_us": l.t_avg, "tps": tps,
            }),
            None => json!({
                "bytes": l.size,
                "iterations": l.iters,
                "t_min_us": l.t_min,
                "t_max_us": l.t_max,
                "t_typical_us": l.t_typical,
                "t_avg_us": l.t_avg,
                "t_stdev_us": l.t_stdev,
                "t_p99_us": l.p99,
                "t_p99_9_us": l.p99_9,
            }),
        },
    }
}

/// perftest's `results` object for one row.
pub fn row_perftest_json(r: &Row) -> Value {
    let round = |v: f64, d: i32| (v * 10f64.powi(d)).round() / 10f64.powi(d);
    match r {
        Row::Bw(b) => {
            let d = if b.gbits && b.bw_avg < 0.1 { 6 } else { 2 };
            json!({
                "MsgSize": b.size,
                "n_iterations": b.iters,
                "BW_peak": round(b.bw_peak, d),
                "BW_average": round(b.bw_avg, d),
                "MsgRate": round(b.msg_rate, 6),
            })
        }
        Row::Lat(l) => match l.tps {
            Some(tps) => json!({
                "MsgSize": l.size, "n_iterations": l.iters,
                "t_avg": round(l.t_avg, 2), "tps_average": round(tps, 2),
            }),
            None => json!({
                "MsgSize": l.size,
                "n_iterations": l.iters,
                "t_min": round(l.t_min, 2),
                "t_max": round(l.t_max, 2),
                "t_typical": round(l.t_typical, 2),
                "t_avg": round(l.t_avg, 2),
                "t_stdev": round(l.t_stdev, 2),
                "percentile_99": round(l.p99, 2),
                "percentile_99.9": round(l.p99_9, 2),
            }),
        },
    }
}

/// Writes perftest's `--out_json` file: `test_info`, `results` (the last
/// size, as perftest leaves it) and `results_all` (every size).
pub fn write_perftest_json(path: &Path, out: &Output) -> PerfResult<()> {
    let Some(info) = &out.info else { return Ok(()) };
    let Some(last) = out.rows.last() else {
        return Ok(());
    };
    let doc = json!({
        "test_info": info.perftest_json(),
        "results": row_perftest_json(last),
        "results_all": out.rows.iter().map(row_perftest_json).collect::<Vec<_>>(),
    });
    write_file(
        path,
        &format!(
            "{}\n",
            serde_json::to_string_pretty(&doc).unwrap_or_default()
        ),
    )
}

/// `path` opened for writing: a device or FIFO as such (see
/// `nccltests::output::file::open_special`), else created or, with
/// `append`, appended to.
fn open_output(path: &Path, append: bool) -> std::io::Result<std::fs::File> {
    let special = crate::nccltests::output::file::open_special(&path.to_string_lossy())?;
    match special {
        Some(f) => Ok(f),
        None if append => std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(path),
        None => std::fs::File::create(path),
    }
}

fn write_file(path: &Path, text: &str) -> PerfResult<()> {
    use std::io::Write;
    let written = open_output(path, false).and_then(|mut f| f.write_all(text.as_bytes()));
    written.map_err(|e| {
        PerfError::Usage(format!(
            "write {}: {}: check the directory and permissions",
            path.display(),
            super::wire::eth::io_text(&e)
        ))
    })
}

/// The host name (`gethostname`).
pub fn hostname() -> String {
    let mut buf = [0u8; 256];
    // SAFETY: buf is writable for its length; gethostname NUL-terminates
    // within it or truncates.
    let rc = unsafe { libc::gethostname(buf.as_mut_ptr().cast(), buf.len()) };
    if rc != 0 {
        return String::new();
    }
    let end = buf.iter().position(|&b| b == 0).unwrap_or(buf.len());
    String::from_utf8_lossy(&buf[..end]).into_owned()
}

/// Now as RFC 3339 UTC (`2026-12-04T10:11:12Z`).
pub fn now_rfc3339() -> String {
    let secs = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs() as i64)
        .unwrap_or(0);
    rfc3339(secs)
}

/// `secs` since the epoch as RFC 3339 UTC.
pub fn rfc3339(secs: i64) -> String {
    let days = secs.div_euclid(86400);
    let rem = secs.rem_euclid(86400);
    // Howard Hinnant's civil_from_days.
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36524 - doe / 146_096) / 365;
    let y = yoe + era * 400;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = if m <= 2 { y + 1 } else { y };
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}Z",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60
    )
}

/// Our JSON document.
pub fn json_document(o: &Options, out: &Output, error: Option<&PerfError>) -> Value {
    let mut doc = serde_json::Map::new();
    doc.insert("tool".into(), json!("erdma-perf"));
    doc.insert("version".into(), json!(env!("CARGO_PKG_VERSION")));
    doc.insert("host".into(), json!(hostname()));
    doc.insert("date".into(), json!(now_rfc3339()));
    doc.insert("command".into(), json!(o.argv));
    doc.insert("test".into(), json!(o.case.name));
    doc.insert(
        "role".into(),
        json!(if o.is_client() { "client" } else { "server" }),
    );
    doc.insert("server".into(), json!(o.server));
    if let Some(info) = &out.info {
        doc.insert("title".into(), json!(info.title));
        doc.insert("device".into(), json!(info.device));
        doc.insert("transport".into(), json!(info.transport));
        doc.insert("link_layer".into(), json!(info.link));
        doc.insert("gid_index".into(), json!(info.gid_index));
        doc.insert("mtu".into(), json!(info.mtu));
        doc.insert("qps".into(), json!(info.qps));
        doc.insert("tx_depth".into(), json!(info.tx_depth));
        doc.insert("rx_depth".into(), json!(info.rx_depth));
        doc.insert("cq_mod".into(), json!(info.cq_mod));
        let (reads, n) = info.inline_or_reads;
        doc.insert(
            if reads { "outstanding_reads" } else { "inline" }.into(),
            json!(n),
        );
        doc.insert("exchange".into(), json!(info.method));
    }
    doc.insert("rdma_cm".into(), json!(o.rdma_cm));
    doc.insert("bidirectional".into(), json!(o.duplex));
    doc.insert(
        "kind".into(),
        json!(if o.case.kind == Kind::Bw {
            "bandwidth"
        } else {
            "latency"
        }),
    );
    for (k, v) in &out.facts {
        doc.insert(k.clone(), v.clone());
    }
    doc.insert(
        "results".into(),
        json!(out.rows.iter().map(row_json).collect::<Vec<_>>()),
    );
    doc.insert(
        "error".into(),
        match error {
            Some(e) => json!({"message": e.to_string(), "exit_status": e.exit_code()}),
            None => Value::Null,
        },
    );
    Value::Object(doc)
}

/// Appends the rows to `--csv FILE` (header when the file is new or empty).
pub fn write_csv(path: &Path, o: &Options, out: &Output) -> PerfResult<()> {
    let io = |e: std::io::Error| {
        PerfError::Usage(format!(
            "write {}: {}: check the directory and permissions",
            path.display(),
            super::wire::eth::io_text(&e)
        ))
    };
    let fresh = std::fs::metadata(path)
        .map(|m| m.len() == 0)
        .unwrap_or(true);
    let f = open_output(path, true).map_err(io)?;
    let mut w = csv::WriterBuilder::new().has_headers(false).from_writer(f);
    let csv_err = |e: csv::Error| PerfError::Usage(format!("write {}: {e}", path.display()));
    if fresh {
        w.write_record([
            "tool",
            "host",
            "date",
            "test",
            "role",
            "device",
            "bytes",
            "iterations",
            "bw_peak_gbps",
            "bw_avg_gbps",
            "msg_rate_mpps",
            "t_min_us",
            "t_max_us",
            "t_typical_us",
            "t_avg_us",
            "t_stdev_us",
            "t_p99_us",
            "t_p99_9_us",
        ])
        .map_err(csv_err)?;
    }
    let host = hostname();
    let date = now_rfc3339();
    let device = out
        .info
        .as_ref()
        .map(|i| i.device.clone())
        .unwrap_or_default();
    let role = if o.is_client() { "client" } else { "server" };
    let f = |v: f64| format!("{v:.6}");
    for r in &out.rows {
        let mut rec = vec![
            "erdma-perf".to_string(),
            host.clone(),
            date.clone(),
            o.case.name.to_string(),
            role.to_string(),
            device.clone(),
        ];
        match r {
            Row::Bw(b) => {
                rec.extend([
                    b.size.to_string(),
                    b.iters.to_string(),
                    f(b.gbps(b.bw_peak)),
                    f(b.gbps(b.bw_avg)),
                    f(b.msg_rate),
                ]);
                rec.extend(std::iter::repeat_n(String::new(), 7));
            }
            Row::Lat(l) => {
                rec.extend([
                    l.size.to_string(),
                    l.iters.to_string(),
                    String::new(),
                    String::new(),
                    String::new(),
                ]);
                match l.tps {
                    Some(_) => {
                        rec.extend([
                            String::new(),
                            String::new(),
                            String::new(),
                            f(l.t_avg),
                            String::new(),
                            String::new(),
                            String::new(),
                        ]);
                    }
                    None => rec.extend([
                        f(l.t_min),
                        f(l.t_max),
                        f(l.t_typical),
                        f(l.t_avg),
                        f(l.t_stdev),
                        f(l.p99),
                        f(l.p99_9),
                    ]),
                }
            }
        }
        w.write_record(&rec).map_err(csv_err)?;
    }
    w.flush().map_err(io)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn outputs_to_devices_and_fifos_never_block() {
        write_file(Path::new("/dev/null"), "x\n").unwrap();
        let dir = std::env::temp_dir().join(format!("perf-fifo-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let fifo = dir.join("out.json");
        let c = std::ffi::CString::new(fifo.to_str().unwrap()).unwrap();
        // SAFETY: a NUL-terminated path.
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
        // No reader: an error naming the file, not a wait for ever.
        let e = write_file(&fifo, "x\n").unwrap_err().to_string();
        assert!(
            e.contains("out.json") && e.contains("a FIFO without a reader"),
            "{e}"
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn c_alternate_hex() {
        assert_eq!(hex_alt(0, 4), "0000");
        assert_eq!(hex_alt(0x11, 6), "0x0011");
        assert_eq!(hex_alt(0x80e736, 6), "0x80e736");
        assert_eq!(hex_alt(0x270, 8), "0x000270");
        assert_eq!(hex_alt(0x55729f8c6000, 16), "0x0055729f8c6000");
    }

    #[test]
    fn lines_match_perftest() {
        let d = Dest {
            qpn: 0x11,
            psn: 0x80e736,
            rkey: 0x270,
            vaddr: 0x55729f8c6000,
            gid: [0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 255, 255, 10, 99, 0, 1],
            ..Dest::default()
        };
        assert_eq!(
            dest_lines("local", &d, Some(Verb::Write), true),
            " local address: LID 0000 QPN 0x0011 PSN 0x80e736 RKey 0x000270 VAddr 0x0055729f8c6000\n GID: 00:00:00:00:00:00:00:00:00:00:255:255:10:99:00:01\n"
        );
        let r = BwReport {
            size: 65536,
            iters: 200,
            bw_peak: 0.19,
            bw_avg: 0.18,
            msg_rate: 0.000348,
            gbits: true,
        };
        assert_eq!(
            bw_line(&r),
            " 65536      200              0.19               0.18   \t\t   0.000348"
        );
        let slow = BwReport { bw_avg: 0.05, ..r };
        assert!(bw_line(&slow).contains("0.050000"));
        let l = LatReport {
            size: 2,
            iters: 200,
            t_min: 30.21,
            t_max: 371.36,
            t_typical: 32.84,
            t_avg: 41.09,
            t_stdev: 28.08,
            p99: 241.37,
            p99_9: 371.36,
            tps: None,
        };
        assert_eq!(
            lat_line(&l),
            " 2       200          30.21          371.36       32.84    \t       41.09       \t28.08  \t\t241.37  \t\t371.36 "
        );
    }

    fn sample_output() -> (Options, Output) {
        let argv: Vec<String> = ["erdma-perf", "write_bw", "--report_gbits", "10.0.0.2"]
            .iter()
            .map(|s| s.to_string())
            .collect();
        let o = match crate::perf::options::parse(&argv).unwrap() {
            crate::perf::options::Parsed::Run(o) => *o,
            _ => unreachable!(),
        };
        let mut out = Output::new(&o);
        out.info = Some(TestInfo {
            title: "RDMA_Write BW".into(),
            device: "rxe0".into(),
            qps: 1,
            transport: "IB",
            sender: true,
            tx_depth: 128,
            rx_depth: None,
            cq_mod: Some(1),
            mtu: 1024,
            link: "Ethernet",
            gid_index: Some(1),
            inline_or_reads: (false, 0),
            rdma_cm: false,
            method: "Ethernet",
            cm_server: false,
            relaxed: true,
        });
        out.rows.push(Row::Bw(BwReport {
            size: 65536,
            iters: 5000,
            bw_peak: 1.5,
            bw_avg: 1.25,
            msg_rate: 0.002384,
            gbits: true,
        }));
        (o, out)
    }

    #[test]
    fn json_document_has_the_common_fields() {
        let (o, out) = sample_output();
        let d = json_document(&o, &out, None);
        for k in [
            "tool", "version", "host", "date", "command", "test", "results", "device",
        ] {
            assert!(d.get(k).is_some(), "{k} missing: {d}");
        }
        assert_eq!(d["tool"], "erdma-perf");
        assert_eq!(d["role"], "client");
        assert_eq!(d["results"][0]["bw_avg_gbps"], 1.25);
        assert!(
            (d["results"][0]["bw_avg_mib_s"].as_f64().unwrap() - 1.25 * 125e6 / 1048576.0).abs()
                < 1e-9
        );
        assert!(d["error"].is_null());
        let e = PerfError::Peer("gone".into());
        let d = json_document(&o, &out, Some(&e));
        assert_eq!(d["error"]["exit_status"], 6);
    }

    #[test]
    fn perftest_json_and_csv_files() {
        let (o, out) = sample_output();
        let dir = std::env::temp_dir().join(format!("erdma-perf-out-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let pj = dir.join("pt.json");
        write_perftest_json(&pj, &out).unwrap();
        let v: Value = serde_json::from_str(&std::fs::read_to_string(&pj).unwrap()).unwrap();
        assert_eq!(v["test_info"]["test"], "RDMA_Write_BW_Test");
        assert_eq!(v["test_info"]["GID_index"], 1);
        assert_eq!(v["results"]["BW_average"], 1.25);
        assert_eq!(v["results_all"].as_array().unwrap().len(), 1);
        let csv = dir.join("r.csv");
        write_csv(&csv, &o, &out).unwrap();
        write_csv(&csv, &o, &out).unwrap();
        let text = std::fs::read_to_string(&csv).unwrap();
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 3, "one header, then a row per call: {text}");
        assert!(lines[0].starts_with("tool,host,date,test,role,device,bytes"));
        assert!(
            lines[1].contains(",write_bw,client,rxe0,65536,5000,1.500000,1.250000,"),
            "{}",
            lines[1]
        );
        let e = write_csv(std::path::Path::new("/nonexistent/dir/r.csv"), &o, &out).unwrap_err();
        assert!(e.to_string().contains("/nonexistent/dir/r.csv"), "{e}");
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn dates_are_rfc3339_utc() {
        assert_eq!(rfc3339(0), "1970-01-01T00:00:00Z");
        assert_eq!(rfc3339(951_782_400), "2000-02-29T00:00:00Z");
        assert_eq!(rfc3339(1_796_400_000), "2026-12-04T16:00:00Z");
    }
}
