// A caller-chosen library is called with nccl.h's prototypes once it exports
// ncclGetVersion, which no check can confirm (issue 34 hole 7): loading NCCL
// from a path is `unsafe`; Nccl::load (the sonames, or the environment) is not.
use erdma::nccl::Nccl;

fn from_path() {
    let _ = Nccl::load_from("/tmp/libnotnccl.so");
}

fn default_search() {
    let _ = Nccl::load();
}

fn main() {}
