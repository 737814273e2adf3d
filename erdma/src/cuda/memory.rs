//! Device memory: owned buffers and raw device addresses.

use std::ffi::c_void;
use std::fmt;
use std::marker::PhantomData;
use std::ops::Range;

use cudarc::driver::sys::CUdeviceptr;

use super::device::Device;
use super::driver::{check, driver};
use super::error::{CudaError, Result};
use super::stream::Stream;

/// Element types that may live in device memory and be copied to and from the host byte for
/// byte.
///
/// # Safety
/// Implementors must be plain data: `Copy`, no padding, no pointers, and every bit pattern
/// must be a valid value (device memory is copied back without any check).
pub unsafe trait DeviceRepr: Copy + Send + Sync + 'static {}

// SAFETY: primitive integers and floats have no padding and accept every bit pattern.
unsafe impl DeviceRepr for u8 {}
// SAFETY: as above.
unsafe impl DeviceRepr for i8 {}
// SAFETY: as above.
unsafe impl DeviceRepr for u16 {}
// SAFETY: as above.
unsafe impl DeviceRepr for i16 {}
// SAFETY: as above.
unsafe impl DeviceRepr for u32 {}
// SAFETY: as above.
unsafe impl DeviceRepr for i32 {}
// SAFETY: as above.
unsafe impl DeviceRepr for u64 {}
// SAFETY: as above.
unsafe impl DeviceRepr for i64 {}
// SAFETY: as above.
unsafe impl DeviceRepr for f32 {}
// SAFETY: as above.
unsafe impl DeviceRepr for f64 {}

/// A raw device address, as NCCL and the driver take it. Carrying one around is safe; handing
/// it to the GPU is `unsafe` (see the `*_raw` functions).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
#[repr(transparent)]
pub struct DevicePtr(pub CUdeviceptr);

impl DevicePtr {
    /// The null device address.
    pub const NULL: DevicePtr = DevicePtr(0);

    /// This address plus `bytes` (no bounds check: it is just arithmetic).
    pub fn byte_add(self, bytes: usize) -> DevicePtr {
        DevicePtr(self.0.wrapping_add(bytes as u64))
    }

    /// Whether this is address 0.
    pub fn is_null(self) -> bool {
        self.0 == 0
    }

    /// The address as a C pointer, for FFI.
    pub fn as_ptr(self) -> *const c_void {
        self.0 as usize as *const c_void
    }

    /// The address as a mutable C pointer, for FFI.
    pub fn as_mut_ptr(self) -> *mut c_void {
        self.0 as usize as *mut c_void
    }
}

/// How a buffer's memory is given back.
enum Dealloc {
    /// `cuMemFree`.
    CuMemFree,
    /// A foreign allocator (e.g. `ncclMemFree`), called with the context current.
    Custom(Box<dyn Fn(DevicePtr) + Send + Sync>),
}

/// `len` elements of `T` in GPU memory, owned.
///
/// Dropping a buffer first waits for all work on its GPU (`cuCtxSynchronize`) so memory that
/// enqueued work (a collective, a copy, a captured graph replay) may still touch is never
/// freed under it. Abort stuck NCCL communicators before dropping buffers they use.
pub struct DeviceBuffer<T: DeviceRepr> {
    device: Device,
    ptr: DevicePtr,
    len: usize,
    dealloc: Dealloc,
    _marker: PhantomData<T>,
}

impl<T: DeviceRepr> fmt::Debug for DeviceBuffer<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("DeviceBuffer")
            .field("device", &self.device.ordinal())
            .field("ptr", &format_args!("{:#x}", self.ptr.0))
            .field("len", &self.len)
            .finish()
    }
}

fn byte_len<T>(len: usize) -> Result<usize> {
    len.checked_mul(std::mem::size_of::<T>())
        .ok_or_else(|| CudaError::invalid(format!("{len} elements overflow the address space")))
}

impl<T: DeviceRepr> DeviceBuffer<T> {
    /// Allocates `len` elements with `cuMemAlloc` (memory that GPUDirect RDMA can register).
    /// The contents are unspecified; `len` 0 allocates nothing.
    pub fn alloc(device: &Device, len: usize) -> Result<Self> {
        let bytes = byte_len::<T>(len)?;
        let mut ptr: CUdeviceptr = 0;
        if bytes > 0 {
            device.bind()?;
            let d = driver()?;
            // SAFETY: the context is current; the driver writes one device address.
            check("cuMemAlloc_v2", unsafe {
                (d.cuMemAlloc_v2)(&mut ptr, bytes)
            })?;
        }
        Ok(DeviceBuffer {
            device: device.clone(),
            ptr: DevicePtr(ptr),
            len,
            dealloc: Dealloc::CuMemFree,
            _marker: PhantomData,
        })
    }

    /// Allocates `len` elements set to all-zero bytes.
    pub fn zeroed(device: &Device, len: usize, stream: &Stream) -> Result<Self> {
        let mut b = Self::alloc(device, len)?;
        b.fill_bytes(0, stream)?;
        stream.synchronize()?;
        Ok(b)
    }

    /// Allocates a buffer holding a copy of `src`.
    pub fn from_host(device: &Device, src: &[T], stream: &Stream) -> Result<Self> {
        let mut b = Self::alloc(device, src.len())?;
        b.copy_from_host(src, stream)?;
        Ok(b)
    }

    /// Takes ownership of memory allocated by another allocator.
    ///
    /// # Safety
    /// `ptr` must address `len` elements of `T` on `device`, owned by nobody else; `free` must
    /// release exactly that allocation and is called once, with `device` current, after all
    /// work on the device finished.
    pub unsafe fn from_raw_parts(
        device: &Device,
        ptr: DevicePtr,
        len: usize,
        free: Box<dyn Fn(DevicePtr) + Send + Sync>,
    ) -> Self {
        DeviceBuffer {
            device: device.clone(),
            ptr,
            len,
            dealloc: Dealloc::Custom(free),
            _marker: PhantomData,
        }
    }

    /// Number of elements.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether the buffer holds no elements.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Size in bytes.
    pub fn byte_len(&self) -> usize {
        self.len * std::mem::size_of::<T>()
    }

    /// The GPU holding the memory.
    pub fn device(&self) -> &Device {
        &self.device
    }

    /// The device address of element 0.
    pub fn device_ptr(&self) -> DevicePtr {
        self.ptr
    }

    /// The device address `byte_offset` bytes in, checked against the buffer's size (an offset
    /// equal to the size is allowed: an empty tail).
    pub fn ptr_at(&self, byte_offset: usize) -> Result<DevicePtr> {
        if byte_offset > self.byte_len() {
            return Err(CudaError::invalid(format!(
                "offset {byte_offset} beyond a buffer of {} bytes",
                self.byte_len()
            )));
        }
        Ok(self.ptr.byte_add(byte_offset))
    }

    fn check_range(&self, range: &Range<usize>) -> Result<()> {
        if range.start > range.end || range.end > self.byte_len() {
            return Err(CudaError::invalid(format!(
                "byte range {}..{} outside a buffer of {} bytes",
                range.start,
                range.end,
                self.byte_len()
            )));
        }
        Ok(())
    }

    fn check_stream(&self, stream: &Stream) -> Result<()> {
        if stream.device().ordinal() != self.device.ordinal() {
            return Err(CudaError::invalid(format!(
                "stream of GPU {} used with a buffer on GPU {}",
                stream.device().ordinal(),
                self.device.ordinal()
            )));
        }
        Ok(())
    }

    /// Exports the pages holding this buffer as a dma-buf
    /// (`cuMemGetHandleForAddressRange`), for NICs that register device memory that way
    /// (`ibv_reg_dmabuf_mr`); returns the file descriptor and the buffer's offset in it. The
    /// dma-buf covers whole host pages of the allocation around the buffer, so a buffer whose
    /// allocation does not cover them (the driver packs allocations under 2 MiB together, so
    /// theirs often do not) is refused with an invalid-usage error; multiples of 2 MiB export. Fails with the driver's error on GPUs or drivers without
    /// dma-buf support
    /// (`CU_DEVICE_ATTRIBUTE_DMA_BUF_SUPPORTED`).
    pub fn export_dmabuf(&self) -> Result<(std::os::fd::OwnedFd, u64)> {
        use std::os::fd::FromRawFd;
        let bytes = self.byte_len();
        if bytes == 0 {
            return Err(CudaError::invalid("cannot export an empty buffer"));
        }
        self.device.bind()?;
        let d = driver()?;
        let (mut base, mut size): (CUdeviceptr, usize) = (0, 0);
        // SAFETY: the context is current; the driver writes the base and size of the
        // allocation holding this live buffer.
        check("cuMemGetAddressRange_v2", unsafe {
            (d.cuMemGetAddressRange_v2)(&mut base, &mut size, self.ptr.0)
        })?;
        // The range must be whole host pages, inside the allocation (the driver
        // answers CUDA_ERROR_INVALID_VALUE otherwise): a small allocation
        // that the driver placed inside a page cannot be exported.
        let page = page_size() as u64;
        let start = self.ptr.0 / page * page;
        let end = (self.ptr.0 + bytes as u64).div_ceil(page) * page;
        if start < base || end > base + size as u64 {
            return Err(CudaError::invalid(format!(
                "dma-buf export needs whole {page}-byte host pages of one allocation, and this \
                 {bytes}-byte buffer's allocation ({size} bytes at {base:#x}) does not cover them \
                 (the driver packs allocations under 2 MiB together): allocate buffers to export \
                 in multiples of 2 MiB"
            )));
        }
        let mut fd: std::ffi::c_int = -1;
        // SAFETY: the context is current; the range lies in this live allocation; the driver
        // writes one int (CU_MEM_RANGE_HANDLE_TYPE_DMA_BUF_FD = 1).
        check("cuMemGetHandleForAddressRange", unsafe {
            (d.cuMemGetHandleForAddressRange)(
                (&mut fd as *mut std::ffi::c_int).cast(),
                start,
                (end - start) as usize,
                1,
                0,
            )
        })?;
        if fd < 0 {
            return Err(CudaError::invalid(
                "cuMemGetHandleForAddressRange returned no descriptor",
            ));
        }
        // SAFETY: the driver created this descriptor for us; nobody else owns it.
        Ok((
            unsafe { std::os::fd::OwnedFd::from_raw_fd(fd) },
            self.ptr.0 - start,
        ))
    }

    /// Enqueues setting every byte to `value` on `stream`.
    pub fn fill_bytes(&mut self, value: u8, stream: &Stream) -> Result<()> {
        let all = 0..self.byte_len();
        self.fill_byte_range(all, value, stream)
    }

    /// Enqueues setting the bytes in `range` to `value` on `stream`.
    pub fn fill_byte_range(
        &mut self,
        range: Range<usize>,
        value: u8,
        stream: &Stream,
    ) -> Result<()> {
        self.check_range(&range)?;
        self.check_stream(stream)?;
        // SAFETY: the range lies inside this live allocation on the stream's device.
        unsafe { memset_raw(self.ptr.byte_add(range.start), value, range.len(), stream) }
    }

    /// Copies `src` into the first `src.len()` elements and waits for the copy.
    pub fn copy_from_host(&mut self, src: &[T], stream: &Stream) -> Result<()> {
        if src.len() > self.len {
            return Err(CudaError::invalid(format!(
                "copying {} elements into a buffer of {}",
                src.len(),
                self.len
            )));
        }
        self.check_stream(stream)?;
        // SAFETY: `src` is plain data of the size copied and outlives the copy because
        // copy_htod_raw waits for it; the destination lies inside this allocation.
        unsafe { copy_htod_raw(self.ptr, as_bytes(src), stream) }
    }

    /// Copies the first `dst.len()` elements into `dst` and waits for the copy (after all
    /// work enqueued on `stream` before it).
    pub fn copy_to_host(&self, dst: &mut [T], stream: &Stream) -> Result<()> {
        if dst.len() > self.len {
            return Err(CudaError::invalid(format!(
                "copying {} elements out of a buffer of {}",
                dst.len(),
                self.len
            )));
        }
        self.check_stream(stream)?;
        // SAFETY: `dst` is plain data (any bit pattern valid) of the size copied and outlives
        // the copy because copy_dtoh_raw waits for it.
        unsafe { copy_dtoh_raw(as_bytes_mut(dst), self.ptr, stream) }
    }

    /// Copies the whole buffer to a new vector (waits).
    pub fn to_vec(&self, stream: &Stream) -> Result<Vec<T>> {
        let mut v = Vec::with_capacity(self.len);
        let bytes = self.byte_len();
        if bytes > 0 {
            self.check_stream(stream)?;
            // SAFETY: the vector has capacity for len elements; the copy fills all of them
            // (or fails, leaving len 0) before set_len, and T accepts any bit pattern.
            unsafe {
                let dst = std::slice::from_raw_parts_mut(v.as_mut_ptr() as *mut u8, bytes);
                copy_dtoh_raw(dst, self.ptr, stream)?;
                v.set_len(self.len);
            }
        }
        Ok(v)
    }

    /// Enqueues a copy of all of `src` into the start of this buffer (device to device) on
    /// `stream`, a stream of this buffer's GPU. A source on another GPU is copied from and
    /// waited for before this returns: dropping it synchronizes its own GPU only, not the
    /// stream that reads it.
    pub fn copy_from_device(&mut self, src: &DeviceBuffer<T>, stream: &Stream) -> Result<()> {
        if src.len > self.len {
            return Err(CudaError::invalid(format!(
                "copying {} elements into a buffer of {}",
                src.len, self.len
            )));
        }
        let wait = copy_waits(
            src.device.ordinal(),
            self.device.ordinal(),
            stream.device().ordinal(),
        )?;
        // SAFETY: both ranges lie in live allocations. Dropping the destination synchronizes
        // its GPU, which runs the stream; dropping a source of the same GPU does too, and a
        // source on another GPU is waited for below, before its borrow ends.
        unsafe { copy_dtod_raw(self.ptr, src.ptr, src.byte_len(), stream) }?;
        if wait {
            stream.synchronize()?;
        }
        Ok(())
    }
}

/// Whether a device-to-device copy from GPU `src` into GPU `dst` on a stream of GPU `stream`
/// must be waited for before the source's borrow ends: the stream must be the destination's
/// (whose drop synchronizes it), and a source on another GPU is not ordered by its own drop.
fn copy_waits(src: usize, dst: usize, stream: usize) -> Result<bool> {
    if stream != dst {
        return Err(CudaError::invalid(format!(
            "stream of GPU {stream} used with a buffer on GPU {dst}: copy on a stream of the \
             destination's GPU"
        )));
    }
    Ok(src != dst)
}

impl<T: DeviceRepr> Drop for DeviceBuffer<T> {
    fn drop(&mut self) {
        if self.ptr.is_null() && matches!(self.dealloc, Dealloc::CuMemFree) {
            return;
        }
        if self.device.bind().is_err() {
            return;
        }
        let Ok(d) = driver() else { return };
        // Work that may still use the memory (enqueued through raw pointers too) must finish
        // before it is freed. Errors are ignored: nothing can be returned from drop.
        // SAFETY: the context is current.
        unsafe { (d.cuCtxSynchronize)() };
        match &self.dealloc {
            // SAFETY: this buffer allocated ptr with cuMemAlloc and frees it once.
            Dealloc::CuMemFree => unsafe {
                (d.cuMemFree_v2)(self.ptr.0);
            },
            Dealloc::Custom(free) => free(self.ptr),
        }
    }
}

fn page_size() -> usize {
    // SAFETY: sysconf has no preconditions.
    let p = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    if p > 0 { p as usize } else { 4096 }
}

fn as_bytes<T: DeviceRepr>(s: &[T]) -> &[u8] {
    // SAFETY: T is plain data without padding (DeviceRepr), so its bytes are initialized.
    unsafe { std::slice::from_raw_parts(s.as_ptr() as *const u8, std::mem::size_of_val(s)) }
}

fn as_bytes_mut<T: DeviceRepr>(s: &mut [T]) -> &mut [u8] {
    // SAFETY: T accepts every bit pattern (DeviceRepr), so any bytes written are valid Ts.
    unsafe { std::slice::from_raw_parts_mut(s.as_mut_ptr() as *mut u8, std::mem::size_of_val(s)) }
}

/// Enqueues setting `bytes` bytes at `ptr` to `value` on `stream`.
///
/// # Safety
/// `ptr..ptr+bytes` must be device memory of the stream's GPU that stays allocated until the
/// memset ran and that no other work uses concurrently.
pub unsafe fn memset_raw(ptr: DevicePtr, value: u8, bytes: usize, stream: &Stream) -> Result<()> {
    if bytes == 0 {
        return Ok(());
    }
    stream.device().bind()?;
    let d = driver()?;
    // SAFETY: the caller guarantees the range; the stream is alive.
    check("cuMemsetD8Async", unsafe {
        (d.cuMemsetD8Async)(ptr.0, value, bytes, stream.as_raw())
    })
}

/// Copies `src` to device address `dst` after the work already on `stream`, and waits.
///
/// # Safety
/// `dst..dst+src.len()` must be device memory of the stream's GPU, allocated and not used
/// concurrently by other work.
pub unsafe fn copy_htod_raw(dst: DevicePtr, src: &[u8], stream: &Stream) -> Result<()> {
    if src.is_empty() {
        return Ok(());
    }
    stream.device().bind()?;
    let d = driver()?;
    // SAFETY: the caller guarantees the destination; `src` stays borrowed until the stream
    // synchronization below returns, so the host bytes outlive the copy.
    check("cuMemcpyHtoDAsync_v2", unsafe {
        (d.cuMemcpyHtoDAsync_v2)(
            dst.0,
            src.as_ptr() as *const c_void,
            src.len(),
            stream.as_raw(),
        )
    })?;
    stream.synchronize()
}

/// Copies device address `src` into `dst` after the work already on `stream`, and waits.
///
/// # Safety
/// `src..src+dst.len()` must be device memory of the stream's GPU that stays allocated until
/// the copy ran.
pub unsafe fn copy_dtoh_raw(dst: &mut [u8], src: DevicePtr, stream: &Stream) -> Result<()> {
    if dst.is_empty() {
        return Ok(());
    }
    stream.device().bind()?;
    let d = driver()?;
    // SAFETY: the caller guarantees the source; `dst` stays borrowed until the stream
    // synchronization below returns, so the host bytes outlive the copy.
    check("cuMemcpyDtoHAsync_v2", unsafe {
        (d.cuMemcpyDtoHAsync_v2)(
            dst.as_mut_ptr() as *mut c_void,
            src.0,
            dst.len(),
            stream.as_raw(),
        )
    })?;
    stream.synchronize()
}

/// Enqueues a device-to-device copy of `bytes` bytes on `stream`.
///
/// # Safety
/// Both ranges must be device memory that stays allocated until the copy ran; the
/// destination must not be used concurrently by other work.
pub unsafe fn copy_dtod_raw(
    dst: DevicePtr,
    src: DevicePtr,
    bytes: usize,
    stream: &Stream,
) -> Result<()> {
    if bytes == 0 {
        return Ok(());
    }
    stream.device().bind()?;
    let d = driver()?;
    // SAFETY: the caller guarantees both ranges; the stream is alive.
    check("cuMemcpyDtoDAsync_v2", unsafe {
        (d.cuMemcpyDtoDAsync_v2)(dst.0, src.0, bytes, stream.as_raw())
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn device_ptr_arithmetic() {
        let p = DevicePtr(0x1000);
        assert_eq!(p.byte_add(0x20), DevicePtr(0x1020));
        assert!(!p.is_null());
        assert!(DevicePtr::NULL.is_null());
        assert_eq!(p.as_ptr() as usize, 0x1000);
    }

    #[test]
    fn byte_len_overflow_is_an_error() {
        assert!(byte_len::<u64>(usize::MAX).is_err());
        assert_eq!(byte_len::<u32>(3).unwrap(), 12);
    }

    #[test]
    fn cross_gpu_copies_wait_and_foreign_streams_are_refused() {
        assert!(!copy_waits(0, 0, 0).unwrap());
        assert!(copy_waits(1, 0, 0).unwrap());
        let e = copy_waits(0, 0, 1).unwrap_err().to_string();
        assert!(
            e.contains("stream of GPU 1 used with a buffer on GPU 0"),
            "{e}"
        );
        assert!(copy_waits(1, 0, 1).is_err());
    }

    #[test]
    fn host_bytes_views_cover_every_byte() {
        let v = [1u32, 2];
        assert_eq!(as_bytes(&v).len(), 8);
        let mut w = [0u16; 3];
        as_bytes_mut(&mut w)[0] = 7;
        assert_eq!(w[0], 7);
    }
}
