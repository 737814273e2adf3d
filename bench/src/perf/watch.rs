//! Keeps the measurement loops from hanging: when nothing completes, it
//! checks now and then whether the peer is still there (its exchange
//! connection) and fails after `--timeout` without progress, like perftest's
//! `check_alive` (60 s).

use std::time::{Duration, Instant};

use super::error::{PerfError, PerfResult};
use super::wire::Comm;

/// Idle loops between looks at the clock.
const IDLE_CHECK: u32 = 4096;
/// Shortest time between two looks at the peer.
const PEER_CHECK: Duration = Duration::from_millis(20);

/// A progress watchdog for one measurement. It reads the clock only after
/// thousands of idle rounds (in a VM the clock can be a slow system call),
/// never in a loop that makes progress.
pub struct Watch {
    idle: u32,
    progressed: bool,
    /// (last progress, last look at the peer), from the first check on.
    times: Option<(Instant, Instant)>,
    timeout: Duration,
}

impl Watch {
    /// Starts watching; `timeout` without progress fails the test.
    pub fn new(timeout: Duration) -> Watch {
        Watch {
            idle: 0,
            progressed: false,
            times: None,
            timeout,
        }
    }

    /// Something completed.
    #[inline(always)]
    pub fn progress(&mut self) {
        self.progressed = true;
        self.idle = 0;
    }

    /// Nothing completed this time round; every few thousand idle rounds,
    /// checks the clock and the peer.
    #[inline(always)]
    pub fn idle(&mut self, comm: &mut dyn Comm, what: impl Fn() -> String) -> PerfResult<()> {
        self.idle += 1;
        if self.idle < IDLE_CHECK {
            return Ok(());
        }
        self.idle = 0;
        self.check(comm, what)
    }

    #[cold]
    fn check(&mut self, comm: &mut dyn Comm, what: impl Fn() -> String) -> PerfResult<()> {
        let now = Instant::now();
        let (last_progress, last_peer_check) = self.times.get_or_insert((now, now));
        if self.progressed {
            self.progressed = false;
            *last_progress = now;
        } else if now - *last_progress > self.timeout {
            return Err(PerfError::Peer(format!(
                "{}: nothing completed for {:.0?}: the peer stopped (is it alive? --timeout)",
                what(),
                now - *last_progress
            )));
        }
        let stalled = now - *last_progress;
        if now - *last_peer_check >= PEER_CHECK {
            *last_peer_check = now;
            if comm.peer_gone() {
                return Err(PerfError::Peer(format!(
                    "{}: {} went away during the test (it exited or was killed; see its output)",
                    what(),
                    comm.peer()
                )));
            }
        }
        // Waiting for a peer that is slower: do not starve it of the CPU.
        if stalled > Duration::from_millis(50) {
            std::thread::yield_now();
        }
        Ok(())
    }
}
