//! Loaded GPU code: a [`Module`] from a cubin or PTX image (for example one built by
//! [`nvrtc`](super::nvrtc)), its kernels ([`Function`]) and its `__device__` globals.

use std::ffi::{CStr, CString, c_uint, c_void};
use std::fmt;
use std::sync::Arc;

use cudarc::driver::sys::{CUfunction, CUmodule};

use super::device::Device;
use super::driver::{check, driver};
use super::error::{CudaError, Result};
use super::memory::DevicePtr;
use super::stream::Stream;

/// A module loaded into one GPU's primary context (`cuModuleLoadData`). Cheap to clone;
/// unloaded when the last clone and the last [`Function`] taken from it are gone.
#[derive(Clone)]
pub struct Module {
    inner: Arc<Loaded>,
}

struct Loaded {
    raw: CUmodule,
    device: Device,
}

// SAFETY: a module handle belongs to a context, not a thread; every method makes the
// device's context current on the calling thread before using it.
unsafe impl Send for Loaded {}
// SAFETY: see above; methods take &self and only pass the handle to the driver, which
// serializes access internally.
unsafe impl Sync for Loaded {}

impl fmt::Debug for Module {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Module")
            .field("device", &self.inner.device.ordinal())
            .finish()
    }
}

impl Module {
    /// Loads a cubin, fatbin or PTX image on `device`. An image that does not start with the
    /// ELF or fatbin magic is PTX and must end with a NUL byte (the driver reads it as a C
    /// string); that is checked. Loading PTX from text is safe: [`Module::load_ptx`].
    ///
    /// # Safety
    ///
    /// A cubin (ELF) or fatbin image must be complete and well formed, as NVRTC
    /// (`nvrtcGetCUBIN`), `nvcc` or `fatbinary` wrote it: the driver takes no length and reads
    /// the image as far as its headers say (section tables, offsets, sizes) without checking
    /// them against the slice (issue 34 hole 5: a 4-byte `b"\x7fELF"` makes it read past the
    /// slice). The code it holds runs only through [`Function`] launches, which are `unsafe`
    /// on their own.
    pub unsafe fn load(device: &Device, image: &[u8]) -> Result<Module> {
        if image.is_empty() {
            return Err(CudaError::invalid("cuModuleLoadData: empty image"));
        }
        let is_elf = image.starts_with(b"\x7fELF");
        let is_fatbin = image.starts_with(&[0x50, 0xed, 0x55, 0xba]);
        if !is_elf && !is_fatbin && image.last() != Some(&0) {
            return Err(CudaError::invalid(
                "cuModuleLoadData: a PTX image must end with a NUL byte",
            ));
        }
        device.bind()?;
        let d = driver()?;
        let mut raw: CUmodule = std::ptr::null_mut();
        // SAFETY: `image` is a complete cubin/fatbin (the caller's contract: the driver reads
        // its length from the headers) or a NUL-terminated PTX string (checked above), alive
        // for the call; the device's context is current.
        check("cuModuleLoadData", unsafe {
            (d.cuModuleLoadData)(&mut raw, image.as_ptr().cast())
        })?;
        Ok(Module {
            inner: Arc::new(Loaded {
                raw,
                device: device.clone(),
            }),
        })
    }

    /// Loads PTX text on `device` (the driver compiles it for the GPU). Safe: the driver reads
    /// a C string up to its NUL and parses it as source text, whatever it holds; text that
    /// starts like a binary image is refused ([`CudaError`] naming the call), since the
    /// driver would read that as a cubin or fatbin instead.
    pub fn load_ptx(device: &Device, ptx: &CStr) -> Result<Module> {
        let bytes = ptx.to_bytes_with_nul();
        if bytes.starts_with(b"\x7fELF") || bytes.starts_with(&[0x50, 0xed, 0x55, 0xba]) {
            return Err(CudaError::invalid(
                "cuModuleLoadData: PTX text starts with a cubin or fatbin magic number",
            ));
        }
        // SAFETY: not a binary image (checked above) and NUL-terminated: `load`'s contract
        // only concerns cubin and fatbin images.
        unsafe { Module::load(device, bytes) }
    }

    /// The GPU the module is loaded on.
    pub fn device(&self) -> &Device {
        &self.inner.device
    }

    /// The kernel named `name` (an `extern "C"` name or a lowered C++ name).
    pub fn function(&self, name: &str) -> Result<Function> {
        let c = c_name(name)?;
        self.inner.device.bind()?;
        let d = driver()?;
        let mut raw: CUfunction = std::ptr::null_mut();
        // SAFETY: the module handle is live (owned by self); `c` is NUL-terminated.
        check("cuModuleGetFunction", unsafe {
            (d.cuModuleGetFunction)(&mut raw, self.inner.raw, c.as_ptr())
        })?;
        Ok(Function {
            raw,
            module: self.inner.clone(),
        })
    }

    /// The address and size of the `__device__` variable `name`.
    pub fn global(&self, name: &str) -> Result<(DevicePtr, usize)> {
        let c = c_name(name)?;
        self.inner.device.bind()?;
        let d = driver()?;
        let (mut ptr, mut bytes) = (0, 0usize);
        // SAFETY: the module handle is live; the driver writes one address and one size.
        check("cuModuleGetGlobal", unsafe {
            (d.cuModuleGetGlobal_v2)(&mut ptr, &mut bytes, self.inner.raw, c.as_ptr())
        })?;
        Ok((DevicePtr(ptr), bytes))
    }

    /// Copies the whole `__device__` variable `name` to the host (synchronously).
    pub fn read_global(&self, name: &str, stream: &Stream) -> Result<Vec<u8>> {
        let (ptr, bytes) = self.global(name)?;
        let mut out = vec![0u8; bytes];
        // SAFETY: `ptr` addresses `bytes` bytes of module memory that lives as long as
        // self; the copy waits for completion.
        unsafe { super::memory::copy_dtoh_raw(&mut out, ptr, stream)? };
        Ok(out)
    }
}

impl Drop for Loaded {
    fn drop(&mut self) {
        if self.device.bind().is_ok()
            && let Ok(d) = driver()
        {
            // SAFETY: the handle was loaded once and is unloaded once, after every Module
            // and Function referring to it is gone. Unloading waits for running kernels.
            unsafe { (d.cuModuleUnload)(self.raw) };
        }
    }
}

fn c_name(name: &str) -> Result<CString> {
    CString::new(name).map_err(|_| CudaError::invalid(format!("symbol name {name:?} has a NUL")))
}

/// A kernel of a [`Module`]; keeps the module loaded.
#[derive(Clone)]
pub struct Function {
    raw: CUfunction,
    module: Arc<Loaded>,
}

// SAFETY: as for the module: the handle is bound to a context, not to a thread.
unsafe impl Send for Function {}
// SAFETY: as above; launches only pass the handle to the driver.
unsafe impl Sync for Function {}

impl fmt::Debug for Function {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Function")
            .field("device", &self.module.device.ordinal())
            .finish()
    }
}

/// Grid and block shape of a launch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LaunchConfig {
    /// Blocks in x (y and z are 1).
    pub grid: u32,
    /// Threads per block in x (y and z are 1).
    pub block: u32,
    /// Dynamic shared memory per block, in bytes.
    pub shared_bytes: u32,
}

impl Function {
    /// The raw handle (valid while the module is loaded).
    pub fn as_raw(&self) -> CUfunction {
        self.raw
    }

    /// Enqueues the kernel on `stream` (`cuLaunchKernel`). The module's GPU must be the
    /// current context of the calling thread ([`Device::bind`]); otherwise the driver
    /// returns an error.
    ///
    /// # Safety
    /// `params` must hold one pointer per kernel parameter, in order, each pointing to a
    /// value of that parameter's exact type and size; every device address the kernel
    /// reads or writes must stay valid until the launch completes on `stream`.
    pub unsafe fn launch(
        &self,
        cfg: LaunchConfig,
        stream: &Stream,
        params: &mut [*mut c_void],
    ) -> Result<()> {
        if stream.device().ordinal() != self.module.device.ordinal() {
            return Err(CudaError::invalid(format!(
                "kernel of GPU {} launched on a stream of GPU {}",
                self.module.device.ordinal(),
                stream.device().ordinal()
            )));
        }
        let d = driver()?;
        let one: c_uint = 1;
        // SAFETY: the caller guarantees the parameter array and the memory the kernel
        // touches; the function belongs to a loaded module on the stream's device.
        check("cuLaunchKernel", unsafe {
            (d.cuLaunchKernel)(
                self.raw,
                cfg.grid,
                one,
                one,
                cfg.block,
                one,
                one,
                cfg.shared_bytes,
                stream.as_raw(),
                params.as_mut_ptr(),
                std::ptr::null_mut(),
            )
        })
    }
}
