//! The MPI backend (`--backend mpi`, feature `mpi`): host buffers and
//! nonblocking MPI collectives (MPI_Iallreduce & co.), so completion is
//! polled and bounded by `-T` exactly like a CUDA stream. One rank per
//! process (`-t 1 -g 1`); start more processes with mpirun.
//!
//! Types and ops MPI lacks are built from what it has: half, bfloat16 and
//! the fp8 formats travel as 16/8-bit integers reduced by user-defined ops
//! with the same arithmetic as the GPU; `avg` and `mulsum` scale each
//! rank's input (into a scratch copy) and sum, integer `avg` divides the sum
//! afterwards, as NCCL does. In-place calls copy the input to scratch, since
//! MPI forbids aliased buffers and MPI_IN_PLACE is not exported by the
//! bindings.
//!
//! NCCL_TESTS_SPLIT: the communicator is `MPI_Comm_split(MPI_COMM_WORLD,
//! color, world rank)`, as nccl-tests splits its MPI communicator, so each
//! color reduces among its own processes.
//!
//! `-M` sees this process's host buffers (send, receive, and the scratch
//! copies the collectives keep) as its "device" memory: Initialization 0,
//! User-Allocated the send and receive buffers, Collective the scratch
//! grown during the run.

use std::os::raw::{c_int, c_void};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use mpi::ffi;

use super::hostcoll::{self, input_bytes, pre};
use super::hostevents::{HostEvents, wait_done};
use super::{Backend, CollCall, DeviceInfo, Poll, RankSlot, Ranks};
use crate::nccltests::alloc;
use crate::nccltests::bootstrap::Bootstrap;
use crate::nccltests::bootstrap::mpi::{Mpi, check, lock};
use crate::nccltests::colls::{CollKind, Target};
use crate::nccltests::errors::{TestError, TestResult};
use crate::nccltests::options::Options;
use crate::nccltests::types::{DataType, Features, ReduceOp};
use crate::nccltests::verifiable::{combine, post_op};

/// Memory reported as the "device" total (host memory is not capped here).
const HOST_MEM: u64 = 1 << 60;

/// The MPI backend.
pub struct MpiBackend {
    world_rank: usize,
    split: Option<i32>,
    timeout: Option<Duration>,
    /// Bytes of host buffers held by this process's rank (for `-M`).
    used: Arc<AtomicU64>,
}

impl MpiBackend {
    /// Checks the launch suits the MPI backend; `split` is the process's
    /// color when NCCL_TESTS_SPLIT divides the processes.
    pub fn new(
        o: &Options,
        boot: &Arc<dyn Bootstrap>,
        split: Option<i32>,
    ) -> TestResult<MpiBackend> {
        if boot.name() != "MPI" {
            return Err(TestError::NotImplemented(
                "the mpi backend needs an MPI launch (mpirun, or --bootstrap mpi)".into(),
            ));
        }
        if o.nthreads != 1 || o.ngpus != 1 {
            return Err(TestError::NotImplemented(
                "the mpi backend runs one rank per process: use -t 1 -g 1 and start more processes (mpirun -np N)".into(),
            ));
        }
        let timeout = (o.timeout > 0).then(|| Duration::from_secs(o.timeout as u64));
        Ok(MpiBackend {
            world_rank: boot.rank(),
            split,
            timeout,
            used: Arc::new(AtomicU64::new(0)),
        })
    }

    /// The rank's communicator: a duplicate of MPI_COMM_WORLD, or its split
    /// by color keyed by world rank (nccl-tests' `MPI_Comm_split(
    /// MPI_COMM_WORLD, color, proc)`). Collective over MPI_COMM_WORLD.
    /// Returns the communicator with this process's rank and size in it.
    fn communicator(&self) -> TestResult<(ffi::MPI_Comm, usize, usize)> {
        // Bounded by -T like every exchange (MPI_Comm_idup, or a barrier
        // before MPI_Comm_split): a stopped rank cannot hold this forever.
        let world = Mpi::world(self.timeout.map_or(0, |t| t.as_secs() as i32))?;
        let comm = match self.split {
            Some(color) => world.split_raw(color, self.world_rank as c_int)?,
            None => world.dup_raw()?,
        };
        let _g = lock();
        let (mut rank, mut size): (c_int, c_int) = (0, 0);
        // SAFETY: `comm` is a valid communicator; each call writes one int;
        // lock held.
        unsafe {
            check(ffi::MPI_Comm_rank(comm, &mut rank), "MPI_Comm_rank")?;
            check(ffi::MPI_Comm_size(comm, &mut size), "MPI_Comm_size")?;
        }
        Ok((comm, rank.max(0) as usize, size.max(0) as usize))
    }
}

impl Backend for MpiBackend {
    fn name(&self) -> &'static str {
        "mpi"
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
            name: "host memory (mpi backend)".into(),
            total_mem: u64::MAX,
        })
    }
    fn create_id(&self) -> TestResult<Vec<u8>> {
        Ok(Vec::new())
    }
    /// The host buffers of this process's rank (see the module docs).
    fn free_mem(&self, _device: i32) -> Option<u64> {
        Some(HOST_MEM.saturating_sub(self.used.load(Ordering::Relaxed)))
    }
    fn init_ranks(
        &self,
        _id: &[u8],
        nranks: usize,
        threads: &[Vec<RankSlot>],
    ) -> TestResult<Vec<Box<dyn Ranks>>> {
        let (comm, rank, size) = self.communicator()?;
        let slot = match threads {
            [t] if t.len() == 1 => Some(t[0].rank),
            _ => None,
        };
        if size != nranks || slot != Some(rank) {
            return Err(TestError::Internal(format!(
                "mpi backend: the MPI communicator has rank {rank} of {size}, the harness expected {slot:?} of {nranks} (one rank per process)"
            )));
        }
        let _g = lock();
        // SAFETY: MPI is initialized and the lock held; user ops are created
        // from extern "C" functions with the MPI_User_function signature.
        let ops = unsafe { user_ops::create()? };
        Ok(vec![Box::new(MpiRanks {
            comm,
            ops,
            rank,
            size,
            used: self.used.clone(),
            send: Vec::new(),
            recv: Vec::new(),
            requests: Vec::new(),
            posts: Vec::new(),
            scratch: Vec::new(),
            used_scratch: 0,
            capturing: false,
            graph: Vec::new(),
            events: HostEvents::default(),
            timeout: self.timeout,
        })])
    }
}

/// A deferred integer-average division (applied when the op completes).
struct PostAvg {
    offset: usize,
    count: usize,
    dtype: DataType,
}

/// The most bytes the staged input copies of collectives in flight may
/// hold together (in-place and pre-scaled calls): one copy larger than
/// this is still made, alone. Before the bound every call in flight had
/// its own copy: `-n 1000` of 4 MB held 4 GB per rank.
pub const STAGED_POOL_BYTES: usize = 256 << 20;

/// The most staged copies in flight: past it, the calls in flight complete
/// before the next starts.
pub const STAGED_MAX: usize = 16;

/// The most requests in flight: past it the calls in flight complete
/// before the next starts (a GPU's launch queue is bounded too).
pub const MAX_IN_FLIGHT: usize = 1024;

/// What the staged copies of a run of buffers of `bytes` hold at most
/// ([`STAGED_POOL_BYTES`], one copy, or [`STAGED_MAX`] copies).
pub fn staged_bound(bytes: usize) -> usize {
    bytes.max(STAGED_POOL_BYTES.min(bytes.saturating_mul(STAGED_MAX)))
}

/// One process's rank on the MPI backend.
pub struct MpiRanks {
    comm: ffi::MPI_Comm,
    ops: user_ops::Ops,
    rank: usize,
    size: usize,
    /// Bytes held in `send`, `recv` and `scratch` (shared with the backend
    /// for `-M`).
    used: Arc<AtomicU64>,
    send: Vec<u8>,
    recv: Vec<u8>,
    requests: Vec<ffi::MPI_Request>,
    posts: Vec<PostAvg>,
    scratch: Vec<Vec<u8>>,
    used_scratch: usize,
    capturing: bool,
    graph: Vec<CollCall>,
    events: HostEvents,
    timeout: Option<Duration>,
}

// SAFETY: the MPI handles are process-wide objects; this rank is driven by
// one thread at a time and every MPI call takes the process MPI lock.
unsafe impl Send for MpiRanks {}

fn mpi_type(dt: DataType) -> ffi::MPI_Datatype {
    // SAFETY: reading datatype handles exported by the MPI library.
    unsafe {
        match dt {
            DataType::Int8 => ffi::RSMPI_INT8_T,
            DataType::Uint8 | DataType::Float8e4m3 | DataType::Float8e5m2 => ffi::RSMPI_UINT8_T,
            DataType::Int32 => ffi::RSMPI_INT32_T,
            DataType::Uint32 => ffi::RSMPI_UINT32_T,
            DataType::Int64 => ffi::RSMPI_INT64_T,
            DataType::Uint64 => ffi::RSMPI_UINT64_T,
            DataType::Float16 | DataType::Bfloat16 => ffi::RSMPI_UINT16_T,
            DataType::Float32 => ffi::RSMPI_FLOAT,
            DataType::Float64 => ffi::RSMPI_DOUBLE,
        }
    }
}

/// Whether MPI's built-in ops reduce `dt` as NCCL does. 8-bit integers
/// are excluded: Open MPI 4.1's AVX op component sums them with saturating
/// instructions (int8 100+100 = 127) where NCCL wraps.
fn is_native(dt: DataType) -> bool {
    !matches!(
        dt,
        DataType::Float16
            | DataType::Bfloat16
            | DataType::Float8e4m3
            | DataType::Float8e5m2
            | DataType::Int8
            | DataType::Uint8
    )
}

/// Whether the collective reduces (the others only move data).
fn is_reduction(kind: CollKind) -> bool {
    matches!(
        kind,
        CollKind::AllReduce | CollKind::Reduce | CollKind::ReduceScatter
    )
}

/// Whether MPI sums a pre-scaled copy of the input: mulsum, and float avg,
/// of a reduction.
fn prescaled(call: &CollCall) -> bool {
    is_reduction(call.kind)
        && (call.op == ReduceOp::PreMulSum || (call.op == ReduceOp::Avg && call.dtype.is_float()))
}

impl MpiRanks {
    fn mpi_op(&self, dt: DataType, op: ReduceOp) -> ffi::MPI_Op {
        // Avg and PreMulSum are sums of pre-scaled inputs.
        let base = match op {
            ReduceOp::Avg | ReduceOp::PreMulSum => ReduceOp::Sum,
            o => o,
        };
        if is_native(dt) {
            // SAFETY: reading op handles exported by the MPI library.
            unsafe {
                match base {
                    ReduceOp::Prod => ffi::RSMPI_PROD,
                    ReduceOp::Max => ffi::RSMPI_MAX,
                    ReduceOp::Min => ffi::RSMPI_MIN,
                    _ => ffi::RSMPI_SUM,
                }
            }
        } else {
            self.ops.get(dt, base)
        }
    }

    fn buf_ptr(&mut self, t: Target, offset: usize, len: usize) -> TestResult<*mut u8> {
        let b = if t == Target::Send {
            &mut self.send
        } else {
            &mut self.recv
        };
        if offset.checked_add(len).is_none_or(|end| end > b.len()) {
            return Err(hostcoll::range_err(
                "MPI",
                "collective",
                offset,
                len,
                b.len(),
            ));
        }
        // SAFETY: offset + len <= b.len(), checked above.
        Ok(unsafe { b.as_mut_ptr().add(offset) })
    }

    /// A scratch copy of the input, pre-scaled for avg/mulsum, from a
    /// bounded pool ([`STAGED_POOL_BYTES`], [`STAGED_MAX`]): when another
    /// copy would pass the bound, the collectives in flight complete first
    /// and their copies are reused, so memory does not grow with `-n`.
    fn staged_input(&mut self, call: &CollCall, len: usize) -> TestResult<*mut u8> {
        let src = self.buf_ptr(call.send.buf, call.send.offset, len)?;
        // Never empty: an empty Vec's dangling pointer (0x1) is Open MPI's
        // MPI_IN_PLACE.
        let want = len.max(1);
        let held: usize = self.scratch.iter().map(Vec::capacity).sum();
        let k = self.used_scratch;
        let grow = want.saturating_sub(self.scratch.get(k).map_or(0, Vec::capacity));
        if k > 0 && (k >= STAGED_MAX || held.saturating_add(grow) > STAGED_POOL_BYTES) {
            self.wait_all()?;
            self.finish_posts();
            // Past the bound even from the first copy: keep only that one.
            let first = self.scratch.first().map_or(0, Vec::capacity);
            if held.saturating_add(want.saturating_sub(first)) > STAGED_POOL_BYTES {
                self.scratch.truncate(1);
            }
        }
        if self.used_scratch == self.scratch.len() {
            self.scratch.push(Vec::new());
        }
        let k = self.used_scratch;
        self.used_scratch += 1;
        let s = &mut self.scratch[k];
        if s.len() < want {
            s.try_reserve_exact(want - s.len())
                .map_err(|_| TestError::host_memory("an in-place scratch copy", want as u128))?;
        }
        s.resize(want, 0);
        // Scratch is kept for later calls: memory the collectives use.
        let scratch: usize = self.scratch.iter().map(Vec::capacity).sum();
        let held = self.send.capacity() + self.recv.capacity() + scratch;
        self.used.store(held as u64, Ordering::Relaxed);
        let s = &mut self.scratch[k];
        // SAFETY: src points at `len` readable bytes (buf_ptr checked) and
        // `s` is a distinct allocation of `len` bytes.
        unsafe { std::ptr::copy_nonoverlapping(src, s.as_mut_ptr(), len) };
        if prescaled(call) {
            let ws = call.dtype.size();
            for e in s.chunks_exact_mut(ws) {
                let mut x = [0u8; 8];
                x[..ws].copy_from_slice(e);
                let v = pre(
                    call.dtype,
                    call.op,
                    u64::from_le_bytes(x),
                    call.rank,
                    self.size,
                );
                e.copy_from_slice(&v.to_le_bytes()[..ws]);
            }
        }
        Ok(s.as_mut_ptr())
    }

    fn start(&mut self, call: &CollCall) -> TestResult<()> {
        // Bounded as the staged copies are: one request per iteration in
        // flight grew with -n (-n 2000000000: a GB a rank in seconds, and
        // every MPI call progressing them all).
        if self.requests.len() >= MAX_IN_FLIGHT {
            self.wait_all()?;
            self.finish_posts();
        }
        let ws = call.dtype.size();
        let n = self.size;
        let count = c_int::try_from(call.count)
            .map_err(|_| TestError::comm("MPI", "collective", "count exceeds MPI's int range"))?;
        hostcoll::check_root("MPI", call.kind, call.root, n)?;
        let in_len = input_bytes(call.kind, call.count, ws, n);
        let out_len = hostcoll::output_bytes(call.kind, call.count, ws, n);
        let aliased = call.send.buf == call.recv.buf
            && call.send.offset < call.recv.offset + out_len
            && call.recv.offset < call.send.offset + in_len;
        let reducing = is_reduction(call.kind);
        let s = if aliased || prescaled(call) {
            self.staged_input(call, in_len)?
        } else {
            self.buf_ptr(call.send.buf, call.send.offset, in_len)?
        };
        let r = self.buf_ptr(call.recv.buf, call.recv.offset, out_len)?;
        let (dt, op) = (mpi_type(call.dtype), self.mpi_op(call.dtype, call.op));
        if reducing
            && call.op == ReduceOp::Avg
            && !call.dtype.is_float()
            && (call.kind != CollKind::Reduce || call.root as usize == self.rank)
        {
            self.posts.push(PostAvg {
                offset: call.recv.offset,
                count: call.count,
                dtype: call.dtype,
            });
        }
        let mut req: ffi::MPI_Request = unsafe { ffi::RSMPI_REQUEST_NULL };
        let (root, comm) = (call.root, self.comm);
        let _g = lock();
        // SAFETY: `s` and `r` point at in_len/out_len valid bytes (checked by
        // buf_ptr or owned scratch) that stay allocated and untouched until
        // the request completes (buffers are not resized while ops are in
        // flight; scratch slots are released only after completion). The
        // counts match the collective's definition; the lock is held.
        let rc = unsafe {
            match call.kind {
                CollKind::AllReduce => {
                    ffi::MPI_Iallreduce(s.cast(), r.cast(), count, dt, op, comm, &mut req)
                }
                CollKind::Reduce => {
                    ffi::MPI_Ireduce(s.cast(), r.cast(), count, dt, op, root, comm, &mut req)
                }
                CollKind::ReduceScatter => ffi::MPI_Ireduce_scatter_block(
                    s.cast(),
                    r.cast(),
                    count,
                    dt,
                    op,
                    comm,
                    &mut req,
                ),
                CollKind::AllGather => {
                    ffi::MPI_Iallgather(s.cast(), count, dt, r.cast(), count, dt, comm, &mut req)
                }
                CollKind::Gather => ffi::MPI_Igather(
                    s.cast(),
                    count,
                    dt,
                    r.cast(),
                    count,
                    dt,
                    root,
                    comm,
                    &mut req,
                ),
                CollKind::Scatter => ffi::MPI_Iscatter(
                    s.cast(),
                    count,
                    dt,
                    r.cast(),
                    count,
                    dt,
                    root,
                    comm,
                    &mut req,
                ),
                CollKind::AllToAll => {
                    ffi::MPI_Ialltoall(s.cast(), count, dt, r.cast(), count, dt, comm, &mut req)
                }
                CollKind::Broadcast => {
                    if root as usize == self.rank && s != r {
                        std::ptr::copy(s, r, in_len);
                    }
                    ffi::MPI_Ibcast(r.cast(), count, dt, root, comm, &mut req)
                }
                CollKind::SendRecv => {
                    let mut req2: ffi::MPI_Request = ffi::RSMPI_REQUEST_NULL;
                    let (to, from) = (
                        ((self.rank + 1) % n) as c_int,
                        ((self.rank + n - 1) % n) as c_int,
                    );
                    let rc = ffi::MPI_Irecv(r.cast(), count, dt, from, 7, comm, &mut req2);
                    self.requests.push(req2);
                    if rc != 0 {
                        rc
                    } else {
                        ffi::MPI_Isend(s.cast::<c_void>(), count, dt, to, 7, comm, &mut req)
                    }
                }
                CollKind::HyperCube => {
                    drop(_g);
                    return self.hypercube(s, r, call);
                }
            }
        };
        check(rc, "MPI nonblocking collective")?;
        self.requests.push(req);
        Ok(())
    }

    /// Hypercube all-gather: each step depends on the previous one, so it
    /// runs to completion here (polling, bounded by the timeout).
    fn hypercube(&mut self, s: *mut u8, r: *mut u8, call: &CollCall) -> TestResult<()> {
        let blk = call.count * call.dtype.size();
        let me = self.rank;
        // SAFETY: r points at n*blk bytes (output_bytes), s at blk bytes.
        unsafe {
            let mine = r.add(me * blk);
            if mine != s {
                std::ptr::copy(s, mine, blk);
            }
        }
        let mut mask = 1;
        while mask < self.size {
            let (sb, rb) = (me & !(mask - 1), (me & !(mask - 1)) ^ mask);
            let n = c_int::try_from(call.count * mask).map_err(|_| {
                TestError::comm("MPI", "hypercube", "count exceeds MPI's int range")
            })?;
            let peer = (me ^ mask) as c_int;
            let mut reqs = [unsafe { ffi::RSMPI_REQUEST_NULL }; 2];
            {
                let _g = lock();
                let dt = mpi_type(DataType::Uint8);
                let bytes = c_int::try_from(n as usize * call.dtype.size())
                    .map_err(|_| TestError::comm("MPI", "hypercube", "message too large"))?;
                // SAFETY: both blocks lie inside the n*blk output bytes and
                // do not overlap (sb != rb); the lock is held.
                unsafe {
                    check(
                        ffi::MPI_Isend(
                            r.add(sb * blk).cast::<c_void>(),
                            bytes,
                            dt,
                            peer,
                            9,
                            self.comm,
                            &mut reqs[0],
                        ),
                        "MPI_Isend",
                    )?;
                    check(
                        ffi::MPI_Irecv(
                            r.add(rb * blk).cast(),
                            bytes,
                            dt,
                            peer,
                            9,
                            self.comm,
                            &mut reqs[1],
                        ),
                        "MPI_Irecv",
                    )?;
                }
            }
            self.requests.extend_from_slice(&reqs);
            self.wait_all()?;
            mask <<= 1;
        }
        Ok(())
    }

    fn wait_all(&mut self) -> TestResult<()> {
        let timeout = self.timeout;
        wait_done(self, timeout, |r| {
            format!(
                "rank {} (pid {}) did not complete an MPI exchange",
                r.rank,
                std::process::id()
            )
        })
    }

    fn finish_posts(&mut self) {
        for p in std::mem::take(&mut self.posts) {
            let ws = p.dtype.size();
            let end = (p.offset + p.count * ws).min(self.recv.len());
            for e in self.recv[p.offset.min(end)..end].chunks_exact_mut(ws) {
                let mut x = [0u8; 8];
                x[..ws].copy_from_slice(e);
                let v = post_op(
                    p.dtype,
                    ReduceOp::Avg,
                    u64::from_le_bytes(x),
                    self.size as i32,
                );
                e.copy_from_slice(&v.to_le_bytes()[..ws]);
            }
        }
        self.used_scratch = 0;
    }
}

impl Ranks for MpiRanks {
    fn count(&self) -> usize {
        1
    }
    fn alloc(&mut self, send_bytes: usize, recv_bytes: usize) -> TestResult<()> {
        self.send = Vec::new();
        self.recv = Vec::new();
        self.send = alloc::zeroed(send_bytes, "the send buffer")?;
        self.recv = alloc::zeroed(recv_bytes, "the receive buffer")?;
        let scratch: usize = self.scratch.iter().map(Vec::capacity).sum();
        let held = self.send.capacity() + self.recv.capacity() + scratch;
        self.used.store(held as u64, Ordering::Relaxed);
        Ok(())
    }
    fn zero(&mut self, _i: usize, buf: Target, offset: usize, len: usize) -> TestResult<()> {
        let p = self.buf_ptr(buf, offset, len)?;
        // SAFETY: buf_ptr checked that len bytes from p are in the buffer.
        unsafe { std::ptr::write_bytes(p, 0, len) };
        Ok(())
    }
    fn upload(&mut self, _i: usize, buf: Target, offset: usize, data: &[u8]) -> TestResult<()> {
        let p = self.buf_ptr(buf, offset, data.len())?;
        // SAFETY: buf_ptr checked the destination range; data is distinct.
        unsafe { std::ptr::copy_nonoverlapping(data.as_ptr(), p, data.len()) };
        Ok(())
    }
    fn download(
        &mut self,
        _i: usize,
        buf: Target,
        offset: usize,
        out: &mut [u8],
    ) -> TestResult<()> {
        let p = self.buf_ptr(buf, offset, out.len())?;
        // SAFETY: buf_ptr checked the source range; out is distinct.
        unsafe { std::ptr::copy_nonoverlapping(p, out.as_mut_ptr(), out.len()) };
        Ok(())
    }
    fn group_start(&mut self) -> TestResult<()> {
        Ok(())
    }
    fn group_end(&mut self) -> TestResult<()> {
        Ok(())
    }
    fn enqueue(&mut self, _i: usize, call: &CollCall) -> TestResult<()> {
        if self.capturing {
            self.graph.push(*call);
            return Ok(());
        }
        self.start(call)
    }
    fn poll(&mut self) -> TestResult<Poll> {
        // One MPI_Test per request (usually one): unlike MPI_Testall, it
        // returns the request's own error (MPI_ERR_TRUNCATE...).
        while let Some(req) = self.requests.last_mut() {
            let mut flag: c_int = 0;
            let rc = {
                let _g = lock();
                // SAFETY: `req` is a valid request handle; MPI_Test sets it to
                // MPI_REQUEST_NULL when it completes; lock held.
                unsafe { ffi::MPI_Test(req, &mut flag, ffi::RSMPI_STATUS_IGNORE) }
            };
            check(rc, "MPI_Test (a nonblocking collective)")?;
            if flag == 0 {
                return Ok(Poll::Pending);
            }
            self.requests.pop();
        }
        self.finish_posts();
        Ok(Poll::Done)
    }
    fn abort(&mut self) {
        // Nonblocking collectives cannot be cancelled; the caller ends the
        // job (MPI_Abort) right after this.
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
            let c = self.graph[k];
            self.start(&c)?;
        }
        Ok(())
    }
    fn graph_destroy(&mut self) -> TestResult<()> {
        self.graph.clear();
        Ok(())
    }
    fn record_event(&mut self, slot: usize) -> TestResult<()> {
        self.wait_all()?;
        self.events.stamp(slot);
        Ok(())
    }
    fn event_elapsed_ms(&mut self, _i: usize, a: usize, b: usize) -> TestResult<f32> {
        self.events.elapsed_ms(a, b)
    }
    fn mem_info(&self, _i: usize) -> Option<(u64, u64)> {
        let used = self.used.load(Ordering::Relaxed);
        Some((HOST_MEM.saturating_sub(used), HOST_MEM))
    }
}

impl Drop for MpiRanks {
    fn drop(&mut self) {
        if !self.requests.is_empty() {
            // Collectives still posted (after a timeout or an error) may
            // still read or write these buffers: leak them, never free them
            // under MPI (the process is about to end).
            std::mem::forget(std::mem::take(&mut self.send));
            std::mem::forget(std::mem::take(&mut self.recv));
            std::mem::forget(std::mem::take(&mut self.scratch));
        }
    }
}

/// User-defined MPI ops for the types MPI lacks.
mod user_ops {
    use super::*;

    /// One op per (type without a correct built-in, sum/prod/max/min).
    pub struct Ops([ffi::MPI_Op; 24]);

    const TYPES: [DataType; 6] = [
        DataType::Float16,
        DataType::Bfloat16,
        DataType::Float8e4m3,
        DataType::Float8e5m2,
        DataType::Int8,
        DataType::Uint8,
    ];
    const OPS: [ReduceOp; 4] = [ReduceOp::Sum, ReduceOp::Prod, ReduceOp::Max, ReduceOp::Min];

    /// `inout[i] = in[i] op inout[i]` for `len` elements.
    ///
    /// # Safety
    /// MPI passes valid buffers of `*len` elements of the type's width.
    // Inlined into each user function so that `dt` and `op` are constants
    // there and the per-element reduction specializes.
    #[inline(always)]
    unsafe fn apply(
        dt: DataType,
        op: ReduceOp,
        invec: *mut c_void,
        inout: *mut c_void,
        len: *mut c_int,
    ) {
        let ws = dt.size();
        // SAFETY: per the contract, both buffers hold *len elements.
        let (a, b) = unsafe {
            let n = (*len).max(0) as usize * ws;
            (
                std::slice::from_raw_parts(invec as *const u8, n),
                std::slice::from_raw_parts_mut(inout as *mut u8, n),
            )
        };
        for (x, y) in a.chunks_exact(ws).zip(b.chunks_exact_mut(ws)) {
            let (mut u, mut v) = ([0u8; 8], [0u8; 8]);
            u[..ws].copy_from_slice(x);
            v[..ws].copy_from_slice(y);
            let r = combine(dt, op, u64::from_le_bytes(u), u64::from_le_bytes(v));
            y.copy_from_slice(&r.to_le_bytes()[..ws]);
        }
    }

    macro_rules! user_fn {
        ($name:ident, $t:expr, $o:expr) => {
            unsafe extern "C" fn $name(
                a: *mut c_void,
                b: *mut c_void,
                len: *mut c_int,
                _dt: *mut ffi::MPI_Datatype,
            ) {
                // SAFETY: called by MPI with valid buffers of *len elements.
                unsafe { apply(TYPES[$t], OPS[$o], a, b, len) }
            }
        };
    }
    user_fn!(f00, 0, 0);
    user_fn!(f01, 0, 1);
    user_fn!(f02, 0, 2);
    user_fn!(f03, 0, 3);
    user_fn!(f10, 1, 0);
    user_fn!(f11, 1, 1);
    user_fn!(f12, 1, 2);
    user_fn!(f13, 1, 3);
    user_fn!(f20, 2, 0);
    user_fn!(f21, 2, 1);
    user_fn!(f22, 2, 2);
    user_fn!(f23, 2, 3);
    user_fn!(f30, 3, 0);
    user_fn!(f31, 3, 1);
    user_fn!(f32, 3, 2);
    user_fn!(f33, 3, 3);
    user_fn!(f40, 4, 0);
    user_fn!(f41, 4, 1);
    user_fn!(f42, 4, 2);
    user_fn!(f43, 4, 3);
    user_fn!(f50, 5, 0);
    user_fn!(f51, 5, 1);
    user_fn!(f52, 5, 2);
    user_fn!(f53, 5, 3);

    type UserFn =
        unsafe extern "C" fn(*mut c_void, *mut c_void, *mut c_int, *mut ffi::MPI_Datatype);
    const FNS: [UserFn; 24] = [
        f00, f01, f02, f03, f10, f11, f12, f13, f20, f21, f22, f23, f30, f31, f32, f33, f40, f41,
        f42, f43, f50, f51, f52, f53,
    ];

    /// Creates the ops.
    ///
    /// # Safety
    /// MPI must be initialized and the MPI lock held.
    pub unsafe fn create() -> TestResult<Ops> {
        // SAFETY: zeroed handles are overwritten by MPI_Op_create.
        let mut ops: [ffi::MPI_Op; 24] = unsafe { std::mem::zeroed() };
        for (k, f) in FNS.iter().enumerate() {
            // SAFETY: f has the MPI_User_function signature; ops[k] is valid.
            check(
                unsafe { ffi::MPI_Op_create(Some(*f), 1, &mut ops[k]) },
                "MPI_Op_create",
            )?;
        }
        Ok(Ops(ops))
    }

    impl Ops {
        /// The op for a small float type and a base op.
        pub fn get(&self, dt: DataType, op: ReduceOp) -> ffi::MPI_Op {
            let t = TYPES.iter().position(|&x| x == dt).unwrap_or(0);
            let o = OPS.iter().position(|&x| x == op).unwrap_or(0);
            self.0[t * 4 + o]
        }
    }
}
