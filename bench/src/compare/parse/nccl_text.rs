//! nccl-tests' stdout: the current layout (2.13 on: `redop` and `root`
//! columns for every collective, `#wrong` counts) and the older one
//! (columns per collective, each half ending in `error`, the maximum
//! deviation printed `%5.0le`, e.g. `0e+00`). Columns are read by the names
//! in the table header, so `-I` (per-iteration columns), `-C` (`cputime`)
//! and `-S` (timestamp) tables read too.
//!
//! A log may hold several tables (one per collective, or one per run
//! concatenated), NCCL INFO lines and other ranks' output in between, and
//! rows cut by either (see [`super::lines`]). A table without its footer
//! (the run was killed) is read up to its last complete row, with a warning.

use super::lines::split_nccl;
use super::{ParseError, group_sections, number};
use crate::compare::model::{Context, Format, Key, Measure, Placement, Row, RowMerger, Run};

/// Which layout a line announces: a table header (`#wrong` or `error`
/// columns) or the first lines of a report.
pub fn layout_of(line: &str) -> Option<Format> {
    if let Some(h) = Header::parse(line) {
        return Some(if h.old {
            Format::NcclTextOld
        } else {
            Format::NcclText
        });
    }
    let l = line.trim_start();
    (l.starts_with("# nThread ") || l.starts_with("# Collective test starting:"))
        .then_some(Format::NcclText)
}

/// The table header: the names of the columns.
#[derive(Debug)]
struct Header {
    /// Columns before the first time column (size, count, type, redop, root).
    lead: Vec<String>,
    /// The rest, without `timestamp`.
    tail: Vec<String>,
    /// `-S`: a date and a time end every row.
    timestamp: bool,
    /// `error` columns instead of `#wrong` (before 2.13).
    old: bool,
}

impl Header {
    fn parse(line: &str) -> Option<Header> {
        let rest = line.trim_start().strip_prefix('#')?;
        let names: Vec<String> = rest.split_whitespace().map(String::from).collect();
        if names.len() < 6 || names[0] != "size" || names[1] != "count" || names[2] != "type" {
            return None;
        }
        let first_time = names.iter().position(|n| n == "time" || n == "cputime")?;
        let timestamp = names.last().is_some_and(|n| n == "timestamp");
        let mut tail = names[first_time..].to_vec();
        if timestamp {
            tail.pop();
        }
        let old = tail.iter().any(|n| n == "error");
        Some(Header {
            lead: names[..first_time].to_vec(),
            tail,
            timestamp,
            old,
        })
    }

    /// Where each placement's time, algbw, busbw and check columns are.
    fn groups(&self) -> Vec<(Placement, [Option<usize>; 4])> {
        let starts: Vec<usize> = (0..self.tail.len())
            .filter(|&i| self.tail[i] == "time" || self.tail[i] == "cputime")
            .collect();
        let mut out = Vec::new();
        for (g, &st) in starts.iter().enumerate() {
            let end = starts.get(g + 1).copied().unwrap_or(self.tail.len());
            let find = |names: &[&str]| (st..end).find(|&i| names.contains(&self.tail[i].as_str()));
            let p = if g == 0 {
                Placement::OutOfPlace
            } else {
                Placement::InPlace
            };
            out.push((
                p,
                [
                    Some(st),
                    find(&["algbw"]),
                    find(&["busbw"]),
                    find(&["#wrong", "error"]),
                ],
            ));
        }
        out
    }
}

/// What a row line turned out to be.
enum RowParse {
    Rows(Vec<Row>),
    /// Fewer columns than the header: the start of a row cut by other
    /// output, or the last line of a killed run.
    Partial,
    /// Not a row (other output).
    Other,
    /// A row with the right columns that does not parse.
    Bad(String),
}

fn is_date(d: &str, t: &str) -> bool {
    d.len() == 10 && d.as_bytes()[4] == b'-' && t.len() == 8 && t.as_bytes()[2] == b':'
}

fn parse_row(h: &Header, collective: &str, text: &str) -> RowParse {
    let mut toks: Vec<&str> = text.split_whitespace().collect();
    if toks.first().is_none_or(|t| t.parse::<u64>().is_err()) {
        return RowParse::Other;
    }
    if h.timestamp && toks.len() >= 2 && is_date(toks[toks.len() - 2], toks[toks.len() - 1]) {
        toks.truncate(toks.len() - 2);
    }
    let need = h.lead.len() + h.tail.len();
    let redop_at = h.lead.iter().position(|n| n == "redop");
    let mut lead: Vec<&str> = match toks.len().checked_sub(h.tail.len()) {
        Some(n) if n <= h.lead.len() => toks[..n].to_vec(),
        Some(_) => return RowParse::Other,
        None => return RowParse::Partial,
    };
    // hypercube prints an empty op name: one column fewer.
    if lead.len() + 1 == h.lead.len()
        && let Some(r) = redop_at
        && lead.len() >= r
        && lead.get(r).is_none_or(|t| t.parse::<i64>().is_ok())
        && toks.len() + 1 == need
        && lead.len() >= 3
    {
        lead.insert(r, "");
    }
    if lead.len() != h.lead.len() {
        return RowParse::Partial;
    }
    let tail = &toks[toks.len() - h.tail.len()..];
    let col = |name: &str| h.lead.iter().position(|n| n == name).map(|i| lead[i]);
    let Some(size) = col("size").and_then(|s| s.parse::<u64>().ok()) else {
        return RowParse::Bad(format!("size `{}` is not a byte count", lead[0]));
    };
    let root = match col("root") {
        Some(r) => match r.parse::<i64>() {
            Ok(v) => v,
            Err(_) => return RowParse::Bad(format!("root `{r}` is not a number")),
        },
        None => -1,
    };
    let mut rows = Vec::new();
    for (placement, [t, a, b, w]) in h.groups() {
        let get = |i: Option<usize>| -> Result<Option<f64>, String> {
            let Some(i) = i else { return Ok(None) };
            let v = tail[i];
            if v == "N/A" {
                return Ok(None);
            }
            number(v)
                .map(Some)
                .ok_or_else(|| format!("{} `{v}` is not a number", h.tail[i]))
        };
        let m = match (get(t), get(a), get(b), get(w)) {
            (Ok(time_us), Ok(algbw), Ok(busbw), Ok(wrong)) => Measure {
                count: col("count").and_then(|c| c.parse().ok()),
                time_us,
                algbw,
                busbw,
                wrong,
                samples: 1,
            },
            (Err(e), ..) | (_, Err(e), ..) | (_, _, Err(e), _) | (.., Err(e)) => {
                return RowParse::Bad(e);
            }
        };
        rows.push(Row {
            key: Key {
                collective: collective.to_string(),
                dtype: col("type").unwrap_or("").to_string(),
                op: col("redop").unwrap_or("none").to_string(),
                root,
                placement,
                size,
            },
            m,
        });
    }
    RowParse::Rows(rows)
}

/// One report: preamble, devices, table, footer.
struct Section {
    run: Run,
    collective: Option<String>,
    header: Option<Header>,
    footer: bool,
    devices: Vec<(String, String)>,
    env: Vec<(String, String)>,
    /// A row cut short, waiting for the rest: (line, text).
    pending: Option<(usize, String)>,
    last_row_line: usize,
    /// The rows, merged as they come (a `-N` log repeats the same keys).
    rows: RowMerger,
    last_size: u64,
}

impl Section {
    fn new(path: &str) -> Section {
        Section {
            run: Run::new(path, Format::NcclText),
            collective: None,
            header: None,
            footer: false,
            devices: Vec::new(),
            env: Vec::new(),
            pending: None,
            last_row_line: 0,
            rows: RowMerger::default(),
            last_size: 0,
        }
    }

    fn started(&self) -> bool {
        self.header.is_some()
    }

    fn drop_pending(&mut self, why: &str) {
        if let Some((no, _)) = self.pending.take() {
            self.run
                .warnings
                .push(format!("line {no}: incomplete row ignored ({why})"));
        }
    }

    /// A line of the table (not a `#` line).
    fn row_line(&mut self, no: usize, text: &str) -> Result<(), ParseError> {
        let Some(h) = &self.header else {
            return Ok(());
        };
        let coll = self.collective.clone().unwrap_or_else(|| "?".into());
        if let Some((pno, p)) = self.pending.take() {
            let joined = format!("{p}{text}");
            match parse_row(h, &coll, &joined) {
                RowParse::Rows(r) => {
                    self.add(no, r);
                    return Ok(());
                }
                RowParse::Partial if !text.trim().is_empty() => {
                    self.pending = Some((pno, joined));
                    return Ok(());
                }
                _ => {
                    self.pending = Some((pno, p));
                    self.drop_pending("cut by other output");
                }
            }
        }
        let h = self.header.as_ref().expect("checked above");
        match parse_row(h, &coll, text) {
            RowParse::Rows(r) => self.add(no, r),
            RowParse::Partial => self.pending = Some((no, text.to_string())),
            RowParse::Other => {}
            RowParse::Bad(msg) => {
                return Err(ParseError::at(
                    no,
                    format!("bad nccl-tests row: {msg}: `{}`", text.trim()),
                ));
            }
        }
        Ok(())
    }

    fn add(&mut self, no: usize, rows: Vec<Row>) {
        self.last_row_line = no;
        for r in rows {
            self.last_size = r.key.size;
            self.rows.push(r);
        }
    }

    /// Turns the section into a run: context from what was seen.
    fn finish(mut self, path: &str) -> Run {
        self.drop_pending("the log ends inside it: run killed?");
        self.run.rows = std::mem::take(&mut self.rows).finish();
        if self.header.is_some() && !self.footer && !self.run.rows.is_empty() {
            let last = self.last_size;
            self.run.warnings.push(format!(
                "no footer after the table: the run was cut short (killed?); read up to line {} (size {last})",
                self.last_row_line
            ));
        }
        if self.collective.is_none() && !self.run.rows.is_empty() {
            let guess = guess_collective(path);
            self.run.warnings.push(match &guess {
                Some(g) => format!(
                    "the log does not name its collective (nccl-tests before 2.17); taken from the file name: {g}"
                ),
                None => "the log does not name its collective (nccl-tests before 2.17): aligned with any collective of the same type, op and size".to_string(),
            });
            if let Some(g) = guess {
                self.run
                    .rows
                    .iter_mut()
                    .for_each(|r| r.key.collective = g.clone());
            }
        }
        if self.header.as_ref().is_some_and(|h| h.old) {
            self.run.format = Format::NcclTextOld;
        }
        let ctx = &mut self.run.context;
        if !self.devices.is_empty() {
            ctx.set("ranks", self.devices.len().to_string());
            ctx.set("gpu", distinct(self.devices.iter().map(|d| d.1.as_str())));
            ctx.set("hosts", distinct(self.devices.iter().map(|d| d.0.as_str())));
        }
        if !self.env.is_empty() {
            self.env.sort();
            let words: Vec<String> = self.env.iter().map(|(k, v)| format!("{k}={v}")).collect();
            ctx.set("env", words.join(" "));
        }
        self.run
    }
}

fn distinct<'a>(items: impl Iterator<Item = &'a str>) -> String {
    let mut out: Vec<&str> = Vec::new();
    for s in items {
        if !out.contains(&s) {
            out.push(s);
        }
    }
    out.join(",")
}

/// `all_reduce` in a file name, for logs that do not name their test.
fn guess_collective(path: &str) -> Option<String> {
    let name = std::path::Path::new(path)
        .file_name()?
        .to_string_lossy()
        .to_lowercase();
    [
        "reduce_scatter",
        "all_reduce",
        "all_gather",
        "alltoall",
        "broadcast",
        "sendrecv",
        "hypercube",
        "scatter",
        "gather",
        "reduce",
    ]
    .iter()
    .find(|c| name.contains(*c))
    .map(|c| format!("{c}_perf"))
}

/// Context from an NCCL message (`NCCL INFO ...`).
fn nccl_message(s: &mut Section, msg: &str) {
    let body = msg
        .strip_prefix("NCCL INFO ")
        .or_else(|| msg.strip_prefix("NCCL WARN "))
        .unwrap_or(msg);
    let ctx = &mut s.run.context;
    if let Some(v) = body.strip_prefix("NCCL version ") {
        let v = v.split_whitespace().next().unwrap_or("");
        let (nccl, cuda) = v.split_once("+cuda").unwrap_or((v, ""));
        ctx.set_default("nccl", nccl);
        ctx.set_default("cuda", cuda);
    } else if let Some((name, value)) = body.split_once(" set by environment to ") {
        let name = name.trim();
        if name.starts_with("NCCL_") && !s.env.iter().any(|(k, _)| k == name) {
            s.env.push((
                name.to_string(),
                value.trim().trim_end_matches('.').to_string(),
            ));
        }
    } else if let Some(rest) = body.strip_prefix("NET/")
        && let Some((kind, using)) = rest.split_once(" : Using ")
    {
        let using = using.split(';').next().unwrap_or("").trim();
        ctx.set_default("net", format!("{} {using}", kind.trim()));
    } else if let Some(net) = body.strip_prefix("Using network ") {
        ctx.set_default("net", net.trim());
    }
}

/// `#  Rank  0 Group  0 Pid   1300 on  vm device  0 [0000:00:06] NVIDIA H200`
/// (or before 2.13 `#   Rank  0 Pid ... [0x06] name`): (host, device name).
fn device_line(l: &str) -> Option<(String, String)> {
    let rest = l
        .trim_start()
        .strip_prefix('#')?
        .trim_start()
        .strip_prefix("Rank ")?;
    let (_, after_on) = rest.split_once(" on ")?;
    let host = after_on.split_whitespace().next()?.to_string();
    let (_, after_bracket) = after_on.split_once("] ")?;
    Some((host, after_bracket.trim().to_string()))
}

/// A `#` line.
fn comment_line(sections: &mut Vec<Section>, path: &str, l: &str) {
    let body = l.trim_start().trim_start_matches('#').trim_start();
    let starts_report = body.starts_with("nccl-tests version ")
        || body.starts_with("Collective test starting:")
        || body.starts_with("nThread ");
    if starts_report && sections.last().is_none_or(Section::started) {
        sections.push(Section::new(path));
    }
    let s = sections.last_mut().expect("a section is always open");
    let ctx = &mut s.run.context;
    if let Some(v) = body.strip_prefix("nccl-tests version ") {
        let mut words = v.split_whitespace();
        ctx.set("nccl-tests", words.next().unwrap_or(""));
        for w in words {
            if let Some(code) = w.strip_prefix("nccl-library=")
                && let Ok(c) = code.parse::<i32>()
                && c > 0
                && let Some(ver) = erdma::nccl::Version::from_code(c)
            {
                ctx.set("nccl", ver.to_string());
            }
        }
    } else if let Some(c) = body.strip_prefix("Collective test starting:") {
        s.collective = Some(c.trim().to_string());
    } else if body.starts_with("nThread ") {
        let w: Vec<&str> = body.split_whitespace().collect();
        // The value after `name`, where `name` is not the tail of a longer
        // name (`iters:` is not `warmup iters:`).
        let after = |name: &[&str]| {
            (0..w.len().saturating_sub(name.len())).find_map(|i| {
                let longer = name.len() == 1 && i > 0 && matches!(w[i - 1], "warmup" | "agg");
                (w[i..i + name.len()] == *name && !longer).then(|| w[i + name.len()].to_string())
            })
        };
        for (key, name) in [
            ("threads", &["nThread"][..]),
            ("gpus/process", &["nGpus"][..]),
            ("warmup", &["warmup", "iters:"][..]),
            ("iters", &["iters:"][..]),
            ("agg iters", &["agg", "iters:"][..]),
            ("validation", &["validation:"][..]),
            ("graph", &["graph:"][..]),
        ] {
            if let Some(v) = after(name) {
                ctx.set(key, v);
            }
        }
    } else if body.starts_with("Blocking Enabled") {
        ctx.set("blocking", body.trim());
    } else if let Some(d) = device_line(l) {
        s.devices.push(d);
    } else if body.starts_with("Out of bounds values") || body.starts_with("Avg bus bandwidth") {
        s.drop_pending("the footer follows");
        s.footer = true;
    } else if let Some(h) = Header::parse(l) {
        if s.header.is_some() {
            // A second table without a preamble: a new report.
            sections.push(Section::new(path));
        }
        let s = sections.last_mut().expect("just pushed or open");
        s.header = Some(h);
    }
}

/// Reads a log into runs.
pub fn parse(path: &str, text: &str) -> Result<Vec<Run>, ParseError> {
    parse_lines(path, text.lines())
}

/// Reads a log, given line by line (without their newlines), into runs:
/// a long log is never held whole.
pub fn parse_lines<S: AsRef<str>>(
    path: &str,
    lines: impl Iterator<Item = S>,
) -> Result<Vec<Run>, ParseError> {
    let mut sections = vec![Section::new(path)];
    for (i, raw) in lines.enumerate() {
        let no = i + 1;
        let split = split_nccl(raw.as_ref().trim_end_matches('\r'));
        if let Some(msg) = split.nccl {
            let s = sections.last_mut().expect("a section is always open");
            nccl_message(s, msg);
        }
        let l = split.text.as_str();
        if l.trim_start().starts_with('#') {
            comment_line(&mut sections, path, l);
        } else if !l.trim().is_empty() {
            let s = sections.last_mut().expect("a section is always open");
            if !s.footer {
                s.row_line(no, l)?;
            }
        }
    }
    // NCCL's lines of a report often come before its preamble is printed:
    // an early section holding context but no table gives it to the next.
    let mut runs: Vec<Run> = Vec::new();
    let mut carry = Context::default();
    for s in sections {
        let mut run = s.finish(path);
        for (k, v) in std::mem::take(&mut carry).0 {
            run.context.set_default(&k, v);
        }
        if run.rows.is_empty() && run.warnings.is_empty() {
            carry = run.context;
        } else {
            runs.push(run);
        }
    }
    Ok(group_sections(runs))
}
