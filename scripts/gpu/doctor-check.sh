#!/usr/bin/env bash
# erdma-doctor's GPU checks (CUDA driver and GPUs, nvidia_peermem, NCCL, GPU-NIC
# affinity) and erdma-stat on a real GPU machine, with binaries built elsewhere.
#
# Build (on the build machine, from the repository root):
#   scripts/gpu/doctor-check.sh --build DIR    # release erdma-doctor, erdma-stat + this script into DIR
# Run (on the GPU machine; no Rust needed):
#   bash DIR/doctor-check.sh [OUTDIR]          # OUTDIR defaults to DIR/doctor-out
#
# Writes OUTDIR/doctor.txt (the report), doctor.json, doctor-nccl-env.txt (with
# a bad NCCL environment) and prints each check with its exit status; exits 0 only
# if every check passed. NCCL: ERDMA_NCCL_LIBRARY if set, else libnccl.so.2.
set -u
if [[ ${1:-} == --build ]]; then
  DIR=${2:?usage: $0 --build DIR}
  set -e
  cd "$(dirname "$0")/../.."
  mkdir -p "$DIR"
  cargo build --release -p erdma-bench --bin erdma-doctor --bin erdma-stat
  for b in erdma-doctor erdma-stat; do strip --strip-debug -o "$DIR/$b" "target/release/$b"; done
  cp scripts/gpu/doctor-check.sh "$DIR/"
  newest=$(for b in erdma-doctor erdma-stat; do objdump -T "$DIR/$b"; done | grep -o 'GLIBC_[0-9.]*' | sort -uV | tail -1)
  echo "newest glibc symbol version needed: $newest"
  case "$newest" in GLIBC_2.3[5-9]* | GLIBC_2.[4-9]*) echo "too new for the GPU machine" >&2; exit 1 ;; esac
  ls -l "$DIR"
  exit 0
fi

DIR=$(cd "$(dirname "$0")" && pwd)
OUT=${1:-$DIR/doctor-out}
mkdir -p "$OUT"
D=$DIR/erdma-doctor S=$DIR/erdma-stat
failed=() passed=0
ok() { echo "PASS  $1"; passed=$((passed + 1)); }
bad() { echo "FAIL  $1"; failed+=("$1"); }
line() { grep -E "^[a-z]+ +$1 " "$OUT/doctor.txt"; }

echo "== machine"
date -u '+%Y-%m-%d %H:%M:%S UTC'
uname -srm
nvidia-smi --query-gpu=index,name,pci.bus_id,driver_version --format=csv,noheader 2>&1 | head -8
lsmod 2>/dev/null | grep -E '^(nvidia_peermem|nv_peer_mem) ' || echo "(no peer-memory module in lsmod)"
ls /sys/class/infiniband 2>/dev/null | tr '\n' ' '; echo "(RDMA devices)"

echo "== erdma-doctor"
"$D" >"$OUT/doctor.txt"; rc=$?
cat "$OUT/doctor.txt"
echo "exit $rc"
"$D" --json >"$OUT/doctor.json"
[[ $rc == 0 || $rc == 1 || $rc == 2 ]] && ok "doctor completes (exit $rc)" || bad "doctor exit $rc"

# gpu.driver: ok, same GPUs as nvidia-smi (count, names, PCI addresses).
l=$(line gpu.driver)
n_smi=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU ')
if [[ $l == ok* && $l == *"$n_smi GPU"* ]]; then ok "gpu.driver: $l"; else bad "gpu.driver (nvidia-smi sees $n_smi): $l"; fi
# Compared as bus:device.function (nvidia-smi prints an 8-digit domain).
smi_pci=$(nvidia-smi --query-gpu=pci.bus_id --format=csv,noheader 2>/dev/null | sed 's/^[0-9A-Fa-f]*://' | tr 'A-F' 'a-f' | sort | tr '\n' ' ')
our_pci=$(grep -o '"gpu_pci":"[^"]*"\|"pci":"[^"]*"' "$OUT/doctor.json" | cut -d'"' -f4 | sed 's/^[0-9a-f]*://' | sort -u | tr '\n' ' ')
if [[ -n $our_pci && $smi_pci == "$our_pci" ]]; then
  ok "GPU PCI addresses match nvidia-smi: $our_pci"
else
  bad "GPU PCI addresses: nvidia-smi [$smi_pci] vs doctor [$our_pci]"
fi
# gpu.peermem: must agree with lsmod.
l=$(line gpu.peermem)
if lsmod 2>/dev/null | grep -qE '^(nvidia_peermem|nv_peer_mem) '; then
  [[ $l == ok*loaded* ]] && ok "gpu.peermem (loaded): $l" || bad "gpu.peermem, module loaded: $l"
else
  [[ $l == *"not loaded"* ]] && ok "gpu.peermem (not loaded): $l" || bad "gpu.peermem, module absent: $l"
fi
# gpu.nccl: ok with a version.
l=$(line gpu.nccl)
[[ $l == ok*"NCCL 2."* ]] && ok "gpu.nccl: $l" || bad "gpu.nccl: $l"
l=$(line gpu.affinity)
[[ $l == ok* || $l == skip* ]] && ok "gpu.affinity: $l" || bad "gpu.affinity: $l"

# A bad NCCL environment is caught here too.
NCCL_SOCKET_IFNAME=nosuch0 NCCL_IB_HCA=nosuch_0 NCCL_NET_GDR_LEVEL=sys "$D" >"$OUT/doctor-nccl-env.txt"; rc=$?
grep -E '^(warn|fail) +nccl\.' "$OUT/doctor-nccl-env.txt"
if [[ $rc == 2 ]] && grep -qE '^fail +nccl.socket-ifname ' "$OUT/doctor-nccl-env.txt" \
   && grep -qE '^warn +nccl.gdr-level ' "$OUT/doctor-nccl-env.txt"; then
  ok "bad NCCL env: exit 2"
else
  bad "bad NCCL env: exit $rc"
fi

# erdma-stat around a command: its status passes through.
"$S" --during -- sh -c 'nvidia-smi -L >/dev/null; exit 3'; rc=$?
[[ $rc == 3 ]] && ok "erdma-stat --during passes exit 3 through" || bad "erdma-stat --during: exit $rc"

echo "----"
echo "doctor-check: $passed passed, ${#failed[@]} failed (output in $OUT)"
for f in "${failed[@]}"; do echo "  failed: $f"; done
[[ ${#failed[@]} == 0 ]]
