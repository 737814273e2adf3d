//! `sendrecv_perf`: nccl-tests' sendrecv benchmark (see `erdma_bench::nccltests`).

fn main() -> std::process::ExitCode {
    erdma_bench::nccltests::main(&erdma_bench::nccltests::colls::SENDRECV)
}
