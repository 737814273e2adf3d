//! The `--csv FILE` output: one row per size and placement, with a header,
//! for spreadsheets. Written by the printing rank only, as `-J` is: never
//! over an existing file (FILE.0, FILE.1, ...), and complete on every path
//! (see [`super::file`]). The result columns ([`HEADER`]) are followed by
//! the run's context ([`super::context::CSV_COLUMNS`]), the same on every
//! row.

use std::fs::File;

use super::context::{CSV_COLUMNS, RunContext};
use super::file::{self, Pending};

/// The result column names.
pub const HEADER: [&str; 15] = [
    "collective",
    "backend",
    "nranks",
    "size_bytes",
    "count",
    "type",
    "redop",
    "root",
    "placement",
    "time_us",
    "time_kind",
    "algbw_gbps",
    "busbw_gbps",
    "wrong",
    "cycle",
];

/// One row.
#[derive(Clone, Debug)]
pub struct CsvRow<'a> {
    /// Collective name (e.g. `all_reduce_perf`).
    pub collective: &'a str,
    /// Backend name.
    pub backend: &'a str,
    /// Ranks in the communicator.
    pub nranks: usize,
    /// Size column of the table.
    pub size: u64,
    /// Count column of the table.
    pub count: u64,
    /// Type name.
    pub type_name: &'a str,
    /// Op name.
    pub op_name: &'a str,
    /// Root (-1 when not rooted).
    pub root: i32,
    /// `out-of-place` or `in-place`.
    pub placement: &'a str,
    /// Time in microseconds.
    pub time_us: f64,
    /// `time` or `cputime`.
    pub time_kind: &'a str,
    /// Algorithm bandwidth, GB/s.
    pub algbw: f64,
    /// Bus bandwidth, GB/s.
    pub busbw: f64,
    /// Wrong elements (None when not checked).
    pub wrong: Option<i64>,
    /// Run cycle (`-N`), from 0.
    pub cycle: u64,
}

/// The CSV file.
pub struct CsvOut {
    w: csv::Writer<std::io::BufWriter<File>>,
    context: Vec<String>,
    pending: Pending,
}

impl CsvOut {
    /// Starts `path` (or the first free `path.N`) and writes the header.
    pub fn create(path: &str) -> Result<CsvOut, String> {
        let (f, pending) =
            file::create(path).map_err(|e| format!("cannot create CSV file {path}: {e}"))?;
        let mut w = csv::WriterBuilder::new().from_writer(f);
        w.write_record(HEADER.iter().chain(CSV_COLUMNS.iter()))
            .map_err(|e| format!("cannot write CSV file {path}: {e}"))?;
        Ok(CsvOut {
            w,
            context: vec![String::new(); CSV_COLUMNS.len()],
            pending,
        })
    }

    /// The name the file will have.
    pub fn name(&self) -> &str {
        &self.pending.dest
    }

    /// The context written at the end of every row from now on.
    pub fn set_context(&mut self, ctx: &RunContext) {
        self.context = ctx.csv_values();
    }

    /// Appends a row; errors are reported once at [`CsvOut::finish`].
    pub fn row(&mut self, r: &CsvRow) -> csv::Result<()> {
        let wrong = r.wrong.map(|w| w.to_string()).unwrap_or_default();
        let result = [
            r.collective.to_string(),
            r.backend.to_string(),
            r.nranks.to_string(),
            r.size.to_string(),
            r.count.to_string(),
            r.type_name.to_string(),
            r.op_name.to_string(),
            r.root.to_string(),
            r.placement.to_string(),
            format!("{}", r.time_us),
            r.time_kind.to_string(),
            format!("{}", r.algbw),
            format!("{}", r.busbw),
            wrong,
            r.cycle.to_string(),
        ];
        self.w
            .write_record(result.iter().chain(self.context.iter()))
    }

    /// Flushes the file and gives it its name; returns the name.
    pub fn finish(self) -> std::io::Result<String> {
        let f = self.w.into_inner().map_err(|e| e.into_error())?;
        self.pending.commit(f)
    }
}
