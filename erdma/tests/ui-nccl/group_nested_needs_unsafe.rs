// NCCL launches a nested group's operations only at the outermost group's end
// (issue 34 hole 2): Group::start refuses to nest at run time, and the group
// that may nest, for raw operations, is `unsafe` to open.
use erdma::nccl::{Group, Nccl};

fn nested(nccl: &'static Nccl) {
    let _ = Group::start_nested(nccl);
}

fn outermost(nccl: &'static Nccl) {
    let _ = Group::start(nccl);
}

fn main() {}
