//! reduce: the root ends with the reduction; other ranks' outputs are untouched.

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
    s.expected_from_recv();
    if a.rank as i32 == a.root {
        s.expected(0, a.recv_count(), a.expected(a.op, a.nranks, a.rep, 0));
    }
    true
}

/// `reduce_perf`.
pub const REDUCE: Collective = Collective {
    name: "Reduce",
    kind: CollKind::Reduce,
    op_mode: OpMode::Reduce,
    root_mode: RootMode::Sweep,
    counts,
    bus_factor: one,
    alg_bytes_factor: one,
    init,
};
