//! The measurement loop of nccl-tests (`TimeTest`, `BenchTime`,
//! `startColl`, `completeColl`, `testStreamSynchronize`), per thread.
//!
//! The timed region holds only backend calls on stack values: no
//! allocation, formatting or locking happens between the clock reads,
//! except the barriers nccl-tests itself puts there (`-z 1`, `-z 3`).

use super::backend::{BufRef, CollCall, Poll, Ranks};
use super::check::{Checker, Plan, Seg};
use super::colls::{Collective, InitArgs, OpMode, RootMode, Target};
use super::errors::{TestError, TestResult};
use super::hooks::Hooks;
use super::job;
use super::options::Options;
use super::output::{IterReport, Output, RowResult};
use super::sync::{Average, ProcessSync};
use super::timer::Timer;
use super::types::{DataType, Features, ReduceOp};
use super::workers::Workers;

/// What every thread of the process shares.
pub struct Common<'a> {
    /// Options (after the memory cap).
    pub opts: &'a Options,
    /// The collective.
    pub coll: &'static Collective,
    /// Thread/process rendezvous.
    pub sync: &'a ProcessSync,
    /// Test hooks.
    pub hooks: &'a Hooks,
    /// Types and ops of `-d all` / `-o all`.
    pub features: Features,
    /// Ranks in the communicator.
    pub nranks: usize,
    /// This process's index in the communicator.
    pub proc: usize,
    /// This process's index in the whole job (differs from `proc` with
    /// NCCL_TESTS_SPLIT): names its ranks in the timeout census.
    pub world_proc: usize,
    /// NCCL_TESTS_SPLIT made communicators of different sizes: their test
    /// lists may differ, so they are compared before running (see
    /// [`Thread::run_test`]).
    pub uneven_split: bool,
    /// Largest size (after the memory cap).
    pub max_bytes: u64,
    /// Host name for messages.
    pub hostname: &'a str,
    /// Host threads each thread may use to generate and check data (its
    /// share of the host: every `-t` thread of every process on this host
    /// checks at the same time).
    pub check_workers: Workers,
}

/// Per-thread totals returned to the process.
#[derive(Clone, Debug, Default)]
pub struct ThreadTotals {
    /// (thread, size, placement) cases with wrong data.
    pub errors: i64,
    /// Sum of printed bus bandwidths.
    pub bw_sum: f64,
    /// Number of printed bus bandwidths.
    pub bw_count: i64,
}

/// What `startColl` recomputes on every iteration, computed once per
/// placement: the calls at shift 0 and the rotation of their offsets.
#[derive(Default)]
struct Launch {
    calls: Vec<CollCall>,
    /// Bytes one iteration moves the offsets by (send or expected bytes).
    stride: usize,
    /// Offsets repeat after this many iterations (>= 1).
    steps: u64,
}

#[derive(Default, Clone, Copy)]
struct SizeArgs {
    nbytes: usize,
    send_bytes: usize,
    expected_bytes: usize,
    send_inplace: usize,
    recv_inplace: usize,
}

/// One thread's state (nccl-tests' `threadArgs`).
pub struct Thread<'a> {
    c: &'a Common<'a>,
    thread: usize,
    ranks: Box<dyn Ranks>,
    first_rank: usize,
    out: Option<&'a mut Output>,
    sz: SizeArgs,
    unalign: usize,
    report_errors: bool,
    rep: u64,
    expected: Vec<Vec<Seg>>,
    /// The calls of the current placement at shift 0 (one per local rank)
    /// and their offset rotation, set by `prepare`.
    launch: Launch,
    checker: Checker,
    stalled: bool,
    /// A `slow:R` hook names one of this thread's ranks: its wait in ms.
    slow: Option<u64>,
    timed: bool,
    what: String,
    totals: ThreadTotals,
    /// Collectives this thread issued (for the timeout census).
    issued: std::sync::Arc<job::IssueCounter>,
}

impl<'a> Thread<'a> {
    /// A thread driving `ranks`; `out` only on the printing thread.
    pub fn new(
        c: &'a Common<'a>,
        thread: usize,
        ranks: Box<dyn Ranks>,
        out: Option<&'a mut Output>,
    ) -> Self {
        let g = c.opts.ngpus.max(1) as usize;
        let t = c.opts.nthreads.max(1) as usize;
        let count = ranks.count();
        let first_rank = (c.proc * t + thread) * g;
        let mine = first_rank..first_rank + count;
        Thread {
            c,
            thread,
            ranks,
            first_rank,
            out,
            sz: SizeArgs::default(),
            unalign: 0,
            report_errors: c.opts.datacheck != 0,
            rep: 0,
            expected: vec![Vec::new(); count],
            launch: Launch::default(),
            checker: Checker::new(c.check_workers),
            stalled: false,
            slow: c
                .hooks
                .slow
                .iter()
                .any(|r| mine.contains(r))
                .then_some(c.hooks.slow_ms),
            timed: false,
            what: String::new(),
            totals: ThreadTotals::default(),
            issued: job::IssueCounter::register(),
        }
    }

    /// The thread's ranks (to finish them after the run).
    pub fn into_parts(self) -> (Box<dyn Ranks>, ThreadTotals) {
        (self.ranks, self.totals)
    }

    /// The collective's `runTest`: every selected type x op x root.
    pub fn run_test(&mut self) -> TestResult<()> {
        self.ranks.bind_thread()?;
        let o = self.c.opts;
        let types: Vec<DataType> = o
            .dtype
            .map_or_else(|| self.c.features.types().to_vec(), |t| vec![t]);
        let ops: Vec<(ReduceOp, &'static str)> = match self.c.coll.op_mode {
            OpMode::Fixed(name) => vec![(ReduceOp::Sum, name)],
            OpMode::Reduce => {
                o.op.map_or_else(|| self.c.features.ops().to_vec(), |op| vec![op])
                    .into_iter()
                    .map(|op| (op, op.name()))
                    .collect()
            }
        };
        let roots: Vec<i32> = match self.c.coll.root_mode {
            RootMode::None => vec![-1],
            RootMode::Sweep if o.root == -1 => (0..self.c.nranks as i32).collect(),
            RootMode::Sweep => vec![o.root],
        };
        let skip_all = self.c.coll.kind == super::colls::CollKind::HyperCube
            && !self.c.nranks.is_power_of_two();
        let reduces = matches!(self.c.coll.op_mode, OpMode::Reduce);
        if self.c.uneven_split {
            let n = if skip_all {
                0
            } else {
                self.test_count(&types, &ops, reduces) * roots.len()
            };
            self.same_test_count(n)?;
        }
        if skip_all {
            super::console::out(&format!(
                "nRanks {} is not a power of 2, skipping\n",
                self.c.nranks
            ));
            return Ok(());
        }
        for &dt in &types {
            for &(op, op_name) in &ops {
                if reduces && !self.reduction_supported(dt, op, op_name)? {
                    continue;
                }
                for &root in &roots {
                    self.time_test(dt, op, op_name, root)?;
                }
            }
        }
        Ok(())
    }

    /// The (type, op) pairs the loop below will time (per root).
    fn test_count(&self, types: &[DataType], ops: &[(ReduceOp, &str)], reduces: bool) -> usize {
        types
            .iter()
            .map(|&dt| {
                ops.iter()
                    .filter(|&&(op, _)| !reduces || self.ranks.check_reduction(dt, op).is_ok())
                    .count()
            })
            .sum()
    }

    /// Every test synchronizes every process of the run (as nccl-tests'
    /// Allreduce over MPI_COMM_WORLD does), so communicators that would run
    /// different numbers of tests (a root per rank with `-r -1`, hypercube
    /// on a size that is not a power of 2, a type a 1-rank communicator
    /// skips) would wait on each other forever: refuse that up front.
    fn same_test_count(&self, n: usize) -> TestResult<()> {
        let sync = self.c.sync;
        let lo = sync.allreduce_f64(self.thread, n as f64, Average::Min)?;
        let hi = sync.allreduce_f64(self.thread, n as f64, Average::Max)?;
        if lo == hi {
            return Ok(());
        }
        Err(TestError::InvalidUsage(format!(
            "NCCL_TESTS_SPLIT made communicators of different sizes that would run different numbers of tests ({lo} and {hi}) and wait on each other forever: split into groups of equal size, or fix the root with -r"
        )))
    }

    /// Whether the backend can run `dt`/`op`: a pair it cannot is skipped
    /// with a comment line in a sweep, and an error when it is all that was
    /// asked for.
    fn reduction_supported(
        &mut self,
        dt: DataType,
        op: ReduceOp,
        op_name: &str,
    ) -> TestResult<bool> {
        let Err(e) = self.ranks.check_reduction(dt, op) else {
            return Ok(true);
        };
        let o = self.c.opts;
        if o.dtype.is_some() && o.op.is_some() {
            return Err(e);
        }
        if let Some(out) = self.out.as_deref_mut() {
            out.print(&format!("# Skipping {} {}: {e}\n", dt.name(), op_name));
        }
        Ok(false)
    }

    fn setup_args(&mut self, size: u64, dt: DataType) {
        let ws = dt.size();
        let c = (self.c.coll.counts)(size as usize / ws, ws, self.c.nranks);
        self.sz = SizeArgs {
            nbytes: c.param * ws,
            send_bytes: c.send * ws,
            expected_bytes: c.recv * ws,
            send_inplace: c.send_inplace_offset * ws,
            recv_inplace: c.recv_inplace_offset * ws,
        };
    }

    /// `TimeTest`.
    fn time_test(
        &mut self,
        dt: DataType,
        op: ReduceOp,
        op_name: &str,
        root: i32,
    ) -> TestResult<()> {
        let o = self.c.opts;
        self.c.sync.barrier(self.thread)?;
        self.unalign = o.unalign.max(0) as usize * dt.size();
        for size in o
            .warmup_sizes()
            .into_iter()
            .filter(|&s| s <= self.c.max_bytes)
        {
            self.setup_args(size, dt);
            // Named for the timeout report, as the measured sizes are.
            let shown = self.sz.send_bytes.max(self.sz.expected_bytes);
            self.what = format!(
                "{} {} {} {shown} B (warm-up)",
                self.c.coll.name,
                dt.name(),
                op_name
            );
            job::set_activity(&self.what);
            self.prepare(dt, op, root, false)?;
            for iter in 0..o.warmup_iters.max(0) as i64 {
                self.start_coll(iter)?;
            }
            self.complete_coll()?;
        }
        let sizes: Vec<u64> = o
            .sizes()
            .into_iter()
            .filter(|&s| s <= self.c.max_bytes)
            .collect();
        let mut repeat = o.run_cycles as i64;
        let mut cycle = 0u64;
        loop {
            for &size in &sizes {
                self.setup_args(size, dt);
                let shown = self.sz.send_bytes.max(self.sz.expected_bytes) as u64;
                let count = (self.sz.nbytes / dt.size()) as u64;
                if let Some(out) = self.out.as_deref_mut() {
                    out.line_preamble(shown, count, dt.name(), op_name, root, cycle);
                }
                self.what = format!("{} {} {} {} B", self.c.coll.name, dt.name(), op_name, shown);
                job::set_activity(&self.what);
                self.bench_time(dt, op, root, false)?;
                self.bench_time(dt, op, root, true)?;
                if let Some(out) = self.out.as_deref_mut() {
                    out.line_terminator(o.iters);
                }
                self.check_deadline()?;
            }
            cycle += 1;
            repeat -= 1;
            if repeat == 0 {
                break;
            }
        }
        Ok(())
    }

    /// With a deadline ([`job::set_deadline`]), after each size: every
    /// process of the run (every group's: they exchange in step) says
    /// whether it passed, and all stop together when one says so.
    fn check_deadline(&mut self) -> TestResult<()> {
        if !job::deadline_set() {
            return Ok(());
        }
        let mine = job::deadline_passed().map_or(0, |s| s.max(1) as i64);
        let passed = self.c.sync.max_everywhere(self.thread, mine)?;
        if passed > 0 {
            return Err(TestError::Deadline {
                secs: passed as u64,
            });
        }
        Ok(())
    }

    /// The calls `start_coll` issues for this size and placement, built and
    /// handed to the backend once, outside the timed loop.
    fn prepare(&mut self, dt: DataType, op: ReduceOp, root: i32, in_place: bool) -> TestResult<()> {
        let sz = self.sz;
        let stride = sz.send_bytes.max(sz.expected_bytes);
        // nccl-tests: steps = maxbytes / totalnbytes (1 when nothing moves).
        let steps = (self.c.max_bytes as usize)
            .checked_div(stride)
            .map_or(1, |s| s.max(1));
        let mut calls = std::mem::take(&mut self.launch.calls);
        calls.clear();
        for i in 0..self.ranks.count() {
            let rank = self.first_rank + i;
            let base = self.unalign;
            let send = if in_place {
                BufRef {
                    buf: Target::Recv,
                    offset: base + sz.send_inplace * rank,
                }
            } else {
                BufRef {
                    buf: Target::Send,
                    offset: base,
                }
            };
            let recv = BufRef {
                buf: Target::Recv,
                offset: base + if in_place { sz.recv_inplace * rank } else { 0 },
            };
            calls.push(CollCall {
                kind: self.c.coll.kind,
                send,
                recv,
                count: sz.nbytes / dt.size(),
                dtype: dt,
                op,
                root,
                rank,
            });
        }
        let max_shift = stride * (steps - 1);
        self.ranks.prepare(&calls, max_shift)?;
        self.launch = Launch {
            calls,
            stride,
            steps: steps as u64,
        };
        Ok(())
    }

    /// `startColl`: one collective on every local rank at iteration `iter`
    /// (of the calls `prepare` built).
    #[inline]
    fn start_coll(&mut self, iter: i64) -> TestResult<()> {
        // A relaxed atomic load: SIGINT/SIGTERM end even a long loop.
        if job::stopping() {
            return Err(job::check().err().unwrap_or(TestError::Cancelled));
        }
        // The run's deadline and -T more passed within one size.
        if let Some(secs) = job::deadline_hard() {
            return Err(TestError::Deadline { secs });
        }
        // Rotate the offsets to avoid cache effects, as nccl-tests does.
        let shift = self.launch.stride * ((iter as u64 % self.launch.steps) as usize);
        let g = self.launch.calls.len();
        if g > 1 {
            self.ranks.group_start()?;
        }
        if let Some(ms) = self.slow {
            std::thread::sleep(std::time::Duration::from_millis(ms));
        }
        if !self.stalled {
            // Counted before issuing: an issue that blocks (the host
            // backend exchanges inline) has been attempted.
            self.issued.note();
            for (i, call) in self.launch.calls.iter().enumerate() {
                self.ranks.enqueue_prepared(i, call, shift)?;
            }
        }
        if g > 1 {
            self.ranks.group_end()?;
        }
        let blocking = self.c.opts.blocking;
        if blocking != 0 {
            self.stream_sync()?;
        }
        if blocking == 1 {
            self.c.sync.barrier(self.thread)?;
        }
        Ok(())
    }

    /// `completeColl`.
    fn complete_coll(&mut self) -> TestResult<()> {
        if self.c.opts.blocking != 0 && self.c.opts.agg_iters <= 1 {
            return Ok(());
        }
        self.stream_sync()
    }

    /// `testStreamSynchronize`: polls until done, failing after `-T`.
    fn stream_sync(&mut self) -> TestResult<()> {
        let timeout = self.c.opts.timeout;
        let start = Timer::new();
        loop {
            if self.ranks.poll()? == Poll::Done && !self.stalled {
                return Ok(());
            }
            let timed_out = timeout > 0 && start.elapsed() > timeout as f64;
            // Another rank's timeout (the census), or this process stopping.
            let interrupted = job::check_collective().err();
            if timed_out || interrupted.is_some() {
                let pending = if self.stalled {
                    (0..self.ranks.count()).collect()
                } else {
                    self.ranks.pending()
                };
                self.ranks.abort();
                let world_first = (self.c.world_proc * self.c.opts.nthreads.max(1) as usize
                    + self.thread)
                    * self.c.opts.ngpus.max(1) as usize;
                job::set_pending(pending.iter().map(|i| world_first + i).collect());
                return Err(interrupted.unwrap_or_else(|| self.timeout_error(&pending)));
            }
            std::thread::yield_now();
        }
    }

    fn timeout_error(&self, pending: &[usize]) -> TestError {
        let ranks: Vec<String> = pending
            .iter()
            .map(|i| (self.first_rank + i).to_string())
            .collect();
        TestError::Timeout {
            secs: self.c.opts.timeout,
            detail: format!(
                "rank{} {} (pid {}) did not complete {}{}; communicators aborted",
                if ranks.len() > 1 { "s" } else { "" },
                ranks.join(","),
                std::process::id(),
                self.what,
                if self.timed {
                    " (timed iterations)"
                } else {
                    ""
                }
            ),
        }
    }

    fn hook_at_timed_start(&mut self) {
        let ranks = self.first_rank..self.first_rank + self.ranks.count();
        if self.c.hooks.kill.iter().any(|r| ranks.contains(r)) {
            // SAFETY: raise has no memory-safety preconditions.
            unsafe {
                libc::raise(libc::SIGKILL);
            }
        }
        if self.c.hooks.stall.iter().any(|r| ranks.contains(r)) {
            self.stalled = true;
        }
    }

    /// `BenchTime`: one placement of one size.
    fn bench_time(
        &mut self,
        dt: DataType,
        op: ReduceOp,
        root: i32,
        in_place: bool,
    ) -> TestResult<()> {
        let o = self.c.opts;
        if o.datacheck != 0 {
            self.init_data(dt, op, root, 99, in_place)?;
        }
        self.prepare(dt, op, root, in_place)?;
        self.start_coll(0)?;
        self.complete_coll()?;
        self.c.sync.barrier(self.thread)?;
        let graph = o.graph_launches >= 1;
        if graph {
            self.ranks.capture_begin()?;
        }
        self.timed = true;
        job::set_activity(&format!("{} (timed iterations)", self.what));
        self.hook_at_timed_start();
        let (cpu_sec, delta, iter_times) = self.timed_loop(graph)?;
        self.timed = false;
        job::set_activity(&self.what);
        let delta = self
            .c
            .sync
            .allreduce_f64(self.thread, delta, Average::from_flag(o.average))?;
        if graph {
            self.ranks.graph_destroy()?;
        }
        let count = self.sz.nbytes / dt.size();
        let (alg, bus) = self
            .c
            .coll
            .bandwidth(count, dt.size(), delta, self.c.nranks);
        self.c.sync.barrier(self.thread)?;
        let wrong = self.check_iterations(dt, op, root, in_place, graph)?;
        let time_us = if o.report_cputime != 0 {
            cpu_sec
        } else {
            delta
        } * 1.0e6;
        let row = RowResult {
            time_us,
            algbw: alg,
            busbw: bus,
            wrong: self.report_errors.then_some(wrong),
        };
        if let Some(out) = self.out.as_deref_mut() {
            out.line_body(&row, !in_place);
        }
        if let Some(times) = iter_times {
            self.per_iter_report(times, in_place)?;
        }
        self.totals.bw_sum += bus;
        self.totals.bw_count += 1;
        Ok(())
    }

    /// The timed iterations; returns (cpu seconds, seconds, per-iteration
    /// seconds with `-I`).
    fn timed_loop(&mut self, graph: bool) -> TestResult<(f64, f64, Option<Vec<f64>>)> {
        let o = self.c.opts;
        let (iters, agg, blocking) = (o.iters.max(0) as i64, o.agg_iters as i64, o.blocking);
        let record = o.per_iter_timing != 0;
        let paired = record && blocking == 3;
        let mut coll_only = 0.0f64;
        let mut tim = Timer::new();
        for iter in 0..iters {
            let t0 = tim.elapsed();
            if agg > 1 {
                self.ranks.group_start()?;
            }
            if record {
                self.ranks.record_event(if paired {
                    2 * iter as usize
                } else {
                    iter as usize
                })?;
            }
            for a in 0..agg.max(0) {
                self.start_coll(iter * agg + a)?;
            }
            if agg > 1 {
                self.ranks.group_end()?;
            }
            if blocking == 3 {
                self.stream_sync()?;
                if paired {
                    self.ranks.record_event(2 * iter as usize + 1)?;
                }
                coll_only += tim.elapsed() - t0;
                self.c.sync.barrier(self.thread)?;
            }
        }
        if record && !paired {
            self.ranks.record_event(iters as usize)?;
        }
        if graph {
            self.ranks.capture_end()?;
            self.c.sync.barrier(self.thread)?;
            tim.reset();
            for _ in 0..o.graph_launches {
                self.ranks.graph_launch()?;
            }
        }
        let n = (o.iters as i64 * o.agg_iters as i64) as f64;
        let cpu = if blocking == 3 {
            coll_only
        } else {
            tim.elapsed()
        } / n;
        self.complete_coll()?;
        let mut delta = if blocking == 3 {
            coll_only
        } else {
            tim.elapsed()
        } / n;
        if graph {
            delta /= o.graph_launches as f64;
        }
        let times = if record {
            Some(self.iteration_times(iters as usize, paired)?)
        } else {
            None
        };
        Ok((cpu, delta, times))
    }

    /// `getElapsedTimes`: per iteration, the max over local ranks (seconds).
    fn iteration_times(&mut self, iters: usize, paired: bool) -> TestResult<Vec<f64>> {
        let o = self.c.opts;
        if o.blocking != 0 && o.agg_iters <= 1 {
            self.stream_sync()?;
        }
        let mut times = vec![0.0f64; iters];
        for i in 0..self.ranks.count() {
            for (j, t) in times.iter_mut().enumerate() {
                let (a, b) = if paired {
                    (2 * j, 2 * j + 1)
                } else {
                    (j, j + 1)
                };
                let ms = self.ranks.event_elapsed_ms(i, a, b)? / o.agg_iters as f32;
                *t = t.max(ms as f64 * 1e-3);
            }
        }
        Ok(times)
    }

    fn per_iter_report(&mut self, times: Vec<f64>, in_place: bool) -> TestResult<()> {
        let rows = self.c.sync.gather_max_rows(self.thread, &times)?;
        let mut iter_times = times;
        if rows.len() > 1 {
            for (j, t) in iter_times.iter_mut().enumerate() {
                *t = rows
                    .iter()
                    .filter_map(|r| r.get(j))
                    .fold(f64::MIN, |a, &b| a.max(b));
            }
        }
        let skip = self.c.opts.per_iter_skip.max(0) as usize;
        let mut rep = iter_stats(iter_times.get(skip..).unwrap_or(&[]));
        rep.skipped = skip as i32;
        rep.times = iter_times;
        rep.per_process = if rows.len() > 1 { rows } else { Vec::new() };
        if let Some(out) = self.out.as_deref_mut() {
            out.per_iter(&rep, !in_place);
            if in_place && self.c.opts.report_timestamps != 0 {
                out.timestamp();
            }
        }
        Ok(())
    }

    /// The untimed check iterations after the timing.
    fn check_iterations(
        &mut self,
        dt: DataType,
        op: ReduceOp,
        root: i32,
        in_place: bool,
        graph: bool,
    ) -> TestResult<i64> {
        let mut wrong = 0i64;
        self.rep += 1;
        for _ in 0..self.c.opts.datacheck.max(0) {
            self.init_data(dt, op, root, self.rep, in_place)?;
            if graph {
                self.ranks.capture_begin_check()?;
            }
            self.start_coll(0)?;
            if graph {
                self.ranks.capture_end()?;
                self.ranks.graph_launch()?;
            }
            self.complete_coll()?;
            if graph {
                self.ranks.graph_destroy()?;
            }
            let local = self.check_data(dt, op, in_place)?;
            wrong = self.c.sync.sum_i64(self.thread, local)?;
            if wrong != 0 {
                break;
            }
        }
        Ok(wrong)
    }

    /// `initData` for every local rank.
    fn init_data(
        &mut self,
        dt: DataType,
        op: ReduceOp,
        root: i32,
        rep: u64,
        in_place: bool,
    ) -> TestResult<()> {
        for i in 0..self.ranks.count() {
            let args = InitArgs {
                rank: self.first_rank + i,
                nranks: self.c.nranks,
                dtype: dt,
                op,
                root,
                rep,
                in_place,
                send_bytes: self.sz.send_bytes,
                expected_bytes: self.sz.expected_bytes,
            };
            let mut plan = Plan::new(dt, self.sz.expected_bytes);
            self.report_errors = (self.c.coll.init)(&args, &mut plan);
            self.checker
                .apply(&plan, self.ranks.as_mut(), i, dt, self.unalign)?;
            self.expected[i] = plan.expected;
        }
        Ok(())
    }

    /// `CheckData`: wrong elements over local ranks. Device checks of every
    /// local rank are started first and read afterwards, so the GPUs of a
    /// thread check at the same time.
    fn check_data(&mut self, dt: DataType, op: ReduceOp, in_place: bool) -> TestResult<i64> {
        let mut wrong = 0;
        let mut on_device = Vec::with_capacity(self.ranks.count());
        for i in 0..self.ranks.count() {
            let rank = self.first_rank + i;
            let at = self.unalign
                + if in_place {
                    self.sz.recv_inplace * rank
                } else {
                    0
                };
            let corrupt = self.c.hooks.corrupt.contains(&rank);
            let exp = std::mem::take(&mut self.expected[i]);
            let (total, ranks) = (self.sz.expected_bytes, self.ranks.as_mut());
            let r = match self
                .checker
                .start_device_check(&exp, ranks, i, at, total, dt, op, corrupt)
            {
                Ok(true) => Ok(None),
                Ok(false) => self
                    .checker
                    .verify(&exp, ranks, i, at, total, dt, op, corrupt)
                    .map(Some),
                Err(e) => Err(e),
            };
            self.expected[i] = exp;
            match r? {
                Some(n) => wrong += n,
                None => on_device.push(i),
            }
        }
        for i in on_device {
            wrong += self.ranks.finish_check(i)?;
        }
        if self.report_errors && wrong != 0 {
            self.totals.errors += 1;
        }
        Ok(wrong)
    }
}

/// `computeIterStats` (nearest-rank percentiles, population stdev).
pub fn iter_stats(times: &[f64]) -> IterReport {
    let n = times.len();
    if n == 0 {
        return IterReport::default();
    }
    let mut s = times.to_vec();
    s.sort_by(|a, b| a.total_cmp(b));
    let pct = |p: usize| s[((n * p).div_ceil(100)).saturating_sub(1).min(n - 1)];
    let avg = s.iter().sum::<f64>() / n as f64;
    let var = s.iter().map(|x| (x - avg) * (x - avg)).sum::<f64>() / n as f64;
    IterReport {
        min: s[0],
        max: s[n - 1],
        avg,
        p50: s[n / 2],
        p95: pct(95),
        p99: pct(99),
        stdev: var.sqrt(),
        ..IterReport::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles_like_nccl_tests() {
        let t: Vec<f64> = (1..=10).map(f64::from).collect();
        let r = iter_stats(&t);
        assert_eq!(
            (r.min, r.max, r.p50, r.p95, r.p99),
            (1.0, 10.0, 6.0, 10.0, 10.0)
        );
        assert!((r.avg - 5.5).abs() < 1e-12);
        assert!((r.stdev - 8.25f64.sqrt()).abs() < 1e-12);
        assert_eq!(iter_stats(&[]).max, 0.0);
    }
}
