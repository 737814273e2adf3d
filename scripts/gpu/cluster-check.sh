#!/usr/bin/env bash
# erdma-cluster on a real GPU machine (one host, so the cluster is 1 or 2 ranks
# of it), with binaries built elsewhere: the GPU checks of every rank run for
# real and are gathered over Open MPI.
#
# Build (on the build machine, from the repository root):
#   scripts/gpu/cluster-check.sh --build DIR   # release erdma-cluster + this script into DIR
# Run (on the GPU machine; Open MPI's mpirun, no Rust needed):
#   bash DIR/cluster-check.sh [OUTDIR]         # OUTDIR defaults to DIR/cluster-out
#
# Writes OUTDIR/np1.txt, np2.txt, np2.json and np2-out/ (--out) and prints each
# check with PASS/FAIL; exits 0 only if every check passed.
set -u
if [[ ${1:-} == --build ]]; then
  DIR=${2:?usage: $0 --build DIR}
  set -e
  cd "$(dirname "$0")/../.."
  mkdir -p "$DIR"
  cargo build --release -p erdma-bench --bin erdma-cluster
  strip --strip-debug -o "$DIR/erdma-cluster" target/release/erdma-cluster
  cp scripts/gpu/cluster-check.sh "$DIR/"
  newest=$(objdump -T "$DIR/erdma-cluster" | grep -o 'GLIBC_[0-9.]*' | sort -uV | tail -1)
  echo "newest glibc symbol version needed: $newest"
  case "$newest" in GLIBC_2.3[5-9]* | GLIBC_2.[4-9]*) echo "too new for the GPU machine" >&2; exit 1 ;; esac
  ls -l "$DIR"
  exit 0
fi

DIR=$(cd "$(dirname "$0")" && pwd)
OUT=${1:-$DIR/cluster-out}
mkdir -p "$OUT"
C=$DIR/erdma-cluster
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
MPI=(mpirun --allow-run-as-root --oversubscribe --mca pml ob1 --mca btl self,vader,tcp)
failed=() passed=0
ok() { echo "PASS  $1"; passed=$((passed + 1)); }
bad() { echo "FAIL  $1"; failed+=("$1"); }

echo "== machine"
date -u '+%Y-%m-%d %H:%M:%S UTC'
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null | head -2
mpirun --version 2>/dev/null | head -1

echo "== one rank"
timeout 120 "${MPI[@]}" -np 1 "$C" >"$OUT/np1.txt" 2>"$OUT/np1.err"; rc1=$?
cat "$OUT/np1.txt"
# The GPU checks pass on a GPU machine; the exit status is the worst check's.
grep -qE '^fail +gpu\.(driver|nccl) ' "$OUT/np1.txt" && bad "np1: a GPU check failed" || ok "np1: GPU checks not failed"
if grep -q '^fail ' "$OUT/np1.txt"; then want=2; elif grep -q '^warn ' "$OUT/np1.txt"; then want=1; else want=0; fi
[[ $rc1 == "$want" ]] && ok "np1: exit $rc1 = the worst line" || bad "np1: exit $rc1, want $want"

echo "== two ranks on this host, --json and --out"
timeout 120 "${MPI[@]}" -np 2 "$C" --json --out "$OUT/np2-out" >"$OUT/np2.json" 2>"$OUT/np2.err"; rc2=$?
timeout 120 "${MPI[@]}" -np 2 "$C" >"$OUT/np2.txt" 2>/dev/null
cat "$OUT/np2.txt"
python3 - "$OUT/np2.json" "$rc2" <<'PY' && ok "np2: JSON holds both ranks, the GPU and NCCL found, the shared host, exit = exit_status" || bad "np2: JSON"
import json, sys
d = json.load(open(sys.argv[1]))
assert len(d["reports"]) == 2, d["hosts"]
for r in d["reports"]:
    c = {x["id"]: x for x in r["checks"]}
    assert c["gpu.driver"]["status"] == "ok", c["gpu.driver"]
    assert c["gpu.nccl"]["status"] == "ok" and c["gpu.nccl"]["details"]["version"], c["gpu.nccl"]
assert any(p["id"] == "cluster.one-rank-per-host" for p in d["across"]), d["across"]
assert d["exit_status"] == int(sys.argv[2]) >= 1, (d["exit_status"], sys.argv[2])
print("  NCCL", d["reports"][0]["checks"][[x["id"] for x in d["reports"][0]["checks"]].index("gpu.nccl")]["details"]["version"])
PY
# cluster.json, report.html and each rank's doctor report (two ranks of one
# host are two reports: doctor-<host>-rank<N>.json).
files=$(cd "$OUT/np2-out" 2>/dev/null && ls | sort | tr '\n' ' ')
[[ $files =~ ^cluster\.json\ doctor-[^\ ]+-rank0\.json\ doctor-[^\ ]+-rank1\.json\ report\.html\ $ ]] &&
  ok "np2: --out wrote $files" || bad "np2: --out wrote '$files', want cluster.json, doctor-HOST-rank{0,1}.json, report.html"

echo "== $passed passed, ${#failed[@]} failed"
[[ ${#failed[@]} == 0 ]]
