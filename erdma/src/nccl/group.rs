//! NCCL group calls: several operations (several GPUs of one thread, aggregated
//! collectives, send/recv pairs) launched as one.

use std::cell::Cell;
use std::marker::PhantomData;

use super::error::{Result, ResultCode};
use super::library::Nccl;

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
#[must_use = "operations in a group only start when the group ends"]
pub struct Group {
    nccl: &'static Nccl,
    open: bool,
    // NCCL's group state is per thread: the guard must end on the thread that started it.
    _not_send: PhantomData<*const ()>,
}

impl Group {
    /// `ncclGroupStart`.
    pub fn start(nccl: &'static Nccl) -> Result<Group> {
        // SAFETY: no arguments; the matching ncclGroupEnd is guaranteed by Drop.
        let rc = unsafe { (nccl.api.ncclGroupStart)() };
        nccl.check("ncclGroupStart", rc, std::ptr::null_mut())?;
        DEPTH.with(|d| d.set(d.get() + 1));
        Ok(Group {
            nccl,
            open: true,
            _not_send: PhantomData,
        })
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

impl Drop for Group {
    fn drop(&mut self) {
        if self.open {
            let _ = self.finish();
        }
    }
}
