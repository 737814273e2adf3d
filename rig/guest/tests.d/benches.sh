# The criterion benches (benches/), each function run once (criterion's
# --test mode) against the rig's devices: the data path on rxe0 <-> rxe1
# (Rust and the C reference loops), registration, and the two-host bench
# against erdma-bench-server. Timing runs: scripts/bench-datapath.sh.
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
  for f in rust/write_inline_8B c/write_inline_8B rust/send_recv_8B c/send_recv_8B reg_mr/4096; do
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
export -f bench_exe bench_datapath bench_two_host
export ERDMA_RIG_BENCHES
if [[ -n ${ERDMA_RIG_BENCHES:-} ]]; then
  step "bench datapath (rust and C loops, once)" 300 bench_datapath
  step "bench two_host (erdma-bench-server)" 300 bench_two_host
fi
