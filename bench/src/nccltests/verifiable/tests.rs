//! Self-test in the spirit of verifiable.cu's `sweep`: reducing every rank's
//! generated input (with the op's pre/post operations, in rank order) must
//! give the generated expected value, for every type, op and rank count.

use super::*;
use crate::nccltests::types::{DataType, ReduceOp};

fn reduce_inputs(dt: DataType, op: ReduceOp, rank_n: i32, seed: u64, ix: i64) -> u64 {
    let gop = GenOp::new(op, rank_n);
    let pre = |x: u64, r: i32| {
        if op == ReduceOp::Avg && dt.is_float() {
            avg_pre_op(dt, x, rank_n)
        } else {
            pre_op(dt, op, x, r)
        }
    };
    let mut acc = pre(gen_input(dt, gop, rank_n, 0, seed, ix), 0);
    for r in 1..rank_n {
        acc = combine(dt, op, acc, pre(gen_input(dt, gop, rank_n, r, seed, ix), r));
    }
    post_op(dt, op, acc, rank_n)
}

#[test]
fn every_type_op_and_rank_count_reduces_exactly() {
    let seed = 0xc8e2_bed6_9766_d533u64;
    for dt in DataType::ALL {
        for op in ReduceOp::ALL {
            for i in 0..7 {
                let rank_n = (1 << i) + i;
                let tol = tolerance(dt, op);
                for ix in 0..300 {
                    let want = gen_output(dt, GenOp::new(op, rank_n), rank_n, seed, ix);
                    let got = if rank_n == 1 {
                        gen_input(dt, GenOp::Nil, 1, 0, seed, ix)
                    } else {
                        reduce_inputs(dt, op, rank_n, seed, ix)
                    };
                    assert!(
                        got.abs_diff(want) <= tol,
                        "{dt:?} {op:?} rank_n={rank_n} ix={ix}: got {got:#x} want {want:#x}"
                    );
                }
            }
        }
    }
}

#[test]
fn float_results_are_finite_and_varied() {
    for dt in DataType::ALL.into_iter().filter(|d| d.is_float()) {
        for op in [
            ReduceOp::Sum,
            ReduceOp::Prod,
            ReduceOp::PreMulSum,
            ReduceOp::Max,
        ] {
            let outs: Vec<u64> = (0..64)
                .map(|ix| gen_output(dt, GenOp::Red(op), 4, 99, ix))
                .collect();
            assert!(
                outs.iter().all(|&b| to_f64(dt, b).is_finite()),
                "{dt:?} {op:?}"
            );
            let distinct: std::collections::HashSet<_> = outs.iter().collect();
            assert!(
                distinct.len() > 8,
                "{dt:?} {op:?} gives too few distinct values"
            );
        }
    }
}

#[test]
fn mixers_match_reference_values() {
    // Values computed with the C definitions of mixBits/hashOf.
    assert_eq!(rng::mix_bits(0), 0x1d81_f5cc_8a86_6192);
    assert_eq!(rng::mix_bits(0x0123_4567_89ab_cdef), 0xf163_74a5_c0ec_7766);
    assert_eq!(rng::hash_of(1, 2), 0xfccf_09d7_a3e7_6dd9);
}

#[test]
fn fill_and_count_wrong() {
    let g = Gen::Input {
        op: ReduceOp::Sum,
        rank_n: 1,
        rank_me: 0,
        seed: 5,
        ix0: 10,
    };
    let mut a = vec![0u8; 4 * 16];
    g.fill(DataType::Float32, 0, &mut a);
    let mut b = vec![0u8; 4 * 8];
    g.fill(DataType::Float32, 8, &mut b);
    assert_eq!(&a[32..], &b[..], "sub-ranges are generated independently");
    assert_eq!(count_wrong(DataType::Float32, 0, &a, &a), 0);
    let mut c = a.clone();
    c[5] ^= 1;
    c[60] ^= 0x80;
    assert_eq!(count_wrong(DataType::Float32, 0, &a, &c), 2);
}

/// A digest of every formula over a grid of types, ops, rank counts,
/// ranks, seeds and indices.
fn grid_digest() -> u64 {
    let mut h = 0u64;
    let mut mix = |x: u64| h = rng::hash_of(h ^ x, 0x9e37_79b9_7f4a_7c13);
    let indices: Vec<i64> = (0..64)
        .chain([1000, 65_535, 65_536, 1 << 31, (1 << 40) + 7])
        .collect();
    for dt in DataType::ALL {
        for op in ReduceOp::ALL {
            for rank_n in [1, 2, 3, 4, 7, 8, 16, 37] {
                let gop = GenOp::new(op, rank_n);
                for seed in [0u64, 99, 0xc8e2_bed6_9766_d533] {
                    for &ix in &indices {
                        mix(gen_output(dt, gop, rank_n, seed, ix));
                        for me in 0..rank_n.min(9) {
                            mix(gen_input(dt, gop, rank_n, me, seed, ix));
                        }
                    }
                }
            }
        }
    }
    h
}

#[test]
fn formulas_are_unchanged() {
    assert_eq!(
        grid_digest(),
        0x8d43_f7da_458f_9caa,
        "digest {:#x}",
        grid_digest()
    );
}
