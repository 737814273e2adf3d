//! Reliable-connected queue pairs: creation, the RESET -> INIT -> RTR -> RTS
//! transitions, and posting send and receive work requests (classic verbs
//! only: eRDMA has no extended QP API).
//!
//! Posting is safe: a request borrows the regions it names while it is being
//! built, and the QP keeps a share of each region from posting until the
//! request's completion is polled (or the QP is destroyed), so no memory a
//! device may still access is freed, moved, handed back or exposed as a Rust
//! slice. Posting on a QP in the wrong state, over-long inline data, too many
//! scatter/gather entries, atomics on a device without them and ranges outside
//! a region are typed errors before anything reaches the device.

use std::fmt;
use std::sync::atomic::{AtomicU8, AtomicU32, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use erdma_sys as sys;

use crate::context::Context;
use crate::cq::CompletionQueue;
use crate::device::Transport;
use crate::endpoint::{ConnectOptions, Endpoint};
use crate::error::{Error, Result};
use crate::ffi::{self, Ptr};
use crate::gid::{Gid, GidEntry};
use crate::mr::{AccessFlags, Lease, LocalSlice, RemoteBuffer};
use crate::pd::ProtectionDomain;
use crate::pending::{Leases, Pending, WrId, next_generation};
use crate::port::{Mtu, c_enum};

c_enum! {
    /// Queue pair state (`ibv_qp_state`).
    QpState: u32 {
        /// Just created or reset.
        Reset = sys::IBV_QPS_RESET => "RESET",
        /// Initialised: receives may be posted.
        Init = sys::IBV_QPS_INIT => "INIT",
        /// Ready to receive.
        Rtr = sys::IBV_QPS_RTR => "RTR",
        /// Ready to send.
        Rts = sys::IBV_QPS_RTS => "RTS",
        /// Send queue drained.
        Sqd = sys::IBV_QPS_SQD => "SQD",
        /// Send queue error.
        Sqe = sys::IBV_QPS_SQE => "SQE",
        /// Error: outstanding requests are flushed.
        Err = sys::IBV_QPS_ERR => "ERR",
    } unknown "UNKNOWN"
}

/// Sizes of a queue pair's queues. [`QueuePair::capabilities`] reports what
/// the device actually granted (at least what was asked).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct QpCapabilities {
    /// Outstanding send requests.
    pub max_send_wr: u32,
    /// Outstanding receive requests.
    pub max_recv_wr: u32,
    /// Scatter/gather entries per send request (eRDMA: up to 6).
    pub max_send_sge: u32,
    /// Scatter/gather entries per receive request (eRDMA: 1).
    pub max_recv_sge: u32,
    /// Largest inline send (eRDMA: 96; see [`Context::max_inline_data`]).
    pub max_inline_data: u32,
}

impl Default for QpCapabilities {
    fn default() -> Self {
        QpCapabilities {
            max_send_wr: 128,
            max_recv_wr: 128,
            max_send_sge: 1,
            max_recv_sge: 1,
            max_inline_data: 0,
        }
    }
}

pub(crate) enum QpOwner {
    /// Created with ibv_create_qp.
    Verbs,
    /// Created with rdma_create_qp on this CM id.
    Cm(Arc<crate::cm::CmIdInner>),
}

pub(crate) struct QpShared {
    raw: Ptr<sys::ibv_qp>,
    qp_num: u32,
    /// Unique to this QP in the process (see [`crate::pending`]).
    generation: u32,
    pd: ProtectionDomain,
    send_cq: CompletionQueue,
    recv_cq: CompletionQueue,
    /// What the device granted.
    caps: QpCapabilities,
    /// What was asked: the most requests kept outstanding, and what the CQs
    /// reserved.
    requested: QpCapabilities,
    state: AtomicU32,
    port: AtomicU8,
    posting: Mutex<Posting>,
    owner: QpOwner,
}

/// What posting and completing need, under one lock: the outstanding
/// requests and the buffers chains are built in.
struct Posting {
    pending: Pending,
    scratch: Scratch,
    /// The regions bound to the QP for its life (a [`crate::Lane`]'s):
    /// released only after the QP is destroyed.
    bound: Vec<Arc<dyn Lease>>,
}

/// Reused buffers for building request chains, so that posting does not
/// allocate once they have grown. The raw pointers in them are only
/// meaningful during one post call.
#[derive(Default)]
struct Scratch {
    send: Vec<sys::ibv_send_wr>,
    recv: Vec<sys::ibv_recv_wr>,
    sges: Vec<sys::ibv_sge>,
    /// Where each request's entries start in `sges`.
    sge_start: Vec<usize>,
}

// SAFETY: the pointers in the work requests point into `sges` of the same
// value and are rebuilt by every post call under the QP's lock.
unsafe impl Send for Scratch {}

impl Scratch {
    fn clear(&mut self) {
        self.send.clear();
        self.recv.clear();
        self.sges.clear();
        self.sge_start.clear();
    }

    /// Appends one request's scatter/gather entries (their lengths were
    /// checked to fit in 32 bits).
    fn add_sges(&mut self, local: &[LocalSlice<'_>]) {
        self.sge_start.push(self.sges.len());
        self.sges.extend(local.iter().filter_map(|l| l.sge()));
    }

    /// (pointer, count) of request `i`'s entries; the vectors no longer grow.
    fn sg_list(&mut self, i: usize) -> (*mut sys::ibv_sge, i32) {
        let start = self.sge_start[i];
        let end = self
            .sge_start
            .get(i + 1)
            .copied()
            .unwrap_or(self.sges.len());
        if start == end {
            return (std::ptr::null_mut(), 0);
        }
        (self.sges[start..end].as_mut_ptr(), (end - start) as i32)
    }

    /// Sets each send request's scatter/gather list and chains them.
    fn link_send(&mut self) {
        for i in 0..self.send.len() {
            let (sg, n) = self.sg_list(i);
            self.send[i].sg_list = sg;
            self.send[i].num_sge = n;
        }
        for i in 1..self.send.len() {
            let next: *mut sys::ibv_send_wr = &mut self.send[i];
            self.send[i - 1].next = next;
        }
    }

    /// Sets each receive request's scatter/gather list and chains them.
    fn link_recv(&mut self) {
        for i in 0..self.recv.len() {
            let (sg, n) = self.sg_list(i);
            self.recv[i].sg_list = sg;
            self.recv[i].num_sge = n;
        }
        for i in 1..self.recv.len() {
            let next: *mut sys::ibv_recv_wr = &mut self.recv[i];
            self.recv[i - 1].next = next;
        }
    }
}

/// The shares of the regions a request names, held until its completion.
fn leases(local: &[LocalSlice<'_>]) -> Leases {
    local.iter().map(|l| l.lease()).collect()
}

/// A single post's scatter/gather list on the stack: up to two entries (the
/// usual requests); `None` for more, or for an entry the checks will refuse
/// (the batch path reports it).
pub(crate) fn stack_sges(local: &[LocalSlice<'_>]) -> Option<([sys::ibv_sge; 2], i32)> {
    if local.len() > 2 {
        return None;
    }
    let mut sges = [sys::ibv_sge {
        addr: 0,
        length: 0,
        lkey: 0,
    }; 2];
    for (sge, l) in sges.iter_mut().zip(local) {
        *sge = l.sge()?;
    }
    Some((sges, local.len() as i32))
}

/// The `sg_list` pointer of `n` entries at `sges` (null for none).
fn sg_ptr(sges: &mut [sys::ibv_sge; 2], n: i32) -> *mut sys::ibv_sge {
    if n == 0 {
        std::ptr::null_mut()
    } else {
        sges.as_mut_ptr()
    }
}

impl QpShared {
    /// Called by the CQ for each tracked completion of this QP: releases what
    /// the finished request(s) held; returns the caller's wr_id.
    pub(crate) fn complete(&self, id: WrId) -> Option<u64> {
        self.lock().pending.complete(id)
    }

    pub(crate) fn generation(&self) -> u32 {
        self.generation
    }

    fn lock(&self) -> MutexGuard<'_, Posting> {
        // A panic while holding the lock cannot leave Pending inconsistent
        // (plain pushes and pops), so a poisoned lock is still usable.
        self.posting.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Destroys the QP; `false` when the device refused (it may then still
    /// use the memory of outstanding requests).
    fn destroy(&self) -> bool {
        match &self.owner {
            QpOwner::Verbs => match ffi::verbs() {
                // SAFETY: our QP, destroyed once.
                Ok(lib) => unsafe { lib.ibv_destroy_qp(self.raw.0) == 0 },
                Err(_) => false,
            },
            QpOwner::Cm(id) => crate::cm::destroy_qp(id, self.raw.0),
        }
    }
}

impl Drop for QpShared {
    fn drop(&mut self) {
        // Stop routing completions here first: from now on a completion of
        // this QP left in a CQ is stale and releases nothing.
        self.send_cq.detach(self.generation);
        self.recv_cq.detach(self.generation);
        if self.destroy() {
            // The device no longer touches the requests' memory: release it.
            self.send_cq.unreserve(self.requested.max_send_wr);
            self.recv_cq.unreserve(self.requested.max_recv_wr);
        } else {
            // The QP may live on in the device: keep every region it holds
            // registered and allocated for ever rather than free memory the
            // device may still write.
            let mut g = self.lock();
            g.pending.sq.leak();
            g.pending.rq.leak();
            std::mem::forget(std::mem::take(&mut g.bound));
        }
    }
}

/// A reliable-connected queue pair. It keeps its protection domain and both
/// completion queues alive. `Send + Sync`: posting from several threads is fine.
pub struct QueuePair {
    inner: Arc<QpShared>,
}

impl fmt::Debug for QueuePair {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("QueuePair")
            .field("qp_num", &format_args!("{:#x}", self.inner.qp_num))
            .field("state", &self.state())
            .field("device", &self.inner.pd.context().name())
            .finish()
    }
}

/// The operation of a send request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SendOp {
    /// SEND: consumes a receive at the peer.
    Send,
    /// SEND with 32-bit immediate data (host order).
    SendWithImm(u32),
    /// RDMA WRITE into the peer's memory.
    Write(RemoteBuffer),
    /// RDMA WRITE, then immediate data that consumes a receive at the peer.
    WriteWithImm(RemoteBuffer, u32),
    /// RDMA READ from the peer's memory into the local slices.
    Read(RemoteBuffer),
    /// 64-bit compare-and-swap at the peer (8-byte aligned); the old value
    /// lands in the local slice.
    CompareSwap {
        /// The 8-byte target.
        remote: RemoteBuffer,
        /// Value expected there.
        compare: u64,
        /// Value written when it matches.
        swap: u64,
    },
    /// 64-bit fetch-and-add at the peer (8-byte aligned); the old value lands
    /// in the local slice.
    FetchAdd {
        /// The 8-byte target.
        remote: RemoteBuffer,
        /// Value added.
        add: u64,
    },
}

impl SendOp {
    fn name(&self) -> &'static str {
        match self {
            SendOp::Send => "SEND",
            SendOp::SendWithImm(_) => "SEND_WITH_IMM",
            SendOp::Write(_) => "RDMA_WRITE",
            SendOp::WriteWithImm(..) => "RDMA_WRITE_WITH_IMM",
            SendOp::Read(_) => "RDMA_READ",
            SendOp::CompareSwap { .. } => "ATOMIC_CMP_AND_SWP",
            SendOp::FetchAdd { .. } => "ATOMIC_FETCH_AND_ADD",
        }
    }

    fn is_atomic(&self) -> bool {
        matches!(self, SendOp::CompareSwap { .. } | SendOp::FetchAdd { .. })
    }

    fn writes_local(&self) -> bool {
        matches!(self, SendOp::Read(_)) || self.is_atomic()
    }

    pub(crate) fn has_imm(&self) -> bool {
        matches!(self, SendOp::SendWithImm(_) | SendOp::WriteWithImm(..))
    }
}

/// The scatter/gather entries of a request. Up to two entries (the usual
/// cases) are kept inline, so that building a request does not allocate; no
/// `Drop` impl, so a request that is never posted does not prolong its borrows.
#[derive(Debug, Clone)]
pub(crate) enum SgList<'a> {
    One([LocalSlice<'a>; 1]),
    Two([LocalSlice<'a>; 2]),
    Many(Vec<LocalSlice<'a>>),
}

impl<'a> SgList<'a> {
    fn new(local: impl IntoIterator<Item = LocalSlice<'a>>) -> SgList<'a> {
        let mut it = local.into_iter();
        match (it.next(), it.next(), it.next()) {
            (None, ..) => SgList::Many(Vec::new()),
            (Some(a), None, _) => SgList::One([a]),
            (Some(a), Some(b), None) => SgList::Two([a, b]),
            (Some(a), Some(b), Some(c)) => {
                let mut v = vec![a, b, c];
                v.extend(it);
                SgList::Many(v)
            }
        }
    }
}

impl<'a> std::ops::Deref for SgList<'a> {
    type Target = [LocalSlice<'a>];
    fn deref(&self) -> &[LocalSlice<'a>] {
        match self {
            SgList::One(s) => s,
            SgList::Two(s) => s,
            SgList::Many(v) => v,
        }
    }
}

/// A send work request: an operation, local scatter/gather entries and flags.
#[derive(Debug, Clone)]
pub struct SendRequest<'a> {
    pub(crate) op: SendOp,
    pub(crate) local: SgList<'a>,
    pub(crate) wr_id: u64,
    pub(crate) signaled: bool,
    inline: bool,
    fence: bool,
    solicited: bool,
}

impl<'a> SendRequest<'a> {
    /// A request of any operation.
    pub fn new(op: SendOp, local: impl IntoIterator<Item = LocalSlice<'a>>) -> Self {
        SendRequest {
            op,
            local: SgList::new(local),
            wr_id: 0,
            signaled: true,
            inline: false,
            fence: false,
            solicited: false,
        }
    }
    /// SEND the concatenated slices.
    pub fn send(local: impl IntoIterator<Item = LocalSlice<'a>>) -> Self {
        Self::new(SendOp::Send, local)
    }
    /// SEND with immediate data.
    pub fn send_with_imm(local: impl IntoIterator<Item = LocalSlice<'a>>, imm: u32) -> Self {
        Self::new(SendOp::SendWithImm(imm), local)
    }
    /// RDMA WRITE the concatenated slices to `remote`.
    pub fn write(local: impl IntoIterator<Item = LocalSlice<'a>>, remote: RemoteBuffer) -> Self {
        Self::new(SendOp::Write(remote), local)
    }
    /// RDMA WRITE with immediate data.
    pub fn write_with_imm(
        local: impl IntoIterator<Item = LocalSlice<'a>>,
        remote: RemoteBuffer,
        imm: u32,
    ) -> Self {
        Self::new(SendOp::WriteWithImm(remote, imm), local)
    }
    /// RDMA READ from `remote` into the slices.
    pub fn read(local: impl IntoIterator<Item = LocalSlice<'a>>, remote: RemoteBuffer) -> Self {
        Self::new(SendOp::Read(remote), local)
    }
    /// Compare-and-swap on the 8 bytes at `remote`; old value into `local` (8 bytes).
    pub fn compare_swap(
        local: LocalSlice<'a>,
        remote: RemoteBuffer,
        compare: u64,
        swap: u64,
    ) -> Self {
        Self::new(
            SendOp::CompareSwap {
                remote,
                compare,
                swap,
            },
            [local],
        )
    }
    /// Fetch-and-add on the 8 bytes at `remote`; old value into `local` (8 bytes).
    pub fn fetch_add(local: LocalSlice<'a>, remote: RemoteBuffer, add: u64) -> Self {
        Self::new(SendOp::FetchAdd { remote, add }, [local])
    }
    /// The id returned in the completion (default 0).
    pub fn wr_id(mut self, wr_id: u64) -> Self {
        self.wr_id = wr_id;
        self
    }
    /// Copy the data into the request (up to the QP's `max_inline_data`):
    /// SEND and WRITE only.
    pub fn inline(mut self) -> Self {
        self.inline = true;
        self
    }
    /// No completion for this request (it completes, and releases its
    /// memory, with the next signaled request of the QP).
    pub fn unsignaled(mut self) -> Self {
        self.signaled = false;
        self
    }
    /// Wait for earlier READs and atomics before this request.
    pub fn fence(mut self) -> Self {
        self.fence = true;
        self
    }
    /// Ask the peer's CQ for a solicited event.
    pub fn solicited(mut self) -> Self {
        self.solicited = true;
        self
    }
    /// The operation.
    pub fn op(&self) -> SendOp {
        self.op
    }
}

/// A receive work request: where an incoming SEND lands.
#[derive(Debug, Clone)]
pub struct RecvRequest<'a> {
    pub(crate) local: SgList<'a>,
    pub(crate) wr_id: u64,
}

impl<'a> RecvRequest<'a> {
    /// Receive into the slices (in order).
    pub fn new(local: impl IntoIterator<Item = LocalSlice<'a>>) -> Self {
        RecvRequest {
            local: SgList::new(local),
            wr_id: 0,
        }
    }
    /// The id returned in the completion (default 0).
    pub fn wr_id(mut self, wr_id: u64) -> Self {
        self.wr_id = wr_id;
        self
    }
}

/// Attributes of the RESET -> INIT transition.
#[derive(Debug, Clone, Copy)]
pub struct InitAttributes {
    /// Port number (from 1).
    pub port: u8,
    /// What the peer may do to this side's memory through this QP.
    pub access: AccessFlags,
    /// P_Key index.
    pub pkey_index: u16,
}

/// Attributes of the INIT -> RTR transition (where the peer is).
#[derive(Debug, Clone, Copy)]
pub struct RtrAttributes {
    /// The peer's QP number.
    pub remote_qp_num: u32,
    /// The peer's initial send PSN.
    pub remote_psn: u32,
    /// The peer's GID (RoCE/eRDMA, or global IB routing).
    pub remote_gid: Gid,
    /// The peer's LID (InfiniBand; 0 on Ethernet).
    pub remote_lid: u16,
    /// Requested path MTU: capped to the port's active MTU.
    pub path_mtu: Mtu,
    /// Local GID index to send from.
    pub gid_index: u32,
    /// Use the GID (global routing): always on Ethernet.
    pub global: bool,
    /// Outstanding READs/atomics accepted from the peer.
    pub max_dest_rd_atomic: u8,
    /// RNR NAK timer (IB encoding, 12 = 0.64 ms).
    pub min_rnr_timer: u8,
    /// Hop limit of the GRH.
    pub hop_limit: u8,
    /// Traffic class of the GRH.
    pub traffic_class: u8,
    /// Service level.
    pub sl: u8,
}

/// Attributes of the RTR -> RTS transition.
#[derive(Debug, Clone, Copy)]
pub struct RtsAttributes {
    /// Initial send PSN (what the peer uses as `remote_psn`).
    pub psn: u32,
    /// ACK timeout (4.096 us x 2^timeout; 14 = 67 ms).
    pub timeout: u8,
    /// Transport retries (max 7).
    pub retry_cnt: u8,
    /// RNR retries (7 = infinite).
    pub rnr_retry: u8,
    /// Outstanding READs/atomics this side issues.
    pub max_rd_atomic: u8,
}

impl QueuePair {
    pub(crate) fn create(
        pd: &ProtectionDomain,
        send_cq: &CompletionQueue,
        recv_cq: &CompletionQueue,
        caps: &QpCapabilities,
        cm: Option<&Arc<crate::cm::CmIdInner>>,
    ) -> Result<QueuePair> {
        let lib = ffi::verbs()?;
        let ctx = pd.context();
        for cq in [send_cq, recv_cq] {
            if cq.context().as_raw() != ctx.as_raw() {
                return Err(Error::invalid(
                    "ibv_create_qp",
                    format!(
                        "the CQ belongs to device context {} and the PD to {}: create both from the same Context",
                        cq.context().name(),
                        ctx.name()
                    ),
                ));
            }
        }
        let a = ctx.attributes();
        let limit = |what: &str, v: u32, max: u32| -> Result<()> {
            if max > 0 && v > max {
                return Err(Error::invalid(
                    "ibv_create_qp",
                    format!("{what} = {v}: {} allows at most {max}", ctx.name()),
                ));
            }
            Ok(())
        };
        limit("max_send_wr", caps.max_send_wr, a.max_qp_wr())?;
        limit("max_recv_wr", caps.max_recv_wr, a.max_qp_wr())?;
        limit("max_send_sge", caps.max_send_sge, a.max_sge())?;
        limit("max_recv_sge", caps.max_recv_sge, a.max_sge())?;
        let mut init = sys::ibv_qp_init_attr {
            send_cq: send_cq.as_raw(),
            recv_cq: recv_cq.as_raw(),
            cap: sys::ibv_qp_cap {
                max_send_wr: caps.max_send_wr,
                max_recv_wr: caps.max_recv_wr,
                max_send_sge: caps.max_send_sge,
                max_recv_sge: caps.max_recv_sge,
                max_inline_data: caps.max_inline_data,
            },
            qp_type: sys::IBV_QPT_RC,
            sq_sig_all: 0,
            ..Default::default()
        };
        // Each CQ must hold a completion for every request that can be
        // outstanding on the queues attached to it, or it overruns.
        send_cq.reserve(caps.max_send_wr, "max_send_wr")?;
        if let Err(e) = recv_cq.reserve(caps.max_recv_wr, "max_recv_wr") {
            send_cq.unreserve(caps.max_send_wr);
            return Err(e);
        }
        let created = match cm {
            None => {
                // SAFETY: live PD and CQs of the same context; init is valid.
                let qp = unsafe { lib.ibv_create_qp(pd.as_raw(), &mut init) };
                if qp.is_null() {
                    Err(create_error(Error::last_os("ibv_create_qp"), caps))
                } else {
                    Ok((qp, QpOwner::Verbs))
                }
            }
            Some(id) => crate::cm::create_qp(id, pd, &mut init)
                .map(|qp| (qp, QpOwner::Cm(id.clone())))
                .map_err(|e| create_error(e, caps)),
        };
        let (raw, owner) = match created {
            Ok(c) => c,
            Err(e) => {
                send_cq.unreserve(caps.max_send_wr);
                recv_cq.unreserve(caps.max_recv_wr);
                return Err(e);
            }
        };
        // SAFETY: raw is a live QP; init.cap now holds the granted sizes.
        let (qp_num, state) = unsafe { ((*raw).qp_num, (*raw).state) };
        let granted = QpCapabilities {
            max_send_wr: init.cap.max_send_wr,
            max_recv_wr: init.cap.max_recv_wr,
            max_send_sge: init.cap.max_send_sge,
            max_recv_sge: init.cap.max_recv_sge,
            max_inline_data: init.cap.max_inline_data.max(caps.max_inline_data),
        };
        let inner = Arc::new(QpShared {
            raw: Ptr(raw),
            qp_num,
            generation: next_generation(),
            pd: pd.clone(),
            send_cq: send_cq.clone(),
            recv_cq: recv_cq.clone(),
            caps: granted,
            requested: *caps,
            state: AtomicU32::new(state),
            port: AtomicU8::new(1),
            posting: Mutex::new(Posting {
                pending: Pending::new(caps.max_send_wr as usize, caps.max_recv_wr as usize),
                scratch: Scratch::default(),
                bound: Vec::new(),
            }),
            owner,
        });
        send_cq.attach(inner.generation, Arc::downgrade(&inner));
        recv_cq.attach(inner.generation, Arc::downgrade(&inner));
        Ok(QueuePair { inner })
    }

    /// The QP number.
    pub fn qp_num(&self) -> u32 {
        self.inner.qp_num
    }

    /// The state as last set through this object (the device may since have
    /// moved it to ERR: [`QueuePair::query_state`] asks it).
    pub fn state(&self) -> QpState {
        QpState::from_raw(self.inner.state.load(Ordering::Acquire))
    }

    /// The queue sizes the device granted.
    pub fn capabilities(&self) -> QpCapabilities {
        self.inner.caps
    }

    /// The queue sizes asked for: what the QP reserved on its CQs.
    pub(crate) fn requested(&self) -> QpCapabilities {
        self.inner.requested
    }

    /// The protection domain.
    pub fn pd(&self) -> &ProtectionDomain {
        &self.inner.pd
    }

    /// The device.
    pub fn context(&self) -> &Context {
        self.inner.pd.context()
    }

    /// The CQ of send completions.
    pub fn send_cq(&self) -> &CompletionQueue {
        &self.inner.send_cq
    }

    /// The CQ of receive completions.
    pub fn recv_cq(&self) -> &CompletionQueue {
        &self.inner.recv_cq
    }

    /// The raw `ibv_qp`, valid while this QP lives.
    pub fn as_raw(&self) -> *mut sys::ibv_qp {
        self.inner.raw.0
    }

    /// Asks the device for the current state (`ibv_query_qp`) and records it.
    pub fn query_state(&self) -> Result<QpState> {
        let lib = ffi::verbs()?;
        let mut attr = sys::ibv_qp_attr::default();
        let mut init = sys::ibv_qp_init_attr::default();
        // SAFETY: live QP; writable out-structs.
        let rc = unsafe {
            lib.ibv_query_qp(
                self.inner.raw.0,
                &mut attr,
                sys::IBV_QP_STATE as i32,
                &mut init,
            )
        };
        Error::check("ibv_query_qp", rc)?;
        self.inner.state.store(attr.qp_state, Ordering::Release);
        Ok(QpState::from_raw(attr.qp_state))
    }

    /// The raw `ibv_qp_attr` of `ibv_query_qp` with `mask`.
    pub fn query(&self, mask: u32) -> Result<sys::ibv_qp_attr> {
        let lib = ffi::verbs()?;
        let mut attr = sys::ibv_qp_attr::default();
        let mut init = sys::ibv_qp_init_attr::default();
        // SAFETY: live QP; writable out-structs.
        let rc = unsafe { lib.ibv_query_qp(self.inner.raw.0, &mut attr, mask as i32, &mut init) };
        Error::check("ibv_query_qp", rc)?;
        Ok(attr)
    }

    pub(crate) fn set_state(&self, s: QpState) {
        self.inner.state.store(s.raw(), Ordering::Release);
    }

    fn modify(&self, attr: &mut sys::ibv_qp_attr, mask: u32, to: QpState) -> Result<()> {
        let lib = ffi::verbs()?;
        // SAFETY: live QP; attr is valid for the mask.
        let rc = unsafe { lib.ibv_modify_qp(self.inner.raw.0, attr, mask as i32) };
        Error::check("ibv_modify_qp", rc)?;
        self.set_state(to);
        Ok(())
    }

    fn expect_state(
        &self,
        operation: &'static str,
        want: QpState,
        needed: &'static str,
    ) -> Result<()> {
        let s = self.state();
        if s != want {
            return Err(Error::QpState {
                operation,
                qp_num: self.inner.qp_num,
                state: s,
                needed,
            });
        }
        Ok(())
    }

    /// RESET -> INIT.
    pub fn to_init(&self, a: &InitAttributes) -> Result<()> {
        self.expect_state("modify_qp(INIT)", QpState::Reset, "the QP must be RESET")?;
        let ctx = self.context();
        ctx.port(a.port)?;
        let mut access = a.access;
        if !ctx.attributes().supports_atomics() {
            access = AccessFlags::from_bits(access.bits() & !AccessFlags::REMOTE_ATOMIC.bits());
        }
        let mut attr = sys::ibv_qp_attr {
            qp_state: sys::IBV_QPS_INIT,
            pkey_index: a.pkey_index,
            port_num: a.port,
            qp_access_flags: access.bits(),
            ..Default::default()
        };
        let mask = sys::IBV_QP_STATE
            | sys::IBV_QP_PKEY_INDEX
            | sys::IBV_QP_PORT
            | sys::IBV_QP_ACCESS_FLAGS;
        self.modify(&mut attr, mask, QpState::Init)?;
        self.inner.port.store(a.port, Ordering::Release);
        Ok(())
    }

    /// INIT -> RTR: where the peer is. The path MTU is capped to the port's
    /// active MTU; the GID index must name a non-empty entry.
    pub fn to_rtr(&self, a: &RtrAttributes) -> Result<()> {
        self.expect_state(
            "modify_qp(RTR)",
            QpState::Init,
            "the QP must be INIT (call to_init first)",
        )?;
        let ctx = self.context();
        if ctx.transport() == Transport::Iwarp {
            return Err(Error::Unsupported {
                feature: "connecting an iWARP QP with modify_qp".into(),
                device: Some(ctx.name().to_owned()),
                hint: Some("iWARP QPs connect only through RDMA CM: use erdma::cm".into()),
            });
        }
        check_24bit("remote_qp_num", a.remote_qp_num)?;
        check_24bit("remote_psn", a.remote_psn)?;
        let port = self.inner.port.load(Ordering::Acquire);
        let pa = ctx.port(port)?;
        let mtu = match pa.active_mtu() {
            Some(active) => a.path_mtu.min(active),
            None => a.path_mtu,
        };
        let global = a.global || pa.link_layer() == crate::port::LinkLayer::Ethernet;
        if global {
            // Validates the index (BadGidIndex for out of range or empty).
            let e = ctx.gid(port, a.gid_index)?;
            if e.is_none() {
                return Err(Error::BadGidIndex {
                    device: ctx.name().to_owned(),
                    port,
                    index: a.gid_index,
                    problem: "the entry is empty".into(),
                });
            }
        }
        let mut attr = sys::ibv_qp_attr {
            qp_state: sys::IBV_QPS_RTR,
            path_mtu: mtu.raw(),
            dest_qp_num: a.remote_qp_num,
            rq_psn: a.remote_psn,
            max_dest_rd_atomic: a.max_dest_rd_atomic,
            min_rnr_timer: a.min_rnr_timer,
            ..Default::default()
        };
        attr.ah_attr.dlid = a.remote_lid;
        attr.ah_attr.sl = a.sl;
        attr.ah_attr.port_num = port;
        if global {
            attr.ah_attr.is_global = 1;
            attr.ah_attr.grh.dgid.raw = a.remote_gid.0;
            attr.ah_attr.grh.sgid_index = u8::try_from(a.gid_index).map_err(|_| {
                Error::invalid("modify_qp(RTR)", format!("GID index {} > 255", a.gid_index))
            })?;
            attr.ah_attr.grh.hop_limit = a.hop_limit;
            attr.ah_attr.grh.traffic_class = a.traffic_class;
        }
        let mask = sys::IBV_QP_STATE
            | sys::IBV_QP_AV
            | sys::IBV_QP_PATH_MTU
            | sys::IBV_QP_DEST_QPN
            | sys::IBV_QP_RQ_PSN
            | sys::IBV_QP_MAX_DEST_RD_ATOMIC
            | sys::IBV_QP_MIN_RNR_TIMER;
        self.modify(&mut attr, mask, QpState::Rtr)
    }

    /// RTR -> RTS: ready to send.
    pub fn to_rts(&self, a: &RtsAttributes) -> Result<()> {
        self.expect_state(
            "modify_qp(RTS)",
            QpState::Rtr,
            "the QP must be RTR (call to_rtr first)",
        )?;
        check_24bit("psn", a.psn)?;
        let mut attr = sys::ibv_qp_attr {
            qp_state: sys::IBV_QPS_RTS,
            sq_psn: a.psn,
            timeout: a.timeout,
            retry_cnt: a.retry_cnt.min(7),
            rnr_retry: a.rnr_retry.min(7),
            max_rd_atomic: a.max_rd_atomic,
            ..Default::default()
        };
        let mask = sys::IBV_QP_STATE
            | sys::IBV_QP_SQ_PSN
            | sys::IBV_QP_TIMEOUT
            | sys::IBV_QP_RETRY_CNT
            | sys::IBV_QP_RNR_RETRY
            | sys::IBV_QP_MAX_QP_RD_ATOMIC;
        self.modify(&mut attr, mask, QpState::Rts)
    }

    /// Moves the QP to ERR: outstanding requests complete with WR_FLUSH_ERR.
    pub fn to_error(&self) -> Result<()> {
        let mut attr = sys::ibv_qp_attr {
            qp_state: sys::IBV_QPS_ERR,
            ..Default::default()
        };
        self.modify(&mut attr, sys::IBV_QP_STATE, QpState::Err)
    }

    /// This side's connection record for the GID entry `gid` (see
    /// [`Context::select_gid`]): QP number, a random PSN, the port's LID and
    /// active MTU. Add the buffers the peer may access to `buffers`.
    pub fn endpoint(&self, gid: &GidEntry) -> Result<Endpoint> {
        let pa = self.context().port(gid.port)?;
        Ok(Endpoint {
            qp_num: self.inner.qp_num,
            psn: random_psn(),
            gid: gid.gid,
            gid_index: gid.index,
            lid: pa.lid(),
            port: gid.port,
            mtu: pa.active_mtu().unwrap_or(Mtu::Mtu1024),
            buffers: Vec::new(),
        })
    }

    /// RESET -> INIT -> RTR -> RTS in one go, from this side's record (made
    /// by [`QueuePair::endpoint`]) and the peer's (received e.g. through
    /// [`crate::exchange`]). The path MTU is the smaller of both sides'
    /// MTUs and the port's active MTU.
    pub fn connect(
        &self,
        local: &Endpoint,
        remote: &Endpoint,
        options: &ConnectOptions,
    ) -> Result<()> {
        remote.validate()?;
        local.validate()?;
        if local.qp_num != self.inner.qp_num {
            return Err(Error::invalid(
                "connect",
                format!(
                    "the local endpoint is for QP {:#x}, not this QP {:#x}",
                    local.qp_num, self.inner.qp_num
                ),
            ));
        }
        let a = self.context().attributes();
        let rd = |v: u32| v.clamp(1, 16) as u8;
        if self.state() == QpState::Reset {
            self.to_init(&InitAttributes {
                port: local.port,
                access: options.access,
                pkey_index: 0,
            })?;
        }
        self.to_rtr(&RtrAttributes {
            remote_qp_num: remote.qp_num,
            remote_psn: remote.psn,
            remote_gid: remote.gid,
            remote_lid: remote.lid,
            path_mtu: local.mtu.min(remote.mtu),
            gid_index: local.gid_index,
            global: options.global,
            max_dest_rd_atomic: options.max_rd_atomic.unwrap_or(rd(a.max_qp_rd_atom())),
            min_rnr_timer: options.min_rnr_timer,
            hop_limit: options.hop_limit,
            traffic_class: options.traffic_class,
            sl: options.sl,
        })?;
        self.to_rts(&RtsAttributes {
            psn: local.psn,
            timeout: options.timeout,
            retry_cnt: options.retry_cnt,
            rnr_retry: options.rnr_retry,
            max_rd_atomic: options.max_rd_atomic.unwrap_or(rd(a.max_qp_init_rd_atom())),
        })
    }

    /// Posts one send request, with the checks and errors of
    /// [`QueuePair::post_send_batch`]. Up to two scatter/gather entries are
    /// built on the stack, without the batch's lists: this is the latency
    /// path (one request per doorbell).
    pub fn post_send(&self, request: SendRequest<'_>) -> Result<()> {
        let Some((mut sges, n)) = stack_sges(&request.local) else {
            return self.post_send_batch(std::iter::once(request));
        };
        self.require_rts()?;
        self.check_send(&request)?;
        let mut wr = build_send_wr(&request, 0);
        wr.sg_list = sg_ptr(&mut sges, n);
        wr.num_sge = n;
        let mut guard = self.inner.lock();
        let Some(seq) = guard.pending.claim(false) else {
            return Err(self.full(&guard.pending, false));
        };
        wr.wr_id = WrId::encode(false, self.inner.generation, seq);
        let sq = &mut guard.pending.sq;
        sq.push(seq, request.wr_id, request.signaled, leases(&request.local));
        let mut bad: *mut sys::ibv_send_wr = std::ptr::null_mut();
        // SAFETY: live QP; `wr` and the entries in `sges` it points to live
        // across the call; the memory they name is registered, and the
        // request already holds its regions (in `sq`), under the lock,
        // before any completion can be processed.
        let rc = unsafe { sys::inline::ibv_post_send(self.inner.raw.0, &mut wr, &mut bad) };
        if rc == 0 {
            return Ok(());
        }
        let posted = posted_count(rc, bad, &wr, 1);
        sq.unpush(1 - posted);
        drop(guard);
        Err(self.post_send_error(rc, request.op.has_imm(), posted, 1))
    }

    /// [`Error::QpState`] unless the QP is RTS (sends need it).
    fn require_rts(&self) -> Result<()> {
        let s = self.state();
        if s == QpState::Rts {
            return Ok(());
        }
        Err(Error::QpState {
            operation: "post_send",
            qp_num: self.inner.qp_num,
            state: s,
            needed: "the QP must be RTS: connect it first",
        })
    }

    /// Posts send requests as one chain (one doorbell). All are checked
    /// before any is posted; a queue without room for all of them is
    /// [`Error::QueueFull`] (poll completions and post again). In the steady
    /// state posting allocates nothing.
    pub fn post_send_batch<'a>(
        &self,
        requests: impl IntoIterator<Item = SendRequest<'a>>,
    ) -> Result<()> {
        self.require_rts()?;
        let mut guard = self.inner.lock();
        let Posting {
            pending: p,
            scratch: sc,
            ..
        } = &mut *guard;
        sc.clear();
        let mut n = 0usize;
        let mut imm = false;
        for r in requests {
            let claimed = self
                .check_send(&r)
                .and_then(|()| p.claim(false).ok_or_else(|| self.full(p, false)));
            let seq = match claimed {
                Ok(seq) => seq,
                Err(e) => {
                    p.sq.unpush(n);
                    return Err(e);
                }
            };
            sc.add_sges(&r.local);
            sc.send.push(build_send_wr(
                &r,
                WrId::encode(false, self.inner.generation, seq),
            ));
            imm |= r.op.has_imm();
            p.sq.push(seq, r.wr_id, r.signaled, leases(&r.local));
            n += 1;
        }
        if n == 0 {
            return Ok(());
        }
        sc.link_send();
        let mut bad: *mut sys::ibv_send_wr = std::ptr::null_mut();
        // SAFETY: live QP; the chain in sc.send is valid and its sg_lists
        // point into sc.sges, both alive across the call; the memory they name
        // is registered, and each request already holds its regions (in
        // `p.sq`), under the lock, before any completion can be processed.
        let rc =
            unsafe { sys::inline::ibv_post_send(self.inner.raw.0, sc.send.as_mut_ptr(), &mut bad) };
        let posted = posted_count(rc, bad, sc.send.as_ptr(), n);
        p.sq.unpush(n - posted);
        drop(guard);
        if rc == 0 {
            return Ok(());
        }
        Err(self.post_send_error(rc, imm, posted, n))
    }

    /// [`Error::QueueFull`] for the receive (`recv`) or send queue of `p`.
    #[cold]
    fn full(&self, p: &Pending, recv: bool) -> Error {
        let q = p.queue(recv);
        Error::QueueFull {
            queue: if recv { "receive" } else { "send" },
            qp_num: self.inner.qp_num,
            outstanding: q.len(),
            capacity: q.capacity(),
        }
    }

    #[cold]
    pub(crate) fn post_send_error(&self, rc: i32, imm: bool, posted: usize, n: usize) -> Error {
        let ctx = self.context();
        if rc.abs() == libc::EINVAL && imm && ctx.transport() == Transport::Iwarp {
            return Error::Unsupported {
                feature: "immediate data (SEND/RDMA WRITE with immediate)".into(),
                device: Some(format!("{} (iWARP)", ctx.name())),
                hint: Some(format!(
                    "{posted} of {n} requests posted; follow the RDMA WRITE with a SEND instead"
                )),
            };
        }
        let e = Error::check("ibv_post_send", rc)
            .err()
            .unwrap_or(Error::verb("ibv_post_send", libc::EIO));
        match e {
            Error::Verb { verb, errno, hint } => Error::Verb {
                verb,
                errno,
                hint: Some(format!(
                    "{posted} of {n} requests posted{}",
                    hint.map(|h| format!("; {h}")).unwrap_or_default()
                )),
            },
            other => other,
        }
    }

    pub(crate) fn check_send(&self, r: &SendRequest<'_>) -> Result<()> {
        let op = r.op.name();
        let ctx = self.context();
        let caps = &self.inner.caps;
        let bad = |problem: String| Error::InvalidArgument {
            operation: "post_send",
            problem: format!("{op}: {problem}"),
        };
        let max_sge = if matches!(r.op, SendOp::Read(_)) {
            caps.max_send_sge.min(ctx.attributes().max_sge_rd().max(1))
        } else {
            caps.max_send_sge
        };
        if r.local.len() > max_sge as usize {
            return Err(bad(format!(
                "{} scatter/gather entries, the QP takes at most {max_sge}{}",
                r.local.len(),
                if matches!(r.op, SendOp::Read(_)) {
                    format!(
                        " for RDMA READ (device max_sge_rd {})",
                        ctx.attributes().max_sge_rd()
                    )
                } else {
                    String::new()
                }
            )));
        }
        let mut total: u64 = 0;
        for l in r.local.iter() {
            if !l.in_pd(self.inner.pd.as_raw()) {
                return Err(bad(
                    "a local buffer is registered in another protection domain".into(),
                ));
            }
            if l.sge().is_none() {
                return Err(bad(format!(
                    "a scatter/gather entry of {} bytes exceeds 4 GiB - 1",
                    l.len()
                )));
            }
            if r.op.writes_local() && !l.access().contains(AccessFlags::LOCAL_WRITE) {
                return Err(bad(
                    "the local buffer must be registered with LOCAL_WRITE".into()
                ));
            }
            total += l.len() as u64;
        }
        if total > u64::from(u32::MAX) {
            return Err(bad(format!(
                "{total} bytes exceed the largest message, 4 GiB - 1"
            )));
        }
        if r.inline {
            if !matches!(
                r.op,
                SendOp::Send | SendOp::SendWithImm(_) | SendOp::Write(_) | SendOp::WriteWithImm(..)
            ) {
                return Err(bad("inline data only applies to SEND and RDMA WRITE".into()));
            }
            // The provider copies inline data with the CPU (memcpy from the
            // entry's address): device memory would fault or be garbage.
            if let Some(i) = r.local.iter().position(|l| !l.cpu_readable()) {
                return Err(Error::NotHostMemory {
                    operation: "post_send",
                    what: format!("local buffer {i}"),
                });
            }
            if total > u64::from(caps.max_inline_data) {
                return Err(bad(format!(
                    "{total} bytes inline, the QP was created with max_inline_data {} (device max: \
                     Context::max_inline_data)",
                    caps.max_inline_data
                )));
            }
        }
        match r.op {
            SendOp::Write(rb) | SendOp::WriteWithImm(rb, _) | SendOp::Read(rb) => {
                if total > rb.len {
                    return Err(bad(format!(
                        "{total} bytes do not fit the {}-byte remote buffer",
                        rb.len
                    )));
                }
            }
            SendOp::CompareSwap { remote, .. } | SendOp::FetchAdd { remote, .. } => {
                if !ctx.attributes().supports_atomics() {
                    return Err(Error::Unsupported {
                        feature: "atomic operations (compare-and-swap, fetch-and-add)".into(),
                        device: Some(format!(
                            "{} (atomic_cap {})",
                            ctx.name(),
                            ctx.attributes().atomic_cap()
                        )),
                        hint: Some("use RDMA WRITE/READ or SEND instead".into()),
                    });
                }
                if r.local.len() != 1 || r.local[0].len() != 8 {
                    return Err(bad(
                        "atomics take exactly one 8-byte local buffer for the old value".into(),
                    ));
                }
                if remote.len < 8 || remote.addr % 8 != 0 {
                    return Err(bad(format!(
                        "the remote target must be 8 bytes at an 8-byte-aligned address (got {} bytes at {:#x})",
                        remote.len, remote.addr
                    )));
                }
            }
            SendOp::Send | SendOp::SendWithImm(_) => {}
        }
        Ok(())
    }

    /// Posts one receive request, with the checks and errors of
    /// [`QueuePair::post_recv_batch`]; like [`QueuePair::post_send`], up to
    /// two entries are built on the stack.
    pub fn post_recv(&self, request: RecvRequest<'_>) -> Result<()> {
        let Some((mut sges, n)) = stack_sges(&request.local) else {
            return self.post_recv_batch(std::iter::once(request));
        };
        self.require_recv_ready()?;
        self.check_recv(&request)?;
        let mut guard = self.inner.lock();
        let Some(seq) = guard.pending.claim(true) else {
            return Err(self.full(&guard.pending, true));
        };
        let mut wr = sys::ibv_recv_wr {
            wr_id: WrId::encode(true, self.inner.generation, seq),
            next: std::ptr::null_mut(),
            sg_list: sg_ptr(&mut sges, n),
            num_sge: n,
        };
        let rq = &mut guard.pending.rq;
        rq.push(seq, request.wr_id, true, leases(&request.local));
        let mut bad: *mut sys::ibv_recv_wr = std::ptr::null_mut();
        // SAFETY: as in post_send.
        let rc = unsafe { sys::inline::ibv_post_recv(self.inner.raw.0, &mut wr, &mut bad) };
        if rc != 0 {
            rq.unpush(1 - posted_count(rc, bad, &wr, 1));
        }
        drop(guard);
        Error::check("ibv_post_recv", rc)
    }

    /// [`Error::QpState`] unless the QP takes receives: from INIT on, or
    /// still in RESET when RDMA CM manages it (on iWARP the kernel moves it
    /// during accept/connect).
    fn require_recv_ready(&self) -> Result<()> {
        let s = self.state();
        let cm_managed = matches!(self.inner.owner, QpOwner::Cm(_)) && s == QpState::Reset;
        if !matches!(s, QpState::Reset | QpState::Unknown(_)) || cm_managed {
            return Ok(());
        }
        Err(Error::QpState {
            operation: "post_recv",
            qp_num: self.inner.qp_num,
            state: s,
            needed: "the QP must be at least INIT: connect it (or call to_init) first",
        })
    }

    /// Posts receive requests as one chain. Allowed from INIT on. All are
    /// checked before any is posted; [`Error::QueueFull`] when the receive
    /// queue has no room for all of them.
    pub fn post_recv_batch<'a>(
        &self,
        requests: impl IntoIterator<Item = RecvRequest<'a>>,
    ) -> Result<()> {
        self.require_recv_ready()?;
        let mut guard = self.inner.lock();
        let Posting {
            pending: p,
            scratch: sc,
            ..
        } = &mut *guard;
        sc.clear();
        let mut n = 0usize;
        for r in requests {
            let claimed = self
                .check_recv(&r)
                .and_then(|()| p.claim(true).ok_or_else(|| self.full(p, true)));
            let seq = match claimed {
                Ok(seq) => seq,
                Err(e) => {
                    p.rq.unpush(n);
                    return Err(e);
                }
            };
            sc.add_sges(&r.local);
            sc.recv.push(sys::ibv_recv_wr {
                wr_id: WrId::encode(true, self.inner.generation, seq),
                next: std::ptr::null_mut(),
                sg_list: std::ptr::null_mut(),
                num_sge: 0,
            });
            p.rq.push(seq, r.wr_id, true, leases(&r.local));
            n += 1;
        }
        if n == 0 {
            return Ok(());
        }
        sc.link_recv();
        let mut bad: *mut sys::ibv_recv_wr = std::ptr::null_mut();
        // SAFETY: as in post_send_batch.
        let rc =
            unsafe { sys::inline::ibv_post_recv(self.inner.raw.0, sc.recv.as_mut_ptr(), &mut bad) };
        let posted = posted_count(rc, bad, sc.recv.as_ptr(), n);
        p.rq.unpush(n - posted);
        drop(guard);
        Error::check("ibv_post_recv", rc)
    }

    pub(crate) fn check_recv(&self, r: &RecvRequest<'_>) -> Result<()> {
        let caps = &self.inner.caps;
        if r.local.len() > caps.max_recv_sge as usize {
            return Err(Error::invalid(
                "post_recv",
                format!(
                    "{} scatter/gather entries, the QP takes at most {}",
                    r.local.len(),
                    caps.max_recv_sge
                ),
            ));
        }
        for l in r.local.iter() {
            if !l.in_pd(self.inner.pd.as_raw()) {
                return Err(Error::invalid(
                    "post_recv",
                    "a buffer is registered in another protection domain",
                ));
            }
            if !l.access().contains(AccessFlags::LOCAL_WRITE) {
                return Err(Error::invalid(
                    "post_recv",
                    "receive buffers must be registered with LOCAL_WRITE",
                ));
            }
            if l.sge().is_none() {
                return Err(Error::invalid(
                    "post_recv",
                    "a scatter/gather entry exceeds 4 GiB - 1",
                ));
            }
        }
        Ok(())
    }

    /// Posts a raw send chain, bypassing every check and all tracking (for
    /// benchmarks). Completions carry the raw wr_id.
    ///
    /// # Safety
    /// The chain must be valid for `ibv_post_send(3)`; the memory it names
    /// must stay registered and untouched until the completions are polled;
    /// every wr_id must have bit 62 clear (bit 62 marks requests posted by
    /// the safe API, whose bookkeeping a colliding id would corrupt).
    pub unsafe fn post_send_raw(&self, wr: *mut sys::ibv_send_wr) -> Result<()> {
        let mut bad: *mut sys::ibv_send_wr = std::ptr::null_mut();
        // SAFETY: the caller's contract.
        let rc = unsafe { sys::inline::ibv_post_send(self.inner.raw.0, wr, &mut bad) };
        Error::check("ibv_post_send", rc)
    }

    /// Keeps the regions of `local` registered and allocated until the QP is
    /// destroyed (once each, however often they are bound).
    pub(crate) fn bind(&self, local: &[LocalSlice<'_>]) {
        let mut g = self.inner.lock();
        for l in local {
            let lease = l.lease();
            let held = |b: &Arc<dyn Lease>| std::ptr::addr_eq(Arc::as_ptr(b), Arc::as_ptr(&lease));
            if !g.bound.iter().any(held) {
                g.bound.push(lease);
            }
        }
    }

    /// Unique to this QP in the process (see [`crate::pending`]).
    pub(crate) fn generation(&self) -> u32 {
        self.inner.generation
    }

    /// Requests posted and not yet completed: (send, receive).
    pub fn outstanding(&self) -> (usize, usize) {
        let g = self.inner.lock();
        (g.pending.sq.len(), g.pending.rq.len())
    }
}

fn create_error(e: Error, caps: &QpCapabilities) -> Error {
    match e {
        Error::Verb {
            verb,
            errno: libc::EINVAL,
            ..
        } => Error::Verb {
            verb,
            errno: libc::EINVAL,
            hint: Some(format!(
                "the device refused the queue sizes {caps:?}: lower them (max_inline_data: see \
                 Context::max_inline_data)"
            )),
        },
        other => other,
    }
}

fn check_24bit(what: &str, v: u32) -> Result<()> {
    if v > 0x00ff_ffff {
        return Err(Error::invalid(
            "modify_qp",
            format!("{what} {v:#x} does not fit in 24 bits"),
        ));
    }
    Ok(())
}

/// The work request of `r`, without its scatter/gather list (set by
/// [`Scratch::link_send`]).
pub(crate) fn build_send_wr(r: &SendRequest<'_>, wr_id: u64) -> sys::ibv_send_wr {
    let mut wr = sys::ibv_send_wr {
        wr_id,
        next: std::ptr::null_mut(),
        ..Default::default()
    };
    let mut flags = 0;
    if r.signaled {
        flags |= sys::IBV_SEND_SIGNALED;
    }
    if r.inline {
        flags |= sys::IBV_SEND_INLINE;
    }
    if r.fence {
        flags |= sys::IBV_SEND_FENCE;
    }
    if r.solicited {
        flags |= sys::IBV_SEND_SOLICITED;
    }
    wr.send_flags = flags;
    match r.op {
        SendOp::Send => wr.opcode = sys::IBV_WR_SEND,
        SendOp::SendWithImm(imm) => {
            wr.opcode = sys::IBV_WR_SEND_WITH_IMM;
            wr.__bindgen_anon_1.imm_data = imm.to_be();
        }
        SendOp::Write(rb) => {
            wr.opcode = sys::IBV_WR_RDMA_WRITE;
            wr.wr.rdma = sys::ibv_send_wr__bindgen_ty_2__bindgen_ty_1 {
                remote_addr: rb.addr,
                rkey: rb.rkey,
            };
        }
        SendOp::WriteWithImm(rb, imm) => {
            wr.opcode = sys::IBV_WR_RDMA_WRITE_WITH_IMM;
            wr.__bindgen_anon_1.imm_data = imm.to_be();
            wr.wr.rdma = sys::ibv_send_wr__bindgen_ty_2__bindgen_ty_1 {
                remote_addr: rb.addr,
                rkey: rb.rkey,
            };
        }
        SendOp::Read(rb) => {
            wr.opcode = sys::IBV_WR_RDMA_READ;
            wr.wr.rdma = sys::ibv_send_wr__bindgen_ty_2__bindgen_ty_1 {
                remote_addr: rb.addr,
                rkey: rb.rkey,
            };
        }
        SendOp::CompareSwap {
            remote,
            compare,
            swap,
        } => {
            wr.opcode = sys::IBV_WR_ATOMIC_CMP_AND_SWP;
            wr.wr.atomic = sys::ibv_send_wr__bindgen_ty_2__bindgen_ty_2 {
                remote_addr: remote.addr,
                compare_add: compare,
                swap,
                rkey: remote.rkey,
            };
        }
        SendOp::FetchAdd { remote, add } => {
            wr.opcode = sys::IBV_WR_ATOMIC_FETCH_AND_ADD;
            wr.wr.atomic = sys::ibv_send_wr__bindgen_ty_2__bindgen_ty_2 {
                remote_addr: remote.addr,
                compare_add: add,
                swap: 0,
                rkey: remote.rkey,
            };
        }
    }
    wr
}

/// How many requests of a chain were posted: all on success, those before
/// `bad` on failure, and all when `bad` is not in the chain (the memory of a
/// request that may have been posted must stay held).
fn posted_count<W>(rc: i32, bad: *const W, first: *const W, n: usize) -> usize {
    if rc == 0 {
        return n;
    }
    (0..n)
        .find(|i| std::ptr::eq(first.wrapping_add(*i), bad))
        .unwrap_or(n)
}

/// A random 24-bit packet sequence number.
pub(crate) fn random_psn() -> u32 {
    let mut b = [0u8; 4];
    // SAFETY: b is 4 writable bytes.
    let n = unsafe { libc::getrandom(b.as_mut_ptr().cast(), b.len(), 0) };
    let v = if n == 4 {
        u32::from_ne_bytes(b)
    } else {
        let t = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.subsec_nanos())
            .unwrap_or(0);
        t ^ std::process::id().rotate_left(16)
    };
    v & 0x00ff_ffff
}

/// The largest inline size an RC QP of `ctx` accepts, found by creating
/// throw-away QPs (binary search; the verbs do not report it).
pub(crate) fn probe_max_inline(ctx: &Context) -> Result<u32> {
    let pd = ctx.alloc_pd()?;
    let cq = ctx.create_cq(4)?;
    let try_size = |n: u32| -> Option<u32> {
        let caps = QpCapabilities {
            max_send_wr: 1,
            max_recv_wr: 1,
            max_send_sge: 1,
            max_recv_sge: 1,
            max_inline_data: n,
        };
        QueuePair::create(&pd, &cq, &cq, &caps, None)
            .ok()
            .map(|qp| qp.capabilities().max_inline_data)
    };
    let mut best = match try_size(0) {
        Some(v) => v,
        None => {
            return Err(Error::invalid(
                "max_inline_data",
                "cannot create a probe QP",
            ));
        }
    };
    let (mut lo, mut hi) = (1u32, 4096u32);
    while lo <= hi {
        let mid = lo + (hi - lo) / 2;
        match try_size(mid) {
            Some(granted) => {
                best = best.max(granted.max(mid));
                lo = mid + 1;
            }
            None => hi = mid - 1,
        }
    }
    Ok(best)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn posted_count_keeps_unknown_failures_held() {
        let wrs = [sys::ibv_send_wr::default(), sys::ibv_send_wr::default()];
        let first = wrs.as_ptr();
        assert_eq!(posted_count(0, std::ptr::null(), first, 2), 2);
        assert_eq!(
            posted_count(libc::ENOMEM, first.wrapping_add(1), first, 2),
            1
        );
        assert_eq!(posted_count(libc::ENOMEM, first, first, 2), 0);
        // `bad` outside the chain: maybe all were posted, keep them all held.
        assert_eq!(posted_count(libc::EINVAL, std::ptr::null(), first, 2), 2);
    }

    #[test]
    fn psn_is_24_bit() {
        for _ in 0..100 {
            assert!(random_psn() <= 0x00ff_ffff);
        }
    }

    #[test]
    fn state_names() {
        assert_eq!(QpState::from_raw(sys::IBV_QPS_RTS).to_string(), "RTS");
        assert_eq!(QpState::Reset.raw(), sys::IBV_QPS_RESET);
    }
}
