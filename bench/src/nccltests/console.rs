//! stdout and stderr without panics (`print!` panics when stdout is a
//! closed pipe or a full disk). The report goes through [`out`]: when its
//! reader has gone (`| head -1`: EPIPE) the run stops and the process ends
//! by SIGPIPE, as a C program would, once its output files are closed; any
//! other write error (`>/dev/full`, or stdout closed at start: `>&-`)
//! stops the run with a one-line message on stderr (exit 1). Diagnostics go through [`err`], whose failures are
//! ignored (there is nowhere left to report them).

use std::io::{ErrorKind, Write};
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};

use super::job::{self, Stop};

/// Set after the first failed write: later output is dropped.
static BROKEN: AtomicBool = AtomicBool::new(false);

/// While a run is embedded in another tool (erdma-cluster): what [`out`]
/// and [`err`] would have printed, kept for that tool to read.
static CAPTURE: Mutex<Option<String>> = Mutex::new(None);

/// Starts keeping stdout and stderr text instead of printing it (for a
/// tool that runs a benchmark in-process and has its own report).
pub fn start_capture() {
    *CAPTURE.lock().unwrap_or_else(|p| p.into_inner()) = Some(String::new());
}

/// Ends [`start_capture`]: the text kept since then.
pub fn end_capture() -> String {
    CAPTURE
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .take()
        .unwrap_or_default()
}

/// Appends `s` to the capture, if one is running.
fn captured(s: &str) -> bool {
    let mut c = CAPTURE.lock().unwrap_or_else(|p| p.into_inner());
    match c.as_mut() {
        Some(buf) => {
            buf.push_str(s);
            true
        }
        None => false,
    }
}

/// Writes `s` to stdout (line-buffered, as `print!`); on failure asks the
/// run to stop (see the module docs) and drops what follows.
pub fn out(s: &str) {
    if s.is_empty() || captured(s) || BROKEN.load(Ordering::Relaxed) {
        return;
    }
    let r = crate::cli::Stdout.write_all(s.as_bytes());
    if let Err(e) = r {
        failed(e);
    }
}

/// Flushes stdout, with [`out`]'s error handling.
pub fn flush() {
    if BROKEN.load(Ordering::Relaxed) {
        return;
    }
    let r = crate::cli::Stdout.flush();
    if let Err(e) = r {
        failed(e);
    }
}

fn failed(e: std::io::Error) {
    if BROKEN.swap(true, Ordering::Relaxed) {
        return;
    }
    if e.kind() == ErrorKind::BrokenPipe {
        job::stop(Stop::Signal(libc::SIGPIPE));
    } else {
        let msg = crate::cli::stdout_failed_line(&e);
        err(&format!("{msg}\n"));
        job::stop(Stop::Stdout(msg));
    }
}

/// Whether stdout failed (its reader left, or the disk is full).
pub fn broken() -> bool {
    BROKEN.load(Ordering::Relaxed)
}

/// Writes `s` to stderr, ignoring failures.
pub fn err(s: &str) {
    if captured(s) {
        return;
    }
    let _ = std::io::stderr().lock().write_all(s.as_bytes());
}
