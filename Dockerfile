# syntax=docker/dockerfile:1
# erdma-rs tools in a container: erdma-doctor, erdma-cluster, erdma-stat, erdma-perf, erdma-compare, devinfo and the
# nccl-tests work-alikes (all_reduce_perf, ...), with rdma-core and Open MPI.
#
#   docker build -t erdma-rs .                                    # Ubuntu 22.04
#   docker build -t erdma-rs --build-arg BASE_IMAGE=nvidia/cuda:12.4.1-runtime-ubuntu22.04 .
#   docker build -t erdma-rs --build-arg BASE_IMAGE=<Alibaba's eRDMA GPU image> .
#
# Binaries built elsewhere instead of the build stage (BINARIES=prebuilt): a
# build context holding only bin/ with them, built on a host with the same
# release as BASE_IMAGE (glibc, libmpi); scripts/container-check.sh does this:
#   docker build -t erdma-rs -f Dockerfile --build-arg BINARIES=prebuilt CONTEXT_WITH_bin/
#
# BASE_IMAGE is both the build and the runtime base, so the binaries need no
# newer glibc or libmpi than the runtime has. It must be Debian or Ubuntu
# (apt). CUDA and NCCL are loaded at run time: they come with a CUDA base image
# (or EXTRA_PACKAGES=libnccl2); the eRDMA provider needs rdma-core >= 43, which
# Alibaba's images carry (kept when present) and Ubuntu 22.04's (39) lacks.
ARG BASE_IMAGE=ubuntu:22.04
# Where the runtime stage takes the tools from: build (compiled here) or prebuilt.
ARG BINARIES=build

# ---- build: cargo, against the base's rdma-core headers and Open MPI
FROM ${BASE_IMAGE} AS build
ARG RUST_VERSION=1.88.0
ENV DEBIAN_FRONTEND=noninteractive
# Versions follow the base image's release; pinning them would tie the file to one base.
# hadolint ignore=DL3008
RUN apt-get update && apt-get install -y --no-install-recommends \
        build-essential ca-certificates curl pkg-config clang libclang-dev \
        libibverbs-dev librdmacm-dev libopenmpi-dev openmpi-bin \
    && rm -rf /var/lib/apt/lists/*
SHELL ["/bin/bash", "-o", "pipefail", "-c"]
# rustup-init itself (what https://sh.rustup.rs fetches), from Rust's release server.
RUN curl -sSf -o /tmp/rustup-init https://static.rust-lang.org/rustup/dist/x86_64-unknown-linux-gnu/rustup-init \
    && chmod +x /tmp/rustup-init && /tmp/rustup-init -y --profile minimal --default-toolchain "${RUST_VERSION}" \
    && rm /tmp/rustup-init
ENV PATH=/root/.cargo/bin:${PATH}
WORKDIR /src
COPY . .
RUN cargo build --release -p erdma-bench --bins \
    && mkdir -p /out \
    && for b in erdma-doctor erdma-cluster erdma-stat erdma-compare erdma-perf devinfo all_reduce_perf all_gather_perf reduce_scatter_perf \
                broadcast_perf reduce_perf alltoall_perf gather_perf scatter_perf sendrecv_perf hypercube_perf; do \
         strip -o "/out/$b" "target/release/$b"; \
       done

# ---- prebuilt: the tools from the build context's bin/ (BINARIES=prebuilt)
FROM scratch AS prebuilt
COPY bin/ /out/

# The stage named by BINARIES (only that one is built).
# hadolint ignore=DL3006
FROM ${BINARIES} AS binaries

# ---- runtime: rdma-core, Open MPI, ssh for mpirun between containers, our tools
FROM ${BASE_IMAGE} AS runtime
ARG EXTRA_PACKAGES=""
ENV DEBIAN_FRONTEND=noninteractive
SHELL ["/bin/bash", "-o", "pipefail", "-c"]
# rdma-core only where the base has none (an eRDMA image brings a newer one).
# hadolint ignore=DL3008,SC2086
RUN apt-get update \
    && rdma=(); dpkg -s ibverbs-providers >/dev/null 2>&1 || rdma=(rdma-core ibverbs-providers ibverbs-utils librdmacm1 rdmacm-utils) \
    && apt-get install -y --no-install-recommends "${rdma[@]}" \
        openmpi-bin libopenmpi3 openssh-server openssh-client iproute2 kmod ca-certificates ${EXTRA_PACKAGES} \
    && rm -rf /var/lib/apt/lists/* \
    && mkdir -p /run/sshd \
    && printf 'Port 12345\nPermitRootLogin prohibit-password\n' > /etc/ssh/sshd_config.d/erdma.conf
COPY --from=binaries /out/ /usr/local/bin/
# mpirun as root inside the container (what Alibaba's procedure does).
ENV OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
CMD ["erdma-doctor"]
