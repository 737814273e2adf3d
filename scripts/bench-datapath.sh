#!/usr/bin/env bash
# bench-datapath.sh - the safe API's post + poll (per request, and on a Lane:
# prepared once) against the same loop in C, side by side, in the rig
# (rxe0 <-> rxe1): runs benches/datapath.rs RUNS times in one VM boot,
# alternating which of Rust and C is measured first, and prints per run and
# as medians: time per operation of each, the Rust/C and Lane/C ratios, and
# the C loop's spread against itself (run to run).
# Also runs the two-host bench once (erdma-bench-server on rxe1, sleeping
# on its completion channel so that it does not starve the client in the
# 2-CPU VM; the criterion client on rxe0) and the memory registration group.
#
# usage: scripts/bench-datapath.sh [--out FILE.md] [--quick]
#   --out FILE   also write the report (markdown) to FILE
#   --quick      2 runs, short measurements (CI smoke test: everything runs)
# env: RUNS (default 6), MEASURE (seconds per bench, default 4)
# exit: 0 ok (the ratios are printed, not judged), 1 a run failed, 2 usage.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT= QUICK=0
while [[ $# -gt 0 ]]; do
  case $1 in
    --out) OUT=${2:?--out needs a file}; shift 2 ;;
    --quick) QUICK=1; shift ;;
    *) echo "usage: $0 [--out FILE.md] [--quick]" >&2; exit 2 ;;
  esac
done
RUNS=${RUNS:-6} MEASURE=${MEASURE:-4} WARM=1 REG=1
[[ $QUICK == 1 ]] && RUNS=2 MEASURE=0.5 WARM=0.2
exe() {  # exe BENCH: the bench executable's path (built in release)
  cargo bench -p erdma-benches --bench "$1" --no-run --message-format=json 2>/dev/null |
    python3 -c 'import json,sys
for l in sys.stdin:
    m=json.loads(l)
    if m.get("reason")=="compiler-artifact" and m.get("executable") and m["target"]["kind"]==["bench"]: print(m["executable"])'
}
cargo build --release -q -p erdma-benches --bin erdma-bench-server || exit 1
DATAPATH=$(exe datapath) TWOHOST=$(exe two_host)
SERVER=$(cargo metadata --format-version 1 --no-deps | python3 -c 'import json,sys; print(json.load(sys.stdin)["target_directory"])')/release/erdma-bench-server
[[ -x $DATAPATH && -x $TWOHOST && -x $SERVER ]] || { echo "build failed" >&2; exit 1; }
WORK=$(mktemp -d "$PWD/target/bench-datapath.XXXXXX")
trap 'rm -rf "$WORK"' EXIT
cat >"$WORK/guest.sh" <<EOF
set -u
cd "$PWD"
for r in \$(seq 1 $RUNS); do
  echo "== run \$r (C first: \$(( r % 2 == 0 )))"
  ERDMA_BENCH_C_FIRST=\$(( r % 2 == 0 )) CRITERION_HOME=$WORK/r\$r ERDMA_BENCH_DEVS="rxe0 rxe1" \
    timeout 600 $DATAPATH --bench post_poll --warm-up-time $WARM --measurement-time $MEASURE --noplot \
    >$WORK/run\$r.log 2>&1 || { echo "run \$r failed"; tail -20 $WORK/run\$r.log; exit 1; }
done
echo "== memory registration"
CRITERION_HOME=$WORK/reg ERDMA_BENCH_DEVS=rxe0 timeout 600 $DATAPATH --bench reg_mr \
  --warm-up-time $WARM --measurement-time $MEASURE --noplot >$WORK/reg.log 2>&1 || { echo "reg_mr failed"; tail -20 $WORK/reg.log; exit 1; }
echo "== two hosts (server on rxe1, client on rxe0)"
ERDMA_BENCH_DEV=rxe1 ERDMA_BENCH_SERVER_SLEEP=1 timeout 600 $SERVER \$ERDMA_RIG_RXE_IP1:18700 1 >$WORK/server.log 2>&1 &
sleep 1
ERDMA_BENCH_DEV=rxe0 ERDMA_BENCH_PEER=\$ERDMA_RIG_RXE_IP1:18700 CRITERION_HOME=$WORK/two \
  timeout 600 $TWOHOST --bench --warm-up-time $WARM --measurement-time $MEASURE --noplot >$WORK/two.log 2>&1 \
  || { echo "two_host failed"; tail -20 $WORK/two.log; cat $WORK/server.log; exit 1; }
wait
cat $WORK/server.log
EOF
rig/vm.sh --mem 2G -- bash "$WORK/guest.sh" || exit 1
python3 - "$WORK" "$RUNS" "$OUT" <<'PY'
import json, pathlib, statistics as st, sys, datetime, platform, subprocess
work, runs, out = pathlib.Path(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
def est(root, group, name):
    f = root / group / name / "new" / "estimates.json"
    return json.loads(f.read_text())["median"]["point_estimate"] / 1e3  # ns -> us
lines = []
p = lines.append
p(f"# post + poll: the safe Rust API (per request, and on a Lane) against the same loop in C (rig, rxe0 <-> rxe1)\n")
p(f"Date {datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M} UTC; host {platform.node()} "
  f"({platform.machine()}, {subprocess.run(['nproc'],capture_output=True,text=True).stdout.strip()} CPUs); "
  f"QEMU TCG VM, Debian kernel, Soft-RoCE. Command: `scripts/bench-datapath.sh` ({runs} runs, "
  f"order alternating). Time per operation = criterion's median per run, in us.\n")
for op in ["write_inline_8B", "send_recv_8B"]:
    try:
        rust = [est(work / f"r{r}", "post_poll", f"rust_{op}") for r in range(1, runs + 1)]
        lane = [est(work / f"r{r}", "post_poll", f"lane_{op}") for r in range(1, runs + 1)]
        c = [est(work / f"r{r}", "post_poll", f"c_{op}") for r in range(1, runs + 1)]
    except FileNotFoundError:
        p(f"{op}: not measured\n"); continue
    p(f"## {op}\n\n| run | C first | Rust (us) | Lane (us) | C (us) | Rust/C | Lane/C |\n|---|---|---|---|---|---|---|")
    for i, (a, l, b) in enumerate(zip(rust, lane, c), 1):
        p(f"| {i} | {'yes' if i % 2 == 0 else 'no'} | {a:.2f} | {l:.2f} | {b:.2f} | {a/b:.3f} | {l/b:.3f} |")
    ratios = [a / b for a, b in zip(rust, c)]
    lratios = [a / b for a, b in zip(lane, c)]
    p(f"\nMedian: Rust {st.median(rust):.2f} us, Lane {st.median(lane):.2f} us, C {st.median(c):.2f} us, "
      f"**Rust/C {st.median(rust)/st.median(c):.3f}, Lane/C {st.median(lane)/st.median(c):.3f}** "
      f"(median of per-run ratios {st.median(ratios):.3f} and {st.median(lratios):.3f}, "
      f"ranges {min(ratios):.3f}-{max(ratios):.3f} and {min(lratios):.3f}-{max(lratios):.3f}). "
      f"C against itself: run-to-run range {min(c):.2f}-{max(c):.2f} us, max/min {max(c)/min(c):.3f}.\n")
p("## Memory registration (ibv_reg_mr + ibv_dereg_mr, rxe0)\n\n| size | time (us) |\n|---|---|")
reg = work / "reg" / "reg_mr"
for d in sorted(reg.iterdir() if reg.exists() else [], key=lambda d: int(d.name) if d.name.isdigit() else 0):
    if d.name.isdigit():
        us = json.loads((d / "new" / "estimates.json").read_text())["median"]["point_estimate"] / 1e3
        p(f"| {int(d.name)} | {us:.1f} |")
p("\n## Two hosts (erdma-bench-server on rxe1, criterion client on rxe0)\n")
two = work / "two" / "two_host"
for name in ["send_8B_round_trip", "write_64KiB"]:
    f = two / name / "new" / "estimates.json"
    if f.exists():
        us = json.loads(f.read_text())["median"]["point_estimate"] / 1e3
        extra = f", {65536 / us / 1e3:.3f} GB/s" if name == "write_64KiB" else ""
        p(f"- {name}: {us:.2f} us{extra}")
text = "\n".join(lines) + "\n"
print(text)
if out:
    pathlib.Path(out).write_text(text)
PY
