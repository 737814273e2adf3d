//! nccl-tests' `runColl` for each collective (all_reduce.cu, alltoall.cu,
//! ...): which NCCL calls one rank issues for one [`CollCall`]. Runs inside
//! the timed loop: no allocation on the success path.

use erdma::cuda::{self, DevicePtr};
use erdma::nccl::{DataType, Group, NcclError, RedOp, ReduceOp, Scalar};

use super::device::WindowArgs;
use super::ranks::{DevState, RankState};
use super::{cuda_error, nccl_error};
use crate::nccltests::backend::CollCall;
use crate::nccltests::backend::hostcoll::{input_bytes, output_bytes};
use crate::nccltests::colls::{CollKind, Target};
use crate::nccltests::errors::{TestError, TestResult};
use crate::nccltests::types::premul_scalar;
use crate::nccltests::verifiable::from_f64;

/// `ncclVerifiablePremulScalar<T>(rank)` for every type, in `DataType::ALL`
/// order (index = NCCL type number): 1 on even ranks, 2 on odd ones.
pub(super) fn scalars_for_rank(rank: usize) -> TestResult<[Scalar; 12]> {
    let v = premul_scalar(rank);
    let mut out = [Scalar::new(0u8); 12];
    for (slot, dt) in out.iter_mut().zip(DataType::ALL) {
        let bits = if dt.is_float() {
            from_f64(dt, v)
        } else {
            v as u64
        };
        *slot = Scalar::from_bytes(dt, &bits.to_le_bytes()[..dt.size()])
            .map_err(|e| TestError::Internal(format!("premul scalar: {e}")))?;
    }
    Ok(out)
}

/// Issues `call` on one rank with its buffers `shift` bytes further on, as
/// nccl-tests' `startColl` + `runColl` do. The call itself keeps its offsets,
/// as on the prepared path: only the pointers move (the `-D` kernels take
/// the unshifted offsets, see `device_all_reduce`).
#[inline]
pub(super) fn run_coll(
    r: &RankState,
    call: &CollCall,
    shift: usize,
    timeout_s: i32,
) -> TestResult<()> {
    let (send, recv) = resolve(r, call, shift)?;
    // SAFETY: `resolve` checked both ranges, extended by `shift` bytes,
    // against the rank's buffers.
    unsafe {
        issue(
            r,
            call,
            send.byte_add(shift),
            recv.byte_add(shift),
            timeout_s,
        )
    }
}

/// `-D`: nccl-tests' `testLaunchDeviceKernel`. Kernels exist for sums only;
/// the input is the receive window in place. nccl-tests passes offset 0
/// whatever the iteration's shift (`shift + in_place ? ... : 0` evaluates to
/// 0 for all_reduce), so the shift is dropped here too; the `-u` offset is
/// kept (nccl-tests drops it as well, and then fails its own check).
///
/// # Safety
/// As [`issue`]: the call's ranges lie inside the rank's buffers, which the
/// windows register.
#[inline]
unsafe fn device_all_reduce(r: &RankState, dev: &DevState, call: &CollCall) -> TestResult<()> {
    if call.op != ReduceOp::Sum {
        return Err(TestError::NotImplemented(format!(
            "device implementation kernels reduce with sum only, not {}",
            call.op.name()
        )));
    }
    let devcomm = match (&dev.fake, &dev.comm) {
        (Some(f), _) => f.as_kernel_param(),
        (None, Some(dc)) => dc.as_kernel_param(),
        (None, None) => {
            return Err(TestError::comm(
                "NCCL",
                "ncclDevComm",
                "the device communicator was destroyed",
            ));
        }
    };
    let send_win = if call.send.buf == Target::Recv {
        dev.recv_win
    } else {
        dev.send_win
    };
    let w = WindowArgs {
        send: send_win,
        send_offset: call.send.offset,
        recv: dev.recv_win,
        recv_offset: call.recv.offset,
    };
    // SAFETY: the windows are this rank's registrations of the buffers the
    // call's ranges lie in (the caller's contract) and stay registered until
    // `finish`, after every launch has completed.
    unsafe {
        dev.kernels
            .launch(call.dtype, &w, call.count, call.root, devcomm, &r.stream)
    }
}

/// The device addresses of `call`'s input and output, checked to lie inside
/// the rank's buffers for every shift up to `max_shift` bytes.
pub(super) fn resolve(
    r: &RankState,
    call: &CollCall,
    max_shift: usize,
) -> TestResult<(DevicePtr, DevicePtr)> {
    let n = r.comm()?.size();
    let ws = call.dtype.size();
    let span = |len: usize| {
        len.checked_add(max_shift)
            .ok_or_else(|| TestError::Internal("NCCL backend: shift overflows".into()))
    };
    let send = r.range(call.send, span(input_bytes(call.kind, call.count, ws, n))?)?;
    let recv = r.range(call.recv, span(output_bytes(call.kind, call.count, ws, n))?)?;
    Ok((send, recv))
}

/// Issues `call` with its input at `send` and its output at `recv`.
///
/// # Safety
/// `send` must address the `input_bytes` and `recv` the `output_bytes` of
/// `call` inside `r`'s buffers (what [`resolve`] checks).
#[inline]
pub(super) unsafe fn issue(
    r: &RankState,
    call: &CollCall,
    send: DevicePtr,
    recv: DevicePtr,
    timeout_s: i32,
) -> TestResult<()> {
    let comm = r.comm()?;
    let n = comm.size();
    let dt = call.dtype;
    let stream = &r.stream;
    let count = call.count;
    let fail = |name: &str, e: NcclError| nccl_error(name, e, timeout_s);
    let root = || {
        usize::try_from(call.root).map_err(|_| {
            TestError::comm(
                "NCCL",
                "root",
                format!("invalid argument: root {} is not a rank", call.root),
            )
        })
    };
    // SAFETY (every raw call in this match): `send` addresses the
    // `input_bytes` and `recv` the `output_bytes` this collective touches on
    // this rank (the caller's contract, checked by `resolve`); the buffers and
    // the communicator live in `r`, which outlives the enqueued work (its
    // buffers are freed only after a device synchronization), and the
    // harness issues nothing else on them until the stream is idle.
    if let Some(dev) = &r.dev
        && call.kind == CollKind::AllReduce
    {
        // SAFETY: see above; the windows cover the same buffers.
        return unsafe { device_all_reduce(r, dev, call) };
    }
    match call.kind {
        CollKind::AllReduce | CollKind::ReduceScatter | CollKind::Reduce => {
            let root = if call.kind == CollKind::Reduce {
                root()?
            } else {
                0
            };
            let red = |op| {
                // SAFETY: see above.
                unsafe { reduction(r, call, send, recv, op, root, timeout_s) }
            };
            match call.op.builtin() {
                Some(op) => red(op),
                // nccl-tests creates the PreMulSum operator with this rank's
                // scalar before every call and destroys it after.
                None => {
                    let scalar = &r.scalars[call.dtype.raw() as usize];
                    let pms = comm
                        .pre_mul_sum(scalar)
                        .map_err(|e| fail("ncclRedOpCreatePreMulSum", e))?;
                    let res = red(pms.op());
                    drop(pms); // ncclRedOpDestroy
                    res
                }
            }
        }
        // SAFETY: see above.
        CollKind::AllGather => unsafe {
            comm.all_gather_raw(send, recv, count, dt, stream)
                .map_err(|e| fail("ncclAllGather", e))
        },
        CollKind::Broadcast => {
            let root = root()?;
            // SAFETY: see above.
            unsafe {
                comm.broadcast_raw(send, recv, count, dt, root, stream)
                    .map_err(|e| fail("ncclBroadcast", e))
            }
        }
        // ncclAlltoAll from NCCL 2.28, grouped send/recv before.
        // SAFETY: see above.
        CollKind::AllToAll => unsafe {
            comm.all_to_all_raw(send, recv, count, dt, stream)
                .map_err(|e| fail("ncclAlltoAll", e))
        },
        // nccl-tests returns before calling NCCL when count is 0.
        CollKind::Gather if count == 0 => Ok(()),
        CollKind::Gather => {
            let root = root()?;
            // SAFETY: see above.
            unsafe {
                comm.gather_raw(send, recv, count, dt, root, stream)
                    .map_err(|e| fail("ncclGather", e))
            }
        }
        CollKind::Scatter if count == 0 => Ok(()),
        CollKind::Scatter => {
            let root = root()?;
            // SAFETY: see above.
            unsafe {
                comm.scatter_raw(send, recv, count, dt, root, stream)
                    .map_err(|e| fail("ncclScatter", e))
            }
        }
        CollKind::SendRecv => {
            let me = comm.rank();
            // SAFETY: only raw operations are recorded in it, on memory the rank owns
            // until its stream is synchronized, whichever group's end launches them.
            let group = unsafe { Group::start_nested(comm.nccl()) }
                .map_err(|e| fail("ncclGroupStart", e))?;
            // SAFETY: see above.
            unsafe {
                comm.send_raw(send, count, dt, (me + 1) % n, stream)
                    .map_err(|e| fail("ncclSend", e))?;
                comm.recv_raw(recv, count, dt, (me + n - 1) % n, stream)
                    .map_err(|e| fail("ncclRecv", e))?;
            }
            group.end().map_err(|e| fail("ncclGroupEnd", e)).map(|_| ())
        }
        // SAFETY: see above; n is a power of two (the driver skips others).
        CollKind::HyperCube => unsafe { hypercube(r, send, recv, count, dt, timeout_s) },
    }
}

/// The reduction collectives (`ncclAllReduce`, `ncclReduce` to `root`,
/// `ncclReduceScatter`) with operator `op`: the hot path of the timed loop,
/// so no closures or generic wrappers between the harness and NCCL.
///
/// # Safety
/// As [`issue`].
#[inline(always)]
unsafe fn reduction(
    r: &RankState,
    call: &CollCall,
    send: DevicePtr,
    recv: DevicePtr,
    op: RedOp,
    root: usize,
    timeout_s: i32,
) -> TestResult<()> {
    let comm = r.comm()?;
    let (count, dt, stream) = (call.count, call.dtype, &r.stream);
    // SAFETY: the caller's contract (as `issue`).
    let (name, res) = unsafe {
        match call.kind {
            CollKind::Reduce => (
                "ncclReduce",
                comm.reduce_raw(send, recv, count, dt, op, root, stream),
            ),
            CollKind::ReduceScatter => (
                "ncclReduceScatter",
                comm.reduce_scatter_raw(send, recv, count, dt, op, stream),
            ),
            _ => (
                "ncclAllReduce",
                comm.all_reduce_raw(send, recv, count, dt, op, stream),
            ),
        }
    };
    res.map_err(|e| nccl_error(name, e, timeout_s))
}

/// hypercube.cu: copy the own block into place, then log2(n) grouped
/// exchanges of doubling size with rank ^ mask.
///
/// # Safety
/// `send` must address `count` elements and `recv` `count * n` elements of
/// `dt` in the rank's buffers, alive until the work completes.
unsafe fn hypercube(
    r: &RankState,
    send: DevicePtr,
    recv: DevicePtr,
    count: usize,
    dt: DataType,
    timeout_s: i32,
) -> TestResult<()> {
    let comm = r.comm()?;
    let (me, n) = (comm.rank(), comm.size());
    let fail = |name: &str, e: NcclError| nccl_error(name, e, timeout_s);
    let block = count * dt.size();
    let own = recv.byte_add(me * block);
    if own.0 != send.0 {
        // SAFETY: `own` is block `me` of `recv` and `send` holds one block.
        unsafe { cuda::copy_dtod_raw(own, send, block, &r.stream) }
            .map_err(|e| cuda_error("cudaMemcpyAsync", e))?;
    }
    let mut mask = 1;
    while mask < n {
        let s = me & !(mask - 1);
        let peer_block = s ^ mask;
        // SAFETY: only raw operations are recorded in it, on memory the rank owns
        // until its stream is synchronized, whichever group's end launches them.
        let group =
            unsafe { Group::start_nested(comm.nccl()) }.map_err(|e| fail("ncclGroupStart", e))?;
        // SAFETY: blocks s..s+mask and peer_block..peer_block+mask lie inside
        // the n blocks of `recv` (n is a power of two, the driver checks).
        unsafe {
            comm.send_raw(
                recv.byte_add(s * block),
                count * mask,
                dt,
                me ^ mask,
                &r.stream,
            )
            .map_err(|e| fail("ncclSend", e))?;
            comm.recv_raw(
                recv.byte_add(peer_block * block),
                count * mask,
                dt,
                me ^ mask,
                &r.stream,
            )
            .map_err(|e| fail("ncclRecv", e))?;
        }
        group.end().map_err(|e| fail("ncclGroupEnd", e))?;
        mask <<= 1;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn premul_scalars_are_one_on_even_ranks_and_two_on_odd() {
        let even = scalars_for_rank(4).unwrap();
        let odd = scalars_for_rank(7).unwrap();
        let idx = |dt: DataType| dt.raw() as usize;
        assert_eq!(odd[idx(DataType::Int32)].as_bytes(), &2i32.to_le_bytes());
        assert_eq!(even[idx(DataType::Uint64)].as_bytes(), &1u64.to_le_bytes());
        assert_eq!(odd[idx(DataType::Float32)].as_bytes(), &2f32.to_le_bytes());
        assert_eq!(odd[idx(DataType::Float64)].as_bytes(), &2f64.to_le_bytes());
        // half 2.0 = 0x4000, bfloat16 2.0 = 0x4000, e4m3 2.0 = 0x40, e5m2 2.0 = 0x40.
        assert_eq!(odd[idx(DataType::Float16)].as_bytes(), &[0x00, 0x40]);
        assert_eq!(odd[idx(DataType::Bfloat16)].as_bytes(), &[0x00, 0x40]);
        assert_eq!(odd[idx(DataType::Float8e4m3)].as_bytes(), &[0x40]);
        assert_eq!(odd[idx(DataType::Float8e5m2)].as_bytes(), &[0x40]);
        // 1.0: half 0x3c00, e4m3 0x38, e5m2 0x3c.
        assert_eq!(even[idx(DataType::Float16)].as_bytes(), &[0x00, 0x3c]);
        assert_eq!(even[idx(DataType::Float8e4m3)].as_bytes(), &[0x38]);
        assert_eq!(even[idx(DataType::Float8e5m2)].as_bytes(), &[0x3c]);
        for (s, dt) in even.iter().zip(DataType::ALL) {
            assert_eq!(s.dtype(), dt);
        }
    }
}
