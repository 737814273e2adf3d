//! The QP's state machine (RESET -> INIT -> RTR -> RTS, and ERR) and
//! connecting to a peer from its endpoint record: each transition checks the
//! state it starts from, so a QP is never posted on in a state that would
//! lose the request.

use std::sync::atomic::Ordering;

use erdma_sys as sys;

use crate::device::Transport;
use crate::endpoint::{ConnectOptions, Endpoint};
use crate::error::{Error, Result};
use crate::ffi;
use crate::gid::{Gid, GidEntry};
use crate::mr::AccessFlags;
use crate::port::Mtu;

use super::{QpState, QueuePair};

/// Attributes of the RESET -> INIT transition.
#[derive(Debug, Clone, Copy)]
pub struct InitAttributes {
    /// Port number (from 1).
    pub port: u8,
    /// What the peer may do to this side's memory through this QP.
    pub access: AccessFlags,
    /// P_Key index.
    pub pkey_index: u16,
}

/// Attributes of the INIT -> RTR transition (where the peer is).
#[derive(Debug, Clone, Copy)]
pub struct RtrAttributes {
    /// The peer's QP number.
    pub remote_qp_num: u32,
    /// The peer's initial send PSN.
    pub remote_psn: u32,
    /// The peer's GID (RoCE/eRDMA, or global IB routing).
    pub remote_gid: Gid,
    /// The peer's LID (InfiniBand; 0 on Ethernet).
    pub remote_lid: u16,
    /// Requested path MTU: capped to the port's active MTU.
    pub path_mtu: Mtu,
    /// Local GID index to send from.
    pub gid_index: u32,
    /// Use the GID (global routing): always on Ethernet.
    pub global: bool,
    /// Outstanding READs/atomics accepted from the peer.
    pub max_dest_rd_atomic: u8,
    /// RNR NAK timer (IB encoding, 12 = 0.64 ms).
    pub min_rnr_timer: u8,
    /// Hop limit of the GRH.
    pub hop_limit: u8,
    /// Traffic class of the GRH.
    pub traffic_class: u8,
    /// Service level.
    pub sl: u8,
}

/// Attributes of the RTR -> RTS transition.
#[derive(Debug, Clone, Copy)]
pub struct RtsAttributes {
    /// Initial send PSN (what the peer uses as `remote_psn`).
    pub psn: u32,
    /// ACK timeout (4.096 us x 2^timeout; 14 = 67 ms).
    pub timeout: u8,
    /// Transport retries (max 7).
    pub retry_cnt: u8,
    /// RNR retries (7 = infinite).
    pub rnr_retry: u8,
    /// Outstanding READs/atomics this side issues.
    pub max_rd_atomic: u8,
}

impl QueuePair {
    /// Asks the device for the current state (`ibv_query_qp`) and records it.
    pub fn query_state(&self) -> Result<QpState> {
        let lib = ffi::verbs()?;
        let mut attr = sys::ibv_qp_attr::default();
        let mut init = sys::ibv_qp_init_attr::default();
        // SAFETY: live QP; writable out-structs.
        let rc = unsafe {
            lib.ibv_query_qp(
                self.inner.raw.0,
                &mut attr,
                sys::IBV_QP_STATE as i32,
                &mut init,
            )
        };
        Error::check("ibv_query_qp", rc)?;
        self.inner.state.store(attr.qp_state, Ordering::Release);
        Ok(QpState::from_raw(attr.qp_state))
    }

    /// The raw `ibv_qp_attr` of `ibv_query_qp` with `mask`.
    pub fn query(&self, mask: u32) -> Result<sys::ibv_qp_attr> {
        let lib = ffi::verbs()?;
        let mut attr = sys::ibv_qp_attr::default();
        let mut init = sys::ibv_qp_init_attr::default();
        // SAFETY: live QP; writable out-structs.
        let rc = unsafe { lib.ibv_query_qp(self.inner.raw.0, &mut attr, mask as i32, &mut init) };
        Error::check("ibv_query_qp", rc)?;
        Ok(attr)
    }

    pub(crate) fn set_state(&self, s: QpState) {
        self.inner.state.store(s.raw(), Ordering::Release);
    }

    fn modify(&self, attr: &mut sys::ibv_qp_attr, mask: u32, to: QpState) -> Result<()> {
        let lib = ffi::verbs()?;
        // SAFETY: live QP; attr is valid for the mask.
        let rc = unsafe { lib.ibv_modify_qp(self.inner.raw.0, attr, mask as i32) };
        Error::check("ibv_modify_qp", rc)?;
        self.set_state(to);
        Ok(())
    }

    fn expect_state(
        &self,
        operation: &'static str,
        want: QpState,
        needed: &'static str,
    ) -> Result<()> {
        let s = self.state();
        if s != want {
            return Err(Error::QpState {
                operation,
                qp_num: self.inner.qp_num,
                state: s,
                needed,
            });
        }
        Ok(())
    }

    /// RESET -> INIT.
    pub fn to_init(&self, a: &InitAttributes) -> Result<()> {
        self.expect_state("modify_qp(INIT)", QpState::Reset, "the QP must be RESET")?;
        let ctx = self.context();
        ctx.port(a.port)?;
        let mut access = a.access;
        if !ctx.attributes().supports_atomics() {
            access = AccessFlags::from_bits(access.bits() & !AccessFlags::REMOTE_ATOMIC.bits());
        }
        let mut attr = sys::ibv_qp_attr {
            qp_state: sys::IBV_QPS_INIT,
            pkey_index: a.pkey_index,
            port_num: a.port,
            qp_access_flags: access.bits(),
            ..Default::default()
        };
        let mask = sys::IBV_QP_STATE
            | sys::IBV_QP_PKEY_INDEX
            | sys::IBV_QP_PORT
            | sys::IBV_QP_ACCESS_FLAGS;
        self.modify(&mut attr, mask, QpState::Init)?;
        self.inner.port.store(a.port, Ordering::Release);
        Ok(())
    }

    /// INIT -> RTR: where the peer is. The path MTU is capped to the port's
    /// active MTU; the GID index must name a non-empty entry.
    pub fn to_rtr(&self, a: &RtrAttributes) -> Result<()> {
        self.expect_state(
            "modify_qp(RTR)",
            QpState::Init,
            "the QP must be INIT (call to_init first)",
        )?;
        let ctx = self.context();
        if ctx.transport() == Transport::Iwarp {
            return Err(Error::Unsupported {
                feature: "connecting an iWARP QP with modify_qp".into(),
                device: Some(ctx.name().to_owned()),
                hint: Some("iWARP QPs connect only through RDMA CM: use erdma::cm".into()),
            });
        }
        check_24bit("remote_qp_num", a.remote_qp_num)?;
        check_24bit("remote_psn", a.remote_psn)?;
        let port = self.inner.port.load(Ordering::Acquire);
        let pa = ctx.port(port)?;
        let mtu = match pa.active_mtu() {
            Some(active) => a.path_mtu.min(active),
            None => a.path_mtu,
        };
        let global = a.global || pa.link_layer() == crate::port::LinkLayer::Ethernet;
        if global {
            // Validates the index (BadGidIndex for out of range or empty).
            let e = ctx.gid(port, a.gid_index)?;
            if e.is_none() {
                return Err(Error::BadGidIndex {
                    device: ctx.name().to_owned(),
                    port,
                    index: a.gid_index,
                    problem: "the entry is empty".into(),
                });
            }
        }
        let mut attr = sys::ibv_qp_attr {
            qp_state: sys::IBV_QPS_RTR,
            path_mtu: mtu.raw(),
            dest_qp_num: a.remote_qp_num,
            rq_psn: a.remote_psn,
            max_dest_rd_atomic: a.max_dest_rd_atomic,
            min_rnr_timer: a.min_rnr_timer,
            ..Default::default()
        };
        attr.ah_attr.dlid = a.remote_lid;
        attr.ah_attr.sl = a.sl;
        attr.ah_attr.port_num = port;
        if global {
            attr.ah_attr.is_global = 1;
            attr.ah_attr.grh.dgid.raw = a.remote_gid.0;
            attr.ah_attr.grh.sgid_index = u8::try_from(a.gid_index).map_err(|_| {
                Error::invalid("modify_qp(RTR)", format!("GID index {} > 255", a.gid_index))
            })?;
            attr.ah_attr.grh.hop_limit = a.hop_limit;
            attr.ah_attr.grh.traffic_class = a.traffic_class;
        }
        let mask = sys::IBV_QP_STATE
            | sys::IBV_QP_AV
            | sys::IBV_QP_PATH_MTU
            | sys::IBV_QP_DEST_QPN
            | sys::IBV_QP_RQ_PSN
            | sys::IBV_QP_MAX_DEST_RD_ATOMIC
            | sys::IBV_QP_MIN_RNR_TIMER;
        self.modify(&mut attr, mask, QpState::Rtr)
    }

    /// RTR -> RTS: ready to send.
    pub fn to_rts(&self, a: &RtsAttributes) -> Result<()> {
        self.expect_state(
            "modify_qp(RTS)",
            QpState::Rtr,
            "the QP must be RTR (call to_rtr first)",
        )?;
        check_24bit("psn", a.psn)?;
        let mut attr = sys::ibv_qp_attr {
            qp_state: sys::IBV_QPS_RTS,
            sq_psn: a.psn,
            timeout: a.timeout,
            retry_cnt: a.retry_cnt.min(7),
            rnr_retry: a.rnr_retry.min(7),
            max_rd_atomic: a.max_rd_atomic,
            ..Default::default()
        };
        let mask = sys::IBV_QP_STATE
            | sys::IBV_QP_SQ_PSN
            | sys::IBV_QP_TIMEOUT
            | sys::IBV_QP_RETRY_CNT
            | sys::IBV_QP_RNR_RETRY
            | sys::IBV_QP_MAX_QP_RD_ATOMIC;
        self.modify(&mut attr, mask, QpState::Rts)
    }

    /// Moves the QP to ERR: outstanding requests complete with WR_FLUSH_ERR.
    pub fn to_error(&self) -> Result<()> {
        let mut attr = sys::ibv_qp_attr {
            qp_state: sys::IBV_QPS_ERR,
            ..Default::default()
        };
        self.modify(&mut attr, sys::IBV_QP_STATE, QpState::Err)
    }

    /// This side's connection record for the GID entry `gid` (see
    /// [`crate::Context::select_gid`]): QP number, a random PSN, the port's LID and
    /// active MTU. Add the buffers the peer may access to `buffers`.
    pub fn endpoint(&self, gid: &GidEntry) -> Result<Endpoint> {
        let pa = self.context().port(gid.port)?;
        Ok(Endpoint {
            qp_num: self.inner.qp_num,
            psn: random_psn(),
            gid: gid.gid,
            gid_index: gid.index,
            lid: pa.lid(),
            port: gid.port,
            mtu: pa.active_mtu().unwrap_or(Mtu::Mtu1024),
            buffers: Vec::new(),
        })
    }

    /// RESET -> INIT -> RTR -> RTS in one go, from this side's record (made
    /// by [`QueuePair::endpoint`]) and the peer's (received e.g. through
    /// [`crate::exchange`]). The path MTU is the smaller of both sides'
    /// MTUs and the port's active MTU.
    pub fn connect(
        &self,
        local: &Endpoint,
        remote: &Endpoint,
        options: &ConnectOptions,
    ) -> Result<()> {
        remote.validate()?;
        local.validate()?;
        if local.qp_num != self.inner.qp_num {
            return Err(Error::invalid(
                "connect",
                format!(
                    "the local endpoint is for QP {:#x}, not this QP {:#x}",
                    local.qp_num, self.inner.qp_num
                ),
            ));
        }
        let a = self.context().attributes();
        let rd = |v: u32| v.clamp(1, 16) as u8;
        if self.state() == QpState::Reset {
            self.to_init(&InitAttributes {
                port: local.port,
                access: options.access,
                pkey_index: 0,
            })?;
        }
        self.to_rtr(&RtrAttributes {
            remote_qp_num: remote.qp_num,
            remote_psn: remote.psn,
            remote_gid: remote.gid,
            remote_lid: remote.lid,
            path_mtu: local.mtu.min(remote.mtu),
            gid_index: local.gid_index,
            global: options.global,
            max_dest_rd_atomic: options.max_rd_atomic.unwrap_or(rd(a.max_qp_rd_atom())),
            min_rnr_timer: options.min_rnr_timer,
            hop_limit: options.hop_limit,
            traffic_class: options.traffic_class,
            sl: options.sl,
        })?;
        self.to_rts(&RtsAttributes {
            psn: local.psn,
            timeout: options.timeout,
            retry_cnt: options.retry_cnt,
            rnr_retry: options.rnr_retry,
            max_rd_atomic: options.max_rd_atomic.unwrap_or(rd(a.max_qp_init_rd_atom())),
        })
    }
}

fn check_24bit(what: &str, v: u32) -> Result<()> {
    if v > 0x00ff_ffff {
        return Err(Error::invalid(
            "modify_qp",
            format!("{what} {v:#x} does not fit in 24 bits"),
        ));
    }
    Ok(())
}

/// A random 24-bit packet sequence number.
pub(crate) fn random_psn() -> u32 {
    let mut b = [0u8; 4];
    // SAFETY: b is 4 writable bytes.
    let n = unsafe { libc::getrandom(b.as_mut_ptr().cast(), b.len(), 0) };
    let v = if n == 4 {
        u32::from_ne_bytes(b)
    } else {
        let t = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.subsec_nanos())
            .unwrap_or(0);
        t ^ std::process::id().rotate_left(16)
    };
    v & 0x00ff_ffff
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn psn_is_24_bit() {
        for _ in 0..100 {
            assert!(random_psn() <= 0x00ff_ffff);
        }
    }
}
