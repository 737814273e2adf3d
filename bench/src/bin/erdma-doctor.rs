//! `erdma-doctor`: checks this host or container for RDMA (eRDMA), GPU and NCCL
//! readiness, one line per check with the fix, and prints the NCCL environment
//! for the devices found. Exit status: see `erdma_bench::doctor` (0 ok, 1 a
//! warning, 2 a failure, 3 bad arguments, 4 the report could not be written).

#![cfg_attr(not(test), no_main)]

use erdma_bench::cli;
use erdma_bench::doctor::{self, Args, system::SystemHost};

erdma_bench::c_main!(run);

fn run() -> i32 {
    let parsed = cli::args(Some("erdma-doctor"), doctor::EXIT_USAGE)
        .and_then(|argv| cli::parse::<Args>(&argv, doctor::EXIT_USAGE, true));
    let args = match parsed {
        Ok(a) => a,
        Err(code) => return code,
    };
    let host = SystemHost::new();
    doctor::run(
        &args,
        &host,
        &mut cli::Stdout,
        &mut std::io::stderr().lock(),
    )
}
