#!/usr/bin/env bash
# datapath-instructions.sh - the safe API's post + poll (per request, and on a Lane: prepared
# once) against the same loop in C, counted in
# user-space instructions (callgrind) instead of time: in the rig's emulated VM the time of
# both loops moves by 1.8-2x run to run (scripts/bench-datapath.sh), an instruction count
# does not. Runs erdma-datapath-count (benches/src/loops.rs, the loops of the criterion bench)
# under valgrind in the rig, rxe0 <-> rxe1, at ITERS and 3*ITERS iterations: the difference
# divided by 2*ITERS is the cost of one iteration (start-up cancels out), everything the
# process executes in user space (the loop, the library, libibverbs and the provider; not
# the kernel). Empty polls (a completion not there yet) are counted and printed per
# iteration: where the two loops' differ, so does their share of spinning.
#
# usage: scripts/datapath-instructions.sh [--iters N] [--rounds N] [--out FILE.md] [--no-build]
# Defaults: 1000 iterations, 2 rounds. Needs valgrind on the host (apt-get install valgrind;
# the VM sees the host's files).
# exit status: 0 done (the ratios are printed, not judged); 1 a run failed; 2 bad usage.
set -euo pipefail
cd "$(dirname "$0")/.."
ITERS=1000 ROUNDS=2 OUT= BUILD=1
if [[ ${1:-} == --in-vm ]]; then
  # ---------------------------------------------------------------- inside the VM
  ITERS=$2 ROUNDS=$3 BIN=$4
  # The guest sees the host's files read-only outside the repository (the
  # shared target directory included): callgrind's output stays in the guest,
  # only the totals go back, on stdout.
  WORK=$(mktemp -d)
  for r in $(seq 1 "$ROUNDS"); do
    for loop in write_inline send_recv; do
      for lang in rust lane c; do
        for n in "$ITERS" $((3 * ITERS)); do
          f=$WORK/cg-$r-$loop-$lang-$n.out
          if ! line=$(valgrind --tool=callgrind --callgrind-out-file="$f" "$BIN" "$lang" "$loop" "$n" 2>"$WORK/vg.log"); then
            echo "run failed: $lang $loop $n" >&2; tail -5 "$WORK/vg.log" >&2; exit 1
          fi
          ir=$(awk '/^(summary|totals):/ {print $2; exit}' "$f")
          echo "$r $loop $lang $n $ir ${line##*empty_polls=}"
        done
      done
    done
  done
  exit 0
fi
usage() { echo "usage: $0 [--iters N] [--rounds N] [--out FILE.md] [--no-build]" >&2; exit 2; }
while [[ $# -gt 0 ]]; do
  case $1 in
    --iters) ITERS=${2:-}; [[ $ITERS =~ ^[1-9][0-9]*$ ]] || usage; shift 2 ;;
    --rounds) ROUNDS=${2:-}; [[ $ROUNDS =~ ^[1-9][0-9]*$ ]] || usage; shift 2 ;;
    --out) OUT=${2:-}; [[ -n $OUT ]] || usage; shift 2 ;;
    --no-build) BUILD=0; shift ;;
    *) usage ;;
  esac
done
command -v valgrind >/dev/null || { echo "error: valgrind not found: apt-get install valgrind" >&2; exit 1; }
if [[ $BUILD == 1 ]]; then cargo build --release -q -p erdma-benches --bin erdma-datapath-count || exit 1; fi
TARGET=$(cargo metadata --format-version 1 --no-deps | python3 -c 'import json,sys; print(json.load(sys.stdin)["target_directory"])')
BIN=$TARGET/release/erdma-datapath-count
WORK=$TARGET/datapath-instructions
rm -rf "$WORK" && mkdir -p "$WORK"
ROOT=$(pwd -P)
rig/vm.sh --no-siw --timeout 1800 -- bash "$ROOT/scripts/datapath-instructions.sh" --in-vm \
  "$ITERS" "$ROUNDS" "$BIN" "$WORK" | tee "$WORK/runs.txt"
[[ ${PIPESTATUS[0]} == 0 ]] || exit 1
python3 - "$WORK/runs.txt" "$ITERS" "$ROUNDS" <<'PY' | tee "$WORK/report.md"
import sys, statistics, platform, datetime
runs, iters, rounds = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
data = {}
for line in open(runs):
    f = line.split()
    if len(f) != 6:
        continue
    r, loop, lang, n, ir, empty = f[0], f[1], f[2], int(f[3]), int(f[4]), int(f[5])
    data.setdefault((loop, lang, r), {})[n] = (ir, empty)
per = {}
for (loop, lang, r), d in data.items():
    (i1, e1), (i3, e3) = d[iters], d[3 * iters]
    per.setdefault((loop, lang), []).append(((i3 - i1) / (2 * iters), (e3 - e1) / (2 * iters)))
now = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
print(f"post + poll in user-space instructions per iteration (callgrind; rig VM, rxe0 <-> rxe1; {now}; host {platform.node()})\n")
print(f"Command: scripts/datapath-instructions.sh --iters {iters} --rounds {rounds}\n")
print("| loop | Rust instr/iter | Lane instr/iter | C instr/iter | Rust/C | Lane/C | Lane - C | empty polls/iter Rust | Lane | C | rounds |")
print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
for loop in ("write_inline", "send_recv"):
    if any((loop, k) not in per for k in ("rust", "lane", "c")):
        continue
    ins = {k: statistics.median(v[0] for v in per[(loop, k)]) for k in ("rust", "lane", "c")}
    emp = {k: statistics.median(v[1] for v in per[(loop, k)]) for k in ("rust", "lane", "c")}
    spread = lambda k: "/".join(f"{v[0]:.0f}" for v in per[(loop, k)])
    ru, la, cc = ins["rust"], ins["lane"], ins["c"]
    print(f"| {loop}_8B | {ru:.0f} ({spread('rust')}) | {la:.0f} ({spread('lane')}) | {cc:.0f} ({spread('c')}) "
          f"| {ru / cc:.3f} | {la / cc:.3f} | {la - cc:.0f} | {emp['rust']:.2f} | {emp['lane']:.2f} | {emp['c']:.2f} | {rounds} |")
PY
if [[ -n $OUT ]]; then cp "$WORK/report.md" "$OUT"; fi
