#!/usr/bin/env bash
# Runs inside the VM: create rxe0<->rxe1 (and siw0<->siw1) on veth pairs.
# Env: SIW (1/0), SIWKO (path of siw.ko), MTU. Every process start costs ~0.1 s
# under TCG, so commands are batched (ip -batch, rdma -b).
set -e
if [[ $SIW == 1 ]]; then modprobe -a rdma_rxe rdma_ucm veth libcrc32c; insmod "$SIWKO"
else modprobe -a rdma_rxe rdma_ucm veth; fi
# One veth pair per driver (rdma_cm maps an IP address to exactly one device):
#   veth0 10.99.0.1 <-> veth1 10.99.0.2 : rxe0 / rxe1
#   veth2 10.99.1.1 <-> veth3 10.99.1.2 : siw0 / siw1
# Policy routing sends traffic between the two local addresses of a pair across
# the veth wire instead of lo (rxe drops RoCE packets that arrive on lo).
pairs=(0); [[ $SIW == 1 ]] && pairs+=(1)
for i in all default; do
  echo 0 >/proc/sys/net/ipv4/conf/$i/rp_filter; echo 1 >/proc/sys/net/ipv4/conf/$i/accept_local
done
{
  echo "link set lo up"
  echo "rule add pref 1000 lookup local"
  echo "rule del pref 0"
  for n in "${pairs[@]}"; do
    a=veth$((2*n)) b=veth$((2*n+1)) ipa=10.99.$n.1 ipb=10.99.$n.2 ta=$((100+2*n)) tb=$((101+2*n))
    # Fixed MACs: otherwise udev rewrites them and leaves a stale GID behind.
    echo "link add $a address 02:00:0a:63:0$n:01 type veth peer name $b address 02:00:0a:63:0$n:02"
    echo "addr add $ipa/24 dev $a"
    echo "addr add $ipb/24 dev $b"
    echo "link set $a mtu $MTU up"
    echo "link set $b mtu $MTU up"
    echo "rule add pref $((10+10*n)) iif $a lookup local"
    echo "rule add pref $((11+10*n)) iif $b lookup local"
    echo "route add $ipb/32 dev $a src $ipa table $ta"
    echo "route add $ipa/32 dev $b src $ipb table $tb"
    echo "rule add pref $((12+10*n)) from $ipa to $ipb lookup $ta"
    echo "rule add pref $((13+10*n)) from $ipb to $ipa lookup $tb"
    echo "rule add pref $((14+10*n)) to $ipb iif lo lookup $ta"
    echo "rule add pref $((15+10*n)) to $ipa iif lo lookup $tb"
    # Static neighbours: the kernel's RDMA CM address resolution otherwise
    # waits up to ~20 s for its first ARP answer under TCG.
    echo "neigh replace $ipb lladdr 02:00:0a:63:0$n:02 dev $a nud permanent"
    echo "neigh replace $ipa lladdr 02:00:0a:63:0$n:01 dev $b nud permanent"
  done
} | ip -batch -
for n in "${pairs[@]}"; do for i in veth$((2*n)) veth$((2*n+1)); do
  echo 0 >/proc/sys/net/ipv4/conf/$i/rp_filter; echo 1 >/proc/sys/net/ipv4/conf/$i/accept_local
done; done
{ echo "link add rxe0 type rxe netdev veth0"; echo "link add rxe1 type rxe netdev veth1"
  if [[ $SIW == 1 ]]; then echo "link add siw0 type siw netdev veth2"; echo "link add siw1 type siw netdev veth3"; fi
} | rdma -b -
# Wait until the IPv4-mapped RoCE v2 GIDs are in both GID tables.
for _ in {1..100}; do
  n=0
  for d in rxe0:0001 rxe1:0002; do
    for g in /sys/class/infiniband/${d%:*}/ports/1/gids/{0..7}; do
      read -r v <"$g" 2>/dev/null || continue
      if [[ $v == 0000:0000:0000:0000:0000:ffff:0a63:${d#*:} ]]; then n=$((n+1)); break; fi
    done
  done
  [[ $n == 2 ]] && exit 0
  sleep 0.1
done
echo "IPv4 GIDs did not appear on rxe0/rxe1"; exit 1
