//! `erdma-compare`: nccl-tests, erdma-bench and perftest results side by
//! side, with ratios to a baseline and an optional plot. Exit statuses:
//! see `erdma_bench::compare::cli` (0 ok, 1 a ratio under --fail-below,
//! 2 bad arguments, 3 unreadable or unrecognised input, 4 nothing in
//! common with the baseline under --fail-below, 5 plot not written).

#![cfg_attr(not(test), no_main)]

use erdma_bench::cli as common;
use erdma_bench::compare::cli::{self, Args};

erdma_bench::c_main!(run);

fn run() -> i32 {
    let argv = match common::args(Some("erdma-compare"), cli::EXIT_USAGE) {
        Ok(a) => a,
        Err(code) => return code,
    };
    let args = match common::parse::<Args>(&argv, cli::EXIT_USAGE, true) {
        Ok(a) => a,
        Err(code) => return code,
    };
    cli::run(
        &args,
        &argv,
        &mut common::Stdout,
        &mut std::io::stderr().lock(),
    )
}
