//! Access to the run-time-loaded libraries, with their errors mapped to [`Error`].

use crate::error::{Error, Result};
use erdma_sys as sys;

/// libibverbs, or [`Error::LibraryMissing`].
pub(crate) fn verbs() -> Result<&'static sys::Ibverbs> {
    sys::ibverbs().map_err(|e| Error::LibraryMissing {
        library: "libibverbs",
        detail: e.to_string(),
    })
}

/// librdmacm, or [`Error::LibraryMissing`].
pub(crate) fn rdmacm() -> Result<&'static sys::Rdmacm> {
    sys::rdmacm().map_err(|e| Error::LibraryMissing {
        library: "librdmacm",
        detail: e.to_string(),
    })
}

/// The function pointer of an optional symbol (one newer than the oldest
/// supported rdma-core), or [`Error::Unsupported`] naming it.
macro_rules! optional_fn {
    ($lib:expr, $name:ident) => {
        match $lib.$name {
            Ok(f) => f,
            Err(_) => {
                return Err($crate::error::Error::Unsupported {
                    feature: format!("{} (the installed rdma-core is too old)", stringify!($name)),
                    device: None,
                    hint: Some("install rdma-core >= 44 (ibverbs-providers, libibverbs1)".into()),
                })
            }
        }
    };
}
pub(crate) use optional_fn;

/// A `*mut T` that may cross threads: the rdma-core objects behind these
/// pointers are thread safe (libibverbs serialises internally), and each
/// owner type documents who frees it.
#[derive(Debug)]
pub(crate) struct Ptr<T>(pub *mut T);
// SAFETY: see the type's documentation; every use goes through an owner type
// whose methods respect rdma-core's threading rules.
unsafe impl<T> Send for Ptr<T> {}
// SAFETY: as above.
unsafe impl<T> Sync for Ptr<T> {}
impl<T> Clone for Ptr<T> {
    fn clone(&self) -> Self {
        *self
    }
}
impl<T> Copy for Ptr<T> {}
