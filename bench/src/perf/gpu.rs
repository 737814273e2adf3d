//! GPU memory for `--use_cuda` (CUDA driver API through `erdma::cuda`, loaded
//! at run time: a host without a driver gets a one-line error, exit 8),
//! registered by the library's `ProtectionDomain::register_gpu`: dma-buf
//! (`--use_cuda_dmabuf`), peer memory (`--use_cuda_peermem`: `ibv_reg_mr` on
//! the device pointer, eRDMA's way, needs nvidia_peermem) or, by default,
//! whichever works (dma-buf first).

use erdma::cuda::{CudaError, Device, DeviceBuffer, Stream};
use erdma::{AccessFlags, GpuMemory, GpuRegistration, MemoryRegion, ProtectionDomain};

use super::error::{PerfError, PerfResult};
use super::options::GpuReg;

/// Opens GPU `ordinal` (fails early, before any connection, when CUDA or
/// the GPU is missing); returns it and its name for the report.
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

    /// The buffer.
    pub fn device_buffer(&self) -> &DeviceBuffer<u8> {
        &self.buf
    }

    /// Copies host bytes to `offset`.
    pub fn write(&mut self, offset: usize, data: &[u8]) -> PerfResult<()> {
        self.check(offset, data.len(), "write")?;
        let ptr = self
            .buf
            .ptr_at(offset)
            .map_err(|e| gpu_err("copy to the GPU buffer", &e))?;
        // SAFETY: `ptr .. ptr + data.len()` lies inside the allocation
        // (checked), which lives as long as `self`; the stream is synchronised
        // before returning so `data` outlives the copy.
        unsafe { erdma::cuda::copy_htod_raw(ptr, data, &self.stream) }
            .and_then(|_| self.stream.synchronize())
            .map_err(|e| gpu_err("copy to the GPU buffer", &e))
    }

    /// Copies bytes at `offset` to the host.
    pub fn read(&self, offset: usize, out: &mut [u8]) -> PerfResult<()> {
        self.check(offset, out.len(), "read")?;
        let ptr = self
            .buf
            .ptr_at(offset)
            .map_err(|e| gpu_err("copy from the GPU buffer", &e))?;
        // SAFETY: as in write; `out` outlives the synchronised copy.
        unsafe { erdma::cuda::copy_dtoh_raw(out, ptr, &self.stream) }
            .and_then(|_| self.stream.synchronize())
            .map_err(|e| gpu_err("copy from the GPU buffer", &e))
    }

    fn check(&self, offset: usize, len: usize, what: &str) -> PerfResult<()> {
        if offset.checked_add(len).is_none_or(|e| e > self.len()) {
            return Err(PerfError::Gpu(format!(
                "{what} of {len} bytes at {offset} outside the {}-byte GPU buffer",
                self.len()
            )));
        }
        Ok(())
    }
}

/// A registered GPU buffer with its copy stream.
pub struct GpuRegion {
    mr: MemoryRegion<GpuMemory>,
    stream: Stream,
}

impl GpuRegion {
    /// The memory region.
    pub fn mr(&self) -> &MemoryRegion<GpuMemory> {
        &self.mr
    }

    /// The memory region, writable, and the stream its copies use.
    pub fn parts_mut(&mut self) -> (&mut MemoryRegion<GpuMemory>, &Stream) {
        (&mut self.mr, &self.stream)
    }

    /// How it was registered, for the report.
    pub fn how(&self) -> String {
        self.mr.gpu_registration().to_string()
    }

    /// Copies host bytes to `offset` of the buffer.
    pub fn write(&mut self, offset: usize, data: &[u8]) -> PerfResult<()> {
        self.mr
            .copy_from_host(offset, data, &self.stream)
            .map_err(|e| PerfError::Gpu(format!("copy to the GPU buffer: {e}")))
    }

    /// Copies bytes at `offset` of the buffer to the host.
    pub fn read(&self, offset: usize, out: &mut [u8]) -> PerfResult<()> {
        self.mr
            .copy_to_host(offset, out, &self.stream)
            .map_err(|e| PerfError::Gpu(format!("copy from the GPU buffer: {e}")))
    }
}

/// The library's registration mode for the options.
pub fn registration(how: GpuReg) -> GpuRegistration {
    match how {
        GpuReg::Auto => GpuRegistration::Auto,
        GpuReg::PeerMemory => GpuRegistration::PeerMemory,
        GpuReg::DmaBuf => GpuRegistration::DmaBuf,
    }
}

/// Allocates `len` bytes on `dev` and registers them in `pd`.
pub fn register(
    dev: &Device,
    pd: &ProtectionDomain,
    len: usize,
    access: AccessFlags,
    how: GpuReg,
) -> PerfResult<GpuRegion> {
    let GpuBuffer { buf, stream } = GpuBuffer::alloc(dev, len)?;
    let mode = registration(how);
    let mr = pd.register_gpu(buf, access, mode).map_err(|e| {
        PerfError::Gpu(format!(
            "register {len} bytes of GPU memory on {} ({mode}): {e}",
            pd.context().name()
        ))
    })?;
    Ok(GpuRegion { mr, stream })
}
