//! alltoall: block j of rank r's input ends as block r of rank j's output.

use super::*;

fn counts(count: usize, elt: usize, n: usize) -> Counts {
    let param = per_rank_aligned(count, elt, n);
    Counts {
        send: n * param,
        recv: n * param,
        param,
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
    let seed = 33 * a.rep + a.rank as u64;
    s.input(
        target,
        0,
        a.send_count(),
        a.input(ReduceOp::Sum, 1, 0, seed, 0),
    );
    let part = a.send_count() / a.nranks;
    for j in 0..a.nranks {
        let g = a.input(ReduceOp::Sum, 1, 0, 33 * a.rep + j as u64, a.rank * part);
        s.expected(j * part * a.dtype.size(), part, g);
    }
    // nccl-tests does not support checking in-place alltoall.
    !a.in_place
}

/// `alltoall_perf`.
pub const ALLTOALL: Collective = Collective {
    name: "AlltoAll",
    kind: CollKind::AllToAll,
    op_mode: OpMode::Fixed("none"),
    root_mode: RootMode::None,
    counts,
    bus_factor: ranks_minus_one_over_n,
    alg_bytes_factor: nranks_f,
    init,
};
