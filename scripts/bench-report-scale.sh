#!/usr/bin/env bash
# report.html at scale (issue 35, item 6): for each host count,
#   1. rank 0's share of a real job in the simulator (erdma-cluster
#      --simulate N --inject host:h3:0.9 --documents --out DIR): the
#      documents gathered, grouped, judged, cluster.json, the text and
#      report.html written; wall time and peak RSS (/usr/bin/time -v), the
#      size of report.html, Chromium's time to paint its first screen;
#   2. the renderer alone (the ignored test report_at_scale of
#      bench/tests/report_html_chromium.rs, release build): its time, the
#      memory it adds to the document, the page's size, Chromium's paint.
# Bars: report.html <= 20 MB, rendering <= 60 s and <= 2 GB.
#
#   scripts/bench-report-scale.sh [HOSTS...]      (default: 1000 10000)
#
# 10,000 hosts needs about 14 GB and 15 minutes for step 1 on a 2-core VM
# (the matrices, cluster.json of 2.8 GB and the text report, not the page);
# SKIP_SIMULATOR=1 runs step 2 only. Results: docs/perf/2026-12-06-report-scale.md.
set -euo pipefail

cd "$(dirname "$0")/.."
HOSTS=("$@")
[[ ${#HOSTS[@]} -gt 0 ]] || HOSTS=(1000 10000)
command -v chromium >/dev/null || { echo "bench-report-scale.sh: needs chromium (scripts/setup.sh installs it)" >&2; exit 3; }
[[ -x /usr/bin/time ]] || { echo "bench-report-scale.sh: needs /usr/bin/time (apt-get install time)" >&2; exit 3; }
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
if [[ -z ${SKIP_SIMULATOR:-} ]]; then
    cargo build --release -p erdma-bench --bin erdma-cluster >&2
    cp "${CARGO_TARGET_DIR:-target}/release/erdma-cluster" "$TMP/erdma-cluster"
fi

paint() { # PAGE -> seconds to the first screen's screenshot
    local t0 t1
    t0=$(date +%s.%N)
    timeout 600 chromium --headless --no-sandbox --disable-gpu --disable-dev-shm-usage \
        --hide-scrollbars --no-first-run --window-size=1200,900 \
        --user-data-dir="$TMP/profile" --screenshot="$TMP/shot.png" "file://$1" >/dev/null 2>&1 || true
    t1=$(date +%s.%N)
    [[ -s $TMP/shot.png ]] || { echo "no-screenshot"; return; }
    echo "$t1 - $t0" | bc
    rm -f "$TMP/shot.png"
}

for n in "${HOSTS[@]}"; do
    if [[ -z ${SKIP_SIMULATOR:-} ]]; then
        out=$TMP/out-$n
        /usr/bin/time -v "$TMP/erdma-cluster" --simulate "$n" --inject host:h3:0.9 \
            --documents --out "$out" >"$TMP/sim.txt" 2>"$TMP/time.txt" || true
        report_s=$(grep -o 'written under --out in [0-9.]* s' "$TMP/sim.txt" | grep -o '[0-9.]* s' || echo "?")
        wall=$(grep 'Elapsed (wall clock)' "$TMP/time.txt" | awk '{print $NF}')
        rss=$(grep 'Maximum resident' "$TMP/time.txt" | awk '{printf "%.0f", $NF/1024}')
        size=$(stat -c %s "$out/report.html" 2>/dev/null || echo 0)
        echo "simulator hosts=$n report.html=$size bytes rank0_report=$report_s process_wall=$wall peak_rss=${rss}MB paint_s=$(paint "$out/report.html")"
        rm -rf "$out"
    fi
    ERDMA_REPORT_HOSTS=$n ERDMA_REPORT_OUT=$TMP/render-$n \
        cargo test --release -p erdma-bench --test report_html_chromium -- \
        --ignored --exact report_at_scale --nocapture 2>/dev/null | grep '^report_at_scale'
    rm -rf "$TMP/render-$n"
done
