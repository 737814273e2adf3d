#!/usr/bin/env bash
# test-container-broken.sh - the container check must fail, with the build's
# own error, when the Dockerfile is broken: a copy of the Dockerfile with one
# package name misspelt in the runtime stage's apt-get line is built by
# scripts/container-check.sh, which must exit 1 (the build failed) and print
# apt's "Unable to locate package" line for that name.
# usage: scripts/test-container-broken.sh
# exit status: 0 the failure was caught as it should be; 1 it was not;
#   3 this machine cannot build images (container-check.sh says why).
set -uo pipefail
cd "$(dirname "$0")/.."
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
grep -q ' openmpi-bin libopenmpi3 ' Dockerfile || { echo "test-container-broken.sh: the runtime apt-get line changed; update this test" >&2; exit 1; }
sed 's/ openmpi-bin libopenmpi3 / openmpi-bim libopenmpi3 /' Dockerfile >"$tmp/Dockerfile"
out=$(scripts/container-check.sh --dockerfile "$tmp/Dockerfile" --no-export "$@" 2>&1); rc=$?
echo "$out" | tail -6
[[ $rc == 3 ]] && exit 3
if [[ $rc != 1 ]]; then echo "FAIL: a broken Dockerfile gave exit $rc, expected 1 (the build failed)"; exit 1; fi
if ! grep -q 'Unable to locate package openmpi-bim' <<<"$out"; then
  echo "FAIL: exit 1 but the build's error (Unable to locate package openmpi-bim) is not shown"; exit 1
fi
echo "ok: the broken Dockerfile failed the check with the build's error"
