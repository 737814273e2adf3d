#!/usr/bin/env bash
# Regenerates bench/src/nccltests/backend/nccl/verifiable.ptx, the GPU data
# generator and check of the NCCL backend, from verifiable.cu beside it, with
# NVRTC 12.0 for compute_50 (PTX ISA 8.0: drivers of CUDA 12.0 and newer load
# it on every GPU NCCL supports). Run it after editing verifiable.cu and
# commit both; CI's unit test fails while they differ.
#
#   scripts/gen-verifiable-ptx.sh
#
# NVRTC 12.0 comes from scripts/setup.sh (or name its libnvrtc.so.12 in
# ERDMA_PTX_NVRTC).
set -euo pipefail
cd "$(dirname "$0")/.."
CUDA_HDRS=${ERDMA_CUDA_HEADERS:-$HOME/.cache/erdma-rs/cuda-headers}
export ERDMA_PTX_NVRTC=${ERDMA_PTX_NVRTC:-$CUDA_HDRS/nvrtc-12.0/nvidia/cuda_nvrtc/lib/libnvrtc.so.12}
[[ -f $ERDMA_PTX_NVRTC ]] || { echo "no NVRTC 12.0 at $ERDMA_PTX_NVRTC: run scripts/setup.sh" >&2; exit 1; }
ERDMA_BLESS_PTX=1 cargo test -q -p erdma-bench --lib -- --exact \
  nccltests::backend::nccl::gpudata::tests::committed_ptx_is_what_the_kernel_source_compiles_to
cargo test -q -p erdma-bench --lib -- --exact \
  nccltests::backend::nccl::gpudata::tests::committed_ptx_is_what_the_kernel_source_compiles_to
git status --short bench/src/nccltests/backend/nccl/verifiable.ptx
