#!/usr/bin/env bash
# rig/test.sh - build everything on the host, then run ALL the rig tests in ONE
# boot of the test VM (rig/vm.sh: rxe0<->rxe1 and siw0<->siw1), with a
# pass/fail summary. What it runs:
#   host:  no binary needs libibverbs/librdmacm at load time (readelf), devinfo's
#          one-line answers and exit statuses without RDMA / without libibverbs;
#   VM:    every erdma integration test with --include-ignored (rxe and siw
#          traffic, two processes over the TCP exchange, error paths), devinfo
#          vs ibv_devinfo (-v per device, short, -l, -i) byte for byte, devinfo
#          errors and --json, the examples (readme, rdma_pingpong and async_echo over rxe and siw).
# Each VM step has its own time budget, scaled by the guest's measured speed
# (rig/guest/tests.sh), and prints its time; the VM as a whole gets only a
# backstop limit (--vm-timeout, default 5400 s, CI's own limit).
# usage: rig/test.sh [--no-siw] [--release] [--quick] [--vm-timeout SEC]
#   --quick: a smoke test (devinfo, the examples over rxe and siw, one
#            erdma-perf pair), for the edit loop; CI runs everything
# env:   CARGO (default cargo), ERDMA_RIG_LOGS (default target/rig-logs: one log
#        per step), ERDMA_RIG_CACHE (see rig/setup.sh).
# exit:  0 all passed; 1 a step failed; 126 host setup failed (see rig/setup.sh)
set -uo pipefail
cd "$(dirname "$0")/.."
ROOT=$(pwd -P)
CARGO=${CARGO:-cargo}
VMARGS=() PROFILE=() QUICK=0 VM_TIMEOUT=5400
while [[ $# -gt 0 ]]; do
  case $1 in
    --no-build) ;;  # older scripts: cargo rebuilds only what is stale anyway
    --no-siw) VMARGS+=(--no-siw) ;;
    --release) PROFILE=(--release) ;;
    --quick) QUICK=1 ;;
    --vm-timeout) VM_TIMEOUT=${2:?--vm-timeout needs seconds}; shift ;;
    -h|--help) sed -n '2,19p' "$0"; exit 0 ;;
    *) echo "rig/test.sh: unknown option $1" >&2; exit 2 ;;
  esac
  shift
done
export ERDMA_RIG_QUICK=$QUICK
VMARGS+=(--timeout "$VM_TIMEOUT")
T0=$(date +%s)
export ERDMA_RIG_LOGS=${ERDMA_RIG_LOGS:-$ROOT/target/rig-logs}
rm -rf "$ERDMA_RIG_LOGS"; mkdir -p "$ERDMA_RIG_LOGS"
hfail=0 hpass=0
hstep() {  # hstep NAME CMD...: a host-side check
  if out=$("${@:2}" 2>&1); then hpass=$((hpass+1)); printf 'PASS  %-44s\n' "$1"
  else hfail=$((hfail+1)); printf 'FAIL  %-44s\n' "$1"; echo "$out" | sed 's/^/      | /' | tail -20; fi
}

# ------------------------------------------------------------ build (host)
echo "== build"
# The erdma crate's integration tests, and the other crates' tests named rig_*;
# the same build makes the tools and the examples. Built as `cargo test
# --workspace` builds them (scripts/test.sh ran it already): the same features,
# so the same artifacts (a -p selection, or `cargo build`, which leaves the
# dev-dependencies out, unifies features differently and builds erdma-bench and
# much of the tree again: minutes, and gigabytes on CI's disk).
# Compiler errors go to stderr (json output would swallow them).
# artifacts MODE: reads cargo's JSON messages, prints compiler errors on
# stderr and the executables MODE selects: "rig" (erdma's integration tests,
# the other crates' rig_* tests), "bench" (NAME=PATH of the criterion
# benches), or a test's name.
artifacts() {
  python3 -c '
import json, sys
mode = sys.argv[1]
for line in sys.stdin:
    m = json.loads(line)
    if m.get("reason") == "compiler-message" and m["message"]["level"].startswith("error"):
        sys.stderr.write(m["message"].get("rendered") or m["message"]["message"])
    if m.get("reason") != "compiler-artifact" or not m.get("executable"):
        continue
    kind, name, pkg = m["target"]["kind"], m["target"]["name"], m["package_id"]
    if mode == "bench":
        if kind == ["bench"]:
            print(name + "=" + m["executable"])
    elif kind != ["test"]:
        continue
    elif mode != "rig":
        if name == mode:
            print(m["executable"])
    elif "/erdma#" in pkg:
        if name != "compile_fail" and not name.startswith(("cuda_", "nccl_")):
            print(m["executable"])
    elif name.startswith("rig_"):
        print(m["executable"])' "$1"
}
bins=$("$CARGO" test "${PROFILE[@]}" --workspace --no-run --message-format=json | artifacts rig) \
  || { echo "cargo test --no-run failed"; df -h "$ROOT" | tail -1; exit 1; }
# erdma's soundness test with the library's fault hooks (feature
# fault-injection, never on in a build for use: a refused deregistration no
# device gives at will), in place of the one built without them. Only erdma
# and the test are built again.
if [[ $QUICK == 0 ]]; then
  sound=$("$CARGO" test "${PROFILE[@]}" -p erdma --features fault-injection --test soundness --no-run \
            --message-format=json | artifacts soundness) && [[ -n $sound ]] \
    || { echo "cargo test -p erdma --features fault-injection --test soundness --no-run failed"; exit 1; }
  bins="$(for b in $bins; do [[ ${b##*/} == soundness-* ]] || echo "$b"; done) $sound"
fi
# The criterion benches, run once each in the VM (criterion's --test mode).
benches=
if [[ $QUICK == 0 ]]; then
  benches=$("$CARGO" test "${PROFILE[@]}" --workspace --benches --no-run --message-format=json | artifacts bench) \
    || { echo "cargo test --benches --no-run failed"; df -h "$ROOT" | tail -1; exit 1; }
fi
export ERDMA_RIG_BENCHES=$(echo $benches)
TARGET=$("$CARGO" metadata --format-version 1 --no-deps | python3 -c 'import json,sys; print(json.load(sys.stdin)["target_directory"])')
if [[ ${#PROFILE[@]} == 0 ]]; then DIR=$TARGET/debug; else DIR=$TARGET/release; fi
export ERDMA_RIG_TEST_BINS=$(echo $bins) ERDMA_RIG_DEVINFO=$DIR/devinfo ERDMA_RIG_EXAMPLES=$DIR/examples ERDMA_RIG_BENCH=$DIR
# The binaries do not change while the VM runs: read through its page cache.
export ERDMA_RIG_CACHED_DIRS=$DIR${ERDMA_RIG_CACHED_DIRS:+:$ERDMA_RIG_CACHED_DIRS}
[[ -x $ERDMA_RIG_DEVINFO && -x $ERDMA_RIG_EXAMPLES/rdma_pingpong && -n $bins ]] || { echo "binaries missing (cargo test --no-run built no devinfo or rdma_pingpong)"; exit 1; }

# ------------------------------------------------------------ host checks
echo "== host"
no_needed() {
  local f bad=0
  for f in "$ERDMA_RIG_DEVINFO" "$ERDMA_RIG_EXAMPLES/readme" "$ERDMA_RIG_EXAMPLES/rdma_pingpong" "$ERDMA_RIG_EXAMPLES/async_echo" $bins; do
    if readelf -d "$f" | grep -E 'NEEDED.*(libibverbs|librdmacm)'; then echo "$f links rdma-core"; bad=1; fi
  done
  [[ $bad == 0 ]] && echo "no NEEDED libibverbs/librdmacm in $(( 4 + $(echo $bins | wc -w) )) binaries"
  return $bad
}
devinfo_without_library() {
  local out rc
  out=$(ERDMA_LIBIBVERBS=/nonexistent/libibverbs.so.1 "$ERDMA_RIG_DEVINFO" -v 2>&1); rc=$?
  [[ $rc == 4 && $(echo "$out" | wc -l) == 1 && $out == "libibverbs missing: install rdma-core/ibverbs-providers"* ]] \
    || { echo "status $rc: $out"; return 1; }
  echo "$out"
}
devinfo_on_host() {
  local out rc
  out=$("$ERDMA_RIG_DEVINFO" 2>&1); rc=$?
  if [[ ! -e /sys/class/infiniband_verbs/abi_version ]]; then
    [[ $rc == 3 && $(echo "$out" | wc -l) == 1 && $out == "kernel without RDMA"* ]] || { echo "status $rc: $out"; return 1; }
  fi
  echo "status $rc: $out"
}
readme_on_host() {
  local out rc
  out=$("$ERDMA_RIG_EXAMPLES/readme" 2>&1); rc=$?
  [[ $rc == 0 ]] || { echo "status $rc: $out"; return 1; }
  echo "$out"
}
hstep "no load-time dependency on rdma-core" no_needed
hstep "devinfo without libibverbs: one line, exit 4" devinfo_without_library
hstep "devinfo on this host" devinfo_on_host
hstep "example readme on this host" readme_on_host

# ------------------------------------------------------------ VM (one boot)
echo "== VM: rig/vm.sh ${VMARGS[*]} (one boot for every rig test)"
T1=$(date +%s)
rig/vm.sh "${VMARGS[@]}" -- bash "$ROOT/rig/guest/tests.sh"
vrc=$?
T2=$(date +%s)
json_from_vm() {
  python3 - "$ERDMA_RIG_LOGS/devinfo.json" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))["devices"]
names = [x["hca_id"] for x in d]
assert names[:2] == ["rxe0", "rxe1"], names
rxe = d[0]
assert rxe["transport"] == "InfiniBand" and rxe["ports"][0]["state"] == "PORT_ACTIVE", rxe
assert any(g["ipv4"] == "10.99.0.1" and g["type"] == "RoCE v2" and g["netdev"] == "veth0"
           for g in rxe["ports"][0]["gids"]), rxe["ports"][0]["gids"]
assert [n for n in names if n.startswith("rxe")] == ["rxe0", "rxe1", "rxe2", "rxe3"], names
for x in d:
    if x["hca_id"].startswith("siw"):
        assert x["transport"] == "iWARP" and x["atomic_cap"] == "ATOMIC_NONE", x
print("devinfo --json from the VM:", names)
PY
}
[[ -f $ERDMA_RIG_LOGS/devinfo.json ]] && hstep "devinfo --json (from the VM) parses" json_from_vm
echo "== summary"
echo "host: $hpass passed, $hfail failed"
case $vrc in
  0) echo "VM: all steps passed" ;;
  125) echo "VM: guest RDMA setup failed" ;;
  126) echo "VM: host setup failed (rig/setup.sh)" ;;
  124) echo "VM: timed out" ;;
  *) echo "VM: $vrc step(s) failed" ;;
esac
echo "time: build+host $((T1-T0))s, VM $((T2-T1))s; logs in $ERDMA_RIG_LOGS"
[[ $hfail == 0 && $vrc == 0 ]] && { echo "RESULT: PASS"; exit 0; }
echo "RESULT: FAIL"; exit 1
