//! all_gather: every rank ends with all ranks' inputs, in rank order.

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

pub(super) fn init_gathered(a: &InitArgs, s: &mut dyn InitSink) -> bool {
    s.zero_recv(a.expected_bytes);
    let (target, off) = if a.in_place {
        (Target::Recv, a.rank * a.send_bytes)
    } else {
        (Target::Send, 0)
    };
    s.input(
        target,
        off,
        a.send_count(),
        a.input(ReduceOp::Sum, 1, 0, 33 * a.rep + a.rank as u64, 0),
    );
    for j in 0..a.nranks {
        let seed = 33 * a.rep + j as u64;
        s.expected(
            a.send_bytes * j,
            a.send_count(),
            a.input(ReduceOp::Sum, 1, 0, seed, 0),
        );
    }
    true
}

/// `all_gather_perf`.
pub const ALL_GATHER: Collective = Collective {
    name: "AllGather",
    kind: CollKind::AllGather,
    op_mode: OpMode::Fixed("none"),
    root_mode: RootMode::None,
    counts,
    bus_factor: ranks_minus_one_over_n,
    alg_bytes_factor: nranks_f,
    init: init_gathered,
};
