//! perftest's exchange protocol (perftest 4.5-0.17, `VERSION` 6.06,
//! `src/perftest_communication.c`), so that `erdma-perf` talks to
//! `ib_write_bw` & co. in both directions.
//!
//! Two carriers ([`Comm`]): a TCP socket ([`eth`], perftest's "Ethernet"
//! data exchange method) and, with `-R`, an RC QP connected through RDMA CM
//! whose SENDs carry the same records ([`cm`]). Over either, the client
//! writes each record first and the server answers with its own
//! (`ctx_xchg_data`, `ctx_hand_shake`); records have fixed sizes:
//! the version (16 bytes), page and cache-line sizes (4 + 4), the MTU
//! (2 bytes of text), connection records ([`keys`]), bandwidth reports
//! (5 x 8 bytes) and the final `"done"`.
//!
//! Two erdma-perf peers recognise each other by a tag after the NUL of the
//! version string (perftest reads the version with `atof`, so it ignores
//! it) and then swap one more record, their run options as JSON (bounded:
//! [`EXT_MAX`]), to refuse mismatched runs with a clear message.

pub mod cm;
pub mod eth;
pub mod keys;

use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::error::{PerfError, PerfResult};

/// The perftest release this protocol is (`VERSION` of perftest 4.5-0.17).
pub const PERFTEST_VERSION: &str = "6.06";
/// Oldest peer perftest accepts (`check_version_compatibility`).
pub const MIN_PEER_VERSION: f64 = 5.70;
/// perftest's `MAX_VERSION`: the version record's size.
pub const VERSION_LEN: usize = 16;
/// Marks an erdma-perf peer, after the NUL of the version string.
const ERDMA_TAG: &[u8] = b"erdma-perf";
/// Magic of the erdma-perf options record.
const EXT_MAGIC: &[u8; 8] = b"ERDMAPRF";
/// Largest options record accepted from a peer.
pub const EXT_MAX: usize = 4096;

/// Which side this is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    /// Listens; answers each record.
    Server,
    /// Connects; writes each record first.
    Client,
}

/// The carrier of the exchange.
pub trait Comm {
    /// Sends one record.
    fn send(&mut self, data: &[u8], what: &str) -> PerfResult<()>;
    /// Receives one record of exactly `buf.len()` bytes.
    fn recv(&mut self, buf: &mut [u8], what: &str) -> PerfResult<()>;
    /// Time limit of each [`Comm::recv`]; `None` waits as long as the peer
    /// lives (while the peer runs its test).
    fn set_timeout(&mut self, timeout: Option<Duration>);
    /// Whether the peer has gone away (checked without blocking).
    fn peer_gone(&mut self) -> bool;
    /// The peer's address, for messages.
    fn peer(&self) -> String;
    /// perftest's name of the method: `Ethernet` or `rdma_cm`.
    fn method(&self) -> &'static str;
    /// Receives one [`ext_record`] whose body is at most `max` bytes.
    fn recv_record(&mut self, max: usize, what: &str) -> PerfResult<Vec<u8>>;
}

/// Client writes then reads; server reads then writes (`ctx_xchg_data`).
pub fn xchg(
    comm: &mut dyn Comm,
    role: Role,
    mine: &[u8],
    theirs: &mut [u8],
    what: &str,
) -> PerfResult<()> {
    match role {
        Role::Client => {
            comm.send(mine, what)?;
            comm.recv(theirs, what)
        }
        Role::Server => {
            comm.recv(theirs, what)?;
            comm.send(mine, what)
        }
    }
}

/// What the peer said about itself.
#[derive(Debug, Clone, PartialEq)]
pub struct PeerVersion {
    /// The version text (`6.06`).
    pub text: String,
    /// It as a number (perftest's `atof`).
    pub number: f64,
    /// Whether the peer is erdma-perf.
    pub erdma: bool,
}

/// Our version record: `"6.06\0erdma-perf\0"`.
pub fn version_record() -> [u8; VERSION_LEN] {
    let mut b = [0u8; VERSION_LEN];
    let v = PERFTEST_VERSION.as_bytes();
    b[..v.len()].copy_from_slice(v);
    b[v.len() + 1..v.len() + 1 + ERDMA_TAG.len()].copy_from_slice(ERDMA_TAG);
    b
}

/// Parses the peer's version record.
pub fn parse_version(b: &[u8]) -> PerfResult<PeerVersion> {
    let end = b.iter().position(|&c| c == 0).unwrap_or(b.len());
    let text = String::from_utf8_lossy(&b[..end]).into_owned();
    let number = super::options::atof_prefix(&text);
    let printable = !text.is_empty() && text.bytes().all(|c| c.is_ascii_graphic());
    if !printable || number <= 0.0 {
        return Err(PerfError::Peer(format!(
            "the peer sent {:?} where perftest sends its version (e.g. \"6.06\"): is it perftest or erdma-perf, \
             and the same test?",
            String::from_utf8_lossy(b)
        )));
    }
    if number < MIN_PEER_VERSION {
        return Err(PerfError::Peer(format!(
            "the peer runs perftest version {text}: versions older than 5.70 use another exchange format: upgrade it"
        )));
    }
    let tail = &b[(end + 1).min(b.len())..];
    let erdma = tail.starts_with(ERDMA_TAG);
    Ok(PeerVersion {
        text,
        number,
        erdma,
    })
}

/// The run options two erdma-perf peers compare.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RunKey {
    /// erdma-perf's version (informational).
    pub version: String,
    /// Test name (`write_bw`).
    pub test: String,
    /// Message size (or the largest size with `-a`).
    pub size: u64,
    /// `-a`.
    pub all: bool,
    /// `-n`.
    pub iters: u64,
    /// `-D` in seconds.
    pub duration: Option<u32>,
    /// `-q`.
    pub qps: u32,
    /// `-b`.
    pub duplex: bool,
    /// `--verify`.
    pub verify: bool,
    /// Receive queue depth (send tests).
    pub rx_depth: u32,
    /// Atomic operation (atomic tests).
    pub atomic: String,
}

impl RunKey {
    /// The first option that differs, as text for the error message.
    pub fn mismatch(&self, peer: &RunKey) -> Option<String> {
        let pairs: [(&str, String, String); 10] = [
            ("the test", self.test.clone(), peer.test.clone()),
            ("-s", self.size.to_string(), peer.size.to_string()),
            ("-a", self.all.to_string(), peer.all.to_string()),
            ("-n", self.iters.to_string(), peer.iters.to_string()),
            (
                "-D",
                format!("{:?}", self.duration),
                format!("{:?}", peer.duration),
            ),
            ("-q", self.qps.to_string(), peer.qps.to_string()),
            ("-b", self.duplex.to_string(), peer.duplex.to_string()),
            ("--verify", self.verify.to_string(), peer.verify.to_string()),
            (
                "-r (rx depth)",
                self.rx_depth.to_string(),
                peer.rx_depth.to_string(),
            ),
            ("-A", self.atomic.clone(), peer.atomic.clone()),
        ];
        pairs
            .into_iter()
            .find(|(_, a, b)| a != b)
            .map(|(name, a, b)| format!("{name}: this side {a}, the peer {b}"))
    }
}

/// Sends our options record and receives the peer's (erdma-perf peers only).
pub fn exchange_run_key(comm: &mut dyn Comm, role: Role, mine: &RunKey) -> PerfResult<RunKey> {
    let body =
        serde_json::to_vec(mine).map_err(|e| PerfError::Peer(format!("options record: {e}")))?;
    let rec = ext_record(&body);
    let what = "the options record";
    let recv = |comm: &mut dyn Comm| -> PerfResult<RunKey> {
        let body = comm.recv_record(EXT_MAX, what)?;
        serde_json::from_slice(&body)
            .map_err(|e| PerfError::Peer(format!("the peer's options record is not valid: {e}")))
    };
    match role {
        Role::Client => {
            comm.send(&rec, what)?;
            recv(comm)
        }
        Role::Server => {
            let theirs = recv(comm)?;
            comm.send(&rec, what)?;
            Ok(theirs)
        }
    }
}

/// erdma-perf's variable-size record: magic, 4-byte big-endian length, body.
pub fn ext_record(body: &[u8]) -> Vec<u8> {
    let mut rec = Vec::with_capacity(EXT_HEADER + body.len());
    rec.extend_from_slice(EXT_MAGIC);
    rec.extend_from_slice(&(body.len() as u32).to_be_bytes());
    rec.extend_from_slice(body);
    rec
}

/// Size of the header of [`ext_record`].
pub const EXT_HEADER: usize = 12;

/// Checks the header of an [`ext_record`]; returns the body length.
pub fn ext_header(head: &[u8], max: usize) -> PerfResult<usize> {
    if head.len() < EXT_HEADER || &head[..8] != EXT_MAGIC {
        return Err(PerfError::Peer(format!(
            "the peer sent garbage instead of erdma-perf's options record (starts {:02x?})",
            &head[..head.len().min(8)]
        )));
    }
    let len = u32::from_be_bytes([head[8], head[9], head[10], head[11]]) as usize;
    if len > max {
        return Err(PerfError::Peer(format!(
            "the peer's options record announces {len} bytes, more than the {max} allowed: refused"
        )));
    }
    Ok(len)
}

/// `check_sys_data`: page size and cache-line size, the larger of both sides.
pub fn exchange_sys(
    comm: &mut dyn Comm,
    role: Role,
    cycle_buffer: u32,
    cache_line: u32,
) -> PerfResult<(u32, u32)> {
    let mut theirs = [0u8; 4];
    xchg(
        comm,
        role,
        &cycle_buffer.to_be_bytes(),
        &mut theirs,
        "the page size",
    )?;
    let rc = u32::from_be_bytes(theirs);
    xchg(
        comm,
        role,
        &cache_line.to_be_bytes(),
        &mut theirs,
        "the cache-line size",
    )?;
    let rl = u32::from_be_bytes(theirs);
    // Bound what a peer can make this side allocate per slot.
    if !(1..=(1 << 24)).contains(&rc) || !(1..=(1 << 16)).contains(&rl) {
        return Err(PerfError::Peer(format!(
            "the peer sent page size {rc} and cache-line size {rl}: garbage (expected e.g. 4096 and 64)"
        )));
    }
    Ok((cycle_buffer.max(rc), cache_line.max(rl)))
}

/// `check_mtu`: the MTU enum (1..=5) as text in 2 bytes; the smaller wins.
pub fn exchange_mtu(comm: &mut dyn Comm, role: Role, mine: u32) -> PerfResult<u32> {
    let mut rec = [0u8; 2];
    let t = mine.to_string();
    rec[..t.len().min(2)].copy_from_slice(&t.as_bytes()[..t.len().min(2)]);
    let mut theirs = [0u8; 2];
    xchg(comm, role, &rec, &mut theirs, "the MTU")?;
    let end = theirs.iter().position(|&c| c == 0).unwrap_or(2);
    let rem: u32 = std::str::from_utf8(&theirs[..end])
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    // perftest ignores an invalid value and keeps its own.
    Ok(if (1..=5).contains(&rem) && mine > rem {
        rem
    } else {
        mine
    })
}

/// A bandwidth report as `xchg_bw_reports` swaps it.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct WireReport {
    /// Message size.
    pub size: u64,
    /// Iterations.
    pub iters: u64,
    /// Peak bandwidth (report units).
    pub bw_peak: f64,
    /// Average bandwidth (report units).
    pub bw_avg: f64,
    /// Message rate (Mpps).
    pub msg_rate: f64,
}

/// `xchg_bw_reports`: five 8-byte fields, network byte order.
pub fn exchange_report(comm: &mut dyn Comm, role: Role, my: &WireReport) -> PerfResult<WireReport> {
    let mut b = [0u8; 8];
    let what = "the bandwidth report";
    xchg(comm, role, &my.size.to_be_bytes(), &mut b, what)?;
    let size = u64::from_be_bytes(b);
    xchg(comm, role, &my.iters.to_be_bytes(), &mut b, what)?;
    let iters = u64::from_be_bytes(b);
    xchg(
        comm,
        role,
        &my.bw_peak.to_bits().to_be_bytes(),
        &mut b,
        what,
    )?;
    let bw_peak = f64::from_bits(u64::from_be_bytes(b));
    xchg(comm, role, &my.bw_avg.to_bits().to_be_bytes(), &mut b, what)?;
    let bw_avg = f64::from_bits(u64::from_be_bytes(b));
    xchg(
        comm,
        role,
        &my.msg_rate.to_bits().to_be_bytes(),
        &mut b,
        what,
    )?;
    let msg_rate = f64::from_bits(u64::from_be_bytes(b));
    for v in [bw_peak, bw_avg, msg_rate] {
        if !v.is_finite() || v < 0.0 {
            return Err(PerfError::Peer(format!(
                "the peer's bandwidth report holds {v}: garbage"
            )));
        }
    }
    Ok(WireReport {
        size,
        iters,
        bw_peak,
        bw_avg,
        msg_rate,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn version_record_reads_as_6_06_for_perftest() {
        let r = version_record();
        assert_eq!(&r[..5], b"6.06\0");
        let p = parse_version(&r).unwrap();
        assert_eq!(p.text, "6.06");
        assert!(p.erdma);
        let mut perftest = [0u8; 16];
        perftest[..4].copy_from_slice(b"6.06");
        let p = parse_version(&perftest).unwrap();
        assert!(!p.erdma);
        assert!((p.number - 6.06).abs() < 1e-9);
    }

    #[test]
    fn bad_versions_are_refused() {
        assert!(parse_version(&[0xff; 16]).is_err());
        assert!(parse_version(&[0; 16]).is_err());
        let mut old = [0u8; 16];
        old[..4].copy_from_slice(b"5.60");
        let e = parse_version(&old).unwrap_err().to_string();
        assert!(e.contains("older than 5.70"), "{e}");
        let mut text = [0u8; 16];
        text[..5].copy_from_slice(b"hello");
        assert!(parse_version(&text).is_err());
    }

    #[test]
    fn run_key_mismatch_names_the_option() {
        let a = RunKey {
            version: "0.1.0".into(),
            test: "send_bw".into(),
            size: 65536,
            all: false,
            iters: 1000,
            duration: None,
            qps: 1,
            duplex: false,
            verify: true,
            rx_depth: 512,
            atomic: String::new(),
        };
        let mut b = a.clone();
        assert_eq!(a.mismatch(&b), None);
        b.size = 4096;
        assert_eq!(
            a.mismatch(&b).unwrap(),
            "-s: this side 65536, the peer 4096"
        );
    }
}
