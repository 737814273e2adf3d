//! Memory regions over memory the caller hands over (host buffers, safely)
//! or vouches for (device memory, `unsafe`), and the local/remote slices that
//! work requests name.
//!
//! Ownership rules that make misuse impossible in safe code:
//! - a [`MemoryRegion`] owns its buffer: the memory cannot be freed, moved or
//!   reallocated while registered;
//! - every posted work request holds a share of the regions it names until
//!   its completion is polled (or its QP is destroyed), so a region whose
//!   requests are in flight is neither deregistered nor handed back, and its
//!   contents are not reachable as a Rust slice ([`Error::Busy`]);
//! - the region holds its protection domain, so it cannot outlive it.
//!
//! What no library can police: a peer given an rkey with remote write access
//! may write at any time its protocol allows. Coordinate (a completion such
//! as WRITE_WITH_IMM or a SEND after the WRITE) before reading such memory.
//!
//! Each guarantee sits in one module: access rights and their rule
//! (`access.rs`), the memory a region may own and its contract
//! (`buffer.rs`), the registration and its lifetime (`region.rs`), CPU
//! access to host memory (`host.rs`), dma-buf registration (`dmabuf.rs`),
//! the slices requests name (`slice.rs`).

#[cfg(doc)]
use crate::error::Error;

mod access;
mod buffer;
mod dmabuf;
mod host;
mod region;
mod slice;

pub use access::AccessFlags;
pub(crate) use access::check_access;
#[cfg(feature = "cuda")]
pub(crate) use buffer::sealed;
pub use buffer::{AlignedBuffer, DmaBufRange, HostMemory, OpaqueMemory, RawBuffer, RegisterBuffer};
#[cfg(feature = "cuda")]
pub(crate) use dmabuf::reg_dmabuf_mr;
pub(crate) use region::Lease;
pub use region::MemoryRegion;
#[cfg(feature = "fault-injection")]
pub use region::inject_dereg_failures;
use slice::range_text;
pub(crate) use slice::resolve_range;
pub use slice::{LocalSlice, RemoteBuffer};
