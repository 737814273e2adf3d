#!/usr/bin/env bash
# Side-by-side timing of NVIDIA nccl-tests' *_perf and ours on one GPU
# machine, same arguments, alternating runs, both outputs read by ONE parser
# (nccltests_report.py, so ours is proven to parse like nccl-tests).
#
#   bash compare-nccl-tests.sh NCCL_TESTS_BUILD_DIR OUR_BIN_DIR
#
# NCCL_TESTS_BUILD_DIR holds the ${COLL}_perf built from nccl-tests 2.19.6
# (this script does not build it); OUR_BIN_DIR holds ours (see
# build-nccltests.sh). Environment: COLL (the collective, default
# all_reduce), LAUNCH (a launcher word list put before both binaries, e.g.
# "mpirun --allow-run-as-root -np 8 -x NCCL_NVLS_ENABLE"; default none: one
# process), REPS (runs of each, default 6),
# COMPARE_ARGS (default "-b 8 -e 8G -f 2 -c 0 -n 100 -w 10"), BOUND (default
# 0.02), RUN_TIMEOUT (seconds per run, default 180), COMPARE_CPUS (a taskset
# CPU list both tools are pinned to, e.g. "2,3"; default unpinned), TAG (file
# name suffix, default empty). Writes compare$TAG.md (the
# per-size table of median times and ratios) and compare-raw$TAG.txt (every run's
# output) under $OUT (default ./nccltests-compare). Exits 0 when every size is
# within the bound, 1 when one is not, 2 when a run failed.
set -u
COLL=${COLL:-all_reduce}
THEIRS=${1:?usage: $0 NCCL_TESTS_BUILD_DIR OUR_BIN_DIR}/${COLL}_perf
OURS=${2:?usage: $0 NCCL_TESTS_BUILD_DIR OUR_BIN_DIR}/${COLL}_perf
read -ra LAUNCHER <<<"${LAUNCH:-}"
HERE=$(cd "$(dirname "$0")" && pwd)
OUT=${OUT:-$PWD/nccltests-compare}
REPS=${REPS:-6}
ARGS=${COMPARE_ARGS:--b 8 -e 8G -f 2 -c 0 -n 100 -w 10}
BOUND=${BOUND:-0.02}
export NCCL_NVLS_ENABLE=${NCCL_NVLS_ENABLE:-0}
mkdir -p "$OUT"
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
TAG=${TAG:-}
RAW=$OUT/compare-raw$TAG.txt
PIN=()
if [ -n "${COMPARE_CPUS:-}" ]; then
  PIN=(taskset -c "$COMPARE_CPUS")
fi
: >"$RAW"

for b in "$THEIRS" "$OURS"; do
  [ -x "$b" ] || { echo "missing executable: $b" >&2; exit 2; }
done
gpu=$(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null | head -1)
echo "== $(date -u '+%Y-%m-%d %H:%M:%S UTC'); GPU: ${gpu:-none found}"
echo "== ${COLL}_perf, arguments: $ARGS; launch: ${LAUNCH:-one process}; $REPS runs each, alternating; NCCL_NVLS_ENABLE=$NCCL_NVLS_ENABLE; CPUs: ${COMPARE_CPUS:-any} of $(nproc)"

status=0
run_one() { # run_one TOOL BINARY INDEX
  local f=$WORK/$1-$3.txt start ms rc
  start=$(date +%s%N)
  # shellcheck disable=SC2086 # ARGS is a word list
  timeout "${RUN_TIMEOUT:-180}" "${PIN[@]}" "${LAUNCHER[@]}" "$2" $ARGS >"$f" 2>&1
  rc=$?
  ms=$((($(date +%s%N) - start) / 1000000))
  echo "== run $3 $1: exit $rc, $((ms / 1000)).$((ms % 1000 / 100)) s, $(grep -m1 'Avg bus bandwidth' "$f")"
  { echo "===== run $3 $1 (${LAUNCH:+$LAUNCH }$2 $ARGS): exit $rc"; cat "$f"; } >>"$RAW"
  [ "$rc" -eq 0 ] || status=2
}
for i in $(seq 1 "$REPS"); do
  if [ $((i % 2)) -eq 1 ]; then
    run_one nccl-tests "$THEIRS" "$i"; run_one ours "$OURS" "$i"
  else
    run_one ours "$OURS" "$i"; run_one nccl-tests "$THEIRS" "$i"
  fi
done
head -1 "$WORK/nccl-tests-1.txt"
head -1 "$WORK/ours-1.txt"

python3 "$HERE/nccltests_report.py" compare --bound "$BOUND" \
  --theirs "$WORK"/nccl-tests-*.txt --ours "$WORK"/ours-*.txt | tee "$OUT/compare$TAG.md"
rc=${PIPESTATUS[0]}
[ "$status" -ne 0 ] && exit "$status"
exit "$rc"
