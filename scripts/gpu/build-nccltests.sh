#!/usr/bin/env bash
# Builds, on the build machine, what check-all-reduce-perf.sh,
# compare-nccl-tests.sh, multi-gpu.sh and datacheck-speed.sh run on a GPU
# machine: the release *_perf binaries
# (NCCL and CUDA are loaded at run time, so nothing GPU-related is needed
# here) and the scripts, copied into DIR.
#   scripts/gpu/build-nccltests.sh DIR
set -euo pipefail
DIR=${1:?usage: $0 DIR}
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
cd "$ROOT"
mkdir -p "$DIR"
bins=(all_reduce_perf all_gather_perf reduce_scatter_perf broadcast_perf reduce_perf
  alltoall_perf gather_perf scatter_perf sendrecv_perf hypercube_perf)
cargo build --release -p erdma-bench --bins
for b in "${bins[@]}"; do
  cp "target/release/$b" "$DIR/"
  # Line tables make each binary ~7 MB; what travels to the GPU machine is capped.
  strip --strip-debug "$DIR/$b"
done
cp scripts/gpu/check-all-reduce-perf.sh scripts/gpu/compare-nccl-tests.sh scripts/gpu/multi-gpu.sh \
  scripts/gpu/datacheck-speed.sh \
  scripts/gpu/nccltests_report.py "$DIR/"
# The GPU machine must not need a newer glibc than 2.34.
newest=$(for b in "${bins[@]}"; do objdump -T "$DIR/$b"; done |
  grep -o 'GLIBC_[0-9.]*' | sort -uV | tail -1)
echo "newest glibc symbol version needed: $newest"
case "$newest" in
  GLIBC_2.3[5-9]* | GLIBC_2.[4-9]*) echo "too new for the GPU machine" >&2; exit 1 ;;
esac
ls -l "$DIR"
