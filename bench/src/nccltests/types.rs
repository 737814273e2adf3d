//! Data types and reduction operations, named and ordered as nccl-tests
//! names them (the order matters: `-d all` / `-o all` sweep in this order).

/// An element type (`ncclDataType_t`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum DataType {
    /// `ncclInt8`.
    Int8,
    /// `ncclUint8`.
    Uint8,
    /// `ncclInt32`.
    Int32,
    /// `ncclUint32`.
    Uint32,
    /// `ncclInt64`.
    Int64,
    /// `ncclUint64`.
    Uint64,
    /// `ncclFloat16`.
    Half,
    /// `ncclFloat32`.
    Float,
    /// `ncclFloat64`.
    Double,
    /// `ncclBfloat16` (NCCL >= 2.10).
    Bfloat16,
    /// `ncclFloat8e4m3` (NCCL >= 2.24, compute capability >= 9.0).
    F8e4m3,
    /// `ncclFloat8e5m2` (NCCL >= 2.24, compute capability >= 9.0).
    F8e5m2,
}

/// All types in nccl-tests' order.
pub const ALL_TYPES: [DataType; 12] = [
    DataType::Int8,
    DataType::Uint8,
    DataType::Int32,
    DataType::Uint32,
    DataType::Int64,
    DataType::Uint64,
    DataType::Half,
    DataType::Float,
    DataType::Double,
    DataType::Bfloat16,
    DataType::F8e4m3,
    DataType::F8e5m2,
];

impl DataType {
    /// The name nccl-tests prints and accepts with `-d`.
    pub fn name(self) -> &'static str {
        match self {
            DataType::Int8 => "int8",
            DataType::Uint8 => "uint8",
            DataType::Int32 => "int32",
            DataType::Uint32 => "uint32",
            DataType::Int64 => "int64",
            DataType::Uint64 => "uint64",
            DataType::Half => "half",
            DataType::Float => "float",
            DataType::Double => "double",
            DataType::Bfloat16 => "bfloat16",
            DataType::F8e4m3 => "f8e4m3",
            DataType::F8e5m2 => "f8e5m2",
        }
    }

    /// Element size in bytes (`wordSize`).
    pub fn size(self) -> usize {
        match self {
            DataType::Int8 | DataType::Uint8 | DataType::F8e4m3 | DataType::F8e5m2 => 1,
            DataType::Half | DataType::Bfloat16 => 2,
            DataType::Int32 | DataType::Uint32 | DataType::Float => 4,
            DataType::Int64 | DataType::Uint64 | DataType::Double => 8,
        }
    }

    /// Whether this is a floating-point type (avg gets a 2-ulp tolerance).
    pub fn is_float(self) -> bool {
        matches!(
            self,
            DataType::Half
                | DataType::Float
                | DataType::Double
                | DataType::Bfloat16
                | DataType::F8e4m3
                | DataType::F8e5m2
        )
    }

    /// The `ncclDataType_t` value, for backends that call NCCL.
    pub fn nccl_value(self) -> i32 {
        match self {
            DataType::Int8 => 0,
            DataType::Uint8 => 1,
            DataType::Int32 => 2,
            DataType::Uint32 => 3,
            DataType::Int64 => 4,
            DataType::Uint64 => 5,
            DataType::Half => 6,
            DataType::Float => 7,
            DataType::Double => 8,
            DataType::Bfloat16 => 9,
            DataType::F8e4m3 => 10,
            DataType::F8e5m2 => 11,
        }
    }
}

/// A reduction operation as nccl-tests selects it (`-o`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum RedOp {
    /// `ncclSum`.
    Sum,
    /// `ncclProd`.
    Prod,
    /// `ncclMax`.
    Max,
    /// `ncclMin`.
    Min,
    /// `ncclAvg` (NCCL >= 2.10).
    Avg,
    /// A pre-multiplied sum (`ncclRedOpCreatePreMulSum`, NCCL >= 2.11): each
    /// rank's input is scaled by [`premul_scalar`] of its rank, then summed.
    MulSum,
}

/// All ops in nccl-tests' order.
pub const ALL_OPS: [RedOp; 6] = [
    RedOp::Sum,
    RedOp::Prod,
    RedOp::Max,
    RedOp::Min,
    RedOp::Avg,
    RedOp::MulSum,
];

impl RedOp {
    /// The name nccl-tests prints and accepts with `-o`.
    pub fn name(self) -> &'static str {
        match self {
            RedOp::Sum => "sum",
            RedOp::Prod => "prod",
            RedOp::Max => "max",
            RedOp::Min => "min",
            RedOp::Avg => "avg",
            RedOp::MulSum => "mulsum",
        }
    }

    /// The `ncclRedOp_t` value (MulSum has none: it is created per call).
    pub fn nccl_value(self) -> Option<i32> {
        match self {
            RedOp::Sum => Some(0),
            RedOp::Prod => Some(1),
            RedOp::Max => Some(2),
            RedOp::Min => Some(3),
            RedOp::Avg => Some(4),
            RedOp::MulSum => None,
        }
    }
}

/// The scalar rank `rank` multiplies its input by for [`RedOp::MulSum`]
/// (`ncclVerifiablePremulScalar`): 1 on even ranks, 2 on odd ranks.
pub fn premul_scalar(rank: usize) -> f64 {
    if rank.is_multiple_of(2) { 1.0 } else { 2.0 }
}

/// Which types and ops the selected library supports; nccl-tests derives
/// these from `ncclGetVersion` (and drops fp8 below compute capability 9.0).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Features {
    /// Number of entries of [`ALL_TYPES`] available.
    pub type_count: usize,
    /// Number of entries of [`ALL_OPS`] available.
    pub op_count: usize,
}

impl Features {
    /// Everything (host backends implement every type and op).
    pub const ALL: Features = Features {
        type_count: 12,
        op_count: 6,
    };

    /// The tables nccl-tests 2.19.6 enables for a given `ncclGetVersion`
    /// code (0 = unknown, treated as the newest).
    pub fn for_nccl_version(version: i32) -> Features {
        if version == 0 {
            return Features::ALL;
        }
        let at_least = |maj: i32, min: i32| version >= maj * 10000 + min * 100;
        let mut f = Features {
            type_count: 9,
            op_count: 4,
        };
        if at_least(2, 10) {
            f.op_count += 1;
            f.type_count += 1;
        }
        if at_least(2, 11) {
            f.op_count += 1;
        }
        if at_least(2, 24) {
            f.type_count += 2;
        }
        f
    }

    /// The available types, in order.
    pub fn types(&self) -> &'static [DataType] {
        &ALL_TYPES[..self.type_count.min(ALL_TYPES.len())]
    }

    /// The available ops, in order.
    pub fn ops(&self) -> &'static [RedOp] {
        &ALL_OPS[..self.op_count.min(ALL_OPS.len())]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_and_names() {
        assert_eq!(DataType::Bfloat16.size(), 2);
        assert_eq!(DataType::F8e5m2.size(), 1);
        assert_eq!(DataType::Double.name(), "double");
        assert_eq!(RedOp::MulSum.name(), "mulsum");
        assert_eq!(premul_scalar(3), 2.0);
    }

    #[test]
    fn version_gates() {
        let old = Features::for_nccl_version(20903);
        assert_eq!((old.type_count, old.op_count), (9, 4));
        let v219 = Features::for_nccl_version(21903);
        assert_eq!((v219.type_count, v219.op_count), (10, 6));
        assert_eq!(Features::for_nccl_version(22809), Features::ALL);
        assert_eq!(v219.types().last(), Some(&DataType::Bfloat16));
    }
}
