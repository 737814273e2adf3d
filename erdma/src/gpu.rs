//! GPU memory as memory regions (feature `cuda`): a region that owns a
//! [`DeviceBuffer`], registered the way the NIC supports, and kept alive
//! until its last posted request completes.
//!
//! Two ways exist to let a NIC reach GPU memory:
//! - **peer memory**: `ibv_reg_mr` on the device address, which the kernel
//!   resolves through a peer-memory module (`nvidia_peermem`). This is the only
//!   way on eRDMA, whose provider has no `ibv_reg_dmabuf_mr`;
//! - **dma-buf**: the GPU driver exports the pages as a dma-buf
//!   (`cuMemGetHandleForAddressRange`) and the NIC registers that
//!   (`ibv_reg_dmabuf_mr`): mlx5, efa and other providers, no module needed.
//!
//! [`GpuRegistration::Auto`] tries dma-buf where the provider has it and falls
//! back to peer memory; when neither works the error names what is missing.
//! A GPU region is never readable as `&[u8]`: copy with
//! [`MemoryRegion::copy_to_host`] / [`MemoryRegion::copy_from_host`].

use std::fmt;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};

use erdma_sys as sys;

use crate::cuda::{self, DeviceBuffer, Stream};
use crate::error::{Error, Result};
use crate::ffi;
use crate::mr::{AccessFlags, MemoryRegion, check_access, reg_dmabuf_mr};
use crate::pd::ProtectionDomain;

/// How GPU memory is registered (see the [module documentation](self)).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum GpuRegistration {
    /// dma-buf where the provider has `ibv_reg_dmabuf_mr`, else peer memory.
    Auto,
    /// `ibv_reg_mr` on the device address (needs `nvidia_peermem`).
    PeerMemory,
    /// dma-buf export and `ibv_reg_dmabuf_mr`.
    DmaBuf,
}

impl fmt::Display for GpuRegistration {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            GpuRegistration::Auto => "auto",
            GpuRegistration::PeerMemory => "peer memory (ibv_reg_mr, nvidia_peermem)",
            GpuRegistration::DmaBuf => "dma-buf (ibv_reg_dmabuf_mr)",
        })
    }
}

/// GPU memory owned by a [`MemoryRegion`]: the buffer and, for a dma-buf
/// registration, the exported descriptor (closed after deregistration).
pub struct GpuMemory {
    buffer: DeviceBuffer<u8>,
    dmabuf: Option<OwnedFd>,
    registration: GpuRegistration,
}

impl fmt::Debug for GpuMemory {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("GpuMemory")
            .field("buffer", &self.buffer)
            .field("registration", &self.registration)
            .finish()
    }
}

impl crate::mr::sealed::Sealed for GpuMemory {}
impl crate::mr::OpaqueMemory for GpuMemory {}

impl GpuMemory {
    /// The GPU buffer.
    pub fn device_buffer(&self) -> &DeviceBuffer<u8> {
        &self.buffer
    }

    /// How it was registered: [`GpuRegistration::PeerMemory`] or
    /// [`GpuRegistration::DmaBuf`].
    pub fn registration(&self) -> GpuRegistration {
        self.registration
    }

    /// The dma-buf descriptor, for a dma-buf registration.
    pub fn dmabuf_fd(&self) -> Option<BorrowedFd<'_>> {
        self.dmabuf.as_ref().map(|f| f.as_fd())
    }

    /// Gives the buffer back (the region has been deregistered).
    pub fn into_device_buffer(self) -> DeviceBuffer<u8> {
        self.buffer
    }
}

impl ProtectionDomain {
    /// Registers GPU memory the region then owns (see the [`crate::gpu`]
    /// module for the ways). The buffer is freed only after deregistration
    /// and after every request posted with it has completed.
    pub fn register_gpu(
        &self,
        buffer: DeviceBuffer<u8>,
        access: AccessFlags,
        how: GpuRegistration,
    ) -> Result<MemoryRegion<GpuMemory>> {
        check_access("register_gpu", access)?;
        if buffer.byte_len() == 0 {
            return Err(Error::invalid(
                "register_gpu",
                "cannot register an empty buffer",
            ));
        }
        ffi::verbs()?;
        let got = match how {
            GpuRegistration::DmaBuf => via_dmabuf(self, &buffer, access),
            GpuRegistration::PeerMemory => via_peer_memory(self, &buffer, access),
            GpuRegistration::Auto => match via_dmabuf(self, &buffer, access) {
                Ok(r) => Ok(r),
                Err(dmabuf) => {
                    via_peer_memory(self, &buffer, access).map_err(|peer| Error::Unsupported {
                        feature: "registering GPU memory".into(),
                        device: Some(self.context().name().to_owned()),
                        hint: Some(format!("dma-buf: {dmabuf}; peer memory: {peer}")),
                    })
                }
            },
        };
        let (mr, dmabuf, registration) = got?;
        let addr = buffer.device_ptr().0;
        let len = buffer.byte_len();
        let mem = GpuMemory {
            buffer,
            dmabuf,
            registration,
        };
        MemoryRegion::register_with(self, mem, addr, len, access, |_| Ok(mr))
    }
}

type Registered = (*mut sys::ibv_mr, Option<OwnedFd>, GpuRegistration);

fn via_dmabuf(
    pd: &ProtectionDomain,
    buf: &DeviceBuffer<u8>,
    access: AccessFlags,
) -> Result<Registered> {
    let (fd, offset) = buf.export_dmabuf().map_err(|e| Error::Gpu {
        operation: "export GPU memory as a dma-buf (cuMemGetHandleForAddressRange)",
        detail: e.to_string(),
    })?;
    let addr = buf.device_ptr().0;
    // SAFETY: fd is a dma-buf of the pages holding `buf`, which the region
    // owns (with the fd) until after deregistration; offset..offset+len is
    // the buffer inside it.
    let mr = unsafe {
        reg_dmabuf_mr(
            pd.as_raw(),
            fd.as_raw_fd(),
            offset,
            buf.byte_len(),
            addr,
            access,
        )
    }?;
    Ok((mr, Some(fd), GpuRegistration::DmaBuf))
}

fn via_peer_memory(
    pd: &ProtectionDomain,
    buf: &DeviceBuffer<u8>,
    access: AccessFlags,
) -> Result<Registered> {
    let ptr = buf.device_ptr().as_mut_ptr();
    // SAFETY: a live PD; the device range belongs to `buf`, which the region
    // owns until after deregistration (the kernel resolves it through the
    // peer-memory module, or refuses).
    let mr = unsafe { sys::inline::ibv_reg_mr(pd.as_raw(), ptr, buf.byte_len(), access.bits()) };
    if !mr.is_null() {
        return Ok((mr, None, GpuRegistration::PeerMemory));
    }
    let e = Error::last_os("ibv_reg_mr");
    Err(match e.errno() {
        Some(libc::EFAULT) | Some(libc::EINVAL) | Some(libc::EOPNOTSUPP) => Error::Verb {
            verb: "ibv_reg_mr",
            errno: e.errno().unwrap_or(libc::EFAULT),
            hint: Some(peer_memory_hint()),
        },
        _ => e,
    })
}

/// Why `ibv_reg_mr` on GPU memory fails, from what is loaded.
fn peer_memory_hint() -> String {
    let loaded = |m: &str| std::path::Path::new("/sys/module").join(m).exists();
    if loaded("nvidia_peermem") || loaded("nv_peer_mem") {
        "the GPU address was refused although a peer-memory module is loaded: check dmesg, \
         and that the NIC and GPU are in the same IOMMU domain"
            .into()
    } else {
        "GPU memory needs a peer-memory module: load nvidia_peermem (modprobe nvidia_peermem; \
         on the host, not in the container), or use a NIC whose provider has ibv_reg_dmabuf_mr"
            .into()
    }
}

impl crate::lane::SourceMut<'_, GpuMemory> {
    /// [`MemoryRegion::copy_from_host`], between posts of the prepared send.
    pub fn copy_from_host(&mut self, offset: usize, src: &[u8], stream: &Stream) -> Result<()> {
        self.0.copy_from_host(offset, src, stream)
    }
}

impl MemoryRegion<GpuMemory> {
    /// The GPU buffer (reading it with the GPU's API while a peer writes
    /// gives torn data, never undefined behaviour: it is device memory).
    pub fn device_buffer(&self) -> &DeviceBuffer<u8> {
        self.buffer().device_buffer()
    }

    /// How the region was registered.
    pub fn gpu_registration(&self) -> GpuRegistration {
        self.buffer().registration()
    }

    /// Copies `dst.len()` bytes at `offset` to the host (waits for the copy
    /// after the work already on `stream`).
    pub fn copy_to_host(&self, offset: usize, dst: &mut [u8], stream: &Stream) -> Result<()> {
        let src = self.device_range("MemoryRegion::copy_to_host", offset, dst.len(), stream)?;
        // SAFETY: the range lies in the region's live GPU buffer; the copy
        // is finished when this returns.
        unsafe { cuda::copy_dtoh_raw(dst, src, stream) }.map_err(gpu_error)
    }

    /// Copies `src` into the region at `offset` (waits for the copy).
    /// `&mut self` excludes other local writers; requests in flight read
    /// whatever the memory holds.
    pub fn copy_from_host(&mut self, offset: usize, src: &[u8], stream: &Stream) -> Result<()> {
        let dst = self.device_range("MemoryRegion::copy_from_host", offset, src.len(), stream)?;
        // SAFETY: the range lies in the region's live GPU buffer; the copy
        // is finished when this returns.
        unsafe { cuda::copy_htod_raw(dst, src, stream) }.map_err(gpu_error)
    }

    fn device_range(
        &self,
        what: &'static str,
        offset: usize,
        len: usize,
        stream: &Stream,
    ) -> Result<cuda::DevicePtr> {
        let gpu = self.device_buffer().device().ordinal();
        if stream.device().ordinal() != gpu {
            return Err(Error::invalid(
                what,
                format!(
                    "a stream of GPU {} used with memory of GPU {gpu}",
                    stream.device().ordinal()
                ),
            ));
        }
        match offset.checked_add(len) {
            Some(end) if end <= self.len() => {
                Ok(self.device_buffer().device_ptr().byte_add(offset))
            }
            _ => Err(Error::invalid(
                what,
                format!(
                    "{len} bytes at offset {offset} do not fit the {}-byte region",
                    self.len()
                ),
            )),
        }
    }
}

fn gpu_error(e: cuda::CudaError) -> Error {
    Error::Gpu {
        operation: "copy between GPU and host memory",
        detail: e.to_string(),
    }
}
