#!/usr/bin/env bash
# Issue 36's bars for erdma-cluster's diagnosis, in its simulator
# (erdma-cluster --simulate; docs/cluster-diagnosis.md states the model and
# the noise models), at each cluster size given (default 16, 100 and 1000
# hosts, 2 NICs each), CLUSTERS simulated clusters per case (default 100),
# the faults on hosts of each cluster's own draw (--shuffle):
#   host-0.95     one host at 0.95, noise +-3%: a host verdict, confirmed
#   link-0.90     one link at 0.90, noise +-3%: a link verdict, confirmed
#   kinds-0.90-t  a host, a NIC, a link and a direction at 0.90 each, Student t
#                 noise (5 df, scale 3%): each found with its kind
#   flap-30%      a link at half rate in 30% of its runs: a flapping verdict
#   noise-only    each noise model alone (gauss 3%, t:5:3%, drop:0.1%:0.5,
#                 round:10%, collide:5%:0.5): 0 failures; false warnings stated
# Every case also counts the verdicts of the wrong kind on an injected host
# (bar: 0). Not here: a switch of 32 hosts (no topology in the diagnosis).
# Prints a markdown table (one row per size and case, PASS/FAIL with the
# numbers); exits 1 when a bar is not met.
#
#   scripts/bench-diagnosis-bars.sh [CLUSTERS [HOSTS...]]
#
# JOBS clusters' chunks run at once (default: the CPUs). Release build
# (built here unless BIN_DIR names a directory holding erdma-cluster).
set -euo pipefail

CLUSTERS=${1:-100}
shift || true
SIZES=("$@")
[[ ${#SIZES[@]} -gt 0 ]] || SIZES=(16 100 1000)
JOBS=${JOBS:-$(nproc)}
cd "$(dirname "$0")/.."
if [[ -z ${BIN_DIR:-} ]]; then
    cargo build --release -p erdma-bench --bin erdma-cluster >&2
    BIN_DIR=${CARGO_TARGET_DIR:-target}/release
fi
command -v jq >/dev/null || { echo "bench-diagnosis-bars.sh: needs jq (apt-get install jq)" >&2; exit 3; }
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
cp "$BIN_DIR/erdma-cluster" "$TMP/erdma-cluster"
BIN=$TMP/erdma-cluster
"$BIN" --help | grep -q -- --min-effect || {
    echo "bench-diagnosis-bars.sh: $BIN_DIR/erdma-cluster has no --min-effect: rebuild it from this checkout" >&2
    exit 3
}

# sim OUT HOSTS NOISE INJECT...: CLUSTERS clusters in JOBS chunks run at
# once, merged into one summary (the per-fault counts added up).
sim() {
    local out=$1 hosts=$2 noise=$3; shift 3
    local per=$(((CLUSTERS + JOBS - 1) / JOBS)) seed=1 k=0 pids=()
    local inject=()
    [[ $# -gt 0 ]] && inject=(--inject "$@")
    # shellcheck disable=SC2086 # the noise specs are words
    while ((seed <= CLUSTERS)); do
        local n=$((CLUSTERS - seed + 1 < per ? CLUSTERS - seed + 1 : per))
        { "$BIN" --simulate "${hosts}x2" --noise $noise --clusters "$n" --seed "$seed" --shuffle \
            "${inject[@]}" --json >"$out.$k" || [[ $? == 2 ]]; } &
        pids+=($!)
        seed=$((seed + n)); k=$((k + 1))
    done
    for p in "${pids[@]}"; do wait "$p"; done
    jq -s '{clusters: (map(.summary.clusters) | add), exact: (map(.summary.exact) | add),
            false_verdicts: (map(.summary.false_verdicts) | add),
            false_failures: (map(.summary.false_failures) | add),
            wrong_kind: (map(.summary.wrong_kind) | add),
            suspects: (map(.summary.suspects) | add),
            found: (map(.summary.found_per_fault) | transpose | map(add)),
            slowest_s: (map(.clusters[].elapsed_s) | max)}' "$out".* >"$out"
}

failed=0
row() { # HOSTS CASE OK RESULT BAR
    local verdict=FAIL
    if [[ $3 == 1 ]]; then verdict=PASS; else failed=1; fi
    echo "| $1 | $2 | $4 | $5 | $verdict |"
}
# at_least FOUND...: 1 when every count is at least PCT% of CLUSTERS.
at_least() {
    local pct=$1; shift
    for f in "$@"; do ((f * 100 >= pct * CLUSTERS)) || return 0; done
    echo 1
}

echo "# $(date -u +%FT%TZ) $(uname -n), $(nproc) CPUs, $JOBS at once, $CLUSTERS clusters per case, $BIN"
echo "| hosts | case | result | bar | |"
echo "|---|---|---|---|---|"
for H in "${SIZES[@]}"; do
    f=$TMP/h$H
    sim "$f.host" "$H" 3% host:h1:0.95
    read -r found wrong false falsefail slow <<<"$(jq -r '"\(.found[0]) \(.wrong_kind) \(.false_verdicts) \(.false_failures) \(.slowest_s)"' "$f.host")"
    row "$H" "host at 0.95, gauss 3%" "$([[ $(at_least 95 "$found") == 1 && $wrong == 0 ]] && echo 1)" \
        "found and confirmed in $found; $wrong of the wrong kind; $false false verdicts ($falsefail failures); slowest cluster $(printf %.1f "$slow") s" ">= 95, 0 wrong kind"

    sim "$f.link" "$H" 3% link:h1:h2:0.9
    read -r found wrong false falsefail <<<"$(jq -r '"\(.found[0]) \(.wrong_kind) \(.false_verdicts) \(.false_failures)"' "$f.link")"
    row "$H" "link at 0.90, gauss 3%" "$([[ $(at_least 95 "$found") == 1 && $wrong == 0 ]] && echo 1)" \
        "found and confirmed in $found; $wrong of the wrong kind; $false false verdicts ($falsefail failures)" ">= 95, 0 wrong kind"

    sim "$f.kinds" "$H" t:5:3% host:h1:0.9 nic:h2:1:0.9 link:h3:h4:0.9 direction:h5:h6:0.9
    read -r fh fn fl fd wrong false falsefail <<<"$(jq -r '"\(.found | map(tostring) | join(" ")) \(.wrong_kind) \(.false_verdicts) \(.false_failures)"' "$f.kinds")"
    row "$H" "host, NIC, link, direction at 0.90, t:5:3%" "$([[ $(at_least 90 "$fh" "$fn" "$fl" "$fd") == 1 && $wrong == 0 ]] && echo 1)" \
        "found and confirmed: host $fh, NIC $fn, link $fl, direction $fd; $wrong of the wrong kind; $false false verdicts ($falsefail failures)" ">= 90 each, 0 wrong kind"

    sim "$f.flap" "$H" 3% flap:h1:h2:0.5:0.3
    read -r found wrong false falsefail <<<"$(jq -r '"\(.found[0]) \(.wrong_kind) \(.false_verdicts) \(.false_failures)"' "$f.flap")"
    row "$H" "link at 0.5 in 30% of its runs, gauss 3%" "$([[ $(at_least 90 "$found") == 1 && $wrong == 0 ]] && echo 1)" \
        "flapping, confirmed, in $found; $wrong of the wrong kind; $false false verdicts ($falsefail failures)" ">= 90, 0 wrong kind"

    for noise in "3%" "t:5:3%" "3% drop:0.1%:0.5" "3% round:10%" "3% collide:5%:0.5"; do
        sim "$f.noise" "$H" "$noise"
        read -r false falsefail suspects <<<"$(jq -r '"\(.false_verdicts) \(.false_failures) \(.suspects)"' "$f.noise")"
        row "$H" "noise only: $noise" "$([[ $falsefail == 0 ]] && echo 1)" \
            "$falsefail failures; $false false verdicts in all (failures and warnings); $suspects first-pass suspects" "0 failures"
    done
done
exit "$failed"
