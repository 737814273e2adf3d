//! The host backend (`--backend host`): buffers in host memory, every
//! collective computed on the host from all ranks' inputs, exchanged
//! through a duplicate of the launch's bootstrap (TCP, MPI or none). It
//! needs neither GPU nor MPI, supports any `-t`/`-g`, and exists to run the
//! whole harness - launch, timing, checks, output, hangs - anywhere,
//! including CI. It measures the harness, not a network.
//!
//! Within a process, ranks post calls to a shared queue; when a round is
//! complete (every local rank has posted op k), the process's worker thread
//! (its "stream") runs op k for all local ranks, while the ranks' threads
//! poll for completion: so every wait is a poll bounded by `-T`, between
//! threads of one process as between processes. Ops complete in order on
//! every rank, like NCCL's.
//!
//! Reductions run as NCCL's do, each contribution reduced once: the worker
//! reduces its process's ranks' inputs into one partial result (in rank
//! order, cache-sized pieces, `hostreduce`'s vectorised passes);
//! processes exchange partials and each merges, of them, only the part
//! its own ranks receive (all of it for all_reduce, its ranks' blocks for
//! reduce_scatter, nothing unless it holds the root for reduce). Cost is
//! linear in the number of ranks (`-t`/`-g`).
//!
//! NCCL_TESTS_SPLIT: as in nccl-tests the color belongs to the process, so
//! all threads of a process share one communicator; the exchange runs over
//! the bootstrap split by color (`MPI_Comm_split`, so it needs the MPI
//! bootstrap: mpirun).
//!
//! `-M` sees each rank's send and receive buffers as the memory used on
//! its "device" (see [`HostBackend::free_mem`]).

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::Duration;

use super::hostcoll::{self, input_bytes, output_bytes, range_err};
use super::hostevents::{HostEvents, wait_done};
use super::hostreduce::Reducer;
use super::{Backend, BufRef, CollCall, DeviceInfo, Poll, RankSlot, Ranks};
use crate::nccltests::alloc;
use crate::nccltests::bootstrap::Bootstrap;
use crate::nccltests::colls::{CollKind, Target};
use crate::nccltests::errors::{TestError, TestResult};
use crate::nccltests::options::Options;
use crate::nccltests::types::Features;

/// Memory reported as the "device" total (host memory is not capped here).
const HOST_MEM: u64 = 1 << 60;

/// The host backend.
pub struct HostBackend {
    boot: Arc<dyn Bootstrap>,
    local_count: usize,
    timeout: Option<Duration>,
    shared: Mutex<Option<Arc<Shared>>>,
}

struct Mem {
    send: Vec<u8>,
    recv: Vec<u8>,
    /// The device index of the rank (for `-M`), once created.
    device: Option<i32>,
}

impl Mem {
    fn buf(&self, t: Target) -> &Vec<u8> {
        if t == Target::Send {
            &self.send
        } else {
            &self.recv
        }
    }
    fn buf_mut(&mut self, t: Target) -> &mut Vec<u8> {
        if t == Target::Send {
            &mut self.send
        } else {
            &mut self.recv
        }
    }
}

struct Round {
    calls: Vec<Option<CollCall>>,
    posted: usize,
}

#[derive(Default)]
struct Queue {
    posted: Vec<u64>,
    rounds: VecDeque<Round>,
    base: u64,
    done: u64,
    error: Option<TestError>,
    /// Complete rounds the worker has yet to run, in order.
    ready: VecDeque<Vec<CollCall>>,
    /// Whether the worker thread runs.
    worker: bool,
}

struct Shared {
    boot: Arc<dyn Bootstrap>,
    first_rank: usize,
    nranks: usize,
    mem: Vec<Mutex<Mem>>,
    queue: Mutex<Queue>,
    /// Signalled when a round is ready for the worker.
    work: Condvar,
    /// Signalled when the worker completed (or failed) a round.
    finished: Condvar,
    /// Set by an abort: the worker stops at its next piece.
    aborted: AtomicBool,
    /// Buffer bytes per device (-1: a rank not yet placed).
    used: Mutex<HashMap<i32, u64>>,
}

/// Bytes of the partial result reduced at a time: each piece stays in
/// cache while every local input is added to it.
const PIECE: usize = 256 << 10;

/// Complete rounds waiting for the worker at most; issuing more waits.
const MAX_QUEUED: usize = 256;

/// Bytes of the partial result exchanged between processes at a time.
const WINDOW: usize = 4 << 20;

/// How long a poll sleeps at most for a completion (woken at once by it),
/// so that waiting threads leave the cores to the worker.
const POLL_NAP: Duration = Duration::from_millis(1);

/// How often an idle worker looks whether its backend is gone.
const IDLE_CHECK: Duration = Duration::from_millis(200);

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl HostBackend {
    /// A host backend over a duplicate channel of `boot`, or with `split`
    /// over the processes of that color only (collective over `boot`).
    pub fn new(
        boot: &Arc<dyn Bootstrap>,
        o: &Options,
        split: Option<i32>,
    ) -> TestResult<HostBackend> {
        let local_count = (o.nthreads.max(1) * o.ngpus.max(1)) as usize;
        let timeout = (o.timeout > 0).then(|| Duration::from_secs(o.timeout as u64));
        let channel = match split {
            Some(color) => boot.split(color)?,
            None => boot.dup()?,
        };
        Ok(HostBackend {
            boot: channel,
            local_count,
            timeout,
            shared: Mutex::new(None),
        })
    }

    fn shared(&self, nranks: usize) -> Arc<Shared> {
        let mut s = self.shared.lock().unwrap_or_else(|p| p.into_inner());
        s.get_or_insert_with(|| {
            Arc::new(Shared {
                boot: self.boot.clone(),
                first_rank: self.boot.rank() * self.local_count,
                nranks,
                mem: (0..self.local_count)
                    .map(|_| {
                        Mutex::new(Mem {
                            send: vec![],
                            recv: vec![],
                            device: None,
                        })
                    })
                    .collect(),
                queue: Mutex::new(Queue {
                    posted: vec![0; self.local_count],
                    ..Queue::default()
                }),
                work: Condvar::new(),
                finished: Condvar::new(),
                aborted: AtomicBool::new(false),
                used: Mutex::new(HashMap::new()),
            })
        })
        .clone()
    }
}

impl Backend for HostBackend {
    fn name(&self) -> &'static str {
        "host"
    }
    fn versions(&self) -> (i32, i32) {
        (0, 0)
    }
    fn features(&self) -> Features {
        Features::ALL
    }
    fn device_count(&self) -> TestResult<usize> {
        Ok(usize::MAX)
    }
    fn device_info(&self, _device: i32) -> TestResult<DeviceInfo> {
        Ok(DeviceInfo {
            pci: (0, 0, 0),
            name: format!("host memory (host backend, {} bootstrap)", self.boot.name()),
            total_mem: u64::MAX,
        })
    }
    fn create_id(&self) -> TestResult<Vec<u8>> {
        Ok(Vec::new())
    }
    /// A fixed "total" minus the send and receive buffers of the ranks on
    /// `device`: so `-M` shows Initialization 0 (a host communicator holds
    /// no buffers), User-Allocated = those buffers, Collective 0 (a round's
    /// temporaries are freed before it completes).
    fn free_mem(&self, device: i32) -> Option<u64> {
        let s = self.shared.lock().unwrap_or_else(|p| p.into_inner());
        let used = s.as_ref().map_or(0, |sh| sh.used_bytes(Some(device)));
        Some(HOST_MEM.saturating_sub(used))
    }
    fn init_ranks(
        &self,
        _id: &[u8],
        nranks: usize,
        threads: &[Vec<RankSlot>],
    ) -> TestResult<Vec<Box<dyn Ranks>>> {
        if nranks != self.boot.size() * self.local_count {
            return Err(TestError::Internal(format!(
                "host backend: a communicator of {nranks} ranks over {} processes of {} ranks each",
                self.boot.size(),
                self.local_count
            )));
        }
        let shared = self.shared(nranks);
        threads
            .iter()
            .map(|slots| {
                let locals = slots
                    .iter()
                    .map(|s| s.rank.wrapping_sub(shared.first_rank))
                    .collect::<Vec<_>>();
                if locals.iter().any(|&l| l >= self.local_count) {
                    return Err(TestError::Internal(
                        "host backend: rank outside this process".into(),
                    ));
                }
                for (s, &l) in slots.iter().zip(&locals) {
                    shared.mem[l]
                        .lock()
                        .unwrap_or_else(|p| p.into_inner())
                        .device = Some(s.device);
                }
                Ok(Box::new(HostRanks {
                    shared: shared.clone(),
                    locals,
                    capturing: false,
                    graph: Vec::new(),
                    events: HostEvents::default(),
                    timeout: self.timeout,
                }) as Box<dyn Ranks>)
            })
            .collect()
    }
}

impl Shared {
    /// Buffer bytes of the local ranks on `device` (None: all of them),
    /// kept per device as buffers change: `-M` asks once per rank, so a
    /// walk over every rank here made `-g 16384` quadratic.
    fn used_bytes(&self, device: Option<i32>) -> u64 {
        let used = lock(&self.used);
        match device {
            Some(d) => used.get(&d).copied().unwrap_or(0),
            None => used.values().sum(),
        }
    }

    /// Records that a rank on `device` now holds `new` buffer bytes
    /// instead of `old`.
    fn account(&self, device: Option<i32>, old: usize, new: usize) {
        let mut used = lock(&self.used);
        let u = used.entry(device.unwrap_or(-1)).or_insert(0);
        *u = u.saturating_sub(old as u64).saturating_add(new as u64);
    }

    /// Posts one call; hands the round to the worker if this call
    /// completes it.
    fn post(
        self: &Arc<Self>,
        local: usize,
        call: CollCall,
        timeout: Option<Duration>,
    ) -> TestResult<()> {
        let mut q = lock(&self.queue);
        if q.ready.len() >= MAX_QUEUED {
            q = self.drain(q, local, timeout)?;
        }
        if let Some(e) = &q.error {
            return Err(e.clone());
        }
        let seq = q.posted[local];
        q.posted[local] += 1;
        let idx = (seq - q.base) as usize;
        let width = self.mem.len();
        while q.rounds.len() <= idx {
            q.rounds.push_back(Round {
                calls: vec![None; width],
                posted: 0,
            });
        }
        let r = &mut q.rounds[idx];
        r.calls[local] = Some(call);
        r.posted += 1;
        if r.posted < width {
            return Ok(());
        }
        q.base += 1;
        let calls = q
            .rounds
            .pop_front()
            .map(|r| r.calls.into_iter().flatten().collect())
            .unwrap_or_default();
        q.ready.push_back(calls);
        if !q.worker {
            let me = self.clone();
            std::thread::Builder::new()
                .name("host-stream".into())
                .spawn(move || me.serve())
                .map_err(|e| {
                    TestError::Internal(format!(
                        "host backend: cannot start its worker thread: {e}: raise the limits on threads (ulimit -u)"
                    ))
                })?;
            q.worker = true;
        }
        self.work.notify_one();
        Ok(())
    }

    /// Waits until the worker has room for another round (a bounded queue,
    /// as NCCL's: issuing faster than the rounds run must not hold every
    /// issued round in memory), under `-T` like every wait.
    fn drain<'a>(
        &'a self,
        mut q: MutexGuard<'a, Queue>,
        local: usize,
        timeout: Option<Duration>,
    ) -> TestResult<MutexGuard<'a, Queue>> {
        let start = std::time::Instant::now();
        while q.ready.len() >= MAX_QUEUED {
            if let Some(e) = &q.error {
                return Err(e.clone());
            }
            if let Some(t) = timeout
                && start.elapsed() > t
            {
                return Err(TestError::Timeout {
                    secs: t.as_secs() as i32,
                    detail: format!(
                        "rank {} (pid {}) waited for its {} queued collectives to complete; communicators aborted",
                        self.first_rank + local,
                        std::process::id(),
                        q.ready.len()
                    ),
                });
            }
            drop(q);
            crate::nccltests::job::check_collective()?;
            q = lock(&self.queue);
            q = self
                .finished
                .wait_timeout(q, POLL_NAP)
                .unwrap_or_else(|p| p.into_inner())
                .0;
        }
        Ok(q)
    }

    /// The worker: runs ready rounds in order until the backend is gone.
    fn serve(self: Arc<Self>) {
        loop {
            let calls = {
                let mut q = lock(&self.queue);
                loop {
                    if let Some(c) = q.ready.pop_front() {
                        break c;
                    }
                    // Only this thread holds the backend: nothing more can come.
                    if Arc::strong_count(&self) == 1 {
                        return;
                    }
                    q = self
                        .work
                        .wait_timeout(q, IDLE_CHECK)
                        .unwrap_or_else(|p| p.into_inner())
                        .0;
                }
            };
            let result = if self.aborted.load(Ordering::Relaxed) {
                Err(TestError::Cancelled)
            } else {
                self.execute(&calls)
            };
            let mut q = lock(&self.queue);
            match result {
                Ok(()) => q.done += 1,
                Err(e) => {
                    q.error.get_or_insert(e);
                }
            }
            self.finished.notify_all();
        }
    }

    /// Runs one round: reduces, or gathers local inputs, exchanges them
    /// with the other processes and writes every local rank's output.
    fn execute(&self, calls: &[CollCall]) -> TestResult<()> {
        let c0 = calls
            .first()
            .copied()
            .ok_or_else(|| TestError::Internal("empty round".into()))?;
        if calls.iter().any(|c| {
            (c.kind, c.count, c.dtype, c.op, c.root)
                != (c0.kind, c0.count, c0.dtype, c0.op, c0.root)
        }) {
            return Err(TestError::comm(
                "host",
                "collective",
                "invalid usage: ranks issued different collectives",
            ));
        }
        hostcoll::check_root("host", c0.kind, c0.root, self.nranks)?;
        if matches!(
            c0.kind,
            CollKind::AllReduce | CollKind::Reduce | CollKind::ReduceScatter
        ) {
            return self.reduce_round(c0, calls);
        }
        let ws = c0.dtype.size();
        let in_len = input_bytes(c0.kind, c0.count, ws, self.nranks);
        let mut mine = alloc::zeroed(
            alloc::product(in_len, calls.len(), "a host collective's input")?,
            "a host collective's input",
        )?;
        for (l, c) in calls.iter().enumerate() {
            self.read(l, c.send, &mut mine[l * in_len..(l + 1) * in_len])?;
        }
        let all = if self.boot.size() > 1 {
            self.boot.allgather(&mine)?
        } else {
            mine
        };
        let inputs: Vec<&[u8]> = all.chunks(in_len.max(1)).take(self.nranks).collect();
        let inputs: Vec<&[u8]> = if in_len == 0 {
            vec![&[][..]; self.nranks]
        } else {
            inputs
        };
        let out_len = output_bytes(c0.kind, c0.count, ws, self.nranks);
        let mut out = alloc::zeroed(out_len, "a host collective's output")?;
        for (l, c) in calls.iter().enumerate() {
            let me = self.first_rank + l;
            if hostcoll::compute(
                c.kind,
                c.dtype,
                c.op,
                c.root.max(0) as usize,
                me,
                c.count,
                &inputs,
                &mut out,
            ) {
                self.write(l, c.recv, &out)?;
            }
        }
        Ok(())
    }

    /// all_reduce, reduce, reduce_scatter: this process's ranks reduced
    /// into one partial result; with several processes, the partials
    /// exchanged and merged where this process's ranks need them. Done a
    /// window at a time, so that the data stays in cache from the
    /// reduction to the exchange and the outputs, and the temporaries are
    /// a few windows whatever the size.
    fn reduce_round(&self, c0: CollCall, calls: &[CollCall]) -> TestResult<()> {
        let ws = c0.dtype.size();
        let blk = c0.count * ws;
        let len = input_bytes(c0.kind, c0.count, ws, self.nranks);
        let r = Reducer::new(c0.dtype, c0.op, self.nranks);
        let first = self.first_rank;
        let root = c0.root.max(0) as usize;
        // The bytes of the result this process's ranks receive.
        let need = match c0.kind {
            CollKind::ReduceScatter => first * blk..(first + calls.len()) * blk,
            CollKind::Reduce if !(first..first + calls.len()).contains(&root) => 0..0,
            _ => 0..blk,
        };
        let window = (WINDOW / ws).max(1) * ws;
        let mut acc = alloc::zeroed(len.min(window), "a host collective's partial result")?;
        // Every window's exchange reuses it (no zeroed buffer per window).
        let mut all = Vec::new();
        let mut at = 0;
        while at < len {
            let span = at..len.min(at + window);
            let w = &mut acc[..span.len()];
            self.reduce_local(&r, calls, span.start, w)?;
            let lo = need.start.clamp(span.start, span.end);
            let mine = lo..need.end.clamp(lo, span.end);
            let local = mine.start - span.start..mine.end - span.start;
            let result = if self.boot.size() > 1 {
                self.boot.allgather_into(w, &mut all)?;
                let (head, rest) = all.split_at_mut(span.len());
                for part in rest.chunks(span.len()) {
                    self.pieces(local.clone(), ws, |p| {
                        r.merge(&part[p.clone()], &mut head[p]);
                    })?;
                }
                &mut head[local]
            } else {
                &mut w[local]
            };
            r.finish(result);
            self.deliver(c0, calls, mine.start, result)?;
            at = span.end;
        }
        Ok(())
    }

    /// Writes bytes `at..at + data.len()` of the result to the local
    /// ranks that receive them.
    fn deliver(&self, c0: CollCall, calls: &[CollCall], at: usize, data: &[u8]) -> TestResult<()> {
        let blk = c0.count * c0.dtype.size();
        let end = at + data.len();
        for (l, c) in calls.iter().enumerate() {
            let me = self.first_rank + l;
            // Where this rank's output starts in the result.
            let base = match c0.kind {
                CollKind::ReduceScatter => me * blk,
                CollKind::Reduce if me != c0.root.max(0) as usize => continue,
                _ => 0,
            };
            let (lo, hi) = (at.max(base), end.min(base + blk));
            if lo >= hi {
                continue;
            }
            let to = BufRef {
                buf: c.recv.buf,
                offset: c.recv.offset.saturating_add(lo - base),
            };
            self.write(l, to, &data[lo - at..hi - at])?;
        }
        Ok(())
    }

    /// `acc = ` bytes `at..at + acc.len()` of the local ranks' inputs
    /// reduced in rank order, a piece at a time (each piece stays in cache
    /// while every input is added).
    fn reduce_local(
        &self,
        r: &Reducer,
        calls: &[CollCall],
        at: usize,
        acc: &mut [u8],
    ) -> TestResult<()> {
        let len = acc.len();
        let mems: Vec<MutexGuard<'_, Mem>> = self.mem.iter().map(lock).collect();
        let mut srcs = Vec::with_capacity(calls.len());
        for (m, c) in mems.iter().zip(calls) {
            let b = m.buf(c.send.buf);
            let off = c.send.offset.saturating_add(at);
            let src = b
                .get(off..off.saturating_add(len))
                .ok_or_else(|| range_err("host", "send", off, len, b.len()))?;
            srcs.push(src);
        }
        let first = self.first_rank;
        self.pieces(0..len, r.element_size(), |span| {
            let a = &mut acc[span.clone()];
            for (l, src) in srcs.iter().enumerate() {
                if l == 0 {
                    r.load(first, &src[span.clone()], a);
                } else {
                    r.add(first + l, &src[span.clone()], a);
                }
            }
        })
    }

    /// Calls `f` on consecutive whole-element pieces of `range`, stopping
    /// with [`TestError::Cancelled`] once the ranks aborted.
    fn pieces(
        &self,
        range: std::ops::Range<usize>,
        ws: usize,
        mut f: impl FnMut(std::ops::Range<usize>),
    ) -> TestResult<()> {
        let step = (PIECE / ws).max(1) * ws;
        let mut at = range.start;
        while at < range.end {
            if self.aborted.load(Ordering::Relaxed) {
                return Err(TestError::Cancelled);
            }
            let end = range.end.min(at + step);
            f(at..end);
            at = end;
        }
        Ok(())
    }

    fn read(&self, l: usize, at: BufRef, out: &mut [u8]) -> TestResult<()> {
        let m = self.mem[l].lock().unwrap_or_else(|p| p.into_inner());
        let b = m.buf(at.buf);
        let src = b
            .get(at.offset..at.offset + out.len())
            .ok_or_else(|| range_err("host", "send", at.offset, out.len(), b.len()))?;
        out.copy_from_slice(src);
        Ok(())
    }

    /// Zeros `len` bytes in place (no zeroed staging copy).
    fn zero(&self, l: usize, at: BufRef, len: usize) -> TestResult<()> {
        let mut m = self.mem[l].lock().unwrap_or_else(|p| p.into_inner());
        let b = m.buf_mut(at.buf);
        let size = b.len();
        let dst = b
            .get_mut(at.offset..at.offset.saturating_add(len))
            .ok_or_else(|| range_err("host", buf_name(at.buf), at.offset, len, size))?;
        dst.fill(0);
        Ok(())
    }

    fn write(&self, l: usize, at: BufRef, data: &[u8]) -> TestResult<()> {
        let mut m = self.mem[l].lock().unwrap_or_else(|p| p.into_inner());
        let b = m.buf_mut(at.buf);
        let len = b.len();
        let dst = b
            .get_mut(at.offset..at.offset + data.len())
            .ok_or_else(|| range_err("host", "recv", at.offset, data.len(), len))?;
        dst.copy_from_slice(data);
        Ok(())
    }
}

fn buf_name(t: Target) -> &'static str {
    if t == Target::Send { "send" } else { "recv" }
}

/// One thread's ranks on the host backend.
pub struct HostRanks {
    shared: Arc<Shared>,
    locals: Vec<usize>,
    capturing: bool,
    graph: Vec<(usize, CollCall)>,
    events: HostEvents,
    timeout: Option<Duration>,
}

impl HostRanks {
    fn wait_all(&mut self) -> TestResult<()> {
        let timeout = self.timeout;
        wait_done(self, timeout, |_| "waiting for an event".into())
    }
}

impl Ranks for HostRanks {
    fn count(&self) -> usize {
        self.locals.len()
    }
    fn alloc(&mut self, send_bytes: usize, recv_bytes: usize) -> TestResult<()> {
        for &l in &self.locals {
            let mut m = self.shared.mem[l].lock().unwrap_or_else(|p| p.into_inner());
            // Free the old buffers first: they count against the new ones.
            let old = m.send.capacity() + m.recv.capacity();
            m.send = Vec::new();
            m.recv = Vec::new();
            self.shared.account(m.device, old, 0);
            m.send = alloc::zeroed(send_bytes, "the send buffer")?;
            self.shared.account(m.device, 0, m.send.capacity());
            m.recv = alloc::zeroed(recv_bytes, "the receive buffer")?;
            self.shared.account(m.device, 0, m.recv.capacity());
        }
        Ok(())
    }
    fn zero(&mut self, i: usize, buf: Target, offset: usize, len: usize) -> TestResult<()> {
        self.shared
            .zero(self.locals[i], BufRef { buf, offset }, len)
    }
    fn upload(&mut self, i: usize, buf: Target, offset: usize, data: &[u8]) -> TestResult<()> {
        self.shared
            .write(self.locals[i], BufRef { buf, offset }, data)
    }
    fn download(&mut self, i: usize, buf: Target, offset: usize, out: &mut [u8]) -> TestResult<()> {
        self.shared
            .read(self.locals[i], BufRef { buf, offset }, out)
    }
    fn group_start(&mut self) -> TestResult<()> {
        Ok(())
    }
    fn group_end(&mut self) -> TestResult<()> {
        Ok(())
    }
    fn enqueue(&mut self, i: usize, call: &CollCall) -> TestResult<()> {
        if self.capturing {
            self.graph.push((i, *call));
            return Ok(());
        }
        self.shared.post(self.locals[i], *call, self.timeout)
    }
    /// Done, or Pending after a nap of at most `POLL_NAP` (1 ms) that the
    /// worker's completion ends (so a waiting thread does not spin
    /// against the worker, nor notices completion late).
    fn poll(&mut self) -> TestResult<Poll> {
        let mut q = lock(&self.shared.queue);
        for nap in [true, false] {
            if let Some(e) = &q.error {
                return Err(e.clone());
            }
            if !self.locals.iter().any(|&l| q.posted[l] > q.done) {
                return Ok(Poll::Done);
            }
            if nap {
                q = self
                    .shared
                    .finished
                    .wait_timeout(q, POLL_NAP)
                    .unwrap_or_else(|p| p.into_inner())
                    .0;
            }
        }
        Ok(Poll::Pending)
    }
    fn pending(&mut self) -> Vec<usize> {
        let q = self.shared.queue.lock().unwrap_or_else(|p| p.into_inner());
        (0..self.locals.len())
            .filter(|&i| q.posted[self.locals[i]] > q.done)
            .collect()
    }
    /// Stops the worker at its next piece. The ranks' later calls fail
    /// with [`TestError::Cancelled`]: the error of the thread that aborted
    /// (a timeout) is the cause, not "communicator aborted".
    fn abort(&mut self) {
        self.shared.aborted.store(true, Ordering::Relaxed);
        let mut q = lock(&self.shared.queue);
        q.error.get_or_insert(TestError::Cancelled);
        self.shared.finished.notify_all();
    }
    fn capture_begin(&mut self) -> TestResult<()> {
        self.capturing = true;
        self.graph.clear();
        Ok(())
    }
    fn capture_end(&mut self) -> TestResult<()> {
        self.capturing = false;
        Ok(())
    }
    fn graph_launch(&mut self) -> TestResult<()> {
        for k in 0..self.graph.len() {
            let (i, call) = self.graph[k];
            self.shared.post(self.locals[i], call, self.timeout)?;
        }
        Ok(())
    }
    fn graph_destroy(&mut self) -> TestResult<()> {
        self.graph.clear();
        Ok(())
    }
    /// Host events are stamped when everything issued so far has completed
    /// (a stream event's semantics), so recording waits for completion.
    fn record_event(&mut self, slot: usize) -> TestResult<()> {
        self.wait_all()?;
        self.events.stamp(slot);
        Ok(())
    }
    fn event_elapsed_ms(&mut self, _i: usize, a: usize, b: usize) -> TestResult<f32> {
        self.events.elapsed_ms(a, b)
    }
    fn mem_info(&self, i: usize) -> Option<(u64, u64)> {
        let l = *self.locals.get(i)?;
        let device = self.shared.mem[l]
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .device;
        Some((
            HOST_MEM.saturating_sub(self.shared.used_bytes(device)),
            HOST_MEM,
        ))
    }
}
