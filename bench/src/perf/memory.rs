//! The test buffers: where they live (host or GPU), their layout (perftest's
//! cycle buffer), the data pattern `--verify` checks, and reads of memory a
//! peer writes.
//!
//! Layout (perftest's `alloc_ctx`, `increase_loc_addr`/`increase_rem_addr`):
//! each QP owns a `stride` of `INC(BUFF_SIZE(size, cycle), cache_line)` bytes;
//! messages up to half the cycle buffer (the page size) go to successive
//! cache-line-aligned slots inside the first `cycle` bytes, larger ones always
//! to the start. The peer may access `window = BUFF_SIZE(size, cycle)` bytes
//! from the advertised address.

use erdma::{AlignedBuffer, LocalSlice, MemoryRegion, RemoteBuffer};

use super::error::{Context, PerfError, PerfResult};
use super::gpu::GpuRegion;

/// perftest's cycle-buffer arithmetic, for the largest size of the run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Layout {
    /// The cycle buffer (the larger page size of both sides).
    pub cycle: u64,
    /// The cache-line size (the larger of both sides).
    pub line: u64,
    /// Bytes per QP.
    pub stride: u64,
    /// Bytes of a QP's area a peer may access.
    pub window: u64,
}

impl Layout {
    /// The layout for messages up to `max_size`.
    pub fn new(cycle: u64, line: u64, max_size: u64) -> Layout {
        let window = max_size.max(cycle);
        Layout {
            cycle,
            line,
            stride: inc(window, line),
            window,
        }
    }

    /// Distance between successive messages of `size` (`INC`).
    pub fn inc(&self, size: u64) -> u64 {
        inc(size, self.line)
    }

    /// How many slots messages of `size` cycle through.
    pub fn slots(&self, size: u64) -> u64 {
        if size <= self.cycle / 2 {
            (self.cycle / self.inc(size)).max(1)
        } else {
            1
        }
    }

    /// Offset, inside a QP's area, of message number `n` of `size`.
    pub fn slot_offset(&self, n: u64, size: u64) -> u64 {
        (n % self.slots(size)) * self.inc(size)
    }
}

/// perftest's `INC`: `size` rounded up to the cache line (at least one).
pub fn inc(size: u64, line: u64) -> u64 {
    if size > line {
        size.div_ceil(line) * line
    } else {
        line
    }
}

/// What a region holds, for its data pattern.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Salt {
    /// The sender's source buffer.
    Source = 0x5a,
    /// The buffer a READ fetches from.
    Exposed = 0xa5,
}

/// [`corrupt_next_check`]'s one-shot flag.
static CORRUPT_NEXT: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// Test hook (erdma-cluster's `ERDMA_CLUSTER_HOOK=corrupt:R`): the next
/// block `--verify` checks in this process reads as if its first byte had
/// arrived flipped, as a corrupted transfer would, so that the failure
/// path is tested without a broken NIC.
pub fn corrupt_next_check() {
    CORRUPT_NEXT.store(true, std::sync::atomic::Ordering::Relaxed);
}

/// The byte `--verify` expects at `offset` of QP `qp`'s area of a region.
#[inline]
pub fn pattern(qp: u32, offset: u64, salt: Salt) -> u8 {
    let x = (offset as u32).wrapping_mul(0x9E37_79B1)
        ^ qp.wrapping_mul(0x85EB_CA6B)
        ^ (offset >> 32) as u32;
    ((x >> 24) as u8) ^ (x as u8) ^ salt as u8
}

/// A registered test buffer.
pub enum Region {
    /// Host memory (page-aligned, zeroed).
    Host(MemoryRegion<AlignedBuffer>),
    /// GPU memory.
    Gpu(GpuRegion),
}

impl Region {
    /// Length in bytes.
    pub fn len(&self) -> usize {
        match self {
            Region::Host(m) => m.len(),
            Region::Gpu(g) => g.mr().len(),
        }
    }

    /// Whether the region is empty (never).
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// rkey.
    pub fn rkey(&self) -> u32 {
        match self {
            Region::Host(m) => m.rkey(),
            Region::Gpu(g) => g.mr().rkey(),
        }
    }

    /// Start address (what the peer uses).
    pub fn addr(&self) -> u64 {
        match self {
            Region::Host(m) => m.addr(),
            Region::Gpu(g) => g.mr().addr(),
        }
    }

    /// `len` bytes at `offset` as a scatter/gather entry.
    #[inline]
    pub fn slice(&self, offset: u64, len: u64) -> PerfResult<LocalSlice<'_>> {
        let (a, b) = (offset as usize, (offset + len) as usize);
        match self {
            Region::Host(m) => m.slice(a..b),
            Region::Gpu(g) => g.mr().slice(a..b),
        }
        .ctx(|| format!("the buffer range {a}..{b}"))
    }

    /// The remote descriptor of `len` bytes at `offset`.
    pub fn remote(&self, offset: u64, len: u64) -> RemoteBuffer {
        RemoteBuffer {
            addr: self.addr() + offset,
            rkey: self.rkey(),
            len,
        }
    }

    /// Fills each QP's area (`stride` bytes each) with its pattern.
    pub fn fill_pattern(&mut self, stride: u64, salt: Salt) -> PerfResult<()> {
        let len = self.len();
        let mut host = vec![0u8; len];
        for (i, b) in host.iter_mut().enumerate() {
            let (qp, off) = ((i as u64 / stride) as u32, i as u64 % stride);
            *b = pattern(qp, off, salt);
        }
        self.write(0, &host)
    }

    /// Copies `data` to `offset` (requests in flight send whatever the
    /// memory holds when the device reads it).
    #[inline]
    pub fn write(&mut self, offset: usize, data: &[u8]) -> PerfResult<()> {
        match self {
            Region::Host(m) => m
                .write_at(offset, data)
                .ctx(|| format!("write {} bytes at {offset} of the buffer", data.len())),
            Region::Gpu(g) => g.write(offset, data),
        }
    }

    /// Copies `out.len()` bytes at `offset` (volatile copies for host
    /// memory: valid at any time, complete once the completion or message
    /// saying so arrived).
    #[inline]
    pub fn read(&self, offset: usize, out: &mut [u8]) -> PerfResult<()> {
        match self {
            Region::Host(m) => m
                .read_at(offset, out)
                .ctx(|| format!("read {} bytes at {offset} of the buffer", out.len())),
            Region::Gpu(g) => g.read(offset, out),
        }
    }

    /// One byte (write_lat's polling, iWARP credits).
    #[inline]
    pub fn byte(&self, offset: usize) -> PerfResult<u8> {
        match self {
            Region::Host(m) => m
                .read_byte(offset)
                .ctx(|| format!("read byte {offset} of the buffer")),
            Region::Gpu(_) => {
                let mut b = [0u8];
                self.read(offset, &mut b)?;
                Ok(b[0])
            }
        }
    }

    /// Sets the byte at `offset` (write_lat's message counter).
    #[inline]
    pub fn set_byte(&mut self, offset: usize, byte: u8) -> PerfResult<()> {
        match self {
            Region::Host(m) => m
                .write_byte(offset, byte)
                .ctx(|| format!("write byte {offset} of the buffer")),
            Region::Gpu(_) => self.write(offset, &[byte]),
        }
    }
}

/// Compares `got` with the pattern expected at `offset` of QP `qp`'s area;
/// the first wrong byte as an error naming where.
pub fn check_pattern(
    got: &[u8],
    qp: u32,
    offset: u64,
    salt: Salt,
    what: impl Fn() -> String,
) -> PerfResult<()> {
    let flip = CORRUPT_NEXT.swap(false, std::sync::atomic::Ordering::Relaxed);
    for (i, &b) in got.iter().enumerate() {
        // The test hook: the first byte checked arrives flipped.
        let b = if flip && i == 0 { !b } else { b };
        let want = pattern(qp, offset + i as u64, salt);
        if b != want {
            return Err(PerfError::Verify(format!(
                "{}: byte {i} is {b:#04x}, expected {want:#04x} (QP {qp}): the data was corrupted or the peer \
                 sent other data",
                what()
            )));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn perftest_cycle_buffer_arithmetic() {
        let l = Layout::new(4096, 64, 65536);
        assert_eq!((l.window, l.stride), (65536, 65536));
        assert_eq!(l.slots(65536), 1);
        assert_eq!(l.slot_offset(7, 65536), 0);
        let l = Layout::new(4096, 64, 2);
        assert_eq!((l.window, l.stride), (4096, 4096));
        assert_eq!(l.inc(2), 64);
        assert_eq!(l.slots(2), 64);
        assert_eq!(l.slot_offset(65, 2), 64);
        assert_eq!(l.slots(2048), 2);
        assert_eq!(l.slots(2049), 1);
        assert_eq!(inc(100, 64), 128);
        let l = Layout::new(4096, 64, 5000);
        assert_eq!((l.window, l.stride), (5000, 5056));
    }

    #[test]
    fn pattern_differs_by_qp_offset_and_salt() {
        let a: Vec<u8> = (0..64).map(|o| pattern(0, o, Salt::Source)).collect();
        let b: Vec<u8> = (0..64).map(|o| pattern(1, o, Salt::Source)).collect();
        let c: Vec<u8> = (0..64).map(|o| pattern(0, o, Salt::Exposed)).collect();
        assert_ne!(a, b);
        assert_ne!(a, c);
        assert!(a.iter().collect::<std::collections::HashSet<_>>().len() > 16);
        assert!(check_pattern(&a, 0, 0, Salt::Source, || "x".into()).is_ok());
        let mut bad = a.clone();
        bad[5] ^= 1;
        let e = check_pattern(&bad, 0, 0, Salt::Source, || "message 3".into()).unwrap_err();
        assert_eq!(e.exit_code(), 7);
        assert!(e.to_string().contains("message 3: byte 5"), "{e}");
    }
}
