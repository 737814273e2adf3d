//! `read_bw` (perftest's `ib_read_bw`, `read_bw.c`: the same steps as
//! `write_bw`).

use super::{Kind, TestCase, Verb};

pub(super) static CASE: TestCase = TestCase {
    name: "read_bw",
    verb: Verb::Read,
    kind: Kind::Bw,
    perftest: "ib_read_bw",
    run: |s| s.one_sided_bw(true),
};
