//! Posting requests, and the records that keep their memory safe: each
//! posted request holds a share of every region it names (recorded under
//! the QP's lock) until its completion is polled, runs of unsignaled
//! requests are released with the next signaled one, a full queue is
//! [`Error::QueueFull`] before the device sees it, and a post that may have
//! reached the device keeps its memory held even when it reports failure.

use std::sync::Arc;

use erdma_sys as sys;

use crate::device::Transport;
use crate::error::{Error, Result};
use crate::mr::{Lease, LocalSlice};
use crate::pending::{Leases, Pending, WrId};

use super::{QpOwner, QpState, QueuePair, RecvRequest, SendRequest, build_send_wr, stack_sges};

/// What posting and completing need, under one lock: the outstanding
/// requests and the buffers chains are built in.
pub(super) struct Posting {
    pub(super) pending: Pending,
    /// Scratch buffers not in use: a batch takes one out under the lock and
    /// fills it without the lock (the caller's iterator runs there), then
    /// gives it back. One per batch posted at once, so that posting does not
    /// allocate once they have grown, also from several threads.
    pub(super) scratch: Vec<Scratch>,
    /// The regions bound to the QP for its life (a [`crate::Lane`]'s):
    /// released only after the QP is destroyed.
    pub(super) bound: Vec<Arc<dyn Lease>>,
}

/// Reused buffers for building request chains, so that posting does not
/// allocate once they have grown. The raw pointers in them are only
/// meaningful during one post call.
#[derive(Default)]
pub(super) struct Scratch {
    send: Vec<sys::ibv_send_wr>,
    recv: Vec<sys::ibv_recv_wr>,
    sges: Vec<sys::ibv_sge>,
    /// Where each request's entries start in `sges`.
    sge_start: Vec<usize>,
    /// Each request's record until it is pushed to the queue under the
    /// lock: the caller's wr_id, whether it is signaled, its regions' shares.
    records: Vec<(u64, bool, Leases)>,
}

// SAFETY: the pointers in the work requests point into `sges` of the same
// value and are rebuilt by every post call, which owns the value meanwhile
// (taken out of the QP's pool); the records hold `Arc<dyn Lease>`, which is
// Send + Sync.
unsafe impl Send for Scratch {}

impl Scratch {
    /// Empty, with its storage kept, to go back to the QP's pool.
    fn cleared(mut self) -> Scratch {
        self.clear();
        self
    }

    fn clear(&mut self) {
        self.send.clear();
        self.recv.clear();
        self.sges.clear();
        self.sge_start.clear();
        self.records.clear();
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
/// One region (nearly every request) without the iterator's collection.
fn leases(local: &[LocalSlice<'_>]) -> Leases {
    match local {
        [] => Leases::None,
        [one] => Leases::One(one.lease()),
        _ => local.iter().map(|l| l.lease()).collect(),
    }
}

/// The `sg_list` pointer of `n` entries at `sges` (null for none).
fn sg_ptr(sges: &mut [sys::ibv_sge; 2], n: i32) -> *mut sys::ibv_sge {
    if n == 0 {
        std::ptr::null_mut()
    } else {
        sges.as_mut_ptr()
    }
}

impl QueuePair {
    /// Posts one send request, with the checks and errors of
    /// [`QueuePair::post_send_batch`]. Up to two scatter/gather entries are
    /// built on the stack, without the batch's lists: this is the latency
    /// path (one request per doorbell).
    pub fn post_send(&self, request: SendRequest<'_>) -> Result<()> {
        let local: &[LocalSlice<'_>] = &request.local;
        let Some((mut sges, n)) = stack_sges(local) else {
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
        if request.signaled || !request.op.writes_local() {
            sq.push(seq, request.wr_id, request.signaled, leases(local));
        } else {
            // Released by its own completion only (issue 34 hole 1).
            wr.send_flags |= sys::IBV_SEND_SIGNALED;
            sq.push_silent(seq, request.wr_id, leases(local));
        }
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
        // The caller's iterator runs without the QP's lock (issue 34 hole
        // 11): a panic in it leaves nothing recorded, and it may use the QP.
        let mut sc = self.take_scratch();
        let mut imm = false;
        for r in requests {
            if let Err(e) = self.check_send(&r) {
                self.give_scratch(sc);
                return Err(e);
            }
            sc.add_sges(&r.local);
            let mut wr = build_send_wr(&r, 0);
            if !r.signaled && r.op.writes_local() {
                // Released by its own completion only (issue 34 hole 1):
                // posted signaled, recorded as silent (its success is not
                // reported).
                wr.send_flags |= sys::IBV_SEND_SIGNALED;
            }
            sc.send.push(wr);
            sc.records.push((r.wr_id, r.signaled, leases(&r.local)));
            imm |= r.op.has_imm();
        }
        let n = sc.send.len();
        if n == 0 {
            self.give_scratch(sc);
            return Ok(());
        }
        sc.link_send();
        let mut guard = self.inner.lock();
        let p = &mut guard.pending;
        if p.sq.len() + n > p.sq.capacity() {
            let e = self.full(p, false);
            guard.scratch.push(sc.cleared());
            return Err(e);
        }
        for (wr, (user, signaled, held)) in sc.send.iter_mut().zip(sc.records.drain(..)) {
            let Some(seq) = p.claim(false) else {
                unreachable!("room for the whole batch was checked above")
            };
            wr.wr_id = WrId::encode(false, self.inner.generation, seq);
            if signaled || wr.send_flags & sys::IBV_SEND_SIGNALED == 0 {
                p.sq.push(seq, user, signaled, held);
            } else {
                p.sq.push_silent(seq, user, held);
            }
        }
        let mut bad: *mut sys::ibv_send_wr = std::ptr::null_mut();
        // SAFETY: live QP; the chain in sc.send is valid and its sg_lists
        // point into sc.sges, both alive across the call (sc is owned here
        // and its vectors no longer grow); the memory they name is
        // registered, and each request already holds its regions (in
        // `p.sq`), under the lock, before any completion can be processed.
        let rc =
            unsafe { sys::inline::ibv_post_send(self.inner.raw.0, sc.send.as_mut_ptr(), &mut bad) };
        let posted = posted_count(rc, bad, sc.send.as_ptr(), n);
        p.sq.unpush(n - posted);
        guard.scratch.push(sc.cleared());
        drop(guard);
        if rc == 0 {
            return Ok(());
        }
        Err(self.post_send_error(rc, imm, posted, n))
    }

    /// A scratch buffer for one batch, taken from the QP's (empty, and
    /// allocating as it grows, when every one is in use).
    fn take_scratch(&self) -> Scratch {
        let mut sc = self.inner.lock().scratch.pop().unwrap_or_default();
        sc.clear();
        sc
    }

    /// Gives a scratch buffer back (emptied: it holds no region's share).
    fn give_scratch(&self, sc: Scratch) {
        let sc = sc.cleared();
        self.inner.lock().scratch.push(sc);
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

    /// Posts one receive request, with the checks and errors of
    /// [`QueuePair::post_recv_batch`]; like [`QueuePair::post_send`], up to
    /// two entries are built on the stack.
    pub fn post_recv(&self, request: RecvRequest<'_>) -> Result<()> {
        let local: &[LocalSlice<'_>] = &request.local;
        let Some((mut sges, n)) = stack_sges(local) else {
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
        rq.push(seq, request.wr_id, true, leases(local));
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
        // The caller's iterator runs without the QP's lock: see
        // post_send_batch.
        let mut sc = self.take_scratch();
        for r in requests {
            if let Err(e) = self.check_recv(&r) {
                self.give_scratch(sc);
                return Err(e);
            }
            sc.add_sges(&r.local);
            sc.recv.push(sys::ibv_recv_wr {
                wr_id: 0,
                next: std::ptr::null_mut(),
                sg_list: std::ptr::null_mut(),
                num_sge: 0,
            });
            sc.records.push((r.wr_id, true, leases(&r.local)));
        }
        let n = sc.recv.len();
        if n == 0 {
            self.give_scratch(sc);
            return Ok(());
        }
        sc.link_recv();
        let mut guard = self.inner.lock();
        let p = &mut guard.pending;
        if p.rq.len() + n > p.rq.capacity() {
            let e = self.full(p, true);
            guard.scratch.push(sc.cleared());
            return Err(e);
        }
        for (wr, (user, _, held)) in sc.recv.iter_mut().zip(sc.records.drain(..)) {
            let Some(seq) = p.claim(true) else {
                unreachable!("room for the whole batch was checked above")
            };
            wr.wr_id = WrId::encode(true, self.inner.generation, seq);
            p.rq.push(seq, user, true, held);
        }
        let mut bad: *mut sys::ibv_recv_wr = std::ptr::null_mut();
        // SAFETY: as in post_send_batch.
        let rc =
            unsafe { sys::inline::ibv_post_recv(self.inner.raw.0, sc.recv.as_mut_ptr(), &mut bad) };
        let posted = posted_count(rc, bad, sc.recv.as_ptr(), n);
        p.rq.unpush(n - posted);
        guard.scratch.push(sc.cleared());
        drop(guard);
        Error::check("ibv_post_recv", rc)
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

    /// Requests posted and not yet completed: (send, receive).
    pub fn outstanding(&self) -> (usize, usize) {
        let g = self.inner.lock();
        (g.pending.sq.len(), g.pending.rq.len())
    }
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
}
