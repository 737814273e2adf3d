#!/usr/bin/env bash
# The performance bars of erdma-cluster's diagnosis, in its simulator
# (erdma-cluster --simulate; docs/cluster-diagnosis.md states the model):
#   1. 1000 hosts x 2 NICs, one fault of each kind at 0.8, noise +-3%:
#      every fault found and classified right, 0 false verdicts, in
#      CLUSTERS simulated clusters (default 100), each with the faults on
#      hosts of its own random draw (--shuffle);
#   2. noise only (+-5%): 0 false verdicts in CLUSTERS clusters;
#   3. --budget 10 finds one 20%-slow link among 1000 hosts (10 clusters),
#      predicted wall under 600 s;
#   4. the full matrix's predicted wall under 3600 s;
#   5. one 1000-host simulation and its diagnosis under 10 s and 500 MB
#      (/usr/bin/time -v of the release binary).
# Prints one line per bar (PASS/FAIL with the numbers); exits 1 when a bar
# is not met. Issue 36's bars (milder faults, noise models, flapping links,
# per cluster size) are scripts/bench-diagnosis-bars.sh.
#
#   scripts/bench-simulator.sh [CLUSTERS]
#
# Release build (built here unless BIN_DIR names a directory holding it).
set -euo pipefail

CLUSTERS=${1:-100}
cd "$(dirname "$0")/.."
if [[ -z ${BIN_DIR:-} ]]; then
    cargo build --release -p erdma-bench --bin erdma-cluster >&2
    BIN_DIR=${CARGO_TARGET_DIR:-target}/release
fi
command -v jq >/dev/null || { echo "bench-simulator.sh: needs jq (apt-get install jq)" >&2; exit 3; }
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
# A copy: a build from another checkout sharing the target directory could
# replace the binary while the benchmark runs.
cp "$BIN_DIR/erdma-cluster" "$TMP/erdma-cluster"
BIN=$TMP/erdma-cluster
"$BIN" --help | grep -q -- --simulate || {
    echo "bench-simulator.sh: $BIN_DIR/erdma-cluster has no --simulate: rebuild it from this checkout" >&2
    exit 3
}
FAULTS=(host:h17:0.8 nic:h42:1:0.8 link:h3:h9:0.8 direction:h100:h200:0.8
        flap:h300:h301 dead:h5 hang:h6)
failed=0
bar() { # NAME OK DETAILS
    if [[ $2 == 1 ]]; then echo "PASS  $1: $3"; else echo "FAIL  $1: $3"; failed=1; fi
}
sim() { # OUT ARGS...: the JSON document (exit 0 or 2 are both results)
    local out=$1; shift
    "$BIN" --simulate "$@" --json >"$out" || [[ $? == 2 ]]
}

echo "# $(date -u +%FT%TZ) $(uname -n), $(nproc) CPUs, $BIN"
t0=$(date +%s.%N)
sim "$TMP/faults.json" 1000x2 --noise 3% --clusters "$CLUSTERS" --shuffle --inject "${FAULTS[@]}"
t1=$(date +%s.%N)
read -r exact missed false <<<"$(jq -r '.summary | "\(.exact) \(.missed) \(.false_verdicts)"' "$TMP/faults.json")"
bar "faults of each kind, noise 3%" "$([[ $exact == "$CLUSTERS" && $false == 0 ]] && echo 1)" \
    "$exact of $CLUSTERS clusters exact, ${#FAULTS[@]} faults each: $missed missed, $false false verdicts ($(printf %.0f "$(echo "$t1 - $t0" | bc)") s)"

sim "$TMP/noise.json" 1000x2 --noise 5% --clusters "$CLUSTERS"
read -r false suspects <<<"$(jq -r '"\(.summary.false_verdicts) \(.summary.suspects)"' "$TMP/noise.json")"
bar "noise only, 5%" "$([[ $false == 0 ]] && echo 1)" \
    "$false false verdicts in $CLUSTERS clusters ($suspects suspect(s) in all before the retest)"

sim "$TMP/budget.json" 1000x2 --budget 10 --clusters 10 --shuffle --inject link:h3:h9:0.8
read -r exact wall desc <<<"$(jq -r '"\(.summary.exact) \(.predicted_wall_s) \(.schedule.describe)"' "$TMP/budget.json")"
bar "--budget 10, one 20%-slow link" "$([[ $exact == 10 ]] && awk "BEGIN{exit !($wall < 600)}" && echo 1)" \
    "found in $exact of 10 clusters, predicted wall $(printf %.0f "$wall") s: $desc"

sim "$TMP/full.json" 1000x2 --inject link:h3:h9:0.8
wall=$(jq -r .predicted_wall_s "$TMP/full.json")
bar "full matrix" "$(awk "BEGIN{exit !($wall < 3600)}" && echo 1)" \
    "predicted wall $(printf %.0f "$wall") s: $(jq -r .schedule.describe "$TMP/full.json")"

# Not a bar: where the budget makes ports shared (k partners per round).
sim "$TMP/short.json" 1000x2 --budget 3 --clusters 10 --inject link:h3:h9:0.8 host:h17:0.8
echo "info  --budget 3, a link and a host: $(jq -r '"exact in \(.summary.exact) of 10 clusters, \(.summary.false_verdicts) false; " + .schedule.describe' "$TMP/short.json")"

/usr/bin/time -v "$BIN" --simulate 1000x2 --inject "${FAULTS[@]}" >"$TMP/one.txt" 2>"$TMP/time.txt" || true
secs=$(awk -F': ' '/Elapsed \(wall clock\)/ {n=split($2,a,":"); s=0; for(i=1;i<=n;i++) s=s*60+a[i]; print s}' "$TMP/time.txt")
rss=$(awk -F': ' '/Maximum resident set size/ {print int($2/1024)}' "$TMP/time.txt")
bar "1000x2 simulation + diagnosis" "$(awk "BEGIN{exit !($secs < 10 && $rss < 500)}" && echo 1)" \
    "$secs s, $rss MB max resident; $(grep '^# result' "$TMP/one.txt" | cut -c3-)"
# Not a bar: rank 0's share of a real 1000-host job (documents of this host's size).
/usr/bin/time -v "$BIN" --simulate 1000x2 --documents --out "$TMP/out" >"$TMP/docs.txt" 2>"$TMP/time.txt" || true
echo "info  $(grep "^# rank 0's report" "$TMP/docs.txt" | cut -c3-); whole process $(awk -F': ' '/Maximum resident set size/ {print int($2/1024)}' "$TMP/time.txt") MB max resident"
exit $failed
