# The criterion benches (benches/), each function run once (criterion's
# --test mode) against the rig's devices: the data path on rxe0 <-> rxe1
# (Rust and the C reference loops), registration, and the two-host bench
# against erdma-bench-server; erdma-datapath-count, the same loops a fixed
# number of times (scripts/datapath-instructions.sh counts their instructions).
# Timing runs: scripts/bench-datapath.sh.
bench_exe() {  # bench_exe NAME: the path of bench NAME from $ERDMA_RIG_BENCHES
  local kv
  for kv in $ERDMA_RIG_BENCHES; do [[ ${kv%%=*} == "$1" ]] && { echo "${kv#*=}"; return; }; done
  return 1
}
bench_datapath() {
  local exe out
  exe=$(bench_exe datapath) || { echo "datapath bench not built"; return 1; }
  out=$(ERDMA_BENCH_DEVS="rxe0 rxe1" "$exe" --test 2>&1) || { echo "$out"; return 1; }
  echo "$out"
  for f in {rust,lane,c}/write_inline_8B {rust,lane,c}/send_recv_8B reg_mr/4096; do
    grep -q "Testing post_poll/$f\|Testing $f" <<<"$out" || { echo "missing: $f"; return 1; }
  done
}
bench_two_host() {
  local exe out srv rc
  exe=$(bench_exe two_host) || { echo "two_host bench not built"; return 1; }
  ERDMA_BENCH_DEV=rxe1 ERDMA_BENCH_SERVER_SLEEP=1 "$BENCH/erdma-bench-server" "$ERDMA_RIG_RXE_IP1:18710" 1 & srv=$!
  sleep 1
  out=$(ERDMA_BENCH_DEV=rxe0 ERDMA_BENCH_PEER="$ERDMA_RIG_RXE_IP1:18710" "$exe" --test 2>&1); rc=$?
  wait "$srv" || { echo "server failed"; rc=1; }
  echo "$out"
  [[ $rc == 0 ]] && grep -q "Testing two_host/send_8B_round_trip" <<<"$out" && grep -q "Testing two_host/write_64KiB" <<<"$out"
}
datapath_count() {
  local lang loop out rc
  for lang in rust lane c; do
    for loop in write_inline send_recv; do
      out=$(ERDMA_BENCH_DEVS="rxe0 rxe1" "$BENCH/erdma-datapath-count" $lang $loop 200 2>&1) || { echo "$out"; return 1; }
      echo "$out"
      [[ $out =~ ^$lang\ $loop\ 200\ empty_polls=[0-9]+$ ]] || { echo "unexpected output"; return 1; }
    done
  done
  "$BENCH/erdma-datapath-count" rust nope 10 2>&1; rc=$?
  [[ $rc == 2 ]] || { echo "unknown loop: exit $rc, expected 2"; return 1; }
  [[ -z ${ERDMA_RIG_SIW:-} ]] && return 0
  ERDMA_BENCH_DEVS="siw0" "$BENCH/erdma-datapath-count" c send_recv 10 2>&1; rc=$?
  [[ $rc == 1 ]] || { echo "iWARP loopback: exit $rc, expected 1"; return 1; }
}
export -f bench_exe bench_datapath bench_two_host datapath_count
export ERDMA_RIG_BENCHES
if [[ -n ${ERDMA_RIG_BENCHES:-} ]]; then
  step "bench datapath (rust, lane and C loops, once)" 300 bench_datapath
  step "bench two_host (erdma-bench-server)" 300 bench_two_host
fi
step "erdma-datapath-count: six loops, exit statuses" 120 datapath_count
