//! The process's benchmark threads (nccl-tests' `threadInit`,
//! `threadRunTests` and the launch/join loop of `run`): thread 0 runs on
//! the calling thread, the others on scoped threads; each measures its
//! `-M` figures where nccl-tests does ([`super::memuse`]).

use super::backend::{Backend, RankSlot, Ranks};
use super::driver::{Common, Thread, ThreadTotals};
use super::errors::{TestError, TestResult};
use super::job;
use super::memuse::{self, MemUse};
use super::options::Options;
use super::output::Output;
use super::spawn::{Gate, spawn_started};

/// What the threads leave behind.
pub struct Finished {
    /// Wrong-data counts and bandwidths, summed over threads.
    pub totals: ThreadTotals,
    /// Every thread's ranks, to finish after the run.
    pub ranks: Vec<Box<dyn Ranks>>,
    /// The threads' `-M` figures, the largest of each.
    pub mem: MemUse,
}

struct ThreadEnd {
    ranks: Box<dyn Ranks>,
    totals: ThreadTotals,
    mem: MemUse,
}

/// Bytes of each send and receive buffer: `max_bytes` plus room for `-u`
/// (an error when that does not fit in this machine's address space).
pub(crate) fn buffer_bytes(o: &Options) -> TestResult<usize> {
    let want = o.max_bytes as u128 + 8 * o.unalign.max(0) as u128;
    usize::try_from(want)
        .ok()
        .filter(|&b| b <= isize::MAX as usize)
        .ok_or_else(|| TestError::host_memory("the send and receive buffers", want))
}

/// Allocates (and with `-R` registers) every thread's buffers from this
/// thread inside one group, as nccl-tests does: window registration is
/// collective, so the ranks of one process must register together.
pub fn alloc_all(v: &mut [Box<dyn Ranks>], o: &Options) -> TestResult<()> {
    let Some((first, rest)) = v.split_first_mut() else {
        return Ok(());
    };
    first.group_start()?;
    let res = std::iter::once(first.as_mut())
        .chain(rest.iter_mut().map(|r| r.as_mut()))
        .try_for_each(|r| alloc_ranks(r, o));
    let end = v[0].group_end();
    res.and(end)?;
    setup_device_api(v, o)
}

/// `-D`: device communicators for every rank, in one group, once the window
/// registrations above have completed (nccl-tests creates them after its
/// registration group too).
fn setup_device_api(v: &mut [Box<dyn Ranks>], o: &Options) -> TestResult<()> {
    if o.device_impl == 0 || v.is_empty() {
        return Ok(());
    }
    v[0].group_start()?;
    let res = v.iter_mut().try_for_each(|r| r.setup_device_api());
    let end = v[0].group_end();
    res.and(end)
}

fn alloc_ranks(r: &mut dyn Ranks, o: &Options) -> TestResult<()> {
    let bytes = buffer_bytes(o)?;
    r.alloc(bytes, bytes)?;
    if o.local_register != 0 {
        r.register(o.local_register)?;
    }
    Ok(())
}

/// `-p 1`: the thread creates its own communicators and buffers
/// (`threadInit`), measuring Initialization up to the buffers and
/// User-Allocated across the registration, as nccl-tests does.
fn init_thread(
    c: &Common,
    be: &dyn Backend,
    id: &[u8],
    slots: &[RankSlot],
) -> TestResult<(Box<dyn Ranks>, MemUse)> {
    let devs = memuse::devices(slots);
    let f0 = memuse::free_now(be, &devs);
    let mut v = be.init_ranks(id, c.nranks, &[slots.to_vec()])?;
    let mut r = v
        .pop()
        .ok_or_else(|| TestError::Internal("no ranks".into()))?;
    let bytes = buffer_bytes(c.opts)?;
    r.alloc(bytes, bytes)?;
    let f1 = memuse::free_now(be, &devs);
    if c.opts.local_register != 0 {
        r.register(c.opts.local_register)?;
    }
    setup_device_api(std::slice::from_mut(&mut r), c.opts)?;
    let f2 = memuse::free_now(be, &devs);
    let mem = MemUse {
        init: memuse::largest_drop(0, &f0, &f1),
        user: memuse::largest_drop(0, &f1, &f2),
        ..MemUse::default()
    };
    Ok((r, mem))
}

/// One thread: its setup with `-p 1` (`r` is None), then its tests,
/// measured for Collective (`threadRunTests`).
fn thread_body(
    c: &Common,
    be: &dyn Backend,
    id: &[u8],
    slots: &[RankSlot],
    t: usize,
    r: Option<Box<dyn Ranks>>,
    out: Option<&mut Output>,
) -> TestResult<ThreadEnd> {
    let (r, setup) = match r {
        Some(r) => (r, MemUse::default()),
        None => init_thread(c, be, id, slots)?,
    };
    let devs = memuse::devices(slots);
    let before = memuse::free_now(be, &devs);
    let mut th = Thread::new(c, t, r, out);
    th.run_test()?;
    let after = memuse::free_now(be, &devs);
    let (ranks, totals) = th.into_parts();
    let mem = MemUse {
        coll: memuse::largest_drop(i64::MIN, &before, &after),
        ..setup
    };
    Ok(ThreadEnd { ranks, totals, mem })
}

/// Runs thread 0 here and the others on scoped threads; sums their totals
/// and takes the largest of their `-M` figures. When a thread fails, the
/// others are stopped ([`job::Stop::Sibling`]) and its error is returned.
pub fn run_threads(
    c: &Common,
    be: &dyn Backend,
    id: &[u8],
    slots: &[Vec<RankSlot>],
    ranks: &mut [Option<Box<dyn Ranks>>],
    out: &mut Output,
) -> TestResult<Finished> {
    let Some(slots0) = slots.first() else {
        return Err(TestError::Internal("no benchmark threads".into()));
    };
    let mut taken: Vec<Option<Box<dyn Ranks>>> = ranks.iter_mut().map(Option::take).collect();
    let first = taken.first_mut().and_then(Option::take);
    // A failing thread stops the others, which would otherwise wait for it
    // (in a barrier, or for its part of a collective) until -T.
    let body = |t: usize, slots: &[RankSlot], r, out| {
        let res = thread_body(c, be, id, slots, t, r, out);
        if res.is_err() {
            c.sync.poison();
            job::stop(job::Stop::Sibling);
        }
        res
    };
    // Threads wait at the gate until all have started, so that none
    // allocates while the next is being checked for room (spawn.rs).
    let gate = Gate::default();
    let results: Vec<TestResult<ThreadEnd>> = std::thread::scope(|s| {
        let mut handles = Vec::new();
        let mut spawn_error = None;
        for (t, r) in taken.iter_mut().enumerate().skip(1) {
            let r = r.take();
            let slots = &slots[t];
            let gate = &gate;
            let spawned = spawn_started(s, format!("bench-{t}"), move || {
                if !gate.wait() {
                    return Err(TestError::Cancelled);
                }
                body(t, slots, r, None)
            });
            match spawned {
                Ok(h) => handles.push(h),
                Err(e) => {
                    spawn_error = Some(TestError::Internal(format!(
                        "cannot start benchmark thread {t} of {} (-t): {e}: lower -t, or raise the limits on threads (ulimit -u, /proc/sys/kernel/threads-max) and address space (ulimit -v)",
                        c.opts.nthreads
                    )));
                    c.sync.poison();
                    job::stop(job::Stop::Sibling);
                    break;
                }
            }
        }
        gate.open(spawn_error.is_none());
        let mut res = Vec::new();
        if let Some(e) = spawn_error {
            res.push(Err(e));
        } else {
            res.push(body(0, slots0, first, Some(out)));
        }
        for h in handles {
            res.push(h.join().unwrap_or_else(|_| {
                Err(TestError::Internal("a benchmark thread panicked".into()))
            }));
        }
        res
    });
    // The first failure is the cause; the others only stopped because of it.
    if let Some(e) = first_cause(&results) {
        return Err(e);
    }
    let mut done = Finished {
        totals: ThreadTotals::default(),
        ranks: Vec::new(),
        mem: MemUse::default(),
    };
    for r in results {
        let end = r?;
        done.totals.errors += end.totals.errors;
        done.totals.bw_sum += end.totals.bw_sum;
        done.totals.bw_count += end.totals.bw_count;
        done.mem = done.mem.max(end.mem);
        done.ranks.push(end.ranks);
    }
    Ok(done)
}

/// The error that caused the others (which are [`TestError::Cancelled`]).
fn first_cause(results: &[TestResult<ThreadEnd>]) -> Option<TestError> {
    let errors: Vec<&TestError> = results.iter().filter_map(|r| r.as_ref().err()).collect();
    errors
        .iter()
        .find(|e| !matches!(e, TestError::Cancelled))
        .or(errors.first())
        .map(|e| (*e).clone())
}
