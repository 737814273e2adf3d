//! The connection record two sides swap to connect their queue pairs.

use crate::error::{Error, Result};
use crate::gid::Gid;
use crate::mr::{AccessFlags, RemoteBuffer};
use crate::port::Mtu;

/// What a peer needs to connect to a queue pair and to access its memory.
/// Serializable (JSON through [`crate::exchange`], or any other channel).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Endpoint {
    /// QP number (24 bits).
    pub qp_num: u32,
    /// Initial send PSN (24 bits).
    pub psn: u32,
    /// GID to send to.
    pub gid: Gid,
    /// GID index it has on its own port (informational for the peer).
    pub gid_index: u32,
    /// LID (InfiniBand; 0 on Ethernet).
    pub lid: u16,
    /// Port number.
    pub port: u8,
    /// Active MTU of the port.
    pub mtu: Mtu,
    /// Memory the peer may access (RDMA READ/WRITE, atomics).
    #[serde(default)]
    pub buffers: Vec<RemoteBuffer>,
}

impl Endpoint {
    /// Checks the fields a peer could have garbled (24-bit QPN and PSN).
    pub fn validate(&self) -> Result<()> {
        if self.qp_num > 0x00ff_ffff || self.qp_num == 0 {
            return Err(Error::invalid(
                "connect",
                format!(
                    "endpoint QP number {:#x} is not a valid 24-bit QPN",
                    self.qp_num
                ),
            ));
        }
        if self.psn > 0x00ff_ffff {
            return Err(Error::invalid(
                "connect",
                format!("endpoint PSN {:#x} does not fit in 24 bits", self.psn),
            ));
        }
        if self.port == 0 {
            return Err(Error::invalid(
                "connect",
                "endpoint port 0 (ports are numbered from 1)",
            ));
        }
        Ok(())
    }
}

/// Settings of [`crate::QueuePair::connect`]. The defaults suit eRDMA and
/// RoCE (NCCL's values: timeout 14 here vs NCCL's 20, retry 7).
#[derive(Debug, Clone)]
pub struct ConnectOptions {
    /// What the peer may do to this side's memory through the QP
    /// (REMOTE_ATOMIC is dropped on devices without atomics).
    pub access: AccessFlags,
    /// ACK timeout exponent (4.096 us x 2^timeout).
    pub timeout: u8,
    /// Transport retries (max 7).
    pub retry_cnt: u8,
    /// RNR retries (7 = infinite).
    pub rnr_retry: u8,
    /// RNR NAK timer (12 = 0.64 ms).
    pub min_rnr_timer: u8,
    /// Outstanding READs/atomics each way; `None` = the device's limit, at most 16.
    pub max_rd_atomic: Option<u8>,
    /// Use the GID even on InfiniBand (always used on Ethernet).
    pub global: bool,
    /// GRH hop limit.
    pub hop_limit: u8,
    /// GRH traffic class (DSCP << 2 on RoCE).
    pub traffic_class: u8,
    /// Service level.
    pub sl: u8,
}

impl Default for ConnectOptions {
    fn default() -> Self {
        ConnectOptions {
            access: AccessFlags::ALL,
            timeout: 14,
            retry_cnt: 7,
            rnr_retry: 7,
            min_rnr_timer: 12,
            max_rd_atomic: None,
            global: false,
            hop_limit: 64,
            traffic_class: 0,
            sl: 0,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ep() -> Endpoint {
        Endpoint {
            qp_num: 0x11,
            psn: 0x123456,
            gid: "::ffff:10.99.0.1".parse().unwrap(),
            gid_index: 1,
            lid: 0,
            port: 1,
            mtu: Mtu::Mtu1024,
            buffers: vec![RemoteBuffer {
                addr: 0x7f00_0000_1000,
                rkey: 0x1234,
                len: 4096,
            }],
        }
    }

    #[test]
    fn json_round_trip() {
        let e = ep();
        let j = serde_json::to_string(&e).unwrap();
        assert!(j.contains("\"gid\":\"::ffff:10.99.0.1\""), "{j}");
        assert!(j.contains("\"mtu\":1024"), "{j}");
        assert_eq!(serde_json::from_str::<Endpoint>(&j).unwrap(), e);
    }

    #[test]
    fn garbage_is_rejected() {
        assert!(serde_json::from_str::<Endpoint>("{}").is_err());
        assert!(serde_json::from_str::<Endpoint>("[1,2,3]").is_err());
        let mut e = ep();
        e.qp_num = 0x0100_0000;
        assert!(e.validate().is_err());
        let mut e = ep();
        e.psn = u32::MAX;
        assert!(e.validate().is_err());
        let mut e = ep();
        e.port = 0;
        assert!(e.validate().is_err());
        assert!(ep().validate().is_ok());
    }
}
