//! The generic `genOutput` (every rank's input reduced in rank order), for
//! the cases that use it: integers with every op, floats with min and max.
//! The op, signedness and float layout are resolved once per range
//! ([`Reduce::new`]) so the per-element loop over ranks does no dispatch;
//! results are those of `pre_op`/`combine`/`post_op` (the digest test in
//! `tests.rs` pins them).

use std::hint::select_unpredictable;

use super::floats::FloatOrder;
use super::generate::{int_hash, int_mask, random_float};
use crate::nccltests::types::{DataType, ReduceOp};

/// An integer type's element width and signedness.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct IntType {
    mask: u64,
    /// 64 minus the element's bits: moves the sign bit to bit 63.
    shift: u32,
    signed: bool,
}

impl IntType {
    fn new(dt: DataType) -> IntType {
        IntType {
            mask: int_mask(dt),
            shift: 64 - 8 * dt.size() as u32,
            signed: matches!(dt, DataType::Int8 | DataType::Int32 | DataType::Int64),
        }
    }

    /// The element mask.
    pub(super) fn mask(self) -> u64 {
        self.mask
    }

    /// 64 minus the element's bits.
    pub(super) fn shift(self) -> u32 {
        self.shift
    }

    /// Whether the type is signed.
    pub(super) fn signed(self) -> bool {
        self.signed
    }

    /// An unsigned key ordered as the element's (signed or unsigned) value.
    #[inline]
    fn key(self, x: u64) -> u64 {
        let flip = if self.signed { 1 << 63 } else { 0 };
        (x << self.shift) ^ flip
    }

    /// Integer avg's post-operation: the sum divided by the rank count,
    /// rounding toward zero.
    #[inline]
    fn div(self, x: u64, n: i32) -> u64 {
        if n <= 0 {
            x
        } else if self.signed {
            let v = ((x << self.shift) as i64) >> self.shift;
            (v / n as i64) as u64 & self.mask
        } else {
            x / n as u64
        }
    }
}

/// A resolved generic expected-value formula.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Reduce {
    /// Integers: hashed inputs combined with `op`.
    Int {
        /// The reduction.
        op: ReduceOp,
        /// Element width and signedness.
        t: IntType,
        /// Contributions.
        rank_n: i32,
        /// Seed.
        seed: u64,
    },
    /// Floats, min or max: random floats compared by value.
    Float {
        /// Max (else min).
        want_max: bool,
        /// The format and how its bits order.
        order: FloatOrder,
        /// Contributions.
        rank_n: i32,
        /// Seed.
        seed: u64,
    },
}

impl Reduce {
    /// The formula for `op` over `rank_n` ranks of `dt`. Float ops other
    /// than min and max have their own generators and never get here.
    pub fn new(dt: DataType, op: ReduceOp, rank_n: i32, seed: u64) -> Reduce {
        debug_assert!(!dt.is_float() || matches!(op, ReduceOp::Max | ReduceOp::Min));
        match FloatOrder::new(dt) {
            Some(order) => Reduce::Float {
                want_max: op == ReduceOp::Max,
                order,
                rank_n,
                seed,
            },
            None => Reduce::Int {
                op,
                t: IntType::new(dt),
                rank_n,
                seed,
            },
        }
    }

    /// Applies `run` to a closure computing the element at an index; one
    /// closure per op, so each gets its own specialized loop.
    #[inline]
    pub fn with<R>(self, run: impl ElementLoop<R>) -> R {
        match self {
            Reduce::Float {
                want_max,
                order,
                rank_n,
                seed,
            } => run.run(move |ix| {
                let l = order.layout();
                let input = |r| random_float(l, r, seed, ix);
                (1..rank_n).fold(input(0), |a, r| order.min_max(a, input(r), want_max))
            }),
            Reduce::Int {
                op,
                t,
                rank_n,
                seed,
            } => {
                let m = t.mask;
                let p = (op == ReduceOp::Prod, rank_n, seed, m);
                match op {
                    ReduceOp::Sum => {
                        run.run(move |ix| fold(p, ix, |a, x, _| a.wrapping_add(x) & m))
                    }
                    ReduceOp::Avg => run
                        .run(move |ix| t.div(fold(p, ix, |a, x, _| a.wrapping_add(x) & m), rank_n)),
                    // Odd ranks' inputs are doubled first (premul_scalar).
                    ReduceOp::PreMulSum => run.run(move |ix| {
                        fold(p, ix, |a, x, r| {
                            a.wrapping_add(x.wrapping_mul(1 + (r & 1) as u64) & m) & m
                        })
                    }),
                    ReduceOp::Prod => {
                        run.run(move |ix| fold(p, ix, |a, x, _| a.wrapping_mul(x) & m))
                    }
                    ReduceOp::Max => run.run(move |ix| {
                        fold(p, ix, |a, x, _| {
                            select_unpredictable(t.key(a) < t.key(x), x, a)
                        })
                    }),
                    ReduceOp::Min => run.run(move |ix| {
                        fold(p, ix, |a, x, _| {
                            select_unpredictable(t.key(a) < t.key(x), a, x)
                        })
                    }),
                }
            }
        }
    }
}

/// Folds every rank's integer input at `ix` with `f(acc, input, rank)`;
/// `p` is (prod, rank_n, seed, mask).
#[inline(always)]
fn fold(p: (bool, i32, u64, u64), ix: i64, f: impl Fn(u64, u64, i32) -> u64) -> u64 {
    let (prod, rank_n, seed, m) = p;
    let input = |r| int_hash(m, prod, r, seed, ix);
    (1..rank_n).fold(input(0), |a, r| f(a, input(r), r))
}

/// Something done with an element formula `f(index) -> bits`.
pub trait ElementLoop<R> {
    /// Runs with the formula.
    fn run<F: Fn(i64) -> u64>(self, f: F) -> R;
}
