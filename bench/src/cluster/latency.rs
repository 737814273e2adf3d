//! Latency between the pairs (`--latency`, with `--pairs`): erdma-perf's
//! write_lat between every pair the pair stage's schedule meets (its
//! rounds, rail 0), after the bandwidth rounds; the median (t_typical) and
//! p99 of each directed cell in a matrix of their own, and a verdict for a
//! host or path whose median is over the cluster's robust line (median +
//! k x MAD, with a floor). A bad cable or a congested path shows here at
//! full bandwidth.
//!
//! The runs go through the same driver and network as the bandwidth pairs
//! (the binary's); this module makes their options, reads their documents
//! and judges the matrix.

use serde_json::{Value, json};

use super::pairs::PairRun;
use crate::doctor::Status;

/// The erdma-perf test of each latency run.
pub const TEST: &str = "write_lat";

/// How many scaled MADs over the reference a latency must be to be named
/// (Iglewicz and Hoaglin's 3.5 for the modified z-score).
pub const K: f64 = 3.5;

/// The floor of the line: at least this fraction over the reference...
pub const FLOOR_FRACTION: f64 = 0.25;

/// ...and at least this many microseconds over it (a cluster whose hosts
/// agree to 0.1 us is not judged on a 1 us wobble).
pub const FLOOR_US: f64 = 2.0;

/// MAD to the standard deviation of a normal distribution.
const MAD_SCALE: f64 = 1.4826;

/// erdma-perf's options of the path in `--perf-args` (kept for the latency
/// runs, which must take the same path): GID index, MTU, port, connection
/// type, TOS, hop limit, traffic class, RDMA CM. The rest (sizes, `-D`,
/// `-q`, BW-only options) are the bandwidth runs' own.
const PATH_OPTIONS: [(&str, &str, bool); 9] = [
    ("-x", "--gid-index", true),
    ("-m", "--mtu", true),
    ("-i", "--ib-port", true),
    ("-c", "--connection", true),
    ("-T", "--tos", true),
    ("-L", "--hop_limit", true),
    ("", "--tclass", true),
    ("-R", "--rdma_cm", false),
    ("-z", "--comm_rdma_cm", false),
];

/// The latency runs' erdma-perf options: the path options of `perf_args`
/// (GID index, MTU, port, RDMA CM and the like, as given: `-x 3`, `-x3`,
/// `--gid-index=3`), then `latency_args`.
pub fn perf_args(perf_args: &str, latency_args: &str) -> String {
    let words: Vec<&str> = perf_args.split_whitespace().collect();
    let mut kept: Vec<&str> = Vec::new();
    let mut i = 0;
    while i < words.len() {
        let w = words[i];
        let hit = PATH_OPTIONS.iter().find_map(|&(short, long, arg)| {
            if (!short.is_empty() && w == short) || w == long {
                Some(if arg { 2 } else { 1 })
            } else if arg
                && ((!short.is_empty() && w.starts_with(short) && !w.starts_with("--"))
                    || w.starts_with(&format!("{long}=")))
            {
                Some(1)
            } else {
                None
            }
        });
        match hit {
            Some(n) => {
                kept.extend(words.iter().skip(i).take(n));
                i += n;
            }
            None => i += 1,
        }
    }
    kept.extend(latency_args.split_whitespace());
    kept.join(" ")
}

/// The median (t_typical) and p99 of a write_lat document's last row, in
/// microseconds.
pub fn lat_of(doc: &Value) -> Option<(f64, f64)> {
    let last = doc["results"].as_array()?.last()?;
    Some((last["t_typical_us"].as_f64()?, last["t_p99_us"].as_f64()?))
}

/// The median of `v` (none when empty).
fn median(v: &[f64]) -> Option<f64> {
    let mut s: Vec<f64> = v.iter().copied().filter(|x| x.is_finite()).collect();
    if s.is_empty() {
        return None;
    }
    s.sort_by(f64::total_cmp);
    let m = s.len() / 2;
    Some(if s.len() % 2 == 1 {
        s[m]
    } else {
        (s[m - 1] + s[m]) / 2.0
    })
}

/// A robust line: the reference (median), the spread (scaled MAD) and the
/// line a value must be over to be named: `reference + K x spread`, at
/// least [`FLOOR_FRACTION`] and [`FLOOR_US`] over the reference.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Line {
    /// The median, us.
    pub reference: f64,
    /// The scaled MAD, us.
    pub spread: f64,
    /// The line, us.
    pub line: f64,
}

/// The robust line of `values` (none when empty).
pub fn robust_line(values: &[f64]) -> Option<Line> {
    let reference = median(values)?;
    let dev: Vec<f64> = values.iter().map(|v| (v - reference).abs()).collect();
    let spread = median(&dev).unwrap_or(0.0) * MAD_SCALE;
    let line = (reference + K * spread)
        .max(reference * (1.0 + FLOOR_FRACTION))
        .max(reference + FLOOR_US);
    Some(Line {
        reference,
        spread,
        line,
    })
}

/// What a latency verdict blames.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// A host: its cells, both as client and server, over the line.
    Host,
    /// A link: both directions of one pair over the line.
    Link,
    /// One direction of a pair (client -> server).
    Direction,
}

impl Kind {
    /// As the JSON and the text say it.
    pub fn as_str(self) -> &'static str {
        match self {
            Kind::Host => "host",
            Kind::Link => "link",
            Kind::Direction => "direction",
        }
    }
}

/// One latency verdict.
#[derive(Debug, Clone, PartialEq)]
pub struct Verdict {
    /// What it blames.
    pub kind: Kind,
    /// The ranks: one for a host, (lower, higher) for a link, (client,
    /// server) for a direction.
    pub hosts: Vec<usize>,
    /// The median latency it found, us (a host's: the median of its cells).
    pub median_us: f64,
    /// The line it is over.
    pub line: Line,
    /// Why, in one line, with the numbers.
    pub why: String,
}

/// The verdicts on a matrix of medians (`median[client][server]`, us;
/// `names[i]`: rank i's name). Hosts first: a host whose cells' median
/// (its row and column) is over the line of the hosts' medians. Then each
/// cell between two hosts not named: over the cluster's line (the cells
/// of hosts not named) and over its row's (the client's other cells, the
/// same spread and floors), so that a path slower than its own host's
/// others is named, not a host a little slower than the rest; both
/// directions of a pair over it are a link, one a direction.
pub fn verdicts(median_us: &[Vec<Option<f64>>], names: &[String]) -> Vec<Verdict> {
    let n = median_us.len();
    let cell = |i: usize, j: usize| {
        median_us
            .get(i)
            .and_then(|r| r.get(j))
            .copied()
            .flatten()
            .filter(|v| i != j && v.is_finite())
    };
    let name = |i: usize| names.get(i).map_or("?", String::as_str).to_owned();
    let host_cells = |h: usize| -> Vec<f64> {
        (0..n)
            .flat_map(|o| [cell(h, o), cell(o, h)])
            .flatten()
            .collect()
    };
    let host_median: Vec<Option<f64>> = (0..n).map(|h| median(&host_cells(h))).collect();
    let hm: Vec<f64> = host_median.iter().flatten().copied().collect();
    let mut out = Vec::new();
    let mut named = vec![false; n];
    if hm.len() >= 3
        && let Some(line) = robust_line(&hm)
    {
        for (h, m) in host_median.iter().enumerate() {
            if let Some(m) = *m
                && m > line.line
            {
                named[h] = true;
                out.push(Verdict {
                    kind: Kind::Host,
                    hosts: vec![h],
                    median_us: m,
                    line,
                    why: format!(
                        "{}: latency {m:.2} us (median of its {} cells, both roles) over the \
                         line {:.2} us of the hosts' medians (reference {:.2} us, spread {:.2} us)",
                        name(h),
                        host_cells(h).len(),
                        line.line,
                        line.reference,
                        line.spread
                    ),
                });
            }
        }
    }
    let free = |i: usize, j: usize| !named[i] && !named[j];
    let rest: Vec<f64> = (0..n)
        .flat_map(|i| (0..n).map(move |j| (i, j)))
        .filter(|&(i, j)| free(i, j))
        .filter_map(|(i, j)| cell(i, j))
        .collect();
    let Some(cluster) = robust_line(&rest).filter(|_| rest.len() >= 3) else {
        return out;
    };
    let over = |i: usize, j: usize| -> Option<(f64, Line)> {
        let v = cell(i, j)?;
        if !free(i, j) || v <= cluster.line {
            return None;
        }
        let row: Vec<f64> = (0..n)
            .filter(|&o| o != j && free(i, o))
            .filter_map(|o| cell(i, o))
            .collect();
        // The row's line: its median with the cluster's spread and floors.
        let row_line = median(&row).map_or(0.0, |r| {
            (r + K * cluster.spread)
                .max(r * (1.0 + FLOOR_FRACTION))
                .max(r + FLOOR_US)
        });
        (v > row_line).then_some((v, cluster))
    };
    for i in 0..n {
        for j in (i + 1)..n {
            match (over(i, j), over(j, i)) {
                (Some((a, line)), Some((b, _))) => out.push(Verdict {
                    kind: Kind::Link,
                    hosts: vec![i, j],
                    median_us: a.max(b),
                    line,
                    why: format!(
                        "{} <-> {}: latency {a:.2} us and {b:.2} us (both directions) over the \
                         cluster's line {:.2} us (reference {:.2} us, spread {:.2} us) and \
                         over the rest of their rows",
                        name(i),
                        name(j),
                        line.line,
                        line.reference,
                        line.spread
                    ),
                }),
                (Some((v, line)), None) | (None, Some((v, line))) => {
                    let (c, s) = if over(i, j).is_some() { (i, j) } else { (j, i) };
                    out.push(Verdict {
                        kind: Kind::Direction,
                        hosts: vec![c, s],
                        median_us: v,
                        line,
                        why: format!(
                            "{} -> {}: latency {v:.2} us over the cluster's line {:.2} us \
                             (reference {:.2} us, spread {:.2} us) and over the rest of its row; \
                             the other direction is not",
                            name(c),
                            name(s),
                            line.line,
                            line.reference,
                            line.spread
                        ),
                    });
                }
                (None, None) => {}
            }
        }
    }
    out
}

/// The latency matrix and its verdicts (rank 0).
#[derive(Debug, Clone)]
pub struct Report {
    /// `median_us[client][server]` (rail 0; none: failed or not measured).
    pub median_us: Vec<Vec<Option<f64>>>,
    /// `p99_us[client][server]`.
    pub p99_us: Vec<Vec<Option<f64>>>,
    /// `planned[client][server]`: whether a round measured the cell.
    pub planned: Vec<Vec<bool>>,
    /// Every run's error, once per distinct message: (message, runs).
    pub errors: Vec<(String, Vec<(usize, usize)>)>,
    /// The verdicts.
    pub verdicts: Vec<Verdict>,
    /// The measured wall time of the latency rounds, s.
    pub wall_s: Option<f64>,
}

impl Report {
    /// From each rank's runs (index = rank, each a JSON array of
    /// [`PairRun`]s), the cells the schedule planned (`None`: all) and
    /// the ranks' names.
    pub fn from_ranks(
        raw: &[Vec<u8>],
        planned: Option<&[(usize, usize)]>,
        names: &[String],
        wall_s: Option<f64>,
    ) -> Result<Report, String> {
        let n = raw.len();
        let mut median_us = vec![vec![None; n]; n];
        let mut p99_us = vec![vec![None; n]; n];
        let mut errors: Vec<(String, Vec<(usize, usize)>)> = Vec::new();
        for (rank, bytes) in raw.iter().enumerate() {
            let v: Value = serde_json::from_slice(bytes)
                .map_err(|e| format!("rank {rank}: its latency runs are not JSON: {e}"))?;
            for r in v.as_array().into_iter().flatten() {
                let run = PairRun::from_json(r)
                    .filter(|r| r.client < n && r.server < n)
                    .ok_or_else(|| format!("rank {rank}: a latency run is malformed: {r}"))?;
                if let Some(e) = &run.error {
                    match errors.iter_mut().find(|(m, _)| m == e) {
                        Some((_, cells)) => cells.push((run.client, run.server)),
                        None => errors.push((e.clone(), vec![(run.client, run.server)])),
                    }
                }
                if run.role != "client" || run.rail != Some(0) {
                    continue;
                }
                if let Some((m, p)) = lat_of(&run.doc).filter(|_| run.error.is_none()) {
                    median_us[run.client][run.server] = Some(m);
                    p99_us[run.client][run.server] = Some(p);
                }
            }
        }
        let mut plan = vec![vec![planned.is_none(); n]; n];
        for &(c, s) in planned
            .unwrap_or(&[])
            .iter()
            .filter(|(c, s)| *c < n && *s < n)
        {
            plan[c][s] = true;
        }
        for (i, row) in plan.iter_mut().enumerate() {
            row[i] = false;
        }
        let verdicts = verdicts(&median_us, names);
        Ok(Report {
            median_us,
            p99_us,
            planned: plan,
            errors,
            verdicts,
            wall_s,
        })
    }

    /// The planned cells without a value.
    fn missing(&self) -> usize {
        let n = self.median_us.len();
        (0..n)
            .flat_map(|i| (0..n).map(move |j| (i, j)))
            .filter(|&(i, j)| self.planned[i][j] && self.median_us[i][j].is_none())
            .count()
    }

    /// Fail when a run failed or a planned cell has no value; warn when a
    /// verdict names a host or path (no retest measured it again); ok
    /// otherwise.
    pub fn status(&self) -> Status {
        if !self.errors.is_empty() || self.missing() > 0 {
            Status::Fail
        } else if !self.verdicts.is_empty() {
            Status::Warn
        } else {
            Status::Ok
        }
    }

    /// The `latency` object of the cluster's JSON document.
    pub fn to_json(&self, names: &[String]) -> Value {
        let name = |i: &usize| names.get(*i).map_or("?", String::as_str).to_owned();
        json!({
            "test": TEST, "unit": "us", "status": self.status(),
            "median_us": self.median_us, "p99_us": self.p99_us,
            "wall_s": self.wall_s,
            "errors": self.errors.iter().map(|(e, cells)| json!({"error": e, "runs": cells}))
                .collect::<Vec<_>>(),
            "verdicts": self.verdicts.iter().map(|v| json!({
                "kind": v.kind.as_str(), "hosts": v.hosts.iter().map(name).collect::<Vec<_>>(),
                "median_us": v.median_us, "line_us": v.line.line,
                "reference_us": v.line.reference, "spread_us": v.line.spread, "why": v.why,
                "status": "warn",
            })).collect::<Vec<_>>(),
        })
    }

    /// The text section (`labels[i]`: rank i's name).
    pub fn render_text(&self, labels: &[String]) -> String {
        let n = self.median_us.len();
        let mut s = format!(
            "# latency: erdma-perf {TEST}, median (p99) in us (row: client, column: server)\n"
        );
        if n < 2 {
            s.push_str("one rank: no pair to measure\n");
            return s;
        }
        let cells: Vec<Vec<String>> = (0..n)
            .map(|i| {
                (0..n)
                    .map(
                        |j| match (i == j, self.median_us[i][j], self.p99_us[i][j]) {
                            (true, _, _) => "-".to_owned(),
                            (false, Some(m), Some(p)) => format!("{m:.2} ({p:.2})"),
                            (false, Some(m), None) => format!("{m:.2}"),
                            (false, None, _) if self.planned[i][j] => "failed".to_owned(),
                            (false, None, _) => super::pairs::NOT_MEASURED.to_owned(),
                        },
                    )
                    .collect()
            })
            .collect();
        let w = labels
            .iter()
            .map(|l| l.len())
            .chain(cells.iter().flatten().map(String::len))
            .max()
            .unwrap_or(6)
            .max(8);
        s.push_str(&format!("{:<w$}", "client"));
        for l in labels.iter().take(n) {
            s.push_str(&format!(" {l:>w$}"));
        }
        s.push('\n');
        for (i, row) in cells.iter().enumerate() {
            s.push_str(&format!(
                "{:<w$}",
                labels.get(i).map_or("?", String::as_str)
            ));
            for c in row {
                s.push_str(&format!(" {c:>w$}"));
            }
            s.push('\n');
        }
        let who = |i: usize| labels.get(i).map_or("?", String::as_str);
        for (e, cells) in &self.errors {
            let shown: Vec<String> = cells
                .iter()
                .take(4)
                .map(|&(c, v)| format!("{} -> {}", who(c), who(v)))
                .collect();
            s.push_str(&format!(
                "fail  {} latency run side(s): {e}\n      in: {}{}\n",
                cells.len(),
                shown.join(", "),
                if cells.len() > 4 {
                    format!(", ... ({} more)", cells.len() - 4)
                } else {
                    String::new()
                }
            ));
        }
        for v in &self.verdicts {
            s.push_str(&format!("warn  latency {:<9} {}\n", v.kind.as_str(), v.why));
        }
        if let Some(w) = self.wall_s {
            s.push_str(&format!("latency rounds: {w:.1} s\n"));
        }
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cluster::pairs::LATENCY_ARGS;

    fn names(n: usize) -> Vec<String> {
        (0..n).map(|i| format!("h{i}")).collect()
    }

    /// `n` hosts at `base` us, +/- a small wobble by cell.
    fn grid(n: usize, base: f64) -> Vec<Vec<Option<f64>>> {
        (0..n)
            .map(|i| {
                (0..n)
                    .map(|j| (i != j).then(|| base + ((i * 7 + j * 3) % 5) as f64 * 0.1))
                    .collect()
            })
            .collect()
    }

    #[test]
    fn the_path_options_are_kept_and_the_rest_dropped() {
        assert_eq!(
            perf_args(
                "-x 3 -s 1048576 -n 1000 --report_gbits -D 5 -q 4 -m 1024 -R",
                "-n 500"
            ),
            "-x 3 -m 1024 -R -n 500"
        );
        assert_eq!(
            perf_args("-x3 --gid-index=2 --tclass 96 -a", LATENCY_ARGS),
            "-x3 --gid-index=2 --tclass 96 -n 1000"
        );
        assert_eq!(perf_args("", LATENCY_ARGS), "-n 1000");
    }

    #[test]
    fn the_median_and_p99_are_the_last_rows() {
        let doc = json!({"results": [
            {"bytes": 2, "t_typical_us": 3.5, "t_p99_us": 9.0},
            {"bytes": 64, "t_typical_us": 4.0, "t_p99_us": 11.0},
        ]});
        assert_eq!(lat_of(&doc), Some((4.0, 11.0)));
        assert_eq!(lat_of(&Value::Null), None);
    }

    #[test]
    fn the_line_is_median_plus_k_mad_with_floors() {
        // Spread wide: K x MAD rules.
        let l = robust_line(&[10.0, 12.0, 14.0, 16.0, 18.0]).unwrap();
        assert_eq!(l.reference, 14.0);
        assert!((l.spread - 2.0 * MAD_SCALE).abs() < 1e-9);
        assert!((l.line - (14.0 + K * 2.0 * MAD_SCALE)).abs() < 1e-9);
        // No spread: the floors, 25% over a large reference...
        let l = robust_line(&[40.0, 40.0, 40.0]).unwrap();
        assert_eq!(l.line, 50.0);
        // ...2 us over a small one.
        let l = robust_line(&[3.0, 3.0, 3.0]).unwrap();
        assert_eq!(l.line, 5.0);
        assert!(robust_line(&[]).is_none());
    }

    #[test]
    fn an_even_cluster_has_no_verdict() {
        assert!(verdicts(&grid(6, 3.0), &names(6)).is_empty());
        // Two hosts: nothing to compare with.
        assert!(verdicts(&grid(2, 3.0), &names(2)).is_empty());
    }

    #[test]
    fn a_slow_host_is_named_once_not_its_links() {
        let mut g = grid(4, 3.0);
        for o in [0, 1, 3] {
            g[2][o] = Some(30.0);
            g[o][2] = Some(31.0);
        }
        let v = verdicts(&g, &names(4));
        assert_eq!(v.len(), 1, "{v:?}");
        assert_eq!(v[0].kind, Kind::Host);
        assert_eq!(v[0].hosts, vec![2]);
        assert!(v[0].why.starts_with("h2: latency 30.50 us"), "{}", v[0].why);
    }

    #[test]
    fn a_delayed_link_is_a_link_and_one_way_a_direction() {
        let mut g = grid(6, 3.0);
        g[1][4] = Some(25.0);
        g[4][1] = Some(24.0);
        g[0][5] = Some(40.0);
        let v = verdicts(&g, &names(6));
        assert_eq!(v.len(), 2, "{v:?}");
        assert_eq!(v[0].kind, Kind::Direction);
        assert_eq!(v[0].hosts, vec![0, 5]);
        assert_eq!(v[1].kind, Kind::Link);
        assert_eq!(v[1].hosts, vec![1, 4]);
        assert!(
            v[1].why
                .starts_with("h1 <-> h4: latency 25.00 us and 24.00 us")
        );
        // Four hosts, one delayed link (tc netem on one path): the link
        // alone, though each of its hosts has one slow cell of three.
        let mut g = grid(4, 3.0);
        g[0][3] = Some(13.0);
        g[3][0] = Some(13.0);
        let v = verdicts(&g, &names(4));
        assert_eq!(v.len(), 1, "{v:?}");
        assert_eq!((v[0].kind, v[0].hosts.clone()), (Kind::Link, vec![0, 3]));
    }

    #[test]
    fn a_cell_within_the_floor_is_not_named() {
        let mut g = grid(5, 3.0);
        // 1.5 us over a 3 us cluster: under the 2 us floor.
        g[1][2] = Some(4.5);
        assert!(verdicts(&g, &names(5)).is_empty());
    }

    fn run(c: usize, s: usize, role: &str, lat: Option<(f64, f64)>, err: Option<&str>) -> Value {
        PairRun {
            client: c,
            server: s,
            role: role.into(),
            gbps: None,
            error: err.map(str::to_owned),
            doc: lat.map_or(
                Value::Null,
                |(m, p)| json!({"results": [{"t_typical_us": m, "t_p99_us": p}]}),
            ),
            rail: Some(0),
            client_device: None,
            server_device: None,
            verified: false,
            corrupt: false,
            rerun: String::new(),
            share: 1,
        }
        .to_json()
    }

    #[test]
    fn the_report_reads_the_runs_and_names_failures() {
        let mut per = vec![Vec::new(); 3];
        for c in 0..3 {
            for s in (0..3).filter(|&s| s != c) {
                let failed = (c, s) == (2, 0);
                per[c].push(run(
                    c,
                    s,
                    "client",
                    (!failed).then_some((3.0 + c as f64, 8.0)),
                    failed.then_some("timed out"),
                ));
                per[s].push(run(c, s, "server", None, None));
            }
        }
        let raw: Vec<Vec<u8>> = per
            .into_iter()
            .map(|v| Value::Array(v).to_string().into_bytes())
            .collect();
        let r = Report::from_ranks(&raw, None, &names(3), Some(1.5)).unwrap();
        assert_eq!(r.median_us[1][2], Some(4.0));
        assert_eq!(r.p99_us[0][1], Some(8.0));
        assert_eq!(r.median_us[2][0], None);
        assert_eq!(r.status(), Status::Fail);
        let text = r.render_text(&names(3));
        assert!(text.contains("4.00 (8.00)"), "{text}");
        assert!(text.contains("failed"), "{text}");
        assert!(
            text.contains("fail  1 latency run side(s): timed out\n      in: h2 -> h0\n"),
            "{text}"
        );
        let j = r.to_json(&names(3));
        assert_eq!(j["status"], "fail");
        assert_eq!(j["median_us"][0][1], 3.0);
        // A schedule that left the cell out: not measured, not failed.
        let raw_ok: Vec<Vec<u8>> = vec![b"[]".to_vec(); 3];
        let r = Report::from_ranks(&raw_ok, Some(&[(0, 1)]), &names(3), None).unwrap();
        assert_eq!(r.missing(), 1);
        let text = r.render_text(&names(3));
        assert!(text.contains(super::super::pairs::NOT_MEASURED), "{text}");
        assert!(Report::from_ranks(&[b"{".to_vec()], None, &names(1), None).is_err());
    }
}
