//! Errors and exit statuses of `erdma-perf`.
//!
//! Every failure is one line on stderr, `erdma-perf: <what failed>: <why>:
//! <how to fix>`, and a documented exit status (`erdma-perf --help`, docs/tools/erdma-perf.md).

use std::fmt;

/// Exit status: success.
pub const EXIT_OK: i32 = 0;
/// Exit status: an RDMA verb or a work completion failed.
pub const EXIT_RDMA: i32 = 1;
/// Exit status: bad command line.
pub const EXIT_USAGE: i32 = 2;
/// Exit status: no RDMA device on this host (or the kernel has no RDMA).
pub const EXIT_NO_DEVICE: i32 = 3;
/// Exit status: libibverbs or librdmacm is missing.
pub const EXIT_LIBRARY: i32 = 4;
/// Exit status: no such device, port or GID index.
pub const EXIT_NO_SUCH: i32 = 5;
/// Exit status: the peer failed: could not connect, disconnected, timed out,
/// sent garbage or an oversized record, or runs with other options.
pub const EXIT_PEER: i32 = 6;
/// Exit status: `--verify` found wrong data.
pub const EXIT_VERIFY: i32 = 7;
/// Exit status: GPU memory failed (no CUDA driver, no such GPU, registration
/// of GPU memory impossible).
pub const EXIT_GPU: i32 = 8;
/// Exit status: the device lacks what the test needs (atomics on iWARP, a
/// GID-based connection on iWARP, ...).
pub const EXIT_UNSUPPORTED: i32 = 9;

/// What failed, with the exit status it maps to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PerfError {
    /// Bad command line (status 2).
    Usage(String),
    /// An RDMA call failed (status from the error's kind).
    Rdma {
        /// What the tool was doing, e.g. `register the 128 KiB buffer`.
        what: String,
        /// The library's error (boxed: it is large).
        err: Box<erdma::Error>,
    },
    /// The peer misbehaved or vanished (status 6).
    Peer(String),
    /// Wrong data under `--verify` (status 7).
    Verify(String),
    /// GPU memory could not be used (status 8).
    Gpu(String),
    /// The device cannot run this test (status 9).
    Unsupported(String),
    /// No RDMA device at all (status 3).
    NoDevice(String),
}

/// Result alias of the tool.
pub type PerfResult<T> = Result<T, PerfError>;

impl PerfError {
    /// The exit status for this error.
    pub fn exit_code(&self) -> i32 {
        match self {
            PerfError::Usage(_) => EXIT_USAGE,
            PerfError::Rdma { err, .. } => rdma_exit_code(err),
            PerfError::Peer(_) => EXIT_PEER,
            PerfError::Verify(_) => EXIT_VERIFY,
            PerfError::Gpu(_) => EXIT_GPU,
            PerfError::Unsupported(_) => EXIT_UNSUPPORTED,
            PerfError::NoDevice(_) => EXIT_NO_DEVICE,
        }
    }

    /// Wraps a library error with what the tool was doing.
    pub fn rdma(what: impl Into<String>, err: erdma::Error) -> PerfError {
        PerfError::Rdma {
            what: what.into(),
            err: Box::new(err),
        }
    }
}

fn rdma_exit_code(err: &erdma::Error) -> i32 {
    use erdma::Error as E;
    match err {
        E::LibraryMissing { .. } => EXIT_LIBRARY,
        E::NoSuchDevice { available, .. } if available.is_empty() => EXIT_NO_DEVICE,
        E::NoSuchDevice { .. } | E::BadGidIndex { .. } | E::BadPort { .. } => EXIT_NO_SUCH,
        E::Unsupported { .. } => EXIT_UNSUPPORTED,
        E::Io { .. } | E::Protocol { .. } | E::Cm { .. } | E::Timeout { .. } => EXIT_PEER,
        _ => EXIT_RDMA,
    }
}

impl fmt::Display for PerfError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PerfError::Usage(m)
            | PerfError::Peer(m)
            | PerfError::Verify(m)
            | PerfError::Gpu(m)
            | PerfError::Unsupported(m)
            | PerfError::NoDevice(m) => f.write_str(m),
            PerfError::Rdma { what, err } => write!(f, "{what}: {err}"),
        }
    }
}

impl std::error::Error for PerfError {}

/// `.ctx("what")` on library results.
pub trait Context<T> {
    /// Attaches what the tool was doing to a library error.
    fn ctx(self, what: impl FnOnce() -> String) -> PerfResult<T>;
}

impl<T> Context<T> for Result<T, erdma::Error> {
    fn ctx(self, what: impl FnOnce() -> String) -> PerfResult<T> {
        self.map_err(|e| PerfError::rdma(what(), e))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exit_codes_follow_the_error_kind() {
        let missing = erdma::Error::LibraryMissing {
            library: "libibverbs",
            detail: "x".into(),
        };
        assert_eq!(PerfError::rdma("open", missing).exit_code(), EXIT_LIBRARY);
        let none = erdma::Error::NoSuchDevice {
            name: "mlx5_0".into(),
            available: vec![],
            reason: Some("no devices".into()),
        };
        assert_eq!(PerfError::rdma("open", none).exit_code(), EXIT_NO_DEVICE);
        let other = erdma::Error::NoSuchDevice {
            name: "mlx5_0".into(),
            available: vec!["rxe0".into()],
            reason: None,
        };
        assert_eq!(PerfError::rdma("open", other).exit_code(), EXIT_NO_SUCH);
        assert_eq!(
            PerfError::rdma("post", erdma::Error::verb("ibv_post_send", libc::EINVAL)).exit_code(),
            EXIT_RDMA
        );
        assert_eq!(PerfError::Peer("x".into()).exit_code(), EXIT_PEER);
        assert_eq!(PerfError::Usage("x".into()).to_string(), "x");
    }
}
