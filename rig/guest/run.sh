#!/usr/bin/env bash
# Runs inside the VM (started by rig/vm.sh): set up the RDMA devices, then run
# the command with the rig's environment. Argument: the per-run env file.
source "$1"
read -r T_GUEST _ </proc/uptime
# vm.sh shared each of CACHED (e.g. /usr) again as /run/erdma-cache-N: mount
# it with the page cache on and put it over its path, so that libraries and
# binaries are read from the host once, not at every process start.
for i in "${!CACHED[@]}"; do
  m=/run/erdma-cache-$i
  tag=$(awk -v m="$m" '$2 == m {print $1}' /proc/mounts)
  [[ -n $tag ]] && umount "$m" &&
    mount -t 9p -o ro,version=9p2000.L,trans=virtio,access=any,msize=524288,cache=loose "$tag" "$m" &&
    mount --bind "$m" "${CACHED[$i]}" ||
    echo "[rig] warning: ${CACHED[$i]} is read without the page cache" >&2
done
if ! SIW=$SIW SIWKO=$SIWKO MTU=$MTU bash -e "$(dirname "$0")/setup-rdma.sh" >/tmp/rig-setup.log 2>&1; then
  echo "[rig] guest RDMA setup failed:" >&2; cat /tmp/rig-setup.log >&2; exit 125
fi
gid_index() {  # gid_index DEV IPV4-HEX-SUFFIX: index of ::ffff:<ip> in DEV's GID table
  local g v
  for g in /sys/class/infiniband/$1/ports/1/gids/*; do
    read -r v <"$g" 2>/dev/null || continue
    if [[ $v == 0000:0000:0000:0000:0000:ffff:$2 ]]; then echo "${g##*/}"; return; fi
  done
}
export ERDMA_RIG=1 ERDMA_RIG_RXE="rxe0 rxe1" ERDMA_RIG_RXE_IP0=10.99.0.1 ERDMA_RIG_RXE_IP1=10.99.0.2
ERDMA_RIG_RXE_GID_INDEX=$(gid_index rxe0 0a63:0001); export ERDMA_RIG_RXE_GID_INDEX
# All four devices of each driver (ERDMA_RIG_RXE/SIW: the first two, a pair).
export ERDMA_RIG_RXE_ALL="rxe0 rxe1 rxe2 rxe3" ERDMA_RIG_RXE_IP2=10.99.0.3 ERDMA_RIG_RXE_IP3=10.99.0.4
if [[ $SIW == 1 ]]; then
  export ERDMA_RIG_SIW="siw0 siw1" ERDMA_RIG_SIW_IP0=10.99.1.1 ERDMA_RIG_SIW_IP1=10.99.1.2
  export ERDMA_RIG_SIW_ALL="siw0 siw1 siw2 siw3" ERDMA_RIG_SIW_IP2=10.99.1.3 ERDMA_RIG_SIW_IP3=10.99.1.4
else
  export ERDMA_RIG_SIW="" ERDMA_RIG_SIW_ALL=""
fi
if [[ $VERBOSE == 1 ]]; then
  read -r T_SETUP _ </proc/uptime
  echo "[rig] guest $(uname -r): uptime ${T_GUEST}s at start, ${T_SETUP}s after RDMA setup; devices: $(ls /sys/class/infiniband | tr '\n' ' ')" >&2
fi
cd "$HOST_PWD" 2>/dev/null || cd /
exec "${CMD[@]}"
