//! The integer mixing functions of nccl-tests' verifiable data generator
//! (`verifiable.cu`), bit-exact: inputs generated here must reduce to the
//! values nccl-tests expects, and vice versa.

/// `mixBits`: one step of the generator's state mixer.
pub fn mix_bits(x: u64) -> u64 {
    let mut lo = x as u32;
    let mut hi = (x >> 32) as u32;
    hi = hi.wrapping_add(1);
    lo ^= hi;
    let mut v = ((hi as u64) << 32 | lo as u64).wrapping_mul(0x9e37_79b9_7f4a_7c13);
    let hi2 = (v >> 32) as u32;
    let lo2 = (v as u32) ^ (hi2 << 16 ^ hi2 >> 16);
    v = (v & 0xffff_ffff_0000_0000) | lo2 as u64;
    v
}

/// `hashOf(a, b)`.
pub fn hash_of(a: u64, b: u64) -> u64 {
    let mut a = a.wrapping_add(1 << 32);
    a = a.wrapping_add(b);
    a ^= a >> 32;
    a = a.wrapping_mul(0x9e37_79b9_7f4a_7c13);
    a = a.wrapping_add(b >> 16 ^ b << 48);
    a ^= a >> 32;
    a.wrapping_mul(0xc4ce_b9fe_1a85_ec53)
}

/// High 32 bits of a 32x32 product (`umul32hi`).
pub fn umul32hi(a: u32, b: u32) -> u64 {
    (a as u64 * b as u64) >> 32
}

/// High 64 bits of a 64x64 product (`umul64hi`).
pub fn umul64hi(a: u64, b: u64) -> u64 {
    ((a as u128 * b as u128) >> 64) as u64
}

/// `clz32` with the device convention clz(0) = 32.
fn clz32(x: i32) -> u32 {
    (x as u32).leading_zeros()
}

/// `shuffleRank`: a pseudo-random permutation of ranks; mixes `rng`.
pub fn shuffle_rank(rank_n: i32, rank_me: i32, rng: &mut u64) -> i32 {
    let a = *rng as u32;
    let b = (*rng >> 32) as u32;
    *rng = mix_bits(*rng);
    let mut r = rank_me as u32;
    // A shift by 32 yields 0 on the GPU (and rank_n >= 1 in every real use).
    let n2 = (u32::MAX >> 1).checked_shr(clz32(rank_n)).unwrap_or(0);
    if r <= n2 {
        r = r.wrapping_mul(a | 1).wrapping_add(b) & n2;
        r = (r.wrapping_mul(r).wrapping_add(r) / 2) & n2;
        r = r.wrapping_add((rank_n as u32).wrapping_sub(n2.wrapping_add(1)));
    } else {
        r = r.wrapping_sub(n2.wrapping_add(1));
    }
    if r <= n2 {
        r = r.wrapping_mul(b | 1).wrapping_add(a) & n2;
        r = (r.wrapping_mul(r).wrapping_add(r) / 2) & n2;
    }
    r as i32
}

/// Width of the unsigned type `genSumXY` is instantiated with.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Width {
    /// `uint32_t` (every type but double).
    W32,
    /// `uint64_t` (double's mantissas).
    W64,
}

impl Width {
    fn mask(self) -> u64 {
        match self {
            Width::W32 => u32::MAX as u64,
            Width::W64 => u64::MAX,
        }
    }
}

/// `genSumXY`: integers x (this rank's) and y (their sum over all ranks,
/// y <= y_max). `y` is an input only when `avoid_y` (the result differs
/// from it). Mixes `rng`. The generators call its halves, [`gen_sum_y`]
/// and [`sum_part`], so that outputs skip x.
#[cfg(test)]
pub fn gen_sum_xy(
    w: Width,
    rank_n: i32,
    rank_me: i32,
    rng: &mut u64,
    y_max: u64,
    y: &mut u64,
    avoid_y: bool,
) -> u64 {
    gen_sum_y(w, rng, y_max, y, avoid_y);
    sum_part(w, rank_n, rank_me, y_max, *y)
}

/// The first half of `genSumXY`: draws y and mixes `rng`. Expected
/// outputs need only this; the divisions are all in [`sum_part`].
#[inline]
pub fn gen_sum_y(w: Width, rng: &mut u64, y_max: u64, y: &mut u64, avoid_y: bool) {
    let m = w.mask();
    let y_min = (y_max.wrapping_add(1) & m) / 2;
    let bump = if avoid_y { 0 } else { 1 };
    let d = match w {
        Width::W64 => umul64hi(*rng, y_max / 2 + bump),
        Width::W32 => umul32hi(*rng as u32, (y_max / 2 + bump) as u32),
    } & m;
    let base = if avoid_y {
        y.wrapping_add(1) & m
    } else {
        y_min
    };
    let y1 = base.wrapping_add(d) & m;
    // Out of range about half the time: a branch would often mispredict.
    let out = avoid_y & ((y1 < y_min) | (y_max < y1));
    let back = std::hint::select_unpredictable(out, y_max / 2, 0);
    *y = y1.wrapping_sub(back) & m;
    *rng = mix_bits(*rng);
}

/// The second half of `genSumXY`: rank `rank_me`'s part x of `y` (the
/// parts of all `rank_n` ranks sum to `y`).
///
/// The formula partitions y among pn = min(rank_n, 2*(y/rank_n) - 1)
/// ranks (pn = rank_n when y < rank_n). For all but small y, pn is
/// rank_n, and then every quotient of the formula is 0 or 1: that case is
/// computed without its three serial divisions (the cost of generating
/// reduction inputs), the others by [`sum_part_general`].
#[inline]
pub fn sum_part(w: Width, rank_n: i32, rank_me: i32, y_max: u64, y: u64) -> u64 {
    let r = rank_me as u32 as u64;
    let rn = rank_n as u32 as u64;
    // pn == rn  <=>  y/rn == 0 or 2*(y/rn) - 1 >= rn  <=>  y/rn >= rn/2 + 1.
    if y >= rn && y < (rn / 2 + 1) * rn {
        return sum_part_general(w, rank_n, rank_me, y_max, y);
    }
    let m = w.mask();
    let p_sum = part_sum(rn, y_max, m);
    // s = min(y / p_sum, rn / pn) with rn / pn == 1 (and y / 0 all ones).
    let s = u64::from(p_sum == 0 || y >= p_sum);
    // x = 1 + r/s when r/s < pn, else 0 (r/0 has no partition either).
    let mut x = if s == 1 && r < rn { 1 + r } else { 0 };
    if r == rn.wrapping_sub(1) & 0xffff_ffff {
        x = x.wrapping_add(y.wrapping_sub(s * p_sum)) & m;
    }
    x
}

/// `pn (pn + 1) / 2`, in 32-bit arithmetic when `y_max` fits 31 bits.
#[inline]
fn part_sum(pn: u64, y_max: u64, m: u64) -> u64 {
    (if y_max <= (u32::MAX >> 1) as u64 {
        ((pn as u32).wrapping_mul((pn as u32).wrapping_add(1)) / 2) as u64
    } else {
        pn.wrapping_mul(pn.wrapping_add(1)) / 2
    }) & m
}

/// [`sum_part`] as `genSumXY` writes it, for any y.
fn sum_part_general(w: Width, rank_n: i32, rank_me: i32, y_max: u64, y: u64) -> u64 {
    let m = w.mask();
    let r = rank_me as u32 as u64;
    let rn = rank_n as u32 as u64;
    let mut pn = if rn == 1 {
        1
    } else {
        (2 * (y / rn)).wrapping_sub(1) & m
    };
    if pn == 0 {
        pn = 1;
    }
    if rn < pn {
        pn = rn;
    }
    let p_sum = part_sum(pn, y_max, m);
    let per = y.checked_div(p_sum).unwrap_or(m);
    let s = (if per < rn / pn { per } else { rn / pn }) as u32;
    // Division by zero (possible for tiny y_max and many ranks) gives an
    // all-ones quotient on the GPU, which never selects a partition.
    let mut x = match (r as u32).checked_div(s) {
        Some(q) if (q as u64) < pn => 1 + q as u64,
        _ => 0,
    };
    if r == rn.wrapping_sub(1) & 0xffff_ffff {
        x = x.wrapping_add(y.wrapping_sub((s as u64).wrapping_mul(p_sum))) & m;
    }
    x
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shuffle_is_a_permutation() {
        for n in [1, 2, 3, 5, 8, 13, 64] {
            let mut seen = vec![false; n as usize];
            for r in 0..n {
                let mut rng = 0x1234_5678_9abc_def0u64;
                let s = shuffle_rank(n, r, &mut rng);
                assert!((0..n).contains(&s), "n={n} r={r} s={s}");
                assert!(!seen[s as usize]);
                seen[s as usize] = true;
            }
        }
    }

    /// The division-free case of `sum_part` agrees with the formula as
    /// written, for small y exhaustively and large y at random, every
    /// (type width, y_max) the generators use and many rank counts.
    #[test]
    fn sum_part_shortcut_is_exact() {
        let limits = [
            (Width::W32, 7),
            (Width::W32, 15),
            (Width::W32, 255),
            (Width::W32, 2047),
            (Width::W32, (1 << 24) - 1),
            (Width::W32, 63),
            (Width::W64, (1 << 53) - 1),
            (Width::W64, (1 << 52) - 1),
        ];
        let ranks = (1..=40).chain([63, 64, 65, 127, 1000, 4096, 1 << 20, i32::MAX]);
        let mut rng = 0x5eed_u64;
        for rank_n in ranks {
            let rn = rank_n as u64;
            let members = [0, 1, rank_n / 2, rank_n - 2, rank_n - 1, rank_n];
            for (w, y_max) in limits {
                let near = (rn / 2 + 1) * rn;
                let ys = (0..600u64)
                    .chain(near.saturating_sub(300)..near + 300)
                    .chain((0..300).map(|_| {
                        rng = mix_bits(rng);
                        rng % (y_max + 1)
                    }));
                for y in ys.filter(|&y| y <= y_max) {
                    for &r in members.iter().filter(|&&r| r >= 0) {
                        assert_eq!(
                            sum_part(w, rank_n, r, y_max, y),
                            sum_part_general(w, rank_n, r, y_max, y),
                            "{w:?} y_max={y_max} rank_n={rank_n} r={r} y={y}"
                        );
                    }
                }
            }
        }
    }

    #[test]
    fn sum_xy_sums_to_y() {
        for n in [1, 2, 3, 7, 16, 100] {
            for seed in 0..50u64 {
                for (w, y_max) in [
                    (Width::W32, (1u64 << 24) - 1),
                    (Width::W64, (1 << 53) - 1),
                    (Width::W32, 15),
                ] {
                    let mut total = 0u64;
                    let mut y_seen = 0;
                    for r in 0..n {
                        let mut rng = hash_of(seed, 7);
                        let mut y = 0;
                        total =
                            total.wrapping_add(gen_sum_xy(w, n, r, &mut rng, y_max, &mut y, false));
                        y_seen = y;
                    }
                    assert_eq!(total & w.mask(), y_seen, "n={n} seed={seed}");
                    assert!(y_seen <= y_max);
                }
            }
        }
    }
}
