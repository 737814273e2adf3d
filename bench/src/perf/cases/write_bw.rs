//! `write_bw` (perftest's `ib_write_bw`, `write_bw.c`).

use super::{Kind, TestCase, Verb};

pub(super) static CASE: TestCase = TestCase {
    name: "write_bw",
    verb: Verb::Write,
    kind: Kind::Bw,
    perftest: "ib_write_bw",
    run: |s| s.one_sided_bw(true),
};
