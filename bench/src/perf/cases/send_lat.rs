//! `send_lat` (perftest's `ib_send_lat`, `send_lat.c`): ping-pong of SENDs.

use super::{Kind, TestCase, Verb};
use crate::perf::error::PerfResult;
use crate::perf::session::Session;

pub(super) static CASE: TestCase = TestCase {
    name: "send_lat",
    verb: Verb::Send,
    kind: Kind::Lat,
    perftest: "ib_send_lat",
    run,
};

fn run(s: &mut Session) -> PerfResult<()> {
    s.exchange_dests()?;
    s.connect()?;
    s.hs()?;
    s.print_dests_and_exchange()?;
    s.print_lat_header();
    for size in s.opts().sizes() {
        s.prepare_recvs(size)?;
        s.hs()?;
        let m = s.run_send_lat(size)?;
        s.report_lat(&m)?;
    }
    s.end_line();
    s.close()
}
