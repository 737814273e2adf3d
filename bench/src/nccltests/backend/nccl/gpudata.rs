//! Verifiable data generated and checked on the GPU, as nccl-tests does it: the kernels
//! of `verifiable.cu` write a rank's inputs and count the elements of its results that
//! differ from the expected formula, so `-c` moves no data between host and GPU.
//!
//! The kernels come as PTX compiled at development time (`verifiable.ptx`, made by
//! `scripts/gen-verifiable-ptx.sh` with NVRTC 12.0 for `compute_50`): the driver compiles
//! it for the GPU at load time (and caches the result), so no compiler is needed at run
//! time, and it loads on every driver of CUDA 12.0 or newer. The formulas are those of
//! the host reference ([`crate::nccltests::verifiable`]), resolved on the host into a
//! [`DeviceFormula`] per range; the tests below compare the two bit for bit.

use std::ffi::c_void;

use erdma::cuda::{self, Device, DeviceBuffer, DevicePtr, Function, LaunchConfig, Module, Stream};

use super::cuda_error;
use crate::nccltests::errors::{TestError, TestResult};
use crate::nccltests::verifiable::DeviceFormula;

/// `verifiable.cu` compiled to PTX (NUL-terminated, as the driver reads it).
pub(super) const PTX: &str = concat!(include_str!("verifiable.ptx"), "\0");

/// The kernel source the PTX is compiled from.
#[cfg(test)]
pub(super) const SOURCE: &str = include_str!("verifiable.cu");

/// Threads per block.
const BLOCK: u32 = 256;

/// `CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT`.
const ATTR_SM_COUNT: i32 = 16;

/// One rank's loaded kernels and its wrong-element counter.
pub(crate) struct GpuData {
    fill: Function,
    check: Function,
    /// The running count of wrong elements of the current check.
    wrong: DeviceBuffer<u64>,
    /// The most blocks a launch uses (a few per multiprocessor; the loops stride).
    max_grid: u32,
}

impl GpuData {
    /// Loads the kernels on `device` (the driver compiles the PTX, or takes it from its
    /// cache) and allocates the counter.
    pub(crate) fn load(device: &Device, stream: &Stream) -> TestResult<GpuData> {
        let ptx = std::ffi::CStr::from_bytes_with_nul(PTX.as_bytes())
            .map_err(|e| TestError::Internal(format!("verifiable.ptx: {e}")))?;
        let module =
            Module::load_ptx(device, ptx).map_err(|e| cuda_error("cuModuleLoadData", e))?;
        let function = |name| {
            module
                .function(name)
                .map_err(|e| cuda_error("cuModuleGetFunction", e))
        };
        let sms = device
            .attribute(ATTR_SM_COUNT)
            .map_err(|e| cuda_error("cudaDeviceGetAttribute", e))?;
        Ok(GpuData {
            fill: function("erdma_verifiable_fill")?,
            check: function("erdma_verifiable_check")?,
            wrong: DeviceBuffer::zeroed(device, 1, stream)
                .map_err(|e| cuda_error("cudaMalloc", e))?,
            max_grid: (sms.max(1) as u32).saturating_mul(8),
        })
    }

    fn config(&self, n: usize) -> LaunchConfig {
        let blocks = n.div_ceil(BLOCK as usize).min(self.max_grid as usize);
        LaunchConfig {
            grid: blocks.max(1) as u32,
            block: BLOCK,
            shared_bytes: 0,
        }
    }

    /// Enqueues writing `n` elements of `ws` bytes at `out`: elements `ix0..` of `f`.
    ///
    /// # Safety
    /// `out..out + n * ws` must be device memory of the stream's GPU that stays allocated
    /// until the kernel ran and that no other work uses concurrently.
    pub(crate) unsafe fn fill(
        &self,
        out: DevicePtr,
        n: usize,
        ws: usize,
        ix0: i64,
        f: &DeviceFormula,
        stream: &Stream,
    ) -> TestResult<()> {
        if n == 0 {
            return Ok(());
        }
        let (mut out, mut n64, mut ix0, mut f, mut ws) = (out.0, n as u64, ix0, *f, ws as i32);
        let mut params: [*mut c_void; 5] = [
            (&raw mut out).cast(),
            (&raw mut n64).cast(),
            (&raw mut ix0).cast(),
            (&raw mut f).cast(),
            (&raw mut ws).cast(),
        ];
        // SAFETY: one pointer per parameter of erdma_verifiable_fill(void*, u64, i64,
        // Formula, int), each to a value of that type (DeviceFormula is Formula's
        // #[repr(C)] twin); the caller guarantees the output range.
        unsafe { self.fill.launch(self.config(n), stream, &mut params) }
            .map_err(|e| cuda_error("cudaLaunchKernel", e))
    }

    /// Enqueues zeroing the wrong-element counter (before a check's ranges).
    pub(crate) fn reset(&self, stream: &Stream) -> TestResult<()> {
        // SAFETY: the counter is this object's 8 bytes, used only on this rank's stream.
        unsafe { cuda::memset_raw(self.wrong.device_ptr(), 0, 8, stream) }
            .map_err(|e| cuda_error("cudaMemsetAsync", e))
    }

    /// Enqueues counting the `n` elements of `ws` bytes at `got` that differ from
    /// elements `ix0..` of `f` by more than `tol` (as unsigned integers of the element
    /// width), adding them to the counter.
    ///
    /// # Safety
    /// `got..got + n * ws` must be device memory of the stream's GPU that stays allocated
    /// until the kernel ran.
    #[allow(clippy::too_many_arguments)]
    pub(crate) unsafe fn check(
        &self,
        got: DevicePtr,
        n: usize,
        ws: usize,
        ix0: i64,
        f: &DeviceFormula,
        tol: u64,
        stream: &Stream,
    ) -> TestResult<()> {
        if n == 0 {
            return Ok(());
        }
        let (mut got, mut n64, mut ix0, mut f, mut ws, mut tol, mut wrong) = (
            got.0,
            n as u64,
            ix0,
            *f,
            ws as i32,
            tol,
            self.wrong.device_ptr().0,
        );
        let mut params: [*mut c_void; 7] = [
            (&raw mut got).cast(),
            (&raw mut n64).cast(),
            (&raw mut ix0).cast(),
            (&raw mut f).cast(),
            (&raw mut ws).cast(),
            (&raw mut tol).cast(),
            (&raw mut wrong).cast(),
        ];
        // SAFETY: one pointer per parameter of erdma_verifiable_check(const void*, u64,
        // i64, Formula, int, u64, u64*), each to a value of that type; the counter is this
        // object's; the caller guarantees the input range.
        unsafe { self.check.launch(self.config(n), stream, &mut params) }
            .map_err(|e| cuda_error("cudaLaunchKernel", e))
    }

    /// Waits for the stream and reads the counter.
    pub(crate) fn wrong(&self, stream: &Stream) -> TestResult<u64> {
        let mut b = [0u8; 8];
        // SAFETY: the counter is 8 bytes of this object's device memory; the copy waits.
        unsafe { cuda::copy_dtoh_raw(&mut b, self.wrong.device_ptr(), stream) }
            .map_err(|e| cuda_error("cudaMemcpy", e))?;
        Ok(u64::from_le_bytes(b))
    }
}

#[cfg(test)]
mod tests;
