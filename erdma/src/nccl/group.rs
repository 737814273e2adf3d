//! NCCL group calls: several operations (several GPUs of one thread, aggregated
//! collectives, send/recv pairs) launched as one.

use std::cell::{Cell, RefCell};
use std::marker::PhantomData;

use smallvec::SmallVec;

use super::comm::{Comm, wait_ready};
use super::error::{NcclError, Result, ResultCode};
use super::library::Nccl;
use super::types::{NcclType, RedOp};
use crate::cuda::{DeviceBuffer, Stream};

thread_local! {
    /// Groups open on this thread through [`Group`] (NCCL's own depth is thread-local too).
    static DEPTH: Cell<u32> = const { Cell::new(0) };
    /// Whether a [`Group::start`] group (the one that lends buffers to its operations) is
    /// open on this thread. It is always the outermost: it starts only at depth 0, and no
    /// other group starts or ends inside it but the library's own (raw operations).
    static GUARDED: Cell<bool> = const { Cell::new(false) };
}

/// Whether a [`Group`] is open on this thread.
pub(crate) fn in_group() -> bool {
    DEPTH.with(|d| d.get() > 0)
}

/// How a group ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GroupStatus {
    /// Everything was enqueued (always the case with blocking communicators).
    Complete,
    /// Nonblocking communicators are still setting up: call
    /// [`wait_ready`](super::wait_ready) on the communicators of the group.
    InProgress,
}

/// An open `ncclGroupStart` ... `ncclGroupEnd` section on this thread. Operations issued
/// while it is open are only enqueued at [`Group::end`]. Dropping it without `end` still
/// ends the group (errors are then lost).
///
/// Groups do not nest: NCCL launches a nested group's operations at the *outermost*
/// `ncclGroupEnd`, after an inner group's borrows would have ended, so [`Group::start`] is
/// refused while any group is open on the thread, and no unguarded start or end runs inside
/// it. A group's end returns only when its operations are enqueued: with nonblocking
/// communicators it waits until they leave `ncclInProgress` (within the longest of their
/// [`Config::timeout`](super::Config::timeout)s; on a timeout or an error they are aborted,
/// which drops what they had recorded), so the borrows last until NCCL is done with them. A
/// group that is never ended (`mem::forget`) keeps the thread in it: nothing ends it, so
/// NCCL never launches what it recorded, and the communicators it used are not destroyed
/// while it is open (their drop leaks them).
///
/// Safe operations are recorded through the group ([`Group::all_reduce`], [`Group::send`],
/// [`Group::recv`]), which keeps their buffers, streams and communicators borrowed for `'g`,
/// until the group ends: NCCL launches them only then. The safe [`Comm`] collectives refuse
/// to run while a group is open on the thread.
#[must_use = "operations in a group only start when the group ends"]
pub struct Group<'g> {
    nccl: &'static Nccl,
    open: bool,
    /// Started by [`Group::start`] (the outermost, lending buffers), not by the library for
    /// a raw operation.
    guarded: bool,
    /// The communicators operations were recorded on (to wait for at the end).
    comms: RefCell<SmallVec<[&'g Comm; 4]>>,
    // NCCL's group state is per thread: the guard must end on the thread that started it.
    _not_send: PhantomData<*const ()>,
    // Invariant in 'g: what an operation borrowed for 'g stays borrowed until the group ends
    // (a covariant 'g could shrink to each call).
    _borrows: PhantomData<fn(&'g ()) -> &'g ()>,
}

impl<'g> Group<'g> {
    /// `ncclGroupStart`; [`NcclError::InvalidArgument`] while a group is already open on this
    /// thread (guarded or not): groups do not nest (see [`Group`]).
    pub fn start(nccl: &'static Nccl) -> Result<Group<'g>> {
        if in_group() {
            return Err(NcclError::invalid(
                "ncclGroupStart: a group is already open on this thread, and groups do not \
                 nest: NCCL would launch this group's operations only at the outer group's end, \
                 after their buffers' borrows ended. End the open group first",
            ));
        }
        let mut g = Group::open(nccl)?;
        g.guarded = true;
        GUARDED.with(|c| c.set(true));
        Ok(g)
    }

    /// `ncclGroupStart` for raw operations (several `*_raw` calls launched as one), also
    /// inside another group, where [`Group::start`] is refused. Its end returns
    /// [`GroupStatus::InProgress`] as NCCL does, without waiting.
    ///
    /// # Safety
    ///
    /// Nested in another group, its operations are launched only at the outermost group's
    /// end: every operation recorded through it, also through its safe methods
    /// ([`Group::all_reduce`], [`Group::send`], [`Group::recv`]), must keep its buffers,
    /// streams and communicators alive until that end has enqueued it and the work has
    /// completed on its stream (the contract of the `*_raw` operations).
    pub unsafe fn start_nested(nccl: &'static Nccl) -> Result<Group<'g>> {
        if GUARDED.with(Cell::get) {
            return Err(NcclError::invalid(
                "ncclGroupStart: a Group is open on this thread; it must stay the outermost \
                 group, with no group but the library's own inside",
            ));
        }
        Group::open(nccl)
    }

    /// [`Group::start_nested`] for the library's raw operations, also inside a Group:
    /// the raw operation's contract keeps its memory valid until the work completes.
    pub(crate) fn start_raw(nccl: &'static Nccl) -> Result<Group<'g>> {
        Group::open(nccl)
    }

    fn open(nccl: &'static Nccl) -> Result<Group<'g>> {
        // SAFETY: no arguments; the matching ncclGroupEnd is guaranteed by Drop.
        let rc = unsafe { (nccl.api.ncclGroupStart)() };
        nccl.check("ncclGroupStart", rc, std::ptr::null_mut())?;
        DEPTH.with(|d| d.set(d.get() + 1));
        Ok(Group {
            nccl,
            open: true,
            guarded: false,
            comms: RefCell::new(SmallVec::new()),
            _not_send: PhantomData,
            _borrows: PhantomData,
        })
    }

    /// Remembers `comm` as one to wait for at the end.
    fn uses(&self, comm: &'g Comm) {
        let mut comms = self.comms.borrow_mut();
        if !comms.iter().any(|c| std::ptr::eq(*c, comm)) {
            comms.push(comm);
        }
    }

    /// Records an all-reduce of all of `send` into `recv` (as [`Comm::all_reduce`]); the
    /// buffers stay borrowed until the group ends.
    pub fn all_reduce<T: NcclType>(
        &self,
        comm: &'g Comm,
        send: &'g DeviceBuffer<T>,
        recv: &'g mut DeviceBuffer<T>,
        op: RedOp,
        stream: &'g Stream,
    ) -> Result<()> {
        self.uses(comm);
        comm.enqueue_all_reduce(send, recv, op, stream)
    }

    /// Records a send of all of `buf` to `peer` (as [`Comm::send`]); the buffer stays
    /// borrowed until the group ends.
    pub fn send<T: NcclType>(
        &self,
        comm: &'g Comm,
        buf: &'g DeviceBuffer<T>,
        peer: usize,
        stream: &'g Stream,
    ) -> Result<()> {
        self.uses(comm);
        comm.enqueue_send(buf, peer, stream)
    }

    /// Records a receive of `buf.len()` elements from `peer` (as [`Comm::recv`]); the
    /// buffer stays borrowed until the group ends.
    pub fn recv<T: NcclType>(
        &self,
        comm: &'g Comm,
        buf: &'g mut DeviceBuffer<T>,
        peer: usize,
        stream: &'g Stream,
    ) -> Result<()> {
        self.uses(comm);
        comm.enqueue_recv(buf, peer, stream)
    }

    /// `ncclGroupEnd`: launches the grouped operations, and returns once they are
    /// enqueued (with nonblocking communicators, after waiting for them: see [`Group`]).
    /// Always [`GroupStatus::Complete`] for a group from [`Group::start`].
    pub fn end(mut self) -> Result<GroupStatus> {
        self.finish()
    }

    /// `ncclGroupStart` without a guard, for a caller that opens a group in one function
    /// and closes it in another (a benchmark loop aggregating iterations, a trait object
    /// that must stay `Send`). Pair it with [`Group::end_unguarded`] on the same thread;
    /// prefer [`Group::start`] otherwise. Unbalanced calls are NCCL usage errors, not
    /// memory errors: NCCL rejects an end without a start (`ncclInvalidUsage`).
    ///
    /// Refused ([`NcclError::InvalidArgument`]) inside a [`Group::start`] group, which must stay
    /// the outermost.
    pub fn start_unguarded(nccl: &'static Nccl) -> Result<()> {
        if GUARDED.with(Cell::get) {
            return Err(NcclError::invalid(
                "ncclGroupStart: a Group is open on this thread; it must stay the outermost \
                 group (its end launches what it lent buffers to)",
            ));
        }
        // SAFETY: no arguments; NCCL tracks the group depth per thread itself.
        let rc = unsafe { (nccl.api.ncclGroupStart)() };
        nccl.check("ncclGroupStart", rc, std::ptr::null_mut())?;
        DEPTH.with(|d| d.set(d.get() + 1));
        Ok(())
    }

    /// `ncclGroupEnd` closing a [`Group::start_unguarded`] on this thread. Refused
    /// ([`NcclError::InvalidArgument`]) while a [`Group::start`] group is open: it would end
    /// that group (also one kept open for ever by `mem::forget`), launching operations whose
    /// buffers' borrows may have ended.
    pub fn end_unguarded(nccl: &'static Nccl) -> Result<GroupStatus> {
        if GUARDED.with(Cell::get) {
            return Err(NcclError::invalid(
                "ncclGroupEnd: the open group is a Group's: end it with Group::end",
            ));
        }
        DEPTH.with(|d| d.set(d.get().saturating_sub(1)));
        // SAFETY: no arguments; an end without a start is reported by NCCL as an error.
        let rc = unsafe { (nccl.api.ncclGroupEnd)() };
        if rc == ResultCode::IN_PROGRESS.0 {
            return Ok(GroupStatus::InProgress);
        }
        nccl.check("ncclGroupEnd", rc, std::ptr::null_mut())?;
        Ok(GroupStatus::Complete)
    }

    fn finish(&mut self) -> Result<GroupStatus> {
        self.open = false;
        DEPTH.with(|d| d.set(d.get().saturating_sub(1)));
        if self.guarded {
            GUARDED.with(|c| c.set(false));
        }
        // SAFETY: matches the ncclGroupStart of this guard, on the same thread.
        let rc = unsafe { (self.nccl.api.ncclGroupEnd)() };
        if rc == ResultCode::IN_PROGRESS.0 {
            if !self.guarded {
                return Ok(GroupStatus::InProgress);
            }
            // The operations are not enqueued yet, and their borrows end with this call:
            // wait until every communicator they use is ready (or aborted, which drops them).
            let comms = self.comms.borrow();
            let timeout = comms
                .iter()
                .map(|c| c.timeout())
                .try_fold(std::time::Duration::ZERO, |m, t| t.map(|t| m.max(t)));
            wait_ready(&comms, timeout)?;
            return Ok(GroupStatus::Complete);
        }
        self.nccl.check("ncclGroupEnd", rc, std::ptr::null_mut())?;
        Ok(GroupStatus::Complete)
    }
}

impl Drop for Group<'_> {
    fn drop(&mut self) {
        if self.open {
            let _ = self.finish();
        }
    }
}
