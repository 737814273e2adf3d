#!/usr/bin/env bash
# Runs the checks of erdma's GPU layer (erdma::cuda, erdma::nccl, the nccl_all_reduce
# example) on a GPU machine, with binaries built elsewhere (the GPU machine needs no Rust).
#
# Build (on the build machine, from the repository root):
#   scripts/gpu/build-nccl-layer.sh DIR        # release test binaries + example into DIR
# Run (on the GPU machine):
#   bash DIR/check-nccl-layer.sh [DIR]         # DIR defaults to this script's directory
#
# Needs: an NVIDIA driver, libnccl.so.2 (>= 2.19), Open MPI's mpirun. Prints everything it
# runs and each exit status; exits 0 only if every check passed. CHECK_TIMEOUT (seconds,
# default 300) bounds each check.
set -u
DIR=${1:-$(cd "$(dirname "$0")" && pwd)}
# NVLink SHARP needs a fabric setup these single-GPU checks do not have.
export NCCL_NVLS_ENABLE=0
export RUST_BACKTRACE=1
failed=()

echo "== machine"
date -u '+%Y-%m-%d %H:%M:%S UTC'
uname -srm
nvidia-smi --query-gpu=name,driver_version,memory.total,pci.bus_id,compute_cap --format=csv,noheader 2>&1 | head -8
ls -l /usr/lib/x86_64-linux-gnu/libnccl.so* 2>&1 | head -4
mpirun --version 2>&1 | head -1

check() { # check NAME EXPECTED_STATUS COMMAND...
  local name=$1 want=$2
  shift 2
  echo
  echo "== $name: $*"
  local start ms rc
  start=$(date +%s%N)
  timeout "${CHECK_TIMEOUT:-300}" "$@"
  rc=$?
  ms=$((($(date +%s%N) - start) / 1000000))
  printf '== %s: exit %d (want %d), %d.%03d s\n' "$name" "$rc" "$want" $((ms / 1000)) $((ms % 1000))
  [ "$rc" -eq "$want" ] || failed+=("$name")
}

check cuda_gpu 0 "$DIR/cuda_gpu" --include-ignored --test-threads=1 --nocapture
check nccl_gpu 0 "$DIR/nccl_gpu" --include-ignored --test-threads=1 --nocapture
check nccl_gpu_init_timeout 0 "$DIR/nccl_gpu_init_timeout" --include-ignored --test-threads=1 --nocapture
# The no-GPU tests branch on what is installed: here they check the present driver/NCCL.
check cuda_no_driver 0 "$DIR/cuda_no_driver" --test-threads=1
check nccl_loading 0 "$DIR/nccl_loading" --test-threads=1
check "nccl_all_reduce mpirun -np 1" 0 \
  mpirun --allow-run-as-root --oversubscribe -np 1 -x NCCL_NVLS_ENABLE "$DIR/nccl_all_reduce"
ngpus=$(nvidia-smi -L 2>/dev/null | wc -l)
# One more rank than GPUs: the extra rank reports the shortage, every rank exits 5.
check "nccl_all_reduce mpirun -np $((ngpus + 1)) (too few GPUs)" 5 \
  mpirun --allow-run-as-root --oversubscribe -np $((ngpus + 1)) -x NCCL_NVLS_ENABLE "$DIR/nccl_all_reduce"

echo
if [ ${#failed[@]} -eq 0 ]; then
  echo "== all checks passed"
else
  echo "== FAILED: ${failed[*]}"
  exit 1
fi
