//! C library number parsing, reproduced exactly: nccl-tests reads its options
//! with `strtol(s, NULL, 0)`, `atoi`, `atof` and `sscanf("%lf %1s")`, which
//! accept a numeric prefix and ignore the rest. A drop-in replacement must
//! accept (and reject) the same strings, so these never fail: like C they
//! return 0 when no digits are found.

/// `strtol(s, NULL, base)` for base 0 (auto: `0x` hex, `0` octal, decimal) or
/// 2..=36: skips leading white space, takes an optional sign, reads the
/// longest valid digit prefix and saturates at `i64::MIN`/`i64::MAX` like
/// glibc's `long` on x86-64. Returns 0 when no digits are found.
pub fn strtol(s: &str, base: u32) -> i64 {
    let (neg, mag) = parse_magnitude(s, base);
    match mag {
        Some(m) if neg => {
            if m > (i64::MAX as u64) + 1 {
                i64::MIN
            } else {
                (m as i64).wrapping_neg()
            }
        }
        Some(m) => i64::try_from(m).unwrap_or(i64::MAX),
        None if neg => i64::MIN,
        None => i64::MAX,
    }
}

/// `strtoul(s, NULL, base)`: like [`strtol`] but unsigned; a leading minus
/// negates in unsigned arithmetic, as C does.
pub fn strtoul(s: &str, base: u32) -> u64 {
    let (neg, mag) = parse_magnitude(s, base);
    let m = mag.unwrap_or(u64::MAX);
    if neg && mag.is_some() {
        m.wrapping_neg()
    } else {
        m
    }
}

/// `atoi(s)`: `(int)strtol(s, NULL, 10)`.
pub fn atoi(s: &str) -> i32 {
    strtol(s, 10) as i32
}

/// Parses sign and digits; returns (negative, Some(value)) or (negative, None)
/// on overflow. No digits gives (false, Some(0)).
fn parse_magnitude(s: &str, base: u32) -> (bool, Option<u64>) {
    let b = s.trim_start_matches(is_c_space).as_bytes();
    let (neg, mut i) = sign_prefix(b);
    let mut radix = base;
    let has_hex_prefix = b.len() > i + 2
        && b[i] == b'0'
        && (b[i + 1] | 0x20) == b'x'
        && (b[i + 2] as char).is_ascii_hexdigit();
    if (radix == 0 || radix == 16) && has_hex_prefix {
        radix = 16;
        i += 2;
    } else if radix == 0 {
        radix = if b.get(i) == Some(&b'0') { 8 } else { 10 };
    }
    if !(2..=36).contains(&radix) {
        return (false, Some(0));
    }
    let start = i;
    let mut acc: Option<u64> = Some(0);
    while let Some(d) = b.get(i).and_then(|&c| (c as char).to_digit(radix)) {
        acc = acc
            .and_then(|a| a.checked_mul(radix as u64))
            .and_then(|a| a.checked_add(d as u64));
        i += 1;
    }
    if i == start {
        return (false, Some(0));
    }
    (neg, acc)
}

/// An optional leading `+` or `-`: (negative, bytes it takes).
fn sign_prefix(b: &[u8]) -> (bool, usize) {
    match b.first() {
        Some(b'-') => (true, 1),
        Some(b'+') => (false, 1),
        _ => (false, 0),
    }
}

/// C's `isspace` in the "C" locale.
fn is_c_space(c: char) -> bool {
    matches!(c, ' ' | '\t' | '\n' | '\x0b' | '\x0c' | '\r')
}

/// `strtod` prefix parse: returns the value and the number of bytes used (0
/// when no number was found). Handles decimal and hexadecimal forms, `inf`,
/// `infinity` and `nan`, as glibc does.
pub fn strtod_prefix(s: &str) -> (f64, usize) {
    let skipped = s.len() - s.trim_start_matches(is_c_space).len();
    let b = &s.as_bytes()[skipped..];
    let (neg, i) = sign_prefix(b);
    let sign = if neg { -1.0 } else { 1.0 };
    let rest = &b[i..];
    if let Some(n) = special_value(rest) {
        return (sign * n.0, skipped + i + n.1);
    }
    let parsed = if rest.len() > 1 && rest[0] == b'0' && (rest[1] | 0x20) == b'x' {
        hex_float(&rest[2..])
            .map(|(v, n)| (v, n + 2))
            .or(Some((0.0, 1)))
    } else {
        dec_float(rest)
    };
    match parsed {
        Some((v, n)) => (sign * v, skipped + i + n),
        None => (0.0, 0),
    }
}

/// `atof(s)`: `strtod(s, NULL)`.
pub fn atof(s: &str) -> f64 {
    strtod_prefix(s).0
}

fn special_value(b: &[u8]) -> Option<(f64, usize)> {
    let lower: Vec<u8> = b.iter().take(8).map(|c| c.to_ascii_lowercase()).collect();
    if lower.starts_with(b"infinity") {
        Some((f64::INFINITY, 8))
    } else if lower.starts_with(b"inf") {
        Some((f64::INFINITY, 3))
    } else if lower.starts_with(b"nan") {
        Some((f64::NAN, 3))
    } else {
        None
    }
}

/// Longest `digits[.digits][e[sign]digits]` prefix, parsed by Rust's
/// correctly rounded parser (glibc's strtod is correctly rounded too).
fn dec_float(b: &[u8]) -> Option<(f64, usize)> {
    let digits = |from: usize| b[from..].iter().take_while(|c| c.is_ascii_digit()).count();
    let int_len = digits(0);
    let mut i = int_len;
    let mut frac_len = 0;
    if b.get(i) == Some(&b'.') {
        frac_len = digits(i + 1);
        if int_len + frac_len > 0 {
            i += 1 + frac_len;
        }
    }
    if int_len + frac_len == 0 {
        return None;
    }
    if matches!(b.get(i), Some(b'e') | Some(b'E')) {
        let mut j = i + 1;
        if matches!(b.get(j), Some(b'+') | Some(b'-')) {
            j += 1;
        }
        let exp_len = digits(j);
        if exp_len > 0 {
            i = j + exp_len;
        }
    }
    let text = std::str::from_utf8(&b[..i]).ok()?;
    Some((text.parse::<f64>().unwrap_or(0.0), i))
}

/// Hexadecimal float after the `0x`: `h[.h][p[sign]d]`.
fn hex_float(b: &[u8]) -> Option<(f64, usize)> {
    let mut mant = 0.0f64;
    let mut i = 0;
    let mut any = false;
    while let Some(d) = b.get(i).and_then(|&c| (c as char).to_digit(16)) {
        mant = mant * 16.0 + d as f64;
        i += 1;
        any = true;
    }
    let mut scale = 0i32;
    if b.get(i) == Some(&b'.') {
        let mut j = i + 1;
        while let Some(d) = b.get(j).and_then(|&c| (c as char).to_digit(16)) {
            mant = mant * 16.0 + d as f64;
            scale -= 4;
            j += 1;
            any = true;
        }
        if any {
            i = j;
        }
    }
    if !any {
        return None;
    }
    if matches!(b.get(i), Some(b'p') | Some(b'P')) {
        let mut j = i + 1;
        let neg = b.get(j) == Some(&b'-');
        if matches!(b.get(j), Some(b'+') | Some(b'-')) {
            j += 1;
        }
        let n = b[j..].iter().take_while(|c| c.is_ascii_digit()).count();
        if n > 0 {
            let e: i32 = std::str::from_utf8(&b[j..j + n])
                .ok()?
                .parse()
                .unwrap_or(i32::MAX);
            scale = scale.saturating_add(if neg { -e } else { e });
            i = j + n;
        }
    }
    Some((mant * 2f64.powi(scale), i))
}

/// nccl-tests' `parsesize`: `sscanf(value, "%lf %1s", &size, &lit)` with a
/// binary K/M/G suffix (any case). Returns -1.0 for unparsable text or an
/// unknown suffix, exactly like the original (callers reject values < 0).
pub fn parse_size(value: &str) -> f64 {
    let (size, used) = strtod_prefix(value);
    if used == 0 {
        return -1.0;
    }
    let rest = value[used..].trim_start_matches(is_c_space);
    let units = match rest.chars().next() {
        None => 1.0,
        Some('G' | 'g') => 1024.0 * 1024.0 * 1024.0,
        Some('M' | 'm') => 1024.0 * 1024.0,
        Some('K' | 'k') => 1024.0,
        Some(_) => return -1.0,
    };
    size * units
}

/// C's conversion of a double to `size_t` for the values parse_size accepts
/// (non-negative); NaN, which C leaves undefined, becomes 0.
pub fn f64_to_size(v: f64) -> u64 {
    v as u64
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn strtol_matches_c() {
        assert_eq!(strtol("12", 0), 12);
        assert_eq!(strtol("  -7xyz", 0), -7);
        assert_eq!(strtol("0x1f", 0), 31);
        assert_eq!(strtol("010", 0), 8);
        assert_eq!(strtol("09", 0), 0);
        assert_eq!(strtol("abc", 0), 0);
        assert_eq!(strtol("", 0), 0);
        assert_eq!(strtol("0x", 0), 0);
        assert_eq!(strtol("99999999999999999999", 0), i64::MAX);
        assert_eq!(strtol("-99999999999999999999", 0), i64::MIN);
        assert_eq!(strtol("+5", 10), 5);
        assert_eq!(strtol("ff", 16), 255);
    }

    #[test]
    fn strtoul_and_atoi() {
        assert_eq!(strtoul("ff", 16), 255);
        assert_eq!(strtoul("-1", 10), u64::MAX);
        assert_eq!(atoi("3"), 3);
        assert_eq!(atoi("4294967297"), 1);
        assert_eq!(atoi("x"), 0);
    }

    #[test]
    fn strtod_forms() {
        assert_eq!(strtod_prefix("1.5e3x"), (1500.0, 5));
        assert_eq!(strtod_prefix(" 8"), (8.0, 2));
        assert_eq!(strtod_prefix("0x10"), (16.0, 4));
        assert_eq!(strtod_prefix("0x1p4"), (16.0, 5));
        assert_eq!(strtod_prefix("."), (0.0, 0));
        assert_eq!(strtod_prefix("5."), (5.0, 2));
        assert_eq!(strtod_prefix("1e"), (1.0, 1));
        assert!(strtod_prefix("inf").0.is_infinite());
        assert!(strtod_prefix("nan").0.is_nan());
        assert_eq!(atof("2.5GB"), 2.5);
        assert_eq!(atof("junk"), 0.0);
    }

    #[test]
    fn parse_size_like_nccl_tests() {
        assert_eq!(parse_size("8"), 8.0);
        assert_eq!(parse_size("32M"), 33554432.0);
        assert_eq!(parse_size("1G"), 1073741824.0);
        assert_eq!(parse_size("8g"), 8589934592.0);
        assert_eq!(parse_size("1.5k"), 1536.0);
        assert_eq!(parse_size("2 K"), 2048.0);
        assert_eq!(parse_size("1Gfoo"), 1073741824.0);
        assert_eq!(parse_size("1T"), -1.0);
        assert_eq!(parse_size("M"), -1.0);
        assert_eq!(parse_size(""), -1.0);
        assert_eq!(parse_size("-4"), -4.0);
        assert_eq!(f64_to_size(1.9), 1);
    }
}
