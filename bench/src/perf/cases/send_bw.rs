//! `send_bw` (perftest's `ib_send_bw`, `send_bw.c`). Both sides measure: the
//! client its sends, the server its receives; on iWARP the receiver returns
//! credits by RDMA WRITE (no RNR retry there).

use super::{Kind, TestCase, Verb};
use crate::perf::error::PerfResult;
use crate::perf::session::Session;

pub(super) static CASE: TestCase = TestCase {
    name: "send_bw",
    verb: Verb::Send,
    kind: Kind::Bw,
    perftest: "ib_send_bw",
    run,
};

fn run(s: &mut Session) -> PerfResult<()> {
    s.exchange_dests()?;
    s.connect()?;
    s.hs()?;
    s.print_dests_and_exchange()?;
    s.print_bw_header();
    let all = s.opts().all;
    for size in s.opts().sizes() {
        s.prepare_recvs(size)?;
        s.hs()?;
        let mine = s.run_send_bw(size)?;
        s.report_bw(&mine)?;
        if all {
            s.hs()?;
        }
    }
    s.end_line();
    s.close()
}
