//! The collective library behind the benchmark.
//!
//! The harness (options, sweep, timing, checks, output) is the same for
//! every library; a [`Backend`] provides devices, communicators and
//! buffers, and a [`Ranks`] object per thread issues collectives for that
//! thread's ranks (`-g` of them) and reports their completion. The timing
//! loop calls only [`Ranks::enqueue`], [`Ranks::group_start`]/
//! [`Ranks::group_end`] and [`Ranks::poll`] (with `&CollCall` values built
//! on the stack), so a backend that enqueues asynchronously (NCCL on a CUDA
//! stream) is measured exactly as nccl-tests measures it.
//!
//! # The NCCL backend
//! [`nccl`] implements [`Backend`] over `erdma::nccl`/`erdma::cuda`
//! ([`nccl::create`]); this is the mapping it follows:
//! - `versions`: (NCCL API version the backend was written for,
//!   `ncclGetVersion`); `features`: `Features::for_nccl_version(library)`,
//!   minus fp8 when any GPU's compute capability is below 9.0.
//! - `device_count`/`device_info`: `cudaGetDeviceCount`, PCI ids, name,
//!   total memory (drives "Reducing maxBytes" and "Invalid number of GPUs").
//! - `create_id`: `ncclGetUniqueId` bytes (128); called on group leaders.
//! - `init_ranks`: `ncclCommInitRankConfig` for every slot inside one
//!   `ncclGroupStart/End` (cta_policy from `-x`), streams (NULL with `-y`),
//!   one [`Ranks`] per thread.
//! - [`Ranks`]: `alloc` with `ncclMemAlloc` (send and receive of
//!   `max_bytes`); `register` with ncclCommRegister/ncclCommWindowRegister;
//!   `upload`/`download`/`zero` with cudaMemcpy/cudaMemset; `group_*` with
//!   ncclGroupStart/End; `enqueue` maps [`CollCall`] to ncclAllReduce & co.
//!   at `base + offset` (creating and destroying the PreMulSum op for
//!   `ReduceOp::PreMulSum` with `premul_scalar(rank)`); `poll` (allocation-free:
//!   it runs inside the timed region) is
//!   cudaStreamQuery + ncclCommGetAsyncError per stream, `pending` lists the
//!   unfinished ranks after a timeout; `abort` is
//!   ncclCommAbort; `capture_*`/`graph_launch` are CUDA graphs on the
//!   streams; `record_event`/`event_elapsed_ms` are CUDA events;
//!   `mem_info` is cudaMemGetInfo.
//! - Errors: CUDA failures as `TestError::Cuda` (exit 2), NCCL failures as
//!   `TestError::Comm { lib: "NCCL", .. }` (exit 3). A missing libcuda or
//!   libnccl.so.2 is `Cuda`/`Comm` from `create` with a one-line message.
//!
//! Selection: `--backend nccl` (default) calls [`nccl::create`]; `mpi` and
//! `host` are implemented here.

pub mod host;
mod hostcoll;
mod hostevents;
mod hostreduce;
#[cfg(feature = "mpi")]
pub mod mpi;
pub mod nccl;

use std::sync::Arc;

use super::bootstrap::Bootstrap;
use super::colls::{CollKind, Target};
use super::errors::TestResult;
use super::options::{BackendKind, Options};
use super::types::{DataType, Features, ReduceOp};
use super::verifiable::Kernel;

/// A place in one of a rank's two buffers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BufRef {
    /// Which buffer.
    pub buf: Target,
    /// Byte offset from the buffer's start.
    pub offset: usize,
}

/// One collective call for one rank.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CollCall {
    /// Which collective.
    pub kind: CollKind,
    /// Where the input is.
    pub send: BufRef,
    /// Where the output goes.
    pub recv: BufRef,
    /// The count argument of the call (elements).
    pub count: usize,
    /// Element type.
    pub dtype: DataType,
    /// Reduction (ignored by copy collectives).
    pub op: ReduceOp,
    /// Root (rooted collectives; -1 otherwise).
    pub root: i32,
    /// This rank's global rank (premultiplier for PreMulSum).
    pub rank: usize,
}

impl CollCall {
    /// The same call with both buffer offsets moved by `shift` bytes
    /// (nccl-tests' per-iteration offset rotation).
    pub fn shifted(&self, shift: usize) -> CollCall {
        let mut c = *self;
        c.send.offset += shift;
        c.recv.offset += shift;
        c
    }
}

/// A byte range of a rank's output and the formula its elements must follow (elements
/// `ix0..` of `kernel`); a check's ranges cover its whole output.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CheckRange {
    /// Start, in bytes from the checked output's start.
    pub off: usize,
    /// Length in bytes (whole elements).
    pub len: usize,
    /// The formula.
    pub kernel: Kernel,
    /// Generator index of the range's first element.
    pub ix0: i64,
}

/// A device as nccl-tests lists it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DeviceInfo {
    /// PCI domain, bus, device.
    pub pci: (u32, u32, u32),
    /// Name ("NVIDIA H200").
    pub name: String,
    /// Total memory in bytes (u64::MAX: unlimited).
    pub total_mem: u64,
}

/// One rank to create.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RankSlot {
    /// Global rank in the communicator.
    pub rank: usize,
    /// Device index.
    pub device: i32,
}

/// Completion state of a thread's ranks (no payload, so polling in the
/// timed region never allocates).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Poll {
    /// Everything issued has completed.
    Done,
    /// Something is still running; [`Ranks::pending`] says which ranks.
    Pending,
}

/// A collective library.
pub trait Backend: Send + Sync {
    /// `--backend` name.
    fn name(&self) -> &'static str;
    /// (headers, library) versions for the preamble (0 when not NCCL).
    fn versions(&self) -> (i32, i32);
    /// Supported types and ops.
    fn features(&self) -> Features;
    /// Devices visible to this process.
    fn device_count(&self) -> TestResult<usize>;
    /// One device's description.
    fn device_info(&self, device: i32) -> TestResult<DeviceInfo>;
    /// A new communicator id (on group leaders).
    fn create_id(&self) -> TestResult<Vec<u8>>;
    /// Creates communicators for `threads[t]`'s slots, for every thread t
    /// (all local threads at once, or one thread with `-p 1`), returning one
    /// [`Ranks`] per entry.
    fn init_ranks(
        &self,
        id: &[u8],
        nranks: usize,
        threads: &[Vec<RankSlot>],
    ) -> TestResult<Vec<Box<dyn Ranks>>>;
    /// Free memory of `device` in bytes (`cudaMemGetInfo`), for `-M`; None
    /// when unknown.
    fn free_mem(&self, _device: i32) -> Option<u64> {
        None
    }
    /// `ncclGetLastError(NULL)`: printed after the footer.
    fn last_error(&self) -> String {
        String::new()
    }
}

/// The ranks one thread drives. Local index `i` is in `0..count()`.
pub trait Ranks: Send {
    /// Number of local ranks.
    fn count(&self) -> usize;
    /// Allocates send and receive buffers of the given sizes on every rank.
    fn alloc(&mut self, send_bytes: usize, recv_bytes: usize) -> TestResult<()>;
    /// `-R`: registers buffers (1 local, 2 symmetric window).
    fn register(&mut self, _mode: i32) -> TestResult<()> {
        Ok(())
    }
    /// `-D`: creates the device communicators (after every registration has
    /// completed; collective over the local ranks, inside the caller's group).
    fn setup_device_api(&mut self) -> TestResult<()> {
        Ok(())
    }
    /// Writes zeros.
    fn zero(&mut self, i: usize, buf: Target, offset: usize, len: usize) -> TestResult<()>;
    /// Copies host bytes into a buffer.
    fn upload(&mut self, i: usize, buf: Target, offset: usize, data: &[u8]) -> TestResult<()>;
    /// Copies a buffer's bytes to the host.
    fn download(&mut self, i: usize, buf: Target, offset: usize, out: &mut [u8]) -> TestResult<()>;
    /// Writes `len` bytes of elements `ix0..` of `kernel` at `at` on the device itself
    /// (enqueued: ordered before the collectives issued after it). `Ok(false)` when this
    /// backend cannot: the caller then generates them on the host and uploads them.
    fn fill_on_device(
        &mut self,
        _i: usize,
        _at: BufRef,
        _len: usize,
        _kernel: &Kernel,
        _ix0: i64,
    ) -> TestResult<bool> {
        Ok(false)
    }
    /// Starts counting, on the device, the elements of local rank `i`'s receive buffer
    /// from byte `at` that differ from `ranges` by more than `tol` (as unsigned integers
    /// of the element width); `corrupt` first alters the first element (test hook).
    /// `Ok(false)` when this backend cannot (the caller then downloads and checks on the
    /// host); otherwise [`Ranks::finish_check`] returns the count.
    fn start_check(
        &mut self,
        _i: usize,
        _at: usize,
        _dt: DataType,
        _tol: u64,
        _ranges: &[CheckRange],
        _corrupt: bool,
    ) -> TestResult<bool> {
        Ok(false)
    }
    /// Waits for the check [`Ranks::start_check`] started on local rank `i`: its count.
    fn finish_check(&mut self, _i: usize) -> TestResult<i64> {
        Err(super::errors::TestError::Internal(
            "finish_check without a device check".into(),
        ))
    }
    /// `ncclGroupStart`.
    fn group_start(&mut self) -> TestResult<()>;
    /// `ncclGroupEnd`.
    fn group_end(&mut self) -> TestResult<()>;
    /// Issues one collective for local rank `i`.
    fn enqueue(&mut self, i: usize, call: &CollCall) -> TestResult<()>;
    /// Announces the calls of the next timed loop, one per local rank at
    /// shift 0, each to be issued at shifts up to `max_shift` bytes with
    /// [`Ranks::enqueue_prepared`]. A backend may check and resolve them
    /// here once, outside the timed region, so that issuing costs no more
    /// than nccl-tests' `startColl` does. Buffers allocated later void it.
    fn prepare(&mut self, _calls: &[CollCall], _max_shift: usize) -> TestResult<()> {
        Ok(())
    }
    /// Issues `call` (the one given to [`Ranks::prepare`] for local rank
    /// `i`) moved by `shift` bytes.
    #[inline]
    fn enqueue_prepared(&mut self, i: usize, call: &CollCall, shift: usize) -> TestResult<()> {
        self.enqueue(i, &call.shifted(shift))
    }
    /// Checks completion without blocking (errors end the run).
    fn poll(&mut self) -> TestResult<Poll>;
    /// Local rank indices (0..count) with work still running, for the
    /// timeout message (called only after a timeout).
    fn pending(&mut self) -> Vec<usize> {
        (0..self.count()).collect()
    }
    /// Aborts every communicator after a timeout.
    fn abort(&mut self);
    /// Begins capturing issued collectives into a graph (`-G`) for the
    /// timed iterations.
    fn capture_begin(&mut self) -> TestResult<()>;
    /// Begins capturing the check iteration (nccl-tests captures it in
    /// global mode when it runs one thread, thread-local mode otherwise).
    fn capture_begin_check(&mut self) -> TestResult<()> {
        self.capture_begin()
    }
    /// Ends the capture and instantiates the graph.
    fn capture_end(&mut self) -> TestResult<()>;
    /// Launches the captured graph once.
    fn graph_launch(&mut self) -> TestResult<()>;
    /// Destroys the graph.
    fn graph_destroy(&mut self) -> TestResult<()>;
    /// Records event `slot` on every rank's stream (`-I`).
    fn record_event(&mut self, slot: usize) -> TestResult<()>;
    /// Milliseconds between events `a` and `b` on local rank `i`.
    fn event_elapsed_ms(&mut self, i: usize, a: usize, b: usize) -> TestResult<f32>;
    /// (free, total) memory of local rank `i`'s device, if known.
    fn mem_info(&self, i: usize) -> Option<(u64, u64)>;
    /// Deregisters buffers and destroys communicators at the end.
    fn finish(&mut self) -> TestResult<()> {
        Ok(())
    }
    /// Called on the thread that will drive these ranks, before its tests
    /// (nccl-tests' `cudaSetDevice(gpus[0])` in `threadRunTests`).
    fn bind_thread(&mut self) -> TestResult<()> {
        Ok(())
    }
    /// `Ok` when the backend can reduce `dtype` with `op` on these ranks;
    /// an error says why not (NCCL has no single-rank fp8 avg/mulsum). The
    /// driver skips such pairs in a `-d all`/`-o all` sweep and fails
    /// with the error when exactly that pair was asked for.
    fn check_reduction(&self, _dtype: DataType, _op: ReduceOp) -> TestResult<()> {
        Ok(())
    }
}

/// Creates the backend chosen with `--backend`. `boot` is the launch's
/// bootstrap (the host backend moves data through a duplicate of it).
/// `split` is this process's color when NCCL_TESTS_SPLIT/_MASK divides the
/// processes into several communicators (None: one communicator of all):
/// the host-memory backends then talk only to the processes of that color,
/// as nccl-tests' `MPI_Comm_split(MPI_COMM_WORLD, color, proc)` does. NCCL
/// needs nothing more: each group's leader makes its own unique id.
/// Every process must call this (it may be collective over `boot`).
pub fn create(
    o: &Options,
    kind: CollKind,
    boot: &Arc<dyn Bootstrap>,
    split: Option<i32>,
) -> TestResult<Arc<dyn Backend>> {
    if o.device_impl > 0 && o.backend != BackendKind::Nccl {
        // The host backends have no GPU kernels: running them anyway would report host
        // reductions as the device implementation's.
        return Err(super::errors::TestError::NotImplemented(format!(
            "-D {} (NCCL device-API kernels) needs --backend nccl",
            o.device_impl
        )));
    }
    match o.backend {
        BackendKind::Nccl => nccl::create(o, kind),
        BackendKind::Host => Ok(Arc::new(host::HostBackend::new(boot, o, split)?)),
        BackendKind::Mpi => create_mpi(o, boot, split),
    }
}

#[cfg(feature = "mpi")]
fn create_mpi(
    o: &Options,
    boot: &Arc<dyn Bootstrap>,
    split: Option<i32>,
) -> TestResult<Arc<dyn Backend>> {
    Ok(Arc::new(mpi::MpiBackend::new(o, boot, split)?))
}

#[cfg(not(feature = "mpi"))]
fn create_mpi(
    _o: &Options,
    _boot: &Arc<dyn Bootstrap>,
    _split: Option<i32>,
) -> TestResult<Arc<dyn Backend>> {
    Err(super::errors::TestError::NotImplemented(
        "the mpi backend is not available: this binary was built without the `mpi` feature".into(),
    ))
}

/// Features a backend reports before it exists (for option parsing).
pub fn probe_features(kind: BackendKind) -> (Features, i32) {
    match kind {
        BackendKind::Nccl => nccl::probe(),
        _ => (Features::ALL, 0),
    }
}
