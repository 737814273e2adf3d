//! `erdma-stat --serve ADDR`: a Prometheus exporter over plain HTTP/1.x,
//! std only. Every scrape reads sysfs ([`super::prometheus::render`]); nothing
//! polls in the background. The doctor's checks are evaluated on a scrape
//! once the last evaluation is older than `--checks-every`.
//!
//! Bounds, so that a slow or hostile client can neither stall nor grow it:
//! a request head of at most [`MAX_HEAD`] bytes read within [`HEAD_DEADLINE`]
//! (each read waits at most 1 s), a response written within [`WRITE_DEADLINE`],
//! at most [`MAX_CONNECTIONS`] connections served at once (more are answered
//! 503 at once and closed), one request per connection. Only `GET /metrics`
//! and `GET /` are served; other paths are 404, other methods 405.

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::doctor::{self, Host, Report};

/// The longest request head (request line and headers) read.
pub const MAX_HEAD: usize = 8 << 10;
/// The time a client has to send its request head.
pub const HEAD_DEADLINE: Duration = Duration::from_secs(5);
/// The time a client has to take the response.
pub const WRITE_DEADLINE: Duration = Duration::from_secs(10);
/// Connections served at once.
pub const MAX_CONNECTIONS: usize = 16;
/// The stack of a connection's thread.
const STACK: usize = 256 << 10;

/// Makes the host the doctor's checks look at.
pub type HostFactory = Box<dyn Fn() -> Box<dyn Host> + Send + Sync>;

/// What the server needs to answer.
pub struct Exporter {
    /// The devices' sysfs directory.
    pub root: std::path::PathBuf,
    /// Re-evaluate the doctor's checks when older than this; `None`: no checks.
    pub checks_every: Option<Duration>,
    /// Checks and groups the doctor skips.
    pub skip: Vec<String>,
    /// A fresh view of the host the checks look at (facts are gathered anew
    /// for each evaluation: a port that went down is seen).
    pub host: HostFactory,
    cache: Mutex<Option<(Instant, Report)>>,
}

impl Exporter {
    /// An exporter of the devices under `root`.
    pub fn new(
        root: std::path::PathBuf,
        checks_every: Option<Duration>,
        skip: Vec<String>,
        host: HostFactory,
    ) -> Exporter {
        Exporter {
            root,
            checks_every,
            skip,
            host,
            cache: Mutex::new(None),
        }
    }

    /// The `/metrics` body now.
    pub fn metrics(&self) -> String {
        let Some(every) = self.checks_every else {
            return super::prometheus::render(&self.root, None);
        };
        // One evaluation at a time; scrapes meanwhile wait for its result.
        let mut cache = self.cache.lock().unwrap_or_else(|p| p.into_inner());
        if cache.as_ref().is_none_or(|(t, _)| t.elapsed() >= every) {
            *cache = Some((
                Instant::now(),
                doctor::evaluate(&*(self.host)(), &self.skip),
            ));
        }
        let (t, report) = cache.as_ref().expect("just set");
        super::prometheus::render(
            &self.root,
            Some(super::prometheus::Checks {
                report,
                age_s: t.elapsed().as_secs_f64(),
            }),
        )
    }
}

/// What a request asked for.
#[derive(Debug, PartialEq, Eq)]
pub enum Route {
    /// `GET /metrics`.
    Metrics,
    /// `GET /`.
    Index,
    /// Another path (404).
    NotFound,
    /// Another method (405).
    BadMethod,
    /// Not an HTTP request line (400).
    Bad,
}

/// The route of a request head's first line.
pub fn route(head: &[u8]) -> Route {
    let line_end = head
        .windows(2)
        .position(|w| w == b"\r\n")
        .unwrap_or(head.len());
    let Ok(line) = std::str::from_utf8(&head[..line_end]) else {
        return Route::Bad;
    };
    let mut w = line.split(' ');
    let (Some(method), Some(target), Some(version), None) =
        (w.next(), w.next(), w.next(), w.next())
    else {
        return Route::Bad;
    };
    if !version.starts_with("HTTP/1.") || !target.starts_with('/') {
        return Route::Bad;
    }
    if method != "GET" {
        return Route::BadMethod;
    }
    match target.split('?').next() {
        Some("/metrics") => Route::Metrics,
        Some("/") => Route::Index,
        _ => Route::NotFound,
    }
}

const INDEX: &str = "<html><head><title>erdma-stat exporter</title></head><body>\
<h1>erdma-stat exporter</h1><p>RDMA port counters, port state and erdma-doctor's checks \
in Prometheus' text format: <a href=\"/metrics\">/metrics</a>.</p></body></html>\n";

fn response(status: &str, ctype: &str, extra: &str, body: &[u8]) -> Vec<u8> {
    let mut r = format!(
        "HTTP/1.1 {status}\r\nContent-Type: {ctype}\r\nContent-Length: {}\r\n{extra}Connection: close\r\n\r\n",
        body.len()
    )
    .into_bytes();
    r.extend_from_slice(body);
    r
}

fn plain(status: &str, extra: &str, body: &str) -> Vec<u8> {
    response(status, "text/plain; charset=utf-8", extra, body.as_bytes())
}

/// Reads the request head: `Ok(bytes)` up to the blank line, or the error
/// response to send (`None`: the client went away, send nothing).
fn read_head(s: &mut TcpStream) -> Result<Vec<u8>, Option<Vec<u8>>> {
    let t0 = Instant::now();
    let mut buf = vec![0u8; MAX_HEAD];
    let mut n = 0;
    loop {
        if let Some(end) = buf[..n].windows(4).position(|w| w == b"\r\n\r\n") {
            buf.truncate(end + 4);
            return Ok(buf);
        }
        // Not HTTP from its first bytes on: no need to wait for the rest.
        let method_end = buf[..n].iter().position(|&b| b == b' ').unwrap_or(n);
        let bad_method = method_end > 16 || !buf[..method_end].iter().all(u8::is_ascii_uppercase);
        let bad_line = buf[..n]
            .windows(2)
            .position(|w| w == b"\r\n")
            .is_some_and(|eol| route(&buf[..eol]) == Route::Bad);
        if bad_method || bad_line {
            return Err(Some(plain(
                "400 Bad Request",
                "",
                "not an HTTP/1.x request\n",
            )));
        }
        if n == MAX_HEAD {
            return Err(Some(plain(
                "431 Request Header Fields Too Large",
                "",
                "request head over 8 KiB\n",
            )));
        }
        if t0.elapsed() >= HEAD_DEADLINE {
            return Err(Some(plain("408 Request Timeout", "", "request too slow\n")));
        }
        match s.read(&mut buf[n..]) {
            Ok(0) => return Err(None),
            Ok(k) => n += k,
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock
                        | std::io::ErrorKind::TimedOut
                        | std::io::ErrorKind::Interrupted
                ) => {}
            Err(_) => return Err(None),
        }
    }
}

/// Writes `data` within [`WRITE_DEADLINE`], then closes our side.
fn send(s: &mut TcpStream, data: &[u8]) {
    let t0 = Instant::now();
    for chunk in data.chunks(16 << 10) {
        if t0.elapsed() >= WRITE_DEADLINE || s.write_all(chunk).is_err() {
            return;
        }
    }
    let _ = s.flush();
    let _ = s.shutdown(std::net::Shutdown::Write);
    // Take what the client still sends (briefly) so the close is not a reset
    // that could cut the response short.
    let _ = s.set_read_timeout(Some(Duration::from_millis(200)));
    let t1 = Instant::now();
    let mut sink = [0u8; 1024];
    let mut left = 64usize;
    while left > 0
        && t1.elapsed() < Duration::from_millis(500)
        && matches!(s.read(&mut sink), Ok(k) if k > 0)
    {
        left -= 1;
    }
}

/// Serves one connection.
pub fn handle(mut s: TcpStream, ex: &Exporter) {
    let _ = s.set_read_timeout(Some(Duration::from_secs(1)));
    let _ = s.set_write_timeout(Some(Duration::from_secs(2)));
    let _ = s.set_nodelay(true);
    let head = match read_head(&mut s) {
        Ok(h) => h,
        Err(Some(r)) => return send(&mut s, &r),
        Err(None) => return,
    };
    let r = match route(&head) {
        Route::Metrics => response(
            "200 OK",
            "text/plain; version=0.0.4; charset=utf-8",
            "",
            ex.metrics().as_bytes(),
        ),
        Route::Index => response("200 OK", "text/html; charset=utf-8", "", INDEX.as_bytes()),
        Route::NotFound => plain("404 Not Found", "", "only /metrics and / are served\n"),
        Route::BadMethod => plain("405 Method Not Allowed", "Allow: GET\r\n", "only GET\n"),
        Route::Bad => plain("400 Bad Request", "", "not an HTTP/1.x request\n"),
    };
    send(&mut s, &r);
}

/// Accepts connections forever (until the process is ended), each served
/// on its own thread, at most [`MAX_CONNECTIONS`] at once.
pub fn serve(listener: TcpListener, ex: Arc<Exporter>) -> std::io::Error {
    let active = Arc::new(AtomicUsize::new(0));
    loop {
        let s = match listener.accept() {
            Ok((s, _)) => s,
            // Out of descriptors and the like: wait instead of spinning.
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e)
                if e.raw_os_error() == Some(libc::EMFILE)
                    || e.raw_os_error() == Some(libc::ENFILE) =>
            {
                std::thread::sleep(Duration::from_millis(100));
                continue;
            }
            Err(e) if e.kind() == std::io::ErrorKind::ConnectionAborted => continue,
            Err(e) => return e,
        };
        if active.fetch_add(1, Ordering::AcqRel) >= MAX_CONNECTIONS {
            active.fetch_sub(1, Ordering::AcqRel);
            let mut s = s;
            let _ = s.set_nonblocking(true);
            let _ = s.write(&plain(
                "503 Service Unavailable",
                "",
                "too many connections\n",
            ));
            continue;
        }
        let (ex, act) = (Arc::clone(&ex), Arc::clone(&active));
        let spawned = std::thread::Builder::new()
            .name("erdma-stat-http".into())
            .stack_size(STACK)
            .spawn(move || {
                handle(s, &ex);
                act.fetch_sub(1, Ordering::AcqRel);
            });
        if spawned.is_err() {
            active.fetch_sub(1, Ordering::AcqRel);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn routes() {
        assert_eq!(
            route(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n"),
            Route::Metrics
        );
        assert_eq!(route(b"GET /metrics?x=1 HTTP/1.0\r\n\r\n"), Route::Metrics);
        assert_eq!(route(b"GET / HTTP/1.1\r\n\r\n"), Route::Index);
        assert_eq!(route(b"GET /etc/passwd HTTP/1.1\r\n\r\n"), Route::NotFound);
        assert_eq!(route(b"POST /metrics HTTP/1.1\r\n\r\n"), Route::BadMethod);
        assert_eq!(route(b"GET /metrics\r\n\r\n"), Route::Bad);
        assert_eq!(route(b"GET metrics HTTP/1.1\r\n\r\n"), Route::Bad);
        assert_eq!(route(b"\xff\xfe /metrics HTTP/1.1\r\n\r\n"), Route::Bad);
        assert_eq!(route(b"GET /metrics HTTP/1.1 x\r\n\r\n"), Route::Bad);
        assert_eq!(route(b""), Route::Bad);
    }

    #[test]
    fn responses_have_their_length() {
        let r = String::from_utf8(plain("404 Not Found", "", "abc\n")).unwrap();
        assert!(r.starts_with("HTTP/1.1 404 Not Found\r\n"), "{r}");
        assert!(
            r.contains("Content-Length: 4\r\n") && r.ends_with("\r\n\r\nabc\n"),
            "{r}"
        );
    }
}
