//! The latency loops: perftest's `run_iter_lat_write` (a ping-pong of RDMA
//! WRITEs, each side polling the last byte of its buffer), `run_iter_lat_send`
//! (a ping-pong of SENDs) and `run_iter_lat` (READ or atomic, one at a time).
//! A timestamp is taken before each post; perftest's statistics come from
//! the gaps between them.

use erdma::{SendRequest, WorkCompletion};

use super::bw::{Run, inline_ok};
use super::cases::Verb;
use super::clock::{Calibration, ticks};
use super::error::{PerfError, PerfResult};
use super::memory::{Salt, check_pattern, pattern};
use super::options::AtomicType;
use super::report::LatMeasure;
use super::watch::Watch;

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

/// Waits for one completion; `what` names it in errors (built only then).
#[inline]
fn poll_one(
    run: &mut Run<'_>,
    send: bool,
    what: impl Fn() -> String,
) -> PerfResult<WorkCompletion> {
    let mut wc = [WorkCompletion::default()];
    let mut watch = Watch::new(run.o.timeout);
    loop {
        let cq = if send { &run.r.send_cq } else { &run.r.recv_cq };
        let k = cq
            .poll(&mut wc)
            .map_err(|e| PerfError::rdma(format!("poll for {}", what()), e))?;
        if k == 1 {
            if !wc[0].is_ok() {
                if run.comm.peer_gone() {
                    return Err(PerfError::Peer(format!(
                        "{}: {} went away during the test (status {})",
                        what(),
                        run.comm.peer(),
                        wc[0].status
                    )));
                }
                return Err(PerfError::rdma(
                    what(),
                    wc[0]
                        .ok()
                        .err()
                        .unwrap_or(erdma::Error::verb("ibv_poll_cq", libc::EIO)),
                ));
            }
            return Ok(wc[0]);
        }
        watch.idle(run.comm, &what)?;
    }
}

/// `write_lat` for messages of `size`.
pub fn write_lat(run: &mut Run<'_>, server: bool) -> PerfResult<LatMeasure> {
    let o = run.o;
    let size = run.size;
    let iters = o.iters;
    let inline = inline_ok(o, run.r, size);
    let last = (size - 1) as usize;
    let mut clock = Clock::new(o);
    let mut posted = Vec::with_capacity(if clock.is_some() { 0 } else { iters as usize });
    let calib = Calibration::start();
    let (mut scnt, mut ccnt, mut rcnt) = (0u64, 0u64, 0u64);
    let mut watch = Watch::new(o.timeout);
    let remote = run.remote[0]
        .slice(0..size as usize)
        .map_err(|e| PerfError::rdma("the peer's buffer", e))?;
    let timed = clock.is_none();
    loop {
        if timed && scnt >= iters && ccnt >= iters && rcnt >= iters {
            break;
        }
        // Wait for the peer's message (the server starts the ping-pong).
        if (!timed || rcnt < iters) && !(scnt < 1 && server) {
            rcnt += 1;
            let want = rcnt as u8;
            while run.r.xmr.byte(last)? != want {
                watch.idle(run.comm, || {
                    format!("write_lat of {size} bytes: waiting for message {rcnt}")
                })?;
            }
            watch.progress();
            if o.verify {
                let mut got = vec![0u8; last];
                run.r.xmr.read(0, &mut got)?;
                check_pattern(&got, 0, 0, Salt::Source, || {
                    format!("write_lat message {rcnt} of {size} bytes")
                })?;
            }
        }
        if !timed || scnt < iters {
            if let Some(c) = clock.as_mut() {
                if c.step() {
                    break;
                }
            } else {
                posted.push(ticks());
            }
            scnt += 1;
            run.r.lmr.write(last, &[scnt as u8])?;
            let mut req = SendRequest::write([run.r.lmr.slice(0, size)?], remote);
            if inline {
                req = req.inline();
            }
            run.r.qps[0]
                .post_send(req)
                .map_err(|e| PerfError::rdma(format!("post RDMA WRITE {scnt}"), e))?;
        }
        if !timed || ccnt < iters {
            poll_one(run, true, || {
                format!("the completion of RDMA WRITE {}", ccnt + 1)
            })?;
            ccnt += 1;
        }
    }
    let hz = calib.ticks_per_sec();
    // Keep the source's last byte as the pattern for the next size.
    run.r
        .lmr
        .write(last, &[pattern(0, last as u64, Salt::Source)])?;
    Ok(match clock {
        Some(c) => c.measure(size, hz, 2),
        None => LatMeasure {
            size,
            iters,
            posted,
            hz,
            rtt_factor: 2,
            span: None,
        },
    })
}

/// `send_lat` for messages of `size` (receives posted by the caller).
pub fn send_lat(run: &mut Run<'_>, client: bool) -> PerfResult<LatMeasure> {
    let o = run.o;
    let size = run.size;
    let iters = o.iters;
    let inline = inline_ok(o, run.r, size);
    let cq_mod = u64::from(o.cq_mod.max(1));
    let mut clock = Clock::new(o);
    let timed = clock.is_none();
    let mut posted = Vec::with_capacity(if timed { iters as usize } else { 0 });
    let calib = Calibration::start();
    let (mut scnt, mut rcnt) = (0u64, 0u64);
    loop {
        if timed && scnt >= iters && rcnt >= iters {
            break;
        }
        // The client sends first; then each side answers what it received.
        if (!timed || rcnt < iters) && !(scnt < 1 && client) {
            let wc = poll_one(run, false, || format!("receive {} of send_lat", rcnt + 1))?;
            let slot = wc.wr_id & 0xffff_ffff;
            if o.verify {
                let off = slot * run.r.layout.inc(size);
                let mut got = vec![0u8; size as usize];
                run.r.xmr.read(off as usize, &mut got)?;
                check_pattern(&got, 0, 0, Salt::Source, || {
                    format!("send_lat message {} of {size} bytes", rcnt + 1)
                })?;
            }
            rcnt += 1;
            // perftest posts iterations receives in all (none beyond).
            if !timed || run.r.recv_posted[0] < iters {
                repost(run, size)?;
            }
        }
        if !timed || scnt < iters {
            if let Some(c) = clock.as_mut() {
                if c.step() {
                    break;
                }
            } else {
                posted.push(ticks());
            }
            scnt += 1;
            let signaled = scnt % cq_mod == 0 || (timed && scnt == iters);
            let mut req = SendRequest::send([run.r.lmr.slice(0, size)?]);
            if !signaled {
                req = req.unsignaled();
            }
            if inline {
                req = req.inline();
            }
            run.r.qps[0]
                .post_send(req)
                .map_err(|e| PerfError::rdma(format!("post SEND {scnt}"), e))?;
            if signaled {
                poll_one(run, true, || format!("the completion of SEND {scnt}"))?;
            }
        }
    }
    let hz = calib.ticks_per_sec();
    Ok(match clock {
        Some(c) => c.measure(size, hz, 2),
        None => LatMeasure {
            size,
            iters,
            posted,
            hz,
            rtt_factor: 2,
            span: None,
        },
    })
}

fn repost(run: &mut Run<'_>, size: u64) -> PerfResult<()> {
    let slots = if run.o.verify {
        super::rdma::rx_window(run.o, &run.r.layout, size)
    } else {
        run.r.layout.slots(size)
    };
    let slot = run.r.recv_posted[0] % slots;
    let off = slot * run.r.layout.inc(size);
    let req = erdma::RecvRequest::new([run.r.xmr.slice(off, size)?]).wr_id(slot);
    run.r.qps[0]
        .post_recv(req)
        .map_err(|e| PerfError::rdma("post a receive", e))?;
    run.r.recv_posted[0] += 1;
    Ok(())
}

/// `read_lat` / `atomic_lat` for messages of `size` (the client).
pub fn one_sided_lat(run: &mut Run<'_>) -> PerfResult<LatMeasure> {
    let o = run.o;
    let size = run.size;
    let iters = o.iters;
    let verb = o.case.verb;
    let msg = if verb == Verb::Atomic { 8 } else { size };
    let mut clock = Clock::new(o);
    let timed = clock.is_none();
    let mut posted = Vec::with_capacity(if timed { iters as usize } else { 0 });
    let remote = run.remote[0]
        .slice(0..msg as usize)
        .map_err(|e| PerfError::rdma("the peer's buffer", e))?;
    let calib = Calibration::start();
    let mut scnt = 0u64;
    loop {
        if timed && scnt >= iters {
            break;
        }
        if let Some(c) = clock.as_mut() {
            if c.step() {
                break;
            }
        } else {
            posted.push(ticks());
        }
        scnt += 1;
        let local = run.r.lmr.slice(0, msg)?;
        let req = match verb {
            Verb::Read => SendRequest::read([local], remote),
            _ => match o.atomic {
                AtomicType::FetchAndAdd => SendRequest::fetch_add(local, remote, 1),
                AtomicType::CmpAndSwap => SendRequest::compare_swap(local, remote, 0, 0),
            },
        };
        run.r.qps[0]
            .post_send(req)
            .map_err(|e| PerfError::rdma(format!("post {} {scnt}", verb.title()), e))?;
        poll_one(run, true, || {
            format!("the completion of {} {scnt}", verb.title())
        })?;
        if o.verify {
            let mut got = vec![0u8; msg as usize];
            run.r.lmr.read(0, &mut got)?;
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
    Ok(match clock {
        Some(c) => c.measure(size, hz, 1),
        None => LatMeasure {
            size,
            iters,
            posted,
            hz,
            rtt_factor: 1,
            span: None,
        },
    })
}
