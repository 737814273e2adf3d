//! Our `--csv` file: a header, then one row per size and placement (see
//! `nccltests::output::csv`), the run's context in the last columns (files
//! written before those columns existed read too).

use super::{ParseError, number};
use crate::compare::model::{Format, Key, Measure, Placement, Row, Run};
use crate::nccltests::output::context::shell_split;

/// Whether `line` is our CSV header.
pub fn is_header(line: &str) -> bool {
    line.trim_end()
        .starts_with("collective,backend,nranks,size_bytes,")
}

/// Reads a CSV result file.
pub fn parse(path: &str, text: &str) -> Result<Run, ParseError> {
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
    let need = [
        "collective",
        "size_bytes",
        "type",
        "redop",
        "root",
        "placement",
        "time_us",
        "algbw_gbps",
        "busbw_gbps",
    ];
    let mut idx = Vec::new();
    for n in need {
        idx.push(col(n).ok_or_else(|| ParseError::at(1, format!("CSV header lacks `{n}`")))?);
    }
    let [
        c_coll,
        c_size,
        c_type,
        c_op,
        c_root,
        c_place,
        c_time,
        c_alg,
        c_bus,
    ] = idx[..].try_into().expect("nine columns");
    let c_wrong = col("wrong");
    let mut run = Run::new(path, Format::OursCsv);
    let mut lines_seen = 1;
    for rec in rd.records() {
        let rec = rec.map_err(|e| {
            let line = e.position().map_or(lines_seen + 1, |p| p.line() as usize);
            ParseError::at(line, format!("bad CSV: {e}"))
        })?;
        let line = rec.position().map_or(lines_seen + 1, |p| p.line() as usize);
        lines_seen = line;
        if rec.len() < head.len().min(15) {
            run.warnings.push(format!(
                "line {line}: incomplete row ignored ({} of {} columns; run killed?)",
                rec.len(),
                head.len()
            ));
            continue;
        }
        let field = |i: usize| rec.get(i).unwrap_or("");
        let float = |i: usize| -> Result<Option<f64>, ParseError> {
            let s = field(i).trim();
            if s.is_empty() {
                return Ok(None);
            }
            number(s).map(Some).ok_or_else(|| {
                ParseError::at(line, format!("`{s}` in column {} is not a number", head[i]))
            })
        };
        let size = field(c_size).trim().parse::<u64>().map_err(|_| {
            ParseError::at(
                line,
                format!("size_bytes `{}` is not a byte count", field(c_size)),
            )
        })?;
        let root = field(c_root).trim().parse::<i64>().map_err(|_| {
            ParseError::at(line, format!("root `{}` is not a number", field(c_root)))
        })?;
        let placement = match field(c_place) {
            "out-of-place" => Placement::OutOfPlace,
            "in-place" => Placement::InPlace,
            p => {
                return Err(ParseError::at(
                    line,
                    format!("placement `{p}`: expected out-of-place or in-place"),
                ));
            }
        };
        run.rows.push(Row {
            key: Key {
                collective: field(c_coll).to_string(),
                dtype: field(c_type).to_string(),
                op: field(c_op).to_string(),
                root,
                placement,
                size,
            },
            m: Measure {
                count: col("count")
                    .and_then(|i| rec.get(i))
                    .and_then(|c| c.trim().parse().ok()),
                time_us: float(c_time)?,
                algbw: float(c_alg)?,
                busbw: float(c_bus)?,
                wrong: c_wrong.map(float).transpose()?.flatten(),
                samples: 1,
            },
        });
        if run.rows.len() == 1 {
            context(&mut run, &head, &rec);
        }
    }
    Ok(run)
}

fn context(run: &mut Run, head: &[String], rec: &csv::StringRecord) {
    let get = |name: &str| {
        head.iter()
            .position(|h| h == name)
            .and_then(|i| rec.get(i))
            .unwrap_or("")
    };
    let ctx = &mut run.context;
    ctx.set("tool", "erdma-bench");
    ctx.set("backend", get("backend"));
    ctx.set("nccl", get("nccl_version"));
    ctx.set("ranks", get("nranks"));
    ctx.set("gpu", get("gpu_model").replace(';', ","));
    ctx.set("hosts", get("hosts").replace(';', ","));
    if head.iter().any(|h| h == "nccl_env") {
        let env = shell_split(get("nccl_env")).join(" ");
        ctx.set("env", if env.is_empty() { "(none)".into() } else { env });
    }
    ctx.set("date", get("date"));
    ctx.set("command", get("command"));
}
