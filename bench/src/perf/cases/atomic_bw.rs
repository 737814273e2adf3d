//! `atomic_bw` (perftest's `ib_atomic_bw`, `atomic_bw.c`: `write_bw`'s steps,
//! one 8-byte size, no `-a`).

use super::{Kind, TestCase, Verb};

pub(super) static CASE: TestCase = TestCase {
    name: "atomic_bw",
    verb: Verb::Atomic,
    kind: Kind::Bw,
    perftest: "ib_atomic_bw",
    run: |s| s.one_sided_bw(false),
};
