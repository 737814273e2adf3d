//! reduce_scatter: rank r ends with block r of the reduction.

use super::*;

fn counts(count: usize, elt: usize, n: usize) -> Counts {
    let base = per_rank_aligned(count, elt, n);
    Counts {
        send: base * n,
        recv: base,
        param: base,
        send_inplace_offset: 0,
        recv_inplace_offset: base,
    }
}

fn init(a: &InitArgs, s: &mut dyn InitSink) -> bool {
    s.zero_recv(a.expected_bytes);
    let target = if a.in_place {
        Target::Recv
    } else {
        Target::Send
    };
    s.input(
        target,
        0,
        a.send_count(),
        a.input(a.op, a.nranks, a.rank, a.rep, 0),
    );
    s.expected_from_recv();
    let n = a.recv_count();
    s.expected(0, n, a.expected(a.op, a.nranks, a.rep, a.rank * n));
    true
}

/// `reduce_scatter_perf`.
pub const REDUCE_SCATTER: Collective = Collective {
    name: "ReduceScatter",
    kind: CollKind::ReduceScatter,
    op_mode: OpMode::Reduce,
    root_mode: RootMode::None,
    counts,
    bus_factor: ranks_minus_one_over_n,
    alg_bytes_factor: nranks_f,
    init,
};
