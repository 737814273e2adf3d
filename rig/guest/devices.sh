# rig/guest/devices.sh - the rig's device table (sourced by setup-rdma.sh and
# shape.sh). Four devices per driver, each on its own veth whose other end is
# a port of the driver's bridge (the "switch"): any two devices of a driver
# talk over veth -> bridge -> veth, never lo.
#   driver n=0 rxe: rxe0 veth0 10.99.0.1, rxe1 veth1 .2, rxe2 veth4 .3, rxe3 veth5 .4  (bridge br-rxe)
#   driver n=1 siw: siw0 veth2 10.99.1.1, siw1 veth3 .2, siw2 veth6 .3, siw3 veth7 .4  (bridge br-siw)
# rxe0/rxe1/siw0/siw1 keep the netdevs and addresses of the two-device rig.

# rig_device NAME: sets DRV N K ND IP MAC PORT PORTMAC BR TABLE for device
# NAME (rxe0..rxe3, siw0..siw3); status 1 for another name.
rig_device() {
  case $1 in
    rxe[0-3]) DRV=rxe N=0 ;;
    siw[0-3]) DRV=siw N=1 ;;
    *) return 1 ;;
  esac
  K=${1#"$DRV"}
  if ((K < 2)); then ND=veth$((2 * N + K)); else ND=veth$((4 + 2 * N + K - 2)); fi
  IP=10.99.$N.$((K + 1))
  MAC=02:00:0a:63:0$N:0$((K + 1))       # the IP address in hex, behind 02:00
  PORT=br-$DRV$K                         # the veth's other end, a bridge port
  PORTMAC=02:01:0a:63:0$N:0$((K + 1))
  BR=br-$DRV
  TABLE=$((100 + 10 * N + K))            # routes from IP to the other three
}
