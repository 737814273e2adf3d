//! Rows of all runs side by side: grouped by collective, type, op, root and
//! placement, one line per size, each run's measurement and its ratio to
//! the baseline run.
//!
//! The ratio is a speed ratio, above 1 when the run is faster: the
//! baseline's time over the run's time; between runs with different rank
//! counts (where time is not comparable but bus bandwidth is) and for
//! bandwidth tests without a time (perftest), the run's bus bandwidth over
//! the baseline's (for nccl-tests' collectives computed from the times and
//! element counts, so small sizes whose printed busbw is `0.01` compare
//! exactly).

use super::model::{GroupKey, Measure, Placement, Run};
use std::collections::{BTreeSet, HashMap};

/// Ratio under which a row is marked `!`.
pub const MARK: f64 = 0.95;
/// Ratio under which a row is marked `!!`.
pub const MARK_BIG: f64 = 0.80;

/// One run's cell on a line.
#[derive(Clone, Debug, PartialEq)]
pub struct Cell {
    /// The measurement.
    pub m: Measure,
    /// Speed relative to the baseline (None for the baseline itself, or
    /// when either side lacks the numbers).
    pub ratio: Option<f64>,
}

/// One size of a group.
#[derive(Clone, Debug, PartialEq)]
pub struct Line {
    /// Bytes.
    pub size: u64,
    /// One cell per run (None: the run has no such row).
    pub cells: Vec<Option<Cell>>,
}

/// All sizes of one collective/type/op/root/placement.
#[derive(Clone, Debug, PartialEq)]
pub struct Group {
    /// What the lines are.
    pub key: GroupKey,
    /// Ascending sizes.
    pub lines: Vec<Line>,
}

/// The whole comparison.
#[derive(Clone, Debug, PartialEq)]
pub struct Table {
    /// Index of the baseline run.
    pub baseline: usize,
    /// The groups, in order of first appearance.
    pub groups: Vec<Group>,
}

/// Which placements to keep.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Which {
    /// Out-of-place rows (and rows without placement).
    Out,
    /// In-place rows (and rows without placement).
    In,
    /// Both.
    Both,
}

impl Which {
    fn keeps(self, p: Placement) -> bool {
        matches!(
            (self, p),
            (_, Placement::None)
                | (Which::Both, _)
                | (Which::Out, Placement::OutOfPlace)
                | (Which::In, Placement::InPlace)
        )
    }
}

/// nccl-tests' bus bandwidth per (element x second), up to the type size,
/// for a test named like its binary (`all_reduce_perf`) on `n` ranks.
fn bus_per_element(collective: &str, n: u64) -> Option<f64> {
    let want: String = collective
        .strip_suffix("_perf")?
        .chars()
        .filter(|&c| c != '_')
        .collect();
    let c = crate::nccltests::colls::ALL
        .iter()
        .find(|c| c.name.eq_ignore_ascii_case(&want))?;
    let n = usize::try_from(n).ok()?;
    Some((c.alg_bytes_factor)(n) * (c.bus_factor)(n))
}

/// The speed ratio of `run` to `base` (see the module doc). `ranks`: the
/// two runs' rank counts, when known. Between different rank counts the
/// bus bandwidth ratio is computed from the times and element counts where
/// the test is one of nccl-tests' (exact, where the printed busbw has two
/// decimals), else from the bus bandwidths.
pub fn ratio(
    collective: &str,
    base: &Measure,
    run: &Measure,
    ranks: Option<(u64, u64)>,
) -> Option<f64> {
    let pos = |v: Option<f64>| v.filter(|x| *x > 0.0 && x.is_finite());
    let by_time = match (pos(base.time_us), pos(run.time_us)) {
        (Some(b), Some(r)) => Some(b / r),
        _ => None,
    };
    let by_bw = match (pos(base.busbw), pos(run.busbw)) {
        (Some(b), Some(r)) => Some(r / b),
        _ => None,
    };
    match ranks {
        Some((nb, nr)) if nb != nr => {
            let exact = (|| {
                let (fb, fr) = (
                    bus_per_element(collective, nb)?,
                    bus_per_element(collective, nr)?,
                );
                let (cb, cr) = (base.count? as f64, run.count? as f64);
                (cb > 0.0 && fb > 0.0).then(|| by_time.map(|t| t * (cr * fr) / (cb * fb)))?
            })();
            exact.or(by_bw).or(by_time)
        }
        _ => by_time.or(by_bw),
    }
}

/// Gives rows of logs that do not name their collective (`?`, nccl-tests
/// before 2.17) the baseline's collective when it has exactly one.
pub fn name_unnamed(runs: &mut [Run], baseline: usize) {
    let named = runs[baseline].collectives();
    let only = match named.as_slice() {
        [one] if *one != "?" => one.to_string(),
        _ => return,
    };
    for r in runs.iter_mut() {
        for row in r.rows.iter_mut().filter(|row| row.key.collective == "?") {
            row.key.collective = only.clone();
        }
    }
}

/// Builds the table: `which` placements, only `collectives` when given.
pub fn build(runs: &[Run], baseline: usize, which: Which, collectives: &[String]) -> Table {
    let mut order: Vec<GroupKey> = Vec::new();
    let mut sizes: HashMap<GroupKey, BTreeSet<u64>> = HashMap::new();
    let mut cells: HashMap<(GroupKey, u64, usize), &Measure> = HashMap::new();
    // The baseline's groups come first.
    let visit: Vec<usize> = std::iter::once(baseline)
        .chain((0..runs.len()).filter(|&i| i != baseline))
        .collect();
    for &i in &visit {
        for row in &runs[i].rows {
            let g = row.key.group();
            if !which.keeps(g.placement)
                || (!collectives.is_empty() && !collectives.contains(&g.collective))
            {
                continue;
            }
            if !sizes.contains_key(&g) {
                order.push(g.clone());
            }
            sizes.entry(g.clone()).or_default().insert(row.key.size);
            cells.insert((g, row.key.size, i), &row.m);
        }
    }
    let ranks = |i: usize| {
        runs[i]
            .context
            .get("ranks")
            .and_then(|r| r.parse::<u64>().ok())
    };
    let groups = order
        .into_iter()
        .map(|g| {
            let lines = sizes[&g]
                .iter()
                .map(|&size| {
                    let base = cells.get(&(g.clone(), size, baseline)).copied();
                    let cells = (0..runs.len())
                        .map(|i| {
                            let m = cells.get(&(g.clone(), size, i))?;
                            let ratio = match base {
                                Some(b) if i != baseline => {
                                    let pair = ranks(baseline).zip(ranks(i));
                                    ratio(&g.collective, b, m, pair)
                                }
                                _ => None,
                            };
                            Some(Cell {
                                m: (*m).clone(),
                                ratio,
                            })
                        })
                        .collect();
                    Line { size, cells }
                })
                .collect();
            Group { key: g, lines }
        })
        .collect();
    Table { baseline, groups }
}

/// `!!`, `!` or nothing for a ratio.
pub fn mark(ratio: Option<f64>, mark_below: f64) -> &'static str {
    match ratio {
        Some(r) if r < MARK_BIG.min(mark_below) => "!!",
        Some(r) if r < mark_below => "!",
        _ => "",
    }
}

/// How one run compares with the baseline over the whole table.
#[derive(Clone, Debug, PartialEq)]
pub struct Summary {
    /// Run index.
    pub run: usize,
    /// Lines with a ratio.
    pub compared: usize,
    /// Geometric mean of the ratios.
    pub geomean: Option<f64>,
    /// The lowest ratio, its group and size.
    pub worst: Option<(f64, GroupKey, u64)>,
    /// Lines under the mark threshold.
    pub marked: usize,
    /// Lines under `--fail-below`.
    pub failed: usize,
    /// Baseline lines this run lacks.
    pub missing: usize,
}

/// One summary per run other than the baseline.
pub fn summaries(
    t: &Table,
    nruns: usize,
    mark_below: f64,
    fail_below: Option<f64>,
) -> Vec<Summary> {
    (0..nruns)
        .filter(|&i| i != t.baseline)
        .map(|i| {
            let mut s = Summary {
                run: i,
                compared: 0,
                geomean: None,
                worst: None,
                marked: 0,
                failed: 0,
                missing: 0,
            };
            let mut log_sum = 0.0;
            for g in &t.groups {
                for l in &g.lines {
                    let here = l.cells[i].as_ref();
                    if l.cells[t.baseline].is_some() && here.is_none() {
                        s.missing += 1;
                    }
                    let Some(r) = here.and_then(|c| c.ratio) else {
                        continue;
                    };
                    s.compared += 1;
                    log_sum += r.ln();
                    if r < mark_below {
                        s.marked += 1;
                    }
                    if fail_below.is_some_and(|f| r < f) {
                        s.failed += 1;
                    }
                    if s.worst.as_ref().is_none_or(|w| r < w.0) {
                        s.worst = Some((r, g.key.clone(), l.size));
                    }
                }
            }
            if s.compared > 0 {
                s.geomean = Some((log_sum / s.compared as f64).exp());
            }
            s
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::compare::model::{Format, Key, Row};

    fn m(t: f64, bw: f64) -> Measure {
        Measure {
            count: None,
            time_us: Some(t),
            algbw: Some(bw),
            busbw: Some(bw),
            wrong: Some(0.0),
            samples: 1,
        }
    }

    fn run(name: &str, ranks: &str, rows: &[(u64, Placement, f64, f64)]) -> Run {
        let mut r = Run::new(name, Format::NcclText);
        r.context.set("ranks", ranks);
        for &(size, placement, t, bw) in rows {
            r.rows.push(Row {
                key: Key {
                    collective: "all_reduce_perf".into(),
                    dtype: "float".into(),
                    op: "sum".into(),
                    root: -1,
                    placement,
                    size,
                },
                m: m(t, bw),
            });
        }
        r
    }

    #[test]
    fn ratios_by_time_then_by_busbw_across_rank_counts() {
        use Placement::{InPlace, OutOfPlace};
        let a = run(
            "a",
            "2",
            &[
                (8, OutOfPlace, 10.0, 0.0),
                (1024, OutOfPlace, 100.0, 10.0),
                (1024, InPlace, 1.0, 1.0),
            ],
        );
        let b = run(
            "b",
            "2",
            &[
                (8, OutOfPlace, 20.0, 0.0),
                (1024, OutOfPlace, 50.0, 20.0),
                (4096, OutOfPlace, 1.0, 1.0),
            ],
        );
        let c = run("c", "4", &[(1024, OutOfPlace, 100.0, 15.0)]);
        let runs = [a, b, c];
        let t = build(&runs, 0, Which::Out, &[]);
        assert_eq!(t.groups.len(), 1);
        let lines = &t.groups[0].lines;
        assert_eq!(
            lines.iter().map(|l| l.size).collect::<Vec<_>>(),
            [8, 1024, 4096]
        );
        // busbw 0 (one rank): by time.
        assert_eq!(lines[0].cells[1].as_ref().unwrap().ratio, Some(0.5));
        assert_eq!(lines[1].cells[1].as_ref().unwrap().ratio, Some(2.0));
        assert_eq!(lines[1].cells[0].as_ref().unwrap().ratio, None);
        // different rank counts: by bus bandwidth (no element counts here).
        assert_eq!(lines[1].cells[2].as_ref().unwrap().ratio, Some(1.5));
        // the baseline lacks 4096: no ratio; c lacks 8.
        assert_eq!(lines[2].cells[1].as_ref().unwrap().ratio, None);
        assert!(lines[0].cells[2].is_none());

        let s = summaries(&t, 3, MARK, Some(0.9));
        assert_eq!(s.len(), 2);
        assert_eq!(
            (s[0].compared, s[0].marked, s[0].failed, s[0].missing),
            (2, 1, 1, 0)
        );
        assert!((s[0].geomean.unwrap() - 1.0).abs() < 1e-12);
        assert_eq!(s[0].worst.as_ref().map(|w| (w.0, w.2)), Some((0.5, 8)));
        assert_eq!(s[1].missing, 1);

        let both = build(&runs, 0, Which::Both, &[]);
        assert_eq!(both.groups.len(), 2);
        assert_eq!(both.groups[1].key.placement, InPlace);
        let b0 = build(&runs, 1, Which::Out, &["nothing".to_string()]);
        assert!(b0.groups.is_empty());
    }

    #[test]
    fn exact_bus_bandwidth_ratio_across_rank_counts() {
        // all_reduce: busbw = count x size x 2(n-1)/n / time.
        let at = |count, t| Measure {
            count: Some(count),
            time_us: Some(t),
            busbw: Some(0.01),
            ..Measure::default()
        };
        let r = ratio("all_reduce_perf", &at(2, 10.0), &at(2, 20.0), Some((2, 16)));
        let expect = 0.5 * (2.0 * 15.0 / 16.0) / (2.0 * 1.0 / 2.0);
        assert!((r.unwrap() - expect).abs() < 1e-12, "{r:?}");
        // all_gather: the count is per rank.
        let r = ratio("all_gather_perf", &at(8, 10.0), &at(4, 10.0), Some((2, 4)));
        let expect = (4.0 * 4.0 * 0.75) / (8.0 * 2.0 * 0.5);
        assert!((r.unwrap() - expect).abs() < 1e-12, "{r:?}");
        // Not an nccl-tests test: the printed bus bandwidths.
        assert_eq!(
            ratio("RDMA_Write BW", &at(1, 1.0), &at(1, 2.0), Some((1, 2))),
            Some(1.0)
        );
        assert_eq!(
            ratio("all_reduce_perf", &at(2, 10.0), &at(2, 20.0), Some((4, 4))),
            Some(0.5)
        );
    }

    #[test]
    fn marks() {
        assert_eq!(mark(Some(0.5), MARK), "!!");
        assert_eq!(mark(Some(0.9), MARK), "!");
        assert_eq!(mark(Some(0.96), MARK), "");
        assert_eq!(mark(None, MARK), "");
        assert_eq!(mark(Some(0.7), 0.6), "");
    }
}
