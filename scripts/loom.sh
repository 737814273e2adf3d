#!/usr/bin/env bash
# loom.sh - the model checks of a completion queue's concurrency
# (erdma/src/cq/gate.rs: a lane's dedication against running polls, the
# room and generations kept for dropped QPs' completions; issue 34 holes 9
# and 10; erdma/src/cq/cache.rs: the QP cached between polls against its
# owner's drop): the library's own code built on loom's atomics and locks, every
# interleaving explored up to 3 forced thread switches per run.
#
# usage: scripts/loom.sh     (a target directory of its own: target/loom)
# exit status: 0 all models passed; cargo's status otherwise.
set -euo pipefail
cd "$(dirname "$0")/.."
RUSTFLAGS="--cfg loom" cargo test -q -p erdma --lib --release --target-dir target/loom -- cq::gate cq::cache
