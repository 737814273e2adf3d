//! NCCL data types and reduction operators, named as nccl-tests names them.

use std::ffi::c_int;
use std::fmt;
use std::str::FromStr;

use super::error::NcclError;
use super::version::Version;
use crate::cuda::DeviceRepr;

/// `ncclDataType_t`. Discriminants are NCCL's values (stable since 2.0; fp8 since 2.24).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[repr(i32)]
pub enum DataType {
    /// `ncclInt8`.
    Int8 = 0,
    /// `ncclUint8`.
    Uint8 = 1,
    /// `ncclInt32`.
    Int32 = 2,
    /// `ncclUint32`.
    Uint32 = 3,
    /// `ncclInt64`.
    Int64 = 4,
    /// `ncclUint64`.
    Uint64 = 5,
    /// `ncclFloat16` (half).
    Float16 = 6,
    /// `ncclFloat32`.
    Float32 = 7,
    /// `ncclFloat64`.
    Float64 = 8,
    /// `ncclBfloat16`.
    Bfloat16 = 9,
    /// `ncclFloat8e4m3` (NCCL >= 2.24, compute capability >= 9.0).
    Float8e4m3 = 10,
    /// `ncclFloat8e5m2` (NCCL >= 2.24, compute capability >= 9.0).
    Float8e5m2 = 11,
}

impl DataType {
    /// Every type, in nccl-tests' order (`-d all`).
    pub const ALL: [DataType; 12] = [
        DataType::Int8,
        DataType::Uint8,
        DataType::Int32,
        DataType::Uint32,
        DataType::Int64,
        DataType::Uint64,
        DataType::Float16,
        DataType::Float32,
        DataType::Float64,
        DataType::Bfloat16,
        DataType::Float8e4m3,
        DataType::Float8e5m2,
    ];

    /// nccl-tests' name (`-d` argument and the `type` column).
    pub fn name(self) -> &'static str {
        match self {
            DataType::Int8 => "int8",
            DataType::Uint8 => "uint8",
            DataType::Int32 => "int32",
            DataType::Uint32 => "uint32",
            DataType::Int64 => "int64",
            DataType::Uint64 => "uint64",
            DataType::Float16 => "half",
            DataType::Float32 => "float",
            DataType::Float64 => "double",
            DataType::Bfloat16 => "bfloat16",
            DataType::Float8e4m3 => "f8e4m3",
            DataType::Float8e5m2 => "f8e5m2",
        }
    }

    /// Bytes per element.
    pub fn size(self) -> usize {
        match self {
            DataType::Int8 | DataType::Uint8 | DataType::Float8e4m3 | DataType::Float8e5m2 => 1,
            DataType::Float16 | DataType::Bfloat16 => 2,
            DataType::Int32 | DataType::Uint32 | DataType::Float32 => 4,
            DataType::Int64 | DataType::Uint64 | DataType::Float64 => 8,
        }
    }

    /// Whether the type is a floating-point format.
    pub fn is_float(self) -> bool {
        matches!(
            self,
            DataType::Float16
                | DataType::Float32
                | DataType::Float64
                | DataType::Bfloat16
                | DataType::Float8e4m3
                | DataType::Float8e5m2
        )
    }

    /// The value NCCL takes.
    pub fn raw(self) -> c_int {
        self as c_int
    }

    /// Whether the type is one of the fp8 formats.
    pub fn is_fp8(self) -> bool {
        matches!(self, DataType::Float8e4m3 | DataType::Float8e5m2)
    }

    /// `Ok` when NCCL can reduce this type with `op` in a communicator of `nranks` ranks.
    ///
    /// NCCL 2.24 to 2.30 (at least) run one-rank reductions through a host-side switch
    /// (`ncclLaunchOneRank`, src/device/onerank.cu) whose fp8 cases are compiled out, so avg
    /// and PreMulSum of fp8 data on a single-rank communicator fail with
    /// `ncclInvalidArgument`; with two or more ranks they work.
    pub fn check_reduction(self, op: ReduceOp, nranks: usize) -> Result<(), NcclError> {
        if nranks == 1 && self.is_fp8() && matches!(op, ReduceOp::Avg | ReduceOp::PreMulSum) {
            return Err(NcclError::Unsupported {
                what: format!(
                    "{} reductions of {} data need at least 2 ranks (NCCL's single-rank path has no fp8 kernel for them)",
                    op.name(),
                    self.name()
                ),
            });
        }
        Ok(())
    }

    /// The first NCCL release with this type (within the supported range).
    pub fn min_nccl_version(self) -> Version {
        match self {
            DataType::Float8e4m3 | DataType::Float8e5m2 => Version::FP8,
            _ => Version::MIN_SUPPORTED,
        }
    }

    /// The lowest compute capability NCCL reduces this type on (fp8: Hopper, 9.0).
    pub fn min_compute_capability(self) -> (u32, u32) {
        match self {
            DataType::Float8e4m3 | DataType::Float8e5m2 => (9, 0),
            _ => (0, 0),
        }
    }

    /// `Ok` when NCCL `nccl` on a GPU of compute capability `cc` handles this type, else
    /// [`NcclError::Unsupported`] saying why (what nccl-tests filters out of `-d all`).
    pub fn check_supported(self, nccl: Version, cc: (u32, u32)) -> Result<(), NcclError> {
        if nccl < self.min_nccl_version() {
            return Err(NcclError::Unsupported {
                what: format!(
                    "data type {} needs NCCL >= {} (loaded {nccl})",
                    self.name(),
                    self.min_nccl_version()
                ),
            });
        }
        let min = self.min_compute_capability();
        if cc < min {
            return Err(NcclError::Unsupported {
                what: format!(
                    "data type {} needs a GPU of compute capability >= {}.{} (this one is {}.{})",
                    self.name(),
                    min.0,
                    min.1,
                    cc.0,
                    cc.1
                ),
            });
        }
        Ok(())
    }
}

impl fmt::Display for DataType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for DataType {
    type Err = NcclError;

    /// Accepts nccl-tests' names exactly (`float`, `half`, `bfloat16`, `f8e4m3`, ...).
    fn from_str(s: &str) -> Result<Self, NcclError> {
        DataType::ALL
            .into_iter()
            .find(|t| t.name() == s)
            .ok_or_else(|| NcclError::InvalidArgument {
                what: format!(
                    "unknown data type '{s}'; valid: {}",
                    DataType::ALL.map(DataType::name).join(" ")
                ),
            })
    }
}

/// The reductions nccl-tests runs (`-o`): NCCL's built-ins plus PreMulSum ("mulsum").
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum ReduceOp {
    /// `ncclSum`.
    Sum,
    /// `ncclProd`.
    Prod,
    /// `ncclMax`.
    Max,
    /// `ncclMin`.
    Min,
    /// `ncclAvg`.
    Avg,
    /// A PreMulSum operator (`ncclRedOpCreatePreMulSum`): each rank's input is multiplied by
    /// a scalar before summing. Needs a per-communicator handle, see `Comm::pre_mul_sum`.
    PreMulSum,
}

impl ReduceOp {
    /// Every operator, in nccl-tests' order (`-o all`).
    pub const ALL: [ReduceOp; 6] = [
        ReduceOp::Sum,
        ReduceOp::Prod,
        ReduceOp::Max,
        ReduceOp::Min,
        ReduceOp::Avg,
        ReduceOp::PreMulSum,
    ];

    /// nccl-tests' name (`-o` argument and the `redop` column).
    pub fn name(self) -> &'static str {
        match self {
            ReduceOp::Sum => "sum",
            ReduceOp::Prod => "prod",
            ReduceOp::Max => "max",
            ReduceOp::Min => "min",
            ReduceOp::Avg => "avg",
            ReduceOp::PreMulSum => "mulsum",
        }
    }

    /// The NCCL handle of a built-in operator; `None` for PreMulSum, which must be created.
    pub fn builtin(self) -> Option<RedOp> {
        match self {
            ReduceOp::Sum => Some(RedOp::SUM),
            ReduceOp::Prod => Some(RedOp::PROD),
            ReduceOp::Max => Some(RedOp::MAX),
            ReduceOp::Min => Some(RedOp::MIN),
            ReduceOp::Avg => Some(RedOp::AVG),
            ReduceOp::PreMulSum => None,
        }
    }
}

impl fmt::Display for ReduceOp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for ReduceOp {
    type Err = NcclError;

    /// Accepts nccl-tests' names exactly (`sum prod max min avg mulsum`).
    fn from_str(s: &str) -> Result<Self, NcclError> {
        ReduceOp::ALL
            .into_iter()
            .find(|o| o.name() == s)
            .ok_or_else(|| NcclError::InvalidArgument {
                what: format!(
                    "unknown reduction '{s}'; valid: {}",
                    ReduceOp::ALL.map(ReduceOp::name).join(" ")
                ),
            })
    }
}

/// An `ncclRedOp_t` value as passed to a collective: a built-in operator or a handle from
/// `Comm::pre_mul_sum` (valid only on that communicator while its guard lives; NCCL rejects
/// other uses with `ncclInvalidArgument`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct RedOp(pub(crate) c_int);

impl RedOp {
    /// `ncclSum`.
    pub const SUM: RedOp = RedOp(0);
    /// `ncclProd`.
    pub const PROD: RedOp = RedOp(1);
    /// `ncclMax`.
    pub const MAX: RedOp = RedOp(2);
    /// `ncclMin`.
    pub const MIN: RedOp = RedOp(3);
    /// `ncclAvg`.
    pub const AVG: RedOp = RedOp(4);

    /// The value NCCL takes.
    pub fn raw(self) -> c_int {
        self.0
    }

    /// Which kind of reduction this is: a built-in, or PreMulSum for created operators (the
    /// only kind NCCL can create). `None` for negative values.
    pub fn kind(self) -> Option<ReduceOp> {
        match self.0 {
            0 => Some(ReduceOp::Sum),
            1 => Some(ReduceOp::Prod),
            2 => Some(ReduceOp::Max),
            3 => Some(ReduceOp::Min),
            4 => Some(ReduceOp::Avg),
            n if n >= 5 => Some(ReduceOp::PreMulSum),
            _ => None,
        }
    }

    /// An operator from its `ncclRedOp_t` value (e.g. one created by other code). NCCL
    /// rejects values it does not know with `ncclInvalidArgument`.
    pub const fn from_raw(value: c_int) -> RedOp {
        RedOp(value)
    }
}

/// Element types with an NCCL data type, for the safe collectives over
/// [`DeviceBuffer`](crate::cuda::DeviceBuffer)s.
///
/// # Safety
/// `DATA_TYPE.size()` must equal `size_of::<Self>()` and the layout must be NCCL's.
pub unsafe trait NcclType: DeviceRepr {
    /// The matching NCCL type.
    const DATA_TYPE: DataType;
}

macro_rules! nccl_type {
    ($t:ty, $dt:expr) => {
        // SAFETY: the Rust type has the size and representation of the NCCL type.
        unsafe impl NcclType for $t {
            const DATA_TYPE: DataType = $dt;
        }
    };
}

nccl_type!(i8, DataType::Int8);
nccl_type!(u8, DataType::Uint8);
nccl_type!(i32, DataType::Int32);
nccl_type!(u32, DataType::Uint32);
nccl_type!(i64, DataType::Int64);
nccl_type!(u64, DataType::Uint64);
nccl_type!(f32, DataType::Float32);
nccl_type!(f64, DataType::Float64);

macro_rules! bits_type {
    ($(#[$doc:meta])* $name:ident($bits:ty), $dt:expr) => {
        $(#[$doc])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
        #[repr(transparent)]
        pub struct $name(pub $bits);
        // SAFETY: a transparent wrapper of an integer: no padding, every bit pattern valid.
        unsafe impl DeviceRepr for $name {}
        nccl_type!($name, $dt);
    };
}

bits_type!(
    /// An IEEE half-precision value stored as its bits (`ncclFloat16`).
    Half(u16),
    DataType::Float16
);
bits_type!(
    /// A bfloat16 value stored as its bits (`ncclBfloat16`).
    BFloat16(u16),
    DataType::Bfloat16
);
bits_type!(
    /// An fp8 E4M3 value stored as its bits (`ncclFloat8e4m3`).
    F8E4M3(u8),
    DataType::Float8e4m3
);
bits_type!(
    /// An fp8 E5M2 value stored as its bits (`ncclFloat8e5m2`).
    F8E5M2(u8),
    DataType::Float8e5m2
);

/// A host value of some [`DataType`], the factor of a PreMulSum operator.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Scalar {
    dtype: DataType,
    bytes: [u8; 8],
}

impl Scalar {
    /// A scalar of `T`'s NCCL type.
    pub fn new<T: NcclType>(value: T) -> Scalar {
        let mut bytes = [0u8; 8];
        let n = std::mem::size_of::<T>();
        // SAFETY: T is plain data of n <= 8 bytes (NcclType sizes are 1, 2, 4 or 8).
        let src = unsafe { std::slice::from_raw_parts(&value as *const T as *const u8, n) };
        bytes[..n].copy_from_slice(src);
        Scalar {
            dtype: T::DATA_TYPE,
            bytes,
        }
    }

    /// A scalar from the native-endian bytes of a `dtype` value; the length must match.
    pub fn from_bytes(dtype: DataType, value: &[u8]) -> Result<Scalar, NcclError> {
        if value.len() != dtype.size() {
            return Err(NcclError::InvalidArgument {
                what: format!(
                    "a {} scalar has {} bytes, got {}",
                    dtype.name(),
                    dtype.size(),
                    value.len()
                ),
            });
        }
        let mut bytes = [0u8; 8];
        bytes[..value.len()].copy_from_slice(value);
        Ok(Scalar { dtype, bytes })
    }

    /// The scalar's type.
    pub fn dtype(&self) -> DataType {
        self.dtype
    }

    /// The value's bytes.
    pub fn as_bytes(&self) -> &[u8] {
        &self.bytes[..self.dtype.size()]
    }

    pub(crate) fn as_mut_ptr(&mut self) -> *mut std::ffi::c_void {
        self.bytes.as_mut_ptr() as *mut std::ffi::c_void
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn data_type_table_matches_nccl_and_nccl_tests() {
        let expect = [
            ("int8", 0, 1),
            ("uint8", 1, 1),
            ("int32", 2, 4),
            ("uint32", 3, 4),
            ("int64", 4, 8),
            ("uint64", 5, 8),
            ("half", 6, 2),
            ("float", 7, 4),
            ("double", 8, 8),
            ("bfloat16", 9, 2),
            ("f8e4m3", 10, 1),
            ("f8e5m2", 11, 1),
        ];
        for (t, (name, raw, size)) in DataType::ALL.into_iter().zip(expect) {
            assert_eq!((t.name(), t.raw(), t.size()), (name, raw, size));
            assert_eq!(name.parse::<DataType>().unwrap(), t);
        }
    }

    #[test]
    fn unknown_names_list_the_valid_ones() {
        let e = "fp32".parse::<DataType>().unwrap_err().to_string();
        assert!(e.contains("unknown data type 'fp32'"), "{e}");
        assert!(e.contains("int8 uint8 int32"), "{e}");
        assert!("Float".parse::<DataType>().is_err());
        let e = "add".parse::<ReduceOp>().unwrap_err();
        assert_eq!(e.exit_status(), 6);
    }

    #[test]
    fn op_table_matches_nccl_tests() {
        let names: Vec<_> = ReduceOp::ALL.iter().map(|o| o.name()).collect();
        assert_eq!(names, ["sum", "prod", "max", "min", "avg", "mulsum"]);
        for op in ReduceOp::ALL {
            assert_eq!(op.name().parse::<ReduceOp>().unwrap(), op);
        }
        assert_eq!(ReduceOp::Avg.builtin(), Some(RedOp(4)));
        assert_eq!(ReduceOp::Sum.builtin().unwrap().raw(), 0);
        assert_eq!(ReduceOp::PreMulSum.builtin(), None);
    }

    #[test]
    fn fp8_needs_new_nccl_and_hopper() {
        let f8 = DataType::Float8e4m3;
        assert!(f8.check_supported(Version::new(2, 28, 3), (9, 0)).is_ok());
        let old = f8
            .check_supported(Version::new(2, 21, 5), (9, 0))
            .unwrap_err();
        assert_eq!(old.exit_status(), 5);
        assert!(old.to_string().contains("NCCL >= 2.24.0"), "{old}");
        let ampere = f8
            .check_supported(Version::new(2, 28, 3), (8, 0))
            .unwrap_err();
        assert!(
            ampere.to_string().contains("compute capability >= 9.0"),
            "{ampere}"
        );
        assert!(
            DataType::Bfloat16
                .check_supported(Version::MIN_SUPPORTED, (7, 0))
                .is_ok()
        );
    }

    #[test]
    fn single_rank_fp8_avg_and_mulsum_are_unsupported() {
        for t in [DataType::Float8e4m3, DataType::Float8e5m2] {
            for op in [ReduceOp::Avg, ReduceOp::PreMulSum] {
                let e = t.check_reduction(op, 1).unwrap_err();
                assert_eq!(e.exit_status(), 5);
                assert!(e.to_string().contains("need at least 2 ranks"), "{e}");
                assert!(t.check_reduction(op, 2).is_ok());
            }
            assert!(t.check_reduction(ReduceOp::Sum, 1).is_ok());
        }
        assert!(
            DataType::Float16
                .check_reduction(ReduceOp::PreMulSum, 1)
                .is_ok()
        );
        assert_eq!(RedOp::AVG.kind(), Some(ReduceOp::Avg));
        assert_eq!(RedOp::from_raw(5).kind(), Some(ReduceOp::PreMulSum));
        assert_eq!(RedOp::from_raw(-1).kind(), None);
    }

    #[test]
    fn nccl_type_sizes_agree() {
        fn check<T: NcclType>() {
            assert_eq!(std::mem::size_of::<T>(), T::DATA_TYPE.size());
        }
        check::<i8>();
        check::<u8>();
        check::<i32>();
        check::<u32>();
        check::<i64>();
        check::<u64>();
        check::<f32>();
        check::<f64>();
        check::<Half>();
        check::<BFloat16>();
        check::<F8E4M3>();
        check::<F8E5M2>();
    }

    #[test]
    fn scalars_keep_their_bytes() {
        let s = Scalar::new(2.5f32);
        assert_eq!(s.dtype(), DataType::Float32);
        assert_eq!(s.as_bytes(), 2.5f32.to_ne_bytes());
        let h = Scalar::new(Half(0x3c00));
        assert_eq!(h.as_bytes(), 0x3c00u16.to_ne_bytes());
        assert!(Scalar::from_bytes(DataType::Float64, &[0; 4]).is_err());
        let d = Scalar::from_bytes(DataType::Int64, &7i64.to_ne_bytes()).unwrap();
        assert_eq!(d.as_bytes(), 7i64.to_ne_bytes());
    }
}
