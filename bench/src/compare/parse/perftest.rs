//! perftest's output (ib_write_bw, ib_send_lat, ...; erdma-perf prints the
//! same layout): a dashed block with the test's title and settings, then
//! a table:
//!
//! ```text
//!  #bytes     #iterations    BW peak[MB/sec]    BW average[MB/sec]   MsgRate[Mpps]
//!  #bytes #iterations    t_min[usec]    t_max[usec]  t_typical[usec]    t_avg[usec]    t_stdev[usec]   99% percentile[usec]   99.9% percentile[usec]
//! ```
//!
//! Bandwidth rows give busbw = algbw = BW average in GB/s (perftest's
//! MB/sec is 2^20 bytes per second, Gb/sec 10^9 bits); latency rows give
//! time = t_typical (perftest's median), or t_avg in duration mode.

use super::lines::strip_launcher_prefix;
use super::{ParseError, group_sections, number};
use crate::compare::model::{Format, Key, Measure, Placement, Row, Run};

/// Whether `line` is the header of a perftest table.
pub fn is_table_header(line: &str) -> bool {
    let l = line.trim_start();
    l.starts_with("#bytes")
        && (l.contains("BW average[") || l.contains("t_avg[") || l.contains("t_min["))
}

#[derive(Debug, Clone, Copy)]
enum Table {
    /// Bandwidth; the factor from the unit to GB/s, and whether `#sl`
    /// (QoS) comes before `#iterations`.
    Bw { to_gbs: f64, sl: bool },
    /// Latency: the column of the time reported.
    Lat { time_col: usize },
}

fn table_of(header: &str) -> Table {
    let l = header.trim_start();
    if l.contains("BW average[") {
        let to_gbs = if l.contains("[Gb/sec]") {
            1.0 / 8.0
        } else {
            1048576.0 / 1e9
        };
        Table::Bw {
            to_gbs,
            sl: l.contains("#sl"),
        }
    } else if l.contains("t_typical[") {
        Table::Lat { time_col: 4 }
    } else {
        // Duration mode: #bytes #iterations t_avg[usec] tps average.
        Table::Lat { time_col: 2 }
    }
}

fn parse_row(t: Table, test: &str, l: &str) -> Result<Option<Row>, String> {
    let toks: Vec<&str> = l.split_whitespace().collect();
    let Some(size) = toks.first().and_then(|s| s.parse::<u64>().ok()) else {
        return Ok(None);
    };
    let nums = |from: usize, n: usize| -> Result<Option<Vec<f64>>, String> {
        if toks.len() < from + n {
            return Ok(None);
        }
        toks[from..from + n]
            .iter()
            .map(|s| number(s).ok_or_else(|| format!("`{s}` is not a number")))
            .collect::<Result<Vec<f64>, String>>()
            .map(Some)
    };
    let m = match t {
        Table::Bw { to_gbs, sl } => {
            let first = if sl { 3 } else { 2 };
            let Some(v) = nums(first, 3)? else {
                return Err("incomplete".into());
            };
            let bw = v[1] * to_gbs;
            Measure {
                count: None,
                time_us: None,
                algbw: Some(bw),
                busbw: Some(bw),
                wrong: None,
                samples: 1,
            }
        }
        Table::Lat { time_col } => {
            let Some(v) = nums(2, time_col - 1)? else {
                return Err("incomplete".into());
            };
            Measure {
                time_us: Some(v[time_col - 2]),
                samples: 1,
                ..Measure::default()
            }
        }
    };
    Ok(Some(Row {
        key: Key {
            collective: test.to_string(),
            dtype: String::new(),
            op: String::new(),
            root: -1,
            placement: Placement::None,
            size,
        },
        m,
    }))
}

/// A number with other output glued to it: `0.000106Correlation`.
fn glued(tok: &str) -> bool {
    number(tok).is_none()
        && tok.starts_with(|c: char| c.is_ascii_digit())
        && tok
            .chars()
            .any(|c| c.is_alphabetic() && c != 'e' && c != 'E')
}

/// `RDMA_Write BW Test` -> `RDMA_Write BW`.
fn title(l: &str) -> Option<String> {
    let t = l.trim();
    let name = t.strip_suffix(" Test")?;
    (!name.is_empty() && !t.contains(':')).then(|| name.to_string())
}

/// Reads perftest output into runs.
pub fn parse(path: &str, text: &str) -> Result<Vec<Run>, ParseError> {
    let mut sections: Vec<Run> = Vec::new();
    let mut cur: Option<Run> = None;
    let mut test = String::from("perftest");
    let mut table: Option<(Table, usize)> = None;
    let mut after_dash = false;
    let mut last_row = 0usize;
    let mut cut: Option<usize> = None;
    let finish = |run: Option<Run>,
                  table: &Option<(Table, usize)>,
                  last_row: usize,
                  cut: Option<usize>,
                  out: &mut Vec<Run>| {
        if let Some(mut r) = run {
            if let Some(no) = cut {
                r.warnings
                    .push(format!("line {no}: incomplete row ignored (run killed?)"));
            }
            if table.is_some() && !r.rows.is_empty() {
                r.warnings.push(format!(
                    "the table has no closing line: the run was cut short (killed?); read up to line {last_row}"
                ));
            }
            out.push(r);
        }
    };
    for (i, raw) in text.lines().enumerate() {
        let no = i + 1;
        let l = strip_launcher_prefix(raw.trim_end_matches('\r'));
        let dash = l.trim().len() > 20 && l.trim().bytes().all(|b| b == b'-');
        if dash {
            if let Some((_, _)) = table.take() {
                // The table's closing line.
                if let Some(r) = cur.as_mut()
                    && let Some(no) = cut.take()
                {
                    r.warnings
                        .push(format!("line {no}: incomplete row ignored"));
                }
            }
            after_dash = true;
            continue;
        }
        if after_dash && let Some(t) = title(l) {
            finish(cur.take(), &None, last_row, cut.take(), &mut sections);
            test = t;
            let mut r = Run::new(path, Format::Perftest);
            r.context.set("test", test.clone());
            cur = Some(r);
        }
        after_dash = false;
        if is_table_header(l) {
            if cur.is_none() {
                cur = Some(Run::new(path, Format::Perftest));
            }
            table = Some((table_of(l), no));
            continue;
        }
        if let Some((t, _)) = table {
            if let Some(no_cut) = cut.take() {
                // A row cut short followed by more text: not the last row.
                if let Some(r) = cur.as_mut() {
                    r.warnings
                        .push(format!("line {no_cut}: incomplete row ignored"));
                }
            }
            match parse_row(t, &test, l) {
                Ok(Some(row)) => {
                    last_row = no;
                    if let Some(r) = cur.as_mut() {
                        r.rows.push(row);
                    }
                }
                Ok(None) => {}
                Err(e) if e == "incomplete" => cut = Some(no),
                Err(e) => {
                    // A number glued to other output (`0.000106Correlation ...`)
                    // on the last row of a failed run.
                    if l.split_whitespace().any(glued) {
                        cut = Some(no);
                    } else {
                        return Err(ParseError::at(
                            no,
                            format!("bad perftest row: {e}: `{}`", l.trim()),
                        ));
                    }
                }
            }
            continue;
        }
        // Settings: ` Key : Value` pairs, two per line separated by tabs.
        if let Some(r) = cur.as_mut() {
            for part in l.split('\t').filter(|p| !p.trim().is_empty()) {
                if let Some((k, v)) = part.split_once(':') {
                    let (k, v) = (k.trim(), v.trim());
                    let wanted = !k.is_empty()
                        && k.len() < 24
                        && !["local address", "remote address", "GID"].contains(&k)
                        && k.chars().next().is_some_and(char::is_alphabetic);
                    if wanted {
                        r.context.set(&k.to_lowercase(), v);
                    }
                }
            }
        }
    }
    finish(cur.take(), &table, last_row, cut.take(), &mut sections);
    Ok(group_sections(sections))
}
