//! One thread's NCCL ranks: communicators, streams, buffers, registrations,
//! graphs and events, everything created before the timed loop so that
//! enqueueing and polling never allocate.

use erdma::cuda::{
    self, CaptureMode, Device, DeviceBuffer, DevicePtr, Event, Graph, GraphExec, Stream,
};
use std::sync::Arc;

use erdma::nccl::{Comm, DevComm, Group, Nccl, RegHandle, Scalar};

use super::device::{DeviceApi, FakeDevComm, Kernels};
use super::enqueue::{self, scalars_for_rank};
use super::gpudata::GpuData;
use super::{cuda_error, nccl_error};
use crate::nccltests::backend::{BufRef, CheckRange, CollCall, Poll, Ranks};
use crate::nccltests::colls::Target;
use crate::nccltests::errors::{TestError, TestResult};
use crate::nccltests::types::{DataType, ReduceOp};
use crate::nccltests::verifiable::Kernel;

/// Everything one rank owns. Field order is drop order: graphs before the
/// communicator they captured, the communicator (which releases its
/// registrations) before the buffers.
pub(crate) struct RankState {
    exec: Option<GraphExec>,
    graph: Option<Graph>,
    events: Vec<Event>,
    pub(super) comm: Option<Comm>,
    pub(super) stream: Stream,
    device: Device,
    regs: Vec<RegHandle>,
    send: Option<DeviceBuffer<u8>>,
    recv: Option<DeviceBuffer<u8>>,
    /// PreMulSum scalar of this rank for each type (`DataType::ALL` order).
    pub(super) scalars: [Scalar; 12],
    /// The call of the coming timed loop, resolved by `Ranks::prepare`.
    prepared: Option<Prepared>,
    /// `-D`: the rank's kernels, device communicator and windows.
    pub(super) dev: Option<DevState>,
    /// The data generation and check kernels, once loaded.
    data: Option<GpuData>,
}

/// What a rank needs to run `-D` kernels.
pub(super) struct DevState {
    pub(super) kernels: Kernels,
    /// Taken by `finish` for `ncclDevCommDestroy`.
    pub(super) comm: Option<DevComm>,
    /// The `fake-devcomm` hook's communicator and windows, used instead.
    pub(super) fake: Option<FakeDevComm>,
    /// The send and receive windows (`ncclWindow_t`): registered by `-R 2`, or the
    /// fake-devcomm hook's.
    pub(super) send_win: *mut std::ffi::c_void,
    pub(super) recv_win: *mut std::ffi::c_void,
}

// SAFETY: the window handles are opaque tokens of the rank's communicator,
// which moves between threads with them (see RegHandle).
unsafe impl Send for DevState {}

/// A call checked once for every shift of a timed loop: its input and
/// output addresses at shift 0, valid up to `max_shift` bytes further.
#[derive(Clone, Copy)]
struct Prepared {
    call: CollCall,
    send: DevicePtr,
    recv: DevicePtr,
    max_shift: usize,
}

impl RankState {
    /// A created communicator and its stream.
    pub(crate) fn new(comm: Comm, stream: Stream) -> TestResult<RankState> {
        let scalars = scalars_for_rank(comm.rank())?;
        Ok(RankState {
            exec: None,
            graph: None,
            events: Vec::new(),
            device: comm.device().clone(),
            comm: Some(comm),
            stream,
            regs: Vec::new(),
            send: None,
            recv: None,
            scalars,
            prepared: None,
            dev: None,
            data: None,
        })
    }

    fn buffer(&self, t: Target) -> Option<&DeviceBuffer<u8>> {
        match t {
            Target::Send => self.send.as_ref(),
            Target::Recv => self.recv.as_ref(),
        }
    }

    /// The device address of `len` bytes at `at`, checked to lie inside the
    /// buffer (the invariant every raw NCCL/CUDA call below relies on).
    #[inline]
    pub(super) fn range(&self, at: BufRef, len: usize) -> TestResult<DevicePtr> {
        let Some(b) = self.buffer(at.buf) else {
            return Err(TestError::Internal(
                "NCCL backend: buffers used before alloc".into(),
            ));
        };
        match at.offset.checked_add(len) {
            Some(end) if end <= b.byte_len() => Ok(b.device_ptr().byte_add(at.offset)),
            _ => Err(TestError::Internal(format!(
                "NCCL backend: bytes {}..+{len} outside a {}-byte buffer",
                at.offset,
                b.byte_len()
            ))),
        }
    }

    #[inline]
    pub(super) fn comm(&self) -> TestResult<&Comm> {
        self.comm
            .as_ref()
            .ok_or_else(|| TestError::comm("NCCL", "ncclComm", "the communicator was destroyed"))
    }
}

/// The ranks one benchmark thread drives.
pub struct NcclRanks {
    nccl: &'static Nccl,
    ranks: Vec<RankState>,
    timeout_s: i32,
    unalign_pad: usize,
    per_iter_events: usize,
    nthreads: usize,
    device_api: Option<Arc<DeviceApi>>,
    /// Set after an abort or an asynchronous error: dropping then aborts
    /// instead of destroying (which would wait for stuck work).
    poisoned: bool,
    /// Whether data is generated and checked on the GPUs (None: not tried
    /// yet; false: the kernels did not load, the host does it).
    gpu_data: Option<bool>,
}

impl NcclRanks {
    pub(crate) fn new(
        nccl: &'static Nccl,
        ranks: Vec<RankState>,
        timeout_s: i32,
        unalign_pad: usize,
        per_iter_events: usize,
        nthreads: usize,
        device_api: Option<Arc<DeviceApi>>,
    ) -> NcclRanks {
        NcclRanks {
            nccl,
            ranks,
            timeout_s,
            unalign_pad,
            per_iter_events,
            nthreads,
            device_api,
            poisoned: false,
            gpu_data: None,
        }
    }

    /// Loads the data kernels on every rank the first time they are needed.
    /// A driver that cannot load them (older than CUDA 12.0) leaves the work
    /// to the host, with one warning.
    fn gpu_data(&mut self) -> bool {
        if let Some(ok) = self.gpu_data {
            return ok;
        }
        let loaded = self.ranks.iter_mut().try_for_each(|r| {
            if r.data.is_none() {
                r.data = Some(GpuData::load(&r.device, &r.stream)?);
            }
            Ok::<_, TestError>(())
        });
        if let Err(e) = &loaded {
            crate::nccltests::console::err(&format!(
                "warning: the data check kernels did not load ({e}); generating and checking data on the host instead (slower); hint: a driver of CUDA 12.0 or newer runs them\n"
            ));
        }
        self.gpu_data = Some(loaded.is_ok());
        loaded.is_ok()
    }

    /// Rank `i`'s loaded data kernels.
    fn data(&self, i: usize) -> TestResult<(&RankState, &GpuData)> {
        let r = &self.ranks[i];
        match &r.data {
            Some(d) => Ok((r, d)),
            None => Err(TestError::Internal(
                "NCCL backend: data kernels used before loading".into(),
            )),
        }
    }

    fn nerr(&self, call: &str, e: erdma::nccl::NcclError) -> TestError {
        nccl_error(call, e, self.timeout_s)
    }

    fn abort_all(&mut self) {
        self.poisoned = true;
        for r in &self.ranks {
            if let Some(c) = &r.comm {
                let _ = c.abort();
            }
        }
    }
}

impl Drop for NcclRanks {
    fn drop(&mut self) {
        if self.poisoned {
            self.abort_all();
        }
    }
}

impl Ranks for NcclRanks {
    fn count(&self) -> usize {
        self.ranks.len()
    }

    /// `ncclMemAlloc` of both buffers on every rank, and the `-I` events.
    fn alloc(&mut self, send_bytes: usize, recv_bytes: usize) -> TestResult<()> {
        let nccl = self.nccl;
        for r in &mut self.ranks {
            r.prepared = None;
            r.send = None;
            r.recv = None;
            r.send = Some(
                nccl.mem_alloc(&r.device, send_bytes.max(1))
                    .map_err(|e| nccl_error("ncclMemAlloc", e, self.timeout_s))?,
            );
            r.recv = Some(
                nccl.mem_alloc(&r.device, recv_bytes.max(1))
                    .map_err(|e| nccl_error("ncclMemAlloc", e, self.timeout_s))?,
            );
            r.events.clear();
            for _ in 0..self.per_iter_events {
                r.events.push(
                    Event::new(&r.device, true, false)
                        .map_err(|e| cuda_error("cudaEventCreate", e))?,
                );
            }
        }
        Ok(())
    }

    /// nccl-tests registers `maxBytes` of each buffer (not the unalign
    /// padding): locally (`-R 1`) or as symmetric windows (`-R 2`).
    fn register(&mut self, mode: i32) -> TestResult<()> {
        if mode == 0 {
            return Ok(());
        }
        let window = mode == 2 && self.nccl.has_window_register();
        // Inside the allocation group of `threads::alloc_all` (window
        // registration is collective: the ranks of one process register
        // together), so nested; NCCL completes the registrations at the
        // outermost end.
        // SAFETY: nothing is enqueued through this group; the buffers
        // registered outlive the communicators (`comm` is dropped first),
        // so they are valid whenever the outer group's end completes them.
        let group = unsafe { Group::start_nested(self.nccl) }
            .map_err(|e| self.nerr("ncclGroupStart", e))?;
        let mut result = Ok(());
        for r in &mut self.ranks {
            let (Some(send), Some(recv), Some(comm)) = (&r.send, &r.recv, &r.comm) else {
                result = Err(TestError::Internal(
                    "NCCL backend: register before alloc".into(),
                ));
                break;
            };
            let bytes = send.byte_len().saturating_sub(self.unalign_pad).max(1);
            for b in [send, recv] {
                // SAFETY: `bytes` lies inside the buffer, which this rank owns
                // and frees only after the communicator (and with it the
                // registration) is gone: `comm` is dropped before the buffers.
                let h = unsafe {
                    if window {
                        comm.window_register(b.device_ptr(), bytes, true)
                    } else {
                        comm.register(b.device_ptr(), bytes)
                    }
                };
                match h {
                    Ok(h) => r.regs.push(h),
                    Err(e) => {
                        let call = if window {
                            "ncclCommWindowRegister"
                        } else {
                            "ncclCommRegister"
                        };
                        result = Err(nccl_error(call, e, self.timeout_s));
                        break;
                    }
                }
            }
            if result.is_err() {
                break;
            }
        }
        let ended = group.end().map_err(|e| self.nerr("ncclGroupEnd", e));
        result.and(ended.map(|_| ()))
    }

    /// `-D`: checks that every rank of the communicator is in the LSA team
    /// (the kernels load and store peers' memory directly), loads the kernels
    /// and creates the device communicator over the `-R 2` windows.
    fn setup_device_api(&mut self) -> TestResult<()> {
        let Some(api) = self.device_api.clone() else {
            return Ok(());
        };
        let timeout_s = self.timeout_s;
        let hooks = crate::nccltests::hooks::Hooks::from_env();
        let send_at = BufRef {
            buf: Target::Send,
            offset: 0,
        };
        let recv_at = BufRef {
            buf: Target::Recv,
            offset: 0,
        };
        for r in &mut self.ranks {
            let comm = r.comm()?;
            let fake = hooks.fake_devcomm.contains(&comm.rank());
            let wins: Vec<_> = r
                .regs
                .iter()
                .filter(|h| h.is_window())
                .map(|h| h.as_raw())
                .collect();
            let [send_win, recv_win] = wins[..] else {
                return Err(TestError::InvalidUsage(
                    "device implementation (-D > 0) requires enabling symmetric memory registration (-R 2) with NCCL >= 2.27".into(),
                ));
            };
            let team = comm
                .lsa_team()
                .map_err(|e| nccl_error("ncclTeamLsa", e, timeout_s))?;
            if team.n_ranks != comm.size() {
                return Err(TestError::InvalidUsage(format!(
                    "DeviceImplementation > 1 requires CUDA P2P connectivity across all ranks. Not all ranks of this communicator have P2P connectivity ({} of {} ranks are load/store accessible from rank {})",
                    team.n_ranks,
                    comm.size(),
                    comm.rank()
                )));
            }
            let kernels = api.kernels(&r.device, &r.stream)?;
            if fake && comm.size() == 1 {
                let (send, recv) = (r.range(send_at, 0)?, r.range(recv_at, 0)?);
                let (f, (send_win, recv_win)) =
                    kernels.fake_one_rank(&r.device, &r.stream, send, recv)?;
                r.dev = Some(DevState {
                    kernels,
                    comm: None,
                    send_win,
                    recv_win,
                    fake: Some(f),
                });
                continue;
            }
            // SAFETY: inside `threads::setup_device_api`'s group NCCL fills
            // the device communicator at that group's end; it is kept in
            // `r.dev` (not read, destroyed or dropped) until the group has
            // ended: the kernels read it only in the timed loop, after
            // setup, and the ranks are dropped only after setup returns.
            let dc = unsafe {
                comm.dev_comm_create_in_group(&kernels.layout, &api.requirements())
            }
                .map_err(|e| match nccl_error("ncclDevCommCreate", e, timeout_s) {
                    TestError::Comm { lib, call, msg } => TestError::Comm {
                        lib,
                        call,
                        msg: format!("{msg}; hint: NCCL gives communicators symmetric memory (and so the device API) only on one node, with 2 or more GPUs that reach each other by CUDA P2P"),
                    },
                    other => other,
                })?;
            r.dev = Some(DevState {
                kernels,
                comm: Some(dc),
                send_win,
                recv_win,
                fake: None,
            });
        }
        Ok(())
    }

    fn zero(&mut self, i: usize, buf: Target, offset: usize, len: usize) -> TestResult<()> {
        let r = &self.ranks[i];
        let p = r.range(BufRef { buf, offset }, len)?;
        // SAFETY: the range was checked to lie inside the rank's buffer, which
        // outlives the memset (buffers are freed only after a device sync).
        unsafe { cuda::memset_raw(p, 0, len, &r.stream) }.map_err(|e| cuda_error("cudaMemset", e))
    }

    fn upload(&mut self, i: usize, buf: Target, offset: usize, data: &[u8]) -> TestResult<()> {
        let r = &self.ranks[i];
        let p = r.range(BufRef { buf, offset }, data.len())?;
        // SAFETY: the destination range lies inside the rank's buffer; the
        // copy is ordered on the rank's stream after earlier work, and the
        // call waits for it.
        unsafe { cuda::copy_htod_raw(p, data, &r.stream) }.map_err(|e| cuda_error("cudaMemcpy", e))
    }

    fn download(&mut self, i: usize, buf: Target, offset: usize, out: &mut [u8]) -> TestResult<()> {
        let r = &self.ranks[i];
        let p = r.range(BufRef { buf, offset }, out.len())?;
        // SAFETY: the source range lies inside the rank's buffer; the call
        // waits for the copy.
        unsafe { cuda::copy_dtoh_raw(out, p, &r.stream) }.map_err(|e| cuda_error("cudaMemcpy", e))
    }

    /// Generates the elements with `verifiable.cu`'s kernel on the rank's
    /// stream, before the collective that reads them.
    fn fill_on_device(
        &mut self,
        i: usize,
        at: BufRef,
        len: usize,
        kernel: &Kernel,
        ix0: i64,
    ) -> TestResult<bool> {
        if !self.gpu_data() {
            return Ok(false);
        }
        let (r, data) = self.data(i)?;
        let ws = kernel.element_size();
        let p = r.range(at, len)?;
        r.device
            .bind()
            .map_err(|e| cuda_error("cudaSetDevice", e))?;
        // SAFETY: the range was checked to lie inside the rank's buffer, which
        // outlives the kernel (buffers are freed only after a device sync);
        // nothing else runs on it before the kernel (the rank's stream orders).
        unsafe { data.fill(p, len / ws, ws, ix0, &kernel.device_formula(), &r.stream) }?;
        Ok(true)
    }

    /// Counts the wrong elements with `verifiable.cu`'s kernel, one launch
    /// per range, into the rank's counter; `finish_check` reads it.
    fn start_check(
        &mut self,
        i: usize,
        at: usize,
        dt: DataType,
        tol: u64,
        ranges: &[CheckRange],
        corrupt: bool,
    ) -> TestResult<bool> {
        if !self.gpu_data() {
            return Ok(false);
        }
        let ws = dt.size();
        let total = ranges.last().map_or(0, |c| c.off + c.len);
        let (r, data) = self.data(i)?;
        let base = r.range(
            BufRef {
                buf: Target::Recv,
                offset: at,
            },
            total,
        )?;
        r.device
            .bind()
            .map_err(|e| cuda_error("cudaSetDevice", e))?;
        if corrupt && total > 0 {
            // The test hook: alter the first byte of the result in GPU memory.
            let mut b = [0u8; 1];
            // SAFETY: the byte lies inside the checked range; both copies wait.
            unsafe {
                cuda::copy_dtoh_raw(&mut b, base, &r.stream)
                    .and_then(|()| cuda::copy_htod_raw(base, &[b[0] ^ 0x5a], &r.stream))
            }
            .map_err(|e| cuda_error("cudaMemcpy", e))?;
        }
        data.reset(&r.stream)?;
        for c in ranges {
            // SAFETY: every range lies inside [at, at + total), checked above to
            // lie inside the rank's receive buffer, which outlives the kernel.
            unsafe {
                data.check(
                    base.byte_add(c.off),
                    c.len / ws,
                    ws,
                    c.ix0,
                    &c.kernel.device_formula(),
                    tol,
                    &r.stream,
                )
            }?;
        }
        Ok(true)
    }

    fn finish_check(&mut self, i: usize) -> TestResult<i64> {
        let (r, data) = self.data(i)?;
        Ok(data.wrong(&r.stream)? as i64)
    }

    #[inline]
    fn group_start(&mut self) -> TestResult<()> {
        Group::start_unguarded(self.nccl).map_err(|e| self.nerr("ncclGroupStart", e))
    }

    #[inline]
    fn group_end(&mut self) -> TestResult<()> {
        Group::end_unguarded(self.nccl)
            .map(|_| ())
            .map_err(|e| self.nerr("ncclGroupEnd", e))
    }

    #[inline]
    fn enqueue(&mut self, i: usize, call: &CollCall) -> TestResult<()> {
        enqueue::run_coll(&self.ranks[i], call, 0, self.timeout_s)
    }

    /// Checks every rank's call once for all shifts, so that
    /// `enqueue_prepared` in the timed loop only adds the shift.
    fn prepare(&mut self, calls: &[CollCall], max_shift: usize) -> TestResult<()> {
        for (r, call) in self.ranks.iter_mut().zip(calls) {
            r.prepared = None;
            let (send, recv) = enqueue::resolve(r, call, max_shift)?;
            r.prepared = Some(Prepared {
                call: *call,
                send,
                recv,
                max_shift,
            });
        }
        Ok(())
    }

    #[inline]
    fn enqueue_prepared(&mut self, i: usize, call: &CollCall, shift: usize) -> TestResult<()> {
        let r = &self.ranks[i];
        match &r.prepared {
            Some(p) if shift <= p.max_shift => {
                debug_assert_eq!(p.call, *call, "enqueue_prepared: not the prepared call");
                // SAFETY: `prepare` checked both ranges of `p.call` (issued
                // here, whatever `call` says) for every shift up to
                // `max_shift` against the rank's buffers, which have not been
                // reallocated since (alloc clears `prepared`).
                unsafe {
                    enqueue::issue(
                        r,
                        &p.call,
                        p.send.byte_add(shift),
                        p.recv.byte_add(shift),
                        self.timeout_s,
                    )
                }
            }
            _ => enqueue::run_coll(r, call, shift, self.timeout_s),
        }
    }

    /// nccl-tests' `testStreamSynchronize` step: a finished stream is done;
    /// for the others `ncclCommGetAsyncError`, aborting every communicator on
    /// an error.
    fn poll(&mut self) -> TestResult<Poll> {
        let mut busy = false;
        let mut failed = None;
        for r in &self.ranks {
            match r.stream.query() {
                Ok(true) => continue,
                Ok(false) => {}
                Err(e) => return Err(cuda_error("cudaStreamQuery", e)),
            }
            busy = true;
            if let Some(c) = &r.comm
                && let Err(e) = c.async_error()
            {
                failed = Some(e);
                break;
            }
        }
        if let Some(e) = failed {
            self.abort_all();
            return Err(self.nerr("ncclCommGetAsyncError", e));
        }
        Ok(if busy { Poll::Pending } else { Poll::Done })
    }

    fn pending(&mut self) -> Vec<usize> {
        (0..self.ranks.len())
            .filter(|&i| !matches!(self.ranks[i].stream.query(), Ok(true)))
            .collect()
    }

    fn abort(&mut self) {
        self.abort_all();
    }

    /// Timing capture: thread-local mode, as nccl-tests (NCCL may allocate
    /// while capturing its first use of a peer).
    fn capture_begin(&mut self) -> TestResult<()> {
        self.begin_capture(CaptureMode::ThreadLocal)
    }

    /// Check capture: global mode with one thread, thread-local otherwise.
    fn capture_begin_check(&mut self) -> TestResult<()> {
        let mode = if self.nthreads > 1 {
            CaptureMode::ThreadLocal
        } else {
            CaptureMode::Global
        };
        self.begin_capture(mode)
    }

    /// Ends every capture, then instantiates every graph.
    fn capture_end(&mut self) -> TestResult<()> {
        for r in &mut self.ranks {
            r.graph = Some(
                r.stream
                    .end_capture()
                    .map_err(|e| cuda_error("cudaStreamEndCapture", e))?,
            );
        }
        for r in &mut self.ranks {
            if let Some(g) = &r.graph {
                r.exec = Some(
                    g.instantiate()
                        .map_err(|e| cuda_error("cudaGraphInstantiate", e))?,
                );
            }
        }
        Ok(())
    }

    #[inline]
    fn graph_launch(&mut self) -> TestResult<()> {
        for r in &self.ranks {
            let Some(exec) = &r.exec else {
                return Err(TestError::Internal(
                    "NCCL backend: graph launched before capture".into(),
                ));
            };
            // SAFETY: the graph captured collectives on this rank's buffers and
            // communicator, which live in `r` (dropped after the graph) and
            // are used by nothing else until the launch completes.
            unsafe { exec.launch(&r.stream) }.map_err(|e| cuda_error("cudaGraphLaunch", e))?;
        }
        Ok(())
    }

    fn graph_destroy(&mut self) -> TestResult<()> {
        for r in &mut self.ranks {
            r.exec = None;
            r.graph = None;
        }
        Ok(())
    }

    #[inline]
    fn record_event(&mut self, slot: usize) -> TestResult<()> {
        for r in &self.ranks {
            let Some(ev) = r.events.get(slot) else {
                return Err(TestError::Internal(
                    "NCCL backend: event slot beyond those created".into(),
                ));
            };
            ev.record(&r.stream)
                .map_err(|e| cuda_error("cudaEventRecord", e))?;
        }
        Ok(())
    }

    fn event_elapsed_ms(&mut self, i: usize, a: usize, b: usize) -> TestResult<f32> {
        let ev = &self.ranks[i].events;
        match (ev.get(a), ev.get(b)) {
            (Some(x), Some(y)) => x
                .elapsed_ms(y)
                .map_err(|e| cuda_error("cudaEventElapsedTime", e)),
            _ => Err(TestError::Internal("event not recorded".into())),
        }
    }

    fn mem_info(&self, i: usize) -> Option<(u64, u64)> {
        let m = self.ranks.get(i)?.device.memory_info().ok()?;
        Some((m.free as u64, m.total as u64))
    }

    /// nccl-tests binds the thread's first GPU before running its tests.
    fn bind_thread(&mut self) -> TestResult<()> {
        match self.ranks.first() {
            Some(r) => r.device.bind().map_err(|e| cuda_error("cudaSetDevice", e)),
            None => Ok(()),
        }
    }

    /// Reductions NCCL cannot do on these ranks (fp8 avg/mulsum on one rank).
    fn check_reduction(&self, dtype: DataType, op: ReduceOp) -> TestResult<()> {
        let Some(c) = self.ranks.first().and_then(|r| r.comm.as_ref()) else {
            return Ok(());
        };
        dtype
            .check_reduction(op, c.size())
            .map_err(|e| nccl_error("ncclAllReduce", e, self.timeout_s))
    }

    /// Deregisters the buffers, then destroys the communicators
    /// (`ncclCommDestroy`); buffers are freed afterwards.
    fn finish(&mut self) -> TestResult<()> {
        if self.poisoned {
            return Ok(());
        }
        let timeout_s = self.timeout_s;
        let mut first_err = None;
        for r in &mut self.ranks {
            r.exec = None;
            r.graph = None;
            let Some(comm) = r.comm.take() else { continue };
            for h in r.regs.drain(..) {
                // SAFETY: every handle was made by this communicator.
                if let Err(e) = unsafe { comm.deregister(h) } {
                    first_err.get_or_insert(nccl_error("ncclCommDeregister", e, timeout_s));
                }
            }
            // nccl-tests' order: windows, device communicator, communicator.
            if let Some(dc) = r.dev.as_mut().and_then(|d| d.comm.take())
                && let Err(e) = comm.dev_comm_destroy(dc)
            {
                first_err.get_or_insert(nccl_error("ncclDevCommDestroy", e, timeout_s));
            }
            if let Err(e) = comm.destroy() {
                first_err.get_or_insert(nccl_error("ncclCommDestroy", e, timeout_s));
            }
        }
        first_err.map_or(Ok(()), Err)
    }
}

impl NcclRanks {
    fn begin_capture(&mut self, mode: CaptureMode) -> TestResult<()> {
        for r in &self.ranks {
            r.stream
                .begin_capture(mode)
                .map_err(|e| cuda_error("cudaStreamBeginCapture", e))?;
        }
        Ok(())
    }
}
