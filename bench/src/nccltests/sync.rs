//! Barriers and reductions across the threads of a process and across
//! processes (nccl-tests' `Barrier`/`Allreduce`): every local thread
//! contributes, the last one to arrive does the cross-process step through
//! the bootstrap, and all leave with the result.

use std::sync::{Arc, Condvar, Mutex};

use super::bootstrap::{self, Bootstrap, Combine};
use super::errors::{TestError, TestResult};

#[derive(Default)]
struct State {
    generation: u64,
    arrived: usize,
    acc_f64: f64,
    acc_i64: i64,
    rows: Vec<f64>,
    result: Option<Result<Outcome, TestError>>,
    /// A thread failed: nobody waits for it any more.
    poisoned: bool,
}

#[derive(Clone, Default)]
struct Outcome {
    f: f64,
    i: i64,
    rows: Vec<Vec<f64>>,
}

/// The rendezvous shared by a process's threads.
pub struct ProcessSync {
    nthreads: usize,
    total_procs: usize,
    /// The processes whose values the reductions combine (None: all): see
    /// [`ProcessSync::within`].
    group: Option<Vec<bool>>,
    boot: Arc<dyn Bootstrap>,
    state: Mutex<State>,
    cond: Condvar,
}

/// `-a` modes: 0 rank 0's value, 1 mean, 2 min, 3 max.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Average {
    /// Thread 0's value in each process (nccl-tests' "dubious" mode 0).
    Rank0,
    /// Mean over every thread of every process.
    Mean,
    /// Minimum.
    Min,
    /// Maximum.
    Max,
}

impl Average {
    /// From `-a` (validated to 0..=3 by option parsing).
    pub fn from_flag(a: i32) -> Average {
        match a {
            0 => Average::Rank0,
            2 => Average::Min,
            3 => Average::Max,
            _ => Average::Mean,
        }
    }
}

enum Op<'a> {
    Barrier,
    F64(f64, Average),
    SumI64(i64),
    /// Over every process, whatever the group.
    MaxI64(i64),
    MaxRows(&'a [f64]),
}

impl ProcessSync {
    /// A rendezvous for `nthreads` local threads over `boot`.
    pub fn new(nthreads: usize, boot: Arc<dyn Bootstrap>) -> ProcessSync {
        let total_procs = boot.size();
        ProcessSync {
            nthreads,
            total_procs,
            group: None,
            boot,
            state: Mutex::new(State::default()),
            cond: Condvar::new(),
        }
    }

    /// The same rendezvous, its reductions (times, wrong elements)
    /// combining only the processes `group` marks (index = process):
    /// erdma-cluster's host stage runs every host's communicator at once
    /// and needs each host's own numbers, where nccl-tests' NCCL_TESTS_SPLIT
    /// averages over every process (kept for the work-alikes). Every
    /// process still takes part in each exchange.
    pub fn within(mut self, group: Vec<bool>) -> ProcessSync {
        self.group = Some(group);
        self
    }

    /// Processes whose values are combined.
    fn members(&self) -> usize {
        self.group
            .as_ref()
            .map_or(self.total_procs, |g| g.iter().filter(|m| **m).count())
    }

    /// `Barrier`.
    pub fn barrier(&self, thread: usize) -> TestResult<()> {
        self.rendezvous(thread, Op::Barrier).map(|_| ())
    }

    /// `Allreduce(deltaSec, average)`.
    pub fn allreduce_f64(&self, thread: usize, v: f64, avg: Average) -> TestResult<f64> {
        self.rendezvous(thread, Op::F64(v, avg)).map(|o| o.f)
    }

    /// `Allreduce(wrongElts, sum)`.
    pub fn sum_i64(&self, thread: usize, v: i64) -> TestResult<i64> {
        self.rendezvous(thread, Op::SumI64(v)).map(|o| o.i)
    }

    /// The largest `v` over every thread of every process of the run,
    /// whatever group [`ProcessSync::within`] names: a decision all the
    /// processes take together (they exchange in step).
    pub fn max_everywhere(&self, thread: usize, v: i64) -> TestResult<i64> {
        self.rendezvous(thread, Op::MaxI64(v)).map(|o| o.i)
    }

    /// `GatherProcessMaxIterTimes`: the element-wise max over threads, then
    /// one row per process (every process receives all rows).
    pub fn gather_max_rows(&self, thread: usize, row: &[f64]) -> TestResult<Vec<Vec<f64>>> {
        self.rendezvous(thread, Op::MaxRows(row)).map(|o| o.rows)
    }

    /// Releases every waiting thread with [`TestError::Cancelled`], and all
    /// later rendezvous: a thread failed and will not arrive.
    pub fn poison(&self) {
        self.state
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .poisoned = true;
        self.cond.notify_all();
    }

    fn rendezvous(&self, thread: usize, op: Op) -> TestResult<Outcome> {
        let mut st = self.state.lock().unwrap_or_else(|p| p.into_inner());
        if st.poisoned {
            return Err(TestError::Cancelled);
        }
        let generation = st.generation;
        Self::contribute(&mut st, thread, &op);
        st.arrived += 1;
        if st.arrived < self.nthreads {
            while st.generation == generation {
                if st.poisoned {
                    return Err(TestError::Cancelled);
                }
                st = self.cond.wait(st).unwrap_or_else(|p| p.into_inner());
            }
            return st
                .result
                .clone()
                .unwrap_or_else(|| Err(TestError::Internal("sync lost".into())));
        }
        // Last local thread: the cross-process step, then release everyone.
        let outcome = self.across(&st, &op);
        st.result = Some(outcome.clone());
        st.arrived = 0;
        st.rows.clear();
        st.generation += 1;
        self.cond.notify_all();
        outcome
    }

    fn contribute(st: &mut State, thread: usize, op: &Op) {
        let first = st.arrived == 0;
        match *op {
            Op::Barrier => {}
            Op::F64(v, avg) => {
                st.acc_f64 = match avg {
                    Average::Rank0 if thread == 0 => v,
                    Average::Rank0 if first => v,
                    Average::Rank0 => st.acc_f64,
                    _ if first => v,
                    Average::Mean => st.acc_f64 + v,
                    Average::Min => st.acc_f64.min(v),
                    Average::Max => st.acc_f64.max(v),
                }
            }
            Op::SumI64(v) => st.acc_i64 = if first { v } else { st.acc_i64.wrapping_add(v) },
            Op::MaxI64(v) => st.acc_i64 = if first { v } else { st.acc_i64.max(v) },
            Op::MaxRows(row) => {
                if first {
                    st.rows = row.to_vec();
                } else {
                    st.rows
                        .iter_mut()
                        .zip(row)
                        .for_each(|(a, b)| *a = a.max(*b));
                }
            }
        }
    }

    fn across(&self, st: &State, op: &Op) -> TestResult<Outcome> {
        let b = &*self.boot;
        let among = self.group.as_deref();
        let f64_of = |c| bootstrap::allreduce_f64_among(b, st.acc_f64, c, among);
        let mut o = Outcome::default();
        match *op {
            Op::Barrier => b.barrier()?,
            Op::F64(_, avg) => {
                o.f = match avg {
                    Average::Rank0 => st.acc_f64,
                    Average::Mean => {
                        f64_of(Combine::Sum)? / (self.members() * self.nthreads) as f64
                    }
                    Average::Min => f64_of(Combine::Min)?,
                    Average::Max => f64_of(Combine::Max)?,
                }
            }
            Op::SumI64(_) => {
                o.i = bootstrap::allreduce_i64_among(b, st.acc_i64, Combine::Sum, among)?
            }
            Op::MaxI64(_) => o.i = bootstrap::allreduce_i64(b, st.acc_i64, Combine::Max)?,
            Op::MaxRows(_) => {
                let bytes: Vec<u8> = st.rows.iter().flat_map(|v| v.to_le_bytes()).collect();
                let all = b.allgather(&bytes)?;
                let per = st.rows.len().max(1) * 8;
                o.rows = all
                    .chunks(per)
                    .map(|c| {
                        c.chunks_exact(8)
                            .map(|x| f64::from_le_bytes(x.try_into().unwrap_or([0; 8])))
                            .collect()
                    })
                    .collect();
                if st.rows.is_empty() {
                    o.rows = vec![Vec::new(); self.total_procs];
                }
            }
        }
        Ok(o)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::nccltests::bootstrap::single::Single;

    fn run_threads(n: usize, f: impl Fn(&ProcessSync, usize) -> f64 + Sync) -> Vec<f64> {
        let sync = ProcessSync::new(n, Arc::new(Single));
        std::thread::scope(|s| {
            let hs: Vec<_> = (0..n)
                .map(|t| {
                    let sync = &sync;
                    let f = &f;
                    s.spawn(move || f(sync, t))
                })
                .collect();
            hs.into_iter().map(|h| h.join().unwrap()).collect()
        })
    }

    #[test]
    fn averages_across_threads() {
        let v = |t: usize| (t + 1) as f64;
        for (avg, want) in [
            (Average::Mean, 2.5),
            (Average::Min, 1.0),
            (Average::Max, 4.0),
            (Average::Rank0, 1.0),
        ] {
            let got = run_threads(4, |s, t| s.allreduce_f64(t, v(t), avg).unwrap());
            assert!(got.iter().all(|&g| g == want), "{avg:?}: {got:?}");
        }
    }

    #[test]
    fn a_failed_thread_releases_the_others() {
        let got = run_threads(3, |s, t| {
            if t == 2 {
                std::thread::sleep(std::time::Duration::from_millis(50));
                s.poison();
                return -1.0;
            }
            match s.barrier(t) {
                Err(TestError::Cancelled) => 1.0,
                other => panic!("{:?}", other.err()),
            }
        });
        assert_eq!(got, vec![1.0, 1.0, -1.0]);
    }

    #[test]
    fn repeated_rendezvous_and_sums() {
        let got = run_threads(3, |s, t| {
            let mut last = 0;
            for i in 0..50 {
                s.barrier(t).unwrap();
                last = s.sum_i64(t, (t + i) as i64).unwrap();
            }
            last as f64
        });
        assert_eq!(got, vec![(1 + 2 + 3 * 49) as f64; 3]);
        let rows = run_threads(2, |s, t| {
            s.gather_max_rows(t, &[t as f64, 5.0 - t as f64]).unwrap()[0][1]
        });
        assert_eq!(rows, vec![5.0, 5.0]);
    }
}
