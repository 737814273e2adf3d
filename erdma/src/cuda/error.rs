//! The error type of [`crate::cuda`]: one line naming the driver call that failed, the CUDA
//! error name and a hint on how to fix it.

use std::fmt;

/// A raw `CUresult` value as the driver returned it.
///
/// Kept as an integer on purpose: a driver newer than the bindings may return codes the
/// bindings do not know (for example `CUDA_ERROR_CONTAINED` = 226 from a CUDA 13 driver).
pub type CuResultCode = u32;

/// `CUDA_SUCCESS`.
pub(crate) const CUDA_SUCCESS: CuResultCode = 0;
/// `CUDA_ERROR_NOT_READY`: asynchronous work has not completed yet (not an error for queries).
pub(crate) const CUDA_ERROR_NOT_READY: CuResultCode = 600;

/// Everything that can go wrong in [`crate::cuda`].
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum CudaError {
    /// No NVIDIA driver library (`libcuda.so.1`) could be loaded.
    DriverNotFound,
    /// The driver library lacks an entry point this crate needs (driver older than CUDA 12.0).
    MissingSymbol {
        /// The missing driver function.
        symbol: &'static str,
    },
    /// A driver call returned an error code.
    Driver {
        /// The driver function that failed.
        call: &'static str,
        /// The raw `CUresult`.
        code: CuResultCode,
        /// `cuGetErrorName` of the code, e.g. `CUDA_ERROR_OUT_OF_MEMORY`.
        name: String,
        /// `cuGetErrorString` of the code.
        description: String,
    },
    /// A GPU ordinal beyond the number of visible GPUs was asked for.
    NoSuchDevice {
        /// The ordinal asked for.
        ordinal: usize,
        /// How many GPUs the process sees.
        count: usize,
    },
    /// An argument failed a check of this crate before reaching the driver (length, range, device).
    InvalidArgument {
        /// What was wrong.
        what: String,
    },
}

impl CudaError {
    /// The exit status nccl-tests uses for this failure: 2 (CUDA failure) for driver problems,
    /// 6 (invalid usage) for arguments rejected before reaching the driver.
    pub fn exit_status(&self) -> i32 {
        match self {
            CudaError::InvalidArgument { .. } => 6,
            _ => 2,
        }
    }

    /// The raw `CUresult` when a driver call failed.
    pub fn code(&self) -> Option<CuResultCode> {
        match self {
            CudaError::Driver { code, .. } => Some(*code),
            _ => None,
        }
    }

    pub(crate) fn invalid(what: impl Into<String>) -> Self {
        CudaError::InvalidArgument { what: what.into() }
    }
}

/// What a user can do about a given `CUresult`.
pub(crate) fn hint_for(code: CuResultCode) -> &'static str {
    match code {
        1 => "an argument was out of range for the driver",
        2 => {
            "GPU memory exhausted: use smaller buffers or stop other processes holding GPU memory (nvidia-smi)"
        }
        3 | 4 => "the CUDA driver is not initialized or was shut down: create the Device first",
        34 => {
            "a CUDA stub libcuda.so was loaded instead of the driver's libcuda.so.1: remove the toolkit's stubs directory from LD_LIBRARY_PATH"
        }
        35 => "the NVIDIA driver is older than CUDA 12.0: upgrade the driver",
        46 => {
            "the GPU is busy or in exclusive-process mode: check nvidia-smi -q (Compute Mode) and other processes"
        }
        100 => {
            "no CUDA-capable GPU is visible: run the container with --gpus all, check CUDA_VISIBLE_DEVICES and nvidia-smi"
        }
        101 => {
            "GPU ordinal out of range: check CUDA_VISIBLE_DEVICES and how many ranks run per node"
        }
        201 | 202 => "wrong CUDA context for this call: bind the Device on this thread",
        400 => "invalid handle: the object belongs to another GPU or was destroyed",
        600 => "the operation has not completed yet",
        700 | 701 | 702 | 714 | 715 | 716 | 717 | 718 | 719 | 226 => {
            "a kernel faulted and the GPU context is unusable: the process must exit; check dmesg for Xid errors"
        }
        802 => "the system is not ready (NVSwitch systems): start nvidia-fabricmanager",
        803 => {
            "libcuda.so.1 and the loaded NVIDIA kernel module differ in version: reinstall the driver or restart with a matching container runtime"
        }
        804 => {
            "this CUDA forward-compatibility package does not support this GPU: remove it from LD_LIBRARY_PATH"
        }
        900..=907 => {
            "this operation is not permitted while a CUDA graph is being captured on the stream"
        }
        999 => "unknown driver failure: check dmesg and nvidia-smi; the GPU may need a reset",
        _ => "see the CUDA driver API documentation of this error code",
    }
}

impl fmt::Display for CudaError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CudaError::DriverNotFound => write!(
                f,
                "libcuda.so.1 not found: no NVIDIA driver in this container; run with --gpus all / install the driver"
            ),
            CudaError::MissingSymbol { symbol } => write!(
                f,
                "libcuda.so.1 lacks {symbol}: the NVIDIA driver is older than CUDA 12.0; upgrade the driver"
            ),
            CudaError::Driver {
                call,
                code,
                name,
                description,
            } => write!(
                f,
                "{call} failed: {name} ({code}: {description}); hint: {}",
                hint_for(*code)
            ),
            CudaError::NoSuchDevice { ordinal, count } => write!(
                f,
                "GPU {ordinal} requested but this process sees {count} GPU(s); hint: check CUDA_VISIBLE_DEVICES, --gpus and how many ranks run per node"
            ),
            CudaError::InvalidArgument { what } => write!(f, "invalid argument: {what}"),
        }
    }
}

impl std::error::Error for CudaError {}

/// Result of [`crate::cuda`] operations.
pub type Result<T, E = CudaError> = std::result::Result<T, E>;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn driver_not_found_is_one_line_with_hint() {
        let s = CudaError::DriverNotFound.to_string();
        assert!(!s.contains('\n'));
        assert!(s.starts_with("libcuda.so.1 not found"));
        assert!(s.contains("--gpus all"));
        assert_eq!(CudaError::DriverNotFound.exit_status(), 2);
    }

    #[test]
    fn driver_error_names_call_code_and_hint() {
        let e = CudaError::Driver {
            call: "cuMemAlloc_v2",
            code: 2,
            name: "CUDA_ERROR_OUT_OF_MEMORY".into(),
            description: "out of memory".into(),
        };
        assert_eq!(
            e.to_string(),
            "cuMemAlloc_v2 failed: CUDA_ERROR_OUT_OF_MEMORY (2: out of memory); hint: GPU memory exhausted: use smaller buffers or stop other processes holding GPU memory (nvidia-smi)"
        );
        assert_eq!(e.code(), Some(2));
        assert_eq!(e.exit_status(), 2);
    }

    #[test]
    fn codes_newer_than_the_bindings_still_get_a_hint() {
        assert!(hint_for(226).contains("Xid"));
        assert!(hint_for(123_456).contains("documentation"));
    }

    #[test]
    fn invalid_argument_maps_to_invalid_usage() {
        let e = CudaError::invalid("range 0..10 outside buffer of 8 bytes");
        assert_eq!(e.exit_status(), 6);
        assert_eq!(
            e.to_string(),
            "invalid argument: range 0..10 outside buffer of 8 bytes"
        );
    }

    #[test]
    fn no_such_device_says_how_many() {
        let e = CudaError::NoSuchDevice {
            ordinal: 3,
            count: 1,
        };
        assert!(
            e.to_string()
                .starts_with("GPU 3 requested but this process sees 1 GPU(s)")
        );
    }
}
