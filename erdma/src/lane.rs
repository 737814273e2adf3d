//! Lanes: a connected queue pair whose completion queues serve it alone, and
//! work requests checked once and then posted many times. This is the data
//! path of hot loops (benchmarks, ping-pongs, a pipeline's steady state): a
//! post is one `ibv_post_send`/`ibv_post_recv` and a poll one `ibv_poll_cq`,
//! as the same loop written in C against libibverbs.
//!
//! [`QueuePair::post_send`] keeps its safety per request: a share of each
//! region taken at post and dropped when the completion is polled, the
//! request recorded under the QP's lock, each completion matched back to its
//! request. A lane keeps the same guarantees by binding instead:
//! - every region a prepared request names is kept registered and allocated
//!   until the lane (its QP) is destroyed, so no request can outlive its
//!   memory, whether it completes, fails or is never polled;
//! - the checks of a request (protection domain, access, lengths, inline
//!   limit, atomics) run once, when it is prepared; the QP is RTS when the
//!   lane is made, and nothing else can post on it or change its state;
//! - the completion queues serve this QP alone, for good, so a completion is
//!   the lane's own and carries the caller's wr_id unchanged; the lane counts
//!   the completions it may cause against the size the device gave the CQ
//!   and refuses a post that could overrun it ([`Error::QueueFull`]: poll
//!   first). Every request counts, signaled or not: a QP that goes to the
//!   error state completes each outstanding request with a flush
//!   completion. An unsignaled WRITE's or SEND's credit comes back when a
//!   signaled send posted after it completes successfully (the queue then
//!   proves it done without a completion of its own), or with its own error
//!   completion; an unsignaled READ's or atomic's only when a signaled READ
//!   or atomic posted after it succeeds (on siw a WRITE completes before an
//!   earlier READ's response has landed), or with its own error completion.
//!
//! A region bound to a lane counts as in use until the lane is dropped: read
//! and write it by copies ([`crate::MemoryRegion::read_at`],
//! [`crate::MemoryRegion::write_at`]), not as a Rust slice. A lane is used from
//! one thread (`Send`, not `Sync`); prepared requests borrow it, and a
//! prepared send borrows the regions it names while it is used (a post of
//! inline data has the CPU copy them, so nothing may write them meanwhile,
//! on any thread). A source rewritten between posts is prepared with
//! [`Lane::prepare_send_mut`] and written through the prepared request.
//!
//! ```no_run
//! # fn main() -> erdma::Result<()> {
//! use erdma::{AccessFlags, Completion, Lane, QpCapabilities, SendRequest};
//! let ctx = erdma::Context::open("erdma_0")?;
//! let pd = ctx.alloc_pd()?;
//! let cq = ctx.create_cq(256)?;
//! let qp = pd.create_rc_qp(&cq, &cq, &QpCapabilities::default())?;
//! # let (me, peer) = (qp.endpoint(&ctx.select_gid(1, None)?)?, qp.endpoint(&ctx.select_gid(1, None)?)?);
//! qp.connect(&me, &peer, &Default::default())?; // peer: the other side's Endpoint
//! let src = pd.register(vec![0u8; 4096], AccessFlags::empty())?;
//! let lane = Lane::new(qp)?;
//! let mut send = lane.prepare_send(SendRequest::send([src.slice(..64)?]).wr_id(7))?;
//! let mut wc = [Completion::default(); 16];
//! for _ in 0..1000 {
//!     send.post()?;
//!     while lane.poll_send(&mut wc[..1])? == 0 {}
//!     wc[0].ok()?;
//! }
//! # Ok(()) }
//! ```

use std::cell::{Cell, RefCell};
use std::collections::VecDeque;
use std::fmt;
use std::ptr::NonNull;

use erdma_sys as sys;

use crate::cq::{CompletionQueue, WcOpcode, WcStatus, poll_error};
use crate::error::{Error, Result};
use crate::ffi::Ptr;
use crate::mr::{HostMemory, LocalSlice, MemoryRegion};
use crate::qp::{QpState, QueuePair, RecvRequest, SendRequest, build_send_wr, stack_sges};

type PostSend = unsafe extern "C" fn(
    *mut sys::ibv_qp,
    *mut sys::ibv_send_wr,
    *mut *mut sys::ibv_send_wr,
) -> std::ffi::c_int;
type PostRecv = unsafe extern "C" fn(
    *mut sys::ibv_qp,
    *mut sys::ibv_recv_wr,
    *mut *mut sys::ibv_recv_wr,
) -> std::ffi::c_int;
type PollCq =
    unsafe extern "C" fn(*mut sys::ibv_cq, std::ffi::c_int, *mut sys::ibv_wc) -> std::ffi::c_int;

/// The provider's data-path entry points. verbs.h's inline functions read
/// them from the context's ops table on every call; the table is filled
/// when the device is opened and never changes, so a lane reads it once.
#[derive(Clone, Copy)]
struct Ops {
    post_send: PostSend,
    post_recv: PostRecv,
    poll_cq: PollCq,
}

impl Ops {
    fn of(qp: &QueuePair) -> Result<Ops> {
        // SAFETY: a live QP; its context (which its CQs share, checked when
        // it was created) lives as long as it does.
        let ops = unsafe { &(*(*qp.as_raw()).context).ops };
        match (ops.post_send, ops.post_recv, ops.poll_cq) {
            (Some(post_send), Some(post_recv), Some(poll_cq)) => Ok(Ops {
                post_send,
                post_recv,
                poll_cq,
            }),
            _ => Err(Error::Unsupported {
                feature: "post_send, post_recv and poll_cq in the provider's ops table".into(),
                device: Some(qp.context().name().to_owned()),
                hint: Some("use QueuePair::post_send and CompletionQueue::poll".into()),
            }),
        }
    }
}

/// A connected RC queue pair with completion queues of its own, posting
/// prepared requests (see the [module documentation](self)).
pub struct Lane {
    /// Owned, never exposed: nothing else may post on it or move its state.
    qp: QueuePair,
    raw_qp: Ptr<sys::ibv_qp>,
    ops: Ops,
    /// The send CQ's side.
    send: CqSide,
    /// The receive CQ's side, unused when the send CQ takes receives too.
    recv: CqSide,
    /// One CQ for both queues.
    shared: bool,
    /// The credits of unsignaled sends, until they are known done.
    runs: Silent,
    /// The local keys of the regions bound to the QP: a slice of one of
    /// them needs no new binding (a live region's key is its own).
    lkeys: RefCell<Vec<u32>>,
}

/// One CQ of a lane and the completions it can still take: every request
/// takes a credit when posted (a send, signaled or not, on the send CQ; a
/// receive on the receive CQ), a polled completion gives one back, and so
/// does the success of a signaled send for the unsignaled ones before it
/// ([`Runs`]). The count is exact, so it never exceeds `limit`.
struct CqSide {
    cq: Ptr<sys::ibv_cq>,
    credits: Cell<u32>,
    /// The CQ's size as the device created it (`cqe` written back by
    /// `ibv_create_cq`, not the size asked for): what `credits` starts from.
    limit: u32,
    /// `send completion` or `receive completion`, for errors.
    name: &'static str,
}

impl CqSide {
    fn new(cq: &CompletionQueue, name: &'static str) -> CqSide {
        CqSide {
            cq: Ptr(cq.as_raw()),
            credits: Cell::new(cq.entries()),
            limit: cq.entries(),
            name,
        }
    }

    /// Takes a credit, or says the CQ may be full.
    #[inline]
    fn take(&self, qp_num: impl Fn() -> u32) -> Result<()> {
        let c = self.credits.get();
        if c == 0 {
            return Err(self.full(qp_num()));
        }
        self.credits.set(c - 1);
        Ok(())
    }

    /// Gives back `n` credits (completions polled, a failed post's, a run of
    /// unsignaled sends proven done).
    #[inline]
    fn give(&self, n: u32) {
        let c = self.credits.get() + n;
        debug_assert!(c <= self.limit, "{c} credits of {}", self.limit);
        self.credits.set(c);
    }

    /// Credits taken and not given back.
    fn taken(&self) -> u32 {
        self.limit - self.credits.get()
    }

    #[cold]
    fn full(&self, qp_num: u32) -> Error {
        Error::QueueFull {
            queue: self.name,
            qp_num,
            outstanding: self.limit as usize,
            capacity: self.limit as usize,
        }
    }
}

/// The credits of unsignaled sends. Such a send completes without a
/// completion when it succeeds, and with one (its error, or a flush when the
/// QP went to the error state) when it fails: until the lane knows which, it
/// holds a credit. It knows when a request posted after it completes
/// successfully, if every supported provider finishes that request after
/// it; the first failure moves the QP to the error state, where every later
/// request is flushed. Which later requests prove it done depends on what it
/// is (issue 34 hole 1):
/// - an RDMA WRITE or SEND is done once the device has sent it: a send
///   queue sends in order, so the success of any send posted after it
///   proves it done;
/// - an RDMA READ or atomic is done only when its response has landed in
///   the sink. On siw (and iWARP generally) a WRITE or SEND completes when
///   it is sent, before the response of a READ posted earlier has arrived;
///   only a later READ or atomic, whose response comes after the earlier
///   ones' on every provider (IB and iWARP return responses in order),
///   proves it done.
///
/// So a lane keeps two [`Runs`]: the unsignaled WRITEs and SENDs, closed by
/// any signaled send and counted against every successful send completion,
/// and the unsignaled READs and atomics, closed only by a signaled READ or
/// atomic and counted against successful READ and atomic completions only.
struct Silent {
    /// Unsignaled WRITEs and SENDs.
    sends: Runs,
    /// Unsignaled READs and atomics.
    reads: Runs,
    /// `sends.open + reads.open`: what a signaled post tests (one load)
    /// before it closes anything.
    open: Cell<u32>,
}

impl Silent {
    fn new(limit: u32) -> Silent {
        Silent {
            sends: Runs::new(limit, false),
            reads: Runs::new(limit, true),
            open: Cell::new(0),
        }
    }

    /// The run an unsignaled request joins.
    #[inline]
    fn of(&self, reads: bool) -> &Runs {
        if reads { &self.reads } else { &self.sends }
    }

    /// An unsignaled request was posted (its credit taken); `reads` when it
    /// is a READ or atomic.
    #[cold]
    fn unsignaled(&self, reads: bool) {
        self.of(reads).unsignaled();
        self.open.set(self.open.get() + 1);
    }

    /// The unsignaled request just counted failed to post.
    #[cold]
    fn unsignaled_failed(&self, reads: bool) {
        self.of(reads).unsignaled_failed();
        self.open.set(self.open.get() - 1);
    }

    /// A signaled request was posted while some run is open (its credit
    /// taken); `reads` when it is a READ or atomic, `outstanding` the
    /// credits the send CQ has lent. It closes the open run of WRITEs and
    /// SENDs, and, if it is a READ or atomic, the open run of those: a
    /// WRITE or SEND proves no READ done (the READs stay open until one
    /// does).
    #[cold]
    fn close(&self, reads: bool, outstanding: u32) {
        // Every credit lent that is not an unsignaled request's: signaled
        // sends (this one included, so at least 1), and receives on a shared
        // CQ. An upper bound on the signaled READs and atomics too.
        let signaled = outstanding
            .saturating_sub(self.sends.held.get() + self.reads.held.get())
            .max(1);
        if self.sends.open.get() != 0 {
            self.sends.close(signaled);
        }
        if reads && self.reads.open.get() != 0 {
            self.reads.close(signaled);
        }
        self.open.set(self.sends.open.get() + self.reads.open.get());
    }

    /// Whether a closed run waits for completions (what a poll tests).
    #[inline]
    fn waiting(&self) -> bool {
        (self.sends.ahead.get() | self.reads.ahead.get()) != 0
    }

    /// The credits of the runs that `polled` proves done.
    #[cold]
    fn retire(&self, polled: &[Completion], shared: bool) -> u32 {
        let done = self.sends.retire(polled, shared) + self.reads.retire(polled, shared);
        self.open.set(self.sends.open.get() + self.reads.open.get());
        done
    }

    /// Credits held by unsignaled requests not yet known done.
    #[cfg(test)]
    fn held(&self) -> u32 {
        self.sends.held.get() + self.reads.held.get()
    }
}

/// The credits of one kind of unsignaled request ([`Silent`]).
///
/// Unsignaled sends since the last signaled one form the open run; a
/// signaled send closes it, and the run waits in `closed` until as many
/// successful send completions have been polled as signaled sends were
/// outstanding then (its own included). Where that number is not known
/// exactly (one CQ for both queues: receives count in the CQ's credits too)
/// it is an upper bound, which only returns the run later: never a credit
/// too early.
struct Runs {
    /// Unsignaled sends posted since the last signaled one.
    open: Cell<u32>,
    /// The credits of the open run and of every closed one.
    held: Cell<u32>,
    /// The sum of the `after` of the closed runs: zero when none waits
    /// (the only thing a poll looks at when no unsignaled send is in use).
    ahead: Cell<u32>,
    /// Closed runs, oldest first; room for one per credit, reserved when the
    /// lane is made (a post never allocates).
    closed: RefCell<VecDeque<Run>>,
    /// READs and atomics: only their successes count.
    reads: bool,
}

/// A closed run of unsignaled sends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Run {
    /// Successful send completions still to poll before the run is done,
    /// counted after the previous run's.
    after: u32,
    /// Its sends (their credits).
    credits: u32,
}

impl Runs {
    fn new(limit: u32, reads: bool) -> Runs {
        Runs {
            open: Cell::new(0),
            held: Cell::new(0),
            ahead: Cell::new(0),
            closed: RefCell::new(VecDeque::with_capacity(limit as usize)),
            reads,
        }
    }

    /// An unsignaled send was posted (its credit taken).
    #[cold]
    fn unsignaled(&self) {
        self.open.set(self.open.get() + 1);
        self.held.set(self.held.get() + 1);
    }

    /// The unsignaled send just counted failed to post (its credit is given
    /// back by the caller).
    #[cold]
    fn unsignaled_failed(&self) {
        self.open.set(self.open.get() - 1);
        self.held.set(self.held.get() - 1);
    }

    /// A signaled request that proves this run done once it succeeds was
    /// posted after it (its credit taken); `signaled` bounds the signaled
    /// requests outstanding, it included (at least 1). The run then waits
    /// for that many successes.
    fn close(&self, signaled: u32) {
        let credits = self.open.replace(0);
        let ahead = self.ahead.get();
        let after = if self.closed.borrow().is_empty() {
            signaled
        } else {
            // Counted after the runs before it: it completes no earlier
            // than they do (0: together with the last one).
            signaled.saturating_sub(ahead)
        };
        self.closed.borrow_mut().push_back(Run { after, credits });
        self.ahead.set(ahead + after);
    }

    /// Counts the successful send completions among `polled` (the send CQ's;
    /// with `shared`, receives come too and are skipped; for READs and
    /// atomics, only theirs) against the closed runs; returns the credits of
    /// the runs now done.
    fn retire(&self, polled: &[Completion], shared: bool) -> u32 {
        let mut closed = self.closed.borrow_mut();
        let mut done = 0;
        for c in polled {
            if !c.is_ok() {
                // The QP is in error: no send succeeds on it again, so no
                // run waiting now can be proven done. Forget them (their
                // credits stay taken; a request that flushes gives its own
                // back), so that a lane kept posting on a QP in error does
                // not queue runs without end.
                closed.clear();
                self.ahead.set(0);
                self.held.set(self.open.get());
                return done;
            }
            // A receive's opcode has IBV_WC_RECV set; READs and atomics
            // count for the runs of READs and atomics, every send for the
            // others.
            let send_ok = if self.reads {
                matches!(
                    c.0.opcode,
                    sys::IBV_WC_RDMA_READ | sys::IBV_WC_COMP_SWAP | sys::IBV_WC_FETCH_ADD
                )
            } else {
                !(shared && c.0.opcode & sys::IBV_WC_RECV != 0)
            };
            let Some(front) = closed.front_mut().filter(|_| send_ok) else {
                continue;
            };
            front.after -= 1;
            self.ahead.set(self.ahead.get() - 1);
            // The front run is done, with those that complete with it.
            while closed.front().is_some_and(|r| r.after == 0) {
                let run = closed.pop_front().expect("checked");
                done += run.credits;
            }
        }
        self.held.set(self.held.get() - done);
        done
    }
}

impl fmt::Debug for Lane {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Lane")
            .field("qp", &self.qp)
            .field("send_credits", &self.send_credits())
            .field("recv_credits", &self.recv_credits())
            .finish()
    }
}

impl Lane {
    /// Makes a lane of a connected (RTS) queue pair. Refused, with the QP
    /// dropped, when it is not RTS, has requests outstanding (poll them
    /// first), or shares a completion queue with another QP (also one being
    /// created on another thread). Its CQs then serve the lane alone for
    /// good: creating another QP on them, or polling them other than through
    /// the lane, is refused. Completions that QPs dropped earlier left in
    /// them are discarded here, so that the lane's credits start from a CQ
    /// that holds none.
    pub fn new(qp: QueuePair) -> Result<Lane> {
        // The state the library moved it to (siw's ibv_query_qp reports
        // RESET for a QP RDMA CM connected).
        let state = qp.state();
        if state != QpState::Rts {
            return Err(Error::QpState {
                operation: "Lane::new",
                qp_num: qp.qp_num(),
                state,
                needed: "the QP must be RTS: connect it first",
            });
        }
        let (s, r) = qp.outstanding();
        if (s, r) != (0, 0) {
            return Err(Error::invalid(
                "Lane::new",
                format!(
                    "QP {:#x} has {s} send and {r} receive requests outstanding: poll their \
                     completions first",
                    qp.qp_num()
                ),
            ));
        }
        let ops = Ops::of(&qp)?;
        let (scq, rcq) = (qp.send_cq().clone(), qp.recv_cq().clone());
        let shared = scq.as_raw() == rcq.as_raw();
        dedicate(&qp, &scq, if shared { None } else { Some(&rcq) })?;
        drain(&ops, &scq);
        scq.drained();
        if !shared {
            drain(&ops, &rcq);
            rcq.drained();
        }

        Ok(Lane {
            raw_qp: Ptr(qp.as_raw()),
            ops,
            runs: Silent::new(scq.entries()),
            send: CqSide::new(&scq, "send completion"),
            recv: CqSide::new(&rcq, "receive completion"),
            shared,
            lkeys: RefCell::new(Vec::new()),
            qp,
        })
    }

    /// The QP number.
    pub fn qp_num(&self) -> u32 {
        self.qp.qp_num()
    }

    /// The QP's state as the device reports it (`ibv_query_qp`): RTS, or ERR
    /// after a failed request.
    pub fn query_state(&self) -> Result<QpState> {
        self.qp.query_state()
    }

    /// Completions the send CQ can still take before a send is refused (the
    /// receive CQ's, when it is the same): each send takes one, signaled or
    /// not (an unsignaled send's comes back when a later signaled send
    /// completes successfully; an unsignaled READ's or atomic's only when a
    /// later signaled READ or atomic does).
    pub fn send_credits(&self) -> u32 {
        self.send.credits.get()
    }

    /// Completions the receive CQ can still take before a receive is refused.
    pub fn recv_credits(&self) -> u32 {
        self.recv_side().credits.get()
    }

    /// The side receives complete on.
    #[inline]
    fn recv_side(&self) -> &CqSide {
        if self.shared { &self.send } else { &self.recv }
    }

    /// Checks a send request once (as [`QueuePair::post_send`] would) and
    /// binds its regions to the lane; the result is posted with
    /// [`PreparedSend::post`], as often as wanted. Up to two scatter/gather
    /// entries.
    ///
    /// The prepared request keeps the regions it names borrowed while it
    /// lives, so that nothing writes them while a post has the CPU copy them
    /// (inline data). To rewrite a source between posts, prepare it with
    /// [`Lane::prepare_send_mut`].
    pub fn prepare_send<'a>(&'a self, request: SendRequest<'a>) -> Result<PreparedSend<'a>> {
        self.prepare(&request)
    }

    /// [`Lane::prepare_send`] for a request whose source the caller rewrites
    /// between posts (write_lat's message counter): the prepared request
    /// holds `source` exclusively and lends it back through
    /// [`PreparedSendMut::source_mut`], so writes and posts (whose inline data
    /// the CPU copies) never overlap. `build` makes the request from the
    /// source; it may name no other region ([`Error::InvalidArgument`]).
    pub fn prepare_send_mut<'a, B: Send + Sync + 'static>(
        &'a self,
        source: &'a mut MemoryRegion<B>,
        build: impl FnOnce(&MemoryRegion<B>) -> Result<SendRequest<'_>>,
    ) -> Result<PreparedSendMut<'a, B>> {
        let send = {
            let request = build(source)?;
            if request.local.iter().any(|l| l.lkey() != source.lkey()) {
                return Err(Error::invalid(
                    "Lane::prepare_send_mut",
                    "the request names a region other than the source: prepare it with \
                     Lane::prepare_send",
                ));
            }
            self.prepare(&request)?
        };
        Ok(PreparedSendMut { send, source })
    }

    /// The checks and binding of a send request; the result borrows only
    /// the lane (the callers tie the request's regions to it).
    fn prepare(&self, request: &SendRequest<'_>) -> Result<PreparedSend<'_>> {
        self.qp.check_send(request)?;
        let (sges, n) = self.entries("Lane::prepare_send", stack_sges(&request.local))?;
        self.admit(&request.local);
        let mut wr = build_send_wr(request, request.wr_id);
        wr.num_sge = n;
        Ok(PreparedSend {
            lane: self,
            wr: Boxed::new(wr, sges),
            signaled: request.signaled,
            reads: request.op.writes_local(),
            imm: request.op.has_imm(),
        })
    }

    /// Checks a receive request once and binds its regions to the lane; the
    /// result is posted with [`PreparedRecv::post`], as often as wanted.
    pub fn prepare_recv(&self, request: RecvRequest<'_>) -> Result<PreparedRecv<'_>> {
        self.qp.check_recv(&request)?;
        let (sges, n) = self.entries("Lane::prepare_recv", stack_sges(&request.local))?;
        self.admit(&request.local);
        let wr = sys::ibv_recv_wr {
            wr_id: request.wr_id,
            next: std::ptr::null_mut(),
            sg_list: std::ptr::null_mut(),
            num_sge: n,
        };
        let lkey = match &request.local[..] {
            [one] => Some(one.lkey()),
            _ => None,
        };
        Ok(PreparedRecv {
            lane: self,
            wr: Boxed::new(wr, sges),
            lkey,
        })
    }

    /// Binds the regions of `local` to the QP, unless they already are.
    fn admit(&self, local: &[LocalSlice<'_>]) {
        let mut keys = self.lkeys.borrow_mut();
        if local.iter().all(|l| keys.contains(&l.lkey())) {
            return;
        }
        self.qp.bind(local);
        for l in local {
            if !keys.contains(&l.lkey()) {
                keys.push(l.lkey());
            }
        }
    }

    fn entries(
        &self,
        what: &'static str,
        sges: Option<([sys::ibv_sge; 2], i32)>,
    ) -> Result<([sys::ibv_sge; 2], i32)> {
        sges.ok_or_else(|| {
            Error::invalid(
                what,
                "a prepared request takes at most two scatter/gather entries: post longer lists \
                 with QueuePair::post_send_batch",
            )
        })
    }

    /// Polls up to `out.len()` send completions without waiting; returns how
    /// many were written to the front of `out`. With one CQ for both queues,
    /// receive completions come here too.
    #[inline]
    pub fn poll_send(&self, out: &mut [Completion]) -> Result<usize> {
        self.poll(&self.send, true, out)
    }

    /// Polls up to `out.len()` receive completions without waiting; returns
    /// how many (the same CQ as [`Lane::poll_send`] when it is shared).
    #[inline]
    pub fn poll_recv(&self, out: &mut [Completion]) -> Result<usize> {
        self.poll(self.recv_side(), self.shared, out)
    }

    /// Polls `side`'s CQ; `sends` when it is the send CQ.
    #[inline]
    fn poll(&self, side: &CqSide, sends: bool, out: &mut [Completion]) -> Result<usize> {
        let want = out.len().min(i32::MAX as usize) as i32;
        // SAFETY: the provider's poll_cq (Ops) on a live CQ of its context
        // (the QP we own holds it); `out` has room for `want` entries of
        // ibv_wc (Completion is repr(transparent)); the CQ serves this lane
        // alone, so no other thread polls it.
        let n = unsafe { (self.ops.poll_cq)(side.cq.0, want, out.as_mut_ptr().cast()) };
        if n <= 0 {
            return if n == 0 { Ok(0) } else { Err(poll_error(n)) };
        }
        give_polled(side, &self.runs, sends, self.shared, &out[..n as usize]);
        Ok(n as usize)
    }
}

/// The credit a send takes when posted, signaled or not (`reads`: a READ or
/// atomic); a signaled one closes the runs of unsignaled requests before it
/// that its success proves done ([`Silent`]).
#[inline]
fn take_send(
    send: &CqSide,
    runs: &Silent,
    signaled: bool,
    reads: bool,
    qp_num: impl Fn() -> u32,
) -> Result<()> {
    send.take(qp_num)?;
    if !signaled {
        runs.unsignaled(reads);
    } else if runs.open.get() != 0 {
        runs.close(reads, send.taken());
    }
    Ok(())
}

/// The credits `polled` (completions of `side`'s CQ, `sends` when it is the
/// send CQ, `shared` when receives complete there too) give back.
#[inline]
fn give_polled(side: &CqSide, runs: &Silent, sends: bool, shared: bool, polled: &[Completion]) {
    // Each completion is one request's, which took a credit.
    side.give(polled.len() as u32);
    if sends && runs.waiting() {
        side.give(runs.retire(polled, shared));
    }
}

/// Marks the lane's CQ(s) as its own: checked for every CQ before any is
/// marked, so that a refusal leaves all as they were.
fn dedicate(qp: &QueuePair, scq: &CompletionQueue, rcq: Option<&CompletionQueue>) -> Result<()> {
    let generation = qp.generation();
    // What the QP reserved on each CQ (both queues on a shared one).
    let caps = qp.requested();
    let (send, recv) = (u64::from(caps.max_send_wr), u64::from(caps.max_recv_wr));
    let own_send = if rcq.is_some() { send } else { send + recv };
    scq.dedicate(generation, own_send, "send", false)?;
    if let Some(r) = rcq {
        r.dedicate(generation, recv, "receive", false)?;
    }
    scq.dedicate(generation, own_send, "send", true)?;
    if let Some(r) = rcq
        && let Err(e) = r.dedicate(generation, recv, "receive", true)
    {
        // Another QP was created on the receive CQ between the check and
        // now: leave the send CQ as it was (the refused QP is dropped).
        scq.undedicate();
        return Err(e);
    }
    Ok(())
}

/// Discards what a newly dedicated CQ holds: completions of QPs dropped
/// earlier (the lane's QP has nothing outstanding, checked, and the CQ
/// serves no other). Their requests' memory was released with their QP.
fn drain(ops: &Ops, cq: &CompletionQueue) {
    let mut wc = [sys::ibv_wc::default(); 16];
    loop {
        // SAFETY: the provider's poll_cq on a live CQ (the caller holds
        // it) that serves the lane alone from now on; `wc` has room for 16.
        let n = unsafe { (ops.poll_cq)(cq.as_raw(), wc.len() as i32, wc.as_mut_ptr()) };
        if n < wc.len() as i32 {
            return;
        }
    }
}

/// The fields of a work request (send or receive) that a prepared request
/// sets after it was built.
trait RawWr {
    fn wr_id(&mut self) -> &mut u64;
    fn sg_list(&mut self) -> &mut *mut sys::ibv_sge;
    fn num_sge(&mut self) -> &mut i32;
}

impl RawWr for sys::ibv_send_wr {
    fn wr_id(&mut self) -> &mut u64 {
        &mut self.wr_id
    }
    fn sg_list(&mut self) -> &mut *mut sys::ibv_sge {
        &mut self.sg_list
    }
    fn num_sge(&mut self) -> &mut i32 {
        &mut self.num_sge
    }
}

impl RawWr for sys::ibv_recv_wr {
    fn wr_id(&mut self) -> &mut u64 {
        &mut self.wr_id
    }
    fn sg_list(&mut self) -> &mut *mut sys::ibv_sge {
        &mut self.sg_list
    }
    fn num_sge(&mut self) -> &mut i32 {
        &mut self.num_sge
    }
}

/// A work request and its scatter/gather entries.
struct Wr<W> {
    wr: W,
    sges: [sys::ibv_sge; 2],
}

/// A [`Wr`] at a fixed address (from `Box::leak`), so that `sg_list` is set
/// once, when prepared; reached through its raw pointer only (the device
/// reads it through pointers into it), freed on drop.
struct Boxed<W>(NonNull<Wr<W>>);

impl<W: RawWr> Boxed<W> {
    fn new(wr: W, sges: [sys::ibv_sge; 2]) -> Boxed<W> {
        let b = Boxed(NonNull::from(Box::leak(Box::new(Wr { wr, sges }))));
        b.link();
        b
    }

    /// Points `sg_list` at the request's own entries (null for none).
    fn link(&self) {
        let p = self.0.as_ptr();
        // SAFETY: our live allocation; no post is in progress (posts take
        // the prepared request by &mut, as every caller of link does).
        unsafe {
            let entries = (&raw mut (*p).sges).cast::<sys::ibv_sge>();
            let n = *(*p).wr.num_sge();
            *(*p).wr.sg_list() = if n == 0 {
                std::ptr::null_mut()
            } else {
                entries
            };
        }
    }

    /// The request, for the post call.
    fn wr(&self) -> *mut W {
        // SAFETY: our live allocation (a raw place, no reference made).
        unsafe { &raw mut (*self.0.as_ptr()).wr }
    }

    fn set_wr_id(&mut self, wr_id: u64) {
        // SAFETY: our allocation; no post is in progress (&mut self).
        unsafe { *(*self.wr()).wr_id() = wr_id };
    }

    fn wr_id(&self) -> u64 {
        // SAFETY: our allocation, read while no post is in progress (the
        // posts need &mut of the prepared request that owns it).
        unsafe { *(*self.wr()).wr_id() }
    }

    /// Makes `sge` the request's one entry.
    fn set_entry(&mut self, sge: sys::ibv_sge) {
        // SAFETY: our allocation; no post is in progress (&mut self).
        unsafe {
            (*self.0.as_ptr()).sges[0] = sge;
            *(*self.wr()).num_sge() = 1;
        }
        self.link();
    }
}

impl<W> Drop for Boxed<W> {
    fn drop(&mut self) {
        // SAFETY: from Box::leak in Boxed::new, freed once; the device only
        // reads a request during the post call that passes it.
        drop(unsafe { Box::from_raw(self.0.as_ptr()) });
    }
}

/// A send request checked once, posted with [`PreparedSend::post`]. Borrows
/// its lane and the regions it names.
pub struct PreparedSend<'l> {
    lane: &'l Lane,
    wr: Boxed<sys::ibv_send_wr>,
    signaled: bool,
    /// A READ or atomic: the device writes its local memory ([`Silent`]).
    reads: bool,
    imm: bool,
}

impl fmt::Debug for PreparedSend<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PreparedSend")
            .field("qp_num", &format_args!("{:#x}", self.lane.qp_num()))
            .field("wr_id", &self.wr_id())
            .field("signaled", &self.signaled)
            .finish()
    }
}

impl PreparedSend<'_> {
    /// Posts the request. It takes one of the send CQ's credits, signaled or
    /// not ([`Error::QueueFull`] when none is left: poll first; an unsignaled
    /// send's credit comes back with the next signaled send's success, an
    /// unsignaled READ's or atomic's with the next signaled READ's or
    /// atomic's: signal one now and then when posting READs); a full send queue is the provider's error (`ENOMEM`: poll, or signal
    /// more often).
    #[inline]
    pub fn post(&mut self) -> Result<()> {
        let lane = self.lane;
        take_send(&lane.send, &lane.runs, self.signaled, self.reads, || {
            lane.qp.qp_num()
        })?;
        let mut bad: *mut sys::ibv_send_wr = std::ptr::null_mut();
        // SAFETY: the provider's post_send (Ops) on a live QP in RTS that
        // only this lane posts on; the request and the entries its sg_list
        // points to live in their own allocation across the call; the memory
        // they name was checked when prepared and is bound to the lane, so it
        // stays registered and allocated until the QP is destroyed.
        let rc = unsafe { (lane.ops.post_send)(lane.raw_qp.0, self.wr.wr(), &mut bad) };
        if rc == 0 {
            return Ok(());
        }
        self.failed(rc)
    }

    #[cold]
    fn failed(&self, rc: i32) -> Result<()> {
        if !self.signaled {
            self.lane.runs.unsignaled_failed(self.reads);
        }
        // A signaled send that closed a run and then failed to post leaves
        // the run waiting for one more success than needed: later, never
        // early.
        self.lane.send.give(1);
        Err(self.lane.qp.post_send_error(rc, self.imm, 0, 1))
    }

    /// Changes the wr_id the next posts carry.
    pub fn set_wr_id(&mut self, wr_id: u64) {
        self.wr.set_wr_id(wr_id);
    }

    /// The wr_id its completions carry.
    pub fn wr_id(&self) -> u64 {
        self.wr.wr_id()
    }
}

/// A send request prepared with [`Lane::prepare_send_mut`]: it holds its
/// source region exclusively, and lends it back between posts.
pub struct PreparedSendMut<'a, B> {
    send: PreparedSend<'a>,
    source: &'a mut MemoryRegion<B>,
}

impl<B> fmt::Debug for PreparedSendMut<'_, B> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PreparedSendMut")
            .field("send", &self.send)
            .field("source", &self.source)
            .finish()
    }
}

impl<B> PreparedSendMut<'_, B> {
    /// Posts the request ([`PreparedSend::post`]).
    #[inline]
    pub fn post(&mut self) -> Result<()> {
        self.send.post()
    }

    /// The source region, e.g. to read it by copies.
    pub fn source(&self) -> &MemoryRegion<B> {
        self.source
    }

    /// The source region, writable between posts (`write_at`, `write_byte`,
    /// `fill`; for GPU memory `copy_from_host`): `&mut self` keeps a post
    /// from copying it meanwhile. Lent as a [`SourceMut`], never as
    /// `&mut MemoryRegion`, which could be swapped for another region.
    #[inline]
    pub fn source_mut(&mut self) -> SourceMut<'_, B> {
        SourceMut(self.source)
    }

    /// Changes the wr_id the next posts carry.
    pub fn set_wr_id(&mut self, wr_id: u64) {
        self.send.set_wr_id(wr_id);
    }

    /// The wr_id its completions carry.
    pub fn wr_id(&self) -> u64 {
        self.send.wr_id()
    }
}

/// The source region of a [`PreparedSendMut`], lent for writing between
/// posts: it reads as the region ([`std::ops::Deref`]) and writes through
/// its own methods. It is never a `&mut MemoryRegion`: `std::mem::swap`
/// could then trade the bound source for another region, and the one moved
/// out be written on another thread while a post has the CPU copy it
/// (inline data). A compile error: `erdma/tests/ui/source_swapped_out.rs`.
pub struct SourceMut<'s, B>(pub(crate) &'s mut MemoryRegion<B>);

impl<B> fmt::Debug for SourceMut<'_, B> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("SourceMut").field(&*self.0).finish()
    }
}

impl<B> std::ops::Deref for SourceMut<'_, B> {
    type Target = MemoryRegion<B>;

    fn deref(&self) -> &MemoryRegion<B> {
        self.0
    }
}

impl<B: HostMemory> SourceMut<'_, B> {
    /// [`MemoryRegion::write_at`].
    pub fn write_at(&mut self, offset: usize, src: &[u8]) -> Result<()> {
        self.0.write_at(offset, src)
    }

    /// [`MemoryRegion::write_byte`].
    #[inline]
    pub fn write_byte(&mut self, offset: usize, byte: u8) -> Result<()> {
        self.0.write_byte(offset, byte)
    }

    /// [`MemoryRegion::fill`].
    pub fn fill(&mut self, byte: u8) {
        self.0.fill(byte)
    }
}

/// A receive request checked once, posted with [`PreparedRecv::post`].
/// Borrows its lane.
pub struct PreparedRecv<'l> {
    lane: &'l Lane,
    wr: Boxed<sys::ibv_recv_wr>,
    /// The key of the region of its one entry, checked and bound: another
    /// slice of that region needs only its length checked.
    lkey: Option<u32>,
}

impl fmt::Debug for PreparedRecv<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PreparedRecv")
            .field("qp_num", &format_args!("{:#x}", self.lane.qp_num()))
            .field("wr_id", &self.wr_id())
            .finish()
    }
}

impl PreparedRecv<'_> {
    /// Posts the receive; it takes one of the receive CQ's credits
    /// ([`Error::QueueFull`] when none is left: poll first).
    #[inline]
    pub fn post(&mut self) -> Result<()> {
        let lane = self.lane;
        lane.recv_side().take(|| lane.qp.qp_num())?;
        let mut bad: *mut sys::ibv_recv_wr = std::ptr::null_mut();
        // SAFETY: as in PreparedSend::post (receives need INIT or later; the
        // lane's QP was RTS when made).
        let rc = unsafe { (lane.ops.post_recv)(lane.raw_qp.0, self.wr.wr(), &mut bad) };
        if rc == 0 {
            return Ok(());
        }
        self.failed(rc)
    }

    #[cold]
    fn failed(&self, rc: i32) -> Result<()> {
        self.lane.recv_side().give(1);
        Error::check("ibv_post_recv", rc)
    }

    /// Points the receive at another buffer (one entry), with the checks of
    /// [`Lane::prepare_recv`]; its region is bound to the lane if it was not
    /// yet. This is how a ring of receive slots is walked.
    #[inline]
    pub fn set_local(&mut self, local: LocalSlice<'_>) -> Result<()> {
        // The same region as now (a live region's key is its own): its PD
        // and access were checked, only the length is new.
        let sge = match local.sge() {
            Some(sge) if self.lkey == Some(sge.lkey) => sge,
            _ => self.admit_other(local)?,
        };
        self.wr.set_entry(sge);
        Ok(())
    }

    /// [`PreparedRecv::set_local`] to another region: every check, and the
    /// binding.
    #[cold]
    fn admit_other(&mut self, local: LocalSlice<'_>) -> Result<sys::ibv_sge> {
        let request = RecvRequest::new([local]);
        self.lane.qp.check_recv(&request)?;
        self.lane.admit(&request.local);
        let Some(sge) = local.sge() else {
            unreachable!("checked: under 4 GiB");
        };
        self.lkey = Some(sge.lkey);
        Ok(sge)
    }

    /// Changes the wr_id the next posts carry.
    pub fn set_wr_id(&mut self, wr_id: u64) {
        self.wr.set_wr_id(wr_id);
    }

    /// The wr_id its completions carry.
    pub fn wr_id(&self) -> u64 {
        self.wr.wr_id()
    }
}

/// One completion of a lane: the provider's `ibv_wc` as it was written,
/// decoded only by the accessors asked for (no translation per poll).
#[derive(Clone, Copy, Default)]
#[repr(transparent)]
pub struct Completion(sys::ibv_wc);

impl fmt::Debug for Completion {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Completion")
            .field("wr_id", &self.wr_id())
            .field("status", &self.status())
            .field("opcode", &self.opcode())
            .field("byte_len", &self.byte_len())
            .field("imm_data", &self.imm_data())
            .finish()
    }
}

impl Completion {
    /// The wr_id of the request (as prepared, or set since).
    #[inline]
    pub fn wr_id(&self) -> u64 {
        self.0.wr_id
    }

    /// Whether it succeeded.
    #[inline]
    pub fn is_ok(&self) -> bool {
        self.0.status == sys::IBV_WC_SUCCESS
    }

    /// Outcome.
    pub fn status(&self) -> WcStatus {
        WcStatus::from_raw(self.0.status)
    }

    /// What completed (only meaningful on success).
    pub fn opcode(&self) -> WcOpcode {
        WcOpcode::from_raw(self.0.opcode)
    }

    /// Bytes received (receives) or transferred (reads, atomics).
    pub fn byte_len(&self) -> u32 {
        self.0.byte_len
    }

    /// Immediate data (host order) of a SEND_WITH_IMM or WRITE_WITH_IMM.
    pub fn imm_data(&self) -> Option<u32> {
        (self.0.wc_flags & sys::IBV_WC_WITH_IMM != 0)
            // SAFETY: with IBV_WC_WITH_IMM the union holds imm_data.
            .then(|| u32::from_be(unsafe { self.0.__bindgen_anon_1.imm_data }))
    }

    /// Provider-specific error code.
    pub fn vendor_err(&self) -> u32 {
        self.0.vendor_err
    }

    /// `Ok(self)` on success, else [`Error::Completion`] with the status and
    /// its hint.
    #[inline]
    pub fn ok(&self) -> Result<&Completion> {
        if self.is_ok() {
            return Ok(self);
        }
        Err(self.error())
    }

    #[cold]
    fn error(&self) -> Error {
        Error::Completion {
            status: self.status(),
            wr_id: self.0.wr_id,
            qp_num: self.0.qp_num,
            vendor_err: self.0.vendor_err,
        }
    }
}

#[cfg(test)]
mod tests {
    //! The prepared request's storage, without a device (also under Miri:
    //! `cargo +nightly miri test -p erdma --lib lane`).
    use super::*;

    fn sge(addr: u64, length: u32) -> sys::ibv_sge {
        sys::ibv_sge {
            addr,
            length,
            lkey: 7,
        }
    }

    #[test]
    fn sg_list_points_at_its_own_entries_after_moves() {
        let wr = sys::ibv_recv_wr {
            wr_id: 5,
            num_sge: 1,
            ..Default::default()
        };
        let b = Boxed::new(wr, [sge(0x1000, 64), sge(0, 0)]);
        let mut moved = [b]; // the handle moves, the request does not
        let b = &mut moved[0];
        // SAFETY: reading our own allocation as a post would.
        let read = |b: &Boxed<sys::ibv_recv_wr>| unsafe {
            let w = &*b.wr();
            (w.wr_id, w.num_sge, *w.sg_list)
        };
        let (id, n, first) = read(b);
        assert_eq!((id, n, first.addr, first.length), (5, 1, 0x1000, 64));
        b.set_wr_id(9);
        b.set_entry(sge(0x2000, 32));
        let (id, n, first) = read(b);
        assert_eq!((id, n, first.addr, first.length), (9, 1, 0x2000, 32));
        assert_eq!(b.wr_id(), 9);
    }

    #[test]
    fn no_entries_is_a_null_list() {
        let b = Boxed::new(sys::ibv_send_wr::default(), [sge(0, 0); 2]);
        // SAFETY: reading our own allocation.
        assert!(unsafe { (*b.wr()).sg_list.is_null() });
    }

    #[test]
    fn a_default_completion_is_a_zeroed_success() {
        let c = Completion::default();
        assert!(c.is_ok() && c.ok().is_ok());
        assert_eq!((c.wr_id(), c.byte_len(), c.imm_data()), (0, 0, None));
    }

    /// A send CQ side of `limit` credits, without a device.
    fn side(limit: u32) -> CqSide {
        CqSide {
            cq: Ptr(std::ptr::null_mut()),
            credits: Cell::new(limit),
            limit,
            name: "send completion",
        }
    }

    fn wc(status: u32, opcode: u32) -> Completion {
        Completion(sys::ibv_wc {
            status,
            opcode,
            ..Default::default()
        })
    }

    fn ok_send() -> Completion {
        wc(sys::IBV_WC_SUCCESS, sys::IBV_WC_RDMA_WRITE)
    }

    fn flushed() -> Completion {
        wc(sys::IBV_WC_WR_FLUSH_ERR, 0)
    }

    #[test]
    fn unsignaled_sends_hold_credits_until_a_later_signaled_one_succeeds() {
        let (s, runs) = (side(8), Silent::new(8));
        let post = |signaled| take_send(&s, &runs, signaled, false, || 1);
        post(false).unwrap();
        post(false).unwrap();
        post(true).unwrap(); // closes the run of 2
        post(false).unwrap();
        post(true).unwrap(); // closes the run of 1
        assert_eq!(s.credits.get(), 3);
        give_polled(&s, &runs, true, false, &[ok_send()]);
        assert_eq!(
            s.credits.get(),
            6,
            "the first signaled send and its run of 2"
        );
        give_polled(&s, &runs, true, false, &[ok_send()]);
        assert_eq!(
            (s.credits.get(), runs.held(), runs.sends.ahead.get()),
            (8, 0, 0)
        );
    }

    #[test]
    fn every_post_takes_a_credit_and_none_is_lent_twice() {
        let (s, runs) = (side(4), Silent::new(4));
        for _ in 0..4 {
            take_send(&s, &runs, false, false, || 1).unwrap();
        }
        let e = take_send(&s, &runs, true, false, || 9).unwrap_err();
        assert!(matches!(e, Error::QueueFull { qp_num: 9, .. }), "{e}");
        assert_eq!(runs.held(), 4);
    }

    #[test]
    fn flushed_runs_come_back_through_their_own_completions_only() {
        // The QP went to error: each unsignaled send flushes, one completion
        // each; the signaled send after them flushes too, and proves nothing.
        let (s, runs) = (side(8), Silent::new(8));
        for _ in 0..3 {
            take_send(&s, &runs, false, false, || 1).unwrap();
        }
        give_polled(&s, &runs, true, false, &[flushed(), flushed(), flushed()]);
        take_send(&s, &runs, true, false, || 1).unwrap();
        give_polled(&s, &runs, true, false, &[flushed()]);
        assert_eq!(s.credits.get(), 8);
        // Only a success retires a run, and none comes on a QP in error: the
        // error forgets the runs waiting (their credits came back above).
        assert_eq!((runs.sends.closed.borrow().len(), runs.held()), (0, 0));
    }

    #[test]
    fn on_a_shared_cq_receives_only_delay_a_run() {
        let (s, runs) = (side(8), Silent::new(8));
        s.take(|| 1).unwrap(); // a receive outstanding
        take_send(&s, &runs, false, false, || 1).unwrap();
        take_send(&s, &runs, true, false, || 1).unwrap();
        // The bound counts the receive as a signaled send: two successes.
        assert_eq!(
            runs.sends.closed.borrow()[0],
            Run {
                after: 2,
                credits: 1
            }
        );
        give_polled(&s, &runs, true, true, &[ok_send()]);
        assert_eq!(s.credits.get(), 6, "the run waits (later, never early)");
        let recv = wc(sys::IBV_WC_SUCCESS, sys::IBV_WC_RECV);
        give_polled(&s, &runs, false, true, &[recv]);
        assert_eq!(s.credits.get(), 7, "a receive proves no send done");
        take_send(&s, &runs, true, false, || 1).unwrap();
        give_polled(&s, &runs, true, true, &[ok_send()]);
        assert_eq!(s.credits.get(), 8);
    }

    #[test]
    fn a_lane_posting_on_a_qp_in_error_keeps_no_runs_without_end() {
        let (s, runs) = (side(4), Silent::new(4));
        take_send(&s, &runs, false, false, || 1).unwrap();
        take_send(&s, &runs, true, false, || 1).unwrap();
        give_polled(&s, &runs, true, false, &[flushed(), flushed()]);
        for _ in 0..if cfg!(miri) { 100 } else { 10_000 } {
            take_send(&s, &runs, false, false, || 1).unwrap();
            take_send(&s, &runs, true, false, || 1).unwrap();
            assert!(runs.sends.closed.borrow().len() <= 1);
            give_polled(&s, &runs, true, false, &[flushed(), flushed()]);
        }
        assert_eq!((s.credits.get(), runs.held()), (4, 0));
    }

    fn ok_read() -> Completion {
        wc(sys::IBV_WC_SUCCESS, sys::IBV_WC_RDMA_READ)
    }

    /// Issue 34 hole 1, on siw: an unsignaled READ, then a signaled WRITE
    /// that completes when it is sent, before the READ's response: its
    /// success must not give the READ's credit back (a READ that then fails
    /// adds a completion); a later signaled READ's success does.
    #[test]
    fn a_write_proves_no_earlier_read_done() {
        let (s, runs) = (side(8), Silent::new(8));
        take_send(&s, &runs, false, true, || 1).unwrap(); // unsignaled READ
        take_send(&s, &runs, false, false, || 1).unwrap(); // unsignaled WRITE
        take_send(&s, &runs, true, false, || 1).unwrap(); // signaled WRITE
        give_polled(&s, &runs, true, false, &[ok_send()]);
        assert_eq!(
            (s.credits.get(), runs.reads.held.get()),
            (7, 1),
            "the WRITEs' credits back, the READ's kept"
        );
        take_send(&s, &runs, true, true, || 1).unwrap(); // signaled READ
        take_send(&s, &runs, true, false, || 1).unwrap(); // signaled WRITE
        // The WRITE completes first (sent), the READs still in flight.
        give_polled(&s, &runs, true, false, &[ok_send()]);
        assert_eq!(s.credits.get(), 6, "a WRITE's success proves no READ done");
        give_polled(&s, &runs, true, false, &[ok_read()]);
        assert_eq!((s.credits.get(), runs.held()), (8, 0));
    }

    /// A send queue as siw runs it: requests are sent in order; a WRITE or
    /// SEND completes when sent, a READ when its response has landed
    /// (responses come in order, after the request was sent), so a later
    /// WRITE can complete before an earlier READ. The first failure moves
    /// the QP to error and flushes every request after it; completions for
    /// signaled successes and for every failure.
    #[derive(Default)]
    struct Device {
        /// Not yet sent: (signaled, READ).
        sq: VecDeque<(bool, bool)>,
        /// READs sent, waiting for their responses: signaled.
        orq: VecDeque<bool>,
        cq: VecDeque<Completion>,
        error: bool,
    }

    impl Device {
        fn send(&mut self, fail: bool) {
            let Some((signaled, read)) = self.sq.pop_front() else {
                return;
            };
            if self.error || fail {
                self.error = true;
                self.cq.push_back(flushed());
            } else if read {
                self.orq.push_back(signaled);
            } else if signaled {
                self.cq.push_back(ok_send());
            }
        }

        fn respond(&mut self, fail: bool) {
            let Some(signaled) = self.orq.pop_front() else {
                return;
            };
            if self.error || fail {
                self.error = true;
                self.cq.push_back(flushed());
            } else if signaled {
                self.cq.push_back(ok_read());
            }
        }

        fn idle(&self) -> bool {
            self.sq.is_empty() && self.orq.is_empty()
        }
    }

    #[test]
    fn credits_cover_every_completion_the_device_can_still_write() {
        let mut x = 0x2545_f491_4f6c_dd1du64;
        let mut rand = move |n: u64| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x % n
        };
        let steps = if cfg!(miri) { 200 } else { 20_000 };
        for case in 0..if cfg!(miri) { 4 } else { 200 } {
            let limit = 1 + rand(16) as u32;
            let (s, runs) = (side(limit), Silent::new(limit));
            let mut dev = Device::default();
            let fail_at = rand(4 * steps);
            // Some cases post no READs: the WRITE/SEND runs alone.
            let reads = case % 4 != 0;
            for step in 0..steps {
                match rand(4) {
                    0 => {
                        let signaled = rand(3) == 0;
                        let read = reads && rand(3) == 0;
                        if take_send(&s, &runs, signaled, read, || 1).is_ok() {
                            dev.sq.push_back((signaled, read));
                        }
                    }
                    1 => dev.send(step == fail_at),
                    2 => dev.respond(step == fail_at),
                    _ => {
                        let k = (1 + rand(4) as usize).min(dev.cq.len());
                        let polled: Vec<Completion> = dev.cq.drain(..k).collect();
                        give_polled(&s, &runs, true, false, &polled);
                    }
                }
                // In the worst case every request not yet finished completes
                // (an error or a flush): the CQ must have room for all.
                let can_come = (dev.cq.len() + dev.sq.len() + dev.orq.len()) as u32;
                assert!(
                    can_come <= s.taken(),
                    "case {case} step {step}: {can_come} completions can come, {} credits lent",
                    s.taken()
                );
            }
            if !dev.error {
                // Drained, and one signaled READ to close the last runs.
                if take_send(&s, &runs, true, true, || 1).is_ok() {
                    dev.sq.push_back((true, true));
                }
                while !dev.idle() {
                    dev.send(false);
                    dev.respond(false);
                }
                let polled: Vec<Completion> = dev.cq.drain(..).collect();
                give_polled(&s, &runs, true, false, &polled);
                if runs.open.get() == 0 {
                    assert_eq!(s.credits.get(), limit, "case {case}: every credit back");
                }
            }
        }
    }
}
