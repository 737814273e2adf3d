//! Protection domains: the scope of memory regions and queue pairs.

use std::fmt;
use std::sync::Arc;

use erdma_sys as sys;

use crate::context::Context;
use crate::cq::CompletionQueue;
use crate::error::{Error, Result};
use crate::ffi::{self, Ptr};
use crate::mr::{AccessFlags, DmaBufRange, MemoryRegion, RegisterBuffer};
use crate::qp::{QpCapabilities, QueuePair};

pub(crate) struct PdInner {
    pub(crate) raw: Ptr<sys::ibv_pd>,
    pub(crate) ctx: Context,
}

impl Drop for PdInner {
    fn drop(&mut self) {
        if let Ok(lib) = ffi::verbs() {
            // SAFETY: every MR and QP of this PD holds an Arc to it, so none
            // is left; the PD is freed once.
            unsafe { lib.ibv_dealloc_pd(self.raw.0) };
        }
    }
}

/// A protection domain. Cheap to clone (shared); memory regions and queue
/// pairs keep their PD (and device) alive, so none can outlive it.
#[derive(Clone)]
pub struct ProtectionDomain {
    pub(crate) inner: Arc<PdInner>,
}

impl fmt::Debug for ProtectionDomain {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ProtectionDomain")
            .field("device", &self.inner.ctx.name())
            .finish()
    }
}

impl ProtectionDomain {
    pub(crate) fn new(ctx: &Context) -> Result<ProtectionDomain> {
        let lib = ffi::verbs()?;
        // SAFETY: the context is live (ctx holds it).
        let raw = unsafe { lib.ibv_alloc_pd(ctx.as_raw()) };
        if raw.is_null() {
            return Err(Error::last_os("ibv_alloc_pd"));
        }
        Ok(ProtectionDomain {
            inner: Arc::new(PdInner {
                raw: Ptr(raw),
                ctx: ctx.clone(),
            }),
        })
    }

    /// The device this PD belongs to.
    pub fn context(&self) -> &Context {
        &self.inner.ctx
    }

    /// The raw `ibv_pd`, valid while this PD (or a clone) lives.
    pub fn as_raw(&self) -> *mut sys::ibv_pd {
        self.inner.raw.0
    }

    /// Registers a buffer the region then owns (`Vec<u8>`, `Box<[u8]>`,
    /// [`crate::AlignedBuffer`], `&'static mut [u8]`, ...). The buffer stays
    /// where it is until the region is dropped or
    /// [`MemoryRegion::into_inner`] hands it back. ENOMEM here usually means
    /// the locked-memory limit (`ulimit -l`) is too low: the error says so.
    pub fn register<B: RegisterBuffer>(
        &self,
        buffer: B,
        access: AccessFlags,
    ) -> Result<MemoryRegion<B>> {
        MemoryRegion::register(self, buffer, access)
    }

    /// Registers a dma-buf (device memory exported by its driver, e.g.
    /// `cuMemGetHandleForAddressRange`) with `ibv_reg_dmabuf_mr`. Detected at
    /// run time: [`Error::Unsupported`] when the library, kernel or provider
    /// lacks it (eRDMA does; register device memory with
    /// [`crate::RawBuffer`] and a peer-memory module there).
    ///
    /// # Safety
    /// `fd` must be a dma-buf file descriptor whose `offset..offset+len`
    /// range stays allocated until the region is dropped and every request
    /// posted with it has completed; the device may read and write it.
    pub unsafe fn register_dmabuf(
        &self,
        fd: std::os::fd::RawFd,
        offset: u64,
        len: usize,
        iova: u64,
        access: AccessFlags,
    ) -> Result<MemoryRegion<DmaBufRange>> {
        // SAFETY: forwarded contract.
        unsafe { MemoryRegion::register_dmabuf(self, fd, offset, len, iova, access) }
    }

    /// Creates a reliable-connected queue pair (in RESET) whose send and
    /// receive completions go to the given CQs. The QP keeps the PD and both
    /// CQs alive.
    pub fn create_rc_qp(
        &self,
        send_cq: &CompletionQueue,
        recv_cq: &CompletionQueue,
        caps: &QpCapabilities,
    ) -> Result<QueuePair> {
        QueuePair::create(self, send_cq, recv_cq, caps, None)
    }
}
