#!/usr/bin/env bash
# Issue 35's schedule bars, on the schedules the real job runs
# (docs/cluster-diagnosis.md, "The schedules" and "The model"):
#   1. full matrix, 1000 hosts x 2 NICs: the job's predicted wall <= 2700 s
#      (45 min);
#   2. the same at 1000 x 8;
#   3. --budget 10 at 1000 x 2 with one 20%-slow link (link:h3:h9:0.8):
#      predicted <= 600 s and the link found (a failing verdict) in CLUSTERS
#      simulated clusters of their own seeds;
#   4. the same at 1000 x 8;
#   5. the job's own code on the model (`--simulate SHAPE --as-job`: the
#      job's pair stage, retest, verdicts and exit status) with --budget 10
#      and the slow link, at AS_JOB_SHAPES (default 200x2 and 100x8): the link
#      confirmed (exit 2) and the predicted wall the same as the plain
#      simulation's of that shape.
# The plain simulation (`--simulate`) takes the job's schedule, steps, run
# length and prediction (steps::JobPlan) but measures with its own loop;
# `--as-job` runs the job's driver, and at 1000 hosts its report needs about
# 22 GB (1000x2; rank 0's report memory, issue 35 item 7), hence its
# smaller shapes here: AS_JOB_SHAPES="1000x2 1000x8" where memory allows.
# Not bars, printed for comparison: the schedule before issue 35 (rails one
# after another, each direction its own run, -n given: 2 s assumed).
# Prints one line per bar (PASS/FAIL with the numbers); exits 1 when a bar
# is not met.
#
#   scripts/bench-cluster-bars.sh [CLUSTERS]
#
# Release build (built here unless BIN_DIR names a directory holding it).
set -euo pipefail

CLUSTERS=${1:-10}
AS_JOB_SHAPES=${AS_JOB_SHAPES:-200x2 100x8}
cd "$(dirname "$0")/.."
if [[ -z ${BIN_DIR:-} ]]; then
    cargo build --release -p erdma-bench --bin erdma-cluster >&2
    BIN_DIR=${CARGO_TARGET_DIR:-target}/release
fi
command -v jq >/dev/null || { echo "bench-cluster-bars.sh: needs jq (apt-get install jq)" >&2; exit 3; }
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
cp "$BIN_DIR/erdma-cluster" "$TMP/erdma-cluster"
BIN=$TMP/erdma-cluster
"$BIN" --help | grep -q -- --rails-serial || {
    echo "bench-cluster-bars.sh: $BIN_DIR/erdma-cluster has no --rails-serial: rebuild it from this checkout" >&2
    exit 3
}
failed=0
bar() { # NAME OK DETAILS
    if [[ $2 == 1 ]]; then echo "PASS  $1: $3"; else echo "FAIL  $1: $3"; failed=1; fi
}
sim() { # OUT ARGS...: the JSON document (exit 0 or 2 are results); prints the exit status
    local out=$1 rc=0; shift
    "$BIN" --simulate "$@" --json >"$out" || rc=$?
    [[ $rc == 0 || $rc == 2 ]] || { echo "bench-cluster-bars.sh: erdma-cluster --simulate $* exited $rc" >&2; exit 1; }
    echo "$rc"
}
le() { awk "BEGIN{exit !($1 <= $2)}"; }

echo "# $(date -u +%FT%TZ) $(uname -n), $(nproc) CPUs, $BIN"
for nics in 2 8; do
    sim "$TMP/full$nics.json" "1000x$nics" >/dev/null
    wall=$(jq -r .predicted_wall_s "$TMP/full$nics.json")
    bar "full matrix 1000x$nics" "$(le "$wall" 2700 && echo 1)" \
        "predicted $(printf %.0f "$wall") s: $(jq -r .schedule.describe "$TMP/full$nics.json")"
done
for nics in 2 8; do
    sim "$TMP/b$nics.json" "1000x$nics" --budget 10 --clusters "$CLUSTERS" --shuffle --inject link:h3:h9:0.8 >/dev/null
    read -r exact false wall cuts <<<"$(jq -r '"\(.summary.exact) \(.summary.false_verdicts) \(.predicted_wall_s) \(.schedule.finds_capacity_cuts)"' "$TMP/b$nics.json")"
    bar "--budget 10, 1000x$nics, one 20%-slow link" \
        "$([[ $exact == "$CLUSTERS" ]] && le "$wall" 600 && echo 1)" \
        "found in $exact of $CLUSTERS clusters (--shuffle), $false false verdicts, predicted $(printf %.0f "$wall") s, finds capacity cuts: $cuts: $(jq -r .schedule.describe "$TMP/b$nics.json")"
done
for shape in $AS_JOB_SHAPES; do
    t0=$(date +%s.%N)
    rc=$(sim "$TMP/job.json" "$shape" --as-job --budget 10 --inject link:h3:h9:0.8)
    t1=$(date +%s.%N)
    sim "$TMP/plain.json" "$shape" --budget 10 --inject link:h3:h9:0.8 >/dev/null
    read -r jw pw <<<"$(jq -r .predicted_wall_s "$TMP/job.json") $(jq -r .predicted_wall_s "$TMP/plain.json")"
    link=$(jq '[.verdicts[] | select(.kind == "link" and (.hosts | sort) == ["h3", "h9"] and .status == "fail")] | length' "$TMP/job.json")
    fails=$(jq '[.verdicts[] | select(.status == "fail")] | length' "$TMP/job.json")
    bar "--as-job $shape --budget 10, one 20%-slow link" "$([[ $rc == 2 && $link == 1 && $jw == "$pw" ]] && echo 1)" \
        "exit $rc, the link confirmed: $link, $fails failing verdict(s), predicted $jw s (plain simulation $pw s), simulated pair wall $(jq -r .pair_wall_s "$TMP/job.json") s, $(printf %.1f "$(echo "$t1 - $t0" | bc)") s to run: $(jq -r .schedule "$TMP/job.json")"
done
for nics in 2 8; do
    sim "$TMP/old$nics.json" "1000x$nics" --rails-serial --directions-serial --perf-args "-n 5000" >/dev/null
    echo "info  before (--rails-serial --directions-serial, -n given) 1000x$nics: predicted $(printf %.0f "$(jq -r .predicted_wall_s "$TMP/old$nics.json")") s: $(jq -r .schedule.describe "$TMP/old$nics.json")"
    sim "$TMP/ser$nics.json" "1000x$nics" --rails-serial >/dev/null
    echo "info  --rails-serial 1000x$nics: predicted $(printf %.0f "$(jq -r .predicted_wall_s "$TMP/ser$nics.json")") s: $(jq -r .schedule.describe "$TMP/ser$nics.json")"
done
exit $failed
