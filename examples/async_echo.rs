//! RDMA CM echo client and server on tokio: completions are awaited
//! (`AsyncCompletionQueue`, feature `tokio` of erdma), never spun on, and no
//! thread blocks in the data path.
//!
//! The server keeps a ring of receive buffers posted; each message is sent
//! back from the buffer it arrived in, which is posted again once that send
//! has completed. The client sends each message (numbered, with a pattern
//! that depends on its number), awaits its echo and compares it byte for
//! byte. Works over any RDMA CM device: iWARP (eRDMA's default mode, siw)
//! and RoCE (rxe, mlx5). Connection setup (RDMA CM) is erdma's synchronous
//! API, done before the async loop.
//!
//! ```text
//! server: async_echo --server ADDR:PORT [-n MESSAGES] [-s SIZE]
//! client: async_echo --connect ADDR:PORT [--src IP] [-n MESSAGES] [-s SIZE]
//! ```
//! Exit status: 0 every echo verified, 1 an RDMA step failed or an echo
//! differed (one-line message), 2 bad arguments, 3 no RDMA device.

use std::net::{IpAddr, SocketAddr};
use std::time::{Duration, Instant};

use erdma::cm::{CmId, CmListener, ConnParams};
use erdma::*;

const TIMEOUT: Duration = Duration::from_secs(60);
/// Receive buffers the server keeps posted.
const RING: usize = 8;
/// Marks a send's wr_id (receives carry their ring slot).
const SEND: u64 = 1 << 63;

const USAGE: &str = "usage: async_echo (--server ADDR:PORT | --connect ADDR:PORT [--src IP]) \
                     [-n MESSAGES] [-s SIZE]";

struct Opts {
    server: bool,
    addr: SocketAddr,
    src: Option<IpAddr>,
    messages: usize,
    size: usize,
}

fn parse() -> std::result::Result<Opts, String> {
    let mut args = std::env::args().skip(1);
    let (mut mode, mut src, mut messages, mut size) = (None, None, 10_000, 64);
    while let Some(a) = args.next() {
        let mut val = || args.next().ok_or(format!("{a} needs a value"));
        match a.as_str() {
            "--server" => mode = Some((true, val()?)),
            "--connect" => mode = Some((false, val()?)),
            "--src" => src = Some(val()?.parse().map_err(|e| format!("--src: {e}"))?),
            "-n" => messages = val()?.parse().map_err(|e| format!("-n: {e}"))?,
            "-s" => size = val()?.parse().map_err(|e| format!("-s: {e}"))?,
            _ => return Err(format!("unknown argument {a}")),
        }
    }
    let (server, addr) = mode.ok_or("--server or --connect is required")?;
    let addr = addr.parse().map_err(|e| format!("{addr}: {e}"))?;
    if size < 8 {
        return Err("-s: at least 8 bytes (the message number)".into());
    }
    Ok(Opts {
        server,
        addr,
        src,
        messages,
        size,
    })
}

fn main() {
    let opts = match parse() {
        Ok(o) => o,
        Err(e) => {
            eprintln!("async_echo: {e}\n{USAGE}");
            std::process::exit(2);
        }
    };
    let devices = erdma::devices();
    if devices.iter().next().is_none() {
        let why = devices.reason().map(|r| r.to_string()).unwrap_or_default();
        eprintln!("async_echo: no RDMA device: {why}");
        std::process::exit(3);
    }
    // One thread is enough: the waits sleep in the reactor.
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("tokio runtime");
    let run = if opts.server {
        rt.block_on(server(&opts))
    } else {
        rt.block_on(client(&opts))
    };
    if let Err(e) = run {
        eprintln!("async_echo: {e}");
        std::process::exit(1);
    }
}

/// A CQ with a completion channel: what an `AsyncCompletionQueue` needs.
fn channel_cq(ctx: &Context, entries: u32) -> Result<CompletionQueue> {
    let options = CqOptions {
        channel: true,
        ..Default::default()
    };
    ctx.create_cq_with(entries, &options)
}

fn caps(wr: usize) -> QpCapabilities {
    QpCapabilities {
        max_send_wr: wr as u32,
        max_recv_wr: wr as u32,
        ..Default::default()
    }
}

/// Message `m`: its number, then a pattern seeded by it.
fn message(m: usize, size: usize) -> Vec<u8> {
    let mut x = (m as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
    let mut v: Vec<u8> = (0..size)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect();
    v[..8].copy_from_slice(&(m as u64).to_le_bytes());
    v
}

/// An RDMA error or a failed check, printed on one line.
type Fallible = std::result::Result<(), Box<dyn std::error::Error>>;

async fn server(o: &Opts) -> Fallible {
    let listener = CmListener::bind(o.addr)?;
    println!("listening on {}", o.addr);
    let req = listener.get_request(TIMEOUT)?;
    let ctx = req.context()?;
    let pd = ctx.alloc_pd()?;
    let cq = channel_cq(&ctx, 2 * RING as u32)?;
    let acq = cq.to_async()?;
    let qp = req.create_qp(&pd, &cq, &cq, &caps(RING))?;
    let bufs = (0..RING)
        .map(|_| pd.register(vec![0u8; o.size], AccessFlags::LOCAL_WRITE))
        .collect::<Result<Vec<_>>>()?;
    for (slot, b) in bufs.iter().enumerate() {
        qp.post_recv(RecvRequest::new([b.all()]).wr_id(slot as u64))?;
    }
    let id = req.accept(&qp, &ConnParams::default(), TIMEOUT)?;
    println!("{}: connection from {:?}", ctx.name(), id.peer_addr());
    let mut echoed = 0;
    while echoed < o.messages {
        let wc = acq.next().await?;
        wc.ok()?;
        if wc.wr_id & SEND == 0 {
            // A message arrived in `slot`: send it back from there.
            let slot = wc.wr_id as usize;
            let echo = bufs[slot].slice(..wc.byte_len as usize)?;
            qp.post_send(SendRequest::send([echo]).wr_id(SEND | slot as u64))?;
        } else {
            // The echo left: the buffer takes the next message.
            let slot = (wc.wr_id & !SEND) as usize;
            qp.post_recv(RecvRequest::new([bufs[slot].all()]).wr_id(slot as u64))?;
            echoed += 1;
        }
    }
    id.wait_disconnect(TIMEOUT)?;
    println!("echoed {echoed} messages");
    Ok(())
}

async fn client(o: &Opts) -> Fallible {
    let id = CmId::resolve(o.addr, o.src.map(|ip| (ip, 0).into()), TIMEOUT)?;
    let ctx = id.context()?;
    let pd = ctx.alloc_pd()?;
    let cq = channel_cq(&ctx, 4)?;
    let acq = cq.to_async()?;
    let qp = id.create_qp(&pd, &cq, &cq, &caps(2))?;
    id.connect(&qp, &ConnParams::default(), TIMEOUT)?;
    let mut out = pd.register(vec![0u8; o.size], AccessFlags::empty())?;
    let mut inbox = pd.register(vec![0u8; o.size], AccessFlags::LOCAL_WRITE)?;
    let t0 = Instant::now();
    for m in 0..o.messages {
        let msg = message(m, o.size);
        out.as_mut_slice()?.copy_from_slice(&msg);
        qp.post_recv(RecvRequest::new([inbox.all()]).wr_id(1))?;
        qp.post_send(SendRequest::send([out.all()]).wr_id(SEND))?;
        // Both completions, in either order, each once.
        let (mut sent, mut echoed) = (false, false);
        while !(sent && echoed) {
            let wc = tokio::time::timeout(TIMEOUT, acq.next())
                .await
                .map_err(|_| format!("no echo of message {m} within {TIMEOUT:?}"))??;
            wc.ok()?;
            if wc.wr_id == SEND {
                sent = true;
            } else {
                echoed = true;
            }
        }
        if inbox.as_slice()? != &msg[..] {
            return Err(format!("the echo of message {m} differs").into());
        }
    }
    let dt = t0.elapsed();
    id.disconnect()?;
    println!(
        "{}: {} messages of {} B echoed and verified in {:.3} s ({:.1} us per round trip)",
        ctx.name(),
        o.messages,
        o.size,
        dt.as_secs_f64(),
        dt.as_secs_f64() * 1e6 / o.messages.max(1) as f64
    );
    Ok(())
}
