#!/usr/bin/env bash
# Runs inside the VM: create rxe0..rxe3 (and siw0..siw3), each on its own veth,
# the veths' other ends in one bridge per driver (rig/guest/devices.sh has the
# table). Env: SIW (1/0), SIWKO (path of siw.ko), MTU. Every process start
# costs ~0.1 s under TCG, so commands are batched (ip -batch, rdma -b).
set -e
source "$(dirname "$0")/devices.sh"
if [[ $SIW == 1 ]]; then modprobe -a rdma_rxe rdma_ucm veth bridge libcrc32c; insmod "$SIWKO"
else modprobe -a rdma_rxe rdma_ucm veth bridge; fi
# rdma_cm maps an IP address to exactly one device: one veth per device.
# All addresses are local, so the kernel would route between them through
# lo, where rxe drops RoCE packets: policy routing sends traffic from a
# device's address to another's out of its own veth (table per device), and
# what comes in on a veth is delivered locally. The bridge forwards by MAC
# like a switch, so a tc qdisc on a veth (or on its bridge port, the
# traffic towards the device) shapes one device's traffic only
# (rig/guest/shape.sh).
drivers=(rxe); [[ $SIW == 1 ]] && drivers+=(siw)
for i in all default; do
  echo 0 >/proc/sys/net/ipv4/conf/$i/rp_filter; echo 1 >/proc/sys/net/ipv4/conf/$i/accept_local
done
partner=(1 0 3 2)   # the peer a connection without a source address leaves from
netdevs=()
{
  echo "link set lo up"
  echo "rule add pref 1000 lookup local"
  echo "rule del pref 0"
  for drv in "${drivers[@]}"; do
    rig_device "${drv}0"
    # A switch without STP: ports forward at once; no IPv6 addresses on the
    # bridge or its ports (no router solicitations on the wire).
    echo "link add $BR address 02:01:0a:63:0$N:00 type bridge mcast_snooping 0"
    echo "link set $BR addrgenmode none"
    echo "link set $BR up"
    for k in 0 1 2 3; do
      rig_device "$drv$k"
      netdevs+=("$ND")
      local_ip=$IP local_nd=$ND local_table=$TABLE
      # Fixed MACs: otherwise udev rewrites them and leaves a stale GID behind.
      echo "link add $ND address $MAC type veth peer name $PORT address $PORTMAC"
      echo "link set $PORT addrgenmode none"
      echo "link set $PORT master $BR mtu $MTU up"
      echo "addr add $IP/24 dev $ND"
      echo "link set $ND mtu $MTU up"
      echo "rule add pref $((10 + 4 * N + k)) iif $ND lookup local"
      echo "rule add pref $((20 + 4 * N + k)) from $IP to 10.99.$N.0/24 lookup $TABLE"
      for j in 0 1 2 3; do
        [[ $j == "$k" ]] && continue
        rig_device "$drv$j"
        echo "route add $IP/32 dev $local_nd src $local_ip table $local_table"
        # Static neighbours: the kernel's RDMA CM address resolution
        # otherwise waits up to ~20 s for its first ARP answer under TCG.
        echo "neigh replace $IP lladdr $MAC dev $local_nd nud permanent"
      done
      # No source address given (e.g. RDMA CM without one): leave from the
      # partner device (rxe0 <-> rxe1 as in the two-device rig, rxe2 <-> rxe3).
      rig_device "$drv${partner[k]}"
      echo "rule add pref $((30 + 4 * N + k)) to $local_ip iif lo lookup $TABLE"
    done
  done
} | ip -batch -
for i in "${netdevs[@]}"; do
  echo 0 >/proc/sys/net/ipv4/conf/$i/rp_filter; echo 1 >/proc/sys/net/ipv4/conf/$i/accept_local
done
{
  for drv in "${drivers[@]}"; do for k in 0 1 2 3; do
    rig_device "$drv$k"; echo "link add $drv$k type $drv netdev $ND"
  done; done
} | rdma -b -
# Wait until the IPv4-mapped RoCE v2 GIDs are in the four GID tables.
for _ in {1..100}; do
  n=0
  for k in 1 2 3 4; do
    for g in /sys/class/infiniband/rxe$((k - 1))/ports/1/gids/{0..7}; do
      read -r v <"$g" 2>/dev/null || continue
      if [[ $v == 0000:0000:0000:0000:0000:ffff:0a63:000$k ]]; then n=$((n+1)); break; fi
    done
  done
  [[ $n == 4 ]] && exit 0
  sleep 0.1
done
echo "IPv4 GIDs did not appear on rxe0..rxe3"; exit 1
