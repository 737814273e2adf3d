//! broadcast: every rank ends with the root's input.

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
    if a.rank as i32 == a.root {
        s.input(
            target,
            0,
            a.send_count(),
            a.input(ReduceOp::Sum, 1, 0, a.rep, 0),
        );
    }
    s.expected(0, a.recv_count(), a.input(ReduceOp::Sum, 1, 0, a.rep, 0));
    true
}

/// `broadcast_perf`.
pub const BROADCAST: Collective = Collective {
    name: "Broadcast",
    kind: CollKind::Broadcast,
    op_mode: OpMode::Fixed("none"),
    root_mode: RootMode::Sweep,
    counts,
    bus_factor: one,
    alg_bytes_factor: one,
    init,
};
