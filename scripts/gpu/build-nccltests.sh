#!/usr/bin/env bash
# Builds, on the build machine, what check-all-reduce-perf.sh,
# compare-nccl-tests.sh, compare-all-collectives.sh, multi-gpu.sh,
# datacheck-speed.sh and check-verifiable-gpu.sh run on a GPU machine: the
# release *_perf binaries, the library's unit test binary
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
# The library's unit tests, for the GPU ones (#[ignore]d here): check-verifiable-gpu.sh.
tests=$(cargo test --release -p erdma-bench --lib --no-run 2>&1 |
  sed -n 's/.*Executable unittests src\/lib.rs (\(.*\))/\1/p' | tail -1)
[ -x "$tests" ] || { echo "no unit test binary found" >&2; exit 1; }
cp "$tests" "$DIR/erdma_bench_unittests"
strip --strip-debug "$DIR/erdma_bench_unittests"
cp scripts/gpu/check-all-reduce-perf.sh scripts/gpu/compare-nccl-tests.sh scripts/gpu/multi-gpu.sh \
  scripts/gpu/datacheck-speed.sh scripts/gpu/check-verifiable-gpu.sh \
  scripts/gpu/compare-all-collectives.sh \
  scripts/gpu/nccltests_report.py "$DIR/"
# The GPU machine must not need a newer glibc than 2.34.
newest=$(for b in "${bins[@]}" erdma_bench_unittests; do objdump -T "$DIR/$b"; done |
  grep -o 'GLIBC_[0-9.]*' | sort -uV | tail -1)
echo "newest glibc symbol version needed: $newest"
case "$newest" in
  GLIBC_2.3[5-9]* | GLIBC_2.[4-9]*) echo "too new for the GPU machine" >&2; exit 1 ;;
esac
ls -l "$DIR"
