// CUDA requires the calls on one graph object to be serialised: a Graph or
// GraphExec is Send, not Sync, so `&self` calls cannot run on two threads.
use erdma::cuda::{Graph, GraphExec};

fn share<T: Sync>(_: &T) {}

fn graph(g: &Graph) {
    share(g);
}

fn exec(e: &GraphExec) {
    share(e);
}

fn main() {}
