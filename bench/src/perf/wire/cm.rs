//! perftest's `-R` exchange: the records travel as SENDs over an RC QP that
//! RDMA CM connects on the test's port (`create_comm_struct`,
//! `rdma_client_connect`, `rdma_server_connect`, `rdma_write_keys`). One
//! receive is always posted; each record is one SEND. iWARP (eRDMA's
//! default mode, siw) connects only this way.

use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4};
use std::time::{Duration, Instant};

use erdma::cm::{CmId, CmListener, ConnParams};
use erdma::{
    AccessFlags, CompletionQueue, MemoryRegion, QpCapabilities, QueuePair, RecvRequest,
    SendRequest, WcStatus, WorkCompletion,
};

use super::{Comm, ext_header};
use crate::perf::error::{Context, PerfError, PerfResult};

/// Receive buffer size: perftest's records are at most 56 bytes; erdma-perf's
/// options record at most 4 KiB plus its header.
const BUF: usize = 4096 + 64;
/// Wait for a connection request in slices of this length (the library's
/// waits are bounded).
const LISTEN_SLICE: Duration = Duration::from_secs(3600);

/// A listening RDMA CM id for the exchange connection.
pub struct CmCommListener {
    listener: CmListener,
    addr: SocketAddr,
}

impl CmCommListener {
    /// Listens on `port` of every address, or of `source`.
    pub fn bind(source: Option<Ipv4Addr>, port: u16) -> PerfResult<CmCommListener> {
        let addr = SocketAddr::V4(SocketAddrV4::new(
            source.unwrap_or(Ipv4Addr::UNSPECIFIED),
            port,
        ));
        let listener = CmListener::bind(addr).ctx(|| format!("listen with RDMA CM on {addr}"))?;
        Ok(CmCommListener { listener, addr })
    }

    /// Waits for a client (for ever, or at most `wait`) and accepts it.
    pub fn accept(&self, timeout: Duration, wait: Option<Duration>) -> PerfResult<CmComm> {
        let req = loop {
            match self.listener.get_request(wait.unwrap_or(LISTEN_SLICE)) {
                Ok(r) => break r,
                Err(erdma::Error::Timeout { .. }) if wait.is_none() => continue,
                Err(e) => {
                    return Err(PerfError::rdma(
                        format!("wait for a client on {}", self.addr),
                        e,
                    ));
                }
            }
        };
        let peer = req
            .peer_addr()
            .map(|a| a.to_string())
            .unwrap_or_else(|| "the client".into());
        let ctx = req
            .context()
            .ctx(|| "the exchange connection's device".into())?;
        let parts = Parts::new(&ctx, |pd, s, r, caps| req.create_qp(pd, s, r, caps))?;
        let params = ConnParams::default();
        let id = req
            .accept(&parts.qp, &params, timeout)
            .ctx(|| format!("accept the exchange connection from {peer}"))?;
        Ok(CmComm::new(id, parts, peer, timeout))
    }
}

/// The QP, CQs and buffers of the exchange connection.
struct Parts {
    qp: QueuePair,
    send_cq: CompletionQueue,
    recv_cq: CompletionQueue,
    send_mr: MemoryRegion,
    recv_mr: MemoryRegion,
}

impl Parts {
    fn new(
        ctx: &erdma::Context,
        create: impl FnOnce(
            &erdma::ProtectionDomain,
            &CompletionQueue,
            &CompletionQueue,
            &QpCapabilities,
        ) -> erdma::Result<QueuePair>,
    ) -> PerfResult<Parts> {
        let what = || "set up the RDMA CM exchange connection".to_string();
        let pd = ctx.alloc_pd().ctx(what)?;
        let send_cq = ctx.create_cq(4).ctx(what)?;
        let recv_cq = ctx.create_cq(4).ctx(what)?;
        let send_mr = pd
            .register(vec![0u8; BUF], AccessFlags::LOCAL_WRITE)
            .ctx(what)?;
        let recv_mr = pd
            .register(vec![0u8; BUF], AccessFlags::LOCAL_WRITE)
            .ctx(what)?;
        let caps = QpCapabilities {
            max_send_wr: 2,
            max_recv_wr: 2,
            max_send_sge: 1,
            max_recv_sge: 1,
            max_inline_data: 0,
        };
        let qp = create(&pd, &send_cq, &recv_cq, &caps).ctx(what)?;
        qp.post_recv(RecvRequest::new([recv_mr.all()])).ctx(what)?;
        Ok(Parts {
            qp,
            send_cq,
            recv_cq,
            send_mr,
            recv_mr,
        })
    }
}

/// The exchange over an RDMA CM connection.
pub struct CmComm {
    // Field order: the QP and its memory go before the id that owns it.
    parts: Parts,
    id: CmId,
    peer: String,
    timeout: Option<Duration>,
    /// A receive completion noticed by `peer_gone`.
    pending: Option<WorkCompletion>,
    gone: bool,
}

impl CmComm {
    fn new(id: CmId, parts: Parts, peer: String, timeout: Duration) -> CmComm {
        CmComm {
            parts,
            id,
            peer,
            timeout: Some(timeout),
            pending: None,
            gone: false,
        }
    }

    /// Connects to `server:port` (from `source` when given).
    pub fn connect(
        server: Ipv4Addr,
        port: u16,
        source: Option<Ipv4Addr>,
        timeout: Duration,
    ) -> PerfResult<CmComm> {
        let dst = SocketAddr::V4(SocketAddrV4::new(server, port));
        let src = source.map(|s| SocketAddr::V4(SocketAddrV4::new(s, 0)));
        let deadline = Instant::now() + Duration::from_secs(5).min(timeout);
        loop {
            match Self::try_connect(dst, src, timeout) {
                Ok(c) => return Ok(c),
                // Nothing listens yet: the server may be starting (a
                // REJECTED event, or on siw rdma_connect's own ECONNREFUSED).
                Err(PerfError::Rdma { err, .. }) if refused(&err) && Instant::now() < deadline => {
                    std::thread::sleep(Duration::from_millis(100))
                }
                Err(e) => return Err(e),
            }
        }
    }

    fn try_connect(
        dst: SocketAddr,
        src: Option<SocketAddr>,
        timeout: Duration,
    ) -> PerfResult<CmComm> {
        let id = CmId::resolve(dst, src, timeout)
            .ctx(|| format!("resolve {dst} with RDMA CM (the -R exchange)"))?;
        let ctx = id
            .context()
            .ctx(|| "the exchange connection's device".into())?;
        let parts = Parts::new(&ctx, |pd, s, r, caps| id.create_qp(pd, s, r, caps))?;
        id.connect(&parts.qp, &ConnParams::default(), timeout)
            .ctx(|| format!("connect the -R exchange to {dst} (is the server running with -R?)"))?;
        Ok(CmComm::new(id, parts, dst.to_string(), timeout))
    }

    /// Waits for the next receive completion.
    fn next_recv(&mut self, what: &str) -> PerfResult<WorkCompletion> {
        if let Some(wc) = self.pending.take() {
            return Ok(wc);
        }
        let started = Instant::now();
        let mut wc = [WorkCompletion::default()];
        let mut spins = 0u32;
        loop {
            let n = self
                .parts
                .recv_cq
                .poll(&mut wc)
                .ctx(|| format!("receive {what}"))?;
            if n == 1 {
                return Ok(wc[0]);
            }
            spins += 1;
            if spins.is_multiple_of(64) {
                if let Some(t) = self.timeout
                    && started.elapsed() > t
                {
                    return Err(PerfError::Peer(format!(
                        "timed out after {:.0?} waiting for {what} from {} over RDMA CM: is the peer the same \
                             test with -R and the same options? (--timeout)",
                        started.elapsed(),
                        self.peer
                    )));
                }
                if self.disconnected() {
                    return Err(self.closed(what));
                }
                std::thread::sleep(Duration::from_micros(200));
            }
        }
    }

    fn disconnected(&mut self) -> bool {
        if self.gone {
            return true;
        }
        self.gone = match self.id.wait_disconnect(Duration::ZERO) {
            Ok(()) => true,
            Err(erdma::Error::Timeout { .. }) => false,
            Err(erdma::Error::Cm { got, .. }) => {
                got.contains("DISCONNECT") || got.contains("REMOVAL") || got.contains("ERROR")
            }
            Err(_) => true,
        };
        self.gone
    }

    fn closed(&self, what: &str) -> PerfError {
        PerfError::Peer(format!(
            "{} disconnected while this side waited for {what} (did it fail or get killed? see its output)",
            self.peer
        ))
    }

    /// Receives one message; returns its length (it is in `recv_mr`).
    fn recv_message(&mut self, what: &str) -> PerfResult<usize> {
        let wc = self.next_recv(what)?;
        if wc.status == WcStatus::LocLenErr {
            return Err(PerfError::Peer(format!(
                "{} sent {what} larger than the {BUF}-byte receive buffer: refused",
                self.peer
            )));
        }
        if !wc.is_ok() {
            return Err(if wc.status == WcStatus::WrFlushErr {
                self.closed(what)
            } else {
                PerfError::rdma(
                    format!("receive {what} from {}", self.peer),
                    wc.ok()
                        .err()
                        .unwrap_or(erdma::Error::verb("ibv_poll_cq", libc::EIO)),
                )
            });
        }
        Ok(wc.byte_len as usize)
    }

    fn repost(&mut self, what: &str) -> PerfResult<()> {
        self.parts
            .qp
            .post_recv(RecvRequest::new([self.parts.recv_mr.all()]))
            .ctx(|| format!("post the receive for the record after {what}"))
    }
}

impl Comm for CmComm {
    fn send(&mut self, data: &[u8], what: &str) -> PerfResult<()> {
        if data.len() > BUF {
            return Err(PerfError::Peer(format!(
                "{what}: {} bytes exceed the exchange buffer",
                data.len()
            )));
        }
        let buf = self
            .parts
            .send_mr
            .as_mut_slice()
            .ctx(|| format!("send {what}"))?;
        buf[..data.len()].copy_from_slice(data);
        let slice = self
            .parts
            .send_mr
            .slice(..data.len())
            .ctx(|| format!("send {what}"))?;
        self.parts
            .qp
            .post_send(SendRequest::send([slice]))
            .ctx(|| format!("send {what} to {}", self.peer))?;
        let started = Instant::now();
        let mut wc = [WorkCompletion::default()];
        loop {
            if self
                .parts
                .send_cq
                .poll(&mut wc)
                .ctx(|| format!("send {what}"))?
                == 1
            {
                if wc[0].status == WcStatus::WrFlushErr || wc[0].status == WcStatus::RetryExcErr {
                    return Err(self.closed(what));
                }
                wc[0].ok().ctx(|| format!("send {what} to {}", self.peer))?;
                return Ok(());
            }
            if started.elapsed() > self.timeout.unwrap_or(Duration::from_secs(60)) {
                return Err(PerfError::Peer(format!(
                    "sending {what} to {} did not complete in {:.0?}",
                    self.peer,
                    started.elapsed()
                )));
            }
            std::hint::spin_loop();
        }
    }

    fn recv(&mut self, buf: &mut [u8], what: &str) -> PerfResult<()> {
        let len = self.recv_message(what)?;
        if len != buf.len() {
            return Err(PerfError::Peer(format!(
                "{} sent {len} bytes where {what} ({} bytes) was expected: is it the same test with the same options?",
                self.peer,
                buf.len()
            )));
        }
        let data = self
            .parts
            .recv_mr
            .as_slice()
            .ctx(|| format!("receive {what}"))?;
        buf.copy_from_slice(&data[..len]);
        self.repost(what)
    }

    fn set_timeout(&mut self, timeout: Option<Duration>) {
        self.timeout = timeout;
    }

    fn peer_gone(&mut self) -> bool {
        if self.pending.is_none() {
            let mut wc = [WorkCompletion::default()];
            if let Ok(1) = self.parts.recv_cq.poll(&mut wc) {
                if !wc[0].is_ok() {
                    self.gone = true;
                }
                self.pending = Some(wc[0]);
            }
        }
        self.disconnected()
    }

    fn peer(&self) -> String {
        self.peer.clone()
    }

    fn method(&self) -> &'static str {
        "rdma_cm"
    }

    fn recv_record(&mut self, max: usize, what: &str) -> PerfResult<Vec<u8>> {
        let len = self.recv_message(what)?;
        let data = self
            .parts
            .recv_mr
            .as_slice()
            .ctx(|| format!("receive {what}"))?;
        let body_len = ext_header(&data[..len], max)?;
        if super::EXT_HEADER + body_len != len {
            return Err(PerfError::Peer(format!(
                "{} sent a {len}-byte options record announcing {body_len} bytes: garbage",
                self.peer
            )));
        }
        let body = data[super::EXT_HEADER..len].to_vec();
        self.repost(what)?;
        Ok(body)
    }
}

/// Whether RDMA CM's connect failed because nothing listened yet: a REJECTED
/// event (RoCE), or ECONNREFUSED from `rdma_connect` itself (siw connects its
/// TCP stream inside the call).
pub fn refused(err: &erdma::Error) -> bool {
    matches!(err, erdma::Error::Cm { .. })
        || matches!(err, erdma::Error::Verb { verb, errno, .. }
            if verb.starts_with("rdma_") && *errno == libc::ECONNREFUSED)
}

#[cfg(test)]
mod tests {
    use super::refused;

    #[test]
    fn a_refused_rdma_connect_is_retried_other_errors_are_not() {
        assert!(refused(&erdma::Error::verb(
            "rdma_connect",
            libc::ECONNREFUSED
        )));
        assert!(!refused(&erdma::Error::verb(
            "rdma_connect",
            libc::ETIMEDOUT
        )));
        assert!(!refused(&erdma::Error::verb(
            "ibv_reg_mr",
            libc::ECONNREFUSED
        )));
    }
}
