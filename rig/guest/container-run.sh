#!/usr/bin/env bash
# container-run.sh - runs a command in an image's root filesystem the way
# `docker run` would with the flags given, for the rig's VM (no container
# engine there): namespaces from unshare, the root from chroot, and each of
# the eRDMA guide's flags doing what it does in Docker:
#   --network=host        the host's network namespace (else a new one with
#                         only lo, where the RDMA ports' interfaces are absent)
#   --privileged          all of the host's /dev and every capability (else a
#                         small /dev and Docker's default capabilities, which
#                         lack CAP_IPC_LOCK)
#   --device=/dev/infiniband  that directory's nodes only
#   --ipc=host            the host's /dev/shm (else a 64 MiB tmpfs, Docker's
#                         default --shm-size)
#   --ulimit memlock=-1   no locked-memory limit (else 64 KiB)
# Always: new mount, PID, IPC and UTS namespaces, /proc and /sys mounted fresh
# (sysfs then shows the network namespace's interfaces), tmpfs on /tmp and
# /run, a clean environment.
# The root filesystem is container-check.sh's export of the image (it holds
# /.dockerenv, which Docker creates in every container).
#
# usage: container-run.sh ROOTFS [FLAGS...] -- CMD [ARGS...]
# exit status: CMD's; 125 bad arguments or the container could not be set up.
set -euo pipefail
ROOT=${1:?usage: container-run.sh ROOTFS [FLAGS...] -- CMD [ARGS...]}; shift
[[ -x $ROOT/bin/sh ]] || { echo "container-run.sh: $ROOT is not a root filesystem (no bin/sh)" >&2; exit 125; }
NET=0 PRIV=0 DEV_IB=0 IPC=0 MEMLOCK=64
while [[ $# -gt 0 && $1 != -- ]]; do
  case $1 in
    --network=host) NET=1 ;;
    --privileged) PRIV=1 ;;
    --device=/dev/infiniband) DEV_IB=1 ;;
    --ipc=host) IPC=1 ;;
    --ulimit) [[ ${2:-} == memlock=-1 ]] || { echo "container-run.sh: only --ulimit memlock=-1" >&2; exit 125; }
              MEMLOCK=unlimited; shift ;;
    *) echo "container-run.sh: unknown flag $1" >&2; exit 125 ;;
  esac
  shift
done
[[ ${1:-} == -- ]] || { echo "container-run.sh: no -- CMD given" >&2; exit 125; }
shift
[[ $# -gt 0 ]] || { echo "container-run.sh: no command given" >&2; exit 125; }

# Docker's default capabilities (moby's oci/caps/defaults.go).
DEFAULT_CAPS=chown,dac_override,fsetid,fowner,mknod,net_raw,setgid,setuid,setfcap,setpcap,net_bind_service,sys_chroot,kill,audit_write
CAPS=(setpriv --inh-caps=-all --ambient-caps=-all "--bounding-set=-all,+${DEFAULT_CAPS//,/,+}" --)
[[ $PRIV == 1 ]] && CAPS=()
ns=(--mount --pid --ipc --uts --fork)
[[ $NET == 1 ]] || ns+=(--net)

# Runs inside the new namespaces: mounts the container's view, then chroot.
inner() {
  local r=$1 d; shift
  mount --make-rprivate /
  mount --bind "$r" "$r"
  mount -t proc proc "$r/proc"
  mount -t sysfs sysfs "$r/sys"
  # A writable /tmp and /run: the image's own files are read-only here (in
  # the VM the export is on the host's read-only share).
  mount -t tmpfs tmpfs "$r/tmp"
  mount -t tmpfs tmpfs "$r/run"
  if [[ $PRIV == 1 ]]; then
    mount --rbind /dev "$r/dev"
  else
    mount -t tmpfs -o mode=755,size=64k tmpfs "$r/dev"
    for d in null zero full random urandom tty; do
      touch "$r/dev/$d" && mount --bind "/dev/$d" "$r/dev/$d"
    done
    mkdir "$r/dev/shm" "$r/dev/pts"
    if [[ $DEV_IB == 1 && -d /dev/infiniband ]]; then
      mkdir "$r/dev/infiniband" && mount --bind /dev/infiniband "$r/dev/infiniband"
    fi
  fi
  if [[ $IPC == 1 ]]; then
    mount --bind /dev/shm "$r/dev/shm"
  else
    mount -t tmpfs -o size=64m shm "$r/dev/shm"
  fi
  [[ $NET == 1 ]] || ip link set lo up
  ulimit -l "$MEMLOCK"
  exec "${CAPS[@]}" chroot "$r" /usr/bin/env -i PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
    HOME=/root HOSTNAME=erdma-container OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 "$@"
}
export PRIV DEV_IB IPC NET MEMLOCK DEFAULT_CAPS
export -f inner
# CAPS travels as words (an array cannot be exported).
CAPS_WORDS="${CAPS[*]}" exec unshare "${ns[@]}" -- bash -c 'CAPS=($CAPS_WORDS); inner "$@"' inner "$ROOT" "$@"
