//! The program: parse options, launch, report devices, create
//! communicators, run every thread, print the footer and pick the exit
//! status (nccl-tests' `main` and `run`).

use super::backend::{self, Backend, RankSlot, Ranks};
use super::bootstrap::{self, Bootstrap, Combine, hosthash};
use super::colls::Collective;
use super::cparse::{atof, atoi, strtoul};
use super::driver::Common;
use super::errors::{EXIT_WRONG_RESULTS, TestError, TestResult};
use super::hooks::Hooks;
use super::job::{self, Stop};
use super::memuse::{self, MemUse};
use super::options::{self, BackendKind, Options, Parsed, Printed};
use super::output::{Output, text::DeviceLine};
use super::sync::ProcessSync;
use super::threads::{alloc_all, run_threads};
use super::workers::Workers;
use super::{agree, census, console};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

/// Set while [`run_embedded`] runs: the run leaves MPI initialized and
/// never aborts the job (the embedding tool reports the failure).
static EMBEDDED: AtomicBool = AtomicBool::new(false);

/// [`run_embedded`]'s communicator color, in place of NCCL_TESTS_SPLIT.
static SPLIT: Mutex<Option<i32>> = Mutex::new(None);

/// What an embedded run gave: its exit status and the text it would have
/// printed (the report, or the error).
#[derive(Debug, Clone)]
pub struct Embedded {
    /// The exit status `all_reduce_perf` would have had.
    pub code: i32,
    /// Its stdout and stderr text.
    pub text: String,
}

/// Runs `coll` in this process with `argv` (argv\[0\] the program name)
/// inside a tool that already initialized MPI (erdma-cluster): nothing is
/// printed (the text is returned), MPI stays initialized, and a failure
/// does not abort the job. `color`: the processes with the same color
/// form one communicator (MPI_Comm_split; None: all of them).
/// `deadline_s`: the run's total deadline in seconds (0: none): past it
/// every wait ends and the run stops with status 4 ([`job::set_deadline`]),
/// whatever its sizes and iterations.
pub fn run_embedded(
    coll: &'static Collective,
    argv: &[String],
    color: Option<i32>,
    deadline_s: u64,
) -> Embedded {
    EMBEDDED.store(true, Ordering::SeqCst);
    *SPLIT.lock().unwrap_or_else(|p| p.into_inner()) = color;
    console::start_capture();
    // A timeout names what this run waited in, not what an earlier run of
    // the same process did last.
    job::set_activity("");
    job::set_deadline(deadline_s);
    let code = run_with_args(coll, argv);
    job::clear_deadline();
    // A failed thread stopped this run's others, not the next run.
    job::clear_sibling_stop();
    let text = console::end_capture();
    *SPLIT.lock().unwrap_or_else(|p| p.into_inner()) = None;
    EMBEDDED.store(false, Ordering::SeqCst);
    Embedded { code, text }
}

/// [`run_embedded`] with every rank of this process waiting `slow_ms` ms
/// before each collective (the `slow:R` hook of [`super::hooks`] for this
/// process, whatever its rank in the split communicator): erdma-cluster's
/// test hook for a slow host in its NCCL pairs.
pub fn run_embedded_slowed(
    coll: &'static Collective,
    argv: &[String],
    color: Option<i32>,
    deadline_s: u64,
    slow_ms: Option<u64>,
) -> Embedded {
    *SLOWED.lock().unwrap_or_else(|p| p.into_inner()) = slow_ms;
    let done = run_embedded(coll, argv, color, deadline_s);
    *SLOWED.lock().unwrap_or_else(|p| p.into_inner()) = None;
    done
}

/// [`run_embedded_slowed`]'s wait, while it runs with one.
static SLOWED: Mutex<Option<u64>> = Mutex::new(None);

fn embedded_slow() -> Option<u64> {
    *SLOWED.lock().unwrap_or_else(|p| p.into_inner())
}

/// [`run_embedded`]'s color, while it runs with one.
fn embedded_color() -> Option<i32> {
    *SPLIT.lock().unwrap_or_else(|p| p.into_inner())
}

fn embedded() -> bool {
    EMBEDDED.load(Ordering::SeqCst)
}

/// Runs the benchmark for `coll` with the process's arguments and returns
/// the exit status. Binaries start it through [`crate::c_main`].
pub fn main(coll: &'static Collective) -> i32 {
    // Before any thread exists (MPI's included): see job::install_signal_handlers.
    job::install_signal_handlers();
    // An argument that is not UTF-8 is refused rather than altered (a
    // lossy -J path would write another file).
    let code = match crate::cli::args(None, super::errors::EXIT_BAD_ARGS) {
        Ok(argv) => run_with_args(coll, &argv),
        Err(code) => code,
    };
    console::flush();
    // The report or the help text was lost (`>/dev/full`): console printed
    // why; a run that otherwise succeeded must not say 0.
    let code = if code == 0 && console::broken() {
        1
    } else {
        code
    };
    if let Some(Stop::Signal(sig)) = job::stop_reason() {
        job::die_by_signal(sig);
    }
    code & 0xff
}

/// [`main`] with explicit arguments; returns the exit status.
pub fn run_with_args(coll: &'static Collective, argv: &[String]) -> i32 {
    let kind = options::prescan_backend(argv);
    let (features, version) = backend::probe_features(kind);
    let mut printed = Printed::default();
    let parsed = options::parse(argv, features, version, &mut printed);
    console::out(&printed.stdout);
    console::err(&printed.stderr);
    let opts = match parsed {
        Parsed::Exit(code) => return code,
        Parsed::Run(o) => *o,
    };
    job::set_timeout(opts.timeout);
    let host = hosthash::short_hostname();
    let launch = match bootstrap::start(&opts) {
        Ok(l) => l,
        Err(e) => return fail(&host, e, None),
    };
    let boot = launch.boot.clone();
    job::set_world(boot.clone());
    match run(coll, opts, launch, &host) {
        Ok(code) => {
            if !embedded() {
                finalize_mpi();
            }
            if code == EXIT_WRONG_RESULTS {
                console::out(&format!(
                    " .. {host} pid {}: Test failure common.cu:1454\n",
                    std::process::id()
                ));
            }
            code
        }
        Err(e) => fail(&host, e, Some(boot.as_ref())),
    }
}

/// The end of a failed run (its output files are already closed): the
/// report, then the job ends everywhere with the same status. A timeout is
/// first explained by the census, so that every rank names the stuck one.
fn fail(host: &str, e: TestError, boot: Option<&dyn Bootstrap>) -> i32 {
    if let TestError::Interrupted { signal } = e {
        // A signal, or stdout's reader gone: end by that signal, quietly,
        // as nccl-tests would (main re-raises it).
        job::stop(Stop::Signal(signal));
        return e.exit_code();
    }
    let multi = boot.filter(|b| b.size() > 1);
    let e = match multi {
        Some(b) => census::explain(e, b, host),
        None => e,
    };
    let code = report_fatal(host, &e);
    if matches!(e, TestError::Comm { .. } | TestError::Timeout { .. })
        && let Some(b) = multi
    {
        report_lost_peers(host, b);
    }
    if let Some(b) = multi.filter(|_| !embedded()) {
        console::flush();
        if matches!(e, TestError::Timeout { .. }) {
            // Every live rank reached the same verdict at the same moment;
            // give the others time to print theirs before the job ends (an
            // MPI_Abort kills them at once).
            std::thread::sleep(TIMEOUT_GRACE);
        }
        b.abort(&e);
    }
    code
}

/// Names the ranks whose bootstrap connection closed: after a peer dies,
/// NCCL reports only "remote process exited", and without mpirun nobody else
/// says which rank it was. The kernel closes a dead process's sockets at
/// once, but give it a moment to deliver that.
fn report_lost_peers(host: &str, boot: &dyn Bootstrap) {
    let mut lost = boot.lost_peers();
    if lost.is_empty() {
        std::thread::sleep(std::time::Duration::from_millis(200));
        lost = boot.lost_peers();
    }
    if lost.is_empty() {
        return;
    }
    let ranks: Vec<String> = lost.iter().map(|r| r.to_string()).collect();
    console::out(&format!(
        "{host}: rank{} {} left the job (their {} bootstrap connection to rank {} closed)\n",
        if lost.len() > 1 { "s" } else { "" },
        ranks.join(","),
        boot.name(),
        boot.rank()
    ));
}

/// How long a rank that timed out waits before aborting the job, so that its
/// peers' own timeout lines get printed.
const TIMEOUT_GRACE: std::time::Duration = std::time::Duration::from_secs(1);

fn report_fatal(host: &str, e: &TestError) -> i32 {
    if matches!(e, TestError::Deadline { .. }) {
        // Stopped mid-row (its size and type printed): the error on a line
        // of its own.
        console::out("\n");
    }
    console::out(&format!("{host}: {e}\n"));
    console::out(&format!(
        " .. {host} pid {}: Test failure common.cu:1454\n",
        std::process::id()
    ));
    e.exit_code()
}

#[cfg(feature = "mpi")]
fn finalize_mpi() {
    bootstrap::mpi::finalize();
}

#[cfg(not(feature = "mpi"))]
fn finalize_mpi() {}

/// The process's place in the run.
struct Place {
    proc: usize,
    total_procs: usize,
    local_rank: usize,
    /// Processes of the run on this host (this one included).
    local_procs: usize,
    color: i32,
    /// Every process's color (index = process).
    colors: Vec<i32>,
    group_procs: usize,
    group_proc: usize,
    /// Split communicators of different sizes.
    uneven: bool,
}

fn place(boot: &dyn Bootstrap, hint: Option<usize>) -> TestResult<Place> {
    let (proc, total_procs) = (boot.rank(), boot.size());
    let hashes = boot.allgather(&hosthash::this_host_hash().to_le_bytes())?;
    let hashes: Vec<u64> = hashes
        .chunks_exact(8)
        .map(|c| u64::from_le_bytes(c.try_into().unwrap_or([0; 8])))
        .collect();
    let local_rank = hint.unwrap_or_else(|| hosthash::local_rank(&hashes, proc));
    let local_procs = hashes
        .iter()
        .filter(|&&h| Some(&h) == hashes.get(proc))
        .count();
    let color = split_color(proc);
    let colors = boot.allgather(&color.to_le_bytes())?;
    let colors: Vec<i32> = colors
        .chunks_exact(4)
        .map(|c| i32::from_le_bytes(c.try_into().unwrap_or([0; 4])))
        .collect();
    let group_procs = colors.iter().filter(|&&c| c == color).count();
    let group_proc = colors[..proc].iter().filter(|&&c| c == color).count();
    let size_of = |c: i32| colors.iter().filter(|&&x| x == c).count();
    let uneven = colors.iter().any(|&c| size_of(c) != group_procs);
    Ok(Place {
        proc,
        total_procs,
        local_rank,
        local_procs,
        color,
        colors,
        group_procs,
        group_proc,
        uneven,
    })
}

/// NCCL_TESTS_SPLIT_MASK / NCCL_TESTS_SPLIT ("AND n", "OR n", "MOD n",
/// "DIV n" or & | % /), as nccl-tests computes the color; [`run_embedded`]'s
/// color when one is given.
pub fn split_color(proc: usize) -> i32 {
    if let Some(c) = *SPLIT.lock().unwrap_or_else(|p| p.into_inner()) {
        return c;
    }
    let p = proc as i32;
    if let Ok(m) = std::env::var("NCCL_TESTS_SPLIT_MASK") {
        return p & strtoul(&m, 16) as i32;
    }
    let Ok(s) = std::env::var("NCCL_TESTS_SPLIT") else {
        return 0;
    };
    let lower = s.to_ascii_lowercase();
    let arg = |prefix: &str| lower.strip_prefix(prefix).and_then(parse_split_int);
    let mut color = 0;
    if let Some(v) = arg("and").or_else(|| arg("&")) {
        color = p & v;
    }
    if let Some(v) = arg("or").or_else(|| arg("|")) {
        color = p | v;
    }
    if let Some(v) = arg("mod").or_else(|| arg("%")).filter(|&v| v != 0) {
        color = p % v;
    }
    if let Some(v) = arg("div").or_else(|| arg("/")).filter(|&v| v != 0) {
        color = p / v;
    }
    color
}

fn parse_split_int(s: &str) -> Option<i32> {
    let t = s.trim_start();
    if t.is_empty() {
        return None;
    }
    let (digits, radix) = match t.strip_prefix("0b") {
        Some(b) => (b, 2),
        None => (t, 0),
    };
    let first_ok = digits
        .chars()
        .next()
        .is_some_and(|c| c.is_ascii_digit() || c == '+' || c == '-');
    first_ok.then(|| strtoul(digits, radix) as i32)
}

fn run(
    coll: &'static Collective,
    opts: Options,
    launch: bootstrap::Launch,
    host: &str,
) -> TestResult<i32> {
    let boot = launch.boot.clone();
    // First of all: the processes agree on the options, or stop (exit 6).
    agree::check(&opts, &*boot)?;
    let pl = place(&*boot, launch.local_rank_hint)?;
    // Embedded, each split group's first process reports its group (the
    // embedding tool gathers them); nccl-tests prints from rank 0 only.
    let printer = if embedded() { pl.group_proc } else { pl.proc };
    let mut out = Output::new(printer == 0, &opts);
    if let Some(path) = opts.output_file.clone() {
        // nccl-tests records ncclGetVersion() (0 for the host and MPI backends).
        let nccl_version = backend::probe_features(opts.backend).1;
        out.open_json(&path, &opts.argv, nccl_version);
    }
    if let Some(path) = opts.csv_file.clone() {
        out.open_csv(&path).map_err(TestError::InvalidUsage)?;
    }
    // A timeout is explained (which rank is stuck) before the files close.
    let r = run_opened(coll, opts, &boot, &pl, host, &mut out)
        .map_err(|e| census::explain(e, &*boot, host));
    if let Err(e) = &r {
        // The files stay valid, with what was measured and why it stopped.
        out.abandon(&e.to_string());
    }
    let closed = out.finalize().map_err(TestError::Internal);
    let code = r?;
    closed?;
    // Nobody leaves (MPI_Finalize waits for everyone) before everyone is
    // done: a rank stuck at the end is then a timeout like any other.
    boot.barrier()?;
    Ok(code)
}

fn run_opened(
    coll: &'static Collective,
    mut opts: Options,
    boot: &Arc<dyn Bootstrap>,
    pl: &Place,
    host: &str,
    out: &mut Output,
) -> TestResult<i32> {
    // Split only when the colors differ: every process then agrees, and a
    // run whose processes share one color keeps its plain communicator.
    let split = (pl.group_procs < pl.total_procs).then_some(pl.color);
    let be = backend::create(&opts, coll.kind, boot, split)?;
    check_threading(&opts, &**boot)?;
    let per_proc = (opts.nthreads * opts.ngpus) as usize;
    let gpu0 = std::env::var("NCCL_TESTS_DEVICE")
        .map(|v| atoi(&v))
        .unwrap_or(-1);
    let first_dev = if gpu0 != -1 {
        gpu0
    } else {
        (pl.local_rank * per_proc) as i32
    };
    let max_mem = device_report(&opts, &*be, &**boot, pl, first_dev, host, out)?;
    cap_max_bytes(&mut opts, max_mem, pl.proc == 0, out);
    if matches!(opts.backend, BackendKind::Host | BackendKind::Mpi) {
        // Host buffers: all of this process's ranks against what the host
        // has free (allocation alone would succeed under overcommit).
        // Every rank of the host: its processes start together, each
        // seeing the same free memory. The MPI backend's staged copies too.
        let bytes = super::threads::buffer_bytes(&opts)?;
        let (buffers, staged) = super::alloc::host_holds(opts.backend, bytes, opts.datacheck != 0);
        let ranks = per_proc.saturating_mul(pl.local_procs.max(1));
        super::alloc::check_fits(bytes, buffers, staged, ranks, super::alloc::room().as_ref())?;
    }
    let nranks = pl.group_procs * per_proc;
    out.nranks = nranks;
    let id = unique_id(&*be, &**boot, pl)?;
    let slots = thread_slots(&opts, pl, first_dev);
    let mut hooks = Hooks::from_env();
    // Embedded with a wait (erdma-cluster's slow hook in the NCCL pairs):
    // every rank of this process waits, in whichever communicator.
    if let Some(ms) = embedded_slow() {
        hooks.slow.extend(slots.iter().flatten().map(|s| s.rank));
        hooks.slow_ms = ms;
    }
    let sync = ProcessSync::new(opts.nthreads as usize, boot.clone());
    // Embedded with a color (erdma-cluster's host stage): each group's own
    // numbers; NCCL_TESTS_SPLIT keeps nccl-tests' average over all.
    let sync = match embedded_color() {
        Some(_) => sync.within(pl.colors.iter().map(|c| *c == pl.color).collect()),
        None => sync,
    };
    // Every process must sweep the same types (nccl-tests takes the lowest
    // compute capability of the run to drop fp8).
    let mut features = be.features();
    features.type_count =
        bootstrap::allreduce_i64(&**boot, features.type_count as i64, Combine::Min)? as usize;
    let (mut ranks, setup_mem) = if opts.parallel_init == 0 {
        init_all(&*be, &id, nranks, &slots, &opts)?
    } else {
        // Each thread creates its own (threads::init_thread).
        let none = (0..slots.len()).map(|_| None).collect();
        (none, MemUse::default())
    };
    out.result_header();
    let common = Common {
        opts: &opts,
        coll,
        sync: &sync,
        hooks: &hooks,
        features,
        nranks,
        proc: pl.group_proc,
        world_proc: pl.proc,
        uneven_split: pl.uneven,
        max_bytes: opts.max_bytes,
        hostname: host,
        check_workers: Workers::share(pl.local_procs.max(1) * opts.nthreads.max(1) as usize),
    };
    let done = run_threads(&common, &*be, &id, &slots, &mut ranks, out)?;
    let totals = done.totals;
    let errors = bootstrap::allreduce_i64(&**boot, totals.errors, Combine::Sum)?;
    let mem = setup_mem.max(done.mem).max_over(&**boot)?;
    for mut r in done.ranks {
        r.finish()?;
    }
    let check_avg_bw = std::env::var("NCCL_TESTS_MIN_BW")
        .map(|v| atof(&v))
        .unwrap_or(-1.0);
    let bw = if totals.bw_count == 0 {
        -f64::NAN
    } else {
        totals.bw_sum / totals.bw_count as f64
    };
    out.footer(errors, bw, check_avg_bw, &opts.program_name);
    if opts.memory_report != 0 {
        out.mem_info(mem.init, mem.user, mem.coll);
    }
    out.errors(&be.last_error());
    let failed = errors != 0 || bw < check_avg_bw * 0.9;
    Ok(if failed { EXIT_WRONG_RESULTS } else { 0 })
}

type AllRanks = Vec<Option<Box<dyn Ranks>>>;

/// Without `-p`: every thread's communicators and buffers from this
/// thread, with nccl-tests' Initialization and User-Allocated readings
/// (over the first thread's devices, as its loops run over `nGpus` only).
fn init_all(
    be: &dyn Backend,
    id: &[u8],
    nranks: usize,
    slots: &[Vec<RankSlot>],
    opts: &Options,
) -> TestResult<(AllRanks, MemUse)> {
    let devs = slots.first().map_or_else(Vec::new, |s| memuse::devices(s));
    let f0 = memuse::free_now(be, &devs);
    let mut v = be.init_ranks(id, nranks, slots)?;
    let f1 = memuse::free_now(be, &devs);
    alloc_all(&mut v, opts)?;
    let f2 = memuse::free_now(be, &devs);
    let mem = MemUse {
        init: memuse::largest_drop(0, &f0, &f1),
        user: memuse::largest_drop(0, &f1, &f2),
        ..MemUse::default()
    };
    Ok((v.into_iter().map(Some).collect(), mem))
}

fn check_threading(o: &Options, boot: &dyn Bootstrap) -> TestResult<()> {
    #[cfg(feature = "mpi")]
    if o.nthreads > 1 && boot.name() == "MPI" && !bootstrap::mpi::serialized_ok() {
        return Err(TestError::NotImplemented(
            "-t > 1 needs MPI_THREAD_SERIALIZED or better, which this MPI does not provide".into(),
        ));
    }
    let _ = (o, boot);
    Ok(())
}

fn thread_slots(o: &Options, pl: &Place, first_dev: i32) -> Vec<Vec<RankSlot>> {
    let (t, g) = (o.nthreads as usize, o.ngpus as usize);
    (0..t)
        .map(|th| {
            (0..g)
                .map(|i| RankSlot {
                    rank: (pl.group_proc * t + th) * g + i,
                    device: first_dev + (th * g + i) as i32,
                })
                .collect()
        })
        .collect()
}

/// `writeDeviceReport`: every process's device lines to rank 0; returns the
/// smallest device memory of the run.
fn device_report(
    o: &Options,
    be: &dyn Backend,
    boot: &dyn Bootstrap,
    pl: &Place,
    first_dev: i32,
    host: &str,
    out: &mut Output,
) -> TestResult<u64> {
    let (headers, library) = be.versions();
    let per_proc = (o.nthreads * o.ngpus) as usize;
    let available = be.device_count()?;
    let mut lines = Vec::new();
    let mut max_mem = u64::MAX;
    let mut status = 0u8;
    for i in 0..per_proc {
        let dev = first_dev + i as i32;
        if dev < 0 || dev as usize >= available {
            console::err(&format!(
                "Invalid number of GPUs: {} requested but only {} were found.\nPlease check the number of processes and GPUs per process.\n",
                first_dev as i64 + per_proc as i64,
                available
            ));
            status = 1;
            break;
        }
        let info = be.device_info(dev)?;
        max_mem = max_mem.min(info.total_mem);
        lines.push(DeviceLine {
            rank: (pl.proc * per_proc + i) as i32,
            group: pl.color,
            pid: std::process::id() as i32,
            hostname: host.to_string(),
            device: dev,
            pci: info.pci,
            name: info.name,
        });
    }
    let mut msg = vec![status];
    msg.extend_from_slice(&max_mem.to_le_bytes());
    msg.extend_from_slice(serialize_lines(&lines).as_bytes());
    let all = bootstrap::allgather_var(boot, &msg)?;
    if all.iter().any(|m| m.first() != Some(&0)) {
        return Err(TestError::NotImplemented(
            "too few GPUs for the requested ranks".into(),
        ));
    }
    let procs: Vec<Vec<DeviceLine>> = all
        .iter()
        .map(|m| parse_lines(m.get(9..).unwrap_or_default()))
        .collect();
    // Who is where, to name a rank that stops answering later.
    job::set_roster(
        procs
            .iter()
            .map(|l| {
                l.first()
                    .map_or((String::new(), 0), |d| (d.hostname.clone(), d.pid as u32))
            })
            .collect(),
        per_proc,
    );
    out.device_report(o, headers, library, &procs);
    let min = all
        .iter()
        .map(|m| {
            u64::from_le_bytes(
                m.get(1..9)
                    .and_then(|b| b.try_into().ok())
                    .unwrap_or([0xff; 8]),
            )
        })
        .min();
    let _ = pl.total_procs;
    Ok(min.unwrap_or(u64::MAX))
}

fn serialize_lines(lines: &[DeviceLine]) -> String {
    lines
        .iter()
        .map(|d| {
            format!(
                "{}\t{}\t{}\t{}\t{}\t{}\t{}\t{}\t{}\n",
                d.rank,
                d.group,
                d.pid,
                d.hostname,
                d.device,
                d.pci.0,
                d.pci.1,
                d.pci.2,
                d.name.replace(['\t', '\n'], " ")
            )
        })
        .collect()
}

fn parse_lines(b: &[u8]) -> Vec<DeviceLine> {
    String::from_utf8_lossy(b)
        .lines()
        .filter_map(|l| {
            let f: Vec<&str> = l.splitn(9, '\t').collect();
            let n = |i: usize| f.get(i).and_then(|v| v.parse::<i64>().ok());
            Some(DeviceLine {
                rank: n(0)? as i32,
                group: n(1)? as i32,
                pid: n(2)? as i32,
                hostname: f.get(3)?.to_string(),
                device: n(4)? as i32,
                pci: (n(5)? as u32, n(6)? as u32, n(7)? as u32),
                name: f.get(8)?.to_string(),
            })
        })
        .collect()
}

/// The memory cap: 1 GiB reserved per 16 GiB (at most 4 GiB), 1 GiB for
/// the library, the rest split between send, receive and expected buffers.
pub fn mem_max_bytes(max_mem: u64, datacheck: i32) -> u64 {
    const GB: u64 = 1 << 30;
    let reserve = (max_mem.wrapping_add(16 * GB - 1) / (16 * GB))
        .wrapping_mul(GB)
        .min(4 * GB);
    max_mem.wrapping_sub(reserve).wrapping_sub(GB) / if datacheck != 0 { 3 } else { 2 }
}

fn cap_max_bytes(o: &mut Options, max_mem: u64, is_root: bool, out: &Output) {
    let cap = mem_max_bytes(max_mem, o.datacheck);
    if o.max_bytes > cap {
        o.max_bytes = cap;
        if o.min_bytes > o.max_bytes {
            o.min_bytes = o.max_bytes;
        }
        if is_root {
            out.print(&format!(
                "#\n# Reducing maxBytes to {} due to memory limitation\n",
                o.max_bytes as i64
            ));
        }
    }
}

/// The communicator id: each split group's first process creates it.
fn unique_id(be: &dyn Backend, boot: &dyn Bootstrap, pl: &Place) -> TestResult<Vec<u8>> {
    let mine = if pl.group_proc == 0 {
        be.create_id()?
    } else {
        Vec::new()
    };
    let all = bootstrap::allgather_var(boot, &mine)?;
    let colors = boot.allgather(&pl.color.to_le_bytes())?;
    let leader = colors
        .chunks_exact(4)
        .position(|c| i32::from_le_bytes(c.try_into().unwrap_or([0; 4])) == pl.color)
        .unwrap_or(0);
    Ok(all.get(leader).cloned().unwrap_or_default())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn memory_cap_formula() {
        let h200 = 150_754_820_096u64; // 140.4 GiB
        let cap = mem_max_bytes(h200, 1);
        assert_eq!(cap, (h200 - 4 * (1 << 30) - (1 << 30)) / 3);
        assert!(
            mem_max_bytes(u64::MAX, 1) > 1 << 60,
            "host backends are not capped"
        );
        assert_eq!(mem_max_bytes(16 << 30, 0), 7 << 30);
    }

    #[test]
    fn device_lines_round_trip() {
        let d = DeviceLine {
            rank: 3,
            group: 1,
            pid: 42,
            hostname: "h".into(),
            device: 2,
            pci: (0, 0x1b, 0),
            name: "NVIDIA H200".into(),
        };
        assert_eq!(
            parse_lines(serialize_lines(std::slice::from_ref(&d)).as_bytes()),
            vec![d]
        );
    }
}
