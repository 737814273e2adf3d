//! `erdma-stat`: RDMA traffic from the port counters: totals, live rates
//! (`-l`), or what each device moved while a command ran (`--during -- CMD`).
//! Exit status: see `erdma_bench::stat` (0 ok, 1 counters unreadable, 2 bad
//! arguments, 3 no RDMA device, 4 libibverbs missing, 5 no such device or
//! port; with --during the command's status, 125/126/127 as `env` uses them).

#![cfg_attr(not(test), no_main)]

use erdma_bench::cli;
use erdma_bench::stat::{self, Args};

erdma_bench::c_main!(run);

fn run() -> i32 {
    let argv = match cli::args(Some("erdma-stat"), stat::EXIT_USAGE) {
        Ok(a) => a,
        Err(code) => return code,
    };
    // With --during a bad command line is env's 125, not 2.
    let usage = if argv.iter().any(|a| a == "--during") {
        stat::EXIT_DURING_FAILED
    } else {
        stat::EXIT_USAGE
    };
    let args = match cli::parse::<Args>(&argv, usage, true) {
        Ok(a) => a,
        Err(code) => return code,
    };
    let list = erdma::devices();
    stat::run(
        &args,
        &list,
        &mut cli::Stdout,
        &mut std::io::stderr().lock(),
    )
}
