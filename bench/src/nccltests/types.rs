//! Data types and reduction operations, named and ordered as nccl-tests
//! names them (the order matters: `-d all` / `-o all` sweep in this order).
//!
//! The element types and operators themselves are erdma's
//! ([`erdma::nccl::DataType`], [`erdma::nccl::ReduceOp`]): one definition of
//! their names, sizes and NCCL numbering for the library and the harness, so
//! the NCCL backend passes them through unchanged. Their `name()` is
//! nccl-tests' spelling (`float`, `bfloat16`, `f8e4m3`, `mulsum`), which is
//! what `-d`/`-o` accept and what the output prints; the tests below pin it.
//! What only the harness needs (the PreMulSum scalar of a rank, the version
//! gates of `-d all`/`-o all`) lives here.

pub use erdma::nccl::{DataType, ReduceOp};

/// The scalar rank `rank` multiplies its input by for [`ReduceOp::PreMulSum`]
/// (`ncclVerifiablePremulScalar`): 1 on even ranks, 2 on odd ranks.
pub fn premul_scalar(rank: usize) -> f64 {
    if rank.is_multiple_of(2) { 1.0 } else { 2.0 }
}

/// Which types and ops the selected library supports; nccl-tests derives
/// these from `ncclGetVersion` (and drops fp8 below compute capability 9.0).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Features {
    /// Number of entries of [`DataType::ALL`] available.
    pub type_count: usize,
    /// Number of entries of [`ReduceOp::ALL`] available.
    pub op_count: usize,
}

impl Features {
    /// Everything (host backends implement every type and op).
    pub const ALL: Features = Features {
        type_count: DataType::ALL.len(),
        op_count: ReduceOp::ALL.len(),
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
        &DataType::ALL[..self.type_count.min(DataType::ALL.len())]
    }

    /// The available ops, in order.
    pub fn ops(&self) -> &'static [ReduceOp] {
        &ReduceOp::ALL[..self.op_count.min(ReduceOp::ALL.len())]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_and_names() {
        assert_eq!(DataType::Bfloat16.size(), 2);
        assert_eq!(DataType::Float8e5m2.size(), 1);
        assert_eq!(DataType::Float64.name(), "double");
        assert_eq!(ReduceOp::PreMulSum.name(), "mulsum");
        assert_eq!(premul_scalar(3), 2.0);
    }

    /// The harness prints these names and `-d`/`-o` accept exactly these, in
    /// this order (nccl-tests' `test_typenames`/`test_opnames`): erdma's
    /// names must stay nccl-tests' for the output to match.
    #[test]
    fn names_and_order_are_nccl_tests() {
        let types: Vec<_> = DataType::ALL.iter().map(|t| t.name()).collect();
        assert_eq!(
            types,
            [
                "int8", "uint8", "int32", "uint32", "int64", "uint64", "half", "float", "double",
                "bfloat16", "f8e4m3", "f8e5m2"
            ]
        );
        let ops: Vec<_> = ReduceOp::ALL.iter().map(|o| o.name()).collect();
        assert_eq!(ops, ["sum", "prod", "max", "min", "avg", "mulsum"]);
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
