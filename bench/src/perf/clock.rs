//! Timestamps of the measurement loops: the CPU's time-stamp counter on
//! x86-64 (as perftest's `get_cycles`), converted to time by calibrating it
//! against the monotonic clock over each measurement, so that no CPU
//! frequency has to be read (perftest reads `/proc/cpuinfo` and samples; in a
//! VM that estimate can fail and print `inf`).

use std::time::{Duration, Instant};

/// A raw timestamp.
#[inline(always)]
pub fn ticks() -> u64 {
    #[cfg(target_arch = "x86_64")]
    {
        // SAFETY: RDTSC exists on every x86-64 CPU and has no side effects.
        unsafe { core::arch::x86_64::_rdtsc() }
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        static START: std::sync::OnceLock<Instant> = std::sync::OnceLock::new();
        START.get_or_init(Instant::now).elapsed().as_nanos() as u64
    }
}

/// Shortest span a calibration uses (shorter tests wait at their end).
const MIN_SPAN: Duration = Duration::from_millis(2);

/// A calibration started with [`Calibration::start`].
#[derive(Debug, Clone, Copy)]
pub struct Calibration {
    t0: Instant,
    c0: u64,
}

impl Calibration {
    /// Starts a calibration.
    pub fn start() -> Calibration {
        let t0 = Instant::now();
        Calibration { t0, c0: ticks() }
    }

    /// Ends it: ticks per second over the span since [`Calibration::start`].
    pub fn ticks_per_sec(&self) -> f64 {
        loop {
            let c1 = ticks();
            let dt = self.t0.elapsed();
            if dt >= MIN_SPAN && c1 > self.c0 {
                return (c1 - self.c0) as f64 / dt.as_secs_f64();
            }
            std::hint::spin_loop();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn calibration_is_positive_and_consistent() {
        let c = Calibration::start();
        let a = ticks();
        std::thread::sleep(Duration::from_millis(5));
        let b = ticks();
        let hz = c.ticks_per_sec();
        assert!(hz > 1e6, "{hz}");
        let secs = (b - a) as f64 / hz;
        assert!((0.004..0.5).contains(&secs), "{secs}");
    }
}
