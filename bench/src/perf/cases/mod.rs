//! The tests, one small file each (as nccl-tests has one per collective):
//! each is the sequence of exchange steps and measurements of perftest's
//! `main` for that test, written with the common driver
//! ([`crate::perf::session`]). The sequences must stay step for step
//! perftest's, since the peer may be perftest.

use super::error::PerfResult;
use super::session::Session;

mod atomic_bw;
mod atomic_lat;
mod read_bw;
mod read_lat;
mod send_bw;
mod send_lat;
mod write_bw;
mod write_lat;

/// perftest's `VerbType`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verb {
    /// SEND/RECV.
    Send,
    /// RDMA WRITE.
    Write,
    /// RDMA READ.
    Read,
    /// Atomics (fetch-and-add, compare-and-swap).
    Atomic,
}

impl Verb {
    /// perftest's `testsStr`.
    pub fn title(self) -> &'static str {
        match self {
            Verb::Send => "Send",
            Verb::Write => "RDMA_Write",
            Verb::Read => "RDMA_Read",
            Verb::Atomic => "Atomic",
        }
    }
}

/// Bandwidth or latency.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// `*_bw`.
    Bw,
    /// `*_lat`.
    Lat,
}

/// One test.
#[derive(Debug)]
pub struct TestCase {
    /// `write_bw`.
    pub name: &'static str,
    /// The verb it measures.
    pub verb: Verb,
    /// Bandwidth or latency.
    pub kind: Kind,
    /// perftest's program for it.
    pub perftest: &'static str,
    /// The test's sequence.
    pub(crate) run: fn(&mut Session) -> PerfResult<()>,
}

/// Every test.
pub static ALL: [&TestCase; 8] = [
    &write_bw::CASE,
    &read_bw::CASE,
    &send_bw::CASE,
    &write_lat::CASE,
    &read_lat::CASE,
    &send_lat::CASE,
    &atomic_bw::CASE,
    &atomic_lat::CASE,
];

/// The test called `name` (`write_bw`; perftest's `ib_write_bw` works too).
pub fn find(name: &str) -> Option<&'static TestCase> {
    let name = name.strip_prefix("ib_").unwrap_or(name);
    ALL.iter().copied().find(|c| c.name == name)
}
