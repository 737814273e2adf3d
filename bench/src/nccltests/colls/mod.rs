//! Per-collective definitions, one small file each, as nccl-tests has one
//! `.cu` per collective: element counts and in-place offsets, the bandwidth
//! formula, how inputs and expected results are initialized, and which
//! types, ops and roots a run sweeps.

mod all_gather;
mod all_reduce;
mod alltoall;
mod broadcast;
mod gather;
mod hypercube;
mod reduce;
mod reduce_scatter;
mod scatter;
mod sendrecv;

pub use all_gather::ALL_GATHER;
pub use all_reduce::ALL_REDUCE;
pub use alltoall::ALLTOALL;
pub use broadcast::BROADCAST;
pub use gather::GATHER;
pub use hypercube::HYPERCUBE;
pub use reduce::REDUCE;
pub use reduce_scatter::REDUCE_SCATTER;
pub use scatter::SCATTER;
pub use sendrecv::SENDRECV;

use super::types::{DataType, ReduceOp};
use super::verifiable::Gen;

/// Which collective a backend must run.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum CollKind {
    /// `ncclAllReduce`.
    AllReduce,
    /// `ncclAllGather`.
    AllGather,
    /// `ncclReduceScatter`.
    ReduceScatter,
    /// `ncclBroadcast`.
    Broadcast,
    /// `ncclReduce`.
    Reduce,
    /// `ncclAlltoAll` (or grouped send/recv before NCCL 2.28).
    AllToAll,
    /// `ncclGather`.
    Gather,
    /// `ncclScatter`.
    Scatter,
    /// Ring send to rank+1, receive from rank-1.
    SendRecv,
    /// Hypercube all-gather of log2(n) grouped send/recv steps.
    HyperCube,
}

/// Element counts of one size (`getCollByteCount`), in elements.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct Counts {
    /// Elements each rank sends.
    pub send: usize,
    /// Elements each rank receives (and checks).
    pub recv: usize,
    /// The count passed to the collective call.
    pub param: usize,
    /// In-place: send buffer offset per rank (times rank).
    pub send_inplace_offset: usize,
    /// In-place: receive buffer offset per rank (times rank).
    pub recv_inplace_offset: usize,
}

/// How a run sweeps ops.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OpMode {
    /// Reductions: every selected op, printed by name.
    Reduce,
    /// No reduction; the op column prints this text (op is Sum internally).
    Fixed(&'static str),
}

/// How a run sweeps roots.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RootMode {
    /// Not rooted: the root column prints -1.
    None,
    /// Rooted: `-r R` runs root R, `-r -1` every rank in turn.
    Sweep,
}

/// Which buffer an initialization writes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Target {
    /// The send buffer.
    Send,
    /// The receive buffer.
    Recv,
}

/// The parameters of one data initialization (`initData`).
#[derive(Clone, Copy, Debug)]
pub struct InitArgs {
    /// Global rank.
    pub rank: usize,
    /// Number of ranks.
    pub nranks: usize,
    /// Element type.
    pub dtype: DataType,
    /// Reduction op.
    pub op: ReduceOp,
    /// Root (rooted collectives).
    pub root: i32,
    /// Repetition number (the seed).
    pub rep: u64,
    /// In-place run.
    pub in_place: bool,
    /// Bytes each rank sends at this size.
    pub send_bytes: usize,
    /// Bytes each rank receives at this size.
    pub expected_bytes: usize,
}

impl InitArgs {
    /// Elements sent.
    pub fn send_count(&self) -> usize {
        self.send_bytes / self.dtype.size()
    }

    /// Elements received.
    pub fn recv_count(&self) -> usize {
        self.expected_bytes / self.dtype.size()
    }

    /// Generated input for rank `rank_me` of a reduction over `rank_n`.
    pub fn input(&self, op: ReduceOp, rank_n: usize, rank_me: usize, seed: u64, ix0: usize) -> Gen {
        Gen::Input {
            op,
            rank_n: rank_n as i32,
            rank_me: rank_me as i32,
            seed,
            ix0: ix0 as i64,
        }
    }

    /// Expected reduction result over `rank_n`.
    pub fn expected(&self, op: ReduceOp, rank_n: usize, seed: u64, ix0: usize) -> Gen {
        Gen::Expected {
            op,
            rank_n: rank_n as i32,
            seed,
            ix0: ix0 as i64,
        }
    }
}

/// Receives the steps of a data initialization, in nccl-tests' order.
pub trait InitSink {
    /// `cudaMemset(recvbuff, 0, bytes)`.
    fn zero_recv(&mut self, bytes: usize);
    /// Generate `count` elements into `target` at `byte_off`.
    fn input(&mut self, target: Target, byte_off: usize, count: usize, g: Gen);
    /// `cudaMemcpy(expected, recvbuff, expected_bytes)`.
    fn expected_from_recv(&mut self);
    /// Generate `count` expected elements at `byte_off` of the expected buffer.
    fn expected(&mut self, byte_off: usize, count: usize, g: Gen);
}

/// One collective's definition.
pub struct Collective {
    /// nccl-tests' test name (`"AllReduce"`).
    pub name: &'static str,
    /// The call a backend makes.
    pub kind: CollKind,
    /// Ops swept.
    pub op_mode: OpMode,
    /// Roots swept.
    pub root_mode: RootMode,
    /// Element counts for `count` elements of `elt_size` bytes over `nranks`.
    pub counts: fn(count: usize, elt_size: usize, nranks: usize) -> Counts,
    /// Bus bandwidth factor over the algorithm bandwidth.
    pub bus_factor: fn(nranks: usize) -> f64,
    /// Bytes per second the algorithm bandwidth counts: param count x type
    /// size x this multiplier.
    pub alg_bytes_factor: fn(nranks: usize) -> f64,
    /// Writes inputs and expected data. Returns whether errors are reported
    /// (nccl-tests does not check in-place alltoall and sendrecv).
    pub init: fn(&InitArgs, &mut dyn InitSink) -> bool,
}

impl Collective {
    /// `getBw`: (algbw, busbw) in GB/s for `count` elements in `sec` seconds.
    pub fn bandwidth(&self, count: usize, type_size: usize, sec: f64, nranks: usize) -> (f64, f64) {
        let base = (count * type_size) as f64 * (self.alg_bytes_factor)(nranks) / 1.0e9 / sec;
        (base, base * (self.bus_factor)(nranks))
    }

    /// `getBuffSize`: send and receive buffer bytes for `max_bytes`.
    pub fn buffer_sizes(&self, max_bytes: usize, nranks: usize) -> (usize, usize) {
        let c = (self.counts)(max_bytes, 1, nranks);
        (c.send, c.recv)
    }
}

/// `(count/nranks)` rounded down to a multiple of 16 bytes.
pub(crate) fn per_rank_aligned(count: usize, elt_size: usize, nranks: usize) -> usize {
    let align = (16 / elt_size.max(1)).max(1);
    (count / nranks.max(1)) & !(align - 1)
}

fn two_ranks_minus_one_over_n(n: usize) -> f64 {
    (2 * (n as i64 - 1)) as f64 / n as f64
}

fn ranks_minus_one_over_n(n: usize) -> f64 {
    (n as i64 - 1) as f64 / n as f64
}

fn one(_: usize) -> f64 {
    1.0
}

fn nranks_f(n: usize) -> f64 {
    n as f64
}

/// Every collective, for tests and tools.
pub const ALL: [&Collective; 10] = [
    &ALL_REDUCE,
    &ALL_GATHER,
    &REDUCE_SCATTER,
    &BROADCAST,
    &REDUCE,
    &ALLTOALL,
    &GATHER,
    &SCATTER,
    &SENDRECV,
    &HYPERCUBE,
];

#[cfg(test)]
mod tests;
