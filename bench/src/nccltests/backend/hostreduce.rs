//! The host backend's reduction kernels: whole-slice passes over one
//! element type and op, chosen once per call, so that each pass is a plain
//! loop the compiler vectorises (no per-element dispatch on the type or the
//! op). A reduction is
//! - [`Reducer::load`] of the first rank's input (its pre-operation applied:
//!   mulsum's scalar, float avg's 1/n),
//! - [`Reducer::add`] of each further rank's input, in rank order,
//! - [`Reducer::merge`] of partial results (another process's, already
//!   pre-operated),
//! - [`Reducer::finish`]: integer avg's division.
//!
//! Element for element the result is `post_op(combine(...combine(pre(x0),
//! pre(x1))..., pre(xn)))` with the functions the data check uses
//! (`verifiable::{combine, pre_op, avg_pre_op, post_op}`): the unit tests
//! pin every type and op against them. Partial results merged across
//! processes group the ranks per process; the checked data sums exactly in
//! every order (nccl-tests designs it so, since NCCL's rings and trees
//! reduce in no fixed order), so the check needs no tolerance for it.

use crate::nccltests::types::{DataType, ReduceOp, premul_scalar};
use crate::nccltests::verifiable::{combine, from_f64};

/// The pass loop: `ld`/`st` convert an element, `pre` is the input's
/// pre-operation, `comb` the op. Everything is inlined into one loop per
/// (type, op, pre-operation), which the compiler vectorises for the
/// native types.
#[inline(always)]
fn run<const W: usize, T: Copy>(
    pass: Pass,
    src: &[u8],
    acc: &mut [u8],
    ld: impl Fn([u8; W]) -> T,
    st: impl Fn(T) -> [u8; W],
    pre: impl Fn(T) -> T,
    comb: impl Fn(T, T) -> T,
) {
    let (a, _) = acc.as_chunks_mut::<W>();
    let (s, _) = src.as_chunks::<W>();
    match pass {
        Pass::Load => a.iter_mut().zip(s).for_each(|(a, s)| *a = st(pre(ld(*s)))),
        Pass::Add => a
            .iter_mut()
            .zip(s)
            .for_each(|(a, s)| *a = st(comb(ld(*a), pre(ld(*s))))),
        Pass::Merge => a
            .iter_mut()
            .zip(s)
            .for_each(|(a, s)| *a = st(comb(ld(*a), ld(*s)))),
    }
}

/// [`run`] with and without the pre-operation's factor.
#[inline(always)]
fn run_scaled<const W: usize, T: Copy>(
    pass: Pass,
    src: &[u8],
    acc: &mut [u8],
    ld: impl Fn([u8; W]) -> T,
    st: impl Fn(T) -> [u8; W],
    scale: Option<impl Fn(T) -> T>,
    comb: impl Fn(T, T) -> T,
) {
    match scale {
        Some(f) => run(pass, src, acc, ld, st, f, comb),
        None => run(pass, src, acc, ld, st, |x| x, comb),
    }
}

/// A pass over a Rust primitive type: `wrapping` integer or `float`
/// arithmetic. Min and max are `a < b ? a : b` and `a > b ? a : b`, as
/// `combine` (a NaN compares false and gives `b`; -0 and +0 give `b`).
macro_rules! native {
    ($t:ty, $kind:ident, $op:expr, $pass:expr, $factor:expr, $src:expr, $acc:expr) => {{
        const W: usize = size_of::<$t>();
        let ld = |b: [u8; W]| <$t>::from_le_bytes(b);
        let st = |x: $t| x.to_le_bytes();
        let s = $factor.map(|f: f64| f as $t);
        let scale = s.map(|s| move |x: $t| native!(@mul $kind, x, s));
        match $op {
            ReduceOp::Sum | ReduceOp::Avg | ReduceOp::PreMulSum => {
                run_scaled($pass, $src, $acc, ld, st, scale, |a: $t, b: $t| {
                    native!(@add $kind, a, b)
                })
            }
            ReduceOp::Prod => run_scaled($pass, $src, $acc, ld, st, scale, |a: $t, b: $t| {
                native!(@mul $kind, a, b)
            }),
            ReduceOp::Max => run_scaled($pass, $src, $acc, ld, st, scale, |a: $t, b: $t| {
                if a > b { a } else { b }
            }),
            ReduceOp::Min => run_scaled($pass, $src, $acc, ld, st, scale, |a: $t, b: $t| {
                if a < b { a } else { b }
            }),
        }
    }};
    (@add wrapping, $a:expr, $b:expr) => { $a.wrapping_add($b) };
    (@add float, $a:expr, $b:expr) => { $a + $b };
    (@mul wrapping, $a:expr, $b:expr) => { $a.wrapping_mul($b) };
    (@mul float, $a:expr, $b:expr) => { $a * $b };
}

/// A pass over a float type without a Rust primitive (half, bfloat16,
/// fp8): elements as bits through `combine` with the type and op constant
/// in each loop (so it specialises), the factor rounded to the type first.
macro_rules! soft {
    ($dt:expr, $bits:ty, $op:expr, $pass:expr, $factor:expr, $src:expr, $acc:expr) => {{
        const W: usize = size_of::<$bits>();
        let ld = |b: [u8; W]| <$bits>::from_le_bytes(b) as u64;
        let st = |x: u64| (x as $bits).to_le_bytes();
        let s = $factor.map(|f: f64| from_f64($dt, f));
        let scale = s.map(|s| move |x: u64| combine($dt, ReduceOp::Prod, x, s));
        match $op {
            ReduceOp::Sum | ReduceOp::Avg | ReduceOp::PreMulSum => {
                run_scaled($pass, $src, $acc, ld, st, scale, |a, b| {
                    combine($dt, ReduceOp::Sum, a, b)
                })
            }
            ReduceOp::Prod => run_scaled($pass, $src, $acc, ld, st, scale, |a, b| {
                combine($dt, ReduceOp::Prod, a, b)
            }),
            ReduceOp::Max => run_scaled($pass, $src, $acc, ld, st, scale, |a, b| {
                combine($dt, ReduceOp::Max, a, b)
            }),
            ReduceOp::Min => run_scaled($pass, $src, $acc, ld, st, scale, |a, b| {
                combine($dt, ReduceOp::Min, a, b)
            }),
        }
    }};
}

/// One kind of pass over an accumulator and a source.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Pass {
    /// `acc = pre(src)`.
    Load,
    /// `acc = combine(acc, pre(src))`.
    Add,
    /// `acc = combine(acc, src)`.
    Merge,
}

/// A reduction of `dt` with `op` over `nranks` contributions.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Reducer {
    dt: DataType,
    op: ReduceOp,
    nranks: usize,
}

impl Reducer {
    /// The reduction of `nranks` inputs of `dt` with `op`.
    pub fn new(dt: DataType, op: ReduceOp, nranks: usize) -> Reducer {
        Reducer { dt, op, nranks }
    }

    /// The factor global rank `rank`'s input is multiplied by first, if
    /// any (the verifiable `pre_op`/`avg_pre_op`). One contribution: every
    /// op is the identity, as NCCL's single-rank reductions are copies.
    fn factor(&self, rank: usize) -> Option<f64> {
        if self.nranks <= 1 {
            return None;
        }
        match self.op {
            ReduceOp::PreMulSum => Some(premul_scalar(rank)),
            ReduceOp::Avg if self.dt == DataType::Float64 => Some(1.0 / self.nranks as f64),
            ReduceOp::Avg if self.dt.is_float() => Some((1.0f32 / self.nranks as f32) as f64),
            _ => None,
        }
    }

    /// Bytes per element.
    pub fn element_size(&self) -> usize {
        self.dt.size()
    }

    /// `acc = pre(src)` for global rank `rank`'s input.
    pub fn load(&self, rank: usize, src: &[u8], acc: &mut [u8]) {
        self.pass(Pass::Load, self.factor(rank), src, acc);
    }

    /// `acc = combine(acc, pre(src))` for global rank `rank`'s input.
    pub fn add(&self, rank: usize, src: &[u8], acc: &mut [u8]) {
        self.pass(Pass::Add, self.factor(rank), src, acc);
    }

    /// `acc = combine(acc, src)`, `src` a partial result.
    pub fn merge(&self, src: &[u8], acc: &mut [u8]) {
        self.pass(Pass::Merge, None, src, acc);
    }

    /// The post-operation: integer avg divides the sum by the rank count
    /// (toward zero); nothing otherwise.
    pub fn finish(&self, acc: &mut [u8]) {
        if self.op != ReduceOp::Avg || self.dt.is_float() || self.nranks <= 1 {
            return;
        }
        let n = self.nranks as i128;
        macro_rules! div {
            ($t:ty) => {{
                let (a, _) = acc.as_chunks_mut::<{ size_of::<$t>() }>();
                for x in a {
                    let v = <$t>::from_le_bytes(*x) as i128 / n;
                    *x = (v as $t).to_le_bytes();
                }
            }};
        }
        match self.dt {
            DataType::Int8 => div!(i8),
            DataType::Uint8 => div!(u8),
            DataType::Int32 => div!(i32),
            DataType::Uint32 => div!(u32),
            DataType::Int64 => div!(i64),
            DataType::Uint64 => div!(u64),
            _ => {}
        }
    }

    /// Runs one pass over `min(src, acc)` whole elements.
    fn pass(&self, pass: Pass, factor: Option<f64>, src: &[u8], acc: &mut [u8]) {
        let op = self.op;
        match self.dt {
            DataType::Int8 => native!(i8, wrapping, op, pass, factor, src, acc),
            DataType::Uint8 => native!(u8, wrapping, op, pass, factor, src, acc),
            DataType::Int32 => native!(i32, wrapping, op, pass, factor, src, acc),
            DataType::Uint32 => native!(u32, wrapping, op, pass, factor, src, acc),
            DataType::Int64 => native!(i64, wrapping, op, pass, factor, src, acc),
            DataType::Uint64 => native!(u64, wrapping, op, pass, factor, src, acc),
            DataType::Float32 => native!(f32, float, op, pass, factor, src, acc),
            DataType::Float64 => native!(f64, float, op, pass, factor, src, acc),
            DataType::Float16 => soft!(DataType::Float16, u16, op, pass, factor, src, acc),
            DataType::Bfloat16 => soft!(DataType::Bfloat16, u16, op, pass, factor, src, acc),
            DataType::Float8e4m3 => soft!(DataType::Float8e4m3, u8, op, pass, factor, src, acc),
            DataType::Float8e5m2 => soft!(DataType::Float8e5m2, u8, op, pass, factor, src, acc),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::nccltests::backend::hostcoll;

    fn mix_bits(x: u64) -> u64 {
        let x = (x ^ (x >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        let x = (x ^ (x >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        x ^ (x >> 31)
    }

    /// Random element bits, with some specials (zeros, ones, extremes).
    fn bytes(len: usize, seed: u64) -> Vec<u8> {
        let mut x = seed;
        (0..len)
            .map(|i| {
                x = mix_bits(x.wrapping_add(i as u64));
                match x % 13 {
                    0 => 0,
                    1 => 0xff,
                    _ => (x >> 8) as u8,
                }
            })
            .collect()
    }

    /// Reduces `ins` as the host backend does: ranks `0..split` loaded and
    /// added in one partial, the rest in another, merged (a two-process
    /// run); `split == ins.len()` is one process.
    fn reduced(dt: DataType, op: ReduceOp, ins: &[Vec<u8>], split: usize) -> Vec<u8> {
        let r = Reducer::new(dt, op, ins.len());
        let partial = |ranks: std::ops::Range<usize>| {
            let mut acc = vec![0u8; ins[0].len()];
            r.load(ranks.start, &ins[ranks.start], &mut acc);
            for (k, inp) in ins.iter().enumerate().take(ranks.end).skip(ranks.start + 1) {
                r.add(k, inp, &mut acc);
            }
            acc
        };
        let mut acc = partial(0..split);
        if split < ins.len() {
            r.merge(&partial(split..ins.len()), &mut acc);
        }
        r.finish(&mut acc);
        acc
    }

    /// Every type and op, odd lengths, 1..5 ranks: the element-wise
    /// reference (`hostcoll::reduce`, in rank order) bit for bit, except
    /// NaNs of the soft float types, which may differ only in payload.
    #[test]
    fn every_type_and_op_matches_the_reference() {
        for &dt in DataType::ALL.iter() {
            for &op in ReduceOp::ALL.iter() {
                for n in 1..=5 {
                    let elems = [1usize, 7, 33, 1001][n % 4];
                    let len = elems * dt.size();
                    let ins: Vec<Vec<u8>> = (0..n)
                        .map(|k| bytes(len, (dt as u64) << 32 | (op as u64) << 16 | k as u64))
                        .collect();
                    let refs: Vec<&[u8]> = ins.iter().map(|v| v.as_slice()).collect();
                    let mut want = vec![0u8; len];
                    hostcoll::reduce(dt, op, &refs, &mut want);
                    let got = reduced(dt, op, &ins, n);
                    assert_same(dt, &got, &want, &format!("{dt:?} {op:?} n={n}"));
                }
            }
        }
    }

    fn assert_same(dt: DataType, got: &[u8], want: &[u8], what: &str) {
        let ws = dt.size();
        for (i, (g, w)) in got.chunks(ws).zip(want.chunks(ws)).enumerate() {
            let bits = |b: &[u8]| {
                let mut x = [0u8; 8];
                x[..ws].copy_from_slice(b);
                u64::from_le_bytes(x)
            };
            let nan =
                |b| dt.is_float() && crate::nccltests::verifiable::to_f64(dt, bits(b)).is_nan();
            assert!(
                g == w || (nan(g) && nan(w)),
                "{what}: element {i}: {g:?} != {w:?}"
            );
        }
    }

    /// Partials merged across "processes" (ranks grouped 2+3) give the
    /// reference for every type and op on exact data (integers: wrapping
    /// arithmetic is associative; min and max; floats whose sums and
    /// products are exact, small integers), float avg within the data
    /// check's tolerance.
    #[test]
    fn partials_merge_to_the_reference() {
        for &dt in DataType::ALL.iter() {
            for &op in ReduceOp::ALL.iter() {
                let n = 5;
                let elems = 17;
                let ins: Vec<Vec<u8>> = (0..n)
                    .map(|k| {
                        let raw = bytes(elems * dt.size(), 99 + k as u64);
                        if dt.is_float() {
                            small_values(dt, &raw)
                        } else {
                            raw
                        }
                    })
                    .collect();
                let refs: Vec<&[u8]> = ins.iter().map(|v| v.as_slice()).collect();
                let mut want = vec![0u8; elems * dt.size()];
                hostcoll::reduce(dt, op, &refs, &mut want);
                let got = reduced(dt, op, &ins, 2);
                // Float avg's pre-scaled inputs (x/5) round: another grouping
                // may differ in the last place, within the check's tolerance.
                let tol = crate::nccltests::verifiable::tolerance(dt, op);
                let wrong = crate::nccltests::verifiable::count_wrong(dt, tol, &got, &want);
                assert_eq!(wrong, 0, "{dt:?} {op:?} merged: {got:?} {want:?}");
            }
        }
    }

    /// 0 or 1 in the float type: sums of five of them, some doubled
    /// (mulsum), are integers up to 7, exact in every format here (fp8
    /// e5m2 has 3 significant bits).
    fn small_values(dt: DataType, raw: &[u8]) -> Vec<u8> {
        let ws = dt.size();
        raw.chunks(ws)
            .flat_map(|c| {
                let v = from_f64(dt, (c[0] % 2) as f64);
                v.to_le_bytes()[..ws].to_vec()
            })
            .collect()
    }

    /// A length that is not a whole number of elements reduces the whole
    /// elements and leaves the tail alone; shares that split a buffer
    /// unevenly reduce to the same bytes as one pass.
    #[test]
    fn uneven_shares_and_tails() {
        let dt = DataType::Float32;
        let r = Reducer::new(dt, ReduceOp::Sum, 2);
        let a = bytes(4 * 101, 1);
        let b = bytes(4 * 101, 2);
        let mut whole = vec![0u8; 4 * 101];
        r.load(0, &a, &mut whole);
        r.add(1, &b, &mut whole);
        let mut pieces = vec![0u8; 4 * 101];
        for (lo, hi) in [(0, 34), (34, 68), (68, 101)] {
            let span = 4 * lo..4 * hi;
            r.load(0, &a[span.clone()], &mut pieces[span.clone()]);
            r.add(1, &b[span.clone()], &mut pieces[span]);
        }
        assert_same(dt, &pieces, &whole, "shares");
        let mut tail = vec![7u8; 6];
        r.load(0, &a[..6], &mut tail);
        assert_eq!(&tail[..4], &a[..4]);
        assert_eq!(&tail[4..], &[7, 7]);
    }
}
