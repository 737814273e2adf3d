//! The error type of [`crate::nccl`]: one line naming the call, NCCL's result code and last
//! error text, and a hint; mapped to nccl-tests' exit statuses.

use std::ffi::c_int;
use std::fmt;
use std::time::Duration;

use super::version::Version;
use crate::cuda::CudaError;

/// An `ncclResult_t` value.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct ResultCode(pub c_int);

impl ResultCode {
    /// `ncclSuccess`.
    pub const SUCCESS: ResultCode = ResultCode(0);
    /// `ncclUnhandledCudaError`.
    pub const UNHANDLED_CUDA_ERROR: ResultCode = ResultCode(1);
    /// `ncclSystemError`.
    pub const SYSTEM_ERROR: ResultCode = ResultCode(2);
    /// `ncclInternalError`.
    pub const INTERNAL_ERROR: ResultCode = ResultCode(3);
    /// `ncclInvalidArgument`.
    pub const INVALID_ARGUMENT: ResultCode = ResultCode(4);
    /// `ncclInvalidUsage`.
    pub const INVALID_USAGE: ResultCode = ResultCode(5);
    /// `ncclRemoteError`.
    pub const REMOTE_ERROR: ResultCode = ResultCode(6);
    /// `ncclInProgress`: a nonblocking operation has not finished.
    pub const IN_PROGRESS: ResultCode = ResultCode(7);
    /// `ncclTimeout` (NCCL >= 2.30).
    pub const TIMEOUT: ResultCode = ResultCode(8);

    /// NCCL's enumerator name, e.g. `ncclSystemError`.
    pub fn name(self) -> String {
        match self.0 {
            0 => "ncclSuccess".into(),
            1 => "ncclUnhandledCudaError".into(),
            2 => "ncclSystemError".into(),
            3 => "ncclInternalError".into(),
            4 => "ncclInvalidArgument".into(),
            5 => "ncclInvalidUsage".into(),
            6 => "ncclRemoteError".into(),
            7 => "ncclInProgress".into(),
            8 => "ncclTimeout".into(),
            n => format!("ncclResult({n})"),
        }
    }

    /// What `ncclGetErrorString` says for the code.
    pub fn description(self) -> &'static str {
        match self.0 {
            0 => "no error",
            1 => "unhandled cuda error",
            2 => "unhandled system error",
            3 => "internal error",
            4 => "invalid argument",
            5 => "invalid usage",
            6 => "remote process exited or there was a network error",
            7 => "NCCL operation in progress",
            8 => "NCCL operation timed out",
            _ => "unknown result code",
        }
    }

    /// How a user may fix it.
    pub fn hint(self) -> &'static str {
        match self.0 {
            1 => {
                "a CUDA call inside NCCL failed: check the GPU and driver (nvidia-smi) and rerun with NCCL_DEBUG=WARN"
            }
            2 => {
                "a system call failed: in containers use --ipc=host (or a larger --shm-size) and --ulimit memlock=-1, check the network interfaces (NCCL_SOCKET_IFNAME); rerun with NCCL_DEBUG=INFO"
            }
            3 => "NCCL internal error: rerun with NCCL_DEBUG=INFO and report it with the log",
            4 => {
                "NCCL rejected an argument (type, operator, count or pointer): rerun with NCCL_DEBUG=WARN"
            }
            5 => {
                "NCCL usage error, e.g. two ranks on one GPU, calls that differ between ranks or a group left open: rerun with NCCL_DEBUG=WARN"
            }
            6 => {
                "a peer rank died or the network failed: check the other ranks' output and the NICs (ibv_devinfo)"
            }
            7 => "a nonblocking operation is still running: wait for it before the next call",
            8 => "NCCL gave up waiting for a peer: check the other ranks and the network",
            _ => "rerun with NCCL_DEBUG=INFO",
        }
    }
}

impl fmt::Display for ResultCode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} ({})", self.name(), self.description())
    }
}

/// A rank that had not finished when a deadline passed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PendingRank {
    /// Rank in its communicator.
    pub rank: usize,
    /// GPU ordinal the rank runs on.
    pub device: usize,
}

/// Everything that can go wrong in [`crate::nccl`].
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum NcclError {
    /// No NCCL library could be loaded.
    LibraryNotFound {
        /// The names or paths tried, in order.
        tried: Vec<String>,
        /// The loader's message for the first attempt.
        detail: String,
    },
    /// A library was loaded but it is not NCCL (or not a complete one): a symbol is missing.
    NotNccl {
        /// The library loaded.
        library: String,
        /// The first required symbol it lacks.
        symbol: &'static str,
    },
    /// The loaded NCCL is older than [`Version::MIN_SUPPORTED`].
    TooOld {
        /// The library loaded.
        library: String,
        /// Its version.
        found: Version,
    },
    /// An NCCL call returned an error.
    Call {
        /// The NCCL function.
        call: &'static str,
        /// Its result.
        code: ResultCode,
        /// `ncclGetLastError` text at the time, possibly empty.
        last_error: String,
    },
    /// `ncclCommGetAsyncError` reported an error on a communicator.
    Async {
        /// Rank of the communicator.
        rank: usize,
        /// The error.
        code: ResultCode,
        /// `ncclGetLastError` text at the time, possibly empty.
        last_error: String,
    },
    /// An operation did not finish in time.
    Timeout {
        /// What was being waited for.
        operation: String,
        /// The time limit.
        after: Duration,
        /// The local ranks that had not finished.
        pending: Vec<PendingRank>,
        /// Whether the communicators involved were aborted (false only for a blocking
        /// creation, which cannot be interrupted and is left to finish in the background).
        aborted: bool,
    },
    /// The communicator was aborted earlier (after a timeout or an error) and cannot be used.
    Aborted {
        /// Rank of the communicator.
        rank: usize,
    },
    /// The loaded NCCL or the GPU lacks a feature (nccl-tests' "not implemented").
    Unsupported {
        /// What is missing.
        what: String,
    },
    /// An argument failed a check before reaching NCCL.
    InvalidArgument {
        /// What was wrong.
        what: String,
    },
    /// A CUDA driver call failed.
    Cuda(CudaError),
}

impl NcclError {
    /// nccl-tests' exit status for this failure: 2 CUDA, 3 NCCL, 4 timeout, 5 not
    /// implemented, 6 invalid usage.
    pub fn exit_status(&self) -> i32 {
        match self {
            NcclError::Cuda(e) => e.exit_status(),
            NcclError::Timeout { .. } => 4,
            NcclError::Unsupported { .. } => 5,
            NcclError::InvalidArgument { .. } => 6,
            _ => 3,
        }
    }

    /// The NCCL result code, for errors that carry one.
    pub fn code(&self) -> Option<ResultCode> {
        match self {
            NcclError::Call { code, .. } | NcclError::Async { code, .. } => Some(*code),
            _ => None,
        }
    }

    pub(crate) fn invalid(what: impl Into<String>) -> Self {
        NcclError::InvalidArgument { what: what.into() }
    }
}

impl From<CudaError> for NcclError {
    fn from(e: CudaError) -> Self {
        NcclError::Cuda(e)
    }
}

fn last_error_suffix(text: &str) -> String {
    let one_line = text.split_whitespace().collect::<Vec<_>>().join(" ");
    if one_line.is_empty() {
        String::new()
    } else {
        format!(": {one_line}")
    }
}

impl fmt::Display for NcclError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            NcclError::LibraryNotFound { tried, detail } => {
                let first = tried.first().map(String::as_str).unwrap_or("libnccl.so.2");
                let others = if tried.len() > 1 {
                    format!(" (also tried {})", tried[1..].join(", "))
                } else {
                    String::new()
                };
                write!(
                    f,
                    "{first} not found{others}: {}; hint: install the NCCL runtime (libnccl2, NCCL >= 2.19) or set ERDMA_NCCL_LIBRARY to the path of libnccl.so.2",
                    detail.split_whitespace().collect::<Vec<_>>().join(" ")
                )
            }
            NcclError::NotNccl { library, symbol } => write!(
                f,
                "{library} is not a usable NCCL library: it lacks {symbol}; hint: point ERDMA_NCCL_LIBRARY at libnccl.so.2 (NCCL >= 2.19)"
            ),
            NcclError::TooOld { library, found } => write!(
                f,
                "{library} is NCCL {found}, older than the required {}; hint: install NCCL >= 2.19 or set ERDMA_NCCL_LIBRARY to a newer libnccl.so.2",
                Version::MIN_SUPPORTED
            ),
            NcclError::Call {
                call,
                code,
                last_error,
            } => write!(
                f,
                "{call} failed: {code}{}; hint: {}",
                last_error_suffix(last_error),
                code.hint()
            ),
            NcclError::Async {
                rank,
                code,
                last_error,
            } => write!(
                f,
                "rank {rank}: NCCL reported an asynchronous error: {code}{}; hint: {}",
                last_error_suffix(last_error),
                code.hint()
            ),
            NcclError::Timeout {
                operation,
                after,
                pending,
                aborted,
            } => {
                let ranks = pending
                    .iter()
                    .map(|p| format!("{} (GPU {})", p.rank, p.device))
                    .collect::<Vec<_>>()
                    .join(", ");
                write!(
                    f,
                    "{operation} did not finish within {:.1} s (local ranks not done: {}); {}; hint: a peer rank is stuck or dead or the network is down: check the other ranks' output, rerun with NCCL_DEBUG=INFO",
                    after.as_secs_f64(),
                    if ranks.is_empty() {
                        "none".into()
                    } else {
                        ranks
                    },
                    if *aborted {
                        "communicators aborted"
                    } else {
                        "it is left running in the background"
                    }
                )
            }
            NcclError::Aborted { rank } => write!(
                f,
                "rank {rank}: the communicator was aborted after an earlier error or timeout; hint: create a new communicator"
            ),
            NcclError::Unsupported { what } => write!(f, "not supported: {what}"),
            NcclError::InvalidArgument { what } => write!(f, "invalid argument: {what}"),
            NcclError::Cuda(e) => e.fmt(f),
        }
    }
}

impl std::error::Error for NcclError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            NcclError::Cuda(e) => Some(e),
            _ => None,
        }
    }
}

/// Result of [`crate::nccl`] operations.
pub type Result<T, E = NcclError> = std::result::Result<T, E>;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn call_error_is_one_line_with_last_error_and_hint() {
        let e = NcclError::Call {
            call: "ncclCommInitRank",
            code: ResultCode::SYSTEM_ERROR,
            last_error:
                "Error while creating shared memory segment\n/dev/shm/nccl-x (size 9637888)\n"
                    .into(),
        };
        let s = e.to_string();
        assert!(!s.contains('\n'), "{s}");
        assert!(s.starts_with(
            "ncclCommInitRank failed: ncclSystemError (unhandled system error): Error while creating shared memory segment /dev/shm/nccl-x (size 9637888); hint: "
        ), "{s}");
        assert!(s.contains("--ipc=host"));
        assert_eq!(e.exit_status(), 3);
        assert_eq!(e.code(), Some(ResultCode::SYSTEM_ERROR));
    }

    #[test]
    fn empty_last_error_adds_nothing() {
        let e = NcclError::Call {
            call: "ncclAllReduce",
            code: ResultCode::INVALID_ARGUMENT,
            last_error: "  ".into(),
        };
        assert!(
            e.to_string()
                .starts_with("ncclAllReduce failed: ncclInvalidArgument (invalid argument); hint:")
        );
    }

    #[test]
    fn exit_statuses_follow_nccl_tests() {
        let cuda = NcclError::Cuda(CudaError::DriverNotFound);
        assert_eq!(cuda.exit_status(), 2);
        assert_eq!(cuda.to_string(), CudaError::DriverNotFound.to_string());
        let missing = NcclError::LibraryNotFound {
            tried: vec!["libnccl.so.2".into(), "libnccl.so".into()],
            detail: "libnccl.so.2: cannot open shared object file: No such file or directory"
                .into(),
        };
        assert_eq!(missing.exit_status(), 3);
        let t = NcclError::Timeout {
            operation: "all_reduce".into(),
            after: Duration::from_secs(5),
            pending: vec![PendingRank { rank: 1, device: 1 }],
            aborted: true,
        };
        assert_eq!(t.exit_status(), 4);
        assert_eq!(NcclError::Unsupported { what: "x".into() }.exit_status(), 5);
        assert_eq!(NcclError::invalid("x").exit_status(), 6);
        assert_eq!(NcclError::Aborted { rank: 0 }.exit_status(), 3);
    }

    #[test]
    fn library_not_found_names_candidates_and_fix() {
        let e = NcclError::LibraryNotFound {
            tried: vec!["libnccl.so.2".into(), "libnccl.so".into()],
            detail: "libnccl.so.2: cannot open shared object file: No such file or directory"
                .into(),
        };
        assert_eq!(
            e.to_string(),
            "libnccl.so.2 not found (also tried libnccl.so): libnccl.so.2: cannot open shared object file: No such file or directory; hint: install the NCCL runtime (libnccl2, NCCL >= 2.19) or set ERDMA_NCCL_LIBRARY to the path of libnccl.so.2"
        );
    }

    #[test]
    fn timeout_lists_pending_ranks() {
        let t = NcclError::Timeout {
            operation: "wait for stream".into(),
            after: Duration::from_millis(2500),
            pending: vec![
                PendingRank { rank: 0, device: 0 },
                PendingRank { rank: 3, device: 1 },
            ],
            aborted: true,
        };
        let s = t.to_string();
        assert!(s.starts_with(
            "wait for stream did not finish within 2.5 s (local ranks not done: 0 (GPU 0), 3 (GPU 1)); communicators aborted"
        ), "{s}");
        let left = NcclError::Timeout {
            operation: "NCCL communicator creation".into(),
            after: Duration::from_secs(3),
            pending: vec![],
            aborted: false,
        };
        assert!(
            left.to_string().contains(
                "(local ranks not done: none); it is left running in the background; hint:"
            ),
            "{left}"
        );
    }

    #[test]
    fn result_codes_beyond_the_table_still_print() {
        assert_eq!(ResultCode(42).name(), "ncclResult(42)");
        assert_eq!(ResultCode(8).name(), "ncclTimeout");
        assert_eq!(
            ResultCode::REMOTE_ERROR.to_string(),
            "ncclRemoteError (remote process exited or there was a network error)"
        );
    }
}
