//! `devinfo`: RDMA device attributes as `ibv_devinfo` prints them, `--json`
//! for machines. Starts on hosts without rdma-core (libibverbs is loaded at
//! run time) and says in one line why there is nothing to show.
//! Exit status: see `erdma_bench::devinfo` (0 ok, 1 RDMA call failed,
//! 2 bad arguments, 3 no RDMA device, 4 libibverbs missing, 5 no such
//! device or port).

use clap::Parser;
use erdma_bench::devinfo::{self, Args};

fn main() {
    let args = match Args::try_parse() {
        Ok(a) => a,
        Err(e) => {
            let code = if e.use_stderr() {
                devinfo::EXIT_USAGE
            } else {
                devinfo::EXIT_OK
            };
            let _ = e.print();
            std::process::exit(code);
        }
    };
    let list = erdma::devices();
    let code = devinfo::run(
        &args,
        &list,
        &mut std::io::stdout().lock(),
        &mut std::io::stderr().lock(),
    );
    std::process::exit(code);
}
