use super::*;

#[test]
fn bandwidth_formulas() {
    // 1 GB in 1 s over 8 ranks, 4-byte elements.
    let count = 250_000_000;
    let bw = |c: &Collective| c.bandwidth(count, 4, 1.0, 8);
    assert_eq!(bw(&ALL_REDUCE), (1.0, 1.75));
    assert_eq!(bw(&ALL_GATHER), (8.0, 7.0));
    assert_eq!(bw(&REDUCE_SCATTER), (8.0, 7.0));
    assert_eq!(bw(&ALLTOALL), (8.0, 7.0));
    assert_eq!(bw(&GATHER), (8.0, 7.0));
    assert_eq!(bw(&SCATTER), (8.0, 7.0));
    assert_eq!(bw(&BROADCAST), (1.0, 1.0));
    assert_eq!(bw(&REDUCE), (1.0, 1.0));
    assert_eq!(bw(&SENDRECV), (1.0, 1.0));
    assert_eq!(bw(&HYPERCUBE), (7.0, 7.0));
    // One rank: no bus traffic for all_reduce (the H200 sample's busbw 0.00).
    assert_eq!(ALL_REDUCE.bandwidth(268435456, 4, 505.0912e-6, 1).1, 0.0);
}

#[test]
fn h200_sample_algbw() {
    let (alg, _) = ALL_REDUCE.bandwidth(268435456, 4, 505.0912e-6, 1);
    assert_eq!(crate::nccltests::cfmt::lf(alg), "2125.837520");
}

#[test]
fn counts_round_to_16_bytes_per_rank() {
    let c = (ALL_GATHER.counts)(1000, 4, 3);
    assert_eq!(
        (c.send, c.recv, c.param, c.send_inplace_offset),
        (332, 996, 332, 332)
    );
    let c = (REDUCE_SCATTER.counts)(1000, 8, 3);
    assert_eq!((c.send, c.recv, c.recv_inplace_offset), (996, 332, 332));
    let c = (ALLTOALL.counts)(1 << 20, 1, 4);
    assert_eq!((c.send, c.recv, c.param), (1 << 20, 1 << 20, 1 << 18));
    let c = (ALL_REDUCE.counts)(2, 4, 8);
    assert_eq!((c.send, c.param), (2, 2));
    assert_eq!(ALL_GATHER.buffer_sizes(1 << 20, 3), (349520, 1048560));
}

struct Recorder(Vec<String>);

impl InitSink for Recorder {
    fn zero_recv(&mut self, bytes: usize) {
        self.0.push(format!("zero {bytes}"));
    }
    fn input(&mut self, t: Target, off: usize, n: usize, g: Gen) {
        self.0.push(format!("in {t:?} {off} {n} {g:?}"));
    }
    fn expected_from_recv(&mut self) {
        self.0.push("copy".into());
    }
    fn expected(&mut self, off: usize, n: usize, g: Gen) {
        self.0.push(format!("exp {off} {n} {g:?}"));
    }
}

fn args(rank: usize, in_place: bool) -> InitArgs {
    InitArgs {
        rank,
        nranks: 4,
        dtype: DataType::Float32,
        op: ReduceOp::Sum,
        root: 1,
        rep: 2,
        in_place,
        send_bytes: 64,
        expected_bytes: 256,
    }
}

#[test]
fn init_steps_follow_nccl_tests() {
    let mut r = Recorder(vec![]);
    assert!((ALL_GATHER.init)(&args(3, true), &mut r));
    assert_eq!(r.0[0], "zero 256");
    assert!(r.0[1].starts_with("in Recv 192 16 Input { op: Sum, rank_n: 1, rank_me: 0, seed: 69,"));
    assert_eq!(r.0.len(), 6);
    let mut r = Recorder(vec![]);
    assert!(
        !(ALLTOALL.init)(&args(0, true), &mut r),
        "in-place alltoall is not checked"
    );
    let mut r = Recorder(vec![]);
    (REDUCE.init)(&args(0, false), &mut r);
    assert_eq!(
        r.0.len(),
        3,
        "non-root reduce expects its untouched receive buffer"
    );
    let mut r = Recorder(vec![]);
    (BROADCAST.init)(&args(0, false), &mut r);
    assert_eq!(r.0.len(), 2, "only the root writes input");
}
