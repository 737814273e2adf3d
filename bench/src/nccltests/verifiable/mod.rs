//! Verifiable data: inputs chosen so that every reduction's result is known
//! exactly, for every data type and op (a bit-exact port of nccl-tests'
//! `verifiable.cu` generator, running on the host so that the same code
//! serves host and GPU backends; a GPU backend uploads what it generates).
//!
//! Elements are generated from (seed, element index, rank), so any
//! sub-range can be produced independently: large buffers are filled and
//! checked in chunks, on several threads, without holding whole copies in
//! memory. [`Kernel`] resolves a generator once per range so that its
//! per-element loop is plain integer arithmetic.

mod device;
mod floats;
mod generate;
mod kernel;
mod reduce;
mod rng;

pub use device::{DeviceFormula, DeviceKind};
pub use floats::{from_f64, to_f64};
pub use generate::{GenOp, avg_pre_op, combine, gen_input, gen_output, post_op, pre_op};
pub use kernel::Kernel;

use crate::nccltests::types::{DataType, ReduceOp};

/// What to generate into a range of elements.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Gen {
    /// `ncclVerifiablePrepareInput(op, rank_n, rank_me, seed, ix0)`.
    Input {
        /// The reduction (`Sum` for copy collectives with rank_n = 1).
        op: ReduceOp,
        /// Contributions into the reduction.
        rank_n: i32,
        /// This contribution's index.
        rank_me: i32,
        /// Seed.
        seed: u64,
        /// Index of the first element.
        ix0: i64,
    },
    /// `ncclVerifiablePrepareExpected(op, rank_n, seed, ix0)`.
    Expected {
        /// The reduction.
        op: ReduceOp,
        /// Contributions into the reduction.
        rank_n: i32,
        /// Seed.
        seed: u64,
        /// Index of the first element.
        ix0: i64,
    },
}

impl Gen {
    /// The formula for elements of `dt`, resolved once (index 0 of the
    /// range is the kernel's index [`Gen::ix0`]).
    pub fn kernel(&self, dt: DataType) -> Kernel {
        match *self {
            Gen::Input {
                op,
                rank_n,
                rank_me,
                seed,
                ..
            } => Kernel::input(dt, GenOp::new(op, rank_n), rank_n, rank_me, seed),
            Gen::Expected {
                op, rank_n, seed, ..
            } => Kernel::expected(dt, GenOp::new(op, rank_n), rank_n, seed),
        }
    }

    /// The generator index of the range's first element.
    pub fn ix0(&self) -> i64 {
        match *self {
            Gen::Input { ix0, .. } | Gen::Expected { ix0, .. } => ix0,
        }
    }

    /// The element at position `i` of the range, as little-endian bits.
    pub fn element(&self, dt: DataType, i: usize) -> u64 {
        self.kernel(dt).at(self.ix0() + i as i64)
    }

    /// Fills `out` (a whole number of elements) with elements `first..`.
    pub fn fill(&self, dt: DataType, first: usize, out: &mut [u8]) {
        self.kernel(dt).fill(self.ix0() + first as i64, out);
    }
}

/// The verification tolerance in units in the last place: 2 for float avg
/// (NCCL may pre-multiply in a different precision), else exact.
pub fn tolerance(dt: DataType, op: ReduceOp) -> u64 {
    if dt.is_float() && op == ReduceOp::Avg {
        2
    } else {
        0
    }
}

/// Counts elements whose bits differ by more than `tol` (compared as
/// unsigned integers of the element width, as verifiable.cu does).
pub fn count_wrong(dt: DataType, tol: u64, got: &[u8], want: &[u8]) -> u64 {
    let ws = dt.size();
    got.chunks_exact(ws)
        .zip(want.chunks_exact(ws))
        .filter(|(a, b)| {
            let mut x = [0u8; 8];
            let mut y = [0u8; 8];
            x[..ws].copy_from_slice(a);
            y[..ws].copy_from_slice(b);
            u64::from_le_bytes(x).abs_diff(u64::from_le_bytes(y)) > tol
        })
        .count() as u64
}

#[cfg(test)]
mod tests;
