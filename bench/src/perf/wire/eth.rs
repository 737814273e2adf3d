//! perftest's "Ethernet" exchange: records over one TCP connection
//! (`ethernet_client_connect`, `ethernet_server_connect`), IPv4 as perftest
//! uses. Every read has a time limit while the connection is being set up;
//! during the peer's test the wait is unbounded but a closed or reset
//! connection (the peer exited or crashed) ends it at once, and TCP
//! keepalive notices a peer host that vanished.

use std::io::{ErrorKind, Read, Write};
use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4, TcpListener, TcpStream, ToSocketAddrs};
use std::os::fd::AsRawFd;
use std::time::{Duration, Instant};

use super::{Comm, EXT_HEADER, ext_header};
use crate::perf::error::{PerfError, PerfResult};

/// How long a client keeps retrying a refused connection (the server may be
/// starting).
const CONNECT_RETRY: Duration = Duration::from_secs(5);

/// A listening server socket (kept across clients with `--persistent`).
#[derive(Debug)]
pub struct EthListener {
    listener: TcpListener,
    port: u16,
}

impl EthListener {
    /// Listens on `port` of every IPv4 address, or of `source`.
    pub fn bind(source: Option<Ipv4Addr>, port: u16) -> PerfResult<EthListener> {
        let addr = SocketAddrV4::new(source.unwrap_or(Ipv4Addr::UNSPECIFIED), port);
        let listener = TcpListener::bind(addr).map_err(|e| {
            PerfError::Peer(format!(
                "listen on TCP {addr}: {}{}",
                io_text(&e),
                if e.kind() == ErrorKind::AddrInUse {
                    ": another server (erdma-perf or perftest) uses the port: stop it or pick another with -p"
                } else {
                    ""
                }
            ))
        })?;
        Ok(EthListener { listener, port })
    }

    /// The port listened on.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// Waits for the next client: for ever, or at most `wait`.
    pub fn accept(&self, timeout: Duration, wait: Option<Duration>) -> PerfResult<EthComm> {
        if let Some(w) = wait
            && !readable(&self.listener, w)
        {
            return Err(PerfError::Peer(format!(
                "no client on TCP port {} within {} s: did the client start (same test, same -p port)?",
                self.port,
                w.as_secs()
            )));
        }
        loop {
            match self.listener.accept() {
                Ok((stream, peer)) => return EthComm::new(stream, peer, timeout),
                Err(e) if e.kind() == ErrorKind::Interrupted => continue,
                Err(e) => {
                    return Err(PerfError::Peer(format!(
                        "accept a client on TCP port {}: {}",
                        self.port,
                        io_text(&e)
                    )));
                }
            }
        }
    }
}

/// Whether `l` has a connection to accept within `wait` (poll; an
/// interrupted poll starts over with the time left).
fn readable(l: &TcpListener, wait: Duration) -> bool {
    let deadline = Instant::now() + wait;
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        let mut pfd = libc::pollfd {
            fd: l.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        };
        let ms = left.as_millis().min(i32::MAX as u128) as i32;
        // SAFETY: one valid pollfd, on a descriptor `l` keeps open.
        let n = unsafe { libc::poll(&mut pfd, 1, ms) };
        if n > 0 {
            return true;
        }
        let interrupted = n < 0 && std::io::Error::last_os_error().kind() == ErrorKind::Interrupted;
        if !interrupted || left.is_zero() {
            return false;
        }
    }
}

/// One TCP exchange connection.
#[derive(Debug)]
pub struct EthComm {
    stream: TcpStream,
    peer: SocketAddr,
    timeout: Option<Duration>,
}

impl EthComm {
    fn new(stream: TcpStream, peer: SocketAddr, timeout: Duration) -> PerfResult<EthComm> {
        let _ = stream.set_nodelay(true);
        keepalive(&stream);
        let mut c = EthComm {
            stream,
            peer,
            timeout: None,
        };
        c.set_timeout(Some(timeout));
        Ok(c)
    }

    /// Connects to `host:port` (retrying while it is refused, for a few
    /// seconds), from `source` when given.
    pub fn connect(
        host: &str,
        port: u16,
        source: Option<Ipv4Addr>,
        timeout: Duration,
    ) -> PerfResult<EthComm> {
        let addrs: Vec<SocketAddr> = (host, port)
            .to_socket_addrs()
            .map_err(|e| PerfError::Peer(format!("resolve the server name '{host}': {e}")))?
            .filter(SocketAddr::is_ipv4)
            .collect();
        let Some(&addr) = addrs.first() else {
            return Err(PerfError::Peer(format!(
                "the server name '{host}' has no IPv4 address (perftest's exchange is IPv4)"
            )));
        };
        let deadline = Instant::now() + CONNECT_RETRY.min(timeout);
        loop {
            match connect_from(addr, source, timeout) {
                Ok(s) => return EthComm::new(s, addr, timeout),
                Err(e) if e.kind() == ErrorKind::ConnectionRefused && Instant::now() < deadline => {
                    std::thread::sleep(Duration::from_millis(50));
                }
                Err(e) => {
                    return Err(PerfError::Peer(format!(
                        "connect to {addr}: {}: {}",
                        io_text(&e),
                        match e.kind() {
                            ErrorKind::ConnectionRefused =>
                                "start the server side first (same test, same -p port)",
                            ErrorKind::TimedOut | ErrorKind::WouldBlock =>
                                "no answer: check the address and that a firewall lets the port through",
                            _ => "check the address and the route",
                        }
                    )));
                }
            }
        }
    }

    fn closed(&self, what: &str) -> PerfError {
        PerfError::Peer(format!(
            "{} closed the connection while this side waited for {what} (did it fail or get killed? see its output)",
            self.peer
        ))
    }
}

fn connect_from(
    addr: SocketAddr,
    source: Option<Ipv4Addr>,
    timeout: Duration,
) -> std::io::Result<TcpStream> {
    let Some(src) = source else {
        return TcpStream::connect_timeout(&addr, timeout);
    };
    // std has no bind-before-connect: do it with the socket calls.
    // SAFETY: plain socket creation; the fd is owned by the TcpStream below
    // or closed on every error path.
    let fd = unsafe { libc::socket(libc::AF_INET, libc::SOCK_STREAM | libc::SOCK_CLOEXEC, 0) };
    if fd < 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: fd is a fresh socket we own; from_raw_fd takes ownership.
    let stream = unsafe { <TcpStream as std::os::fd::FromRawFd>::from_raw_fd(fd) };
    let sin = |ip: Ipv4Addr, port: u16| libc::sockaddr_in {
        sin_family: libc::AF_INET as libc::sa_family_t,
        sin_port: port.to_be(),
        sin_addr: libc::in_addr {
            s_addr: u32::from_ne_bytes(ip.octets()),
        },
        sin_zero: [0; 8],
    };
    let local = sin(src, 0);
    // SAFETY: local is a valid sockaddr_in for the call.
    let rc = unsafe {
        libc::bind(
            fd,
            (&local as *const libc::sockaddr_in).cast(),
            std::mem::size_of::<libc::sockaddr_in>() as libc::socklen_t,
        )
    };
    if rc != 0 {
        return Err(std::io::Error::last_os_error());
    }
    let SocketAddr::V4(dst) = addr else {
        return Err(std::io::Error::new(ErrorKind::InvalidInput, "IPv4 only"));
    };
    let remote = sin(*dst.ip(), dst.port());
    // SAFETY: remote is a valid sockaddr_in for the call (blocking connect).
    let rc = unsafe {
        libc::connect(
            fd,
            (&remote as *const libc::sockaddr_in).cast(),
            std::mem::size_of::<libc::sockaddr_in>() as libc::socklen_t,
        )
    };
    if rc != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(stream)
}

/// Keepalive probes after 10 s idle, every 5 s, 3 of them: a vanished peer
/// host fails the wait within about 25 s.
fn keepalive(s: &TcpStream) {
    let fd = s.as_raw_fd();
    let set = |level: i32, name: i32, v: i32| {
        // SAFETY: fd is a live socket; v is a readable int for the call.
        unsafe {
            libc::setsockopt(
                fd,
                level,
                name,
                (&v as *const i32).cast(),
                std::mem::size_of::<i32>() as libc::socklen_t,
            )
        };
    };
    set(libc::SOL_SOCKET, libc::SO_KEEPALIVE, 1);
    set(libc::IPPROTO_TCP, libc::TCP_KEEPIDLE, 10);
    set(libc::IPPROTO_TCP, libc::TCP_KEEPINTVL, 5);
    set(libc::IPPROTO_TCP, libc::TCP_KEEPCNT, 3);
}

/// The OS error text without Rust's " (os error N)".
pub(crate) fn io_text(e: &std::io::Error) -> String {
    let m = e.to_string();
    match m.find(" (os error") {
        Some(i) => m[..i].to_owned(),
        None => m,
    }
}

impl Comm for EthComm {
    fn send(&mut self, data: &[u8], what: &str) -> PerfResult<()> {
        self.stream.write_all(data).map_err(|e| {
            if matches!(e.kind(), ErrorKind::BrokenPipe | ErrorKind::ConnectionReset) {
                self.closed(what)
            } else {
                PerfError::Peer(format!("send {what} to {}: {}", self.peer, io_text(&e)))
            }
        })
    }

    fn recv(&mut self, buf: &mut [u8], what: &str) -> PerfResult<()> {
        let started = Instant::now();
        let mut got = 0;
        while got < buf.len() {
            match self.stream.read(&mut buf[got..]) {
                Ok(0) => return Err(self.closed(what)),
                Ok(n) => got += n,
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {
                    return Err(PerfError::Peer(format!(
                        "timed out after {:.0?} waiting for {what} from {} ({got} of {} bytes came): \
                         is the peer the same test (perftest or erdma-perf) with the same options? (--timeout)",
                        started.elapsed(),
                        self.peer,
                        buf.len()
                    )));
                }
                Err(e) if e.kind() == ErrorKind::ConnectionReset => return Err(self.closed(what)),
                Err(e) => {
                    return Err(PerfError::Peer(format!(
                        "receive {what} from {}: {}",
                        self.peer,
                        io_text(&e)
                    )));
                }
            }
        }
        Ok(())
    }

    fn set_timeout(&mut self, timeout: Option<Duration>) {
        self.timeout = timeout;
        let _ = self.stream.set_read_timeout(timeout);
        let _ = self.stream.set_write_timeout(timeout);
    }

    fn peer_gone(&mut self) -> bool {
        let mut b = [0u8; 1];
        if self.stream.set_nonblocking(true).is_err() {
            return true;
        }
        let gone = match self.stream.peek(&mut b) {
            Ok(0) => true,
            Ok(_) => false,
            Err(e) => e.kind() != ErrorKind::WouldBlock && e.kind() != ErrorKind::Interrupted,
        };
        let _ = self.stream.set_nonblocking(false);
        gone
    }

    fn peer(&self) -> String {
        self.peer.to_string()
    }

    fn method(&self) -> &'static str {
        "Ethernet"
    }

    fn recv_record(&mut self, max: usize, what: &str) -> PerfResult<Vec<u8>> {
        let mut head = [0u8; EXT_HEADER];
        self.recv(&mut head, what)?;
        let len = ext_header(&head, max)?;
        let mut body = vec![0u8; len];
        self.recv(&mut body, what)?;
        Ok(body)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::perf::wire::{Role, RunKey, exchange_run_key, ext_record, xchg};

    fn pair() -> (EthComm, TcpStream) {
        let l = EthListener::bind(Some(Ipv4Addr::LOCALHOST), 0).unwrap();
        let port = l.listener.local_addr().unwrap().port();
        let client = TcpStream::connect(("127.0.0.1", port)).unwrap();
        let server = l.accept(Duration::from_millis(300), None).unwrap();
        (server, client)
    }

    #[test]
    fn a_bounded_wait_without_a_client_is_an_error() {
        let l = EthListener::bind(Some(Ipv4Addr::LOCALHOST), 0).unwrap();
        let t0 = Instant::now();
        let e = l
            .accept(Duration::from_secs(1), Some(Duration::from_millis(100)))
            .unwrap_err();
        assert!(e.to_string().contains("no client on TCP port"), "{e}");
        assert!(t0.elapsed() < Duration::from_secs(5));
        // A client that is there is taken at once.
        let port = l.listener.local_addr().unwrap().port();
        let _c = TcpStream::connect(("127.0.0.1", port)).unwrap();
        assert!(
            l.accept(Duration::from_secs(1), Some(Duration::from_secs(5)))
                .is_ok()
        );
    }

    fn key() -> RunKey {
        RunKey {
            version: "0".into(),
            test: "write_bw".into(),
            size: 65536,
            all: false,
            iters: 5000,
            duration: None,
            qps: 1,
            duplex: false,
            verify: false,
            rx_depth: 1,
            atomic: String::new(),
        }
    }

    #[test]
    fn peer_that_closes_is_reported() {
        let (mut s, c) = pair();
        assert!(!s.peer_gone());
        drop(c);
        std::thread::sleep(Duration::from_millis(20));
        assert!(s.peer_gone());
        let mut b = [0u8; 16];
        let e = s.recv(&mut b, "the version").unwrap_err().to_string();
        assert!(
            e.contains("closed the connection while this side waited for the version"),
            "{e}"
        );
    }

    #[test]
    fn silent_peer_times_out() {
        let (mut s, _c) = pair();
        let mut b = [0u8; 16];
        let e = s.recv(&mut b, "the version").unwrap_err().to_string();
        assert!(e.contains("timed out"), "{e}");
    }

    #[test]
    fn oversized_and_garbage_options_records_are_refused_without_allocating() {
        let (mut s, mut c) = pair();
        let mut huge = Vec::from(&b"ERDMAPRF"[..]);
        huge.extend_from_slice(&u32::MAX.to_be_bytes());
        c.write_all(&huge).unwrap();
        let e = exchange_run_key(&mut s, Role::Server, &key())
            .unwrap_err()
            .to_string();
        assert!(e.contains("announces 4294967295 bytes"), "{e}");
        let (mut s, mut c) = pair();
        c.write_all(&[0x41; 64]).unwrap();
        let e = exchange_run_key(&mut s, Role::Server, &key())
            .unwrap_err()
            .to_string();
        assert!(e.contains("garbage"), "{e}");
        let (mut s, mut c) = pair();
        c.write_all(&ext_record(b"{not json")).unwrap();
        let e = exchange_run_key(&mut s, Role::Server, &key())
            .unwrap_err()
            .to_string();
        assert!(e.contains("not valid"), "{e}");
    }

    #[test]
    fn records_cross_in_perftest_order() {
        let (mut s, c) = pair();
        let t = std::thread::spawn(move || {
            let mut c =
                EthComm::new(c, "127.0.0.1:1".parse().unwrap(), Duration::from_secs(5)).unwrap();
            let mut theirs = [0u8; 4];
            xchg(&mut c, Role::Client, b"ping", &mut theirs, "x").unwrap();
            theirs
        });
        let mut theirs = [0u8; 4];
        xchg(&mut s, Role::Server, b"pong", &mut theirs, "x").unwrap();
        assert_eq!(&theirs, b"ping");
        assert_eq!(&t.join().unwrap(), b"pong");
    }
}
