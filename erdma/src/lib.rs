//! Safe RDMA verbs for Alibaba Cloud eRDMA NICs and any rdma-core device.
//!
//! Layers (cudarc style): [`sys`] is the raw FFI (checked-in bindgen output,
//! libibverbs/librdmacm loaded at run time, so binaries start on hosts
//! without rdma-core); this crate is the safe API on top.
//!
//! - [`devices`] lists devices and never fails: on a host without RDMA the
//!   list is empty and [`DeviceList::reason`] says why.
//! - [`Context`]: an opened device, its [`DeviceAttributes`], ports
//!   ([`PortAttributes`]) and GID tables ([`GidEntry`], NCCL-style
//!   [`Context::select_gid`]).
//! - [`ProtectionDomain`], [`MemoryRegion`] (owns its memory: host buffers,
//!   and with the `cuda` feature GPU buffers, registered through
//!   `nvidia_peermem` or dma-buf as the NIC supports: `ProtectionDomain::register_gpu`),
//!   [`CompletionQueue`] ([`WorkCompletion`]), [`QueuePair`] (RC, classic
//!   verbs: SEND, SEND_WITH_IMM, RDMA WRITE (with imm), READ, atomics, inline,
//!   scatter/gather).
//! - Connecting: [`Endpoint`] + [`exchange`] (TCP, RoCE/IB and eRDMA RoCE
//!   mode), or [`cm`] (RDMA CM: iWARP, i.e. eRDMA's default mode, and any).
//! - One error type, [`Error`]: the verb, the errno and how to fix it.
//!
//! Ownership makes misuse impossible in safe code: a region owns its buffer
//! and holds its PD, a QP holds its PD and CQs, a posted request holds its
//! regions until its completion is polled (completions of a dropped QP left
//! in a CQ release nothing), posting needs an RTS QP, a CQ must hold every
//! completion its queues can have outstanding. A region peers may write
//! (`REMOTE_WRITE`/`REMOTE_ATOMIC`) is read by copies
//! ([`MemoryRegion::read_at`]), never as a `&[u8]` the peer could change
//! underneath; the others are lent as slices when no request uses them.
//!
//! ```no_run
//! # fn main() -> erdma::Result<()> {
//! let list = erdma::devices();
//! if let Some(reason) = list.reason() {
//!     println!("{reason}");
//!     return Ok(());
//! }
//! let ctx = list.iter().next().unwrap().open()?;
//! let gid = ctx.select_gid(1, None)?;
//! let pd = ctx.alloc_pd()?;
//! let mr = pd.register(vec![0u8; 4096], erdma::AccessFlags::ALL)?;
//! println!("{} GID[{}] {} rkey {:#x}", ctx.name(), gid.index, gid.gid, mr.rkey());
//! # Ok(()) }
//! ```
#![warn(missing_docs)]

// The crate's README (crates.io's page): its example is compiled by the doc tests.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
struct ReadmeDoctest;

/// The raw FFI layer (`erdma-sys`).
pub use erdma_sys as sys;

pub mod cm;
pub mod context;
pub mod cq;
mod deadline;
pub mod device;
pub mod endpoint;
pub mod error;
pub mod exchange;
mod ffi;
pub mod gid;
#[cfg(feature = "cuda")]
pub mod gpu;
pub mod lane;
pub mod mr;
pub mod pd;
mod pending;
pub mod port;
pub mod qp;
mod sysfs;

#[cfg(feature = "cuda")]
pub mod cuda;
#[cfg(feature = "nccl")]
pub mod nccl;

pub use context::{
    AtomicCap, Context, DeviceAttributes, ERDMA_VENDOR_ID, ERDMA_VENDOR_PART_ID, Protocol,
};
#[cfg(feature = "tokio")]
pub use cq::{AsyncCompletionQueue, Posted};
pub use cq::{CompletionQueue, CqOptions, WcOpcode, WcStatus, WorkCompletion};
pub use device::{Device, DeviceList, Guid, NoDevicesReason, Transport, devices};
pub use endpoint::{ConnectOptions, Endpoint};
pub use error::{Error, Result};
pub use gid::{Gid, GidEntry, GidType};
#[cfg(feature = "cuda")]
pub use gpu::{GpuMemory, GpuRegistration};
pub use lane::{Completion, Lane, PreparedRecv, PreparedSend, PreparedSendMut, SourceMut};
pub use mr::{
    AccessFlags, AlignedBuffer, DmaBufRange, HostMemory, LocalSlice, MemoryRegion, OpaqueMemory,
    RawBuffer, RegisterBuffer, RemoteBuffer,
};
pub use pd::ProtectionDomain;

/// Test hooks (feature `fault-injection`): failures no device produces at
/// will. Not part of the API.
#[cfg(feature = "fault-injection")]
#[doc(hidden)]
pub mod fault {
    pub use crate::cq::pause_next_poll;
    pub use crate::mr::inject_dereg_failures;

    /// Makes the next QP generations start at `g` (at most `2^30 - 1`): a
    /// test reaches the wrap of the 30-bit generations at once.
    pub fn start_generations_at(g: u32) {
        crate::pending::start_generations_at(g);
    }
}
pub use port::{LinkLayer, Mtu, PhysState, PortAttributes, PortState};
pub use qp::{
    InitAttributes, QpCapabilities, QpState, QueuePair, RecvRequest, RtrAttributes, RtsAttributes,
    SendOp, SendRequest,
};
