//! `all_reduce_perf`: nccl-tests' all_reduce benchmark (see `erdma_bench::nccltests`).

fn main() -> std::process::ExitCode {
    erdma_bench::nccltests::main(&erdma_bench::nccltests::colls::ALL_REDUCE)
}
