#!/usr/bin/env bash
# The host backend's all_reduce time against the MPI backend's, 2 ranks, at
# one size (default 64 MB): `--backend host` with 2 ranks in one process
# (-g 2, and -t 2) and in 2 processes over the TCP launch (RANK/WORLD_SIZE/
# MASTER_ADDR), and `mpirun -np 2 --backend mpi`, run alternately ROUNDS
# times (default 5) so that a busy machine weighs on each alike. Prints each
# configuration's median out-of-place time per iteration (us), its ratio to
# the MPI backend's median, and the MPI backend's spread against itself
# (max/min of its runs): a ratio within that spread is noise.
#
#   scripts/bench-host-backend.sh [ROUNDS] [SIZE]
#
# Release builds (built here unless BIN_DIR names a directory holding them).
set -euo pipefail

ROUNDS=${1:-5}
SIZE=${2:-64M}
ITERS=${ITERS:-20}
PORT=${PORT:-29650}
cd "$(dirname "$0")/.."

if [[ -z ${BIN_DIR:-} ]]; then
    cargo build --release -p erdma-bench --bin all_reduce_perf >&2
    BIN_DIR=${CARGO_TARGET_DIR:-target}/release
fi
BIN=$BIN_DIR/all_reduce_perf
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export OMPI_MCA_rmaps_base_oversubscribe=1 OMPI_MCA_btl_vader_single_copy_mechanism=none
ARGS=(-b "$SIZE" -e "$SIZE" -n "$ITERS" -w 5 -c 0)

# The out-of-place time (us) of the one size row of a run's output.
time_of() { awk '$1 ~ /^[0-9]+$/ && NF >= 13 { print $6 }' | tail -1; }

run_host_g() { "$BIN" --backend host -g 2 "${ARGS[@]}" | time_of; }
run_host_t() { "$BIN" --backend host -t 2 "${ARGS[@]}" | time_of; }
run_host_tcp() {
    local port=$((PORT + $1)) out
    out=$(mktemp)
    RANK=1 WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT=$port \
        "$BIN" --backend host "${ARGS[@]}" >/dev/null &
    local leaf=$!
    RANK=0 WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT=$port \
        "$BIN" --backend host "${ARGS[@]}" >"$out"
    wait "$leaf"
    time_of <"$out"
    rm -f "$out"
}
run_mpi() { mpirun -np 2 "$BIN" --backend mpi "${ARGS[@]}" | time_of; }

declare -A T
CONFIGS=(mpi host_g host_t host_tcp)
for r in $(seq 1 "$ROUNDS"); do
    for c in "${CONFIGS[@]}"; do
        case $c in
            mpi) v=$(run_mpi) ;;
            host_g) v=$(run_host_g) ;;
            host_t) v=$(run_host_t) ;;
            host_tcp) v=$(run_host_tcp "$r") ;;
        esac
        [[ -n $v ]] || { echo "bench-host-backend: $c printed no time" >&2; exit 1; }
        T[$c]="${T[$c]:-} $v"
        echo "round $r $c $v us" >&2
    done
done

median() { tr ' ' '\n' | grep -v '^$' | sort -g | awk '{ v[NR] = $1 } END { print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }
spread() { tr ' ' '\n' | grep -v '^$' | sort -g | awk 'NR == 1 { lo = $1 } { hi = $1 } END { printf "%.2f", hi / lo }'; }

mpi=$(median <<<"${T[mpi]}")
echo "all_reduce $SIZE, 2 ranks, median of $ROUNDS runs of -n $ITERS (out-of-place us per iteration):"
printf "%-34s %12s %8s\n" configuration "median us" "vs mpi"
for c in "${CONFIGS[@]}"; do
    m=$(median <<<"${T[$c]}")
    case $c in
        mpi) name="mpirun -np 2 --backend mpi" ;;
        host_g) name="--backend host -g 2" ;;
        host_t) name="--backend host -t 2" ;;
        host_tcp) name="--backend host, 2 TCP processes" ;;
    esac
    printf "%-34s %12s %8s\n" "$name" "$m" "$(awk -v a="$m" -v b="$mpi" 'BEGIN { printf "%.2f", a / b }')"
done
echo "mpi backend against itself: max/min of its runs $(spread <<<"${T[mpi]}") (runs:${T[mpi]})"
