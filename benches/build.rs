//! Compiles the C reference loops (c/loops.c) the data-path bench compares
//! the safe Rust API with. They use only verbs.h's inline functions, so the
//! result needs the rdma-core headers (as erdma-sys does) but never links
//! libibverbs.
fn main() {
    println!("cargo:rerun-if-changed=c/loops.c");
    cc::Build::new()
        .file("c/loops.c")
        .opt_level(2)
        .warnings(true)
        .compile("erdma_c_loops");
}
