#!/usr/bin/env bash
# quickstart.sh - set up, build, and run the main job: erdma-cluster, the
# whole-cluster check (erdma-doctor on every host, the NIC pair matrix, the
# NCCL stage where this build has it), printing its text report and the path
# of its page, report.html.
#
#   RDMA devices here -> erdma-cluster for real under mpirun:
#       ERDMA_HOSTS=h1,h2,...  one rank per host (the binary at the same path on
#                              every host, e.g. a shared file system or the container)
#       unset                  this host alone: 2 ranks over its first two NICs
#                              (1 rank, the checks only, with one NIC); the
#                              warning that two ranks share a host counts as 0
#   no RDMA device    -> inside the rig's VM (rig/vm.sh): 2 ranks over Soft-RoCE
#                        rxe0/rxe1 (RoCE v2, GIDs), then over Soft-iWARP siw0/siw1
#                        (iWARP through RDMA CM, eRDMA's default mode)
#   NCCL stage        -> added when `erdma-cluster --help` lists --nccl; on hosts
#                        without GPUs it runs on the MPI/host backend. Builds
#                        without it run all_reduce_perf as a separate last step.
#
# Reports: target/quickstart/CASE/ (report.html, cluster.json, each host's and
# pair's document); CASE is `cluster` on real hosts, `rxe` and `siw` in the VM.
#
# usage: scripts/quickstart.sh [erdma-cluster options...]   (added to every job)
#        (scripts/quickstart.sh --in-rig [options...] is the part run inside the VM)
#   env: ERDMA_HOSTS (above), ERDMA_PERF_ARGS (erdma-perf options of each pair on
#        real hosts, default "-x 1 -s 1048576 -n 1000 --report_gbits": eRDMA's IPv4
#        RoCE v2 GID in its RoCE-style mode, ignored by iWARP devices, which use RDMA CM)
# exit status: setup 1, build 101; then erdma-cluster's (0 ok, 1 warnings,
#   2 a failure, 3 bad arguments, 4 a report not written, 5 a rank lost); in the
#   VM a warning is expected (two ranks share one host) and counts as 0.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$(pwd -P)
BIN=$ROOT/target/release
[[ -n ${CARGO_TARGET_DIR:-} ]] && BIN=$(cd "$CARGO_TARGET_DIR" && pwd -P)/release
OUT=$ROOT/target/quickstart
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1

# erdma-cluster options of the NCCL stage, when this build has it: a short
# sweep in the VM (1 GiB buffers do not fit its memory).
nccl_opts() {  # nccl_opts SMALL(0|1)
  local help; help=$("$BIN/erdma-cluster" --help)
  grep -qE -- '--nccl([^-[:alnum:]_]|$)' <<<"$help" || return 0
  printf '%s\n' --nccl
  if [[ $1 == 1 ]] && grep -q -- '--nccl-args' <<<"$help"; then
    printf '%s\n' --nccl-args "-b 8 -e 4M -f 4 -c 1"
  fi
}

# stderr without Open MPI's boxes saying that a rank exited non-zero: the
# report already says why (every rank exits with the job's status, e.g. 1
# for a warning); other boxes (a launch failure) are kept.
quiet_mpirun() {
  awk '/^--------------------+$/ { if (inb) { if (buf !~ /non-zero (exit code|status)/) printf "%s%s\n", buf, $0; inb = 0; buf = "" }
                    else { inb = 1; buf = $0 "\n" }; next }
       inb { buf = buf $0 "\n"; next }
       { print; fflush() }'
}

# One erdma-cluster job: CASE NP DEVICES PERF_ARGS PORT MPIRUN_OPTS... -- EXTRA...
cluster_job() {
  local case=$1 np=$2 devices=$3 perf=$4 port=$5; shift 5
  local mpi=() extra=() nccl=() rc=0
  while [[ $1 != -- ]]; do mpi+=("$1"); shift; done; shift; extra=("$@")
  mapfile -t nccl < <(nccl_opts "${SMALL:-0}")
  local args=(--out "$OUT/$case")
  if [[ $np -gt 1 ]]; then
    args+=(--pairs --perf-args "$perf" --pair-port "$port")
    [[ -z $devices ]] || args+=(--devices "$devices")
  fi
  rm -rf "${OUT:?}/$case"
  echo "== erdma-cluster ($case): mpirun -np $np ${mpi[*]} erdma-cluster ${args[*]} ${nccl[*]} ${extra[*]}"
  mpirun --oversubscribe -np "$np" "${mpi[@]}" "$BIN/erdma-cluster" "${args[@]}" "${nccl[@]}" "${extra[@]}" \
    2> >(quiet_mpirun >&2) || rc=$?
  wait $! 2>/dev/null || true   # the filter's last lines before ours
  echo "== report.html ($case): $OUT/$case/report.html (exit $rc)"
  return "$rc"
}

# Inside the rig's VM: the rxe pair, then the siw pair.
if [[ ${1:-} == --in-rig ]]; then
  shift
  export SMALL=1
  mpi=(--mca pml ob1 --mca btl "self,vader,tcp")
  worst=0
  cluster_job rxe 2 rxe0,rxe1 "-x ${ERDMA_RIG_RXE_GID_INDEX:-1} -s 65536 -n 200 --report_gbits" 18600 \
    "${mpi[@]}" -- --skip gpu "$@" || worst=$?
  if [[ -n ${ERDMA_RIG_SIW:-} ]]; then
    rc=0
    cluster_job siw 2 siw0,siw1 "-s 65536 -n 200 --report_gbits" 18700 \
      "${mpi[@]}" -- --skip gpu "$@" || rc=$?
    if [[ $rc -gt $worst ]]; then worst=$rc; fi
  fi
  exit "$worst"
fi

T0=$SECONDS
scripts/setup.sh
# shellcheck disable=SC1091
[[ -f $HOME/.cargo/env ]] && source "$HOME/.cargo/env"
echo "== build (release)"
cargo build --release -q -p erdma-bench --bins
echo "(set up and built in $((SECONDS - T0)) s)"

ngpus=0
if command -v nvidia-smi >/dev/null && nvidia-smi -L >/dev/null 2>&1; then
  ngpus=$(nvidia-smi -L | grep -c '^GPU')
fi
mapfile -t nics < <(ls /sys/class/infiniband 2>/dev/null)
rc=0
if [[ ${#nics[@]} -gt 0 ]]; then
  [[ $ngpus -gt 0 ]] || set -- --skip gpu "$@"
  perf=${ERDMA_PERF_ARGS:--x 1 -s 1048576 -n 1000 --report_gbits}   # -x 1: eRDMA RoCE-style GID; ignored with RDMA CM
  if [[ -n ${ERDMA_HOSTS:-} ]]; then
    IFS=, read -r -a hosts <<<"$ERDMA_HOSTS"
    cluster_job cluster "${#hosts[@]}" "" "$perf" 18600 -H "$ERDMA_HOSTS" --map-by ppr:1:node -- "$@" || rc=$?
  elif [[ ${#nics[@]} -ge 2 ]]; then
    echo "(one host with ${#nics[@]} RDMA devices: 2 ranks, one per NIC; ERDMA_HOSTS=h1,h2,... checks a cluster)"
    cluster_job cluster 2 "${nics[0]},${nics[1]}" "$perf" 18600 -- "$@" || rc=$?
    if [[ $rc == 1 ]]; then rc=0; fi   # the two ranks share this host: erdma-cluster warns
  else
    echo "(one host with one RDMA device: the checks only; ERDMA_HOSTS=h1,h2,... checks a cluster)"
    cluster_job cluster 1 "${nics[0]}" "" 18600 -- "$@" || rc=$?
  fi
else
  echo "== no RDMA device on this host: erdma-cluster in the rig's VM (Soft-RoCE rxe0/rxe1, Soft-iWARP siw0/siw1)"
  rig/vm.sh -- bash scripts/quickstart.sh --in-rig "$@" || rc=$?
  # Both ranks share the VM: erdma-cluster warns about it (exit 1), nothing else is wrong.
  if [[ $rc == 1 ]]; then rc=0; fi
fi

if [[ -z $(nccl_opts 0) ]]; then
  echo "== all_reduce_perf (this erdma-cluster has no NCCL stage yet)"
  if [[ $ngpus -gt 0 ]]; then
    "$BIN/all_reduce_perf" -g "$ngpus" -b 8 -e 128M -f 2 || rc=$?
  else
    echo "(no GPU on this host: the MPI backend reduces host memory under mpirun -np 2)"
    mpirun --oversubscribe -np 2 "$BIN/all_reduce_perf" --backend mpi -b 8 -e 8M -f 4 || rc=$?
  fi
fi
echo "== done in $((SECONDS - T0)) s; open the report(s) in a browser:"
for f in "$OUT"/*/report.html; do [[ -e $f ]] && echo "   $f"; done
exit "$rc"
