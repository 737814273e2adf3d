//! scatter: rank r ends with block r of the root's input.

use super::*;

fn counts(count: usize, elt: usize, n: usize) -> Counts {
    let recv = per_rank_aligned(count, elt, n);
    Counts {
        send: recv * n,
        recv,
        param: recv,
        send_inplace_offset: 0,
        recv_inplace_offset: recv,
    }
}

fn init(a: &InitArgs, s: &mut dyn InitSink) -> bool {
    s.zero_recv(a.expected_bytes);
    let target = if a.in_place {
        Target::Recv
    } else {
        Target::Send
    };
    if a.rank as i32 == a.root {
        s.input(
            target,
            0,
            a.send_count(),
            a.input(ReduceOp::Sum, 1, 0, a.rep, 0),
        );
    }
    let n = a.recv_count();
    s.expected(0, n, a.input(ReduceOp::Sum, 1, 0, a.rep, a.rank * n));
    true
}

/// `scatter_perf`.
pub const SCATTER: Collective = Collective {
    name: "Scatter",
    kind: CollKind::Scatter,
    op_mode: OpMode::Fixed("none"),
    root_mode: RootMode::Sweep,
    counts,
    bus_factor: ranks_minus_one_over_n,
    alg_bytes_factor: nranks_f,
    init,
};
