//! gather: the root ends with every rank's input, in rank order.

use super::*;

fn counts(count: usize, elt: usize, n: usize) -> Counts {
    let send = per_rank_aligned(count, elt, n);
    Counts {
        send,
        recv: send * n,
        param: send,
        send_inplace_offset: send,
        recv_inplace_offset: 0,
    }
}

fn init(a: &InitArgs, s: &mut dyn InitSink) -> bool {
    s.zero_recv(a.expected_bytes);
    let (target, off) = if a.in_place {
        (Target::Recv, a.rank * a.send_bytes)
    } else {
        (Target::Send, 0)
    };
    let n = a.send_count();
    s.input(
        target,
        off,
        n,
        a.input(ReduceOp::Sum, 1, 0, a.rep, a.rank * n),
    );
    s.expected_from_recv();
    if a.rank as i32 == a.root {
        s.expected(0, a.nranks * n, a.input(ReduceOp::Sum, 1, 0, a.rep, 0));
    }
    true
}

/// `gather_perf`.
pub const GATHER: Collective = Collective {
    name: "Gather",
    kind: CollKind::Gather,
    op_mode: OpMode::Fixed("none"),
    root_mode: RootMode::Sweep,
    counts,
    bus_factor: ranks_minus_one_over_n,
    alg_bytes_factor: nranks_f,
    init,
};
