//! Collectives and point-to-point operations on a [`Comm`].
//!
//! Each operation has an `unsafe` `*_raw` entry point taking device addresses (what a
//! benchmark harness needs: it enqueues at offsets into big buffers) and a safe variant over
//! [`DeviceBuffer`]s that checks lengths, GPUs and roots. All of them only enqueue work on the
//! stream; wait with `Stream::synchronize`, [`Comm::wait`] or [`wait_all`](super::wait_all).

use std::ffi::c_int;
use std::fmt;
use std::ptr::NonNull;

use super::comm::Comm;
use super::error::{NcclError, Result};
use super::group::{Group, in_group};
use super::sys::NCCL_SCALAR_HOST_IMMEDIATE;
use super::types::{DataType, NcclType, RedOp, Scalar};
use crate::cuda::{DeviceBuffer, DevicePtr, Stream};

/// A PreMulSum reduction operator of one communicator (nccl-tests' "mulsum"): inputs are
/// multiplied by the scalar, then summed. Destroyed (`ncclRedOpDestroy`) on drop; as NCCL
/// allows, it may be dropped as soon as the calls using it returned.
pub struct PreMulSum<'c> {
    comm: &'c Comm,
    op: RedOp,
    dtype: DataType,
}

impl fmt::Debug for PreMulSum<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PreMulSum")
            .field("op", &self.op.0)
            .field("dtype", &self.dtype)
            .finish()
    }
}

impl PreMulSum<'_> {
    /// The operator to pass to collectives of this communicator, for data of
    /// [`PreMulSum::dtype`].
    pub fn op(&self) -> RedOp {
        self.op
    }

    /// The data type the operator was created for.
    pub fn dtype(&self) -> DataType {
        self.dtype
    }
}

impl Drop for PreMulSum<'_> {
    fn drop(&mut self) {
        if let Ok(raw) = self.comm.handle() {
            // SAFETY: the operator was created on this live communicator and is destroyed once.
            unsafe { (self.comm.nccl.api.ncclRedOpDestroy)(self.op.0, raw) };
        }
    }
}

/// A buffer registration of one communicator (`ncclCommRegister` / window registration).
///
/// Inside a group NCCL completes a registration at the outermost `ncclGroupEnd` and only
/// then writes the handle, through the pointer it was given. The handle therefore lives in
/// a heap slot owned by this value (never a stack variable of the registering call), and is
/// read when used.
pub struct RegHandle {
    slot: NonNull<*mut std::ffi::c_void>,
    window: bool,
}

// SAFETY: the handle is an opaque token that NCCL reads only when it is passed back to a
// call on its communicator; it may travel with that communicator (which is Send) to
// another thread. The slot is plain heap memory owned by this value.
unsafe impl Send for RegHandle {}

impl fmt::Debug for RegHandle {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RegHandle")
            .field("raw", &self.as_raw())
            .field("window", &self.window)
            .finish()
    }
}

impl RegHandle {
    fn new(window: bool) -> RegHandle {
        RegHandle {
            slot: NonNull::from(Box::leak(Box::new(std::ptr::null_mut()))),
            window,
        }
    }

    /// Where NCCL writes the handle.
    fn out_ptr(&self) -> *mut *mut std::ffi::c_void {
        self.slot.as_ptr()
    }

    /// The raw handle: for a window, the `ncclWindow_t` that device-API kernels take. Null
    /// until the registration has completed (inside a group: after `ncclGroupEnd`), and for
    /// a registration NCCL skipped.
    pub fn as_raw(&self) -> *mut std::ffi::c_void {
        // SAFETY: the slot is a live heap allocation of this value; NCCL writes it only
        // during an NCCL call, never concurrently with this read (calls on one
        // communicator are not made from two threads at once).
        unsafe { self.slot.as_ptr().read_volatile() }
    }

    /// Whether this is a window registration (`ncclCommWindowRegister`).
    pub fn is_window(&self) -> bool {
        self.window
    }
}

impl Drop for RegHandle {
    fn drop(&mut self) {
        // A slot still null may belong to a registration pending in an open group, which
        // NCCL would write at ncclGroupEnd: it is leaked (8 bytes) rather than freed.
        if !self.as_raw().is_null() {
            // SAFETY: the slot came from Box::leak in `new` and is freed once, here; the
            // registration completed, so NCCL no longer holds the pointer.
            drop(unsafe { Box::from_raw(self.slot.as_ptr()) });
        }
    }
}

impl Comm {
    fn check_stream(&self, stream: &Stream) -> Result<()> {
        if stream.device().ordinal() != self.device().ordinal() {
            return Err(NcclError::invalid(format!(
                "stream of GPU {} used with rank {} on GPU {}",
                stream.device().ordinal(),
                self.rank(),
                self.device().ordinal()
            )));
        }
        Ok(())
    }

    fn check_buffer<T: NcclType>(
        &self,
        what: &str,
        buf: &DeviceBuffer<T>,
        need: usize,
    ) -> Result<()> {
        if buf.device().ordinal() != self.device().ordinal() {
            return Err(NcclError::invalid(format!(
                "{what} buffer on GPU {} used with rank {} on GPU {}",
                buf.device().ordinal(),
                self.rank(),
                self.device().ordinal()
            )));
        }
        if buf.len() < need {
            return Err(NcclError::invalid(format!(
                "{what} buffer holds {} elements, {need} needed",
                buf.len()
            )));
        }
        Ok(())
    }

    fn check_peer(&self, what: &str, peer: usize) -> Result<c_int> {
        if peer >= self.size() {
            return Err(NcclError::invalid(format!(
                "{what} {peer} is not below the communicator size {}",
                self.size()
            )));
        }
        Ok(peer as c_int)
    }

    fn check_type_safe<T: NcclType>(&self) -> Result<()> {
        self.nccl.check_type(T::DATA_TYPE, self.device())
    }

    /// `Ok` when NCCL can reduce `dtype` with `op` on this communicator (see
    /// [`DataType::check_reduction`]); the safe reductions check it, the raw ones leave it
    /// to NCCL.
    pub fn check_reduction(&self, dtype: DataType, op: RedOp) -> Result<()> {
        match op.kind() {
            Some(kind) => dtype.check_reduction(kind, self.size()),
            None => Err(NcclError::invalid(format!(
                "reduction operator {} is negative",
                op.raw()
            ))),
        }
    }

    fn mul_count(&self, count: usize) -> Result<usize> {
        count.checked_mul(self.size()).ok_or_else(|| {
            NcclError::invalid(format!(
                "count {count} times {} ranks overflows",
                self.size()
            ))
        })
    }

    /// Creates a PreMulSum operator multiplying by `scalar` (`ncclRedOpCreatePreMulSum`, the
    /// scalar read from host memory now).
    pub fn pre_mul_sum(&self, scalar: &Scalar) -> Result<PreMulSum<'_>> {
        let raw = self.handle()?;
        let mut s = *scalar;
        let mut op: c_int = 0;
        // SAFETY: the scalar has the size of its data type and is read before the call
        // returns (ncclScalarHostImmediate); NCCL writes one operator handle.
        let rc = unsafe {
            (self.nccl.api.ncclRedOpCreatePreMulSum)(
                &mut op,
                s.as_mut_ptr(),
                scalar.dtype().raw(),
                NCCL_SCALAR_HOST_IMMEDIATE,
                raw,
            )
        };
        self.settle("ncclRedOpCreatePreMulSum", rc)?;
        Ok(PreMulSum {
            comm: self,
            op: RedOp(op),
            dtype: scalar.dtype(),
        })
    }

    /// `ncclAllReduce` of `count` elements.
    ///
    /// # Safety
    /// `send` and `recv` must address `count` elements of `dtype` in memory of this
    /// communicator's GPU (or memory NCCL can reach), allocated until the operation completed
    /// on `stream`, and `recv` must not be used by other work meanwhile. `send == recv` is
    /// in place.
    #[inline]
    pub unsafe fn all_reduce_raw(
        &self,
        send: DevicePtr,
        recv: DevicePtr,
        count: usize,
        dtype: DataType,
        op: RedOp,
        stream: &Stream,
    ) -> Result<()> {
        let comm = self.handle()?;
        // SAFETY: the caller guarantees the buffers; comm and stream are alive.
        let rc = unsafe {
            (self.nccl.api.ncclAllReduce)(
                send.as_ptr(),
                recv.as_mut_ptr(),
                count,
                dtype.raw(),
                op.0,
                comm,
                stream.as_raw(),
            )
        };
        self.settle("ncclAllReduce", rc)
    }

    /// `ncclReduce` of `count` elements to rank `root`.
    ///
    /// # Safety
    /// As [`Comm::all_reduce_raw`]; `recv` is only written on `root`.
    #[allow(clippy::too_many_arguments)] // mirrors ncclReduce's C signature
    #[inline]
    pub unsafe fn reduce_raw(
        &self,
        send: DevicePtr,
        recv: DevicePtr,
        count: usize,
        dtype: DataType,
        op: RedOp,
        root: usize,
        stream: &Stream,
    ) -> Result<()> {
        let root = self.check_peer("root", root)?;
        let comm = self.handle()?;
        // SAFETY: the caller guarantees the buffers; comm and stream are alive.
        let rc = unsafe {
            (self.nccl.api.ncclReduce)(
                send.as_ptr(),
                recv.as_mut_ptr(),
                count,
                dtype.raw(),
                op.0,
                root,
                comm,
                stream.as_raw(),
            )
        };
        self.settle("ncclReduce", rc)
    }

    /// `ncclBroadcast` of `count` elements from rank `root`.
    ///
    /// # Safety
    /// As [`Comm::all_reduce_raw`]; `send` is only read on `root`.
    #[inline]
    pub unsafe fn broadcast_raw(
        &self,
        send: DevicePtr,
        recv: DevicePtr,
        count: usize,
        dtype: DataType,
        root: usize,
        stream: &Stream,
    ) -> Result<()> {
        let root = self.check_peer("root", root)?;
        let comm = self.handle()?;
        // SAFETY: the caller guarantees the buffers; comm and stream are alive.
        let rc = unsafe {
            (self.nccl.api.ncclBroadcast)(
                send.as_ptr(),
                recv.as_mut_ptr(),
                count,
                dtype.raw(),
                root,
                comm,
                stream.as_raw(),
            )
        };
        self.settle("ncclBroadcast", rc)
    }

    /// `ncclAllGather`: `send_count` elements from every rank into `recv` (rank i's block at
    /// element `i * send_count`).
    ///
    /// # Safety
    /// `send` must address `send_count` and `recv` `send_count * size()` elements, as in
    /// [`Comm::all_reduce_raw`].
    #[inline]
    pub unsafe fn all_gather_raw(
        &self,
        send: DevicePtr,
        recv: DevicePtr,
        send_count: usize,
        dtype: DataType,
        stream: &Stream,
    ) -> Result<()> {
        let comm = self.handle()?;
        // SAFETY: the caller guarantees the buffers; comm and stream are alive.
        let rc = unsafe {
            (self.nccl.api.ncclAllGather)(
                send.as_ptr(),
                recv.as_mut_ptr(),
                send_count,
                dtype.raw(),
                comm,
                stream.as_raw(),
            )
        };
        self.settle("ncclAllGather", rc)
    }

    /// `ncclReduceScatter`: reduces `recv_count * size()` elements and leaves block `rank()`
    /// in `recv`.
    ///
    /// # Safety
    /// `send` must address `recv_count * size()` and `recv` `recv_count` elements, as in
    /// [`Comm::all_reduce_raw`].
    #[inline]
    pub unsafe fn reduce_scatter_raw(
        &self,
        send: DevicePtr,
        recv: DevicePtr,
        recv_count: usize,
        dtype: DataType,
        op: RedOp,
        stream: &Stream,
    ) -> Result<()> {
        let comm = self.handle()?;
        // SAFETY: the caller guarantees the buffers; comm and stream are alive.
        let rc = unsafe {
            (self.nccl.api.ncclReduceScatter)(
                send.as_ptr(),
                recv.as_mut_ptr(),
                recv_count,
                dtype.raw(),
                op.0,
                comm,
                stream.as_raw(),
            )
        };
        self.settle("ncclReduceScatter", rc)
    }

    /// `ncclSend` of `count` elements to `peer` (pair it with the peer's recv; group sends
    /// and receives that must progress together).
    ///
    /// # Safety
    /// `send` must address `count` elements, allocated until the operation completed.
    #[inline]
    pub unsafe fn send_raw(
        &self,
        send: DevicePtr,
        count: usize,
        dtype: DataType,
        peer: usize,
        stream: &Stream,
    ) -> Result<()> {
        let peer = self.check_peer("peer", peer)?;
        let comm = self.handle()?;
        // SAFETY: the caller guarantees the buffer; comm and stream are alive.
        let rc = unsafe {
            (self.nccl.api.ncclSend)(
                send.as_ptr(),
                count,
                dtype.raw(),
                peer,
                comm,
                stream.as_raw(),
            )
        };
        self.settle("ncclSend", rc)
    }

    /// `ncclRecv` of `count` elements from `peer`.
    ///
    /// # Safety
    /// `recv` must address `count` elements, allocated and not used by other work until the
    /// operation completed.
    #[inline]
    pub unsafe fn recv_raw(
        &self,
        recv: DevicePtr,
        count: usize,
        dtype: DataType,
        peer: usize,
        stream: &Stream,
    ) -> Result<()> {
        let peer = self.check_peer("peer", peer)?;
        let comm = self.handle()?;
        // SAFETY: the caller guarantees the buffer; comm and stream are alive.
        let rc = unsafe {
            (self.nccl.api.ncclRecv)(
                recv.as_mut_ptr(),
                count,
                dtype.raw(),
                peer,
                comm,
                stream.as_raw(),
            )
        };
        self.settle("ncclRecv", rc)
    }

    /// All-to-all: block j (`count` elements) of `send` goes to rank j, rank i's block lands
    /// at block i of `recv`. `ncclAlltoAll` where the library has it (2.28+), else grouped
    /// send/recv as nccl-tests does.
    ///
    /// # Safety
    /// `send` and `recv` must each address `count * size()` elements, as in
    /// [`Comm::all_reduce_raw`].
    #[inline]
    pub unsafe fn all_to_all_raw(
        &self,
        send: DevicePtr,
        recv: DevicePtr,
        count: usize,
        dtype: DataType,
        stream: &Stream,
    ) -> Result<()> {
        let comm = self.handle()?;
        if let Some(f) = self.nccl.api.ncclAlltoAll {
            // SAFETY: the caller guarantees the buffers; comm and stream are alive.
            let rc = unsafe {
                f(
                    send.as_ptr(),
                    recv.as_mut_ptr(),
                    count,
                    dtype.raw(),
                    comm,
                    stream.as_raw(),
                )
            };
            return self.settle("ncclAlltoAll", rc);
        }
        // SAFETY: forwarded caller guarantees.
        unsafe { self.all_to_all_p2p_raw(send, recv, count, dtype, stream) }
    }

    /// All-to-all as grouped `ncclSend`/`ncclRecv` (what nccl-tests does before NCCL 2.28),
    /// whatever the library offers.
    ///
    /// # Safety
    /// As [`Comm::all_to_all_raw`].
    #[inline]
    pub unsafe fn all_to_all_p2p_raw(
        &self,
        send: DevicePtr,
        recv: DevicePtr,
        count: usize,
        dtype: DataType,
        stream: &Stream,
    ) -> Result<()> {
        let block = count * dtype.size();
        let group = Group::start_raw(self.nccl)?;
        for r in 0..self.size() {
            // SAFETY: block r of each buffer lies inside what the caller guarantees.
            unsafe {
                self.send_raw(send.byte_add(r * block), count, dtype, r, stream)?;
                self.recv_raw(recv.byte_add(r * block), count, dtype, r, stream)?;
            }
        }
        self.end_group(group)
    }

    /// Gather: `count` elements from every rank into `recv` on `root` (rank i's at block i).
    /// `ncclGather` where the library has it (2.28+), else grouped send/recv.
    ///
    /// # Safety
    /// `send` must address `count` elements; on `root`, `recv` must address
    /// `count * size()` elements; as in [`Comm::all_reduce_raw`].
    #[inline]
    pub unsafe fn gather_raw(
        &self,
        send: DevicePtr,
        recv: DevicePtr,
        count: usize,
        dtype: DataType,
        root: usize,
        stream: &Stream,
    ) -> Result<()> {
        let root_c = self.check_peer("root", root)?;
        let comm = self.handle()?;
        if let Some(f) = self.nccl.api.ncclGather {
            // SAFETY: the caller guarantees the buffers; comm and stream are alive.
            let rc = unsafe {
                f(
                    send.as_ptr(),
                    recv.as_mut_ptr(),
                    count,
                    dtype.raw(),
                    root_c,
                    comm,
                    stream.as_raw(),
                )
            };
            return self.settle("ncclGather", rc);
        }
        // SAFETY: forwarded caller guarantees.
        unsafe { self.gather_p2p_raw(send, recv, count, dtype, root, stream) }
    }

    /// Gather as grouped `ncclSend`/`ncclRecv` (nccl-tests before NCCL 2.28).
    ///
    /// # Safety
    /// As [`Comm::gather_raw`].
    #[inline]
    pub unsafe fn gather_p2p_raw(
        &self,
        send: DevicePtr,
        recv: DevicePtr,
        count: usize,
        dtype: DataType,
        root: usize,
        stream: &Stream,
    ) -> Result<()> {
        self.check_peer("root", root)?;
        let block = count * dtype.size();
        let group = Group::start_raw(self.nccl)?;
        // SAFETY: the blocks lie inside what the caller guarantees.
        unsafe {
            if self.rank() == root {
                for r in 0..self.size() {
                    self.recv_raw(recv.byte_add(r * block), count, dtype, r, stream)?;
                }
            }
            self.send_raw(send, count, dtype, root, stream)?;
        }
        self.end_group(group)
    }

    /// Scatter: block i (`count` elements) of `send` on `root` goes to rank i's `recv`.
    /// `ncclScatter` where the library has it (2.28+), else grouped send/recv.
    ///
    /// # Safety
    /// On `root`, `send` must address `count * size()` elements; `recv` must address `count`
    /// elements; as in [`Comm::all_reduce_raw`].
    #[inline]
    pub unsafe fn scatter_raw(
        &self,
        send: DevicePtr,
        recv: DevicePtr,
        count: usize,
        dtype: DataType,
        root: usize,
        stream: &Stream,
    ) -> Result<()> {
        let root_c = self.check_peer("root", root)?;
        let comm = self.handle()?;
        if let Some(f) = self.nccl.api.ncclScatter {
            // SAFETY: the caller guarantees the buffers; comm and stream are alive.
            let rc = unsafe {
                f(
                    send.as_ptr(),
                    recv.as_mut_ptr(),
                    count,
                    dtype.raw(),
                    root_c,
                    comm,
                    stream.as_raw(),
                )
            };
            return self.settle("ncclScatter", rc);
        }
        // SAFETY: forwarded caller guarantees.
        unsafe { self.scatter_p2p_raw(send, recv, count, dtype, root, stream) }
    }

    /// Scatter as grouped `ncclSend`/`ncclRecv` (nccl-tests before NCCL 2.28).
    ///
    /// # Safety
    /// As [`Comm::scatter_raw`].
    #[inline]
    pub unsafe fn scatter_p2p_raw(
        &self,
        send: DevicePtr,
        recv: DevicePtr,
        count: usize,
        dtype: DataType,
        root: usize,
        stream: &Stream,
    ) -> Result<()> {
        self.check_peer("root", root)?;
        let block = count * dtype.size();
        let group = Group::start_raw(self.nccl)?;
        // SAFETY: the blocks lie inside what the caller guarantees.
        unsafe {
            if self.rank() == root {
                for r in 0..self.size() {
                    self.send_raw(send.byte_add(r * block), count, dtype, r, stream)?;
                }
            }
            self.recv_raw(recv, count, dtype, root, stream)?;
        }
        self.end_group(group)
    }

    /// Refuses a safe collective while a group is open on this thread: NCCL would only
    /// record it, and its buffers, borrowed for this call only, could be freed before the
    /// group's end launches it.
    fn refuse_in_group(&self, call: &str) -> Result<()> {
        if in_group() {
            return Err(NcclError::invalid(format!(
                "{call} inside an open group would only be recorded, and its buffers could be \
                 freed before the group ends: enqueue it through the group (Group::all_reduce, \
                 Group::send, Group::recv keep the buffers borrowed until Group::end), or call \
                 it outside the group"
            )));
        }
        Ok(())
    }

    fn end_group(&self, group: Group<'_>) -> Result<()> {
        match group.end()? {
            super::GroupStatus::Complete => Ok(()),
            super::GroupStatus::InProgress => super::wait_ready(&[self], None),
        }
    }

    /// Safe all-reduce of all of `send` into `recv` (which must hold at least as many).
    pub fn all_reduce<T: NcclType>(
        &self,
        send: &DeviceBuffer<T>,
        recv: &mut DeviceBuffer<T>,
        op: RedOp,
        stream: &Stream,
    ) -> Result<()> {
        self.refuse_in_group("Comm::all_reduce")?;
        self.enqueue_all_reduce(send, recv, op, stream)
    }

    /// [`Comm::all_reduce`] without the group check: for [`Group`], which keeps the buffers
    /// borrowed until the group ends.
    pub(crate) fn enqueue_all_reduce<T: NcclType>(
        &self,
        send: &DeviceBuffer<T>,
        recv: &mut DeviceBuffer<T>,
        op: RedOp,
        stream: &Stream,
    ) -> Result<()> {
        self.check_type_safe::<T>()?;
        self.check_reduction(T::DATA_TYPE, op)?;
        self.check_stream(stream)?;
        self.check_buffer("send", send, 0)?;
        self.check_buffer("receive", recv, send.len())?;
        // SAFETY: both buffers are live allocations of this GPU with the checked sizes;
        // dropping them waits for the GPU, so they outlive the operation.
        unsafe {
            self.all_reduce_raw(
                send.device_ptr(),
                recv.device_ptr(),
                send.len(),
                T::DATA_TYPE,
                op,
                stream,
            )
        }
    }

    /// Safe in-place all-reduce of all of `buf`.
    pub fn all_reduce_in_place<T: NcclType>(
        &self,
        buf: &mut DeviceBuffer<T>,
        op: RedOp,
        stream: &Stream,
    ) -> Result<()> {
        self.refuse_in_group("Comm::all_reduce_in_place")?;
        self.check_type_safe::<T>()?;
        self.check_reduction(T::DATA_TYPE, op)?;
        self.check_stream(stream)?;
        self.check_buffer("in-place", buf, 0)?;
        // SAFETY: as in all_reduce, with send == recv.
        unsafe {
            self.all_reduce_raw(
                buf.device_ptr(),
                buf.device_ptr(),
                buf.len(),
                T::DATA_TYPE,
                op,
                stream,
            )
        }
    }

    /// Safe reduce of all of `send` into `recv` on `root` (`recv` is written only there but
    /// must be as large everywhere).
    pub fn reduce<T: NcclType>(
        &self,
        send: &DeviceBuffer<T>,
        recv: &mut DeviceBuffer<T>,
        op: RedOp,
        root: usize,
        stream: &Stream,
    ) -> Result<()> {
        self.refuse_in_group("Comm::reduce")?;
        self.check_type_safe::<T>()?;
        self.check_reduction(T::DATA_TYPE, op)?;
        self.check_stream(stream)?;
        self.check_buffer("send", send, 0)?;
        self.check_buffer("receive", recv, send.len())?;
        // SAFETY: as in all_reduce.
        unsafe {
            self.reduce_raw(
                send.device_ptr(),
                recv.device_ptr(),
                send.len(),
                T::DATA_TYPE,
                op,
                root,
                stream,
            )
        }
    }

    /// Safe broadcast of `recv.len()` elements from `send` on `root` into `recv` everywhere.
    pub fn broadcast<T: NcclType>(
        &self,
        send: &DeviceBuffer<T>,
        recv: &mut DeviceBuffer<T>,
        root: usize,
        stream: &Stream,
    ) -> Result<()> {
        self.refuse_in_group("Comm::broadcast")?;
        self.check_type_safe::<T>()?;
        self.check_stream(stream)?;
        self.check_buffer("send", send, recv.len())?;
        self.check_buffer("receive", recv, 0)?;
        // SAFETY: as in all_reduce.
        unsafe {
            self.broadcast_raw(
                send.device_ptr(),
                recv.device_ptr(),
                recv.len(),
                T::DATA_TYPE,
                root,
                stream,
            )
        }
    }

    /// Safe in-place broadcast of all of `buf` from `root`.
    pub fn broadcast_in_place<T: NcclType>(
        &self,
        buf: &mut DeviceBuffer<T>,
        root: usize,
        stream: &Stream,
    ) -> Result<()> {
        self.refuse_in_group("Comm::broadcast_in_place")?;
        self.check_type_safe::<T>()?;
        self.check_stream(stream)?;
        self.check_buffer("in-place", buf, 0)?;
        // SAFETY: as in all_reduce, with send == recv.
        unsafe {
            self.broadcast_raw(
                buf.device_ptr(),
                buf.device_ptr(),
                buf.len(),
                T::DATA_TYPE,
                root,
                stream,
            )
        }
    }

    /// Safe all-gather of all of `send` from every rank into `recv` (at least
    /// `send.len() * size()` elements).
    pub fn all_gather<T: NcclType>(
        &self,
        send: &DeviceBuffer<T>,
        recv: &mut DeviceBuffer<T>,
        stream: &Stream,
    ) -> Result<()> {
        self.refuse_in_group("Comm::all_gather")?;
        self.check_type_safe::<T>()?;
        self.check_stream(stream)?;
        self.check_buffer("send", send, 0)?;
        self.check_buffer("receive", recv, self.mul_count(send.len())?)?;
        // SAFETY: as in all_reduce, with the gathered size checked.
        unsafe {
            self.all_gather_raw(
                send.device_ptr(),
                recv.device_ptr(),
                send.len(),
                T::DATA_TYPE,
                stream,
            )
        }
    }

    /// Safe reduce-scatter: `send` holds `recv.len() * size()` elements; this rank's reduced
    /// block lands in `recv`.
    pub fn reduce_scatter<T: NcclType>(
        &self,
        send: &DeviceBuffer<T>,
        recv: &mut DeviceBuffer<T>,
        op: RedOp,
        stream: &Stream,
    ) -> Result<()> {
        self.refuse_in_group("Comm::reduce_scatter")?;
        self.check_type_safe::<T>()?;
        self.check_reduction(T::DATA_TYPE, op)?;
        self.check_stream(stream)?;
        self.check_buffer("send", send, self.mul_count(recv.len())?)?;
        self.check_buffer("receive", recv, 0)?;
        // SAFETY: as in all_reduce, with the scattered size checked.
        unsafe {
            self.reduce_scatter_raw(
                send.device_ptr(),
                recv.device_ptr(),
                recv.len(),
                T::DATA_TYPE,
                op,
                stream,
            )
        }
    }

    /// Safe all-to-all: `send.len()` must be a multiple of `size()`; `recv` at least as large.
    pub fn all_to_all<T: NcclType>(
        &self,
        send: &DeviceBuffer<T>,
        recv: &mut DeviceBuffer<T>,
        stream: &Stream,
    ) -> Result<()> {
        self.refuse_in_group("Comm::all_to_all")?;
        self.check_type_safe::<T>()?;
        self.check_stream(stream)?;
        if !send.len().is_multiple_of(self.size()) {
            return Err(NcclError::invalid(format!(
                "all-to-all send buffer of {} elements is not a multiple of {} ranks",
                send.len(),
                self.size()
            )));
        }
        self.check_buffer("send", send, 0)?;
        self.check_buffer("receive", recv, send.len())?;
        // SAFETY: as in all_reduce; count * size() == send.len().
        unsafe {
            self.all_to_all_raw(
                send.device_ptr(),
                recv.device_ptr(),
                send.len() / self.size(),
                T::DATA_TYPE,
                stream,
            )
        }
    }

    /// Safe gather of all of `send` into `recv` on `root`, which must then hold
    /// `send.len() * size()` elements; other ranks pass `None`.
    pub fn gather<T: NcclType>(
        &self,
        send: &DeviceBuffer<T>,
        recv: Option<&mut DeviceBuffer<T>>,
        root: usize,
        stream: &Stream,
    ) -> Result<()> {
        self.refuse_in_group("Comm::gather")?;
        self.check_type_safe::<T>()?;
        self.check_stream(stream)?;
        self.check_peer("root", root)?;
        self.check_buffer("send", send, 0)?;
        let recv_ptr = match recv {
            Some(r) => {
                self.check_buffer("receive", r, self.mul_count(send.len())?)?;
                r.device_ptr()
            }
            None if self.rank() == root => {
                return Err(NcclError::invalid("the gather root needs a receive buffer"));
            }
            None => DevicePtr::NULL,
        };
        // SAFETY: as in all_reduce; recv is only written on root, where it was checked.
        unsafe {
            self.gather_raw(
                send.device_ptr(),
                recv_ptr,
                send.len(),
                T::DATA_TYPE,
                root,
                stream,
            )
        }
    }

    /// Safe scatter from `send` on `root` (holding `recv.len() * size()` elements; other
    /// ranks pass `None`) into every rank's `recv`.
    pub fn scatter<T: NcclType>(
        &self,
        send: Option<&DeviceBuffer<T>>,
        recv: &mut DeviceBuffer<T>,
        root: usize,
        stream: &Stream,
    ) -> Result<()> {
        self.refuse_in_group("Comm::scatter")?;
        self.check_type_safe::<T>()?;
        self.check_stream(stream)?;
        self.check_peer("root", root)?;
        self.check_buffer("receive", recv, 0)?;
        let send_ptr = match send {
            Some(s) => {
                self.check_buffer("send", s, self.mul_count(recv.len())?)?;
                s.device_ptr()
            }
            None if self.rank() == root => {
                return Err(NcclError::invalid("the scatter root needs a send buffer"));
            }
            None => DevicePtr::NULL,
        };
        // SAFETY: as in all_reduce; send is only read on root, where it was checked.
        unsafe {
            self.scatter_raw(
                send_ptr,
                recv.device_ptr(),
                recv.len(),
                T::DATA_TYPE,
                root,
                stream,
            )
        }
    }

    /// Safe send of all of `buf` to `peer`.
    pub fn send<T: NcclType>(
        &self,
        buf: &DeviceBuffer<T>,
        peer: usize,
        stream: &Stream,
    ) -> Result<()> {
        self.refuse_in_group("Comm::send")?;
        self.enqueue_send(buf, peer, stream)
    }

    /// [`Comm::send`] without the group check: for [`Group`], which keeps the buffers
    /// borrowed until the group ends.
    pub(crate) fn enqueue_send<T: NcclType>(
        &self,
        buf: &DeviceBuffer<T>,
        peer: usize,
        stream: &Stream,
    ) -> Result<()> {
        self.check_type_safe::<T>()?;
        self.check_stream(stream)?;
        self.check_buffer("send", buf, 0)?;
        // SAFETY: a live buffer of this GPU; dropping it waits for the GPU.
        unsafe { self.send_raw(buf.device_ptr(), buf.len(), T::DATA_TYPE, peer, stream) }
    }

    /// Safe receive of `buf.len()` elements from `peer`.
    pub fn recv<T: NcclType>(
        &self,
        buf: &mut DeviceBuffer<T>,
        peer: usize,
        stream: &Stream,
    ) -> Result<()> {
        self.refuse_in_group("Comm::recv")?;
        self.enqueue_recv(buf, peer, stream)
    }

    /// [`Comm::recv`] without the group check: for [`Group`], which keeps the buffers
    /// borrowed until the group ends.
    pub(crate) fn enqueue_recv<T: NcclType>(
        &self,
        buf: &mut DeviceBuffer<T>,
        peer: usize,
        stream: &Stream,
    ) -> Result<()> {
        self.check_type_safe::<T>()?;
        self.check_stream(stream)?;
        self.check_buffer("receive", buf, 0)?;
        // SAFETY: a live buffer of this GPU, borrowed mutably; dropping it waits for the GPU.
        unsafe { self.recv_raw(buf.device_ptr(), buf.len(), T::DATA_TYPE, peer, stream) }
    }

    /// Registers `bytes` at `ptr` with this communicator for zero-copy transfers
    /// (`ncclCommRegister`; nccl-tests `-R 1`).
    ///
    /// # Safety
    /// The memory must stay allocated until [`Comm::deregister`] (or the communicator's
    /// destruction, which releases all registrations).
    pub unsafe fn register(&self, ptr: DevicePtr, bytes: usize) -> Result<RegHandle> {
        let comm = self.handle()?;
        let h = RegHandle::new(false);
        // SAFETY: the caller guarantees the memory; NCCL writes one handle into the slot,
        // which outlives any group the call is part of (see RegHandle).
        let rc =
            unsafe { (self.nccl.api.ncclCommRegister)(comm, ptr.as_mut_ptr(), bytes, h.out_ptr()) };
        self.settle("ncclCommRegister", rc)?;
        Ok(h)
    }

    /// Registers `bytes` at `ptr` as a window on every rank (`ncclCommWindowRegister`,
    /// collective; NCCL >= 2.27; nccl-tests `-R 2` passes `symmetric = true`). Windows must be
    /// 4096-byte aligned; memory from [`Nccl::mem_alloc`](super::Nccl::mem_alloc) is.
    ///
    /// # Safety
    /// As [`Comm::register`].
    pub unsafe fn window_register(
        &self,
        ptr: DevicePtr,
        bytes: usize,
        symmetric: bool,
    ) -> Result<RegHandle> {
        let Some(f) = self.nccl.api.ncclCommWindowRegister else {
            return Err(NcclError::Unsupported {
                what: format!(
                    "window registration needs NCCL >= 2.27 (loaded {})",
                    self.nccl.version()
                ),
            });
        };
        let comm = self.handle()?;
        let h = RegHandle::new(true);
        // SAFETY: the caller guarantees the memory; NCCL writes one window handle into the
        // slot, possibly at the end of the enclosing group, which the slot outlives.
        let rc = unsafe {
            f(
                comm,
                ptr.as_mut_ptr(),
                bytes,
                h.out_ptr(),
                c_int::from(symmetric),
            )
        };
        self.settle("ncclCommWindowRegister", rc)?;
        Ok(h)
    }

    /// Releases a registration made by [`Comm::register`] or [`Comm::window_register`].
    /// A null handle is a registration NCCL skipped (before 2.20 `ncclCommRegister` registers
    /// only with NVLink SHARP, leaves the handle null and then refuses it here): nothing to
    /// release, so this returns `Ok` without calling NCCL.
    ///
    /// # Safety
    /// `handle` must come from this communicator.
    pub unsafe fn deregister(&self, handle: RegHandle) -> Result<()> {
        let comm = self.handle()?;
        if handle.as_raw().is_null() {
            return Ok(());
        }
        if handle.window {
            let Some(f) = self.nccl.api.ncclCommWindowDeregister else {
                return Err(NcclError::Unsupported {
                    what: "window deregistration needs NCCL >= 2.27".into(),
                });
            };
            // SAFETY: the caller guarantees the handle belongs to this communicator.
            let rc = unsafe { f(comm, handle.as_raw()) };
            return self.settle("ncclCommWindowDeregister", rc);
        }
        // SAFETY: the caller guarantees the handle belongs to this communicator.
        let rc = unsafe { (self.nccl.api.ncclCommDeregister)(comm, handle.as_raw()) };
        self.settle("ncclCommDeregister", rc)
    }
}

#[cfg(test)]
mod tests {
    use super::RegHandle;

    /// NCCL writes a handle registered inside a group at `ncclGroupEnd`, after the
    /// registering call returned and the handle moved into its owner: the pointer NCCL got
    /// must still reach the handle (it once pointed into a dead stack frame).
    #[test]
    fn handle_written_after_the_call_reaches_the_moved_handle() {
        let h = RegHandle::new(true);
        let out = h.out_ptr();
        assert!(h.as_raw().is_null(), "null until NCCL writes it");
        let mut owner = vec![h];
        let window = 0x7f00_dead_b000usize as *mut std::ffi::c_void;
        // SAFETY: what NCCL does at group end: one write through the pointer it was given,
        // which points into the heap slot the (moved) handle still owns.
        unsafe { out.write(window) };
        assert_eq!(owner[0].as_raw(), window);
        assert!(owner.pop().is_some_and(|h| h.is_window()));
    }
}
