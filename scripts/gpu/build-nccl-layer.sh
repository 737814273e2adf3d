#!/usr/bin/env bash
# Builds, on the build machine, what check-nccl-layer.sh runs on the GPU machine: the
# release test binaries of erdma's GPU layer and the nccl_all_reduce example, copied with
# stable names into DIR together with check-nccl-layer.sh.
#   scripts/gpu/build-nccl-layer.sh DIR
set -euo pipefail
DIR=${1:?usage: $0 DIR}
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
cd "$ROOT"
mkdir -p "$DIR"
tests=(cuda_gpu nccl_gpu nccl_gpu_init_timeout cuda_no_driver nccl_loading)
args=()
for t in "${tests[@]}"; do args+=(--test "$t"); done
cargo test --release -p erdma --features nccl --no-run "${args[@]}" --message-format=json \
  | python3 -c '
import json, sys, shutil
want = set(sys.argv[2:])
for line in sys.stdin:
    m = json.loads(line)
    if m.get("reason") == "compiler-artifact" and m.get("executable") and m["target"]["name"] in want:
        shutil.copy(m["executable"], sys.argv[1] + "/" + m["target"]["name"])
        print("copied", m["target"]["name"])
' "$DIR" "${tests[@]}"
cargo build --release -p erdma-examples --example nccl_all_reduce
cp target/release/examples/nccl_all_reduce "$DIR/"
cp scripts/gpu/check-nccl-layer.sh "$DIR/"
# Debug info makes each binary ~11 MB; what travels to the GPU machine is capped.
for t in "${tests[@]}" nccl_all_reduce; do strip --strip-debug "$DIR/$t"; done
# The GPU machine must not need a newer glibc than 2.34.
newest=$(for f in "$DIR"/*; do [ -x "$f" ] && [ "${f##*.}" != sh ] && objdump -T "$f"; done \
  | grep -o 'GLIBC_[0-9.]*' | sort -uV | tail -1)
echo "newest glibc symbol version needed: $newest"
case "$newest" in
  GLIBC_2.3[5-9]* | GLIBC_2.[4-9]*) echo "too new for the GPU machine" >&2; exit 1 ;;
esac
ls -l "$DIR"
