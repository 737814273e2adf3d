//! One GPU and its primary context.

use std::ffi::{c_char, c_int};
use std::fmt;
use std::sync::Arc;

use cudarc::driver::sys::{CUcontext, CUdevice};

use super::driver::{check, device_count, driver};
use super::error::{CudaError, Result};

// CUdevice_attribute values used here (cuda.h, stable since CUDA 4-6).
const ATTR_PCI_BUS_ID: c_int = 33;
const ATTR_PCI_DEVICE_ID: c_int = 34;
const ATTR_PCI_DOMAIN_ID: c_int = 50;
const ATTR_CC_MAJOR: c_int = 75;
const ATTR_CC_MINOR: c_int = 76;

/// A GPU, holding a reference on its primary context (the context the CUDA runtime and NCCL
/// use). Cheap to clone; usable from any thread: every method makes the context current on
/// the calling thread first.
#[derive(Clone)]
pub struct Device {
    inner: Arc<Inner>,
}

struct Inner {
    ordinal: usize,
    cu_device: CUdevice,
    ctx: CUcontext,
    compute_capability: (u32, u32),
}

// SAFETY: a primary context handle may be made current and used on any thread; the driver
// serializes access internally. `Inner` holds no thread-affine state.
unsafe impl Send for Inner {}
// SAFETY: see above; all methods take &self and only pass the handle to the driver.
unsafe impl Sync for Inner {}

impl Drop for Inner {
    fn drop(&mut self) {
        if let Ok(d) = driver() {
            // SAFETY: this Inner retained the primary context of cu_device exactly once.
            unsafe { (d.cuDevicePrimaryCtxRelease_v2)(self.cu_device) };
        }
    }
}

impl fmt::Debug for Device {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Device")
            .field("ordinal", &self.inner.ordinal)
            .finish()
    }
}

/// A PCI address as nccl-tests prints it: `domain:bus:device`, `[%04x:%02x:%02x]`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct PciBusId {
    /// PCI domain.
    pub domain: u32,
    /// PCI bus.
    pub bus: u32,
    /// PCI device.
    pub device: u32,
}

impl fmt::Display for PciBusId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{:04x}:{:02x}:{:02x}",
            self.domain, self.bus, self.device
        )
    }
}

/// Free and total memory of a GPU, in bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MemoryInfo {
    /// Bytes not allocated by anyone.
    pub free: usize,
    /// Bytes of memory on the GPU.
    pub total: usize,
}

impl MemoryInfo {
    /// Bytes in use by all processes and contexts on this GPU.
    pub fn used(&self) -> usize {
        self.total.saturating_sub(self.free)
    }
}

impl Device {
    /// Opens GPU `ordinal` (as numbered after `CUDA_VISIBLE_DEVICES`) and retains its primary
    /// context. Fails with [`CudaError::DriverNotFound`] where no driver is installed and
    /// [`CudaError::NoSuchDevice`] for an ordinal beyond the visible GPUs.
    pub fn new(ordinal: usize) -> Result<Device> {
        let d = driver()?;
        let count = device_count()?;
        if ordinal >= count {
            return Err(CudaError::NoSuchDevice { ordinal, count });
        }
        let mut cu_device: CUdevice = 0;
        // SAFETY: ordinal < count fits c_int; the driver writes one CUdevice.
        check("cuDeviceGet", unsafe {
            (d.cuDeviceGet)(&mut cu_device, ordinal as c_int)
        })?;
        let major = attribute(cu_device, ATTR_CC_MAJOR)?;
        let minor = attribute(cu_device, ATTR_CC_MINOR)?;
        let mut ctx: CUcontext = std::ptr::null_mut();
        // SAFETY: cu_device came from cuDeviceGet; the driver writes one context handle.
        check("cuDevicePrimaryCtxRetain", unsafe {
            (d.cuDevicePrimaryCtxRetain)(&mut ctx, cu_device)
        })?;
        let device = Device {
            inner: Arc::new(Inner {
                ordinal,
                cu_device,
                ctx,
                compute_capability: (major as u32, minor as u32),
            }),
        };
        device.bind()?;
        Ok(device)
    }

    /// The ordinal this device was opened with.
    pub fn ordinal(&self) -> usize {
        self.inner.ordinal
    }

    /// The driver's `CUdevice` handle.
    pub fn cu_device(&self) -> CUdevice {
        self.inner.cu_device
    }

    /// The primary context handle. Do not destroy or release it.
    pub fn cu_context(&self) -> CUcontext {
        self.inner.ctx
    }

    /// Makes this GPU's primary context current on the calling thread (what `cudaSetDevice`
    /// does); NCCL and the CUDA runtime then use this GPU.
    pub fn bind(&self) -> Result<()> {
        let d = driver()?;
        let mut current: CUcontext = std::ptr::null_mut();
        // SAFETY: writes one context handle.
        check("cuCtxGetCurrent", unsafe {
            (d.cuCtxGetCurrent)(&mut current)
        })?;
        if current != self.inner.ctx {
            // SAFETY: the context is retained by self for as long as self lives.
            check("cuCtxSetCurrent", unsafe {
                (d.cuCtxSetCurrent)(self.inner.ctx)
            })?;
        }
        Ok(())
    }

    /// The marketing name, e.g. `NVIDIA H200`.
    pub fn name(&self) -> Result<String> {
        let d = driver()?;
        let mut buf = [0 as c_char; 256];
        // SAFETY: the driver writes at most len bytes including the terminating NUL.
        check("cuDeviceGetName", unsafe {
            (d.cuDeviceGetName)(buf.as_mut_ptr(), buf.len() as c_int, self.inner.cu_device)
        })?;
        let bytes: Vec<u8> = buf
            .iter()
            .take_while(|&&c| c != 0)
            .map(|&c| c as u8)
            .collect();
        Ok(String::from_utf8_lossy(&bytes).into_owned())
    }

    /// PCI domain, bus and device numbers.
    pub fn pci_bus_id(&self) -> Result<PciBusId> {
        Ok(PciBusId {
            domain: attribute(self.inner.cu_device, ATTR_PCI_DOMAIN_ID)? as u32,
            bus: attribute(self.inner.cu_device, ATTR_PCI_BUS_ID)? as u32,
            device: attribute(self.inner.cu_device, ATTR_PCI_DEVICE_ID)? as u32,
        })
    }

    /// Compute capability (major, minor), e.g. (9, 0) for H100/H200.
    pub fn compute_capability(&self) -> (u32, u32) {
        self.inner.compute_capability
    }

    /// Any `CUdevice_attribute` by its numeric value.
    pub fn attribute(&self, attribute_id: i32) -> Result<i32> {
        attribute(self.inner.cu_device, attribute_id)
    }

    /// Total memory of the GPU in bytes.
    pub fn total_memory(&self) -> Result<usize> {
        let d = driver()?;
        let mut bytes = 0usize;
        // SAFETY: writes one size_t.
        check("cuDeviceTotalMem_v2", unsafe {
            (d.cuDeviceTotalMem_v2)(&mut bytes, self.inner.cu_device)
        })?;
        Ok(bytes)
    }

    /// Free and total memory now (`cuMemGetInfo`), for memory-usage reports.
    pub fn memory_info(&self) -> Result<MemoryInfo> {
        self.bind()?;
        let d = driver()?;
        let (mut free, mut total) = (0usize, 0usize);
        // SAFETY: the context is current; the driver writes two size_t.
        check("cuMemGetInfo_v2", unsafe {
            (d.cuMemGetInfo_v2)(&mut free, &mut total)
        })?;
        Ok(MemoryInfo { free, total })
    }

    /// Waits for all work on this GPU's primary context, on every stream.
    pub fn synchronize(&self) -> Result<()> {
        self.bind()?;
        let d = driver()?;
        // SAFETY: the context is current.
        check("cuCtxSynchronize", unsafe { (d.cuCtxSynchronize)() })
    }
}

/// What a GPU is, read without creating a context (what `cudaGetDeviceProperties` tells,
/// the part tools print): cheap enough to list every GPU of a host.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeviceProperties {
    /// The ordinal (as numbered after `CUDA_VISIBLE_DEVICES`).
    pub ordinal: usize,
    /// The marketing name, e.g. `NVIDIA H200`.
    pub name: String,
    /// PCI domain, bus and device numbers.
    pub pci_bus_id: PciBusId,
    /// Compute capability (major, minor).
    pub compute_capability: (u32, u32),
    /// Memory of the GPU in bytes.
    pub total_memory: usize,
}

/// The properties of GPU `ordinal`, without retaining its primary context (no GPU memory
/// or time is spent, unlike [`Device::new`]). Fails with [`CudaError::DriverNotFound`]
/// where no driver is installed and [`CudaError::NoSuchDevice`] past the visible GPUs.
pub fn device_properties(ordinal: usize) -> Result<DeviceProperties> {
    let d = driver()?;
    let count = device_count()?;
    if ordinal >= count {
        return Err(CudaError::NoSuchDevice { ordinal, count });
    }
    let mut dev: CUdevice = 0;
    // SAFETY: ordinal < count fits c_int; the driver writes one CUdevice.
    check("cuDeviceGet", unsafe {
        (d.cuDeviceGet)(&mut dev, ordinal as c_int)
    })?;
    let mut buf = [0 as c_char; 256];
    // SAFETY: the driver writes at most len bytes including the terminating NUL.
    check("cuDeviceGetName", unsafe {
        (d.cuDeviceGetName)(buf.as_mut_ptr(), buf.len() as c_int, dev)
    })?;
    let name: Vec<u8> = buf
        .iter()
        .take_while(|&&c| c != 0)
        .map(|&c| c as u8)
        .collect();
    let mut total_memory = 0usize;
    // SAFETY: writes one size_t; needs no context.
    check("cuDeviceTotalMem_v2", unsafe {
        (d.cuDeviceTotalMem_v2)(&mut total_memory, dev)
    })?;
    Ok(DeviceProperties {
        ordinal,
        name: String::from_utf8_lossy(&name).into_owned(),
        pci_bus_id: PciBusId {
            domain: attribute(dev, ATTR_PCI_DOMAIN_ID)? as u32,
            bus: attribute(dev, ATTR_PCI_BUS_ID)? as u32,
            device: attribute(dev, ATTR_PCI_DEVICE_ID)? as u32,
        },
        compute_capability: (
            attribute(dev, ATTR_CC_MAJOR)? as u32,
            attribute(dev, ATTR_CC_MINOR)? as u32,
        ),
        total_memory,
    })
}

fn attribute(dev: CUdevice, attribute_id: c_int) -> Result<i32> {
    let d = driver()?;
    let mut v: c_int = 0;
    // SAFETY: the driver validates the attribute id and writes one int.
    check("cuDeviceGetAttribute", unsafe {
        (d.cuDeviceGetAttribute)(&mut v, attribute_id, dev)
    })?;
    Ok(v)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pci_bus_id_prints_like_nccl_tests() {
        let id = PciBusId {
            domain: 0,
            bus: 0x19,
            device: 6,
        };
        assert_eq!(id.to_string(), "0000:19:06");
    }

    #[test]
    fn memory_used_never_underflows() {
        let m = MemoryInfo { free: 10, total: 4 };
        assert_eq!(m.used(), 0);
        let m = MemoryInfo { free: 4, total: 10 };
        assert_eq!(m.used(), 6);
    }
}
