//! The NCCL backend's entry point. The backend itself (over `erdma::nccl`
//! and `erdma::cuda`, loaded at run time) is written by the integrator; see
//! the module documentation of [`super`] for exactly what it implements.
//! Until then `--backend nccl` fails with a typed, one-line error.

use std::sync::Arc;

use super::Backend;
use crate::nccltests::errors::{TestError, TestResult};
use crate::nccltests::options::Options;
use crate::nccltests::types::Features;

/// Creates the NCCL backend. Missing libraries must surface here as
/// `TestError::Cuda` (no libcuda/driver/GPU, exit 2) or `TestError::Comm
/// { lib: "NCCL" }` (no libnccl.so.2, exit 3), never as a panic.
pub fn create(_o: &Options) -> TestResult<Arc<dyn Backend>> {
    Err(TestError::comm(
        "NCCL",
        "backend",
        "the NCCL backend is not built into this binary yet; use --backend mpi or --backend host",
    ))
}

/// Types/ops and `ncclGetVersion` for option parsing, without creating the
/// backend (0 = unknown: everything accepted).
pub fn probe() -> (Features, i32) {
    (Features::ALL, 0)
}
