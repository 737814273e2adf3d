//! The crate's one error type: what failed (the verb), the errno, and how to fix it.

use std::fmt;
use std::time::Duration;

use crate::cq::WcStatus;
use crate::qp::QpState;

/// Result alias used throughout the crate.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Every error of this crate. Its `Display` is one line naming what failed
/// (verb, errno) and, where one is known, how to fix it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// libibverbs or librdmacm could not be loaded.
    #[error(
        "{library} missing: install rdma-core/ibverbs-providers (Debian/Ubuntu: \
         apt-get install ibverbs-providers librdmacm1; RHEL: dnf install rdma-core) [{detail}]"
    )]
    LibraryMissing {
        /// `libibverbs` or `librdmacm`.
        library: &'static str,
        /// The dynamic loader's message.
        detail: String,
    },

    /// A verb (libibverbs/librdmacm call) failed.
    #[error("{verb} failed: {}{}", errno_text(*.errno), hint_suffix(.hint))]
    Verb {
        /// The failing call, e.g. `ibv_reg_mr`.
        verb: &'static str,
        /// The errno it returned or set.
        errno: i32,
        /// How to fix it, when known.
        hint: Option<String>,
    },

    /// No device has this name.
    #[error("no RDMA device named '{name}' ({})", available_text(.available, .reason))]
    NoSuchDevice {
        /// The name asked for.
        name: String,
        /// The devices that exist.
        available: Vec<String>,
        /// Why there are no devices at all, when there are none.
        reason: Option<String>,
    },

    /// The device or library lacks a feature (EOPNOTSUPP, detected up front
    /// or returned by a verb).
    #[error("{feature} is not supported{}{}", on_device(.device), hint_suffix(.hint))]
    Unsupported {
        /// The missing feature, e.g. `atomic operations (CAS/FAA)`.
        feature: String,
        /// The device, when the limit is the device's.
        device: Option<String>,
        /// What to do instead.
        hint: Option<String>,
    },

    /// A GID index outside the port's table or naming an empty entry.
    #[error(
        "bad GID index {index} on {device} port {port}: {problem} \
         (list the table with `devinfo -v -d {device}`; omit the index to pick the RoCE v2 IPv4 GID)"
    )]
    BadGidIndex {
        /// Device name.
        device: String,
        /// Port number.
        port: u8,
        /// The index asked for.
        index: u32,
        /// What is wrong with it.
        problem: String,
    },

    /// A port number the device does not have.
    #[error("bad port {port} on {device}: the device has {count} port(s), numbered from 1")]
    BadPort {
        /// Device name.
        device: String,
        /// The port asked for.
        port: u32,
        /// How many ports the device has.
        count: u32,
    },

    /// An operation needs the queue pair in another state.
    #[error("{operation} on QP {qp_num:#x} in state {state}: {needed}")]
    QpState {
        /// What was attempted, e.g. `post_send`.
        operation: &'static str,
        /// The QP number.
        qp_num: u32,
        /// Its current state.
        state: QpState,
        /// What is required, e.g. `the QP must be RTS: connect it first`.
        needed: &'static str,
    },

    /// An argument the library checked before calling the device.
    #[error("invalid argument to {operation}: {problem}")]
    InvalidArgument {
        /// The call, e.g. `post_send`.
        operation: &'static str,
        /// What is wrong.
        problem: String,
    },

    /// Memory still used by posted work requests.
    #[error("{what} is in use by {in_flight} posted work request(s): poll their completions first")]
    Busy {
        /// The resource, e.g. `memory region`.
        what: &'static str,
        /// How many requests still hold it.
        in_flight: usize,
    },

    /// A region peers may write was asked for as a Rust slice.
    #[error(
        "{operation}: the region is registered with {access}, so a peer may write it at any time and \
         it is not lent out as a Rust slice: copy it with read_at/to_vec, take it back with into_inner \
         (which revokes remote access), or register it without REMOTE_WRITE/REMOTE_ATOMIC"
    )]
    RemotelyWritable {
        /// The call, e.g. `MemoryRegion::as_slice`.
        operation: &'static str,
        /// The region's access flags.
        access: String,
    },

    /// An operation that has the CPU read a region's bytes (an inline send)
    /// named memory the CPU cannot read (GPU memory, a dma-buf, a
    /// [`crate::RawBuffer`]).
    #[error(
        "{operation}: {what} is not host memory the CPU can read (a GPU, dma-buf or RawBuffer          region), so it cannot be sent inline: drop .inline() (the NIC then reads it by DMA), or          copy the bytes into a host region"
    )]
    NotHostMemory {
        /// The call, e.g. `post_send`.
        operation: &'static str,
        /// Which buffer, e.g. `local buffer 0`.
        what: String,
    },

    /// A GPU (CUDA driver) call made for the RDMA library failed, e.g. exporting
    /// GPU memory as a dma-buf.
    #[error("{operation} failed: {detail}")]
    Gpu {
        /// What was attempted, e.g. `export GPU memory as a dma-buf`.
        operation: &'static str,
        /// The driver's error, with its fix.
        detail: String,
    },

    /// A queue of a QP holds as many requests as it was created for.
    #[error(
        "the {queue} queue of QP {qp_num:#x} is full ({outstanding} outstanding, room for {capacity}): \
         poll completions first (unsignaled requests are released with the next signaled one's completion)"
    )]
    QueueFull {
        /// `send` or `receive`.
        queue: &'static str,
        /// The QP number.
        qp_num: u32,
        /// Requests posted and not yet completed.
        outstanding: usize,
        /// The queue's size.
        capacity: usize,
    },

    /// A work completion with an error status (see [`crate::WorkCompletion::ok`]).
    #[error(
        "work request {wr_id} on QP {qp_num:#x} completed with {status} (vendor error {vendor_err:#x}){}",
        hint_suffix(&status.hint().map(str::to_owned))
    )]
    Completion {
        /// The completion status.
        status: WcStatus,
        /// The request's id.
        wr_id: u64,
        /// The QP number.
        qp_num: u32,
        /// Provider-specific error code.
        vendor_err: u32,
    },

    /// Nothing happened in time.
    #[error("timed out after {after:?} waiting for {what}{}", hint_suffix(.hint))]
    Timeout {
        /// What was awaited.
        what: String,
        /// The time limit.
        after: Duration,
        /// Likely causes.
        hint: Option<String>,
    },

    /// A socket operation of the TCP endpoint exchange failed.
    #[error("{operation} {peer} failed: {message}{}", hint_suffix(.hint))]
    Io {
        /// The operation, e.g. `connect to`.
        operation: &'static str,
        /// The address involved.
        peer: String,
        /// The OS error text.
        message: String,
        /// The errno, when there is one.
        errno: Option<i32>,
        /// How to fix it, when known.
        hint: Option<String>,
    },

    /// A peer sent something that is not a valid message.
    #[error("bad message from {peer}: {problem}")]
    Protocol {
        /// The peer's address.
        peer: String,
        /// What is wrong with the message.
        problem: String,
    },

    /// An RDMA CM connection step ended with an unexpected event.
    #[error("rdma_cm {step}: expected {expected}, got {got} (status {status}){}", hint_suffix(.hint))]
    Cm {
        /// The step, e.g. `connect to 10.0.0.2:7471`.
        step: String,
        /// The event expected.
        expected: &'static str,
        /// The event received.
        got: String,
        /// The event's status (a negative errno or a reject reason).
        status: i32,
        /// Likely causes.
        hint: Option<String>,
    },
}

impl Error {
    /// A failed verb with its errno; the hint is derived from both.
    pub fn verb(verb: &'static str, errno: i32) -> Error {
        Error::Verb {
            verb,
            errno,
            hint: hint_for(verb, errno),
        }
    }

    /// A failed verb whose errno is in the thread's `errno`.
    pub(crate) fn last_os(verb: &'static str) -> Error {
        let errno = std::io::Error::last_os_error()
            .raw_os_error()
            .filter(|e| *e != 0)
            .unwrap_or(libc::EIO);
        Error::verb(verb, errno)
    }

    /// A verb returning 0 or an errno value (positive, or negative as some
    /// providers do).
    pub(crate) fn check(verb: &'static str, ret: i32) -> Result<()> {
        match ret {
            0 => Ok(()),
            r if r > 0 => Err(Error::verb(verb, r)),
            -1 => Err(Error::last_os(verb)),
            r => Err(Error::verb(verb, -r)),
        }
    }

    /// An [`Error::InvalidArgument`] (for tools built on the library too).
    pub fn invalid(operation: &'static str, problem: impl Into<String>) -> Error {
        Error::InvalidArgument {
            operation,
            problem: problem.into(),
        }
    }

    /// The errno behind the error, when there is one.
    pub fn errno(&self) -> Option<i32> {
        match self {
            Error::Verb { errno, .. } => Some(*errno),
            Error::Io { errno, .. } => *errno,
            Error::Unsupported { .. } => Some(libc::EOPNOTSUPP),
            Error::Timeout { .. } => Some(libc::ETIMEDOUT),
            Error::Cm { status, .. } if *status < 0 => Some(-status),
            _ => None,
        }
    }

    /// The name of the failing verb, for [`Error::Verb`].
    pub fn verb_name(&self) -> Option<&'static str> {
        match self {
            Error::Verb { verb, .. } => Some(verb),
            _ => None,
        }
    }

    /// The fix suggested for this error, when there is one.
    pub fn hint(&self) -> Option<&str> {
        match self {
            Error::Verb { hint, .. }
            | Error::Unsupported { hint, .. }
            | Error::Timeout { hint, .. }
            | Error::Io { hint, .. }
            | Error::Cm { hint, .. } => hint.as_deref(),
            Error::Completion { status, .. } => status.hint(),
            _ => None,
        }
    }

    pub(crate) fn io(
        operation: &'static str,
        peer: impl fmt::Display,
        e: &std::io::Error,
    ) -> Error {
        let errno = e.raw_os_error();
        let hint = match e.kind() {
            std::io::ErrorKind::ConnectionRefused => {
                Some("nothing listens there: start the other side first, check host and port".into())
            }
            std::io::ErrorKind::TimedOut | std::io::ErrorKind::WouldBlock => {
                Some("the peer did not answer: check that it runs and that a firewall lets the port through".into())
            }
            std::io::ErrorKind::AddrInUse => Some("the port is taken: pick another one".into()),
            std::io::ErrorKind::UnexpectedEof | std::io::ErrorKind::ConnectionReset => {
                Some("the peer closed the connection (did it fail? see its output)".into())
            }
            _ => None,
        };
        let message = e.to_string();
        let message = match message.find(" (os error") {
            Some(i) => message[..i].to_owned(),
            None => message,
        };
        Error::Io {
            operation,
            peer: peer.to_string(),
            message,
            errno,
            hint,
        }
    }
}

/// The symbolic name of common errno values (`ENOMEM`), for messages.
pub fn errno_name(errno: i32) -> Option<&'static str> {
    Some(match errno {
        libc::EPERM => "EPERM",
        libc::ENOENT => "ENOENT",
        libc::EINTR => "EINTR",
        libc::EIO => "EIO",
        libc::ENXIO => "ENXIO",
        libc::E2BIG => "E2BIG",
        libc::EBADF => "EBADF",
        libc::EAGAIN => "EAGAIN",
        libc::ENOMEM => "ENOMEM",
        libc::EACCES => "EACCES",
        libc::EFAULT => "EFAULT",
        libc::EBUSY => "EBUSY",
        libc::EEXIST => "EEXIST",
        libc::ENODEV => "ENODEV",
        libc::EINVAL => "EINVAL",
        libc::ENOSPC => "ENOSPC",
        libc::ERANGE => "ERANGE",
        libc::ENOSYS => "ENOSYS",
        libc::ENODATA => "ENODATA",
        libc::EPROTO => "EPROTO",
        libc::EOPNOTSUPP => "EOPNOTSUPP",
        libc::EADDRINUSE => "EADDRINUSE",
        libc::EADDRNOTAVAIL => "EADDRNOTAVAIL",
        libc::ENETUNREACH => "ENETUNREACH",
        libc::ECONNABORTED => "ECONNABORTED",
        libc::ECONNRESET => "ECONNRESET",
        libc::ETIMEDOUT => "ETIMEDOUT",
        libc::ECONNREFUSED => "ECONNREFUSED",
        libc::EHOSTUNREACH => "EHOSTUNREACH",
        _ => return None,
    })
}

fn errno_text(errno: i32) -> String {
    let text = std::io::Error::from_raw_os_error(errno).to_string();
    let text = match text.find(" (os error") {
        Some(i) => &text[..i],
        None => &text,
    };
    match errno_name(errno) {
        Some(name) => format!("{name} ({text})"),
        None => format!("errno {errno} ({text})"),
    }
}

fn hint_suffix(hint: &Option<String>) -> String {
    match hint {
        Some(h) => format!(": {h}"),
        None => String::new(),
    }
}

fn on_device(device: &Option<String>) -> String {
    match device {
        Some(d) => format!(" by {d}"),
        None => String::new(),
    }
}

fn available_text(available: &[String], reason: &Option<String>) -> String {
    if available.is_empty() {
        match reason {
            Some(r) => r.clone(),
            None => "no RDMA devices at all".into(),
        }
    } else {
        format!("available: {}", available.join(", "))
    }
}

const MEMLOCK_HINT: &str = "the locked-memory limit is too low: raise `ulimit -l` (e.g. `ulimit -l unlimited`, \
     or memlock in /etc/security/limits.conf); in Docker run with --ulimit memlock=-1";
const PERMISSION_HINT: &str = "no access to /dev/infiniband/uverbs*: run as root or grant the user access \
     (rdma group / udev rule); in Docker use --privileged or --device=/dev/infiniband";

/// The fix for a verb failing with an errno, when one is known.
fn hint_for(verb: &str, errno: i32) -> Option<String> {
    let reg = verb.starts_with("ibv_reg_") || verb == "ibv_rereg_mr";
    Some(match errno {
        libc::ENOMEM if reg => MEMLOCK_HINT.into(),
        libc::ENOMEM if verb.starts_with("ibv_create_") || verb.starts_with("ibv_alloc_") => format!(
            "the device is out of resources or {MEMLOCK_HINT}"
        ),
        libc::ENOMEM if verb.starts_with("ibv_post_") => {
            "the work queue is full: poll completions before posting more, or create the QP with more work requests"
                .into()
        }
        libc::EPERM | libc::EACCES if verb == "ibv_open_device" || verb.starts_with("rdma_") => {
            PERMISSION_HINT.into()
        }
        libc::EFAULT if reg => "the address range is not mapped memory the kernel can pin".into(),
        libc::EINVAL if reg => {
            "the access flags or range are not accepted: REMOTE_WRITE and REMOTE_ATOMIC need LOCAL_WRITE; \
             device memory needs its peer-memory module (e.g. nvidia_peermem)"
                .into()
        }
        libc::EOPNOTSUPP | libc::ENOSYS => {
            format!("the device or its provider does not implement {}", feature_of(verb))
        }
        libc::EINVAL if verb == "ibv_post_recv" => {
            "the provider refused the receive; some (siw) reject receives without a buffer: give each \
             at least one scatter/gather entry"
                .into()
        }
        libc::EINVAL if verb == "ibv_modify_qp" => {
            "the device rejected the QP attributes: check the remote QPN/PSN, GID index, path MTU and port; \
             iWARP devices connect only through RDMA CM (erdma::cm)"
                .into()
        }
        libc::ENODEV => "the device disappeared (driver unloaded or device reset)".into(),
        libc::ETIMEDOUT if verb.starts_with("rdma_") => {
            "the peer did not answer: check the address, that the peer listens, and the port state".into()
        }
        libc::ECONNREFUSED | libc::ECONNRESET if verb.starts_with("rdma_") => {
            "nothing listens on that address and port: start the server side first".into()
        }
        libc::EADDRNOTAVAIL if verb.starts_with("rdma_") => {
            "no RDMA device owns this IP address: use the address of an RDMA-capable interface".into()
        }
        libc::ENODATA if verb.contains("gid") => "the GID table entry is empty".into(),
        _ => return None,
    })
}

/// What a verb provides, for EOPNOTSUPP messages.
fn feature_of(verb: &str) -> String {
    match verb {
        "ibv_reg_dmabuf_mr" => "dma-buf memory registration (register device memory with ibv_reg_mr and a peer-memory module instead)".into(),
        "ibv_create_cq_ex" => "extended completion queues (use the classic CQ)".into(),
        "ibv_create_qp_ex" => "extended queue pairs (use the classic QP)".into(),
        "ibv_query_device_ex" => "extended device queries".into(),
        "ibv_post_send" => "this work request (opcode, inline size or atomics)".into(),
        "_ibv_query_gid_ex" | "_ibv_query_gid_table" => {
            "GID queries with types (rdma-core >= 32 and Linux >= 5.9)".into()
        }
        v => v.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn enomem_on_reg_mr_names_memlock() {
        let e = Error::verb("ibv_reg_mr", libc::ENOMEM);
        let s = e.to_string();
        assert!(
            s.starts_with("ibv_reg_mr failed: ENOMEM (Cannot allocate memory): "),
            "{s}"
        );
        assert!(s.contains("ulimit -l"), "{s}");
        assert!(s.contains("--ulimit memlock=-1"), "{s}");
        assert_eq!(e.errno(), Some(libc::ENOMEM));
        assert_eq!(e.verb_name(), Some("ibv_reg_mr"));
        assert!(!s.contains('\n'));
    }

    #[test]
    fn eopnotsupp_names_the_feature() {
        let s = Error::verb("ibv_reg_dmabuf_mr", libc::EOPNOTSUPP).to_string();
        assert!(s.contains("dma-buf memory registration"), "{s}");
    }

    #[test]
    fn check_accepts_positive_and_negative_errno() {
        assert!(Error::check("x", 0).is_ok());
        assert_eq!(
            Error::check("x", libc::EINVAL).unwrap_err().errno(),
            Some(libc::EINVAL)
        );
        assert_eq!(
            Error::check("x", -libc::EINVAL).unwrap_err().errno(),
            Some(libc::EINVAL)
        );
    }

    #[test]
    fn unknown_errno_still_formats() {
        let s = Error::verb("ibv_foo", 4242).to_string();
        assert!(s.starts_with("ibv_foo failed: errno 4242"), "{s}");
    }

    #[test]
    fn no_such_device_lists_alternatives() {
        let e = Error::NoSuchDevice {
            name: "mlx5_9".into(),
            available: vec!["rxe0".into(), "rxe1".into()],
            reason: None,
        };
        assert_eq!(
            e.to_string(),
            "no RDMA device named 'mlx5_9' (available: rxe0, rxe1)"
        );
    }
}
