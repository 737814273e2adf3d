//! The host side of NCCL's device API (nccl_device.h, NCCL 2.28+): device communicators
//! for kernels that communicate from the GPU, and the LSA (load/store accessible) team.
//!
//! `ncclDevComm` and `ncclDevCommRequirements` change layout between NCCL releases (2.28.7
//! added fields to both), so this module does not hard-code them: the caller describes them
//! with a [`DevCommLayout`] taken from the headers its kernels were compiled against,
//! typically by compiling `sizeof`/`offsetof` into the same module (see
//! `erdma::cuda::nvrtc`).

use std::ffi::c_void;
use std::fmt;

use super::comm::Comm;
use super::error::{NcclError, Result};
use super::group::in_group;

/// The LSA team of a rank: the ranks whose memory it can load and store directly (same
/// node, CUDA P2P).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Team {
    /// Ranks in the team.
    pub n_ranks: usize,
    /// This rank's index in the team.
    pub rank: usize,
    /// Distance between consecutive members in communicator ranks.
    pub stride: usize,
}

/// How `ncclDevComm` and `ncclDevCommRequirements` are laid out in the headers a kernel was
/// built with.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DevCommLayout {
    comm_size: usize,
    requirements: Vec<u8>,
    lsa_multimem: usize,
    lsa_barrier_count: usize,
}

impl DevCommLayout {
    /// Describes the layout: `sizeof(ncclDevComm)`, the bytes of an initialized
    /// `ncclDevCommRequirements` (zeroes, or `NCCL_DEV_COMM_REQUIREMENTS_INITIALIZER` where
    /// the headers define one), and the offsets of its `lsaMultimem` (bool) and
    /// `lsaBarrierCount` (int) fields.
    ///
    /// # Safety
    /// The values must be those of the nccl_device.h that matches the loaded NCCL library:
    /// NCCL writes `sizeof(ncclDevComm)` bytes and reads the requirements as its own struct.
    pub unsafe fn new(
        comm_size: usize,
        requirements: Vec<u8>,
        lsa_multimem_offset: usize,
        lsa_barrier_count_offset: usize,
    ) -> Result<DevCommLayout> {
        let fits = |off: usize, len: usize| {
            off.checked_add(len)
                .is_some_and(|e| e <= requirements.len())
        };
        if comm_size == 0 || !fits(lsa_multimem_offset, 1) || !fits(lsa_barrier_count_offset, 4) {
            return Err(NcclError::invalid(format!(
                "device communicator layout: size {comm_size}, requirements {} bytes, fields at {lsa_multimem_offset} and {lsa_barrier_count_offset}",
                requirements.len()
            )));
        }
        Ok(DevCommLayout {
            comm_size,
            requirements,
            lsa_multimem: lsa_multimem_offset,
            lsa_barrier_count: lsa_barrier_count_offset,
        })
    }

    /// `sizeof(ncclDevComm)`.
    pub fn comm_size(&self) -> usize {
        self.comm_size
    }
}

/// What a device communicator must provide (the fields of `ncclDevCommRequirements` that
/// nccl-tests sets).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct DevRequirements {
    /// LSA barriers, one per CTA that synchronizes (`lsaBarrierCount`).
    pub lsa_barrier_count: u32,
    /// Multicast (NVLS) memory on the LSA team (`lsaMultimem`).
    pub lsa_multimem: bool,
}

/// A device communicator (`ncclDevComm`), passed by value to kernels. Destroy it with
/// [`Comm::dev_comm_destroy`] before the communicator; a communicator destroyed first
/// releases it too.
pub struct DevComm {
    storage: Vec<u128>,
    len: usize,
    comm: usize,
}

// SAFETY: the bytes are plain data NCCL wrote; they name device resources of a communicator
// that may itself move between threads.
unsafe impl Send for DevComm {}

impl fmt::Debug for DevComm {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("DevComm").field("bytes", &self.len).finish()
    }
}

impl DevComm {
    /// The `ncclDevComm` bytes.
    pub fn as_bytes(&self) -> &[u8] {
        // SAFETY: `storage` holds at least `len` initialized bytes (u128s are plain data).
        unsafe { std::slice::from_raw_parts(self.storage.as_ptr().cast(), self.len) }
    }

    /// A pointer to the `ncclDevComm`, as `cuLaunchKernel` wants a by-value parameter
    /// (16-byte aligned). The kernel copies it at launch; it is never written through.
    pub fn as_kernel_param(&self) -> *mut c_void {
        self.storage.as_ptr() as *mut c_void
    }
}

impl Comm {
    /// The LSA team of this rank (`ncclTeamLsa`, NCCL >= 2.28).
    pub fn lsa_team(&self) -> Result<Team> {
        let f = self
            .nccl()
            .api
            .ncclTeamLsa
            .ok_or_else(|| self.no_device_api("ncclTeamLsa"))?;
        let comm = self.handle()?;
        // SAFETY: a live communicator; the function returns the team by value.
        let t = unsafe { f(comm) };
        let n = |v: i32| usize::try_from(v).unwrap_or(0);
        Ok(Team {
            n_ranks: n(t.nRanks),
            rank: n(t.rank),
            stride: n(t.stride),
        })
    }

    /// Creates a device communicator (`ncclDevCommCreate`, collective over the
    /// communicator: every rank calls it, each on its own thread). Refused
    /// ([`NcclError::InvalidArgument`]) while a group is open on this thread: inside a group
    /// NCCL fills the `DevComm` only at the group's end, after this call returned it (issue
    /// 34 hole 3: it could be read before it is written, or dropped before NCCL writes it).
    pub fn dev_comm_create(
        &self,
        layout: &DevCommLayout,
        req: &DevRequirements,
    ) -> Result<DevComm> {
        if in_group() {
            return Err(NcclError::invalid(
                "ncclDevCommCreate inside an open group: NCCL would fill the device \
                 communicator only at the group's end, after it was handed out; create it \
                 outside the group (one thread per rank), or with dev_comm_create_in_group",
            ));
        }
        // SAFETY: no group is open on this thread: NCCL fills the storage before returning.
        unsafe { self.dev_comm_create_in_group(layout, req) }
    }

    /// [`Comm::dev_comm_create`] also inside an open group, as one thread creating the device
    /// communicators of several ranks of one process must do (the call is collective: each
    /// rank's call would wait for the others' otherwise).
    ///
    /// # Safety
    ///
    /// Inside a group NCCL fills the returned `DevComm`'s storage only at the outermost
    /// group's end: until that end has returned, the `DevComm` must not be read
    /// ([`DevComm::as_bytes`], [`DevComm::as_kernel_param`], a kernel launch), destroyed or
    /// dropped (NCCL would write into freed memory).
    pub unsafe fn dev_comm_create_in_group(
        &self,
        layout: &DevCommLayout,
        req: &DevRequirements,
    ) -> Result<DevComm> {
        let f = self
            .nccl()
            .api
            .ncclDevCommCreate
            .ok_or_else(|| self.no_device_api("ncclDevCommCreate"))?;
        let mut reqs = layout.requirements.clone();
        let count = i32::try_from(req.lsa_barrier_count)
            .map_err(|_| NcclError::invalid("lsaBarrierCount beyond i32"))?;
        reqs[layout.lsa_barrier_count..layout.lsa_barrier_count + 4]
            .copy_from_slice(&count.to_ne_bytes());
        reqs[layout.lsa_multimem] = u8::from(req.lsa_multimem);
        // Requirements are read as a C struct: give them the alignment of one.
        let mut reqs_aligned = vec![0u128; reqs.len().div_ceil(16)];
        // SAFETY: the destination has at least reqs.len() bytes; the regions are distinct.
        unsafe {
            std::ptr::copy_nonoverlapping(
                reqs.as_ptr(),
                reqs_aligned.as_mut_ptr().cast(),
                reqs.len(),
            )
        };
        let mut dev = DevComm {
            storage: vec![0u128; layout.comm_size.div_ceil(16)],
            len: layout.comm_size,
            comm: self.handle()? as usize,
        };
        // SAFETY: by DevCommLayout's contract the requirements are an initialized
        // ncclDevCommRequirements of the loaded library (no resource or team lists: those
        // pointers are null as initialized) and `storage` holds sizeof(ncclDevComm) bytes.
        let rc = unsafe {
            f(
                self.handle()?,
                reqs_aligned.as_ptr().cast(),
                dev.storage.as_mut_ptr().cast(),
            )
        };
        self.settle("ncclDevCommCreate", rc)?;
        Ok(dev)
    }

    /// Releases a device communicator of this communicator (`ncclDevCommDestroy`). Refused
    /// ([`NcclError::InvalidArgument`]) while a group is open on this thread: NCCL would read
    /// the device communicator at the group's end, after it was freed here.
    pub fn dev_comm_destroy(&self, dev: DevComm) -> Result<()> {
        if in_group() {
            return Err(NcclError::invalid(
                "ncclDevCommDestroy inside an open group: NCCL would read the device \
                 communicator at the group's end, after it was freed; destroy it outside",
            ));
        }
        let f = self
            .nccl()
            .api
            .ncclDevCommDestroy
            .ok_or_else(|| self.no_device_api("ncclDevCommDestroy"))?;
        let comm = self.handle()?;
        if comm as usize != dev.comm {
            return Err(NcclError::invalid(
                "ncclDevCommDestroy: the device communicator belongs to another communicator",
            ));
        }
        // SAFETY: `dev` was created on this communicator and is destroyed once (by value).
        let rc = unsafe { f(comm, dev.storage.as_ptr().cast()) };
        self.settle("ncclDevCommDestroy", rc)
    }

    fn no_device_api(&self, what: &str) -> NcclError {
        NcclError::Unsupported {
            what: format!(
                "{what} (the device API) needs NCCL >= 2.28 (loaded {})",
                self.nccl().version()
            ),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn layout_fields_must_fit_the_requirements() {
        // SAFETY: the layout is only validated here, never handed to NCCL.
        let ok = unsafe { DevCommLayout::new(200, vec![0; 24], 16, 20) };
        assert!(ok.is_ok());
        // SAFETY: as above.
        let bad = unsafe { DevCommLayout::new(200, vec![0; 24], 16, 22) };
        assert!(bad.is_err());
        // SAFETY: as above.
        let empty = unsafe { DevCommLayout::new(0, vec![0; 24], 16, 20) };
        assert!(empty.is_err());
    }
}
