//! The one way bench/ writes a result file into a directory (erdma-cluster's
//! `--out` documents, report.html, the `--resume` round files, the kernel
//! cache): the bytes go to a new temporary file in the same directory,
//! which is flushed to the disk (`fsync`) and then renamed over the name.
//! So a reader sees the whole earlier file or the whole new one, never half
//! of one; a failed write (a full disk, a quota) leaves the earlier file as
//! it was; and a symbolic link at the name is replaced, never followed (its
//! target is not written). `bench/clippy.toml` refuses `std::fs::write`
//! elsewhere.

use std::fs::File;
use std::io::{self, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

/// Writes `bytes` to `path` through a temporary file in the same
/// directory, `fsync` and a rename (see the module's description). The
/// directory must exist. An error names no path: the caller says which
/// file it was writing.
pub fn write(path: &Path, bytes: &[u8]) -> io::Result<()> {
    let tmp = temporary(path)?;
    let done = (|| {
        // O_EXCL with O_NOFOLLOW: a link or a file planted at the
        // temporary name is an error, not a way to write elsewhere.
        let mut f = File::options()
            .write(true)
            .create_new(true)
            .mode(0o644)
            .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
            .open(&tmp)?;
        f.write_all(bytes)?;
        f.sync_all()?;
        drop(f);
        std::fs::rename(&tmp, path)
    })();
    if done.is_err() {
        let _ = std::fs::remove_file(&tmp);
        return done;
    }
    // The rename itself to the disk: a crash now keeps the new file.
    if let Some(dir) = path.parent() {
        let dir = if dir.as_os_str().is_empty() {
            Path::new(".")
        } else {
            dir
        };
        if let Ok(d) = File::options()
            .read(true)
            .custom_flags(libc::O_DIRECTORY | libc::O_CLOEXEC)
            .open(dir)
        {
            let _ = d.sync_all();
        }
    }
    Ok(())
}

/// A name beside `path` that no other writer uses: `.NAME.PID.N.tmp`.
fn temporary(path: &Path) -> io::Result<PathBuf> {
    static N: AtomicU64 = AtomicU64::new(0);
    let name = path
        .file_name()
        .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "no file name to write"))?;
    let n = N.fetch_add(1, Ordering::Relaxed);
    Ok(path.with_file_name(format!(
        ".{}.{}.{n}.tmp",
        name.to_string_lossy(),
        std::process::id()
    )))
}

/// `dir` made ready for result files before any work is done: created
/// if missing, checked to be a directory, and a file written to it and
/// removed (a read-only or full file system fails here, not after an hour
/// of measurements). The error is one line naming `dir` and `what` (the
/// option, e.g. `--out`), and saying how to fix it.
pub fn check_dir(what: &str, dir: &Path) -> Result<(), String> {
    let d = dir.display();
    if std::fs::metadata(dir).is_ok_and(|m| !m.is_dir()) {
        return Err(format!("{what} {d}: not a directory: name a directory"));
    }
    std::fs::create_dir_all(dir)
        .map_err(|e| format!("writing {d} ({what}): {e}: name a directory you can write"))?;
    let probe = dir.join(format!(".write-check.{}", std::process::id()));
    let written = write(&probe, b"a result file goes here\n");
    let _ = std::fs::remove_file(&probe);
    written.map_err(|e| {
        format!(
            "writing {d} ({what}): cannot write a file there: {e}: free space or name another directory"
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tmp(tag: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("erdma-outfile-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        d
    }

    #[test]
    fn a_link_is_replaced_never_followed() {
        let d = tmp("link");
        let target = d.join("target");
        std::fs::write(&target, "keep").unwrap();
        let p = d.join("report.html");
        std::os::unix::fs::symlink(&target, &p).unwrap();
        write(&p, b"new").unwrap();
        assert_eq!(std::fs::read(&target).unwrap(), b"keep");
        assert_eq!(std::fs::read(&p).unwrap(), b"new");
        assert!(
            !std::fs::symlink_metadata(&p)
                .unwrap()
                .file_type()
                .is_symlink()
        );
        // No temporary file is left.
        assert_eq!(std::fs::read_dir(&d).unwrap().count(), 2);
        std::fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn a_failed_write_leaves_no_temporary_file() {
        // The rename fails (a directory holds the name): what was there
        // stays, and the temporary file goes. A write that fails part way
        // (a full disk) is tested on erdma-cluster under `ulimit -f`.
        let d = tmp("fail");
        let p = d.join("cluster.json");
        std::fs::create_dir_all(p.join("inside")).unwrap();
        assert!(write(&p, b"new").is_err());
        assert!(p.join("inside").is_dir());
        assert_eq!(
            std::fs::read_dir(&d).unwrap().count(),
            1,
            "a temporary file left"
        );
        std::fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn a_directory_is_checked_before_use() {
        let d = tmp("check");
        check_dir("--out", &d.join("new/sub")).unwrap();
        assert!(d.join("new/sub").is_dir());
        assert_eq!(std::fs::read_dir(d.join("new/sub")).unwrap().count(), 0);
        let f = d.join("file");
        std::fs::write(&f, "").unwrap();
        let e = check_dir("--out", &f).unwrap_err();
        assert!(
            e.ends_with("file: not a directory: name a directory"),
            "{e}"
        );
        let e = check_dir("--out", &f.join("below")).unwrap_err();
        assert!(
            e.starts_with("writing ")
                && e.contains("(--out): ")
                && e.contains("name a directory you can write"),
            "{e}"
        );
        std::fs::remove_dir_all(&d).unwrap();
    }
}
