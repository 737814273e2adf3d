//! The TCP bootstrap's rendezvous: rank 0 accepts one connection per other
//! rank and channel; each connection starts with a 20-byte hello (magic,
//! protocol, rank, WORLD_SIZE, channel) that rank 0 answers with a
//! verdict: accepted, or refused with the reason.
//!
//! Rank 0 serves every connection at once (poll(2)), each with its own
//! [`HANDSHAKE_TIMEOUT`], so idle or garbage connections (a port scanner,
//! a hostile peer) cost a one-line note and never delay the ranks. A
//! launch mistake - two processes with one RANK, a different WORLD_SIZE, a
//! different build - is said at once, on both sides, with exit status 6.

use std::io::{ErrorKind, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream, ToSocketAddrs};
use std::os::fd::AsRawFd;
use std::time::{Duration, Instant};

use super::env::LaunchEnv;
use super::wire::{self, slice_until, wait_fds};
use crate::nccltests::census::ranks_text;
use crate::nccltests::console;
use crate::nccltests::errors::{TestError, TestResult};
use crate::nccltests::job;

/// Identifies the protocol on the port.
pub const MAGIC: &[u8; 4] = b"ERDB";
/// Version 2: three channels, length-checked frames, refusals with a reason.
pub const PROTOCOL: u32 = 2;
/// Channels per process: harness, backend, control.
pub const CHANNELS: usize = 3;
/// How long rank 0 waits for a connection's hello, and a rank for rank 0's
/// answer.
pub const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);
/// Connections rank 0 keeps waiting for a hello at once (more: the oldest
/// is dropped).
const MAX_UNGREETED: usize = 256;
const HELLO: usize = 20;
const MAX_REASON: usize = 1024;

/// One connection to a peer.
pub struct Link {
    /// The socket (non-blocking).
    pub s: TcpStream,
    /// The peer's address.
    pub addr: SocketAddr,
    /// The peer's rank.
    pub rank: usize,
}

struct Ungreeted {
    s: TcpStream,
    addr: SocketAddr,
    hello: [u8; HELLO],
    got: usize,
    until: Instant,
}

/// What a hello says.
struct Hello {
    proto: u32,
    rank: usize,
    world: usize,
    chan: usize,
}

fn parse_hello(h: &[u8; HELLO]) -> Option<Hello> {
    let word = |i: usize| u32::from_le_bytes([h[i], h[i + 1], h[i + 2], h[i + 3]]);
    (&h[..4] == MAGIC).then(|| Hello {
        proto: word(4),
        rank: word(8) as usize,
        world: word(12) as usize,
        chan: word(16) as usize,
    })
}

fn internal(msg: String) -> TestError {
    TestError::Internal(format!("TCP bootstrap: {msg}"))
}

/// Rank 0: accepts every other rank's channels. Returns, per channel, the
/// links of ranks 1..size in rank order.
pub fn accept_all(env: &LaunchEnv, deadline: Option<Instant>) -> TestResult<Vec<Vec<Link>>> {
    check_fd_limit(env.size)?;
    let bind = format!("0.0.0.0:{}", env.master_port);
    let listener = TcpListener::bind(&bind).map_err(|e| {
        internal(format!(
            "rank 0 cannot listen on {bind}: {e} (is MASTER_PORT in use?)"
        ))
    })?;
    listener
        .set_nonblocking(true)
        .map_err(|e| internal(e.to_string()))?;
    let n = env.size - 1;
    let mut slots: Vec<Vec<Option<Link>>> = (0..CHANNELS)
        .map(|_| (0..n).map(|_| None).collect())
        .collect();
    let mut filled = 0;
    let mut waiting: Vec<Ungreeted> = Vec::new();
    while filled < n * CHANNELS {
        job::check()?;
        if deadline.is_some_and(|d| Instant::now() >= d) {
            let missing: Vec<usize> = (1..env.size)
                .filter(|r| slots.iter().any(|c| c[r - 1].is_none()))
                .collect();
            return Err(internal(format!(
                "{} did not connect to rank 0 at {}:{} within {} s (-T): are they running, with MASTER_ADDR and MASTER_PORT pointing here?",
                ranks_text(&missing),
                env.master_addr,
                env.master_port,
                job::timeout_s()
            )));
        }
        let mut fds = vec![listener.as_raw_fd()];
        fds.extend(waiting.iter().map(|w| w.s.as_raw_fd()));
        let ready = wait_fds(&fds, libc::POLLIN, slice_until(deadline))
            .map_err(|e| internal(format!("poll failed: {e}")))?;
        if ready[0] {
            accept_ready(&listener, &mut waiting)?;
        }
        let mut i = 0;
        while i < waiting.len() {
            let readable = ready.get(i + 1).copied().unwrap_or(false);
            match serve(&mut waiting[i], readable, env, &slots) {
                Served::Waiting => i += 1,
                Served::Dropped(note) => {
                    console::err(&format!("TCP bootstrap: rank 0: {note}\n"));
                    waiting.swap_remove(i);
                }
                Served::Accepted(rank, chan) => {
                    let w = waiting.swap_remove(i);
                    slots[chan][rank - 1] = Some(Link {
                        s: w.s,
                        addr: w.addr,
                        rank,
                    });
                    filled += 1;
                }
                Served::Fatal(e) => {
                    let w = waiting.swap_remove(i);
                    let why = e.to_string();
                    refuse(w.s, why.trim_start_matches("TCP bootstrap: "));
                    tell_connected(&mut slots, &e);
                    return Err(e);
                }
            }
        }
    }
    refuse_late(listener, env.size);
    Ok(slots
        .into_iter()
        .map(|c| c.into_iter().flatten().collect())
        .collect())
}

/// Once every rank is connected, rank 0 keeps the port and refuses any
/// further rank at once, saying why (a duplicate RANK, or a process of
/// another job), instead of leaving it to retry until its -T.
fn refuse_late(listener: TcpListener, size: usize) {
    let serve = move || {
        if listener.set_nonblocking(false).is_err() {
            return;
        }
        for conn in listener.incoming() {
            let Ok(mut s) = conn else { continue };
            let addr = s.peer_addr().map_or_else(|_| "?".into(), |a| a.to_string());
            let mut h = [0u8; HELLO];
            let _ = s.set_read_timeout(Some(Duration::from_secs(2)));
            if s.read_exact(&mut h).is_err() {
                continue;
            }
            let Some(hello) = parse_hello(&h) else {
                continue;
            };
            let why = format!(
                "the job's {size} ranks are all connected already: RANK={} is a duplicate, or that process belongs to another job on this port",
                hello.rank
            );
            console::err(&format!(
                "TCP bootstrap: rank 0: refused a process at {addr}: {why}\n"
            ));
            refuse(s, &why);
        }
    };
    let _ = std::thread::Builder::new()
        .name("late-ranks".into())
        .spawn(serve);
}

fn accept_ready(listener: &TcpListener, waiting: &mut Vec<Ungreeted>) -> TestResult<()> {
    loop {
        match listener.accept() {
            Ok((s, addr)) => {
                if s.set_nonblocking(true).is_err() {
                    continue;
                }
                if waiting.len() >= MAX_UNGREETED {
                    let old = waiting.remove(0);
                    console::err(&format!(
                        "TCP bootstrap: rank 0: dropped the connection from {} (too many connections without a hello)\n",
                        old.addr
                    ));
                }
                waiting.push(Ungreeted {
                    s,
                    addr,
                    hello: [0; HELLO],
                    got: 0,
                    until: Instant::now() + HANDSHAKE_TIMEOUT,
                });
            }
            Err(e) if e.kind() == ErrorKind::WouldBlock => return Ok(()),
            Err(e) if e.kind() == ErrorKind::Interrupted => {}
            // Out of file descriptors (a flood of connections), or a
            // connection reset before it was accepted: keep serving.
            Err(_) => return Ok(()),
        }
    }
}

enum Served {
    Waiting,
    Dropped(String),
    Accepted(usize, usize),
    Fatal(TestError),
}

fn serve(
    w: &mut Ungreeted,
    readable: bool,
    env: &LaunchEnv,
    slots: &[Vec<Option<Link>>],
) -> Served {
    if readable {
        loop {
            match w.s.read(&mut w.hello[w.got..]) {
                Ok(0) => {
                    return Served::Dropped(format!(
                        "ignored a connection from {} that closed before its hello",
                        w.addr
                    ));
                }
                Ok(k) => {
                    w.got += k;
                    if w.got == HELLO {
                        break;
                    }
                }
                Err(e) if e.kind() == ErrorKind::WouldBlock => break,
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                Err(e) => {
                    return Served::Dropped(format!("ignored a connection from {}: {e}", w.addr));
                }
            }
        }
    }
    if w.got < HELLO {
        if Instant::now() >= w.until {
            return Served::Dropped(format!(
                "dropped a connection from {} that sent no hello within {} s (not a rank of this job?)",
                w.addr,
                HANDSHAKE_TIMEOUT.as_secs()
            ));
        }
        return Served::Waiting;
    }
    let Some(h) = parse_hello(&w.hello) else {
        return Served::Dropped(format!(
            "ignored a connection from {}: not an erdma-bench rank (it sent {:?})",
            w.addr,
            String::from_utf8_lossy(&w.hello)
        ));
    };
    match judge(&h, w.addr, env, slots) {
        Ok(()) => {
            if accept(&mut w.s).is_err() {
                return Served::Dropped(format!(
                    "lost the connection from {} (rank {}) during its hello",
                    w.addr, h.rank
                ));
            }
            Served::Accepted(h.rank, h.chan)
        }
        Err(e) => Served::Fatal(e),
    }
}

/// Whether a well-formed hello fits this job; Err is a launch mistake.
fn judge(
    h: &Hello,
    addr: SocketAddr,
    env: &LaunchEnv,
    slots: &[Vec<Option<Link>>],
) -> TestResult<()> {
    let usage = |m: String| Err(TestError::InvalidUsage(format!("TCP bootstrap: {m}")));
    if h.proto != PROTOCOL {
        return usage(format!(
            "the process at {addr} (RANK={}) speaks bootstrap protocol {}, rank 0 speaks {PROTOCOL}: every process must run the same erdma-bench build",
            h.rank, h.proto
        ));
    }
    if h.world != env.size {
        return usage(format!(
            "the process at {addr} has RANK={} WORLD_SIZE={}, but rank 0 has WORLD_SIZE={}: every process needs the same WORLD_SIZE",
            h.rank, h.world, env.size
        ));
    }
    if !(1..env.size).contains(&h.rank) {
        return usage(format!(
            "the process at {addr} has RANK={} (rank 0 is this process; the others must be 1..{}): every process needs its own RANK",
            h.rank,
            env.size - 1
        ));
    }
    if h.chan >= CHANNELS {
        return usage(format!(
            "the process at {addr} (RANK={}) asked for channel {}: a different erdma-bench build?",
            h.rank, h.chan
        ));
    }
    if let Some(first) = &slots[h.chan][h.rank - 1] {
        return usage(format!(
            "two processes have RANK={}: {} and {addr}: every process needs its own RANK",
            h.rank, first.addr
        ));
    }
    Ok(())
}

/// Writes rank 0's answer: 'Y', or 'N' and a reason (u16 LE length + text).
fn answer(s: &mut TcpStream, reason: Option<&str>) -> std::io::Result<()> {
    let mut msg = Vec::new();
    match reason {
        None => msg.push(b'Y'),
        Some(r) => {
            let r = &r.as_bytes()[..r.len().min(MAX_REASON)];
            msg.push(b'N');
            msg.extend_from_slice(&(r.len() as u16).to_le_bytes());
            msg.extend_from_slice(r);
        }
    }
    s.set_nonblocking(false)?;
    s.set_write_timeout(Some(Duration::from_secs(1)))?;
    let r = s.write_all(&msg);
    s.set_nonblocking(true)?;
    r
}

fn accept(s: &mut TcpStream) -> std::io::Result<()> {
    answer(s, None)?;
    s.set_nodelay(true)
}

fn refuse(mut s: TcpStream, reason: &str) {
    let _ = answer(&mut s, Some(reason));
    let _ = s.shutdown(std::net::Shutdown::Write);
}

/// After a launch mistake: every rank already connected hears why.
fn tell_connected(slots: &mut [Vec<Option<Link>>], e: &TestError) {
    let payload = super::tcp::abort_payload(0, e.exit_code(), &e.to_string());
    let until = Some(Instant::now() + Duration::from_secs(1));
    for l in slots.iter_mut().flatten().flatten() {
        let _ = wire::write_frame(&mut l.s, wire::tag::ABORT, &payload, until, &mut || {
            Ok::<(), ()>(())
        });
    }
}

/// Rank 0 holds CHANNELS sockets per other rank: refuse a WORLD_SIZE that
/// the file descriptor limit cannot hold, before allocating anything for it.
fn check_fd_limit(size: usize) -> TestResult<()> {
    let needed = (size as u128 - 1) * CHANNELS as u128 + 64;
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit/setrlimit read and write one rlimit structure.
    unsafe {
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) != 0 {
            return Ok(());
        }
        if (lim.rlim_cur as u128) < needed && lim.rlim_max > lim.rlim_cur {
            let raised = libc::rlimit {
                rlim_cur: lim.rlim_max.min(needed as libc::rlim_t),
                rlim_max: lim.rlim_max,
            };
            if libc::setrlimit(libc::RLIMIT_NOFILE, &raised) == 0 {
                lim.rlim_cur = raised.rlim_cur;
            }
        }
    }
    if (lim.rlim_cur as u128) < needed {
        return Err(TestError::InvalidUsage(format!(
            "TCP bootstrap: WORLD_SIZE={size} needs {needed} open files on rank 0 ({CHANNELS} connections per rank), but `ulimit -n` allows {} (hard limit {}): raise it, or launch with mpirun",
            lim.rlim_cur, lim.rlim_max
        )));
    }
    Ok(())
}

/// A rank other than 0: connects channel `chan` to rank 0. `earlier` are
/// its channels already connected: when rank 0 gives up (a launch mistake
/// elsewhere) it says why on them, and this rank stops at once.
pub fn dial(
    env: &LaunchEnv,
    chan: usize,
    deadline: Option<Instant>,
    earlier: &mut [Link],
) -> TestResult<Link> {
    let target = format!("{}:{}", env.master_addr, env.master_port);
    loop {
        job::check()?;
        for l in earlier.iter_mut() {
            match wire::peek_tag(&l.s) {
                None => {}
                Some(Some(wire::tag::ABORT)) => {
                    return Err(super::tcp::read_abort(l).unwrap_or_else(|| {
                        internal("rank 0 stopped the rendezvous without saying why".into())
                    }));
                }
                Some(_) => {
                    return Err(internal(format!(
                        "rank 0 at {} closed the connection during the rendezvous",
                        l.addr
                    )));
                }
            }
        }
        let addrs: Vec<SocketAddr> = target
            .to_socket_addrs()
            .map(|a| a.collect())
            .unwrap_or_default();
        for addr in &addrs {
            if let Ok(s) = TcpStream::connect_timeout(addr, Duration::from_secs(2))
                && let Some(link) = hello(s, env, chan, *addr)?
            {
                return Ok(link);
            }
        }
        if deadline.is_some_and(|d| Instant::now() >= d) {
            return Err(internal(format!(
                "rank {} could not reach rank 0 at {target} (MASTER_ADDR:MASTER_PORT) within {} s (-T): is rank 0 running and the port open?",
                env.rank,
                job::timeout_s()
            )));
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Sends the hello and reads rank 0's answer. Ok(None): try again (rank 0
/// did not answer in time, or the connection broke).
fn hello(
    mut s: TcpStream,
    env: &LaunchEnv,
    chan: usize,
    addr: SocketAddr,
) -> TestResult<Option<Link>> {
    // Connecting to a local port with no listener yet can connect the
    // socket to itself (TCP simultaneous open): not rank 0, try again.
    if s.local_addr().ok() == Some(addr) {
        return Ok(None);
    }
    let mut h = Vec::with_capacity(HELLO);
    h.extend_from_slice(MAGIC);
    for w in [PROTOCOL, env.rank as u32, env.size as u32, chan as u32] {
        h.extend_from_slice(&w.to_le_bytes());
    }
    let io = |s: &mut TcpStream| -> std::io::Result<[u8; 1]> {
        s.set_read_timeout(Some(HANDSHAKE_TIMEOUT))?;
        s.set_write_timeout(Some(HANDSHAKE_TIMEOUT))?;
        s.write_all(&h)?;
        let mut verdict = [0u8; 1];
        s.read_exact(&mut verdict)?;
        Ok(verdict)
    };
    let Ok(verdict) = io(&mut s) else {
        return Ok(None);
    };
    match verdict[0] {
        b'Y' => {
            let ok = s.set_nodelay(true).and_then(|_| s.set_nonblocking(true));
            Ok(ok.ok().map(|_| Link { s, addr, rank: 0 }))
        }
        b'N' => {
            let mut len = [0u8; 2];
            let mut reason = String::from("(no reason given)");
            if s.read_exact(&mut len).is_ok() {
                let mut r = vec![0u8; u16::from_le_bytes(len) as usize];
                if s.read_exact(&mut r).is_ok() {
                    reason = String::from_utf8_lossy(&r).into_owned();
                }
            }
            Err(TestError::InvalidUsage(format!(
                "TCP bootstrap: rank 0 at {addr} refused rank {}: {reason}",
                env.rank
            )))
        }
        other => Err(internal(format!(
            "{addr} (MASTER_ADDR:MASTER_PORT) answered, but not as rank 0 of an erdma-bench job (first byte {other:#04x}): another service on that port, or a different erdma-bench build?"
        ))),
    }
}
