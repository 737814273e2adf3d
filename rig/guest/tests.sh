#!/usr/bin/env bash
# Runs inside the VM (rig/test.sh -> rig/vm.sh): every rig test in one boot,
# each step with a time limit, its log in $ERDMA_RIG_LOGS, and a summary.
# Env (from rig/test.sh): ERDMA_RIG_TEST_BINS (test binaries),
# ERDMA_RIG_DEVINFO (devinfo binary), ERDMA_RIG_EXAMPLES (examples dir),
# ERDMA_RIG_BENCH (erdma-bench's binaries dir), ERDMA_RIG_LOGS (log dir,
# shared with the host); plus rig/vm.sh's ERDMA_RIG_*.
# More steps: each rig/guest/tests.d/*.sh is sourced (in name order) after the
# steps below; it may use `step`, $E (examples), $BENCH (erdma-bench binaries),
# $DEVINFO, $LOGS and the ERDMA_RIG_* variables. Functions a step runs must be
# exported (`export -f`), since each step runs in `bash -c`.
# Exit status: the number of failed steps (0 = all passed).
set -u
LOGS=${ERDMA_RIG_LOGS:?}
mkdir -p "$LOGS"
pass=0 fail=0 failed=()
up() { read -r t _ </proc/uptime; echo "$t"; }

# The machine's speed, measured once at boot: 20 process starts (what the
# steps spend most of their time on under emulation) against REF seconds, the
# same on an idle 2-core CI machine. Every step's time budget is multiplied
# by SCALE (at least 1), so a slow or busy machine gives a slow pass, not a
# failure: no step depends on timing to pass. ERDMA_RIG_SCALE overrides.
calibrate() {
  local t0 t1 i
  t0=$(up)
  for ((i = 0; i < 20; i++)); do /bin/true; done
  t1=$(up)
  awk -v a="$t0" -v b="$t1" 'BEGIN{printf "%.2f", b-a}'
}
CAL_REF=1.5
CAL=$(calibrate)
SCALE=${ERDMA_RIG_SCALE:-$(awk -v c="$CAL" -v r="$CAL_REF" 'BEGIN{s=c/r; if (s<1) s=1; if (s>20) s=20; printf "%.1f", s}')}
echo "speed: 20 process starts in ${CAL}s (idle CI machine: ${CAL_REF}s): time budgets x$SCALE"
# scaled N: N seconds times SCALE (an integer), for waits inside steps.
scaled() { awk -v b="$1" -v s="$SCALE" 'BEGIN{printf "%d", b*s}'; }
export SCALE ERDMA_RIG_SCALE=$SCALE
export -f scaled

# step NAME BUDGET CMD...: runs CMD with BUDGET x SCALE seconds, records
# PASS/FAIL, its time and the budget.
step() {
  local name=$1 to; to=$(scaled "$2"); shift 2
  local log="$LOGS/${name//[^A-Za-z0-9_.-]/_}.log" t0 rc
  t0=$(up)
  # bash -c so that steps may be the shell functions below (exported).
  timeout --kill-after=10 "$to" bash -c '"$@"' step "$@" >"$log" 2>&1; rc=$?
  local dt; dt=$(awk -v a="$t0" -v b="$(up)" 'BEGIN{printf "%.1f", b-a}')
  if [[ $rc == 0 ]]; then
    pass=$((pass+1)); printf 'PASS  %-44s %6ss  (budget %ss)\n' "$name" "$dt" "$to"
  else
    fail=$((fail+1)); failed+=("$name")
    [[ $rc == 124 || $rc == 137 ]] && rc="$rc (timed out after ${to}s)"
    printf 'FAIL  %-44s %6ss  exit %s\n' "$name" "$dt" "$rc"
    sed 's/^/      | /' "$log" | tail -40
  fi
}

# ERDMA_RIG_QUICK=1 (rig/test.sh --quick): a smoke test of each kind of
# thing, for the edit loop: devinfo on one device of each pair, the examples
# over rxe and siw, one erdma-perf pair with --verify. CI runs everything.
QUICK=${ERDMA_RIG_QUICK:-0}
export QUICK

# ---- Rust integration tests (rig-only tests are #[ignore]d on the host)
if [[ $QUICK != 1 ]]; then
  for bin in $ERDMA_RIG_TEST_BINS; do
    name=$(basename "$bin"); name=${name%-*}
    # rig_cluster runs many mpirun jobs of 2 and 4 ranks, some alone in the
    # VM (speed-judging ones): 5-6 minutes under load, 14.5 with the build
    # machine loaded far past one busy core; a fault test whose job's noise
    # hid its fault runs the job again (at most twice): room for that.
    budget=300; [[ $name == rig_cluster ]] && budget=1500
    # async_cq: interrupt-driven round trips take milliseconds under TCG.
    [[ $name == async_cq ]] && budget=600
    step "cargo test: $name" "$budget" "$bin" --include-ignored --test-threads=2
  done
fi

# ---- devinfo against ibv_devinfo, byte for byte
DEVINFO=$ERDMA_RIG_DEVINFO
same() {  # same ARGS...: devinfo ARGS == ibv_devinfo ARGS (stdout and status)
  local a b ra rb
  a=$(ibv_devinfo "$@" 2>/dev/null); ra=$?
  b=$("$DEVINFO" "$@" 2>/dev/null); rb=$?
  if [[ "$a" != "$b" ]]; then
    echo "devinfo $* differs from ibv_devinfo $*:"; diff <(echo "$a") <(echo "$b") | head -40; return 1
  fi
  if [[ $ra != 0 || $rb != 0 ]]; then echo "exit status ibv_devinfo $ra, devinfo $rb"; return 1; fi
  echo "devinfo $* == ibv_devinfo $* ($(echo "$a" | wc -l) lines)"
}
devinfo_errors() {
  local out rc
  out=$("$DEVINFO" -d no_such_dev 2>&1); rc=$?
  [[ $rc == 5 && $(echo "$out" | wc -l) == 1 ]] || { echo "-d no_such_dev: status $rc: $out"; return 1; }
  out=$("$DEVINFO" -d rxe0 -i 7 2>&1); rc=$?
  [[ $rc == 5 ]] || { echo "-i 7: status $rc: $out"; return 1; }
  "$DEVINFO" -i 0 >/dev/null 2>&1; rc=$?
  [[ $rc == 2 ]] || { echo "-i 0: status $rc"; return 1; }
  # Saved for rig/test.sh, which parses it on the host (python3 starts
  # slowly under TCG); the basics are checked here.
  "$DEVINFO" --json >"$LOGS/devinfo.json" || { echo "devinfo --json failed"; return 1; }
  grep -q '"hca_id": "rxe0"' "$LOGS/devinfo.json" && grep -q '"ipv4": "10.99.0.1"' "$LOGS/devinfo.json" \
    || { echo "devinfo --json lacks rxe0 or its IPv4 GID"; return 1; }
  echo "error statuses and --json ok"
}
export DEVINFO LOGS
export -f same devinfo_errors
if [[ $QUICK == 1 ]]; then
  step "devinfo -v -d rxe0" 120 same -v -d rxe0
  [[ -n $ERDMA_RIG_SIW ]] && step "devinfo -v -d siw0" 120 same -v -d siw0
else
  for dev in ${ERDMA_RIG_RXE_ALL:-$ERDMA_RIG_RXE} ${ERDMA_RIG_SIW_ALL:-$ERDMA_RIG_SIW}; do
    step "devinfo -v -d $dev" 120 same -v -d "$dev"
  done
  step "devinfo (all devices, short)" 60 same
  step "devinfo -l" 60 same -l
  step "devinfo -d rxe0 -i 1" 60 same -d rxe0 -i 1
  step "devinfo errors and --json" 60 devinfo_errors
fi

# ---- examples
E=$ERDMA_RIG_EXAMPLES
pingpong() {  # pingpong SERVER_ARGS -- CLIENT_ARGS
  local sargs=() cargs=() s rc_s rc_c
  while [[ $1 != -- ]]; do sargs+=("$1"); shift; done; shift; cargs=("$@")
  "$E/rdma_pingpong" --server "${sargs[@]}" & s=$!
  "$E/rdma_pingpong" "${cargs[@]}"; rc_c=$?
  wait $s; rc_s=$?
  echo "client exit $rc_c, server exit $rc_s"
  [[ $rc_c == 0 && $rc_s == 0 ]]
}
# The siw pair fails a connection now and then under load (LOC_QP_OP_ERR on
# the client's first request right after RDMA CM's ESTABLISHED, the server
# then sees WR_FLUSH_ERR: 6 of 150 runs on a loaded host; the cause is not
# found yet; twice in a row once, when a second VM loaded the host); the siw
# step runs the pair up to twice more, logged, so that CI tests the example
# rather than that race. Tracked in the notes of issue 11; rxe gets no retry.
pingpong_retry() {
  local try
  for try in 2 3; do
    pingpong "$@" && return 0
    echo "RETRY: the pair failed (siw), attempt $try of 3"
  done
  pingpong "$@"
}
# async_echo_pair SERVER_ARGS -- CLIENT_ARGS: the tokio echo example; the
# client starts once the server listens (RDMA CM rejects a connection before).
async_echo_pair() {
  local sargs=() cargs=() s rc_s rc_c log i
  while [[ $1 != -- ]]; do sargs+=("$1"); shift; done; shift; cargs=("$@")
  log=$(mktemp)
  "$E/async_echo" "${sargs[@]}" >"$log" 2>&1 & s=$!
  for i in $(seq 300); do grep -q '^listening' "$log" && break; sleep 0.1; done
  "$E/async_echo" "${cargs[@]}"; rc_c=$?
  wait $s; rc_s=$?
  cat "$log"; rm -f "$log"
  echo "client exit $rc_c, server exit $rc_s"
  [[ $rc_c == 0 && $rc_s == 0 ]]
}
export E
export -f pingpong pingpong_retry async_echo_pair
step "example readme" 60 "$E/readme"
step "example rdma_pingpong rxe (TCP exchange)" 120 pingpong \
  --bind "$ERDMA_RIG_RXE_IP1:18600" -d rxe1 -n 50 -s 65536 -- \
  --connect "$ERDMA_RIG_RXE_IP1:18600" -d rxe0 -n 50 -s 65536
if [[ -n $ERDMA_RIG_SIW ]]; then
  step "example rdma_pingpong siw (RDMA CM)" 180 pingpong_retry \
    --bind "$ERDMA_RIG_SIW_IP1:18601" -d siw1 -n 20 -s 65536 -- \
    --connect "$ERDMA_RIG_SIW_IP1:18601" -d siw0 --src "$ERDMA_RIG_SIW_IP0" -n 20 -s 65536
fi

step "example async_echo rxe (tokio, RDMA CM)" 180 async_echo_pair \
  --server "$ERDMA_RIG_RXE_IP1:18610" -n 300 -- \
  --connect "$ERDMA_RIG_RXE_IP1:18610" --src "$ERDMA_RIG_RXE_IP0" -n 300
if [[ -n $ERDMA_RIG_SIW ]]; then
  step "example async_echo siw (tokio, RDMA CM)" 180 async_echo_pair \
    --server "$ERDMA_RIG_SIW_IP1:18611" -n 300 -- \
    --connect "$ERDMA_RIG_SIW_IP1:18611" --src "$ERDMA_RIG_SIW_IP0" -n 300
fi

# ---- steps of the other tools (one file each)
BENCH=${ERDMA_RIG_BENCH:-$(dirname "$DEVINFO")}
export BENCH
for f in "$(dirname "${BASH_SOURCE[0]}")"/tests.d/*.sh; do
  [[ -e $f ]] || continue
  [[ $QUICK == 1 && ${f##*/} != perf.sh ]] && continue   # perf.sh has a quick step
  # shellcheck disable=SC1090
  source "$f"
done

echo "----"
echo "rig: $pass passed, $fail failed (kernel $(uname -r); devices: $(ls /sys/class/infiniband | tr '\n' ' '))"
for f in "${failed[@]}"; do echo "  failed: $f"; done
exit "$fail"
