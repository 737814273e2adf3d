//! Generators resolved once per range. Choosing the formula (type, op,
//! rank count) and computing what does not depend on the element index
//! (float avg's constant, the width masks) is done once by
//! [`Kernel::input`]/[`Kernel::expected`]; the per-element loops of
//! [`Kernel::fill`] and [`Kernel::count_wrong`] are then specialized for
//! one formula and one element width, with no dispatch, allocation or
//! float conversion left in them. [`Kernel::at`] evaluates the same
//! formulas one element at a time, so the scalar API (`gen_input`,
//! `gen_output`) and the bulk paths cannot disagree.

use super::device::{DeviceFormula, DeviceKind, device_op, flags};
use super::floats::{self, Layout};
use super::generate::{
    GenOp, avg_input, avg_output, float_premulsum, float_prod, float_sum, int_hash, int_mask,
    random_float, sum_width,
};
use super::reduce::{ElementLoop, Reduce};
use super::rng::{Width, mix_bits};
use crate::nccltests::types::{DataType, ReduceOp};

/// One element formula with its index-independent parameters resolved.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    /// Copy collectives on integers: high bits of `mix_bits(seed ^ index)`.
    IntCopy { seed: u64, shift: u32, mask: u64 },
    /// Integer reduction input (never zero for prod).
    IntHash {
        seed: u64,
        rank_me: i32,
        mask: u64,
        prod: bool,
    },
    /// Random float (copies, min, max).
    RandomFloat { l: Layout, rank_me: i32, seed: u64 },
    /// `genInOutFloatSum`.
    FloatSum {
        l: Layout,
        w: Width,
        input: bool,
        rank_n: i32,
        rank_me: i32,
        seed: u64,
    },
    /// `genInOutFloatProd`.
    FloatProd {
        l: Layout,
        input: bool,
        rank_n: i32,
        rank_me: i32,
        seed: u64,
    },
    /// `genInOutFloatPreMulSum`.
    PreMulSum {
        l: Layout,
        input: bool,
        rank_n: i32,
        rank_me: i32,
        seed: u64,
    },
    /// The same bits everywhere (float avg, zeros).
    Const(u64),
    /// The generic `genOutput`: every rank's input reduced in rank order.
    Reduce(Reduce),
}

/// A resolved generator for elements of one type: element bits as a
/// function of the element index.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Kernel {
    ws: usize,
    kind: Kind,
}

impl Kernel {
    /// `ncclVerifiablePrepareInput`'s per-element formula for rank
    /// `rank_me` of `rank_n`.
    pub fn input(dt: DataType, op: GenOp, rank_n: i32, rank_me: i32, seed: u64) -> Kernel {
        let kind = match (floats::layout(dt), op) {
            (None, GenOp::Nil) => Kind::IntCopy {
                seed,
                shift: 64 - 8 * dt.size() as u32,
                mask: int_mask(dt),
            },
            (None, GenOp::Red(o)) => Kind::IntHash {
                seed,
                rank_me,
                mask: int_mask(dt),
                prod: o == ReduceOp::Prod,
            },
            (Some(l), GenOp::Nil | GenOp::Red(ReduceOp::Max | ReduceOp::Min)) => {
                Kind::RandomFloat { l, rank_me, seed }
            }
            (Some(l), GenOp::Red(ReduceOp::Sum)) => Kind::FloatSum {
                l,
                w: sum_width(dt),
                input: true,
                rank_n,
                rank_me,
                seed,
            },
            (Some(l), GenOp::Red(ReduceOp::Prod)) => Kind::FloatProd {
                l,
                input: true,
                rank_n,
                rank_me,
                seed,
            },
            (Some(l), GenOp::Red(ReduceOp::PreMulSum)) => Kind::PreMulSum {
                l,
                input: true,
                rank_n,
                rank_me,
                seed,
            },
            (Some(l), GenOp::Red(ReduceOp::Avg)) => {
                Kind::Const(avg_input(dt, l, rank_n, rank_me, seed))
            }
        };
        Kernel {
            ws: dt.size(),
            kind,
        }
    }

    /// `ncclVerifiablePrepareExpected`'s per-element formula.
    pub fn expected(dt: DataType, op: GenOp, rank_n: i32, seed: u64) -> Kernel {
        let kind = match (floats::layout(dt), op) {
            (_, GenOp::Nil) => return Kernel::input(dt, op, rank_n, 0, seed),
            (Some(l), GenOp::Red(ReduceOp::Sum)) => Kind::FloatSum {
                l,
                w: sum_width(dt),
                input: false,
                rank_n,
                rank_me: 0,
                seed,
            },
            (Some(l), GenOp::Red(ReduceOp::Prod)) => Kind::FloatProd {
                l,
                input: false,
                rank_n,
                rank_me: 0,
                seed,
            },
            (Some(l), GenOp::Red(ReduceOp::PreMulSum)) => Kind::PreMulSum {
                l,
                input: false,
                rank_n,
                rank_me: 0,
                seed,
            },
            (Some(l), GenOp::Red(ReduceOp::Avg)) => Kind::Const(avg_output(dt, l, rank_n, seed)),
            // Integers (every op) and float min/max.
            (_, GenOp::Red(o)) => Kind::Reduce(Reduce::new(dt, o, rank_n, seed)),
        };
        Kernel {
            ws: dt.size(),
            kind,
        }
    }

    /// `ws`-byte zeros (expected where nothing is generated).
    pub fn zeros(ws: usize) -> Kernel {
        Kernel {
            ws,
            kind: Kind::Const(0),
        }
    }

    /// Bytes per element.
    pub fn element_size(&self) -> usize {
        self.ws
    }

    /// The element at `index`, as little-endian bits.
    pub fn at(&self, index: i64) -> u64 {
        self.visit(At(index))
    }

    /// Writes elements `ix0..` into `out` (a whole number of elements).
    pub fn fill(&self, ix0: i64, out: &mut [u8]) {
        self.visit(Fill { out, ix0 });
    }

    /// Counts elements of `got` (elements `ix0..`) whose bits differ from
    /// the formula's by more than `tol`, compared as unsigned integers of
    /// the element width (as verifiable.cu does).
    pub fn count_wrong(&self, ix0: i64, tol: u64, got: &[u8]) -> u64 {
        self.visit(Count { got, ix0, tol })
    }

    /// The formula as the GPU kernels take it (see `device.rs`).
    pub(super) fn formula_for_device(&self) -> DeviceFormula {
        use DeviceKind as K;
        let f = DeviceFormula::new;
        match self.kind {
            Kind::IntCopy { seed, shift, mask } => DeviceFormula {
                bits: mask,
                shift: shift as i32,
                ..f(K::IntCopy, seed)
            },
            Kind::IntHash {
                seed,
                rank_me,
                mask,
                prod,
            } => DeviceFormula {
                bits: mask,
                ..f(K::IntHash, seed)
                    .ranks(1, rank_me)
                    .flag(flags::PROD, prod)
            },
            Kind::RandomFloat { l, rank_me, seed } => {
                f(K::RandomFloat, seed).layout(l).ranks(1, rank_me)
            }
            Kind::FloatSum {
                l,
                w,
                input,
                rank_n,
                rank_me,
                seed,
            } => f(K::FloatSum, seed)
                .layout(l)
                .ranks(rank_n, rank_me)
                .flag(flags::INPUT, input)
                .flag(flags::W64, w == Width::W64),
            Kind::FloatProd {
                l,
                input,
                rank_n,
                rank_me,
                seed,
            } => f(K::FloatProd, seed)
                .layout(l)
                .ranks(rank_n, rank_me)
                .flag(flags::INPUT, input),
            Kind::PreMulSum {
                l,
                input,
                rank_n,
                rank_me,
                seed,
            } => f(K::PreMulSum, seed)
                .layout(l)
                .ranks(rank_n, rank_me)
                .flag(flags::INPUT, input)
                .flag(flags::W64, l.exp_bits + l.mant_bits + 1 > 32),
            Kind::Const(bits) => DeviceFormula {
                bits,
                ..f(K::Const, 0)
            },
            Kind::Reduce(Reduce::Int {
                op,
                t,
                rank_n,
                seed,
            }) => DeviceFormula {
                bits: t.mask(),
                shift: t.shift() as i32,
                op: device_op(op),
                ..f(K::ReduceInt, seed)
                    .ranks(rank_n, 0)
                    .flag(flags::PROD, op == ReduceOp::Prod)
                    .flag(flags::SIGNED, t.signed())
            },
            Kind::Reduce(Reduce::Float {
                want_max,
                order,
                rank_n,
                seed,
            }) => f(K::ReduceFloat, seed)
                .layout(order.layout())
                .ranks(rank_n, 0)
                .flag(flags::WANT_MAX, want_max)
                .flag(flags::NAN_ALL_ONES, order.nan_is_all_ones()),
        }
    }

    /// Applies `v` to this kernel's formula; the match happens once, so
    /// `v`'s loop runs over a closure the compiler specializes.
    #[inline]
    fn visit<V: Visit>(&self, v: V) -> V::Out {
        let ws = self.ws;
        match self.kind {
            Kind::IntCopy { seed, shift, mask } => {
                v.run(ws, move |ix| mix_bits(seed ^ ix as u64) >> shift & mask)
            }
            Kind::IntHash {
                seed,
                rank_me,
                mask,
                prod,
            } => v.run(ws, move |ix| int_hash(mask, prod, rank_me, seed, ix)),
            Kind::RandomFloat { l, rank_me, seed } => {
                v.run(ws, move |ix| random_float(l, rank_me, seed, ix))
            }
            Kind::FloatSum {
                l,
                w,
                input,
                rank_n,
                rank_me,
                seed,
            } => v.run(ws, move |ix| {
                float_sum(w, l, input, rank_n, rank_me, seed, ix)
            }),
            Kind::FloatProd {
                l,
                input,
                rank_n,
                rank_me,
                seed,
            } => v.run(ws, move |ix| {
                float_prod(l, input, rank_n, rank_me, seed, ix)
            }),
            Kind::PreMulSum {
                l,
                input,
                rank_n,
                rank_me,
                seed,
            } => v.run(ws, move |ix| {
                float_premulsum(l, input, rank_n, rank_me, seed, ix)
            }),
            Kind::Const(bits) => v.run(ws, move |_| bits),
            Kind::Reduce(r) => r.with(WithWidth(v, ws)),
        }
    }
}

/// Something done with a formula `f(index) -> bits` of `ws`-byte elements.
trait Visit {
    type Out;
    fn run<F: Fn(i64) -> u64>(self, ws: usize, f: F) -> Self::Out;
}

/// A [`Visit`] with its element width, for [`Reduce`]'s formulas.
struct WithWidth<V>(V, usize);

impl<V: Visit> ElementLoop<V::Out> for WithWidth<V> {
    #[inline]
    fn run<F: Fn(i64) -> u64>(self, f: F) -> V::Out {
        self.0.run(self.1, f)
    }
}

/// Evaluates one element.
struct At(i64);

impl Visit for At {
    type Out = u64;
    #[inline]
    fn run<F: Fn(i64) -> u64>(self, _ws: usize, f: F) -> u64 {
        f(self.0)
    }
}

/// Writes elements into bytes.
struct Fill<'a> {
    out: &'a mut [u8],
    ix0: i64,
}

impl Visit for Fill<'_> {
    type Out = ();
    fn run<F: Fn(i64) -> u64>(self, ws: usize, f: F) {
        match ws {
            1 => fill_w::<1, F>(self.out, self.ix0, f),
            2 => fill_w::<2, F>(self.out, self.ix0, f),
            4 => fill_w::<4, F>(self.out, self.ix0, f),
            _ => fill_w::<8, F>(self.out, self.ix0, f),
        }
    }
}

fn fill_w<const W: usize, F: Fn(i64) -> u64>(out: &mut [u8], ix0: i64, f: F) {
    for (k, c) in out.chunks_exact_mut(W).enumerate() {
        c.copy_from_slice(&f(ix0 + k as i64).to_le_bytes()[..W]);
    }
}

/// Counts elements that differ from the formula by more than a tolerance.
struct Count<'a> {
    got: &'a [u8],
    ix0: i64,
    tol: u64,
}

impl Visit for Count<'_> {
    type Out = u64;
    fn run<F: Fn(i64) -> u64>(self, ws: usize, f: F) -> u64 {
        let Count { got, ix0, tol } = self;
        match ws {
            1 => count_w::<1, F>(got, ix0, tol, f),
            2 => count_w::<2, F>(got, ix0, tol, f),
            4 => count_w::<4, F>(got, ix0, tol, f),
            _ => count_w::<8, F>(got, ix0, tol, f),
        }
    }
}

fn count_w<const W: usize, F: Fn(i64) -> u64>(got: &[u8], ix0: i64, tol: u64, f: F) -> u64 {
    // The expected bytes were once written out and compared; keep
    // comparing only the element's own bytes.
    let mask = u64::MAX >> (64 - 8 * W);
    let elems = got.chunks_exact(W).enumerate().map(|(k, c)| {
        let mut b = [0u8; 8];
        b[..W].copy_from_slice(c);
        (u64::from_le_bytes(b), f(ix0 + k as i64) & mask)
    });
    // Exact comparison (every case but float avg) is a plain inequality,
    // which vectorizes far better than a 64-bit distance.
    if tol == 0 {
        elems.map(|(g, w)| u64::from(g != w)).sum()
    } else {
        elems.map(|(g, w)| u64::from(g.abs_diff(w) > tol)).sum()
    }
}
