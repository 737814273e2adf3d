//! The `erdma-compare` command line and what it does.

use super::align::{self, Which};
use super::model::Run;
use super::parse;
use super::plot;
use super::report::Report;
use clap::Parser;
use std::io::Write;

/// Compared (with `--fail-below`: no ratio under it).
pub const EXIT_OK: i32 = 0;
/// `--fail-below R`: a ratio is under R.
pub const EXIT_BELOW: i32 = 1;
/// Bad arguments.
pub const EXIT_USAGE: i32 = 2;
/// A file cannot be read, or is not a result file, or has no result row.
pub const EXIT_INPUT: i32 = 3;
/// `--fail-below R`: a run has no row in common with the baseline.
pub const EXIT_NOTHING: i32 = 4;
/// The plot or output cannot be written.
pub const EXIT_OUTPUT: i32 = 5;

const AFTER_HELP: &str = "\
Formats (detected from the content, not the file name):
  nccl-tests JSON (-J, schema 3) and ours (all_reduce_perf -J; its \"erdma\" key adds context)
  erdma-bench CSV (all_reduce_perf --csv)
  nccl-tests stdout logs: 2.13 and later (#wrong columns) and older (error columns),
    several collectives or runs in one log, NCCL_DEBUG=INFO lines and other ranks'
    output interleaved (also mpirun --tag-output and srun --label prefixes)
  perftest output (ib_write_bw, ib_send_lat, ...; erdma-perf's text): BW and latency tables

Rows are aligned by collective, type, op, root, placement and size. A log holding the same
test twice is split into runs (FILE#1, FILE#2); repeated rows of one run (-N) are merged
(median). A log cut short (run killed) is read up to its last complete row, with a warning.

Ratio: speed relative to the baseline (the first run, or --baseline), above 1 when faster:
baseline time / time; between runs with different rank counts, and for bandwidth tests
without a time (perftest BW), busbw / baseline busbw. perftest latency rows use t_typical.
Marks: ! under --mark (0.95), !! under 0.80.

Exit status: 0 compared (with --fail-below: no ratio under R); 1 a ratio under --fail-below R;
2 bad arguments; 3 a file cannot be read, is not a result file, or has no result row;
4 with --fail-below: a run shares no row with the baseline; 5 the plot cannot be written.

More: docs/compare.md";

/// Command-line options.
#[derive(Debug, Parser)]
#[command(
    name = "erdma-compare",
    version,
    about = "Compare nccl-tests, erdma-bench and perftest results side by side, and plot them",
    after_help = AFTER_HELP
)]
pub struct Args {
    /// Result files (any number, any mix of formats).
    #[arg(value_name = "FILE", required = true)]
    pub files: Vec<String>,
    /// Compare against this file's (first) run instead of the first FILE's.
    #[arg(long, value_name = "FILE")]
    pub baseline: Option<String>,
    /// Exit 1 when any ratio is under R (e.g. 0.9: more than 10% slower).
    #[arg(long, value_name = "R", value_parser = positive)]
    pub fail_below: Option<f64>,
    /// Mark rows with `!` under this ratio.
    #[arg(long, value_name = "R", default_value_t = align::MARK, value_parser = positive)]
    pub mark: f64,
    /// Which placement of nccl-tests rows to compare.
    #[arg(long, value_enum, default_value_t = Which::Out)]
    pub placement: Which,
    /// Only this collective (repeatable), e.g. all_reduce_perf, "RDMA_Write BW".
    #[arg(long, value_name = "NAME")]
    pub collective: Vec<String>,
    /// One JSON document on stdout instead of the table.
    #[arg(long, conflicts_with = "csv")]
    pub json: bool,
    /// CSV on stdout (one line per row and run) instead of the table.
    #[arg(long)]
    pub csv: bool,
    /// Also draw bus bandwidth against size into FILE (.svg or .png).
    #[arg(long, value_name = "FILE", value_parser = plot_path)]
    pub plot: Option<String>,
}

/// A ratio option's value: a finite number above 0 (also erdma-cluster's
/// `--fail-below`).
pub fn positive(s: &str) -> Result<f64, String> {
    match s.parse::<f64>() {
        Ok(v) if v > 0.0 && v.is_finite() => Ok(v),
        _ => Err(format!(
            "`{s}` is not a positive number (a ratio such as 0.9)"
        )),
    }
}

fn plot_path(s: &str) -> Result<String, String> {
    plot::Kind::of(s)
        .map(|_| s.to_string())
        .ok_or_else(|| format!("`{s}`: the plot file must end in .svg or .png"))
}

/// Display names: the file names, or the paths where two file names are
/// the same.
fn name_runs(runs: &mut [Run]) {
    let base = |p: &str| {
        std::path::Path::new(p)
            .file_name()
            .map_or(p.to_string(), |n| n.to_string_lossy().into_owned())
    };
    let names: Vec<String> = runs
        .iter()
        .map(|r| {
            let suffix = r.name.strip_prefix(&r.path).unwrap_or("");
            format!("{}{suffix}", base(&r.path))
        })
        .collect();
    for (i, r) in runs.iter_mut().enumerate() {
        let clash = names.iter().filter(|n| **n == names[i]).count() > 1;
        if !clash {
            r.name = names[i].clone();
        }
    }
}

fn load(path: &str, err: &mut dyn Write) -> Result<Vec<Run>, i32> {
    let mut say = |e: &crate::input::InputError| {
        let fix = match e.kind {
            crate::input::InputErrorKind::Io(_) => ": check the path and its permissions",
            _ => "",
        };
        let _ = writeln!(err, "erdma-compare: {e}{fix}");
        EXIT_INPUT
    };
    let mut input = crate::input::open(path).map_err(|e| say(&e))?;
    match parse::parse_stream(path, &mut input) {
        Ok(runs) => Ok(runs),
        // The input knows whether the failed read was the size cap.
        Err(parse::StreamError::Io(e)) => Err(say(&input.error(e))),
        Err(parse::StreamError::TooLarge(cap)) => Err(say(&crate::input::InputError {
            path: path.to_owned(),
            kind: crate::input::InputErrorKind::TooLarge(cap),
        })),
        Err(parse::StreamError::Parse(e)) => {
            let _ = writeln!(err, "erdma-compare: {}", e.describe(path));
            Err(EXIT_INPUT)
        }
    }
}

/// The metadata every erdma tool's JSON starts with.
fn meta(argv: &[String]) -> serde_json::Value {
    serde_json::json!({
        "tool": "erdma-compare",
        "version": env!("CARGO_PKG_VERSION"),
        "host": crate::nccltests::bootstrap::hosthash::short_hostname(),
        "date": crate::nccltests::cfmt::rfc3339_utc_now(),
        "command": argv,
    })
}

/// Runs erdma-compare; returns the exit status.
pub fn run(args: &Args, argv: &[String], out: &mut dyn Write, err: &mut dyn Write) -> i32 {
    let mut runs: Vec<Run> = Vec::new();
    if let Some(b) = &args.baseline {
        match load(b, err) {
            Ok(r) => runs.extend(r.into_iter().take(1)),
            Err(code) => return code,
        }
    }
    for f in &args.files {
        match load(f, err) {
            Ok(r) => runs.extend(r),
            Err(code) => return code,
        }
    }
    name_runs(&mut runs);
    // The table shows warnings in its header; machine output keeps them in
    // its data, so people see them on stderr.
    if args.json || args.csv {
        for r in &runs {
            for w in &r.warnings {
                let _ = writeln!(err, "erdma-compare: warning: {}: {w}", r.path);
            }
        }
    }
    let baseline = 0;
    align::name_unnamed(&mut runs, baseline);
    let table = align::build(&runs, baseline, args.placement, &args.collective);
    let diff = super::context::diff(&runs);
    let summaries = align::summaries(&table, runs.len(), args.mark, args.fail_below);
    let report = Report {
        runs: &runs,
        table: &table,
        diff: &diff,
        summaries: &summaries,
        mark_below: args.mark,
        fail_below: args.fail_below,
    };
    let written = if args.json {
        serde_json::to_string_pretty(&report.json(meta(argv)))
            .map_err(|e| e.to_string())
            .and_then(|s| writeln!(out, "{s}").map_err(|e| e.to_string()))
    } else if args.csv {
        report
            .csv()
            .map_err(|e| e.to_string())
            .and_then(|s| write!(out, "{s}").map_err(|e| e.to_string()))
    } else {
        write!(out, "{}", report.text()).map_err(|e| e.to_string())
    };
    if let Err(e) = written {
        let _ = writeln!(err, "erdma-compare: cannot write the report: {e}");
        return EXIT_OUTPUT;
    }
    if table.groups.is_empty() {
        let _ = writeln!(
            err,
            "erdma-compare: no rows left to show: check --collective (the files hold: {})",
            runs.iter()
                .flat_map(|r| r.collectives())
                .collect::<Vec<_>>()
                .join(", ")
        );
    }
    if let Some(path) = &args.plot {
        let kind = plot::Kind::of(path).expect("checked by the argument parser");
        let series = plot::series(&runs, &table, &diff);
        let title = match table.groups.as_slice() {
            [one] => format!("{}: bus bandwidth", one.key),
            _ => "bus bandwidth".to_string(),
        };
        if let Err(e) = plot::draw(path, kind, &title, &series) {
            let _ = writeln!(
                err,
                "erdma-compare: cannot write the plot {path}: {e}: check the directory exists and is writable"
            );
            return EXIT_OUTPUT;
        }
    }
    let Some(r) = args.fail_below else {
        return EXIT_OK;
    };
    if let Some(s) = summaries.iter().find(|s| s.compared == 0) {
        let _ = writeln!(
            err,
            "erdma-compare: {} shares no row with the baseline {}: nothing to check against --fail-below {r}",
            runs[s.run].name, runs[baseline].name
        );
        return EXIT_NOTHING;
    }
    let failed: Vec<String> = summaries
        .iter()
        .filter(|s| s.failed > 0)
        .map(|s| {
            let worst = s
                .worst
                .as_ref()
                .map(|w| {
                    format!(
                        ", lowest {:.3} at {} {}",
                        w.0,
                        w.1,
                        super::model::human_size(w.2)
                    )
                })
                .unwrap_or_default();
            format!("{}: {} sizes{worst}", runs[s.run].name, s.failed)
        })
        .collect();
    if failed.is_empty() {
        EXIT_OK
    } else {
        let _ = writeln!(
            err,
            "erdma-compare: ratio under {r} against {}: {}",
            runs[baseline].name,
            failed.join("; ")
        );
        EXIT_BELOW
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(a: &[&str]) -> Result<Args, clap::Error> {
        Args::try_parse_from(std::iter::once("erdma-compare").chain(a.iter().copied()))
    }

    #[test]
    fn arguments() {
        assert!(args(&[]).is_err());
        assert!(args(&["a", "--fail-below", "x"]).is_err());
        assert!(args(&["a", "--fail-below", "-1"]).is_err());
        assert!(args(&["a", "--plot", "x.pdf"]).is_err());
        assert!(args(&["a", "--json", "--csv"]).is_err());
        let a = args(&["a", "b", "--fail-below", "0.9", "--plot", "p.png"]).unwrap();
        assert_eq!(a.files, ["a", "b"]);
        assert_eq!(a.fail_below, Some(0.9));
        assert_eq!(a.placement, Which::Out);
    }

    #[test]
    fn names_are_file_names_unless_they_clash() {
        use crate::compare::model::Format;
        let mut runs = vec![
            Run::new("x/a.json", Format::NcclJson),
            Run::new("y/a.json", Format::NcclJson),
            Run::new("z/b.txt", Format::NcclText),
            Run::new("z/b.txt", Format::NcclText),
        ];
        runs[2].name = "z/b.txt#1".into();
        runs[3].name = "z/b.txt#2".into();
        name_runs(&mut runs);
        let names: Vec<&str> = runs.iter().map(|r| r.name.as_str()).collect();
        assert_eq!(names, ["x/a.json", "y/a.json", "b.txt#1", "b.txt#2"]);
    }

    #[test]
    fn unreadable_file_is_one_line_and_status_3() {
        let a = args(&["/nonexistent/r.json"]).unwrap();
        let (mut o, mut e) = (Vec::new(), Vec::new());
        assert_eq!(run(&a, &[], &mut o, &mut e), EXIT_INPUT);
        let e = String::from_utf8(e).unwrap();
        assert_eq!(e.lines().count(), 1, "{e}");
        assert!(
            e.starts_with("erdma-compare: cannot read /nonexistent/r.json: "),
            "{e}"
        );
    }
}
