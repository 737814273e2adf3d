#!/usr/bin/env bash
# How concurrent flows share one Soft-RoCE device (the numbers behind the
# simulator's model, docs/cluster-diagnosis.md): in the rig VM, K erdma-perf
# write_bw flows at once from rxe0 to rxe1 (K = 1, 2, 4), each its own
# server and client on its own port, REPS times each; then one flow with
# runs of 1 s and of 4 s, REPS times each. Prints every flow's rate, and per
# K the per-flow mean, the sum, each flow's share of the sum (fair: 1/K) and
# the spread (2 x the relative standard deviation, as --noise means it) of
# the flows within a run and of the sums across runs.
#
#   scripts/bench-flow-sharing.sh [REPS] [SECS]     (default 5 runs of 2 s)
#
# On the host it builds erdma-perf (release) and boots the rig (rig/vm.sh);
# inside the VM it runs itself with --in-vm.
set -euo pipefail
cd "$(dirname "$0")/.."

if [[ ${1:-} != --in-vm ]]; then
    REPS=${1:-5}
    SECS=${2:-2}
    cargo build --release -p erdma-bench --bin erdma-perf >&2
    BIN=$(realpath "${CARGO_TARGET_DIR:-target}/release/erdma-perf")
    exec rig/vm.sh --timeout 900 -- "$PWD/scripts/bench-flow-sharing.sh" --in-vm "$BIN" "$REPS" "$SECS"
fi

BIN=$2
REPS=$3
SECS=$4
SERVER=${ERDMA_RIG_SERVER_IP:-10.99.0.2}
PORT=18700
TMP=$(mktemp -d)

# K flows at once for SECS seconds: one line "K REP FLOW GBPS" per flow.
flows() { # K REP SECS
    local k=$1 rep=$2 secs=$3 pids=() i
    for ((i = 0; i < k; i++)); do
        "$BIN" write_bw -d rxe1 -x 1 -D "$secs" --timeout 60 -p $((PORT + i)) --json >/dev/null 2>&1 &
        pids+=($!)
    done
    sleep 0.5
    for ((i = 0; i < k; i++)); do
        "$BIN" write_bw -d rxe0 -x 1 -D "$secs" --timeout 60 -p $((PORT + i)) --json "$SERVER" \
            >"$TMP/c$i.json" 2>"$TMP/c$i.err" &
        pids+=($!)
    done
    wait "${pids[@]}" || true
    for ((i = 0; i < k; i++)); do
        local g
        g=$(jq -r '.results[-1].bw_avg_gbps // "failed"' "$TMP/c$i.json" 2>/dev/null || echo failed)
        echo "$k $rep $i $g $secs"
    done
    PORT=$((PORT + k))
}

echo "# flows K rep flow gbps secs"
{
    for k in 1 2 4; do
        for ((r = 1; r <= REPS; r++)); do flows "$k" "$r" "$SECS"; done
    done
    for secs in 1 4; do
        for ((r = 1; r <= REPS; r++)); do flows 1 "$r" "$secs"; done
    done
} | tee "$TMP/all.txt"

echo "# K secs: per-flow mean Gb/s, sum mean, share of the sum per flow (min..max), spread within a run, spread of the sums across runs (spreads: 2 x relative sd)"
awk '
$4 == "failed" { failed[$1" "$5]++; next }
{
    key = $1" "$5; run = key" "$2
    sum[run] += $4; n[run]++; flows[key] += $4; nf[key]++; sq[key] += $4 * $4
    rate[run, n[run]] = $4; runs[key] = runs[key] " " $2
}
END {
    for (run in sum) {
        split(run, p, " "); key = p[1]" "p[2]
        s = sum[run]; S[key] += s; SS[key] += s * s; R[key]++
        m = s / n[run]; v = 0
        for (i = 1; i <= n[run]; i++) {
            sh = rate[run, i] / s
            if (!(key in lo) || sh < lo[key]) lo[key] = sh
            if (!(key in hi) || sh > hi[key]) hi[key] = sh
            v += (rate[run, i] - m) ^ 2
        }
        if (n[run] > 1) { W[key] += 2 * sqrt(v / (n[run] - 1)) / m; WN[key]++ }
    }
    for (key in R) {
        mean = S[key] / R[key]
        sd = R[key] > 1 ? sqrt((SS[key] - R[key] * mean * mean) / (R[key] - 1)) : 0
        within = WN[key] ? sprintf("%.1f%%", 100 * W[key] / WN[key]) : "-"
        printf "%s: flow %.3f, sum %.3f Gb/s, share %.3f..%.3f, within a run %s, sums across runs %.1f%%, failed runs %d\n",
            key, flows[key] / nf[key], mean, lo[key], hi[key], within, 100 * 2 * sd / mean, failed[key] + 0
    }
}' "$TMP/all.txt" | sort -n
rm -rf "$TMP"
