//! Awaiting completions on a tokio runtime (feature `tokio`).
//!
//! The CQ's completion channel fd (non-blocking since the CQ was made) is
//! registered with the runtime's reactor ([`tokio::io::unix::AsyncFd`]); a
//! wait is the blocking path of [`CompletionQueue::wait`] with the `poll(2)`
//! replaced by an await:
//!
//! 1. poll the CQ; completions there are returned at once;
//! 2. arm the CQ (`ibv_req_notify_cq`), poll again (a completion that came
//!    before arming raised no event);
//! 3. await readability of the channel fd, then take every event queued on
//!    it (`ibv_get_cq_event` until `EAGAIN`), acknowledging each at once (so
//!    that destroying the CQ never waits), and go to 1.
//!
//! Cancel safety: the only await point is step 3, where nothing has been
//! taken from the CQ; a future dropped there loses no completion and
//! releases nothing (a posted request keeps its regions until a poll returns
//! its completion, as on every other path). A completion is taken from the
//! CQ and returned in the same, synchronous, step of the future.

use std::io;
use std::os::fd::{AsRawFd, RawFd};

use tokio::io::Interest;
use tokio::io::unix::AsyncFd;

use super::{CompletionQueue, WorkCompletion};
use crate::error::{Error, Result};
use crate::ffi;
use erdma_sys as sys;

/// The channel's fd as the reactor sees it. It does not own the fd: the
/// channel (owned by the CQ, which [`AsyncCompletionQueue`] holds) closes it.
struct ChannelFd(RawFd);

impl AsRawFd for ChannelFd {
    fn as_raw_fd(&self) -> RawFd {
        self.0
    }
}

/// A completion queue whose completions are awaited on a tokio runtime
/// (feature `tokio`): [`AsyncCompletionQueue::next`],
/// [`AsyncCompletionQueue::wait`], [`AsyncCompletionQueue::collect`] sleep
/// in the reactor until the device raises a completion event, instead of
/// spinning or blocking a thread.
///
/// Made from a CQ created with a completion channel
/// (`CqOptions { channel: true, .. }`) by [`CompletionQueue::to_async`], in
/// a runtime with I/O enabled. One per CQ (the reactor refuses a second
/// registration of the same fd); share it between tasks behind an `Arc`:
/// every method takes `&self`. The blocking [`CompletionQueue::wait`] and
/// busy [`CompletionQueue::poll`] keep working on the same CQ.
///
/// Every future here is cancel safe: dropping one loses no completion.
pub struct AsyncCompletionQueue {
    // Declared first, so dropped first: deregistered from the reactor
    // before the CQ (and with it the channel and its fd) can go.
    fd: AsyncFd<ChannelFd>,
    cq: CompletionQueue,
}

impl std::fmt::Debug for AsyncCompletionQueue {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AsyncCompletionQueue")
            .field("cq", &self.cq)
            .field("fd", &self.fd.get_ref().0)
            .finish()
    }
}

impl CompletionQueue {
    /// An [`AsyncCompletionQueue`] over this CQ (a clone of it), registered
    /// with the current tokio runtime (feature `tokio`).
    ///
    /// Errors: [`Error::InvalidArgument`] when the CQ has no completion
    /// channel (create it with `CqOptions { channel: true, .. }`) or when
    /// called outside a tokio runtime; the reactor's error when it refuses
    /// the fd (a second `AsyncCompletionQueue` for the same CQ).
    ///
    /// # Panics
    /// As tokio's own I/O types, when the current runtime was built without
    /// I/O (`Builder::enable_io`/`enable_all`).
    pub fn to_async(&self) -> Result<AsyncCompletionQueue> {
        let Some(ch) = self.inner.channel else {
            return Err(Error::invalid(
                "CompletionQueue::to_async",
                "the CQ has no completion channel: create it with CqOptions { channel: true, .. }",
            ));
        };
        if tokio::runtime::Handle::try_current().is_err() {
            return Err(Error::invalid(
                "CompletionQueue::to_async",
                "not inside a tokio runtime: call it from a task (or inside Runtime::enter)",
            ));
        }
        // SAFETY: the channel lives as long as the CQ, which `self` holds.
        let fd = unsafe { (*ch.0).fd };
        // SAFETY: `register_with_interest`'s contract: the fd stays open and
        // the same for the AsyncFd's whole life. The channel (and its fd) is
        // destroyed only when the last clone of the CQ goes; the
        // AsyncCompletionQueue holds one and drops its AsyncFd first (field
        // order), and is never taken apart (no into_inner); forgetting it
        // forgets the CQ clone too, so the fd is never closed then.
        let fd = unsafe { AsyncFd::register_with_interest(ChannelFd(fd), Interest::READABLE) }
            .map_err(|e| {
                let (_, e) = e.into_parts();
                Error::verb(
                    "epoll_ctl (tokio AsyncFd)",
                    e.raw_os_error().unwrap_or(libc::EIO),
                )
            })?;
        Ok(AsyncCompletionQueue {
            fd,
            cq: self.clone(),
        })
    }
}

impl AsyncCompletionQueue {
    /// The completion queue.
    pub fn cq(&self) -> &CompletionQueue {
        &self.cq
    }

    /// Waits for at least one completion and returns how many were written
    /// to `out` (up to `out.len()`), as [`CompletionQueue::wait`] does,
    /// without a timeout (wrap it in `tokio::time::timeout`). Error
    /// completions are returned, not turned into errors.
    pub async fn wait(&self, out: &mut [WorkCompletion]) -> Result<usize> {
        if out.is_empty() {
            return Err(Error::invalid(
                "AsyncCompletionQueue::wait",
                "the output slice is empty",
            ));
        }
        loop {
            let n = self.cq.poll(out)?;
            if n > 0 {
                return Ok(n);
            }
            // SAFETY: live CQ (held by self.cq).
            let rc = unsafe { sys::inline::ibv_req_notify_cq(self.cq.as_raw(), 0) };
            Error::check("ibv_req_notify_cq", rc)?;
            let n = self.cq.poll(out)?;
            if n > 0 {
                return Ok(n);
            }
            // The only await: nothing has been taken from the CQ here.
            let mut guard = self.fd.readable().await.map_err(|e| {
                Error::verb("epoll_wait (tokio)", e.raw_os_error().unwrap_or(libc::EIO))
            })?;
            // Take every queued event; WouldBlock (the channel is empty)
            // clears the readiness, so the next await sleeps until a new
            // event. Another waiter having taken them is the same case.
            if let Ok(Err(e)) = guard.try_io(|_| self.take_events()) {
                return Err(Error::verb(
                    "ibv_get_cq_event",
                    e.raw_os_error().unwrap_or(libc::EIO),
                ));
            }
        }
    }

    /// Takes and acknowledges the events queued on the channel; returns
    /// `WouldBlock` once it is empty.
    fn take_events(&self) -> io::Result<()> {
        let lib = ffi::verbs().map_err(|_| io::Error::from_raw_os_error(libc::ENOSYS))?;
        let ch = self.cq.inner.channel.expect("made with a channel");
        loop {
            let mut cq: *mut sys::ibv_cq = std::ptr::null_mut();
            let mut ctx: *mut libc::c_void = std::ptr::null_mut();
            // SAFETY: live channel (held through self.cq), non-blocking;
            // the out-pointers are writable.
            let rc = unsafe { lib.ibv_get_cq_event(ch.0, &mut cq, &mut ctx) };
            if rc != 0 {
                let e = io::Error::last_os_error();
                return Err(if e.kind() == io::ErrorKind::Interrupted {
                    io::ErrorKind::WouldBlock.into()
                } else {
                    e
                });
            }
            if !cq.is_null() {
                // SAFETY: the event is for our CQ (the channel's only one);
                // acknowledged at once, as the blocking path does.
                unsafe { lib.ibv_ack_cq_events(cq, 1) };
            }
        }
    }

    /// Waits for the next completion.
    pub async fn next(&self) -> Result<WorkCompletion> {
        let mut one = [WorkCompletion::default()];
        self.wait(&mut one).await?;
        Ok(one[0])
    }

    /// Waits for exactly `n` completions (no timeout: wrap it in
    /// `tokio::time::timeout`). Not cancel safe in one respect: completions
    /// already collected when the future is dropped are lost to the caller
    /// (the requests they finished have released their regions, as after
    /// any poll); use [`AsyncCompletionQueue::wait`] to keep each batch.
    pub async fn collect(&self, n: usize) -> Result<Vec<WorkCompletion>> {
        let mut out = Vec::with_capacity(n);
        let mut buf = [WorkCompletion::default(); super::POLL_BATCH];
        while out.len() < n {
            let want = (n - out.len()).min(super::POLL_BATCH);
            let k = self.wait(&mut buf[..want]).await?;
            out.extend_from_slice(&buf[..k]);
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shared_between_tasks() {
        fn send_sync<T: Send + Sync>() {}
        send_sync::<AsyncCompletionQueue>();
    }
}
