#!/usr/bin/env bash
# Stops the Slurm that scripts/slurm/start.sh DIR started (by its pid
# files) and removes DIR. munged is left running (other jobs may use it).
set -uo pipefail
DIR=${1:?usage: scripts/slurm/stop.sh DIR}
for d in slurmd slurmctld; do
  pid=$(cat "$DIR/$d.pid" 2>/dev/null) || continue
  kill "$pid" 2>/dev/null || continue
  for _ in $(seq 1 20); do kill -0 "$pid" 2>/dev/null || break; sleep 0.25; done
  kill -9 "$pid" 2>/dev/null || true
done
rm -rf "$DIR"
