//! `atomic_lat` (perftest's `ib_atomic_lat`, `atomic_lat.c`: `read_lat`'s
//! steps, one 8-byte size).

use super::{Kind, TestCase, Verb};

pub(super) static CASE: TestCase = TestCase {
    name: "atomic_lat",
    verb: Verb::Atomic,
    kind: Kind::Lat,
    perftest: "ib_atomic_lat",
    run: |s| s.one_sided_lat(),
};
