#!/usr/bin/env bash
# rig/setup.sh - prepare this host to run the erdma test VM (idempotent).
#
# Installs what rig/vm.sh needs on Debian 12 / Ubuntu (as root, once):
#   apt:  qemu-system-x86, busybox-static (virtme-ng initramfs), a Debian kernel
#         with rdma_rxe (linux-image-amd64),
#         rdma-core + ibverbs-utils + perftest + rdmacm-utils (run in the guest
#         from the shared host root), python3-venv
#   pip:  virtme-ng (pinned) into $ERDMA_RIG_CACHE/venv
#   siw:  Debian does not build Soft-iWARP (CONFIG_RDMA_SIW unset): siw.ko is
#         built out of tree from linux-source-<series> against
#         linux-headers-<kernel>, once per kernel, into the cache.
#   vmlinux: the kernel image is decompressed once (boots ~3 s faster).
# Then prints the chosen kernel. Safe to run concurrently (flock).
#
# usage: rig/setup.sh [--no-siw] [--quiet]
# env:   ERDMA_RIG_CACHE (default ${XDG_CACHE_HOME:-$HOME/.cache}/erdma-rig),
#        ERDMA_RIG_KERNEL (kernel version to boot; default: newest with rdma_rxe)
# exit:  0 ready; 1 a step failed (message names the log to read)
set -euo pipefail

CACHE=${ERDMA_RIG_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/erdma-rig}
SIW=1 QUIET=0
VNG_VERSION=1.42
for a in "$@"; do
  case $a in
    --no-siw) SIW=0 ;;
    --quiet) QUIET=1 ;;
    -h|--help) sed -n '2,19p' "$0"; exit 0 ;;
    *) echo "rig/setup.sh: unknown option $a" >&2; exit 1 ;;
  esac
done
say() { [[ $QUIET == 1 ]] || echo "[rig] $*" >&2; }
die() { echo "[rig] setup failed: $*" >&2; exit 1; }
as_root() { [[ $(id -u) == 0 ]] || die "$1 needs root once (run: sudo rig/setup.sh)"; }

mkdir -p "$CACHE"
exec 8>"$CACHE/.setup.lock"
flock 8

apt_install() {  # apt_install LOG PKG...
  local log=$1; shift
  as_root "apt-get install $*"
  say "apt-get install $*"
  export DEBIAN_FRONTEND=noninteractive
  if ! apt-get install -y --no-install-recommends "$@" >>"$log" 2>&1; then
    apt-get update >>"$log" 2>&1 || true
    apt-get install -y --no-install-recommends "$@" >>"$log" 2>&1 || die "apt-get install $* (see $log)"
  fi
}

# ---------------------------------------------------------------- packages
PKGS=(qemu-system-x86 linux-image-amd64 rdma-core ibverbs-utils ibverbs-providers
      libibverbs1 librdmacm1 perftest rdmacm-utils iproute2 kmod busybox-static
      python3 python3-venv)
missing=()
for p in "${PKGS[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
done
[[ ${#missing[@]} == 0 ]] || apt_install "$CACHE/apt.log" "${missing[@]}"

# ---------------------------------------------------------------- virtme-ng
VNG=$CACHE/venv/bin/vng
if [[ ! -x $VNG ]] || ! "$CACHE/venv/bin/pip" show -q virtme-ng 2>/dev/null | grep -q "^Version: $VNG_VERSION$" 2>/dev/null; then
  if [[ ! -x $VNG ]]; then
    say "pip install virtme-ng==$VNG_VERSION into $CACHE/venv"
    rm -rf "$CACHE/venv"
    python3 -m venv "$CACHE/venv" || die "python3 -m venv (install python3-venv)"
    "$CACHE/venv/bin/pip" install -q "virtme-ng==$VNG_VERSION" >"$CACHE/pip.log" 2>&1 \
      || die "pip install virtme-ng (see $CACHE/pip.log)"
  fi
fi

# ---------------------------------------------------------------- kernel
KVER=${ERDMA_RIG_KERNEL:-}
if [[ -z $KVER ]]; then
  for d in $(ls -1d /lib/modules/*/ 2>/dev/null | sort -V -r); do
    v=$(basename "$d")
    if [[ -f /boot/vmlinuz-$v ]] && find "$d/kernel/drivers/infiniband/sw/rxe" -name 'rdma_rxe.ko*' 2>/dev/null | grep -q .; then
      KVER=$v; break
    fi
  done
fi
[[ -n $KVER && -f /boot/vmlinuz-$KVER ]] || die "no /boot/vmlinuz-* with an rdma_rxe module (apt-get install linux-image-amd64)"

KIMG=$CACHE/vmlinux-$KVER
if [[ ! -s $KIMG ]]; then
  [[ -r /boot/vmlinuz-$KVER ]] || die "/boot/vmlinuz-$KVER is not readable (Debian: mode 0600): run rig/setup.sh once as root"
  say "extracting $KIMG"
  python3 - "/boot/vmlinuz-$KVER" "$KIMG.tmp" <<'PY' && mv "$KIMG.tmp" "$KIMG" || { rm -f "$KIMG.tmp"; cp "/boot/vmlinuz-$KVER" "$KIMG"; }
import lzma, zlib, sys
data = open(sys.argv[1], 'rb').read()
out = None
for magic, dec in ((b'\xfd7zXZ\x00', lambda d: lzma.LZMADecompressor().decompress(d)),
                   (b'\x1f\x8b\x08\x00', lambda d: zlib.decompressobj(16 + zlib.MAX_WBITS).decompress(d))):
    i = data.find(magic)
    if i >= 0:
        try:
            out = dec(data[i:])
        except Exception:
            out = None
        if out:
            break
if not out or out[:4] != b'\x7fELF':
    sys.exit(1)
open(sys.argv[2], 'wb').write(out)
PY
fi

# ---------------------------------------------------------------- siw.ko
SIWKO=$CACHE/siw-$KVER/siw.ko
if [[ $SIW == 1 && ! -f $SIWKO ]]; then
  say "building siw.ko for $KVER (one time)"
  log=$CACHE/siw-build.log; : >"$log"
  series=$(echo "$KVER" | grep -oE '^[0-9]+\.[0-9]+')
  [[ -d /lib/modules/$KVER/build ]] || apt_install "$log" "linux-headers-$KVER" make gcc xz-utils
  command -v make >/dev/null && command -v gcc >/dev/null || apt_install "$log" make gcc xz-utils
  b=$CACHE/siw-$KVER.build; rm -rf "$b"; mkdir -p "$b"
  # The source of the running kernel's version when apt still has it.
  kpkg=$(dpkg-query -W -f='${Version}' "linux-image-$KVER" 2>/dev/null || true)
  ( cd "$b" && { apt-get download "linux-source-$series=$kpkg" || apt-get download "linux-source-$series"; } ) >>"$log" 2>&1 \
    || die "apt-get download linux-source-$series (see $log)"
  dpkg-deb --fsys-tarfile "$b"/linux-source-"$series"_*.deb \
    | tar -x -C "$b" "./usr/src/linux-source-$series.tar.xz" >>"$log" 2>&1 || die "unpack linux-source (see $log)"
  tar -xJf "$b/usr/src/linux-source-$series.tar.xz" -C "$b" "linux-source-$series/drivers/infiniband/sw/siw" >>"$log" 2>&1 \
    || die "extract siw source (see $log)"
  src=$b/linux-source-$series/drivers/infiniband/sw/siw
  make -C "/lib/modules/$KVER/build" M="$src" CONFIG_RDMA_SIW=m -j"$(nproc)" modules >>"$log" 2>&1 \
    || die "siw build (see $log)"
  mkdir -p "$(dirname "$SIWKO")"; cp "$src/siw.ko" "$SIWKO"
  rm -rf "$b"
fi
echo "$KVER"
