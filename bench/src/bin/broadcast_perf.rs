//! `broadcast_perf`: nccl-tests' broadcast benchmark (see `erdma_bench::nccltests`).

#![cfg_attr(not(test), no_main)]

erdma_bench::c_main!(run);

fn run() -> i32 {
    erdma_bench::nccltests::main(&erdma_bench::nccltests::colls::BROADCAST)
}
