//! `all_gather_perf`: nccl-tests' all_gather benchmark (see `erdma_bench::nccltests`).

fn main() -> std::process::ExitCode {
    erdma_bench::nccltests::main(&erdma_bench::nccltests::colls::ALL_GATHER)
}
