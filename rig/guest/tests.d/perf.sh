# rig/guest/tests.d/perf.sh - erdma-perf in the rig (sourced by rig/guest/tests.sh).
# Every test between two erdma-perf processes with --verify on rxe (GID-based
# connection) and on siw (-R), perftest 4.5 interoperation both ways, the
# options that change the loops (-a, -b, -q, -D, -t/-Q), and the output
# formats (--json, --csv, --out_json). Small -n: the rig is emulated.
# The fake-peer tests (garbage, oversized records, killed peers) are the Rust
# test rig_perf.rs, run with the other rig_* tests. ERDMA_PERF_FULL=1 runs the
# whole perftest interoperation matrix (CI runs the tests the issue names:
# write/read/send bandwidth and latency on rxe, and three tests on siw).
PERF=$BENCH/erdma-perf
PERF_LOGS=$LOGS/perf
mkdir -p "$PERF_LOGS"
# Each process's limit and the wait for the server's banner, scaled with the
# machine's speed (tests.sh).
PERF_T=$(scaled 120) PERF_BANNER_T=$(scaled 60)
export PERF PERF_LOGS PERF_T PERF_BANNER_T

# perf_pair NAME SERVER-CMD... -- CLIENT-CMD...: starts the server, waits
# for its banner (it listens then), runs the client; both must exit 0.
# perftest estimates the CPU frequency by sampling, which fails now and then
# under emulation ("Can't produce a report", exit 1; or "inf" latencies): such
# a run is repeated, up to three times in all.
perf_pair() {
  local a
  for a in 1 2 3; do
    perf_pair_once "$@" && return 0
    grep -qsE "Can't produce a report| inf " "$PERF_LOGS/$1.client" "$PERF_LOGS/$1.server" || return 1
    echo "  (perftest's clock estimate failed under emulation: run $a repeated)"
  done
  return 1
}

perf_pair_once() {
  local name=$1 s=() c=() sp rc rs out
  shift
  while [[ $1 != -- ]]; do s+=("$1"); shift; done
  shift
  c=("$@")
  out=$PERF_LOGS/$name.server
  : >"$out"
  # Line-buffered: perftest's banner must show before the server waits.
  timeout "$PERF_T" stdbuf -oL "${s[@]}" >"$out" 2>&1 &
  sp=$!
  local deadline=$((SECONDS + PERF_BANNER_T))
  while [[ $(<"$out") != *"Waiting for client"* ]] && kill -0 $sp 2>/dev/null && ((SECONDS < deadline)); do
    sleep 0.1
  done
  timeout "$PERF_T" "${c[@]}" >"$PERF_LOGS/$name.client" 2>&1
  rc=$?
  wait $sp
  rs=$?
  if [[ $rc != 0 || $rs != 0 ]]; then
    echo "FAIL $name: client exit $rc, server exit $rs"
    echo "  server: ${s[*]}"; sed 's/^/    /' "$out" | tail -8
    echo "  client: ${c[*]}"; sed 's/^/    /' "$PERF_LOGS/$name.client" | tail -8
    return 1
  fi
  if grep -qs ' inf ' "$PERF_LOGS/$name.client" "$out"; then
    echo "FAIL $name: a latency of inf"; return 1
  fi
  echo "ok   $name: $(grep -E '^ [0-9]+ ' "$PERF_LOGS/$name.client" | tail -1)"
}

# perf_suite WHO NET: the tests of the device pair, WHO = ours (both
# erdma-perf, --verify: every test), pt-server (ib_* serves) or pt-client
# (ib_* connects).
perf_suite() {
  local who=$1 net=$2 tests d0 d1 ip opt=() fail=0 t srv cli full=${ERDMA_PERF_FULL:-0}
  [[ $who == ours ]] && full=1
  if [[ $net == rxe ]]; then
    tests="write_bw read_bw send_bw write_lat read_lat send_lat"
    [[ $full == 1 ]] && tests+=" atomic_bw atomic_lat"
    d0=rxe0 d1=rxe1 ip=$ERDMA_RIG_RXE_IP1 opt=(-x "$ERDMA_RIG_RXE_GID_INDEX")
  else
    # siw has no atomics (iWARP).
    tests="write_bw send_bw send_lat"
    [[ $full == 1 ]] && tests+=" read_bw write_lat read_lat"
    d0=siw0 d1=siw1 ip=$ERDMA_RIG_SIW_IP1 opt=(-R)
  fi
  for t in $tests; do
    case $who in
      ours) srv=("$PERF" "$t" --verify) cli=("$PERF" "$t" --verify) ;;
      pt-server) srv=("ib_$t") cli=("$PERF" "$t") ;;
      pt-client) srv=("$PERF" "$t") cli=("ib_$t") ;;
    esac
    perf_pair "$who-$net-$t" "${srv[@]}" -d $d1 "${opt[@]}" -n 20 -- \
      "${cli[@]}" -d $d0 "${opt[@]}" -n 20 "$ip" || fail=1
    if [[ $who == ours ]] && ! grep -q -- "--verify: [1-9][0-9]* bytes checked" \
        "$PERF_LOGS/$who-$net-$t.client" "$PERF_LOGS/$who-$net-$t.server"; then
      echo "FAIL $who-$net-$t: no --verify summary"; fail=1
    fi
  done
  return $fail
}

# The options that change the loops, and the output formats, on rxe.
perf_options() {
  # -u 18: an ACK timeout of about 1 s. At rxe's default (67 ms) a guest slowed
  # by a loaded host retransmits what is still queued and its responder answers
  # the duplicates with REM_INV_REQ_ERR (seen: bidirectional send_bw, -q 2,
  # the build machine at load 8 on 2 cores); the cluster's rig tests do the same.
  local g=(-d rxe1 -x "$ERDMA_RIG_RXE_GID_INDEX" -u 18) c=(-d rxe0 -x "$ERDMA_RIG_RXE_GID_INDEX" -u 18)
  local ip=$ERDMA_RIG_RXE_IP1 fail=0 j=$PERF_LOGS/write_bw.json
  rm -f "$PERF_LOGS"/*.csv "$PERF_LOGS"/*.json
  perf_pair all-write_bw "$PERF" write_bw "${g[@]}" -a -n 5 --verify -- \
    "$PERF" write_bw "${c[@]}" -a -n 5 --verify --csv "$PERF_LOGS/all.csv" "$ip" || fail=1
  [[ $(grep -c '^erdma-perf,' "$PERF_LOGS/all.csv" 2>/dev/null) == 23 ]] || { echo "FAIL -a: not 23 CSV rows"; fail=1; }
  perf_pair all-send_lat "$PERF" send_lat "${g[@]}" -a -n 5 -- "$PERF" send_lat "${c[@]}" -a -n 5 "$ip" || fail=1
  perf_pair bidir-send_bw "$PERF" send_bw "${g[@]}" -b -q 2 -n 50 --verify -- \
    "$PERF" send_bw "${c[@]}" -b -q 2 -n 50 --verify "$ip" || fail=1
  perf_pair bidir-read_bw "$PERF" read_bw "${g[@]}" -b -n 50 -s 8K --verify -- \
    "$PERF" read_bw "${c[@]}" -b -n 50 -s 8K --verify "$ip" || fail=1
  perf_pair qps-write_bw "$PERF" write_bw "${g[@]}" -q 4 -t 16 -Q 4 -s 512 -n 100 --verify -- \
    "$PERF" write_bw "${c[@]}" -q 4 -t 16 -Q 4 -s 512 -n 100 --verify "$ip" || fail=1
  perf_pair duration-write_bw "$PERF" write_bw "${g[@]}" -D 2 -- \
    "$PERF" write_bw "${c[@]}" -D 2 --report_gbits "$ip" || fail=1
  perf_pair duration-read_lat "$PERF" read_lat "${g[@]}" -D 1 -- "$PERF" read_lat "${c[@]}" -D 1 "$ip" || fail=1
  perf_pair json-write_lat "$PERF" write_lat "${g[@]}" -n 50 --out_json --out_json_file "$PERF_LOGS/pt.json" -- \
    "$PERF" write_lat "${c[@]}" -n 50 --json "$ip" || fail=1
  sed -n '/^{/,$p' "$PERF_LOGS/json-write_lat.client" >"$j"
  jq -e '.tool == "erdma-perf" and .test == "write_lat" and (.results | length) == 1
         and .results[0].t_typical_us > 0 and .host != null and (.date | test("Z$"))' "$j" >/dev/null \
    || { echo "FAIL --json: $(head -c 300 "$j")"; fail=1; }
  jq -e '.test_info.test == "RDMA_Write_Latency_Test" and .results.t_typical > 0' "$PERF_LOGS/pt.json" >/dev/null \
    || { echo "FAIL --out_json: $(head -c 300 "$PERF_LOGS/pt.json")"; fail=1; }
  # erdma-compare reads erdma-perf's JSON and CSV, aligned with perftest's logs
  # (ib_write_lat's and ib_write_bw's runs of the interoperation steps above).
  perf_compare "$j" "$PERF_LOGS/pt-client-rxe-write_lat.client" "erdma-perf JSON" "RDMA_Write Latency" 2 time_us || fail=1
  perf_compare "$PERF_LOGS/all.csv" "$PERF_LOGS/pt-client-rxe-write_bw.client" "erdma-perf CSV" "RDMA_Write BW" 65536 busbw_gbps || fail=1
  return $fail
}

# perf_compare OURS PERFTEST-LOG FORMAT TEST SIZE FIELD: erdma-compare --json
# aligns the two at TEST/SIZE, both with FIELD > 0.
perf_compare() {
  local out=$PERF_LOGS/compare-${3##* }.json
  [[ -s $2 ]] || { echo "FAIL compare: no perftest log $2 (its step failed?)"; return 1; }
  "$BENCH/erdma-compare" "$1" "$2" --json >"$out" 2>&1 || { echo "FAIL erdma-compare $1 $2:"; head -5 "$out"; return 1; }
  jq -e --arg f "$3" --arg t "$4" --argjson s "$5" --arg v "$6" '
    .runs[0].format == $f and .runs[1].format == "perftest log"
    and ([.rows[] | select(.collective == $t and .size_bytes == $s)
          | .runs | length == 2 and all(.[]; . != null and .[$v] > 0)] == [true])' "$out" >/dev/null \
    || { echo "FAIL compare $3 vs perftest at $4 $5:"; head -c 600 "$out"; echo; return 1; }
  echo "ok   erdma-compare: $3 and perftest's log aligned at $4 $5"
}
export -f perf_pair perf_pair_once perf_suite perf_options perf_compare

if [[ $QUICK == 1 ]]; then
  step "erdma-perf rxe: write_bw --verify (quick)" 120 perf_pair quick-write_bw \
    "$PERF" write_bw --verify -d rxe1 -x "$ERDMA_RIG_RXE_GID_INDEX" -n 20 -- \
    "$PERF" write_bw --verify -d rxe0 -x "$ERDMA_RIG_RXE_GID_INDEX" -n 20 "$ERDMA_RIG_RXE_IP1"
  return 0
fi
step "erdma-perf rxe: 8 tests, --verify" 400 perf_suite ours rxe
step "erdma-perf rxe: perftest server, erdma-perf client" 400 perf_suite pt-server rxe
step "erdma-perf rxe: erdma-perf server, perftest client" 400 perf_suite pt-client rxe
step "erdma-perf rxe: -a -b -q -D, JSON/CSV" 400 perf_options
if [[ -n $ERDMA_RIG_SIW ]]; then
  step "erdma-perf siw -R: 6 tests, --verify" 400 perf_suite ours siw
  step "erdma-perf siw -R: perftest server, erdma-perf client" 400 perf_suite pt-server siw
  step "erdma-perf siw -R: erdma-perf server, perftest client" 400 perf_suite pt-client siw
fi
