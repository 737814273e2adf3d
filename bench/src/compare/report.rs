//! The comparison as text (for people), JSON and CSV (for machines).

use super::align::{self, Summary, Table};
use super::context::Diff;
use super::model::{Run, human_size};
use serde_json::{Value, json};
use std::fmt::Write;

/// Everything a report shows.
pub struct Report<'a> {
    /// The runs, in column order.
    pub runs: &'a [Run],
    /// The aligned rows.
    pub table: &'a Table,
    /// Context differences.
    pub diff: &'a Diff,
    /// One per run other than the baseline.
    pub summaries: &'a [Summary],
    /// `!` threshold.
    pub mark_below: f64,
    /// `--fail-below`.
    pub fail_below: Option<f64>,
}

fn time_str(t: Option<f64>) -> String {
    match t {
        None => "-".into(),
        Some(t) if t.abs() >= 10000.0 => format!("{t:.0}"),
        Some(t) if t.abs() >= 100.0 => format!("{t:.1}"),
        Some(t) => format!("{t:.2}"),
    }
}

/// A bandwidth as the table prints it (more digits under 1 GB/s).
pub(crate) fn bw_str(b: Option<f64>) -> String {
    match b {
        None => "-".into(),
        Some(b) if b != 0.0 && b.abs() < 0.001 => format!("{b:.1e}"),
        Some(b) if b.abs() < 1.0 => format!("{b:.3}"),
        Some(b) => format!("{b:.2}"),
    }
}

fn ratio_str(r: Option<f64>) -> String {
    r.map_or("-".into(), |r| format!("{r:.3}"))
}

impl Report<'_> {
    /// `[2]` labels.
    fn label(&self, i: usize) -> String {
        format!("[{}]", i + 1)
    }

    /// The human table.
    pub fn text(&self) -> String {
        let mut s = String::new();
        let b = self.table.baseline;
        let _ = writeln!(
            s,
            "# erdma-compare: {} run{}; ratio = speed relative to {} (above 1: faster; time ratio, or busbw ratio across rank counts and for bandwidth-only tests); ! under {}, !! under {}",
            self.runs.len(),
            if self.runs.len() == 1 { "" } else { "s" },
            self.label(b),
            self.mark_below,
            align::MARK_BIG.min(self.mark_below)
        );
        let width = self.runs.iter().map(|r| r.name.len()).max().unwrap_or(0);
        for (i, r) in self.runs.iter().enumerate() {
            let _ = writeln!(
                s,
                "#  {} {:width$}  {}{}",
                self.label(i),
                r.name,
                r.format.name(),
                if i == b { ", baseline" } else { "" }
            );
        }
        let kw = self
            .diff
            .common
            .iter()
            .map(|c| c.0.len())
            .chain(self.diff.differs.iter().map(|d| d.0.len()))
            .max()
            .unwrap_or(0);
        if !self.diff.common.is_empty() && self.runs.len() > 1 {
            let _ = writeln!(s, "# same in all runs:");
            for (k, v) in &self.diff.common {
                let _ = writeln!(s, "#   {k:<kw$}  {v}");
            }
        }
        if !self.diff.differs.is_empty() {
            let _ = writeln!(
                s,
                "# {}",
                if self.runs.len() > 1 {
                    "differs:"
                } else {
                    "context:"
                }
            );
            for (k, vals) in &self.diff.differs {
                let _ = write!(s, "#   {k:<kw$} ");
                for (i, v) in vals.iter().enumerate() {
                    let _ = write!(s, " {} {}", self.label(i), v.as_deref().unwrap_or("-"));
                }
                s.push('\n');
            }
        }
        for (i, r) in self.runs.iter().enumerate() {
            for w in &r.warnings {
                let _ = writeln!(s, "# warning: {} {}: {w}", self.label(i), r.name);
            }
        }
        for g in &self.table.groups {
            let _ = writeln!(s, "#\n# {}", g.key);
            let mut head = format!("# {:>10} ", "size");
            for i in 0..self.runs.len() {
                let _ = write!(
                    head,
                    "| {:>4} {:>9} {:>9} ",
                    self.label(i),
                    "time(us)",
                    "busbw"
                );
                if i != b {
                    head += &format!("{:>7}    ", "ratio");
                }
            }
            let _ = writeln!(s, "{}", head.trim_end());
            for l in &g.lines {
                let mut line = format!("{:>12} ", human_size(l.size));
                for (i, c) in l.cells.iter().enumerate() {
                    let (t, bw, r) = match c {
                        Some(c) => (time_str(c.m.time_us), bw_str(c.m.busbw), c.ratio),
                        None => ("-".into(), "-".into(), None),
                    };
                    let _ = write!(line, "| {:>4} {t:>9} {bw:>9} ", "");
                    if i != b {
                        let _ = write!(
                            line,
                            "{:>7} {:<2} ",
                            ratio_str(r),
                            align::mark(r, self.mark_below)
                        );
                    }
                }
                let _ = writeln!(s, "{}", line.trim_end());
            }
        }
        if !self.summaries.is_empty() {
            s.push_str("#\n");
        }
        for sm in self.summaries {
            let _ = write!(
                s,
                "# {} vs {}: {} sizes compared",
                self.label(sm.run),
                self.label(b),
                sm.compared
            );
            if let Some(g) = sm.geomean {
                let _ = write!(s, ", geometric mean {g:.3}");
            }
            if let Some((r, key, size)) = &sm.worst {
                let _ = write!(s, ", lowest {r:.3} ({key}, {})", human_size(*size));
            }
            let _ = write!(s, ", {} under {}", sm.marked, self.mark_below);
            if sm.missing > 0 {
                let _ = write!(s, ", {} baseline sizes missing", sm.missing);
            }
            if let Some(f) = self.fail_below {
                let _ = write!(
                    s,
                    ": {}",
                    if sm.failed > 0 || sm.compared == 0 {
                        format!("FAILED ({} under {f})", sm.failed)
                    } else {
                        format!("ok (none under {f})")
                    }
                );
            }
            s.push('\n');
        }
        s
    }

    /// The `--json` document (top level: tool, version, host, date,
    /// command, then the comparison).
    pub fn json(&self, meta: Value) -> Value {
        let runs: Vec<Value> = self
            .runs
            .iter()
            .enumerate()
            .map(|(i, r)| {
                let ctx: serde_json::Map<String, Value> = r
                    .context
                    .0
                    .iter()
                    .map(|(k, v)| (k.clone(), Value::String(v.clone())))
                    .collect();
                json!({
                    "index": i + 1,
                    "name": r.name,
                    "path": r.path,
                    "format": r.format.name(),
                    "baseline": i == self.table.baseline,
                    "context": ctx,
                    "warnings": r.warnings,
                })
            })
            .collect();
        let rows: Vec<Value> = self
            .table
            .groups
            .iter()
            .flat_map(|g| {
                g.lines.iter().map(move |l| {
                    let cells: Vec<Value> = l
                        .cells
                        .iter()
                        .map(|c| match c {
                            None => Value::Null,
                            Some(c) => json!({
                                "time_us": c.m.time_us,
                                "algbw_gbps": c.m.algbw,
                                "busbw_gbps": c.m.busbw,
                                "wrong": c.m.wrong,
                                "samples": c.m.samples,
                                "ratio": c.ratio,
                                "mark": align::mark(c.ratio, self.mark_below),
                            }),
                        })
                        .collect();
                    json!({
                        "collective": g.key.collective,
                        "type": g.key.dtype,
                        "op": g.key.op,
                        "root": g.key.root,
                        "placement": g.key.placement.name(),
                        "size_bytes": l.size,
                        "runs": cells,
                    })
                })
            })
            .collect();
        let summaries: Vec<Value> = self
            .summaries
            .iter()
            .map(|s| {
                json!({
                    "run": s.run + 1,
                    "compared": s.compared,
                    "geomean_ratio": s.geomean,
                    "lowest_ratio": s.worst.as_ref().map(|w| w.0),
                    "lowest_at": s.worst.as_ref().map(|w| json!({
                        "group": w.1.to_string(), "size_bytes": w.2
                    })),
                    "marked": s.marked,
                    "failed": s.failed,
                    "missing": s.missing,
                })
            })
            .collect();
        let differs: serde_json::Map<String, Value> = self
            .diff
            .differs
            .iter()
            .map(|(k, v)| (k.clone(), json!(v)))
            .collect();
        let common: serde_json::Map<String, Value> = self
            .diff
            .common
            .iter()
            .map(|(k, v)| (k.clone(), Value::String(v.clone())))
            .collect();
        let mut doc = meta;
        if let Some(o) = doc.as_object_mut() {
            o.insert("baseline".into(), json!(self.table.baseline + 1));
            o.insert("mark_below".into(), json!(self.mark_below));
            o.insert("fail_below".into(), json!(self.fail_below));
            o.insert("runs".into(), Value::Array(runs));
            o.insert(
                "context".into(),
                json!({ "common": common, "differs": differs }),
            );
            o.insert("rows".into(), Value::Array(rows));
            o.insert("summaries".into(), Value::Array(summaries));
        }
        doc
    }

    /// The `--csv` table: one line per row and run.
    pub fn csv(&self) -> Result<String, csv::Error> {
        let mut w = csv::Writer::from_writer(Vec::new());
        w.write_record([
            "collective",
            "type",
            "op",
            "root",
            "placement",
            "size_bytes",
            "run",
            "name",
            "time_us",
            "algbw_gbps",
            "busbw_gbps",
            "ratio",
            "mark",
        ])?;
        let opt = |v: Option<f64>| v.map(|x| x.to_string()).unwrap_or_default();
        for g in &self.table.groups {
            for l in &g.lines {
                for (i, c) in l.cells.iter().enumerate() {
                    let Some(c) = c else { continue };
                    w.write_record([
                        g.key.collective.clone(),
                        g.key.dtype.clone(),
                        g.key.op.clone(),
                        g.key.root.to_string(),
                        g.key.placement.name().to_string(),
                        l.size.to_string(),
                        (i + 1).to_string(),
                        self.runs[i].name.clone(),
                        opt(c.m.time_us),
                        opt(c.m.algbw),
                        opt(c.m.busbw),
                        opt(c.ratio),
                        align::mark(c.ratio, self.mark_below).to_string(),
                    ])?;
                }
            }
        }
        let bytes = w
            .into_inner()
            .map_err(|e| csv::Error::from(e.into_error()))?;
        Ok(String::from_utf8_lossy(&bytes).into_owned())
    }
}
