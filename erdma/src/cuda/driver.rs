//! The CUDA driver entry points this crate calls, resolved once from the `libcuda` that
//! cudarc loads.
//!
//! cudarc's `sys` functions panic when the library or a symbol is missing and return
//! `CUresult` as a Rust enum, so a code newer than the bindings (a CUDA 13 driver under the
//! `cuda-12000` bindings) would be undefined behaviour. This table resolves every function
//! up front (a missing one is a typed error) and keeps result codes as plain integers.

use std::ffi::{CStr, c_char, c_int, c_uchar, c_uint, c_ulonglong, c_void};
use std::sync::OnceLock;

use cudarc::driver::sys::{
    CUcontext, CUdevice, CUdeviceptr, CUevent, CUfunction, CUgraph, CUgraphExec, CUmodule, CUstream,
};

use super::error::{CUDA_SUCCESS, CuResultCode, CudaError, Result};

/// A host callback for `cuLaunchHostFunc`.
pub(crate) type HostFn = Option<unsafe extern "C" fn(user_data: *mut c_void)>;

macro_rules! driver_table {
    ($($name:ident($($arg:ty),*);)*) => {
        /// Function pointers into `libcuda`, all resolved before first use.
        #[allow(non_snake_case)]
        pub(crate) struct Driver {
            $(pub(crate) $name: unsafe extern "C" fn($($arg),*) -> CuResultCode,)*
            /// `cuEventElapsedTime_v2` (CUDA 12.8+) or `cuEventElapsedTime`.
            pub(crate) event_elapsed_time: unsafe extern "C" fn(*mut f32, CUevent, CUevent) -> CuResultCode,
        }

        impl Driver {
            fn resolve(lib: &'static libloading::Library) -> Result<Self> {
                Ok(Driver {
                    $($name: {
                        // SAFETY: the symbol is a driver API function whose C prototype is the
                        // one written in the table above (cuda.h, CUDA 12.0), with `CUresult`
                        // received as an integer.
                        unsafe { resolve_symbol(lib, stringify!($name))? }
                    },)*
                    event_elapsed_time: {
                        // SAFETY: both names are `CUresult (float*, CUevent, CUevent)` in cuda.h.
                        unsafe { resolve_symbol(lib, "cuEventElapsedTime_v2") }
                            .or_else(|_| unsafe { resolve_symbol(lib, "cuEventElapsedTime") })?
                    },
                })
            }
        }
    };
}

driver_table! {
    cuInit(c_uint);
    cuDriverGetVersion(*mut c_int);
    cuGetErrorName(CuResultCode, *mut *const c_char);
    cuGetErrorString(CuResultCode, *mut *const c_char);
    cuDeviceGetCount(*mut c_int);
    cuDeviceGet(*mut CUdevice, c_int);
    cuDeviceGetName(*mut c_char, c_int, CUdevice);
    cuDeviceTotalMem_v2(*mut usize, CUdevice);
    cuDeviceGetAttribute(*mut c_int, c_int, CUdevice);
    cuDevicePrimaryCtxRetain(*mut CUcontext, CUdevice);
    cuDevicePrimaryCtxRelease_v2(CUdevice);
    cuCtxGetCurrent(*mut CUcontext);
    cuCtxSetCurrent(CUcontext);
    cuCtxSynchronize();
    cuMemGetInfo_v2(*mut usize, *mut usize);
    cuMemAlloc_v2(*mut CUdeviceptr, usize);
    cuMemFree_v2(CUdeviceptr);
    cuMemGetAddressRange_v2(*mut CUdeviceptr, *mut usize, CUdeviceptr);
    cuMemGetHandleForAddressRange(*mut c_void, CUdeviceptr, usize, c_uint, c_ulonglong);
    cuMemsetD8Async(CUdeviceptr, c_uchar, usize, CUstream);
    cuMemcpyHtoDAsync_v2(CUdeviceptr, *const c_void, usize, CUstream);
    cuMemcpyDtoHAsync_v2(*mut c_void, CUdeviceptr, usize, CUstream);
    cuMemcpyDtoDAsync_v2(CUdeviceptr, CUdeviceptr, usize, CUstream);
    cuStreamCreate(*mut CUstream, c_uint);
    cuStreamDestroy_v2(CUstream);
    cuStreamQuery(CUstream);
    cuStreamSynchronize(CUstream);
    cuStreamWaitEvent(CUstream, CUevent, c_uint);
    cuStreamBeginCapture_v2(CUstream, c_uint);
    cuStreamEndCapture(CUstream, *mut CUgraph);
    cuStreamIsCapturing(CUstream, *mut c_uint);
    cuLaunchHostFunc(CUstream, HostFn, *mut c_void);
    cuEventCreate(*mut CUevent, c_uint);
    cuEventRecord(CUevent, CUstream);
    cuEventQuery(CUevent);
    cuEventSynchronize(CUevent);
    cuEventDestroy_v2(CUevent);
    cuGraphInstantiateWithFlags(*mut CUgraphExec, CUgraph, c_ulonglong);
    cuGraphLaunch(CUgraphExec, CUstream);
    cuGraphUpload(CUgraphExec, CUstream);
    cuGraphExecDestroy(CUgraphExec);
    cuGraphDestroy(CUgraph);
    cuModuleLoadData(*mut CUmodule, *const c_void);
    cuModuleUnload(CUmodule);
    cuModuleGetFunction(*mut CUfunction, CUmodule, *const c_char);
    cuModuleGetGlobal_v2(*mut CUdeviceptr, *mut usize, CUmodule, *const c_char);
    cuLaunchKernel(CUfunction, c_uint, c_uint, c_uint, c_uint, c_uint, c_uint, c_uint, CUstream, *mut *mut c_void, *mut *mut c_void);
}

/// Looks `name` up in `lib` as a function pointer of type `F`.
///
/// # Safety
/// `F` must be the C prototype of `name`.
unsafe fn resolve_symbol<F: Copy>(
    lib: &'static libloading::Library,
    name: &'static str,
) -> Result<F> {
    // SAFETY: the caller guarantees `F` matches the symbol's prototype; the library is
    // 'static so the pointer never dangles.
    match unsafe { lib.get::<F>(name) } {
        Ok(sym) => Ok(*sym),
        Err(_) => Err(CudaError::MissingSymbol { symbol: name }),
    }
}

static DRIVER: OnceLock<Result<Driver>> = OnceLock::new();

/// The driver table, loading `libcuda` and calling `cuInit(0)` on first use.
///
/// Never panics: a missing library, a missing symbol or a failing `cuInit` is an error, the
/// same error on every later call.
pub(crate) fn driver() -> Result<&'static Driver> {
    DRIVER.get_or_init(load).as_ref().map_err(Clone::clone)
}

fn load() -> Result<Driver> {
    // SAFETY: is_culib_present only dlopens candidate names and closes them again.
    if !unsafe { cudarc::driver::sys::is_culib_present() } {
        return Err(CudaError::DriverNotFound);
    }
    // SAFETY: presence was just checked, so culib() finds the same library instead of panicking.
    let lib = unsafe { cudarc::driver::sys::culib() };
    let d = Driver::resolve(lib)?;
    // SAFETY: cuInit takes flags by value; 0 is the only valid value.
    let rc = unsafe { (d.cuInit)(0) };
    check_with(&d, "cuInit", rc)?;
    Ok(d)
}

/// Turns a driver result code into `Ok` or a [`CudaError::Driver`] naming `call`.
pub(crate) fn check(call: &'static str, rc: CuResultCode) -> Result<()> {
    if rc == CUDA_SUCCESS {
        return Ok(());
    }
    match driver() {
        Ok(d) => check_with(d, call, rc),
        Err(e) => Err(e),
    }
}

fn check_with(d: &Driver, call: &'static str, rc: CuResultCode) -> Result<()> {
    if rc == CUDA_SUCCESS {
        return Ok(());
    }
    Err(CudaError::Driver {
        call,
        code: rc,
        name: error_text(d.cuGetErrorName, rc).unwrap_or_else(|| format!("CUDA_ERROR_{rc}")),
        description: error_text(d.cuGetErrorString, rc).unwrap_or_else(|| "unknown error".into()),
    })
}

fn error_text(
    f: unsafe extern "C" fn(CuResultCode, *mut *const c_char) -> CuResultCode,
    rc: CuResultCode,
) -> Option<String> {
    let mut p: *const c_char = std::ptr::null();
    // SAFETY: cuGetErrorName/String write a pointer to a static string or return an error
    // (CUDA_ERROR_INVALID_VALUE) for codes they do not know; they accept any integer.
    let ok = unsafe { f(rc, &mut p) } == CUDA_SUCCESS;
    if !ok || p.is_null() {
        return None;
    }
    // SAFETY: the driver returned a NUL-terminated static string.
    Some(
        unsafe { CStr::from_ptr(p) }
            .to_string_lossy()
            .replace('\n', " "),
    )
}

/// The CUDA version the installed driver supports, e.g. 13000 for CUDA 13.0.
pub fn driver_version() -> Result<i32> {
    let d = driver()?;
    let mut v: c_int = 0;
    // SAFETY: writes one int through a valid pointer.
    check("cuDriverGetVersion", unsafe {
        (d.cuDriverGetVersion)(&mut v)
    })?;
    Ok(v)
}

/// How many GPUs this process sees (after `CUDA_VISIBLE_DEVICES`).
pub fn device_count() -> Result<usize> {
    let d = driver()?;
    let mut n: c_int = 0;
    // SAFETY: writes one int through a valid pointer.
    check("cuDeviceGetCount", unsafe { (d.cuDeviceGetCount)(&mut n) })?;
    Ok(usize::try_from(n).unwrap_or(0))
}

/// Whether the NVIDIA driver library can be loaded and initialized, without panicking.
pub fn is_available() -> bool {
    driver().is_ok()
}
