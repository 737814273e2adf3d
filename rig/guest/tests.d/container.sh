# The project's image in the VM (sourced by rig/guest/tests.sh): the root
# filesystem scripts/container-check.sh built with buildah and exported, run
# by rig/guest/container-run.sh with the eRDMA guide's docker run flags
# (--network=host --privileged --ipc=host --ulimit memlock=-1), where the
# RDMA devices exist: the doctor's device checks pass inside the container
# and a real RDMA transfer runs there; then each flag left out once, and the
# doctor's container.flags check must name that flag (and only the ones that
# are really missing). No GPU here: the gpu checks are skipped.
CROOTFS=${ERDMA_CONTAINER_ROOTFS:-$HOME/.cache/erdma-rs/container/rootfs}
CRUN=$(dirname "${BASH_SOURCE[0]}")/../container-run.sh
CRUN=$(cd "$(dirname "$CRUN")" && pwd -P)/container-run.sh
export CROOTFS CRUN LOGS

# cdoctor FLAGS...: the doctor's --json inside a container started with FLAGS;
# prints "STATUS FOUND" of container.flags and leaves the JSON in $LOGS.
cdoctor() {
  local tag=${*:-none} j rc
  tag=${tag//[^A-Za-z0-9=-]/_}; j=$LOGS/container-doctor-$tag.json
  "$CRUN" "$CROOTFS" "$@" -- erdma-doctor --json --skip gpu >"$j"; rc=$?
  [[ $rc -le 2 ]] || { echo "erdma-doctor in the container ($*): exit $rc"; return 1; }
  jq -r '.checks[] | select(.id == "container.flags") | "\(.status) \(.found)"' "$j"
}
# cstatus FLAGS... -- ID: the status of check ID in the last cdoctor's JSON for FLAGS
cstatus() {
  local tag=${*:-none}; tag=${tag%% -- *}; tag=${tag//[^A-Za-z0-9=-]/_}
  jq -r --arg id "${*: -1}" '.checks[] | select(.id == $id) | .status' "$LOGS/container-doctor-$tag.json"
}

container_full_flags() {
  local out gidx=$ERDMA_RIG_RXE_GID_INDEX guide=(--network=host --privileged --ipc=host --ulimit memlock=-1) id
  out=$(cdoctor "${guide[@]}") || return 1
  echo "all flags: container.flags $out"
  [[ $out == "ok docker container (/.dockerenv): started with the flags"* ]] || return 1
  for id in rdma.library rdma.devices rdma.dev-nodes rdma.ports rdma.gid-index limits.memlock limits.shm; do
    [[ $(cstatus "${guide[@]}" -- $id) == ok ]] || { echo "$id is not ok inside the container"; jq -c ".checks[] | select(.id == \"$id\")" "$LOGS"/container-doctor-*privileged*.json; return 1; }
  done
  echo "ok inside: rdma.library rdma.devices rdma.dev-nodes rdma.ports rdma.gid-index limits.memlock limits.shm"
  "$CRUN" "$CROOTFS" "${guide[@]}" -- devinfo -l || return 1
  # A real RDMA transfer between two processes of the container (rxe1 serves).
  "$CRUN" "$CROOTFS" "${guide[@]}" -- bash -c "
    erdma-perf write_bw --verify -d rxe1 -x $gidx -n 20 >/tmp/server.log 2>&1 & s=\$!
    for i in \$(seq 50); do grep -q 'Waiting for client' /tmp/server.log && break; sleep 0.2; done
    erdma-perf write_bw --verify -d rxe0 -x $gidx -n 20 $ERDMA_RIG_RXE_IP1 >/tmp/client.log 2>&1; c=\$?
    wait \$s; r=\$?; tail -4 /tmp/client.log; echo server:; tail -2 /tmp/server.log
    echo \"client exit \$c, server exit \$r\"; [[ \$c == 0 && \$r == 0 ]] &&
      grep -q -- '--verify: [1-9][0-9]* bytes checked' /tmp/client.log /tmp/server.log" || return 1
}

# missing FLAG WHY -- FLAGS...: with FLAGS (the guide's flags less FLAG) the
# check warns and names FLAG for WHY.
container_missing() {
  local flag=$1 why=$2 out; shift 3
  out=$(cdoctor "$@") || return 1
  echo "without $flag: container.flags $out"
  [[ $out == warn* && $out == *"$flag ($why"* ]] || { echo "  does not name $flag ($why)"; return 1; }
}
container_flags_each() {
  local fail=0
  container_missing --privileged "no /dev/infiniband/uverbs" -- --network=host --ipc=host --ulimit memlock=-1 || fail=1
  [[ $(cstatus --network=host --ipc=host --ulimit memlock=-1 -- rdma.dev-nodes) == fail ]] \
    || { echo "  rdma.dev-nodes does not fail without the device nodes"; fail=1; }
  container_missing --network=host "the RDMA interfaces" -- --privileged --ipc=host --ulimit memlock=-1 || fail=1
  container_missing --ipc=host "/dev/shm is 64 MiB" -- --network=host --privileged --ulimit memlock=-1 || fail=1
  # --privileged brings CAP_IPC_LOCK (the limit is then not enforced): the
  # memlock case is the device passed alone, as --device=/dev/infiniband does.
  container_missing "--ulimit memlock=-1" "memlock is 64 KiB" -- --network=host --device=/dev/infiniband --ipc=host || fail=1
  [[ $(cstatus --network=host --device=/dev/infiniband --ipc=host -- limits.memlock) == fail ]] \
    || { echo "  limits.memlock does not fail at 64 KiB without CAP_IPC_LOCK"; fail=1; }
  return $fail
}
export -f cdoctor cstatus container_full_flags container_missing container_flags_each

if [[ -x $CROOTFS/usr/local/bin/erdma-doctor ]]; then
  step "container: the guide's docker run flags, doctor + RDMA inside" 240 container_full_flags
  step "container: each flag left out is named by the doctor" 240 container_flags_each
else
  echo "SKIP  container steps: no image root filesystem at $CROOTFS (scripts/container-check.sh builds and exports it)"
fi
