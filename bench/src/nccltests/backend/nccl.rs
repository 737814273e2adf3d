//! The NCCL backend (`--backend nccl`, the default): NCCL and the CUDA
//! driver loaded at run time through `erdma::nccl` and `erdma::cuda`, doing
//! what nccl-tests 2.19.6 built against NCCL 2.28 headers does, call for
//! call:
//! - one non-blocking stream per rank (`cudaStreamNonBlocking`), the NULL
//!   stream with `-y 1`;
//! - `ncclCommInitRankConfig` for every local rank inside one
//!   `ncclGroupStart/End`, blocking communicators, `CTAPolicy` from `-x`
//!   (NCCL >= 2.27) and `nvlinkCentricSched = 1` (NCCL >= 2.28);
//! - buffers from `ncclMemAlloc`, registered with `ncclCommRegister` (`-R
//!   1`) or as symmetric windows (`-R 2`, NCCL >= 2.27) inside one group;
//! - each call is nccl-tests' `runColl` (see `nccl/enqueue.rs`); mulsum creates
//!   and destroys a PreMulSum operator around every call;
//! - completion is `cuStreamQuery` plus `ncclCommGetAsyncError` per rank,
//!   aborting every communicator on an asynchronous error or `-T` timeout;
//! - `-G` captures each rank's stream (thread-local mode for timing, global
//!   for the check with one thread) and replays the instantiated graphs.
//!
//! Data is generated and checked on the GPU, as nccl-tests does, by the
//! kernels of `nccl/verifiable.cu`, shipped as PTX (see `nccl/gpudata.rs`).
//!
//! Differences, each deliberate: the check compares each element with its
//! formula in place, so there is no device "expected" buffer (`-M`'s
//! user-allocated figure counts two buffers where nccl-tests counts three);
//! `-D` kernels are compiled at run time (see `nccl/device.rs`); communicator
//! creation is bounded by `-T`; a missing library or GPU is a one-line
//! error, never a crash.

mod device;
mod enqueue;
mod gpudata;
mod kernel_cache;
mod ranks;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use erdma::cuda::{self, CudaError, Device, Stream};
use erdma::nccl::{Comm, Config, Nccl, NcclError, RankSpec, UniqueId, Version};

use self::device::DeviceApi;
use self::ranks::{NcclRanks, RankState};
use super::{Backend, DeviceInfo, RankSlot, Ranks};
use crate::nccltests::colls::CollKind;
use crate::nccltests::errors::{TestError, TestResult};
use crate::nccltests::options::Options;
use crate::nccltests::types::{DataType, Features};

/// The NCCL API this backend reproduces nccl-tests for (nccl.h 2.28: the
/// `ncclConfig_t` layout, native alltoall/gather/scatter, nvlink-centric
/// scheduling), printed as `nccl-headers`.
pub const HEADERS_VERSION: i32 = 22800;

/// Creates the NCCL backend: loads NCCL (a missing `libnccl.so.2` is
/// `TestError::Comm { lib: "NCCL" }`, exit 3, as nccl-tests cannot start
/// without it either), then the CUDA driver (missing: `TestError::Cuda`,
/// exit 2).
pub fn create(o: &Options, kind: CollKind) -> TestResult<Arc<dyn Backend>> {
    let nccl = Nccl::load().map_err(|e| nccl_error("dlopen", e, o.timeout))?;
    cuda::device_count().map_err(|e| cuda_error("cudaGetDeviceCount", e))?;
    let device_api = DeviceApi::new(o, kind, nccl)?.map(Arc::new);
    let version = nccl.version();
    let per_iter_events = if o.per_iter_timing == 0 {
        0
    } else if o.blocking == 3 {
        2 * o.iters.max(0) as usize
    } else {
        o.iters.max(0) as usize + 1
    };
    Ok(Arc::new(NcclBackend {
        nccl,
        stream_null: o.stream_null != 0,
        config: comm_config(o, version),
        timeout_s: o.timeout,
        unalign_pad: 8 * o.unalign.max(0) as usize,
        per_iter_events,
        nthreads: o.nthreads.max(1) as usize,
        devices: Mutex::new(Vec::new()),
        device_api,
    }))
}

/// What nccl-tests puts in its `ncclConfig_t` (plus our creation deadline).
fn comm_config(o: &Options, version: Version) -> Config {
    let at_least = |v: Version| version >= v;
    Config {
        blocking: true,
        timeout: (o.timeout > 0).then(|| Duration::from_secs(o.timeout as u64)),
        cta_policy: (o.cta_policy >= 0 && at_least(Version::new(2, 27, 0)))
            .then_some(o.cta_policy as u32),
        nvlink_centric_sched: at_least(Version::new(2, 28, 0)).then_some(true),
        ..Config::default()
    }
}

/// Types/ops and `ncclGetVersion` for option parsing, without creating the
/// backend (0 = NCCL not loadable: everything accepted, `create` reports
/// why).
pub fn probe() -> (Features, i32) {
    match Nccl::load() {
        Ok(n) => {
            let code = n.version().code();
            (Features::for_nccl_version(code), code)
        }
        Err(_) => (Features::ALL, 0),
    }
}

/// An NCCL error as the harness reports it: CUDA failures exit 2, timeouts
/// 4, missing features 5, everything else is an NCCL failure (3).
pub(crate) fn nccl_error(call: &str, e: NcclError, timeout_s: i32) -> TestError {
    match e {
        NcclError::Cuda(c) => cuda_error(call, c),
        NcclError::Timeout { .. } => TestError::Timeout {
            secs: timeout_s,
            detail: e.to_string(),
        },
        NcclError::Unsupported { .. } => TestError::NotImplemented(e.to_string()),
        _ => TestError::comm("NCCL", call, e.to_string()),
    }
}

/// A CUDA driver error (exit 2).
pub(crate) fn cuda_error(call: &str, e: CudaError) -> TestError {
    TestError::Cuda {
        call: call.to_string(),
        msg: e.to_string(),
    }
}

/// The NCCL backend of one process.
pub struct NcclBackend {
    nccl: &'static Nccl,
    stream_null: bool,
    config: Config,
    timeout_s: i32,
    unalign_pad: usize,
    per_iter_events: usize,
    nthreads: usize,
    /// Devices opened so far (ordinal, device), for reuse and for the
    /// lowest compute capability (fp8 needs 9.0).
    devices: Mutex<Vec<(i32, Device)>>,
    /// `-D 1..4`: the device-API kernels.
    device_api: Option<Arc<DeviceApi>>,
}

impl NcclBackend {
    fn device(&self, ordinal: i32) -> TestResult<Device> {
        let mut devs = self.devices.lock().unwrap_or_else(|p| p.into_inner());
        if let Some((_, d)) = devs.iter().find(|(o, _)| *o == ordinal) {
            return Ok(d.clone());
        }
        let idx = usize::try_from(ordinal).map_err(|_| TestError::Cuda {
            call: "cudaSetDevice".into(),
            msg: format!("invalid device ordinal {ordinal}"),
        })?;
        let d = Device::new(idx).map_err(|e| cuda_error("cudaSetDevice", e))?;
        devs.push((ordinal, d.clone()));
        Ok(d)
    }

    fn err(&self, call: &str, e: NcclError) -> TestError {
        nccl_error(call, e, self.timeout_s)
    }
}

impl Backend for NcclBackend {
    fn name(&self) -> &'static str {
        "nccl"
    }

    fn versions(&self) -> (i32, i32) {
        (HEADERS_VERSION, self.nccl.version().code())
    }

    /// nccl-tests' type and op lists for the loaded NCCL, without fp8 when
    /// a GPU of this process is older than Hopper (the harness takes the
    /// minimum over processes).
    fn features(&self) -> Features {
        let mut f = Features::for_nccl_version(self.nccl.version().code());
        let devs = self.devices.lock().unwrap_or_else(|p| p.into_inner());
        let pre_hopper = devs.iter().any(|(_, d)| d.compute_capability() < (9, 0));
        if pre_hopper && f.types().contains(&DataType::Float8e4m3) {
            f.type_count -= 2;
        }
        f
    }

    /// `cudaGetDeviceCount`; none at all is a CUDA failure, as in
    /// nccl-tests (`cudaErrorNoDevice`).
    fn device_count(&self) -> TestResult<usize> {
        let n = cuda::device_count().map_err(|e| cuda_error("cudaGetDeviceCount", e))?;
        if n == 0 {
            return Err(TestError::Cuda {
                call: "cudaGetDeviceCount".into(),
                msg: "no CUDA-capable device is detected; hint: run on a GPU machine (containers need --gpus all) and check nvidia-smi and CUDA_VISIBLE_DEVICES".into(),
            });
        }
        Ok(n)
    }

    fn device_info(&self, device: i32) -> TestResult<DeviceInfo> {
        let d = self.device(device)?;
        let name = d
            .name()
            .map_err(|e| cuda_error("cudaGetDeviceProperties", e))?;
        let pci = d
            .pci_bus_id()
            .map_err(|e| cuda_error("cudaGetDeviceProperties", e))?;
        let total = d
            .total_memory()
            .map_err(|e| cuda_error("cudaGetDeviceProperties", e))?;
        Ok(DeviceInfo {
            pci: (pci.domain, pci.bus, pci.device),
            name,
            total_mem: total as u64,
        })
    }

    fn create_id(&self) -> TestResult<Vec<u8>> {
        let id = self
            .nccl
            .unique_id()
            .map_err(|e| self.err("ncclGetUniqueId", e))?;
        Ok(id.as_bytes().to_vec())
    }

    /// Streams first, then every communicator of `threads` in one group
    /// (nccl-tests' `initComms`), split into one [`Ranks`] per thread.
    fn init_ranks(
        &self,
        id: &[u8],
        nranks: usize,
        threads: &[Vec<RankSlot>],
    ) -> TestResult<Vec<Box<dyn Ranks>>> {
        let uid = UniqueId::from_bytes(id).map_err(|e| self.err("ncclCommInitRankConfig", e))?;
        let mut specs = Vec::new();
        let mut streams = Vec::new();
        for slot in threads.iter().flatten() {
            let device = self.device(slot.device)?;
            let stream = if self.stream_null {
                Stream::null(&device)
            } else {
                Stream::new(&device).map_err(|e| cuda_error("cudaStreamCreateWithFlags", e))?
            };
            streams.push(stream);
            specs.push(RankSpec {
                device,
                rank: slot.rank,
            });
        }
        let comms = Comm::init_ranks(self.nccl, &specs, nranks, &uid, &self.config)
            .map_err(|e| self.err("ncclCommInitRankConfig", e))?;
        let mut states = comms
            .into_iter()
            .zip(streams)
            .map(|(comm, stream)| RankState::new(comm, stream))
            .collect::<TestResult<Vec<_>>>()?
            .into_iter();
        let mut out: Vec<Box<dyn Ranks>> = Vec::with_capacity(threads.len());
        for slots in threads {
            let ranks: Vec<RankState> = states.by_ref().take(slots.len()).collect();
            out.push(Box::new(NcclRanks::new(
                self.nccl,
                ranks,
                self.timeout_s,
                self.unalign_pad,
                self.per_iter_events,
                self.nthreads,
                self.device_api.clone(),
            )));
        }
        Ok(out)
    }

    fn free_mem(&self, device: i32) -> Option<u64> {
        let d = self.device(device).ok()?;
        d.memory_info().ok().map(|m| m.free as u64)
    }

    fn last_error(&self) -> String {
        self.nccl.last_error_text()
    }
}
