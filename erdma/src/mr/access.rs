//! Access rights of a region (`ibv_access_flags`) and the rule they must
//! follow: remote writes and atomics need local write.

use std::fmt;

use erdma_sys as sys;

use crate::error::{Error, Result};

/// Memory access rights of a region (`ibv_access_flags`).
#[derive(Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct AccessFlags(u32);

impl AccessFlags {
    /// The NIC may write the memory (receives, READ and atomic results).
    pub const LOCAL_WRITE: AccessFlags = AccessFlags(sys::IBV_ACCESS_LOCAL_WRITE);
    /// Peers may RDMA WRITE it (needs LOCAL_WRITE).
    pub const REMOTE_WRITE: AccessFlags = AccessFlags(sys::IBV_ACCESS_REMOTE_WRITE);
    /// Peers may RDMA READ it.
    pub const REMOTE_READ: AccessFlags = AccessFlags(sys::IBV_ACCESS_REMOTE_READ);
    /// Peers may run atomics on it (needs LOCAL_WRITE).
    pub const REMOTE_ATOMIC: AccessFlags = AccessFlags(sys::IBV_ACCESS_REMOTE_ATOMIC);
    /// Relaxed PCIe ordering (optional: ignored by kernels without it).
    pub const RELAXED_ORDERING: AccessFlags = AccessFlags(sys::IBV_ACCESS_RELAXED_ORDERING);
    /// LOCAL_WRITE | REMOTE_WRITE | REMOTE_READ | REMOTE_ATOMIC.
    pub const ALL: AccessFlags = AccessFlags(
        sys::IBV_ACCESS_LOCAL_WRITE
            | sys::IBV_ACCESS_REMOTE_WRITE
            | sys::IBV_ACCESS_REMOTE_READ
            | sys::IBV_ACCESS_REMOTE_ATOMIC,
    );

    /// No access beyond local reads (send sources only).
    pub const fn empty() -> AccessFlags {
        AccessFlags(0)
    }
    /// The raw flag bits.
    pub const fn bits(self) -> u32 {
        self.0
    }
    /// From raw bits (unknown bits are passed to the device as they are).
    pub const fn from_bits(bits: u32) -> AccessFlags {
        AccessFlags(bits)
    }
    /// Whether all flags of `other` are set.
    pub const fn contains(self, other: AccessFlags) -> bool {
        self.0 & other.0 == other.0
    }
}

impl std::ops::BitOr for AccessFlags {
    type Output = AccessFlags;
    fn bitor(self, rhs: AccessFlags) -> AccessFlags {
        AccessFlags(self.0 | rhs.0)
    }
}

impl std::ops::BitOrAssign for AccessFlags {
    fn bitor_assign(&mut self, rhs: AccessFlags) {
        self.0 |= rhs.0;
    }
}

impl fmt::Debug for AccessFlags {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let names = [
            (AccessFlags::LOCAL_WRITE, "LOCAL_WRITE"),
            (AccessFlags::REMOTE_WRITE, "REMOTE_WRITE"),
            (AccessFlags::REMOTE_READ, "REMOTE_READ"),
            (AccessFlags::REMOTE_ATOMIC, "REMOTE_ATOMIC"),
            (AccessFlags::RELAXED_ORDERING, "RELAXED_ORDERING"),
        ];
        let mut rest = self.0;
        let mut parts = Vec::new();
        for (flag, name) in names {
            if self.contains(flag) {
                parts.push(name.to_string());
                rest &= !flag.0;
            }
        }
        if rest != 0 {
            parts.push(format!("{rest:#x}"));
        }
        if parts.is_empty() {
            parts.push("empty".into());
        }
        write!(f, "AccessFlags({})", parts.join(" | "))
    }
}

pub(crate) fn check_access(verb: &'static str, access: AccessFlags) -> Result<()> {
    let needs_local_write = AccessFlags::REMOTE_WRITE.bits() | AccessFlags::REMOTE_ATOMIC.bits();
    if access.bits() & needs_local_write != 0 && !access.contains(AccessFlags::LOCAL_WRITE) {
        return Err(Error::invalid(
            verb,
            format!("{access:?}: REMOTE_WRITE and REMOTE_ATOMIC need LOCAL_WRITE"),
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn access_flags() {
        let a = AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_READ;
        assert!(a.contains(AccessFlags::LOCAL_WRITE));
        assert!(!a.contains(AccessFlags::REMOTE_WRITE));
        assert_eq!(format!("{a:?}"), "AccessFlags(LOCAL_WRITE | REMOTE_READ)");
        assert!(check_access("x", AccessFlags::REMOTE_WRITE).is_err());
        assert!(check_access("x", AccessFlags::ALL).is_ok());
        assert!(check_access("x", AccessFlags::REMOTE_READ).is_ok());
    }
}
