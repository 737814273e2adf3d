//! Host memory of a region, read and written by the CPU: as a Rust slice
//! only when no request uses it and no peer may write it, else by volatile
//! copies, which never put memory a device writes behind a reference.

use crate::error::{Error, Result};

use super::*;

impl<B: HostMemory> MemoryRegion<B> {
    /// The bytes, when no posted request uses the region ([`Error::Busy`])
    /// and no peer may write it ([`Error::RemotelyWritable`]: use
    /// [`MemoryRegion::read_at`]/[`MemoryRegion::to_vec`], or take the buffer
    /// back with [`MemoryRegion::into_inner`]). `&mut self` guarantees nothing
    /// is posted with it while the slice lives.
    pub fn as_slice(&mut self) -> Result<&[u8]> {
        self.check_local("MemoryRegion::as_slice")?;
        // SAFETY: host memory of len bytes (HostMemory) with the buffer's
        // provenance, registered and owned by the region; no request uses it
        // (checked, acquire-ordered), none can be posted while the borrow of
        // self lives, and no peer may write it (checked).
        Ok(unsafe { std::slice::from_raw_parts(self.inner.ptr.0, self.inner.len) })
    }

    /// The bytes, writable, under the conditions of [`MemoryRegion::as_slice`].
    pub fn as_mut_slice(&mut self) -> Result<&mut [u8]> {
        self.check_local("MemoryRegion::as_mut_slice")?;
        // SAFETY: as in as_slice; &mut self is exclusive.
        Ok(unsafe { std::slice::from_raw_parts_mut(self.inner.ptr.0, self.inner.len) })
    }

    /// The bytes as a slice, without the checks of [`MemoryRegion::as_slice`].
    ///
    /// # Safety
    /// While the slice lives, nothing may write the memory: no posted
    /// request that writes it (a receive, READ or atomic result) may be
    /// outstanding, and no peer may RDMA WRITE or run atomics on it (e.g. the
    /// protocol guarantees the peer is done until this side says otherwise).
    pub unsafe fn as_slice_unchecked(&self) -> &[u8] {
        // SAFETY: host memory owned by the region; the caller guarantees no
        // writer while the slice lives.
        unsafe { std::slice::from_raw_parts(self.inner.ptr.0, self.inner.len) }
    }

    /// The bytes as a mutable slice, without the checks of
    /// [`MemoryRegion::as_mut_slice`].
    ///
    /// # Safety
    /// While the slice lives, nothing else may read or write the memory: no
    /// posted request may use it, and no peer may access it remotely.
    pub unsafe fn as_mut_slice_unchecked(&mut self) -> &mut [u8] {
        // SAFETY: as in as_slice_unchecked; &mut self is exclusive locally.
        unsafe { std::slice::from_raw_parts_mut(self.inner.ptr.0, self.inner.len) }
    }

    /// Copies `dst.len()` bytes from `offset` into `dst`. Works at any time,
    /// also while requests or peers write the region (the bytes are then
    /// whatever the memory held, possibly torn): read after the completion or
    /// message that says the data is complete.
    pub fn read_at(&self, offset: usize, dst: &mut [u8]) -> Result<()> {
        let (offset, len) = self.copy_range("MemoryRegion::read_at", offset, dst.len())?;
        // SAFETY: offset..offset+len lies in the region's host memory, which
        // it owns and keeps allocated; volatile reads create no reference to
        // memory the device may be writing.
        unsafe { volatile_read(self.inner.ptr.0.add(offset), &mut dst[..len]) };
        Ok(())
    }

    /// The whole region, copied (see [`MemoryRegion::read_at`]).
    pub fn to_vec(&self) -> Vec<u8> {
        let mut v = vec![0u8; self.inner.len];
        // SAFETY: the whole range of the region, as in read_at.
        unsafe { volatile_read(self.inner.ptr.0, &mut v) };
        v
    }

    /// Copies `src` into the region at `offset`. Works at any time, also
    /// while requests read the region (they then send whatever the memory
    /// held); `&mut self` excludes other local readers and writers.
    pub fn write_at(&mut self, offset: usize, src: &[u8]) -> Result<()> {
        let (offset, len) = self.copy_range("MemoryRegion::write_at", offset, src.len())?;
        // SAFETY: as in read_at, for writes; &mut self excludes local access.
        unsafe { volatile_write(self.inner.ptr.0.add(offset), &src[..len]) };
        Ok(())
    }

    /// The byte at `offset`, read once, at any time (as
    /// [`MemoryRegion::read_at`]): the cheap form for polling a flag byte a
    /// peer writes, as perftest's write_lat does.
    #[inline]
    pub fn read_byte(&self, offset: usize) -> Result<u8> {
        let (offset, _) = self.copy_range("MemoryRegion::read_byte", offset, 1)?;
        // SAFETY: offset lies in the region's host memory, which it owns and
        // keeps allocated; a volatile read creates no reference to memory
        // the device may be writing.
        Ok(unsafe { std::ptr::read_volatile(self.inner.ptr.0.add(offset)) })
    }

    /// Sets the byte at `offset` (as [`MemoryRegion::write_at`]).
    #[inline]
    pub fn write_byte(&mut self, offset: usize, byte: u8) -> Result<()> {
        let (offset, _) = self.copy_range("MemoryRegion::write_byte", offset, 1)?;
        // SAFETY: as in read_byte, for a write; &mut self excludes local access.
        unsafe { std::ptr::write_volatile(self.inner.ptr.0.add(offset), byte) };
        Ok(())
    }

    /// Sets every byte of the region to `byte` (as [`MemoryRegion::write_at`]).
    pub fn fill(&mut self, byte: u8) {
        // SAFETY: the whole range of the region, as in write_at.
        unsafe { volatile_fill(self.inner.ptr.0, self.inner.len, byte) };
    }

    pub(super) fn copy_range(
        &self,
        what: &'static str,
        offset: usize,
        len: usize,
    ) -> Result<(usize, usize)> {
        match offset.checked_add(len) {
            Some(end) if end <= self.inner.len => Ok((offset, len)),
            _ => Err(Error::invalid(
                what,
                format!(
                    "{len} bytes at offset {offset} do not fit the {}-byte region",
                    self.inner.len
                ),
            )),
        }
    }

    pub(super) fn check_local(&mut self, what: &'static str) -> Result<()> {
        if self.is_remotely_writable() {
            return Err(Error::RemotelyWritable {
                operation: what,
                access: format!("{:?}", self.inner.access),
            });
        }
        self.check_idle()
    }
}

/// Reads `dst.len()` bytes at `src` with volatile loads (8-byte words where
/// aligned), so that memory a device writes meanwhile is never behind a Rust
/// reference.
///
/// # Safety
/// `src..src+dst.len()` must be readable host memory.
pub(super) unsafe fn volatile_read(src: *const u8, dst: &mut [u8]) {
    let n = dst.len();
    let head = src.align_offset(8).min(n);
    let mut i = 0;
    while i < head {
        // SAFETY: i < n, in the caller's range.
        dst[i] = unsafe { std::ptr::read_volatile(src.add(i)) };
        i += 1;
    }
    while i + 8 <= n {
        // SAFETY: in range, and src+i is 8-byte aligned (past the head).
        let w = unsafe { std::ptr::read_volatile(src.add(i).cast::<u64>()) };
        dst[i..i + 8].copy_from_slice(&w.to_ne_bytes());
        i += 8;
    }
    while i < n {
        // SAFETY: i < n, in the caller's range.
        dst[i] = unsafe { std::ptr::read_volatile(src.add(i)) };
        i += 1;
    }
}

/// Writes `src` at `dst` with volatile stores (see [`volatile_read`]).
///
/// # Safety
/// `dst..dst+src.len()` must be writable host memory no Rust reference points into.
pub(super) unsafe fn volatile_write(dst: *mut u8, src: &[u8]) {
    let n = src.len();
    let head = dst.align_offset(8).min(n);
    let mut i = 0;
    while i < head {
        // SAFETY: i < n, in the caller's range.
        unsafe { std::ptr::write_volatile(dst.add(i), src[i]) };
        i += 1;
    }
    while i + 8 <= n {
        let mut w = [0u8; 8];
        w.copy_from_slice(&src[i..i + 8]);
        // SAFETY: in range, and dst+i is 8-byte aligned (past the head).
        unsafe { std::ptr::write_volatile(dst.add(i).cast::<u64>(), u64::from_ne_bytes(w)) };
        i += 8;
    }
    while i < n {
        // SAFETY: i < n, in the caller's range.
        unsafe { std::ptr::write_volatile(dst.add(i), src[i]) };
        i += 1;
    }
}

/// Sets `len` bytes at `dst` to `byte` with volatile stores.
///
/// # Safety
/// As for [`volatile_write`].
pub(super) unsafe fn volatile_fill(dst: *mut u8, len: usize, byte: u8) {
    let head = dst.align_offset(8).min(len);
    let word = u64::from_ne_bytes([byte; 8]);
    let mut i = 0;
    while i < head {
        // SAFETY: i < len, in the caller's range.
        unsafe { std::ptr::write_volatile(dst.add(i), byte) };
        i += 1;
    }
    while i + 8 <= len {
        // SAFETY: in range and aligned.
        unsafe { std::ptr::write_volatile(dst.add(i).cast::<u64>(), word) };
        i += 8;
    }
    while i < len {
        // SAFETY: i < len, in the caller's range.
        unsafe { std::ptr::write_volatile(dst.add(i), byte) };
        i += 1;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn volatile_copies_at_every_alignment() {
        let mut mem = AlignedBuffer::new(64).unwrap();
        let base = mem.as_mut_ptr();
        for start in 0..9 {
            for len in [0, 1, 7, 8, 9, 17, 40] {
                let src: Vec<u8> = (0..len as u8)
                    .map(|x| x.wrapping_mul(37) ^ start as u8)
                    .collect();
                // SAFETY: start + len <= 64, the buffer's size.
                unsafe { volatile_fill(base, 64, 0xaa) };
                // SAFETY: as above.
                unsafe { volatile_write(base.add(start), &src) };
                let mut back = vec![0u8; len];
                // SAFETY: as above.
                unsafe { volatile_read(base.add(start), &mut back) };
                assert_eq!(back, src, "start {start} len {len}");
                let mut all = vec![0u8; 64];
                // SAFETY: as above.
                unsafe { volatile_read(base, &mut all) };
                assert!(all[..start].iter().all(|b| *b == 0xaa));
                assert!(all[start + len..].iter().all(|b| *b == 0xaa));
            }
        }
    }
}
