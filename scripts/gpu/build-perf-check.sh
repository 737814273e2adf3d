#!/usr/bin/env bash
# Builds, on the build machine, what perf-check.sh runs on a GPU machine: the release
# erdma-perf and the perf_gpu test binary, copied with perf-check.sh into DIR.
#   scripts/gpu/build-perf-check.sh DIR
set -euo pipefail
DIR=${1:?usage: $0 DIR}
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
cd "$ROOT"
mkdir -p "$DIR"
cargo build --release -p erdma-bench --bin erdma-perf
cp target/release/erdma-perf "$DIR/"
cargo test --release -p erdma-bench --test perf_gpu --no-run --message-format=json \
  | python3 -c '
import json, sys, shutil
for line in sys.stdin:
    m = json.loads(line)
    if m.get("reason") == "compiler-artifact" and m.get("executable") and m["target"]["name"] == "perf_gpu":
        shutil.copy(m["executable"], sys.argv[1] + "/perf_gpu")
        print("copied perf_gpu")
' "$DIR"
cp scripts/gpu/perf-check.sh "$DIR/"
# perf-check.sh points the tests at the erdma-perf beside them (ERDMA_PERF_BIN).
for f in erdma-perf perf_gpu; do strip --strip-debug "$DIR/$f"; done
ls -l "$DIR"
