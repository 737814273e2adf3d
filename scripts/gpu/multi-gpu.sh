#!/usr/bin/env bash
# Multi-GPU checks of our nccl-tests work-alike on one machine with N GPUs
# (issue 4): every collective across N NCCL ranks in each launch mode, side
# by side with nccl-tests when a build of it is given, and the failure paths
# (a killed rank, a stuck rank) with real NCCL.
#
#   bash multi-gpu.sh OUR_BIN_DIR [NCCL_TESTS_BUILD_DIR]
#
# OUR_BIN_DIR: our *_perf binaries and the helper scripts (build-nccltests.sh
# puts both there). NCCL_TESTS_BUILD_DIR: nccl-tests 2.19.6 built with MPI=1
# (not built by this script); without it the comparison part is skipped.
#
# Parts (PARTS, default "modes colls compare failures"):
#   modes    all_reduce_perf across N ranks three ways: -g N in one process,
#            -t N threads, mpirun -np N: a busbw sweep ($SWEEP, -c 0) and a
#            checked sweep (-b 8 -e $CHECK_MAX -f 2 -c 1, 0 wrong each).
#   colls    every other collective: the same two sweeps under mpirun -np N,
#            and -g N at a few sizes ($SPOT) over every root, checked.
#   compare  per collective that NCCL_TESTS_BUILD_DIR has: compare-nccl-tests.sh
#            (alternating runs, ONE parser, per-size ratio table, $BOUND) for
#            each launch in COMPARE_MODES (mpirun, g, t; default mpirun), and
#            both tools' text and -J JSON read by the same parser.
#   failures N processes over the TCP launch (RANK/WORLD_SIZE, checked); under
#            mpirun -np N with -T $FAIL_T: rank 1 killed by the kill:1 hook, by
#            an outside kill -9 mid-run, stopped by an outside SIGSTOP (exit 4,
#            "rank 1 (pid ...) did not respond"), and stalled (stall:1, exit
#            4); over TCP, rank 1 killed -9 and stopped mid-run. Every other
#            rank must exit non-zero within -T + $MARGIN s, and the output must
#            name rank 1.
#
# One-GPU mode, ONE_GPU_RANKS=N (N >= 2): N processes share GPU 0, each with
# its own NCCL_HOSTID (so NCCL takes them for N hosts: no "Duplicate GPU
# detected", and the ranks talk over NCCL's socket transport on loopback) and
# NCCL_TESTS_DEVICE=0, NCCL_SOCKET_IFNAME=lo, NCCL_IB_DISABLE=1 for every run
# of both tools. It proves multi-rank NCCL (bootstrap, ncclCommInitRank across
# processes, every collective checked, the abort paths, the TCP launch) on a
# machine with one GPU, not NVLink/P2P/SHM or a multi-GPU busbw. -g N and
# -t N are skipped (one process cannot hold two ranks of one GPU); the other
# collectives' checked sweep runs every root (-r -1) under mpirun instead;
# one run with NCCL_DEBUG=INFO must show the socket transport; the parts run
# in the order modes colls failures compare, and checks that would start past
# BUDGET seconds (420 with NCCL) are skipped, so that the summary is printed
# before the device tool's 600 s limit.
#
# NCCL_NVLS_ENABLE=0 is forced for every run (NVLink multicast stays off).
# Dry run, no GPU: BACKEND=host (or mpi) adds --backend BACKEND to every run,
# small sizes, NGPUS default 2 (ranks are simulated: -g/-t threads, mpirun
# processes). With mpi, -g/-t and TCP launches are skipped (one rank per
# MPI process). bench/tests/multi_gpu_script.rs runs it that way in CI.
#
# Environment (defaults for the GPU run; the dry run has smaller ones):
#   OUT (./multi-gpu) NGPUS (nvidia-smi -L) PARTS COLLS (the 9 others)
#   SWEEP ("-b 8 -e 8G -f 2") CHECK_MAX (256M) SPOT ("-b 8 -e 8M -f 32")
#   RUN_TIMEOUT (300 s per run) MPIRUN_ARGS ("--allow-run-as-root
#   --oversubscribe --bind-to none") COMPARE_COLLS (all 10) COMPARE_MODES
#   (mpirun) COMPARE_ARGS ("-b 8 -e 8G -f 2 -c 0 -n 100 -w 10") REPS (4)
#   BOUND (0.02) JSON_ARGS ("-b 8 -e 1M -f 32 -c 1 -n 5") FAIL_T (20)
#   MARGIN (30 s, includes start-up) FAIL_ARGS ("-b 8 -e 8G -f 2 -c 0")
#   BUDGET (seconds after which no check starts; default none, 420 in the
#   one-GPU mode). One-GPU defaults: SWEEP "-b 8 -e 256M -f 4 -n 20 -w 5",
#   CHECK_MAX 16M, COMPARE_ARGS "-b 8 -e 128M -f 8 -c 0 -n 20 -w 5", REPS 2,
#   FAIL_T 10, FAIL_ARGS "-b 8 -e 256M -f 2 -c 0", RUN_TIMEOUT 120.
#
# Writes three files under $OUT: multi-gpu.log (everything printed),
# summary.md (verdicts, busbw tables, comparison tables), raw.txt (every run's
# complete output and JSON). Prints the summary last. Exit status: 0 all
# passed; 1 a check failed; 2 bad usage or machine (fewer than 2 GPUs, a
# missing binary); 3 checks passed but a timing comparison was outside BOUND.
set -u
usage="usage: $0 OUR_BIN_DIR [NCCL_TESTS_BUILD_DIR]"
BIN=$(cd "${1:?$usage}" && pwd) || exit 2
NT=${2:-}
if [ -n "$NT" ]; then NT=$(cd "$NT" && pwd) || exit 2; fi
HERE=$(cd "$(dirname "$0")" && pwd)
REPORT=(python3 "$HERE/nccltests_report.py")
BACKEND=${BACKEND:-nccl}
OUT=${OUT:-$PWD/multi-gpu}
PARTS=${PARTS:-modes colls compare failures}
ALL_COLLS="all_gather reduce_scatter broadcast reduce alltoall gather scatter sendrecv hypercube"
COLLS=${COLLS:-$ALL_COLLS}
# Never NVLink multicast on these machines: not overridable.
export NCCL_NVLS_ENABLE=0
unset ERDMA_BENCH_HOOK
ONE_GPU=${ONE_GPU_RANKS:-}
if [ -n "$ONE_GPU" ]; then
  if ! [[ $ONE_GPU =~ ^[0-9]{1,3}$ ]] || [ $((10#$ONE_GPU)) -lt 2 ] || [ $((10#$ONE_GPU)) -gt 64 ]; then
    echo "ONE_GPU_RANKS must be the number of ranks to put on GPU 0, 2 to 64 (got '$ONE_GPU')" >&2
    exit 2
  fi
  ONE_GPU=$((10#$ONE_GPU))
fi
D_BUDGET=0

case $BACKEND in
  nccl)
    BARGS=()
    D_SWEEP="-b 8 -e 8G -f 2" D_CHECK_MAX=256M D_SPOT="-b 8 -e 8M -f 32"
    D_COMPARE_ARGS="-b 8 -e 8G -f 2 -c 0 -n 100 -w 10" D_REPS=4
    D_JSON_ARGS="-b 8 -e 1M -f 32 -c 1 -n 5" D_FAIL_T=20 D_MARGIN=30
    D_FAIL_ARGS="-b 8 -e 8G -f 2 -c 0" D_RUN_TIMEOUT=300
    if [ -n "$ONE_GPU" ]; then
      # Ranks that time-share one GPU and talk over loopback sockets move a
      # few GB/s at best, and each run pays a few seconds of start-up: fewer,
      # smaller sizes keep a run of N=2 within the budget (estimates in
      # docs/perf/multi-gpu-README.md).
      D_SWEEP="-b 8 -e 256M -f 4 -n 20 -w 5" D_CHECK_MAX=16M
      D_COMPARE_ARGS="-b 8 -e 128M -f 8 -c 0 -n 20 -w 5" D_REPS=2
      D_FAIL_T=10 D_FAIL_ARGS="-b 8 -e 256M -f 2 -c 0" D_RUN_TIMEOUT=120 D_BUDGET=420
    fi
    ;;
  host | mpi)
    BARGS=(--backend "$BACKEND")
    D_SWEEP="-b 8 -e 64K -f 8" D_CHECK_MAX=4K D_SPOT="-b 8 -e 512 -f 8"
    D_COMPARE_ARGS="-b 8 -e 4K -f 8 -c 0 -n 5 -w 1" D_REPS=2
    D_JSON_ARGS="-b 8 -e 512 -f 8 -c 1 -n 2" D_FAIL_T=5 D_MARGIN=15
    # Long enough (host backend, debug build) to be killed after its first row.
    D_FAIL_ARGS="-b 8 -e 8K -f 2 -n 10000 -w 0 -c 0" D_RUN_TIMEOUT=60
    ;;
  *) echo "BACKEND must be nccl, host or mpi, not '$BACKEND'" >&2; exit 2 ;;
esac
SWEEP=${SWEEP:-$D_SWEEP}
CHECK_MAX=${CHECK_MAX:-$D_CHECK_MAX}
SPOT=${SPOT:-$D_SPOT}
COMPARE_ARGS=${COMPARE_ARGS:-$D_COMPARE_ARGS}
REPS=${REPS:-$D_REPS}
BOUND=${BOUND:-0.02}
JSON_ARGS=${JSON_ARGS:-$D_JSON_ARGS}
FAIL_T=${FAIL_T:-$D_FAIL_T}
MARGIN=${MARGIN:-$D_MARGIN}
FAIL_ARGS=${FAIL_ARGS:-$D_FAIL_ARGS}
RUN_TIMEOUT=${RUN_TIMEOUT:-$D_RUN_TIMEOUT}
COMPARE_MODES=${COMPARE_MODES:-mpirun}
BUDGET=${BUDGET:-$D_BUDGET}
if ! [[ $BUDGET =~ ^[0-9]{1,6}$ ]]; then
  echo "BUDGET must be a number of seconds, 0 for no limit (got '$BUDGET')" >&2
  exit 2
fi
BUDGET=$((10#$BUDGET))
read -ra MPIRUN_OPTS <<<"${MPIRUN_ARGS:---allow-run-as-root --oversubscribe --bind-to none}"

if [ -n "$ONE_GPU" ]; then
  N=$ONE_GPU
  if [ "$BACKEND" = nccl ]; then
    gpus=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU ')
    if [ "$gpus" -lt 1 ]; then
      echo "the one-GPU mode (ONE_GPU_RANKS) needs a GPU: nvidia-smi -L lists none (or BACKEND=host for a dry run)" >&2
      exit 2
    fi
    # Several processes on GPU 0 need its compute mode to allow them.
    mode=$(nvidia-smi -i 0 --query-gpu=compute_mode --format=csv,noheader 2>/dev/null)
    case $mode in
      *Exclusive* | *Prohibited*)
        echo "the one-GPU mode needs several processes on GPU 0, but its compute mode is '$mode' (nvidia-smi -c DEFAULT allows them; not changed here)" >&2
        exit 2 ;;
    esac
  fi
elif [ -n "${NGPUS:-}" ]; then
  N=$NGPUS
elif [ "$BACKEND" = nccl ]; then
  N=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU ')
else
  N=2
fi
if ! [[ $N =~ ^[0-9]+$ ]] || [ "$N" -lt 2 ]; then
  echo "multi-gpu.sh needs 2 or more GPUs (found '$N'; set NGPUS, ONE_GPU_RANKS=2 to put 2 ranks on one GPU, or BACKEND=host for a dry run)" >&2
  exit 2
fi
for c in all_reduce $COLLS; do
  [ -x "$BIN/${c}_perf" ] || { echo "missing executable: $BIN/${c}_perf" >&2; exit 2; }
done
# One-GPU mode: the same NCCL settings for every rank of both tools (mpirun
# passes them with -x); NCCL_HOSTID differs per rank, so the rank-env wrapper
# (written below, WRAP) sets it from the rank the launcher gave.
ONE_GPU_ENV=()
if [ -n "$ONE_GPU" ]; then
  export NCCL_TESTS_DEVICE=0 NCCL_SOCKET_IFNAME=lo NCCL_IB_DISABLE=1
  ONE_GPU_ENV=(-x NCCL_TESTS_DEVICE -x NCCL_SOCKET_IFNAME -x NCCL_IB_DISABLE)
fi
MPIRUN=()
if command -v mpirun >/dev/null; then
  MPIRUN=(mpirun "${MPIRUN_OPTS[@]}" -np "$N" -x NCCL_NVLS_ENABLE "${ONE_GPU_ENV[@]}")
fi

mkdir -p "$OUT"
LOG=$OUT/multi-gpu.log
RAW=$OUT/raw.txt
SUMMARY=$OUT/summary.md
: >"$LOG"
: >"$RAW"
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
exec > >(tee -a "$LOG") 2>&1
START_S=$(date +%s)

# WRAP: words put between the launcher and every binary: in the one-GPU
# mode a wrapper giving each rank its own NCCL_HOSTID (the rank from mpirun
# or the TCP launch's RANK), so that NCCL takes the ranks sharing GPU 0 for
# ranks of different hosts; else nothing.
WRAP=()
if [ -n "$ONE_GPU" ]; then
  WRAP=("$WORK/rank-env.sh")
  cat >"${WRAP[0]}" <<'EOF'
#!/bin/sh
# multi-gpu.sh one-GPU mode: this rank's own NCCL host id.
NCCL_HOSTID=multi-gpu-rank-${OMPI_COMM_WORLD_RANK:-${RANK:?rank-env.sh: neither OMPI_COMM_WORLD_RANK nor RANK is set}}
export NCCL_HOSTID
exec "$@"
EOF
  chmod +x "${WRAP[0]}"
fi

# Every process a run starts carries this tag in its environment, so that
# ranks left running after their launcher ended (mpirun, sent SIGTERM by
# `timeout`, does not always take its ranks with it) are found and killed.
RUN_TAG=multi-gpu-$$-$RANDOM
n=0
LAST_SKIPPED=0
failed=()
results=()
busbw=()
compare_lines=()
compare_outside=0
OURS_HEADER=
THEIRS_HEADER=
: >"$WORK/compare.md"

# record NAME STATUS SECONDS VERDICT: one line of the verdict table.
record() {
  results+=("| $n | $1 | $2 | $3 | $4 |")
  case $4 in ok* | SKIP* | OUTSIDE*) ;; *) failed+=("[$n] $1") ;; esac
}

skip() { # skip NAME REASON
  n=$((n + 1))
  echo
  echo "== [$n] $1: SKIP ($2)"
  record "$1" - - "SKIP: $2"
  LAST_SKIPPED=1
}

# over_budget NAME: once BUDGET seconds have passed since the start, records
# NAME as skipped and returns 0 (the caller then does not start it), so that
# the summary comes before an outer time limit ends the whole run.
budget_skips=0
over_budget() {
  [ "$BUDGET" -gt 0 ] && [ $(($(date +%s) - START_S)) -ge "$BUDGET" ] || return 1
  skip "$1" "over the time budget of $BUDGET s"
  budget_skips=$((budget_skips + 1))
}

# add_busbw LABEL: the last check's output as a column of the busbw tables
# (when that check ran).
add_busbw() {
  [ "$LAST_SKIPPED" -eq 0 ] && [ -s "$WORK/$n.txt" ] && busbw+=("$1=$WORK/$n.txt")
  return 0
}

# no_mpirun NAME: a run that needs mpirun where there is none: skipped in a
# dry run, a failure on a GPU machine (its mpirun results are required).
no_mpirun() {
  if [ "$BACKEND" = nccl ]; then
    n=$((n + 1))
    echo
    echo "== [$n] $1: FAIL (no mpirun on this GPU machine)"
    record "$1" - - "FAIL (no mpirun)"
  else
    skip "$1" "no mpirun"
  fi
}

secs() { # secs START_NS: seconds since START_NS, 1 decimal
  local ms=$((($(date +%s%N) - $1) / 1000000))
  printf '%d.%d' $((ms / 1000)) $((ms % 1000 / 100))
}

# show FILE: a long output shortened for the log (raw.txt has all of it).
show() {
  local lines
  lines=$(wc -l <"$1")
  if [ "$lines" -gt 60 ]; then
    head -30 "$1"; echo "   [... $((lines - 50)) lines ...]"; tail -20 "$1"
  else
    cat "$1"
  fi
}

# check NAME WANT LIMIT 'VALIDATOR ARGS' COMMAND...: runs COMMAND under
# `timeout LIMIT` (SIGKILL 10 s later if it ignores SIGTERM); WANT is an exit
# status or !0 (non-zero, and not ended by the limit);
# VALIDATOR ARGS (may be empty) go to `nccltests_report.py check OUTPUT`.
# The output is $WORK/$n.txt.
check() {
  local name=$1 want=$2 limit=$3 validate=$4
  shift 4
  over_budget "$name" && return
  LAST_SKIPPED=0
  n=$((n + 1))
  local out=$WORK/$n.txt start rc t verdict=ok
  echo
  echo "== [$n] $name: $*"
  start=$(date +%s%N)
  timeout -k 10 "$limit" env "ERDMA_MULTI_GPU_RUN=$RUN_TAG" "$@" >"$out" 2>&1
  rc=$?
  t=$(secs "$start")
  reap_leftovers
  local ended_by_limit=0
  # 124: timeout's TERM; 137 is also a rank's own SIGKILL (mpirun passes it on).
  if [ "$rc" -eq 124 ] || { [ "$rc" -eq 137 ] && [ $((($(date +%s%N) - start) / 1000000000)) -ge "$limit" ]; }; then
    ended_by_limit=1
  fi
  show "$out"
  { echo "===== [$n] $name: $*"; cat "$out"; echo "===== [$n] exit $rc, $t s"; } >>"$RAW"
  # The first version line of each tool (NCCL headers and library it found).
  if [ -n "$NT" ] && [ -z "$THEIRS_HEADER" ] && [[ "$*" == *"$NT/"* ]]; then
    THEIRS_HEADER=$(grep -m1 '^# nccl-tests version' "$out")
  fi
  if [ -z "$OURS_HEADER" ] && [[ "$*" == *"$BIN/"* ]]; then
    OURS_HEADER=$(grep -m1 '^# nccl-tests version' "$out")
  fi
  if [ "$ended_by_limit" -eq 1 ]; then
    verdict="FAIL (still running after $limit s)"
  elif [ "$want" = '!0' ]; then
    [ "$rc" -ne 0 ] || verdict="FAIL (exit 0, want non-zero)"
  elif [ "$rc" -ne "$want" ]; then
    verdict="FAIL (exit $rc, want $want)"
  fi
  if [ -n "$validate" ] && [ "$verdict" = ok ]; then
    # shellcheck disable=SC2086 # validator arguments are word lists
    "${REPORT[@]}" check "$out" $validate || verdict="FAIL (report)"
  fi
  [ "$LEFT" -gt 0 ] && verdict="$verdict (then killed $LEFT processes left running)"
  echo "== [$n] $name: exit $rc (want $want), $t s: $verdict"
  record "$name" "$rc" "$t" "$verdict"
}

# grep_check NAME REGEX [FILE]: the last check's output (or FILE) matches
# the extended REGEX; a failure turns that check's verdict into FAIL.
grep_check() {
  local f=${3:-$WORK/$n.txt}
  [ "$LAST_SKIPPED" -eq 1 ] && return 0
  if grep -Eq -- "$2" "$f"; then
    echo "== [$n] $1: found /$2/"
  else
    echo "== [$n] $1: FAIL, /$2/ not found"
    failed+=("[$n] $1")
    results[-1]="${results[-1]% |} + FAIL: $1 |"
  fi
}

have_mpirun() { [ ${#MPIRUN[@]} -gt 0 ]; }

# reap_leftovers: SIGKILLs the processes of this script's finished runs that
# are still running (found by RUN_TAG); sets LEFT to their number.
reap_leftovers() {
  local f p pids=()
  LEFT=0
  while read -r f; do
    p=${f#/proc/}
    pids+=("${p%/environ}")
  done < <(grep -lzx "ERDMA_MULTI_GPU_RUN=$RUN_TAG" /proc/[0-9]*/environ 2>/dev/null)
  [ ${#pids[@]} -eq 0 ] && return 0
  LEFT=${#pids[@]}
  echo "== [$n] killing $LEFT processes left running by the run: ${pids[*]}"
  kill -9 "${pids[@]}" 2>/dev/null
  return 0
}

# 'rank 1' as a word: mpirun's "process rank 1", our "rank 1 (", "rank 1 ".
NAMES_RANK1='rank 1([^0-9]|$)'
ROW='^ +[0-9]+ +[0-9]+ '

echo "== machine"
date -u '+%Y-%m-%d %H:%M:%S UTC'
uname -srm
echo "CPUs: $(nproc)"
nvidia-smi --query-gpu=index,name,driver_version,memory.total,pci.bus_id --format=csv,noheader 2>&1 | head -16
nvidia-smi topo -m 2>&1 | head -20
NCCL_LIB=/usr/lib/x86_64-linux-gnu/libnccl.so.2
if [ -e "$NCCL_LIB" ]; then NCCL_LIB=$(readlink -f "$NCCL_LIB"); else NCCL_LIB="$NCCL_LIB not found"; fi
echo "NCCL: $NCCL_LIB"
if have_mpirun; then mpirun --version 2>&1 | head -1; else echo "mpirun: not found"; fi
echo "backend: $BACKEND; ranks: $N; NCCL_NVLS_ENABLE=$NCCL_NVLS_ENABLE; parts: $PARTS"
echo "ours: $BIN; nccl-tests: ${NT:-none}"
echo "sweep: $SWEEP; checked to $CHECK_MAX; spot: $SPOT; per-run limit $RUN_TIMEOUT s; budget: $([ "$BUDGET" -gt 0 ] && echo "$BUDGET s" || echo none)"
# The order the parts run in: in the one-GPU mode the comparison (the part
# the budget may cut short) comes last.
ORDER="modes colls compare failures"
if [ -n "$ONE_GPU" ]; then
  ORDER="modes colls failures compare"
  echo "one-GPU mode: $N ranks on GPU 0, each its own NCCL_HOSTID (rank-env wrapper); NCCL_TESTS_DEVICE=$NCCL_TESTS_DEVICE NCCL_SOCKET_IFNAME=$NCCL_SOCKET_IFNAME NCCL_IB_DISABLE=$NCCL_IB_DISABLE; the ranks talk over NCCL's socket transport on loopback; -g/-t $N skipped; parts in the order $ORDER"
fi

want_part() { [[ " $PARTS " == *" $1 "* ]]; }

short() { # short COLL: a column label
  case $1 in
    all_reduce) echo AR ;; all_gather) echo AG ;; reduce_scatter) echo RS ;;
    broadcast) echo BC ;; reduce) echo RD ;; alltoall) echo A2A ;; gather) echo GA ;;
    scatter) echo SC ;; sendrecv) echo SR ;; hypercube) echo HC ;; *) echo "$1" ;;
  esac
}

# in_process_why: why one process cannot run several ranks here ("" when it
# can: -g N and -t N).
in_process_why() {
  if [ -n "$ONE_GPU" ]; then
    echo "one-GPU mode: one process cannot hold two ranks on one GPU (NCCL refuses a duplicate GPU)"
  elif [ "$BACKEND" = mpi ]; then
    echo "the mpi backend runs one rank per process"
  fi
}
in_process_ok() { [ -z "$(in_process_why)" ]; }

part_modes() {
  local ar=$BIN/all_reduce_perf mode
  for mode in g t mpirun; do
    local launch=() args=() label
    case $mode in
      g) args=(-g "$N") label="AR -g" ;;
      t) args=(-t "$N") label="AR -t" ;;
      mpirun) launch=("${MPIRUN[@]}") label="AR mpirun" ;;
    esac
    if [ "$mode" != mpirun ] && ! in_process_ok; then
      skip "all_reduce -$mode $N" "$(in_process_why)"
      continue
    fi
    if [ "$mode" = mpirun ] && ! have_mpirun; then
      no_mpirun "all_reduce mpirun -np $N"
      continue
    fi
    local what="all_reduce -$mode $N"
    [ "$mode" = mpirun ] && what="all_reduce mpirun -np $N"
    [ "$mode" = mpirun ] && launch+=("${WRAP[@]}")
    # shellcheck disable=SC2086 # SWEEP is a word list
    check "$what, busbw sweep" 0 "$RUN_TIMEOUT" "--wrong na" \
      "${launch[@]}" "$ar" "${BARGS[@]}" "${args[@]}" $SWEEP -c 0
    add_busbw "$label"
    check "$what, checked to $CHECK_MAX" 0 "$RUN_TIMEOUT" "--wrong zero" \
      "${launch[@]}" "$ar" "${BARGS[@]}" "${args[@]}" -b 8 -e "$CHECK_MAX" -f 2 -c 1
  done
  [ -n "$ONE_GPU" ] && [ "$BACKEND" = nccl ] && have_mpirun && socket_transport_check
  return 0
}

# One-GPU mode: NCCL's own log must show the ranks connected through its
# socket transport (not P2P or SHM, which a shared GPU would never reach).
socket_transport_check() {
  check "all_reduce mpirun -np $N, NCCL_DEBUG=INFO, checked" 0 "$RUN_TIMEOUT" "" \
    "${MPIRUN[@]}" -x NCCL_DEBUG=INFO -x NCCL_DEBUG_SUBSYS=INIT,NET "${WRAP[@]}" \
    "$BIN/all_reduce_perf" -b 8 -e 1M -f 32 -n 5 -w 1 -c 1
  grep_check "NCCL connects the ranks over its socket transport" 'via NET/Socket'
}

part_colls() {
  local c b roots=() every=
  if [ -n "$ONE_GPU" ]; then
    # No -g N here: the checked sweep under mpirun covers every root instead.
    roots=(-r -1) every="every root, "
    echo "== one-GPU mode: no -g $N runs ($(in_process_why)); the checked sweeps under mpirun run every root (-r -1)"
  fi
  for c in $COLLS; do
    b=$BIN/${c}_perf
    if have_mpirun; then
      # shellcheck disable=SC2086 # SWEEP is a word list
      check "$c mpirun -np $N, busbw sweep" 0 "$RUN_TIMEOUT" "--wrong na" \
        "${MPIRUN[@]}" "${WRAP[@]}" "$b" "${BARGS[@]}" $SWEEP -c 0
      add_busbw "$(short "$c")"
      check "$c mpirun -np $N, ${every}checked to $CHECK_MAX" 0 "$RUN_TIMEOUT" \
        "--wrong zero-or-na-in-place" "${MPIRUN[@]}" "${WRAP[@]}" "$b" "${BARGS[@]}" \
        -b 8 -e "$CHECK_MAX" -f 2 "${roots[@]}" -c 1
    else
      no_mpirun "$c mpirun -np $N"
    fi
    [ -n "$ONE_GPU" ] && continue
    if in_process_ok; then
      # shellcheck disable=SC2086 # SPOT is a word list
      check "$c -g $N, every root, checked" 0 "$RUN_TIMEOUT" "--wrong zero-or-na-in-place" \
        "$b" "${BARGS[@]}" -g "$N" $SPOT -r -1 -c 1
    else
      skip "$c -g $N" "$(in_process_why)"
    fi
  done
}

# launch_words MODE: sets LW (launcher words) and AW (extra arguments) for a
# comparison launch mode; returns 1 when the mode cannot run here.
launch_words() {
  LW=() AW=()
  case $1 in
    mpirun) have_mpirun || return 1; LW=("${MPIRUN[@]}" "${WRAP[@]}") ;;
    g) in_process_ok || return 1; AW=(-g "$N") ;;
    t) in_process_ok || return 1; AW=(-t "$N") ;;
    *) return 1 ;;
  esac
}

# compare_line MD: "worst deviation X%; K outside" from a comparison table.
compare_line() {
  local line outside commas
  line=$(grep -m1 '^worst deviation' "$1" 2>/dev/null) || { echo "no table"; return; }
  outside=${line#*outside the bound: }
  if [ "$outside" = none ]; then
    echo "${line%%;*}; every size within the bound"
  else
    commas=${outside//[^,]/}
    echo "${line%%;*}; $((${#commas} + 1)) size/placement pairs outside the bound"
  fi
}

part_compare() {
  if [ -z "$NT" ]; then
    skip "side by side with nccl-tests" "no NCCL_TESTS_BUILD_DIR given"
    return
  fi
  local c m rc t start md tag first
  for c in ${COMPARE_COLLS:-all_reduce $ALL_COLLS}; do
    if ! [ -x "$NT/${c}_perf" ]; then
      skip "$c side by side" "nccl-tests build has no ${c}_perf"
      continue
    fi
    first=1
    for m in $COMPARE_MODES; do
      if ! launch_words "$m"; then
        if [ "$m" = mpirun ] && ! have_mpirun; then
          no_mpirun "$c side by side ($m)"
        else
          skip "$c side by side ($m)" "launch mode $m not available here"
        fi
        continue
      fi
      over_budget "$c side by side ($m)" && continue
      LAST_SKIPPED=0
      n=$((n + 1))
      tag=-$c-$m
      echo
      echo "== [$n] $c side by side ($m): COLL=$c LAUNCH='${LW[*]}' REPS=$REPS COMPARE_ARGS='$COMPARE_ARGS ${BARGS[*]} ${AW[*]}'"
      start=$(date +%s%N)
      # Under a budget the whole step (REPS runs of each tool) gets one
      # run's limit, so that hanging runs cannot carry it far past BUDGET.
      local step=()
      [ "$BUDGET" -gt 0 ] && step=(timeout -k 10 "$RUN_TIMEOUT")
      COLL=$c LAUNCH="${LW[*]}" REPS=$REPS BOUND=$BOUND RUN_TIMEOUT=$RUN_TIMEOUT \
        COMPARE_ARGS="$COMPARE_ARGS ${BARGS[*]} ${AW[*]}" OUT=$WORK/cmp TAG=$tag \
        ERDMA_MULTI_GPU_RUN=$RUN_TAG "${step[@]}" bash "$HERE/compare-nccl-tests.sh" "$NT" "$BIN"
      rc=$?
      reap_leftovers
      t=$(secs "$start")
      md=$WORK/cmp/compare$tag.md
      { echo; echo "### $c, launch $m (exit $rc)"; echo; cat "$md" 2>/dev/null; } >>"$WORK/compare.md"
      cat "$WORK/cmp/compare-raw$tag.txt" >>"$RAW" 2>/dev/null
      compare_lines+=("$c ($m): $(compare_line "$md")")
      case $rc in
        0) record "$c side by side ($m)" "$rc" "$t" ok ;;
        1) record "$c side by side ($m)" "$rc" "$t" "OUTSIDE $BOUND (timing; see the table)"
           compare_outside=1 ;;
        124 | 137) record "$c side by side ($m)" "$rc" "$t" "FAIL (still running after $RUN_TIMEOUT s)" ;;
        *) record "$c side by side ($m)" "$rc" "$t" "FAIL (a run failed)" ;;
      esac
      echo "== [$n] $c side by side ($m): exit $rc, $t s"
      # Both tools' text and -J JSON through the same parser, once per collective.
      if [ "$first" -eq 1 ]; then
        first=0
        local tool dir
        for tool in nccl-tests ours; do
          [ "$tool" = ours ] && dir=$BIN || dir=$NT
          # shellcheck disable=SC2086 # JSON_ARGS is a word list
          check "$c $tool text and -J JSON parse ($m)" 0 "$RUN_TIMEOUT" \
            "--wrong zero-or-na-in-place --json $WORK/$tool-$c.json" \
            "${LW[@]}" "$dir/${c}_perf" "${BARGS[@]}" "${AW[@]}" $JSON_ARGS -J "$WORK/$tool-$c.json"
          { echo "===== $tool-$c.json"; cat "$WORK/$tool-$c.json" 2>/dev/null; echo; } >>"$RAW"
        done
      fi
    done
  done
}

# wait_row FILE JOBPID: until FILE has a data row (0) or the job ended (1).
wait_row() {
  local i
  for ((i = 0; i < RUN_TIMEOUT * 10; i++)); do
    grep -Eq "$ROW" "$1" 2>/dev/null && return 0
    kill -0 "$2" 2>/dev/null || return 1
    sleep 0.1
  done
  return 1
}

# bg OUTFILE PIDFILE COMMAND...: starts COMMAND in the background with its
# pid in PIDFILE, output in OUTFILE, and "STATUS END_NS" in OUTFILE.rc once it
# ended (written whole, so a reader never sees half of it). Sets BG to the
# waiting subshell (whose stderr, where bash reports a killed job, is dropped).
bg() {
  local out=$1 pidf=$2
  shift 2
  # shellcheck disable=SC2016 # $$ is the new shell; exec keeps its pid
  (ERDMA_MULTI_GPU_RUN=$RUN_TAG sh -c 'echo $$ >"$0"; exec "$@"' "$pidf" "$@" >"$out" 2>&1
  echo "$? $(date +%s%N)" >"$out.rc.tmp" && mv "$out.rc.tmp" "$out.rc") 2>/dev/null &
  BG=$!
}

# await DEADLINE_NS OUTFILE:PIDFILE...: waits until every OUTFILE.rc exists.
# Past the deadline the processes still running get SIGTERM, 10 s later
# SIGKILL; returns 1 when any was still running at the deadline.
await() {
  local deadline=$1 pair missing late=0 killed=0
  shift
  while :; do
    missing=()
    for pair in "$@"; do
      [ -e "${pair%%:*}.rc" ] || missing+=("${pair#*:}")
    done
    [ ${#missing[@]} -eq 0 ] && return "$late"
    local now
    now=$(date +%s%N)
    if [ "$now" -gt "$deadline" ] && [ "$late" -eq 0 ]; then
      late=1
      for pair in "${missing[@]}"; do kill -TERM "$(cat "$pair" 2>/dev/null)" 2>/dev/null; done
    elif [ "$now" -gt $((deadline + 10000000000)) ] && [ "$killed" -eq 0 ]; then
      killed=1
      for pair in "${missing[@]}"; do kill -KILL "$(cat "$pair" 2>/dev/null)" 2>/dev/null; done
    elif [ "$now" -gt $((deadline + 20000000000)) ]; then
      echo "== giving up on ${missing[*]}"
      return 1
    fi
    sleep 0.1
  done
}

# kill_rank1_at_first_row ROW_FILE JOB PIDFILE: once ROW_FILE has a data
# row, SIGKILLs the pid in PIDFILE and sets KILLED to the time (ns); KILLED
# stays 0 when the job ended first.
kill_rank1_at_first_row() {
  KILLED=0
  if wait_row "$1" "$2" && [ -s "$3" ]; then
    kill -"${4:-KILL}" "$(cat "$3")"
    KILLED=$(date +%s%N)
    echo "== [$n] sent SIG${4:-KILL} to rank 1 (pid $(cat "$3")) after its first row"
  fi
}

# A rank stopped with SIGSTOP does not answer the others' timeout census:
# every other rank exits 4 with this line.
STOPPED_RANK1='Test timeout \([0-9]+s\) rank 1 \(pid [0-9]+ on [^)]*\) did not respond'

# Under mpirun, rank 1 killed with SIGKILL (SIG=KILL, the default) or
# stopped with SIGSTOP (SIG=STOP) from outside after rank 0's first row:
# mpirun (or the -T watchdog) must end the others in time; a stopped rank
# must be named by the timeout (exit 4).
mpirun_outside_kill() {
  local sig=${1:-KILL}
  local how="kill -9"
  [ "$sig" = STOP ] && how=SIGSTOP
  local name="mpirun -np $N, $how of rank 1 mid-run, -T $FAIL_T"
  over_budget "$name" && return
  LAST_SKIPPED=0
  n=$((n + 1))
  local out=$WORK/$n.txt pidf=$WORK/pid-$n start rc end t verdict late=0
  echo
  echo "== [$n] $name"
  start=$(date +%s%N)
  # shellcheck disable=SC2086,SC2016 # FAIL_ARGS is a word list; $$ is the rank's shell
  bg "$out" "$pidf.mpirun" "${MPIRUN[@]}" "${WRAP[@]}" \
    sh -c 'echo $$ >"$0.$OMPI_COMM_WORLD_RANK"; exec "$@"' "$pidf" \
    "$BIN/all_reduce_perf" "${BARGS[@]}" $FAIL_ARGS -T "$FAIL_T"
  kill_rank1_at_first_row "$out" "$BG" "$pidf.1" "$sig"
  if [ "$KILLED" -gt 0 ]; then
    await $((KILLED + (FAIL_T + MARGIN) * 1000000000)) "$out:$pidf.mpirun" || late=1
  else
    await $((start + RUN_TIMEOUT * 1000000000)) "$out:$pidf.mpirun"
  fi
  wait "$BG"
  reap_leftovers
  read -r rc end <"$out.rc"
  if [ "$KILLED" -eq 0 ]; then
    t=$(secs "$start")
    verdict="FAIL (ended before rank 1 could be killed mid-run)"
  else
    t=$(((end - KILLED) / 100000000))
    t="$((t / 10)).$((t % 10))"
    if [ "$late" -eq 1 ]; then
      verdict="FAIL (still running $((FAIL_T + MARGIN)) s after the kill)"
    elif [ "$rc" -eq 0 ]; then
      verdict="FAIL (exit 0)"
    elif ! grep -Eq "$NAMES_RANK1" "$out"; then
      verdict="FAIL (rank 1 not named)"
    elif [ "$sig" = STOP ] && [ "$rc" -ne 4 ]; then
      verdict="FAIL (exit $rc, not 4)"
    elif [ "$sig" = STOP ] && ! grep -Eq "$STOPPED_RANK1" "$out"; then
      verdict="FAIL (the timeout does not name the stopped rank 1)"
    else
      verdict="ok (ended $t s after the $how, rank 1 named)"
    fi
  fi
  show "$out"
  { echo "===== [$n] $name"; cat "$out"; echo "===== [$n] exit $rc"; } >>"$RAW"
  echo "== [$n] $name: exit $rc: $verdict"
  record "$name" "$rc" "$t" "$verdict"
}

# tcp_run NAME KILL ARGS...: N processes over the TCP launch (RANK,
# WORLD_SIZE, LOCAL_RANK, MASTER_ADDR/PORT). KILL=0: all must exit 0 and
# rank 0's report must check; KILL=1: rank 1 gets SIGKILL after rank 0's
# first row, and every other rank must exit non-zero within -T + MARGIN,
# naming rank 1; KILL=2: rank 1 gets SIGSTOP instead, and every other rank
# must exit 4 within -T + MARGIN, its timeout naming the stopped rank 1.
tcp_run() {
  local name=$1 kill=$2
  shift 2
  over_budget "$name" && return
  LAST_SKIPPED=0
  n=$((n + 1))
  local port=$((29500 + RANDOM % 2000)) r start verdict=ok late=0 jobs=() pairs=() base=$WORK/tcp-$n
  echo
  echo "== [$n] $name: RANK=0..$((N - 1)) WORLD_SIZE=$N MASTER_ADDR=127.0.0.1 MASTER_PORT=$port $*"
  start=$(date +%s%N)
  for ((r = 0; r < N; r++)); do
    RANK=$r WORLD_SIZE=$N LOCAL_RANK=$r MASTER_ADDR=127.0.0.1 MASTER_PORT=$port \
      bg "$base.$r.txt" "$base.pid.$r" "$@"
    jobs+=("$BG")
    pairs+=("$base.$r.txt:$base.pid.$r")
  done
  KILLED=0
  if [ "$kill" -ge 1 ]; then
    kill_rank1_at_first_row "$base.0.txt" "${jobs[0]}" "$base.pid.1" "$([ "$kill" -eq 2 ] && echo STOP || echo KILL)"
    [ "$KILLED" -gt 0 ] || verdict="FAIL (ended before rank 1 could be killed mid-run)"
  fi
  local others=("${pairs[@]}")
  # A stopped rank 1 never ends by itself: wait for the others only.
  [ "$kill" -eq 2 ] && others=("${pairs[0]}" "${pairs[@]:2}")
  if [ "$KILLED" -gt 0 ]; then
    await $((KILLED + (FAIL_T + MARGIN) * 1000000000)) "${others[@]}" || late=1
  else
    await $((start + RUN_TIMEOUT * 1000000000)) "${pairs[@]}" || late=1
  fi
  [ "$kill" -eq 2 ] && kill -KILL "$(cat "$base.pid.1")" 2>/dev/null
  wait "${jobs[@]}"
  reap_leftovers
  local codes=() rc end last=0
  for ((r = 0; r < N; r++)); do
    read -r rc end <"$base.$r.txt.rc"
    codes+=("$rc")
    [ "$r" -ne 1 ] && [ "$end" -gt "$last" ] && last=$end
    echo "-- rank $r: exit $rc"
    show "$base.$r.txt"
    { echo "===== [$n] $name, rank $r: exit $rc"; cat "$base.$r.txt"; } >>"$RAW"
    [ "$verdict" = ok ] || continue
    if [ "$late" -eq 1 ]; then
      verdict="FAIL (still running after $([ "$KILLED" -gt 0 ] && echo "$((FAIL_T + MARGIN)) s from the kill" || echo "$RUN_TIMEOUT s"))"
    elif [ "$kill" -eq 0 ]; then
      [ "$rc" -eq 0 ] || verdict="FAIL (rank $r exit $rc)"
    elif [ "$r" -ne 1 ]; then
      if [ "$rc" -eq 0 ]; then
        verdict="FAIL (rank $r exit 0)"
      elif ! grep -Eq "$NAMES_RANK1" "$base.$r.txt"; then
        verdict="FAIL (rank $r does not name rank 1)"
      elif [ "$kill" -eq 2 ] && { [ "$rc" -ne 4 ] || ! grep -Eq "$STOPPED_RANK1" "$base.$r.txt"; }; then
        verdict="FAIL (rank $r: exit $rc, or its timeout does not name the stopped rank 1)"
      fi
    fi
  done
  if [ "$kill" -eq 0 ] && [ "$verdict" = ok ]; then
    "${REPORT[@]}" check "$base.0.txt" || verdict="FAIL (report)"
  fi
  local t
  if [ "$KILLED" -gt 0 ]; then
    t=$(((last - KILLED) / 100000000))
    t="$((t / 10)).$((t % 10))"
    [ "$verdict" = ok ] && verdict="ok (the others ended within $t s of the signal, naming rank 1)"
  else
    t=$(secs "$start")
  fi
  echo "== [$n] $name: exits ${codes[*]}, $t s: $verdict"
  record "$name" "${codes[*]}" "$t" "$verdict"
}

part_failures() {
  local ar=$BIN/all_reduce_perf limit=$((FAIL_T + MARGIN))
  if [ "$BACKEND" != mpi ]; then
    # shellcheck disable=SC2086 # SPOT is a word list
    tcp_run "TCP launch, $N processes, checked" 0 "${WRAP[@]}" "$ar" "${BARGS[@]}" $SPOT -c 1
    # shellcheck disable=SC2086 # FAIL_ARGS is a word list
    tcp_run "TCP launch, kill -9 of rank 1 mid-run, -T $FAIL_T" 1 \
      "${WRAP[@]}" "$ar" "${BARGS[@]}" $FAIL_ARGS -T "$FAIL_T"
    # shellcheck disable=SC2086 # FAIL_ARGS is a word list
    tcp_run "TCP launch, SIGSTOP of rank 1 mid-run, -T $FAIL_T" 2 \
      "${WRAP[@]}" "$ar" "${BARGS[@]}" $FAIL_ARGS -T "$FAIL_T"
  else
    skip "TCP launch" "the mpi backend needs mpirun"
  fi
  if ! have_mpirun; then
    no_mpirun "mpirun failure paths"
    return
  fi
  # shellcheck disable=SC2086 # FAIL_ARGS is a word list
  check "mpirun -np $N, rank 1 killed (kill:1 hook), -T $FAIL_T" '!0' "$limit" "" \
    "${MPIRUN[@]}" -x ERDMA_BENCH_HOOK=kill:1 "${WRAP[@]}" "$ar" "${BARGS[@]}" $FAIL_ARGS -T "$FAIL_T"
  grep_check "names rank 1" "$NAMES_RANK1"
  mpirun_outside_kill
  mpirun_outside_kill STOP
  check "mpirun -np $N, rank 1 stalls (stall:1 hook), -T $FAIL_T" 4 "$limit" "" \
    "${MPIRUN[@]}" -x ERDMA_BENCH_HOOK=stall:1 "${WRAP[@]}" "$ar" "${BARGS[@]}" -b 1M -e 1M -c 0 -T "$FAIL_T"
  grep_check "timeout names rank 1" "Test timeout \\(${FAIL_T}s\\) rank 1 "
}

for part in $ORDER; do
  want_part "$part" || continue
  echo
  echo "=== part $part ($(date -u +%T))"
  "part_$part"
done

# The summary: written to summary.md and printed last.
{
  echo "# multi-gpu.sh: $(date -u '+%Y-%m-%d %H:%M UTC'), backend $BACKEND, $N ranks${ONE_GPU:+ on one GPU}"
  echo
  if [ -n "$ONE_GPU" ]; then
    echo "One-GPU mode: $N processes on GPU 0, each its own NCCL_HOSTID, NCCL's socket transport over lo (NCCL_SOCKET_IFNAME=lo NCCL_IB_DISABLE=1): real multi-rank NCCL, not NVLink/P2P/SHM; busbw and times are those of loopback sockets and one time-shared GPU, so the comparison's bound is informative only."
    echo
  fi
  echo "GPUs: $(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | sort | uniq -c | xargs || true)"
  echo "NCCL: $NCCL_LIB; NCCL_NVLS_ENABLE=$NCCL_NVLS_ENABLE; parts: $(for p in $ORDER; do want_part "$p" && echo "$p"; done | xargs)"
  echo "ours: ${OURS_HEADER:-no report}${NT:+; nccl-tests: ${THEIRS_HEADER:-no report}}"
  echo
  echo "| # | check | exit | s | verdict |"
  echo "|---:|---|---|---:|---|"
  printf '%s\n' "${results[@]}"
  echo
  echo "(s: wall seconds of the run; for the kill -9 checks, from the kill to the end of the last rank; whole run $(($(date +%s) - START_S)) s)"
  echo
  if [ ${#busbw[@]} -gt 0 ]; then
    "${REPORT[@]}" busbw "${busbw[@]}"
    echo
  fi
  if [ ${#compare_lines[@]} -gt 0 ]; then
    echo "side by side with nccl-tests ($REPS alternating runs each, bound $BOUND; tables in summary.md):"
    printf -- '- %s\n' "${compare_lines[@]}"
    echo
  fi
} >"$WORK/summary-short.md"
{
  cat "$WORK/summary-short.md"
  if [ ${#busbw[@]} -gt 0 ]; then
    "${REPORT[@]}" busbw --placement ip "${busbw[@]}"
    echo
  fi
  if [ -s "$WORK/compare.md" ]; then
    echo "## Side by side with nccl-tests"
    cat "$WORK/compare.md"
  fi
} >"$SUMMARY"
echo
echo "=== summary (also $SUMMARY; full log $LOG, every output $RAW)"
cat "$WORK/summary-short.md"
if [ "$budget_skips" -gt 0 ]; then
  echo "== $budget_skips checks not started: over the time budget of $BUDGET s (run them in another call with PARTS/COLLS/COMPARE_COLLS, or raise BUDGET)"
fi
if [ ${#failed[@]} -gt 0 ]; then
  echo "== FAILED ${#failed[@]}: ${failed[*]}"
  exit 1
fi
if [ "$compare_outside" -eq 1 ]; then
  echo "== every check passed; a timing comparison is outside the $BOUND bound"
  exit 3
fi
echo "== all $n checks passed (skipped ones are listed as SKIP)"
