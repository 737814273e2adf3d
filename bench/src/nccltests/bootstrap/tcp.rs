//! The TCP bootstrap: rank 0 listens at MASTER_ADDR:MASTER_PORT and every
//! other rank connects to it (a star, see [`super::rendezvous`]).
//! Collectives go through rank 0.
//!
//! Each process has three channels to rank 0: the harness's, one for a
//! backend that moves data through the bootstrap ([`Bootstrap::dup`]), and
//! a control channel that carries what must reach a process whatever it
//! waits in: a failing process's reason (ABORT), and the timeout census
//! ([`crate::nccltests::census`]).
//!
//! Every wait is bounded by `-T` and watches the control channel and
//! [`job::check`], every message's length is checked against what the
//! protocol expects before anything is allocated, and a lost connection is
//! an error naming the rank: when a process fails it tells rank 0 why, and
//! rank 0 tells every other process, so all exit with the same status and
//! say which rank failed and why.

use std::net::TcpStream;
use std::os::fd::{AsRawFd, RawFd};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use super::env::LaunchEnv;
use super::rendezvous::{self, CHANNELS, Link};
use super::wire::{
    self, FrameError, FrameReader, MAX_ABORT, WriteError, peek_tag, slice_until, tag, wait_fds,
};
use super::{Answer, Bootstrap};
use crate::nccltests::census::{MAX_NOTICE, ranks_text};
use crate::nccltests::errors::{TestError, TestResult};
use crate::nccltests::{alloc, job};

/// The control channel's links, shared by every channel of the process.
struct Control {
    /// Root: ranks 1..size; others: rank 0. `bool`: the peer closed it.
    links: Mutex<Vec<(Link, bool)>>,
    size: usize,
    /// Every channel's links: they close only when the process's last
    /// handle goes (a backend dropped after a failure must not close its
    /// channel under peers that are still to hear why).
    _channels: Vec<Arc<Mutex<Vec<Link>>>>,
    /// A peer's abort once read: every later wait of any thread ends with it.
    aborted: Mutex<Option<TestError>>,
}

/// One channel of the TCP bootstrap.
pub struct Tcp {
    rank: usize,
    size: usize,
    timeout: Option<Duration>,
    links: Arc<Mutex<Vec<Link>>>,
    control: Arc<Control>,
    spare: Mutex<Option<Box<Tcp>>>,
}

fn locked<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

fn who(l: &Link) -> String {
    format!("rank {} ({})", l.rank, l.addr)
}

fn lost(l: &Link, why: &str) -> TestError {
    TestError::Internal(format!("TCP connection to {} lost: {why}", who(l)))
}

fn frame_error(l: &Link, e: FrameError) -> TestError {
    match e {
        FrameError::Closed => lost(l, "closed by peer"),
        FrameError::Io(e) => lost(l, &e.to_string()),
        FrameError::Malformed(m) => TestError::Internal(format!(
            "TCP bootstrap: {} sent {m}: the ranks are out of step, or that is not a rank of this job",
            who(l)
        )),
    }
}

/// ABORT payload: origin rank (u32 LE), status (i32 LE), message.
pub fn abort_payload(origin: usize, code: i32, msg: &str) -> Vec<u8> {
    let msg = &msg.as_bytes()[..msg.len().min(MAX_ABORT)];
    let mut p = Vec::with_capacity(8 + msg.len());
    p.extend_from_slice(&(origin as u32).to_le_bytes());
    p.extend_from_slice(&code.to_le_bytes());
    p.extend_from_slice(msg);
    p
}

fn parse_abort(p: &[u8], from: usize) -> TestError {
    let word = |i: usize| p.get(i..i + 4).map(|b| [b[0], b[1], b[2], b[3]]);
    match (word(0), word(4)) {
        (Some(o), Some(c)) => TestError::Peer {
            rank: u32::from_le_bytes(o) as usize,
            code: i32::from_le_bytes(c),
            msg: String::from_utf8_lossy(&p[8..]).into_owned(),
        },
        _ => TestError::Internal(format!("TCP bootstrap: rank {from} sent an empty abort")),
    }
}

fn abort_limit(t: u8) -> Option<usize> {
    (t == tag::ABORT).then_some(MAX_ABORT + 8)
}

impl Tcp {
    /// Joins the rendezvous described by `env`. `timeout_s` (<= 0: none)
    /// bounds the rendezvous and every later wait.
    pub fn connect(env: &LaunchEnv, timeout_s: i32) -> TestResult<Tcp> {
        let timeout = (timeout_s > 0).then(|| Duration::from_secs(timeout_s as u64));
        let deadline = timeout.map(|t| Instant::now() + t);
        let mut chans: Vec<Vec<Link>> = if env.rank == 0 {
            rendezvous::accept_all(env, deadline)?
        } else {
            let mut links: Vec<Link> = Vec::new();
            for c in 0..CHANNELS {
                let l = rendezvous::dial(env, c, deadline, &mut links)?;
                links.push(l);
            }
            links.into_iter().map(|l| vec![l]).collect()
        };
        let control_links = chans.pop().unwrap_or_default();
        let second = Arc::new(Mutex::new(chans.pop().unwrap_or_default()));
        let first = Arc::new(Mutex::new(chans.pop().unwrap_or_default()));
        let control = Arc::new(Control {
            links: Mutex::new(control_links.into_iter().map(|l| (l, false)).collect()),
            size: env.size,
            _channels: vec![first.clone(), second.clone()],
            aborted: Mutex::new(None),
        });
        let make = |links| Tcp {
            rank: env.rank,
            size: env.size,
            timeout,
            links,
            control: control.clone(),
            spare: Mutex::new(None),
        };
        let second = make(second);
        let first = make(first);
        *locked(&first.spare) = Some(Box::new(second));
        Ok(first)
    }

    fn deadline(&self) -> Option<Instant> {
        self.timeout.map(|t| Instant::now() + t)
    }

    fn timed_out(&self, detail: String) -> TestError {
        TestError::Timeout {
            secs: self.timeout.map_or(0, |t| t.as_secs() as i32),
            detail,
        }
    }

    /// What a wait must stop for: the process stopping, or a message on
    /// the control channel.
    fn interrupt(&self) -> TestResult<()> {
        job::check()?;
        match self.control.event() {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }

    fn root_gather(&self, peers: &mut [Link], mine: &[u8], all: &mut Vec<u8>) -> TestResult<()> {
        let want = mine.len();
        let total = alloc::product(want, self.size, "a bootstrap exchange")?;
        sized(all, total)?;
        all[..want].copy_from_slice(mine);
        let deadline = self.deadline();
        let mut readers: Vec<FrameReader> = peers.iter().map(|_| FrameReader::default()).collect();
        let mut done = vec![false; peers.len()];
        let mut left = peers.len();
        while left > 0 {
            let open: Vec<usize> = (0..peers.len()).filter(|&i| !done[i]).collect();
            let mut fds: Vec<RawFd> = open.iter().map(|&i| peers[i].s.as_raw_fd()).collect();
            fds.extend(self.control.fds());
            let ready = wait_fds(&fds, libc::POLLIN, slice_until(deadline))
                .map_err(|e| TestError::Internal(format!("TCP bootstrap: poll failed: {e}")))?;
            for (k, &i) in open.iter().enumerate() {
                if !ready[k] {
                    continue;
                }
                let r = peers[i].rank;
                let dest = &mut all[r * want..(r + 1) * want];
                match readers[i].pump(&mut peers[i].s, dest, &abort_limit) {
                    Ok(Some((tag::DATA, _))) => {
                        done[i] = true;
                        left -= 1;
                    }
                    Ok(Some((_, m))) => return Err(parse_abort(&m, r)),
                    Ok(None) => {}
                    Err(e) => return Err(self.leaf_failure(&peers[i], e)),
                }
            }
            if ready[open.len()..].iter().any(|&x| x) {
                self.interrupt()?;
            }
            job::check()?;
            if left > 0 && deadline.is_some_and(|d| Instant::now() >= d) {
                let missing: Vec<usize> = (0..peers.len())
                    .filter(|&i| !done[i])
                    .map(|i| peers[i].rank)
                    .collect();
                return Err(self.timed_out(format!(
                    "rank 0 waited for {} in a bootstrap exchange",
                    ranks_text(&missing)
                )));
            }
        }
        // The answer has its own -T: reading may have taken most of it.
        // Each leaf gets every part but its own, which it has.
        let deadline = self.deadline();
        for p in peers.iter_mut() {
            let own = p.rank * want..(p.rank + 1) * want;
            let parts = [&all[..own.start], &all[own.end..]];
            let sent = wire::write_frame_parts(&mut p.s, tag::DATA, &parts, deadline, &mut || {
                self.interrupt()
            });
            match sent {
                Ok(()) => {}
                Err(WriteError::Io(e)) => return Err(lost(p, &e.to_string())),
                Err(WriteError::TimedOut) => {
                    return Err(self.timed_out(format!(
                        "rank 0 waited for rank {} to read a bootstrap exchange",
                        p.rank
                    )));
                }
                Err(WriteError::Stopped(e)) => return Err(e),
            }
        }
        Ok(())
    }

    /// A leaf's connection failed: its own reason (ABORT on the control
    /// channel) when it sent one, else the failure.
    fn leaf_failure(&self, l: &Link, e: FrameError) -> TestError {
        if matches!(e, FrameError::Closed | FrameError::Io(_))
            && let Some(reason) = self.control.abort_from(l.rank)
        {
            return reason;
        }
        frame_error(l, e)
    }

    fn leaf_exchange(&self, root: &mut Link, mine: &[u8], out: &mut Vec<u8>) -> TestResult<()> {
        let deadline = self.deadline();
        let sent = wire::write_frame(&mut root.s, tag::DATA, mine, deadline, &mut || {
            self.interrupt()
        });
        match sent {
            Ok(()) => {}
            Err(WriteError::Io(e)) => return Err(self.root_failure(root, FrameError::Io(e))),
            Err(WriteError::TimedOut) => {
                return Err(self.timed_out(format!(
                    "rank {} waited for rank 0 to read a bootstrap exchange",
                    self.rank
                )));
            }
            Err(WriteError::Stopped(e)) => return Err(e),
        }
        let total = alloc::product(mine.len(), self.size, "a bootstrap exchange")?;
        // Every byte is written below (the frame's length is checked).
        sized(out, total)?;
        // Rank 0 sends the other ranks' parts, in rank order, without ours.
        let theirs = total - mine.len();
        let own_at = self.rank * mine.len();
        let mut reader = FrameReader::default();
        loop {
            let mut fds = vec![root.s.as_raw_fd()];
            fds.extend(self.control.fds());
            let ready = wait_fds(&fds, libc::POLLIN, slice_until(deadline))
                .map_err(|e| TestError::Internal(format!("TCP bootstrap: poll failed: {e}")))?;
            if ready[0] {
                match reader.pump(&mut root.s, &mut out[..theirs], &abort_limit) {
                    Ok(Some((tag::DATA, _))) => {
                        out.copy_within(own_at..theirs, own_at + mine.len());
                        out[own_at..own_at + mine.len()].copy_from_slice(mine);
                        return Ok(());
                    }
                    Ok(Some((_, m))) => return Err(parse_abort(&m, 0)),
                    Ok(None) => {}
                    Err(e) => return Err(self.root_failure(root, e)),
                }
            }
            if ready[1..].iter().any(|&x| x) {
                self.interrupt()?;
            }
            job::check()?;
            if deadline.is_some_and(|d| Instant::now() >= d) {
                return Err(self.timed_out(format!(
                    "rank {} waited for rank 0 in a bootstrap exchange",
                    self.rank
                )));
            }
        }
    }

    /// Rank 0's connection failed: its reason when it sent one.
    fn root_failure(&self, root: &Link, e: FrameError) -> TestError {
        if matches!(e, FrameError::Closed | FrameError::Io(_))
            && let Some(reason) = self.control.abort_from(0)
        {
            return reason;
        }
        frame_error(root, e)
    }
}

impl Control {
    /// File descriptors of the links still open.
    fn fds(&self) -> Vec<RawFd> {
        locked(&self.links)
            .iter()
            .filter(|(_, closed)| !closed)
            .map(|(l, _)| l.s.as_raw_fd())
            .collect()
    }

    /// A message waiting on the control channel, without blocking: a
    /// peer's abort (its error), or the census (a timeout to join). A
    /// closed link is only noted: the peer's data channel tells more.
    fn event(&self) -> Option<TestError> {
        if let Some(e) = locked(&self.aborted).clone() {
            return Some(e);
        }
        let mut links = locked(&self.links);
        let fds: Vec<RawFd> = links.iter().map(|(l, _)| l.s.as_raw_fd()).collect();
        let ready = wait_fds(&fds, libc::POLLIN, Duration::ZERO).ok()?;
        for (k, (l, closed)) in links.iter_mut().enumerate() {
            if *closed || !ready[k] {
                continue;
            }
            match peek_tag(&l.s) {
                None => {}
                Some(None) => *closed = true,
                Some(Some(tag::ABORT)) => {
                    let rank = l.rank;
                    let e = read_abort(l).unwrap_or_else(|| {
                        TestError::Internal(format!(
                            "TCP bootstrap: rank {rank} sent a broken abort message"
                        ))
                    });
                    *locked(&self.aborted) = Some(e.clone());
                    return Some(e);
                }
                Some(Some(tag::CENSUS | tag::CENSUS_START | tag::VERDICT)) => {
                    return Some(TestError::Timeout {
                        secs: job::timeout_s(),
                        detail: "another rank timed out".into(),
                    });
                }
                Some(Some(t)) => {
                    return Some(TestError::Internal(format!(
                        "TCP bootstrap: {} sent an {} message on the control channel",
                        who(l),
                        wire::tag_name(t)
                    )));
                }
            }
        }
        None
    }

    /// The abort message `rank` sent before its connection closed, if any
    /// (waiting a moment for it to arrive).
    fn abort_from(&self, rank: usize) -> Option<TestError> {
        if let Some(e) = locked(&self.aborted).clone() {
            return Some(e);
        }
        let mut links = locked(&self.links);
        let (l, _) = links.iter_mut().find(|(l, _)| l.rank == rank)?;
        let until = Instant::now() + Duration::from_millis(300);
        loop {
            match peek_tag(&l.s) {
                Some(Some(tag::ABORT)) => {
                    let e = read_abort(l)?;
                    *locked(&self.aborted) = Some(e.clone());
                    return Some(e);
                }
                Some(_) => return None,
                None if Instant::now() >= until => return None,
                None => {
                    let _ = wait_fds(&[l.s.as_raw_fd()], libc::POLLIN, slice_until(Some(until)));
                }
            }
        }
    }
}

/// Reads a whole ABORT frame (bounded: a second).
pub(super) fn read_abort(l: &mut Link) -> Option<TestError> {
    let mut r = FrameReader::default();
    let until = Instant::now() + Duration::from_secs(1);
    loop {
        match r.pump(&mut l.s, &mut [], &abort_limit) {
            Ok(Some((_, m))) => return Some(parse_abort(&m, l.rank)),
            Ok(None) if Instant::now() < until => {
                let _ = wait_fds(&[l.s.as_raw_fd()], libc::POLLIN, slice_until(Some(until)));
            }
            _ => return None,
        }
    }
}

/// The census table rank 0 sends: per process 0 unknown, 1 silent, or 2
/// followed by the notice's length (u32 LE) and bytes.
fn encode_answers(a: &[Answer]) -> Vec<u8> {
    let mut out = Vec::new();
    for x in a {
        match x {
            Answer::Unknown => out.push(0),
            Answer::Silent => out.push(1),
            Answer::Said(b) => {
                let b = &b[..b.len().min(MAX_NOTICE)];
                out.push(2);
                out.extend_from_slice(&(b.len() as u32).to_le_bytes());
                out.extend_from_slice(b);
            }
        }
    }
    out
}

fn decode_answers(mut b: &[u8], size: usize) -> Option<Vec<Answer>> {
    let mut out = Vec::new();
    while out.len() < size {
        let (&kind, rest) = b.split_first()?;
        b = rest;
        out.push(match kind {
            0 => Answer::Unknown,
            1 => Answer::Silent,
            2 => {
                let len = u32::from_le_bytes(b.get(..4)?.try_into().ok()?) as usize;
                let said = b.get(4..4 + len.min(MAX_NOTICE))?.to_vec();
                b = &b[4 + said.len()..];
                Answer::Said(said)
            }
            _ => return None,
        });
    }
    b.is_empty().then_some(out)
}

fn census_limit(size: usize) -> impl Fn(u8) -> Option<usize> {
    move |t| match t {
        tag::ABORT => Some(MAX_ABORT + 8),
        tag::CENSUS => Some(MAX_NOTICE),
        tag::CENSUS_START => Some(0),
        tag::VERDICT => Some(size.saturating_mul(MAX_NOTICE + 5)),
        _ => None,
    }
}

impl Control {
    fn root_census(&self, mine: &[u8], window: Duration) -> Vec<Answer> {
        let mut links = locked(&self.links);
        let mut answers = vec![Answer::Unknown; self.size];
        answers[0] = Answer::Said(mine.to_vec());
        let soon = || Some(Instant::now() + Duration::from_secs(1));
        for (l, closed) in links.iter_mut() {
            if !*closed {
                let _ = wire::write_frame(&mut l.s, tag::CENSUS_START, &[], soon(), &mut || {
                    Ok::<(), ()>(())
                });
            }
        }
        let until = Some(Instant::now() + window);
        let limit = census_limit(self.size);
        let mut readers: Vec<FrameReader> = links.iter().map(|_| FrameReader::default()).collect();
        let mut waiting: Vec<usize> = (0..links.len()).filter(|&i| !links[i].1).collect();
        for (l, closed) in links.iter() {
            if *closed {
                answers[l.rank] = Answer::Silent;
            }
        }
        while !waiting.is_empty() && until.is_some_and(|u| Instant::now() < u) {
            let fds: Vec<RawFd> = waiting.iter().map(|&i| links[i].0.s.as_raw_fd()).collect();
            let Ok(ready) = wait_fds(&fds, libc::POLLIN, slice_until(until)) else {
                break;
            };
            let mut still = Vec::new();
            for (k, &i) in waiting.iter().enumerate() {
                let l = &mut links[i].0;
                if !ready[k] {
                    still.push(i);
                    continue;
                }
                match readers[i].pump(&mut l.s, &mut [], &limit) {
                    Ok(Some((tag::CENSUS, m))) => answers[l.rank] = Answer::Said(m),
                    Ok(Some(_)) => {
                        readers[i] = FrameReader::default();
                        still.push(i);
                    }
                    Ok(None) => still.push(i),
                    Err(FrameError::Malformed(_)) => {}
                    Err(_) => answers[l.rank] = Answer::Silent,
                }
            }
            waiting = still;
        }
        for i in waiting {
            answers[links[i].0.rank] = Answer::Silent;
        }
        let table = encode_answers(&answers);
        for (l, closed) in links.iter_mut() {
            if !*closed {
                let _ = wire::write_frame(&mut l.s, tag::VERDICT, &table, soon(), &mut || {
                    Ok::<(), ()>(())
                });
            }
        }
        answers
    }

    fn leaf_census(&self, me: usize, mine: &[u8], window: Duration) -> Vec<Answer> {
        let mut links = locked(&self.links);
        let mut answers = vec![Answer::Unknown; self.size];
        answers[me] = Answer::Said(mine.to_vec());
        let Some((root, _)) = links.first_mut() else {
            return answers;
        };
        let soon = Some(Instant::now() + Duration::from_secs(1));
        let sent = wire::write_frame(&mut root.s, tag::CENSUS, mine, soon, &mut || {
            Ok::<(), ()>(())
        });
        answers[0] = Answer::Silent;
        if sent.is_err() {
            return answers;
        }
        // Rank 0 waits less than this for the others (ROOT_WINDOW), so it
        // may be busy for a moment before it joins.
        let until = Some(Instant::now() + window);
        let limit = census_limit(self.size);
        let mut r = FrameReader::default();
        while until.is_some_and(|u| Instant::now() < u) {
            if wait_fds(&[root.s.as_raw_fd()], libc::POLLIN, slice_until(until)).is_err() {
                break;
            }
            match r.pump(&mut root.s, &mut [], &limit) {
                Ok(Some((tag::VERDICT, t))) => {
                    if let Some(mut all) = decode_answers(&t, self.size) {
                        all[me] = Answer::Said(mine.to_vec());
                        return all;
                    }
                    answers[0] = Answer::Unknown;
                    break;
                }
                Ok(Some((tag::ABORT, _))) => {
                    // Rank 0 fails for another reason: it is alive.
                    answers[0] = Answer::Unknown;
                    break;
                }
                Ok(Some(_)) => r = FrameReader::default(),
                Ok(None) => {}
                Err(_) => break,
            }
        }
        answers
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
        let mut out = Vec::new();
        self.allgather_into(mine, &mut out)?;
        Ok(out)
    }
    fn allgather_into(&self, mine: &[u8], out: &mut Vec<u8>) -> TestResult<()> {
        let mut links = locked(&self.links);
        if self.rank == 0 {
            self.root_gather(&mut links, mine, out)
        } else {
            let Some(root) = links.first_mut() else {
                return Err(TestError::Internal(
                    "TCP bootstrap: no link to rank 0".into(),
                ));
            };
            self.leaf_exchange(root, mine, out)
        }
    }
    fn dup(&self) -> TestResult<Arc<dyn Bootstrap>> {
        let spare = locked(&self.spare).take();
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
    fn abort(&self, e: &TestError) -> ! {
        let payload = match e {
            // Rank 0 passes a failed rank's own report on.
            TestError::Peer { rank, code, msg } => abort_payload(*rank, *code, msg),
            _ => abort_payload(self.rank, e.exit_code(), &e.to_string()),
        };
        let mut links = locked(&self.control.links);
        let soon = Some(Instant::now() + Duration::from_secs(1));
        for (l, closed) in links.iter_mut() {
            if !*closed {
                let _ = wire::write_frame(&mut l.s, tag::ABORT, &payload, soon, &mut || {
                    Ok::<(), ()>(())
                });
                let _ = l.s.shutdown(std::net::Shutdown::Write);
            }
        }
        // Drain briefly, so that closing with unread data does not reset
        // the connections before the peers have read the message.
        let until = Instant::now() + Duration::from_millis(500);
        let mut sink = [0u8; 4096];
        for (l, closed) in links.iter_mut() {
            while !*closed && Instant::now() < until {
                let _ = wait_fds(&[l.s.as_raw_fd()], libc::POLLIN, slice_until(Some(until)));
                match std::io::Read::read(&mut l.s, &mut sink) {
                    Ok(0) => break,
                    Ok(_) => {}
                    Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
                    Err(_) => break,
                }
            }
        }
        std::process::exit(e.exit_code())
    }
    fn lost_peers(&self) -> Vec<usize> {
        let links = locked(&self.control.links);
        links
            .iter()
            .filter(|(l, closed)| *closed || is_closed(&l.s))
            .map(|(l, _)| l.rank)
            .collect()
    }
    fn census(&self, mine: &[u8], window: Duration) -> Vec<Answer> {
        if self.rank == 0 {
            let w = window.min(crate::nccltests::census::ROOT_WINDOW);
            self.control.root_census(mine, w)
        } else {
            self.control.leaf_census(self.rank, mine, window)
        }
    }
    fn peer_event(&self) -> Option<TestError> {
        self.control.event()
    }
}

/// Whether the peer closed `s` (or it failed), without blocking: a process
/// that is killed has its sockets closed by the kernel at once. Unread data
/// means the peer is alive.
fn is_closed(s: &TcpStream) -> bool {
    matches!(peek_tag(s), Some(None))
}

/// `out` resized to `total` bytes, fallibly ([`TestError::HostMemory`]);
/// the bytes it already has are kept (the caller overwrites them all).
fn sized(out: &mut Vec<u8>, total: usize) -> TestResult<()> {
    if total > out.len() {
        out.try_reserve_exact(total - out.len())
            .map_err(|_| TestError::host_memory("a bootstrap exchange", total as u128))?;
    }
    out.resize(total, 0);
    Ok(())
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

    fn env(rank: usize, size: usize, port: u16) -> LaunchEnv {
        LaunchEnv {
            source: "test",
            rank,
            size,
            local_rank: None,
            master_addr: "127.0.0.1".into(),
            master_port: port,
        }
    }

    fn start(size: usize) -> Vec<Tcp> {
        let port = free_port();
        std::thread::scope(|s| {
            let hs: Vec<_> = (0..size)
                .map(|r| {
                    let e = env(r, size, port);
                    s.spawn(move || Tcp::connect(&e, 30))
                })
                .collect();
            hs.into_iter()
                .map(|h| h.join().expect("join").expect("connect"))
                .collect()
        })
    }

    #[test]
    fn allgather_on_both_channels() {
        let boots = start(3);
        let got: Vec<Vec<u8>> = std::thread::scope(|s| {
            let hs: Vec<_> = boots
                .iter()
                .map(|b| {
                    s.spawn(move || {
                        let d = b.dup().expect("dup");
                        let a = b.allgather(&[b.rank() as u8; 3]).expect("allgather");
                        let c = d.allgather(&[10 + b.rank() as u8]).expect("dup allgather");
                        b.barrier().expect("barrier");
                        [a, c].concat()
                    })
                })
                .collect();
            hs.into_iter().map(|h| h.join().unwrap()).collect()
        });
        for g in got {
            assert_eq!(g, vec![0, 0, 0, 1, 1, 1, 2, 2, 2, 10, 11, 12]);
        }
    }

    #[test]
    fn census_collects_every_answer() {
        let boots = start(3);
        let got: Vec<Vec<Answer>> = std::thread::scope(|s| {
            let hs: Vec<_> = boots
                .iter()
                .map(|b| s.spawn(move || b.census(&[b.rank() as u8], Duration::from_secs(5))))
                .collect();
            hs.into_iter().map(|h| h.join().unwrap()).collect()
        });
        for g in got {
            assert_eq!(
                g,
                vec![
                    Answer::Said(vec![0]),
                    Answer::Said(vec![1]),
                    Answer::Said(vec![2])
                ]
            );
        }
        assert_eq!(
            decode_answers(&encode_answers(&[Answer::Silent, Answer::Unknown]), 2),
            Some(vec![Answer::Silent, Answer::Unknown])
        );
        assert_eq!(decode_answers(&[2, 255, 255, 255, 255], 1), None);
    }

    #[test]
    fn lost_peers_names_the_ranks_that_closed() {
        let mut boots = start(3);
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
