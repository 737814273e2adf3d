//! `erdma-doctor`: checks this host or container for RDMA (eRDMA), GPU and NCCL
//! readiness, one line per check with the fix, and prints the NCCL environment
//! for the devices found. Exit status: see `erdma_bench::doctor` (0 ok, 1 a
//! warning, 2 a failure, 3 bad arguments, 4 the report could not be written).

use clap::Parser;
use erdma_bench::doctor::{self, Args, system::SystemHost};

fn main() {
    let args = match Args::try_parse() {
        Ok(a) => a,
        Err(e) => {
            let code = if e.use_stderr() {
                doctor::EXIT_USAGE
            } else {
                doctor::EXIT_OK
            };
            let _ = e.print();
            std::process::exit(code);
        }
    };
    let host = SystemHost::new();
    let code = doctor::run(
        &args,
        &host,
        &mut std::io::stdout().lock(),
        &mut std::io::stderr().lock(),
    );
    std::process::exit(code);
}
