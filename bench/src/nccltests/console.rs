//! stdout and stderr without panics (`print!` panics when stdout is a
//! closed pipe or a full disk). The report goes through [`out`]: when its
//! reader has gone (`| head -1`: EPIPE) the run stops and the process ends
//! by SIGPIPE, as a C program would, once its output files are closed; any
//! other write error (`>/dev/full`, or stdout closed at start: `>&-`)
//! stops the run with a one-line message on stderr (exit 1). Diagnostics go through [`err`], whose failures are
//! ignored (there is nowhere left to report them).

use std::io::{ErrorKind, Write};
use std::sync::atomic::{AtomicBool, Ordering};

use super::job::{self, Stop};

/// Set after the first failed write: later output is dropped.
static BROKEN: AtomicBool = AtomicBool::new(false);

/// Writes `s` to stdout (line-buffered, as `print!`); on failure asks the
/// run to stop (see the module docs) and drops what follows.
pub fn out(s: &str) {
    if s.is_empty() || BROKEN.load(Ordering::Relaxed) {
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
    let _ = std::io::stderr().lock().write_all(s.as_bytes());
}
