//! Host identity, as nccl-tests computes it: the host name up to its first
//! dot, and a hash of that name plus the kernel boot id (so containers on
//! one host share a hash, and rebooted hosts with recycled names do not).

/// `getHostName`: gethostname, cut at the first '.'.
pub fn short_hostname() -> String {
    let mut buf = [0u8; 1024];
    // SAFETY: buf is writable for its whole length; gethostname writes at
    // most that many bytes.
    let rc = unsafe { libc::gethostname(buf.as_mut_ptr().cast(), buf.len()) };
    if rc != 0 {
        return String::from("unknown");
    }
    let end = buf
        .iter()
        .position(|&b| b == 0 || b == b'.')
        .unwrap_or(buf.len());
    String::from_utf8_lossy(&buf[..end]).into_owned()
}

/// The first word of /proc/sys/kernel/random/boot_id ("" if unreadable).
pub fn boot_id() -> String {
    crate::input::read_text("/proc/sys/kernel/random/boot_id")
        .map(|s| s.split_whitespace().next().unwrap_or("").to_string())
        .unwrap_or_default()
}

/// `getHostHash`: djb2-xor over `hostname + boot_id` (bytes as signed
/// chars, as the C code reads them).
pub fn host_hash(hostname: &str, boot_id: &str) -> u64 {
    let mut s = format!("{hostname}{boot_id}").into_bytes();
    s.truncate(1023);
    s.iter().fold(5381u64, |h, &c| {
        (h << 5).wrapping_add(h) ^ (c as i8 as i64 as u64)
    })
}

/// This host's hash.
pub fn this_host_hash() -> u64 {
    host_hash(&short_hostname(), &boot_id())
}

/// The local rank: how many earlier processes share this host's hash.
pub fn local_rank(hashes: &[u64], me: usize) -> usize {
    hashes
        .iter()
        .take(me)
        .filter(|&&h| Some(&h) == hashes.get(me))
        .count()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn djb2_xor() {
        assert_eq!(host_hash("", ""), 5381);
        assert_eq!(host_hash("a", ""), (5381u64 * 33) ^ 97);
        assert_ne!(host_hash("vm", "x"), host_hash("vm", "y"));
    }

    #[test]
    fn local_ranks() {
        let h = [7, 9, 7, 7, 9];
        let lr: Vec<usize> = (0..5).map(|i| local_rank(&h, i)).collect();
        assert_eq!(lr, vec![0, 0, 1, 2, 1]);
        assert!(!short_hostname().contains('.'));
    }
}
