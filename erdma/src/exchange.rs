//! A small TCP side channel to swap [`crate::Endpoint`]s (or any serde
//! value) between two processes, so that they connect with a `host:port`.
//!
//! Messages are framed (`ERDM`, version, length, JSON) and bounded (1 MiB):
//! garbage, a wrong peer or a dead peer give a one-line error, never a hang
//! (every read and write has a timeout).
//!
//! ```no_run
//! # fn main() -> erdma::Result<()> {
//! use std::time::Duration;
//! use erdma::exchange::{Exchange, ExchangeListener};
//! // server
//! let listener = ExchangeListener::bind("0.0.0.0:18515")?;
//! let mut ch = listener.accept(Duration::from_secs(60))?;
//! let peer: String = ch.swap(&"hello from the server".to_string())?;
//! // client (other process): Exchange::connect("server:18515", Duration::from_secs(60))?
//! # Ok(()) }
//! ```

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream, ToSocketAddrs};
use std::time::{Duration, Instant};

use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::error::{Error, Result};

const MAGIC: &[u8; 4] = b"ERDM";
const VERSION: u8 = 1;
/// Largest message accepted.
pub const MAX_MESSAGE: usize = 1 << 20;
/// Default timeout of each read and write.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(60);

/// A listening socket that accepts [`Exchange`] peers.
#[derive(Debug)]
pub struct ExchangeListener {
    listener: TcpListener,
    addr: String,
}

impl ExchangeListener {
    /// Listens on `addr` (`0.0.0.0:18515`, `[::]:18515`, `host:port`).
    pub fn bind(addr: &str) -> Result<ExchangeListener> {
        let listener = TcpListener::bind(addr).map_err(|e| Error::io("listen on", addr, &e))?;
        Ok(ExchangeListener {
            listener,
            addr: addr.to_owned(),
        })
    }

    /// The bound address (useful after binding port 0).
    pub fn local_addr(&self) -> Result<SocketAddr> {
        self.listener
            .local_addr()
            .map_err(|e| Error::io("getsockname", &self.addr, &e))
    }

    /// Accepts one peer, waiting at most `timeout`.
    pub fn accept(&self, timeout: Duration) -> Result<Exchange> {
        let deadline = crate::deadline::after(timeout);
        self.listener
            .set_nonblocking(true)
            .map_err(|e| Error::io("accept on", &self.addr, &e))?;
        loop {
            match self.listener.accept() {
                Ok((stream, peer)) => {
                    stream
                        .set_nonblocking(false)
                        .map_err(|e| Error::io("accept on", &self.addr, &e))?;
                    return Exchange::new(stream, peer.to_string(), true);
                }
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                    if Instant::now() >= deadline {
                        return Err(Error::Timeout {
                            what: format!("a peer to connect to {}", self.addr),
                            after: timeout,
                            hint: Some(
                                "start the other side with this host's address and port".into(),
                            ),
                        });
                    }
                    std::thread::sleep(Duration::from_millis(20));
                }
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) => return Err(Error::io("accept on", &self.addr, &e)),
            }
        }
    }
}

/// A connected side channel.
#[derive(Debug)]
pub struct Exchange {
    stream: TcpStream,
    peer: String,
    acceptor: bool,
}

impl Exchange {
    fn new(stream: TcpStream, peer: String, acceptor: bool) -> Result<Exchange> {
        let _ = stream.set_nodelay(true);
        let mut x = Exchange {
            stream,
            peer,
            acceptor,
        };
        x.set_timeout(DEFAULT_TIMEOUT)?;
        Ok(x)
    }

    /// Connects to `addr` (`host:port`), retrying while nothing listens yet,
    /// for at most `timeout`.
    pub fn connect(addr: &str, timeout: Duration) -> Result<Exchange> {
        let deadline = crate::deadline::after(timeout);
        let addrs: Vec<SocketAddr> = addr
            .to_socket_addrs()
            .map_err(|e| Error::io("resolve", addr, &e))?
            .collect();
        if addrs.is_empty() {
            return Err(Error::invalid(
                "Exchange::connect",
                format!("'{addr}' resolves to no address"),
            ));
        }
        loop {
            let mut last = None;
            for a in &addrs {
                let left = deadline
                    .saturating_duration_since(Instant::now())
                    .max(Duration::from_millis(10));
                match TcpStream::connect_timeout(a, left) {
                    Ok(s) => return Exchange::new(s, addr.to_owned(), false),
                    Err(e) => last = Some(e),
                }
            }
            let e = last.unwrap_or_else(|| std::io::Error::from(std::io::ErrorKind::NotFound));
            let retry = matches!(
                e.kind(),
                std::io::ErrorKind::ConnectionRefused | std::io::ErrorKind::TimedOut
            );
            if !retry || Instant::now() >= deadline {
                return Err(Error::io("connect to", addr, &e));
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Sets the timeout of every later read and write.
    pub fn set_timeout(&mut self, timeout: Duration) -> Result<()> {
        let t = Some(timeout.max(Duration::from_millis(1)));
        self.stream
            .set_read_timeout(t)
            .and_then(|_| self.stream.set_write_timeout(t))
            .map_err(|e| Error::io("configure socket to", &self.peer, &e))
    }

    /// The peer's address.
    pub fn peer(&self) -> &str {
        &self.peer
    }

    /// Sends one value.
    pub fn send<T: Serialize + ?Sized>(&mut self, value: &T) -> Result<()> {
        let body = serde_json::to_vec(value).map_err(|e| {
            Error::invalid("Exchange::send", format!("cannot encode the value: {e}"))
        })?;
        if body.len() > MAX_MESSAGE {
            return Err(Error::invalid(
                "Exchange::send",
                format!(
                    "{} bytes exceed the {MAX_MESSAGE}-byte message limit",
                    body.len()
                ),
            ));
        }
        let mut frame = Vec::with_capacity(12 + body.len());
        frame.extend_from_slice(MAGIC);
        frame.extend_from_slice(&[VERSION, 0, 0, 0]);
        frame.extend_from_slice(&(body.len() as u32).to_be_bytes());
        frame.extend_from_slice(&body);
        self.stream
            .write_all(&frame)
            .and_then(|_| self.stream.flush())
            .map_err(|e| Error::io("send to", &self.peer, &e))
    }

    /// Receives one value.
    pub fn recv<T: DeserializeOwned>(&mut self) -> Result<T> {
        let mut head = [0u8; 12];
        self.stream
            .read_exact(&mut head)
            .map_err(|e| Error::io("receive from", &self.peer, &e))?;
        if &head[..4] != MAGIC {
            return Err(Error::Protocol {
                peer: self.peer.clone(),
                problem: "not an erdma exchange message (wrong magic): is the right program on this port?"
                    .into(),
            });
        }
        if head[4] != VERSION {
            return Err(Error::Protocol {
                peer: self.peer.clone(),
                problem: format!("message version {} (this build speaks {VERSION})", head[4]),
            });
        }
        let len = u32::from_be_bytes([head[8], head[9], head[10], head[11]]) as usize;
        if len > MAX_MESSAGE {
            return Err(Error::Protocol {
                peer: self.peer.clone(),
                problem: format!("{len}-byte message exceeds the {MAX_MESSAGE}-byte limit"),
            });
        }
        let mut body = vec![0u8; len];
        self.stream
            .read_exact(&mut body)
            .map_err(|e| Error::io("receive from", &self.peer, &e))?;
        serde_json::from_slice(&body).map_err(|e| Error::Protocol {
            peer: self.peer.clone(),
            problem: format!("undecodable message: {e}"),
        })
    }

    /// Sends `value` and receives the peer's (the accepting side receives
    /// first, so that two large messages cannot deadlock).
    pub fn swap<T: Serialize + DeserializeOwned>(&mut self, value: &T) -> Result<T> {
        if self.acceptor {
            let v = self.recv()?;
            self.send(value)?;
            Ok(v)
        } else {
            self.send(value)?;
            self.recv()
        }
    }

    /// Waits until the peer reaches its `barrier` call too.
    pub fn barrier(&mut self) -> Result<()> {
        let got: String = self.swap(&"barrier".to_string())?;
        if got != "barrier" {
            return Err(Error::Protocol {
                peer: self.peer.clone(),
                problem: format!("expected a barrier, got '{got}'"),
            });
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::endpoint::Endpoint;
    use crate::port::Mtu;

    fn pair() -> (Exchange, Exchange) {
        let l = ExchangeListener::bind("127.0.0.1:0").unwrap();
        let addr = l.local_addr().unwrap().to_string();
        let t =
            std::thread::spawn(move || Exchange::connect(&addr, Duration::from_secs(5)).unwrap());
        let a = l.accept(Duration::from_secs(5)).unwrap();
        (a, t.join().unwrap())
    }

    /// Issue 34 hole 12: `Duration::MAX` ("wait for ever") as a timeout
    /// panicked (`Instant + Duration` overflow) before the first try.
    #[test]
    fn duration_max_timeouts_wait_instead_of_panicking() {
        let l = ExchangeListener::bind("127.0.0.1:0").unwrap();
        let addr = l.local_addr().unwrap().to_string();
        let t = std::thread::spawn(move || Exchange::connect(&addr, Duration::MAX).unwrap());
        let mut a = l.accept(Duration::MAX).unwrap();
        let mut b = t.join().unwrap();
        a.set_timeout(Duration::MAX).unwrap();
        b.set_timeout(Duration::MAX).unwrap();
        let t = std::thread::spawn(move || b.barrier().unwrap());
        a.barrier().unwrap();
        t.join().unwrap();
    }

    #[test]
    fn swap_endpoints() {
        let (mut a, mut b) = pair();
        let ep = |q| Endpoint {
            qp_num: q,
            psn: 1,
            gid: "::ffff:127.0.0.1".parse().unwrap(),
            gid_index: 1,
            lid: 0,
            port: 1,
            mtu: Mtu::Mtu1024,
            buffers: vec![],
        };
        let t = std::thread::spawn(move || {
            let got: Endpoint = b.swap(&ep(2)).unwrap();
            b.barrier().unwrap();
            got
        });
        let got: Endpoint = a.swap(&ep(1)).unwrap();
        a.barrier().unwrap();
        assert_eq!(got.qp_num, 2);
        assert_eq!(t.join().unwrap().qp_num, 1);
    }

    #[test]
    fn garbage_gives_protocol_error() {
        let l = ExchangeListener::bind("127.0.0.1:0").unwrap();
        let addr = l.local_addr().unwrap();
        let t = std::thread::spawn(move || {
            let mut s = TcpStream::connect(addr).unwrap();
            s.write_all(b"GET / HTTP/1.1\r\n\r\n").unwrap();
            std::thread::sleep(Duration::from_millis(200));
        });
        let mut a = l.accept(Duration::from_secs(5)).unwrap();
        let e = a.recv::<Endpoint>().unwrap_err();
        assert!(matches!(e, Error::Protocol { .. }), "{e}");
        assert!(!e.to_string().contains('\n'));
        t.join().unwrap();
    }

    #[test]
    fn oversized_and_bad_json() {
        let (mut a, mut b) = pair();
        // A frame claiming 2 MiB.
        let mut frame = Vec::new();
        frame.extend_from_slice(MAGIC);
        frame.extend_from_slice(&[VERSION, 0, 0, 0]);
        frame.extend_from_slice(&(2u32 << 20).to_be_bytes());
        b.stream.write_all(&frame).unwrap();
        assert!(matches!(a.recv::<Endpoint>(), Err(Error::Protocol { .. })));
        // Valid frame, wrong type.
        let (mut a, mut b) = pair();
        b.send(&vec![1, 2, 3]).unwrap();
        let e = a.recv::<Endpoint>().unwrap_err().to_string();
        assert!(e.contains("undecodable"), "{e}");
    }

    #[test]
    fn dead_peer_and_timeouts() {
        let (mut a, b) = pair();
        drop(b);
        let e = a.recv::<Endpoint>().unwrap_err();
        assert!(matches!(e, Error::Io { .. }), "{e}");
        let (mut a, _b) = pair();
        a.set_timeout(Duration::from_millis(100)).unwrap();
        let e = a.recv::<Endpoint>().unwrap_err();
        assert!(e.hint().is_some(), "{e}");
        let l = ExchangeListener::bind("127.0.0.1:0").unwrap();
        assert!(matches!(
            l.accept(Duration::from_millis(50)),
            Err(Error::Timeout { .. })
        ));
    }

    #[test]
    fn connect_refused_times_out_with_hint() {
        // Bind then drop to get a port nobody listens on.
        let port = TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let e = Exchange::connect(&format!("127.0.0.1:{port}"), Duration::from_millis(200))
            .unwrap_err();
        assert!(e.to_string().contains("start the other side"), "{e}");
        assert!(Exchange::connect("no-such-host.invalid:1", Duration::from_millis(100)).is_err());
        assert!(Exchange::connect("garbage", Duration::from_millis(100)).is_err());
    }
}
