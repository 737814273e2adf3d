//! Number formatting through the C library's `snprintf`.
//!
//! nccl-tests prints with glibc's printf (`%g`, `%.1e`, `%lf`, widths and
//! precisions); scripts that parse its output depend on those exact strings
//! (exponent digits, `%g` trimming, round-half-even on exact ties). Calling
//! the same `snprintf` guarantees byte-identical text where a Rust
//! re-implementation of `%g` would risk subtle differences.

use std::ffi::CStr;

/// Formats one `double` with a printf conversion such as `c"%6g"`.
///
/// `fmt` must contain exactly one conversion that consumes a `double` (the
/// formats used in this crate are constants checked by tests).
pub fn f64_with(fmt: &CStr, value: f64) -> String {
    let mut buf = [0u8; 128];
    // SAFETY: `buf` is writable for `buf.len()` bytes and snprintf never writes
    // more than that (it truncates and NUL-terminates). `fmt` is a valid C
    // string whose only conversion consumes a double, which we pass.
    let n = unsafe { libc::snprintf(buf.as_mut_ptr().cast(), buf.len(), fmt.as_ptr(), value) };
    let len = usize::try_from(n).unwrap_or(0).min(buf.len() - 1);
    String::from_utf8_lossy(&buf[..len]).into_owned()
}

/// `%g`.
pub fn g(value: f64) -> String {
    f64_with(c"%g", value)
}

/// `%lf` (six decimals), as nccl-tests writes doubles into JSON.
pub fn lf(value: f64) -> String {
    f64_with(c"%lf", value)
}

/// nccl-tests' `getFloatStr`: the first of `%.2f`, `%.1f`, `%.0f` whose text
/// fits in `width` columns, else `%.1e` (width >= 7) or `%.0e`, right-aligned.
pub fn float_str(value: f64, width: usize) -> String {
    let fits = |s: &String| s.len() <= width;
    for fmt in [c"%.2f", c"%.1f", c"%.0f"] {
        let s = pad(f64_with(fmt, value), width);
        if fits(&s) {
            return s;
        }
    }
    let s = if width >= 7 {
        f64_with(c"%.1e", value)
    } else {
        f64_with(c"%.0e", value)
    };
    // snprintf(str, width+1, ...) truncates to `width` characters.
    let mut s = pad(s, width);
    s.truncate(width);
    s
}

fn pad(s: String, width: usize) -> String {
    format!("{s:>width$}")
}

/// The local time as `"%Y-%m-%d %H:%M:%S"` (nccl-tests' `formatNow`).
pub fn now_string() -> String {
    let mut buf = [0u8; 64];
    // SAFETY: time(NULL) has no preconditions; localtime_r writes only into
    // `tm`, which we own; strftime writes at most `buf.len()` bytes into buf
    // and the format is a valid C string.
    let n = unsafe {
        let now = libc::time(std::ptr::null_mut());
        let mut tm: libc::tm = std::mem::zeroed();
        if libc::localtime_r(&now, &mut tm).is_null() {
            return String::new();
        }
        libc::strftime(
            buf.as_mut_ptr().cast(),
            buf.len(),
            c"%Y-%m-%d %H:%M:%S".as_ptr(),
            &tm,
        )
    };
    String::from_utf8_lossy(&buf[..n.min(buf.len())]).into_owned()
}

/// The current UTC time as RFC 3339 (`2026-12-03T09:41:07Z`), the date
/// every tool's JSON carries so results from many hosts compare.
pub fn rfc3339_utc_now() -> String {
    let mut buf = [0u8; 64];
    // SAFETY: as in now_string: time(NULL) has no preconditions, gmtime_r
    // writes only into `tm`, strftime at most `buf.len()` bytes into buf.
    let n = unsafe {
        let now = libc::time(std::ptr::null_mut());
        let mut tm: libc::tm = std::mem::zeroed();
        if libc::gmtime_r(&now, &mut tm).is_null() {
            return String::new();
        }
        libc::strftime(
            buf.as_mut_ptr().cast(),
            buf.len(),
            c"%Y-%m-%dT%H:%M:%SZ".as_ptr(),
            &tm,
        )
    };
    String::from_utf8_lossy(&buf[..n.min(buf.len())]).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn g_matches_printf() {
        assert_eq!(g(0.0), "0");
        assert_eq!(g(2138.6), "2138.6");
        assert_eq!(g(1234567.0), "1.23457e+06");
        assert_eq!(g(0.0001), "0.0001");
        assert_eq!(g(f64::NAN), "nan");
        assert_eq!(f64_with(c"%6g", 3.0), "     3");
    }

    #[test]
    fn float_str_rules() {
        assert_eq!(float_str(7.23, 7), "   7.23");
        assert_eq!(float_str(1004.16, 7), "1004.16");
        assert_eq!(float_str(12345.678, 7), "12345.7");
        assert_eq!(float_str(1234567.0, 7), "1234567");
        assert_eq!(float_str(12345678.0, 7), "1.2e+07");
        assert_eq!(float_str(5229.8, 6), "5229.8");
        assert_eq!(float_str(20808.0, 6), " 20808");
        assert_eq!(float_str(370818.0, 6), "370818");
        assert_eq!(float_str(1299457.6, 6), " 1e+06");
        assert_eq!(float_str(0.0, 6), "  0.00");
        assert_eq!(float_str(f64::INFINITY, 6), "   inf");
    }

    #[test]
    fn rfc3339_shape() {
        let d = rfc3339_utc_now();
        let b = d.as_bytes();
        assert_eq!(d.len(), 20, "{d}");
        assert_eq!(
            (b[4], b[7], b[10], b[13], b[16], b[19]),
            (b'-', b'-', b'T', b':', b':', b'Z')
        );
    }

    #[test]
    fn lf_six_decimals() {
        assert_eq!(lf(505.0912), "505.091200");
        assert_eq!(lf(0.0), "0.000000");
    }
}
