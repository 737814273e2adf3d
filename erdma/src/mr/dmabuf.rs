//! dma-buf regions (`ibv_reg_dmabuf_mr`): device memory exported by its
//! driver, registered without a CPU mapping.

use erdma_sys as sys;

use crate::error::{Error, Result};
use crate::ffi::{self, optional_fn};
use crate::pd::ProtectionDomain;

use super::*;

impl MemoryRegion<DmaBufRange> {
    /// # Safety
    /// See [`ProtectionDomain::register_dmabuf`].
    pub(crate) unsafe fn register_dmabuf(
        pd: &ProtectionDomain,
        fd: std::os::fd::RawFd,
        offset: u64,
        len: usize,
        iova: u64,
        access: AccessFlags,
    ) -> Result<Self> {
        if len == 0 {
            return Err(Error::invalid(
                "ibv_reg_dmabuf_mr",
                "cannot register an empty range",
            ));
        }
        check_access("ibv_reg_dmabuf_mr", access)?;
        let buf = DmaBufRange {
            fd,
            offset,
            iova,
            len,
        };
        Self::register_with(pd, buf, iova, len, access, |pd_raw| {
            // SAFETY: the caller's contract on fd and the range.
            unsafe { reg_dmabuf_mr(pd_raw, fd, offset, len, iova, access) }
        })
    }
}

/// `ibv_reg_dmabuf_mr`, with a provider or library that lacks it reported as
/// [`Error::Unsupported`].
///
/// # Safety
/// `fd` must be a dma-buf whose `offset..offset+len` stays allocated while the
/// MR exists; `pd_raw` a live PD.
pub(crate) unsafe fn reg_dmabuf_mr(
    pd_raw: *mut sys::ibv_pd,
    fd: std::os::fd::RawFd,
    offset: u64,
    len: usize,
    iova: u64,
    access: AccessFlags,
) -> Result<*mut sys::ibv_mr> {
    let lib = ffi::verbs()?;
    let f = optional_fn!(lib, ibv_reg_dmabuf_mr);
    // SAFETY: the caller's contract.
    let mr = unsafe { f(pd_raw, offset, len, iova, fd, access.bits() as i32) };
    if !mr.is_null() {
        return Ok(mr);
    }
    let e = Error::last_os("ibv_reg_dmabuf_mr");
    if matches!(e.errno(), Some(libc::EOPNOTSUPP) | Some(libc::ENOSYS)) {
        // SAFETY: a live PD's context pointer.
        let dev = unsafe { device_name_of_pd(pd_raw) };
        return Err(Error::Unsupported {
            feature: "dma-buf memory registration (ibv_reg_dmabuf_mr)".into(),
            device: dev,
            hint: Some(
                "register device memory with ibv_reg_mr instead (erdma::GpuRegistration::PeerMemory, \
                 or erdma::RawBuffer), which needs a peer-memory module such as nvidia_peermem"
                    .into(),
            ),
        });
    }
    Err(e)
}

/// The device name of a live PD, for messages.
///
/// # Safety
/// `pd` must be a live `ibv_pd`.
pub(super) unsafe fn device_name_of_pd(pd: *mut sys::ibv_pd) -> Option<String> {
    // SAFETY: a live PD points to its live context and device.
    unsafe {
        let ctx = (*pd).context;
        if ctx.is_null() || (*ctx).device.is_null() {
            return None;
        }
        let name = &(*(*ctx).device).name;
        let bytes: Vec<u8> = name
            .iter()
            .take_while(|c| **c != 0)
            .map(|c| *c as u8)
            .collect();
        Some(String::from_utf8_lossy(&bytes).into_owned())
    }
}
