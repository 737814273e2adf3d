//! What every wait of the process consults, so that no wait outlives the
//! run: whether the process must stop (SIGINT/SIGTERM, stdout gone, another
//! of its threads failed) and whether a peer has started the timeout census
//! ([`super::census`]); and what the process is doing, for that census.
//!
//! This is process-wide state on purpose: signals and stdout belong to the
//! process, and a timeout must reach every thread, whatever it waits in.
//! [`check`] is what waits call: a relaxed atomic load, plus (at most every
//! [`PROBE_EVERY`]) a non-blocking look at the bootstrap for a peer's census.

use std::sync::atomic::{AtomicBool, AtomicI32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use super::bootstrap::Bootstrap;
use super::errors::{TestError, TestResult};

/// Why the process stops.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Stop {
    /// A signal (SIGINT, SIGTERM; SIGPIPE when stdout's reader left).
    Signal(i32),
    /// Another thread of this process failed.
    Sibling,
    /// Writing the report to stdout failed (disk full, I/O error).
    Stdout(String),
}

static STOPPING: AtomicBool = AtomicBool::new(false);
static STOP: Mutex<Option<Stop>> = Mutex::new(None);
static WORLD: OnceLock<Arc<dyn Bootstrap>> = OnceLock::new();
static TIMEOUT_S: AtomicI32 = AtomicI32::new(0);
static ISSUED: Mutex<Vec<Arc<IssueCounter>>> = Mutex::new(Vec::new());
static ACTIVITY: Mutex<String> = Mutex::new(String::new());
static LAST_PROBE: Mutex<Option<Instant>> = Mutex::new(None);
static PENDING: Mutex<Vec<usize>> = Mutex::new(Vec::new());
static ROSTER: Mutex<Vec<(String, u32)>> = Mutex::new(Vec::new());
static PER_PROC: AtomicU64 = AtomicU64::new(1);

/// How often [`check`] looks for a peer's census (a syscall or MPI call).
pub const PROBE_EVERY: Duration = Duration::from_millis(20);

/// Asks every wait of the process to end; the first reason is kept.
pub fn stop(why: Stop) {
    let mut s = STOP.lock().unwrap_or_else(|p| p.into_inner());
    if s.is_none() {
        *s = Some(why);
    }
    STOPPING.store(true, Ordering::Release);
}

/// Forgets a [`Stop::Sibling`] (a thread of the run failed and stopped the
/// others): for a tool that runs the benchmark in-process again after a
/// failed run. Any other reason (a signal, stdout gone) is kept.
pub fn clear_sibling_stop() {
    let mut s = STOP.lock().unwrap_or_else(|p| p.into_inner());
    if matches!(*s, Some(Stop::Sibling)) {
        *s = None;
        STOPPING.store(false, Ordering::Release);
    }
}

/// The running deadline's cancel flag and the thread's wake-up.
type DeadlineTimer = Arc<(Mutex<bool>, std::sync::Condvar)>;

const DEADLINE_RUNNING: u64 = 1;
const DEADLINE_PASSED: u64 = 2;
const DEADLINE_HARD: u64 = 3;

/// A total deadline and the thread that marks it passed, then hard.
struct DeadlineClock {
    /// 0: none; [`DEADLINE_RUNNING`], [`DEADLINE_PASSED`], [`DEADLINE_HARD`].
    state: AtomicU64,
    secs: AtomicU64,
    timer: Mutex<Option<DeadlineTimer>>,
}

impl DeadlineClock {
    const fn new() -> DeadlineClock {
        DeadlineClock {
            state: AtomicU64::new(0),
            secs: AtomicU64::new(0),
            timer: Mutex::new(None),
        }
    }

    /// Passed `secs` from now, hard `grace()` seconds later.
    fn start(&'static self, secs: u64, grace: fn() -> u64) {
        self.clear();
        if secs == 0 {
            return;
        }
        let timer: DeadlineTimer = Arc::new((Mutex::new(false), std::sync::Condvar::new()));
        let t = timer.clone();
        let soft = Instant::now() + Duration::from_secs(secs);
        self.secs.store(secs, Ordering::Relaxed);
        self.state.store(DEADLINE_RUNNING, Ordering::Release);
        let spawned = std::thread::Builder::new()
            .name("deadline".into())
            .spawn(move || {
                let (cancelled, cv) = &*t;
                let mut c = cancelled.lock().unwrap_or_else(|p| p.into_inner());
                while !*c {
                    let now = Instant::now();
                    let hard = soft + Duration::from_secs(grace());
                    let (state, next) = if now >= hard {
                        (DEADLINE_HARD, None)
                    } else if now >= soft {
                        (DEADLINE_PASSED, Some(hard))
                    } else {
                        (DEADLINE_RUNNING, Some(soft))
                    };
                    self.state.store(state, Ordering::Release);
                    let Some(next) = next else {
                        return;
                    };
                    c = cv
                        .wait_timeout(c, next - now)
                        .unwrap_or_else(|p| p.into_inner())
                        .0;
                }
            });
        // Without its thread it never passes here, but the run still
        // agrees on it after each size (with the others, whose may pass).
        if spawned.is_ok() {
            *self.timer.lock().unwrap_or_else(|p| p.into_inner()) = Some(timer);
        }
    }

    fn clear(&self) {
        if let Some(t) = self.timer.lock().unwrap_or_else(|p| p.into_inner()).take() {
            // Under the thread's lock: it is waiting, or has not yet
            // stored its next state.
            let mut c = t.0.lock().unwrap_or_else(|p| p.into_inner());
            *c = true;
            self.state.store(0, Ordering::Release);
            drop(c);
            t.1.notify_all();
        }
        self.state.store(0, Ordering::Release);
    }

    fn at_least(&self, state: u64) -> Option<u64> {
        (self.state.load(Ordering::Relaxed) >= state).then(|| self.secs.load(Ordering::Relaxed))
    }
}

static DEADLINE: DeadlineClock = DeadlineClock::new();

/// `-T`, the time a size may run past the deadline (60 s without one).
fn deadline_grace() -> u64 {
    match timeout_s() {
        t if t > 0 => t as u64,
        _ => 60,
    }
}

/// Gives the run a total deadline of `secs` seconds from now (0: none),
/// replacing any earlier one. Once it passes, the driver stops after the
/// size it is running, every process of the run together
/// ([`deadline_passed`], agreed over the bootstrap: the processes stay in
/// step for the next run); a size that does not end within `-T` more
/// seconds (`-n 2000000000`) is stopped mid-collective ([`deadline_hard`]).
/// Either way the run fails with [`TestError::Deadline`] (status 4).
/// [`clear_deadline`] when the run ends. For a tool that runs the
/// benchmark in-process several times (erdma-cluster): each run must end,
/// whatever its options.
pub fn set_deadline(secs: u64) {
    DEADLINE.start(secs, deadline_grace);
}

/// Ends the deadline of [`set_deadline`] (its thread exits).
pub fn clear_deadline() {
    DEADLINE.clear();
}

/// Whether the run has a deadline (the same on every process of the run:
/// the driver then agrees on it after each size).
pub fn deadline_set() -> bool {
    DEADLINE.at_least(DEADLINE_RUNNING).is_some()
}

/// The deadline in seconds, once it passed (one atomic load).
#[inline]
pub fn deadline_passed() -> Option<u64> {
    DEADLINE.at_least(DEADLINE_PASSED)
}

/// The deadline in seconds, once it and `-T` more passed: the collective
/// running then is abandoned (one atomic load).
#[inline]
pub fn deadline_hard() -> Option<u64> {
    DEADLINE.at_least(DEADLINE_HARD)
}

/// Whether the process is stopping (cheap: one atomic load).
#[inline]
pub fn stopping() -> bool {
    STOPPING.load(Ordering::Relaxed)
}

/// Why the process is stopping.
pub fn stop_reason() -> Option<Stop> {
    STOP.lock().unwrap_or_else(|p| p.into_inner()).clone()
}

/// The error a wait returns when the process stops for `why`.
pub fn stop_error(why: &Stop) -> TestError {
    match why {
        Stop::Signal(s) => TestError::Interrupted { signal: *s },
        Stop::Sibling => TestError::Cancelled,
        Stop::Stdout(msg) => TestError::Internal(msg.clone()),
    }
}

/// Records `-T` (for messages and the census).
pub fn set_timeout(timeout_s: i32) {
    TIMEOUT_S.store(timeout_s, Ordering::Relaxed);
}

/// Registers the job's bootstrap, whose peers' events [`check`] watches.
pub fn set_world(boot: Arc<dyn Bootstrap>) {
    let _ = WORLD.set(boot);
}

/// `-T` in seconds (<= 0: none).
pub fn timeout_s() -> i32 {
    TIMEOUT_S.load(Ordering::Relaxed)
}

/// For waits: `Err` when the process stops, or on a peer's event (it
/// started the timeout census: a [`TestError::Timeout`], this process then
/// joins it; or it failed and said why). Call it from every loop that waits on something outside this
/// thread.
pub fn check() -> TestResult<()> {
    if stopping()
        && let Some(why) = stop_reason()
    {
        return Err(stop_error(&why));
    }
    let Some(world) = WORLD.get() else {
        return Ok(());
    };
    {
        let mut last = LAST_PROBE.lock().unwrap_or_else(|p| p.into_inner());
        let now = Instant::now();
        if last.is_some_and(|t| now.duration_since(t) < PROBE_EVERY) {
            return Ok(());
        }
        *last = Some(now);
    }
    match world.size() > 1 {
        true => world.peer_event().map_or(Ok(()), Err),
        false => Ok(()),
    }
}

/// [`check`] for the waits of the collectives themselves, and the run's
/// deadline once it is hard ([`deadline_hard`]: [`TestError::Deadline`]).
/// Not for the bootstrap's waits: the processes must leave them in step.
pub fn check_collective() -> TestResult<()> {
    check()?;
    match deadline_hard() {
        Some(secs) => Err(TestError::Deadline { secs }),
        None => Ok(()),
    }
}

/// One benchmark thread's count of issued collectives, compared across
/// ranks by the census to find a rank that stopped issuing. Each thread
/// has its own, on its own cache line, and updates it with a plain load and
/// store: nothing shared is written, and no atomic read-modify-write is
/// paid, in the timed loop.
#[repr(align(128))]
#[derive(Default)]
pub struct IssueCounter {
    n: AtomicU64,
}

impl IssueCounter {
    /// A counter included in [`issued`].
    pub fn register() -> Arc<IssueCounter> {
        let c = Arc::new(IssueCounter::default());
        ISSUED
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(c.clone());
        c
    }

    /// Counts one collective (meant for the thread that registered it:
    /// two threads noting at once could lose a count, nothing worse).
    #[inline]
    pub fn note(&self) {
        let n = self.n.load(Ordering::Relaxed);
        self.n.store(n + 1, Ordering::Relaxed);
    }
}

/// Collectives issued so far by this process (every thread's).
pub fn issued() -> u64 {
    ISSUED
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .iter()
        .map(|c| c.n.load(Ordering::Relaxed))
        .sum()
}

/// Records what the process is running (e.g. `AllReduce float sum 64 B
/// (timed iterations)`), for the timeout report.
pub fn set_activity(what: &str) {
    let mut a = ACTIVITY.lock().unwrap_or_else(|p| p.into_inner());
    a.clear();
    a.push_str(what);
}

/// What the process is running ("setup" before the first collective).
pub fn activity() -> String {
    let a = ACTIVITY.lock().unwrap_or_else(|p| p.into_inner());
    if a.is_empty() {
        "setup".into()
    } else {
        a.clone()
    }
}

/// Records the ranks of this process that did not complete when a
/// collective timed out (by default: all of them).
pub fn set_pending(ranks: Vec<usize>) {
    *PENDING.lock().unwrap_or_else(|p| p.into_inner()) = ranks;
}

/// See [`set_pending`].
pub fn pending() -> Vec<usize> {
    PENDING.lock().unwrap_or_else(|p| p.into_inner()).clone()
}

/// Records every process's (host, pid) and its number of ranks, once the
/// device report has gathered them (to name a rank that stops answering).
pub fn set_roster(procs: Vec<(String, u32)>, per_proc: usize) {
    *ROSTER.lock().unwrap_or_else(|p| p.into_inner()) = procs;
    PER_PROC.store(per_proc.max(1) as u64, Ordering::Relaxed);
}

/// See [`set_roster`]: (host, pid) per process (empty before the report).
pub fn roster() -> Vec<(String, u32)> {
    ROSTER.lock().unwrap_or_else(|p| p.into_inner()).clone()
}

/// Ranks per process (`-t` x `-g`).
pub fn per_proc() -> usize {
    PER_PROC.load(Ordering::Relaxed) as usize
}

/// The signals that stop a run cleanly: SIGHUP too (a closed terminal or
/// ssh session), so that its files are closed and renamed as for SIGTERM.
const STOP_SIGNALS: [i32; 3] = [libc::SIGINT, libc::SIGTERM, libc::SIGHUP];

/// SIGINT, SIGTERM and SIGHUP become a request to stop ([`Stop::Signal`]): every
/// wait returns, the output files are closed, and the process then ends by
/// that signal ([`die_by_signal`]). A second signal, or a process that does
/// not end within [`SIGNAL_GRACE`], ends it at once. Call first thing in
/// `main`, before any thread exists (the signals are blocked in every
/// thread and taken by one thread that waits for them).
pub fn install_signal_handlers() {
    // SAFETY: sigset_t is plain data initialized by sigemptyset/sigaddset;
    // pthread_sigmask only changes this thread's mask (inherited by the
    // threads created later).
    let blocked = unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        for s in STOP_SIGNALS {
            libc::sigaddset(&mut set, s);
        }
        libc::pthread_sigmask(libc::SIG_BLOCK, &set, std::ptr::null_mut()) == 0
    };
    if !blocked {
        return;
    }
    let spawned = std::thread::Builder::new()
        .name("signals".into())
        .spawn(signal_thread);
    if spawned.is_err() {
        // Without the thread, signals must keep their default effect.
        unblock(&STOP_SIGNALS);
    }
}

/// How long a stopping process may take to close its files after a signal.
pub const SIGNAL_GRACE: Duration = Duration::from_secs(5);

fn signal_thread() {
    let mut first: Option<(i32, Instant)> = None;
    loop {
        let mut sig: libc::c_int = 0;
        // SAFETY: `set` is initialized by sigemptyset/sigaddset; sigwait
        // writes the signal number into `sig`.
        let rc = unsafe {
            let mut set: libc::sigset_t = std::mem::zeroed();
            libc::sigemptyset(&mut set);
            for s in STOP_SIGNALS {
                libc::sigaddset(&mut set, s);
            }
            if first.is_some() {
                // Poll, so that the grace period can end the process.
                let ts = libc::timespec {
                    tv_sec: 0,
                    tv_nsec: 100_000_000,
                };
                let r = libc::sigtimedwait(&set, std::ptr::null_mut(), &ts);
                if r > 0 {
                    sig = r;
                    0
                } else {
                    -1
                }
            } else {
                libc::sigwait(&set, &mut sig)
            }
        };
        match (rc, first) {
            (0, None) => {
                first = Some((sig, Instant::now()));
                stop(Stop::Signal(sig));
            }
            // A second signal: the user insists.
            (0, Some(_)) => die_by_signal(sig),
            (_, Some((s, at))) if at.elapsed() > SIGNAL_GRACE => die_by_signal(s),
            _ => {}
        }
    }
}

fn unblock(signals: &[i32]) {
    // SAFETY: as in install_signal_handlers.
    unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        for &s in signals {
            libc::sigaddset(&mut set, s);
        }
        libc::pthread_sigmask(libc::SIG_UNBLOCK, &set, std::ptr::null_mut());
    }
}

/// Ends the process by `signal` with its default action (so a shell or
/// launcher sees "killed by SIGINT", as with any C program), falling back
/// to exit status 128 + signal.
pub fn die_by_signal(signal: i32) -> ! {
    // SAFETY: resetting a signal to its default action and raising it have
    // no memory-safety preconditions.
    unsafe {
        libc::signal(signal, libc::SIG_DFL);
    }
    unblock(&[signal]);
    // SAFETY: as above.
    unsafe {
        libc::raise(signal);
    }
    std::process::exit(128 + signal)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stop_errors_map_to_statuses() {
        assert_eq!(stop_error(&Stop::Signal(2)).exit_code(), 130);
        assert_eq!(stop_error(&Stop::Sibling).exit_code(), 1);
        assert_eq!(stop_error(&Stop::Stdout("x".into())).to_string(), "x");
    }

    #[test]
    fn a_deadline_passes_then_turns_hard_and_is_cleared() {
        // A clock of its own: the process's is the driver's.
        static CLOCK: DeadlineClock = DeadlineClock::new();
        CLOCK.start(1, || 1);
        assert!(CLOCK.at_least(DEADLINE_RUNNING).is_some());
        assert_eq!(CLOCK.at_least(DEADLINE_PASSED), None);
        let t = Instant::now();
        let wait = |state| {
            while CLOCK.at_least(state).is_none() && t.elapsed() < Duration::from_secs(30) {
                std::thread::sleep(Duration::from_millis(10));
            }
        };
        wait(DEADLINE_PASSED);
        assert_eq!(CLOCK.at_least(DEADLINE_PASSED), Some(1));
        assert!(
            t.elapsed() >= Duration::from_millis(900),
            "{:?}",
            t.elapsed()
        );
        // Hard 1 s (the grace) later.
        wait(DEADLINE_HARD);
        assert_eq!(CLOCK.at_least(DEADLINE_HARD), Some(1));
        assert!(
            t.elapsed() >= Duration::from_millis(1900),
            "{:?}",
            t.elapsed()
        );
        CLOCK.clear();
        assert_eq!(CLOCK.at_least(DEADLINE_RUNNING), None);
        // Cleared before it passes: it never does.
        CLOCK.start(1, || 1);
        CLOCK.clear();
        std::thread::sleep(Duration::from_millis(1300));
        assert_eq!(CLOCK.at_least(DEADLINE_RUNNING), None);
    }
}
