//! Events for the backends without CUDA streams (host, mpi): a stream
//! event is stamped when everything issued before it has completed, so
//! these wait for completion ([`wait_done`]) and then read the clock
//! ([`HostEvents::stamp`]).

use std::time::{Duration, Instant};

use super::{Poll, Ranks};
use crate::nccltests::errors::{TestError, TestResult};

/// Polls `ranks` until everything issued has completed; after `timeout`
/// (none: wait forever) fails with `TestError::Timeout` and the text
/// `detail` makes (built only then, so waiting never allocates). Ends
/// early when the process stops or a peer starts the census
/// ([`crate::nccltests::job::check`]).
pub fn wait_done<R: Ranks>(
    ranks: &mut R,
    timeout: Option<Duration>,
    detail: impl FnOnce(&R) -> String,
) -> TestResult<()> {
    let start = Instant::now();
    while ranks.poll()? != Poll::Done {
        crate::nccltests::job::check_collective()?;
        if let Some(t) = timeout
            && start.elapsed() > t
        {
            return Err(TestError::Timeout {
                secs: t.as_secs() as i32,
                detail: detail(ranks),
            });
        }
        std::thread::yield_now();
    }
    Ok(())
}

/// Wall-clock times of recorded event slots.
#[derive(Default)]
pub struct HostEvents {
    stamps: Vec<Instant>,
}

impl HostEvents {
    /// Stamps event `slot` with the current time.
    pub fn stamp(&mut self, slot: usize) {
        if self.stamps.len() <= slot {
            self.stamps.resize(slot + 1, Instant::now());
        }
        self.stamps[slot] = Instant::now();
    }

    /// Milliseconds from event `a` to event `b` (0 when `b` is earlier).
    pub fn elapsed_ms(&self, a: usize, b: usize) -> TestResult<f32> {
        let (Some(ta), Some(tb)) = (self.stamps.get(a), self.stamps.get(b)) else {
            return Err(TestError::Internal("event not recorded".into()));
        };
        Ok(tb.saturating_duration_since(*ta).as_secs_f64() as f32 * 1e3)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn elapsed_between_stamps() {
        let mut e = HostEvents::default();
        assert!(matches!(e.elapsed_ms(0, 1), Err(TestError::Internal(_))));
        e.stamp(0);
        std::thread::sleep(Duration::from_millis(2));
        e.stamp(1);
        assert!(e.elapsed_ms(0, 1).is_ok_and(|ms| ms >= 2.0));
        assert_eq!(e.elapsed_ms(1, 0).ok(), Some(0.0), "saturates");
        assert!(matches!(e.elapsed_ms(0, 2), Err(TestError::Internal(_))));
    }
}
