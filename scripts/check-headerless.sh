#!/usr/bin/env bash
# check-headerless.sh - a new crate that depends on erdma (path dependency),
# built and run where neither the rdma-core development headers nor libclang
# can be seen: what a user's machine, a minimal container or docs.rs has.
#
# In a private mount namespace (unshare -m; nothing outside it changes) the
# headers' directories (/usr/include/infiniband, /usr/include/rdma) and the
# LLVM directories are covered by empty tmpfs mounts, each libclang file by
# /dev/null, and LIBCLANG_PATH points nowhere; the script checks that they are
# gone before building. Then:
#   1. cargo build of the crate and its example: must succeed and print
#      nothing at all on stderr (no warning, no build-script output);
#      erdma and erdma-sys are always compiled (and erdma-sys's build script
#      run) inside the namespace; only third-party dependencies are cached
#      (target/headerless);
#   2. the example run: on a host without RDMA devices it must say so with the
#      reason erdma gives ("no RDMA device: kernel without RDMA: ...") and exit 0; in the rig (devices) it
#      prints the first device's name.
#
# usage: scripts/check-headerless.sh
# exit status: 0 passed; 1 the build failed or was not silent; 2 the example
#   failed; 3 this machine cannot make the namespace (not root, no unshare).
set -euo pipefail
cd "$(dirname "$0")/.."
REPO=$PWD
if [[ ${1:-} != --inside ]]; then
  command -v unshare >/dev/null || { echo "check-headerless.sh: cannot run here: no unshare" >&2; exit 3; }
  [[ $(id -u) == 0 ]] || { echo "check-headerless.sh: cannot run here: a mount namespace needs root (running as $(id -un))" >&2; exit 3; }
  exec unshare -m --propagation private "$0" --inside
fi

# ---- inside the namespace: hide the headers and libclang
for d in /usr/include/infiniband /usr/include/rdma /usr/lib/llvm-*; do
  [[ -d $d ]] && mount -t tmpfs -o ro,size=4k none "$d"
done
for f in /usr/lib/*/libclang*.so* /usr/lib/libclang*.so* /usr/local/lib/libclang*.so*; do
  [[ -f $f && ! -L $f ]] && mount --bind /dev/null "$f"
done
export LIBCLANG_PATH=/nonexistent
unset ERDMA_SYS_INCLUDE
if [[ -e /usr/include/infiniband/verbs.h || -e /usr/include/rdma/rdma_cma.h ]]; then
  echo "check-headerless.sh: the rdma-core headers are still visible" >&2; exit 1
fi
for f in /usr/lib/*/libclang*.so* /usr/lib/llvm-*/lib/libclang*.so*; do
  [[ -s $f ]] && { echo "check-headerless.sh: $f is still visible" >&2; exit 1; }
done

# ---- the crate: what `cargo new` plus one dependency gives a user
APP=$REPO/target/headerless/app
rm -rf "$APP" && mkdir -p "$APP/src" "$APP/examples"
cat >"$APP/Cargo.toml" <<TOML
[package]
name = "erdma-user"
version = "0.1.0"
edition = "2024"
publish = false

[dependencies]
erdma = { path = "$REPO/erdma" }

[workspace]
TOML
cat >"$APP/src/lib.rs" <<'RS'
//! A crate that uses erdma.
/// The number of RDMA devices erdma sees.
pub fn device_count() -> usize {
    erdma::devices().iter().count()
}
RS
cat >"$APP/examples/devices.rs" <<'RS'
fn main() {
    let devices = erdma::devices();
    match devices.iter().next() {
        Some(dev) => println!("first RDMA device: {}", dev.name()),
        None => match devices.reason() {
            Some(why) => println!("no RDMA device: {why}"),
            None => println!("no RDMA device"),
        },
    }
    println!("{} device(s)", erdma_user::device_count());
}
RS
# The workspace's lock file: the same dependency versions, resolvable offline.
cp "$REPO/Cargo.lock" "$APP/Cargo.lock"
export CARGO_TARGET_DIR=$REPO/target/headerless/target
(cd "$APP" && cargo clean -q -p erdma -p erdma-sys 2>/dev/null || true)
rc=0
(cd "$APP" && cargo build -q --offline --examples) >"$APP/build.out" 2>"$APP/build.err" || rc=$?
if [[ $rc != 0 || -s $APP/build.err ]]; then
  cat "$APP/build.out" "$APP/build.err" >&2
  echo "check-headerless.sh: the build without headers and libclang $([[ $rc != 0 ]] && echo "failed (status $rc)" || echo "was not silent")" >&2
  exit 1
fi
out=$("$CARGO_TARGET_DIR/debug/examples/devices" 2>&1) || { echo "$out" >&2; echo "check-headerless.sh: the example failed" >&2; exit 2; }
echo "$out"
if ! grep -qE '^(no RDMA device: .+|first RDMA device: .+)$' <<<"$out"; then
  echo "check-headerless.sh: the example did not say whether there is an RDMA device" >&2; exit 2
fi
echo "check-headerless.sh: built silently without rdma-core headers or libclang; the example ran"
