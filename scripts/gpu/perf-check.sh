#!/usr/bin/env bash
# erdma-perf's GPU memory on a GPU machine without an RDMA device (the H200): CUDA
# allocation, copies and dma-buf export of the test buffers work, the GPU is opened before
# the RDMA device, and each refusal is one line with its exit status (registration then
# fails at "no RDMA device"). Binaries built elsewhere (no Rust needed here).
#
# Build (build machine, repository root):  scripts/gpu/build-perf-check.sh DIR
# Run (GPU machine):                         bash DIR/perf-check.sh [DIR]
#
# Exits 0 only if every check passed. CHECK_TIMEOUT (seconds, default 120) bounds each.
set -u
DIR=${1:-$(cd "$(dirname "$0")" && pwd)}
PERF=$DIR/erdma-perf
failed=()

echo "== machine"
date -u '+%Y-%m-%d %H:%M:%S UTC'
uname -srm
nvidia-smi --query-gpu=name,driver_version,memory.total,pci.bus_id --format=csv,noheader 2>&1 | head -8
ls /sys/class/infiniband 2>&1 | head -4
lsmod 2>/dev/null | grep -E '^nvidia_peermem' || echo "nvidia_peermem: not loaded"

# check NAME STATUS STDERR-NEEDLE COMMAND...: exit status as expected, stderr empty (0)
# or exactly one line containing the needle.
check() {
  local name=$1 want=$2 needle=$3
  shift 3
  echo
  echo "== $name: $*"
  local out err rc
  out=$(mktemp) err=$(mktemp)
  timeout "${CHECK_TIMEOUT:-120}" "$@" >"$out" 2>"$err"
  rc=$?
  sed 's/^/   out| /' "$out" | tail -20
  sed 's/^/   err| /' "$err"
  local ok=1
  [ "$rc" -eq "$want" ] || ok=0
  if [ -n "$needle" ]; then
    [ "$(wc -l <"$err")" -eq 1 ] && grep -q -- "$needle" "$err" || ok=0
  fi
  echo "== $name: exit $rc (want $want) $([ $ok = 1 ] && echo OK || echo FAILED)"
  [ $ok = 1 ] || failed+=("$name")
  rm -f "$out" "$err"
}

check "CUDA allocation and copies (perf_gpu)" 0 "" \
  env ERDMA_PERF_BIN="$PERF" "$DIR/perf_gpu" --include-ignored --test-threads=1 --nocapture
check "GPU 0 opens first, then: no RDMA device" 3 "no RDMA device" "$PERF" write_bw --use_cuda=0
check "GPU 0, client side: no RDMA device" 3 "no RDMA device" "$PERF" read_bw --use_cuda=0 --use_cuda_peermem 10.0.0.1
check "no such GPU" 8 "GPU 4096 requested" "$PERF" write_bw --use_cuda=4096
check "GPU 0 with --use_cuda_dmabuf: no RDMA device" 3 "no RDMA device" "$PERF" write_bw --use_cuda=0 --use_cuda_dmabuf
check "GPU memory in a latency test: refused as perftest does" 2 "BW tests only" "$PERF" write_lat --use_cuda=0

echo
if [ ${#failed[@]} -eq 0 ]; then
  echo "== all checks passed"
else
  echo "== FAILED: ${failed[*]}"
  exit 1
fi
