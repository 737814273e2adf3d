//! RDMA ping-pong between two processes (two hosts): each side exposes a
//! buffer, the client RDMA-WRITEs a message into the server's buffer and
//! SENDs a 4-byte notification, the server checks the data, inverts it and
//! writes it back the same way, the client checks the echo. Prints the
//! average round trip.
//!
//! RoCE/InfiniBand devices (eRDMA in RoCE mode, rxe, mlx5) connect through
//! a TCP exchange of endpoint records; iWARP devices (eRDMA's default mode,
//! siw) through RDMA CM (chosen automatically, or with --cm).
//!
//! ```text
//! server: rdma_pingpong --server [--bind 0.0.0.0:18515] [-d DEV] [-g GID_INDEX]
//! client: rdma_pingpong --connect HOST:18515 [-d DEV] [-g GID_INDEX] [--src IP]
//! common: [-s SIZE] [-n ITERS] [--cm]
//! ```
//! Exit status: 0 ok, 1 an RDMA or network step failed (one-line message),
//! 2 bad arguments, 3 no RDMA device.

use std::net::{SocketAddr, ToSocketAddrs};
use std::time::{Duration, Instant};

use erdma::cm::{CmId, CmListener, ConnParams};
use erdma::exchange::{Exchange, ExchangeListener};
use erdma::*;

const TIMEOUT: Duration = Duration::from_secs(60);

struct Opts {
    server: bool,
    addr: String,
    device: Option<String>,
    gid_index: Option<u32>,
    src: Option<std::net::IpAddr>,
    size: usize,
    iters: u32,
    cm: bool,
}

const USAGE: &str = "usage: rdma_pingpong (--server [--bind ADDR:PORT] | --connect HOST:PORT) \
                     [-d DEV] [-g GID_INDEX] [--src IP] [-s SIZE] [-n ITERS] [--cm]";

fn parse() -> Result<Opts, String> {
    let mut o = Opts {
        server: false,
        addr: String::new(),
        device: None,
        gid_index: None,
        src: None,
        size: 4096,
        iters: 100,
        cm: false,
    };
    // args_os: std::env::args() panics on an argument that is not UTF-8.
    let args: Vec<String> = std::env::args_os()
        .skip(1)
        .map(|a| {
            a.into_string()
                .map_err(|a| format!("argument {} is not valid UTF-8", a.to_string_lossy()))
        })
        .collect::<Result<_, _>>()?;
    let mut args = args.into_iter();
    let mut bind = "0.0.0.0:18515".to_string();
    let mut connect = None;
    while let Some(a) = args.next() {
        let mut val = |name: &str| args.next().ok_or(format!("{name} needs a value"));
        match a.as_str() {
            "--server" => o.server = true,
            "--bind" => bind = val("--bind")?,
            "--connect" => connect = Some(val("--connect")?),
            "-d" | "--device" => o.device = Some(val("-d")?),
            "-g" | "--gid-index" => o.gid_index = Some(val("-g")?.parse().map_err(|_| "bad -g")?),
            "--src" => o.src = Some(val("--src")?.parse().map_err(|_| "bad --src address")?),
            "-s" | "--size" => o.size = val("-s")?.parse().map_err(|_| "bad -s")?,
            "-n" | "--iters" => o.iters = val("-n")?.parse().map_err(|_| "bad -n")?,
            "--cm" => o.cm = true,
            "-h" | "--help" => return Err(String::new()),
            x => return Err(format!("unknown argument {x}")),
        }
    }
    match (o.server, connect) {
        (true, None) => o.addr = bind,
        (false, Some(c)) => o.addr = c,
        _ => return Err("give exactly one of --server and --connect".into()),
    }
    if o.size == 0 || o.size > 1 << 30 || o.iters == 0 {
        return Err("-s must be 1..=1 GiB and -n at least 1".into());
    }
    Ok(o)
}

fn main() {
    let o = match parse() {
        Ok(o) => o,
        Err(e) => {
            if !e.is_empty() {
                eprintln!("rdma_pingpong: {e}");
            }
            eprintln!("{USAGE}");
            std::process::exit(2);
        }
    };
    let devices = devices();
    if let Some(reason) = devices.reason() {
        eprintln!("rdma_pingpong: {reason}");
        std::process::exit(3);
    }
    if let Err(e) = run(&o, &devices) {
        eprintln!("rdma_pingpong: {e}");
        std::process::exit(1);
    }
}

fn run(o: &Opts, devices: &DeviceList) -> Result<()> {
    let dev = match &o.device {
        Some(name) => devices.find(name)?,
        None => devices.iter().next().ok_or_else(|| Error::NoSuchDevice {
            name: "(first)".into(),
            available: vec![],
            reason: None,
        })?,
    };
    if o.cm || dev.transport() == Transport::Iwarp {
        run_cm(o)
    } else {
        run_exchange(o, dev)
    }
}

/// The connected pieces both paths end with.
struct Conn {
    pd: ProtectionDomain,
    cq: CompletionQueue,
    qp: QueuePair,
    buf: MemoryRegion<AlignedBuffer>,
    peer: RemoteBuffer,
    /// Where the peer's 4-byte notifications land.
    scratch: MemoryRegion<Vec<u8>>,
    /// Our notification.
    note: MemoryRegion<Vec<u8>>,
}

fn post_recv(qp: &QueuePair, scratch: &MemoryRegion<Vec<u8>>) -> Result<()> {
    qp.post_recv(RecvRequest::new([scratch.all()]))
}

fn scratch_note(pd: &ProtectionDomain) -> Result<MemoryRegion<Vec<u8>>> {
    pd.register(vec![0u8; 4], AccessFlags::empty())
}

fn scratch(pd: &ProtectionDomain) -> Result<MemoryRegion<Vec<u8>>> {
    pd.register(vec![0u8; 4], AccessFlags::LOCAL_WRITE)
}

fn region(pd: &ProtectionDomain, size: usize) -> Result<MemoryRegion<AlignedBuffer>> {
    pd.register(
        AlignedBuffer::new(size)?,
        AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE,
    )
}

fn caps() -> QpCapabilities {
    QpCapabilities {
        max_send_wr: 16,
        max_recv_wr: 16,
        ..Default::default()
    }
}

/// What both RDMA CM roles set up on the id's device before connecting:
/// a [`Conn`] but for the peer's buffer, with a receive already posted.
struct CmSide {
    pd: ProtectionDomain,
    cq: CompletionQueue,
    qp: QueuePair,
    buf: MemoryRegion<AlignedBuffer>,
    scratch: MemoryRegion<Vec<u8>>,
    note: MemoryRegion<Vec<u8>>,
}

impl CmSide {
    /// `create_qp` makes the QP on the CM id (server: the request's).
    fn new(
        ctx: &Context,
        size: usize,
        create_qp: impl FnOnce(&ProtectionDomain, &CompletionQueue) -> Result<QueuePair>,
    ) -> Result<CmSide> {
        let pd = ctx.alloc_pd()?;
        let cq = ctx.create_cq(32)?;
        let qp = create_qp(&pd, &cq)?;
        let buf = region(&pd, size)?;
        let scratch = scratch(&pd)?;
        let note = scratch_note(&pd)?;
        post_recv(&qp, &scratch)?;
        Ok(CmSide {
            pd,
            cq,
            qp,
            buf,
            scratch,
            note,
        })
    }

    /// Our buffer, sent to the peer in the private data.
    fn params(&self) -> ConnParams {
        ConnParams {
            private_data: self.buf.remote().to_bytes().to_vec(),
            ..Default::default()
        }
    }

    fn connected(self, peer: RemoteBuffer) -> Conn {
        Conn {
            pd: self.pd,
            cq: self.cq,
            qp: self.qp,
            buf: self.buf,
            peer,
            scratch: self.scratch,
            note: self.note,
        }
    }
}

/// RoCE/IB: endpoint records over TCP, then modify_qp.
fn run_exchange(o: &Opts, dev: &Device) -> Result<()> {
    let ctx = dev.open()?;
    let gid = ctx.select_gid(1, o.gid_index)?;
    let pd = ctx.alloc_pd()?;
    let cq = ctx.create_cq_with(
        32,
        &CqOptions {
            channel: true,
            comp_vector: 0,
        },
    )?;
    let qp = pd.create_rc_qp(&cq, &cq, &caps())?;
    let buf = region(&pd, o.size)?;
    let mut local = qp.endpoint(&gid)?;
    local.buffers.push(buf.remote());
    let mut x = if o.server {
        let l = ExchangeListener::bind(&o.addr)?;
        println!(
            "{}: GID[{}] {} QPN {:#x}, waiting on {}",
            ctx.name(),
            gid.index,
            gid.gid,
            qp.qp_num(),
            o.addr
        );
        l.accept(Duration::from_secs(600))?
    } else {
        Exchange::connect(&o.addr, TIMEOUT)?
    };
    let remote: Endpoint = x.swap(&local)?;
    let peer = *remote.buffers.first().ok_or_else(|| Error::Protocol {
        peer: x.peer().to_owned(),
        problem: "the peer exposed no buffer".into(),
    })?;
    qp.connect(&local, &remote, &ConnectOptions::default())?;
    println!(
        "connected {} QPN {:#x} -> {} QPN {:#x} (path MTU {})",
        ctx.name(),
        qp.qp_num(),
        remote.gid,
        remote.qp_num,
        local.mtu.min(remote.mtu)
    );
    let scratch = scratch(&pd)?;
    let note = scratch_note(&pd)?;
    post_recv(&qp, &scratch)?;
    let conn = Conn {
        pd,
        cq,
        qp,
        buf,
        peer,
        scratch,
        note,
    };
    x.barrier()?; // both sides have a receive posted
    pingpong(o, conn)?;
    x.barrier()
}

/// iWARP (and any device): RDMA CM; buffers travel in the private data.
fn run_cm(o: &Opts) -> Result<()> {
    let addr: SocketAddr = o
        .addr
        .to_socket_addrs()
        .map_err(|e| Error::invalid("rdma_pingpong", format!("{}: {e}", o.addr)))?
        .next()
        .ok_or_else(|| {
            Error::invalid("rdma_pingpong", format!("{} resolves to nothing", o.addr))
        })?;
    if o.server {
        let l = CmListener::bind(addr)?;
        println!("RDMA CM: waiting on {addr}");
        let req = l.get_request(Duration::from_secs(600))?;
        let peer = RemoteBuffer::from_bytes(req.private_data()).ok_or_else(|| Error::Protocol {
            peer: format!("{:?}", req.peer_addr()),
            problem: "no buffer in the private data".into(),
        })?;
        let ctx = req.context()?;
        let side = CmSide::new(&ctx, o.size, |pd, cq| req.create_qp(pd, cq, cq, &caps()))?;
        let id = req.accept(&side.qp, &side.params(), TIMEOUT)?;
        println!("connected {} through RDMA CM", ctx.name());
        pingpong(o, side.connected(peer))?;
        id.wait_disconnect(TIMEOUT)
    } else {
        // Retry while the server is not listening yet (start order is free).
        let deadline = Instant::now() + TIMEOUT;
        loop {
            match cm_client(o, addr) {
                Err(e) if refused(&e) && Instant::now() < deadline => {
                    std::thread::sleep(Duration::from_millis(200));
                }
                other => return other,
            }
        }
    }
}

/// ECONNREFUSED on Linux.
const ECONNREFUSED: i32 = 111;

/// Nobody listening (yet): iWARP refuses at once, RoCE with a REJECTED event.
fn refused(e: &Error) -> bool {
    matches!(e, Error::Cm { .. }) || e.errno() == Some(ECONNREFUSED)
}

fn cm_client(o: &Opts, addr: SocketAddr) -> Result<()> {
    let id = CmId::resolve(addr, o.src.map(|ip| SocketAddr::new(ip, 0)), TIMEOUT)?;
    let ctx = id.context()?;
    let side = CmSide::new(&ctx, o.size, |pd, cq| id.create_qp(pd, cq, cq, &caps()))?;
    let reply = id.connect(&side.qp, &side.params(), TIMEOUT)?;
    let peer = RemoteBuffer::from_bytes(&reply).ok_or_else(|| Error::Protocol {
        peer: addr.to_string(),
        problem: "no buffer in the private data".into(),
    })?;
    println!("connected {} through RDMA CM", ctx.name());
    pingpong(o, side.connected(peer))?;
    id.disconnect()
}

/// The message of iteration `i`.
fn message(size: usize, i: u32) -> Vec<u8> {
    (0..size)
        .map(|k| (k as u32).wrapping_mul(31).wrapping_add(i.wrapping_mul(7)) as u8)
        .collect()
}

fn unexpected(i: u32, what: String) -> Error {
    Error::Protocol {
        peer: "peer".into(),
        problem: format!("iteration {i}: {what}"),
    }
}

/// Polls until the peer's notification for iteration `i` arrives
/// (counting our own send completions on the way), then until none of ours
/// is outstanding.
fn await_peer(c: &mut Conn, i: u32, sends: &mut u32) -> Result<()> {
    let mut got = false;
    while !got || *sends > 0 {
        let wc = c.cq.collect(1, TIMEOUT)?[0];
        wc.ok()?;
        match wc.opcode {
            WcOpcode::Send => *sends -= 1,
            WcOpcode::Recv if !got => {
                let n =
                    u32::from_le_bytes(c.scratch.as_slice()?[..4].try_into().unwrap_or_default());
                if wc.byte_len != 4 || n != i {
                    return Err(unexpected(
                        i,
                        format!("notification {n} of {} bytes", wc.byte_len),
                    ));
                }
                got = true;
                post_recv(&c.qp, &c.scratch)?;
            }
            _ => return Err(unexpected(i, format!("unexpected completion {wc:?}"))),
        }
    }
    Ok(())
}

/// RDMA WRITE the buffer to the peer, then SEND a 4-byte notification
/// (iteration `i`): on RC the WRITE is placed before the SEND arrives. (WRITE
/// with immediate data would do both at once, but iWARP devices such as siw
/// have no immediate data.)
fn write_and_notify(c: &mut Conn, peer: RemoteBuffer, i: u32) -> Result<()> {
    c.note.as_mut_slice()?.copy_from_slice(&i.to_le_bytes());
    c.qp.post_send_batch([
        SendRequest::write([c.buf.all()], peer).unsignaled(),
        SendRequest::send([c.note.all()]),
    ])
}

/// Client: write message i, wait for the echo (the bytes inverted), check it.
/// Server: wait for message i, check it, invert it, write it back.
fn pingpong(o: &Opts, mut c: Conn) -> Result<()> {
    if c.peer.len < o.size as u64 {
        return Err(Error::invalid(
            "rdma_pingpong",
            format!(
                "the peer's buffer has {} bytes, -s is {}",
                c.peer.len, o.size
            ),
        ));
    }
    let peer = c.peer.slice(..o.size)?;
    let mut sends = 0u32;
    // The peer may RDMA WRITE our buffer, so it is read and written by
    // copies (read_at/write_at), never lent out as a slice.
    let mut b = vec![0u8; o.size];
    let t0 = Instant::now();
    for i in 0..o.iters {
        let want = message(o.size, i);
        if o.server {
            await_peer(&mut c, i, &mut sends)?;
            c.buf.read_at(0, &mut b)?;
            if b != want {
                return Err(unexpected(i, "the received data differs".into()));
            }
            b.iter_mut().for_each(|x| *x = !*x);
            c.buf.write_at(0, &b)?;
            write_and_notify(&mut c, peer, i)?;
            sends += 1;
        } else {
            c.buf.write_at(0, &want)?;
            write_and_notify(&mut c, peer, i)?;
            sends += 1;
            await_peer(&mut c, i, &mut sends)?;
            c.buf.read_at(0, &mut b)?;
            if b.iter().zip(&want).any(|(e, w)| *e != !*w) {
                return Err(unexpected(i, "the echoed data differs".into()));
            }
        }
    }
    while sends > 0 {
        c.cq.collect(1, TIMEOUT)?[0].ok()?;
        sends -= 1;
    }
    let _ = &c.pd;
    let us = t0.elapsed().as_secs_f64() * 1e6 / f64::from(o.iters);
    if o.server {
        println!(
            "echoed {} messages of {} bytes, data checked",
            o.iters, o.size
        );
    } else {
        println!(
            "{} round trips of {} bytes, data checked both ways: average {us:.1} us",
            o.iters, o.size
        );
    }
    Ok(())
}
