#!/usr/bin/env bash
# The GPU data generator and checker (verifiable.cu, loaded from the committed
# PTX) against the host reference, on a GPU machine: every type, op, input and
# expected side of 1-13 ranks, four lengths, three seeds and start indices
# (one beyond 2^32), unaligned offsets; planted wrong elements must be counted
# exactly. Then the corrupt hook end to end: wrong data is FAILED, exit 7.
#
#   bash check-verifiable-gpu.sh [DIR]   # DIR: build-nccltests.sh's output
#
# Exits 0 when both pass.
set -u
DIR=$(cd "${1:-$(dirname "$0")}" && pwd)
export NCCL_NVLS_ENABLE=${NCCL_NVLS_ENABLE:-0}
status=0
echo "== GPU generator and check against the host reference"
start=$(date +%s%N)
"$DIR/erdma_bench_unittests" --ignored --exact --nocapture \
  nccltests::backend::nccl::gpudata::tests::gpu_generator_and_check_match_the_host_reference ||
  status=1
echo "== $((($(date +%s%N) - start) / 1000000)) ms"
for coll in all_reduce reduce_scatter all_gather; do
  echo "== ${coll}_perf, corrupt hook: exit 7 and FAILED wanted"
  env ERDMA_BENCH_HOOK=corrupt:0 "$DIR/${coll}_perf" -b 1M -e 1M -c 1 -n 2 >/tmp/corrupt.$$ 2>&1
  rc=$?
  cat /tmp/corrupt.$$
  if [ "$rc" -ne 7 ] || ! grep -q "Out of bounds values : 2 FAILED" /tmp/corrupt.$$; then
    echo "== FAIL: exit $rc"
    status=1
  fi
  rm -f /tmp/corrupt.$$
done
[ "$status" -eq 0 ] && echo "== verifiable GPU checks passed" || echo "== verifiable GPU checks FAILED"
exit "$status"
