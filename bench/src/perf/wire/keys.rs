//! perftest's connection record (`struct pingpong_dest`) and its two wire
//! forms: the text of the TCP ("Ethernet") exchange, `KEY_PRINT_FMT[_GID]`
//! (59 or 108 bytes, hexadecimal fields separated by `:`), and the binary
//! struct of the RDMA CM exchange (56 bytes, big-endian fields).
//!
//! Parsing never trusts the peer: every field must be hexadecimal and fit
//! its width, or the record is refused with the field named.

use std::fmt;

/// Size of the text record without a GID (`KEY_MSG_SIZE`).
pub const KEY_MSG_SIZE: usize = 59;
/// Size of the text record with a GID (`KEY_MSG_SIZE_GID`).
pub const KEY_MSG_SIZE_GID: usize = 108;
/// Size of `struct pingpong_dest` on x86-64 (the RDMA CM exchange).
pub const DEST_STRUCT_SIZE: usize = 56;

/// One side's QP as perftest exchanges it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Dest {
    /// LID (0 on Ethernet).
    pub lid: u32,
    /// Outstanding RDMA READs/atomics this side accepts (`-o`).
    pub out_reads: u32,
    /// QP number (24 bits).
    pub qpn: u32,
    /// Initial PSN (24 bits).
    pub psn: u32,
    /// rkey of the memory the peer may access.
    pub rkey: u32,
    /// Address of that memory.
    pub vaddr: u64,
    /// GID (raw bytes).
    pub gid: [u8; 16],
    /// SRQ number (XRC/DC only; 0 here).
    pub srqn: u32,
}

/// What is wrong with a record from the peer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BadRecord(pub String);

impl fmt::Display for BadRecord {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl Dest {
    /// The text record (`KEY_PRINT_FMT_GID` when `with_gid`, else
    /// `KEY_PRINT_FMT`), NUL-padded to its fixed size as perftest writes it.
    pub fn to_text(&self, with_gid: bool) -> Vec<u8> {
        let mut s = format!(
            "{:04x}:{:04x}:{:06x}:{:06x}:{:08x}:{:016x}:",
            self.lid, self.out_reads, self.qpn, self.psn, self.rkey, self.vaddr
        );
        let size = if with_gid {
            for b in self.gid {
                s.push_str(&format!("{b:02x}:"));
            }
            s.push_str(&format!("{:08x}:", self.srqn));
            KEY_MSG_SIZE_GID
        } else {
            s.push_str(&format!("{:08x}", self.srqn));
            KEY_MSG_SIZE
        };
        let mut v = s.into_bytes();
        v.resize(size, 0);
        v
    }

    /// Parses a text record of `KEY_MSG_SIZE_GID` (`with_gid`) or
    /// `KEY_MSG_SIZE` bytes.
    pub fn from_text(msg: &[u8], with_gid: bool) -> Result<Dest, BadRecord> {
        let end = msg.iter().position(|&b| b == 0).unwrap_or(msg.len());
        let text = std::str::from_utf8(&msg[..end])
            .map_err(|_| BadRecord("the connection record is not text".into()))?;
        let mut fields = text.split(':');
        let mut next = |name: &str, max_digits: usize| -> Result<u64, BadRecord> {
            let f = fields
                .next()
                .ok_or_else(|| BadRecord(format!("the connection record ends before {name}")))?;
            if f.is_empty() || f.len() > max_digits || !f.bytes().all(|b| b.is_ascii_hexdigit()) {
                return Err(BadRecord(format!(
                    "{name} '{}' in the connection record is not a hexadecimal number of at most {max_digits} digits",
                    f.escape_debug()
                )));
            }
            u64::from_str_radix(f, 16)
                .map_err(|_| BadRecord(format!("{name} '{f}' is not hexadecimal")))
        };
        let lid = next("the LID", 8)? as u32;
        let out_reads = next("the outstanding reads", 8)? as u32;
        let qpn = next("the QP number", 6)? as u32;
        let psn = next("the PSN", 6)? as u32;
        let rkey = next("the rkey", 8)? as u32;
        let vaddr = next("the address", 16)?;
        let mut gid = [0u8; 16];
        if with_gid {
            for (i, b) in gid.iter_mut().enumerate() {
                *b = next(&format!("GID byte {i}"), 2)? as u8;
            }
        }
        let srqn = next("the SRQ number", 8)? as u32;
        let d = Dest {
            lid,
            out_reads,
            qpn,
            psn,
            rkey,
            vaddr,
            gid,
            srqn,
        };
        d.check()?;
        Ok(d)
    }

    /// `struct pingpong_dest` as perftest's RDMA CM exchange sends it
    /// (big-endian fields, `gid_index` last).
    pub fn to_struct(&self, gid_index: i32) -> [u8; DEST_STRUCT_SIZE] {
        let mut b = [0u8; DEST_STRUCT_SIZE];
        b[0..4].copy_from_slice(&self.lid.to_be_bytes());
        b[4..8].copy_from_slice(&self.out_reads.to_be_bytes());
        b[8..12].copy_from_slice(&self.qpn.to_be_bytes());
        b[12..16].copy_from_slice(&self.psn.to_be_bytes());
        b[16..20].copy_from_slice(&self.rkey.to_be_bytes());
        b[24..32].copy_from_slice(&self.vaddr.to_be_bytes());
        b[32..48].copy_from_slice(&self.gid);
        b[48..52].copy_from_slice(&self.srqn.to_be_bytes());
        b[52..56].copy_from_slice(&gid_index.to_be_bytes());
        b
    }

    /// Parses [`Dest::to_struct`]'s layout (at least 56 bytes).
    pub fn from_struct(b: &[u8]) -> Result<Dest, BadRecord> {
        if b.len() < DEST_STRUCT_SIZE {
            return Err(BadRecord(format!(
                "the connection record has {} bytes, perftest's has {DEST_STRUCT_SIZE}",
                b.len()
            )));
        }
        let u32_at = |o: usize| u32::from_be_bytes([b[o], b[o + 1], b[o + 2], b[o + 3]]);
        let mut vaddr = [0u8; 8];
        vaddr.copy_from_slice(&b[24..32]);
        let mut gid = [0u8; 16];
        gid.copy_from_slice(&b[32..48]);
        let d = Dest {
            lid: u32_at(0),
            out_reads: u32_at(4),
            qpn: u32_at(8),
            psn: u32_at(12),
            rkey: u32_at(16),
            vaddr: u64::from_be_bytes(vaddr),
            gid,
            srqn: u32_at(48),
        };
        d.check()?;
        Ok(d)
    }

    fn check(&self) -> Result<(), BadRecord> {
        if self.qpn > 0x00ff_ffff {
            return Err(BadRecord(format!(
                "QP number {:#x} exceeds 24 bits",
                self.qpn
            )));
        }
        if self.psn > 0x00ff_ffff {
            return Err(BadRecord(format!("PSN {:#x} exceeds 24 bits", self.psn)));
        }
        if self.lid > 0xffff {
            return Err(BadRecord(format!("LID {:#x} exceeds 16 bits", self.lid)));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> Dest {
        Dest {
            lid: 0,
            out_reads: 16,
            qpn: 0x11,
            psn: 0x80e736,
            rkey: 0x270,
            vaddr: 0x55729f8c6000,
            gid: [0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 10, 99, 0, 1],
            srqn: 0,
        }
    }

    #[test]
    fn text_record_is_perftests_format() {
        let t = sample().to_text(true);
        assert_eq!(t.len(), KEY_MSG_SIZE_GID);
        let s = std::str::from_utf8(&t[..107]).unwrap();
        assert_eq!(
            s,
            "0000:0010:000011:80e736:00000270:000055729f8c6000:00:00:00:00:00:00:00:00:00:00:ff:ff:0a:63:00:01:00000000:"
        );
        assert_eq!(t[107], 0);
        assert_eq!(Dest::from_text(&t, true).unwrap(), sample());
        let short = sample().to_text(false);
        assert_eq!(short.len(), KEY_MSG_SIZE);
        let mut no_gid = sample();
        no_gid.gid = [0; 16];
        assert_eq!(Dest::from_text(&short, false).unwrap(), no_gid);
    }

    #[test]
    fn garbage_records_are_refused_with_the_field() {
        let mut t = sample().to_text(true);
        t[10..16].copy_from_slice(b"zzzzzz");
        let e = Dest::from_text(&t, true).unwrap_err();
        assert!(e.0.contains("QP number"), "{e}");
        assert!(Dest::from_text(&[0xff; KEY_MSG_SIZE_GID], true).is_err());
        assert!(Dest::from_text(&[0; KEY_MSG_SIZE_GID], true).is_err());
        assert!(Dest::from_text(b"0000:0000:1000000:", true).is_err());
        let e = Dest::from_text(b"0000:0010:000011:", true).unwrap_err();
        assert!(e.0.contains("the PSN ''"), "{e}");
        let e = Dest::from_text(b"0000:0010:000011", true).unwrap_err();
        assert!(e.0.contains("ends before the PSN"), "{e}");
    }

    #[test]
    fn struct_record_round_trips() {
        let b = sample().to_struct(1);
        assert_eq!(&b[8..12], &[0, 0, 0, 0x11]);
        assert_eq!(&b[52..56], &[0, 0, 0, 1]);
        assert_eq!(Dest::from_struct(&b).unwrap(), sample());
        assert!(Dest::from_struct(&b[..40]).is_err());
        let mut bad = b;
        bad[8] = 0xff;
        assert!(Dest::from_struct(&bad).is_err());
    }
}
