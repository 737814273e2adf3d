#!/usr/bin/env bash
# rig/vm.sh - run a command inside a throw-away VM with a real kernel RDMA stack.
#
# Boots Debian's kernel (linux-image-amd64) with virtme-ng, the host root shared
# read-only over 9p (host tools and host-built binaries run unchanged; writes
# outside the current directory land in a guest overlay), the current directory
# shared read-write. Inside, before the command runs:
#   rxe0..rxe3 (veth0 10.99.0.1, veth1 .2, veth4 .3, veth5 .4)  Soft-RoCE v2 (rdma_rxe)
#   siw0..siw3 (veth2 10.99.1.1, veth3 .2, veth6 .3, veth7 .4)  Soft-iWARP (siw.ko, built by rig/setup.sh)
# Each veth's other end is a port of its driver's bridge; policy routing sends
# traffic between two devices' addresses over that "wire", so the devices
# behave like four hosts on a switch (rig/README.md).
#
# usage: rig/vm.sh [options] [--] CMD [ARGS...]
#   --no-siw        skip Soft-iWARP (no siw.ko build needed)
#   --mtu N         veth MTU (default 1500: rxe active_mtu 1024; 9000 gives 4096)
#   --mem SIZE      guest memory (default 1G)     --cpus N   guest CPUs (default: all)
#   --timeout SEC   kill the VM after SEC seconds (default 1200)
#   --verbose       boot log and timings on stderr
# The first word that is not an option starts the command, so the script works
# as a cargo runner:
#   CARGO_TARGET_X86_64_UNKNOWN_LINUX_GNU_RUNNER=$PWD/rig/vm.sh cargo test -- --include-ignored
# (one VM boot per test binary; rig/test.sh runs everything in one boot).
#
# Guest environment: ERDMA_RIG=1, ERDMA_RIG_RXE="rxe0 rxe1", ERDMA_RIG_RXE_IP0/IP1,
#   ERDMA_RIG_RXE_GID_INDEX (IPv4-mapped RoCE v2 GID of rxe0..rxe3),
#   ERDMA_RIG_SIW="siw0 siw1" (empty with --no-siw), ERDMA_RIG_SIW_IP0/IP1;
#   ERDMA_RIG_RXE_ALL / ERDMA_RIG_SIW_ALL (all four), ERDMA_RIG_*_IP2/IP3.
# Host environment forwarded: PATH HOME RUST* CARGO* ERDMA_* and $ERDMA_RIG_PASSENV (names).
# env: ERDMA_RIG_CACHE (setup cache, see rig/setup.sh), ERDMA_RIG_ACCEL=auto|kvm|tcg,
#   ERDMA_RIG_CACHED_DIRS (host dirs that do not change while the VM runs, read
#   through the guest's page cache; /usr always).
#   ERDMA_RIG_NICE (the VM's niceness as root, default -10; 0: unchanged).
# Exit status: the command's; 125 guest RDMA setup failed; 124 timeout;
#   126 host setup failed; other values come from virtme-ng/qemu.
set -euo pipefail

RIG=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd -P)
CACHE=${ERDMA_RIG_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/erdma-rig}
SIW=1 MTU=1500 MEM=1G CPUS=$(nproc) TIMEOUT=1200 VERBOSE=0
ACCEL=${ERDMA_RIG_ACCEL:-auto}
while [[ $# -gt 0 ]]; do
  case $1 in
    --no-siw) SIW=0; shift ;;
    --mtu) MTU=$2; shift 2 ;;
    --mem) MEM=$2; shift 2 ;;
    --cpus) CPUS=$2; shift 2 ;;
    --timeout) TIMEOUT=$2; shift 2 ;;
    --verbose|-v) VERBOSE=1; shift ;;
    -h|--help) sed -n '2,34p' "$0"; exit 0 ;;
    --) shift; break ;;
    -*) echo "rig/vm.sh: unknown option $1 (see --help)" >&2; exit 2 ;;
    *) break ;;
  esac
done
[[ $# -gt 0 ]] || { echo "rig/vm.sh: no command given (see --help)" >&2; exit 2; }

T0=$(date +%s.%N)
log() { if [[ $VERBOSE == 1 ]]; then echo "[rig] $*" >&2; fi; }

setup_args=(--quiet); [[ $SIW == 1 ]] || setup_args+=(--no-siw)
KVER=$("$RIG/setup.sh" "${setup_args[@]}") || exit 126
KIMG=$CACHE/vmlinux-$KVER

if [[ $ACCEL == auto ]]; then
  # Real VMX/SVM shows in cpuinfo; a PVM-backed /dev/kvm cannot boot a stock kernel.
  if [[ -w /dev/kvm ]] && grep -qwE 'vmx|svm' /proc/cpuinfo; then ACCEL=kvm; else ACCEL=tcg; fi
fi

# Per-run parameters for the guest (the cache is visible inside: host root is shared).
RUNDIR=$(mktemp -d "$CACHE/run.XXXXXX")
trap 'rm -rf "$RUNDIR"' EXIT
HOST_PWD=$(pwd -P)
{
  for v in PATH HOME $(compgen -e | grep -E '^(RUST|CARGO|ERDMA_)' || true) ${ERDMA_RIG_PASSENV:-}; do
    if [[ -n ${!v+x} ]]; then printf 'export %s=%q\n' "$v" "${!v}"; fi
  done
  printf 'SIW=%q\nSIWKO=%q\nHOST_PWD=%q\nVERBOSE=%q\nMTU=%q\n' "$SIW" "$CACHE/siw-$KVER/siw.ko" "$HOST_PWD" "$VERBOSE" "$MTU"
  printf 'CMD=('; printf '%q ' "$@"; printf ')\n'
} >"$RUNDIR/env"

# Skip udev coldplug of hardware the VM does not need (seconds under TCG).
BLACKLIST=kvm,kvm_amd,kvm_intel,irqbypass,powernow_k8,ahci,libahci,libata,scsi_mod,sr_mod,cdrom
BLACKLIST+=,iTCO_wdt,iTCO_vendor_support,i6300esb,watchdog,pcspkr,i2c_i801,i2c_smbus,lpc_ich
BLACKLIST+=,psmouse,serio_raw,evdev,button,qemu_fw_cfg,aesni_intel,ghash_clmulni_intel
BLACKLIST+=,crct10dif_pclmul,sha1_ssse3,sha256_ssse3,sha512_ssse3
VNG_ARGS=(--run "$KIMG" --force-9p --cpus "$CPUS" --memory "$MEM" --append "module_blacklist=$BLACKLIST")
[[ $(id -u) == 0 ]] || VNG_ARGS+=(--user root)
[[ $ACCEL == tcg ]] && VNG_ARGS+=(--disable-kvm)
if [[ $HOST_PWD != / && $HOST_PWD != *[[:space:]]* ]]; then   # vng does not quote paths
  VNG_ARGS+=(--rwdir "$HOST_PWD" --cwd "$HOST_PWD")
fi
# Read-only host directories shared a second time to be mounted with the
# guest's page cache on (run.sh remounts each with cache=loose and binds it
# over its path): virtme-ng mounts the host root without cache, so every
# process start read its libraries from the host again (devinfo -l: 1.4 s ->
# 0.3 s, mpirun -np 2 true: 3.9 s -> 2 s in TCG). Nothing in them may change
# while the VM runs. ERDMA_RIG_CACHED_DIRS: more of them, colon-separated
# (rig/test.sh adds the build's binaries).
CACHED=()
IFS=: read -r -a extra <<<"${ERDMA_RIG_CACHED_DIRS:-}"
for d in /usr "${extra[@]}"; do
  [[ -d $d && $d != *[[:space:]=]* ]] || continue
  VNG_ARGS+=(--rodir "/run/erdma-cache-${#CACHED[@]}=$d"); CACHED+=("$(cd "$d" && pwd -P)")
done
printf 'CACHED=(' >>"$RUNDIR/env"; printf '%q ' "${CACHED[@]}" >>"$RUNDIR/env"; printf ')\n' >>"$RUNDIR/env"
[[ $VERBOSE == 1 ]] || VNG_ARGS+=(--quiet)
VNG_ARGS+=(--exec "bash $RIG/guest/run.sh $RUNDIR/env")
log "kernel $KVER, accel $ACCEL, cpus $CPUS, mem $MEM, siw $SIW, mtu $MTU"

# virtme-ng's qemu reopens /proc/self/fd/1 and 2: a regular file there would be
# truncated, so always hand it pipes (FIFOs drained by cat). Killing this script
# (TERM/INT/HUP) stops the VM: timeout passes the signal to its process group.
mkfifo "$RUNDIR/out" "$RUNDIR/err"
cat <"$RUNDIR/out" & cat_out=$!
cat <"$RUNDIR/err" >&2 & cat_err=$!
# The rig emulates a network, and its speed must not follow the host's other
# load: under TCG the devices are CPU-bound software, so a busy host (load
# 13 from builds beside it) made healthy pairs slow round by round (0.01 to
# 0.06 Gb/s in one job) and brought them down to a tc-slowed NIC's rate,
# where no diagnosis can tell them apart. As root the VM runs at a higher
# priority (nice -10; ERDMA_RIG_NICE sets it, 0 leaves it as it is).
NICE=${ERDMA_RIG_NICE:--10}
PRIO=()
[[ $NICE != 0 && $(id -u) == 0 ]] && PRIO=(nice -n "$NICE")
PATH="$CACHE/venv/bin:$PATH" "${PRIO[@]}" timeout --kill-after=15 "$TIMEOUT" "$CACHE/venv/bin/vng" "${VNG_ARGS[@]}" \
  </dev/null >"$RUNDIR/out" 2>"$RUNDIR/err" &
vm=$!
trap 'kill -TERM $vm 2>/dev/null; wait $vm 2>/dev/null; rm -rf "$RUNDIR"; exit 143' TERM INT HUP
set +e
wait $vm
rc=$?
wait $cat_out $cat_err
set -e
log "exit status $rc after $(awk -v a="$T0" -v b="$(date +%s.%N)" 'BEGIN{printf "%.1f", b-a}')s"
exit "$rc"
