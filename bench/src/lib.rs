//! Tools built on `erdma`: device inspection and NCCL collective benchmarks.
#![warn(missing_docs)]

/// `devinfo`: RDMA device attributes as `ibv_devinfo` prints them.
pub mod devinfo;
pub mod nccltests;
