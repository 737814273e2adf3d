//! nccl-tests' `timer` (timer.cc): nanoseconds of the monotonic clock
//! (`std::chrono::steady_clock`, i.e. `clock_gettime(CLOCK_MONOTONIC)`)
//! since a start point, as seconds.
//!
//! The timed loop reads the clock once per iteration, as nccl-tests does,
//! so the read must cost what nccl-tests' costs: one vDSO call and integer
//! arithmetic (`Instant::elapsed` adds checked `Duration` normalisation,
//! about 90 instructions per read).

/// A start point on the monotonic clock.
#[derive(Clone, Copy, Debug)]
pub struct Timer {
    t0: u64,
}

/// Nanoseconds on `CLOCK_MONOTONIC`.
#[inline]
fn now_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid, writable timespec; CLOCK_MONOTONIC always
    // exists on Linux, so the call cannot fail (and a failure would leave 0).
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    (ts.tv_sec as u64)
        .wrapping_mul(1_000_000_000)
        .wrapping_add(ts.tv_nsec as u64)
}

impl Timer {
    /// Starts at now.
    #[inline]
    pub fn new() -> Timer {
        Timer { t0: now_ns() }
    }

    /// Seconds since the start point.
    #[inline]
    pub fn elapsed(&self) -> f64 {
        1.0e-9 * now_ns().wrapping_sub(self.t0) as f64
    }

    /// Restarts at now.
    #[inline]
    pub fn reset(&mut self) {
        self.t0 = now_ns();
    }
}

impl Default for Timer {
    fn default() -> Self {
        Timer::new()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn elapsed_follows_the_clock() {
        let mut t = Timer::new();
        std::thread::sleep(std::time::Duration::from_millis(20));
        let e = t.elapsed();
        assert!((0.019..5.0).contains(&e), "{e}");
        t.reset();
        assert!(t.elapsed() < e);
    }
}
