# erdma-doctor and erdma-stat in the VM (sourced by rig/guest/tests.sh).
# Each doctor check is seen passing and failing for real: the healthy rig with
# the recommended environment, memlock lowered without CAP_IPC_LOCK (and
# ibv_reg_mr really failing), the uverbs nodes hidden in a mount namespace,
# veth0 down (restored after); the NCCL_* variables are in
# bench/tests/rig_doctor.rs. erdma-stat --during counts the pingpong's RDMA
# traffic on rxe and siw and ~nothing of a TCP transfer or an MPI run over TCP.
DOCTOR=$BENCH/erdma-doctor STAT=$BENCH/erdma-stat
# A real NCCL library (setup.sh's wheels) so that gpu.nccl runs for real; the
# other GPU checks have no GPU to look at here.
NCCL_LIB=${ERDMA_TEST_NCCL_LIBS:-}
NCCL_LIB=${NCCL_LIB%%:*}; NCCL_LIB=${NCCL_LIB#*=}
[[ -f $NCCL_LIB ]] || NCCL_LIB=$HOME/.cache/erdma-rs/cuda-headers/nvidia/nccl/lib/libnccl.so.2
if [[ -f $NCCL_LIB ]]; then DOCTOR_SKIP=gpu.driver,gpu.peermem,gpu.affinity; export ERDMA_NCCL_LIBRARY=$NCCL_LIB
else DOCTOR_SKIP=gpu; fi
export DOCTOR STAT DOCTOR_SKIP

# expect_line OUT STATUS ID [TEXT]: OUT has the line "STATUS  ID ...TEXT..."
expect_line() {
  local line
  line=$(grep -E "^$2 +$3 " <<<"$1") || { echo "no '$2 $3' line in:"; echo "$1"; return 1; }
  [[ -z ${4:-} || $line == *"$4"* ]] || { echo "'$3' line lacks '$4': $line"; return 1; }
  echo "  $line"
}
# fix_of OUT ID: the fix line printed under check ID
fix_of() { grep -A1 -E "^(warn|fail) +$2 " <<<"$1" | sed -n 's/^ *fix: //p'; }
export -f expect_line fix_of

doctor_healthy() {
  local out rc env
  out=$("$DOCTOR" --skip "$DOCTOR_SKIP"); rc=$?
  # siw is iWARP: with NCCL_IB_HCA unset NCCL would try it, the only warning.
  [[ $rc == 1 ]] || { echo "unset env: exit $rc, expected 1"; echo "$out"; return 1; }
  expect_line "$out" warn rdma.mode "siw0, siw1, siw2, siw3 iWARP" || return 1
  [[ $(grep -cE '^(warn|fail) ' <<<"$out") == 1 ]] || { echo "$out"; return 1; }
  env=$("$DOCTOR" --print-env) || return 1
  echo "recommended: $env"
  for kv in $env; do [[ $kv == NCCL_*=* ]] && export "${kv?}"; done
  out=$("$DOCTOR" --skip "$DOCTOR_SKIP"); rc=$?
  echo "$out"
  [[ $rc == 0 ]] || { echo "with the recommended env: exit $rc, expected 0"; return 1; }
  for id in rdma.library rdma.devices rdma.dev-nodes rdma.ports rdma.mode rdma.gid-index \
            limits.memlock limits.shm limits.nofile nccl.ib-hca nccl.socket-ifname; do
    expect_line "$out" ok "$id" >/dev/null || return 1
  done
  expect_line "$out" ok rdma.gid-index "= ::ffff:10.99.0.1 (RoCE v2)" || return 1
  if [[ -n ${ERDMA_NCCL_LIBRARY:-} ]]; then expect_line "$out" ok gpu.nccl "NCCL 2." || return 1; fi
  "$DOCTOR" --json --skip "$DOCTOR_SKIP" >"$LOGS/doctor.json" || return 1
  jq -e '.tool == "erdma-doctor" and .exit_status == 0 and (.checks | length) == 29
         and .recommended.env[0].name == "NCCL_IB_HCA"' "$LOGS/doctor.json" >/dev/null \
    || { echo "bad --json"; return 1; }
}

# memlock 64 KiB: root has CAP_IPC_LOCK, which lifts the limit (ok); without
# it doctor fails, and ibv_reg_mr of a 1 MiB buffer really fails.
doctor_memlock() {
  local out rc drop=(setpriv --inh-caps=-ipc_lock --ambient-caps=-ipc_lock --bounding-set=-ipc_lock --)
  ulimit -S -l 64
  out=$("$DOCTOR" --skip "$DOCTOR_SKIP")
  expect_line "$out" ok limits.memlock "64 KiB (hard 8 MiB), not enforced: this process has CAP_IPC_LOCK" || return 1
  out=$("${drop[@]}" "$DOCTOR" --skip "$DOCTOR_SKIP"); rc=$?
  [[ $rc == 2 ]] || { echo "exit $rc, expected 2"; echo "$out"; return 1; }
  expect_line "$out" fail limits.memlock "64 KiB (hard 8 MiB): at most 64 KiB" || return 1
  echo "  fix: $(fix_of "$out" limits.memlock)"
  [[ $(fix_of "$out" limits.memlock) == *"memlock=-1"* ]] || return 1
  expect_line "$out" warn container.flags "--ulimit memlock=-1 (memlock is 64 KiB)" || return 1
  # The prediction holds: registering 1 MiB fails without the capability ...
  out=$("${drop[@]}" "$E/rdma_pingpong" --connect 127.0.0.1:1 -d rxe0 -n 1 -s 1048576 2>&1); rc=$?
  echo "  pingpong without CAP_IPC_LOCK: exit $rc: $out"
  [[ $rc != 0 && $out == *ENOMEM* ]] || return 1
  # ... and works with it, under the same 64 KiB limit.
  pingpong --bind "$ERDMA_RIG_RXE_IP1:18610" -d rxe1 -n 2 -s 1048576 -- \
    --connect "$ERDMA_RIG_RXE_IP1:18610" -d rxe0 -n 2 -s 1048576
}

# The uverbs nodes hidden (what a container without --privileged/--device
# sees) and a Docker-sized /dev/shm, in a private mount namespace.
doctor_hidden_nodes() {
  local out rc
  out=$(unshare -m bash -c 'mount -t tmpfs none /dev/infiniband && mount -t tmpfs -o size=64m none /dev/shm &&
        "$DOCTOR" --skip "$DOCTOR_SKIP"'); rc=$?
  echo "$out"
  [[ $rc == 2 ]] || { echo "exit $rc, expected 2"; return 1; }
  expect_line "$out" fail rdma.dev-nodes "missing /dev/infiniband/uverbs" || return 1
  [[ $(fix_of "$out" rdma.dev-nodes) == *"--privileged (or --device=/dev/infiniband)"* ]] || return 1
  expect_line "$out" warn limits.shm "/dev/shm is 64 MiB" || return 1
  expect_line "$out" warn container.flags "--privileged (no /dev/infiniband/uverbs*), --ipc=host (/dev/shm is 64 MiB)" || return 1
  # Outside the namespace nothing changed.
  expect_line "$("$DOCTOR" --skip "$DOCTOR_SKIP")" ok rdma.dev-nodes
}

# Restores veth0 as rig/guest/setup-rdma.sh made it (its routes and
# permanent neighbours, towards rxe1..rxe3, go with the link), waits for
# rxe0's port and IPv4 GID.
veth0_restore() {
  ip link set veth0 up
  local k
  for k in 2 3 4; do
    echo "route replace 10.99.0.$k/32 dev veth0 src 10.99.0.1 table 100"
    echo "neigh replace 10.99.0.$k lladdr 02:00:0a:63:00:0$k dev veth0 nud permanent"
  done | ip -batch -
  local i
  for i in {1..100}; do
    [[ $(cat /sys/class/infiniband/rxe0/ports/1/state) == *ACTIVE* ]] &&
      grep -q 0000:0000:0000:0000:0000:ffff:0a63:0001 /sys/class/infiniband/rxe0/ports/1/gids/* 2>/dev/null && return 0
    sleep 0.1
  done
  echo "rxe0 did not come back"; return 1
}
doctor_port_down() {
  local out rc i
  trap veth0_restore RETURN
  ip link set veth0 down
  for i in {1..50}; do [[ $(cat /sys/class/infiniband/rxe0/ports/1/state) == *DOWN* ]] && break; sleep 0.1; done
  out=$("$DOCTOR" --skip "$DOCTOR_SKIP"); rc=$?
  echo "$out"
  [[ $rc == 2 ]] || { echo "exit $rc, expected 2"; return 1; }
  expect_line "$out" fail rdma.ports "rxe0:1 PORT_DOWN/DISABLED (veth0)" || return 1
  [[ $(fix_of "$out" rdma.ports) == "ip link set veth0 up"* ]] || return 1
  veth0_restore || return 1
  expect_line "$("$DOCTOR" --skip "$DOCTOR_SKIP")" ok rdma.ports || return 1
  # The wire works again: RDMA over rxe0.
  pingpong --bind "$ERDMA_RIG_RXE_IP1:18611" -d rxe1 -n 5 -s 4096 -- \
    --connect "$ERDMA_RIG_RXE_IP1:18611" -d rxe0 -n 5 -s 4096
}
export -f doctor_healthy doctor_memlock doctor_hidden_nodes veth0_restore doctor_port_down

step "doctor: healthy rig, then with its recommended env" 180 doctor_healthy
step "doctor: memlock 64 KiB without CAP_IPC_LOCK" 180 doctor_memlock
step "doctor: uverbs hidden, /dev/shm 64 MiB (unshare -m)" 120 doctor_hidden_nodes
step "doctor: veth0 down -> PORT_DOWN, restored" 180 doctor_port_down

# ---- erdma-stat
# stat_json FILE DEV PATH: a number from the --during JSON of port DEV:1
stat_val() { jq -r --arg d "$2" ".ports[] | select(.device == \$d) | $3" "$1"; }
export -f stat_val
# RDMA pingpong (n x s bytes each way) under --during: rxe counts its packets
# (no byte counters: its interface's bytes stand in, marked), siw counts
# nothing (missing, not 0); the exit status passes through.
stat_pingpong() {
  local kind=$1 j=$LOGS/stat-$1.json n=20 s=65536 out rc
  if [[ $kind == rxe ]]; then
    "$STAT" --json -d rxe0,rxe1 --during -- bash -c "pingpong --bind $ERDMA_RIG_RXE_IP1:18612 -d rxe1 -n $n -s $s -- \
      --connect $ERDMA_RIG_RXE_IP1:18612 -d rxe0 -n $n -s $s" >"$j" || return 1
    local txp rxp ndtx
    txp=$(stat_val "$j" rxe0 .rdma.tx_packets); rxp=$(stat_val "$j" rxe1 .rdma.rx_packets)
    ndtx=$(stat_val "$j" rxe0 .netdev.values.tx_bytes)
    echo "rxe0 sent $txp packets, rxe1 received $rxp; veth0 sent $ndtx bytes (interface counters)"
    # 64 KiB messages at MTU 1024: at least 64 packets per message.
    (( txp >= n * s / 1024 && rxp >= n * s / 1024 && ndtx >= n * s )) || return 1
    [[ $(stat_val "$j" rxe0 .rdma.tx_bytes) == null && $(stat_val "$j" rxe0 .netdev.includes_non_rdma_traffic) == true ]] || return 1
  else
    # The siw pingpong itself fails now and then under load (LOC_QP_OP_ERR on its
    # first request, right after RDMA CM connects; seen 2 in ~10 runs, only in full
    # rig runs, and twice in a row on a host loaded by a second VM): that is not
    # what this step tests, so up to two retries, logged.
    local port
    for port in 18613 18615 18621; do
      "$STAT" --json -d siw0,siw1 --during -- bash -c "pingpong --bind $ERDMA_RIG_SIW_IP1:$port -d siw1 -n $n -s $s -- \
        --connect $ERDMA_RIG_SIW_IP1:$port -d siw0 --src $ERDMA_RIG_SIW_IP0 -n $n -s $s" >"$j" && break
      [[ $port == 18621 ]] && return 1
      echo "RETRY: the siw pingpong failed (exit status in $j: $(jq -r .exit_status "$j")), again"
    done
    local ndtx; ndtx=$(stat_val "$j" siw0 .netdev.values.tx_bytes)
    echo "siw0: RDMA counters $(stat_val "$j" siw0 .missing | tr -d '\n '), veth2 sent $ndtx bytes (interface counters)"
    [[ $(stat_val "$j" siw0 '.missing | length') == 4 && $(stat_val "$j" siw0 .rdma.tx_packets) == null ]] || return 1
    (( ndtx >= n * s )) || return 1
  fi
  # Human output and a failing command's status.
  out=$("$STAT" -d "${kind}0" --during -- bash -c 'exit 3'); rc=$?
  [[ $rc == 3 && $out == *"exited 3 after"* ]] || { echo "status $rc: $out"; return 1; }
}
# A TCP transfer over the rxe pair's wire: the interface counts it, rxe's
# RDMA counters stay at ~0.
stat_tcp() {
  local j=$LOGS/stat-tcp.json
  "$STAT" --json -d rxe0 --during -- python3 -c '
import socket, threading
srv = socket.socket(); srv.bind(("10.99.0.2", 18614)); srv.listen(1)
def sink():
    c, _ = srv.accept()
    while c.recv(1 << 16): pass
t = threading.Thread(target=sink); t.start()
cl = socket.socket(); cl.bind(("10.99.0.1", 0)); cl.connect(("10.99.0.2", 18614))
cl.sendall(b"x" * (4 << 20)); cl.close(); t.join()' >"$j" || return 1
  local txp ndtx
  txp=$(stat_val "$j" rxe0 .rdma.tx_packets); ndtx=$(stat_val "$j" rxe0 .netdev.values.tx_bytes)
  echo "4 MiB over TCP: rxe0 sent $txp RDMA packets; veth0 sent $ndtx bytes (interface counters)"
  (( txp <= 5 && ndtx >= 4 << 20 ))
}
# The MPI backend's all_reduce with Open MPI's TCP transport over veth0: its
# bytes are on the interface, none on rxe (see docs/tools/erdma-stat.md: Open MPI's RDMA
# transports cannot run over rxe).
stat_mpi_tcp() {
  local j=$LOGS/stat-mpi-tcp.json
  OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1 \
    "$STAT" --json -d rxe0,rxe1 --during -- mpirun -np 2 --mca pml ob1 --mca btl tcp,self \
      --mca btl_tcp_if_include veth0 "$BENCH/all_reduce_perf" --backend mpi -b 64K -e 256K -f 2 -n 2 -w 1 >"$j" \
    || { cat "$j"; return 1; }
  local p0 p1 b0 b1
  p0=$(stat_val "$j" rxe0 .rdma.tx_packets); p1=$(stat_val "$j" rxe1 .rdma.tx_packets)
  b0=$(stat_val "$j" rxe0 .netdev.values.rx_bytes); b1=$(stat_val "$j" rxe1 .netdev.values.tx_bytes)
  echo "all_reduce over TCP: rxe RDMA packets $p0 + $p1; veth0 received $b0 bytes, veth1 sent $b1"
  (( p0 + p1 <= 5 && b0 >= 256 << 10 ))
}
# Live mode: three intervals, one JSON document; bad arguments.
stat_live() {
  local j=$LOGS/stat-live.json rc
  "$STAT" -d rxe0 -l -i 0.2 -c 3 --json >"$j" || return 1
  jq -e '.tool == "erdma-stat" and .mode == "live" and (.intervals | length) == 3
         and .intervals[0].ports[0].device == "rxe0" and .intervals[0].ports[0].rdma.tx_bytes == null' "$j" >/dev/null || return 1
  "$STAT" -d rxe0 -l -i 0.2 -c 1 | tee /dev/stderr | grep -q "^rxe0 " || return 1
  "$STAT" -d nosuch >/dev/null 2>&1; rc=$?; [[ $rc == 5 ]] || { echo "-d nosuch: $rc"; return 1; }
  "$STAT" -d rxe0 -p 2 >/dev/null 2>&1; rc=$?; [[ $rc == 5 ]] || { echo "-p 2: $rc"; return 1; }
  "$STAT" -d nosuch --during -- true >/dev/null 2>&1; rc=$?; [[ $rc == 125 ]] || { echo "--during -d nosuch: $rc"; return 1; }
  "$STAT" --during -- /nonexistent/cmd >/dev/null 2>&1; rc=$?; [[ $rc == 127 ]] || { echo "not found: $rc"; return 1; }
  "$STAT"
}
export -f stat_pingpong stat_tcp stat_mpi_tcp stat_live
step "stat --during: pingpong over rxe" 180 stat_pingpong rxe
[[ -n $ERDMA_RIG_SIW ]] && step "stat --during: pingpong over siw" 180 stat_pingpong siw
step "stat --during: TCP transfer (no RDMA)" 120 stat_tcp
step "stat --during: MPI all_reduce over TCP" 300 stat_mpi_tcp
step "stat -l and exit statuses" 120 stat_live
