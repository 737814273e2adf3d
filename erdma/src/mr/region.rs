//! The registration: a [`MemoryRegion`] owns its memory and its protection
//! domain, hands the memory back only after a successful deregistration
//! (a failed one leaves the region whole; a drop that fails leaks the
//! memory), and lends device-memory handles only ([`MemoryRegion::buffer`]).

use std::fmt;
use std::ops::RangeBounds;
use std::sync::Arc;

use erdma_sys as sys;

use crate::error::{Error, Result};
use crate::ffi::{self, Ptr};
use crate::pd::{PdInner, ProtectionDomain};

use super::*;

/// Something a posted work request keeps alive until its completion.
pub(crate) trait Lease: Send + Sync {}

pub(crate) struct MrInner<B> {
    pub(super) raw: Ptr<sys::ibv_mr>,
    pub(super) pd: Arc<PdInner>,
    pub(super) buf: Option<B>,
    /// The registered range, with the provenance of the buffer (host memory),
    /// or the device/IO address as a pointer-sized integer (device memory).
    pub(super) ptr: Ptr<u8>,
    pub(super) addr: u64,
    pub(super) len: usize,
    pub(super) lkey: u32,
    pub(super) rkey: u32,
    pub(super) access: AccessFlags,
    /// Host memory the CPU can read ([`RegisterBuffer::CPU_READABLE`]):
    /// what an inline send may copy.
    pub(super) cpu_readable: bool,
}

impl<B: Send + Sync> Lease for MrInner<B> {}

impl<B> MrInner<B> {
    /// Deregisters. On failure the MR stays registered (`ibv_dereg_mr`
    /// destroys nothing when it fails), and so the value stays a whole,
    /// registered region with its buffer: there is no half-deregistered state.
    pub(super) fn deregister(&mut self) -> Result<()> {
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
pub(super) fn dereg_fault() -> Option<i32> {
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
pub(super) fn dereg_fault() -> Option<i32> {
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
    pub(super) inner: Arc<MrInner<B>>,
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
pub(super) fn place<T, B: RegisterBuffer>(
    value: T,
    buf: impl FnOnce(&mut T) -> Option<&mut B>,
) -> (Arc<T>, *mut u8, usize) {
    let mut arc = Arc::new(value);
    let parts = Arc::get_mut(&mut arc).and_then(buf).map(|b| b.raw_parts());
    let (ptr, len) = parts.unwrap_or((std::ptr::null_mut(), 0));
    (arc, ptr, len)
}

/// Hands back what `value` owns once `deregister` succeeds, without ever
/// moving the value: it stays where [`place`] put it (inside the `Arc`)
/// until deregistration succeeded, so the pointer taken there stays valid
/// for a region that is returned whole (issue 34 hole 6: moving the value
/// out of the `Arc` and into a new one moved a `Box` after its pointer was
/// taken, and later accesses went through an invalidated pointer). `Err`
/// with the `Arc` untouched while other holders (posted requests) exist
/// ([`Error::Busy`]) or when `deregister` fails.
pub(super) fn take_back<T, B>(
    mut arc: Arc<T>,
    deregister: impl FnOnce(&mut T) -> Result<()>,
    take: impl FnOnce(&mut T) -> Option<B>,
) -> std::result::Result<Option<B>, (Arc<T>, Error)> {
    let Some(value) = Arc::get_mut(&mut arc) else {
        let in_flight = Arc::strong_count(&arc) - 1;
        return Err((
            arc,
            Error::Busy {
                what: "memory region",
                in_flight,
            },
        ));
    };
    match deregister(value) {
        Ok(()) => Ok(take(value)),
        Err(e) => Err((arc, e)),
    }
}

impl<B> MrInner<B> {
    pub(super) fn unregistered(pd: &ProtectionDomain, buf: B, access: AccessFlags) -> MrInner<B> {
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

    pub(super) fn set_registered(
        &mut self,
        mr: *mut sys::ibv_mr,
        ptr: Ptr<u8>,
        addr: u64,
        len: usize,
    ) {
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
    pub(super) fn local(&self, offset: usize, len: usize) -> LocalSlice<'_> {
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

    pub(super) fn range(
        &self,
        what: &'static str,
        range: &impl RangeBounds<usize>,
    ) -> Result<(usize, usize)> {
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
        match take_back(self.inner, MrInner::deregister, |m| m.buf.take()) {
            Ok(Some(b)) => Ok(b),
            // A registered region always owns its buffer: only a successful
            // deregistration (just now) or Drop takes it.
            Ok(None) => unreachable!("a registered region owns its buffer"),
            Err((inner, e)) => Err((MemoryRegion { inner }, e)),
        }
    }

    /// `Ok` when no posted request holds the region. `Arc::get_mut` reads the
    /// count with acquire ordering: the completion that released the last
    /// request (on any thread) happens before, so the device's writes are
    /// visible to what follows.
    pub(super) fn check_idle(&mut self) -> Result<()> {
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::mr::host::volatile_write;

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

    /// What `into_inner` does with a boxed buffer whose deregistration
    /// fails, then succeeds, without a device (issue 34 hole 6): the
    /// region comes back whole and is used through the pointer taken when
    /// it was placed. Under Miri (Stacked and Tree Borrows) a move of the
    /// box after that pointer was taken makes the accesses below undefined.
    #[test]
    fn failed_deregistration_keeps_pointer_provenance() {
        struct Holder {
            buf: Option<Box<[u8]>>,
            registered: bool,
        }
        let dereg = |h: &mut Holder| match dereg_fault() {
            Some(errno) => Err(Error::verb("ibv_dereg_mr", errno)),
            None => {
                h.registered = false;
                Ok(())
            }
        };
        let boxed: Box<[u8]> = vec![1u8; 32].into_boxed_slice();
        let holder = Holder {
            buf: Some(boxed),
            registered: true,
        };
        let (mut arc, ptr, len) = place(holder, |h| h.buf.as_mut());
        assert_eq!(len, 32);
        // Busy while another holder (a posted request) exists.
        let share = arc.clone();
        let (back, e) = take_back(arc, dereg, |h| h.buf.take()).err().unwrap();
        assert!(matches!(e, Error::Busy { in_flight: 1, .. }), "{e}");
        drop(share);
        arc = back;
        inject_dereg_failures(2);
        for round in 0..2u8 {
            let (back, e) = take_back(arc, dereg, |h| h.buf.take()).err().unwrap();
            assert!(
                matches!(
                    e,
                    Error::Verb {
                        errno: libc::EBUSY,
                        ..
                    }
                ),
                "{e}"
            );
            assert!(back.registered);
            arc = back;
            // SAFETY: ptr addresses the 32 bytes of the box, which has not
            // moved since it was placed; nothing else accesses them.
            unsafe { volatile_write(ptr.add(round as usize), &[7 + round]) };
            // SAFETY: as above; nothing writes while the view lives.
            let view = unsafe { std::slice::from_raw_parts(ptr, len) };
            assert_eq!(view[round as usize], 7 + round);
        }
        let back = take_back(arc, dereg, |h| h.buf.take())
            .ok()
            .unwrap()
            .unwrap();
        assert_eq!(&back[..3], &[7, 8, 1]);
    }

    #[test]
    fn injected_dereg_failures_fail_that_many_times() {
        assert_eq!(dereg_fault(), None);
        inject_dereg_failures(2);
        assert_eq!(dereg_fault(), Some(libc::EBUSY));
        assert_eq!(dereg_fault(), Some(libc::EBUSY));
        assert_eq!(dereg_fault(), None);
    }
}
