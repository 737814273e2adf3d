//! The TCP bootstrap: rank 0 listens at MASTER_ADDR:MASTER_PORT and every
//! other rank connects to it (a star). Collectives go through rank 0.
//!
//! Every wait is bounded by the run's timeout and a lost connection is an
//! error naming the rank, never a hang: when rank 0 loses a peer it tells
//! every other rank why before giving up, so all processes exit with a
//! message such as "TCP connection to rank 2 (10.0.0.3:40211) lost".

use std::io::{self, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream, ToSocketAddrs};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use super::Bootstrap;
use super::env::LaunchEnv;
use crate::nccltests::errors::{TestError, TestResult};

const MAGIC: &[u8; 4] = b"ERDB";
const PROTOCOL: u32 = 1;
const TAG_DATA: u8 = 1;
const TAG_ABORT: u8 = 2;
/// Independent channels per process: the harness's and one for a backend.
const CHANNELS: u32 = 2;
/// The rendezvous waits at least this long for every rank to connect.
const MIN_RENDEZVOUS_S: u64 = 120;
/// Largest message accepted (guards against garbage on the port).
const MAX_MESSAGE: u64 = 1 << 36;

enum Links {
    Root(Vec<(TcpStream, SocketAddr)>),
    Leaf(TcpStream, SocketAddr),
}

/// One channel of the TCP bootstrap.
pub struct Tcp {
    rank: usize,
    size: usize,
    timeout: Option<Duration>,
    links: Mutex<Links>,
    spare: Mutex<Option<Box<Tcp>>>,
}

fn lost(what: &str, e: io::Error) -> TestError {
    let why = match e.kind() {
        io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut => "timed out".to_string(),
        io::ErrorKind::UnexpectedEof => "closed by peer".to_string(),
        _ => e.to_string(),
    };
    TestError::Internal(format!("TCP connection to {what} lost: {why}"))
}

fn write_frame(s: &mut TcpStream, tag: u8, data: &[u8]) -> io::Result<()> {
    let mut head = [0u8; 9];
    head[0] = tag;
    head[1..].copy_from_slice(&(data.len() as u64).to_le_bytes());
    s.write_all(&head)?;
    s.write_all(data)
}

fn read_frame(s: &mut TcpStream) -> io::Result<(u8, Vec<u8>)> {
    let mut head = [0u8; 9];
    s.read_exact(&mut head)?;
    let len = u64::from_le_bytes(head[1..].try_into().unwrap_or([0; 8]));
    if len > MAX_MESSAGE {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            format!("bad message length {len}"),
        ));
    }
    let mut data = vec![0u8; len as usize];
    s.read_exact(&mut data)?;
    Ok((head[0], data))
}

fn timeout_of(secs: i32) -> Option<Duration> {
    (secs > 0).then(|| Duration::from_secs(secs as u64))
}

impl Tcp {
    /// Joins the rendezvous described by `env`. `timeout_s` (<= 0: none)
    /// bounds every later wait; the rendezvous itself waits at least
    /// two minutes for late ranks.
    pub fn connect(env: &LaunchEnv, timeout_s: i32) -> TestResult<Tcp> {
        let window = Duration::from_secs(MIN_RENDEZVOUS_S.max(timeout_s.max(0) as u64));
        let deadline = Instant::now() + window;
        let mut chans = if env.rank == 0 {
            Self::accept_all(env, deadline)?
        } else {
            (0..CHANNELS)
                .map(|c| Self::dial(env, c, deadline))
                .collect::<TestResult<Vec<_>>>()?
        };
        let timeout = timeout_of(timeout_s);
        let make = |links| Tcp {
            rank: env.rank,
            size: env.size,
            timeout,
            links: Mutex::new(links),
            spare: Mutex::new(None),
        };
        let second = make(
            chans
                .pop()
                .ok_or_else(|| TestError::Internal("TCP bootstrap: no channel".into()))?,
        );
        let first = make(
            chans
                .pop()
                .ok_or_else(|| TestError::Internal("TCP bootstrap: no channel".into()))?,
        );
        *first.spare.lock().unwrap_or_else(|p| p.into_inner()) = Some(Box::new(second));
        Ok(first)
    }

    fn accept_all(env: &LaunchEnv, deadline: Instant) -> TestResult<Vec<Links>> {
        let bind = format!("0.0.0.0:{}", env.master_port);
        let listener = TcpListener::bind(&bind).map_err(|e| {
            TestError::Internal(format!(
                "TCP bootstrap: rank 0 cannot listen on {bind}: {e} (is MASTER_PORT in use?)"
            ))
        })?;
        listener
            .set_nonblocking(true)
            .map_err(|e| TestError::Internal(format!("TCP bootstrap: {e}")))?;
        let n = env.size - 1;
        let mut slots: Vec<Vec<Option<(TcpStream, SocketAddr)>>> = (0..CHANNELS)
            .map(|_| (0..n).map(|_| None).collect())
            .collect();
        let mut got = 0;
        while got < n * CHANNELS as usize {
            match listener.accept() {
                Ok((s, addr)) => {
                    if let Some((rank, chan)) = Self::greet(s.try_clone().ok(), env.size) {
                        let slot = &mut slots[chan][rank - 1];
                        if slot.is_none() {
                            *slot = Some((s, addr));
                            got += 1;
                        }
                    }
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    if Instant::now() > deadline {
                        let missing: Vec<String> = (1..env.size)
                            .filter(|r| slots.iter().any(|c| c[r - 1].is_none()))
                            .map(|r| r.to_string())
                            .collect();
                        return Err(TestError::Internal(format!(
                            "TCP bootstrap: ranks {} did not connect to rank 0 at {}:{} in time",
                            missing.join(","),
                            env.master_addr,
                            env.master_port
                        )));
                    }
                    std::thread::sleep(Duration::from_millis(20));
                }
                Err(e) => {
                    return Err(TestError::Internal(format!(
                        "TCP bootstrap: accept failed: {e}"
                    )));
                }
            }
        }
        Ok(slots
            .into_iter()
            .map(|c| Links::Root(c.into_iter().flatten().collect()))
            .collect())
    }

    /// Reads and answers a handshake; None for anything unexpected (a port
    /// scanner, a rank of another job), which is dropped.
    fn greet(s: Option<TcpStream>, size: usize) -> Option<(usize, usize)> {
        let mut s = s?;
        s.set_nonblocking(false).ok()?;
        s.set_read_timeout(Some(Duration::from_secs(10))).ok()?;
        let mut h = [0u8; 20];
        s.read_exact(&mut h).ok()?;
        let word = |i: usize| u32::from_le_bytes(h[i..i + 4].try_into().unwrap_or([0; 4])) as usize;
        let (proto, rank, world, chan) = (word(4), word(8), word(12), word(16));
        let ok = &h[..4] == MAGIC
            && proto == PROTOCOL as usize
            && world == size
            && (1..size).contains(&rank)
            && chan < CHANNELS as usize;
        let reply: &[u8] = if ok { b"OK" } else { b"NO" };
        s.write_all(reply).ok()?;
        s.set_nodelay(true).ok()?;
        ok.then_some((rank, chan))
    }

    fn dial(env: &LaunchEnv, chan: u32, deadline: Instant) -> TestResult<Links> {
        let target = format!("{}:{}", env.master_addr, env.master_port);
        loop {
            let addrs: Vec<SocketAddr> = target
                .to_socket_addrs()
                .map(|a| a.collect())
                .unwrap_or_default();
            for addr in &addrs {
                if let Ok(s) = TcpStream::connect_timeout(addr, Duration::from_secs(2))
                    && let Some(links) = Self::hello(s, env, chan, *addr)
                {
                    return Ok(links);
                }
            }
            if Instant::now() > deadline {
                return Err(TestError::Internal(format!(
                    "TCP bootstrap: rank {} could not reach rank 0 at {target} (MASTER_ADDR:MASTER_PORT); is rank 0 running and the port open?",
                    env.rank
                )));
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    fn hello(mut s: TcpStream, env: &LaunchEnv, chan: u32, addr: SocketAddr) -> Option<Links> {
        let mut h = Vec::with_capacity(20);
        h.extend_from_slice(MAGIC);
        for w in [PROTOCOL, env.rank as u32, env.size as u32, chan] {
            h.extend_from_slice(&w.to_le_bytes());
        }
        s.set_read_timeout(Some(Duration::from_secs(10))).ok()?;
        s.write_all(&h).ok()?;
        let mut reply = [0u8; 2];
        s.read_exact(&mut reply).ok()?;
        s.set_nodelay(true).ok()?;
        (&reply == b"OK").then_some(Links::Leaf(s, addr))
    }

    fn root_gather(
        &self,
        peers: &mut [(TcpStream, SocketAddr)],
        mine: &[u8],
    ) -> TestResult<Vec<u8>> {
        let mut all = mine.to_vec();
        for r in 1..self.size {
            let (s, addr) = &mut peers[r - 1];
            let who = format!("rank {r} ({addr})");
            let frame = s.set_read_timeout(self.timeout).and_then(|_| read_frame(s));
            match frame {
                Ok((TAG_DATA, d)) if d.len() == mine.len() => all.extend_from_slice(&d),
                Ok((_, d)) => {
                    let msg = format!(
                        "TCP bootstrap: rank {r} sent a mismatched message ({} bytes, expected {}): ranks are out of step",
                        d.len(),
                        mine.len()
                    );
                    return Err(self.root_abort(peers, TestError::Internal(msg)));
                }
                Err(e) => return Err(self.root_abort(peers, lost(&who, e))),
            }
        }
        for r in 1..self.size {
            let (s, addr) = &mut peers[r - 1];
            if let Err(e) = write_frame(s, TAG_DATA, &all) {
                let who = format!("rank {r} ({addr})");
                return Err(self.root_abort(peers, lost(&who, e)));
            }
        }
        Ok(all)
    }

    /// Tells every reachable rank why the run stops, then returns the error.
    /// Each socket is half-closed and drained briefly so the message is
    /// delivered instead of being discarded by a reset.
    fn root_abort(&self, peers: &mut [(TcpStream, SocketAddr)], err: TestError) -> TestError {
        let msg = err.to_string();
        for (s, _) in peers.iter_mut() {
            let _ = s.set_write_timeout(Some(Duration::from_secs(1)));
            let _ = write_frame(s, TAG_ABORT, msg.as_bytes());
            let _ = s.shutdown(std::net::Shutdown::Write);
        }
        let until = Instant::now() + Duration::from_millis(500);
        for (s, _) in peers.iter_mut() {
            let _ = s.set_read_timeout(Some(Duration::from_millis(100)));
            let mut sink = [0u8; 4096];
            while Instant::now() < until && matches!(s.read(&mut sink), Ok(n) if n > 0) {}
        }
        err
    }

    fn leaf_exchange(
        &self,
        s: &mut TcpStream,
        addr: SocketAddr,
        mine: &[u8],
    ) -> TestResult<Vec<u8>> {
        let who = format!("rank 0 ({addr})");
        if let Err(e) = write_frame(s, TAG_DATA, mine) {
            // Rank 0 may have given up and said why: prefer its message.
            let _ = s.set_read_timeout(Some(Duration::from_secs(1)));
            return Err(match read_frame(s) {
                Ok((TAG_ABORT, m)) => {
                    TestError::Internal(format!("rank 0 reports: {}", String::from_utf8_lossy(&m)))
                }
                _ => lost(&who, e),
            });
        }
        // Waiting on rank 0 includes waiting for the slowest rank, so the
        // bound is the run's timeout (None: peers' deaths still end it).
        s.set_read_timeout(self.timeout)
            .map_err(|e| lost(&who, e))?;
        match read_frame(s).map_err(|e| lost(&who, e))? {
            (TAG_DATA, d) => Ok(d),
            (_, m) => Err(TestError::Internal(format!(
                "rank 0 reports: {}",
                String::from_utf8_lossy(&m)
            ))),
        }
    }
}

impl Bootstrap for Tcp {
    fn rank(&self) -> usize {
        self.rank
    }
    fn size(&self) -> usize {
        self.size
    }
    fn name(&self) -> &'static str {
        "TCP"
    }
    fn allgather(&self, mine: &[u8]) -> TestResult<Vec<u8>> {
        let mut links = self.links.lock().unwrap_or_else(|p| p.into_inner());
        match &mut *links {
            Links::Root(peers) => self.root_gather(peers, mine),
            Links::Leaf(s, addr) => {
                let addr = *addr;
                self.leaf_exchange(s, addr, mine)
            }
        }
    }
    fn dup(&self) -> TestResult<Arc<dyn Bootstrap>> {
        let spare = self.spare.lock().unwrap_or_else(|p| p.into_inner()).take();
        spare
            .map(|t| Arc::new(*t) as Arc<dyn Bootstrap>)
            .ok_or_else(|| {
                TestError::Internal("TCP bootstrap: the second channel is already in use".into())
            })
    }
    fn split(&self, _color: i32) -> TestResult<Arc<dyn Bootstrap>> {
        Err(TestError::NotImplemented(
            "NCCL_TESTS_SPLIT with the host backend needs the MPI bootstrap (launch with mpirun), not TCP".into(),
        ))
    }
    fn abort(&self, code: i32) -> ! {
        std::process::exit(code)
    }
    fn lost_peers(&self) -> Vec<usize> {
        let mut links = self.links.lock().unwrap_or_else(|p| p.into_inner());
        match &mut *links {
            Links::Root(peers) => peers
                .iter()
                .enumerate()
                .filter(|(_, (s, _))| is_closed(s))
                .map(|(i, _)| i + 1)
                .collect(),
            Links::Leaf(s, _) => {
                if is_closed(s) {
                    vec![0]
                } else {
                    Vec::new()
                }
            }
        }
    }
}

/// Whether the peer closed `s` (or it failed), without blocking: a process
/// that is killed has its sockets closed by the kernel at once. Unread data
/// means the peer is alive.
fn is_closed(s: &TcpStream) -> bool {
    if s.set_nonblocking(true).is_err() {
        return false;
    }
    let closed = match s.peek(&mut [0u8; 1]) {
        Ok(0) => true,
        Ok(_) => false,
        Err(e) => e.kind() != io::ErrorKind::WouldBlock,
    };
    let _ = s.set_nonblocking(false);
    closed
}

#[cfg(test)]
mod tests {
    use super::*;

    fn free_port() -> u16 {
        std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .map(|a| a.port())
            .expect("a free port")
    }

    #[test]
    fn lost_peers_names_the_ranks_that_closed() {
        let port = free_port();
        let env = |rank| LaunchEnv {
            source: "test",
            rank,
            size: 3,
            local_rank: None,
            master_addr: "127.0.0.1".into(),
            master_port: port,
        };
        let mut boots: Vec<Tcp> = std::thread::scope(|s| {
            let hs: Vec<_> = (0..3)
                .map(|r| {
                    let e = env(r);
                    s.spawn(move || Tcp::connect(&e, 30))
                })
                .collect();
            hs.into_iter()
                .map(|h| h.join().expect("join").expect("connect"))
                .collect()
        });
        assert!(boots.iter().all(|b| b.lost_peers().is_empty()));
        let rank2 = boots.pop().expect("rank 2");
        drop(boots.pop()); // rank 1 goes away
        let rank0 = boots.pop().expect("rank 0");
        let until = Instant::now() + Duration::from_secs(5);
        while rank0.lost_peers().is_empty() && Instant::now() < until {
            std::thread::sleep(Duration::from_millis(10));
        }
        assert_eq!(rank0.lost_peers(), vec![1]);
        assert!(rank2.lost_peers().is_empty());
        drop(rank0);
        while rank2.lost_peers().is_empty() && Instant::now() < until {
            std::thread::sleep(Duration::from_millis(10));
        }
        assert_eq!(rank2.lost_peers(), vec![0]);
    }
}
