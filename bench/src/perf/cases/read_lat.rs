//! `read_lat` (perftest's `ib_read_lat`, `read_lat.c`): the client reads, the
//! server only waits.

use super::{Kind, TestCase, Verb};

pub(super) static CASE: TestCase = TestCase {
    name: "read_lat",
    verb: Verb::Read,
    kind: Kind::Lat,
    perftest: "ib_read_lat",
    run: |s| s.one_sided_lat(),
};
