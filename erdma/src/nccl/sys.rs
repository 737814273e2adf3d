//! Raw NCCL ABI: the C types of nccl.h and the function table resolved from the library.
//!
//! Written by hand from nccl.h 2.19 to 2.30 (NVIDIA/nccl `src/nccl.h.in`): the ABI is stable
//! across those releases, `ncclConfig_t` only grows at its end, and results, types and
//! operators are plain C ints.

#![allow(non_camel_case_types, non_snake_case)]

use std::ffi::{c_char, c_int, c_uint, c_void};

use cudarc::driver::sys::CUstream;

/// `ncclComm_t`: an opaque communicator pointer.
pub type ncclComm_t = *mut c_void;
/// `ncclResult_t`.
pub type ncclResult_t = c_int;
/// `ncclDataType_t`.
pub type ncclDataType_t = c_int;
/// `ncclRedOp_t`.
pub type ncclRedOp_t = c_int;
/// `cudaStream_t` (the same handle as the driver's `CUstream`).
pub type cudaStream_t = CUstream;

/// `NCCL_UNIQUE_ID_BYTES`.
pub const NCCL_UNIQUE_ID_BYTES: usize = 128;

/// `ncclUniqueId`, passed by value.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct ncclUniqueId {
    /// Opaque bytes.
    pub internal: [u8; NCCL_UNIQUE_ID_BYTES],
}

/// `ncclTeam_t` (nccl_device/core.h, NCCL 2.28): a set of ranks of a communicator.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ncclTeam_t {
    /// Ranks in the team.
    pub nRanks: c_int,
    /// This rank's index in the team.
    pub rank: c_int,
    /// Distance between consecutive team members in world ranks.
    pub stride: c_int,
}

/// `NCCL_CONFIG_UNDEF_INT`.
pub const NCCL_CONFIG_UNDEF_INT: c_int = c_int::MIN;
/// The magic `NCCL_CONFIG_INITIALIZER` writes.
pub const NCCL_CONFIG_MAGIC: c_uint = 0xcafe_beef;
/// `ncclScalarHostImmediate`: the PreMulSum scalar is read from host memory at creation.
pub const NCCL_SCALAR_HOST_IMMEDIATE: c_int = 1;

/// `ncclConfig_v22800` (nccl.h 2.28). Older libraries copy only the prefix they know
/// (`min(size, their sizeof)`) and reset fields newer than `version`; newer libraries keep
/// their defaults for fields past `size`. So one layout serves every release >= 2.19.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct ncclConfig_t {
    /// sizeof(ncclConfig_t).
    pub size: usize,
    /// [`NCCL_CONFIG_MAGIC`].
    pub magic: c_uint,
    /// `NCCL_VERSION` of the header the layout comes from.
    pub version: c_uint,
    /// 0 nonblocking, 1 blocking.
    pub blocking: c_int,
    /// CGA cluster size (sm90+).
    pub cgaClusterSize: c_int,
    /// Minimum CTAs (channels).
    pub minCTAs: c_int,
    /// Maximum CTAs (channels).
    pub maxCTAs: c_int,
    /// Network plugin name.
    pub netName: *const c_char,
    /// Share resources with split children.
    pub splitShare: c_int,
    /// Network traffic class (2.26).
    pub trafficClass: c_int,
    /// Communicator name for logs (2.27).
    pub commName: *const c_char,
    /// Enable CollNet (2.27).
    pub collnetEnable: c_int,
    /// CTA policy (2.27).
    pub CTAPolicy: c_int,
    /// Share resources with shrunk children (2.27).
    pub shrinkShare: c_int,
    /// NVLS CTAs (2.27).
    pub nvlsCTAs: c_int,
    /// Channels per network peer (2.28).
    pub nChannelsPerNetPeer: c_int,
    /// NVLink-centric scheduling (2.28).
    pub nvlinkCentricSched: c_int,
}

impl Default for ncclConfig_t {
    /// `NCCL_CONFIG_INITIALIZER` of nccl.h 2.28.
    fn default() -> Self {
        ncclConfig_t {
            size: std::mem::size_of::<ncclConfig_t>(),
            magic: NCCL_CONFIG_MAGIC,
            version: 22800,
            blocking: NCCL_CONFIG_UNDEF_INT,
            cgaClusterSize: NCCL_CONFIG_UNDEF_INT,
            minCTAs: NCCL_CONFIG_UNDEF_INT,
            maxCTAs: NCCL_CONFIG_UNDEF_INT,
            netName: std::ptr::null(),
            splitShare: NCCL_CONFIG_UNDEF_INT,
            trafficClass: NCCL_CONFIG_UNDEF_INT,
            commName: std::ptr::null(),
            collnetEnable: NCCL_CONFIG_UNDEF_INT,
            CTAPolicy: NCCL_CONFIG_UNDEF_INT,
            shrinkShare: NCCL_CONFIG_UNDEF_INT,
            nvlsCTAs: NCCL_CONFIG_UNDEF_INT,
            nChannelsPerNetPeer: NCCL_CONFIG_UNDEF_INT,
            nvlinkCentricSched: NCCL_CONFIG_UNDEF_INT,
        }
    }
}

macro_rules! nccl_table {
    (
        required { $($req:ident($($rarg:ty),*) -> $rret:ty;)* }
        optional { $($opt:ident($($oarg:ty),*) -> $oret:ty;)* }
    ) => {
        /// NCCL entry points: the 2.19 API (all present) and newer ones (`None` when absent).
        pub struct Api {
            $(
                #[doc = concat!("`", stringify!($req), "`.")]
                pub $req: unsafe extern "C" fn($($rarg),*) -> $rret,
            )*
            $(
                #[doc = concat!("`", stringify!($opt), "`, when the library has it.")]
                pub $opt: Option<unsafe extern "C" fn($($oarg),*) -> $oret>,
            )*
        }

        impl Api {
            /// Resolves the table, naming the first missing required symbol on failure.
            ///
            /// # Safety
            /// `lib` must be an NCCL library (its symbols have nccl.h's prototypes) and must
            /// never be unloaded.
            pub(crate) unsafe fn resolve(lib: &'static libloading::Library) -> Result<Api, &'static str> {
                Ok(Api {
                    $($req: {
                        // SAFETY: the caller guarantees the prototype matches nccl.h.
                        match unsafe { lib.get::<unsafe extern "C" fn($($rarg),*) -> $rret>(stringify!($req)) } {
                            Ok(s) => *s,
                            Err(_) => return Err(stringify!($req)),
                        }
                    },)*
                    $($opt: {
                        // SAFETY: the caller guarantees the prototype matches nccl.h.
                        unsafe { lib.get::<unsafe extern "C" fn($($oarg),*) -> $oret>(stringify!($opt)) }
                            .ok()
                            .map(|s| *s)
                    },)*
                })
            }
        }
    };
}

nccl_table! {
    required {
        ncclGetVersion(*mut c_int) -> ncclResult_t;
        ncclGetUniqueId(*mut ncclUniqueId) -> ncclResult_t;
        ncclCommInitRankConfig(*mut ncclComm_t, c_int, ncclUniqueId, c_int, *mut ncclConfig_t) -> ncclResult_t;
        ncclCommInitAll(*mut ncclComm_t, c_int, *const c_int) -> ncclResult_t;
        ncclCommFinalize(ncclComm_t) -> ncclResult_t;
        ncclCommDestroy(ncclComm_t) -> ncclResult_t;
        ncclCommAbort(ncclComm_t) -> ncclResult_t;
        ncclGetErrorString(ncclResult_t) -> *const c_char;
        ncclGetLastError(ncclComm_t) -> *const c_char;
        ncclCommGetAsyncError(ncclComm_t, *mut ncclResult_t) -> ncclResult_t;
        ncclCommCount(ncclComm_t, *mut c_int) -> ncclResult_t;
        ncclCommCuDevice(ncclComm_t, *mut c_int) -> ncclResult_t;
        ncclCommUserRank(ncclComm_t, *mut c_int) -> ncclResult_t;
        ncclRedOpCreatePreMulSum(*mut ncclRedOp_t, *mut c_void, ncclDataType_t, c_int, ncclComm_t) -> ncclResult_t;
        ncclRedOpDestroy(ncclRedOp_t, ncclComm_t) -> ncclResult_t;
        ncclReduce(*const c_void, *mut c_void, usize, ncclDataType_t, ncclRedOp_t, c_int, ncclComm_t, cudaStream_t) -> ncclResult_t;
        ncclBroadcast(*const c_void, *mut c_void, usize, ncclDataType_t, c_int, ncclComm_t, cudaStream_t) -> ncclResult_t;
        ncclAllReduce(*const c_void, *mut c_void, usize, ncclDataType_t, ncclRedOp_t, ncclComm_t, cudaStream_t) -> ncclResult_t;
        ncclReduceScatter(*const c_void, *mut c_void, usize, ncclDataType_t, ncclRedOp_t, ncclComm_t, cudaStream_t) -> ncclResult_t;
        ncclAllGather(*const c_void, *mut c_void, usize, ncclDataType_t, ncclComm_t, cudaStream_t) -> ncclResult_t;
        ncclSend(*const c_void, usize, ncclDataType_t, c_int, ncclComm_t, cudaStream_t) -> ncclResult_t;
        ncclRecv(*mut c_void, usize, ncclDataType_t, c_int, ncclComm_t, cudaStream_t) -> ncclResult_t;
        ncclGroupStart() -> ncclResult_t;
        ncclGroupEnd() -> ncclResult_t;
        ncclCommRegister(ncclComm_t, *mut c_void, usize, *mut *mut c_void) -> ncclResult_t;
        ncclCommDeregister(ncclComm_t, *mut c_void) -> ncclResult_t;
        ncclMemAlloc(*mut *mut c_void, usize) -> ncclResult_t;
        ncclMemFree(*mut c_void) -> ncclResult_t;
    }
    optional {
        ncclCommWindowRegister(ncclComm_t, *mut c_void, usize, *mut *mut c_void, c_int) -> ncclResult_t;
        ncclCommWindowDeregister(ncclComm_t, *mut c_void) -> ncclResult_t;
        ncclAlltoAll(*const c_void, *mut c_void, usize, ncclDataType_t, ncclComm_t, cudaStream_t) -> ncclResult_t;
        ncclGather(*const c_void, *mut c_void, usize, ncclDataType_t, c_int, ncclComm_t, cudaStream_t) -> ncclResult_t;
        ncclScatter(*const c_void, *mut c_void, usize, ncclDataType_t, c_int, ncclComm_t, cudaStream_t) -> ncclResult_t;
        ncclDevCommCreate(ncclComm_t, *const c_void, *mut c_void) -> ncclResult_t;
        ncclDevCommDestroy(ncclComm_t, *const c_void) -> ncclResult_t;
        ncclTeamLsa(ncclComm_t) -> ncclTeam_t;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::mem::{offset_of, size_of};

    #[test]
    fn config_layout_is_nccl_2_28() {
        // Offsets of ncclConfig_v22800 on LP64 (nccl.h 2.28.3).
        assert_eq!(offset_of!(ncclConfig_t, blocking), 16);
        assert_eq!(offset_of!(ncclConfig_t, netName), 32);
        // The end of the 2.19 layout (ncclConfig_v21700, 48 bytes) is splitShare.
        assert_eq!(offset_of!(ncclConfig_t, splitShare), 40);
        assert_eq!(offset_of!(ncclConfig_t, trafficClass), 44);
        assert_eq!(offset_of!(ncclConfig_t, commName), 48);
        assert_eq!(offset_of!(ncclConfig_t, nvlsCTAs), 68);
        assert_eq!(offset_of!(ncclConfig_t, nvlinkCentricSched), 76);
        assert_eq!(size_of::<ncclConfig_t>(), 80);
        let c = ncclConfig_t::default();
        assert_eq!(c.size, 80);
        assert_eq!(c.magic, 0xcafebeef);
        assert_eq!(c.blocking, i32::MIN);
    }

    #[test]
    fn unique_id_is_128_bytes() {
        assert_eq!(size_of::<ncclUniqueId>(), 128);
    }
}
