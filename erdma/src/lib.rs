//! Safe RDMA verbs for Alibaba Cloud eRDMA NICs and any rdma-core device.
#![warn(missing_docs)]

#[cfg(feature = "cuda")]
pub mod cuda;
#[cfg(feature = "nccl")]
pub mod nccl;
