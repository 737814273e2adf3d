//! `--baseline DIR`: each pair's bandwidth against the same pair in a
//! directory an earlier run wrote with `--out` (its `perf-CLIENT-SERVER.json`
//! documents): stage 4 of docs/cluster-check.md for the pair matrix. A pair
//! under `--fail-below` times its baseline fails the run; a pair without a
//! baseline (a new host, another test) is a warning.

use std::path::{Path, PathBuf};

use serde_json::{Value, json};

use super::pairs::{Matrix, last_gbps};
use crate::doctor::Status;

/// One direction of one pair, now and in the baseline.
#[derive(Debug, Clone, PartialEq)]
pub struct Row {
    /// The client's label (host name, `-rankN` when ranks share a host).
    pub client: String,
    /// The server's label.
    pub server: String,
    /// This run's BW average, Gb/s (none when the run failed).
    pub now: Option<f64>,
    /// The baseline's, Gb/s (none when it has no document for the pair).
    pub base: Option<f64>,
    /// ok, warn (nothing to compare) or fail (under `--fail-below`).
    pub status: Status,
    /// What the status means, in a few words.
    pub note: String,
}

impl Row {
    /// now / baseline.
    pub fn ratio(&self) -> Option<f64> {
        match (self.now, self.base) {
            (Some(n), Some(b)) if b > 0.0 => Some(n / b),
            _ => None,
        }
    }
}

/// The pair matrix against a baseline directory.
#[derive(Debug, Clone)]
pub struct Comparison {
    /// The baseline directory.
    pub dir: PathBuf,
    /// The ratio under which a pair fails.
    pub fail_below: f64,
    /// One per measured direction (client != server).
    pub rows: Vec<Row>,
}

/// What the baseline holds for one pair: its BW, or why there is none.
fn baseline_gbps(path: &Path, test: &str) -> Result<f64, String> {
    let bytes = crate::input::read_document(path).map_err(|e| {
        if e.not_found() {
            format!("no baseline document {}", path.display())
        } else {
            e.to_string()
        }
    })?;
    let doc: Value = serde_json::from_slice(&bytes)
        .map_err(|_| format!("{} is not an erdma-perf JSON document", path.display()))?;
    match doc["test"].as_str() {
        Some(t) if t == test => {}
        Some(t) => return Err(format!("the baseline ran {t}, this run {test}")),
        None => {
            return Err(format!(
                "{} is not an erdma-perf JSON document",
                path.display()
            ));
        }
    }
    last_gbps(&doc).ok_or_else(|| format!("{} has no bandwidth result", path.display()))
}

/// Compares every planned direction of `m` ([`Matrix::is_planned`]) with `dir/perf-CLIENT-SERVER.json`
/// (`labels`: the ranks' file-name labels, as `--out` writes them).
pub fn compare(dir: &Path, fail_below: f64, labels: &[String], m: &Matrix) -> Comparison {
    let mut rows = Vec::new();
    for (c, row) in m.gbps.iter().enumerate() {
        for (s, &now) in row.iter().enumerate() {
            let (Some(cl), Some(sl)) = (labels.get(c), labels.get(s)) else {
                continue;
            };
            // A cell the schedule left out has nothing to compare.
            if c == s || !m.is_planned(c, s) {
                continue;
            }
            let base = baseline_gbps(&dir.join(format!("perf-{cl}-{sl}.json")), &m.test);
            rows.push(judge(cl, sl, now, base, fail_below));
        }
    }
    Comparison {
        dir: dir.to_path_buf(),
        fail_below,
        rows,
    }
}

fn judge(
    client: &str,
    server: &str,
    now: Option<f64>,
    base: Result<f64, String>,
    fail_below: f64,
) -> Row {
    let mut row = Row {
        client: client.into(),
        server: server.into(),
        now,
        base: base.as_ref().ok().copied(),
        status: Status::Warn,
        note: String::new(),
    };
    row.note = match (&base, now) {
        (Err(why), _) => why.clone(),
        (Ok(_), None) => "not measured in this run (see the pair errors)".into(),
        (Ok(_), Some(_)) => match row.ratio() {
            Some(r) if r < fail_below => {
                row.status = Status::Fail;
                format!("under {fail_below} of the baseline")
            }
            Some(_) => {
                row.status = Status::Ok;
                String::new()
            }
            None => "the baseline measured 0 Gb/s".into(),
        },
    };
    row
}

impl Comparison {
    /// The worst row; a warning when there is nothing to compare.
    pub fn status(&self) -> Status {
        self.rows
            .iter()
            .map(|r| r.status)
            .max()
            .unwrap_or(Status::Warn)
    }

    /// The section of the text report.
    pub fn render_text(&self) -> String {
        let mut s = format!(
            "# against the baseline {} (fail below {})\n",
            self.dir.display(),
            self.fail_below
        );
        let gbps = |v: Option<f64>| v.map_or("-".to_owned(), |g| format!("{g:.2}"));
        for r in &self.rows {
            let ratio = r.ratio().map_or("-".to_owned(), |x| format!("{x:.3}"));
            s.push_str(&format!(
                "{:<5} {} -> {}: {} Gb/s, baseline {} ({ratio}){}\n",
                r.status.as_str(),
                r.client,
                r.server,
                gbps(r.now),
                gbps(r.base),
                if r.note.is_empty() {
                    String::new()
                } else {
                    format!(": {}", r.note)
                }
            ));
        }
        if self.rows.is_empty() {
            s.push_str("warn  no pair to compare\n");
        }
        s
    }

    /// The `baseline` object of the cluster's JSON document.
    pub fn to_json(&self) -> Value {
        json!({
            "dir": self.dir.display().to_string(),
            "fail_below": self.fail_below,
            "status": self.status(),
            "rows": self.rows.iter().map(|r| json!({
                "client": r.client, "server": r.server, "gbps": r.now,
                "baseline_gbps": r.base, "ratio": r.ratio(), "status": r.status,
                "note": r.note,
            })).collect::<Vec<_>>(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn documents_are_regular_files_only() {
        let dir = std::env::temp_dir().join(format!("cluster-baseline-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        // A symlink to /dev/zero: refused, not read until memory runs out.
        let zero = dir.join("perf-a-b.json");
        std::os::unix::fs::symlink("/dev/zero", &zero).unwrap();
        let e = baseline_gbps(&zero, "write_bw").unwrap_err();
        assert!(
            e.ends_with("is a character device, not a regular file: name a result file"),
            "{e}"
        );
        // A FIFO without a writer: refused at once, not waited on.
        let fifo = dir.join("perf-b-a.json");
        let c = std::ffi::CString::new(fifo.to_str().unwrap()).unwrap();
        // SAFETY: a NUL-terminated path.
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
        let e = baseline_gbps(&fifo, "write_bw").unwrap_err();
        assert!(e.contains("is a FIFO, not a regular file"), "{e}");
        let e = baseline_gbps(&dir.join("perf-x-y.json"), "write_bw").unwrap_err();
        assert!(e.starts_with("no baseline document"), "{e}");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    fn doc(test: &str, gbps: f64) -> String {
        json!({"tool": "erdma-perf", "test": test,
               "results": [{"bytes": 65536, "bw_avg_gbps": gbps}]})
        .to_string()
    }

    fn matrix(gbps: Vec<Vec<Option<f64>>>) -> Matrix {
        Matrix {
            test: "write_bw".into(),
            gbps,
            rails: Vec::new(),
            runs: Vec::new(),
            planned: None,
        }
    }

    #[test]
    fn pairs_against_their_baseline() {
        let dir = std::env::temp_dir().join(format!("erdma-baseline-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("perf-a-b.json"), doc("write_bw", 100.0)).unwrap();
        std::fs::write(dir.join("perf-b-a.json"), doc("write_bw", 100.0)).unwrap();
        std::fs::write(dir.join("perf-a-c.json"), doc("read_bw", 100.0)).unwrap();
        std::fs::write(dir.join("perf-c-a.json"), b"not json").unwrap();
        std::fs::write(dir.join("perf-b-c.json"), doc("write_bw", 0.0)).unwrap();
        let labels: Vec<String> = ["a", "b", "c"].map(String::from).to_vec();
        let m = matrix(vec![
            vec![None, Some(95.0), Some(90.0)],
            vec![Some(50.0), None, Some(10.0)],
            vec![Some(90.0), None, None],
        ]);
        let c = compare(&dir, 0.9, &labels, &m);
        let by = |cl: &str, sv: &str| {
            c.rows
                .iter()
                .find(|r| r.client == cl && r.server == sv)
                .unwrap()
                .clone()
        };
        assert_eq!(c.rows.len(), 6, "every direction of 3 ranks");
        assert_eq!(by("a", "b").status, Status::Ok);
        assert_eq!(by("a", "b").ratio(), Some(0.95));
        let slow = by("b", "a");
        assert_eq!((slow.status, slow.ratio()), (Status::Fail, Some(0.5)));
        assert!(slow.note.contains("under 0.9"), "{}", slow.note);
        assert!(by("a", "c").note.contains("ran read_bw"));
        assert!(by("c", "a").note.contains("not an erdma-perf"));
        assert!(by("b", "c").note.contains("0 Gb/s"));
        assert!(by("c", "b").note.contains("no baseline document"));
        assert_eq!(c.status(), Status::Fail);
        let text = c.render_text();
        assert!(
            text.contains("fail  b -> a: 50.00 Gb/s, baseline 100.00 (0.500)"),
            "{text}"
        );
        assert_eq!(c.to_json()["rows"].as_array().unwrap().len(), 6);
        // A schedule that planned a -> b and b -> a only: the other cells
        // are not compared (no "not measured" warning for them).
        let planned = m.with_planned(&[(0, 1), (1, 0)]);
        let c = compare(&dir, 0.9, &labels, &planned);
        let pairs: Vec<(&str, &str)> = c
            .rows
            .iter()
            .map(|r| (r.client.as_str(), r.server.as_str()))
            .collect();
        assert_eq!(pairs, vec![("a", "b"), ("b", "a")]);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_run_that_failed_now_is_a_warning_here() {
        let r = judge("a", "b", None, Ok(10.0), 0.9);
        assert_eq!(r.status, Status::Warn);
        let empty = Comparison {
            dir: "x".into(),
            fail_below: 0.9,
            rows: Vec::new(),
        };
        assert_eq!(empty.status(), Status::Warn);
        assert!(empty.render_text().contains("no pair to compare"));
    }
}
