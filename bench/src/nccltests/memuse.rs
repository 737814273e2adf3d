//! nccl-tests' `-M 1` figures (`initGpuMem`, `bufferMemory`,
//! `devMemUsed`): drops in free device memory (`cudaMemGetInfo`, or
//! [`Backend::free_mem`]) across three phases, the largest over the
//! measured devices, then over threads and processes.
//!
//! Where nccl-tests measures, and so where we do:
//! - without `-p`: the main thread, over the first thread's GPUs, before
//!   and after the communicators (Initialization), then after the buffers
//!   and their registration (User-Allocated);
//! - with `-p 1` (`threadInit`): each thread over its own GPUs; its second
//!   reading comes after the communicators *and* the buffers, so
//!   Initialization includes the buffers and User-Allocated is only the
//!   registration (nccl-tests' order, kept so the figures compare);
//! - always (`threadRunTests`): each thread over its own GPUs, around its
//!   tests (Collective).
//!
//! Initialization and User-Allocated start at 0 and only grow (a drop
//! below 0 shows as 0); Collective starts at `i64::MIN`, so memory freed
//! during the tests shows as a negative figure, as in nccl-tests.

use super::backend::{Backend, RankSlot};
use super::bootstrap::{self, Bootstrap, Combine};
use super::errors::TestResult;

/// The three `-M` figures, in bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MemUse {
    /// "Initialization": memory the communicators took.
    pub init: i64,
    /// "User-Allocated": the benchmark's buffers.
    pub user: i64,
    /// "Collective": memory the collectives took while the tests ran.
    pub coll: i64,
}

impl Default for MemUse {
    /// Nothing measured yet (nccl-tests' initial values).
    fn default() -> Self {
        MemUse {
            init: 0,
            user: 0,
            coll: i64::MIN,
        }
    }
}

impl MemUse {
    /// The larger of each figure (threads of a process).
    pub fn max(self, o: MemUse) -> MemUse {
        MemUse {
            init: self.init.max(o.init),
            user: self.user.max(o.user),
            coll: self.coll.max(o.coll),
        }
    }

    /// The larger of each figure over every process of the run (nccl-tests
    /// reduces over MPI_COMM_WORLD, whatever NCCL_TESTS_SPLIT says).
    pub fn max_over(self, boot: &dyn Bootstrap) -> TestResult<MemUse> {
        Ok(MemUse {
            init: bootstrap::allreduce_i64(boot, self.init, Combine::Max)?,
            user: bootstrap::allreduce_i64(boot, self.user, Combine::Max)?,
            coll: bootstrap::allreduce_i64(boot, self.coll, Combine::Max)?,
        })
    }
}

/// Free memory of each device now (0 where the backend cannot tell).
pub fn free_now(be: &dyn Backend, devices: &[i32]) -> Vec<i64> {
    devices
        .iter()
        .map(|&d| be.free_mem(d).map_or(0, |f| f as i64))
        .collect()
}

/// The devices of a thread's ranks.
pub fn devices(slots: &[RankSlot]) -> Vec<i32> {
    slots.iter().map(|s| s.device).collect()
}

/// The largest drop in free memory over the devices, starting from `floor`
/// (nccl-tests' `max(acc, before - after)` loops).
pub fn largest_drop(floor: i64, before: &[i64], after: &[i64]) -> i64 {
    before
        .iter()
        .zip(after)
        .map(|(b, a)| b.wrapping_sub(*a))
        .fold(floor, i64::max)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn drops_take_the_largest_device_and_respect_the_floor() {
        assert_eq!(largest_drop(0, &[100, 200], &[90, 150]), 50);
        assert_eq!(largest_drop(0, &[100], &[120]), 0, "growth is not use");
        assert_eq!(largest_drop(i64::MIN, &[100], &[120]), -20);
        assert_eq!(largest_drop(i64::MIN, &[], &[]), i64::MIN);
    }

    #[test]
    fn threads_combine_by_maximum() {
        let a = MemUse {
            init: 5,
            user: 1,
            coll: -3,
        };
        let b = MemUse {
            init: 2,
            user: 7,
            coll: i64::MIN,
        };
        assert_eq!(
            a.max(b),
            MemUse {
                init: 5,
                user: 7,
                coll: -3
            }
        );
        assert_eq!(MemUse::default().max(a), a);
    }
}
