#!/usr/bin/env bash
# rig/guest/shape.sh - slow part of the rig's wire with tc, inside the VM (as
# root), for fault tests; undo it with `clear`.
#   shape.sh link DEV_A DEV_B RATE   traffic between two devices only, both
#       directions: on each one's veth an htb class at RATE for packets to the
#       other's address (u32 filter on the destination); the rest unshaped
#   shape.sh delay DEV_A DEV_B DELAY traffic between two devices only, both
#       directions, delayed by DELAY each way (netem under an htb class
#       matched as `link` does); the rest undelayed
#   shape.sh nic DEV RATE            everything DEV sends (tbf on its veth) and
#       receives (tbf on its bridge port, which carries only DEV's traffic)
#   shape.sh clear                   remove every qdisc this script adds
#   shape.sh show                    tc -s qdisc of the rig's veths and ports
# RATE and DELAY in tc's units (e.g. 30mbit, 5ms). Devices: rig/guest/devices.sh.
# Exit status: 0 done; 1 tc failed; 2 bad arguments.
set -euo pipefail
source "$(dirname "$0")/devices.sh"
usage() { sed -n '2,16p' "$0" >&2; exit 2; }
dev() { rig_device "$1" || { echo "shape.sh: no rig device $1 (rxe0..rxe3, siw0..siw3)" >&2; exit 2; }; }
# The queues hold what rxe has in flight (64 skbs per QP) and a TCP window,
# so that slowing throttles the senders instead of dropping their packets.
LIMIT=4mb
all_netdevs() {
  local d
  for d in rxe0 rxe1 rxe2 rxe3 siw0 siw1 siw2 siw3; do
    rig_device "$d"; [[ -e /sys/class/net/$ND ]] && echo "$ND $PORT"
  done
}
case ${1:-} in
  link)
    [[ $# == 4 ]] || usage
    dev "$2"; nd_a=$ND ip_a=$IP; dev "$3"; nd_b=$ND ip_b=$IP; rate=$4
    [[ $nd_a != "$nd_b" && $2 == "${3%[0-3]}"* ]] || { echo "shape.sh: $2 and $3 are not two devices of one driver" >&2; exit 2; }
    {
      for side in "$nd_a $ip_b" "$nd_b $ip_a"; do
        read -r nd to <<<"$side"
        # default 0: unclassified packets leave unshaped (htb's direct queue).
        echo "qdisc replace dev $nd root handle 1: htb"
        echo "class add dev $nd parent 1: classid 1:1 htb rate $rate ceil $rate burst 32k"
        echo "qdisc add dev $nd parent 1:1 handle 10: bfifo limit $LIMIT"
        echo "filter add dev $nd parent 1: protocol ip prio 1 u32 match ip dst $to/32 flowid 1:1"
      done
    } | tc -batch -
    ;;
  delay)
    [[ $# == 4 ]] || usage
    dev "$2"; nd_a=$ND ip_a=$IP; dev "$3"; nd_b=$ND ip_b=$IP; delay=$4
    [[ $nd_a != "$nd_b" && $2 == "${3%[0-3]}"* ]] || { echo "shape.sh: $2 and $3 are not two devices of one driver" >&2; exit 2; }
    {
      for side in "$nd_a $ip_b" "$nd_b $ip_a"; do
        read -r nd to <<<"$side"
        echo "qdisc replace dev $nd root handle 1: htb"
        echo "class add dev $nd parent 1: classid 1:1 htb rate 10gbit ceil 10gbit burst 32k"
        echo "qdisc add dev $nd parent 1:1 handle 10: netem delay $delay limit 10000"
        echo "filter add dev $nd parent 1: protocol ip prio 1 u32 match ip dst $to/32 flowid 1:1"
      done
    } | tc -batch -
    ;;
  nic)
    [[ $# == 3 ]] || usage
    dev "$2"; rate=$3
    {
      echo "qdisc replace dev $ND root tbf rate $rate burst 32k limit $LIMIT"
      echo "qdisc replace dev $PORT root tbf rate $rate burst 32k limit $LIMIT"
    } | tc -batch -
    ;;
  clear)
    [[ $# == 1 ]] || usage
    # Deleting a root qdisc that is not there fails: -force goes on.
    all_netdevs | while read -r nd port; do
      echo "qdisc del dev $nd root"; echo "qdisc del dev $port root"
    done | tc -force -batch - 2>/dev/null || true
    ;;
  show)
    all_netdevs | while read -r nd port; do tc -s qdisc show dev "$nd"; tc -s qdisc show dev "$port"; done
    ;;
  *) usage ;;
esac
