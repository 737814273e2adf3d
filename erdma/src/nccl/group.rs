//! NCCL group calls: several operations (several GPUs of one thread, aggregated
//! collectives, send/recv pairs) launched as one.

use std::cell::Cell;
use std::marker::PhantomData;

use super::comm::Comm;
use super::error::{Result, ResultCode};
use super::library::Nccl;
use super::types::{NcclType, RedOp};
use crate::cuda::{DeviceBuffer, Stream};

thread_local! {
    /// Groups open on this thread through [`Group`] (NCCL's own depth is thread-local too).
    static DEPTH: Cell<u32> = const { Cell::new(0) };
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
/// ends the group (errors are then lost). Groups nest.
///
/// Safe operations are recorded through the group ([`Group::all_reduce`], [`Group::send`],
/// [`Group::recv`]), which keeps their buffers, streams and communicators borrowed for `'g`,
/// until the group ends: NCCL launches them only then. The safe [`Comm`] collectives refuse
/// to run while a group is open on the thread.
#[must_use = "operations in a group only start when the group ends"]
pub struct Group<'g> {
    nccl: &'static Nccl,
    open: bool,
    // NCCL's group state is per thread: the guard must end on the thread that started it.
    _not_send: PhantomData<*const ()>,
    // Invariant in 'g: what an operation borrowed for 'g stays borrowed until the group ends
    // (a covariant 'g could shrink to each call).
    _borrows: PhantomData<fn(&'g ()) -> &'g ()>,
}

impl<'g> Group<'g> {
    /// `ncclGroupStart`.
    pub fn start(nccl: &'static Nccl) -> Result<Group<'g>> {
        // SAFETY: no arguments; the matching ncclGroupEnd is guaranteed by Drop.
        let rc = unsafe { (nccl.api.ncclGroupStart)() };
        nccl.check("ncclGroupStart", rc, std::ptr::null_mut())?;
        DEPTH.with(|d| d.set(d.get() + 1));
        Ok(Group {
            nccl,
            open: true,
            _not_send: PhantomData,
            _borrows: PhantomData,
        })
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
        comm.enqueue_recv(buf, peer, stream)
    }

    /// `ncclGroupEnd`: launches the grouped operations.
    pub fn end(mut self) -> Result<GroupStatus> {
        self.finish()
    }

    /// `ncclGroupStart` without a guard, for a caller that opens a group in one function
    /// and closes it in another (a benchmark loop aggregating iterations, a trait object
    /// that must stay `Send`). Pair it with [`Group::end_unguarded`] on the same thread;
    /// prefer [`Group::start`] otherwise. Unbalanced calls are NCCL usage errors, not
    /// memory errors: NCCL rejects an end without a start (`ncclInvalidUsage`).
    pub fn start_unguarded(nccl: &'static Nccl) -> Result<()> {
        // SAFETY: no arguments; NCCL tracks the group depth per thread itself.
        let rc = unsafe { (nccl.api.ncclGroupStart)() };
        nccl.check("ncclGroupStart", rc, std::ptr::null_mut())?;
        DEPTH.with(|d| d.set(d.get() + 1));
        Ok(())
    }

    /// `ncclGroupEnd` closing a [`Group::start_unguarded`] on this thread.
    pub fn end_unguarded(nccl: &'static Nccl) -> Result<GroupStatus> {
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
        // SAFETY: matches the ncclGroupStart of this guard, on the same thread.
        let rc = unsafe { (self.nccl.api.ncclGroupEnd)() };
        if rc == ResultCode::IN_PROGRESS.0 {
            return Ok(GroupStatus::InProgress);
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
