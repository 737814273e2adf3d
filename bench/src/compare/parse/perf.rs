//! erdma-perf's own files: its `--json` document (one per run; a
//! `--persistent` server writes several, concatenated) and its `--csv`
//! file (one line per size, appended run after run). Rows are keyed like
//! perftest's tables (`RDMA_Write BW`, `Send Latency`), so that erdma-perf
//! runs align with each other and with perftest's logs: bandwidth rows give
//! busbw = algbw = BW average in GB/s, latency rows time = t_typical
//! (t_avg in duration mode).

use super::{ParseError, group_sections, number};
use crate::compare::model::{Format, Key, Measure, Placement, Row, Run};
use serde_json::Value;

/// The start of erdma-perf's CSV header.
const CSV_HEADER: &str = "tool,host,date,test,role,device,bytes,iterations,";

/// Whether `line` is erdma-perf's CSV header.
pub fn is_csv_header(line: &str) -> bool {
    line.trim_end().starts_with(CSV_HEADER)
}

/// Whether the JSON text is erdma-perf's: its `"tool": "erdma-perf"` (the
/// keys' order is not fixed, and nccl-tests' JSON has no such key).
pub fn is_json(text: &str) -> bool {
    let t = text.trim_start_matches('\u{feff}').trim_start();
    t.starts_with('{')
        && t.match_indices("\"tool\"").any(|(i, k)| {
            t[i + k.len()..]
                .trim_start()
                .strip_prefix(':')
                .is_some_and(|v| v.trim_start().starts_with("\"erdma-perf\""))
        })
}

/// perftest's title of an erdma-perf test name (`write_bw` -> `RDMA_Write
/// BW`), for the CSV, which has no title column; atomics read as
/// fetch-and-add (perftest's default) and bidirectional runs as one-way.
pub fn title_of(test: &str) -> String {
    let (verb, kind) = test.rsplit_once('_').unwrap_or((test, ""));
    let verb = match verb {
        "write" => "RDMA_Write",
        "read" => "RDMA_Read",
        "send" => "Send",
        "atomic" => "Atomic FETCH_AND_ADD",
        other => other,
    };
    let kind = match kind {
        "bw" => "BW",
        "lat" => "Latency",
        other => other,
    };
    format!("{verb} {kind}")
}

/// A row of `test` at `size`.
fn row(test: &str, size: u64, m: Measure) -> Row {
    Row {
        key: Key {
            collective: test.to_string(),
            dtype: String::new(),
            op: String::new(),
            root: -1,
            placement: Placement::None,
            size,
        },
        m,
    }
}

/// A bandwidth (`bw_avg_gbps`, Gb/s) or latency (`t_typical_us`, else
/// `t_avg_us`) measurement, from any lookup of the named fields.
fn measure(get: impl Fn(&str) -> Option<f64>) -> Option<Measure> {
    if let Some(gbits) = get("bw_avg_gbps") {
        let gbs = gbits / 8.0;
        return Some(Measure {
            algbw: Some(gbs),
            busbw: Some(gbs),
            samples: 1,
            ..Measure::default()
        });
    }
    let t = get("t_typical_us").or_else(|| get("t_avg_us"))?;
    Some(Measure {
        time_us: Some(t),
        samples: 1,
        ..Measure::default()
    })
}

/// Reads erdma-perf JSON documents (one or several) into runs.
pub fn parse_json(path: &str, text: &str) -> Result<Vec<Run>, ParseError> {
    let mut sections = Vec::new();
    let stream = serde_json::Deserializer::from_str(text).into_iter::<Value>();
    for doc in stream {
        let doc = doc.map_err(|e| {
            ParseError::at(
                e.line().max(1),
                format!("invalid JSON at column {}: {e}", e.column()),
            )
        })?;
        let Some(obj) = doc.as_object() else {
            return Err(ParseError::at(1, "JSON is not an object"));
        };
        sections.push(run_of(path, obj)?);
    }
    Ok(group_sections(sections))
}

fn run_of(path: &str, obj: &serde_json::Map<String, Value>) -> Result<Run, ParseError> {
    let s = |k: &str| obj.get(k).and_then(Value::as_str);
    if s("tool") != Some("erdma-perf") {
        return Err(ParseError {
            line: None,
            msg: "a JSON document that erdma-perf did not write among erdma-perf's".into(),
        });
    }
    let test = s("title")
        .map(String::from)
        .or_else(|| s("test").map(title_of))
        .unwrap_or_else(|| "erdma-perf".into());
    let mut run = Run::new(path, Format::PerfJson);
    for r in obj
        .get("results")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        let get = |k: &str| r.get(k).and_then(Value::as_f64);
        if let (Some(size), Some(m)) = (r.get("bytes").and_then(Value::as_u64), measure(get)) {
            run.rows.push(row(&test, size, m));
        }
    }
    if let Some(e) = obj.get("error").filter(|e| !e.is_null()) {
        run.warnings.push(format!(
            "the run failed (exit {}): {}",
            e.get("exit_status").and_then(Value::as_i64).unwrap_or(-1),
            e.get("message").and_then(Value::as_str).unwrap_or("?")
        ));
    }
    let ctx = &mut run.context;
    ctx.set("tool", "erdma-perf");
    ctx.set("test", test.clone());
    for k in [
        "version",
        "host",
        "date",
        "role",
        "device",
        "transport",
        "link_layer",
        "memory",
    ] {
        if let Some(v) = s(k) {
            ctx.set(if k == "version" { "erdma-perf" } else { k }, v);
        }
    }
    for k in ["mtu", "qps", "gid_index"] {
        if let Some(v) = obj.get(k).filter(|v| v.is_number()) {
            ctx.set(k, v.to_string());
        }
    }
    if let Some(p) = obj.get("peer") {
        let ps = |k: &str| p.get(k).and_then(Value::as_str).unwrap_or("?");
        ctx.set(
            "peer",
            format!("{} {} {}", ps("address"), ps("tool"), ps("version")),
        );
    }
    Ok(run)
}

/// Reads erdma-perf's CSV file: each run (lines of one host, date, test and
/// role) is a section, grouped as perftest logs are.
pub fn parse_csv(path: &str, text: &str) -> Result<Vec<Run>, ParseError> {
    let mut rd = csv::ReaderBuilder::new()
        .flexible(true)
        .from_reader(text.as_bytes());
    let head: Vec<String> = rd
        .headers()
        .map_err(|e| ParseError::at(1, format!("bad CSV header: {e}")))?
        .iter()
        .map(String::from)
        .collect();
    let col = |name: &str| head.iter().position(|h| h == name);
    let (Some(ci), Some(bi)) = (col("test"), col("bytes")) else {
        return Err(ParseError::at(1, "CSV header lacks `test` or `bytes`"));
    };
    let mut sections: Vec<Run> = Vec::new();
    let mut last_id: Option<Vec<String>> = None;
    for (i, rec) in rd.records().enumerate() {
        let no = i + 2;
        let rec = rec.map_err(|e| ParseError::at(no, format!("bad CSV row: {e}")))?;
        let field = |name: &str| col(name).and_then(|c| rec.get(c)).unwrap_or("");
        let id: Vec<String> = ["host", "date", "test", "role"]
            .iter()
            .map(|k| field(k).to_string())
            .collect();
        if last_id.as_ref() != Some(&id) {
            let mut r = Run::new(path, Format::PerfCsv);
            r.context.set("tool", "erdma-perf");
            r.context.set("test", title_of(&id[2]));
            for (k, v) in ["host", "date", "role", "device"]
                .iter()
                .map(|k| (k, field(k)))
            {
                if !v.is_empty() {
                    r.context.set(k, v);
                }
            }
            sections.push(r);
            last_id = Some(id);
        }
        let test = title_of(rec.get(ci).unwrap_or(""));
        let Some(size) = rec.get(bi).and_then(|s| s.trim().parse::<u64>().ok()) else {
            return Err(ParseError::at(no, "`bytes` is not a whole number"));
        };
        let get = |k: &str| {
            let v = field(k).trim();
            if v.is_empty() { None } else { number(v) }
        };
        let m = measure(get)
            .ok_or_else(|| ParseError::at(no, "a row with neither `bw_avg_gbps` nor a latency"))?;
        if let Some(r) = sections.last_mut() {
            r.rows.push(row(&test, size, m));
        }
    }
    Ok(group_sections(sections))
}

#[cfg(test)]
mod tests {
    use super::*;

    const DOC: &str = r#"{"tool":"erdma-perf","version":"0.1.0","host":"a","date":"2026-12-03T10:00:00Z",
 "test":"write_bw","title":"RDMA_Write BW","role":"client","device":"rxe0","mtu":1024,"qps":1,
 "peer":{"address":"10.0.0.2:18515","tool":"perftest","version":"6.06"},"memory":"host",
 "results":[{"bytes":65536,"iterations":1000,"bw_peak_gbps":8.5,"bw_avg_gbps":8.0,
   "bw_peak_mib_s":1013.3,"bw_avg_mib_s":953.7,"msg_rate_mpps":0.015}],"error":null}"#;

    #[test]
    fn titles_follow_perftest() {
        assert_eq!(title_of("write_bw"), "RDMA_Write BW");
        assert_eq!(title_of("read_lat"), "RDMA_Read Latency");
        assert_eq!(title_of("send_lat"), "Send Latency");
        assert_eq!(title_of("atomic_bw"), "Atomic FETCH_AND_ADD BW");
    }

    #[test]
    fn a_json_document_gives_gbytes_and_its_context() {
        assert!(is_json(DOC));
        assert!(!is_json(r#"{"name":"nccl-tests"}"#));
        assert!(is_json(r#"{"a": 1, "tool" : "erdma-perf"}"#));
        let runs = parse_json("r.json", DOC).expect("parse");
        assert_eq!(runs.len(), 1);
        let r = &runs[0];
        assert_eq!(r.rows.len(), 1);
        assert_eq!(r.rows[0].key.collective, "RDMA_Write BW");
        assert_eq!(r.rows[0].key.size, 65536);
        assert_eq!(r.rows[0].m.busbw, Some(1.0));
        assert_eq!(r.context.get("peer"), Some("10.0.0.2:18515 perftest 6.06"));
        assert_eq!(r.context.get("device"), Some("rxe0"));
    }

    #[test]
    fn concatenated_documents_of_one_test_are_separate_runs() {
        let two = format!("{DOC}\n{DOC}\n");
        assert_eq!(parse_json("r.json", &two).expect("parse").len(), 2);
        let lat = DOC
            .replace("\"write_bw\"", "\"send_lat\"")
            .replace("RDMA_Write BW", "Send Latency")
            .replace("\"bw_avg_gbps\":8.0", "\"t_typical_us\":3.5");
        let runs = parse_json("r.json", &format!("{DOC}{lat}")).expect("parse");
        assert_eq!(runs.len(), 1);
        assert_eq!(runs[0].rows[1].m.time_us, Some(3.5));
    }

    #[test]
    fn a_failed_run_is_a_warning_and_garbage_is_an_error() {
        let failed = DOC.replace(
            "\"error\":null",
            "\"error\":{\"message\":\"peer vanished\",\"exit_status\":6}",
        );
        let runs = parse_json("r.json", &failed).expect("parse");
        assert_eq!(
            runs[0].warnings,
            vec!["the run failed (exit 6): peer vanished"]
        );
        let e = parse_json("r.json", &format!("{DOC}\n{{\"tool\":")).unwrap_err();
        assert_eq!(e.line, Some(6));
        let e = parse_json("r.json", &format!("{DOC}[1]")).unwrap_err();
        assert!(e.msg.contains("not an object"), "{e}");
    }

    #[test]
    fn csv_runs_split_on_host_date_test_and_role() {
        let head = "tool,host,date,test,role,device,bytes,iterations,bw_peak_gbps,bw_avg_gbps,msg_rate_mpps,t_min_us,t_max_us,t_typical_us,t_avg_us,t_stdev_us,t_p99_us,t_p99_9_us";
        assert!(is_csv_header(head));
        let text = format!(
            "{head}\n\
             erdma-perf,a,d1,write_bw,client,rxe0,2,1000,1,0.8,1,,,,,,,\n\
             erdma-perf,a,d1,write_bw,client,rxe0,4,1000,2,1.6,1,,,,,,,\n\
             erdma-perf,a,d1,send_lat,client,rxe0,2,1000,,,,1,9,2.5,2.6,0.1,5,8\n\
             erdma-perf,a,d2,write_bw,client,rxe0,2,1000,1,0.4,1,,,,,,,\n"
        );
        let runs = parse_csv("p.csv", &text).expect("parse");
        assert_eq!(runs.len(), 2);
        assert_eq!(runs[0].rows.len(), 3);
        assert_eq!(runs[0].rows[1].m.busbw, Some(0.2));
        assert_eq!(runs[0].rows[2].key.collective, "Send Latency");
        assert_eq!(runs[0].rows[2].m.time_us, Some(2.5));
        assert_eq!(runs[1].context.get("date"), Some("d2"));
        let bad = format!("{head}\nerdma-perf,a,d1,write_bw,client,rxe0,x,1,,,,,,,,,,\n");
        assert_eq!(parse_csv("p.csv", &bad).unwrap_err().line, Some(2));
    }
}
