//! Latency and bandwidth between two hosts: the client side (the criterion
//! bench `two_host`) and the server side (`erdma-bench-server`).
//!
//! Connection: RoCE/IB devices swap endpoint records over TCP
//! ([`erdma::exchange`]) and connect with `modify_qp`; iWARP devices (eRDMA's
//! default mode, siw), or any device with `ERDMA_BENCH_CM=1` on both sides,
//! connect through RDMA CM at the server's RDMA address.
//!
//! Traffic: 8-byte SEND ping-pong (the server echoes every message) and
//! RDMA WRITEs of [`BW_SIZE`] into a server buffer, [`DEPTH`] in flight. A
//! ping carrying [`BYE`] ends the server's session; a session also ends when
//! the client's connection breaks or nothing arrives for [`IDLE`].

use std::net::{SocketAddr, ToSocketAddrs};
use std::time::{Duration, Instant};

use erdma::cm::{CmId, CmListener, ConnParams};
use erdma::exchange::{Exchange, ExchangeListener};
use erdma::{
    AccessFlags, AlignedBuffer, CompletionQueue, ConnectOptions, Context, Endpoint, Error,
    MemoryRegion, ProtectionDomain, QpCapabilities, QueuePair, RecvRequest, RemoteBuffer, Result,
    SendRequest, Transport, WcOpcode, WorkCompletion,
};

/// The server's default port.
pub const DEFAULT_PORT: u16 = 18700;
/// Size of a ping.
pub const PING: usize = 8;
/// Size of one RDMA WRITE of the bandwidth test.
pub const BW_SIZE: usize = 64 * 1024;
/// RDMA WRITEs in flight in the bandwidth test.
pub const DEPTH: usize = 32;
/// Receives kept posted on each side.
const RECVS: usize = 16;
/// The ping payload that ends a session.
pub const BYE: u64 = u64::MAX;
/// A session without traffic for this long is over.
pub const IDLE: Duration = Duration::from_secs(120);
/// Time limit of connection steps and of waiting for one completion.
const STEP: Duration = Duration::from_secs(30);

/// Whether to connect through RDMA CM: on iWARP devices, or when
/// `ERDMA_BENCH_CM=1`.
fn use_cm(ctx_transport: Transport) -> bool {
    ctx_transport == Transport::Iwarp || std::env::var("ERDMA_BENCH_CM").is_ok_and(|v| v == "1")
}

/// The device named by `ERDMA_BENCH_DEV` (else the first device) and the
/// GID index from `ERDMA_BENCH_GID_INDEX` (else NCCL's choice).
pub fn device_from_env() -> Result<(Context, Option<u32>)> {
    let gid = std::env::var("ERDMA_BENCH_GID_INDEX")
        .ok()
        .and_then(|v| v.parse().ok());
    let ctx = match std::env::var("ERDMA_BENCH_DEV") {
        Ok(name) => Context::open(&name)?,
        Err(_) => {
            let list = erdma::devices();
            match list.iter().next() {
                Some(d) => d.open()?,
                None => {
                    return Err(Error::NoSuchDevice {
                        name: "(any)".into(),
                        available: Vec::new(),
                        reason: list.reason().map(|r| r.to_string()),
                    });
                }
            }
        }
    };
    Ok((ctx, gid))
}

fn caps() -> QpCapabilities {
    QpCapabilities {
        max_send_wr: (DEPTH + RECVS) as u32,
        max_recv_wr: RECVS as u32,
        max_send_sge: 1,
        max_recv_sge: 1,
        max_inline_data: 0,
    }
}

/// The memory and queues of one side of a session.
struct Buffers {
    ping: MemoryRegion<AlignedBuffer>,
    pongs: MemoryRegion<AlignedBuffer>,
}

impl Buffers {
    fn new(pd: &ProtectionDomain) -> Result<Buffers> {
        Ok(Buffers {
            ping: pd.register(AlignedBuffer::new(PING)?, AccessFlags::empty())?,
            pongs: pd.register(AlignedBuffer::new(PING * RECVS)?, AccessFlags::LOCAL_WRITE)?,
        })
    }

    /// Posts the receive of slot `i`.
    fn post_recv(&self, qp: &QueuePair, i: usize) -> Result<()> {
        qp.post_recv(
            RecvRequest::new([self.pongs.slice(i * PING..(i + 1) * PING)?]).wr_id(i as u64),
        )
    }

    /// The payload received in slot `i`.
    fn payload(&self, i: usize) -> Result<u64> {
        let mut b = [0u8; PING];
        self.pongs.read_at(i * PING, &mut b)?;
        Ok(u64::from_le_bytes(b))
    }

    /// SENDs `payload`; the caller polls the completion.
    fn send(&mut self, qp: &QueuePair, payload: u64) -> Result<()> {
        self.ping.write_at(0, &payload.to_le_bytes())?;
        qp.post_send(SendRequest::send([self.ping.all()]).wr_id(u64::MAX))
    }
}

/// A connected session, client side.
pub struct Client {
    qp: QueuePair,
    cq: CompletionQueue,
    bufs: Buffers,
    bw: MemoryRegion<AlignedBuffer>,
    peer_buf: RemoteBuffer,
    ctl: Option<Exchange>,
    _cm: Option<CmId>,
    wcs: Vec<WorkCompletion>,
    seq: u64,
}

impl Client {
    /// Connects to the server at `peer` (`host:port`) from `ctx`.
    pub fn connect(peer: &str, ctx: &Context, gid_index: Option<u32>) -> Result<Client> {
        if use_cm(ctx.transport()) {
            return Self::connect_cm(peer, ctx);
        }
        let mut ctl = Exchange::connect(peer, STEP)?;
        let gid = ctx.select_gid(1, gid_index)?;
        let pd = ctx.alloc_pd()?;
        let c = caps();
        let cq = ctx.create_cq(c.max_send_wr + c.max_recv_wr)?;
        let qp = pd.create_rc_qp(&cq, &cq, &c)?;
        let local = qp.endpoint(&gid)?;
        let remote: Endpoint = ctl.swap(&local)?;
        let peer_buf = *remote.buffers.first().ok_or_else(|| Error::Protocol {
            peer: peer.into(),
            problem: "the server sent no buffer".into(),
        })?;
        qp.connect(&local, &remote, &ConnectOptions::default())?;
        let bufs = Buffers::new(&pd)?;
        (0..RECVS).try_for_each(|i| bufs.post_recv(&qp, i))?;
        ctl.barrier()?;
        Self::finish(pd, cq, qp, bufs, peer_buf, Some(ctl), None)
    }

    fn connect_cm(peer: &str, _ctx: &Context) -> Result<Client> {
        let addr = resolve(peer)?;
        let id = CmId::resolve(addr, None, STEP)?;
        let ctx = id.context()?;
        let pd = ctx.alloc_pd()?;
        let c = caps();
        let cq = ctx.create_cq(c.max_send_wr + c.max_recv_wr)?;
        let qp = id.create_qp(&pd, &cq, &cq, &c)?;
        let bufs = Buffers::new(&pd)?;
        (0..RECVS).try_for_each(|i| bufs.post_recv(&qp, i))?;
        let reply = id.connect(&qp, &ConnParams::default(), STEP)?;
        let peer_buf = RemoteBuffer::from_bytes(&reply).ok_or_else(|| Error::Protocol {
            peer: peer.into(),
            problem: "the server's private data holds no buffer".into(),
        })?;
        Self::finish(pd, cq, qp, bufs, peer_buf, None, Some(id))
    }

    fn finish(
        pd: ProtectionDomain,
        cq: CompletionQueue,
        qp: QueuePair,
        bufs: Buffers,
        peer_buf: RemoteBuffer,
        ctl: Option<Exchange>,
        cm: Option<CmId>,
    ) -> Result<Client> {
        if peer_buf.len < BW_SIZE as u64 {
            return Err(Error::invalid(
                "two_host bench",
                format!(
                    "the server's buffer has {} bytes, {BW_SIZE} needed",
                    peer_buf.len
                ),
            ));
        }
        let bw = pd.register(AlignedBuffer::new(BW_SIZE)?, AccessFlags::empty())?;
        Ok(Client {
            qp,
            cq,
            bufs,
            bw,
            peer_buf: peer_buf.slice(..BW_SIZE)?,
            ctl,
            _cm: cm,
            wcs: vec![WorkCompletion::default(); DEPTH],
            seq: 0,
        })
    }

    /// One round trip: SEND 8 B, wait for the server's echo.
    pub fn ping(&mut self) -> Result<()> {
        self.seq += 1;
        self.bufs.send(&self.qp, self.seq)?;
        let (mut sent, mut echoed) = (false, false);
        while !(sent && echoed) {
            let n = self.cq.wait(&mut self.wcs, STEP)?;
            for wc in &self.wcs[..n] {
                wc.ok()?;
                match wc.opcode {
                    WcOpcode::Send => sent = true,
                    WcOpcode::Recv => {
                        echoed = true;
                        self.bufs.post_recv(&self.qp, wc.wr_id as usize)?;
                    }
                    _ => {}
                }
            }
        }
        Ok(())
    }

    /// `n` RDMA WRITEs of [`BW_SIZE`], [`DEPTH`] in flight; returns when all
    /// completed.
    pub fn write_burst(&mut self, n: u64) -> Result<()> {
        let (mut posted, mut done) = (0u64, 0u64);
        while done < n {
            while posted < n && posted - done < DEPTH as u64 {
                self.qp
                    .post_send(SendRequest::write([self.bw.all()], self.peer_buf).wr_id(posted))?;
                posted += 1;
            }
            let k = self.cq.wait(&mut self.wcs, STEP)?;
            for wc in &self.wcs[..k] {
                wc.ok()?;
                done += u64::from(wc.opcode == WcOpcode::RdmaWrite);
            }
        }
        Ok(())
    }
}

impl Drop for Client {
    fn drop(&mut self) {
        // Tell the server the session is over; errors do not matter here.
        if self.bufs.send(&self.qp, BYE).is_ok() {
            let _ = self.cq.collect(1, Duration::from_secs(5));
        }
        if let Some(ctl) = self.ctl.as_mut() {
            let _ = ctl.send(&"bye");
        }
    }
}

fn resolve(peer: &str) -> Result<SocketAddr> {
    peer.to_socket_addrs()
        .ok()
        .and_then(|mut a| a.next())
        .ok_or_else(|| {
            Error::invalid(
                "ERDMA_BENCH_PEER",
                format!("cannot resolve '{peer}' (host:port)"),
            )
        })
}

/// Serves clients one after the other on `bind` until `sessions` have been
/// served (0: for ever). Each session's outcome is printed on stderr.
pub fn serve(bind: &str, ctx: &Context, gid_index: Option<u32>, sessions: u64) -> Result<()> {
    let cm = use_cm(ctx.transport());
    let tcp = if cm {
        None
    } else {
        Some(ExchangeListener::bind(bind)?)
    };
    let listener = if cm {
        Some(CmListener::bind(resolve(bind)?)?)
    } else {
        None
    };
    eprintln!(
        "erdma-bench-server: {} on {bind} ({})",
        ctx.name(),
        if cm {
            "RDMA CM"
        } else {
            "TCP exchange + modify_qp"
        }
    );
    let mut served = 0;
    while sessions == 0 || served < sessions {
        let t0 = Instant::now();
        let outcome = match (&tcp, &listener) {
            (Some(l), _) => serve_tcp(l, ctx, gid_index),
            (_, Some(l)) => serve_cm(l),
            _ => unreachable!("one listener exists"),
        };
        served += 1;
        match outcome {
            Ok(n) => eprintln!(
                "erdma-bench-server: session {served}: {n} pings echoed in {:.1?}",
                t0.elapsed()
            ),
            Err(e) => eprintln!("erdma-bench-server: session {served}: {e}"),
        }
    }
    Ok(())
}

/// A connected session, server side: its QP, CQ and memory.
struct Session {
    qp: QueuePair,
    cq: CompletionQueue,
    bufs: Buffers,
    _sink: MemoryRegion<AlignedBuffer>,
}

/// The server's CQ: with `ERDMA_BENCH_SERVER_SLEEP=1` it has a completion
/// channel, so the server sleeps between messages instead of spinning
/// (fairer on a machine with few cores, such as the rig's VM; it adds the
/// wake-up time to each round trip).
fn server_cq(ctx: &Context) -> Result<CompletionQueue> {
    let c = caps();
    let sleep = std::env::var("ERDMA_BENCH_SERVER_SLEEP").is_ok_and(|v| v == "1");
    ctx.create_cq_with(
        c.max_send_wr + c.max_recv_wr,
        &erdma::CqOptions {
            channel: sleep,
            comp_vector: 0,
        },
    )
}

fn sink(pd: &ProtectionDomain) -> Result<MemoryRegion<AlignedBuffer>> {
    pd.register(
        AlignedBuffer::new(BW_SIZE)?,
        AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE,
    )
}

fn serve_tcp(l: &ExchangeListener, ctx: &Context, gid_index: Option<u32>) -> Result<u64> {
    let mut ctl = l.accept(Duration::from_secs(365 * 24 * 3600))?;
    let gid = ctx.select_gid(1, gid_index)?;
    let pd = ctx.alloc_pd()?;
    let c = caps();
    let cq = server_cq(ctx)?;
    let qp = pd.create_rc_qp(&cq, &cq, &c)?;
    let sink = sink(&pd)?;
    let bufs = Buffers::new(&pd)?;
    let mut local = qp.endpoint(&gid)?;
    local.buffers.push(sink.remote());
    let remote: Endpoint = ctl.swap(&local)?;
    qp.connect(&local, &remote, &ConnectOptions::default())?;
    (0..RECVS).try_for_each(|i| bufs.post_recv(&qp, i))?;
    ctl.barrier()?;
    ctl.set_timeout(Duration::from_millis(1))?;
    echo(
        Session {
            qp,
            cq,
            bufs,
            _sink: sink,
        },
        Some(&mut ctl),
    )
}

fn serve_cm(l: &CmListener) -> Result<u64> {
    let req = l.get_request(Duration::from_secs(365 * 24 * 3600))?;
    let ctx = req.context()?;
    let pd = ctx.alloc_pd()?;
    let c = caps();
    let cq = server_cq(&ctx)?;
    let qp = req.create_qp(&pd, &cq, &cq, &c)?;
    let sink = sink(&pd)?;
    let bufs = Buffers::new(&pd)?;
    (0..RECVS).try_for_each(|i| bufs.post_recv(&qp, i))?;
    let params = ConnParams {
        private_data: sink.remote().to_bytes().to_vec(),
        ..Default::default()
    };
    let _id = req.accept(&qp, &params, STEP)?;
    echo(
        Session {
            qp,
            cq,
            bufs,
            _sink: sink,
        },
        None,
    )
}

/// Echoes every ping until [`BYE`], an error completion, the control
/// connection closing, or [`IDLE`] without traffic; returns the pings echoed.
fn echo(mut s: Session, mut ctl: Option<&mut Exchange>) -> Result<u64> {
    let mut wcs = vec![WorkCompletion::default(); RECVS];
    let (mut echoed, mut last) = (0u64, Instant::now());
    loop {
        let n = match s.cq.wait(&mut wcs, Duration::from_secs(1)) {
            Ok(n) => n,
            Err(Error::Timeout { .. }) => {
                if last.elapsed() > IDLE {
                    return Err(Error::Timeout {
                        what: "the client's next message".into(),
                        after: IDLE,
                        hint: Some("the client went away without saying bye".into()),
                    });
                }
                // The control connection says "bye", or closes when the
                // client dies; a read that times out means it is still there.
                if let Some(c) = ctl.as_deref_mut() {
                    match c.recv::<String>() {
                        Err(e)
                            if matches!(e.errno(), Some(libc::EAGAIN) | Some(libc::ETIMEDOUT)) => {}
                        _ => return Ok(echoed),
                    }
                }
                continue;
            }
            Err(e) => return Err(e),
        };
        last = Instant::now();
        for wc in &wcs[..n] {
            wc.ok()?;
            if wc.opcode != WcOpcode::Recv {
                continue;
            }
            let slot = wc.wr_id as usize;
            let payload = s.bufs.payload(slot)?;
            if payload == BYE {
                return Ok(echoed);
            }
            s.bufs.post_recv(&s.qp, slot)?;
            s.bufs.send(&s.qp, payload)?;
            echoed += 1;
        }
    }
}
