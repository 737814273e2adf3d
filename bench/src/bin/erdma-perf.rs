//! `erdma-perf`: perftest's tests (`ib_write_bw`, `ib_send_lat`, ...) on the
//! erdma library; see `erdma_bench::perf` and `erdma-perf --help`.

#![cfg_attr(not(test), no_main)]

erdma_bench::c_main!(erdma_bench::perf::main);
