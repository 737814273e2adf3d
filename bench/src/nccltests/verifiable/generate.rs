//! Per-element input and expected-output generators (`genInput`,
//! `genOutput` of nccl-tests' verifiable.cu), returning element bits.

use super::floats::{self, Layout};
use super::kernel::Kernel;
use super::rng::{Width, gen_sum_y, hash_of, mix_bits, shuffle_rank, sum_part, umul32hi};
use crate::nccltests::types::{DataType, ReduceOp, premul_scalar};

/// The reduction a generator targets. `Nil` is a plain copy (every
/// non-reducing collective, and any reduction over a single rank).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum GenOp {
    /// Byte-copy collectives / one rank.
    Nil,
    /// A reduction.
    Red(ReduceOp),
}

impl GenOp {
    /// What verifiable.cu uses for `op` over `rank_n` contributions.
    pub fn new(op: ReduceOp, rank_n: i32) -> GenOp {
        if rank_n == 1 {
            GenOp::Nil
        } else {
            GenOp::Red(op)
        }
    }
}

pub(super) fn int_mask(dt: DataType) -> u64 {
    u64::MAX >> (64 - 8 * dt.size())
}

fn is_signed(dt: DataType) -> bool {
    matches!(dt, DataType::Int8 | DataType::Int32 | DataType::Int64)
}

fn sign_extend(dt: DataType, bits: u64) -> i64 {
    let shift = 64 - 8 * dt.size();
    ((bits << shift) as i64) >> shift
}

/// Element index mixing used by most generators: `index ^ index<<16 ^ rank`.
fn ix_mix(index: i64, rank_me: i32) -> u64 {
    (index ^ index << 16 ^ rank_me as i64) as u64
}

/// One input element for rank `rank_me` of `rank_n`.
pub fn gen_input(dt: DataType, op: GenOp, rank_n: i32, rank_me: i32, seed: u64, index: i64) -> u64 {
    Kernel::input(dt, op, rank_n, rank_me, seed).at(index)
}

/// The expected reduced element.
pub fn gen_output(dt: DataType, op: GenOp, rank_n: i32, seed: u64, index: i64) -> u64 {
    Kernel::expected(dt, op, rank_n, seed).at(index)
}

/// Integer reduction input: hashed index, never zero for prod.
#[inline]
pub(super) fn int_hash(mask: u64, prod: bool, rank_me: i32, seed: u64, index: i64) -> u64 {
    let bits = mask & hash_of(ix_mix(index, rank_me), seed);
    if prod && bits == 0 { 1 } else { bits }
}

/// The op's per-rank pre-operation: premulsum scales by the rank scalar.
/// (Float avg's scaling is [`avg_pre_op`]; the generators never need it.)
pub fn pre_op(dt: DataType, op: ReduceOp, x: u64, rank: i32) -> u64 {
    match op {
        ReduceOp::PreMulSum => {
            let s = premul_scalar(rank.max(0) as usize);
            match floats::layout(dt) {
                None => x.wrapping_mul(s as u64) & int_mask(dt),
                Some(_) => floats::mul(dt, x, floats::from_f64(dt, s)),
            }
        }
        _ => x,
    }
}

/// Float avg's pre-operation, `x * T(1/n)` with 1/n rounded through float
/// (double for double), as NCCL and verifiable.cu compute it.
pub fn avg_pre_op(dt: DataType, x: u64, rank_n: i32) -> u64 {
    let inv = if dt == DataType::Float64 {
        1.0 / rank_n as f64
    } else {
        (1.0f32 / rank_n as f32) as f64
    };
    floats::mul(dt, floats::from_f64(dt, inv), x)
}

/// Combines two (pre-operated) values: sum, prod, min or max. Always
/// inlined: the MPI backend's per-type reduction functions rely on `dt` and
/// `op` folding to constants.
#[inline(always)]
pub fn combine(dt: DataType, op: ReduceOp, a: u64, b: u64) -> u64 {
    if floats::layout(dt).is_some() {
        return match op {
            ReduceOp::Prod => floats::mul(dt, a, b),
            ReduceOp::Max => floats::min_max(dt, a, b, true),
            ReduceOp::Min => floats::min_max(dt, a, b, false),
            ReduceOp::Sum | ReduceOp::Avg | ReduceOp::PreMulSum => floats::add(dt, a, b),
        };
    }
    let m = int_mask(dt);
    match op {
        ReduceOp::Prod => a.wrapping_mul(b) & m,
        ReduceOp::Max | ReduceOp::Min => {
            let a_less = if is_signed(dt) {
                sign_extend(dt, a) < sign_extend(dt, b)
            } else {
                a < b
            };
            if a_less == (op == ReduceOp::Min) {
                a
            } else {
                b
            }
        }
        ReduceOp::Sum | ReduceOp::Avg | ReduceOp::PreMulSum => a.wrapping_add(b) & m,
    }
}

/// The op's post-operation: integer avg divides by the rank count.
pub fn post_op(dt: DataType, op: ReduceOp, x: u64, rank_n: i32) -> u64 {
    if op != ReduceOp::Avg || floats::layout(dt).is_some() || rank_n <= 0 {
        return x;
    }
    if is_signed(dt) {
        (sign_extend(dt, x) / rank_n as i64) as u64 & int_mask(dt)
    } else {
        x / rank_n as u64
    }
}

/// The random float of the Nil/min/max generators.
#[inline]
pub(super) fn random_float(l: Layout, rank_me: i32, seed: u64, index: i64) -> u64 {
    let mut rng = hash_of(ix_mix(index, rank_me), seed);
    let sign = rng & 1;
    rng ^= rng >> 1;
    let mut exp = rng & ((1 << (l.exp_bits - 1)) - 1);
    exp += 1 << (l.exp_bits - 2);
    rng ^= rng >> l.exp_bits;
    floats::make_float(l, sign, exp, rng & l.mant_mask())
}

/// The unsigned width `genInOutFloatSum` computes mantissas in.
pub(super) fn sum_width(dt: DataType) -> Width {
    if dt.size() * 8 > 32 {
        Width::W64
    } else {
        Width::W32
    }
}

/// Normalizes a nonzero mantissa integer into a float of exponent `exp`.
fn normalized(l: Layout, sign: u64, exp: i32, mant: u64) -> u64 {
    if mant == 0 {
        return 0;
    }
    let shift = mant.leading_zeros() as i32 - (64 - l.mant_bits as i32 - 1);
    let m = mant << shift;
    floats::make_float(l, sign, (exp - shift) as u64, m & l.mant_mask())
}

/// `genInOutFloatSum` with mixed signs.
#[inline]
pub(super) fn float_sum(
    w: Width,
    l: Layout,
    input: bool,
    rank_n: i32,
    rank_me: i32,
    seed: u64,
    index: i64,
) -> u64 {
    let exp_lo = 1 + l.mant_bits as i32;
    let exp_hi = (1 << l.exp_bits) - 1;
    let max_mant = 2 * l.mant_mask() + 1;
    let mut rng = hash_of(seed, index as u64);
    let mut y_sign = rng & 1;
    let mut x_sign = y_sign;
    let xy_exp = exp_lo + umul32hi((rng >> 32) as u32, (exp_hi - exp_lo) as u32) as i32;
    rng = mix_bits(rng);
    let me = shuffle_rank(rank_n, rank_me, &mut rng);
    let mut y0 = 0;
    gen_sum_y(w, &mut rng, max_mant, &mut y0, false);
    // genSumXY's x of the call whose x this rank's input is (the first,
    // or the second for odd shuffled ranks): only inputs compute it.
    let mut part = ((rank_n + 1) / 2, y0);
    if rank_n / 2 != 0 {
        let mut y1 = y0;
        gen_sum_y(w, &mut rng, max_mant, &mut y1, true);
        y_sign ^= u64::from(y0 < y1);
        y0 = y0.abs_diff(y1);
        x_sign ^= (me % 2) as u64;
        // Shuffled ranks are random: select without a branch.
        part = std::hint::select_unpredictable(me % 2 != 0, (rank_n / 2, y1), part);
    }
    if input {
        let x = sum_part(w, part.0, me / 2, max_mant, part.1);
        normalized(l, x_sign, xy_exp, x)
    } else {
        normalized(l, y_sign, xy_exp, y0)
    }
}

/// `genInOutFloatProd`.
#[inline]
pub(super) fn float_prod(
    l: Layout,
    input: bool,
    rank_n: i32,
    rank_me: i32,
    seed: u64,
    index: i64,
) -> u64 {
    let mut rng = hash_of(seed, index as u64);
    let me = shuffle_rank(rank_n, rank_me, &mut rng);
    let y_sign = ((rank_n / 2) % 2) as u64;
    let x_sign = (me % 2) as u64;
    let max_exp = (1u64 << (l.exp_bits - 1)) - 1;
    let mut y_exp = 0;
    gen_sum_y(Width::W32, &mut rng, max_exp, &mut y_exp, false);
    let bias = l.bias() as u64;
    let mut y_mant = rng & l.mant_mask();
    if y_mant == 0 {
        y_mant = 1;
    }
    if input {
        let x_exp = sum_part(Width::W32, rank_n, me, max_exp, y_exp);
        floats::make_float(
            l,
            x_sign,
            (x_exp + bias) & 0xffff_ffff,
            if me == 0 { y_mant } else { 0 },
        )
    } else {
        floats::make_float(l, y_sign, (y_exp + bias) & 0xffff_ffff, y_mant)
    }
}

/// `genInOutFloatPreMulSum`.
#[inline]
pub(super) fn float_premulsum(
    l: Layout,
    input: bool,
    rank_n: i32,
    rank_me: i32,
    seed: u64,
    index: i64,
) -> u64 {
    let w = if l.exp_bits + l.mant_bits + 1 > 32 {
        Width::W64
    } else {
        Width::W32
    };
    let exp_lo = 1 + l.mant_bits as i32;
    let exp_hi = (1 << l.exp_bits) - 1;
    let max_mant = 2 * l.mant_mask() + 1;
    let mut rng = hash_of(seed, index as u64);
    let y_sign = rng & 1;
    let y_exp = exp_lo + umul32hi((rng >> 32) as u32, (exp_hi - exp_lo) as u32) as i32;
    rng = mix_bits(rng);
    let sub0 = shuffle_rank((rank_n + 1) / 2, rank_me / 2, &mut rng);
    let sub1 = shuffle_rank(rank_n / 2, rank_me / 2, &mut rng);
    let (n0, n1) = ((rank_n + 1) / 2, rank_n / 2);
    let (mut y0, mut y1) = (0, 0);
    gen_sum_y(w, &mut rng, max_mant >> 1, &mut y0, false);
    if n1 != 0 {
        gen_sum_y(w, &mut rng, max_mant >> 2, &mut y1, false);
    }
    let mant = if !input {
        y0.wrapping_add(2 * y1)
    } else if rank_me % 2 == 0 {
        sum_part(w, n0, sub0, max_mant >> 1, y0)
    } else if n1 != 0 {
        sum_part(w, n1, sub1, max_mant >> 2, y1)
    } else {
        0
    };
    normalized(l, y_sign, y_exp, mant)
}

/// Float avg input: only two (shuffled) ranks contribute, and the value does
/// not depend on the element index (as in nccl-tests).
pub(super) fn avg_input(dt: DataType, l: Layout, rank_n: i32, rank_me: i32, seed: u64) -> u64 {
    let mut rng = seed;
    let r = shuffle_rank(rank_n, rank_me, &mut rng);
    let m = rng.wrapping_mul(if r != 0 { 0xbeef } else { 1 }) & l.mant_mask();
    if r < 2 {
        floats::from_f64(dt, (1 + m) as f64)
    } else {
        0
    }
}

/// Float avg expected value: `T(TMul(1+m0)*TMul(1/n)) + T(TMul(1+m1)*TMul(1/n))`.
pub(super) fn avg_output(dt: DataType, l: Layout, rank_n: i32, seed: u64) -> u64 {
    let mut rng = seed;
    shuffle_rank(rank_n, -1, &mut rng);
    let m0 = rng & l.mant_mask();
    let m1 = rng.wrapping_mul(0xbeef) & l.mant_mask();
    if rank_n == 1 {
        return floats::from_f64(dt, (1 + m0) as f64);
    }
    let scaled = |m: u64| -> u64 {
        if dt == DataType::Float64 {
            floats::from_f64(dt, (1 + m) as f64 * (1.0 / rank_n as f64))
        } else {
            let p = (1 + m) as f32 * (1.0 / rank_n as f64) as f32;
            floats::from_f64(dt, p as f64)
        }
    };
    floats::add(dt, scaled(m0), scaled(m1))
}
