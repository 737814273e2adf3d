//! Frames on the TCP bootstrap's non-blocking sockets: `tag` (1 byte),
//! `length` (u64 LE), payload. A frame's length is checked against what
//! the protocol expects at that point before anything is allocated, and
//! every read and write is bounded by a deadline, so a peer that sends
//! garbage or stops reading is an error, never an allocation of what it
//! claims or a hang.

use std::io::{self, ErrorKind, Read, Write};
use std::net::TcpStream;
use std::os::fd::{AsRawFd, RawFd};
use std::time::{Duration, Instant};

/// Frame tags.
pub mod tag {
    /// A collective's data.
    pub const DATA: u8 = 1;
    /// A process stops the job: origin rank (u32), status (i32), message.
    pub const ABORT: u8 = 2;
    /// A census notice (see `census`).
    pub const CENSUS: u8 = 3;
    /// Rank 0's table of every process's census answer.
    pub const VERDICT: u8 = 4;
    /// Rank 0 starts the census: answer with a notice.
    pub const CENSUS_START: u8 = 5;
}

/// Largest ABORT payload accepted.
pub const MAX_ABORT: usize = 4096;

const HEAD: usize = 9;

/// Why a frame could not be read.
#[derive(Debug)]
pub enum FrameError {
    /// The socket failed.
    Io(io::Error),
    /// The peer closed the connection.
    Closed,
    /// The header is not what the protocol expects here (the text says why).
    Malformed(String),
}

/// Reads one frame from a non-blocking socket across several calls.
pub struct FrameReader {
    head: [u8; HEAD],
    got_head: usize,
    tag: u8,
    body: Vec<u8>,
    len: usize,
    got: usize,
    into_dest: bool,
}

/// A complete frame: its tag, and its payload unless it was a DATA frame
/// read into the caller's buffer.
pub type Frame = (u8, Vec<u8>);

impl Default for FrameReader {
    fn default() -> Self {
        FrameReader {
            head: [0; HEAD],
            got_head: 0,
            tag: 0,
            body: Vec::new(),
            len: 0,
            got: 0,
            into_dest: false,
        }
    }
}

impl FrameReader {
    /// Reads what is available. DATA frames must be exactly `dest.len()`
    /// long (their payload goes into `dest`); other tags are accepted when
    /// `limit(tag)` allows their length. Ok(None): not complete yet.
    pub fn pump(
        &mut self,
        s: &mut TcpStream,
        dest: &mut [u8],
        limit: &dyn Fn(u8) -> Option<usize>,
    ) -> Result<Option<Frame>, FrameError> {
        while self.got_head < HEAD {
            match s.read(&mut self.head[self.got_head..]) {
                Ok(0) => return Err(FrameError::Closed),
                Ok(n) => self.got_head += n,
                Err(e) if e.kind() == ErrorKind::WouldBlock => return Ok(None),
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                Err(e) => return Err(FrameError::Io(e)),
            }
            if self.got_head == HEAD {
                self.start_body(dest.len(), limit)?;
            }
        }
        loop {
            if self.got == self.len {
                let body = std::mem::take(&mut self.body);
                return Ok(Some((self.tag, body)));
            }
            let buf = if self.into_dest {
                &mut dest[self.got..self.len]
            } else {
                &mut self.body[self.got..self.len]
            };
            match s.read(buf) {
                Ok(0) => return Err(FrameError::Closed),
                Ok(n) => self.got += n,
                Err(e) if e.kind() == ErrorKind::WouldBlock => return Ok(None),
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                Err(e) => return Err(FrameError::Io(e)),
            }
        }
    }

    fn start_body(
        &mut self,
        data_len: usize,
        limit: &dyn Fn(u8) -> Option<usize>,
    ) -> Result<(), FrameError> {
        self.tag = self.head[0];
        let len = u64::from_le_bytes(self.head[1..].try_into().unwrap_or([0xff; 8]));
        let name = tag_name(self.tag);
        if self.tag == tag::DATA {
            if len != data_len as u64 {
                return Err(FrameError::Malformed(format!(
                    "a data message of {len} bytes where {data_len} were expected"
                )));
            }
            self.into_dest = true;
        } else {
            let max = limit(self.tag).ok_or_else(|| {
                FrameError::Malformed(format!("an unexpected {name} message ({len} bytes)"))
            })?;
            if len > max as u64 {
                return Err(FrameError::Malformed(format!(
                    "a {name} message of {len} bytes (at most {max} expected)"
                )));
            }
            self.body = crate::nccltests::alloc::zeroed(len as usize, "a bootstrap message")
                .map_err(|e| FrameError::Malformed(e.to_string()))?;
        }
        self.len = len as usize;
        Ok(())
    }
}

/// A readable name for a tag (in messages).
pub fn tag_name(t: u8) -> String {
    match t {
        tag::DATA => "data".into(),
        tag::ABORT => "abort".into(),
        tag::CENSUS => "census".into(),
        tag::VERDICT => "verdict".into(),
        tag::CENSUS_START => "census-start".into(),
        t => format!("unknown (tag {t})"),
    }
}

/// Writes one frame before `deadline` (None: no limit). `on_wait` is
/// called while the socket's buffer is full; an error from it ends the
/// write.
pub fn write_frame<E>(
    s: &mut TcpStream,
    t: u8,
    data: &[u8],
    deadline: Option<Instant>,
    on_wait: &mut dyn FnMut() -> Result<(), E>,
) -> Result<(), WriteError<E>> {
    let mut head = [0u8; HEAD];
    head[0] = t;
    head[1..].copy_from_slice(&(data.len() as u64).to_le_bytes());
    write_all(s, &head, deadline, on_wait)?;
    write_all(s, data, deadline, on_wait)
}

/// [`write_frame`] of one DATA-like frame whose payload is `parts`
/// concatenated (without copying them together).
pub fn write_frame_parts<E>(
    s: &mut TcpStream,
    t: u8,
    parts: &[&[u8]],
    deadline: Option<Instant>,
    on_wait: &mut dyn FnMut() -> Result<(), E>,
) -> Result<(), WriteError<E>> {
    let len: usize = parts.iter().map(|p| p.len()).sum();
    let mut head = [0u8; HEAD];
    head[0] = t;
    head[1..].copy_from_slice(&(len as u64).to_le_bytes());
    write_all(s, &head, deadline, on_wait)?;
    for p in parts {
        write_all(s, p, deadline, on_wait)?;
    }
    Ok(())
}

/// Why a write failed.
#[derive(Debug)]
pub enum WriteError<E> {
    /// The socket failed (peer gone).
    Io(io::Error),
    /// The deadline passed with the peer not reading.
    TimedOut,
    /// `on_wait` said stop.
    Stopped(E),
}

fn write_all<E>(
    s: &mut TcpStream,
    mut data: &[u8],
    deadline: Option<Instant>,
    on_wait: &mut dyn FnMut() -> Result<(), E>,
) -> Result<(), WriteError<E>> {
    while !data.is_empty() {
        match s.write(data) {
            Ok(0) => return Err(WriteError::Io(ErrorKind::WriteZero.into())),
            Ok(n) => data = &data[n..],
            Err(e) if e.kind() == ErrorKind::Interrupted => {}
            Err(e) if e.kind() == ErrorKind::WouldBlock => {
                if deadline.is_some_and(|d| Instant::now() >= d) {
                    return Err(WriteError::TimedOut);
                }
                on_wait().map_err(WriteError::Stopped)?;
                let slice = slice_until(deadline);
                wait_fds(&[s.as_raw_fd()], libc::POLLOUT, slice).map_err(WriteError::Io)?;
            }
            Err(e) => return Err(WriteError::Io(e)),
        }
    }
    Ok(())
}

/// How long one wait may sleep before the caller looks at the clock and its
/// stop conditions again.
pub const SLICE: Duration = Duration::from_millis(20);

/// [`SLICE`], or less when `deadline` comes sooner.
pub fn slice_until(deadline: Option<Instant>) -> Duration {
    match deadline {
        Some(d) => d.saturating_duration_since(Instant::now()).min(SLICE),
        None => SLICE,
    }
}

/// poll(2): which of `fds` are ready for `events` (or failed/closed)
/// within `timeout`.
pub fn wait_fds(fds: &[RawFd], events: i16, timeout: Duration) -> io::Result<Vec<bool>> {
    let mut p: Vec<libc::pollfd> = fds
        .iter()
        .map(|&fd| libc::pollfd {
            fd,
            events,
            revents: 0,
        })
        .collect();
    let ms = timeout.as_millis().min(i32::MAX as u128) as libc::c_int;
    // SAFETY: `p` is a valid array of p.len() pollfd structures that poll
    // reads and updates in place.
    let rc = unsafe { libc::poll(p.as_mut_ptr(), p.len() as libc::nfds_t, ms) };
    if rc < 0 {
        let e = io::Error::last_os_error();
        if e.kind() == ErrorKind::Interrupted {
            return Ok(vec![false; fds.len()]);
        }
        return Err(e);
    }
    Ok(p.iter().map(|x| x.revents != 0).collect())
}

/// Peeks at the next byte without blocking: Some(Some(tag)) when one is
/// there, Some(None) when the peer closed, None when nothing arrived.
pub fn peek_tag(s: &TcpStream) -> Option<Option<u8>> {
    let mut b = [0u8; 1];
    match s.peek(&mut b) {
        Ok(0) => Some(None),
        Ok(_) => Some(Some(b[0])),
        Err(e) if e.kind() == ErrorKind::WouldBlock => None,
        Err(_) => Some(None),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::TcpListener;

    fn pair() -> (TcpStream, TcpStream) {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let a = TcpStream::connect(l.local_addr().unwrap()).unwrap();
        let (b, _) = l.accept().unwrap();
        a.set_nonblocking(true).unwrap();
        b.set_nonblocking(true).unwrap();
        (a, b)
    }

    fn read_one(
        s: &mut TcpStream,
        dest: &mut [u8],
        limit: &dyn Fn(u8) -> Option<usize>,
    ) -> Result<Frame, FrameError> {
        let mut r = FrameReader::default();
        let until = Instant::now() + Duration::from_secs(5);
        loop {
            if let Some(f) = r.pump(s, dest, limit)? {
                return Ok(f);
            }
            assert!(Instant::now() < until, "no frame");
            wait_fds(&[s.as_raw_fd()], libc::POLLIN, SLICE).unwrap();
        }
    }

    fn none(_: u8) -> Option<usize> {
        None
    }

    #[test]
    fn frames_round_trip_and_lengths_are_checked_first() {
        let (mut a, mut b) = pair();
        let mut ok = || Ok::<(), ()>(());
        write_frame(&mut a, tag::DATA, &[1, 2, 3], None, &mut ok).unwrap();
        let mut dest = [0u8; 3];
        let (t, body) = read_one(&mut b, &mut dest, &none).unwrap();
        assert_eq!((t, body.len(), dest), (tag::DATA, 0, [1, 2, 3]));
        // A length of 2^36 where 8 bytes are expected: refused from the
        // header, nothing allocated.
        let mut head = [0u8; 9];
        head[0] = tag::DATA;
        head[1..].copy_from_slice(&(1u64 << 36).to_le_bytes());
        a.write_all(&head).unwrap();
        let mut dest = [0u8; 8];
        match read_one(&mut b, &mut dest, &none) {
            Err(FrameError::Malformed(m)) => {
                assert_eq!(
                    m,
                    "a data message of 68719476736 bytes where 8 were expected"
                )
            }
            other => panic!("{other:?}"),
        }
        let (mut a, mut b) = pair();
        head[0] = tag::ABORT;
        a.write_all(&head).unwrap();
        let limit = |t: u8| (t == tag::ABORT).then_some(MAX_ABORT);
        assert!(matches!(
            read_one(&mut b, &mut [], &limit),
            Err(FrameError::Malformed(m)) if m.contains("abort message of 68719476736 bytes (at most 4096")
        ));
        let (mut a, mut b) = pair();
        a.write_all(&[9, 0, 0, 0, 0, 0, 0, 0, 0]).unwrap();
        assert!(matches!(
            read_one(&mut b, &mut [], &limit),
            Err(FrameError::Malformed(m)) if m.contains("unknown (tag 9)")
        ));
        drop(a);
        assert!(matches!(
            read_one(&mut b, &mut [], &limit),
            Err(FrameError::Closed)
        ));
    }

    #[test]
    fn a_peer_that_does_not_read_times_a_write_out() {
        let (mut a, _b) = pair();
        let big = vec![0u8; 64 << 20];
        let until = Instant::now() + Duration::from_millis(300);
        let mut ok = || Ok::<(), ()>(());
        assert!(matches!(
            write_frame(&mut a, tag::DATA, &big, Some(until), &mut ok),
            Err(WriteError::TimedOut)
        ));
        assert!(Instant::now() < until + Duration::from_secs(2));
    }
}
