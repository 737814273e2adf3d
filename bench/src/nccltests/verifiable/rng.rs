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
/// from it). Mixes `rng`.
pub fn gen_sum_xy(
    w: Width,
    rank_n: i32,
    rank_me: i32,
    rng: &mut u64,
    y_max: u64,
    y: &mut u64,
    avoid_y: bool,
) -> u64 {
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
    let back = if avoid_y && (y1 < y_min || y_max < y1) {
        y_max / 2
    } else {
        0
    };
    *y = y1.wrapping_sub(back) & m;
    *rng = mix_bits(*rng);

    let r = rank_me as u32 as u64;
    let rn = rank_n as u32 as u64;
    let mut pn = if rn == 1 {
        1
    } else {
        (2 * (*y / rn)).wrapping_sub(1) & m
    };
    if pn == 0 {
        pn = 1;
    }
    if rn < pn {
        pn = rn;
    }
    let p_sum = if y_max <= (u32::MAX >> 1) as u64 {
        ((pn as u32).wrapping_mul((pn as u32).wrapping_add(1)) / 2) as u64
    } else {
        pn.wrapping_mul(pn.wrapping_add(1)) / 2
    } & m;
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
