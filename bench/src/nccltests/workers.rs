//! Host threads for generating and checking verifiable data. Elements are
//! a pure function of their index, so a buffer is cut into contiguous
//! parts, one per thread, and the result does not depend on the cut.

use std::num::NonZeroUsize;
use std::sync::Mutex;

/// Most threads one rank's generation or check uses: memory bandwidth,
/// not arithmetic, limits it beyond this.
pub const MAX_WORKERS: usize = 16;

/// Smallest part handed to a thread: below it a spawn costs more than the
/// work it takes over.
const MIN_PART: usize = 64 << 10;

/// How many threads split one buffer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Workers {
    n: usize,
    min_part: usize,
}

impl Workers {
    /// Exactly `n` threads at most (at least 1).
    pub fn new(n: usize) -> Workers {
        Workers {
            n: n.max(1),
            min_part: MIN_PART,
        }
    }

    /// A fair share of this machine for one of `sharing` checks that run at
    /// the same time (the `-t` threads of every process on this host),
    /// at most [`MAX_WORKERS`].
    pub fn share(sharing: usize) -> Workers {
        let cpus = std::thread::available_parallelism().map_or(1, NonZeroUsize::get);
        Workers::new((cpus / sharing.max(1)).min(MAX_WORKERS))
    }

    /// Parts as small as `bytes` (tests: split small buffers too).
    pub fn with_min_part(self, bytes: usize) -> Workers {
        Workers {
            min_part: bytes.max(1),
            ..self
        }
    }

    /// The thread count.
    pub fn count(&self) -> usize {
        self.n
    }

    /// Bytes per part for `len` bytes of `ws`-byte elements (a whole
    /// number of elements; the last part may be shorter).
    fn part_len(&self, len: usize, ws: usize) -> usize {
        let ws = ws.max(1);
        let parts = self.n.min(len.div_ceil(self.min_part)).max(1);
        ((len / ws).div_ceil(parts) * ws).max(ws)
    }

    /// Calls `f(first_element, part)` on every part of `out`, in parallel;
    /// the calling thread works too (and does everything when no thread
    /// can be started: a process at its thread limit still runs).
    pub fn fill<F>(&self, out: &mut [u8], ws: usize, f: F)
    where
        F: Fn(usize, &mut [u8]) + Sync,
    {
        let per = self.part_len(out.len(), ws);
        if per >= out.len() {
            f(0, out);
            return;
        }
        let parts: Vec<(usize, &mut [u8])> = out
            .chunks_mut(per)
            .enumerate()
            .map(|(k, p)| (k * per / ws, p))
            .collect();
        let helpers = parts.len() - 1;
        let queue = Mutex::new(parts);
        let work = || {
            while let Some((first, part)) = take(&queue) {
                f(first, part);
            }
        };
        std::thread::scope(|s| {
            for _ in 0..helpers {
                let room = super::spawn::room_for_thread().is_ok();
                if !room || std::thread::Builder::new().spawn_scoped(s, work).is_err() {
                    break;
                }
            }
            work();
        });
    }

    /// The sum of `f(first_element, part)` over every part of `data`,
    /// computed in parallel (as [`Workers::fill`]).
    pub fn sum<F>(&self, data: &[u8], ws: usize, f: F) -> u64
    where
        F: Fn(usize, &[u8]) -> u64 + Sync,
    {
        let per = self.part_len(data.len(), ws);
        if per >= data.len() {
            return f(0, data);
        }
        let parts: Vec<(usize, &[u8])> = data
            .chunks(per)
            .enumerate()
            .map(|(k, p)| (k * per / ws, p))
            .collect();
        let helpers = parts.len() - 1;
        let queue = Mutex::new(parts);
        let work = || {
            let mut total = 0u64;
            while let Some((first, part)) = take(&queue) {
                total += f(first, part);
            }
            total
        };
        std::thread::scope(|s| {
            let mut handles = Vec::new();
            for _ in 0..helpers {
                if super::spawn::room_for_thread().is_err() {
                    break;
                }
                match std::thread::Builder::new().spawn_scoped(s, work) {
                    Ok(h) => handles.push(h),
                    Err(_) => break,
                }
            }
            let mut total = work();
            for h in handles {
                total += h.join().unwrap_or_else(|e| std::panic::resume_unwind(e));
            }
            total
        })
    }
}

/// The next part of a shared list (any order: parts are independent).
fn take<T>(q: &Mutex<Vec<T>>) -> Option<T> {
    q.lock().unwrap_or_else(|p| p.into_inner()).pop()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parts_cover_every_element_once() {
        for n in [1, 2, 3, 7, 16] {
            for (len, ws) in [(0, 4), (1, 1), (10, 2), (1_000_003, 1), (999_999 * 8, 8)] {
                let w = Workers::new(n).with_min_part(1);
                let mut seen = vec![0u8; len];
                w.fill(&mut seen, ws, |first, part| {
                    assert_eq!(part.len() % ws, 0);
                    for (k, b) in part.iter_mut().enumerate() {
                        // Each byte learns where its part said it is.
                        *b = ((first * ws + k) % 251) as u8;
                    }
                });
                assert!(seen.iter().enumerate().all(|(i, &b)| b == (i % 251) as u8));
                let bytes = w.sum(&seen, ws, |_, part| part.len() as u64);
                assert_eq!(bytes, len as u64, "n={n} len={len}");
            }
        }
    }

    #[test]
    fn small_buffers_stay_on_the_calling_thread() {
        let w = Workers::new(8);
        let me = std::thread::current().id();
        w.fill(&mut [0u8; 1000], 4, |_, _| {
            assert_eq!(std::thread::current().id(), me)
        });
        assert_eq!(Workers::new(0).count(), 1);
        assert!(Workers::share(usize::MAX).count() >= 1);
        assert!(Workers::share(1).count() <= MAX_WORKERS);
    }
}
