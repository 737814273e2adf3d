//! Tools built on `erdma`: device inspection, NCCL collective benchmarks,
//! the comparison of their results, and perftest's RDMA tests.
#![warn(missing_docs)]

pub mod compare;
/// `devinfo`: RDMA device attributes as `ibv_devinfo` prints them.
pub mod devinfo;
pub mod nccltests;
/// `erdma-perf`: perftest's bandwidth and latency tests on erdma.
pub mod perf;
