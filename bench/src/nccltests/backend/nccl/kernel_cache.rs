//! A disk cache of the `-D` kernels NVRTC builds (a few seconds per run otherwise).
//!
//! Location: `$ERDMA_KERNEL_CACHE` (`off` disables it), else
//! `$XDG_CACHE_HOME/erdma-rs/kernels`, else `~/.cache/erdma-rs/kernels`. An entry is named
//! by a hash of everything that goes into the compile: the source, the options, the NVRTC
//! library and version, and the contents of the NCCL headers and CUDA's `cuda_runtime.h`,
//! so a changed header or toolkit gives a new entry. The cache is best effort: any I/O
//! failure means compiling as if it were empty.

use std::hash::{DefaultHasher, Hash, Hasher};
use std::path::{Path, PathBuf};

/// Environment variable naming the cache directory (`off`: no cache).
pub const CACHE_ENV: &str = "ERDMA_KERNEL_CACHE";

/// The cache directory, None when disabled or no home is known.
pub fn dir() -> Option<PathBuf> {
    let env = |k: &str| std::env::var_os(k).filter(|v| !v.is_empty());
    match env(CACHE_ENV) {
        Some(v) if v == "off" => None,
        Some(v) => Some(PathBuf::from(v)),
        None => env("XDG_CACHE_HOME")
            .map(PathBuf::from)
            .or_else(|| env("HOME").map(|h| PathBuf::from(h).join(".cache")))
            .map(|c| c.join("erdma-rs").join("kernels")),
    }
}

/// Accumulates the inputs of one compile into a key.
pub struct Key(DefaultHasher);

impl Key {
    /// An empty key.
    pub fn new() -> Key {
        Key(DefaultHasher::new())
    }

    /// Adds a value (source text, an option, a version).
    pub fn add(&mut self, v: impl Hash) -> &mut Key {
        v.hash(&mut self.0);
        self
    }

    /// Adds the contents of a file, or of every file under a directory (by relative path,
    /// in sorted order); a missing path adds a marker.
    pub fn add_path(&mut self, p: &Path) -> &mut Key {
        let mut files = Vec::new();
        collect(p, p, &mut files);
        files.sort();
        files.len().hash(&mut self.0);
        for (rel, bytes) in files {
            rel.hash(&mut self.0);
            bytes.hash(&mut self.0);
        }
        self
    }

    /// The entry's file name.
    pub fn file_name(&self) -> String {
        format!("{:016x}.bin", self.0.finish())
    }
}

fn collect(root: &Path, p: &Path, out: &mut Vec<(PathBuf, Vec<u8>)>) {
    if p.is_dir() {
        for e in std::fs::read_dir(p).into_iter().flatten().flatten() {
            collect(root, &e.path(), out);
        }
    } else if let Ok(bytes) = crate::input::read_bytes(p) {
        let rel = p.strip_prefix(root).unwrap_or(p).to_path_buf();
        out.push((rel, bytes));
    }
}

/// The cached image for `key` in `dir`, if there is one that looks whole (a cubin, or PTX
/// ending with its NUL).
pub fn load(dir: &Path, key: &Key) -> Option<Vec<u8>> {
    crate::input::read_bytes(dir.join(key.file_name()))
        .ok()
        .filter(|b| b.starts_with(b"\x7fELF") || b.last() == Some(&0))
}

/// Stores `image` for `key` (written to a temporary name, then renamed, so that a reader
/// never sees half a file). Failures are ignored.
pub fn store(dir: &Path, key: &Key, image: &[u8]) {
    let name = key.file_name();
    let _ =
        std::fs::create_dir_all(dir).and_then(|()| crate::outfile::write(&dir.join(name), image));
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tempdir(tag: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("erdma-kcache-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        d
    }

    #[test]
    fn key_follows_every_input() {
        let d = tempdir("key");
        std::fs::create_dir_all(d.join("inc/sub")).unwrap();
        std::fs::write(d.join("inc/a.h"), "A").unwrap();
        std::fs::write(d.join("inc/sub/b.h"), "B").unwrap();
        let key = |src: &str| {
            let mut k = Key::new();
            k.add(src).add((9u32, 0u32)).add_path(&d.join("inc"));
            k.file_name()
        };
        let first = key("kernel");
        assert_eq!(first, key("kernel"), "same inputs, same entry");
        assert_ne!(first, key("kernel2"), "source changed");
        std::fs::write(d.join("inc/sub/b.h"), "B2").unwrap();
        assert_ne!(first, key("kernel"), "a header under the directory changed");
        std::fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn store_then_load_round_trips() {
        let d = tempdir("rt");
        let mut k = Key::new();
        k.add("x");
        assert_eq!(load(&d, &k), None);
        store(&d.join("nested"), &k, b"\x7fELF image");
        assert_eq!(
            load(&d.join("nested"), &k).as_deref(),
            Some(&b"\x7fELF image"[..])
        );
        let leftovers = std::fs::read_dir(d.join("nested")).unwrap().count();
        assert_eq!(leftovers, 1, "no temporary file left behind");
        std::fs::remove_dir_all(&d).unwrap();
    }
}
