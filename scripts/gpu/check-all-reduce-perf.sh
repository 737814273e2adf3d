#!/usr/bin/env bash
# GPU checks of our nccl-tests work-alike (all_reduce_perf and the other *_perf
# binaries, default --backend nccl) on a GPU machine, with binaries built
# elsewhere (the GPU machine needs no Rust).
#
# Build (build machine, repository root):
#   scripts/gpu/build-nccltests.sh DIR      # release *_perf + these scripts into DIR
# Run (GPU machine):
#   bash DIR/check-all-reduce-perf.sh [DIR] # DIR defaults to this script's directory
#
# Needs an NVIDIA driver, libnccl.so.2 (>= 2.19), python3; mpirun for the
# launch check (skipped without it). Writes check.log (every command, its
# output, exit status and verdict), all_reduce_perf.json and
# all_reduce_perf.csv under $OUT (default ./nccltests-check). Exits 0 only if
# every check passed. CHECK_TIMEOUT (seconds, default 120) bounds each check;
# CHECK_ONLY (an extended regular expression) runs only the checks whose names
# match it.
set -u
DIR=$(cd "${1:-$(dirname "$0")}" && pwd)
OUT=${OUT:-$PWD/nccltests-check}
mkdir -p "$OUT"
LOG=$OUT/check.log
: >"$LOG"
rm -f "$OUT"/all_reduce_perf.json* "$OUT"/all_reduce_perf.csv
REPORT="python3 $DIR/nccltests_report.py"
AR=$DIR/all_reduce_perf
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
# NVLink SHARP needs a fabric setup a single node here does not have.
export NCCL_NVLS_ENABLE=${NCCL_NVLS_ENABLE:-0}
failed=()
n=0
skip_last=0
skipped=0

exec > >(tee -a "$LOG") 2>&1
echo "== machine"
date -u '+%Y-%m-%d %H:%M:%S UTC'
uname -srm
nvidia-smi --query-gpu=name,driver_version,memory.total,pci.bus_id,compute_cap --format=csv,noheader 2>&1 | head -8
ls -l /usr/lib/x86_64-linux-gnu/libnccl.so* 2>&1 | head -3
ngpus=$(nvidia-smi -L 2>/dev/null | wc -l)
echo "GPUs: $ngpus"
# The loaded library's version (ERDMA_NCCL_LIBRARY picks another) decides what
# exists, as in nccl-tests: fp8 from 2.24, -R 2 windows from 2.27, -D from 2.28.
nccl=$("$AR" -b 8 -e 8 -c 0 -n 1 -w 0 2>/dev/null | sed -n 's/.*nccl-library=\([0-9]*\).*/\1/p' | head -1)
nccl=${nccl:-0}
echo "NCCL library: $nccl"

# check NAME WANT_STATUS 'VALIDATOR ARGS' COMMAND... : runs COMMAND, requires
# exit status WANT_STATUS and, when VALIDATOR ARGS is not empty, that
# `nccltests_report.py check OUTPUT VALIDATOR ARGS` passes.
check() {
  local name=$1 want=$2 validate=$3
  shift 3
  n=$((n + 1))
  skip_last=0
  if [ -n "${CHECK_ONLY:-}" ] && ! [[ $name =~ $CHECK_ONLY ]]; then
    skip_last=1
    skipped=$((skipped + 1))
    return
  fi
  local out=$WORK/$n.txt start ms rc verdict=ok
  echo
  echo "== [$n] $name: $*"
  start=$(date +%s%N)
  timeout "${CHECK_TIMEOUT:-120}" "$@" >"$out" 2>&1
  rc=$?
  ms=$((($(date +%s%N) - start) / 1000000))
  if [ "$(wc -l <"$out")" -gt 60 ]; then
    head -30 "$out"; echo "   [... $(($(wc -l <"$out") - 50)) lines ...]"; tail -20 "$out"
  else
    cat "$out"
  fi
  [ "$rc" -eq "$want" ] || verdict="FAIL (exit $rc, want $want)"
  if [ -n "$validate" ] && [ "$verdict" = ok ]; then
    # shellcheck disable=SC2086 # validator arguments are word lists
    $REPORT check "$out" $validate || verdict="FAIL (report)"
  fi
  printf '== [%d] %s: exit %d (want %d), %d.%03d s: %s\n' "$n" "$name" "$rc" "$want" \
    $((ms / 1000)) $((ms % 1000)) "$verdict"
  [ "$verdict" = ok ] || failed+=("[$n] $name")
}

# grep_check NAME PATTERN: the previous check's output contains PATTERN.
grep_check() {
  [ "$skip_last" -eq 1 ] && return
  if grep -q -- "$2" "$WORK/$n.txt"; then
    echo "== [$n] $1: found '$2'"
  else
    echo "== [$n] $1: FAIL, '$2' not found"
    failed+=("[$n] $1")
  fi
}

S="-b 8 -e 16M -f 16"   # 8 B .. 8 MiB in 6 sizes
# Every type and op, checked (fp8 avg/mulsum on one rank: skipped, as NCCL
# has no single-rank kernel for them).
if [ "$nccl" -ge 22400 ]; then
  check "all types and ops, -c 1" 0 "--rows 272 --skipped 4" \
    "$AR" -b 8 -e 1M -f 32 -d all -o all -c 1 -n 3
  grep_check "fp8 skip note" "# Skipping f8e4m3 avg: not supported: avg reductions of f8e4m3 data need at least 2 ranks"
  check "fp8 avg asked for alone on one rank" 5 "" "$AR" -b 8 -e 8 -d f8e4m3 -o avg
  grep_check "fp8 avg refusal" "not supported: avg reductions of f8e4m3"
else
  # Before 2.24 there is no fp8: -d all has ten types, and f8e4m3 is an
  # unknown type name (nccl-tests' warning, then float).
  check "all types and ops, -c 1 (no fp8 before NCCL 2.24)" 0 "--rows 240" \
    "$AR" -b 8 -e 1M -f 32 -d all -o all -c 1 -n 3
  check "fp8 before NCCL 2.24: float instead" 0 "--rows 1" "$AR" -b 8 -e 8 -d f8e4m3 -c 1 -n 1
  grep_check "fp8 unknown" "invalid type f8e4m3, defaulting to float"
fi
check "large, every op, two check passes (crosses 32 MiB chunks)" 0 "--rows 6" \
  "$AR" -b 96M -e 96M -d float -o all -c 2 -n 2
check "1 GiB bfloat16 checked" 0 "--rows 1" "$AR" -b 1G -e 1G -d bfloat16 -c 1 -n 2
check "-G 10 (CUDA graphs), every op" 0 "--rows 36" "$AR" $S -G 10 -o all -c 1 -n 5
for z in 1 2 3; do
  check "-z $z" 0 "--rows 6" "$AR" $S -z "$z" -c 1 -n 5
done
check "-z 1 -m 4 (blocking with aggregation)" 0 "--rows 6" "$AR" $S -z 1 -m 4 -c 1 -n 5
check "-m 4 (aggregated iterations)" 0 "--rows 6" "$AR" $S -m 4 -c 1 -n 5
check "-y 1 (NULL stream)" 0 "--rows 6" "$AR" $S -y 1 -c 1 -n 5
# Before 2.20 NCCL registers only with NVLink SHARP and leaves the handle
# null, then refuses it in ncclCommDeregister (nccl-tests fails there, exit 3);
# ours releases only what NCCL registered.
check "-R 1 (ncclCommRegister)" 0 "--rows 6" "$AR" $S -R 1 -c 1 -n 5
check "-R 2 (symmetric windows)" 0 "--rows 6" "$AR" $S -R 2 -c 1 -n 5
[ "$nccl" -lt 22700 ] && grep_check "-R 2 before NCCL 2.27" "Defaulting to local registration"
u_rows=36
[ "$nccl" -lt 22400 ] && u_rows=30
check "-u 1 (unaligned), every type" 0 "--rows $u_rows" "$AR" -b 8 -e 8K -f 32 -u 1 -d all -c 1 -n 3
check "-p 1 (parallel init)" 0 "--rows 6" "$AR" $S -p 1 -c 1 -n 5
check "-x 1 (CTA policy)" 0 "--rows 6" "$AR" $S -x 1 -c 1 -n 5
check "-I 1 -K 2 (per-iteration timing)" 0 "--rows 6" "$AR" $S -I 1 -K 2 -c 1 -n 10
grep_check "-I columns" "i_p99"
check "-C 1 (CPU time)" 0 "--rows 6" "$AR" $S -C 1 -c 1 -n 5
grep_check "-C header" " cputime "
for a in 0 2 3; do
  check "-a $a, -c 0" 0 "--rows 6 --wrong na" "$AR" $S -a "$a" -c 0 -n 5
done
# -M 1: the three figures and Total (nccl-tests' writeMemInfo), from
# cuMemGetInfo where nccl-tests reads cudaMemGetInfo. $S allocates 16 MiB send +
# 16 MiB receive (32 MiB = 33554432 B): User-Allocated without -p; with -p 1
# nccl-tests reads after the buffers, so they land in Initialization.
check "-M 1 (memory report)" 0 "--rows 6 --mem 33554432" "$AR" $S -M 1 -c 1 -n 5
grep_check "-M line" "GPU memory usage     : Initialization"
check "-M 1 -p 1 (memory report, parallel init)" 0 "--rows 6 --mem 33554432 --mem-parallel-init" \
  "$AR" $S -M 1 -p 1 -c 1 -n 5
check "-J JSON and --csv" 0 "--rows 13 --json $OUT/all_reduce_perf.json --csv $OUT/all_reduce_perf.csv" \
  "$AR" -b 8 -e 128M -f 4 -c 1 -n 5 -J "$OUT/all_reduce_perf.json" --csv "$OUT/all_reduce_perf.csv"
check "wrong data is reported (corrupt hook)" 7 "" env ERDMA_BENCH_HOOK=corrupt:0 "$AR" -b 1M -e 1M -c 1 -n 2
# Both placements of the one size are wrong.
grep_check "FAILED footer" "# Out of bounds values : 2 FAILED"
check "stuck rank: -T 5 aborts and fails (stall hook)" 4 "" env ERDMA_BENCH_HOOK=stall:0 "$AR" -b 1M -e 1M -T 5 -c 0
grep_check "timeout message" "Test timeout (5s) rank 0 "
check "NCCL missing" 3 "" env ERDMA_NCCL_LIBRARY=/nonexistent/libnccl.so.2 "$AR"
grep_check "NCCL missing message" "Test NCCL failure dlopen '/nonexistent/libnccl.so.2 not found"
# -D: nccl-tests' device-API all_reduce kernels, built at run time by NVRTC
# against this machine's nccl_device.h. They need a communicator with
# symmetric memory: NCCL 2.28.3 gives it only with 2+ GPUs of one node that
# reach each other by P2P (one GPU: ncclDevCommCreate refuses, as for
# nccl-tests, exit 3, reached only after the kernels compiled, loaded and
# matched the library); NCCL 2.28.9 gives it to a one-GPU communicator too.
real_d=0
G=""
if [ "$nccl" -lt 22800 ]; then
  check "-D 1 before NCCL 2.28" 255 "" "$AR" -b 8 -e 8 -D 1 -R 2
  grep_check "-D version message" "Option -D (device implementation) requires NCCL >= 2.28.0"
elif [ "$ngpus" -ge 2 ]; then
  real_d=1
  G="-g 2"
elif "$AR" -b 8 -e 8 -D 1 -R 2 >/dev/null 2>&1; then
  real_d=1
else
  check "-D 1 -R 2 on one GPU: kernels built, NCCL refuses symmetric memory" 3 "" "$AR" -b 8 -e 8 -D 1 -R 2
  grep_check "-D one-GPU hint" "hint: NCCL gives communicators symmetric memory"
fi
if [ "$real_d" -eq 1 ]; then
  # Sum only; nine types have kernels (nccl-tests has none for bfloat16 and
  # fp8: -d all stops there, exit 5).
  for d in 1 2; do
    check "-D $d -R 2 $G, the nine types with kernels" 5 "--rows 54 --partial" \
      "$AR" $S $G -D "$d" -R 2 -d all -c 1 -n 5
    grep_check "-D $d stops at bfloat16" "has no bfloat16 kernel"
    check "-D $d -R 2 $G -u 1, the nine types" 5 "--rows 54 --partial" \
      "$AR" $S $G -D "$d" -R 2 -u 1 -d all -c 1 -n 5
    check "-D $d -R 2 $G, 1 GiB float" 0 "--rows 1" "$AR" -b 1G -e 1G $G -D "$d" -R 2 -c 1 -n 5
  done
  check "-D 1 -R 2 $G -G 10 (graphs)" 0 "--rows 6" "$AR" $S $G -D 1 -R 2 -G 10 -c 1 -n 5
  check "-D 1 -R 2 $G -o prod: sum only" 5 "" "$AR" -b 8 -e 8 $G -D 1 -R 2 -o prod
fi
if [ "$ngpus" -eq 1 ] && [ "$nccl" -ge 22800 ]; then
  # The kernels' data paths on one GPU whatever NCCL allows: the fake-devcomm
  # hook gives them a one-rank device communicator and windows over plain
  # device memory (the sum over one rank is a copy: every element must land,
  # at every offset).
  F="env ERDMA_BENCH_HOOK=fake-devcomm:0"
  for d in 1 2; do
    check "-D $d fake one-rank devcomm, the nine types with kernels" 5 "--rows 54 --partial" \
      $F "$AR" $S -D "$d" -R 2 -d all -c 1 -n 5
    grep_check "-D $d stops at bfloat16" "has no bfloat16 kernel"
    check "-D $d fake, -u 1, the nine types" 5 "--rows 54 --partial" \
      $F "$AR" $S -D "$d" -R 2 -u 1 -d all -c 1 -n 5
    check "-D $d fake, 1 GiB float" 0 "--rows 1" $F "$AR" -b 1G -e 1G -D "$d" -R 2 -c 1 -n 5
  done
  check "-D 2 fake, odd sizes (vector tail)" 0 "--rows 5" $F "$AR" -b 1000001 -e 1000005 -i 1 -D 2 -R 2 -d int8 -c 1 -n 2
  check "-D 1 fake, -G 10 (graphs)" 0 "--rows 6" $F "$AR" $S -D 1 -R 2 -G 10 -c 1 -n 5
  check "-D 1 fake, -o prod: sum only" 5 "" $F "$AR" -b 8 -e 8 -D 1 -R 2 -o prod
  grep_check "-D prod refusal" "reduce with sum only"
fi
if [ "$nccl" -ge 22800 ]; then
  check "-D 1 without NVRTC" 5 "" env ERDMA_NVRTC_LIBRARY=/nonexistent/libnvrtc.so "$AR" -b 8 -e 8 -D 1 -R 2
  grep_check "NVRTC missing message" "NVRTC (libnvrtc.so) not found"
  check "all_gather_perf -D 1: no device implementation" 5 "" "$DIR/all_gather_perf" -b 8 -e 8 -D 1 -R 2
fi
if [ "$ngpus" -ge 2 ]; then
  check "-t 2" 0 "--rows 6" "$AR" $S -t 2 -c 1 -n 5
  check "-g 2" 0 "--rows 6" "$AR" $S -g 2 -c 1 -n 5
else
  check "-t 2 on one GPU: too few GPUs" 5 "" "$AR" $S -t 2
  grep_check "-t 2 message" "Invalid number of GPUs: 2 requested but only $ngpus were found."
fi
if command -v mpirun >/dev/null; then
  np=$((ngpus + 1))
  check "mpirun -np $np: one rank per GPU, one GPU short" 5 "" \
    mpirun --allow-run-as-root --oversubscribe -np "$np" -x NCCL_NVLS_ENABLE "$AR" $S
  grep_check "mpirun message" "Invalid number of GPUs: $np requested but only $ngpus were found."
  check "mpirun -np 1" 0 "--rows 6" \
    mpirun --allow-run-as-root --oversubscribe -np 1 -x NCCL_NVLS_ENABLE "$AR" $S -c 1 -n 5
fi
# The other collectives: a few sizes each, checked; rooted ones sweep roots.
# (nccl-tests does not check in-place alltoall and sendrecv: #wrong is N/A.)
for b in all_gather reduce_scatter broadcast reduce alltoall gather scatter sendrecv hypercube; do
  check "${b}_perf" 0 "--rows 6 --wrong zero-or-na-in-place" "$DIR/${b}_perf" $S -r -1 -c 1 -n 5
done
rows="--rows 136 --skipped 4"
[ "$nccl" -lt 22400 ] && rows="--rows 120"
for b in reduce_scatter reduce; do
  # shellcheck disable=SC2086 # $rows is a word list
  check "${b}_perf every type and op" 0 "$rows" \
    "$DIR/${b}_perf" -b 64 -e 64K -f 1024 -d all -o all -c 1 -n 3
done

echo
if [ ${#failed[@]} -eq 0 ]; then
  echo "== all $((n - skipped)) checks passed"
else
  echo "== FAILED ${#failed[@]} of $((n - skipped)): ${failed[*]}"
  exit 1
fi
