//! Tools built on `erdma`: device inspection, the bring-up checklist (`erdma-doctor`),
//! port counters (`erdma-stat`), NCCL collective benchmarks, perftest's RDMA tests
//! (`erdma-perf`) and the comparison of their results.
#![warn(missing_docs)]
// Tests read what the tools wrote as they like; the tools read through `input`.
#![cfg_attr(test, allow(clippy::disallowed_methods))]

pub mod cli;
pub mod cluster;
pub mod compare;
/// `devinfo`: RDMA device attributes as `ibv_devinfo` prints them.
pub mod devinfo;
pub mod doctor;
pub mod input;
pub mod meta;
pub mod nccltests;
pub mod outfile;
pub mod perf;
pub mod stat;
