//! Finding and loading `libnccl`, checking its version, and library-wide calls.

use std::ffi::{CStr, OsStr, c_int, c_void};
use std::fmt;
use std::sync::OnceLock;

use super::error::{NcclError, Result, ResultCode};
use super::sys::{self, Api, ncclComm_t};
use super::types::DataType;
use super::version::Version;
use crate::cuda::{Device, DeviceBuffer, DevicePtr};

/// Environment variable naming the NCCL library to load (a path or a soname). When set,
/// nothing else is tried.
pub const NCCL_LIBRARY_ENV: &str = "ERDMA_NCCL_LIBRARY";

/// Library names tried in order when [`NCCL_LIBRARY_ENV`] is unset: the runtime package's
/// soname first (it is all `libnccl2` installs), then the development symlink.
pub const DEFAULT_LIBRARY_NAMES: [&str; 2] = ["libnccl.so.2", "libnccl.so"];

/// A loaded NCCL library: its entry points and version. Obtained once per process with
/// [`Nccl::load`] and never unloaded (NCCL keeps threads running inside the library).
pub struct Nccl {
    pub(crate) api: Api,
    version: Version,
    path: String,
}

impl fmt::Debug for Nccl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Nccl")
            .field("path", &self.path)
            .field("version", &self.version)
            .finish()
    }
}

static GLOBAL: OnceLock<Result<&'static Nccl>> = OnceLock::new();

impl Nccl {
    /// Loads NCCL once per process: the library named by `ERDMA_NCCL_LIBRARY` if set, else
    /// `libnccl.so.2`, then `libnccl.so`. Fails (never panics) when none loads, when the
    /// library is not NCCL, or when it is older than 2.19; the same error on every call.
    pub fn load() -> Result<&'static Nccl> {
        GLOBAL
            .get_or_init(|| match std::env::var_os(NCCL_LIBRARY_ENV) {
                // SAFETY: the process's environment names the library as LD_LIBRARY_PATH
                // and LD_PRELOAD do, and is trusted as they are: whoever sets it chooses
                // the code this process runs (docs/soundness.md, section 6).
                Some(path) if !path.is_empty() => unsafe { Nccl::load_from(&path) },
                _ => Nccl::load_candidates(&DEFAULT_LIBRARY_NAMES),
            })
            .clone()
    }

    /// Loads NCCL from `path` (a file path or a soname searched like `dlopen` does), not
    /// cached. A library that turns out to be NCCL stays loaded for the rest of the process.
    /// A library without `ncclGetVersion`, older than 2.19 or missing a symbol is refused
    /// ([`NcclError::NotNccl`], [`NcclError::TooOld`]).
    ///
    /// # Safety
    ///
    /// `path` must name nothing loadable, a library whose initializers are sound to run
    /// and that exports no `ncclGetVersion`, or a genuine NCCL: loading runs the library's
    /// initializers, and its `ncclGetVersion` and every other symbol found by name are
    /// called with the prototypes of `nccl.h`, which no check can confirm (issue 34 hole 7:
    /// a library exporting a `ncclGetVersion` of another prototype is undefined behaviour).
    /// [`Nccl::load`] is the safe entry point: it loads the names of
    /// [`DEFAULT_LIBRARY_NAMES`] found by the dynamic loader, or [`NCCL_LIBRARY_ENV`].
    pub unsafe fn load_from(path: impl AsRef<OsStr>) -> Result<&'static Nccl> {
        let path = path.as_ref();
        // SAFETY: the caller's contract is open's.
        unsafe { Nccl::open(path) }.map_err(|e| match e {
            OpenError::Load(detail) => NcclError::LibraryNotFound {
                tried: vec![path.to_string_lossy().into_owned()],
                detail,
            },
            OpenError::Nccl(e) => e,
        })
    }

    fn load_candidates(names: &[&str]) -> Result<&'static Nccl> {
        // Report why the preferred name failed; the others are listed by name.
        let mut detail: Option<String> = None;
        for name in names {
            // SAFETY: NCCL's own sonames, found by the dynamic loader as a linked library's
            // would be: what they name is trusted as the system's libraries are.
            match unsafe { Nccl::open(OsStr::new(name)) } {
                Ok(n) => return Ok(n),
                Err(OpenError::Load(d)) => {
                    detail.get_or_insert(d);
                }
                Err(OpenError::Nccl(e)) => return Err(e),
            }
        }
        Err(NcclError::LibraryNotFound {
            tried: names.iter().map(|s| s.to_string()).collect(),
            detail: detail.unwrap_or_default(),
        })
    }

    /// # Safety
    ///
    /// As [`Nccl::load_from`]: `path` names nothing loadable, a sound library without
    /// `ncclGetVersion`, or a genuine NCCL.
    unsafe fn open(path: &OsStr) -> std::result::Result<&'static Nccl, OpenError> {
        let shown = path.to_string_lossy().into_owned();
        // SAFETY: loading runs the library's initializers, which the caller vouches for
        // (a genuine NCCL). The handle is dropped (dlclose) only when the library is not
        // NCCL, before any of its code ran beyond initializers.
        let lib = unsafe { libloading::Library::new(path) }
            .map_err(|e| OpenError::Load(loader_message(&e)))?;
        // Probe the version entry point before committing to the library.
        // SAFETY: if the symbol exists it is NCCL's `ncclResult_t ncclGetVersion(int*)`.
        let get_version = match unsafe {
            lib.get::<unsafe extern "C" fn(*mut c_int) -> sys::ncclResult_t>("ncclGetVersion")
        } {
            Ok(f) => *f,
            Err(_) => {
                return Err(OpenError::Nccl(NcclError::NotNccl {
                    library: shown,
                    symbol: "ncclGetVersion",
                }));
            }
        };
        let mut code: c_int = 0;
        // SAFETY: ncclGetVersion writes one int; it needs no GPU.
        let rc = unsafe { get_version(&mut code) };
        if rc != 0 {
            return Err(OpenError::Nccl(NcclError::Call {
                call: "ncclGetVersion",
                code: ResultCode(rc),
                last_error: String::new(),
            }));
        }
        let version = Version::from_code(code).unwrap_or(Version::new(0, 0, 0));
        if version < Version::MIN_SUPPORTED {
            return Err(OpenError::Nccl(NcclError::TooOld {
                library: shown,
                found: version,
            }));
        }
        // NCCL starts threads that live as long as the process: never unload it.
        let lib: &'static libloading::Library = Box::leak(Box::new(lib));
        // SAFETY: the library reported an NCCL version >= 2.19, so its symbols have the
        // nccl.h prototypes of the table; it is leaked, hence never unloaded.
        let api = unsafe { Api::resolve(lib) }.map_err(|symbol| {
            OpenError::Nccl(NcclError::NotNccl {
                library: shown.clone(),
                symbol,
            })
        })?;
        Ok(Box::leak(Box::new(Nccl {
            api,
            version,
            path: shown,
        })))
    }

    /// The library's version (`ncclGetVersion`).
    pub fn version(&self) -> Version {
        self.version
    }

    /// The name or path the library was loaded by.
    pub fn path(&self) -> &str {
        &self.path
    }

    /// Whether `ncclCommWindowRegister` exists (NCCL >= 2.27).
    pub fn has_window_register(&self) -> bool {
        self.api.ncclCommWindowRegister.is_some() && self.api.ncclCommWindowDeregister.is_some()
    }

    /// Whether `ncclAlltoAll` exists (NCCL >= 2.28); otherwise all-to-all is grouped send/recv.
    pub fn has_native_alltoall(&self) -> bool {
        self.api.ncclAlltoAll.is_some()
    }

    /// Whether `ncclGather` and `ncclScatter` exist (NCCL >= 2.28); otherwise they are
    /// grouped send/recv.
    pub fn has_native_gather_scatter(&self) -> bool {
        self.api.ncclGather.is_some() && self.api.ncclScatter.is_some()
    }

    /// Whether the device API's host side exists (`ncclDevCommCreate`, `ncclDevCommDestroy`,
    /// `ncclTeamLsa`: NCCL >= 2.28), so that [`Comm::dev_comm_create`](super::Comm::dev_comm_create)
    /// can work.
    pub fn has_device_api(&self) -> bool {
        self.api.ncclDevCommCreate.is_some()
            && self.api.ncclDevCommDestroy.is_some()
            && self.api.ncclTeamLsa.is_some()
    }

    /// `Ok` when this NCCL can run collectives of `dtype` on `device`, else
    /// [`NcclError::Unsupported`] (fp8 needs NCCL >= 2.24 and compute capability >= 9.0).
    pub fn check_type(&self, dtype: DataType, device: &Device) -> Result<()> {
        dtype.check_supported(self.version, device.compute_capability())
    }

    /// A fresh unique id (`ncclGetUniqueId`), to be sent to every rank of a new communicator.
    /// Rank 0 of the bootstrap calls it; NCCL keeps a listening thread for it.
    pub fn unique_id(&self) -> Result<UniqueId> {
        let mut id = sys::ncclUniqueId {
            internal: [0; sys::NCCL_UNIQUE_ID_BYTES],
        };
        // SAFETY: writes 128 bytes into `id`.
        let rc = unsafe { (self.api.ncclGetUniqueId)(&mut id) };
        self.check("ncclGetUniqueId", rc, std::ptr::null_mut())?;
        Ok(UniqueId(id.internal))
    }

    /// The library's last error text (`ncclGetLastError(NULL)`), on one line; empty when
    /// NCCL recorded none. nccl-tests prints it after its report.
    pub fn last_error_text(&self) -> String {
        self.last_error(std::ptr::null_mut())
    }

    /// `ncclGetLastError` text, one line (empty when NCCL recorded nothing).
    pub(crate) fn last_error(&self, comm: ncclComm_t) -> String {
        // SAFETY: comm is a live communicator or NULL (the argument is unused by NCCL); the
        // result is NULL or a NUL-terminated string owned by NCCL.
        let p = unsafe { (self.api.ncclGetLastError)(comm) };
        if p.is_null() {
            return String::new();
        }
        // SAFETY: non-NULL pointers from ncclGetLastError are NUL-terminated.
        let s = unsafe { CStr::from_ptr(p) }.to_string_lossy();
        s.split_whitespace().collect::<Vec<_>>().join(" ")
    }

    /// `Ok` for `ncclSuccess`, else [`NcclError::Call`] with the last error text.
    #[inline]
    pub(crate) fn check(
        &self,
        call: &'static str,
        rc: sys::ncclResult_t,
        comm: ncclComm_t,
    ) -> Result<()> {
        if rc == 0 {
            return Ok(());
        }
        self.call_error(call, rc, comm)
    }

    /// The error of a failed call (out of line: the hot path only compares).
    #[cold]
    fn call_error(
        &self,
        call: &'static str,
        rc: sys::ncclResult_t,
        comm: ncclComm_t,
    ) -> Result<()> {
        Err(NcclError::Call {
            call,
            code: ResultCode(rc),
            last_error: self.last_error(comm),
        })
    }

    /// Allocates `bytes` with `ncclMemAlloc` on `device`: memory suited to NCCL buffer
    /// registration (nccl-tests `-R`). Freed with `ncclMemFree` when dropped.
    pub fn mem_alloc(&'static self, device: &Device, bytes: usize) -> Result<DeviceBuffer<u8>> {
        if bytes == 0 {
            return Err(NcclError::invalid("ncclMemAlloc of 0 bytes"));
        }
        device.bind()?;
        let mut p: *mut c_void = std::ptr::null_mut();
        // SAFETY: the device's context is current; NCCL writes one device pointer.
        let rc = unsafe { (self.api.ncclMemAlloc)(&mut p, bytes) };
        self.check("ncclMemAlloc", rc, std::ptr::null_mut())?;
        let free_fn = self.api.ncclMemFree;
        let free = Box::new(move |ptr: DevicePtr| {
            // SAFETY: called once by DeviceBuffer's drop, with the context current and the
            // device idle, on the pointer ncclMemAlloc returned.
            unsafe { free_fn(ptr.as_mut_ptr()) };
        });
        // SAFETY: p addresses `bytes` bytes on `device` owned by nobody else; `free`
        // releases exactly that allocation.
        Ok(unsafe { DeviceBuffer::from_raw_parts(device, DevicePtr(p as u64), bytes, free) })
    }
}

/// The loader's own words (`dlerror`), which libloading keeps as the error's source.
fn loader_message(e: &libloading::Error) -> String {
    match std::error::Error::source(e) {
        Some(src) => src.to_string(),
        None => e.to_string(),
    }
}

enum OpenError {
    /// dlopen failed: the message.
    Load(String),
    /// The library loaded but is unusable.
    Nccl(NcclError),
}

/// An `ncclUniqueId`: 128 opaque bytes that identify a communicator being created. Send them
/// to every rank by any means (MPI broadcast, TCP, a file).
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct UniqueId(pub(crate) [u8; sys::NCCL_UNIQUE_ID_BYTES]);

impl UniqueId {
    /// Size of the id in bytes (`NCCL_UNIQUE_ID_BYTES`).
    pub const BYTES: usize = sys::NCCL_UNIQUE_ID_BYTES;

    /// The id's bytes.
    pub fn as_bytes(&self) -> &[u8; Self::BYTES] {
        &self.0
    }

    /// An id from the bytes another rank sent; they must be exactly 128.
    pub fn from_bytes(bytes: &[u8]) -> Result<UniqueId> {
        let arr: [u8; Self::BYTES] = bytes.try_into().map_err(|_| {
            NcclError::invalid(format!(
                "an NCCL unique id has {} bytes, got {}",
                Self::BYTES,
                bytes.len()
            ))
        })?;
        Ok(UniqueId(arr))
    }

    pub(crate) fn raw(&self) -> sys::ncclUniqueId {
        sys::ncclUniqueId { internal: self.0 }
    }
}

impl fmt::Debug for UniqueId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let head: String = self.0[..8].iter().map(|b| format!("{b:02x}")).collect();
        write!(f, "UniqueId({head}...)")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unique_id_round_trips_and_checks_length() {
        let bytes: Vec<u8> = (0..128u8).collect();
        let id = UniqueId::from_bytes(&bytes).unwrap();
        assert_eq!(&id.as_bytes()[..], &bytes[..]);
        assert_eq!(format!("{id:?}"), "UniqueId(0001020304050607...)");
        let e = UniqueId::from_bytes(&bytes[..100]).unwrap_err();
        assert_eq!(
            e.to_string(),
            "invalid argument: an NCCL unique id has 128 bytes, got 100"
        );
    }

    #[test]
    fn missing_candidates_give_a_typed_error() {
        let e =
            Nccl::load_candidates(&["libnccl-does-not-exist.so.2", "libnccl-nope.so"]).unwrap_err();
        match &e {
            NcclError::LibraryNotFound { tried, detail } => {
                assert_eq!(tried.len(), 2);
                assert!(detail.contains("libnccl-does-not-exist.so.2"), "{detail}");
            }
            other => panic!("unexpected {other:?}"),
        }
        assert_eq!(e.exit_status(), 3);
    }
}
