//! GPU memory for `--use_cuda` (CUDA driver API through `erdma::cuda`, loaded
//! at run time: a host without a driver gets a one-line error, exit 8).
//!
//! Registration: the library's owning GPU registration
//! (`ProtectionDomain::register_gpu`, dma-buf or peer memory chosen at run
//! time) is not in this build's `erdma` yet. Until it is, [`register`] uses
//! peer memory: `ibv_reg_mr` on the device pointer (what eRDMA uses; needs
//! the nvidia_peermem module), and `--use_cuda_dmabuf` is refused. Plugging
//! the library call in changes only [`register`] and [`GpuRegion`]'s fields.

use erdma::cuda::{CudaError, Device, DeviceBuffer, Stream};
use erdma::{AccessFlags, MemoryRegion, ProtectionDomain, RawBuffer};

use super::error::{PerfError, PerfResult};
use super::options::GpuReg;

/// Opens GPU `ordinal` (fails early, before any connection, when CUDA or
/// the GPU is missing).
pub fn open(ordinal: usize) -> PerfResult<(Device, String)> {
    let dev = Device::new(ordinal).map_err(|e| gpu_err(&format!("--use_cuda={ordinal}"), &e))?;
    let name = dev.name().unwrap_or_else(|_| "?".into());
    let bus = dev
        .pci_bus_id()
        .map(|b| b.to_string())
        .unwrap_or_else(|_| "?".into());
    Ok((dev, format!("{name} [{bus}]")))
}

fn gpu_err(what: &str, e: &CudaError) -> PerfError {
    PerfError::Gpu(format!("{what}: {e}"))
}

/// GPU memory with a stream for copies (no RDMA needed).
pub struct GpuBuffer {
    buf: DeviceBuffer<u8>,
    stream: Stream,
}

impl GpuBuffer {
    /// Allocates `len` bytes (rounded up to the GPU page, 64 KiB, as
    /// perftest does) on `dev`, cleared.
    pub fn alloc(dev: &Device, len: usize) -> PerfResult<GpuBuffer> {
        let stream = Stream::new(dev).map_err(|e| gpu_err("create a CUDA stream", &e))?;
        let alloc = len.div_ceil(1 << 16).max(1) << 16;
        let mut buf = DeviceBuffer::<u8>::alloc(dev, alloc)
            .map_err(|e| gpu_err(&format!("allocate {alloc} bytes of GPU memory"), &e))?;
        buf.fill_bytes(0, &stream)
            .and_then(|_| stream.synchronize())
            .map_err(|e| gpu_err("clear the GPU buffer", &e))?;
        Ok(GpuBuffer { buf, stream })
    }

    /// Bytes allocated.
    pub fn len(&self) -> usize {
        self.buf.byte_len()
    }

    /// Whether nothing is allocated (never).
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The device address.
    pub fn device_ptr(&self) -> erdma::cuda::DevicePtr {
        self.buf.device_ptr()
    }

    /// Copies host bytes to `offset`.
    pub fn write(&mut self, offset: usize, data: &[u8]) -> PerfResult<()> {
        if offset + data.len() > self.len() {
            return Err(PerfError::Gpu(format!(
                "write of {} bytes at {offset} outside the {}-byte GPU buffer",
                data.len(),
                self.len()
            )));
        }
        let ptr = self
            .buf
            .ptr_at(offset)
            .map_err(|e| gpu_err("copy to the GPU buffer", &e))?;
        // SAFETY: `ptr .. ptr + data.len()` lies inside the allocation
        // (checked above), which lives as long as `self`; the stream is
        // synchronised before returning so `data` outlives the copy.
        unsafe { erdma::cuda::copy_htod_raw(ptr, data, &self.stream) }
            .and_then(|_| self.stream.synchronize())
            .map_err(|e| gpu_err("copy to the GPU buffer", &e))
    }

    /// Copies bytes at `offset` to the host.
    pub fn read(&self, offset: usize, out: &mut [u8]) -> PerfResult<()> {
        if offset + out.len() > self.len() {
            return Err(PerfError::Gpu(format!(
                "read of {} bytes at {offset} outside the {}-byte GPU buffer",
                out.len(),
                self.len()
            )));
        }
        let ptr = self
            .buf
            .ptr_at(offset)
            .map_err(|e| gpu_err("copy from the GPU buffer", &e))?;
        // SAFETY: as in write; `out` outlives the synchronised copy.
        unsafe { erdma::cuda::copy_dtoh_raw(out, ptr, &self.stream) }
            .and_then(|_| self.stream.synchronize())
            .map_err(|e| gpu_err("copy from the GPU buffer", &e))
    }
}

/// A registered GPU buffer. Dropping it deregisters the memory before it is
/// freed; if a posted request still held the region the GPU memory is
/// leaked rather than freed under the device.
pub struct GpuRegion {
    mr: Option<MemoryRegion<RawBuffer>>,
    buf: Option<GpuBuffer>,
    /// How it was registered, for the report.
    pub how: &'static str,
}

impl GpuRegion {
    /// The memory region.
    pub fn mr(&self) -> &MemoryRegion<RawBuffer> {
        self.mr.as_ref().expect("the region lives until drop")
    }

    /// Copies host bytes to `offset` of the buffer.
    pub fn write(&mut self, offset: usize, data: &[u8]) -> PerfResult<()> {
        self.buf
            .as_mut()
            .expect("the buffer lives until drop")
            .write(offset, data)
    }

    /// Copies bytes at `offset` of the buffer to the host.
    pub fn read(&self, offset: usize, out: &mut [u8]) -> PerfResult<()> {
        self.buf
            .as_ref()
            .expect("the buffer lives until drop")
            .read(offset, out)
    }
}

impl Drop for GpuRegion {
    fn drop(&mut self) {
        if let Some(mr) = self.mr.take()
            && mr.into_inner().is_err()
        {
            // Still registered or in use: never free memory the NIC may
            // touch.
            std::mem::forget(self.buf.take());
        }
    }
}

/// Refuses what this build cannot do, before any connection.
pub fn check_mode(how: GpuReg) -> PerfResult<()> {
    if how == GpuReg::DmaBuf {
        return Err(PerfError::Gpu(
            "--use_cuda_dmabuf: dma-buf registration of GPU memory is not in this build of the erdma \
             library: omit it to register by peer memory (nvidia_peermem)"
                .into(),
        ));
    }
    Ok(())
}

/// Allocates `len` bytes on `dev` and registers them in `pd`.
pub fn register(
    dev: &Device,
    pd: &ProtectionDomain,
    len: usize,
    access: AccessFlags,
    how: GpuReg,
) -> PerfResult<GpuRegion> {
    check_mode(how)?;
    let buf = GpuBuffer::alloc(dev, len)?;
    let ptr = buf.device_ptr();
    // SAFETY: `ptr .. ptr + len` is device memory owned by `buf`, which
    // GpuRegion keeps until the region is deregistered (its Drop leaks the
    // memory when the region is still in use); the NIC reaches it through
    // the peer-memory module, whose absence makes ibv_reg_mr fail cleanly.
    let raw = unsafe { RawBuffer::new(ptr.0 as usize as *mut u8, len) };
    let mr = pd.register(raw, access).map_err(|e| {
        let peermem = std::path::Path::new("/sys/module/nvidia_peermem").exists();
        PerfError::Gpu(format!(
            "register {len} bytes of GPU memory with ibv_reg_mr (peer memory): {e}; {}",
            if peermem {
                "nvidia_peermem is loaded: check that this device supports GPUDirect RDMA"
            } else {
                "the nvidia_peermem module is not loaded: modprobe nvidia_peermem (on the host, not in the container)"
            }
        ))
    })?;
    Ok(GpuRegion {
        mr: Some(mr),
        buf: Some(buf),
        how: "peer memory (ibv_reg_mr)",
    })
}
