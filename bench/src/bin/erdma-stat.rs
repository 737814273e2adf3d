//! `erdma-stat`: RDMA traffic from the port counters: totals, live rates
//! (`-l`), or what each device moved while a command ran (`--during -- CMD`).
//! Exit status: see `erdma_bench::stat` (0 ok, 1 counters unreadable, 2 bad
//! arguments, 3 no RDMA device, 4 libibverbs missing, 5 no such device or
//! port; with --during the command's status, 125/126/127 as `env` uses them).

use clap::Parser;
use erdma_bench::stat::{self, Args};

fn main() {
    let args = match Args::try_parse() {
        Ok(a) => a,
        Err(e) => {
            let during = std::env::args().any(|a| a == "--during");
            let code = match (e.use_stderr(), during) {
                (false, _) => stat::EXIT_OK,
                (true, true) => stat::EXIT_DURING_FAILED,
                (true, false) => stat::EXIT_USAGE,
            };
            let _ = e.print();
            std::process::exit(code);
        }
    };
    let list = erdma::devices();
    let code = stat::run(
        &args,
        &list,
        &mut std::io::stdout().lock(),
        &mut std::io::stderr().lock(),
    );
    std::process::exit(code);
}
