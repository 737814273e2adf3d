//! Errors and exit statuses. The numbers are nccl-tests' `testResult_t`
//! (plus 255 for bad arguments, which nccl-tests returns as -1), so scripts
//! that check them keep working.

use thiserror::Error;

/// Why a run failed; [`TestError::exit_code`] gives the process status.
#[derive(Debug, Error, Clone, PartialEq, Eq)]
pub enum TestError {
    /// A CUDA call failed (no driver, no GPU, out of memory): status 2.
    #[error("Test CUDA failure {call} '{msg}'")]
    Cuda {
        /// The call that failed.
        call: String,
        /// The error text.
        msg: String,
    },
    /// The collective library failed (NCCL error, MPI error, invalid
    /// argument, lost connection inside a collective): status 3.
    #[error("Test {lib} failure {call} '{msg}'")]
    Comm {
        /// `NCCL`, `MPI` or `host`.
        lib: &'static str,
        /// The call that failed.
        call: String,
        /// The error text.
        msg: String,
    },
    /// A collective did not complete within `-T`: status 4.
    #[error("Test timeout ({secs}s) {detail}")]
    Timeout {
        /// The timeout in seconds.
        secs: i32,
        /// Which ranks did not finish what.
        detail: String,
    },
    /// The run's total deadline (set by the tool that runs it in-process:
    /// erdma-cluster's `--nccl-deadline`) passed: it was stopped after the
    /// size it was running, or within it when that took `-T` longer;
    /// status 4, as a timeout.
    #[error(
        "Test deadline ({secs}s) ran out of time: the run was stopped at its total deadline (fewer sizes or iterations fit in it)"
    )]
    Deadline {
        /// The deadline in seconds.
        secs: u64,
    },
    /// A feature the backend or machine lacks (too few GPUs, -G on a host
    /// backend): status 5.
    #[error("{0}")]
    NotImplemented(String),
    /// A usage error detected after option parsing: status 6.
    #[error("{0}")]
    InvalidUsage(String),
    /// Launch/rendezvous failures and internal errors: status 1.
    #[error("{0}")]
    Internal(String),
    /// Host memory for buffers could not be allocated: status 2, as
    /// nccl-tests' failed `cudaMalloc` (the host backends' "device" memory).
    #[error("Test host memory failure {what} '{msg}'")]
    HostMemory {
        /// What was being allocated, with its size.
        what: String,
        /// Why, and how to fix it.
        msg: String,
    },
    /// Another process of the job failed first and said why: its status.
    #[error("rank {rank} reports: {msg}")]
    Peer {
        /// The process (bootstrap rank) that failed.
        rank: usize,
        /// Its exit status, taken as this process's.
        code: i32,
        /// Its one-line report.
        msg: String,
    },
    /// SIGINT/SIGTERM (or stdout closed: SIGPIPE): the run stops, its
    /// output files are closed, and the process ends by that signal.
    #[error("interrupted by {}", signal_name(*signal))]
    Interrupted {
        /// The signal number.
        signal: i32,
    },
    /// This thread stopped because another thread of the process failed
    /// (never reported: the other thread's error is).
    #[error("stopped: another thread of this process failed")]
    Cancelled,
}

/// "SIGINT" for 2, and so on.
pub fn signal_name(signal: i32) -> String {
    match signal {
        libc::SIGINT => "SIGINT".into(),
        libc::SIGTERM => "SIGTERM".into(),
        libc::SIGPIPE => "SIGPIPE (stdout closed)".into(),
        libc::SIGHUP => "SIGHUP".into(),
        s => format!("signal {s}"),
    }
}

impl TestError {
    /// The process exit status for this error.
    pub fn exit_code(&self) -> i32 {
        match self {
            TestError::Internal(_) | TestError::Cancelled => 1,
            TestError::Cuda { .. } | TestError::HostMemory { .. } => 2,
            TestError::Comm { .. } => 3,
            TestError::Timeout { .. } | TestError::Deadline { .. } => 4,
            TestError::NotImplemented(_) => 5,
            TestError::InvalidUsage(_) => 6,
            TestError::Peer { code, .. } => *code,
            TestError::Interrupted { signal } => 128 + signal,
        }
    }

    /// Out of host memory for `what` (`bytes` long).
    pub fn host_memory(what: &str, bytes: u128) -> TestError {
        TestError::HostMemory {
            what: format!("malloc({bytes}) for {what}"),
            msg: "out of memory: this host cannot hold the buffers of its ranks; lower -e (or start fewer ranks per host)".into(),
        }
    }

    /// Shorthand for a collective-library failure.
    pub fn comm(lib: &'static str, call: impl Into<String>, msg: impl Into<String>) -> TestError {
        TestError::Comm {
            lib,
            call: call.into(),
            msg: msg.into(),
        }
    }
}

/// Exit status when data is wrong or bandwidth is under NCCL_TESTS_MIN_BW
/// (`testNumResults`).
pub const EXIT_WRONG_RESULTS: i32 = 7;

/// Exit status for bad command-line arguments (`return -1` from main).
pub const EXIT_BAD_ARGS: i32 = 255;

/// Result alias.
pub type TestResult<T> = Result<T, TestError>;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exit_codes_match_nccl_tests() {
        assert_eq!(TestError::Internal("x".into()).exit_code(), 1);
        assert_eq!(
            TestError::Cuda {
                call: "a".into(),
                msg: "b".into()
            }
            .exit_code(),
            2
        );
        assert_eq!(TestError::comm("NCCL", "a", "b").exit_code(), 3);
        assert_eq!(
            TestError::Timeout {
                secs: 1,
                detail: String::new()
            }
            .exit_code(),
            4
        );
        assert_eq!(TestError::NotImplemented("x".into()).exit_code(), 5);
        assert_eq!(TestError::InvalidUsage("x".into()).exit_code(), 6);
        assert_eq!(EXIT_WRONG_RESULTS, 7);
        let e = TestError::comm("NCCL", "ncclAllReduce", "unhandled system error");
        assert_eq!(
            e.to_string(),
            "Test NCCL failure ncclAllReduce 'unhandled system error'"
        );
    }
}
