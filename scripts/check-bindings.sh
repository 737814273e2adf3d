#!/usr/bin/env bash
# check-bindings.sh - regenerates erdma-sys's FFI bindings from the system
# rdma-core headers (cargo build -p erdma-sys --features bindgen: bindgen and
# libclang, as build.rs's `generate` module does it) and compares them with
# the checked-in erdma-sys/src/generated/*.rs, byte for byte. The checked-in
# files are what every build without the feature uses, so they must be what
# the headers give: any difference fails, with the diff printed.
#
# usage: scripts/check-bindings.sh [--update]
#   --update  copy the regenerated files over the checked-in ones (after a
#             bindgen or rdma-core upgrade; commit them with the versions)
# exit status: 0 identical (or updated); 1 they differ; 2 the generation failed.
set -euo pipefail
cd "$(dirname "$0")/.."
UPDATE=0
case ${1:-} in
  --update) UPDATE=1 ;;
  "") ;;
  *) echo "check-bindings.sh: unknown option $1 (--update)" >&2; exit 2 ;;
esac
GEN=erdma-sys/src/generated
# The build script's OUT_DIR, from cargo's own report of the run.
out=$(cargo build -q -p erdma-sys --features bindgen --message-format=json |
  jq -r 'select(.reason == "build-script-executed" and (.package_id | test("erdma-sys"))) | .out_dir') ||
  { echo "check-bindings.sh: cargo build -p erdma-sys --features bindgen failed" >&2; exit 2; }
[[ -n $out && -f $out/types.rs ]] || { echo "check-bindings.sh: no generated bindings found (out_dir '$out')" >&2; exit 2; }
rc=0
for f in types.rs ibverbs.rs rdmacm.rs; do
  if [[ $UPDATE == 1 ]]; then
    cp "$out/$f" "$GEN/$f"
  elif ! diff -u "$GEN/$f" "$out/$f"; then
    rc=1
  fi
done
hdr=$(dpkg-query -W -f '${Version}' libibverbs-dev 2>/dev/null || echo unknown)
if [[ $UPDATE == 1 ]]; then
  echo "check-bindings.sh: $GEN updated from the headers of libibverbs-dev $hdr"
elif [[ $rc == 0 ]]; then
  echo "check-bindings.sh: $GEN is what bindgen makes of the system headers (libibverbs-dev $hdr): $(cat $GEN/*.rs | wc -l) lines identical"
else
  echo "check-bindings.sh: $GEN differs from the system headers (libibverbs-dev $hdr): run scripts/check-bindings.sh --update and commit" >&2
fi
exit $rc
