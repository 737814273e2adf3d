//! Shared setup of the erdma benchmarks (`cargo bench -p erdma-benches`):
//!
//! - `benches/datapath.rs`: the safe API's post + poll on a loopback pair
//!   (an inline 8 B RDMA WRITE, an 8 B SEND/receive) against the same loops
//!   in C ([`c_loops`]), both in [`loops`], and memory registration cost by
//!   size; `erdma-datapath-count` runs the same loops a fixed number of times
//!   for an instruction counter (`scripts/datapath-instructions.sh`);
//! - `benches/two_host.rs`: latency and bandwidth to another host that runs
//!   `erdma-bench-server` ([`peer`]), named by `ERDMA_BENCH_PEER=host:port`.
//!
//! Without a device the benches say why and measure nothing (exit 0), so
//! `cargo bench` stays usable on any machine.
#![warn(missing_docs)]

pub mod c_loops;
pub mod loopback;
pub mod loops;
pub mod peer;

/// Prints why a bench measures nothing, once, on stderr.
pub fn skip(why: &str) {
    eprintln!("erdma-benches: skipped: {why}");
}
