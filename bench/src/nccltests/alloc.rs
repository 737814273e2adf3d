//! Fallible host allocations, for every buffer whose size comes from the
//! command line (`-e 100G`, `-e 1e30`) or from a peer: a size that does not
//! fit is a one-line error with exit status 2 (as nccl-tests' failed
//! `cudaMalloc`), never an abort.

use std::alloc::{Layout, alloc_zeroed};

use super::errors::{TestError, TestResult};

/// `len` zero bytes (`calloc`: pages are mapped lazily, as with `vec![0; n]`),
/// or [`TestError::HostMemory`] naming `what`.
pub fn zeroed(len: usize, what: &str) -> TestResult<Vec<u8>> {
    if len == 0 {
        return Ok(Vec::new());
    }
    let layout = Layout::array::<u8>(len).map_err(|_| TestError::host_memory(what, len as u128))?;
    // SAFETY: the layout has a non-zero size (len > 0).
    let ptr = unsafe { alloc_zeroed(layout) };
    if ptr.is_null() {
        return Err(TestError::host_memory(what, len as u128));
    }
    // SAFETY: `ptr` was allocated by the global allocator with the layout of
    // `len` u8 (so capacity `len`, alignment 1), and its `len` bytes are
    // initialized (zeroed), which is a valid u8 each.
    Ok(unsafe { Vec::from_raw_parts(ptr, len, len) })
}

/// `len` copies of `value` in a new Vec, or [`TestError::HostMemory`].
pub fn filled<T: Clone>(len: usize, value: T, what: &str) -> TestResult<Vec<T>> {
    let mut v = Vec::new();
    v.try_reserve_exact(len).map_err(|_| {
        TestError::host_memory(what, len as u128 * std::mem::size_of::<T>() as u128)
    })?;
    v.resize(len, value);
    Ok(v)
}

/// `a * b` bytes, or [`TestError::HostMemory`] when that overflows.
pub fn product(a: usize, b: usize, what: &str) -> TestResult<usize> {
    a.checked_mul(b)
        .ok_or_else(|| TestError::host_memory(what, a as u128 * b as u128))
}

/// MemAvailable of `/proc/meminfo`, in bytes (None when unreadable).
pub fn mem_available() -> Option<u64> {
    let text = crate::input::read_text("/proc/meminfo").ok()?;
    meminfo_available(&text)
}

fn meminfo_available(meminfo: &str) -> Option<u64> {
    let kb: u64 = meminfo
        .lines()
        .find_map(|l| l.strip_prefix("MemAvailable:"))?
        .trim()
        .trim_end_matches("kB")
        .trim()
        .parse()
        .ok()?;
    kb.checked_mul(1024)
}

/// Refuses, before anything is allocated, `ranks` ranks of `buffers`
/// host buffers of `bytes` each when they exceed `available` memory: with
/// overcommit the allocation itself succeeds and the run then thrashes or
/// meets the OOM killer. `available` None (unknown) accepts.
pub fn check_fits(
    bytes: usize,
    buffers: usize,
    ranks: usize,
    available: Option<u64>,
) -> TestResult<()> {
    let need = (bytes as u128)
        .saturating_mul(buffers as u128)
        .saturating_mul(ranks as u128);
    match available {
        Some(a) if need > a as u128 => Err(TestError::HostMemory {
            what: format!(
                "malloc({need}) for {buffers} buffers of {bytes} bytes on each of {ranks} rank(s) of this process"
            ),
            msg: format!(
                "out of memory: this host cannot hold the buffers of its ranks (MemAvailable {a} bytes); lower -e (or start fewer ranks per host)"
            ),
        }),
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn impossible_sizes_are_errors() {
        let e = zeroed(usize::MAX, "the send buffer").unwrap_err();
        assert_eq!(e.exit_code(), 2);
        assert!(
            e.to_string().starts_with(&format!(
                "Test host memory failure malloc({}) for the send buffer 'out of memory",
                usize::MAX
            )),
            "{e}"
        );
        assert!(zeroed(isize::MAX as usize, "x").is_err());
        assert!(filled(usize::MAX / 4, 0u64, "x").is_err());
        assert!(product(usize::MAX, 2, "x").is_err());
        let v = zeroed(4096, "x").unwrap();
        assert!(v.len() == 4096 && v.iter().all(|&b| b == 0));
        assert!(zeroed(0, "x").unwrap().is_empty());
        assert_eq!(filled(3, 7u8, "x").unwrap(), vec![7, 7, 7]);
    }

    #[test]
    fn buffers_are_checked_against_available_memory() {
        let info = "MemTotal:       24000000 kB\nMemAvailable:   23000000 kB\n";
        let a = meminfo_available(info);
        assert_eq!(a, Some(23_000_000 * 1024));
        let g20 = 20usize << 30;
        let e = check_fits(g20, 2, 1, a).unwrap_err();
        assert_eq!(e.exit_code(), 2);
        assert!(e.to_string().contains("MemAvailable"), "{e}");
        assert!(check_fits(1 << 30, 2, 4, a).is_ok());
        assert!(check_fits(usize::MAX, 3, usize::MAX, a).is_err());
        assert!(check_fits(g20, 2, 1, None).is_ok());
        assert!(meminfo_available("MemTotal: 1 kB\n").is_none());
    }
}
