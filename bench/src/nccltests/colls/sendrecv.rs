//! sendrecv: each rank sends to rank+1 and receives from rank-1.

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
    let n = a.send_count();
    s.input(
        target,
        0,
        n,
        a.input(ReduceOp::Sum, 1, 0, a.rep, a.rank * n),
    );
    let peer = (a.rank + a.nranks - 1) % a.nranks;
    let m = a.recv_count();
    s.expected(0, m, a.input(ReduceOp::Sum, 1, 0, a.rep, peer * m));
    // nccl-tests does not support checking in-place sendrecv.
    !a.in_place
}

/// `sendrecv_perf`.
pub const SENDRECV: Collective = Collective {
    name: "SendRecv",
    kind: CollKind::SendRecv,
    op_mode: OpMode::Reduce,
    root_mode: RootMode::None,
    counts,
    bus_factor: one,
    alg_bytes_factor: one,
    init,
};
