#!/usr/bin/env bash
# quickstart.sh - set up, build, and run the main job: prove the fabric and the
# GPUs work with devinfo and all_reduce_perf.
#
#   RDMA devices present -> devinfo on them; none -> devinfo inside the rig's VM
#                           (Soft-RoCE rxe0/rxe1 + Soft-iWARP siw0/siw1)
#   GPUs present         -> all_reduce_perf over NCCL on all local GPUs (-g N)
#   no GPU               -> all_reduce_perf --backend mpi under mpirun -np 2 (host memory)
#
# usage: scripts/quickstart.sh [all_reduce_perf options...]
#   default options: -b 8 -e 128M -f 2 (GPU) / -b 8 -e 8M -f 4 (no GPU)
# exit status: the first failing step's status (setup 1, build 101, tools as documented).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
# shellcheck disable=SC1091
[[ -f $HOME/.cargo/env ]] && source "$HOME/.cargo/env"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1

echo "== build (release)"
cargo build --release -q -p erdma-bench --bins
BIN=target/release

echo "== devinfo"
if [[ -n $(ls /sys/class/infiniband 2>/dev/null) ]]; then
  $BIN/devinfo
else
  echo "(no RDMA device on this host: running devinfo in the rig's VM with Soft-RoCE and Soft-iWARP)"
  rig/vm.sh -- "$BIN/devinfo"
fi

echo "== all_reduce_perf"
ngpus=0
if command -v nvidia-smi >/dev/null && nvidia-smi -L >/dev/null 2>&1; then
  ngpus=$(nvidia-smi -L | grep -c '^GPU')
fi
if [[ $ngpus -gt 0 ]]; then
  [[ $# -gt 0 ]] || set -- -b 8 -e 128M -f 2
  $BIN/all_reduce_perf -g "$ngpus" "$@"
else
  [[ $# -gt 0 ]] || set -- -b 8 -e 8M -f 4
  echo "(no GPU on this host: the MPI backend reduces host memory under mpirun -np 2)"
  mpirun --oversubscribe -np 2 $BIN/all_reduce_perf --backend mpi "$@"
fi
