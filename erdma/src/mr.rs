//! Memory regions over memory the caller hands over (host buffers, safely)
//! or vouches for (device memory, `unsafe`), and the local/remote slices that
//! work requests name.
//!
//! Ownership rules that make misuse impossible in safe code:
//! - a [`MemoryRegion`] owns its buffer: the memory cannot be freed, moved or
//!   reallocated while registered;
//! - every posted work request holds a share of the regions it names until
//!   its completion is polled (or its QP is destroyed), so a region whose
//!   requests are in flight is neither deregistered nor handed back, and its
//!   contents are not reachable as a Rust slice ([`Error::Busy`]);
//! - the region holds its protection domain, so it cannot outlive it.
//!
//! What no library can police: a peer given an rkey with remote write access
//! may write at any time its protocol allows. Coordinate (a completion such
//! as WRITE_WITH_IMM or a SEND after the WRITE) before reading such memory.

use std::fmt;
use std::ops::{Bound, RangeBounds};
use std::sync::Arc;

use erdma_sys as sys;

use crate::error::{Error, Result};
use crate::ffi::{self, Ptr, optional_fn};
use crate::pd::{PdInner, ProtectionDomain};

/// Memory access rights of a region (`ibv_access_flags`).
#[derive(Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct AccessFlags(u32);

impl AccessFlags {
    /// The NIC may write the memory (receives, READ and atomic results).
    pub const LOCAL_WRITE: AccessFlags = AccessFlags(sys::IBV_ACCESS_LOCAL_WRITE);
    /// Peers may RDMA WRITE it (needs LOCAL_WRITE).
    pub const REMOTE_WRITE: AccessFlags = AccessFlags(sys::IBV_ACCESS_REMOTE_WRITE);
    /// Peers may RDMA READ it.
    pub const REMOTE_READ: AccessFlags = AccessFlags(sys::IBV_ACCESS_REMOTE_READ);
    /// Peers may run atomics on it (needs LOCAL_WRITE).
    pub const REMOTE_ATOMIC: AccessFlags = AccessFlags(sys::IBV_ACCESS_REMOTE_ATOMIC);
    /// Relaxed PCIe ordering (optional: ignored by kernels without it).
    pub const RELAXED_ORDERING: AccessFlags = AccessFlags(sys::IBV_ACCESS_RELAXED_ORDERING);
    /// LOCAL_WRITE | REMOTE_WRITE | REMOTE_READ | REMOTE_ATOMIC.
    pub const ALL: AccessFlags = AccessFlags(
        sys::IBV_ACCESS_LOCAL_WRITE
            | sys::IBV_ACCESS_REMOTE_WRITE
            | sys::IBV_ACCESS_REMOTE_READ
            | sys::IBV_ACCESS_REMOTE_ATOMIC,
    );

    /// No access beyond local reads (send sources only).
    pub const fn empty() -> AccessFlags {
        AccessFlags(0)
    }
    /// The raw flag bits.
    pub const fn bits(self) -> u32 {
        self.0
    }
    /// From raw bits (unknown bits are passed to the device as they are).
    pub const fn from_bits(bits: u32) -> AccessFlags {
        AccessFlags(bits)
    }
    /// Whether all flags of `other` are set.
    pub const fn contains(self, other: AccessFlags) -> bool {
        self.0 & other.0 == other.0
    }
}

impl std::ops::BitOr for AccessFlags {
    type Output = AccessFlags;
    fn bitor(self, rhs: AccessFlags) -> AccessFlags {
        AccessFlags(self.0 | rhs.0)
    }
}

impl std::ops::BitOrAssign for AccessFlags {
    fn bitor_assign(&mut self, rhs: AccessFlags) {
        self.0 |= rhs.0;
    }
}

impl fmt::Debug for AccessFlags {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let names = [
            (AccessFlags::LOCAL_WRITE, "LOCAL_WRITE"),
            (AccessFlags::REMOTE_WRITE, "REMOTE_WRITE"),
            (AccessFlags::REMOTE_READ, "REMOTE_READ"),
            (AccessFlags::REMOTE_ATOMIC, "REMOTE_ATOMIC"),
            (AccessFlags::RELAXED_ORDERING, "RELAXED_ORDERING"),
        ];
        let mut rest = self.0;
        let mut parts = Vec::new();
        for (flag, name) in names {
            if self.contains(flag) {
                parts.push(name.to_string());
                rest &= !flag.0;
            }
        }
        if rest != 0 {
            parts.push(format!("{rest:#x}"));
        }
        if parts.is_empty() {
            parts.push("empty".into());
        }
        write!(f, "AccessFlags({})", parts.join(" | "))
    }
}

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
    fd: std::os::fd::RawFd,
    offset: u64,
    iova: u64,
    len: usize,
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

/// Something a posted work request keeps alive until its completion.
pub(crate) trait Lease: Send + Sync {}

pub(crate) struct MrInner<B> {
    raw: Ptr<sys::ibv_mr>,
    pd: Arc<PdInner>,
    buf: Option<B>,
    /// The registered range, with the provenance of the buffer (host memory),
    /// or the device/IO address as a pointer-sized integer (device memory).
    ptr: Ptr<u8>,
    addr: u64,
    len: usize,
    lkey: u32,
    rkey: u32,
    access: AccessFlags,
    /// Host memory the CPU can read ([`RegisterBuffer::CPU_READABLE`]):
    /// what an inline send may copy.
    cpu_readable: bool,
}

impl<B: Send + Sync> Lease for MrInner<B> {}

impl<B> MrInner<B> {
    /// Deregisters. On failure the MR stays registered (`ibv_dereg_mr`
    /// destroys nothing when it fails), and so the value stays a whole,
    /// registered region with its buffer: there is no half-deregistered state.
    fn deregister(&mut self) -> Result<()> {
        if self.raw.0.is_null() {
            return Ok(());
        }
        let rc = dereg_fault().unwrap_or_else(|| match ffi::verbs() {
            // SAFETY: raw is our registered MR, deregistered once (cleared
            // below on success); no posted request holds it (they hold an
            // Arc to this value).
            Ok(lib) => unsafe { lib.ibv_dereg_mr(self.raw.0) },
            Err(_) => libc::ENOSYS,
        });
        Error::check("ibv_dereg_mr", rc).map_err(|e| match e {
            Error::Verb { verb, errno, .. } => Error::Verb {
                verb,
                errno,
                hint: Some(
                    "the region is still registered and owns its buffer: retry into_inner, or                      drop it (the buffer is then leaked, never freed, since the device may still                      reach it)"
                        .into(),
                ),
            },
            other => other,
        })?;
        self.raw = Ptr(std::ptr::null_mut());
        Ok(())
    }
}

impl<B> Drop for MrInner<B> {
    fn drop(&mut self) {
        if self.deregister().is_err() {
            // Still registered: the device may reach the memory, so it is
            // leaked rather than freed.
            std::mem::forget(self.buf.take());
        }
    }
}

#[cfg(any(test, feature = "fault-injection"))]
thread_local! {
    /// Deregistrations on this thread that fail (with EBUSY) before the
    /// verb is called: the failure no device can be made to produce at will.
    static DEREG_FAILURES: std::cell::Cell<u32> = const { std::cell::Cell::new(0) };
}

/// Makes the next `n` deregistrations on this thread fail with EBUSY before
/// `ibv_dereg_mr` is called (feature `fault-injection`, for tests only).
#[cfg(any(test, feature = "fault-injection"))]
#[doc(hidden)]
pub fn inject_dereg_failures(n: u32) {
    DEREG_FAILURES.with(|f| f.set(n));
}

/// The errno an injected deregistration failure returns (tests only).
#[cfg(any(test, feature = "fault-injection"))]
fn dereg_fault() -> Option<i32> {
    DEREG_FAILURES.with(|n| {
        let left = n.get();
        (left > 0).then(|| {
            n.set(left - 1);
            libc::EBUSY
        })
    })
}

#[cfg(not(any(test, feature = "fault-injection")))]
#[inline(always)]
fn dereg_fault() -> Option<i32> {
    None
}

/// A registered memory region that owns its memory `B`: a host buffer
/// ([`Vec<u8>`], `Box<[u8]>`, [`AlignedBuffer`], ...), device memory the
/// caller vouched for ([`RawBuffer`]), a dma-buf ([`DmaBufRange`]) or, with the
/// `cuda` feature, a GPU buffer (`GpuMemory`).
///
/// Host memory is readable in two ways:
/// - as a Rust slice ([`MemoryRegion::as_slice`], [`MemoryRegion::as_mut_slice`]),
///   when no posted request uses the region and no peer may write it (the
///   region was registered without `REMOTE_WRITE` and `REMOTE_ATOMIC`): send
///   sources, receive buffers read after their completion, READ targets;
/// - by copies ([`MemoryRegion::read_at`], [`MemoryRegion::to_vec`],
///   [`MemoryRegion::write_at`], [`MemoryRegion::fill`]), at any time: a peer
///   writing meanwhile makes the bytes read torn, never undefined behaviour.
///   This is how a region exposed to peers' RDMA WRITEs and atomics is read.
pub struct MemoryRegion<B = Vec<u8>> {
    inner: Arc<MrInner<B>>,
}

impl<B> fmt::Debug for MemoryRegion<B> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MemoryRegion")
            .field("addr", &format_args!("{:#x}", self.inner.addr))
            .field("len", &self.inner.len)
            .field("lkey", &format_args!("{:#x}", self.inner.lkey))
            .field("rkey", &format_args!("{:#x}", self.inner.rkey))
            .field("access", &self.inner.access)
            .finish()
    }
}

impl<B: RegisterBuffer> MemoryRegion<B> {
    pub(crate) fn register(pd: &ProtectionDomain, buffer: B, access: AccessFlags) -> Result<Self> {
        check_access("ibv_reg_mr", access)?;
        ffi::verbs()?;
        let mut unregistered = MrInner::unregistered(pd, buffer, access);
        unregistered.cpu_readable = B::CPU_READABLE;
        let (mut inner, ptr, len) = place(unregistered, |m| m.buf.as_mut());
        if len == 0 {
            return Err(Error::invalid(
                "ibv_reg_mr",
                "cannot register an empty buffer",
            ));
        }
        // SAFETY: RegisterBuffer guarantees ptr..ptr+len stays valid while
        // the buffer lives, and the region keeps it until after deregistration.
        let mr = unsafe { sys::inline::ibv_reg_mr(pd.as_raw(), ptr.cast(), len, access.bits()) };
        if mr.is_null() {
            return Err(Error::last_os("ibv_reg_mr"));
        }
        match Arc::get_mut(&mut inner) {
            Some(m) => m.set_registered(mr, Ptr(ptr), ptr as u64, len),
            None => unreachable!("nothing else holds the new region"),
        }
        Ok(MemoryRegion { inner })
    }
}

/// Moves `value` to its final place (a new `Arc`) and only then takes the
/// pointer of the buffer in it, so that the pointer keeps its provenance:
/// nothing moves or reborrows the buffer again until it is deregistered (a
/// `Box` moved after its pointer was taken would invalidate the pointer).
/// `(null, 0)` when `buf` finds no buffer.
fn place<T, B: RegisterBuffer>(
    value: T,
    buf: impl FnOnce(&mut T) -> Option<&mut B>,
) -> (Arc<T>, *mut u8, usize) {
    let mut arc = Arc::new(value);
    let parts = Arc::get_mut(&mut arc).and_then(buf).map(|b| b.raw_parts());
    let (ptr, len) = parts.unwrap_or((std::ptr::null_mut(), 0));
    (arc, ptr, len)
}

impl<B> MrInner<B> {
    fn unregistered(pd: &ProtectionDomain, buf: B, access: AccessFlags) -> MrInner<B> {
        MrInner {
            raw: Ptr(std::ptr::null_mut()),
            pd: pd.inner.clone(),
            buf: Some(buf),
            ptr: Ptr(std::ptr::null_mut()),
            addr: 0,
            len: 0,
            lkey: 0,
            rkey: 0,
            access,
            cpu_readable: false,
        }
    }

    fn set_registered(&mut self, mr: *mut sys::ibv_mr, ptr: Ptr<u8>, addr: u64, len: usize) {
        // SAFETY: mr is a freshly registered, live ibv_mr.
        let (lkey, rkey) = unsafe { ((*mr).lkey, (*mr).rkey) };
        self.raw = Ptr(mr);
        self.ptr = ptr;
        self.addr = addr;
        self.len = len;
        self.lkey = lkey;
        self.rkey = rkey;
    }
}

impl<B: Send + Sync + 'static> MemoryRegion<B> {
    /// Registers memory by a means other than `ibv_reg_mr` on a host
    /// pointer: `reg` receives the PD and returns the new MR, or `None` with
    /// the error in errno. Used for dma-bufs and GPU memory.
    pub(crate) fn register_with(
        pd: &ProtectionDomain,
        buf: B,
        addr: u64,
        len: usize,
        access: AccessFlags,
        reg: impl FnOnce(*mut sys::ibv_pd) -> Result<*mut sys::ibv_mr>,
    ) -> Result<Self> {
        let mut inner = MrInner::unregistered(pd, buf, access);
        let mr = reg(pd.as_raw())?;
        inner.set_registered(mr, Ptr(addr as usize as *mut u8), addr, len);
        Ok(MemoryRegion {
            inner: Arc::new(inner),
        })
    }

    /// Local key (for scatter/gather entries).
    pub fn lkey(&self) -> u32 {
        self.inner.lkey
    }

    /// Remote key (what a peer needs to access the region).
    pub fn rkey(&self) -> u32 {
        self.inner.rkey
    }

    /// Start address (the I/O virtual address peers use).
    pub fn addr(&self) -> u64 {
        self.inner.addr
    }

    /// Length in bytes.
    pub fn len(&self) -> usize {
        self.inner.len
    }

    /// Whether the region is empty (never: empty buffers are refused).
    pub fn is_empty(&self) -> bool {
        self.inner.len == 0
    }

    /// Access rights it was registered with.
    pub fn access(&self) -> AccessFlags {
        self.inner.access
    }

    /// Whether peers may write the region (`REMOTE_WRITE` or `REMOTE_ATOMIC`):
    /// then it is read by copies ([`MemoryRegion::read_at`]), never lent out
    /// as a Rust slice.
    pub fn is_remotely_writable(&self) -> bool {
        self.inner.access.bits()
            & (AccessFlags::REMOTE_WRITE.bits() | AccessFlags::REMOTE_ATOMIC.bits())
            != 0
    }

    /// Whether the region is host memory the CPU can read
    /// ([`RegisterBuffer::CPU_READABLE`]): only such a region may be sent
    /// inline.
    pub fn is_cpu_readable(&self) -> bool {
        self.inner.cpu_readable
    }

    /// How many posted work requests still use the region (a snapshot).
    pub fn in_flight(&self) -> usize {
        Arc::strong_count(&self.inner) - 1
    }

    /// The raw `ibv_mr`, valid while the region lives.
    pub fn as_raw(&self) -> *mut sys::ibv_mr {
        self.inner.raw.0
    }

    /// The whole region, as the descriptor a peer needs for RDMA READ/WRITE
    /// and atomics (send it in an [`crate::Endpoint`]).
    pub fn remote(&self) -> RemoteBuffer {
        RemoteBuffer {
            addr: self.inner.addr,
            rkey: self.inner.rkey,
            len: self.inner.len as u64,
        }
    }

    /// The whole region as a local scatter/gather entry.
    pub fn all(&self) -> LocalSlice<'_> {
        self.local(0, self.inner.len)
    }

    /// A byte range of the region as a local scatter/gather entry;
    /// [`Error::InvalidArgument`] when it is outside the region.
    pub fn slice(&self, range: impl RangeBounds<usize>) -> Result<LocalSlice<'_>> {
        let (offset, len) = self.range("MemoryRegion::slice", &range)?;
        Ok(self.local(offset, len))
    }

    /// `len` bytes at `offset` (in range) as a [`LocalSlice`], with what
    /// posting checks copied in, so that a post reads no region through a
    /// virtual call but the one that takes its lease.
    fn local(&self, offset: usize, len: usize) -> LocalSlice<'_> {
        LocalSlice {
            mr: self,
            addr: self.inner.addr + offset as u64,
            len,
            lkey: self.inner.lkey,
            access: self.inner.access,
            cpu_readable: self.inner.cpu_readable,
            pd: self.pd_raw() as usize,
        }
    }

    fn range(&self, what: &'static str, range: &impl RangeBounds<usize>) -> Result<(usize, usize)> {
        resolve_range(range, self.inner.len).ok_or_else(|| {
            Error::invalid(
                what,
                format!(
                    "range {} outside the {}-byte region",
                    range_text(range),
                    self.inner.len
                ),
            )
        })
    }

    /// Deregisters and hands the buffer back; `Err(self)` while posted
    /// requests still use the region (poll their completions first), or when
    /// deregistration failed: the region is then still registered, whole,
    /// and may be used, retried or dropped. Once deregistered, no peer can
    /// reach the memory any more: this is how remote access is revoked.
    pub fn into_inner(self) -> std::result::Result<B, (Self, Error)> {
        match Arc::try_unwrap(self.inner) {
            Ok(mut inner) => match inner.deregister() {
                Ok(()) => match inner.buf.take() {
                    Some(b) => Ok(b),
                    // A registered region always owns its buffer: only a
                    // successful deregistration (just now) or Drop takes it.
                    None => unreachable!("a registered region owns its buffer"),
                },
                Err(e) => Err((
                    MemoryRegion {
                        inner: Arc::new(inner),
                    },
                    e,
                )),
            },
            Err(inner) => {
                let n = Arc::strong_count(&inner) - 1;
                Err((
                    MemoryRegion { inner },
                    Error::Busy {
                        what: "memory region",
                        in_flight: n,
                    },
                ))
            }
        }
    }

    /// `Ok` when no posted request holds the region. `Arc::get_mut` reads the
    /// count with acquire ordering: the completion that released the last
    /// request (on any thread) happens before, so the device's writes are
    /// visible to what follows.
    fn check_idle(&mut self) -> Result<()> {
        if Arc::get_mut(&mut self.inner).is_some() {
            return Ok(());
        }
        Err(Error::Busy {
            what: "memory region",
            in_flight: self.in_flight(),
        })
    }

    pub(crate) fn lease(&self) -> Arc<dyn Lease> {
        self.inner.clone()
    }

    pub(crate) fn pd_raw(&self) -> *mut sys::ibv_pd {
        self.inner.pd.raw.0
    }
}

impl<B: OpaqueMemory + Send + Sync + 'static> MemoryRegion<B> {
    /// The device memory the region owns (its handle, e.g. to copy to or
    /// from it with the GPU's own API). Only for [`OpaqueMemory`]: a host
    /// buffer would lend the bytes a peer or a posted request may be writing,
    /// so host memory is read with [`MemoryRegion::as_slice`] or by copies.
    pub fn buffer(&self) -> &B {
        match self.inner.buf.as_ref() {
            Some(b) => b,
            // A registered region always owns its buffer: only a successful
            // deregistration (which consumes the region) or Drop takes it.
            None => unreachable!("a registered region owns its buffer"),
        }
    }
}

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

    fn copy_range(&self, what: &'static str, offset: usize, len: usize) -> Result<(usize, usize)> {
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

    fn check_local(&mut self, what: &'static str) -> Result<()> {
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
unsafe fn volatile_read(src: *const u8, dst: &mut [u8]) {
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
unsafe fn volatile_write(dst: *mut u8, src: &[u8]) {
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
unsafe fn volatile_fill(dst: *mut u8, len: usize, byte: u8) {
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

impl MemoryRegion<DmaBufRange> {
    /// # Safety
    /// See [`ProtectionDomain::register_dmabuf`].
    pub(crate) unsafe fn register_dmabuf(
        pd: &ProtectionDomain,
        fd: std::os::fd::RawFd,
        offset: u64,
        len: usize,
        iova: u64,
        access: AccessFlags,
    ) -> Result<Self> {
        if len == 0 {
            return Err(Error::invalid(
                "ibv_reg_dmabuf_mr",
                "cannot register an empty range",
            ));
        }
        check_access("ibv_reg_dmabuf_mr", access)?;
        let buf = DmaBufRange {
            fd,
            offset,
            iova,
            len,
        };
        Self::register_with(pd, buf, iova, len, access, |pd_raw| {
            // SAFETY: the caller's contract on fd and the range.
            unsafe { reg_dmabuf_mr(pd_raw, fd, offset, len, iova, access) }
        })
    }
}

/// `ibv_reg_dmabuf_mr`, with a provider or library that lacks it reported as
/// [`Error::Unsupported`].
///
/// # Safety
/// `fd` must be a dma-buf whose `offset..offset+len` stays allocated while the
/// MR exists; `pd_raw` a live PD.
pub(crate) unsafe fn reg_dmabuf_mr(
    pd_raw: *mut sys::ibv_pd,
    fd: std::os::fd::RawFd,
    offset: u64,
    len: usize,
    iova: u64,
    access: AccessFlags,
) -> Result<*mut sys::ibv_mr> {
    let lib = ffi::verbs()?;
    let f = optional_fn!(lib, ibv_reg_dmabuf_mr);
    // SAFETY: the caller's contract.
    let mr = unsafe { f(pd_raw, offset, len, iova, fd, access.bits() as i32) };
    if !mr.is_null() {
        return Ok(mr);
    }
    let e = Error::last_os("ibv_reg_dmabuf_mr");
    if matches!(e.errno(), Some(libc::EOPNOTSUPP) | Some(libc::ENOSYS)) {
        // SAFETY: a live PD's context pointer.
        let dev = unsafe { device_name_of_pd(pd_raw) };
        return Err(Error::Unsupported {
            feature: "dma-buf memory registration (ibv_reg_dmabuf_mr)".into(),
            device: dev,
            hint: Some(
                "register device memory with ibv_reg_mr instead (erdma::GpuRegistration::PeerMemory, \
                 or erdma::RawBuffer), which needs a peer-memory module such as nvidia_peermem"
                    .into(),
            ),
        });
    }
    Err(e)
}

/// The device name of a live PD, for messages.
///
/// # Safety
/// `pd` must be a live `ibv_pd`.
unsafe fn device_name_of_pd(pd: *mut sys::ibv_pd) -> Option<String> {
    // SAFETY: a live PD points to its live context and device.
    unsafe {
        let ctx = (*pd).context;
        if ctx.is_null() || (*ctx).device.is_null() {
            return None;
        }
        let name = &(*(*ctx).device).name;
        let bytes: Vec<u8> = name
            .iter()
            .take_while(|c| **c != 0)
            .map(|c| *c as u8)
            .collect();
        Some(String::from_utf8_lossy(&bytes).into_owned())
    }
}

pub(crate) fn check_access(verb: &'static str, access: AccessFlags) -> Result<()> {
    let needs_local_write = AccessFlags::REMOTE_WRITE.bits() | AccessFlags::REMOTE_ATOMIC.bits();
    if access.bits() & needs_local_write != 0 && !access.contains(AccessFlags::LOCAL_WRITE) {
        return Err(Error::invalid(
            verb,
            format!("{access:?}: REMOTE_WRITE and REMOTE_ATOMIC need LOCAL_WRITE"),
        ));
    }
    Ok(())
}

/// (offset, len) of a range within `total` bytes, or `None` when outside.
pub(crate) fn resolve_range(
    range: &impl RangeBounds<usize>,
    total: usize,
) -> Option<(usize, usize)> {
    let start = match range.start_bound() {
        Bound::Included(s) => *s,
        Bound::Excluded(s) => s.checked_add(1)?,
        Bound::Unbounded => 0,
    };
    let end = match range.end_bound() {
        Bound::Included(e) => e.checked_add(1)?,
        Bound::Excluded(e) => *e,
        Bound::Unbounded => total,
    };
    (start <= end && end <= total).then(|| (start, end - start))
}

fn range_text(range: &impl RangeBounds<usize>) -> String {
    let s = match range.start_bound() {
        Bound::Included(s) => s.to_string(),
        Bound::Excluded(s) => format!("{s}+1"),
        Bound::Unbounded => String::new(),
    };
    let e = match range.end_bound() {
        Bound::Included(e) => format!("={e}"),
        Bound::Excluded(e) => e.to_string(),
        Bound::Unbounded => String::new(),
    };
    format!("{s}..{e}")
}

/// What a posted request takes from its region beyond the keys a
/// [`LocalSlice`] copies: a share that keeps it registered. Object-safe.
pub(crate) trait LocalMemory: Sync {
    fn lease(&self) -> Arc<dyn Lease>;
}

impl<B: Send + Sync + 'static> LocalMemory for MemoryRegion<B> {
    fn lease(&self) -> Arc<dyn Lease> {
        MemoryRegion::lease(self)
    }
}

/// A byte range of a local memory region: one scatter/gather entry of a
/// work request. Borrows the region, so the region cannot be mutated or
/// handed back while the slice exists; posting turns the borrow into a share
/// held until the completion is polled.
#[derive(Clone, Copy)]
pub struct LocalSlice<'a> {
    mr: &'a dyn LocalMemory,
    /// Start address (the region's plus the offset).
    addr: u64,
    len: usize,
    lkey: u32,
    access: AccessFlags,
    /// Whether the region is host memory the CPU can read (inline sends).
    cpu_readable: bool,
    /// The region's protection domain, as an address: only compared with
    /// the QP's (an integer keeps the slice `Send + Sync`).
    pd: usize,
}

impl fmt::Debug for LocalSlice<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LocalSlice")
            .field("addr", &format_args!("{:#x}", self.addr()))
            .field("len", &self.len)
            .field("lkey", &format_args!("{:#x}", self.lkey))
            .finish()
    }
}

impl<'a> LocalSlice<'a> {
    /// Length in bytes.
    pub fn len(&self) -> usize {
        self.len
    }
    /// Whether the slice is empty.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
    /// Start address.
    pub fn addr(&self) -> u64 {
        self.addr
    }
    /// A share of the region, held by a posted request until its completion.
    pub(crate) fn lease(&self) -> Arc<dyn Lease> {
        self.mr.lease()
    }
    /// Whether the region was registered in the protection domain `pd`.
    pub(crate) fn in_pd(&self, pd: *mut sys::ibv_pd) -> bool {
        self.pd == pd as usize
    }
    /// The region's local key.
    pub(crate) fn lkey(&self) -> u32 {
        self.lkey
    }
    /// The access the region was registered with.
    pub(crate) fn access(&self) -> AccessFlags {
        self.access
    }
    /// Whether the region is host memory the CPU can read: the only memory
    /// an inline send may name (the provider copies it on the CPU).
    pub(crate) fn cpu_readable(&self) -> bool {
        self.cpu_readable
    }
    /// The `ibv_sge` for this slice; `None` when longer than 4 GiB - 1.
    pub(crate) fn sge(&self) -> Option<sys::ibv_sge> {
        Some(sys::ibv_sge {
            addr: self.addr,
            length: u32::try_from(self.len).ok()?,
            lkey: self.lkey,
        })
    }
}

/// A peer's memory: address, length and rkey, as [`MemoryRegion::remote`]
/// describes it. Serializable, to be sent to the peer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
pub struct RemoteBuffer {
    /// Start address (I/O virtual address of the peer's region).
    pub addr: u64,
    /// Remote key.
    pub rkey: u32,
    /// Length in bytes.
    pub len: u64,
}

impl RemoteBuffer {
    /// Encoded size of [`RemoteBuffer::to_bytes`].
    pub const ENCODED_LEN: usize = 20;

    /// A byte range of it; [`Error::InvalidArgument`] when outside.
    pub fn slice(&self, range: impl RangeBounds<usize>) -> Result<RemoteBuffer> {
        let total = usize::try_from(self.len).unwrap_or(usize::MAX);
        let (offset, len) = resolve_range(&range, total).ok_or_else(|| {
            Error::invalid(
                "RemoteBuffer::slice",
                format!(
                    "range {} outside the {}-byte remote buffer",
                    range_text(&range),
                    self.len
                ),
            )
        })?;
        Ok(RemoteBuffer {
            addr: self.addr.wrapping_add(offset as u64),
            rkey: self.rkey,
            len: len as u64,
        })
    }

    /// 20 bytes (addr, rkey, len; big-endian), for RDMA CM private data.
    pub fn to_bytes(&self) -> [u8; Self::ENCODED_LEN] {
        let mut b = [0u8; Self::ENCODED_LEN];
        b[..8].copy_from_slice(&self.addr.to_be_bytes());
        b[8..12].copy_from_slice(&self.rkey.to_be_bytes());
        b[12..].copy_from_slice(&self.len.to_be_bytes());
        b
    }

    /// Decodes [`RemoteBuffer::to_bytes`] (longer input, e.g. padded private
    /// data, is fine); `None` when too short.
    pub fn from_bytes(b: &[u8]) -> Option<RemoteBuffer> {
        if b.len() < Self::ENCODED_LEN {
            return None;
        }
        Some(RemoteBuffer {
            addr: u64::from_be_bytes(b[..8].try_into().ok()?),
            rkey: u32::from_be_bytes(b[8..12].try_into().ok()?),
            len: u64::from_be_bytes(b[12..20].try_into().ok()?),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranges() {
        assert_eq!(resolve_range(&(..), 10), Some((0, 10)));
        assert_eq!(resolve_range(&(2..5), 10), Some((2, 3)));
        assert_eq!(resolve_range(&(2..=5), 10), Some((2, 4)));
        assert_eq!(resolve_range(&(10..), 10), Some((10, 0)));
        #[allow(clippy::reversed_empty_ranges)]
        let backwards = 5..2;
        assert_eq!(resolve_range(&backwards, 10), None);
        assert_eq!(resolve_range(&(0..11), 10), None);
        assert_eq!(resolve_range(&(0..=usize::MAX), 10), None);
        assert_eq!(range_text(&(1..=3)), "1..=3");
    }

    #[test]
    fn remote_buffer_bytes_and_slices() {
        let r = RemoteBuffer {
            addr: 0x1000,
            rkey: 0xabcd,
            len: 64,
        };
        let mut padded = r.to_bytes().to_vec();
        padded.extend_from_slice(&[0; 36]);
        assert_eq!(RemoteBuffer::from_bytes(&padded), Some(r));
        assert_eq!(RemoteBuffer::from_bytes(&[1, 2, 3]), None);
        let s = r.slice(8..16).unwrap();
        assert_eq!((s.addr, s.len, s.rkey), (0x1008, 8, 0xabcd));
        assert!(r.slice(60..70).is_err());
        let j = serde_json::to_string(&r).unwrap();
        assert_eq!(serde_json::from_str::<RemoteBuffer>(&j).unwrap(), r);
    }

    #[test]
    fn access_flags() {
        let a = AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_READ;
        assert!(a.contains(AccessFlags::LOCAL_WRITE));
        assert!(!a.contains(AccessFlags::REMOTE_WRITE));
        assert_eq!(format!("{a:?}"), "AccessFlags(LOCAL_WRITE | REMOTE_READ)");
        assert!(check_access("x", AccessFlags::REMOTE_WRITE).is_err());
        assert!(check_access("x", AccessFlags::ALL).is_ok());
        assert!(check_access("x", AccessFlags::REMOTE_READ).is_ok());
    }

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

    /// What `register` does with a boxed buffer, without a device: place
    /// it, write and read through the pointer taken in place, take the box
    /// back. Under Miri this checks the pointer's provenance stays valid.
    #[test]
    fn placed_box_keeps_pointer_provenance() {
        struct Holder {
            buf: Option<Box<[u8]>>,
        }
        let boxed: Box<[u8]> = vec![1u8; 32].into_boxed_slice();
        let (arc, ptr, len) = place(Holder { buf: Some(boxed) }, |h| h.buf.as_mut());
        assert_eq!(len, 32);
        // SAFETY: ptr addresses the 32 bytes of the placed box.
        unsafe { volatile_write(ptr.add(4), &[9, 9]) };
        // SAFETY: as above; nothing writes while the view lives.
        let view = unsafe { std::slice::from_raw_parts(ptr, len) };
        assert_eq!(&view[3..7], &[1, 9, 9, 1]);
        let mut holder = Arc::try_unwrap(arc).ok().unwrap();
        let back = holder.buf.take().unwrap();
        assert_eq!(&back[3..7], &[1, 9, 9, 1]);
        let (_, p, n) = place(Holder { buf: None }, |h| h.buf.as_mut());
        assert!(p.is_null() && n == 0);
    }

    #[test]
    fn injected_dereg_failures_fail_that_many_times() {
        assert_eq!(dereg_fault(), None);
        inject_dereg_failures(2);
        assert_eq!(dereg_fault(), Some(libc::EBUSY));
        assert_eq!(dereg_fault(), Some(libc::EBUSY));
        assert_eq!(dereg_fault(), None);
    }

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
