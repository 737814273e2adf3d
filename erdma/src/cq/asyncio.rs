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
//!
//! One posted request's completion is awaited with the [`Posted`] handle
//! that [`AsyncCompletionQueue::post_send`] / [`AsyncCompletionQueue::post_recv`]
//! return (or [`AsyncCompletionQueue::completion`] by QP number and wr_id).
//! Such a wait polls the CQ as above; the completions it polls that are not
//! its own are kept (parked) in the same synchronous step, and the other
//! waiters are woken to look at them: a poll never loses a completion, and
//! each is returned once. A future dropped while it waits leaves its
//! request's completion to be returned by a later wait
//! ([`AsyncCompletionQueue::wait`], `next`, or `completion` with the same
//! ids); the request's regions are released by the poll that takes its
//! completion from the CQ, once, as on every path.

use std::future::Future;
use std::io;
use std::os::fd::{AsRawFd, RawFd};
use std::sync::Mutex;
use std::task::Poll;

use tokio::io::Interest;
use tokio::io::unix::AsyncFd;
use tokio::sync::Notify;

use super::{CompletionQueue, WorkCompletion};
use crate::error::{Error, Result};
use crate::ffi;
use crate::qp::{QueuePair, RecvRequest, SendRequest};
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
    /// Completions polled by one wait that belong to another (a request's
    /// future, or any wait): oldest first. Returned before the CQ is
    /// polled again; held here only as values (their requests' regions were
    /// released by the poll that took them, once).
    parked: Mutex<Vec<WorkCompletion>>,
    /// Wakes the waits when completions are parked: the channel's event that
    /// announced them was taken by the wait that parked them.
    parked_now: Notify,
}

/// A request posted through an [`AsyncCompletionQueue`], whose completion
/// [`Posted::completion`] awaits. Only a ticket (the QP number and wr_id):
/// dropping it, or the future of `completion`, loses nothing; the
/// completion then comes from a later [`AsyncCompletionQueue::wait`],
/// `next`, or [`AsyncCompletionQueue::completion`] with the same ids.
#[derive(Debug, Clone, Copy)]
#[must_use = "await its completion (Posted::completion), or take it with AsyncCompletionQueue::next"]
pub struct Posted<'a> {
    acq: &'a AsyncCompletionQueue,
    qp_num: u32,
    wr_id: u64,
}

impl Posted<'_> {
    /// The QP the request was posted on.
    pub fn qp_num(&self) -> u32 {
        self.qp_num
    }

    /// The request's wr_id.
    pub fn wr_id(&self) -> u64 {
        self.wr_id
    }

    /// Waits for the request's completion (success or error, returned as a
    /// value, not an error; no timeout: wrap it in `tokio::time::timeout`).
    /// Cancel safe: see [`AsyncCompletionQueue::completion`].
    pub async fn completion(self) -> Result<WorkCompletion> {
        self.acq.completion(self.qp_num, self.wr_id).await
    }
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
            parked: Mutex::new(Vec::new()),
            parked_now: Notify::new(),
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
    /// completions are returned, not turned into errors. Completions that
    /// request futures polled for others come first; a completion returned
    /// here is not returned again, also not to a [`Posted::completion`]
    /// awaiting it: wait for a request either way, not both.
    pub async fn wait(&self, out: &mut [WorkCompletion]) -> Result<usize> {
        if out.is_empty() {
            return Err(Error::invalid(
                "AsyncCompletionQueue::wait",
                "the output slice is empty",
            ));
        }
        self.wait_until(|acq| {
            let k = acq.unpark(out, |_| true);
            if k > 0 {
                return Ok(Some(k));
            }
            let n = acq.cq.poll(out)?;
            Ok((n > 0).then_some(n))
        })
        .await
    }

    /// Waits for the completion of the request posted on QP `qp_num` with
    /// `wr_id` (the oldest, if several share them), polling the CQ without
    /// spinning; the completions polled meanwhile that are not its own are
    /// kept for the waits they belong to. Success or error is returned as a
    /// value. No timeout: wrap it in `tokio::time::timeout`.
    ///
    /// The request must be signaled (an unsignaled one that succeeds has no
    /// completion: the wait would not end) and its queue's CQ this one.
    /// Cancel safe: dropping the future loses no completion; a completion is
    /// taken from the CQ and returned (or kept for another wait) in one
    /// synchronous step.
    pub async fn completion(&self, qp_num: u32, wr_id: u64) -> Result<WorkCompletion> {
        let mine = |wc: &WorkCompletion| wc.qp_num == qp_num && wc.wr_id == wr_id;
        let mut buf = [WorkCompletion::default(); super::POLL_BATCH];
        self.wait_until(|acq| {
            let mut one = [WorkCompletion::default()];
            if acq.unpark(&mut one, mine) == 1 {
                return Ok(Some(one[0]));
            }
            let n = acq.cq.poll(&mut buf)?;
            let mut found = None;
            let mut others = Vec::new();
            for wc in &buf[..n] {
                if found.is_none() && mine(wc) {
                    found = Some(*wc);
                } else {
                    others.push(*wc);
                }
            }
            if !others.is_empty() {
                acq.park(others);
            }
            Ok(found)
        })
        .await
    }

    /// Posts a signaled send request on `qp`, whose send CQ must be this
    /// one, and returns its [`Posted`] handle (as [`QueuePair::post_send`]
    /// otherwise). Give each request in flight on a QP its own wr_id.
    ///
    /// Errors: [`Error::InvalidArgument`] for an unsignaled request (it has
    /// no completion to await when it succeeds) or a QP whose send CQ is
    /// another; what [`QueuePair::post_send`] returns.
    pub fn post_send(&self, qp: &QueuePair, request: SendRequest<'_>) -> Result<Posted<'_>> {
        if !request.signaled {
            return Err(Error::invalid(
                "AsyncCompletionQueue::post_send",
                "the request is unsignaled: it completes silently when it succeeds, so there is                  nothing to await (post it with QueuePair::post_send)",
            ));
        }
        self.check_cq("AsyncCompletionQueue::post_send", qp.send_cq(), "send")?;
        let wr_id = request.wr_id;
        qp.post_send(request)?;
        Ok(self.posted(qp, wr_id))
    }

    /// Posts a receive request on `qp`, whose receive CQ must be this one,
    /// and returns its [`Posted`] handle (as [`QueuePair::post_recv`]
    /// otherwise).
    pub fn post_recv(&self, qp: &QueuePair, request: RecvRequest<'_>) -> Result<Posted<'_>> {
        self.check_cq("AsyncCompletionQueue::post_recv", qp.recv_cq(), "receive")?;
        let wr_id = request.wr_id;
        qp.post_recv(request)?;
        Ok(self.posted(qp, wr_id))
    }

    fn posted(&self, qp: &QueuePair, wr_id: u64) -> Posted<'_> {
        Posted {
            acq: self,
            qp_num: qp.qp_num(),
            wr_id,
        }
    }

    fn check_cq(&self, what: &'static str, cq: &CompletionQueue, queue: &str) -> Result<()> {
        if cq.as_raw() == self.cq.as_raw() {
            return Ok(());
        }
        Err(Error::invalid(
            what,
            format!(
                "the QP's {queue} completions go to another CQ: post through that CQ's                  AsyncCompletionQueue"
            ),
        ))
    }

    /// Moves the parked completions that `want` accepts into `out`, oldest
    /// first; returns how many.
    fn unpark(&self, out: &mut [WorkCompletion], want: impl Fn(&WorkCompletion) -> bool) -> usize {
        let mut parked = self.parked.lock().unwrap_or_else(|e| e.into_inner());
        let mut k = 0;
        let mut i = 0;
        while i < parked.len() && k < out.len() {
            if want(&parked[i]) {
                out[k] = parked.remove(i);
                k += 1;
            } else {
                i += 1;
            }
        }
        k
    }

    /// Keeps completions for the waits they belong to, and wakes those.
    fn park(&self, wcs: Vec<WorkCompletion>) {
        self.parked
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .extend(wcs);
        self.parked_now.notify_waiters();
    }

    /// The wait of every method: `take` (which looks at the parked
    /// completions and polls the CQ, in one synchronous step) until it
    /// finds something; between tries the CQ is armed and polled once more,
    /// then the task sleeps until the channel has an event or completions
    /// are parked.
    async fn wait_until<T>(
        &self,
        mut take: impl FnMut(&AsyncCompletionQueue) -> Result<Option<T>>,
    ) -> Result<T> {
        loop {
            // Registered before looking, so that completions parked after
            // the look wake this wait.
            let parked = self.parked_now.notified();
            let mut parked = std::pin::pin!(parked);
            parked.as_mut().enable();
            if let Some(t) = take(self)? {
                return Ok(t);
            }
            // SAFETY: live CQ (held by self.cq).
            let rc = unsafe { sys::inline::ibv_req_notify_cq(self.cq.as_raw(), 0) };
            Error::check("ibv_req_notify_cq", rc)?;
            if let Some(t) = take(self)? {
                return Ok(t);
            }
            // The only await: nothing has been taken from the CQ here.
            // `readable()` (not `poll_read_ready`, which keeps one waker)
            // so that waits in several tasks are all woken.
            let readable = self.fd.readable();
            let mut readable = std::pin::pin!(readable);
            let ready = std::future::poll_fn(|cx| {
                if parked.as_mut().poll(cx).is_ready() {
                    return Poll::Ready(None);
                }
                readable.as_mut().poll(cx).map(Some)
            })
            .await;
            let Some(ready) = ready else {
                continue;
            };
            let mut guard = ready.map_err(|e| {
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
