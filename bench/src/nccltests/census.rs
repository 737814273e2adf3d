//! The timeout census: how every rank of a multi-process run comes to name
//! the same stuck rank after `-T`.
//!
//! A wait that passes `-T` (a collective on the stream, or a bootstrap
//! exchange) cannot tell by itself which peer is at fault: an MPI or NCCL
//! collective only says that it did not complete. So the process that times
//! out sends a short [`Notice`] (what it runs, how many collectives it has
//! issued, which of its ranks did not complete) to every other process
//! through the bootstrap ([`super::bootstrap::Bootstrap::census`]); every
//! other process notices that within moments ([`super::job::check`], called
//! by all waits), answers with its own notice, and all wait up to
//! [`WINDOW`] for the answers. Then each applies [`verdict`] to the same
//! answers:
//! - a process that did not answer is stuck (stopped, or hung outside the
//!   benchmark's waits): it is named;
//! - otherwise a process that issued fewer collectives than the others
//!   stopped issuing them: it is named;
//! - otherwise every rank is alive and issued the collective, which hangs
//!   in the collective library, the network or a device: the ranks that
//!   did not complete it are named.

use std::time::Duration;

use super::bootstrap::{Answer, Bootstrap};
use super::errors::TestError;
use super::job;

/// How long a process waits for the census's outcome: rank 0 of the TCP
/// star waits [`ROOT_WINDOW`] for the others' notices (less, so that a
/// rank 0 that joins late still answers in time), MPI ranks and TCP leaves
/// this long. With the grace before the job ends, every live rank exits
/// within 5 s of its timeout (docs/tools/collectives.md: "Hangs and dead peers").
pub const WINDOW: Duration = Duration::from_secs(3);

/// How long rank 0 of the TCP star waits for the other ranks' notices.
pub const ROOT_WINDOW: Duration = Duration::from_secs(2);

/// Largest notice sent or accepted.
pub const MAX_NOTICE: usize = 1024;

/// What one process says in the census.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Notice {
    /// Its bootstrap rank (process index).
    pub proc: usize,
    /// Its process id.
    pub pid: u32,
    /// Its host name.
    pub host: String,
    /// Collectives it has issued.
    pub issued: u64,
    /// Its ranks that did not complete.
    pub pending: Vec<usize>,
    /// What it runs (e.g. `AllReduce float sum 64 B (timed iterations)`).
    pub activity: String,
}

impl Notice {
    /// This process's notice.
    pub fn mine(proc: usize, host: &str) -> Notice {
        let per = job::per_proc();
        let mut pending = job::pending();
        if pending.is_empty() {
            pending = (proc * per..(proc + 1) * per).collect();
        }
        Notice {
            proc,
            pid: std::process::id(),
            host: host.to_string(),
            issued: job::issued(),
            pending,
            activity: job::activity(),
        }
    }

    /// Tab-separated text of at most [`MAX_NOTICE`] bytes.
    pub fn encode(&self) -> Vec<u8> {
        let clean = |s: &str| s.replace(['\t', '\n'], " ");
        let pending: Vec<String> = self.pending.iter().map(usize::to_string).collect();
        let mut s = format!(
            "1\t{}\t{}\t{}\t{}\t{}\t{}",
            self.proc,
            self.pid,
            self.issued,
            pending.join(","),
            clean(&self.host),
            clean(&self.activity)
        );
        let mut end = s.len().min(MAX_NOTICE);
        while !s.is_char_boundary(end) {
            end -= 1;
        }
        s.truncate(end);
        s.into_bytes()
    }

    /// Parses [`Notice::encode`]'s text; None for anything else.
    pub fn decode(b: &[u8]) -> Option<Notice> {
        let s = std::str::from_utf8(b.get(..b.len().min(MAX_NOTICE))?).ok()?;
        let f: Vec<&str> = s.splitn(7, '\t').collect();
        if f.len() != 7 || f[0] != "1" {
            return None;
        }
        let pending = if f[4].is_empty() {
            Vec::new()
        } else {
            f[4].split(',')
                .map(|r| r.parse().ok())
                .collect::<Option<Vec<usize>>>()?
        };
        Some(Notice {
            proc: f[1].parse().ok()?,
            pid: f[2].parse().ok()?,
            issued: f[3].parse().ok()?,
            pending,
            host: f[5].to_string(),
            activity: f[6].to_string(),
        })
    }
}

/// For a multi-process run's [`TestError::Timeout`]: the same error naming
/// the stuck ranks, from the census (which runs once per process: a
/// second call returns `e` as it is). Other errors are returned as they are.
pub fn explain(e: TestError, boot: &dyn Bootstrap, host: &str) -> TestError {
    static DONE: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);
    match e {
        TestError::Timeout { secs, .. }
            if boot.size() > 1 && !DONE.swap(true, std::sync::atomic::Ordering::SeqCst) =>
        {
            resolve(boot, secs, host)
        }
        e => e,
    }
}

/// The processes the census found silent (set once it ran).
static SILENT: std::sync::Mutex<Vec<usize>> = std::sync::Mutex::new(Vec::new());

/// The processes (bootstrap ranks) that did not answer this process's
/// census: stopped, hung or gone. Empty before a census. A tool that runs
/// the benchmark in-process (erdma-cluster) uses it to name them lost
/// without waiting for them again.
pub fn silent() -> Vec<usize> {
    SILENT.lock().unwrap_or_else(|p| p.into_inner()).clone()
}

/// Runs the census over `boot` (every process of the job) and returns the
/// timeout error naming the stuck ranks.
pub fn resolve(boot: &dyn Bootstrap, secs: i32, host: &str) -> TestError {
    let mine = Notice::mine(boot.rank(), host);
    let answers = boot.census(&mine.encode(), WINDOW);
    let table: Vec<Option<Notice>> = answers
        .iter()
        .enumerate()
        .map(|(p, a)| match a {
            _ if p == boot.rank() => Some(mine.clone()),
            Answer::Said(b) => Notice::decode(b),
            Answer::Silent | Answer::Unknown => None,
        })
        .collect();
    let silent: Vec<usize> = answers
        .iter()
        .enumerate()
        .filter(|&(p, a)| p != boot.rank() && matches!(a, Answer::Silent))
        .map(|(p, _)| p)
        .collect();
    *SILENT.lock().unwrap_or_else(|p| p.into_inner()) = silent.clone();
    TestError::Timeout {
        secs,
        detail: verdict(
            &table,
            &silent,
            boot.rank(),
            &job::roster(),
            job::per_proc(),
        ),
    }
}

/// "rank 3", "ranks 1,4-6".
pub fn ranks_text(ranks: &[usize]) -> String {
    let mut v = ranks.to_vec();
    v.sort_unstable();
    v.dedup();
    let mut parts = Vec::new();
    let mut i = 0;
    while i < v.len() {
        let mut j = i;
        while j + 1 < v.len() && v[j + 1] == v[j] + 1 {
            j += 1;
        }
        parts.push(if j > i + 1 {
            format!("{}-{}", v[i], v[j])
        } else if j == i + 1 {
            format!("{},{}", v[i], v[j])
        } else {
            v[i].to_string()
        });
        i = j + 1;
    }
    // Thousands of ranks would make an unreadable line.
    const SHOWN: usize = 16;
    let mut text = parts
        .iter()
        .take(SHOWN)
        .cloned()
        .collect::<Vec<_>>()
        .join(",");
    if parts.len() > SHOWN {
        text.push_str(&format!(",... ({} in all)", v.len()));
    }
    format!("rank{} {text}", if v.len() == 1 { "" } else { "s" })
}

/// The communicator ranks of process `p`.
fn ranks_of(p: usize, per_proc: usize) -> std::ops::Range<usize> {
    p * per_proc..(p + 1) * per_proc
}

/// "(pid 12 on h1)" for one process, from its notice or the roster.
fn whereabouts(p: usize, table: &[Option<Notice>], roster: &[(String, u32)]) -> String {
    match (table.get(p).and_then(Option::as_ref), roster.get(p)) {
        (Some(n), _) => format!(" (pid {} on {})", n.pid, n.host),
        (None, Some((h, pid))) => format!(" (pid {pid} on {h})"),
        _ => String::new(),
    }
}

/// Names the stuck ranks (see the module docs). `table[p]` is process p's
/// notice (None: no answer), `silent` the processes that did not answer,
/// `me` this process.
pub fn verdict(
    table: &[Option<Notice>],
    silent: &[usize],
    me: usize,
    roster: &[(String, u32)],
    per_proc: usize,
) -> String {
    let my_activity = table
        .get(me)
        .and_then(Option::as_ref)
        .map_or_else(|| "setup".to_string(), |n| n.activity.clone());
    if !silent.is_empty() {
        let ranks: Vec<usize> = silent.iter().flat_map(|&p| ranks_of(p, per_proc)).collect();
        let at = if silent.len() == 1 {
            whereabouts(silent[0], table, roster)
        } else {
            String::new()
        };
        return format!(
            "{}{at} did not respond: stopped, or stuck outside the benchmark's waits (no answer {}s after the timeout, while {} waited in {my_activity}); communicators aborted",
            ranks_text(&ranks),
            WINDOW.as_secs(),
            ranks_text(&ranks_of(me, per_proc).collect::<Vec<_>>()),
        );
    }
    let said: Vec<&Notice> = table.iter().flatten().collect();
    let most = said.iter().map(|n| n.issued).max().unwrap_or(0);
    let behind: Vec<&Notice> = said.iter().copied().filter(|n| n.issued < most).collect();
    if !behind.is_empty() && said.len() > 1 {
        let ranks: Vec<usize> = behind
            .iter()
            .flat_map(|n| ranks_of(n.proc, per_proc))
            .collect();
        let first = behind[0];
        let at = if behind.len() == 1 {
            whereabouts(first.proc, table, roster)
        } else {
            String::new()
        };
        return format!(
            "{}{at} did not complete {}: stopped issuing collectives ({} issued, the others {most}) while the other ranks waited; communicators aborted",
            ranks_text(&ranks),
            first.activity,
            first.issued
        );
    }
    let mut activities: Vec<&str> = said.iter().map(|n| n.activity.as_str()).collect();
    activities.dedup();
    if activities.len() > 1 {
        let steps: Vec<String> = said
            .iter()
            .map(|n| format!("rank {} in {}", n.proc * per_proc, n.activity))
            .collect();
        return format!(
            "the ranks are out of step and wait on each other ({}): were they started with the same options and environment?",
            steps.join(", ")
        );
    }
    let pending: Vec<usize> = said.iter().flat_map(|n| n.pending.clone()).collect();
    let at = match said.as_slice() {
        [one] => format!(" (pid {} on {})", one.pid, one.host),
        _ => String::new(),
    };
    format!(
        "{}{at} did not complete {my_activity}: every rank is alive and issued it (a hang in the collective library, the network or a device); communicators aborted",
        ranks_text(&pending),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn n(proc: usize, issued: u64, activity: &str) -> Notice {
        Notice {
            proc,
            pid: 100 + proc as u32,
            host: format!("h{proc}"),
            issued,
            pending: vec![proc],
            activity: activity.into(),
        }
    }

    #[test]
    fn notices_round_trip_and_stay_bounded() {
        let a = n(3, 42, "AllReduce float sum 64 B (timed iterations)");
        assert_eq!(Notice::decode(&a.encode()), Some(a));
        let mut long = n(1, 1, &"é".repeat(2000));
        long.pending = vec![];
        let e = long.encode();
        assert!(e.len() <= MAX_NOTICE);
        assert!(Notice::decode(&e).is_some_and(|d| d.pending.is_empty()));
        assert_eq!(Notice::decode(b"garbage"), None);
        assert_eq!(Notice::decode(&[0xff; 2000]), None);
    }

    #[test]
    fn rank_lists() {
        assert_eq!(ranks_text(&[3]), "rank 3");
        assert_eq!(ranks_text(&[5, 1, 4, 6, 2]), "ranks 1,2,4-6");
        assert_eq!(ranks_text(&[0, 1, 2, 7]), "ranks 0-2,7");
        let many: Vec<usize> = (0..100).map(|i| i * 2).collect();
        assert!(ranks_text(&many).ends_with(",... (100 in all)"));
    }

    #[test]
    fn a_silent_process_is_named() {
        let what = "AllReduce float sum 65536 B (timed iterations)";
        let table = vec![Some(n(0, 10, what)), None, Some(n(2, 10, what))];
        let roster = vec![("h0".into(), 100), ("h1".into(), 101), ("h2".into(), 102)];
        let v = verdict(&table, &[1], 0, &roster, 1);
        assert!(
            v.starts_with("rank 1 (pid 101 on h1) did not respond: stopped"),
            "{v}"
        );
        assert!(v.contains(&format!("while rank 0 waited in {what}")), "{v}");
        // Two ranks per process: process 1 holds ranks 2 and 3.
        let v = verdict(&table, &[1], 2, &roster, 2);
        assert!(
            v.starts_with("ranks 2,3 (pid 101 on h1) did not respond"),
            "{v}"
        );
    }

    #[test]
    fn a_process_that_stopped_issuing_is_named() {
        let what = "AllReduce float sum 64 B (timed iterations)";
        let table = vec![
            Some(n(0, 12, what)),
            Some(n(1, 9, what)),
            Some(n(2, 12, what)),
        ];
        let v = verdict(&table, &[], 0, &[], 1);
        assert!(
            v.starts_with(&format!(
                "rank 1 (pid 101 on h1) did not complete {what}: stopped issuing collectives (9 issued, the others 12)"
            )),
            "{v}"
        );
    }

    #[test]
    fn a_hang_everywhere_names_the_pending_ranks() {
        let what = "AllReduce float sum 64 B";
        let table = vec![Some(n(0, 5, what)), Some(n(1, 5, what))];
        let v = verdict(&table, &[], 1, &[], 1);
        assert!(
            v.starts_with(&format!(
                "ranks 0,1 did not complete {what}: every rank is alive"
            )),
            "{v}"
        );
        let v = verdict(&[Some(n(0, 5, what))], &[], 0, &[], 1);
        assert!(
            v.starts_with("rank 0 (pid 100 on h0) did not complete"),
            "{v}"
        );
        let table = vec![Some(n(0, 5, "setup")), Some(n(1, 5, what))];
        let v = verdict(&table, &[], 0, &[], 1);
        assert!(
            v.contains("out of step") && v.contains("rank 1 in AllReduce"),
            "{v}"
        );
    }
}
