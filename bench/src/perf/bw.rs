//! The bandwidth loops: perftest's `run_iter_bw` (the sender of every
//! verb), `run_iter_bw_server` (the receiver of SENDs) and `run_iter_bi`
//! (both at once), as one loop over the safe API: `QueuePair::post_send`
//! with a `SendRequest`, `CompletionQueue::poll`.
//!
//! Requests are signaled every `-Q` (and the last one); a QP keeps at most
//! `-t` requests outstanding. On iWARP the receiver returns credits by RDMA
//! WRITE and the sender keeps within the receiver's window.

use std::collections::VecDeque;
use std::time::{Duration, Instant};

use erdma::{RecvRequest, RemoteBuffer, SendRequest, WcStatus, WorkCompletion};

use super::cases::Verb;
use super::clock::{Calibration, ticks};
use super::error::{PerfError, PerfResult};
use super::memory::{Layout, Region, Salt, check_pattern};
use super::options::{AtomicType, Options};
use super::rdma::{Resources, rx_window};
use super::report::BwMeasure;
use super::watch::Watch;
use super::wire::Comm;

/// wr_id flag of credit writes.
const CREDIT: u64 = 1 << 61;
/// perftest's `CTX_POLL_BATCH`.
const POLL_BATCH: usize = 16;

/// What one bandwidth measurement needs.
pub struct Run<'a> {
    /// The RDMA resources.
    pub r: &'a mut Resources,
    /// Options.
    pub o: &'a Options,
    /// The exchange connection (to notice a peer that died).
    pub comm: &'a mut dyn Comm,
    /// The peer's buffer of each QP (WRITE/READ/atomics) or credit word
    /// (SEND on iWARP).
    pub remote: &'a [RemoteBuffer],
    /// Message size.
    pub size: u64,
}

/// Which directions a side runs.
#[derive(Debug, Clone, Copy)]
pub struct Mode {
    /// Posts sends (WRITE, READ, atomics, SEND).
    pub sends: bool,
    /// Receives SENDs.
    pub recvs: bool,
    /// Sends only after the first message arrived (the server of a
    /// bidirectional SEND test, as perftest).
    pub wait_first_rx: bool,
    /// Records per-request timestamps for the peak bandwidth.
    pub peak: bool,
}

/// `-D`'s phases: warm-up (margin), sample, cool-down (margin).
struct Phases {
    t0: Instant,
    margin: Duration,
    sample_end: Duration,
    total: Duration,
    state: u8,
    sample: (u64, u64),
    rounds: u32,
}

impl Phases {
    fn new(duration: u32, margin: u32) -> Phases {
        let margin = Duration::from_secs(u64::from(margin));
        let total = Duration::from_secs(u64::from(duration));
        let mut p = Phases {
            t0: Instant::now(),
            margin,
            sample_end: total - margin,
            total,
            state: 0,
            sample: (0, 0),
            rounds: 0,
        };
        p.update(true);
        p
    }

    fn in_sample(&self) -> bool {
        self.state == 1
    }

    /// Advances the phase now and then; true at the end.
    #[inline]
    fn tick(&mut self) -> bool {
        self.rounds += 1;
        if self.rounds.is_multiple_of(64) {
            self.update(false);
        }
        self.state == 3
    }

    fn update(&mut self, first: bool) {
        let t = self.t0.elapsed();
        if self.state == 0 && (t >= self.margin || first && self.margin.is_zero()) {
            self.state = 1;
            self.sample.0 = ticks();
        }
        if self.state == 1 && t >= self.sample_end {
            self.state = 2;
            self.sample.1 = ticks();
        }
        if self.state == 2 && t >= self.total {
            self.state = 3;
        }
    }
}

/// Reads a credit word the peer RDMA-writes.
fn credit(c: &Region, i: usize) -> PerfResult<u64> {
    let mut b = [0u8; 4];
    c.read(4 * i, &mut b)?;
    Ok(u64::from(u32::from_le_bytes(b)))
}

fn wc_error(w: &WorkCompletion, comm: &mut dyn Comm, what: String) -> PerfError {
    let peer_side = matches!(
        w.status,
        WcStatus::RetryExcErr
            | WcStatus::WrFlushErr
            | WcStatus::RnrRetryExcErr
            | WcStatus::RemAbortErr
    );
    if peer_side && comm.peer_gone() {
        return PerfError::Peer(format!(
            "{what}: {} went away during the test (completion status {})",
            comm.peer(),
            w.status
        ));
    }
    match w.ok() {
        Err(e) => PerfError::rdma(what, e),
        Ok(_) => PerfError::Peer(what),
    }
}

/// Posts the receives of a SEND test for messages of `size` (perftest's
/// `ctx_set_recv_wqes`): the RX window per QP, at most the iterations.
pub fn post_recvs(r: &mut Resources, o: &Options, size: u64) -> PerfResult<()> {
    let window = rx_window(o, &r.layout, size);
    let first = if o.duration.is_some() {
        window
    } else {
        window.min(o.iters)
    };
    if r.lane.is_some() {
        return super::lat::post_lane_recvs(r, o, size, first);
    }
    let n = r.qps.len();
    r.recv_posted = vec![0; n];
    for i in 0..n {
        for _ in 0..first {
            post_one_recv(r, o, i, size)?;
        }
    }
    Ok(())
}

/// How many receive slots messages of `size` cycle through (with
/// `--verify`, the RX window: no slot is reused before it is checked).
pub fn recv_slots(o: &Options, layout: &Layout, size: u64) -> u64 {
    if o.verify {
        rx_window(o, layout, size)
    } else {
        layout.slots(size)
    }
}

#[inline]
fn post_one_recv(r: &mut Resources, o: &Options, i: usize, size: u64) -> PerfResult<()> {
    let slot = r.recv_posted[i] % recv_slots(o, &r.layout, size);
    let off = i as u64 * r.recv_stride + slot * r.layout.inc(size);
    let req = RecvRequest::new([r.xmr.slice(off, size)?]).wr_id(((i as u64) << 32) | slot);
    r.qps[i]
        .post_recv(req)
        .map_err(|e| PerfError::rdma(format!("post a receive on QP {i}"), e))?;
    r.recv_posted[i] += 1;
    Ok(())
}

/// Whether messages of `size` go inline.
pub fn inline_ok(o: &Options, r: &Resources, size: u64) -> bool {
    matches!(o.case.verb, Verb::Write | Verb::Send) && size <= u64::from(r.inline) && r.inline > 0
}

/// One bandwidth measurement.
pub fn run(run: &mut Run<'_>, mode: Mode) -> PerfResult<BwMeasure> {
    let o = run.o;
    let size = run.size;
    let n = run.r.qps.len();
    let iters = o.iters;
    let mut phases = o.duration.map(|d| Phases::new(d, o.margin));
    let timed = phases.is_none();
    let tot = iters * n as u64;
    let cq_mod = u64::from(o.cq_mod.max(1));
    let tx = u64::from(o.tx_depth);
    let inline = inline_ok(o, run.r, size);
    let verb = o.case.verb;
    let stride = run.r.layout.stride;
    let msg = if verb == Verb::Atomic { 8 } else { size };
    let window = rx_window(o, &run.r.layout, size);
    let cap = if mode.peak && timed && mode.sends {
        tot as usize
    } else {
        0
    };
    let mut posted = vec![0u64; cap];
    let mut completed = vec![0u64; cap];
    let mut scnt = vec![0u64; n];
    let mut ccnt = vec![0u64; n];
    let mut rcnt = vec![0u64; n];
    let mut sig: Vec<VecDeque<u64>> = (0..n)
        .map(|_| VecDeque::with_capacity(tx as usize + 1))
        .collect();
    let (mut tot_s, mut tot_c, mut tot_r, mut counted) = (0u64, 0u64, 0u64, 0u64);
    let mut credit_pending = 0u64;
    let mut credit_due: Vec<Option<u64>> = vec![None; n];
    let mut wc = [WorkCompletion::default(); POLL_BATCH];
    let mut watch = Watch::new(o.timeout);
    let mut waiting_rx = mode.wait_first_rx;
    let what = |x: &str| format!("{} of {size} bytes: {x}", o.case.name);
    let calib = Calibration::start();
    let mut start = if mode.sends && !mode.wait_first_rx {
        ticks()
    } else {
        0
    };
    loop {
        if let Some(p) = phases.as_mut() {
            if p.tick() {
                break;
            }
        } else if (!mode.sends || tot_c >= tot) && (!mode.recvs || tot_r >= tot) {
            break;
        }
        // Post as many requests as the queues and the credits allow.
        if mode.sends && !waiting_rx {
            let r = &*run.r;
            for i in 0..n {
                while (!timed || scnt[i] < iters) && scnt[i] - ccnt[i] < tx {
                    if let Some(c) = &r.credits
                        && scnt[i] + 1 - credit(&c.target, i)?.min(scnt[i] + 1) >= window
                    {
                        break;
                    }
                    let s = scnt[i];
                    let signaled = s % cq_mod == cq_mod - 1 || (timed && s == iters - 1);
                    let slot = r.layout.slot_offset(s, size);
                    let local = r.lmr.slice(i as u64 * stride + slot, msg)?;
                    let remote = |len: u64| -> PerfResult<RemoteBuffer> {
                        run.remote[i]
                            .slice(slot as usize..(slot + len) as usize)
                            .map_err(|e| PerfError::rdma(what("the peer's buffer"), e))
                    };
                    let mut req = match verb {
                        Verb::Write => SendRequest::write([local], remote(size)?),
                        Verb::Read => SendRequest::read([local], remote(size)?),
                        Verb::Send => SendRequest::send([local]),
                        Verb::Atomic => match o.atomic {
                            AtomicType::FetchAndAdd => SendRequest::fetch_add(local, remote(8)?, 1),
                            AtomicType::CmpAndSwap => {
                                SendRequest::compare_swap(local, remote(8)?, 0, 0)
                            }
                        },
                    }
                    .wr_id(i as u64);
                    if !signaled {
                        req = req.unsignaled();
                    }
                    if inline {
                        req = req.inline();
                    }
                    if cap > 0 {
                        posted[tot_s as usize] = ticks();
                    }
                    r.qps[i].post_send(req).map_err(|e| {
                        PerfError::rdma(what(&format!("post request {s} on QP {i}")), e)
                    })?;
                    if signaled {
                        sig[i].push_back(s + 1);
                    }
                    scnt[i] += 1;
                    tot_s += 1;
                }
            }
        }
        let mut progressed = false;
        // Receives: count, check, post the next, return credits.
        if mode.recvs {
            let k = run
                .r
                .recv_cq
                .poll(&mut wc)
                .map_err(|e| PerfError::rdma(what("poll the receive CQ"), e))?;
            if k > 0 {
                progressed = true;
                if tot_r == 0 && !mode.sends {
                    start = ticks();
                }
                waiting_rx = false;
            }
            for w in &wc[..k] {
                if !w.is_ok() {
                    return Err(wc_error(w, run.comm, what(&format!("receive {tot_r}"))));
                }
                let i = (w.wr_id >> 32) as usize;
                let slot = w.wr_id & 0xffff_ffff;
                if i >= n {
                    return Err(PerfError::Peer(what(
                        "a receive completion of an unknown QP",
                    )));
                }
                if o.verify {
                    check_message(run.r, i, slot, rcnt[i], size)?;
                }
                rcnt[i] += 1;
                tot_r += 1;
                if phases.as_ref().is_some_and(Phases::in_sample) {
                    counted += 1;
                }
                if !timed || run.r.recv_posted[i] < iters {
                    post_one_recv(run.r, o, i, size)?;
                }
                if let Some(c) = &run.r.credits
                    && (rcnt[i] % window).is_multiple_of(c.every)
                {
                    credit_due[i] = Some(rcnt[i]);
                }
            }
        }
        // Return credits when a source buffer is free (they are counts:
        // a later one replaces an earlier one not yet sent).
        if run.r.credits.is_some() {
            for (i, due) in credit_due.iter_mut().enumerate() {
                if let Some(count) = *due
                    && send_credit(run, i, count, credit_pending)?
                {
                    *due = None;
                    credit_pending += 1;
                }
            }
        }
        // Send completions: data (and credit writes).
        if tot_c < tot_s || credit_pending > 0 {
            let k = run
                .r
                .send_cq
                .poll(&mut wc)
                .map_err(|e| PerfError::rdma(what("poll the send CQ"), e))?;
            if k > 0 {
                progressed = true;
            }
            for w in &wc[..k] {
                if !w.is_ok() {
                    return Err(wc_error(
                        w,
                        run.comm,
                        what(&format!("request {tot_c} ({})", verb.title())),
                    ));
                }
                if w.wr_id & CREDIT != 0 {
                    credit_pending = credit_pending.saturating_sub(1);
                    continue;
                }
                let i = w.wr_id as usize;
                let upto = sig[i].pop_front().unwrap_or(scnt[i]);
                let d = upto.saturating_sub(ccnt[i]);
                ccnt[i] = upto;
                tot_c += d;
                if cap > 0 && tot_c > 0 {
                    completed[(tot_c - 1).min(tot - 1) as usize] = ticks();
                }
                if phases.as_ref().is_some_and(Phases::in_sample) {
                    counted += d;
                }
            }
        }
        if progressed {
            watch.progress();
        } else {
            watch.idle(run.comm, || what("waiting for completions"))?;
        }
    }
    let end = ticks();
    // Credit writes still in flight hold the credit source: finish them.
    while credit_pending > 0 {
        let k = run
            .r
            .send_cq
            .poll(&mut wc)
            .map_err(|e| PerfError::rdma(what("poll the send CQ"), e))?;
        for w in &wc[..k] {
            if w.wr_id & CREDIT != 0 {
                credit_pending -= 1;
            }
        }
        if k == 0 {
            watch.idle(run.comm, || what("waiting for the last credit writes"))?;
        }
    }
    let hz = calib.ticks_per_sec();
    let (iters_done, start, end) = match &phases {
        Some(p) => (
            counted,
            p.sample.0,
            if p.sample.1 > 0 { p.sample.1 } else { end },
        ),
        None if mode.sends => (tot_s, start, end),
        None => (tot_r, start, end),
    };
    Ok(BwMeasure {
        size,
        iters: iters_done,
        posted,
        completed,
        start,
        end,
        hz,
        cq_mod,
        bytes_per_iter: msg,
    })
}

/// Writes this side's receive count of QP `i` into the peer's credit word
/// (perftest's `ctrl_wr`). The source may be rewritten while an earlier
/// credit write is in flight: it then carries the newer count, which is
/// what the sender wants. False when the send queue has no room for it now.
fn send_credit(run: &mut Run<'_>, i: usize, count: u64, pending: u64) -> PerfResult<bool> {
    if pending >= u64::from(run.o.tx_depth) {
        return Ok(false);
    }
    let c = run.r.credits.as_mut().expect("credits exist on iWARP");
    c.source
        .write_at(4 * i, &(count as u32).to_le_bytes())
        .map_err(|e| PerfError::rdma("write the credit count", e))?;
    let c = run.r.credits.as_ref().expect("credits exist on iWARP");
    let req = SendRequest::write(
        [c.source
            .slice(4 * i..4 * i + 4)
            .map_err(|e| PerfError::rdma("the credit buffer", e))?],
        RemoteBuffer {
            len: 4,
            ..run.remote[i]
        },
    )
    .wr_id(CREDIT | i as u64);
    run.r.qps[i]
        .post_send(req)
        .map_err(|e| PerfError::rdma(format!("post the credit write of QP {i}"), e))?;
    Ok(true)
}

/// `--verify` of one received SEND: message number `m` of QP `i` landed in
/// receive slot `slot`.
fn check_message(r: &Resources, i: usize, slot: u64, m: u64, size: u64) -> PerfResult<()> {
    let off = i as u64 * r.recv_stride + slot * r.layout.inc(size);
    let mut got = vec![0u8; size as usize];
    r.xmr.read(off as usize, &mut got)?;
    let src = r.layout.slot_offset(m, size);
    check_pattern(&got, i as u32, src, Salt::Source, || {
        format!("SEND message {m} of {size} bytes on QP {i}")
    })
}
