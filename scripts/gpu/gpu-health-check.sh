#!/usr/bin/env bash
# erdma-doctor's GPU health checks (gpu.count, gpu.xid, gpu.ecc, gpu.remap, gpu.nvlink,
# gpu.clocks, gpu.temperature, gpu.power, gpu.persistence) on a real GPU machine: every
# value the doctor read through NVML compared with nvidia-smi -q (its XML form, -x) on the
# same GPU, NVLink with nvidia-smi nvlink, XIDs with the kernel log.
#
# Build (on the build machine, from the repository root):
#   scripts/gpu/gpu-health-check.sh --build DIR   # release erdma-doctor + this script + the comparer into DIR
# Run (on the GPU machine; no Rust needed, python3 and nvidia-smi):
#   bash DIR/gpu-health-check.sh [OUTDIR]         # OUTDIR defaults to DIR/health-out
#
# Values that move while they are read (temperature, power draw, clocks event reasons) are
# read by nvidia-smi just before and just after the doctor and agree when the doctor's lies
# between the two readings (temperature +-2 C, power +-max(10 W, 10%)); all others must be
# equal. Writes OUTDIR/doctor.json, doctor.txt, smi-before.xml, smi-after.xml, smi-q.txt,
# nvlink-*.txt, compare.txt; prints each comparison; exits 0 only if all agree.
set -u
if [[ ${1:-} == --build ]]; then
  DIR=${2:?usage: $0 --build DIR}
  set -e
  cd "$(dirname "$0")/../.."
  mkdir -p "$DIR"
  cargo build --release -p erdma-bench --bin erdma-doctor
  strip --strip-debug -o "$DIR/erdma-doctor" target/release/erdma-doctor
  cp scripts/gpu/gpu-health-check.sh scripts/gpu/gpu_health_compare.py "$DIR/"
  newest=$(objdump -T "$DIR/erdma-doctor" | grep -o 'GLIBC_[0-9.]*' | sort -uV | tail -1)
  echo "newest glibc symbol version needed: $newest"
  case "$newest" in GLIBC_2.3[5-9]* | GLIBC_2.[4-9]*) echo "too new for the GPU machine" >&2; exit 1 ;; esac
  ls -l "$DIR"
  exit 0
fi

DIR=$(cd "$(dirname "$0")" && pwd)
OUT=${1:-$DIR/health-out}
mkdir -p "$OUT"
command -v nvidia-smi >/dev/null || { echo "FAIL  nvidia-smi not found: run this on the GPU machine"; exit 1; }
command -v python3 >/dev/null || { echo "FAIL  python3 not found"; exit 1; }

echo "== machine"
date -u '+%Y-%m-%d %H:%M:%S UTC'
uname -srm
nvidia-smi --query-gpu=index,name,pci.bus_id,driver_version --format=csv,noheader 2>&1 | head -8

nvidia-smi -q -x >"$OUT/smi-before.xml"
"$DIR/erdma-doctor" --json --skip rdma,limits,nccl,container >"$OUT/doctor.json"; rc=$?
nvidia-smi -q -x >"$OUT/smi-after.xml"
nvidia-smi -q >"$OUT/smi-q.txt"
"$DIR/erdma-doctor" --skip rdma,limits,nccl,container >"$OUT/doctor.txt"
n=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU ')
for ((i = 0; i < n; i++)); do
  nvidia-smi nvlink -s -i "$i" >"$OUT/nvlink-status-$i.txt" 2>&1
  nvidia-smi nvlink -e -i "$i" >"$OUT/nvlink-errors-$i.txt" 2>&1
done
# The XIDs as the doctor reads them: journalctl -k -b when it prints something (not
# as a user without access to the journal), else dmesg.
log=$(journalctl -k -b -q --no-pager 2>/dev/null)
[[ -n $log ]] || log=$(dmesg 2>/dev/null)
grep -c 'NVRM: Xid' <<<"$log" >"$OUT/xid-count.txt"

echo "== erdma-doctor (GPU checks; exit $rc)"
cat "$OUT/doctor.txt"
echo "== compared with nvidia-smi"
python3 "$DIR/gpu_health_compare.py" "$OUT" | tee "$OUT/compare.txt"
exit "${PIPESTATUS[0]}"
