//! The latency loops: perftest's `run_iter_lat_write` (a ping-pong of RDMA
//! WRITEs, each side polling the last byte of its buffer), `run_iter_lat_send`
//! (a ping-pong of SENDs) and `run_iter_lat` (READ or atomic, one at a time).
//! A timestamp is taken before each post; perftest's statistics come from
//! the gaps between them. The loops post on the QP's lane
//! ([`super::rdma::Resources::lane`]): each request is prepared once per size
//! and posted as perftest posts its prebuilt work request.

use erdma::{
    Completion, Lane, LocalSlice, MemoryRegion, PreparedRecv, RecvRequest, RemoteBuffer,
    SendRequest,
};

use super::bw::{Run, inline_ok, recv_slots};
use super::cases::Verb;
use super::clock::{Calibration, ticks};
use super::error::{PerfError, PerfResult};
use super::memory::{Layout, Region, Salt, check_pattern, pattern};
use super::options::{AtomicType, Options};
use super::rdma::{Resources, no_lane};
use super::report::LatMeasure;
use super::watch::Watch;
use super::wire::Comm;

/// Ends `-D` latency runs.
struct Clock {
    t0: std::time::Instant,
    margin: std::time::Duration,
    end: std::time::Duration,
    total: std::time::Duration,
    sample: (u64, u64),
    counted: u64,
    steps: u64,
}

impl Clock {
    fn new(o: &super::options::Options) -> Option<Clock> {
        let d = std::time::Duration::from_secs(u64::from(o.duration?));
        let m = std::time::Duration::from_secs(u64::from(o.margin));
        Some(Clock {
            t0: std::time::Instant::now(),
            margin: m,
            end: d - m,
            total: d,
            sample: (0, 0),
            counted: 0,
            steps: 0,
        })
    }

    /// Counts an iteration; true when the run is over (the clock is read
    /// every 16 iterations: it can be a slow system call in a VM).
    fn step(&mut self) -> bool {
        self.steps += 1;
        if self.steps % 16 != 1 {
            if self.sample.0 != 0 && self.sample.1 == 0 {
                self.counted += 1;
            }
            return false;
        }
        let t = self.t0.elapsed();
        if t >= self.margin && self.sample.0 == 0 {
            self.sample.0 = ticks();
        }
        if t >= self.end && self.sample.1 == 0 {
            self.sample.1 = ticks();
        }
        if self.sample.0 != 0 && self.sample.1 == 0 {
            self.counted += 1;
        }
        t >= self.total
    }

    fn measure(&self, size: u64, hz: f64, rtt: u32) -> LatMeasure {
        LatMeasure {
            size,
            iters: self.counted,
            posted: Vec::new(),
            hz,
            rtt_factor: rtt,
            span: Some(self.sample.1.saturating_sub(self.sample.0).max(1)),
        }
    }
}

/// Where a latency loop's timing goes: a timestamp before each post
/// (iterations), or the `-D` clock.
struct Stamps {
    clock: Option<Clock>,
    posted: Vec<u64>,
}

impl Stamps {
    fn new(o: &super::options::Options) -> Stamps {
        let clock = Clock::new(o);
        let n = if clock.is_none() { o.iters as usize } else { 0 };
        Stamps {
            clock,
            posted: Vec::with_capacity(n),
        }
    }

    /// Whether the run is counted in iterations (not `-D`).
    fn timed(&self) -> bool {
        self.clock.is_none()
    }

    /// Before a post: takes its timestamp, or counts it for `-D`; true
    /// when the `-D` run is over.
    #[inline]
    fn stamp(&mut self) -> bool {
        match self.clock.as_mut() {
            Some(c) => c.step(),
            None => {
                self.posted.push(ticks());
                false
            }
        }
    }

    /// The measurement of `iters` requests of `size` (`rtt` 2 for
    /// ping-pongs, whose samples are round trips).
    fn measure(self, size: u64, iters: u64, hz: f64, rtt: u32) -> LatMeasure {
        match self.clock {
            Some(c) => c.measure(size, hz, rtt),
            None => LatMeasure {
                size,
                iters,
                posted: self.posted,
                hz,
                rtt_factor: rtt,
                span: None,
            },
        }
    }
}

/// Waits for one completion on the lane's send (or receive) CQ; `what` names
/// it in errors (built only then).
#[inline]
fn poll_one(
    lane: &Lane,
    comm: &mut dyn Comm,
    o: &super::options::Options,
    recv: bool,
    what: impl Fn() -> String,
) -> PerfResult<Completion> {
    poll_watched(lane, comm, Watch::new(o.timeout), recv, what)
}

/// [`poll_one`] under `watch`.
fn poll_watched(
    lane: &Lane,
    comm: &mut dyn Comm,
    mut watch: Watch,
    recv: bool,
    what: impl Fn() -> String,
) -> PerfResult<Completion> {
    let mut wc = [Completion::default()];
    loop {
        let polled = if recv {
            lane.poll_recv(&mut wc)
        } else {
            lane.poll_send(&mut wc)
        };
        let k = polled.map_err(|e| PerfError::rdma(format!("poll for {}", what()), e))?;
        if k == 1 {
            if !wc[0].is_ok() {
                return Err(failed(&wc[0], comm, what));
            }
            return Ok(wc[0]);
        }
        watch.idle(comm, &what)?;
    }
}

#[cold]
fn failed(wc: &Completion, comm: &mut dyn Comm, what: impl Fn() -> String) -> PerfError {
    if comm.peer_gone() {
        return PerfError::Peer(format!(
            "{}: {} went away during the test (status {})",
            what(),
            comm.peer(),
            wc.status()
        ));
    }
    PerfError::rdma(
        what(),
        wc.ok()
            .err()
            .unwrap_or(erdma::Error::verb("ibv_poll_cq", libc::EIO)),
    )
}

/// `write_lat` for messages of `size`.
pub fn write_lat(run: &mut Run<'_>, server: bool) -> PerfResult<LatMeasure> {
    let size = run.size;
    let inline = inline_ok(run.o, run.r, size);
    let last = (size - 1) as usize;
    let remote = run.remote[0]
        .slice(0..size as usize)
        .map_err(|e| PerfError::rdma("the peer's buffer", e))?;
    let prepared = |e| PerfError::rdma("prepare the RDMA WRITE", e);
    let counter = |e| PerfError::rdma(format!("write byte {last} of the buffer"), e);
    let posting = |n: u64, e| PerfError::rdma(format!("post RDMA WRITE {n}"), e);
    // The WRITE holds its source while it is used: the message counter is
    // set through it (a post of inline data has the CPU copy the source).
    let r = &mut *run.r;
    let lane = r.lane.as_ref().ok_or_else(no_lane)?;
    let o = run.o;
    let measure = match &mut r.lmr {
        Region::Host(m) => {
            let mut write = lane
                .prepare_send_mut(m, |m| write_request(m, size, remote, inline))
                .map_err(prepared)?;
            write_lat_loop((o, &mut *run.comm, &r.xmr, lane), size, server, |n| {
                write
                    .source_mut()
                    .write_byte(last, n as u8)
                    .map_err(counter)?;
                write.post().map_err(|e| posting(n, e))
            })?
        }
        Region::Gpu(g) => {
            let (m, stream) = g.parts_mut();
            let mut write = lane
                .prepare_send_mut(m, |m| write_request(m, size, remote, inline))
                .map_err(prepared)?;
            write_lat_loop((o, &mut *run.comm, &r.xmr, lane), size, server, |n| {
                write
                    .source_mut()
                    .copy_from_host(last, &[n as u8], stream)
                    .map_err(counter)?;
                write.post().map_err(|e| posting(n, e))
            })?
        }
    };
    // Keep the source's last byte as the pattern for the next size.
    r.lmr
        .write(last, &[pattern(0, last as u64, Salt::Source)])?;
    Ok(measure)
}

/// write_lat's RDMA WRITE of `size` bytes from the start of `m`.
fn write_request<B: Send + Sync + 'static>(
    m: &MemoryRegion<B>,
    size: u64,
    remote: RemoteBuffer,
    inline: bool,
) -> erdma::Result<SendRequest<'_>> {
    let req = SendRequest::write([m.slice(0..size as usize)?], remote);
    Ok(if inline { req.inline() } else { req })
}

/// The ping-pong of [`write_lat`]: `post(n)` sets the message counter to
/// `n` (its low byte) and posts the WRITE.
fn write_lat_loop(
    (o, comm, xmr, lane): (&Options, &mut dyn Comm, &Region, &Lane),
    size: u64,
    server: bool,
    mut post: impl FnMut(u64) -> PerfResult<()>,
) -> PerfResult<LatMeasure> {
    let iters = o.iters;
    let last = (size - 1) as usize;
    let mut stamps = Stamps::new(o);
    let calib = Calibration::start();
    let (mut scnt, mut ccnt, mut rcnt) = (0u64, 0u64, 0u64);
    let mut watch = Watch::new(o.timeout);
    let timed = stamps.timed();
    loop {
        if timed && scnt >= iters && ccnt >= iters && rcnt >= iters {
            break;
        }
        // Wait for the peer's message (the server starts the ping-pong).
        if (!timed || rcnt < iters) && !(scnt < 1 && server) {
            rcnt += 1;
            let want = rcnt as u8;
            while xmr.byte(last)? != want {
                watch.idle(comm, || {
                    format!("write_lat of {size} bytes: waiting for message {rcnt}")
                })?;
            }
            watch.progress();
            if o.verify {
                let mut got = vec![0u8; last];
                xmr.read(0, &mut got)?;
                check_pattern(&got, 0, 0, Salt::Source, || {
                    format!("write_lat message {rcnt} of {size} bytes")
                })?;
            }
        }
        if !timed || scnt < iters {
            if stamps.stamp() {
                break;
            }
            scnt += 1;
            post(scnt)?;
        }
        if !timed || ccnt < iters {
            // The last WRITE's peer ends once it has seen it, maybe before
            // its acknowledgement is back here: its leaving then is no
            // failure (it proves the WRITE arrived).
            let watch = match timed && ccnt + 1 == iters {
                true => Watch::new(o.timeout).peer_may_leave(),
                false => Watch::new(o.timeout),
            };
            poll_watched(lane, comm, watch, false, || {
                format!("the completion of RDMA WRITE {}", ccnt + 1)
            })?;
            ccnt += 1;
        }
    }
    let hz = calib.ticks_per_sec();
    Ok(stamps.measure(size, iters, hz, 2))
}

/// `send_lat` for messages of `size` (receives posted by the caller).
pub fn send_lat(run: &mut Run<'_>, client: bool) -> PerfResult<LatMeasure> {
    let o = run.o;
    let size = run.size;
    let iters = o.iters;
    let inline = inline_ok(o, run.r, size);
    let cq_mod = u64::from(o.cq_mod.max(1));
    let mut stamps = Stamps::new(o);
    let timed = stamps.timed();
    let calib = Calibration::start();
    let (mut scnt, mut rcnt) = (0u64, 0u64);
    let r = &mut *run.r;
    let lane = r.lane.as_ref().ok_or_else(no_lane)?;
    let prepare = |signaled: bool| {
        let mut req = SendRequest::send([r.lmr.slice(0, size)?]);
        if inline {
            req = req.inline();
        }
        if !signaled {
            req = req.unsignaled();
        }
        lane.prepare_send(req)
            .map_err(|e| PerfError::rdma("prepare the SEND", e))
    };
    let (mut signaled, mut quiet) = (prepare(true)?, prepare(false)?);
    let ring = recv_ring(&r.xmr, &r.layout, o, size)?;
    let mut recv = prepare_ring_recv(lane, &ring)?;
    loop {
        if timed && scnt >= iters && rcnt >= iters {
            break;
        }
        // The client sends first; then each side answers what it received.
        if (!timed || rcnt < iters) && !(scnt < 1 && client) {
            let wc = poll_one(lane, run.comm, o, true, || {
                format!("receive {} of send_lat", rcnt + 1)
            })?;
            let slot = wc.wr_id() & 0xffff_ffff;
            if o.verify {
                let off = slot * r.layout.inc(size);
                let mut got = vec![0u8; size as usize];
                r.xmr.read(off as usize, &mut got)?;
                check_pattern(&got, 0, 0, Salt::Source, || {
                    format!("send_lat message {} of {size} bytes", rcnt + 1)
                })?;
            }
            rcnt += 1;
            // perftest posts iterations receives in all (none beyond).
            if !timed || r.recv_posted[0] < iters {
                post_ring_slot(&mut recv, &ring, r.recv_posted[0])?;
                r.recv_posted[0] += 1;
            }
        }
        if !timed || scnt < iters {
            if stamps.stamp() {
                break;
            }
            scnt += 1;
            let last = scnt % cq_mod == 0 || (timed && scnt == iters);
            let send = if last { &mut signaled } else { &mut quiet };
            send.post()
                .map_err(|e| PerfError::rdma(format!("post SEND {scnt}"), e))?;
            if last {
                poll_one(lane, run.comm, o, false, || {
                    format!("the completion of SEND {scnt}")
                })?;
            }
        }
    }
    let hz = calib.ticks_per_sec();
    Ok(stamps.measure(size, iters, hz, 2))
}

/// The receive buffers of messages of `size`, one per slot (made once per
/// size: the loops only pick one).
fn recv_ring<'m>(
    xmr: &'m Region,
    layout: &Layout,
    o: &Options,
    size: u64,
) -> PerfResult<Vec<LocalSlice<'m>>> {
    let inc = layout.inc(size);
    (0..recv_slots(o, layout, size))
        .map(|slot| xmr.slice(slot * inc, size))
        .collect()
}

/// The one receive a lane walks over the ring's slots.
fn prepare_ring_recv<'l>(lane: &'l Lane, ring: &[LocalSlice<'_>]) -> PerfResult<PreparedRecv<'l>> {
    lane.prepare_recv(RecvRequest::new([ring[0]]))
        .map_err(|e| PerfError::rdma("prepare a receive", e))
}

/// Posts receive number `n` into its slot (its wr_id the slot).
#[inline]
fn post_ring_slot(recv: &mut PreparedRecv<'_>, ring: &[LocalSlice<'_>], n: u64) -> PerfResult<()> {
    let slot = n % ring.len() as u64;
    recv.set_local(ring[slot as usize])
        .and_then(|()| {
            recv.set_wr_id(slot);
            recv.post()
        })
        .map_err(|e| PerfError::rdma("post a receive", e))
}

/// The first receives of a SEND latency test for `size` (perftest's
/// `ctx_set_recv_wqes`) on the lane, walked as [`send_lat`] reposts them.
pub(super) fn post_lane_recvs(
    r: &mut Resources,
    o: &Options,
    size: u64,
    first: u64,
) -> PerfResult<()> {
    let ring = recv_ring(&r.xmr, &r.layout, o, size)?;
    let mut recv = prepare_ring_recv(r.lane()?, &ring)?;
    for n in 0..first {
        post_ring_slot(&mut recv, &ring, n)?;
    }
    r.recv_posted = vec![first];
    Ok(())
}

/// `read_lat` / `atomic_lat` for messages of `size` (the client).
pub fn one_sided_lat(run: &mut Run<'_>) -> PerfResult<LatMeasure> {
    let o = run.o;
    let size = run.size;
    let iters = o.iters;
    let verb = o.case.verb;
    let msg = if verb == Verb::Atomic { 8 } else { size };
    let mut stamps = Stamps::new(o);
    let timed = stamps.timed();
    let remote = run.remote[0]
        .slice(0..msg as usize)
        .map_err(|e| PerfError::rdma("the peer's buffer", e))?;
    let r = &mut *run.r;
    let lane = r.lane.as_ref().ok_or_else(no_lane)?;
    let local = r.lmr.slice(0, msg)?;
    let req = match verb {
        Verb::Read => SendRequest::read([local], remote),
        _ => match o.atomic {
            AtomicType::FetchAndAdd => SendRequest::fetch_add(local, remote, 1),
            AtomicType::CmpAndSwap => SendRequest::compare_swap(local, remote, 0, 0),
        },
    };
    let mut op = lane
        .prepare_send(req)
        .map_err(|e| PerfError::rdma(format!("prepare the {}", verb.title()), e))?;
    let calib = Calibration::start();
    let mut scnt = 0u64;
    loop {
        if timed && scnt >= iters {
            break;
        }
        if stamps.stamp() {
            break;
        }
        scnt += 1;
        op.post()
            .map_err(|e| PerfError::rdma(format!("post {} {scnt}", verb.title()), e))?;
        poll_one(lane, run.comm, o, false, || {
            format!("the completion of {} {scnt}", verb.title())
        })?;
        if o.verify {
            let mut got = vec![0u8; msg as usize];
            r.lmr.read(0, &mut got)?;
            match verb {
                Verb::Read => check_pattern(&got, 0, 0, Salt::Exposed, || {
                    format!("RDMA READ {scnt} of {size} bytes")
                })?,
                _ => {
                    let old = u64::from_le_bytes(got.try_into().unwrap_or([0; 8]));
                    let want = if o.atomic == AtomicType::FetchAndAdd {
                        scnt - 1
                    } else {
                        0
                    };
                    if old != want {
                        return Err(PerfError::Verify(format!(
                            "atomic {scnt} returned {old}, expected {want}: the peer's counter is wrong"
                        )));
                    }
                }
            }
        }
    }
    let hz = calib.ticks_per_sec();
    Ok(stamps.measure(size, iters, hz, 1))
}
