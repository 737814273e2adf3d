//! Waiting for enqueued NCCL work with a deadline: nccl-tests' `testStreamSynchronize`
//! (poll `cuStreamQuery` and `ncclCommGetAsyncError`; abort on error or timeout).

use std::time::{Duration, Instant};

use super::comm::{Comm, abort_all};
use super::error::{NcclError, PendingRank, Result};
use crate::cuda::Stream;

/// Waits until every stream in `work` has finished, checking each communicator for
/// asynchronous NCCL errors meanwhile. When NCCL reports an error, or `timeout` passes
/// first, every communicator in `work` is aborted (so stuck kernels exit) and the error or
/// [`NcclError::Timeout`] naming the unfinished ranks is returned. `None` waits without a
/// limit but still returns NCCL errors. A CUDA error on a stream is returned as is.
///
/// As nccl-tests does, the limit applies to this wait; the abort itself may take longer
/// when work that is not NCCL's blocks the GPU (see [`Comm::abort`]).
pub fn wait_all(work: &[(&Comm, &Stream)], timeout: Option<Duration>) -> Result<()> {
    let start = Instant::now();
    let mut done = vec![false; work.len()];
    let mut remaining = work.len();
    while remaining > 0 {
        let mut idle = true;
        for (i, (comm, stream)) in work.iter().enumerate() {
            if done[i] {
                continue;
            }
            if stream.query()? {
                done[i] = true;
                remaining -= 1;
                idle = false;
                continue;
            }
            if let Err(e) = comm.async_error() {
                abort_work(work);
                return Err(e);
            }
        }
        if remaining == 0 {
            break;
        }
        if let Some(limit) = timeout
            && start.elapsed() > limit
        {
            let pending = work
                .iter()
                .zip(&done)
                .filter(|(_, d)| !**d)
                .map(|((c, _), _)| PendingRank {
                    rank: c.rank(),
                    device: c.device().ordinal(),
                })
                .collect();
            abort_work(work);
            return Err(NcclError::Timeout {
                operation: "NCCL operation".into(),
                after: limit,
                pending,
                aborted: true,
            });
        }
        if idle {
            // Leave the CPU to NCCL's proxy threads, as nccl-tests does.
            std::thread::yield_now();
        }
    }
    Ok(())
}

fn abort_work(work: &[(&Comm, &Stream)]) {
    let comms: Vec<&Comm> = work.iter().map(|(c, _)| *c).collect();
    abort_all(&comms);
}

impl Comm {
    /// Waits for `stream` with a deadline, like [`wait_all`] for one rank.
    pub fn wait(&self, stream: &Stream, timeout: Option<Duration>) -> Result<()> {
        wait_all(&[(self, stream)], timeout)
    }
}
