//! A drop-in Rust reimplementation of NVIDIA nccl-tests 2.19.6
//! (`all_reduce_perf` and the other collective benchmarks).
//!
//! Layout, mirroring nccl-tests' "one common driver plus a tiny file per
//! collective":
//! - [`options`]: the command line (getopt_long-compatible) and usage text.
//! - [`colls`]: per-collective definitions (byte counts, bandwidth factor,
//!   expected data) - the equivalent of `all_reduce.cu` & co.
//! - [`driver`]: the measurement loop (`TimeTest`/`BenchTime`/`startColl`).
//! - [`threads`]: the benchmark threads (`threadInit`/`threadRunTests`) and
//!   [`memuse`]: where they read free memory for `-M 1`.
//! - [`backend`]: the [`backend::Backend`] abstraction a collective library
//!   plugs into (host, MPI, later NCCL).
//! - [`bootstrap`]: process launch and rendezvous (single, MPI, TCP).
//! - [`output`]: stdout report, JSON (schema 3) and CSV writers.
//! - [`verifiable`]: exactly-known reduction data.

pub mod agree;
pub mod alloc;
pub mod backend;
pub mod bootstrap;
pub mod census;
pub mod cfmt;
pub mod check;
pub mod colls;
pub mod console;
pub mod cparse;
pub mod driver;
pub mod errors;
pub mod getopt;
pub mod hooks;
pub mod job;
pub mod memuse;
pub mod options;
pub mod output;
pub mod run;
pub mod spawn;
pub mod sync;
pub mod threads;
pub mod timer;
pub mod types;
pub mod verifiable;
pub mod workers;

pub use run::main;
