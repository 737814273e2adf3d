#!/usr/bin/env bash
# How long the data check (-c) of our all_reduce_perf takes at GiB sizes on a
# GPU machine: each case runs with -c 0 and with -c 1 and the difference is
# the cost of generating inputs and checking results (on the GPU with the
# NCCL backend since issue 12, as nccl-tests; on the host with EXTRA="--backend
# host").
#
#   bash datacheck-speed.sh [DIR]     # DIR: our *_perf (build-nccltests.sh)
#
# Cases (CASES overrides, one per line, "NAME|ARGS"): 1 GiB bfloat16 and
# float on one GPU, and float on every GPU as -g N when there are several.
# EXTRA: more arguments for every run (a dry run without GPU:
# EXTRA="--backend host" CASES="small|-b 64M -e 64M -n 1").
# Writes speed.log under $OUT (default ./datacheck-speed). Exits 0 when every
# -c 1 run exits 0 and prints #wrong 0 in both placements, and the check
# costs at most $BUDGET seconds (default 5) per case.
set -u
DIR=$(cd "${1:-$(dirname "$0")}" && pwd)
OUT=${OUT:-$PWD/datacheck-speed}
BUDGET=${BUDGET:-5}
EXTRA=${EXTRA:-}
mkdir -p "$OUT"
exec > >(tee "$OUT/speed.log") 2>&1
export NCCL_NVLS_ENABLE=${NCCL_NVLS_ENABLE:-0}
ngpus=$(nvidia-smi -L 2>/dev/null | wc -l)
echo "GPUs: $ngpus, CPUs: $(nproc)"
nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1
CASES=${CASES:-"1 GiB bfloat16, 1 GPU|-b 1G -e 1G -d bfloat16 -n 2
1 GiB float, 1 GPU|-b 1G -e 1G -d float -n 2"}
if [ "$ngpus" -gt 1 ]; then
  CASES="$CASES
1 GiB float, -g $ngpus|-b 1G -e 1G -d float -n 2 -g $ngpus"
fi

# timed COMMAND...: runs COMMAND with its output in $last; sets rc (exit
# status) and ms (wall time).
timed() {
  local start
  start=$(date +%s%N)
  "$@" >"$last" 2>&1
  rc=$?
  ms=$((($(date +%s%N) - start) / 1000000))
}

failed=0
last=$(mktemp)
trap 'rm -f "$last"' EXIT
while IFS='|' read -r name args; do
  [ -n "$name" ] || continue
  # shellcheck disable=SC2086 # word lists
  timed "$DIR/all_reduce_perf" $EXTRA $args -c 0
  ms0=$ms rc0=$rc
  # shellcheck disable=SC2086
  timed "$DIR/all_reduce_perf" $EXTRA $args -c 1
  ms1=$ms rc1=$rc
  # The result row: out-of-place and in-place #wrong are fields 9 and 13.
  row=$(grep -E '^ +[0-9]+ +[0-9]+ ' "$last" | tail -1)
  wrong=$(echo "$row" | awk '{print $9 "/" $13}')
  cost=$((ms1 - ms0))
  verdict=ok
  if [ "$rc0" -ne 0 ] || [ "$rc1" -ne 0 ] || [ "$wrong" != "0/0" ]; then
    verdict="FAIL (exit $rc0/$rc1, #wrong $wrong)"
    tail -5 "$last"
  elif [ "$cost" -gt $((BUDGET * 1000)) ]; then
    verdict="FAIL (check over ${BUDGET} s)"
  fi
  printf '%-24s -c 0: %6d ms  -c 1: %6d ms  check: %6d ms  #wrong %s  %s\n' \
    "$name" "$ms0" "$ms1" "$cost" "$wrong" "$verdict"
  echo "   $row"
  [ "$verdict" = ok ] || failed=$((failed + 1))
done <<<"$CASES"
echo "== $failed failed"
[ "$failed" -eq 0 ]
