//! hypercube: an all-gather done as log2(n) pairwise exchanges (power-of-two
//! rank counts only).

use super::*;

fn counts(count: usize, elt: usize, n: usize) -> Counts {
    let base = per_rank_aligned(count, elt, n);
    Counts {
        send: base,
        recv: base * n,
        param: base,
        send_inplace_offset: base,
        recv_inplace_offset: 0,
    }
}

fn ranks_minus_one(n: usize) -> f64 {
    (n as i64 - 1) as f64
}

/// `hypercube_perf`.
pub const HYPERCUBE: Collective = Collective {
    name: "HyperCube",
    kind: CollKind::HyperCube,
    op_mode: OpMode::Fixed(""),
    root_mode: RootMode::None,
    counts,
    bus_factor: one,
    alg_bytes_factor: ranks_minus_one,
    init: super::all_gather::init_gathered,
};
