//! Fault-injection hooks for tests, read from `ERDMA_BENCH_HOOK` (absent
//! in normal runs; parsed once, never panics on bad values):
//!
//! - `corrupt:R` - rank R's result is altered (one element per check)
//!   after it is read back, so the check must report wrong data (FAILED,
//!   exit 7). Works with every backend.
//! - `stall:R` - from its first timed iteration, rank R stops issuing
//!   collectives and reports them as never finishing, as a hung GPU would;
//!   every rank must then fail with a timeout (exit 4) within `-T`.
//! - `kill:R` - rank R's process kills itself with SIGKILL at its first
//!   timed iteration, as a crashed node would; the others must fail with a
//!   message, not hang.
//! - `slow:R` or `slow:R:MS` - rank R waits MS ms ([`SLOW_MS`] by
//!   default) before issuing each collective, as a rank on a slow host
//!   would (GPUs at a low clock, a narrow PCIe link): every rank of its
//!   communicators measures the collectives slower, so a host's own stage
//!   shows it. A test on a busy machine gives a delay far over what the
//!   scheduler adds to the others (milliseconds with every core taken).
//! - `fake-devcomm:R` - with `-D`, rank R of a one-rank communicator runs
//!   the device-API kernels with a device communicator and windows built
//!   over plain device memory instead of NCCL's (which needs 2+ GPUs): the
//!   kernels' data paths can then be checked on one GPU.
//! - `skip-option-check` (no rank) - the processes do not compare their
//!   options at start ([`crate::nccltests::agree`]), so that what a
//!   mismatch does later (MPI_ERR_TRUNCATE) can be tested.
//! - `skip-cpu-check` (no rank) - `-t` is not checked against the CPUs
//!   (options.rs), so that what too many threads do later (a thread that
//!   cannot start) can be tested.
//!
//! Several hooks may be given, separated by commas. R is a rank of the
//! communicator: with NCCL_TESTS_SPLIT, rank R of every communicator.

/// How long a `slow:R` rank waits before issuing each collective, in ms.
pub const SLOW_MS: u64 = 5;

/// The hooks in effect.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Hooks {
    /// Ranks whose results are corrupted.
    pub corrupt: Vec<usize>,
    /// Ranks that stall.
    pub stall: Vec<usize>,
    /// Ranks whose process dies.
    pub kill: Vec<usize>,
    /// Ranks that wait before issuing each collective.
    pub slow: Vec<usize>,
    /// How long they wait, in ms (the last `slow:R:MS` given, else
    /// [`SLOW_MS`]).
    pub slow_ms: u64,
    /// Ranks whose `-D` device communicator is faked.
    pub fake_devcomm: Vec<usize>,
    /// The start-up comparison of options is skipped.
    pub skip_option_check: bool,
    /// `-t` is not checked against the CPUs.
    pub skip_cpu_check: bool,
}

impl Hooks {
    /// Reads `ERDMA_BENCH_HOOK`.
    pub fn from_env() -> Hooks {
        std::env::var("ERDMA_BENCH_HOOK")
            .map(|v| Hooks::parse(&v))
            .unwrap_or_default()
    }

    /// Parses `kind:rank[,kind:rank...]` (`slow:rank:ms` too); unknown
    /// entries are ignored.
    pub fn parse(s: &str) -> Hooks {
        let mut h = Hooks {
            slow_ms: SLOW_MS,
            ..Hooks::default()
        };
        for item in s.split(',') {
            if item.trim() == "skip-option-check" {
                h.skip_option_check = true;
                continue;
            }
            if item.trim() == "skip-cpu-check" {
                h.skip_cpu_check = true;
                continue;
            }
            let Some((kind, rank)) = item.trim().split_once(':') else {
                continue;
            };
            let (rank, ms) = match rank.split_once(':') {
                Some((r, ms)) => (r, ms.trim().parse::<u64>().ok()),
                None => (rank, None),
            };
            let Ok(rank) = rank.trim().parse::<usize>() else {
                continue;
            };
            match kind.trim() {
                "corrupt" => h.corrupt.push(rank),
                "stall" => h.stall.push(rank),
                "kill" => h.kill.push(rank),
                "slow" => {
                    h.slow.push(rank);
                    // At most a minute: a typo cannot stall a run for ever.
                    h.slow_ms = ms.map_or(h.slow_ms, |ms| ms.min(60_000));
                }
                "fake-devcomm" => h.fake_devcomm.push(rank),
                _ => {}
            }
        }
        h
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parse_hooks() {
        let h = Hooks::parse("corrupt:1, stall:2,kill:x,bogus:3,kill:0,fake-devcomm:0,slow:3");
        assert_eq!(h.slow, vec![3]);
        assert!(!h.skip_option_check);
        assert!(Hooks::parse("stall:1, skip-option-check").skip_option_check);
        assert!(Hooks::parse("skip-cpu-check").skip_cpu_check);
        assert_eq!(h.fake_devcomm, vec![0]);
        assert_eq!(h.corrupt, vec![1]);
        assert_eq!(h.stall, vec![2]);
        assert_eq!(h.kill, vec![0]);
        assert_eq!(h.slow_ms, SLOW_MS);
        assert_eq!(Hooks::parse("slow:0:100").slow_ms, 100);
        assert_eq!(Hooks::parse("slow:0:100").slow, vec![0]);
        assert_eq!(Hooks::parse("slow:0:x").slow_ms, SLOW_MS);
        assert_eq!(Hooks::parse("slow:0:99999999").slow_ms, 60_000);
        assert_eq!(Hooks::parse("").slow, Vec::<usize>::new());
    }
}
