//! Memory a region can own: host buffers the library vouches for
//! ([`HostMemory`]: `Vec<u8>`, `Box<[u8]>`, `&'static mut [u8]`,
//! [`AlignedBuffer`]) and device memory the caller vouches for
//! ([`OpaqueMemory`]: [`RawBuffer`], [`DmaBufRange`]), with the contract of
//! [`RegisterBuffer`]: memory that stays put while the value lives.

use std::fmt;

use crate::error::{Error, Result};
use crate::ffi::Ptr;
#[cfg(doc)]
use crate::{mr::MemoryRegion, pd::ProtectionDomain};

/// Memory that can be registered: an address range that stays put while the
/// value exists.
///
/// # Safety
/// [`RegisterBuffer::raw_parts`] is called once, after the value has been moved
/// into the region, and must return a pointer (with the provenance of the whole
/// range) and length that stay valid, not freed, unmapped, moved or
/// reallocated, for as long as the value lives, as long as it is not accessed
/// other than through that pointer. Moving the value must not move the memory
/// (heap buffers qualify, arrays on the stack do not).
/// [`RegisterBuffer::CPU_READABLE`] may be `true` only when the range is
/// initialised host memory the CPU can read.
pub unsafe trait RegisterBuffer: Send + Sync + 'static {
    /// Whether the range is host memory the CPU can read (what inline sends
    /// copy on the CPU). `false`, the default, for memory the library cannot
    /// vouch for (device memory, a BAR): such a region is never sent inline.
    const CPU_READABLE: bool = false;

    /// Address and length of the memory, called once at registration.
    fn raw_parts(&mut self) -> (*mut u8, usize);
}

/// A [`RegisterBuffer`] in host memory the CPU may read and write as bytes.
///
/// # Safety
/// The range of [`RegisterBuffer::raw_parts`] must be initialised host memory
/// (set [`RegisterBuffer::CPU_READABLE`] to `true` for it to be sent inline).
pub unsafe trait HostMemory: RegisterBuffer {}

/// Memory a region owns whose value gives no access to the registered bytes
/// as Rust references (device memory, a dma-buf, a [`RawBuffer`]): only such a
/// value is lent by [`MemoryRegion::buffer`]. Host memory is read with
/// [`MemoryRegion::as_slice`] (checked) or by copies. Sealed.
pub trait OpaqueMemory: sealed::Sealed {}

pub(crate) mod sealed {
    /// Keeps [`super::OpaqueMemory`] to the crate's own device-memory types.
    pub trait Sealed {}
}

impl sealed::Sealed for RawBuffer {}
impl OpaqueMemory for RawBuffer {}
impl sealed::Sealed for DmaBufRange {}
impl OpaqueMemory for DmaBufRange {}

// SAFETY: a Vec's heap buffer does not move when the Vec moves, and the
// region never changes the Vec's length or capacity.
unsafe impl RegisterBuffer for Vec<u8> {
    const CPU_READABLE: bool = true;
    fn raw_parts(&mut self) -> (*mut u8, usize) {
        (self.as_mut_ptr(), self.len())
    }
}
// SAFETY: initialised bytes.
unsafe impl HostMemory for Vec<u8> {}

// SAFETY: a boxed slice's heap buffer does not move when the box moves; the
// pointer is taken after the box has reached its place in the region, which
// never moves or reborrows it until deregistration.
unsafe impl RegisterBuffer for Box<[u8]> {
    const CPU_READABLE: bool = true;
    fn raw_parts(&mut self) -> (*mut u8, usize) {
        (self.as_mut_ptr(), self.len())
    }
}
// SAFETY: initialised bytes.
unsafe impl HostMemory for Box<[u8]> {}

// SAFETY: 'static memory exclusively borrowed for ever is never freed or
// moved; as for Box, the pointer is taken once the reference is in place.
unsafe impl RegisterBuffer for &'static mut [u8] {
    const CPU_READABLE: bool = true;
    fn raw_parts(&mut self) -> (*mut u8, usize) {
        (self.as_mut_ptr(), self.len())
    }
}
// SAFETY: initialised bytes.
unsafe impl HostMemory for &'static mut [u8] {}

/// A zeroed, page-aligned (4096 B) heap buffer: the usual choice for
/// registered memory (atomics need 8-byte-aligned targets; the NIC is
/// fastest on page-aligned buffers).
pub struct AlignedBuffer {
    ptr: Ptr<u8>,
    len: usize,
}

impl AlignedBuffer {
    /// Page size used for the alignment.
    pub const ALIGN: usize = 4096;

    /// A zeroed buffer of `len` bytes; [`Error::InvalidArgument`] when the
    /// allocation fails or `len` is absurd.
    pub fn new(len: usize) -> Result<AlignedBuffer> {
        if len == 0 {
            return Ok(AlignedBuffer {
                ptr: Ptr(std::ptr::NonNull::<u64>::dangling().as_ptr() as *mut u8),
                len: 0,
            });
        }
        let layout = std::alloc::Layout::from_size_align(len, Self::ALIGN).map_err(|_| {
            Error::invalid("AlignedBuffer::new", format!("{len} bytes is too large"))
        })?;
        // SAFETY: layout has a non-zero size.
        let ptr = unsafe { std::alloc::alloc_zeroed(layout) };
        if ptr.is_null() {
            return Err(Error::invalid(
                "AlignedBuffer::new",
                format!("cannot allocate {len} bytes"),
            ));
        }
        Ok(AlignedBuffer { ptr: Ptr(ptr), len })
    }

    /// Length in bytes.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether the length is zero.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
}

impl Drop for AlignedBuffer {
    fn drop(&mut self) {
        if self.len > 0 {
            // SAFETY: allocated in new() with this layout.
            unsafe {
                std::alloc::dealloc(
                    self.ptr.0,
                    std::alloc::Layout::from_size_align_unchecked(self.len, Self::ALIGN),
                )
            };
        }
    }
}

impl std::ops::Deref for AlignedBuffer {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        // SAFETY: ptr is valid (or dangling with len 0) and initialised.
        unsafe { std::slice::from_raw_parts(self.ptr.0, self.len) }
    }
}

impl std::ops::DerefMut for AlignedBuffer {
    fn deref_mut(&mut self) -> &mut [u8] {
        // SAFETY: as in deref, and &mut self is exclusive.
        unsafe { std::slice::from_raw_parts_mut(self.ptr.0, self.len) }
    }
}

impl fmt::Debug for AlignedBuffer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("AlignedBuffer")
            .field("len", &self.len)
            .finish()
    }
}

// SAFETY: the heap buffer does not move with the value.
unsafe impl RegisterBuffer for AlignedBuffer {
    const CPU_READABLE: bool = true;
    fn raw_parts(&mut self) -> (*mut u8, usize) {
        (self.ptr.0, self.len)
    }
}
// SAFETY: zero-initialised bytes.
unsafe impl HostMemory for AlignedBuffer {}

/// Memory the library cannot see into (GPU memory, a mapped BAR): an address
/// range the caller vouches for. Not readable as a Rust slice.
#[derive(Debug)]
pub struct RawBuffer {
    ptr: Ptr<u8>,
    len: usize,
}

impl RawBuffer {
    /// Describes `len` bytes at `ptr`.
    ///
    /// # Safety
    /// The range must be memory the device can register (host memory, or
    /// device memory with its peer-memory module, e.g. `nvidia_peermem` for
    /// a `cudaMalloc` pointer) and must stay allocated until the
    /// [`MemoryRegion`] made from it is dropped and every request posted with
    /// it has completed (or its QP is destroyed).
    pub unsafe fn new(ptr: *mut u8, len: usize) -> RawBuffer {
        RawBuffer { ptr: Ptr(ptr), len }
    }
}

// SAFETY: the constructor's contract.
unsafe impl RegisterBuffer for RawBuffer {
    fn raw_parts(&mut self) -> (*mut u8, usize) {
        (self.ptr.0, self.len)
    }
}

/// A registered dma-buf (see [`ProtectionDomain::register_dmabuf`]): the
/// file descriptor and range a [`MemoryRegion<DmaBufRange>`] was made from.
///
/// It is not a [`RegisterBuffer`]: the range is device memory reached through
/// the dma-buf, not host memory this value owns, so it can never be
/// registered again with [`ProtectionDomain::register`].
#[derive(Debug)]
pub struct DmaBufRange {
    pub(super) fd: std::os::fd::RawFd,
    pub(super) offset: u64,
    pub(super) iova: u64,
    pub(super) len: usize,
}

impl DmaBufRange {
    /// The dma-buf file descriptor it was registered from.
    pub fn fd(&self) -> std::os::fd::RawFd {
        self.fd
    }
    /// Offset in the dma-buf.
    pub fn offset(&self) -> u64 {
        self.offset
    }
    /// The I/O virtual address the region was registered at.
    pub fn iova(&self) -> u64 {
        self.iova
    }
    /// Length in bytes.
    pub fn len(&self) -> usize {
        self.len
    }
    /// Whether the range is empty (never: empty ranges are refused).
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Only device-memory handles are lent by `MemoryRegion::buffer`; the
    /// host buffers are not `OpaqueMemory` (tests/ui/host_buffer_lent.rs
    /// shows the refusal), and only host buffers are sent inline.
    #[test]
    fn memory_kinds() {
        fn opaque<B: OpaqueMemory>() {}
        opaque::<RawBuffer>();
        opaque::<DmaBufRange>();
        const {
            assert!(<Vec<u8> as RegisterBuffer>::CPU_READABLE);
            assert!(<Box<[u8]> as RegisterBuffer>::CPU_READABLE);
            assert!(<&'static mut [u8] as RegisterBuffer>::CPU_READABLE);
            assert!(<AlignedBuffer as RegisterBuffer>::CPU_READABLE);
            assert!(!<RawBuffer as RegisterBuffer>::CPU_READABLE);
        }
    }

    #[test]
    fn aligned_buffer() {
        let mut b = AlignedBuffer::new(10000).unwrap();
        assert_eq!(b.as_ptr() as usize % 4096, 0);
        assert!(b.iter().all(|x| *x == 0));
        b[9999] = 7;
        assert_eq!(b[9999], 7);
        assert!(AlignedBuffer::new(0).unwrap().is_empty());
        assert!(AlignedBuffer::new(usize::MAX - 10).is_err());
    }
}
