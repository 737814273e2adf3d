//! `erdma-perf`: perftest's tests (`ib_write_bw`, `ib_send_lat`, ...) on the
//! erdma library; see `erdma_bench::perf` and `erdma-perf --help`.

fn main() -> std::process::ExitCode {
    erdma_bench::perf::main()
}
