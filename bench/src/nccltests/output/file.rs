//! How the `-J` and `--csv` files are written, so that the name given never
//! holds a half-written file: the output goes to a hidden temporary file
//! next to it, which is renamed to the final name when the writer closes
//! it - at the end of the run, and on every failure path (the document is
//! then closed properly and holds what was measured). A process killed
//! outright (SIGKILL, the OOM killer) leaves only the temporary file.
//!
//! As nccl-tests does for `-J`, an existing file is never overwritten:
//! `FILE`, then `FILE.0`, `FILE.1`, ... is used (chosen when the run
//! starts and announced then; `--csv` follows the same rule).
//!
//! All of that is for regular files: a name that leads (through symbolic
//! links) to a character device (`/dev/null`, `/dev/stdout` on a
//! terminal) or a FIFO is written to directly, as any C tool would; a FIFO
//! without a reader is an error rather than a wait for ever.

use std::fs::{File, OpenOptions};
use std::io::{self, BufWriter};
use std::path::{Path, PathBuf};

/// A file being written under a temporary name (or, for a device or a
/// FIFO, under its own).
#[derive(Debug)]
pub struct Pending {
    /// None when writing to the destination itself (not a regular file).
    temp: Option<PathBuf>,
    /// The name it gets when closed.
    pub dest: String,
    base: String,
}

/// The first of `path`, `path.0`, `path.1`, ... that does not exist
/// (nccl-tests' naming), or None when nothing can be probed.
fn free_name(path: &str) -> Option<String> {
    let mut name = path.to_string();
    for n in 0u64.. {
        match std::fs::symlink_metadata(&name) {
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Some(name),
            Err(_) => return Some(name),
            Ok(_) => name = format!("{path}.{n}"),
        }
    }
    None
}

fn temp_for(dest: &str) -> PathBuf {
    let p = Path::new(dest);
    let file = p
        .file_name()
        .map_or_else(|| "output".into(), |f| f.to_string_lossy().into_owned());
    let dir = p.parent().filter(|d| !d.as_os_str().is_empty());
    // Unique in the process too (-J and --csv may name the same file).
    static SEQ: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
    let n = SEQ.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let name = format!(".{file}.{}.{n}.tmp", std::process::id());
    dir.map_or_else(|| PathBuf::from(&name), |d| d.join(&name))
}

/// Starts writing `path` (or the first free `path.N`): creates the
/// temporary file. Err when the directory cannot be written.
pub fn create(path: &str) -> io::Result<(BufWriter<File>, Pending)> {
    if let Some(f) = open_special(path)? {
        let pending = Pending {
            temp: None,
            dest: path.to_string(),
            base: path.to_string(),
        };
        return Ok((BufWriter::new(f), pending));
    }
    let dest = free_name(path).ok_or_else(|| io::Error::other("no free name"))?;
    let temp = temp_for(&dest);
    let f = OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(&temp)?;
    Ok((
        BufWriter::new(f),
        Pending {
            temp: Some(temp),
            dest,
            base: path.to_string(),
        },
    ))
}

/// `path` opened for writing when it is a character device or a FIFO;
/// None when it is anything else (or nothing yet). erdma-perf's outputs
/// use it too, so that a FIFO without a reader never blocks an open.
pub fn open_special(path: &str) -> io::Result<Option<File>> {
    use std::os::unix::fs::{FileTypeExt, OpenOptionsExt};
    let Ok(t) = std::fs::metadata(path).map(|m| m.file_type()) else {
        return Ok(None);
    };
    if !(t.is_char_device() || t.is_fifo()) {
        return Ok(None);
    }
    // Non-blocking: a FIFO without a reader fails (ENXIO) instead of
    // blocking the open.
    let f = OpenOptions::new()
        .write(true)
        .custom_flags(libc::O_NONBLOCK)
        .open(path)
        .map_err(|e| match e.raw_os_error() {
            Some(libc::ENXIO) => {
                io::Error::other("a FIFO without a reader: start its reader first")
            }
            _ => e,
        })?;
    use std::os::fd::AsRawFd;
    // SAFETY: F_GETFL/F_SETFL on a descriptor this File owns.
    unsafe {
        let fd = f.as_raw_fd();
        let flags = libc::fcntl(fd, libc::F_GETFL);
        if flags >= 0 {
            // Writes then wait for the reader, as a shell redirection does.
            libc::fcntl(fd, libc::F_SETFL, flags & !libc::O_NONBLOCK);
        }
    }
    Ok(Some(f))
}

impl Pending {
    /// Flushes `w` and gives the file its final name, without replacing a
    /// file that appeared there meanwhile (then the next free name is
    /// taken). Returns the name used.
    pub fn commit(self, w: BufWriter<File>) -> io::Result<String> {
        let f = w.into_inner().map_err(|e| e.into_error())?;
        let Some(temp) = self.temp.clone() else {
            // A device or a FIFO: written in place, nothing to rename.
            return Ok(self.dest);
        };
        f.sync_all().or_else(|e| {
            // Not every file system syncs (pipes, some FUSE): not fatal.
            if e.kind() == io::ErrorKind::InvalidInput {
                Ok(())
            } else {
                Err(e)
            }
        })?;
        drop(f);
        let mut dest = self.dest.clone();
        for _ in 0..1000 {
            match std::fs::hard_link(&temp, &dest) {
                Ok(()) => {
                    let _ = std::fs::remove_file(&temp);
                    return Ok(dest);
                }
                Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {
                    dest = free_name(&self.base).unwrap_or(dest);
                }
                // No hard links here (some file systems): rename.
                Err(_) => {
                    std::fs::rename(&temp, &dest)?;
                    return Ok(dest);
                }
            }
        }
        std::fs::rename(&temp, &dest)?;
        Ok(dest)
    }

    /// Removes the temporary file (nothing worth keeping was written).
    pub fn discard(self) {
        if let Some(t) = &self.temp {
            let _ = std::fs::remove_file(t);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    use std::io::Write;

    #[test]
    fn never_overwrites_and_never_shows_a_partial_file() {
        let dir = std::env::temp_dir().join(format!("nccltests-file-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let p = dir.join("r.csv");
        let p = p.to_str().unwrap();
        let (mut w, a) = create(p).unwrap();
        w.write_all(b"a\n").unwrap();
        assert!(!Path::new(p).exists(), "nothing under the final name yet");
        assert_eq!(a.commit(w).unwrap(), p);
        let (w, b) = create(p).unwrap();
        let (w2, c) = create(p).unwrap();
        assert_eq!(b.dest, format!("{p}.0"));
        // Both chose .0 (neither was closed): the second to close gets .1.
        assert_eq!(c.dest, format!("{p}.0"));
        assert_eq!(b.commit(w).unwrap(), format!("{p}.0"));
        assert_eq!(c.commit(w2).unwrap(), format!("{p}.1"));
        assert_eq!(std::fs::read_to_string(p).unwrap(), "a\n");
        let names: Vec<_> = std::fs::read_dir(&dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect();
        assert_eq!(names.len(), 3, "no temporary file left: {names:?}");
        assert!(create("/nonexistent-dir/x.json").is_err());
        std::fs::remove_dir_all(dir).unwrap();
    }

    #[test]
    fn devices_are_written_in_place() {
        let (mut w, p) = create("/dev/null").unwrap();
        w.write_all(b"a\n").unwrap();
        assert_eq!(p.commit(w).unwrap(), "/dev/null");
        assert!(!Path::new("/dev/null.0").exists());
    }
}
