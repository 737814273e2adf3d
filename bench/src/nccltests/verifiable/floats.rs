//! Bit layouts and correctly rounded conversions for the floating-point
//! element types. half, bfloat16 and the two fp8 formats have no Rust
//! primitive; values go through f64, which is exact for every format here,
//! and one round-to-nearest-even step back. Arithmetic done as "exact in f64,
//! then round once" equals CUDA's `__hadd`/`__hmul` results because f64 has
//! more than 2p+2 bits for every format p <= 24 (double rounding is then
//! innocuous).

use crate::nccltests::types::DataType;

/// Exponent and mantissa widths of a float format.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Layout {
    /// Exponent bits.
    pub exp_bits: u32,
    /// Explicit mantissa bits.
    pub mant_bits: u32,
}

impl Layout {
    /// The exponent bias.
    pub fn bias(self) -> i32 {
        (1 << (self.exp_bits - 1)) - 1
    }

    /// Mask of the mantissa field.
    pub fn mant_mask(self) -> u64 {
        (1u64 << self.mant_bits) - 1
    }
}

/// The layout of a floating-point type (None for integers).
pub fn layout(dt: DataType) -> Option<Layout> {
    let (exp_bits, mant_bits) = match dt {
        DataType::Float16 => (5, 10),
        DataType::Float32 => (8, 23),
        DataType::Float64 => (11, 52),
        DataType::Bfloat16 => (8, 7),
        DataType::Float8e4m3 => (4, 3),
        DataType::Float8e5m2 => (5, 2),
        _ => return None,
    };
    Some(Layout {
        exp_bits,
        mant_bits,
    })
}

/// `makeFloat`: assembles sign, biased exponent and mantissa fields.
pub fn make_float(l: Layout, sign: u64, exp: u64, mant: u64) -> u64 {
    ((sign << l.exp_bits | exp) << l.mant_bits) | mant
}

/// Decodes element bits of a float type to f64 (exact).
#[inline]
pub fn to_f64(dt: DataType, bits: u64) -> f64 {
    match dt {
        DataType::Float32 => f32::from_bits(bits as u32) as f64,
        DataType::Float64 => f64::from_bits(bits),
        _ => match layout(dt) {
            Some(l) => decode_small(dt, l, bits),
            None => 0.0,
        },
    }
}

fn decode_small(dt: DataType, l: Layout, bits: u64) -> f64 {
    let sign = if (bits >> (l.exp_bits + l.mant_bits)) & 1 == 1 {
        -1.0
    } else {
        1.0
    };
    let exp = ((bits >> l.mant_bits) & ((1 << l.exp_bits) - 1)) as i32;
    let mant = bits & l.mant_mask();
    let exp_max = (1 << l.exp_bits) - 1;
    let special = match dt {
        DataType::Float8e4m3 => exp == exp_max && mant == l.mant_mask(),
        _ => exp == exp_max,
    };
    if special {
        return if dt != DataType::Float8e4m3 && mant == 0 {
            sign * f64::INFINITY
        } else {
            f64::NAN
        };
    }
    let scale = pow2;
    if exp == 0 {
        sign * mant as f64 * scale(1 - l.bias() - l.mant_bits as i32)
    } else {
        sign * (mant | 1 << l.mant_bits) as f64 * scale(exp - l.bias() - l.mant_bits as i32)
    }
}

/// Rounds an f64 to the nearest element of a float type (ties to even).
/// half and bfloat16 overflow to infinity; fp8 saturates to the largest
/// finite value, as CUDA's default `__nv_fp8_*` conversions do.
#[inline]
pub fn from_f64(dt: DataType, v: f64) -> u64 {
    match dt {
        DataType::Float32 => (v as f32).to_bits() as u64,
        DataType::Float64 => v.to_bits(),
        _ => match layout(dt) {
            Some(l) => encode_small(dt, l, v),
            None => 0,
        },
    }
}

#[inline]
fn encode_small(dt: DataType, l: Layout, v: f64) -> u64 {
    let sign_bit = 1u64 << (l.exp_bits + l.mant_bits);
    let sign = if v.is_sign_negative() { sign_bit } else { 0 };
    let exp_field_max = (1u64 << l.exp_bits) - 1;
    if v.is_nan() {
        return sign | exp_field_max << l.mant_bits | l.mant_mask();
    }
    let a = v.abs();
    if a == 0.0 {
        return sign;
    }
    let emin = 1 - l.bias();
    let e = if a.is_infinite() {
        i32::MAX / 2
    } else {
        exponent_of(a).max(emin)
    };
    let quantum = pow2(e - l.mant_bits as i32);
    let q = if a.is_infinite() {
        f64::INFINITY
    } else {
        round_ties_even_small(a / quantum)
    };
    // q in [0, 2^(m+1)] includes the implicit bit, so adding it to the
    // exponent field carries correctly into the next binade (and turns a
    // rounded-up subnormal into the smallest normal).
    let fields = q
        .is_finite()
        .then(|| (((e - emin) as u64) << l.mant_bits) + q as u64);
    let max_finite = max_finite_fields(dt, l);
    match fields {
        Some(f) if f <= max_finite => sign | f,
        _ if matches!(dt, DataType::Float8e4m3 | DataType::Float8e5m2) => sign | max_finite,
        _ => sign | exp_field_max << l.mant_bits,
    }
}

/// `2f64.powi(e)`, built from its bits: the host and MPI backends'
/// reductions decode and encode every element, and `powi` is a loop (which
/// the compiler may run even where a branch would skip it).
fn pow2(e: i32) -> f64 {
    match e {
        -1022..=1023 => f64::from_bits(((e + 1023) as u64) << 52),
        1024.. => f64::INFINITY,
        -1023 => f64::from_bits(1 << 51),
        // powi computes 1 / 2^-e, and 2^-e overflows.
        _ => 0.0,
    }
}

/// `x.round_ties_even()` for 0 <= x < 2^52 (every quotient `encode_small`
/// rounds): adding 2^52 leaves no fraction bits, so the addition itself
/// rounds to nearest even. (Without SSE4.1, `round_ties_even` is a libm
/// call.)
fn round_ties_even_small(x: f64) -> f64 {
    const TWO52: f64 = (1u64 << 52) as f64;
    (x + TWO52) - TWO52
}

/// Fields (exponent and mantissa) of the largest finite value.
fn max_finite_fields(dt: DataType, l: Layout) -> u64 {
    let exp_field_max = (1u64 << l.exp_bits) - 1;
    match dt {
        DataType::Float8e4m3 => exp_field_max << l.mant_bits | (l.mant_mask() - 1),
        _ => (exp_field_max - 1) << l.mant_bits | l.mant_mask(),
    }
}

/// floor(log2(a)) for a finite positive f64.
fn exponent_of(a: f64) -> i32 {
    let bits = a.to_bits();
    let e = ((bits >> 52) & 0x7ff) as i32;
    if e == 0 {
        // f64 subnormal: far below every small format's range.
        -1074
    } else {
        e - 1023
    }
}

/// `a + b` in the element type's arithmetic.
#[inline]
pub fn add(dt: DataType, a: u64, b: u64) -> u64 {
    match dt {
        DataType::Float32 => (f32::from_bits(a as u32) + f32::from_bits(b as u32)).to_bits() as u64,
        _ => from_f64(dt, to_f64(dt, a) + to_f64(dt, b)),
    }
}

/// `a * b` in the element type's arithmetic.
#[inline]
pub fn mul(dt: DataType, a: u64, b: u64) -> u64 {
    match dt {
        DataType::Float32 => (f32::from_bits(a as u32) * f32::from_bits(b as u32)).to_bits() as u64,
        _ => from_f64(dt, to_f64(dt, a) * to_f64(dt, b)),
    }
}

/// `a < b ? a : b` (min) or `a > b ? a : b` (max) in the element type.
/// Compares the bits directly ([`FloatOrder`]) instead of decoding both
/// values: the generic expected output runs this once per rank and element.
pub fn min_max(dt: DataType, a: u64, b: u64, want_max: bool) -> u64 {
    // Any comparison of non-float types (which decode to 0.0) is false.
    FloatOrder::new(dt).map_or(b, |o| o.min_max(a, b, want_max))
}

/// How the bits of a float type order by value.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FloatOrder {
    l: Layout,
    sign_bit: u64,
    /// Magnitude bits of infinity (e4m3: of the largest finite value).
    inf: u64,
    /// e4m3 has no infinities: only the all-ones magnitude is NaN.
    nan_is_all_ones: bool,
}

impl FloatOrder {
    /// The order of `dt`'s values (None for integer types).
    pub fn new(dt: DataType) -> Option<FloatOrder> {
        let l = layout(dt)?;
        Some(FloatOrder {
            l,
            sign_bit: 1u64 << (l.exp_bits + l.mant_bits),
            inf: ((1u64 << l.exp_bits) - 1) << l.mant_bits,
            nan_is_all_ones: dt == DataType::Float8e4m3,
        })
    }

    /// The format's layout.
    pub fn layout(&self) -> Layout {
        self.l
    }

    /// Whether only the all-ones magnitude is NaN (e4m3, which has no infinities).
    pub fn nan_is_all_ones(&self) -> bool {
        self.nan_is_all_ones
    }

    /// An integer ordered as the value of `bits` (sign-magnitude, with -0
    /// and +0 both 0), and whether `bits` is a NaN. Branch-free: signs of
    /// generated values are random, so a branch would mispredict half the
    /// time.
    #[inline]
    pub fn key(&self, bits: u64) -> (i64, bool) {
        let mag = bits & (self.sign_bit - 1);
        let nan = if self.nan_is_all_ones {
            mag == self.inf | self.l.mant_mask()
        } else {
            mag > self.inf
        };
        let neg = -i64::from(bits & self.sign_bit != 0);
        ((mag as i64 ^ neg) - neg, nan)
    }

    /// [`min_max`] for this type: a comparison with NaN is false, so it
    /// gives `b`.
    #[inline]
    pub fn min_max(&self, a: u64, b: u64, want_max: bool) -> u64 {
        let ((x, a_nan), (y, b_nan)) = (self.key(a), self.key(b));
        let wins = if want_max { x > y } else { x < y };
        std::hint::select_unpredictable(wins & !a_nan & !b_nan, a, b)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use DataType::*;

    #[test]
    fn rounding_to_even_below_2_pow_52() {
        let mut x = 1u64;
        for k in 0..200_000u64 {
            x = crate::nccltests::verifiable::rng::mix_bits(x);
            // Halves (ties), quarters and arbitrary fractions, small and large.
            let v = [
                (k as f64) / 2.0,
                (k as f64) / 4.0,
                (x >> 12) as f64 / (1u64 << (x % 40)) as f64,
                f64::from_bits(x >> 2) % (1u64 << 52) as f64,
            ];
            for v in v
                .into_iter()
                .filter(|v| v.is_finite() && *v >= 0.0 && *v < (1u64 << 52) as f64)
            {
                assert_eq!(round_ties_even_small(v), v.round_ties_even(), "{v}");
            }
        }
    }

    #[test]
    fn powers_of_two_are_exact() {
        for e in -1100..1100 {
            assert_eq!(pow2(e).to_bits(), 2f64.powi(e).to_bits(), "2^{e}");
        }
    }

    #[test]
    fn known_encodings() {
        assert_eq!(from_f64(Float16, 1.0), 0x3c00);
        assert_eq!(from_f64(Float16, 65504.0), 0x7bff);
        assert_eq!(from_f64(Float16, 65520.0), 0x7c00);
        assert_eq!(from_f64(Float16, 2f64.powi(-24)), 0x0001);
        assert_eq!(from_f64(Float16, -2.0), 0xc000);
        assert_eq!(from_f64(Bfloat16, 1.0), 0x3f80);
        assert_eq!(from_f64(Bfloat16, 1.0 + 1.0 / 256.0), 0x3f80); // tie to even
        assert_eq!(from_f64(Bfloat16, 1.0 + 3.0 / 256.0), 0x3f82);
        assert_eq!(from_f64(Float8e4m3, 448.0), 0x7e);
        assert_eq!(from_f64(Float8e4m3, 1000.0), 0x7e);
        assert_eq!(from_f64(Float8e4m3, 1.0), 0x38);
        assert_eq!(from_f64(Float8e4m3, 2f64.powi(-9)), 0x01);
        assert_eq!(from_f64(Float8e5m2, 57344.0), 0x7b);
        assert_eq!(from_f64(Float8e5m2, 1e9), 0x7b);
        assert_eq!(from_f64(Float8e5m2, 1.0), 0x3c);
    }

    #[test]
    fn round_trip_every_small_value() {
        for dt in [Float16, Bfloat16, Float8e4m3, Float8e5m2] {
            let nbits = dt.size() * 8;
            for bits in 0..(1u64 << nbits) {
                let v = to_f64(dt, bits);
                if v.is_nan() || v.is_infinite() {
                    continue;
                }
                let back = from_f64(dt, v);
                let same = back == bits || (v == 0.0 && to_f64(dt, back) == 0.0);
                assert!(same, "{dt:?} bits {bits:#x} -> {v} -> {back:#x}");
            }
        }
    }

    /// The comparison by f64 value that `min_max` must agree with.
    fn min_max_by_value(dt: DataType, a: u64, b: u64, want_max: bool) -> u64 {
        let (x, y) = (to_f64(dt, a), to_f64(dt, b));
        let take_a = if want_max { x > y } else { x < y };
        if take_a { a } else { b }
    }

    #[test]
    fn min_max_compares_by_value() {
        let check = |dt: DataType, a: u64, b: u64| {
            for want_max in [false, true] {
                assert_eq!(
                    min_max(dt, a, b, want_max),
                    min_max_by_value(dt, a, b, want_max),
                    "{dt:?} {a:#x} {b:#x} max={want_max}"
                );
            }
        };
        // Every pair of 8-bit values (NaNs, infinities, both zeros included).
        for dt in [Float8e4m3, Float8e5m2] {
            for a in 0..256 {
                for b in 0..256 {
                    check(dt, a, b);
                }
            }
        }
        // Wider types: specials against a spread of values.
        let mut x = 0x1234_5678_9abc_def0u64;
        for dt in [Float16, Bfloat16, Float32, Float64] {
            let bits = dt.size() as u32 * 8;
            let top = 1u64 << (bits - 1);
            let exp_ones = from_f64(dt, f64::INFINITY);
            let specials = [
                0,
                top,
                exp_ones,
                exp_ones | top,
                exp_ones | 1,
                exp_ones | 1 | top,
                1,
                top | 1,
            ];
            for _ in 0..20_000 {
                x = crate::nccltests::verifiable::rng::mix_bits(x);
                let r = x >> (64 - bits);
                for &s in &specials {
                    check(dt, r, s);
                    check(dt, s, r);
                }
                check(dt, r, r ^ 1);
                check(dt, r, r ^ top);
            }
        }
        // Integers never take `a` (their f64 decoding is 0.0).
        assert_eq!(min_max(Int32, 5, 7, true), 7);
    }

    #[test]
    fn arithmetic() {
        let h = |v| from_f64(Float16, v);
        assert_eq!(add(Float16, h(1.0), h(2.0)), h(3.0));
        assert_eq!(
            mul(
                Float8e4m3,
                from_f64(Float8e4m3, 2.0),
                from_f64(Float8e4m3, 3.0)
            ),
            from_f64(Float8e4m3, 6.0)
        );
        assert_eq!(min_max(Bfloat16, h(1.0), h(2.0), true), h(2.0));
    }
}
