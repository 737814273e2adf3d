//! Collective semantics computed on the host from every rank's input: what
//! the host backend executes for the collectives that move data, the
//! element-wise reference its reduction kernels (`hostreduce`) are tested
//! against, and the argument checks the host-memory backends (host, mpi)
//! share.

use crate::nccltests::colls::CollKind;
use crate::nccltests::errors::{TestError, TestResult};
use crate::nccltests::types::{DataType, ReduceOp};
use crate::nccltests::verifiable::{avg_pre_op, combine, post_op, pre_op};

/// Bytes rank contributes (read from its send side) for one call.
pub fn input_bytes(kind: CollKind, count: usize, ws: usize, nranks: usize) -> usize {
    match kind {
        CollKind::ReduceScatter | CollKind::AllToAll | CollKind::Scatter => nranks * count * ws,
        _ => count * ws,
    }
}

/// Bytes a rank's call writes on its receive side.
pub fn output_bytes(kind: CollKind, count: usize, ws: usize, nranks: usize) -> usize {
    match kind {
        CollKind::AllGather | CollKind::Gather | CollKind::AllToAll | CollKind::HyperCube => {
            nranks * count * ws
        }
        _ => count * ws,
    }
}

/// Whether the collective takes a root.
pub fn is_rooted(kind: CollKind) -> bool {
    matches!(
        kind,
        CollKind::Broadcast | CollKind::Reduce | CollKind::Gather | CollKind::Scatter
    )
}

/// `Ok` unless `kind` takes a root and `root` is not a rank; the error is
/// `lib`'s (the backend's) failure of the collective.
pub fn check_root(lib: &'static str, kind: CollKind, root: i32, nranks: usize) -> TestResult<()> {
    if is_rooted(kind) && !(0..nranks as i32).contains(&root) {
        return Err(TestError::comm(
            lib,
            "collective",
            format!("invalid argument: root {root} is not a rank (0..{nranks})"),
        ));
    }
    Ok(())
}

/// `lib`'s failure for bytes `off..off + len` outside a `size`-byte buffer.
pub fn range_err(lib: &'static str, what: &str, off: usize, len: usize, size: usize) -> TestError {
    TestError::comm(
        lib,
        what,
        format!(
            "invalid argument: bytes {off}..{} outside a {size}-byte buffer",
            // Called when off + len overflowed too: never panic while reporting it.
            off.saturating_add(len)
        ),
    )
}

fn load(b: &[u8], ws: usize, e: usize) -> u64 {
    let mut x = [0u8; 8];
    x[..ws].copy_from_slice(&b[e * ws..(e + 1) * ws]);
    u64::from_le_bytes(x)
}

/// The per-rank pre-operation NCCL applies (PreMulSum scalar, float avg 1/n).
pub fn pre(dt: DataType, op: ReduceOp, x: u64, rank: usize, nranks: usize) -> u64 {
    if op == ReduceOp::Avg && dt.is_float() {
        avg_pre_op(dt, x, nranks as i32)
    } else {
        pre_op(dt, op, x, rank as i32)
    }
}

/// Element-wise reduction of `inputs` (one slice per rank, rank order).
pub fn reduce(dt: DataType, op: ReduceOp, inputs: &[&[u8]], out: &mut [u8]) {
    let ws = dt.size();
    let n = inputs.len();
    if n == 1 {
        // One contribution: every op (avg and mulsum included) is the identity.
        out.copy_from_slice(&inputs[0][..out.len()]);
        return;
    }
    for (e, o) in out.chunks_exact_mut(ws).enumerate() {
        let mut acc = pre(dt, op, load(inputs[0], ws, e), 0, n);
        for (k, inp) in inputs.iter().enumerate().skip(1) {
            acc = combine(dt, op, acc, pre(dt, op, load(inp, ws, e), k, n));
        }
        let v = post_op(dt, op, acc, n as i32);
        o.copy_from_slice(&v.to_le_bytes()[..ws]);
    }
}

/// Rank `me`'s output from every rank's input (each `input_bytes` long).
/// Returns false when the collective leaves this rank's output untouched.
#[allow(clippy::too_many_arguments)]
pub fn compute(
    kind: CollKind,
    dt: DataType,
    op: ReduceOp,
    root: usize,
    me: usize,
    count: usize,
    inputs: &[&[u8]],
    out: &mut [u8],
) -> bool {
    let n = inputs.len();
    let blk = count * dt.size();
    match kind {
        CollKind::AllReduce => reduce(dt, op, inputs, out),
        CollKind::Reduce if me == root => reduce(dt, op, inputs, out),
        CollKind::ReduceScatter => {
            let parts: Vec<&[u8]> = inputs
                .iter()
                .map(|i| &i[me * blk..(me + 1) * blk])
                .collect();
            reduce(dt, op, &parts, out);
        }
        CollKind::AllGather | CollKind::HyperCube => gather_into(inputs, blk, out),
        CollKind::Gather if me == root => gather_into(inputs, blk, out),
        CollKind::Broadcast => out.copy_from_slice(&inputs[root][..blk]),
        CollKind::Scatter => out.copy_from_slice(&inputs[root][me * blk..(me + 1) * blk]),
        CollKind::AllToAll => {
            for (k, inp) in inputs.iter().enumerate() {
                out[k * blk..(k + 1) * blk].copy_from_slice(&inp[me * blk..(me + 1) * blk]);
            }
        }
        CollKind::SendRecv => out.copy_from_slice(&inputs[(me + n - 1) % n][..blk]),
        CollKind::Reduce | CollKind::Gather => return false,
    }
    true
}

fn gather_into(inputs: &[&[u8]], blk: usize, out: &mut [u8]) {
    for (k, inp) in inputs.iter().enumerate() {
        out[k * blk..(k + 1) * blk].copy_from_slice(&inp[..blk]);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn f32s(v: &[f32]) -> Vec<u8> {
        v.iter().flat_map(|x| x.to_le_bytes()).collect()
    }

    #[test]
    fn reductions() {
        let a = f32s(&[1.0, 2.0]);
        let b = f32s(&[3.0, 5.0]);
        let mut out = vec![0u8; 8];
        reduce(DataType::Float32, ReduceOp::Sum, &[&a, &b], &mut out);
        assert_eq!(out, f32s(&[4.0, 7.0]));
        reduce(DataType::Float32, ReduceOp::PreMulSum, &[&a, &b], &mut out);
        assert_eq!(out, f32s(&[7.0, 12.0]));
        reduce(DataType::Float32, ReduceOp::Avg, &[&a, &b], &mut out);
        assert_eq!(out, f32s(&[2.0, 3.5]));
        let x: Vec<u8> = [7i32, -7].iter().flat_map(|v| v.to_le_bytes()).collect();
        let y: Vec<u8> = [0i32, 0].iter().flat_map(|v| v.to_le_bytes()).collect();
        let mut o = vec![0u8; 8];
        reduce(DataType::Int32, ReduceOp::Avg, &[&x, &y], &mut o);
        assert_eq!(
            o,
            [3i32, -3]
                .iter()
                .flat_map(|v| v.to_le_bytes())
                .collect::<Vec<u8>>()
        );
    }

    #[test]
    fn argument_checks_name_the_backend() {
        assert!(check_root("MPI", CollKind::AllReduce, -1, 2).is_ok());
        assert!(check_root("MPI", CollKind::Gather, 1, 2).is_ok());
        assert!(check_root("host", CollKind::Reduce, -1, 2).is_err());
        let e = check_root("MPI", CollKind::Broadcast, 2, 2).unwrap_err();
        assert!(
            matches!(&e, TestError::Comm { lib: "MPI", call, msg }
                if call == "collective" && msg == "invalid argument: root 2 is not a rank (0..2)"),
            "{e:?}"
        );
        let e = range_err("host", "send", 8, 16, 20);
        assert!(
            matches!(&e, TestError::Comm { lib: "host", call, msg }
                if call == "send" && msg == "invalid argument: bytes 8..24 outside a 20-byte buffer"),
            "{e:?}"
        );
    }

    #[test]
    fn data_movement() {
        let ins: Vec<Vec<u8>> = (0..3u8)
            .map(|r| (0..3).map(|k| r * 10 + k).collect())
            .collect();
        let refs: Vec<&[u8]> = ins.iter().map(|v| v.as_slice()).collect();
        let mut out = vec![0u8; 3];
        assert!(compute(
            CollKind::AllToAll,
            DataType::Uint8,
            ReduceOp::Sum,
            0,
            1,
            1,
            &refs,
            &mut out
        ));
        assert_eq!(out, vec![1, 11, 21]);
        assert!(compute(
            CollKind::Scatter,
            DataType::Uint8,
            ReduceOp::Sum,
            2,
            1,
            1,
            &refs,
            &mut out[..1]
        ));
        assert_eq!(out[0], 21);
        assert!(compute(
            CollKind::SendRecv,
            DataType::Uint8,
            ReduceOp::Sum,
            0,
            0,
            1,
            &refs,
            &mut out[..1]
        ));
        assert_eq!(out[0], 20);
        assert!(!compute(
            CollKind::Gather,
            DataType::Uint8,
            ReduceOp::Sum,
            2,
            1,
            1,
            &refs,
            &mut out
        ));
    }
}
