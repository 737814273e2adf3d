//! The host backend (`--backend host`): buffers in host memory, every
//! collective computed on the host from all ranks' inputs, exchanged
//! through a duplicate of the launch's bootstrap (TCP, MPI or none). It
//! needs neither GPU nor MPI, supports any `-t`/`-g`, and exists to run the
//! whole harness - launch, timing, checks, output, hangs - anywhere,
//! including CI. It measures the harness, not a network.
//!
//! Within a process, ranks post calls to a shared queue; the thread whose
//! call completes a round (every local rank has posted op k) runs op k for
//! all local ranks. Ops complete in order on every rank, like NCCL's.
//!
//! NCCL_TESTS_SPLIT: as in nccl-tests the color belongs to the process, so
//! all threads of a process share one communicator; the exchange runs over
//! the bootstrap split by color (`MPI_Comm_split`, so it needs the MPI
//! bootstrap: mpirun).
//!
//! `-M` sees each rank's send and receive buffers as the memory used on
//! its "device" (see [`HostBackend::free_mem`]).

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use super::hostcoll::{self, input_bytes, output_bytes, range_err};
use super::hostevents::{HostEvents, wait_done};
use super::{Backend, BufRef, CollCall, DeviceInfo, Poll, RankSlot, Ranks};
use crate::nccltests::alloc;
use crate::nccltests::bootstrap::Bootstrap;
use crate::nccltests::colls::Target;
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
}

struct Shared {
    boot: Arc<dyn Bootstrap>,
    first_rank: usize,
    nranks: usize,
    mem: Vec<Mutex<Mem>>,
    queue: Mutex<Queue>,
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
    /// Buffer bytes of the local ranks on `device` (None: all of them).
    fn used_bytes(&self, device: Option<i32>) -> u64 {
        self.mem
            .iter()
            .map(|m| {
                let m = m.lock().unwrap_or_else(|p| p.into_inner());
                if device.is_none() || m.device == device {
                    (m.send.capacity() + m.recv.capacity()) as u64
                } else {
                    0
                }
            })
            .sum()
    }

    /// Posts one call; runs the round if this call completes it.
    fn post(&self, local: usize, call: CollCall) -> TestResult<()> {
        let round = {
            let mut q = self.queue.lock().unwrap_or_else(|p| p.into_inner());
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
            q.rounds.pop_front()
        };
        let calls: Vec<CollCall> = round.into_iter().flat_map(|r| r.calls).flatten().collect();
        let result = self.execute(&calls);
        let mut q = self.queue.lock().unwrap_or_else(|p| p.into_inner());
        match result {
            Ok(()) => {
                q.done += 1;
                Ok(())
            }
            Err(e) => {
                q.error = Some(e.clone());
                Err(e)
            }
        }
    }

    /// Runs one round: gathers local inputs, exchanges them with the other
    /// processes, writes every local rank's output.
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
            m.send = Vec::new();
            m.recv = Vec::new();
            m.send = alloc::zeroed(send_bytes, "the send buffer")?;
            m.recv = alloc::zeroed(recv_bytes, "the receive buffer")?;
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
        self.shared.post(self.locals[i], *call)
    }
    fn poll(&mut self) -> TestResult<Poll> {
        let q = self.shared.queue.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(e) = &q.error {
            return Err(e.clone());
        }
        let busy = self.locals.iter().any(|&l| q.posted[l] > q.done);
        Ok(if busy { Poll::Pending } else { Poll::Done })
    }
    fn pending(&mut self) -> Vec<usize> {
        let q = self.shared.queue.lock().unwrap_or_else(|p| p.into_inner());
        (0..self.locals.len())
            .filter(|&i| q.posted[self.locals[i]] > q.done)
            .collect()
    }
    fn abort(&mut self) {
        let mut q = self.shared.queue.lock().unwrap_or_else(|p| p.into_inner());
        q.error
            .get_or_insert(TestError::comm("host", "abort", "communicator aborted"));
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
            self.shared.post(self.locals[i], call)?;
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
