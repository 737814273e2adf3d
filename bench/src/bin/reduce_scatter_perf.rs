//! `reduce_scatter_perf`: nccl-tests' reduce_scatter benchmark (see `erdma_bench::nccltests`).

fn main() -> std::process::ExitCode {
    erdma_bench::nccltests::main(&erdma_bench::nccltests::colls::REDUCE_SCATTER)
}
