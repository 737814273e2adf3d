//! Send and receive work requests, and the checks every request passes
//! before it reaches the device (on [`QueuePair::post_send`] and when a
//! [`crate::Lane`] prepares one): the QP's protection domain, the access the
//! operation needs, lengths within the regions and the QP's limits, inline
//! data only from host memory (the CPU copies it), atomics only where the
//! device has them.

use erdma_sys as sys;

use crate::error::{Error, Result};
use crate::mr::{AccessFlags, LocalSlice, RemoteBuffer};

use super::QueuePair;

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

    /// Whether the device writes local memory for it (a READ's sink, an
    /// atomic's result): only its own completion proves that done.
    pub(crate) fn writes_local(&self) -> bool {
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

impl QueuePair {
    pub(crate) fn check_send(&self, r: &SendRequest<'_>) -> Result<()> {
        let ctx = self.context();
        let caps = &self.inner.caps;
        // The operation's name only for an error, and the entries taken out
        // of their `SgList` once (callgrind: both cost ~15 instructions a
        // post on the latency path).
        let bad = |problem: String| Error::InvalidArgument {
            operation: "post_send",
            problem: format!("{}: {problem}", r.op.name()),
        };
        let local: &[LocalSlice<'_>] = &r.local;
        let max_sge = if matches!(r.op, SendOp::Read(_)) {
            caps.max_send_sge.min(ctx.attributes().max_sge_rd().max(1))
        } else {
            caps.max_send_sge
        };
        if local.len() > max_sge as usize {
            return Err(bad(format!(
                "{} scatter/gather entries, the QP takes at most {max_sge}{}",
                local.len(),
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
        for l in local.iter() {
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
            if let Some(i) = local.iter().position(|l| !l.cpu_readable()) {
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
                if local.len() != 1 || local[0].len() != 8 {
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

    pub(crate) fn check_recv(&self, r: &RecvRequest<'_>) -> Result<()> {
        let caps = &self.inner.caps;
        let local: &[LocalSlice<'_>] = &r.local;
        if local.len() > caps.max_recv_sge as usize {
            return Err(Error::invalid(
                "post_recv",
                format!(
                    "{} scatter/gather entries, the QP takes at most {}",
                    local.len(),
                    caps.max_recv_sge
                ),
            ));
        }
        for l in local.iter() {
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
