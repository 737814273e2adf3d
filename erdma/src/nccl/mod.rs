//! NCCL communicators and collectives (libnccl.so.2 loaded at run time).
//!
//! NCCL is found at run time (`ERDMA_NCCL_LIBRARY`, else `libnccl.so.2`, else `libnccl.so`),
//! must be 2.19 or newer, and features of newer releases are used when present
//! (`ncclCommWindowRegister`, native `ncclAlltoAll`/`ncclGather`/`ncclScatter`, fp8). A
//! missing library, a library that is not NCCL, no GPU or no driver: each is a typed
//! [`NcclError`] with a one-line message and nccl-tests' exit status, never a panic.
//!
//! ```no_run
//! use erdma::cuda::{Device, DeviceBuffer, Stream};
//! use erdma::nccl::{Comm, Config, Nccl, RedOp};
//! use std::time::Duration;
//! # fn main() -> Result<(), erdma::nccl::NcclError> {
//! let nccl = Nccl::load()?;
//! let gpu = Device::new(0)?;
//! let id = nccl.unique_id()?; // on rank 0, then sent to every rank
//! let config = Config { timeout: Some(Duration::from_secs(60)), ..Config::default() };
//! let comm = Comm::init_rank(nccl, &gpu, 1, 0, &id, &config)?;
//! let stream = Stream::new(&gpu)?;
//! let send = DeviceBuffer::from_host(&gpu, &[1.0f32; 1024], &stream)?;
//! let mut recv = DeviceBuffer::<f32>::alloc(&gpu, 1024)?;
//! comm.all_reduce(&send, &mut recv, RedOp::SUM, &stream)?;
//! comm.wait(&stream, Some(Duration::from_secs(10)))?; // aborts the comm on timeout
//! # Ok(()) }
//! ```

mod collectives;
mod comm;
mod device;
mod error;
mod group;
mod library;
pub mod sys;
mod types;
mod version;
mod wait;

pub use collectives::{PreMulSum, RegHandle};
pub use comm::{Comm, Config, RankSpec, wait_ready};
pub use device::{DevComm, DevCommLayout, DevRequirements, Team};
pub use error::{NcclError, PendingRank, Result, ResultCode};
pub use group::{Group, GroupStatus};
pub use library::{DEFAULT_LIBRARY_NAMES, NCCL_LIBRARY_ENV, Nccl, UniqueId};
pub use types::{BFloat16, DataType, F8E4M3, F8E5M2, Half, NcclType, RedOp, ReduceOp, Scalar};
pub use version::{ParseVersionError, Version};
pub use wait::wait_all;
