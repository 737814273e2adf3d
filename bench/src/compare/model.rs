//! What every parser produces: runs of measured rows, each with the context
//! the file records (versions, GPUs, hosts, environment).

use std::fmt;

/// Where the result was written: nccl-tests measures both, perftest neither.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Placement {
    /// Separate send and receive buffers.
    OutOfPlace,
    /// One buffer.
    InPlace,
    /// A test without the distinction (perftest).
    None,
}

impl Placement {
    /// `out-of-place`, `in-place` or `-`.
    pub fn name(self) -> &'static str {
        match self {
            Placement::OutOfPlace => "out-of-place",
            Placement::InPlace => "in-place",
            Placement::None => "-",
        }
    }
}

/// What rows are aligned by: collective, type, op, root, placement, size.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Key {
    /// The test: `all_reduce_perf`, `RDMA_Write BW`, ...
    pub collective: String,
    /// Data type (`float`); empty for perftest.
    pub dtype: String,
    /// Reduction (`sum`, `none`); empty for perftest and hypercube.
    pub op: String,
    /// Root rank, -1 when not rooted.
    pub root: i64,
    /// Buffer placement.
    pub placement: Placement,
    /// Message size in bytes (nccl-tests' size column, perftest's #bytes).
    pub size: u64,
}

impl Key {
    /// The key without the size: the table group a row belongs to.
    pub fn group(&self) -> GroupKey {
        GroupKey {
            collective: self.collective.clone(),
            dtype: self.dtype.clone(),
            op: self.op.clone(),
            root: self.root,
            placement: self.placement,
        }
    }
}

/// A key without its size.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct GroupKey {
    /// See [`Key::collective`].
    pub collective: String,
    /// See [`Key::dtype`].
    pub dtype: String,
    /// See [`Key::op`].
    pub op: String,
    /// See [`Key::root`].
    pub root: i64,
    /// See [`Key::placement`].
    pub placement: Placement,
}

impl fmt::Display for GroupKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.collective)?;
        for part in [&self.dtype, &self.op] {
            if !part.is_empty() {
                write!(f, " {part}")?;
            }
        }
        if self.root >= 0 {
            write!(f, " root {}", self.root)?;
        }
        if self.placement != Placement::None {
            write!(f, " {}", self.placement.name())?;
        }
        Ok(())
    }
}

/// One measurement. Fields a format lacks are None (perftest's bandwidth
/// tests print no time, its latency tests no bandwidth).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Measure {
    /// Element count (nccl-tests' count column).
    pub count: Option<u64>,
    /// Time per operation, microseconds (perftest latency: t_typical).
    pub time_us: Option<f64>,
    /// Algorithm bandwidth, GB/s (10^9 bytes per second).
    pub algbw: Option<f64>,
    /// Bus bandwidth, GB/s (perftest: BW average).
    pub busbw: Option<f64>,
    /// Wrong elements (nccl-tests `#wrong`; before 2.13 the maximum
    /// deviation of the `error` column).
    pub wrong: Option<f64>,
    /// How many measurements of this key were merged (median): `-N`
    /// cycles, or a repeated table.
    pub samples: usize,
}

/// One row of a run.
#[derive(Clone, Debug, PartialEq)]
pub struct Row {
    /// What it is aligned by.
    pub key: Key,
    /// What was measured.
    pub m: Measure,
}

/// The formats erdma-compare reads.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Format {
    /// nccl-tests' `-J` JSON (schema 3).
    NcclJson,
    /// Ours: nccl-tests' schema plus the `erdma` key.
    OursJson,
    /// Our `--csv`.
    OursCsv,
    /// nccl-tests' stdout, 2.13 and later (`#wrong` columns).
    NcclText,
    /// nccl-tests' stdout before 2.13 (`error` columns).
    NcclTextOld,
    /// perftest's (and erdma-perf's) tables.
    Perftest,
    /// erdma-perf's `--json` documents.
    PerfJson,
    /// erdma-perf's `--csv` file.
    PerfCsv,
}

impl Format {
    /// A short human name.
    pub fn name(self) -> &'static str {
        match self {
            Format::NcclJson => "nccl-tests JSON",
            Format::OursJson => "erdma-bench JSON",
            Format::OursCsv => "erdma-bench CSV",
            Format::NcclText => "nccl-tests log",
            Format::NcclTextOld => "nccl-tests log (before 2.13)",
            Format::Perftest => "perftest log",
            Format::PerfJson => "erdma-perf JSON",
            Format::PerfCsv => "erdma-perf CSV",
        }
    }
}

/// Ordered `key = value` pairs describing how a run was made.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Context(pub Vec<(String, String)>);

impl Context {
    /// Sets `key` (replacing an earlier value); empty values are skipped.
    pub fn set(&mut self, key: &str, value: impl Into<String>) {
        let value = value.into();
        if value.is_empty() {
            return;
        }
        match self.0.iter_mut().find(|(k, _)| k == key) {
            Some(slot) => slot.1 = value,
            None => self.0.push((key.to_string(), value)),
        }
    }

    /// Sets `key` only when it has no value yet.
    pub fn set_default(&mut self, key: &str, value: impl Into<String>) {
        if self.get(key).is_none() {
            self.set(key, value);
        }
    }

    /// The value of `key`.
    pub fn get(&self, key: &str) -> Option<&str> {
        self.0
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
    }
}

/// One run: a file, or one of several runs concatenated in a file.
#[derive(Clone, Debug)]
pub struct Run {
    /// Display name (file name, `#2` for a later run in the same file).
    pub name: String,
    /// The file it came from.
    pub path: String,
    /// Its format.
    pub format: Format,
    /// How it was made.
    pub context: Context,
    /// Its rows, one per key (repeats merged by [`Run::merge_repeats`]).
    pub rows: Vec<Row>,
    /// What was odd about the file (truncation, skipped lines).
    pub warnings: Vec<String>,
}

impl Run {
    /// An empty run of `path`.
    pub fn new(path: &str, format: Format) -> Run {
        Run {
            name: path.to_string(),
            path: path.to_string(),
            format,
            context: Context::default(),
            rows: Vec::new(),
            warnings: Vec::new(),
        }
    }

    /// The distinct collectives, in order of appearance.
    pub fn collectives(&self) -> Vec<&str> {
        let mut out: Vec<&str> = Vec::new();
        for r in &self.rows {
            if !out.contains(&r.key.collective.as_str()) {
                out.push(&r.key.collective);
            }
        }
        out
    }

    /// Merges rows with the same key (`-N` cycles, repeated tables): each
    /// value becomes the median of its samples; row order is kept.
    pub fn merge_repeats(&mut self) {
        let mut m = RowMerger::default();
        self.rows.drain(..).for_each(|r| m.push(r));
        self.rows = m.finish();
    }
}

/// Rows merged as they are read, as [`Run::merge_repeats`] merges them:
/// one entry per key holding only the numbers its medians need, so that a
/// long `-N` log costs a few bytes per row instead of a whole [`Row`].
#[derive(Debug, Default)]
pub struct RowMerger {
    index: std::collections::HashMap<Key, usize>,
    keys: Vec<Key>,
    acc: Vec<Samples>,
}

/// One key's measurements so far.
#[derive(Debug, Default)]
struct Samples {
    count: Option<u64>,
    time_us: Vec<f64>,
    algbw: Vec<f64>,
    busbw: Vec<f64>,
    wrong: Option<f64>,
    samples: usize,
}

impl RowMerger {
    /// Adds one row.
    pub fn push(&mut self, r: Row) {
        let i = match self.index.get(&r.key) {
            Some(&i) => i,
            None => {
                let i = self.keys.len();
                self.index.insert(r.key.clone(), i);
                self.keys.push(r.key);
                self.acc.push(Samples {
                    count: r.m.count,
                    ..Samples::default()
                });
                i
            }
        };
        let a = &mut self.acc[i];
        let keep = |v: &mut Vec<f64>, x: Option<f64>| v.extend(x.filter(|x| !x.is_nan()));
        keep(&mut a.time_us, r.m.time_us);
        keep(&mut a.algbw, r.m.algbw);
        keep(&mut a.busbw, r.m.busbw);
        a.wrong = match (a.wrong, r.m.wrong) {
            (Some(w), Some(x)) => Some(w.max(x)),
            (w, x) => w.or(x),
        };
        a.samples += r.m.samples.max(1);
    }

    /// Whether no row was added.
    pub fn is_empty(&self) -> bool {
        self.keys.is_empty()
    }

    /// One row per key, in order of first appearance, each value the
    /// median of its samples.
    pub fn finish(self) -> Vec<Row> {
        self.keys
            .into_iter()
            .zip(self.acc)
            .map(|(key, a)| Row {
                key,
                m: Measure {
                    count: a.count,
                    time_us: median(a.time_us.into_iter()),
                    algbw: median(a.algbw.into_iter()),
                    busbw: median(a.busbw.into_iter()),
                    wrong: a.wrong,
                    samples: a.samples,
                },
            })
            .collect()
    }
}

/// The median (mean of the middle two for an even count); None when empty.
pub fn median(values: impl Iterator<Item = f64>) -> Option<f64> {
    let mut v: Vec<f64> = values.filter(|x| !x.is_nan()).collect();
    if v.is_empty() {
        return None;
    }
    v.sort_by(f64::total_cmp);
    let n = v.len();
    Some(if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    })
}

/// A byte count with a binary unit: `8 B`, `1 KiB`, `1.5 MiB`, `8 GiB`.
pub fn human_size(bytes: u64) -> String {
    const UNITS: [&str; 6] = ["B", "KiB", "MiB", "GiB", "TiB", "PiB"];
    let mut unit = 0;
    let mut v = bytes as f64;
    while v >= 1024.0 && unit + 1 < UNITS.len() {
        v /= 1024.0;
        unit += 1;
    }
    if v.fract() == 0.0 {
        format!("{v} {}", UNITS[unit])
    } else {
        let s = format!("{v:.2}");
        let s = s.trim_end_matches('0').trim_end_matches('.');
        format!("{s} {}", UNITS[unit])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(size: u64, t: f64) -> Row {
        Row {
            key: Key {
                collective: "all_reduce_perf".into(),
                dtype: "float".into(),
                op: "sum".into(),
                root: -1,
                placement: Placement::OutOfPlace,
                size,
            },
            m: Measure {
                time_us: Some(t),
                busbw: Some(1.0 / t),
                samples: 1,
                ..Measure::default()
            },
        }
    }

    #[test]
    fn sizes_read_like_people_write_them() {
        assert_eq!(human_size(8), "8 B");
        assert_eq!(human_size(1023), "1023 B");
        assert_eq!(human_size(1024), "1 KiB");
        assert_eq!(human_size(1536), "1.5 KiB");
        assert_eq!(human_size(8 << 30), "8 GiB");
        assert_eq!(human_size(3 << 20), "3 MiB");
    }

    #[test]
    fn repeats_become_medians() {
        let mut run = Run::new("x", Format::NcclText);
        run.rows = vec![row(8, 3.0), row(16, 1.0), row(8, 1.0), row(8, 2.0)];
        run.merge_repeats();
        assert_eq!(run.rows.len(), 2);
        assert_eq!(run.rows[0].key.size, 8);
        assert_eq!(run.rows[0].m.time_us, Some(2.0));
        assert_eq!(run.rows[0].m.busbw, Some(0.5));
        assert_eq!(run.rows[0].m.samples, 3);
        assert_eq!(median([1.0, 4.0].into_iter()), Some(2.5));
        assert_eq!(median(std::iter::empty()), None);
    }

    #[test]
    fn context_keeps_order_and_first_values() {
        let mut c = Context::default();
        c.set("nccl", "2.19.3");
        c.set("hosts", "a");
        c.set_default("nccl", "2.28.9");
        c.set("hosts", "a,b");
        c.set("empty", "");
        assert_eq!(
            c.0,
            [
                ("nccl".to_string(), "2.19.3".to_string()),
                ("hosts".to_string(), "a,b".to_string())
            ]
        );
    }
}
