//! `devinfo`: RDMA device attributes as `ibv_devinfo` prints them, `--json`
//! for machines. Starts on hosts without rdma-core (libibverbs is loaded at
//! run time) and says in one line why there is nothing to show.
//! Exit status: see `erdma_bench::devinfo` (0 ok, 1 RDMA call failed,
//! 2 bad arguments, 3 no RDMA device, 4 libibverbs missing, 5 no such
//! device or port).

#![cfg_attr(not(test), no_main)]

use erdma_bench::cli;
use erdma_bench::devinfo::{self, Args};

erdma_bench::c_main!(run);

fn run() -> i32 {
    let parsed = cli::args(Some("devinfo"), devinfo::EXIT_USAGE)
        .and_then(|argv| cli::parse::<Args>(&argv, devinfo::EXIT_USAGE, true));
    let args = match parsed {
        Ok(a) => a,
        Err(code) => return code,
    };
    let list = erdma::devices();
    devinfo::run(
        &args,
        &list,
        &mut cli::Stdout,
        &mut std::io::stderr().lock(),
    )
}
