#!/usr/bin/env bash
# perf-vs-perftest.sh - erdma-perf against perftest (the distribution's ib_*), side by
# side in the rig, on the same rxe pair (rxe1 serves, rxe0 connects, GID-based):
# write_bw, read_bw, send_bw at 64 KiB (average BW) and write_lat, send_lat at 2 bytes
# (t_typical). Each round runs erdma-perf once and perftest twice (the second perftest run
# is perftest's spread against itself), the order rotating from round to round; medians
# over the rounds, ratios erdma-perf/perftest. perftest's latency report prints inf when its
# CPU-frequency estimate fails (it does under emulation): such a run is repeated, counted.
#
# usage: scripts/perf-vs-perftest.sh [--rounds N] [--iters N] [--lat-iters N] [--no-build]
#          [--out FILE.md]
# Defaults: 7 rounds, 2000 BW iterations, 2000 latency iterations. Writes the raw runs to
# target/perf-vs-perftest/runs.csv and the table (markdown) to stdout and --out.
# Exit status: 0 done (the ratios are reported, not judged); 1 a run failed; 2 bad usage.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$(pwd -P)
ROUNDS=7 ITERS=2000 LAT_ITERS=2000 BUILD=1 OUT=
if [[ ${1:-} == --in-vm ]]; then
  # ---------------------------------------------------------------- inside the VM
  shift
  ROUNDS=$1 ITERS=$2 LAT_ITERS=$3 BIN=$4 CSV=$5
  G=$ERDMA_RIG_RXE_GID_INDEX IP=$ERDMA_RIG_RXE_IP1
  LOG=$(dirname "$CSV")
  echo "round,order,tool,test,size,iters,value,unit,attempts" >"$CSV"
  # run TOOL TEST SIZE ITERS: prints the value (BW avg Gb/s or t_typical us), "" on failure.
  run() {
    local tool=$1 t=$2 size=$3 n=$4 srv cli s line v
    local common=(-x "$G" -s "$size" -n "$n")
    [[ $t == *_bw ]] && common+=(--report_gbits)
    # perftest picks no inline on rxe; erdma-perf would use the device's: same for both.
    [[ $t == *_lat ]] && common+=(-I 0)
    if [[ $tool == erdma-perf ]]; then srv=("$BIN" "$t"); cli=("$BIN" "$t"); else srv=("ib_$t"); cli=("ib_$t"); fi
    : >"$LOG/server.out"
    timeout 300 stdbuf -oL "${srv[@]}" -d rxe1 "${common[@]}" >"$LOG/server.out" 2>&1 &
    s=$!
    local deadline=$((SECONDS + 60))
    while [[ $(<"$LOG/server.out") != *"Waiting for client"* ]] && kill -0 $s 2>/dev/null && ((SECONDS < deadline)); do
      sleep 0.05
    done
    if ! timeout 300 "${cli[@]}" -d rxe0 "${common[@]}" "$IP" >"$LOG/client.out" 2>&1; then
      wait $s || true
      echo "run failed: $tool $t" >&2; tail -3 "$LOG/client.out" >&2
      return 0
    fi
    wait $s || true
    line=$(grep -E "^ $size +" "$LOG/client.out" | tail -1)
    if [[ $t == *_bw ]]; then v=$(awk '{print $4}' <<<"$line"); else v=$(awk '{print $5}' <<<"$line"); fi
    echo "$v"
  }
  tests=(write_bw read_bw send_bw write_lat send_lat)
  for r in $(seq 1 "$ROUNDS"); do
    # Rotate who goes first: E P P', P E P', P P' E, ...
    case $((r % 3)) in
      1) order=(erdma-perf perftest perftest2) ;;
      2) order=(perftest erdma-perf perftest2) ;;
      0) order=(perftest perftest2 erdma-perf) ;;
    esac
    for t in "${tests[@]}"; do
      if [[ $t == *_bw ]]; then size=65536 n=$ITERS unit=Gb/s; else size=2 n=$LAT_ITERS unit=us; fi
      k=0
      for who in "${order[@]}"; do
        k=$((k + 1))
        tool=${who%2}
        v= a=0
        while [[ $a -lt 3 ]]; do
          a=$((a + 1))
          v=$(run "$tool" "$t" "$size" "$n")
          [[ $v =~ ^[0-9.]+$ && $v != 0.00 ]] && break
        done
        echo "$r,$k,$who,$t,$size,$n,$v,$unit,$a" >>"$CSV"
        echo "round $r $who $t: $v $unit (attempts $a)"
      done
    done
  done
  exit 0
fi

while [[ $# -gt 0 ]]; do
  case $1 in
    --rounds) ROUNDS=$2; shift 2 ;;
    --iters) ITERS=$2; shift 2 ;;
    --lat-iters) LAT_ITERS=$2; shift 2 ;;
    --no-build) BUILD=0; shift ;;
    --out) OUT=$2; shift 2 ;;
    -h|--help) sed -n '2,16p' "$0"; exit 0 ;;
    *) echo "perf-vs-perftest.sh: unknown option $1" >&2; exit 2 ;;
  esac
done
[[ $ROUNDS -ge 1 ]] || { echo "--rounds must be at least 1" >&2; exit 2; }
if [[ $BUILD == 1 ]]; then cargo build --release -q -p erdma-bench --bin erdma-perf; fi
DIR=$ROOT/target/perf-vs-perftest
mkdir -p "$DIR"
CSV=$DIR/runs.csv
START=$(date -u '+%Y-%m-%d %H:%M UTC')
rig/vm.sh --no-siw -- bash "$ROOT/scripts/perf-vs-perftest.sh" --in-vm "$ROUNDS" "$ITERS" "$LAT_ITERS" \
  "$ROOT/target/release/erdma-perf" "$CSV"
python3 - "$CSV" "$START" "$ROUNDS" "$ITERS" "$LAT_ITERS" <<'PY' | tee "${OUT:-/dev/null}"
import csv, statistics, sys, platform, subprocess
path, start, rounds, iters, lat_iters = sys.argv[1:]
rows = list(csv.DictReader(open(path)))
def vals(who, test):
    return [float(r["value"]) for r in rows if r["tool"] == who and r["test"] == test and r["value"]]
def retries(who, test):
    return sum(int(r["attempts"]) - 1 for r in rows if r["tool"] == who and r["test"] == test)
cpu = subprocess.run(["sh", "-c", "grep -m1 'model name' /proc/cpuinfo | cut -d: -f2"], capture_output=True, text=True).stdout.strip()
print(f"erdma-perf vs perftest 4.5+0.17 in the rig ({start}; host: {platform.node()}, {cpu}, "
      f"{subprocess.run(['nproc'], capture_output=True, text=True).stdout.strip()} CPUs; VM: TCG, rxe1 serves, rxe0 connects)")
print()
print(f"Command: scripts/perf-vs-perftest.sh --rounds {rounds} --iters {iters} --lat-iters {lat_iters}")
print()
print("| test | size | metric | erdma-perf median | perftest median | ratio | goal | perftest vs itself | erdma-perf range | perftest range | runs (retries) |")
print("|---|---|---|---|---|---|---|---|---|---|---|")
for t in ["write_bw", "read_bw", "send_bw", "write_lat", "send_lat"]:
    e, p, p2 = vals("erdma-perf", t), vals("perftest", t), vals("perftest2", t)
    if not e or not p or not p2:
        print(f"| {t} | | | missing runs | | | | | | | |")
        continue
    bw = t.endswith("_bw")
    me, mp, mp2 = statistics.median(e), statistics.median(p), statistics.median(p2)
    ratio = me / mp
    aa = mp2 / mp
    metric = "BW average, Gb/s" if bw else "t_typical, us"
    goal = ">= 1.00" if bw else "<= 1.00"
    size = "64 KiB" if bw else "2 B"
    fmt = (lambda v: f"{v:.4f}") if bw else (lambda v: f"{v:.2f}")
    rng = lambda v: f"{fmt(min(v))}-{fmt(max(v))}"
    ok = (ratio >= 1.0) if bw else (ratio <= 1.0)
    print(f"| {t} | {size} | {metric} | {fmt(me)} | {fmt(mp)} | **{ratio:.3f}** {'ok' if ok else 'MISSED'} | {goal} | "
          f"{aa:.3f} | {rng(e)} | {rng(p + p2)} | {len(e)}+{len(p)}+{len(p2)} ({retries('erdma-perf', t)}/{retries('perftest', t) + retries('perftest2', t)}) |")
PY
