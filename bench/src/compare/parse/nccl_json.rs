//! nccl-tests' `-J` JSON (schema version 3), which ours mirrors, plus our
//! `erdma` key (see `nccltests::output::context`). nccl-tests writes the
//! file as the run goes, so a killed run leaves it cut short: it is closed
//! after its last complete value and read up to its last complete row,
//! with a warning.

use super::ParseError;
use crate::compare::model::{Format, Key, Measure, Placement, Row, Run};
use serde_json::Value;

/// Reads a JSON result file.
pub fn parse(path: &str, text: &str) -> Result<Run, ParseError> {
    let mut run = Run::new(path, Format::NcclJson);
    let v: Value = match serde_json::from_str(text) {
        Ok(v) => v,
        Err(e) if e.is_eof() => {
            let fixed = close_truncated(text).ok_or_else(|| json_error(&e))?;
            let v = serde_json::from_str(&fixed).map_err(|_| json_error(&e))?;
            run.warnings.push(format!(
                "the JSON ends at line {} (run killed?): read up to its last complete row",
                e.line()
            ));
            v
        }
        Err(e) => return Err(json_error(&e)),
    };
    let Some(obj) = v.as_object() else {
        return Err(ParseError::at(1, "JSON is not an object"));
    };
    let Some(results) = obj.get("results").and_then(Value::as_array) else {
        return Err(ParseError::at(
            1,
            "JSON without a `results` list: not an nccl-tests -J file",
        ));
    };
    if let Some(ver) = obj.get("version").and_then(Value::as_i64)
        && ver != 3
    {
        run.warnings
            .push(format!("JSON schema version {ver}; read as version 3"));
    }
    let collective = collective_of(obj);
    for r in results {
        run.rows.extend(rows_of(r, &collective));
    }
    context(&mut run, obj);
    Ok(run)
}

fn json_error(e: &serde_json::Error) -> ParseError {
    ParseError::at(
        e.line().max(1),
        format!("invalid JSON at column {}: {e}", e.column()),
    )
}

/// The test: `erdma.program`, else the base name of `args[0]`.
fn collective_of(obj: &serde_json::Map<String, Value>) -> String {
    if let Some(p) = obj
        .get("erdma")
        .and_then(|e| e.get("program"))
        .and_then(Value::as_str)
    {
        return p.to_string();
    }
    obj.get("args")
        .and_then(|a| a.get(0))
        .and_then(Value::as_str)
        .and_then(|a| a.rsplit('/').next())
        .filter(|a| !a.is_empty())
        .unwrap_or("?")
        .to_string()
}

/// A number as nccl-tests writes it: a number, or the string "nan".
fn num(v: Option<&Value>) -> Option<f64> {
    match v? {
        Value::Number(n) => n.as_f64(),
        Value::String(s) => super::number(s.trim()),
        _ => None,
    }
}

/// Both placements of one result; none when the row is incomplete.
fn rows_of(r: &Value, collective: &str) -> Vec<Row> {
    let (Some(size), Some(oop), Some(ip)) = (
        r.get("size").and_then(Value::as_u64),
        r.get("out_of_place"),
        r.get("in_place"),
    ) else {
        return Vec::new();
    };
    let root = match r.get("root") {
        Some(Value::String(s)) => s.trim().parse().unwrap_or(-1),
        Some(v) => v.as_i64().unwrap_or(-1),
        None => -1,
    };
    let text = |k: &str| r.get(k).and_then(Value::as_str).unwrap_or("").to_string();
    [(Placement::OutOfPlace, oop), (Placement::InPlace, ip)]
        .into_iter()
        .map(|(placement, p)| Row {
            key: Key {
                collective: collective.to_string(),
                dtype: text("type"),
                op: text("redop"),
                root,
                placement,
                size,
            },
            m: Measure {
                count: r.get("count").and_then(Value::as_u64),
                time_us: num(p.get("time")).or_else(|| num(p.get("cpu_time"))),
                algbw: num(p.get("alg_bw")),
                busbw: num(p.get("bus_bw")),
                wrong: num(p.get("nwrong")),
                samples: 1,
            },
        })
        .collect()
}

fn context(run: &mut Run, obj: &serde_json::Map<String, Value>) {
    let ctx = &mut run.context;
    let e = obj.get("erdma");
    let es = |k: &str| e.and_then(|e| e.get(k)).and_then(Value::as_str);
    if e.is_some() {
        ctx.set("tool", "erdma-bench");
        run.format = Format::OursJson;
    }
    if let Some(b) = es("backend") {
        ctx.set("backend", b);
    }
    match es("nccl_version") {
        Some(v) => ctx.set("nccl", v),
        None => {
            if let Some(code) = obj.get("nccl_version").and_then(Value::as_i64)
                && code > 0
                && let Some(v) = erdma::nccl::Version::from_code(code as i32)
            {
                ctx.set("nccl", v.to_string());
            }
        }
    }
    let config = obj.get("config");
    let devices: Vec<&Value> = config
        .and_then(|c| c.get("devices"))
        .and_then(Value::as_array)
        .map(|d| d.iter().collect())
        .unwrap_or_default();
    let per_proc = ["nthreads", "ngpus"]
        .iter()
        .map(|k| {
            config
                .and_then(|c| c.get(*k))
                .and_then(Value::as_u64)
                .unwrap_or(1)
        })
        .product::<u64>();
    let strings = |k: &str| -> Vec<String> {
        e.and_then(|e| e.get(k))
            .and_then(Value::as_array)
            .map(|a| {
                a.iter()
                    .filter_map(Value::as_str)
                    .map(String::from)
                    .collect()
            })
            .unwrap_or_default()
    };
    let ranks = e
        .and_then(|e| e.get("gpus"))
        .and_then(Value::as_u64)
        .unwrap_or(devices.len() as u64 * per_proc);
    if ranks > 0 {
        ctx.set("ranks", ranks.to_string());
    }
    let dev_field = |k: &str| -> Vec<String> {
        let mut out: Vec<String> = Vec::new();
        for d in &devices {
            if let Some(s) = d.get(k).and_then(Value::as_str)
                && !out.iter().any(|o| o == s)
            {
                out.push(s.to_string());
            }
        }
        out
    };
    let models = match strings("gpu_models") {
        m if !m.is_empty() => m,
        _ => dev_field("device_info"),
    };
    ctx.set("gpu", models.join(","));
    let hosts = match strings("hosts") {
        h if !h.is_empty() => h,
        _ => dev_field("hostname"),
    };
    ctx.set("hosts", hosts.join(","));
    if let Some(c) = config {
        for (key, name) in [
            ("threads", "nthreads"),
            ("gpus/process", "ngpus"),
            ("warmup", "warmup_iters"),
            ("iters", "iterations"),
            ("agg iters", "aggregated_iterations"),
            ("validation", "validation"),
            ("graph", "graph"),
        ] {
            if let Some(v) = c.get(name).and_then(Value::as_i64) {
                ctx.set(key, v.to_string());
            }
        }
    }
    let env: Vec<String> = match e.and_then(|e| e.get("nccl_env")).and_then(Value::as_object) {
        Some(m) => m
            .iter()
            .map(|(k, v)| format!("{k}={}", v.as_str().unwrap_or("")))
            .collect(),
        None => {
            let mut v: Vec<String> = obj
                .get("env")
                .and_then(Value::as_array)
                .map(|a| {
                    a.iter()
                        .filter_map(Value::as_str)
                        .filter(|s| s.starts_with("NCCL_"))
                        .map(String::from)
                        .collect()
                })
                .unwrap_or_default();
            v.sort();
            v
        }
    };
    // The file records the environment: none set is a value, not unknown.
    let env = if env.is_empty() {
        "(none)".to_string()
    } else {
        env.join(" ")
    };
    ctx.set("env", env);
    let date = es("date").or_else(|| obj.get("start_time").and_then(Value::as_str));
    ctx.set("date", date.unwrap_or(""));
    if let Some(args) = obj.get("args").and_then(Value::as_array) {
        let words: Vec<String> = args
            .iter()
            .filter_map(Value::as_str)
            .map(String::from)
            .collect();
        ctx.set(
            "command",
            crate::nccltests::output::context::shell_join(&words),
        );
    }
}

/// Closes a JSON text cut short: keeps it up to the end of its last
/// complete object or list and appends the closing brackets still open.
/// None when nothing complete is left.
pub fn close_truncated(text: &str) -> Option<String> {
    let mut stack: Vec<u8> = Vec::new();
    let mut in_str = false;
    let mut escaped = false;
    // (byte position after a closing bracket, the stack at that point)
    let mut good: Option<(usize, Vec<u8>)> = None;
    for (i, b) in text.bytes().enumerate() {
        if in_str {
            match (escaped, b) {
                (true, _) => escaped = false,
                (false, b'\\') => escaped = true,
                (false, b'"') => in_str = false,
                _ => {}
            }
            continue;
        }
        match b {
            b'"' => in_str = true,
            b'{' => stack.push(b'}'),
            b'[' => stack.push(b']'),
            b'}' | b']' => {
                if stack.pop() != Some(b) {
                    return None;
                }
                if !stack.is_empty() {
                    good = Some((i + 1, stack.clone()));
                }
            }
            _ => {}
        }
    }
    let (end, open) = good?;
    let mut s = text[..end].to_string();
    s.extend(open.iter().rev().map(|&b| b as char));
    Some(s)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cut_json_is_closed_after_its_last_complete_value() {
        let t = r#"{"version":3,"results":[{"size":8,"a":{"t":1}},{"size":16,"a":{"t"#;
        let fixed = close_truncated(t).unwrap();
        assert_eq!(fixed, r#"{"version":3,"results":[{"size":8,"a":{"t":1}}]}"#);
        let t = r#"{"args":["a]}"],"x":{"y":[1,2]},"z":"#;
        assert_eq!(
            close_truncated(t).unwrap(),
            r#"{"args":["a]}"],"x":{"y":[1,2]}}"#
        );
        assert_eq!(close_truncated(r#"{"version":3,"#), None);
    }
}
