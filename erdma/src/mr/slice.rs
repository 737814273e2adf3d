//! The slices work requests name: [`LocalSlice`] (borrows its region, so a
//! request cannot outlive it) and [`RemoteBuffer`] (a peer's address and
//! rkey, plain data).

use std::fmt;
use std::ops::{Bound, RangeBounds};
use std::sync::Arc;

use erdma_sys as sys;

use crate::error::{Error, Result};

use super::*;

/// (offset, len) of a range within `total` bytes, or `None` when outside.
pub(crate) fn resolve_range(
    range: &impl RangeBounds<usize>,
    total: usize,
) -> Option<(usize, usize)> {
    let start = match range.start_bound() {
        Bound::Included(s) => *s,
        Bound::Excluded(s) => s.checked_add(1)?,
        Bound::Unbounded => 0,
    };
    let end = match range.end_bound() {
        Bound::Included(e) => e.checked_add(1)?,
        Bound::Excluded(e) => *e,
        Bound::Unbounded => total,
    };
    (start <= end && end <= total).then(|| (start, end - start))
}

pub(super) fn range_text(range: &impl RangeBounds<usize>) -> String {
    let s = match range.start_bound() {
        Bound::Included(s) => s.to_string(),
        Bound::Excluded(s) => format!("{s}+1"),
        Bound::Unbounded => String::new(),
    };
    let e = match range.end_bound() {
        Bound::Included(e) => format!("={e}"),
        Bound::Excluded(e) => e.to_string(),
        Bound::Unbounded => String::new(),
    };
    format!("{s}..{e}")
}

/// What a posted request takes from its region beyond the keys a
/// [`LocalSlice`] copies: a share that keeps it registered. Object-safe.
pub(crate) trait LocalMemory: Sync {
    fn lease(&self) -> Arc<dyn Lease>;
}

impl<B: Send + Sync + 'static> LocalMemory for MemoryRegion<B> {
    fn lease(&self) -> Arc<dyn Lease> {
        MemoryRegion::lease(self)
    }
}

/// A byte range of a local memory region: one scatter/gather entry of a
/// work request. Borrows the region, so the region cannot be mutated or
/// handed back while the slice exists; posting turns the borrow into a share
/// held until the completion is polled.
#[derive(Clone, Copy)]
pub struct LocalSlice<'a> {
    pub(super) mr: &'a dyn LocalMemory,
    /// Start address (the region's plus the offset).
    pub(super) addr: u64,
    pub(super) len: usize,
    pub(super) lkey: u32,
    pub(super) access: AccessFlags,
    /// Whether the region is host memory the CPU can read (inline sends).
    pub(super) cpu_readable: bool,
    /// The region's protection domain, as an address: only compared with
    /// the QP's (an integer keeps the slice `Send + Sync`).
    pub(super) pd: usize,
}

impl fmt::Debug for LocalSlice<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LocalSlice")
            .field("addr", &format_args!("{:#x}", self.addr()))
            .field("len", &self.len)
            .field("lkey", &format_args!("{:#x}", self.lkey))
            .finish()
    }
}

impl<'a> LocalSlice<'a> {
    /// Length in bytes.
    pub fn len(&self) -> usize {
        self.len
    }
    /// Whether the slice is empty.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
    /// Start address.
    pub fn addr(&self) -> u64 {
        self.addr
    }
    /// A share of the region, held by a posted request until its completion.
    pub(crate) fn lease(&self) -> Arc<dyn Lease> {
        self.mr.lease()
    }
    /// Whether the region was registered in the protection domain `pd`.
    pub(crate) fn in_pd(&self, pd: *mut sys::ibv_pd) -> bool {
        self.pd == pd as usize
    }
    /// The region's local key.
    pub(crate) fn lkey(&self) -> u32 {
        self.lkey
    }
    /// The access the region was registered with.
    pub(crate) fn access(&self) -> AccessFlags {
        self.access
    }
    /// Whether the region is host memory the CPU can read: the only memory
    /// an inline send may name (the provider copies it on the CPU).
    pub(crate) fn cpu_readable(&self) -> bool {
        self.cpu_readable
    }
    /// The `ibv_sge` for this slice; `None` when longer than 4 GiB - 1.
    pub(crate) fn sge(&self) -> Option<sys::ibv_sge> {
        Some(sys::ibv_sge {
            addr: self.addr,
            length: u32::try_from(self.len).ok()?,
            lkey: self.lkey,
        })
    }
}

/// A peer's memory: address, length and rkey, as [`MemoryRegion::remote`]
/// describes it. Serializable, to be sent to the peer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
pub struct RemoteBuffer {
    /// Start address (I/O virtual address of the peer's region).
    pub addr: u64,
    /// Remote key.
    pub rkey: u32,
    /// Length in bytes.
    pub len: u64,
}

impl RemoteBuffer {
    /// Encoded size of [`RemoteBuffer::to_bytes`].
    pub const ENCODED_LEN: usize = 20;

    /// A byte range of it; [`Error::InvalidArgument`] when outside.
    pub fn slice(&self, range: impl RangeBounds<usize>) -> Result<RemoteBuffer> {
        let total = usize::try_from(self.len).unwrap_or(usize::MAX);
        let (offset, len) = resolve_range(&range, total).ok_or_else(|| {
            Error::invalid(
                "RemoteBuffer::slice",
                format!(
                    "range {} outside the {}-byte remote buffer",
                    range_text(&range),
                    self.len
                ),
            )
        })?;
        Ok(RemoteBuffer {
            addr: self.addr.wrapping_add(offset as u64),
            rkey: self.rkey,
            len: len as u64,
        })
    }

    /// 20 bytes (addr, rkey, len; big-endian), for RDMA CM private data.
    pub fn to_bytes(&self) -> [u8; Self::ENCODED_LEN] {
        let mut b = [0u8; Self::ENCODED_LEN];
        b[..8].copy_from_slice(&self.addr.to_be_bytes());
        b[8..12].copy_from_slice(&self.rkey.to_be_bytes());
        b[12..].copy_from_slice(&self.len.to_be_bytes());
        b
    }

    /// Decodes [`RemoteBuffer::to_bytes`] (longer input, e.g. padded private
    /// data, is fine); `None` when too short.
    pub fn from_bytes(b: &[u8]) -> Option<RemoteBuffer> {
        if b.len() < Self::ENCODED_LEN {
            return None;
        }
        Some(RemoteBuffer {
            addr: u64::from_be_bytes(b[..8].try_into().ok()?),
            rkey: u32::from_be_bytes(b[8..12].try_into().ok()?),
            len: u64::from_be_bytes(b[12..20].try_into().ok()?),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranges() {
        assert_eq!(resolve_range(&(..), 10), Some((0, 10)));
        assert_eq!(resolve_range(&(2..5), 10), Some((2, 3)));
        assert_eq!(resolve_range(&(2..=5), 10), Some((2, 4)));
        assert_eq!(resolve_range(&(10..), 10), Some((10, 0)));
        #[allow(clippy::reversed_empty_ranges)]
        let backwards = 5..2;
        assert_eq!(resolve_range(&backwards, 10), None);
        assert_eq!(resolve_range(&(0..11), 10), None);
        assert_eq!(resolve_range(&(0..=usize::MAX), 10), None);
        assert_eq!(range_text(&(1..=3)), "1..=3");
    }

    #[test]
    fn remote_buffer_bytes_and_slices() {
        let r = RemoteBuffer {
            addr: 0x1000,
            rkey: 0xabcd,
            len: 64,
        };
        let mut padded = r.to_bytes().to_vec();
        padded.extend_from_slice(&[0; 36]);
        assert_eq!(RemoteBuffer::from_bytes(&padded), Some(r));
        assert_eq!(RemoteBuffer::from_bytes(&[1, 2, 3]), None);
        let s = r.slice(8..16).unwrap();
        assert_eq!((s.addr, s.len, s.rkey), (0x1008, 8, 0xabcd));
        assert!(r.slice(60..70).is_err());
        let j = serde_json::to_string(&r).unwrap();
        assert_eq!(serde_json::from_str::<RemoteBuffer>(&j).unwrap(), r);
    }
}
