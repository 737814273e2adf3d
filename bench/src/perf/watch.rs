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
    /// The peer may end its test now (see [`Watch::peer_may_leave`]).
    peer_may_leave: bool,
}

impl Watch {
    /// Starts watching; `timeout` without progress fails the test.
    pub fn new(timeout: Duration) -> Watch {
        Watch {
            idle: 0,
            progressed: false,
            times: None,
            timeout,
            peer_may_leave: false,
        }
    }

    /// This wait may outlast the peer's test: its leaving is not a failure
    /// (only `--timeout` without progress is). write_lat's last completion:
    /// the peer ends once it has seen this side's last message, and its
    /// exchange connection may close before the acknowledgement of that
    /// message comes back (a long path: seen with 30 ms of tc netem delay).
    pub fn peer_may_leave(mut self) -> Watch {
        self.peer_may_leave = true;
        self
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
        if !self.peer_may_leave && now - *last_peer_check >= PEER_CHECK {
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

#[cfg(test)]
mod tests {
    use super::*;

    /// A peer that has left.
    struct Gone;

    impl Comm for Gone {
        fn send(&mut self, _: &[u8], _: &str) -> PerfResult<()> {
            Ok(())
        }
        fn recv(&mut self, _: &mut [u8], _: &str) -> PerfResult<()> {
            Ok(())
        }
        fn set_timeout(&mut self, _: Option<Duration>) {}
        fn peer_gone(&mut self) -> bool {
            true
        }
        fn peer(&self) -> String {
            "peer".into()
        }
        fn method(&self) -> &'static str {
            "Ethernet"
        }
        fn recv_record(&mut self, _: usize, _: &str) -> PerfResult<Vec<u8>> {
            Ok(Vec::new())
        }
    }

    /// Idles `w` for `d` (every idle round, as a measurement loop does).
    fn idle_for(w: &mut Watch, d: Duration) -> PerfResult<()> {
        let t0 = Instant::now();
        while t0.elapsed() < d {
            w.idle(&mut Gone, || "the completion".into())?;
        }
        Ok(())
    }

    #[test]
    fn a_peer_that_left_fails_the_wait_unless_it_may() {
        let wait = Duration::from_millis(100);
        let e = idle_for(&mut Watch::new(Duration::from_secs(30)), wait).unwrap_err();
        assert!(e.to_string().contains("went away during the test"), "{e}");
        let mut w = Watch::new(Duration::from_secs(30)).peer_may_leave();
        idle_for(&mut w, wait).unwrap();
        // --timeout still bounds it.
        let mut w = Watch::new(Duration::from_millis(50)).peer_may_leave();
        let e = idle_for(&mut w, Duration::from_secs(5)).unwrap_err();
        assert!(e.to_string().contains("nothing completed"), "{e}");
    }
}
