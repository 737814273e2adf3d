#!/usr/bin/env bash
# test.sh - the project's whole test suite (what CI runs after scripts/setup.sh).
#
#   1. cargo fmt --check, the Dockerfile's lint, clippy -D warnings (default
#      features and without MPI); erdma-sys's checked-in bindings regenerated
#      and diffed; a crate on erdma built and run without headers or libclang
#   2. host tests: unit tests, MPI and TCP end-to-end runs of the collective
#      benchmarks, loader/no-device error paths (cargo test --workspace)
#   3. a build without the `mpi` feature, checked to need no libmpi/libibverbs;
#      the Dockerfile built and run (scripts/container-check.sh)
#   4. the RDMA rig: a VM with a real kernel RDMA stack (Soft-RoCE + Soft-iWARP)
#      runs every test that needs devices (rig/test.sh)
#
# usage: scripts/test.sh [--no-rig | --quick]
#   --quick: for the edit loop (a few minutes once built): fmt, clippy, the host
#            tests and a rig smoke test (rig/test.sh --quick); CI runs it all.
# Each step's time is printed at its end and in a table at the end.
# exit status: 0 all passed; otherwise the failing step's status.
set -euo pipefail
cd "$(dirname "$0")/.."
RIG=1 QUICK=0
case ${1:-} in
  --no-rig) RIG=0 ;;
  --quick) QUICK=1 ;;
  "") ;;
  *) echo "scripts/test.sh: unknown option $1 (--no-rig, --quick)" >&2; exit 2 ;;
esac
export CARGO_TERM_COLOR=never OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
# Disk: a fresh CI machine may have only ~10 GB free. No incremental caches
# (nothing is rebuilt twice here) and line tables only (backtraces keep their
# lines) take the debug build from ~13 GB to a fraction of that.
export CARGO_INCREMENTAL=0 CARGO_PROFILE_DEV_DEBUG=line-tables-only
# Open MPI in containers: no need for an rsh agent, loopback only, allow more ranks than cores.
export OMPI_MCA_rmaps_base_oversubscribe=1 OMPI_MCA_btl_vader_single_copy_mechanism=none
# setup.sh installs chromium: the report.html screenshot test must run, not skip.
export ERDMA_REQUIRE_CHROMIUM=1
# setup.sh installs slurm-wlm: bench/tests/slurm.rs must start a Slurm, not skip.
export ERDMA_REQUIRE_SLURM=1
# setup.sh installs prometheus: bench/tests/prometheus.rs must run promtool and a real server, not skip.
export ERDMA_REQUIRE_PROMETHEUS=1

# NVRTC and headers fetched by setup.sh: the -D kernels' compile test needs them.
CUDA_HDRS=${ERDMA_CUDA_HEADERS:-$HOME/.cache/erdma-rs/cuda-headers}
if [[ -f $CUDA_HDRS/.done-v3 ]]; then
  export ERDMA_NVRTC_LIBRARY=$CUDA_HDRS/nvidia/cu13/lib/libnvrtc.so.13
  export NCCL_HOME=$CUDA_HDRS/nvidia/nccl CUDA_HOME=$CUDA_HDRS/nvidia/cu13 ERDMA_REQUIRE_NVRTC=1
  export ERDMA_TEST_NCCL_HOMES=$CUDA_HDRS/nvidia/nccl:$CUDA_HDRS/nccl-2.28.9/nvidia/nccl
  # VERSION=PATH of real NCCL libraries: loaded without a GPU by the tests.
  export ERDMA_TEST_NCCL_LIBS=2.19.3=$CUDA_HDRS/nccl-2.19.3/nvidia/nccl/lib/libnccl.so.2:2.28.3=$CUDA_HDRS/nvidia/nccl/lib/libnccl.so.2:2.28.9=$CUDA_HDRS/nccl-2.28.9/nvidia/nccl/lib/libnccl.so.2
else
  echo "warning: no NVRTC/CUDA/NCCL wheels in $CUDA_HDRS (scripts/setup.sh fetches them): the -D compile test and the NCCL-library tests are skipped" >&2
fi

# NVRTC 12.0 (setup.sh): the GPU data check's committed PTX must be what it makes.
if [[ -f $CUDA_HDRS/nvrtc-12.0/.done ]]; then
  export ERDMA_PTX_NVRTC=$CUDA_HDRS/nvrtc-12.0/nvidia/cuda_nvrtc/lib/libnvrtc.so.12
fi

# step NAME: starts a step; the previous one's time goes into the table.
TIMES=() STEP= TSTEP=$SECONDS
step() {
  [[ -n $STEP ]] && TIMES+=("$(printf '%6ss  %s' $((SECONDS - TSTEP)) "$STEP")")
  STEP=$1 TSTEP=$SECONDS
  printf '\n=== %s (%s, %s free)\n' "$1" "$(date +%T)" "$(df -h --output=avail . | tail -1 | tr -d ' ')"
}
T0=$SECONDS

step "cargo fmt --check"
cargo fmt --all -- --check

step "Dockerfile lint (hadolint; no container engine here)"
bash scripts/lint-dockerfile.sh

step "cargo clippy (default features, all targets)"
cargo clippy --workspace --all-targets -- -D warnings
if [[ $QUICK == 0 ]]; then
  step "cargo clippy (erdma-bench without mpi)"
  cargo clippy -p erdma-bench --no-default-features --all-targets -- -D warnings
fi

if [[ $QUICK == 0 ]]; then
  # erdma-sys builds from checked-in bindings (no headers, no libclang): they
  # must be what bindgen makes of the system headers, and a crate depending on
  # erdma must build and run where neither is visible.
  step "bindings: regenerated and diffed; a crate on erdma built without headers or libclang"
  scripts/check-bindings.sh
  rc=0; scripts/check-headerless.sh || rc=$?
  if [[ $rc == 3 ]]; then
    STEP+=" - headerless build SKIPPED (not root: no mount namespace)"
  elif [[ $rc != 0 ]]; then
    exit "$rc"
  fi
fi

step "host tests (cargo test --workspace)"
mkdir -p target
cargo test --workspace 2>&1 | tee target/host-tests.log
if [[ $QUICK == 0 ]]; then
  step "Miri: the bookkeeping of posted requests, the region copies, a lane's requests and credits, the QP cached by a CQ (no devices)"
  if cargo +nightly miri --version >/dev/null 2>&1; then
    cargo +nightly miri test -q -p erdma --lib -- pending:: mr:: lane::tests cq::cache 2>&1 | tail -3
  else
    echo "warning: Miri is not installed (scripts/setup.sh installs it): skipped" >&2
  fi
  step "loom: a CQ's polls, a lane's dedication, dropped QPs' leftovers and the QP cached between polls, every interleaving (scripts/loom.sh)"
  scripts/loom.sh 2>&1 | tail -3
  # The criterion benches: clippy --all-targets type-checks them and the rig
  # builds and runs each once (criterion's --test mode, test profile), so no
  # release build of the whole tree here.
  step "doc tests and docs (rustdoc -D warnings)"
  RUSTDOCFLAGS="-D warnings" cargo doc --workspace --no-deps -q

  # The library as crates.io and docs.rs get it: both crates packaged and
  # their packages built (erdma against the packaged erdma-sys, through
  # cargo's local overlay: erdma-sys is not on crates.io before its first
  # release), then erdma and erdma-sys checked with the MSRV toolchain (the
  # workspace's rust-version; scripts/setup.sh installs it).
  step "packaging (cargo publish --dry-run) and the MSRV build"
  cargo publish --dry-run --allow-dirty -p erdma-sys -p erdma >target/publish.log 2>&1 ||
    { cat target/publish.log; echo "error: cargo publish --dry-run failed" >&2; exit 1; }
  grep -E '^ *(Packaged|Verifying)' target/publish.log
  # Both crates name "MIT OR Apache-2.0": each package carries both texts
  # (symlinks to the repository root's files, packaged as their contents).
  VER=$(sed -n 's/^version = "\(.*\)"/\1/p' Cargo.toml | head -1)
  # A multi-package dry run leaves its .crate files under target/package/tmp-*
  # (a single `cargo package` under target/package): take the one there is.
  for c in erdma-sys erdma; do
    crate=$(find target/package -name "$c-$VER.crate" -print -quit)
    [[ -n $crate ]] || { echo "error: cargo publish --dry-run left no $c-$VER.crate" >&2; exit 1; }
    # Listed first, then searched: `tar | grep -q` under pipefail fails when
    # grep stops reading at the match and tar gets SIGPIPE.
    listing=$(tar tzf "$crate")
    for f in LICENSE-MIT LICENSE-APACHE; do
      grep -qx "$c-$VER/$f" <<<"$listing" ||
        { echo "error: the $c package lacks $f (add it to $c/Cargo.toml's include)" >&2; exit 1; }
    done
  done
  MSRV=$(sed -n 's/^rust-version = "\(.*\)"/\1/p' Cargo.toml)
  if ! cargo "+$MSRV" --version >/dev/null 2>&1; then
    echo "error: the MSRV toolchain $MSRV is not installed (scripts/setup.sh installs it)" >&2; exit 1
  fi
  cargo "+$MSRV" check -q -p erdma-sys -p erdma --features erdma/cuda,erdma/nccl,erdma/tokio
  cargo "+$MSRV" check -q -p erdma-sys -p erdma
  STEP+=" (MSRV $MSRV)"

  # In the same target directory: only erdma-bench itself is built again
  # without the feature (the dependencies are shared; cargo keeps both
  # feature sets' artifacts, so the later builds with MPI are not redone).
  step "build without MPI (containers without Open MPI)"
  mkdir -p target/nompi
  cargo build -q -p erdma-bench --no-default-features --bin all_reduce_perf --bin devinfo
  cp target/debug/all_reduce_perf target/debug/devinfo target/nompi/
  for b in target/nompi/all_reduce_perf target/nompi/devinfo; do
    if readelf -d "$b" | grep -E 'NEEDED.*(libmpi|libibverbs|librdmacm|libcuda|libnccl)'; then
      echo "error: $b links a library that must be loaded at run time" >&2; exit 1
    fi
  done
  target/nompi/all_reduce_perf -b 8 -e 1K -f 4 --backend host -t 2 | tail -4

  # The Dockerfile built for real (buildah, no daemon) on a Debian base made
  # here, the tools run inside, its root filesystem left for the rig's
  # container steps; then a broken copy must fail with the build's error.
  # A machine that cannot build images (exit 3) skips it, saying why.
  step "container: the Dockerfile built and its tools run inside (buildah)"
  rc=0; scripts/container-check.sh 2>&1 | tee target/container-check.log || rc=$?
  if [[ $rc == 3 ]]; then
    STEP+=" - SKIPPED: $(grep -o 'cannot build images on this machine: .*' target/container-check.log)"
  elif [[ $rc != 0 ]]; then
    exit "$rc"
  else
    scripts/test-container-broken.sh
  fi
fi

if [[ $RIG == 1 ]]; then
  QUICK_ARG=(); [[ $QUICK == 1 ]] && QUICK_ARG=(--quick)
  step "RDMA rig tests (VM with Soft-RoCE and Soft-iWARP)"
  rig/test.sh "${QUICK_ARG[@]}" 2>&1 | tee target/rig-tests.log
fi
step end
# One closing line that counts everything: cargo's tests (ignored ones are the
# rig-only tests, run inside the VM above) and the rig's steps.
sum() { grep -Eo "$1" "${@:2}" 2>/dev/null | grep -Eo '[0-9]+' | awk '{s+=$1} END{print s+0}'; }
cargo_passed=$(sum 'test result: ok\. [0-9]+ passed' target/host-tests.log)
cargo_ignored=$(sum '[0-9]+ ignored' target/host-tests.log)
rig_passed=0
[[ $RIG == 1 ]] && rig_passed=$(sum '^(rig|host): [0-9]+ passed' target/rig-tests.log)
echo
echo "time per step:"; printf '  %s\n' "${TIMES[@]}"
echo "all tests passed in $((SECONDS - T0)) s: cargo test $cargo_passed, rig steps $rig_passed"
echo "summary: $((cargo_passed + rig_passed)) passed, 0 failed, $cargo_ignored skipped"
