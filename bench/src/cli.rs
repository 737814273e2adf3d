//! What every binary does with its command line and its stdout before its
//! own work starts: arguments that are not UTF-8 are refused with one line
//! and the tool's bad-arguments status (never a panic, never a lossy path
//! that would name another file); `--help`/`--version` text that cannot be
//! written (`>/dev/full`) is one line on stderr and status 1; and a closed
//! stdout (`>&-`) is an error on the first write, not a silent success (the
//! standard library treats EBADF on stdout as success).

use std::io::{self, Write};
use std::sync::atomic::{AtomicBool, Ordering};

/// Exit status when `--help`/`--version` text could not be written.
pub const EXIT_HELP_UNWRITTEN: i32 = 1;

/// Set by [`start`] when the process started with fd 1 closed.
static STDOUT_CLOSED: AtomicBool = AtomicBool::new(false);

/// `text` as it may reach a terminal: every control character but the
/// newline and the tab (ESC, BEL, CR, DEL, C1 controls) and the Unicode
/// direction overrides are written as `\u{..}` escapes, so that a host name
/// or a value another machine sent cannot move the cursor, retitle the
/// window, hide a line or reorder what is shown.
pub fn terminal_safe(text: &str) -> std::borrow::Cow<'_, str> {
    let bad = |c: char| {
        (c.is_control() && c != '\n' && c != '\t')
            || matches!(c, '\u{200e}' | '\u{200f}' | '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}')
    };
    if !text.chars().any(bad) {
        return text.into();
    }
    text.chars()
        .map(|c| {
            if bad(c) {
                c.escape_unicode().to_string()
            } else {
                c.to_string()
            }
        })
        .collect::<String>()
        .into()
}

/// The one line a non-UTF-8 argument gets (the collectives print it bare,
/// as nccl-tests' messages are; the other tools prefix their name).
pub fn non_utf8_line(bad: &std::ffi::OsStr) -> String {
    format!(
        "invalid argument '{}': not valid UTF-8",
        bad.to_string_lossy()
    )
}

/// The process's arguments as strings, or (after one line on stderr,
/// prefixed by `tool` when given) `bad_status`.
pub fn args(tool: Option<&str>, bad_status: i32) -> Result<Vec<String>, i32> {
    decode(std::env::args_os(), tool, bad_status)
}

/// [`args`] without the line (for the ranks of a job other than the one
/// that speaks for it).
pub fn args_silent(bad_status: i32) -> Result<Vec<String>, i32> {
    std::env::args_os()
        .map(|a| a.into_string())
        .collect::<Result<Vec<_>, _>>()
        .map_err(|_| bad_status)
}

/// [`args`] over any argument list.
pub fn decode(
    argv: impl IntoIterator<Item = std::ffi::OsString>,
    tool: Option<&str>,
    bad_status: i32,
) -> Result<Vec<String>, i32> {
    argv.into_iter()
        .map(|a| a.into_string())
        .collect::<Result<Vec<_>, _>>()
        .map_err(|bad| {
            let line = non_utf8_line(&bad);
            match tool {
                Some(t) => eprintln_quiet(&format!("{t}: {line}")),
                None => eprintln_quiet(&line),
            }
            bad_status
        })
}

/// The line printed when stdout cannot take the report.
pub fn stdout_failed_line(e: &io::Error) -> String {
    format!("cannot write the report to stdout: {e}")
}

/// Writes `line` and a newline to stderr, ignoring failures (there is
/// nowhere left to report them).
pub fn eprintln_quiet(line: &str) {
    let _ = writeln!(io::stderr().lock(), "{line}");
}

/// Writes `text` to stdout and flushes it: on failure prints
/// [`stdout_failed_line`] on stderr and returns [`EXIT_HELP_UNWRITTEN`],
/// else 0. For `--help` and `--version`.
pub fn print_help(text: &str) -> i32 {
    let mut out = Stdout;
    match out.write_all(text.as_bytes()).and_then(|()| out.flush()) {
        Ok(()) => 0,
        Err(e) => {
            eprintln_quiet(&stdout_failed_line(&e));
            EXIT_HELP_UNWRITTEN
        }
    }
}

/// Parses `argv` with clap; on an error returns the exit status after
/// printing it when `speak`: `usage_status` for a bad command line, 0 for
/// `--help`/`--version` written ([`print_help`]'s status otherwise).
pub fn parse<A: clap::Parser>(argv: &[String], usage_status: i32, speak: bool) -> Result<A, i32> {
    A::try_parse_from(argv).map_err(|e| {
        if e.use_stderr() {
            if speak {
                let _ = e.print();
            }
            usage_status
        } else if speak {
            print_help(&e.render().to_string())
        } else {
            0
        }
    })
}

/// Defines a binary's C `main` running `$run` (a `fn() -> i32` giving the
/// exit status) through [`start`]. The binary declares
/// `#![cfg_attr(not(test), no_main)]`: the standard runtime would otherwise
/// put `/dev/null` on a closed stdout before `main`, and `tool >&-` would
/// lose its report with status 0. Under `cargo test` the binary's unit tests
/// keep the test harness's `main`.
#[macro_export]
macro_rules! c_main {
    ($run:path) => {
        /// The process entry point (see `erdma_bench::cli::start`).
        #[cfg(not(test))]
        #[unsafe(no_mangle)]
        extern "C" fn main(
            _argc: ::std::ffi::c_int,
            _argv: *const *const ::std::ffi::c_char,
        ) -> ::std::ffi::c_int {
            $crate::cli::start($run)
        }
        // Under `cargo test` the entry point is the harness's: `$run` (and
        // what it calls) stays in use for the dead-code lint.
        #[cfg(test)]
        const _: fn() -> i32 = $run;
    };
}

/// What the standard runtime does before `main`, less hiding a closed
/// stdout: records whether fd 1 was closed ([`Stdout`] then fails), puts
/// `/dev/null` on closed fds 0-2 (so that no file the tool opens lands on
/// them: its report would be written into it), ignores SIGPIPE (a closed
/// pipe is a write error), and turns a panic into status 101.
pub fn start(run: fn() -> i32) -> std::ffi::c_int {
    for fd in 0..=2 {
        // SAFETY: F_GETFD on any descriptor number has no memory effects.
        if unsafe { libc::fcntl(fd, libc::F_GETFD) } != -1 {
            continue;
        }
        if fd == 1 {
            STDOUT_CLOSED.store(true, Ordering::Relaxed);
        }
        // Read-only: nothing written to a closed fd 1 or 2 may succeed.
        // SAFETY: a NUL-terminated literal path; dup2/close on descriptors
        // this function owns.
        unsafe {
            let null = libc::open(c"/dev/null".as_ptr(), libc::O_RDONLY);
            if null >= 0 && null != fd {
                libc::dup2(null, fd);
                libc::close(null);
            }
        }
    }
    // SAFETY: setting a signal's disposition to SIG_IGN has no memory
    // preconditions.
    unsafe {
        libc::signal(libc::SIGPIPE, libc::SIG_IGN);
    }
    std::panic::catch_unwind(run).unwrap_or(101)
}

/// The process's stdout, except that a stdout closed at start
/// ([`start`]) is an error on every write.
#[derive(Debug, Default, Clone, Copy)]
pub struct Stdout;

impl Stdout {
    fn closed() -> io::Result<()> {
        if STDOUT_CLOSED.load(Ordering::Relaxed) {
            Err(io::Error::other("stdout is closed"))
        } else {
            Ok(())
        }
    }
}

impl Write for Stdout {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        Self::closed()?;
        io::stdout().lock().write(buf)
    }
    fn write_all(&mut self, buf: &[u8]) -> io::Result<()> {
        Self::closed()?;
        io::stdout().lock().write_all(buf)
    }
    fn flush(&mut self) -> io::Result<()> {
        Self::closed()?;
        io::stdout().lock().flush()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::ffi::OsStringExt;

    #[test]
    fn non_utf8_is_the_bad_arguments_status() {
        let ok = decode(["a".into(), "b".into()], None, 2).unwrap();
        assert_eq!(ok, ["a", "b"]);
        let bad = std::ffi::OsString::from_vec(b"x\xff".to_vec());
        assert_eq!(decode(["a".into(), bad.clone()], Some("t"), 3), Err(3));
        assert_eq!(
            non_utf8_line(&bad),
            "invalid argument 'x\u{fffd}': not valid UTF-8"
        );
    }
}
