//! The MPI bootstrap (feature `mpi`): MPI_COMM_WORLD, as nccl-tests uses
//! it under mpirun. Raw MPI calls through the `mpi` crate's FFI, since the
//! harness exchanges untyped bytes.
//!
//! Every exchange is a nonblocking MPI call polled against `-T` (and
//! [`job::check`]), never a blocking one that a stopped peer could hold
//! forever; MPI returns its errors (MPI_ERRORS_RETURN) so that they are
//! reported and mapped to a status like every other failure; and the
//! timeout census travels as point-to-point messages on MPI_COMM_WORLD.

use std::os::raw::{c_char, c_int};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use mpi::ffi;

use super::{Answer, Bootstrap};
use crate::nccltests::census::MAX_NOTICE;
use crate::nccltests::errors::{TestError, TestResult};
use crate::nccltests::job;

/// Serializes every MPI call of this process: MPI is initialized with
/// MPI_THREAD_MULTIPLE when available, but only SERIALIZED is required.
static MPI_LOCK: Mutex<()> = Mutex::new(());

/// The tag of the timeout census's messages on MPI_COMM_WORLD (the
/// harness uses only collectives there, which never match point-to-point
/// messages).
const CENSUS_TAG: c_int = 0x4e43;

/// Takes the process-wide MPI lock.
pub fn lock() -> MutexGuard<'static, ()> {
    MPI_LOCK.lock().unwrap_or_else(|p| p.into_inner())
}

/// The calls on MPI_COMM_WORLD that the point-to-point exchanges (the
/// census, [`P2p`]) and the waits share. Each takes the guard of
/// [`lock`] as proof that no other thread is inside MPI.
mod world_calls {
    use std::os::raw::c_int;
    use std::sync::MutexGuard;

    use mpi::ffi;

    /// The byte count of a message from `from` (or MPI_ANY_SOURCE) with
    /// `tag` that has arrived and is not yet received (MPI_Iprobe: never
    /// waits); MPI's error code if the probe fails.
    pub fn probe(
        _lock: &MutexGuard<'_, ()>,
        from: c_int,
        tag: c_int,
    ) -> Result<Option<c_int>, c_int> {
        let mut flag: c_int = 0;
        // SAFETY: a zeroed status is plain data that MPI_Iprobe overwrites.
        let mut status: ffi::MPI_Status = unsafe { std::mem::zeroed() };
        // SAFETY: MPI is initialized (MPI_COMM_WORLD is used only after
        // Mpi::init); the lock is held; Iprobe writes `flag` and `status`.
        let rc =
            unsafe { ffi::MPI_Iprobe(from, tag, ffi::RSMPI_COMM_WORLD, &mut flag, &mut status) };
        if rc != 0 {
            return Err(rc);
        }
        if flag == 0 {
            return Ok(None);
        }
        let mut count: c_int = 0;
        // SAFETY: `status` describes the probed message.
        unsafe { ffi::MPI_Get_count(&status, ffi::RSMPI_UINT8_T, &mut count) };
        Ok(Some(count.max(0)))
    }

    /// Sends `buf` to `to` with `tag` without waiting (MPI_Isend): the
    /// request, or MPI's error code.
    ///
    /// # Safety
    /// `buf` must stay allocated and unchanged until the request completes
    /// (or for ever, if nobody tests it).
    pub unsafe fn isend(
        _lock: &MutexGuard<'_, ()>,
        buf: &[u8],
        to: c_int,
        tag: c_int,
    ) -> Result<ffi::MPI_Request, c_int> {
        let n = c_int::try_from(buf.len()).map_err(|_| ffi::MPI_ERR_COUNT as c_int)?;
        // SAFETY: MPI_REQUEST_NULL is a constant handle.
        let mut req = unsafe { ffi::RSMPI_REQUEST_NULL };
        // SAFETY: `buf` holds n bytes and outlives the request (the
        // caller's contract); MPI reads it only; MPI initialized; lock held.
        let rc = unsafe {
            ffi::MPI_Isend(
                buf.as_ptr() as *mut _,
                n,
                ffi::RSMPI_UINT8_T,
                to,
                tag,
                ffi::RSMPI_COMM_WORLD,
                &mut req,
            )
        };
        if rc == 0 { Ok(req) } else { Err(rc) }
    }

    /// Whether `req` completed (MPI_Test; MPI then sets it to
    /// MPI_REQUEST_NULL), or MPI's error code.
    ///
    /// # Safety
    /// `req` is MPI_REQUEST_NULL or a request of this process whose
    /// buffers are still allocated.
    pub unsafe fn test(
        _lock: &MutexGuard<'_, ()>,
        req: &mut ffi::MPI_Request,
    ) -> Result<bool, c_int> {
        let mut flag: c_int = 0;
        // SAFETY: per the contract; lock held.
        let rc = unsafe { ffi::MPI_Test(req, &mut flag, ffi::RSMPI_STATUS_IGNORE) };
        if rc == 0 { Ok(flag != 0) } else { Err(rc) }
    }
}

/// A communicator used as a bootstrap.
pub struct Mpi {
    comm: ffi::MPI_Comm,
    rank: usize,
    size: usize,
    /// The thread support MPI granted.
    pub thread_level: c_int,
    timeout: Option<Duration>,
}

// SAFETY: an MPI communicator handle is a process-wide object usable from
// any thread; every call through it takes MPI_LOCK, so calls never overlap
// (MPI_THREAD_SERIALIZED semantics, checked at init).
unsafe impl Send for Mpi {}
// SAFETY: see Send; shared references only make locked MPI calls.
unsafe impl Sync for Mpi {}

/// MPI's text for an error code ("MPI_ERR_TRUNCATE: message truncated").
pub fn error_text(rc: c_int) -> String {
    let mut buf = [0 as c_char; ffi::MPI_MAX_ERROR_STRING as usize + 1];
    let mut len: c_int = 0;
    // SAFETY: `buf` holds MPI_MAX_ERROR_STRING + 1 chars, as MPI_Error_string
    // requires; it writes `len` chars and a NUL.
    let ok = unsafe { ffi::MPI_Error_string(rc, buf.as_mut_ptr(), &mut len) } == 0;
    if !ok || len <= 0 {
        return format!("error code {rc}");
    }
    let bytes: Vec<u8> = buf[..len.min(buf.len() as c_int - 1) as usize]
        .iter()
        .map(|&c| c as u8)
        .collect();
    String::from_utf8_lossy(&bytes).into_owned()
}

fn error_class(rc: c_int) -> c_int {
    let mut class: c_int = rc;
    // SAFETY: MPI_Error_class writes one int.
    unsafe { ffi::MPI_Error_class(rc, &mut class) };
    class
}

/// `Ok` for MPI_SUCCESS; otherwise an MPI failure naming `call` and MPI's
/// error text (exit 3). MPI_ERR_TRUNCATE - a message longer than its
/// receive buffer - means the ranks passed different sizes: exit 6.
pub fn check(rc: c_int, call: &str) -> TestResult<()> {
    if rc == 0 {
        return Ok(());
    }
    let text = error_text(rc);
    if error_class(rc) == ffi::MPI_ERR_TRUNCATE as c_int {
        return Err(TestError::InvalidUsage(format!(
            "Test MPI failure {call} '{text}': the ranks passed different sizes (were they started with the same options?)"
        )));
    }
    Err(TestError::comm("MPI", call, text))
}

/// Makes MPI return errors on `comm` instead of aborting the job, so they
/// are reported like every other failure.
///
/// # Safety
/// `comm` must be a valid communicator and MPI_LOCK held.
pub unsafe fn errors_return(comm: ffi::MPI_Comm) -> TestResult<()> {
    // SAFETY: per the contract; RSMPI_ERRORS_RETURN is MPI's predefined handler.
    check(
        unsafe { ffi::MPI_Comm_set_errhandler(comm, ffi::RSMPI_ERRORS_RETURN) },
        "MPI_Comm_set_errhandler",
    )
}

/// The thread support level of the initialized MPI library.
pub fn thread_level() -> c_int {
    let _g = lock();
    let mut provided: c_int = 0;
    // SAFETY: MPI_Query_thread writes one int (MPI is initialized: the MPI
    // bootstrap is in use).
    unsafe { ffi::MPI_Query_thread(&mut provided) };
    provided
}

/// Whether threads may call MPI one at a time (SERIALIZED or better).
pub fn serialized_ok() -> bool {
    // SAFETY: reading a constant exported by the MPI library.
    thread_level() >= unsafe { ffi::RSMPI_THREAD_SERIALIZED }
}

impl Mpi {
    /// `MPI_Init_thread` (unless already initialized) and MPI_COMM_WORLD,
    /// with errors returned rather than fatal. `timeout_s` (<= 0: none)
    /// bounds every exchange.
    pub fn init(timeout_s: i32) -> TestResult<Mpi> {
        let _g = lock();
        let mut provided: c_int = 0;
        // SAFETY: MPI_Initialized/MPI_Init_thread accept null argc/argv and
        // write only to the provided ints; MPI_LOCK is held.
        unsafe {
            let mut inited: c_int = 0;
            ffi::MPI_Initialized(&mut inited);
            if inited == 0 {
                check(
                    ffi::MPI_Init_thread(
                        std::ptr::null_mut(),
                        std::ptr::null_mut(),
                        ffi::RSMPI_THREAD_MULTIPLE,
                        &mut provided,
                    ),
                    "MPI_Init_thread",
                )?;
            } else {
                ffi::MPI_Query_thread(&mut provided);
            }
            errors_return(ffi::RSMPI_COMM_WORLD)?;
            let timeout = (timeout_s > 0).then(|| Duration::from_secs(timeout_s as u64));
            Self::wrap(ffi::RSMPI_COMM_WORLD, provided, timeout)
        }
    }

    /// # Safety
    /// `comm` must be a valid communicator and MPI_LOCK held.
    unsafe fn wrap(
        comm: ffi::MPI_Comm,
        thread_level: c_int,
        timeout: Option<Duration>,
    ) -> TestResult<Mpi> {
        let (mut rank, mut size) = (0, 0);
        // SAFETY: the caller guarantees `comm` is valid.
        unsafe {
            check(ffi::MPI_Comm_rank(comm, &mut rank), "MPI_Comm_rank")?;
            check(ffi::MPI_Comm_size(comm, &mut size), "MPI_Comm_size")?;
        }
        Ok(Mpi {
            comm,
            rank: rank as usize,
            size: size as usize,
            thread_level,
            timeout,
        })
    }

    /// Whether threads may call MPI one at a time (SERIALIZED or better).
    pub fn serialized_ok(&self) -> bool {
        // SAFETY: reading constants exported by the MPI library.
        self.thread_level >= unsafe { ffi::RSMPI_THREAD_SERIALIZED }
    }

    /// The raw communicator (for the MPI backend).
    pub fn raw(&self) -> ffi::MPI_Comm {
        self.comm
    }

    /// Polls `req` until it completes, `-T` passes (a timeout, which the
    /// census then explains) or the process must stop. On an error the
    /// request stays posted: its buffers must then never be freed.
    fn wait(&self, req: &mut ffi::MPI_Request, what: &str) -> TestResult<()> {
        let start = Instant::now();
        loop {
            let done = {
                let g = lock();
                // SAFETY: `req` is a request from a nonblocking call on this
                // communicator, whose buffers the caller keeps.
                unsafe { world_calls::test(&g, req) }
            };
            match done {
                Ok(true) => return Ok(()),
                Ok(false) => {}
                Err(rc) => check(rc, what)?,
            }
            job::check()?;
            if self.timeout.is_some_and(|t| start.elapsed() > t) {
                return Err(TestError::Timeout {
                    secs: self.timeout.map_or(0, |t| t.as_secs() as i32),
                    detail: format!("rank {} waited for the other ranks in {what}", self.rank),
                });
            }
            std::thread::yield_now();
        }
    }

    /// MPI_COMM_WORLD with `-T` for its waits (for the MPI backend, whose
    /// communicators are made from it).
    pub fn world(timeout_s: i32) -> TestResult<Mpi> {
        let _g = lock();
        let timeout = (timeout_s > 0).then(|| Duration::from_secs(timeout_s as u64));
        let mut provided: c_int = 0;
        // SAFETY: MPI is initialized (an MPI launch); lock held.
        unsafe {
            ffi::MPI_Query_thread(&mut provided);
            Self::wrap(ffi::RSMPI_COMM_WORLD, provided, timeout)
        }
    }

    /// A duplicate of this communicator (MPI_Comm_idup, bounded by -T),
    /// returning MPI's errors.
    pub fn dup_raw(&self) -> TestResult<ffi::MPI_Comm> {
        // MPI_Comm_idup writes the new handle when it completes, which after
        // a timeout may be never or later: the slot is leaked (one handle),
        // never freed under MPI.
        // SAFETY: a zeroed handle is plain data that MPI overwrites.
        let c: &'static mut ffi::MPI_Comm = Box::leak(Box::new(unsafe { std::mem::zeroed() }));
        // SAFETY: MPI_REQUEST_NULL is a constant handle.
        let mut req = unsafe { ffi::RSMPI_REQUEST_NULL };
        {
            let _g = lock();
            // SAFETY: valid communicator, lock held; `c` lives forever.
            check(
                unsafe { ffi::MPI_Comm_idup(self.comm, &mut *c, &mut req) },
                "MPI_Comm_idup",
            )?;
        }
        self.wait(&mut req, "creating a communicator (MPI_Comm_idup)")?;
        let c = *c;
        let _g = lock();
        // SAFETY: `c` is the new communicator; lock held.
        unsafe { errors_return(c)? };
        Ok(c)
    }

    /// `MPI_Comm_split(comm, color, key)`, returning MPI's errors. It blocks
    /// and has no nonblocking form: the processes first meet under -T, so
    /// that it never waits for a stuck rank.
    pub fn split_raw(&self, color: i32, key: c_int) -> TestResult<ffi::MPI_Comm> {
        self.fence("a barrier before MPI_Comm_split")?;
        let _g = lock();
        // SAFETY: MPI_Comm_split writes a new handle into `c`; lock held.
        unsafe {
            let mut c: ffi::MPI_Comm = std::mem::zeroed();
            check(
                ffi::MPI_Comm_split(self.comm, color, key, &mut c),
                "MPI_Comm_split",
            )?;
            errors_return(c)?;
            Ok(c)
        }
    }

    /// A bounded barrier.
    fn fence(&self, what: &str) -> TestResult<()> {
        // SAFETY: MPI_REQUEST_NULL is a constant handle.
        let mut req = unsafe { ffi::RSMPI_REQUEST_NULL };
        {
            let _g = lock();
            // SAFETY: valid communicator, lock held; `req` receives the handle.
            check(
                unsafe { ffi::MPI_Ibarrier(self.comm, &mut req) },
                "MPI_Ibarrier",
            )?;
        }
        self.wait(&mut req, what)
    }
}

impl Bootstrap for Mpi {
    fn rank(&self) -> usize {
        self.rank
    }
    fn size(&self) -> usize {
        self.size
    }
    fn name(&self) -> &'static str {
        "MPI"
    }
    fn allgather(&self, mine: &[u8]) -> TestResult<Vec<u8>> {
        if mine.is_empty() {
            // Every process passes the same length; an empty Vec's dangling
            // pointer would read as MPI_IN_PLACE ((void*)1) in Open MPI.
            return self.barrier().map(|_| Vec::new());
        }
        let n = c_int::try_from(mine.len())
            .map_err(|_| TestError::Internal("MPI bootstrap: message too large".into()))?;
        let total =
            crate::nccltests::alloc::product(mine.len(), self.size, "a bootstrap exchange")?;
        let mut out = crate::nccltests::alloc::zeroed(total, "a bootstrap exchange")?;
        // Owned: on a timeout the request stays posted and both buffers are
        // leaked rather than freed under it.
        let send = mine.to_vec();
        // SAFETY: MPI_REQUEST_NULL is a constant handle.
        let mut req = unsafe { ffi::RSMPI_REQUEST_NULL };
        {
            let _g = lock();
            // SAFETY: `send` holds n bytes and `out` n*size bytes, matching the
            // counts passed; both stay allocated until the request completes
            // (or forever, see below); valid communicator, lock held.
            let rc = unsafe {
                ffi::MPI_Iallgather(
                    send.as_ptr().cast(),
                    n,
                    ffi::RSMPI_UINT8_T,
                    out.as_mut_ptr().cast(),
                    n,
                    ffi::RSMPI_UINT8_T,
                    self.comm,
                    &mut req,
                )
            };
            check(rc, "MPI_Iallgather")?;
        }
        if let Err(e) = self.wait(&mut req, "a bootstrap exchange (MPI_Iallgather)") {
            std::mem::forget(send);
            std::mem::forget(out);
            return Err(e);
        }
        Ok(out)
    }
    fn barrier(&self) -> TestResult<()> {
        self.fence("a barrier (MPI_Ibarrier)")
    }
    fn dup(&self) -> TestResult<Arc<dyn Bootstrap>> {
        let c = self.dup_raw()?;
        let _g = lock();
        // SAFETY: `c` is a new communicator; lock held.
        unsafe { Ok(Arc::new(Self::wrap(c, self.thread_level, self.timeout)?)) }
    }
    fn split(&self, color: i32) -> TestResult<Arc<dyn Bootstrap>> {
        let c = self.split_raw(color, self.rank as c_int)?;
        let _g = lock();
        // SAFETY: `c` is a new communicator; lock held.
        unsafe { Ok(Arc::new(Self::wrap(c, self.thread_level, self.timeout)?)) }
    }
    fn abort(&self, e: &TestError) -> ! {
        // No lock: another thread may be inside MPI holding it, and
        // MPI_Abort is allowed from any thread to end the job.
        // SAFETY: MPI is initialized; MPI_Abort does not return normally.
        unsafe {
            ffi::MPI_Abort(ffi::RSMPI_COMM_WORLD, e.exit_code());
        }
        std::process::exit(e.exit_code())
    }
    fn census(&self, mine: &[u8], window: Duration) -> Vec<Answer> {
        census_world(mine, window)
    }
    fn peer_event(&self) -> Option<TestError> {
        // SAFETY: reading a constant exported by the MPI library.
        let any = unsafe { ffi::RSMPI_ANY_SOURCE };
        let notice = world_calls::probe(&lock(), any, CENSUS_TAG);
        matches!(notice, Ok(Some(_))).then(|| TestError::Timeout {
            secs: job::timeout_s(),
            detail: "another rank timed out".into(),
        })
    }
}

/// The census over MPI_COMM_WORLD: every process sends its notice to every
/// other with [`CENSUS_TAG`] and waits up to `window` for theirs. The
/// buffers of messages still in flight at the end are leaked (the process
/// is about to end), never freed under MPI.
fn census_world(mine: &[u8], window: Duration) -> Vec<Answer> {
    let (mut me, mut size): (c_int, c_int) = (0, 0);
    {
        let _g = lock();
        // SAFETY: MPI is initialized; each call writes one int.
        unsafe {
            ffi::MPI_Comm_rank(ffi::RSMPI_COMM_WORLD, &mut me);
            ffi::MPI_Comm_size(ffi::RSMPI_COMM_WORLD, &mut size);
        }
    }
    let (me, size) = (me.max(0) as usize, size.max(0) as usize);
    let mut answers = vec![Answer::Silent; size];
    if let Some(a) = answers.get_mut(me) {
        *a = Answer::Said(mine.to_vec());
    }
    let send: &'static [u8] = Box::leak(
        mine[..mine.len().min(MAX_NOTICE)]
            .to_vec()
            .into_boxed_slice(),
    );
    let Ok(bufs) = crate::nccltests::alloc::zeroed(MAX_NOTICE * size, "the timeout census") else {
        return answers
            .into_iter()
            .map(|a| match a {
                Answer::Said(b) => Answer::Said(b),
                _ => Answer::Unknown,
            })
            .collect();
    };
    let bufs: &'static mut [u8] = Box::leak(bufs.into_boxed_slice());
    // SAFETY: MPI_REQUEST_NULL is a constant handle.
    let null = unsafe { ffi::RSMPI_REQUEST_NULL };
    let mut recvs = vec![null; size];
    {
        let g = lock();
        for (p, (req, buf)) in recvs
            .iter_mut()
            .zip(bufs.chunks_mut(MAX_NOTICE))
            .enumerate()
        {
            if p == me {
                continue;
            }
            // SAFETY: `buf` (MAX_NOTICE bytes) and `send` are leaked, so they
            // outlive the requests; MPI is initialized; lock held.
            unsafe {
                ffi::MPI_Irecv(
                    buf.as_mut_ptr().cast(),
                    MAX_NOTICE as c_int,
                    ffi::RSMPI_UINT8_T,
                    p as c_int,
                    CENSUS_TAG,
                    ffi::RSMPI_COMM_WORLD,
                    req,
                );
                if let Ok(mut sreq) = world_calls::isend(&g, send, p as c_int, CENSUS_TAG) {
                    ffi::MPI_Request_free(&mut sreq);
                }
            }
        }
    }
    let until = Instant::now() + window;
    let mut left: Vec<usize> = (0..size).filter(|&p| p != me).collect();
    while !left.is_empty() && Instant::now() < until {
        left.retain(|&p| {
            let mut flag: c_int = 0;
            // SAFETY: a zeroed status is plain data MPI_Test overwrites.
            let mut status: ffi::MPI_Status = unsafe { std::mem::zeroed() };
            let _g = lock();
            // SAFETY: recvs[p] is a posted receive (or MPI_REQUEST_NULL).
            let rc = unsafe { ffi::MPI_Test(&mut recvs[p], &mut flag, &mut status) };
            if rc != 0 || flag == 0 {
                return rc == 0;
            }
            let mut count: c_int = 0;
            // SAFETY: `status` describes the completed receive.
            unsafe { ffi::MPI_Get_count(&status, ffi::RSMPI_UINT8_T, &mut count) };
            let n = (count.max(0) as usize).min(MAX_NOTICE);
            answers[p] = Answer::Said(bufs[p * MAX_NOTICE..p * MAX_NOTICE + n].to_vec());
            false
        });
        std::thread::yield_now();
    }
    answers
}

/// `MPI_Finalize` if MPI was initialized and not yet finalized.
pub fn finalize() {
    let _g = lock();
    // SAFETY: these calls only query and finalize the MPI library state.
    unsafe {
        let (mut inited, mut done) = (0, 0);
        ffi::MPI_Initialized(&mut inited);
        ffi::MPI_Finalized(&mut done);
        if inited != 0 && done == 0 {
            ffi::MPI_Finalize();
        }
    }
}

/// Point-to-point bytes on MPI_COMM_WORLD for erdma-cluster's exchanges
/// among live ranks ([`crate::cluster::live`]): nonblocking sends whose
/// buffers are kept until MPI is done with them, and receives of messages
/// already arrived (MPI_Iprobe first), so no call waits on a silent rank.
pub struct P2p {
    rank: usize,
    size: usize,
    /// How long a receive of a message already announced may take.
    timeout: Duration,
    /// Sends in flight with their buffers (a Vec's heap buffer does not
    /// move when the Vec does).
    sends: Mutex<Vec<(ffi::MPI_Request, Vec<u8>)>>,
}

// SAFETY: request handles are process-wide MPI objects; every MPI call
// through them takes MPI_LOCK, and the list itself is behind a Mutex.
unsafe impl Send for P2p {}
// SAFETY: see Send.
unsafe impl Sync for P2p {}

impl P2p {
    /// On MPI_COMM_WORLD (MPI initialized by [`Mpi::init`]); a message
    /// announced must arrive within `timeout`.
    pub fn world(m: &Mpi, timeout: Duration) -> P2p {
        P2p {
            rank: m.rank,
            size: m.size,
            timeout,
            sends: Mutex::new(Vec::new()),
        }
    }

    /// Drops the sends MPI has finished with.
    fn reap(g: &MutexGuard<'_, ()>, sends: &mut Vec<(ffi::MPI_Request, Vec<u8>)>) {
        sends.retain_mut(|(req, _)| {
            // SAFETY: `req` is a request from MPI_Isend still owned here,
            // with its buffer beside it. An error keeps it (and its buffer)
            // for the process's life.
            !matches!(unsafe { world_calls::test(g, req) }, Ok(true))
        });
    }

    fn check_peer(&self, peer: usize) -> Result<c_int, String> {
        (peer < self.size)
            .then_some(peer as c_int)
            .ok_or_else(|| format!("no rank {peer} among {}", self.size))
    }
}

impl Drop for P2p {
    fn drop(&mut self) {
        // Sends still in flight keep their buffers: MPI may still read them.
        let sends = std::mem::take(self.sends.get_mut().unwrap_or_else(|p| p.into_inner()));
        std::mem::forget(sends);
    }
}

impl crate::cluster::live::Wire for P2p {
    fn rank(&self) -> usize {
        self.rank
    }
    fn size(&self) -> usize {
        self.size
    }
    fn post(&self, to: usize, tag: i32, bytes: Vec<u8>) -> Result<(), String> {
        let to = self.check_peer(to)?;
        if c_int::try_from(bytes.len()).is_err() {
            return Err("message too large".into());
        }
        // Never a zero-length Vec's dangling pointer handed to MPI.
        let bytes = if bytes.is_empty() {
            Vec::with_capacity(1)
        } else {
            bytes
        };
        let mut sends = self.sends.lock().unwrap_or_else(|p| p.into_inner());
        let g = lock();
        // SAFETY: `bytes` is kept in `sends` (or leaked) until the request
        // completes; its heap buffer does not move with the Vec.
        let req = unsafe { world_calls::isend(&g, &bytes, to, tag) }
            .map_err(|rc| format!("MPI_Isend: {}", error_text(rc)))?;
        sends.push((req, bytes));
        Self::reap(&g, &mut sends);
        Ok(())
    }
    fn take(&self, from: usize, tag: i32) -> Result<Option<Vec<u8>>, String> {
        let from = self.check_peer(from)?;
        let g = lock();
        let Some(count) = world_calls::probe(&g, from, tag)
            .map_err(|rc| format!("MPI_Iprobe: {}", error_text(rc)))?
        else {
            return Ok(None);
        };
        // One extra byte: a zero-length Vec's dangling pointer is never
        // handed to MPI.
        let mut buf = vec![0u8; count as usize + 1];
        // SAFETY: MPI_REQUEST_NULL is a constant handle.
        let mut req = unsafe { ffi::RSMPI_REQUEST_NULL };
        // SAFETY: `buf` holds count + 1 bytes and outlives the request (it
        // is leaked below if the request does not complete); lock held.
        let rc = unsafe {
            ffi::MPI_Irecv(
                buf.as_mut_ptr().cast(),
                count,
                ffi::RSMPI_UINT8_T,
                from,
                tag,
                ffi::RSMPI_COMM_WORLD,
                &mut req,
            )
        };
        if rc != 0 {
            return Err(format!("MPI_Irecv: {}", error_text(rc)));
        }
        // The message is announced, but a large one still needs its sender
        // to move its bytes: a sender stopped half-way must not hold us.
        let until = Instant::now() + self.timeout;
        loop {
            // SAFETY: `req` is the receive posted above; `buf` lives until
            // it completes, or is leaked.
            match unsafe { world_calls::test(&g, &mut req) } {
                Ok(true) => break,
                Ok(false) if Instant::now() <= until => std::thread::yield_now(),
                Ok(false) => {
                    std::mem::forget(buf);
                    return Err("a message announced did not arrive in time".into());
                }
                Err(rc) => {
                    std::mem::forget(buf);
                    return Err(format!("MPI_Test: {}", error_text(rc)));
                }
            }
        }
        buf.truncate(count as usize);
        Ok(Some(buf))
    }
}
