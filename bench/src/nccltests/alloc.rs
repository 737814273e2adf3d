//! Fallible host allocations, for every buffer whose size comes from the
//! command line (`-e 100G`, `-e 1e30`) or from a peer: a size that does not
//! fit is a one-line error with exit status 2 (as nccl-tests' failed
//! `cudaMalloc`), never an abort.

use std::alloc::{Layout, alloc_zeroed};
use std::path::{Path, PathBuf};

use super::errors::{TestError, TestResult};
use super::options::BackendKind;

/// `len` zero bytes (`calloc`: pages are mapped lazily, as with `vec![0; n]`),
/// or [`TestError::HostMemory`] naming `what`.
pub fn zeroed(len: usize, what: &str) -> TestResult<Vec<u8>> {
    if len == 0 {
        return Ok(Vec::new());
    }
    let layout = Layout::array::<u8>(len).map_err(|_| TestError::host_memory(what, len as u128))?;
    // SAFETY: the layout has a non-zero size (len > 0).
    let ptr = unsafe { alloc_zeroed(layout) };
    if ptr.is_null() {
        return Err(TestError::host_memory(what, len as u128));
    }
    // SAFETY: `ptr` was allocated by the global allocator with the layout of
    // `len` u8 (so capacity `len`, alignment 1), and its `len` bytes are
    // initialized (zeroed), which is a valid u8 each.
    Ok(unsafe { Vec::from_raw_parts(ptr, len, len) })
}

/// `len` copies of `value` in a new Vec, or [`TestError::HostMemory`].
pub fn filled<T: Clone>(len: usize, value: T, what: &str) -> TestResult<Vec<T>> {
    let mut v = Vec::new();
    v.try_reserve_exact(len).map_err(|_| {
        TestError::host_memory(what, len as u128 * std::mem::size_of::<T>() as u128)
    })?;
    v.resize(len, value);
    Ok(v)
}

/// `a * b` bytes, or [`TestError::HostMemory`] when that overflows.
pub fn product(a: usize, b: usize, what: &str) -> TestResult<usize> {
    a.checked_mul(b)
        .ok_or_else(|| TestError::host_memory(what, a as u128 * b as u128))
}

/// MemAvailable of `/proc/meminfo`, in bytes (None when unreadable).
pub fn mem_available() -> Option<u64> {
    let text = crate::input::read_text("/proc/meminfo").ok()?;
    meminfo_available(&text)
}

fn meminfo_available(meminfo: &str) -> Option<u64> {
    let kb: u64 = meminfo
        .lines()
        .find_map(|l| l.strip_prefix("MemAvailable:"))?
        .trim()
        .trim_end_matches("kB")
        .trim()
        .parse()
        .ok()?;
    kb.checked_mul(1024)
}

/// How much memory the run may still take, and what says so.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Room {
    /// Bytes.
    pub bytes: u64,
    /// Where the figure comes from, in words: `MemAvailable 123 bytes`, or
    /// `the memory cgroup /sys/fs/cgroup/...: limit L, in use U bytes`.
    pub source: String,
}

/// The memory this process may still take: MemAvailable, or less when its
/// memory cgroup (v2 `memory.max`, v1 `memory.limit_in_bytes`, on the
/// cgroup or any parent) leaves less: past that limit the kernel kills
/// the process without a word, however much the host has free. None when
/// neither is known.
pub fn room() -> Option<Room> {
    let host = mem_available().map(|a| Room {
        bytes: a,
        source: format!("MemAvailable {a} bytes"),
    });
    let proc_cgroup = crate::input::read_text("/proc/self/cgroup").unwrap_or_default();
    let cg = cgroup_room(Path::new("/sys/fs/cgroup"), &proc_cgroup);
    match (host, cg) {
        (Some(h), Some(c)) if c.bytes < h.bytes => Some(c),
        (Some(h), _) => Some(h),
        (None, c) => c,
    }
}

/// The least room any memory cgroup of this process leaves (limit less
/// what it holds, reclaimable file pages not counted): `proc_cgroup` is
/// `/proc/self/cgroup`, `root` where the hierarchies are mounted. v2 (the
/// `0::` line, under `root` or `root/unified`) and v1 (the line naming the
/// `memory` controller, under `root/memory`); the cgroup's directory and
/// each parent up to the root, so that a limit set on a parent (a
/// container's, a Slurm job's) counts.
pub fn cgroup_room(root: &Path, proc_cgroup: &str) -> Option<Room> {
    let num =
        |p: &Path| -> Option<u64> { crate::input::read_text(p).ok()?.trim().parse::<u64>().ok() };
    let inactive_file = |dir: &Path, key: &str| -> u64 {
        crate::input::read_text(dir.join("memory.stat"))
            .ok()
            .and_then(|t| {
                t.lines()
                    .find_map(|l| l.strip_prefix(key)?.trim().parse::<u64>().ok())
            })
            .unwrap_or(0)
    };
    let mut best: Option<Room> = None;
    let mut consider = |dir: &Path, limit: Option<u64>, used: Option<u64>, inactive: u64| {
        // "max" (v2) or a page-rounded i64::MAX (v1): no limit.
        let (Some(limit), Some(used)) = (limit, used) else {
            return;
        };
        if limit >= 1 << 60 {
            return;
        }
        let bytes = limit.saturating_sub(used.saturating_sub(inactive));
        if best.as_ref().is_none_or(|b| bytes < b.bytes) {
            best = Some(Room {
                bytes,
                source: format!(
                    "the memory cgroup {}: limit {limit} bytes, {} in use",
                    dir.display(),
                    used.saturating_sub(inactive)
                ),
            });
        }
    };
    for line in proc_cgroup.lines() {
        let mut parts = line.splitn(3, ':');
        let (Some(_), Some(controllers), Some(path)) = (parts.next(), parts.next(), parts.next())
        else {
            continue;
        };
        let rel = path.trim_start_matches('/');
        let bases: Vec<PathBuf> = if controllers.is_empty() {
            vec![root.to_path_buf(), root.join("unified")]
        } else if controllers.split(',').any(|c| c == "memory") {
            vec![root.join("memory")]
        } else {
            continue;
        };
        for base in bases {
            let mut dir = base.join(rel);
            loop {
                if controllers.is_empty() {
                    consider(
                        &dir,
                        num(&dir.join("memory.max")),
                        num(&dir.join("memory.current")),
                        inactive_file(&dir, "inactive_file "),
                    );
                } else {
                    consider(
                        &dir,
                        num(&dir.join("memory.limit_in_bytes")),
                        num(&dir.join("memory.usage_in_bytes")),
                        inactive_file(&dir, "total_inactive_file "),
                    );
                }
                if dir == base || !dir.pop() {
                    break;
                }
            }
        }
    }
    best
}

/// What each rank of a host backend holds at a largest size of `bytes`
/// (`-e`): its host buffers (send and receive, and with the data check a
/// third for the expected result) and the MPI backend's staged copies
/// (its bounded pool), as `(buffers, staged bytes)` for [`check_fits`].
/// The NCCL backend's buffers are on the GPUs: `(0, 0)`.
pub fn host_holds(backend: BackendKind, bytes: usize, datacheck: bool) -> (usize, usize) {
    let buffers = if datacheck { 3 } else { 2 };
    match backend {
        BackendKind::Nccl => (0, 0),
        BackendKind::Host => (buffers, 0),
        #[cfg(feature = "mpi")]
        BackendKind::Mpi => (buffers, super::backend::mpi::staged_bound(bytes)),
        // Built without MPI: no such run (and no staged copies).
        #[cfg(not(feature = "mpi"))]
        BackendKind::Mpi => {
            let _ = bytes;
            (buffers, 0)
        }
    }
}

/// Refuses, before anything is allocated, what the run will hold when it
/// exceeds the `room` it has: `ranks` ranks of this host (every process's,
/// as they start together) of `buffers` host buffers of `bytes` each, and
/// `extra` bytes per rank (the MPI backend's staged copies). With
/// overcommit the allocation itself succeeds and the run then thrashes or
/// meets the OOM killer (a cgroup's without a word). `room` None
/// (unknown) accepts.
pub fn check_fits(
    bytes: usize,
    buffers: usize,
    extra: usize,
    ranks: usize,
    room: Option<&Room>,
) -> TestResult<()> {
    let per_rank = (bytes as u128)
        .saturating_mul(buffers as u128)
        .saturating_add(extra as u128);
    let need = per_rank.saturating_mul(ranks as u128);
    match room {
        Some(r) if need > r.bytes as u128 => Err(TestError::HostMemory {
            what: format!(
                "malloc({need}) for {buffers} buffers of {bytes} bytes{} on each of this host's {ranks} rank(s)",
                if extra > 0 {
                    format!(" and {extra} bytes of staged copies")
                } else {
                    String::new()
                }
            ),
            msg: format!(
                "out of memory: this host cannot hold the buffers of its ranks ({}); lower -e (or start fewer ranks per host)",
                r.source
            ),
        }),
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn impossible_sizes_are_errors() {
        let e = zeroed(usize::MAX, "the send buffer").unwrap_err();
        assert_eq!(e.exit_code(), 2);
        assert!(
            e.to_string().starts_with(&format!(
                "Test host memory failure malloc({}) for the send buffer 'out of memory",
                usize::MAX
            )),
            "{e}"
        );
        assert!(zeroed(isize::MAX as usize, "x").is_err());
        assert!(filled(usize::MAX / 4, 0u64, "x").is_err());
        assert!(product(usize::MAX, 2, "x").is_err());
        let v = zeroed(4096, "x").unwrap();
        assert!(v.len() == 4096 && v.iter().all(|&b| b == 0));
        assert!(zeroed(0, "x").unwrap().is_empty());
        assert_eq!(filled(3, 7u8, "x").unwrap(), vec![7, 7, 7]);
    }

    #[test]
    fn buffers_are_checked_against_available_memory() {
        let info = "MemTotal:       24000000 kB\nMemAvailable:   23000000 kB\n";
        let a = meminfo_available(info);
        assert_eq!(a, Some(23_000_000 * 1024));
        let a = a.map(|bytes| Room {
            bytes,
            source: format!("MemAvailable {bytes} bytes"),
        });
        let g20 = 20usize << 30;
        let e = check_fits(g20, 2, 0, 1, a.as_ref()).unwrap_err();
        assert_eq!(e.exit_code(), 2);
        assert!(e.to_string().contains("MemAvailable"), "{e}");
        assert!(check_fits(1 << 30, 2, 0, 4, a.as_ref()).is_ok());
        // The staged copies count: 4 ranks of 2 x 2 GiB fit, not with 2 GiB more each.
        assert!(check_fits(2 << 30, 2, 0, 2, a.as_ref()).is_ok());
        let e = check_fits(2 << 30, 2, 2 << 30, 4, a.as_ref()).unwrap_err();
        assert!(
            e.to_string()
                .contains("of staged copies on each of this host's 4 rank(s)"),
            "{e}"
        );
        assert!(check_fits(usize::MAX, 3, usize::MAX, usize::MAX, a.as_ref()).is_err());
        assert!(check_fits(g20, 2, 0, 1, None).is_ok());
        assert!(meminfo_available("MemTotal: 1 kB\n").is_none());
    }

    #[test]
    fn a_cgroup_limit_v1_or_v2_on_the_cgroup_or_a_parent_is_the_room() {
        let root = std::env::temp_dir().join(format!("erdma-cg-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&root);
        let w = |p: &str, v: &str| {
            let p = root.join(p);
            std::fs::create_dir_all(p.parent().unwrap()).unwrap();
            std::fs::write(p, v).unwrap();
        };
        // v2: the limit on the parent, the child unlimited.
        w("job/memory.max", "1073741824\n");
        w("job/memory.current", "200000000\n");
        w("job/memory.stat", "anon 1\ninactive_file 100000000\n");
        w("job/step/memory.max", "max\n");
        w("job/step/memory.current", "5\n");
        let r = cgroup_room(&root, "0::/job/step\n").unwrap();
        assert_eq!(r.bytes, 1073741824 - 100000000);
        assert!(r.source.contains("job: limit 1073741824 bytes"), "{r:?}");
        // v1: the memory controller's line, under root/memory.
        w("memory/c/memory.limit_in_bytes", "2000000000\n");
        w("memory/c/memory.usage_in_bytes", "1000000000\n");
        w("memory/memory.limit_in_bytes", "9223372036854771712\n");
        w("memory/memory.usage_in_bytes", "1\n");
        let r = cgroup_room(&root, "4:memory:/c\n3:cpu:/x\n").unwrap();
        assert_eq!(r.bytes, 1000000000);
        // No limit anywhere, or no memory line.
        assert_eq!(cgroup_room(&root, "4:memory:/\n"), None);
        assert_eq!(cgroup_room(&root, "3:cpu:/c\n"), None);
        std::fs::remove_dir_all(&root).unwrap();
    }
}
