//! Completion queues: polling, blocking waits through a completion channel,
//! and typed work completions.

use std::collections::HashMap;
use std::fmt;
use std::hash::{BuildHasherDefault, Hasher};
use std::mem::MaybeUninit;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant};

use erdma_sys as sys;

use crate::context::Context;
use crate::error::{Error, Result};
use crate::ffi::{self, Ptr};
use crate::pending::{self, WrId};
use crate::port::c_enum;
use crate::qp::QpShared;
use cache::{Closing, QpCache};
use gate::{Depths, PollGate};

#[cfg(feature = "tokio")]
mod asyncio;
mod cache;
mod gate;
#[cfg(feature = "tokio")]
pub use asyncio::{AsyncCompletionQueue, Posted};

c_enum! {
    /// Status of a work completion (`ibv_wc_status`); `Display` gives the
    /// symbolic name and `ibv_wc_status_str`'s text.
    WcStatus: u32 {
        /// Success.
        Success = sys::IBV_WC_SUCCESS => "SUCCESS (success)",
        /// Local length error.
        LocLenErr = sys::IBV_WC_LOC_LEN_ERR => "LOC_LEN_ERR (local length error)",
        /// Local QP operation error.
        LocQpOpErr = sys::IBV_WC_LOC_QP_OP_ERR => "LOC_QP_OP_ERR (local QP operation error)",
        /// Local EE context operation error.
        LocEecOpErr = sys::IBV_WC_LOC_EEC_OP_ERR => "LOC_EEC_OP_ERR (local EE context operation error)",
        /// Local protection error.
        LocProtErr = sys::IBV_WC_LOC_PROT_ERR => "LOC_PROT_ERR (local protection error)",
        /// Flushed: the QP was in the error state.
        WrFlushErr = sys::IBV_WC_WR_FLUSH_ERR => "WR_FLUSH_ERR (Work Request Flushed Error)",
        /// Memory window bind error.
        MwBindErr = sys::IBV_WC_MW_BIND_ERR => "MW_BIND_ERR (memory management operation error)",
        /// Bad response.
        BadRespErr = sys::IBV_WC_BAD_RESP_ERR => "BAD_RESP_ERR (bad response error)",
        /// Local access error.
        LocAccessErr = sys::IBV_WC_LOC_ACCESS_ERR => "LOC_ACCESS_ERR (local access error)",
        /// Remote invalid request.
        RemInvReqErr = sys::IBV_WC_REM_INV_REQ_ERR => "REM_INV_REQ_ERR (remote invalid request error)",
        /// Remote access error (rkey, address, rights).
        RemAccessErr = sys::IBV_WC_REM_ACCESS_ERR => "REM_ACCESS_ERR (remote access error)",
        /// Remote operation error.
        RemOpErr = sys::IBV_WC_REM_OP_ERR => "REM_OP_ERR (remote operation error)",
        /// Transport retries exhausted.
        RetryExcErr = sys::IBV_WC_RETRY_EXC_ERR => "RETRY_EXC_ERR (transport retry counter exceeded)",
        /// Receiver-not-ready retries exhausted.
        RnrRetryExcErr = sys::IBV_WC_RNR_RETRY_EXC_ERR => "RNR_RETRY_EXC_ERR (RNR retry counter exceeded)",
        /// Local RDD violation.
        LocRddViolErr = sys::IBV_WC_LOC_RDD_VIOL_ERR => "LOC_RDD_VIOL_ERR (local RDD violation error)",
        /// Remote invalid RD request.
        RemInvRdReqErr = sys::IBV_WC_REM_INV_RD_REQ_ERR => "REM_INV_RD_REQ_ERR (remote invalid RD request)",
        /// Remote abort.
        RemAbortErr = sys::IBV_WC_REM_ABORT_ERR => "REM_ABORT_ERR (aborted error)",
        /// Invalid EE context number.
        InvEecnErr = sys::IBV_WC_INV_EECN_ERR => "INV_EECN_ERR (invalid EE context number)",
        /// Invalid EE context state.
        InvEecStateErr = sys::IBV_WC_INV_EEC_STATE_ERR => "INV_EEC_STATE_ERR (invalid EE context state)",
        /// Fatal error.
        FatalErr = sys::IBV_WC_FATAL_ERR => "FATAL_ERR (fatal error)",
        /// Response timeout.
        RespTimeoutErr = sys::IBV_WC_RESP_TIMEOUT_ERR => "RESP_TIMEOUT_ERR (response timeout error)",
        /// General error.
        GeneralErr = sys::IBV_WC_GENERAL_ERR => "GENERAL_ERR (general error)",
    } unknown "unknown status"
}

impl WcStatus {
    /// The likely cause of an error status.
    pub fn hint(self) -> Option<&'static str> {
        Some(match self {
            WcStatus::RemAccessErr => {
                "the peer refused the access: wrong rkey or address, a range outside the remote region, \
                 or the region lacks REMOTE_READ/REMOTE_WRITE/REMOTE_ATOMIC"
            }
            WcStatus::RetryExcErr => {
                "the peer never acknowledged: wrong remote QPN/GID/LID, the peer QP is not RTR, \
                 the peer died, or the path is down"
            }
            WcStatus::RnrRetryExcErr => {
                "the peer had no receive posted: post receives before the sender sends"
            }
            WcStatus::LocProtErr => {
                "a local buffer is not in a registered region of this QP's protection domain, \
                 or lacks LOCAL_WRITE"
            }
            WcStatus::LocLenErr => {
                "the message is longer than the posted receive buffer or the device limit"
            }
            WcStatus::RemInvReqErr => {
                "the peer rejected the request: a message longer than its receive buffer, an unaligned \
                 atomic, or an operation it does not support"
            }
            WcStatus::WrFlushErr => {
                "the QP had gone to the error state (see the first failed completion)"
            }
            WcStatus::RemOpErr => "the peer failed to carry out the operation",
            _ => return None,
        })
    }
}

c_enum! {
    /// Opcode of a work completion (`ibv_wc_opcode`); only valid on success.
    WcOpcode: u32 {
        /// SEND or SEND_WITH_IMM sent.
        Send = sys::IBV_WC_SEND => "SEND",
        /// RDMA WRITE done.
        RdmaWrite = sys::IBV_WC_RDMA_WRITE => "RDMA_WRITE",
        /// RDMA READ done.
        RdmaRead = sys::IBV_WC_RDMA_READ => "RDMA_READ",
        /// Compare-and-swap done.
        CompSwap = sys::IBV_WC_COMP_SWAP => "COMP_SWAP",
        /// Fetch-and-add done.
        FetchAdd = sys::IBV_WC_FETCH_ADD => "FETCH_ADD",
        /// Memory window bound.
        BindMw = sys::IBV_WC_BIND_MW => "BIND_MW",
        /// Local invalidate done.
        LocalInv = sys::IBV_WC_LOCAL_INV => "LOCAL_INV",
        /// A receive completed (SEND or SEND_WITH_IMM arrived).
        Recv = sys::IBV_WC_RECV => "RECV",
        /// An RDMA_WRITE_WITH_IMM arrived (consumed a receive).
        RecvRdmaWithImm = sys::IBV_WC_RECV_RDMA_WITH_IMM => "RECV_RDMA_WITH_IMM",
    } unknown "unknown opcode"
}

/// One work completion.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WorkCompletion {
    /// The id given to the request.
    pub wr_id: u64,
    /// Outcome.
    pub status: WcStatus,
    /// What completed (only meaningful on success).
    pub opcode: WcOpcode,
    /// Bytes received (receives) or transferred (reads, atomics: 8).
    pub byte_len: u32,
    /// Immediate data (host order) of a SEND_WITH_IMM or WRITE_WITH_IMM.
    pub imm_data: Option<u32>,
    /// The local QP number.
    pub qp_num: u32,
    /// The remote QP number (UD; 0 or the peer on RC, provider dependent).
    pub src_qp: u32,
    /// Provider-specific error code.
    pub vendor_err: u32,
    /// Raw `ibv_wc_flags`.
    pub wc_flags: u32,
}

impl Default for WorkCompletion {
    fn default() -> Self {
        WorkCompletion {
            wr_id: 0,
            status: WcStatus::Success,
            opcode: WcOpcode::Send,
            byte_len: 0,
            imm_data: None,
            qp_num: 0,
            src_qp: 0,
            vendor_err: 0,
            wc_flags: 0,
        }
    }
}

impl WorkCompletion {
    /// Whether it succeeded.
    pub fn is_ok(&self) -> bool {
        self.status == WcStatus::Success
    }

    /// `Ok(self)` on success, else [`Error::Completion`] with the status and its hint.
    pub fn ok(&self) -> Result<&WorkCompletion> {
        if self.is_ok() {
            Ok(self)
        } else {
            Err(Error::Completion {
                status: self.status,
                wr_id: self.wr_id,
                qp_num: self.qp_num,
                vendor_err: self.vendor_err,
            })
        }
    }

    fn from_raw(wc: &sys::ibv_wc, wr_id: u64) -> WorkCompletion {
        let imm = (wc.wc_flags & sys::IBV_WC_WITH_IMM != 0)
            // SAFETY: with IBV_WC_WITH_IMM the union holds imm_data.
            .then(|| u32::from_be(unsafe { wc.__bindgen_anon_1.imm_data }));
        WorkCompletion {
            wr_id,
            status: WcStatus::from_raw(wc.status),
            opcode: WcOpcode::from_raw(wc.opcode),
            byte_len: wc.byte_len,
            imm_data: imm,
            qp_num: wc.qp_num,
            src_qp: wc.src_qp,
            vendor_err: wc.vendor_err,
            wc_flags: wc.wc_flags,
        }
    }
}

/// Options of a new completion queue.
#[derive(Debug, Clone, Default)]
pub struct CqOptions {
    /// Create a completion channel so that [`CompletionQueue::wait`] can
    /// sleep instead of spinning.
    pub channel: bool,
    /// Completion vector (interrupt) to use; 0 when unsure.
    pub comp_vector: i32,
}

pub(crate) struct CqInner {
    raw: Ptr<sys::ibv_cq>,
    channel: Option<Ptr<sys::ibv_comp_channel>>,
    ctx: Context,
    entries: u32,
    /// The QPs whose completions come here, to release the memory their
    /// finished requests held.
    qps: Mutex<Attached>,
    /// Whether it serves a [`crate::Lane`] (marked under `qps`'s lock), and
    /// the calls of [`CompletionQueue::poll`] in progress, which the mark
    /// waits for.
    gate: PollGate,
    /// Whether `qps` has retired QPs (read without the lock on the polling
    /// path, which looks at the list only when it is set).
    has_retired: AtomicBool,
    /// The QP the polls found last (a strong share, evicted by the QP's
    /// owner when it drops it: see `cache`).
    cache: QpCache<QpShared>,
}

/// The QPs attached to a CQ, by generation, and the completions their queues
/// may have outstanding at once.
#[derive(Default)]
struct Attached {
    by_generation: HashMap<u32, Weak<QpShared>, BuildHasherDefault<GenHasher>>,
    /// The room reserved, and the dropped QPs whose completions may still
    /// be here (issue 34 hole 10).
    depths: Depths,
}

/// The QP of a completion, for [`CompletionQueue::translate`].
enum Found<'c> {
    /// The CQ's cached QP, borrowed (given back when dropped).
    Cached(cache::Borrowed<'c, QpShared>),
    /// Looked up in [`Attached`] (`None`: dropped).
    Looked(Option<Arc<QpShared>>),
}

impl Found<'_> {
    fn qp(&self) -> Option<&QpShared> {
        match self {
            Found::Cached(b) => Some(b),
            Found::Looked(q) => q.as_deref(),
        }
    }
}

impl Closing for QpShared {
    fn closing(&self) -> bool {
        QpShared::closing(self)
    }
}

/// Hashes a QP generation for [`Attached`]: generations are handed out by
/// this process (nothing a peer controls), so a multiply spreads them well
/// enough, where the default SipHash cost more per completion than the rest
/// of the lookup.
#[derive(Default)]
struct GenHasher(u64);

impl Hasher for GenHasher {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.write_u32(u32::from(b) ^ (self.0 as u32));
        }
    }

    fn write_u32(&mut self, n: u32) {
        self.0 = (self.0 ^ u64::from(n)).wrapping_mul(0x9e37_79b9_7f4a_7c15);
    }
}

impl Drop for CqInner {
    fn drop(&mut self) {
        let a = self.qps.get_mut().unwrap_or_else(|e| e.into_inner());
        a.depths.swept(pending::release_generation);
        if let Ok(lib) = ffi::verbs() {
            // SAFETY: every QP using this CQ holds an Arc to it, so none is
            // left; completion events were acked when received.
            unsafe { lib.ibv_destroy_cq(self.raw.0) };
            if let Some(ch) = self.channel {
                // SAFETY: the channel's only CQ is destroyed above.
                unsafe { lib.ibv_destroy_comp_channel(ch.0) };
            }
        }
    }
}

/// A completion queue. Cheap to clone (shared). QPs keep their CQs alive.
#[derive(Clone)]
pub struct CompletionQueue {
    pub(crate) inner: Arc<CqInner>,
}

impl fmt::Debug for CompletionQueue {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CompletionQueue")
            .field("device", &self.inner.ctx.name())
            .field("entries", &self.inner.entries)
            .field("channel", &self.inner.channel.is_some())
            .finish()
    }
}

#[cfg(any(test, feature = "fault-injection"))]
thread_local! {
    /// How long the next poll on this thread that gets completions pauses
    /// before translating them (once): a test hook that holds a poll in
    /// progress, with completions in hand, where a race would be.
    static PAUSE_AFTER_POLL: std::cell::Cell<Duration> = const { std::cell::Cell::new(Duration::ZERO) };
}

/// Makes the next poll on this thread that gets completions pause for `d`
/// before translating them (feature `fault-injection`, for tests only).
#[cfg(any(test, feature = "fault-injection"))]
#[doc(hidden)]
pub fn pause_next_poll(d: Duration) {
    PAUSE_AFTER_POLL.with(|p| p.set(d));
}

#[cfg(any(test, feature = "fault-injection"))]
fn pause_after_poll() {
    let d = PAUSE_AFTER_POLL.with(|p| p.replace(Duration::ZERO));
    if !d.is_zero() {
        std::thread::sleep(d);
    }
}

/// Completions polled per `ibv_poll_cq` call.
const POLL_BATCH: usize = 32;

impl CompletionQueue {
    pub(crate) fn new(ctx: &Context, entries: u32, options: &CqOptions) -> Result<CompletionQueue> {
        let lib = ffi::verbs()?;
        let max = ctx.attributes().max_cqe();
        if entries == 0 || (max > 0 && entries > max) {
            return Err(Error::invalid(
                "ibv_create_cq",
                format!("{entries} entries: the device allows 1..={max}"),
            ));
        }
        let channel = if options.channel {
            // SAFETY: live context.
            let ch = unsafe { lib.ibv_create_comp_channel(ctx.as_raw()) };
            if ch.is_null() {
                return Err(Error::last_os("ibv_create_comp_channel"));
            }
            // Non-blocking, so that waits are bounded by poll(2) timeouts.
            // SAFETY: ch is a live channel with a valid fd.
            let fd = unsafe { (*ch).fd };
            // SAFETY: plain fcntl on an fd we own.
            unsafe {
                let fl = libc::fcntl(fd, libc::F_GETFL);
                libc::fcntl(fd, libc::F_SETFL, fl | libc::O_NONBLOCK);
            }
            Some(Ptr(ch))
        } else {
            None
        };
        // SAFETY: live context; channel (if any) belongs to it.
        let cq = unsafe {
            lib.ibv_create_cq(
                ctx.as_raw(),
                entries as i32,
                std::ptr::null_mut(),
                channel.map_or(std::ptr::null_mut(), |c| c.0),
                options.comp_vector,
            )
        };
        if cq.is_null() {
            let e = Error::last_os("ibv_create_cq");
            if let Some(ch) = channel {
                // SAFETY: the channel has no CQ.
                unsafe { lib.ibv_destroy_comp_channel(ch.0) };
            }
            return Err(e);
        }
        // SAFETY: cq is live; cqe is the actual size.
        let actual = unsafe { (*cq).cqe }.max(0) as u32;
        Ok(CompletionQueue {
            inner: Arc::new(CqInner {
                raw: Ptr(cq),
                channel,
                ctx: ctx.clone(),
                entries: actual,
                qps: Mutex::new(Attached::default()),
                gate: PollGate::new(),
                has_retired: AtomicBool::new(false),
                cache: QpCache::new(),
            }),
        })
    }

    /// The device.
    pub fn context(&self) -> &Context {
        &self.inner.ctx
    }

    /// Number of entries (at least what was asked).
    pub fn entries(&self) -> u32 {
        self.inner.entries
    }

    /// Whether it has a completion channel ([`CompletionQueue::wait`] sleeps).
    pub fn has_channel(&self) -> bool {
        self.inner.channel.is_some()
    }

    /// The raw `ibv_cq`, valid while this CQ (or a clone) lives.
    pub fn as_raw(&self) -> *mut sys::ibv_cq {
        self.inner.raw.0
    }

    fn attached(&self) -> std::sync::MutexGuard<'_, Attached> {
        // Plain map updates cannot be left half done by a panic.
        self.inner.qps.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Reserves room for `n` more outstanding completions (a queue of that
    /// size being attached), or refuses when the CQ would be too small to
    /// hold them: an overrun CQ loses completions and goes to error.
    pub(crate) fn reserve(&self, n: u32, what: &str) -> Result<()> {
        let mut a = self.attached();
        if self.is_dedicated() {
            return Err(Error::invalid(
                "ibv_create_qp",
                "the CQ serves a Lane, alone: create another CQ for this QP",
            ));
        }
        if let Err(want) = a.depths.reserve(n, self.inner.entries) {
            return Err(Error::invalid(
                "ibv_create_qp",
                format!(
                    "the CQ has {} entries and the queues attached to it can have {} completions                      outstanding with this QP's {what} = {n}: create the CQ with at least {want} entries                      (a CQ needs one entry per request that can be outstanding on the queues using it)",
                    self.inner.entries, want
                ),
            ));
        }
        Ok(())
    }

    pub(crate) fn unreserve(&self, n: u32) {
        self.attached().depths.unreserve(n);
    }

    /// A QP that used this CQ for a queue of depth `reserved`, with
    /// `outstanding` requests on it, was dropped and destroyed: its
    /// completions left here are stale. Gives back the depth, except
    /// `outstanding` entries (the most completions of it that can still be
    /// here), kept with its generation until they are polled or the CQ is
    /// seen empty ([`CompletionQueue::sweep`]). Called after the QP was
    /// destroyed, after which the device adds no completion of it.
    pub(crate) fn retire(&self, generation: u32, reserved: u32, outstanding: usize) {
        let mut a = self.attached();
        // A lane's CQ: the lane drained it when it took it, and its own
        // QP's requests are not tracked here.
        let dedicated = self.is_dedicated();
        if a.depths
            .retire(generation, reserved, outstanding, dedicated)
        {
            pending::hold_generation(generation);
        }
        if a.depths.has_retired() {
            self.inner.has_retired.store(true, Ordering::Release);
        }
    }

    /// A completion of the dropped QP of `generation` was polled: one
    /// fewer can be left.
    #[cold]
    fn stale(&self, generation: u32) {
        if !self.inner.has_retired.load(Ordering::Acquire) {
            return;
        }
        let mut a = self.attached();
        if let Some(g) = a.depths.stale(generation) {
            pending::release_generation(g);
            if !a.depths.has_retired() {
                self.inner.has_retired.store(false, Ordering::Release);
            }
        }
    }

    /// Called when the CQ returned fewer completions than asked while
    /// dropped QPs are retired here: under the lock (no QP retires
    /// meanwhile) polls once more; when that finds the CQ empty and then no
    /// other poll is running (one could hold a stale completion it has not
    /// translated yet), no completion of any retired QP is left (each was
    /// destroyed before it was retired), so their depths and generations
    /// are given back. A completion that poll finds is translated into
    /// `out` (room for one is checked); returns how many were written.
    #[cold]
    fn sweep(&self, out: &mut [WorkCompletion]) -> usize {
        if out.is_empty() {
            return 0;
        }
        let mut wc = MaybeUninit::<sys::ibv_wc>::zeroed();
        let n = {
            let mut a = self.attached();
            // SAFETY: live CQ; wc has room for one entry.
            let n = unsafe { sys::inline::ibv_poll_cq(self.inner.raw.0, 1, wc.as_mut_ptr()) };
            // Empty first, alone then: a poll that took a completion before
            // this one found the CQ empty is still counted now (testing
            // first let a poll take a retired QP's last completion between
            // the test and the empty poll, and the generation go back while
            // it was in hand: found by the loom model of cq/gate.rs).
            if n == 0 && self.inner.gate.alone() {
                a.depths.swept(pending::release_generation);
                self.inner.has_retired.store(false, Ordering::Release);
            }
            n
        };
        if n <= 0 {
            // An error is reported by the next poll.
            return 0;
        }
        // SAFETY: zeroed (a valid ibv_wc), and the provider wrote one entry.
        let wc = unsafe { wc.assume_init() };
        self.translate(std::slice::from_ref(&wc), out)
    }

    /// Completions outstanding at most on the queues attached to this CQ.
    pub fn reserved(&self) -> u64 {
        self.attached().depths.reserved
    }

    /// Whether the CQ serves a [`crate::Lane`].
    fn is_dedicated(&self) -> bool {
        self.inner.gate.is_dedicated()
    }

    /// `Ok` when the QP of `generation` is the only one using this CQ (its
    /// `which` CQ), so that it may become a lane's own; with `mark`, makes it
    /// so under the same lock: the QP's completions are no longer matched
    /// here, the lane polls them raw, and no other QP may use the CQ.
    ///
    /// `own` is what that QP reserved here: a larger reservation means
    /// another QP uses the CQ, also one being created on another thread (it
    /// reserves before `ibv_create_qp` and is attached only after), and so
    /// is refused. Marking waits for the [`CompletionQueue::poll`] calls in
    /// progress, which checked the mark on entry.
    pub(crate) fn dedicate(
        &self,
        generation: u32,
        own: u64,
        which: &str,
        mark: bool,
    ) -> Result<()> {
        let mut a = self.attached();
        let attached = a.by_generation.keys().filter(|&&g| g != generation).count();
        // Dropped QPs' leftovers are no other user: the lane drains them.
        let retired = a.depths.retired_left();
        let others = if a.depths.reserved.saturating_sub(retired) > own {
            attached.max(1)
        } else {
            attached
        };
        if self.is_dedicated() || others > 0 {
            return Err(Error::invalid(
                "Lane::new",
                format!(
                    "the {which} CQ also serves {} other queue pair(s): a lane needs completion \
                     queues of its own (create a CQ for this QP alone)",
                    others.max(1)
                ),
            ));
        }
        if mark {
            a.by_generation.remove(&generation);
            // Marked under the lock, which it releases before waiting for
            // the polls in progress (issue 34 hole 9; the loom models of
            // cq/gate.rs). Meanwhile the mark keeps new QPs and polls out.
            self.inner.gate.mark(a);
        }
        Ok(())
    }

    /// A lane's CQ was drained (raw, after [`CompletionQueue::dedicate`]
    /// marked it): no completion of a retired QP is left, and none is ever
    /// matched here again, so their depths and generations are given back.
    pub(crate) fn drained(&self) {
        self.attached().depths.swept(pending::release_generation);
        self.inner.has_retired.store(false, Ordering::Release);
    }

    /// Undoes [`CompletionQueue::dedicate`] for a lane that was not made.
    pub(crate) fn undedicate(&self) {
        let _a = self.attached();
        self.inner.gate.unmark();
    }

    pub(crate) fn attach(&self, generation: u32, qp: Weak<QpShared>) {
        self.attached().by_generation.insert(generation, qp);
    }

    /// The live QP of `generation` attached here; the lock is released on
    /// return (see `translate`).
    fn lookup(&self, generation: u32) -> Option<Arc<QpShared>> {
        self.attached()
            .by_generation
            .get(&generation)
            .and_then(Weak::upgrade)
    }

    /// The QP of `generation`: the cached one when it is that QP and no
    /// other poll has it, else looked up (and cached for the next polls
    /// when the cache is empty).
    #[inline]
    fn resolve(&self, generation: u32) -> Found<'_> {
        if let Some(qp) = self.inner.cache.borrow()
            && qp.generation() == generation
        {
            return Found::Cached(qp);
        }
        self.resolve_slow(generation)
    }

    #[inline(never)]
    fn resolve_slow(&self, generation: u32) -> Found<'_> {
        let qp = self.lookup(generation);
        if let Some(q) = &qp {
            self.inner.cache.install(q);
        }
        Found::Looked(qp)
    }

    /// The owner of `qp` dropped it (`QueuePair`'s drop, after marking it
    /// closing): the cache keeps no share of it.
    pub(crate) fn evict(&self, qp: &QpShared) {
        self.inner.cache.evict(qp);
    }

    pub(crate) fn detach(&self, generation: u32) {
        self.attached().by_generation.remove(&generation);
    }

    /// Polls up to `out.len()` completions without waiting; returns how many.
    /// Completing a request releases the memory regions it held. Completions
    /// of requests posted through the safe API on a QP that has since been
    /// dropped are stale and not returned.
    /// A CQ that serves a [`crate::Lane`] is polled through the lane only
    /// ([`Error::InvalidArgument`] here).
    pub fn poll(&self, out: &mut [WorkCompletion]) -> Result<usize> {
        if !self.inner.gate.enter() {
            return Err(self.lanes_cq());
        }
        let polled = self.poll_shared(out);
        self.inner.gate.leave();
        polled
    }

    #[cold]
    fn lanes_cq(&self) -> Error {
        Error::invalid(
            "CompletionQueue::poll",
            "this CQ serves a Lane: poll it with Lane::poll_send/poll_recv",
        )
    }

    /// [`CompletionQueue::poll`] on a CQ no lane owns (counted in `pollers`).
    fn poll_shared(&self, out: &mut [WorkCompletion]) -> Result<usize> {
        // Only the entries a call may fill are zeroed (not all 32 every
        // time): in a busy-poll loop for one completion, zeroing 1.5 KiB per
        // call was the largest user-space cost (perf in the rig: memset 6% of
        // the samples of a send_lat server).
        let mut raw = [const { MaybeUninit::<sys::ibv_wc>::uninit() }; POLL_BATCH];
        let mut total = 0;
        while total < out.len() {
            let want = (out.len() - total).min(POLL_BATCH);
            if want == 1 {
                // The usual latency loop: a fixed-size store, where a
                // variable length costs a memset call (callgrind: ~30
                // instructions per poll).
                raw[0] = MaybeUninit::zeroed();
            } else {
                // SAFETY: `want` <= POLL_BATCH entries of `raw`; zero is a
                // valid ibv_wc (plain integers and a union of integers).
                unsafe { std::ptr::write_bytes(raw.as_mut_ptr(), 0, want) };
            }
            // SAFETY: live CQ; raw has room for `want` entries.
            let n = unsafe {
                sys::inline::ibv_poll_cq(self.inner.raw.0, want as i32, raw.as_mut_ptr().cast())
            };
            if n < 0 {
                return Err(poll_error(n));
            }
            let n = (n as usize).min(want);
            #[cfg(any(test, feature = "fault-injection"))]
            if n > 0 {
                pause_after_poll();
            }
            // SAFETY: the first `want` >= n entries were zeroed above (and the
            // provider wrote the first n): they are initialized ibv_wc values.
            let got = unsafe { std::slice::from_raw_parts(raw.as_ptr().cast::<sys::ibv_wc>(), n) };
            total += self.translate(got, &mut out[total..]);
            if n < want {
                if self.inner.has_retired.load(Ordering::Relaxed) {
                    total += self.sweep(&mut out[total..]);
                }
                break;
            }
        }
        Ok(total)
    }

    /// Maps the internal wr_ids back to the caller's and releases the memory
    /// held by the finished requests; returns how many completions were
    /// written to `out` (stale ones are dropped).
    fn translate(&self, wcs: &[sys::ibv_wc], out: &mut [WorkCompletion]) -> usize {
        if wcs.is_empty() {
            return 0;
        }
        // Most CQs serve one QP: resolve a generation once per batch, from
        // the QP the last poll found when it is the same (`cache`), else
        // looked up. The lock is held only to look the QP up: this poller
        // may end up holding the last share of a QP its owner dropped
        // meanwhile (also when it gives back a cached QP evicted while it
        // had it), and the QP's drop detaches it from this CQ under the
        // same lock.
        let mut last: Option<(u32, Found<'_>)> = None;
        let mut k = 0;
        for wc in wcs {
            let wr_id = match WrId::decode(wc.wr_id) {
                // Posted raw (post_send_raw): the caller's id as it is.
                None => wc.wr_id,
                Some(id) => {
                    if last.as_ref().is_none_or(|(g, _)| *g != id.generation) {
                        // The QP resolved before (if any) is given back or
                        // dropped first, with no lock held.
                        drop(last.take());
                        last = Some((id.generation, self.resolve(id.generation)));
                    }
                    let qp = last.as_ref().and_then(|(_, q)| q.qp());
                    match qp.filter(|q| q.generation() == id.generation) {
                        Some(qp) => match qp.complete(id, wc.status != sys::IBV_WC_SUCCESS) {
                            Some(user) => user,
                            // Not outstanding on this QP: nothing to release
                            // and nobody to report it to.
                            None => continue,
                        },
                        // The QP is gone: its memory was released with it.
                        None => {
                            self.stale(id.generation);
                            continue;
                        }
                    }
                }
            };
            out[k] = WorkCompletion::from_raw(wc, wr_id);
            k += 1;
        }
        k
    }

    /// Waits until at least one completion is available and polls it into
    /// `out` (at least one, at most `out.len()`). Sleeps on the completion
    /// channel when there is one, else spins (yielding). [`Error::Timeout`]
    /// after `timeout`.
    pub fn wait(&self, out: &mut [WorkCompletion], timeout: Duration) -> Result<usize> {
        if out.is_empty() {
            return Err(Error::invalid(
                "CompletionQueue::wait",
                "the output slice is empty",
            ));
        }
        let deadline = crate::deadline::after(timeout);
        loop {
            let n = self.poll(out)?;
            if n > 0 {
                return Ok(n);
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Err(Error::Timeout {
                    what: format!("a completion on {}", self.inner.ctx.name()),
                    after: timeout,
                    hint: Some(
                        "no request completed: is the peer connected and did it post receives?"
                            .into(),
                    ),
                });
            }
            match self.inner.channel {
                Some(ch) => {
                    // Arm, then poll again so that a completion that arrived
                    // before arming is not missed.
                    // SAFETY: live CQ.
                    let rc = unsafe { sys::inline::ibv_req_notify_cq(self.inner.raw.0, 0) };
                    Error::check("ibv_req_notify_cq", rc)?;
                    let n = self.poll(out)?;
                    if n > 0 {
                        return Ok(n);
                    }
                    self.sleep_on_channel(ch, left)?;
                }
                None => std::thread::yield_now(),
            }
        }
    }

    fn sleep_on_channel(&self, ch: Ptr<sys::ibv_comp_channel>, left: Duration) -> Result<()> {
        let lib = ffi::verbs()?;
        // SAFETY: live channel.
        let fd = unsafe { (*ch.0).fd };
        let mut pfd = libc::pollfd {
            fd,
            events: libc::POLLIN,
            revents: 0,
        };
        let ms = left.as_millis().clamp(1, i32::MAX as u128) as i32;
        // SAFETY: one valid pollfd.
        let rc = unsafe { libc::poll(&mut pfd, 1, ms) };
        if rc < 0 {
            let e = std::io::Error::last_os_error();
            if e.kind() == std::io::ErrorKind::Interrupted {
                return Ok(());
            }
            return Err(Error::verb("poll", e.raw_os_error().unwrap_or(libc::EIO)));
        }
        if rc == 0 {
            return Ok(());
        }
        let mut cq: *mut sys::ibv_cq = std::ptr::null_mut();
        let mut ctx: *mut libc::c_void = std::ptr::null_mut();
        // SAFETY: live channel (non-blocking); out-pointers are writable.
        let rc = unsafe { lib.ibv_get_cq_event(ch.0, &mut cq, &mut ctx) };
        if rc == 0 && !cq.is_null() {
            // SAFETY: the event is for our CQ (the channel's only one);
            // acknowledged at once so destroying the CQ never waits.
            unsafe { lib.ibv_ack_cq_events(cq, 1) };
        }
        Ok(())
    }

    /// Collects exactly `n` completions (waiting as [`CompletionQueue::wait`]
    /// does), or [`Error::Timeout`] when they do not all arrive within
    /// `timeout`. Error completions are returned, not turned into errors:
    /// check each with [`WorkCompletion::ok`].
    pub fn collect(&self, n: usize, timeout: Duration) -> Result<Vec<WorkCompletion>> {
        let deadline = crate::deadline::after(timeout);
        let mut out = Vec::with_capacity(n);
        let mut buf = [WorkCompletion::default(); POLL_BATCH];
        while out.len() < n {
            let left = deadline.saturating_duration_since(Instant::now());
            let want = (n - out.len()).min(POLL_BATCH);
            match self.wait(&mut buf[..want], left) {
                Ok(k) => out.extend_from_slice(&buf[..k]),
                Err(Error::Timeout { .. }) => {
                    return Err(Error::Timeout {
                        what: format!("{n} completions on {} (got {})", self.inner.ctx.name(), out.len()),
                        after: timeout,
                        hint: Some(
                            "requests are still outstanding: is the peer connected, did it post receives, \
                             are the requests signaled?"
                                .into(),
                        ),
                    });
                }
                Err(e) => return Err(e),
            }
        }
        Ok(out)
    }
}

/// The error of a negative `ibv_poll_cq` result. Providers return a negative
/// value without setting errno, so errno is not read.
#[cold]
pub(crate) fn poll_error(rc: i32) -> Error {
    let errno = match rc.checked_neg() {
        Some(e) if (1..4096).contains(&e) && e != 1 => e,
        _ => libc::EIO,
    };
    Error::Verb {
        verb: "ibv_poll_cq",
        errno,
        hint: Some(format!(
            "the provider returned {rc}: the CQ is in an error state (overrun, or the device failed)"
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn generations_hash_apart() {
        use std::hash::BuildHasher;
        let b = BuildHasherDefault::<GenHasher>::default();
        let hashes: std::collections::HashSet<u64> =
            (1..=100_000u32).map(|g| b.hash_one(g)).collect();
        assert_eq!(hashes.len(), 100_000);
        // hashbrown takes its control byte from the top 7 bits: they vary.
        let tops: std::collections::HashSet<u64> =
            (1..=1000u32).map(|g| b.hash_one(g) >> 57).collect();
        assert!(tops.len() > 100, "{}", tops.len());
    }

    #[test]
    fn status_texts_and_hints() {
        assert_eq!(
            WcStatus::from_raw(sys::IBV_WC_REM_ACCESS_ERR).to_string(),
            "REM_ACCESS_ERR (remote access error)"
        );
        assert!(WcStatus::RemAccessErr.hint().unwrap().contains("rkey"));
        assert_eq!(WcStatus::Success.hint(), None);
        assert_eq!(WcStatus::from_raw(999), WcStatus::Unknown(999));
    }

    #[test]
    fn completion_ok_and_error() {
        let mut wc = WorkCompletion::default();
        assert!(wc.ok().is_ok());
        wc.status = WcStatus::RemAccessErr;
        wc.wr_id = 7;
        wc.qp_num = 0x11;
        let e = wc.ok().unwrap_err().to_string();
        assert!(
            e.starts_with("work request 7 on QP 0x11 completed with REM_ACCESS_ERR"),
            "{e}"
        );
        assert!(e.contains("rkey"), "{e}");
    }

    #[test]
    fn imm_data_is_host_order() {
        let mut raw = sys::ibv_wc {
            wc_flags: sys::IBV_WC_WITH_IMM,
            opcode: sys::IBV_WC_RECV,
            __bindgen_anon_1: sys::ibv_wc__bindgen_ty_1 {
                imm_data: 0x1234_5678u32.to_be(),
            },
            ..Default::default()
        };
        let wc = WorkCompletion::from_raw(&raw, 3);
        assert_eq!(wc.imm_data, Some(0x1234_5678));
        assert_eq!(wc.opcode, WcOpcode::Recv);
        raw.wc_flags = 0;
        assert_eq!(WorkCompletion::from_raw(&raw, 3).imm_data, None);
    }
}
