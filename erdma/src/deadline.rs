//! Deadlines from caller-chosen timeouts, without overflow: `Instant +
//! Duration` panics when the sum is past what an `Instant` holds (e.g.
//! `Duration::MAX`, "wait for ever"), so every wait computes its deadline here.

use std::time::{Duration, Instant};

/// `now + timeout`, or the latest instant within reach when that overflows:
/// the timeout is halved until the sum fits, so `Duration::MAX` gives a
/// deadline centuries away (at least 2^62 ns, about 146 years, from now on
/// Linux), never a panic and never one that has already passed.
pub(crate) fn after(timeout: Duration) -> Instant {
    let now = Instant::now();
    let mut t = timeout;
    loop {
        if let Some(d) = now.checked_add(t) {
            return d;
        }
        t /= 2;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn no_timeout_overflows_and_long_ones_stay_long() {
        let day = Duration::from_secs(86_400);
        for t in [
            Duration::MAX,
            Duration::from_secs(u64::MAX),
            Duration::from_secs(i64::MAX as u64),
            Duration::new(u64::MAX / 2, 999_999_999),
        ] {
            let d = after(t);
            assert!(d > Instant::now() + 36_500 * day, "{t:?}");
        }
        let before = Instant::now();
        let d = after(Duration::from_millis(5));
        assert!(
            d >= before + Duration::from_millis(5)
                && d <= Instant::now() + Duration::from_millis(5)
        );
        assert!(after(Duration::ZERO) <= Instant::now());
    }
}
