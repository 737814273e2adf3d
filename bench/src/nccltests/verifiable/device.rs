//! The form in which the GPU kernels of the NCCL backend take a resolved generator
//! ([`Kernel`]): a plain `#[repr(C)]` record, the `Formula` of
//! `backend/nccl/verifiable.cu`, whose field order and kind numbers must match it.
//! Everything the host resolves once per range (the formula, float avg's constant, the
//! masks) travels in it, so the device computes element bits with the same integer
//! arithmetic as [`Kernel::at`].

use super::floats::Layout;
use super::kernel::Kernel;
use crate::nccltests::types::ReduceOp;

/// `KIND_*` of verifiable.cu.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(i32)]
pub enum DeviceKind {
    /// `mix_bits(seed ^ ix) >> shift & mask`.
    IntCopy = 0,
    /// Integer reduction input.
    IntHash = 1,
    /// Random float (copies, min, max).
    RandomFloat = 2,
    /// `genInOutFloatSum`.
    FloatSum = 3,
    /// `genInOutFloatProd`.
    FloatProd = 4,
    /// `genInOutFloatPreMulSum`.
    PreMulSum = 5,
    /// The same bits everywhere.
    Const = 6,
    /// Every rank's integer input reduced in rank order.
    ReduceInt = 7,
    /// Every rank's random float, min or max.
    ReduceFloat = 8,
}

/// `FLAG_*` of verifiable.cu.
pub mod flags {
    /// An input (else the expected output).
    pub const INPUT: i32 = 1;
    /// Mantissa arithmetic in 64 bits.
    pub const W64: i32 = 2;
    /// Integer input never 0 (prod).
    pub const PROD: i32 = 4;
    /// Signed integer type.
    pub const SIGNED: i32 = 8;
    /// Float reduce: max (else min).
    pub const WANT_MAX: i32 = 16;
    /// e4m3: only the all-ones magnitude is NaN.
    pub const NAN_ALL_ONES: i32 = 32;
}

/// verifiable.cu's `Formula`, passed by value to its kernels.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(C)]
pub struct DeviceFormula {
    /// Seed.
    pub seed: u64,
    /// `Const`: the value; integer kinds: the element mask.
    pub bits: u64,
    /// A [`DeviceKind`].
    pub kind: i32,
    /// Contributions.
    pub rank_n: i32,
    /// This contribution's index.
    pub rank_me: i32,
    /// Float kinds: exponent bits.
    pub exp_bits: i32,
    /// Float kinds: mantissa bits.
    pub mant_bits: i32,
    /// `FLAG_*` bits of verifiable.cu (this module's `flags`).
    pub flags: i32,
    /// `ReduceInt`: `OP_*` (sum 0, prod 1, max 2, min 3, avg 4, premulsum 5).
    pub op: i32,
    /// Integer kinds: 64 minus the element's bits.
    pub shift: i32,
}

impl DeviceFormula {
    /// A formula of `kind` with nothing else set.
    pub(super) fn new(kind: DeviceKind, seed: u64) -> DeviceFormula {
        DeviceFormula {
            seed,
            bits: 0,
            kind: kind as i32,
            rank_n: 1,
            rank_me: 0,
            exp_bits: 0,
            mant_bits: 0,
            flags: 0,
            op: 0,
            shift: 0,
        }
    }

    /// With a float layout.
    pub(super) fn layout(mut self, l: Layout) -> DeviceFormula {
        self.exp_bits = l.exp_bits as i32;
        self.mant_bits = l.mant_bits as i32;
        self
    }

    /// With ranks.
    pub(super) fn ranks(mut self, rank_n: i32, rank_me: i32) -> DeviceFormula {
        self.rank_n = rank_n;
        self.rank_me = rank_me;
        self
    }

    /// With a flag set when `on`.
    pub(super) fn flag(mut self, f: i32, on: bool) -> DeviceFormula {
        if on {
            self.flags |= f;
        }
        self
    }
}

/// `OP_*` of verifiable.cu.
pub(super) fn device_op(op: ReduceOp) -> i32 {
    match op {
        ReduceOp::Sum => 0,
        ReduceOp::Prod => 1,
        ReduceOp::Max => 2,
        ReduceOp::Min => 3,
        ReduceOp::Avg => 4,
        ReduceOp::PreMulSum => 5,
    }
}

impl Kernel {
    /// This formula as the GPU kernels take it.
    pub fn device_formula(&self) -> DeviceFormula {
        self.formula_for_device()
    }
}
