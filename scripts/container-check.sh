#!/usr/bin/env bash
# container-check.sh - builds the project's Dockerfile for real and runs the
# tools inside the image, with no Docker daemon and no image registry:
#   1. a Debian bookworm base image: `debootstrap --variant=minbase` from
#      Debian's mirror, cached as a tarball under ~/.cache/erdma-rs/container
#      and imported with `FROM scratch` + `ADD` (bookworm is the CI host's
#      release, so host-built binaries match its glibc and libmpi);
#   2. the Dockerfile built on it with buildah (vfs storage, chroot isolation,
#      cached layers) with BASE_IMAGE=that base and BINARIES=prebuilt: the
#      host's erdma-bench binaries (stripped) are the build context's bin/;
#      --full builds the Dockerfile's own build stage instead (rustup and cargo
#      inside the image: minutes);
#   3. inside the image (buildah run): erdma-doctor --json (its container
#      check must see a container and name the docker run flags it lacks),
#      devinfo, all_reduce_perf --backend host with 2 ranks over the TCP
#      rendezvous, erdma-compare --help;
#   4. the image's root filesystem exported to ~/.cache/erdma-rs/container/rootfs,
#      which the rig's VM runs the doctor in with the RDMA devices bound in
#      (rig/guest/tests.d/container.sh).
#
# usage: scripts/container-check.sh [--dockerfile FILE] [--full [--ca-file CRT]] [--bin-dir DIR] [--no-export]
#   --dockerfile FILE  build FILE instead of ./Dockerfile (the failure test
#                      builds a broken copy)
#   --ca-file CRT      --full behind a TLS-intercepting proxy: its CA certificate
#                      (rustup and cargo download over HTTPS)
#   --no-export        do not export the root filesystem (step 4)
#   --bin-dir DIR      take the binaries from DIR (default: cargo build -p
#                      erdma-bench --bins, then $CARGO_TARGET_DIR/debug)
# env: ERDMA_DEBIAN_MIRROR (default http://deb.debian.org/debian),
#      ERDMA_CONTAINER_CACHE (default ~/.cache/erdma-rs/container)
# exit status: 0 built and every run inside passed; 1 the build failed (its
#   error is printed); 2 a run inside the image failed; 3 this machine cannot
#   build images (the reason is printed: no buildah/debootstrap, not root, no
#   mirror); 4 bad arguments.
set -euo pipefail
cd "$(dirname "$0")/.."
REPO=$PWD
DOCKERFILE=Dockerfile FULL=0 BIN_DIR= EXPORT=1 CA_FILE=
while [[ $# -gt 0 ]]; do
  case $1 in
    --dockerfile) DOCKERFILE=${2:?--dockerfile needs a file}; shift 2 ;;
    --full) FULL=1; shift ;;
    --bin-dir) BIN_DIR=${2:?--bin-dir needs a directory}; shift 2 ;;
    --no-export) EXPORT=0; shift ;;
    --ca-file) CA_FILE=$(realpath "${2:?--ca-file needs a file}"); shift 2 ;;
    -h|--help) sed -n '2,/^[^#]/{/^#/p}' "$0"; exit 0 ;;
    *) echo "container-check.sh: unknown option $1 (see --help)" >&2; exit 4 ;;
  esac
done
[[ -f $DOCKERFILE ]] || { echo "container-check.sh: no Dockerfile at $DOCKERFILE" >&2; exit 4; }
DOCKERFILE=$(realpath "$DOCKERFILE")
CACHE=${ERDMA_CONTAINER_CACHE:-$HOME/.cache/erdma-rs/container}
MIRROR=${ERDMA_DEBIAN_MIRROR:-http://deb.debian.org/debian}
BASE_TAR=$CACHE/bookworm-minbase.tar BASE_IMG=localhost/erdma-base:bookworm IMG=localhost/erdma-rs:check
T0=$SECONDS
say() { printf '[container %3ss] %s\n' $((SECONDS - T0)) "$*" >&2; }
cannot() { echo "container-check.sh: cannot build images on this machine: $*" >&2; exit 3; }

# ---- can this machine build images at all?
for t in buildah debootstrap jq; do
  command -v "$t" >/dev/null || cannot "$t is not installed (scripts/setup.sh installs it)"
done
[[ $(id -u) == 0 ]] || cannot "debootstrap and buildah's chroot isolation need root (running as $(id -un))"
mkdir -p "$CACHE"
# (--format docker below: the OCI format drops SHELL, which the Dockerfile
# needs for bash arrays.)
# One storage of our own (vfs: works on any file system, no overlay or fuse
# needed), so that nothing else's images are touched and rm -rf cleans up.
B() { buildah --root "$CACHE/storage" --runroot "$CACHE/run" --storage-driver vfs "$@"; }

# ---- 1. the base image
if [[ ! -f $BASE_TAR ]]; then
  curl -sfI -m 20 "$MIRROR/dists/bookworm/Release" >/dev/null || cannot "Debian's mirror $MIRROR is not reachable (set ERDMA_DEBIAN_MIRROR)"
  say "debootstrap --variant=minbase bookworm from $MIRROR"
  tmp=$(mktemp -d "$CACHE/debootstrap.XXXXXX")
  if ! debootstrap --variant=minbase bookworm "$tmp/rootfs" "$MIRROR" >"$CACHE/debootstrap.log" 2>&1; then
    tail -5 "$CACHE/debootstrap.log" >&2; rm -rf "$tmp"
    cannot "debootstrap failed (log: $CACHE/debootstrap.log)"
  fi
  tar -C "$tmp/rootfs" --numeric-owner -cf "$BASE_TAR.part" . && mv "$BASE_TAR.part" "$BASE_TAR"
  rm -rf "$tmp"
  B rmi -f "$BASE_IMG" >/dev/null 2>&1 || true
fi
if ! B inspect --type image "$BASE_IMG" >/dev/null 2>&1; then
  say "importing the base image $BASE_IMG"
  ctr=$(B from scratch)
  B add "$ctr" "$BASE_TAR" / >/dev/null
  B commit --rm -q "$ctr" "$BASE_IMG" >/dev/null
fi

# ---- 2. the Dockerfile
args=(--isolation chroot --format docker --layers --pull-never -f "$DOCKERFILE" -t "$IMG" --build-arg "BASE_IMAGE=$BASE_IMG")
if [[ $FULL == 1 ]]; then
  CTX=$REPO
  args+=(--build-arg BINARIES=build)
  # Behind a TLS-intercepting proxy: its CA, where ca-certificates' install
  # adds it to the bundle (RUN steps only; not in the image's layers, though
  # the bundle made while it is there keeps it).
  # --no-cache: a cached apt layer was made without it.
  [[ -z $CA_FILE ]] || args+=(--no-cache -v "$CA_FILE:/usr/local/share/ca-certificates/extra-ca.crt:ro")
else
  if [[ -z $BIN_DIR ]]; then
    say "cargo build -p erdma-bench --bins"
    cargo build -q -p erdma-bench --bins
    BIN_DIR=${CARGO_TARGET_DIR:-$REPO/target}/debug
  fi
  CTX=$(mktemp -d "$CACHE/context.XXXXXX")
  trap 'rm -rf "$CTX"' EXIT
  mkdir "$CTX/bin"
  for src in bench/src/bin/*.rs; do
    b=$(basename "$src" .rs)
    [[ -x $BIN_DIR/$b ]] || { echo "container-check.sh: no $b in $BIN_DIR" >&2; exit 4; }
    strip -o "$CTX/bin/$b" "$BIN_DIR/$b"
  done
  args+=(--build-arg BINARIES=prebuilt)
fi
say "buildah bud $(basename "$DOCKERFILE") (BINARIES=$([[ $FULL == 1 ]] && echo build || echo prebuilt))"
tb=$SECONDS
old=$(B inspect --type image -f '{{.FromImageID}}' "$IMG" 2>/dev/null || true)
# tidy: removes every container and the untagged childless images (forced:
# a failed bud can leave containers that only that removes).
tidy() {
  local id
  B rm --all >/dev/null 2>&1 || true
  for id in $(B images -a -q --filter dangling=true 2>/dev/null); do B rmi -f "$id" >/dev/null 2>&1 || true; done
}
if ! B bud "${args[@]}" "$CTX" >"$CACHE/build.log" 2>&1; then
  tidy
  echo "container-check.sh: building $DOCKERFILE failed (log: $CACHE/build.log):" >&2
  grep -E '^(error|Error|STEP|E: )|: (not found|No such file)' "$CACHE/build.log" | tail -8 >&2
  exit 1
fi
new=$(B inspect --type image -f '{{.FromImageID}}' "$IMG")
say "built $IMG in $((SECONDS - tb)) s (${new:0:12})"
# Every vfs layer and container is a full copy of the root (~500 MB): the
# working containers bud leaves behind (stages FROM another stage), the
# previous image's layers above the cached ones and the untagged images left
# without children go. (This storage is this script's alone.)
if [[ -n $old && $old != "$new" ]]; then B rmi "$old" >/dev/null 2>&1 || true; fi
tidy

# ---- 3. the tools inside
ctr=$(B from --pull-never "$IMG")
trap 'B rm "$ctr" >/dev/null 2>&1 || true; [[ ${CTX:-} == "$REPO" ]] || rm -rf "${CTX:-}"' EXIT
# inside [RUN_ARGS...] -- CMD...: CMD's output and exit status, run in the
# container. The output goes through a file in a bind-mounted directory, and
# buildah run itself always sees status 0: with chroot isolation it now and
# then drops all of a command's stdout when the command exits non-zero (1 of
# 6 doctor runs here).
OUT=$CACHE/out
inside() {
  local ra=()
  while [[ $1 != -- ]]; do ra+=("$1"); shift; done
  shift
  rm -rf "$OUT" && mkdir -p "$OUT"
  B run --isolation chroot -v "$OUT:/out" "${ra[@]}" "$ctr" -- \
    bash -c '"$@" >/out/stdout 2>/out/stderr; echo $? >/out/rc' inside "$@" >/dev/null 2>"$CACHE/run.err" \
    || { cat "$CACHE/run.err" >&2; return 125; }
  [[ -f $OUT/rc ]] || { echo "buildah run left no exit status" >&2; return 125; }
  cat "$OUT/stdout"; cat "$OUT/stderr" >&2
  return "$(<"$OUT/rc")"
}
fail() { echo "container-check.sh: inside the image: $*" >&2; exit 2; }

# doctor [RUN_ARGS...]: the flags the doctor's container.flags check says are
# missing, the doctor run with memlock 64 KiB (buildah run keeps the caller's
# limits, as docker keeps the daemon's unless --ulimit says otherwise).
doctor() {
  local rc flags
  set +e
  (ulimit -l 64 && inside "$@" -- erdma-doctor --json) >"$CACHE/doctor.json" 2>"$CACHE/doctor.err"; rc=$?
  set -e
  [[ $rc -le 2 ]] || fail "erdma-doctor --json exited $rc: $(head -3 "$CACHE/doctor.err")"
  flags=$(jq -c '.checks[] | select(.id == "container.flags")' "$CACHE/doctor.json") \
    || fail "erdma-doctor --json is not JSON (saved in $CACHE/doctor.json)"
  [[ -n $flags ]] || fail "erdma-doctor --json has no container.flags check"
  [[ -n $(jq -r '.details.kind // empty' <<<"$flags") ]] \
    || fail "the doctor does not see a container: $(jq -r .found <<<"$flags")"
  say "erdma-doctor ${*:-(plain)} (exit $rc): $(jq -r '"\(.status): \(.found)"' <<<"$flags")"
  jq -r '[.details.missing[].flag] | join(" ")' <<<"$flags"
}
# As a docker run without --ulimit memlock=-1 (64 KiB, no CAP_IPC_LOCK): the
# check must name the flag; with CAP_IPC_LOCK (what --privileged gives; the
# kernel then ignores the limit) it must not. (Raising the limit itself needs
# CAP_SYS_RESOURCE, which CI machines may lack.)
missing=$(doctor)
[[ $missing == *"--ulimit memlock=-1"* ]] || fail "with memlock 64 KiB the doctor did not ask for --ulimit memlock=-1 (missing: '$missing')"
missing=$(doctor --cap-add CAP_IPC_LOCK)
[[ $missing != *"--ulimit memlock=-1"* ]] || fail "with CAP_IPC_LOCK the doctor still asks for --ulimit memlock=-1"

set +e
out=$(inside -- devinfo 2>&1); rc=$?
set -e
# No RDMA device on a CI machine (3); in a VM with devices, 0.
[[ $rc == 0 || $rc == 3 ]] || fail "devinfo exited $rc: $out"
say "devinfo (exit $rc): $(head -1 <<<"$out")"

# Two ranks, two processes, the TCP rendezvous (no MPI), --backend host.
out=$(inside -- bash -c 'p=(); for r in 0 1; do RANK=$r WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT=29517 \
  all_reduce_perf -b 8 -e 64K -f 8 --backend host -c 1 >/tmp/rank$r.log 2>&1 & p+=($!); done
  rc=0; for pid in "${p[@]}"; do wait "$pid" || rc=$?; done
  cat /tmp/rank0.log; [[ $rc == 0 ]] || { echo "a rank exited $rc:"; cat /tmp/rank1.log; }; exit $rc' 2>&1) || fail "all_reduce_perf, 2 ranks: $out"
grep -q '# Out of bounds values : 0 OK' <<<"$out" || fail "all_reduce_perf, 2 ranks, no clean data check: $out"
say "all_reduce_perf --backend host, 2 ranks over TCP: $(grep -E '^ +[0-9]+ +[0-9]+ +float' <<<"$out" | tail -1 | awk '{print $1 " B in " $6 " us, " $9 " wrong"}')"

out=$(inside -- erdma-compare --help 2>&1) || fail "erdma-compare --help: $out"
grep -q '^Usage: erdma-compare ' <<<"$out" || fail "erdma-compare --help printed no usage: $out"
say "erdma-compare --help: $(grep -m1 '^Usage: ' <<<"$out")"

# ---- 4. the root filesystem for the rig
if [[ $EXPORT == 1 ]]; then
  mnt=$(B mount "$ctr")
  rm -rf "$CACHE/rootfs.part"
  # Hard links: instant, and nothing writes to these files (the rig's runner
  # mounts tmpfs where the container writes).
  cp -al "$mnt/." "$CACHE/rootfs.part"
  B umount "$ctr" >/dev/null
  # Docker creates /.dockerenv in every container it starts; the rig's
  # runner (rig/guest/container-run.sh) plays docker with this copy.
  touch "$CACHE/rootfs.part/.dockerenv"
  rm -rf "$CACHE/rootfs" && mv "$CACHE/rootfs.part" "$CACHE/rootfs"
  B inspect --type image -f '{{.FromImageID}}' "$IMG" >"$CACHE/rootfs.image-id"
  say "root filesystem exported to $CACHE/rootfs ($(du -sh "$CACHE/rootfs" | cut -f1))"
fi
say "ok: the image builds and its tools run inside"
