//! `write_lat` (perftest's `ib_write_lat`, `write_lat.c`): ping-pong of RDMA
//! WRITEs, each side polling the last byte of its buffer.

use super::{Kind, TestCase, Verb};
use crate::perf::error::PerfResult;
use crate::perf::session::Session;

pub(super) static CASE: TestCase = TestCase {
    name: "write_lat",
    verb: Verb::Write,
    kind: Kind::Lat,
    perftest: "ib_write_lat",
    run,
};

fn run(s: &mut Session) -> PerfResult<()> {
    s.hs()?;
    s.exchange_dests()?;
    s.connect()?;
    s.print_dests_and_exchange()?;
    s.hs()?;
    s.print_lat_header();
    for size in s.opts().sizes() {
        let m = s.run_write_lat(size)?;
        s.report_lat(&m)?;
    }
    s.end_line();
    // perftest's write_lat ends without the closing handshake.
    s.finish()
}
