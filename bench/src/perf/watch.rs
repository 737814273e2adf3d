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

/// A progress watchdog for one measurement.
pub struct Watch {
    idle: u32,
    progressed: bool,
    last_progress: Instant,
    last_peer_check: Instant,
    timeout: Duration,
}

impl Watch {
    /// Starts watching; `timeout` without progress fails the test.
    pub fn new(timeout: Duration) -> Watch {
        let now = Instant::now();
        Watch {
            idle: 0,
            progressed: false,
            last_progress: now,
            last_peer_check: now,
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
        if self.progressed {
            self.progressed = false;
            self.last_progress = now;
        } else if now - self.last_progress > self.timeout {
            return Err(PerfError::Peer(format!(
                "{}: nothing completed for {:.0?}: the peer stopped (is it alive? --timeout)",
                what(),
                now - self.last_progress
            )));
        }
        if now - self.last_peer_check >= PEER_CHECK {
            self.last_peer_check = now;
            if comm.peer_gone() {
                return Err(PerfError::Peer(format!(
                    "{}: {} went away during the test (it exited or was killed; see its output)",
                    what(),
                    comm.peer()
                )));
            }
        }
        // Waiting for a peer that is slower: do not starve it of the CPU.
        if now - self.last_progress > Duration::from_millis(50) {
            std::thread::yield_now();
        }
        Ok(())
    }
}
