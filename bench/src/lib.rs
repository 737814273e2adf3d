//! Tools built on `erdma`: device inspection and NCCL collective benchmarks.
#![warn(missing_docs)]

pub mod nccltests;
