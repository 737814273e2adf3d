//! The MPI bootstrap (feature `mpi`): MPI_COMM_WORLD, as nccl-tests uses
//! it under mpirun. Raw MPI calls through the `mpi` crate's FFI, since the
//! harness exchanges untyped bytes.

use std::os::raw::c_int;
use std::sync::{Arc, Mutex, MutexGuard};

use mpi::ffi;

use super::Bootstrap;
use crate::nccltests::errors::{TestError, TestResult};

/// Serializes every MPI call of this process: MPI is initialized with
/// MPI_THREAD_MULTIPLE when available, but only SERIALIZED is required.
static MPI_LOCK: Mutex<()> = Mutex::new(());

/// Takes the process-wide MPI lock.
pub fn lock() -> MutexGuard<'static, ()> {
    MPI_LOCK.lock().unwrap_or_else(|p| p.into_inner())
}

/// A communicator used as a bootstrap.
pub struct Mpi {
    comm: ffi::MPI_Comm,
    rank: usize,
    size: usize,
    /// The thread support MPI granted.
    pub thread_level: c_int,
}

// SAFETY: an MPI communicator handle is a process-wide object usable from
// any thread; every call through it takes MPI_LOCK, so calls never overlap
// (MPI_THREAD_SERIALIZED semantics, checked at init).
unsafe impl Send for Mpi {}
// SAFETY: see Send; shared references only make locked MPI calls.
unsafe impl Sync for Mpi {}

/// `Ok` for MPI_SUCCESS; otherwise an MPI failure naming `call`.
pub fn check(rc: c_int, call: &str) -> TestResult<()> {
    if rc == 0 {
        Ok(())
    } else {
        Err(TestError::comm("MPI", call, format!("error code {rc}")))
    }
}

impl Mpi {
    /// `MPI_Init_thread` (unless already initialized) and MPI_COMM_WORLD.
    pub fn init() -> TestResult<Mpi> {
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
            Self::wrap(ffi::RSMPI_COMM_WORLD, provided)
        }
    }

    /// # Safety
    /// `comm` must be a valid communicator and MPI_LOCK held.
    unsafe fn wrap(comm: ffi::MPI_Comm, thread_level: c_int) -> TestResult<Mpi> {
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
            return Ok(Vec::new());
        }
        let n = c_int::try_from(mine.len())
            .map_err(|_| TestError::Internal("MPI bootstrap: message too large".into()))?;
        let mut out = vec![0u8; mine.len() * self.size];
        let _g = lock();
        // SAFETY: `mine` holds n bytes and `out` n*size bytes, matching the
        // counts passed; the communicator is valid and the lock is held.
        let rc = unsafe {
            ffi::MPI_Allgather(
                mine.as_ptr().cast(),
                n,
                ffi::RSMPI_UINT8_T,
                out.as_mut_ptr().cast(),
                n,
                ffi::RSMPI_UINT8_T,
                self.comm,
            )
        };
        check(rc, "MPI_Allgather")?;
        Ok(out)
    }
    fn barrier(&self) -> TestResult<()> {
        let _g = lock();
        // SAFETY: valid communicator, lock held.
        check(unsafe { ffi::MPI_Barrier(self.comm) }, "MPI_Barrier")
    }
    fn dup(&self) -> TestResult<Arc<dyn Bootstrap>> {
        let _g = lock();
        // SAFETY: MPI_Comm_dup writes a new handle into `c`; lock held.
        unsafe {
            let mut c: ffi::MPI_Comm = std::mem::zeroed();
            check(ffi::MPI_Comm_dup(self.comm, &mut c), "MPI_Comm_dup")?;
            Ok(Arc::new(Self::wrap(c, self.thread_level)?))
        }
    }
    fn split(&self, color: i32) -> TestResult<Arc<dyn Bootstrap>> {
        let _g = lock();
        // SAFETY: MPI_Comm_split writes a new handle into `c`; lock held.
        unsafe {
            let mut c: ffi::MPI_Comm = std::mem::zeroed();
            check(
                ffi::MPI_Comm_split(self.comm, color, self.rank as c_int, &mut c),
                "MPI_Comm_split",
            )?;
            Ok(Arc::new(Self::wrap(c, self.thread_level)?))
        }
    }
    fn abort(&self, code: i32) -> ! {
        // No lock: another thread may be blocked inside MPI holding it, and
        // MPI_Abort is allowed from any thread to end the job.
        // SAFETY: MPI is initialized; MPI_Abort does not return normally.
        unsafe {
            ffi::MPI_Abort(ffi::RSMPI_COMM_WORLD, code);
        }
        std::process::exit(code)
    }
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
