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
//!
//! Each guarantee sits in one module:
//! - this one: a QP's creation (the CQ space it reserves), its lifetime
//!   (what its drop releases, and what it keeps when destruction fails);
//! - `request.rs`: what a request is, and the checks it passes before it
//!   reaches the device (PD, access, lengths, inline from host memory only,
//!   atomics);
//! - `state.rs`: the state machine (RESET -> INIT -> RTR -> RTS, ERR) and
//!   connecting to a peer;
//! - `post.rs`: posting, and the records that keep a request's memory held
//!   until its completion is polled.

mod post;
mod request;
mod state;

use std::fmt;
use std::sync::atomic::{AtomicBool, AtomicU8, AtomicU32, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use erdma_sys as sys;

use crate::context::Context;
use crate::cq::CompletionQueue;
use crate::error::{Error, Result};
use crate::ffi::{self, Ptr};
use crate::pd::ProtectionDomain;
use crate::pending::{Pending, WrId, next_generation};
use crate::port::c_enum;

use post::Posting;
pub use request::{RecvRequest, SendOp, SendRequest};
pub(crate) use request::{build_send_wr, stack_sges};
pub use state::{InitAttributes, RtrAttributes, RtsAttributes};

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
    /// Set when the [`QueuePair`] is dropped: the CQs' caches keep no share
    /// of it from then on (see `cq/cache.rs`).
    closing: AtomicBool,
}

impl QpShared {
    /// Called by the CQ for each tracked completion of this QP: releases what
    /// the finished request(s) held; returns the caller's wr_id.
    pub(crate) fn complete(&self, id: WrId, failed: bool) -> Option<u64> {
        self.lock().pending.complete(id, failed)
    }

    pub(crate) fn generation(&self) -> u32 {
        self.generation
    }

    /// Whether its [`QueuePair`] was dropped: a read-modify-write (see
    /// `cq/cache.rs`), made after a CQ cached it, against the mark set
    /// (another) before the eviction.
    pub(crate) fn closing(&self) -> bool {
        self.closing.fetch_or(false, Ordering::AcqRel)
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
            // The device no longer touches the requests' memory: release it
            // (the records are dropped with `posting`). Their completions
            // already in the CQs are stale: each CQ keeps room for them, and
            // the generation, until they are gone (issue 34 holes 8, 10).
            let (sq, rq) = {
                let g = self.lock();
                (g.pending.sq.len(), g.pending.rq.len())
            };
            self.send_cq
                .retire(self.generation, self.requested.max_send_wr, sq);
            self.recv_cq
                .retire(self.generation, self.requested.max_recv_wr, rq);
            crate::pending::release_generation(self.generation);
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

impl Drop for QueuePair {
    /// The CQs may cache a share of the QP between polls (`cq/cache.rs`):
    /// marked closing, then taken out of both (a poll that has it drops
    /// that share when done), so that the QP is destroyed with its last
    /// share as before.
    fn drop(&mut self) {
        self.inner.closing.swap(true, Ordering::AcqRel);
        self.inner.send_cq.evict(&self.inner);
        self.inner.recv_cq.evict(&self.inner);
    }
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
                scratch: Vec::new(),
                bound: Vec::new(),
            }),
            owner,
            closing: AtomicBool::new(false),
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

    /// Unique to this QP in the process (see [`crate::pending`]).
    pub(crate) fn generation(&self) -> u32 {
        self.inner.generation
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
    fn state_names() {
        assert_eq!(QpState::from_raw(sys::IBV_QPS_RTS).to_string(), "RTS");
        assert_eq!(QpState::Reset.raw(), sys::IBV_QPS_RESET);
    }
}
