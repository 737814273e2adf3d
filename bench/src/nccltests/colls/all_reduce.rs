//! all_reduce: every rank ends with the reduction of all inputs.

use super::*;

fn counts(count: usize, _elt: usize, _n: usize) -> Counts {
    Counts {
        send: count,
        recv: count,
        param: count,
        send_inplace_offset: 0,
        recv_inplace_offset: 0,
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
    s.expected(0, a.recv_count(), a.expected(a.op, a.nranks, a.rep, 0));
    true
}

/// `all_reduce_perf`.
pub const ALL_REDUCE: Collective = Collective {
    name: "AllReduce",
    kind: CollKind::AllReduce,
    op_mode: OpMode::Reduce,
    root_mode: RootMode::None,
    counts,
    bus_factor: two_ranks_minus_one_over_n,
    alg_bytes_factor: one,
    init,
};
