//! Reading result files: the format is detected from the content (never
//! from the file name), then one small parser per format turns the file
//! into one or more [`Run`]s.

pub mod lines;
pub mod nccl_json;
pub mod nccl_text;
pub mod ours_csv;
pub mod perf;
pub mod perftest;

use super::model::{Format, Run};
use std::fmt;

/// Why a file could not be read as results.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ParseError {
    /// 1-based line the problem is on, when there is one.
    pub line: Option<usize>,
    /// What is wrong.
    pub msg: String,
}

impl ParseError {
    /// An error at `line`.
    pub fn at(line: usize, msg: impl Into<String>) -> ParseError {
        ParseError {
            line: Some(line),
            msg: msg.into(),
        }
    }

    /// `FILE:LINE: msg`, the form erdma-compare prints.
    pub fn describe(&self, path: &str) -> String {
        match self.line {
            Some(l) => format!("{path}:{l}: {}", self.msg),
            None => format!("{path}: {}", self.msg),
        }
    }
}

impl fmt::Display for ParseError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.line {
            Some(l) => write!(f, "line {l}: {}", self.msg),
            None => f.write_str(&self.msg),
        }
    }
}

/// Detects the format of `bytes` from its content.
pub fn detect(bytes: &[u8]) -> Result<Format, ParseError> {
    if bytes.iter().take(65536).any(|&b| b == 0) {
        let line = 1 + bytes
            .iter()
            .take_while(|&&b| b != 0)
            .filter(|&&b| b == b'\n')
            .count();
        return Err(ParseError::at(
            line,
            "binary data, not a result file (expected nccl-tests or perftest output, JSON or CSV)",
        ));
    }
    let text = String::from_utf8_lossy(bytes);
    let trimmed = text.trim_start_matches('\u{feff}').trim_start();
    if trimmed.is_empty() {
        return Err(ParseError {
            line: None,
            msg: "empty file: the run printed nothing (was it started?)".into(),
        });
    }
    if perf::is_json(trimmed) {
        return Ok(Format::PerfJson);
    }
    if trimmed.starts_with('{') {
        return Ok(Format::NcclJson);
    }
    let first = trimmed.lines().next().unwrap_or("");
    if ours_csv::is_header(first) {
        return Ok(Format::OursCsv);
    }
    if perf::is_csv_header(first) {
        return Ok(Format::PerfCsv);
    }
    let mut nccl = None;
    for raw in text.lines() {
        let split = lines::split_nccl(raw);
        let l = split.text.as_str();
        if perftest::is_table_header(l) {
            return Ok(Format::Perftest);
        }
        if nccl.is_none() {
            nccl = nccl_text::layout_of(l);
        }
    }
    if let Some(f) = nccl {
        return Ok(f);
    }
    let line = 1 + text.lines().take_while(|l| l.trim().is_empty()).count();
    Err(ParseError::at(
        line,
        "not a result file: no nccl-tests table header (`#  size  count  type ...`), perftest table (`#bytes ...`), JSON object or erdma-bench/erdma-perf CSV header found",
    ))
}

/// How much of a file [`parse_stream`] detects the format from.
pub const DETECT_BYTES: u64 = 1 << 20;

/// Why a stream could not be read as runs.
#[derive(Debug)]
pub enum StreamError {
    /// Reading failed.
    Io(std::io::Error),
    /// What was read is not results.
    Parse(ParseError),
    /// A format read whole (all but nccl-tests logs) is over this cap
    /// ([`crate::input::MAX_DOCUMENT_BYTES`]), in bytes.
    TooLarge(u64),
}

impl From<std::io::Error> for StreamError {
    fn from(e: std::io::Error) -> Self {
        StreamError::Io(e)
    }
}

impl From<ParseError> for StreamError {
    fn from(e: ParseError) -> Self {
        StreamError::Parse(e)
    }
}

/// [`parse`] over a reader: nccl-tests logs, the one format that grows
/// without bound (`-N` cycles), are parsed line by line and never held
/// whole; the format is detected from the first [`DETECT_BYTES`] (the
/// whole file when those do not tell), other formats are read whole, up
/// to [`crate::input::MAX_DOCUMENT_BYTES`] (their parse holds them in
/// memory several times over).
pub fn parse_stream(path: &str, r: impl std::io::Read) -> Result<Vec<Run>, StreamError> {
    use std::io::{BufRead, Read};
    let mut r = std::io::BufReader::new(r);
    let mut head = Vec::new();
    let cap = crate::input::MAX_DOCUMENT_BYTES;
    (&mut r).take(DETECT_BYTES).read_to_end(&mut head)?;
    (&mut r).take(cap).read_until(b'\n', &mut head)?;
    let at_end = r.fill_buf()?.is_empty();
    let streamed = !at_end
        && matches!(
            detect(&head),
            Ok(Format::NcclText) | Ok(Format::NcclTextOld)
        );
    if !streamed {
        (&mut r)
            .take((cap + 1).saturating_sub(head.len() as u64))
            .read_to_end(&mut head)?;
        if head.len() as u64 > cap {
            return Err(StreamError::TooLarge(cap));
        }
        return Ok(parse(path, &head)?);
    }
    let format = detect(&head)?;
    let mut failed = None;
    let rest = r.split(b'\n').map_while(|l| match l {
        Ok(l) => Some(l),
        Err(e) => {
            failed = Some(e);
            None
        }
    });
    let lines = head
        .strip_suffix(b"\n")
        .unwrap_or(&head)
        .split(|&b| b == b'\n')
        .map(<[u8]>::to_vec)
        .chain(rest)
        .map(|l| String::from_utf8_lossy(&l).into_owned());
    let runs = nccl_text::parse_lines(path, lines);
    if let Some(e) = failed {
        return Err(StreamError::Io(e));
    }
    Ok(finish(path, format, runs?)?)
}

/// Reads `bytes` (the content of `path`) as runs; `path` names the runs.
pub fn parse(path: &str, bytes: &[u8]) -> Result<Vec<Run>, ParseError> {
    let format = detect(bytes)?;
    let text = String::from_utf8_lossy(bytes);
    let runs = match format {
        Format::NcclJson | Format::OursJson => vec![nccl_json::parse(path, &text)?],
        Format::OursCsv => vec![ours_csv::parse(path, &text)?],
        Format::NcclText | Format::NcclTextOld => nccl_text::parse(path, &text)?,
        Format::Perftest => perftest::parse(path, &text)?,
        Format::PerfJson => perf::parse_json(path, &text)?,
        Format::PerfCsv => perf::parse_csv(path, &text)?,
    };
    finish(path, format, runs)
}

/// The runs of a file, without the empty ones, repeats merged, named.
fn finish(path: &str, format: Format, runs: Vec<Run>) -> Result<Vec<Run>, ParseError> {
    let mut runs: Vec<Run> = runs.into_iter().filter(|r| !r.rows.is_empty()).collect();
    if runs.is_empty() {
        return Err(ParseError {
            line: None,
            msg: format!(
                "no result rows in this {}: the run ended before its first row (see its last lines for why)",
                format.name()
            ),
        });
    }
    let n = runs.len();
    for (i, r) in runs.iter_mut().enumerate() {
        r.merge_repeats();
        if n > 1 {
            r.name = format!("{path}#{}", i + 1);
        }
    }
    Ok(runs)
}

/// Groups consecutive sections into runs: a section joins the current run
/// unless its test is already in it (the same test again means the log
/// holds several runs concatenated).
pub fn group_sections(sections: Vec<Run>) -> Vec<Run> {
    let mut runs: Vec<Run> = Vec::new();
    for s in sections {
        let repeat = runs.last().is_some_and(|r| {
            let have = r.collectives();
            s.collectives().iter().any(|c| have.contains(c))
        });
        match runs.last_mut() {
            Some(r) if !repeat => {
                for (k, v) in s.context.0 {
                    r.context.set_default(&k, v);
                }
                r.rows.extend(s.rows);
                r.warnings.extend(s.warnings);
            }
            _ => runs.push(s),
        }
    }
    runs
}

/// Parses a number as nccl-tests and perftest print them (`%g`, `%lf`,
/// `inf`, `nan`, `-nan`).
pub fn number(s: &str) -> Option<f64> {
    match s {
        "nan" | "-nan" | "NaN" => Some(f64::NAN),
        _ => s.parse().ok(),
    }
}

#[cfg(test)]
mod tests;

#[cfg(test)]
mod detect_tests {
    use super::*;

    #[test]
    fn garbage_is_named_with_its_line() {
        let e = detect(b"\n\nhello world\nthis is not a log\n").unwrap_err();
        assert_eq!(e.line, Some(3));
        assert!(e.msg.starts_with("not a result file"), "{e}");
        let e = detect(b"abc\n\x00\x01\x02").unwrap_err();
        assert_eq!(e.line, Some(2));
        assert!(e.msg.starts_with("binary data"));
        let e = detect(b"  \n").unwrap_err();
        assert_eq!(e.line, None);
        assert_eq!(
            e.describe("x.txt"),
            "x.txt: empty file: the run printed nothing (was it started?)"
        );
    }
}
