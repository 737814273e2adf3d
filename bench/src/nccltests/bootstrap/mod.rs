//! How the processes of a run find each other and exchange small messages
//! (the unique id, device lines, per-size times, error counts).
//!
//! [`Bootstrap`] has three implementations: [`single::Single`] (one
//! process), [`tcp::Tcp`] (rank 0 listens at MASTER_ADDR:MASTER_PORT, ranks
//! from RANK/WORLD_SIZE, Slurm or Open MPI variables) and, with the `mpi`
//! feature, [`mpi::Mpi`] (MPI_COMM_WORLD, as nccl-tests under mpirun).

pub mod env;
pub mod hosthash;
#[cfg(feature = "mpi")]
pub mod mpi;
pub mod rendezvous;
pub mod single;
pub mod tcp;
pub mod wire;

use std::sync::Arc;
use std::time::Duration;

use super::errors::{TestError, TestResult};
use super::options::{BackendKind, BootstrapKind, Options};

/// How per-rank values are combined (`-a`, and sums of wrong elements).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Combine {
    /// Sum.
    Sum,
    /// Minimum.
    Min,
    /// Maximum.
    Max,
}

/// One process's answer in the timeout census ([`Bootstrap::census`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Answer {
    /// It answered with this notice.
    Said(Vec<u8>),
    /// It did not answer in time (stopped, hung or gone).
    Silent,
    /// This process cannot tell (the TCP star: a rank other than 0 hears
    /// only from rank 0).
    Unknown,
}

/// Process-level collectives used by the harness. Calls must be made in the
/// same order by every process; implementations serialize concurrent
/// callers.
pub trait Bootstrap: Send + Sync {
    /// This process's index.
    fn rank(&self) -> usize;
    /// Number of processes.
    fn size(&self) -> usize;
    /// What this is ("MPI", "TCP", "single").
    fn name(&self) -> &'static str;
    /// Every process's `mine` (equal lengths), concatenated in rank order.
    fn allgather(&self, mine: &[u8]) -> TestResult<Vec<u8>>;
    /// [`Bootstrap::allgather`] into `out` (its length set to the
    /// result's), for a caller that exchanges often and reuses `out`'s
    /// memory: no fresh zeroed buffer per exchange (the host backend's
    /// windows).
    fn allgather_into(&self, mine: &[u8], out: &mut Vec<u8>) -> TestResult<()> {
        *out = self.allgather(mine)?;
        Ok(())
    }
    /// Waits for every process.
    fn barrier(&self) -> TestResult<()> {
        self.allgather(&[]).map(|_| ())
    }
    /// A second, independent channel between the same processes (for a
    /// backend that moves data through the bootstrap), so its messages never
    /// interleave with the harness's.
    fn dup(&self) -> TestResult<Arc<dyn Bootstrap>>;
    /// The sub-group of processes with the same `color`, ordered by rank
    /// (`MPI_Comm_split`), for NCCL_TESTS_SPLIT with host-memory backends.
    fn split(&self, color: i32) -> TestResult<Arc<dyn Bootstrap>>;
    /// Ends the whole job after the fatal error `e`, with its exit status
    /// (`MPI_Abort` under MPI; over TCP every process is told why).
    fn abort(&self, e: &TestError) -> !;
    /// Ranks whose connection to this process is known to be closed,
    /// checked without blocking, to name the rank that died when a
    /// collective library only reports that "a peer" did (NCCL's
    /// ncclRemoteError). Empty when the transport cannot tell (MPI: the
    /// launcher names the dead rank itself).
    fn lost_peers(&self) -> Vec<usize> {
        Vec::new()
    }
    /// The timeout census (see [`crate::nccltests::census`]): sends `mine`
    /// to every process of the job and waits up to `window` for theirs.
    /// Returns one answer per process (this one's is `mine`).
    fn census(&self, mine: &[u8], _window: Duration) -> Vec<Answer> {
        (0..self.size())
            .map(|p| {
                if p == self.rank() {
                    Answer::Said(mine.to_vec())
                } else {
                    Answer::Unknown
                }
            })
            .collect()
    }
    /// Without blocking: an event from a peer that must end this
    /// process's waits - another process started the census (a
    /// [`TestError::Timeout`] to join), or failed and said why.
    fn peer_event(&self) -> Option<TestError> {
        None
    }
}

/// Combines one f64 per process.
pub fn allreduce_f64(b: &dyn Bootstrap, v: f64, op: Combine) -> TestResult<f64> {
    allreduce_f64_among(b, v, op, None)
}

/// [`allreduce_f64`] of the processes `among` marks (index = process;
/// None: all). Every process takes part in the exchange; each combines
/// only its group's values (erdma-cluster's host stage: each host's own
/// time, not the whole cluster's mean).
pub fn allreduce_f64_among(
    b: &dyn Bootstrap,
    v: f64,
    op: Combine,
    among: Option<&[bool]>,
) -> TestResult<f64> {
    let vals = gathered(b, v.to_le_bytes(), among)?
        .into_iter()
        .map(f64::from_le_bytes);
    Ok(match op {
        Combine::Sum => vals.sum(),
        Combine::Min => vals.fold(f64::INFINITY, f64::min),
        Combine::Max => vals.fold(f64::NEG_INFINITY, f64::max),
    })
}

/// Combines one i64 per process.
pub fn allreduce_i64(b: &dyn Bootstrap, v: i64, op: Combine) -> TestResult<i64> {
    allreduce_i64_among(b, v, op, None)
}

/// [`allreduce_i64`] of the processes `among` marks (None: all).
pub fn allreduce_i64_among(
    b: &dyn Bootstrap,
    v: i64,
    op: Combine,
    among: Option<&[bool]>,
) -> TestResult<i64> {
    let vals = gathered(b, v.to_le_bytes(), among)?
        .into_iter()
        .map(i64::from_le_bytes);
    Ok(match op {
        Combine::Sum => vals.fold(0i64, i64::wrapping_add),
        Combine::Min => vals.min().unwrap_or(v),
        Combine::Max => vals.max().unwrap_or(v),
    })
}

/// Every process's 8 bytes, those of the processes `among` marks (None:
/// all), in process order.
fn gathered(b: &dyn Bootstrap, mine: [u8; 8], among: Option<&[bool]>) -> TestResult<Vec<[u8; 8]>> {
    let all = b.allgather(&mine)?;
    Ok(all
        .chunks_exact(8)
        .enumerate()
        .filter(|(i, _)| among.is_none_or(|m| m.get(*i) == Some(&true)))
        .map(|(_, c)| c.try_into().unwrap_or([0; 8]))
        .collect())
}

/// Allgather of variable-length byte strings.
pub fn allgather_var(b: &dyn Bootstrap, mine: &[u8]) -> TestResult<Vec<Vec<u8>>> {
    let lens = b.allgather(&(mine.len() as u64).to_le_bytes())?;
    let lens: Vec<usize> = lens
        .chunks_exact(8)
        .map(|c| u64::from_le_bytes(c.try_into().unwrap_or([0; 8])) as usize)
        .collect();
    let max = lens.iter().copied().max().unwrap_or(0);
    let mut padded = super::alloc::zeroed(max, "a bootstrap exchange")?;
    padded[..mine.len()].copy_from_slice(mine);
    let all = b.allgather(&padded)?;
    Ok(lens
        .iter()
        .enumerate()
        .map(|(i, &n)| all[i * max..i * max + n].to_vec())
        .collect())
}

/// What the launcher gave this process.
pub struct Launch {
    /// The harness's bootstrap.
    pub boot: Arc<dyn Bootstrap>,
    /// LOCAL_RANK (or the Slurm/Open MPI equivalent) when the launcher set
    /// one; otherwise the local rank is derived from host hashes.
    pub local_rank_hint: Option<usize>,
}

/// Whether an MPI launcher started this process.
pub fn launched_by_mpi() -> bool {
    [
        "OMPI_COMM_WORLD_SIZE",
        "PMI_SIZE",
        "PMIX_RANK",
        "MPI_LOCALNRANKS",
    ]
    .iter()
    .any(|v| std::env::var_os(v).is_some())
}

/// Chooses and starts the bootstrap for `o.bootstrap` (see
/// [`BootstrapKind::Auto`]). `timeout_s` bounds the TCP rendezvous.
pub fn start(o: &Options) -> TestResult<Launch> {
    let kind = match o.bootstrap {
        BootstrapKind::Auto if o.backend == BackendKind::Mpi => BootstrapKind::Mpi,
        BootstrapKind::Auto if cfg!(feature = "mpi") && launched_by_mpi() => BootstrapKind::Mpi,
        BootstrapKind::Auto if env::detect().is_some() => BootstrapKind::Tcp,
        BootstrapKind::Auto => BootstrapKind::None,
        k => k,
    };
    match kind {
        BootstrapKind::Mpi => start_mpi(o.timeout),
        BootstrapKind::Tcp => {
            let e = env::detect().ok_or_else(|| {
                TestError::InvalidUsage(
                    "--bootstrap tcp needs RANK and WORLD_SIZE (or SLURM_PROCID/SLURM_NTASKS, OMPI_COMM_WORLD_RANK/OMPI_COMM_WORLD_SIZE)".into(),
                )
            })??;
            let local = e.local_rank;
            let boot = tcp::Tcp::connect(&e, o.timeout)?;
            Ok(Launch {
                boot: Arc::new(boot),
                local_rank_hint: local,
            })
        }
        _ => Ok(Launch {
            boot: Arc::new(single::Single),
            local_rank_hint: None,
        }),
    }
}

#[cfg(feature = "mpi")]
fn start_mpi(timeout_s: i32) -> TestResult<Launch> {
    let boot = mpi::Mpi::init(timeout_s)?;
    env_agrees(
        boot.rank(),
        boot.size(),
        env::rank_and_size(&|k| std::env::var(k).ok()),
    )?;
    Ok(Launch {
        boot: Arc::new(boot),
        local_rank_hint: None,
    })
}

/// RANK/WORLD_SIZE, when set, must say what MPI says: both set without
/// mpirun leave every process a silent job of one.
pub fn env_agrees(
    rank: usize,
    size: usize,
    env: Option<TestResult<(usize, usize)>>,
) -> TestResult<()> {
    match env {
        Some(Err(e)) => Err(e),
        Some(Ok((r, s))) if (r, s) != (rank, size) => Err(TestError::InvalidUsage(format!(
            "the environment says rank {r} of {s} (RANK/WORLD_SIZE) but MPI says rank {rank} of {size}: start the processes with mpirun (and unset RANK/WORLD_SIZE), or use --backend host with RANK/WORLD_SIZE"
        ))),
        _ => Ok(()),
    }
}

#[cfg(not(feature = "mpi"))]
fn start_mpi(_timeout_s: i32) -> TestResult<Launch> {
    Err(TestError::NotImplemented(
        "this binary was built without MPI (cargo feature `mpi`): use --bootstrap tcp with RANK/WORLD_SIZE/MASTER_ADDR/MASTER_PORT, or rebuild with --features mpi".into(),
    ))
}

#[cfg(test)]
mod among_tests {
    use super::*;

    /// Three processes whose values are fixed: process 0 answers for all.
    struct Three([f64; 3]);

    impl Bootstrap for Three {
        fn rank(&self) -> usize {
            0
        }
        fn size(&self) -> usize {
            3
        }
        fn name(&self) -> &'static str {
            "three"
        }
        fn allgather(&self, _mine: &[u8]) -> TestResult<Vec<u8>> {
            Ok(self.0.iter().flat_map(|v| v.to_le_bytes()).collect())
        }
        fn dup(&self) -> TestResult<Arc<dyn Bootstrap>> {
            Ok(Arc::new(Three(self.0)))
        }
        fn split(&self, _color: i32) -> TestResult<Arc<dyn Bootstrap>> {
            Ok(Arc::new(Three(self.0)))
        }
        fn abort(&self, e: &TestError) -> ! {
            std::process::exit(e.exit_code())
        }
    }

    #[test]
    fn a_group_combines_its_own_values_only() {
        let b = Three([1.0, 10.0, 100.0]);
        assert_eq!(allreduce_f64(&b, 0.0, Combine::Sum).unwrap(), 111.0);
        let g = [true, false, true];
        assert_eq!(
            allreduce_f64_among(&b, 0.0, Combine::Sum, Some(&g)).unwrap(),
            101.0
        );
        assert_eq!(
            allreduce_f64_among(&b, 0.0, Combine::Max, Some(&[false, true, false])).unwrap(),
            10.0
        );
        let i = Three([f64::from_le_bytes(3i64.to_le_bytes()); 3]);
        assert_eq!(
            allreduce_i64_among(&i, 0, Combine::Sum, Some(&g)).unwrap(),
            6
        );
    }
}
