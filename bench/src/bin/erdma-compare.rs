//! `erdma-compare`: nccl-tests, erdma-bench and perftest results side by
//! side, with ratios to a baseline and an optional plot. Exit statuses:
//! see `erdma_bench::compare::cli` (0 ok, 1 a ratio under --fail-below,
//! 2 bad arguments, 3 unreadable or unrecognised input, 4 nothing in
//! common with the baseline under --fail-below, 5 plot not written).

use clap::Parser;
use erdma_bench::compare::cli::{self, Args};

fn main() {
    let args = match Args::try_parse() {
        Ok(a) => a,
        Err(e) => {
            let code = if e.use_stderr() {
                cli::EXIT_USAGE
            } else {
                cli::EXIT_OK
            };
            let _ = e.print();
            std::process::exit(code);
        }
    };
    let argv: Vec<String> = std::env::args().collect();
    let code = cli::run(
        &args,
        &argv,
        &mut std::io::stdout().lock(),
        &mut std::io::stderr().lock(),
    );
    std::process::exit(code);
}
