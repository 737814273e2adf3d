//! The one way bench/ reads a file (clippy's `disallowed-methods` in
//! `bench/clippy.toml` refuses `std::fs::read*` and `File::open` elsewhere).
//! A file the user named (erdma-compare's inputs, erdma-cluster's
//! `--baseline` and `--resume` documents): regular files only, at most
//! [`MAX_INPUT_BYTES`] for a log read as a stream and [`MAX_DOCUMENT_BYTES`]
//! for a document read whole ([`read_document`], [`read_json`]); files of
//! the system (`/proc`, `/sys`, caches) through [`read_text`] and [`read_bytes`].
//! A FIFO, a character device (`/dev/zero`), a directory or a socket is an
//! error naming the file, and so is a file over the cap; nothing blocks
//! (the open is non-blocking, so a FIFO without a writer cannot hang it)
//! and nothing reads without bound (the read stops at the cap even when the
//! size the file system reports is wrong, as for `/proc` files). Symbolic
//! links are followed, then the file they lead to is checked.

use std::fs::File;
use std::io::{self, Read};
use std::os::unix::fs::{FileTypeExt, OpenOptionsExt};
use std::path::Path;

/// The largest input read: 256 MiB, far beyond any result file (a
/// nccl-tests log of a week-long `-N 0` run is tens of MB).
pub const MAX_INPUT_BYTES: u64 = 256 << 20;

/// The largest result document read whole and parsed (an erdma-perf or
/// nccl-tests JSON document, a CSV result, a `--resume` round file, an
/// NCCL-stage baseline): 16 MiB. Real ones are KBs to a few MB; parsed
/// JSON takes up to about 20 times its text in memory, so a document at
/// the cap stays within a few hundred MB instead of GBs (the parse must
/// not abort on a failed allocation under a `ulimit -v`).
pub const MAX_DOCUMENT_BYTES: u64 = 16 << 20;

/// The largest file of the system read (`/proc`, `/sys`, a kernel cache
/// entry): 64 MiB (`/proc/self/maps` of a CUDA process is a few MB).
pub const MAX_SYSTEM_BYTES: u64 = 64 << 20;

/// Why a file could not be read; its `Display` names the file.
#[derive(Debug)]
pub struct InputError {
    /// The file, as the user named it.
    pub path: String,
    /// What went wrong with it.
    pub kind: InputErrorKind,
}

/// What went wrong with an input file.
#[derive(Debug)]
pub enum InputErrorKind {
    /// The open or the read failed.
    Io(io::Error),
    /// Not a regular file: what it is instead.
    NotRegular(&'static str),
    /// Larger than the cap (the cap, in bytes).
    TooLarge(u64),
    /// Not the JSON document expected: why (the parser's words).
    NotJson(String),
}

impl InputError {
    /// Whether the file does not exist.
    pub fn not_found(&self) -> bool {
        matches!(&self.kind, InputErrorKind::Io(e) if e.kind() == io::ErrorKind::NotFound)
    }
}

impl std::fmt::Display for InputError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let p = &self.path;
        match &self.kind {
            InputErrorKind::Io(e) => write!(f, "cannot read {p}: {e}"),
            InputErrorKind::NotRegular(what) => {
                write!(f, "{p} is {what}, not a regular file: name a result file")
            }
            InputErrorKind::TooLarge(cap) => write!(
                f,
                "{p} is larger than {} MiB, the most an input may hold: is it a result file?",
                cap >> 20
            ),
            InputErrorKind::NotJson(why) => write!(f, "{p} is not a JSON document: {why}"),
        }
    }
}

impl std::error::Error for InputError {}

/// What a file that is not regular is, in words.
fn kind_of(t: std::fs::FileType) -> Option<&'static str> {
    if t.is_file() {
        None
    } else if t.is_dir() {
        Some("a directory")
    } else if t.is_fifo() {
        Some("a FIFO")
    } else if t.is_char_device() {
        Some("a character device")
    } else if t.is_block_device() {
        Some("a block device")
    } else if t.is_socket() {
        Some("a socket")
    } else {
        Some("not a file")
    }
}

/// The whole of `path`, a regular file of at most [`MAX_INPUT_BYTES`].
pub fn read(path: impl AsRef<Path>) -> Result<Vec<u8>, InputError> {
    read_capped(path.as_ref(), MAX_INPUT_BYTES)
}

/// The whole of `path`, a regular file of at most [`MAX_DOCUMENT_BYTES`]:
/// a result document read whole.
pub fn read_document(path: impl AsRef<Path>) -> Result<Vec<u8>, InputError> {
    read_capped(path.as_ref(), MAX_DOCUMENT_BYTES)
}

/// `path` read as [`read_document`] reads it and parsed as JSON; an error
/// names the file and what is wrong with it.
pub fn read_json(path: impl AsRef<Path>) -> Result<serde_json::Value, InputError> {
    let path = path.as_ref();
    let bytes = read_document(path)?;
    serde_json::from_slice(&bytes).map_err(|e| InputError {
        path: path.display().to_string(),
        kind: InputErrorKind::NotJson(e.to_string()),
    })
}

/// A file of the system (`/proc`, `/sys`, a file a test or the kernel
/// cache wrote) as text: regular files only, at most [`MAX_SYSTEM_BYTES`];
/// the error keeps the open's [`io::ErrorKind`] (`NotFound` stays one).
pub fn read_text(path: impl AsRef<Path>) -> io::Result<String> {
    String::from_utf8(read_bytes(path)?).map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))
}

/// [`read_text`]'s bytes, for a binary file.
pub fn read_bytes(path: impl AsRef<Path>) -> io::Result<Vec<u8>> {
    read_capped(path.as_ref(), MAX_SYSTEM_BYTES).map_err(|e| match e.kind {
        InputErrorKind::Io(io) => io::Error::new(
            io.kind(),
            InputError {
                path: e.path,
                kind: InputErrorKind::Io(io),
            },
        ),
        _ => io::Error::new(io::ErrorKind::InvalidData, e),
    })
}

/// [`read`] with another cap (for tests).
pub fn read_capped(path: &Path, cap: u64) -> Result<Vec<u8>, InputError> {
    let mut input = open_capped(path, cap)?;
    let mut bytes = Vec::with_capacity(input.len as usize);
    input.read_to_end(&mut bytes).map_err(|e| input.error(e))?;
    Ok(bytes)
}

/// `path` opened for reading, checked as [`read`] checks it, to be read
/// as a stream: reading past [`MAX_INPUT_BYTES`] is an error.
pub fn open(path: impl AsRef<Path>) -> Result<Input, InputError> {
    open_capped(path.as_ref(), MAX_INPUT_BYTES)
}

/// A checked input file; its reads fail past the cap.
#[derive(Debug)]
pub struct Input {
    file: std::io::Take<File>,
    path: String,
    cap: u64,
    seen: u64,
    /// The size the file system reported when it was opened.
    pub len: u64,
}

impl Input {
    /// The [`InputError`] for an error of this input's reads.
    pub fn error(&self, e: io::Error) -> InputError {
        let kind = if self.seen > self.cap {
            InputErrorKind::TooLarge(self.cap)
        } else {
            InputErrorKind::Io(e)
        };
        InputError {
            path: self.path.clone(),
            kind,
        }
    }
}

impl Read for Input {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = self.file.read(buf)?;
        self.seen += n as u64;
        if self.seen > self.cap {
            // A file that grew (or whose size lied) past the cap.
            return Err(io::Error::other("over the size cap"));
        }
        Ok(n)
    }
}

fn open_capped(path: &Path, cap: u64) -> Result<Input, InputError> {
    let err = |kind| InputError {
        path: path.display().to_string(),
        kind,
    };
    // O_NONBLOCK: opening a FIFO without a writer returns at once (it is
    // refused just after); on a regular file the flag changes nothing.
    let f = File::options()
        .read(true)
        .custom_flags(libc::O_NONBLOCK)
        .open(path)
        .map_err(|e| err(InputErrorKind::Io(e)))?;
    let meta = f.metadata().map_err(|e| err(InputErrorKind::Io(e)))?;
    if let Some(what) = kind_of(meta.file_type()) {
        return Err(err(InputErrorKind::NotRegular(what)));
    }
    if meta.len() > cap {
        return Err(err(InputErrorKind::TooLarge(cap)));
    }
    Ok(Input {
        // One byte past the cap tells a file that grew from one at it.
        file: f.take(cap + 1),
        path: path.display().to_string(),
        cap,
        seen: 0,
        len: meta.len(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_regular_files_under_the_cap() {
        let dir = std::env::temp_dir().join(format!("erdma-input-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let f = dir.join("a.txt");
        std::fs::write(&f, b"hello").unwrap();
        assert_eq!(read(&f).unwrap(), b"hello");
        let e = read_capped(&f, 4).unwrap_err();
        assert!(matches!(e.kind, InputErrorKind::TooLarge(4)), "{e}");
        std::fs::write(&f, b"{\"a\":").unwrap();
        let e = read_json(&f).unwrap_err();
        assert!(
            e.to_string().contains("a.txt is not a JSON document"),
            "{e}"
        );
        assert!(read_text("/dev/zero").is_err());
        let e = read_text(dir.join("missing")).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::NotFound);
        assert!(e.to_string().contains("missing"), "{e}");
        let e = read(&dir).unwrap_err();
        assert_eq!(
            e.to_string(),
            format!(
                "{} is a directory, not a regular file: name a result file",
                dir.display()
            )
        );
        let e = read("/dev/zero").unwrap_err();
        assert!(e.to_string().contains("a character device"), "{e}");
        let link = dir.join("zero");
        let _ = std::fs::remove_file(&link);
        std::os::unix::fs::symlink("/dev/zero", &link).unwrap();
        assert!(matches!(
            read(&link).unwrap_err().kind,
            InputErrorKind::NotRegular("a character device")
        ));
        let fifo = dir.join("fifo");
        let c = std::ffi::CString::new(fifo.to_str().unwrap()).unwrap();
        // SAFETY: a NUL-terminated path.
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
        assert!(matches!(
            read(&fifo).unwrap_err().kind,
            InputErrorKind::NotRegular("a FIFO")
        ));
        assert!(read(dir.join("missing")).unwrap_err().not_found());
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
