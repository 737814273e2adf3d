//! The static-inline functions and function-like macros of `verbs.h`,
//! written in Rust over the bindgen types.
//!
//! bindgen does not bind `static inline` functions; compiling C wrappers for
//! them would put link-time references to libibverbs into every binary (the
//! inline bodies call exported functions), which is exactly what this crate
//! avoids. These are line-for-line translations of rdma-core's `verbs.h`; they
//! mostly call through the context's ops tables, and fall back to the
//! run-time-loaded [`crate::ibverbs`] where the C code calls an exported
//! function.
//!
//! All functions are `unsafe` with the same contract as their C counterparts:
//! every pointer must be valid for the verb, as documented in the rdma-core
//! man pages.

use crate::*;
use std::mem::{offset_of, size_of};
use std::os::raw::{c_int, c_uint, c_void};

/// `__VERBS_ABI_IS_EXTENDED`: marks an `ibv_context` embedded in a `verbs_context`.
const VERBS_ABI_IS_EXTENDED: *mut c_void = usize::MAX as *mut c_void;

fn set_errno(e: c_int) {
    // SAFETY: __errno_location returns the calling thread's errno slot.
    unsafe { *libc::__errno_location() = e };
}

/// `verbs_get_ctx`: the `verbs_context` that embeds `ctx`, or null for a
/// legacy provider.
///
/// # Safety
/// `ctx` must point to a live `ibv_context`.
pub unsafe fn verbs_get_ctx(ctx: *mut ibv_context) -> *mut verbs_context {
    // SAFETY: ctx is valid per the contract.
    if unsafe { (*ctx).abi_compat } != VERBS_ABI_IS_EXTENDED {
        return std::ptr::null_mut();
    }
    // open-coded container_of, as in verbs.h
    (ctx as *mut u8).wrapping_sub(offset_of!(verbs_context, context)) as *mut verbs_context
}

/// `verbs_get_ctx_op(ctx, op)`: the `verbs_context` of `ctx` if the provider
/// is new enough to have the field `op` and sets it, else null.
#[macro_export]
macro_rules! verbs_get_ctx_op {
    ($ctx:expr, $op:ident) => {{
        let vctx = $crate::inline::verbs_get_ctx($ctx);
        if vctx.is_null()
            || ((*vctx).sz
                < ::std::mem::size_of::<$crate::verbs_context>()
                    - ::std::mem::offset_of!($crate::verbs_context, $op))
            || (*vctx).$op.is_none()
        {
            ::std::ptr::null_mut()
        } else {
            vctx
        }
    }};
}

/// `ibv_post_send`: post a list of work requests to a send queue.
///
/// # Safety
/// As `ibv_post_send(3)`: `qp` live, `wr` a valid list, `bad_wr` writable.
#[inline]
pub unsafe fn ibv_post_send(
    qp: *mut ibv_qp,
    wr: *mut ibv_send_wr,
    bad_wr: *mut *mut ibv_send_wr,
) -> c_int {
    // SAFETY: per the contract qp and its context are live.
    match unsafe { (*(*qp).context).ops.post_send } {
        // SAFETY: the provider's own post_send with the caller's arguments.
        Some(f) => unsafe { f(qp, wr, bad_wr) },
        None => libc::EOPNOTSUPP,
    }
}

/// `ibv_post_recv`: post a list of work requests to a receive queue.
///
/// # Safety
/// As `ibv_post_recv(3)`.
#[inline]
pub unsafe fn ibv_post_recv(
    qp: *mut ibv_qp,
    wr: *mut ibv_recv_wr,
    bad_wr: *mut *mut ibv_recv_wr,
) -> c_int {
    // SAFETY: per the contract qp and its context are live.
    match unsafe { (*(*qp).context).ops.post_recv } {
        // SAFETY: the provider's own post_recv with the caller's arguments.
        Some(f) => unsafe { f(qp, wr, bad_wr) },
        None => libc::EOPNOTSUPP,
    }
}

/// `ibv_poll_cq`: poll up to `num_entries` completions into `wc`.
/// Returns the number polled, or a negative value on error.
///
/// # Safety
/// As `ibv_poll_cq(3)`: `wc` must have room for `num_entries` entries.
#[inline]
pub unsafe fn ibv_poll_cq(cq: *mut ibv_cq, num_entries: c_int, wc: *mut ibv_wc) -> c_int {
    // SAFETY: per the contract cq and its context are live.
    match unsafe { (*(*cq).context).ops.poll_cq } {
        // SAFETY: the provider's own poll_cq with the caller's arguments.
        Some(f) => unsafe { f(cq, num_entries, wc) },
        None => {
            set_errno(libc::EOPNOTSUPP);
            -1
        }
    }
}

/// `ibv_req_notify_cq`: arm the CQ's completion channel.
///
/// # Safety
/// As `ibv_req_notify_cq(3)`.
#[inline]
pub unsafe fn ibv_req_notify_cq(cq: *mut ibv_cq, solicited_only: c_int) -> c_int {
    // SAFETY: per the contract cq and its context are live.
    match unsafe { (*(*cq).context).ops.req_notify_cq } {
        // SAFETY: the provider's own req_notify_cq.
        Some(f) => unsafe { f(cq, solicited_only) },
        None => libc::EOPNOTSUPP,
    }
}

/// `___ibv_query_port` (what the `ibv_query_port` macro expands to): query a
/// port into the full, current `ibv_port_attr`. Never call the exported
/// `ibv_query_port` symbol directly: it fills the short compat struct.
/// Returns 0 or an errno value.
///
/// # Safety
/// As `ibv_query_port(3)`.
pub unsafe fn ___ibv_query_port(
    context: *mut ibv_context,
    port_num: u8,
    port_attr: *mut ibv_port_attr,
) -> c_int {
    // SAFETY: context is live per the contract.
    let vctx = unsafe { verbs_get_ctx_op!(context, query_port) };
    if vctx.is_null() {
        // SAFETY: port_attr is writable per the contract.
        unsafe { std::ptr::write_bytes(port_attr, 0, 1) };
        let Ok(lib) = crate::ibverbs() else {
            return libc::ENOSYS;
        };
        // SAFETY: the exported compat symbol fills the leading
        // _compat_ibv_port_attr part of the zeroed ibv_port_attr, as in C.
        return unsafe {
            lib.ibv_query_port(context, port_num, port_attr as *mut _compat_ibv_port_attr)
        };
    }
    // SAFETY: verbs_get_ctx_op checked that the op exists.
    unsafe {
        ((*vctx).query_port.unwrap_unchecked())(
            context,
            port_num,
            port_attr,
            size_of::<ibv_port_attr>(),
        )
    }
}

/// `ibv_query_device_ex`: extended device attributes, falling back to
/// `ibv_query_device` (other fields zero) for providers without it.
/// Returns 0 or an errno value.
///
/// # Safety
/// As `ibv_query_device_ex(3)`.
pub unsafe fn ibv_query_device_ex(
    context: *mut ibv_context,
    input: *const ibv_query_device_ex_input,
    attr: *mut ibv_device_attr_ex,
) -> c_int {
    // SAFETY: input, if not null, is readable per the contract.
    if !input.is_null() && unsafe { (*input).comp_mask } != 0 {
        return libc::EINVAL;
    }
    // SAFETY: context is live per the contract.
    let vctx = unsafe { verbs_get_ctx_op!(context, query_device_ex) };
    if !vctx.is_null() {
        // SAFETY: verbs_get_ctx_op checked that the op exists.
        let ret = unsafe {
            ((*vctx).query_device_ex.unwrap_unchecked())(
                context,
                input,
                attr,
                size_of::<ibv_device_attr_ex>(),
            )
        };
        if ret != libc::EOPNOTSUPP && ret != libc::ENOSYS {
            return ret;
        }
    }
    // legacy
    // SAFETY: attr is writable per the contract.
    unsafe { std::ptr::write_bytes(attr, 0, 1) };
    let Ok(lib) = crate::ibverbs() else {
        return libc::ENOSYS;
    };
    // SAFETY: orig_attr is the leading ibv_device_attr of attr.
    unsafe { lib.ibv_query_device(context, &mut (*attr).orig_attr) }
}

/// The `ibv_reg_mr` macro: `ibv_reg_mr_iova2` (iova = address) when the
/// library has it, so optional access flags are masked on kernels without
/// them; plain `ibv_reg_mr` otherwise. Returns null with errno set on error.
///
/// # Safety
/// As `ibv_reg_mr(3)`: `addr..addr+length` must be mapped memory.
pub unsafe fn ibv_reg_mr(
    pd: *mut ibv_pd,
    addr: *mut c_void,
    length: usize,
    access: c_uint,
) -> *mut ibv_mr {
    let Ok(lib) = crate::ibverbs() else {
        set_errno(libc::ENOSYS);
        return std::ptr::null_mut();
    };
    match lib.ibv_reg_mr_iova2 {
        // SAFETY: the caller's arguments, iova = the virtual address.
        Ok(f) => unsafe { f(pd, addr, length, addr as u64, access) },
        // SAFETY: the exported pre-1.8 entry point.
        Err(_) => unsafe { lib.ibv_reg_mr(pd, addr, length, access as c_int) },
    }
}

/// `ibv_query_gid_ex`: one GID table entry with its type and netdev.
/// Returns 0, ENODATA for an empty entry, or another errno value.
///
/// # Safety
/// As `ibv_query_gid_ex(3)`.
pub unsafe fn ibv_query_gid_ex(
    context: *mut ibv_context,
    port_num: u32,
    gid_index: u32,
    entry: *mut ibv_gid_entry,
    flags: u32,
) -> c_int {
    let Ok(lib) = crate::ibverbs() else {
        return libc::ENOSYS;
    };
    match lib._ibv_query_gid_ex {
        // SAFETY: the caller's arguments plus the entry size, as in C.
        Ok(f) => unsafe {
            f(
                context,
                port_num,
                gid_index,
                entry,
                flags,
                size_of::<ibv_gid_entry>(),
            )
        },
        Err(_) => libc::EOPNOTSUPP,
    }
}

/// `ibv_query_gid_table`: all valid GID entries of all ports. Returns the
/// number of entries or a negative errno value.
///
/// # Safety
/// As `ibv_query_gid_table(3)`: `entries` has room for `max_entries`.
pub unsafe fn ibv_query_gid_table(
    context: *mut ibv_context,
    entries: *mut ibv_gid_entry,
    max_entries: usize,
    flags: u32,
) -> isize {
    let Ok(lib) = crate::ibverbs() else {
        return -(libc::ENOSYS as isize);
    };
    match lib._ibv_query_gid_table {
        // SAFETY: the caller's arguments plus the entry size, as in C.
        Ok(f) => unsafe {
            f(
                context,
                entries,
                max_entries,
                flags,
                size_of::<ibv_gid_entry>(),
            )
        },
        Err(_) => -(libc::EOPNOTSUPP as isize),
    }
}

/// `ibv_query_rt_values_ex`: the device's real-time values (clock).
///
/// # Safety
/// As `ibv_query_rt_values_ex(3)`.
pub unsafe fn ibv_query_rt_values_ex(
    context: *mut ibv_context,
    values: *mut ibv_values_ex,
) -> c_int {
    // SAFETY: context is live per the contract.
    let vctx = unsafe { verbs_get_ctx_op!(context, query_rt_values) };
    if vctx.is_null() {
        return libc::EOPNOTSUPP;
    }
    // SAFETY: verbs_get_ctx_op checked that the op exists.
    unsafe { ((*vctx).query_rt_values.unwrap_unchecked())(context, values) }
}

/// `ibv_create_cq_ex`: extended CQ (not implemented by every provider,
/// e.g. not by erdma: null with errno EOPNOTSUPP).
///
/// # Safety
/// As `ibv_create_cq_ex(3)`.
pub unsafe fn ibv_create_cq_ex(
    context: *mut ibv_context,
    cq_attr: *mut ibv_cq_init_attr_ex,
) -> *mut ibv_cq_ex {
    // SAFETY: context is live per the contract.
    let vctx = unsafe { verbs_get_ctx_op!(context, create_cq_ex) };
    if vctx.is_null() {
        set_errno(libc::EOPNOTSUPP);
        return std::ptr::null_mut();
    }
    // SAFETY: verbs_get_ctx_op checked that the op exists.
    unsafe { ((*vctx).create_cq_ex.unwrap_unchecked())(context, cq_attr) }
}

/// `ibv_create_qp_ex`: extended QP creation (null with errno EOPNOTSUPP
/// where the provider lacks it, e.g. erdma).
///
/// # Safety
/// As `ibv_create_qp_ex(3)`.
pub unsafe fn ibv_create_qp_ex(
    context: *mut ibv_context,
    qp_init_attr_ex: *mut ibv_qp_init_attr_ex,
) -> *mut ibv_qp {
    // SAFETY: qp_init_attr_ex is readable per the contract.
    let mask = unsafe { (*qp_init_attr_ex).comp_mask };
    if mask == IBV_QP_INIT_ATTR_PD {
        let Ok(lib) = crate::ibverbs() else {
            set_errno(libc::ENOSYS);
            return std::ptr::null_mut();
        };
        // SAFETY: ibv_qp_init_attr_ex starts with the fields of
        // ibv_qp_init_attr, as the C inline relies on.
        return unsafe {
            lib.ibv_create_qp(
                (*qp_init_attr_ex).pd,
                qp_init_attr_ex as *mut ibv_qp_init_attr,
            )
        };
    }
    // SAFETY: context is live per the contract.
    let vctx = unsafe { verbs_get_ctx_op!(context, create_qp_ex) };
    if vctx.is_null() {
        set_errno(libc::EOPNOTSUPP);
        return std::ptr::null_mut();
    }
    // SAFETY: verbs_get_ctx_op checked that the op exists.
    unsafe { ((*vctx).create_qp_ex.unwrap_unchecked())(context, qp_init_attr_ex) }
}

/// `ibv_is_qpt_supported`: whether bit `qpt` is set in a capability mask.
pub fn ibv_is_qpt_supported(caps: u32, qpt: ibv_qp_type) -> bool {
    qpt < 32 && caps & (1 << qpt) != 0
}

/// `ibv_inc_rkey`: the next rkey of a memory window (low byte incremented).
pub fn ibv_inc_rkey(rkey: u32) -> u32 {
    const MASK: u32 = 0x0000_00ff;
    let tag = rkey.wrapping_add(1) & MASK;
    (rkey & !MASK) | tag
}

/// `rdma_get_local_addr`: the source address of a CM id.
///
/// # Safety
/// `id` must point to a live `rdma_cm_id`.
pub unsafe fn rdma_get_local_addr(id: *mut rdma_cm_id) -> *mut sockaddr {
    // SAFETY: id is live per the contract.
    unsafe { &mut (*id).route.addr.__bindgen_anon_1.src_addr }
}

/// `rdma_get_peer_addr`: the destination address of a CM id.
///
/// # Safety
/// `id` must point to a live `rdma_cm_id`.
pub unsafe fn rdma_get_peer_addr(id: *mut rdma_cm_id) -> *mut sockaddr {
    // SAFETY: id is live per the contract.
    unsafe { &mut (*id).route.addr.__bindgen_anon_2.dst_addr }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn inc_rkey_wraps_low_byte_only() {
        assert_eq!(ibv_inc_rkey(0x1234_56ff), 0x1234_5600);
        assert_eq!(ibv_inc_rkey(0x0000_0001), 0x0000_0002);
    }

    #[test]
    fn qpt_supported_bits() {
        assert!(ibv_is_qpt_supported(1 << IBV_QPT_UD, IBV_QPT_UD));
        assert!(!ibv_is_qpt_supported(1 << IBV_QPT_UD, IBV_QPT_RC));
        assert!(!ibv_is_qpt_supported(u32::MAX, 40));
    }

    #[test]
    fn struct_sizes_match_c() {
        // Layouts the inline code depends on (rdma-core ABI, stable).
        assert_eq!(size_of::<ibv_wc>(), 48);
        assert_eq!(size_of::<ibv_sge>(), 16);
        assert_eq!(size_of::<ibv_gid>(), 16);
        assert_eq!(
            offset_of!(verbs_context, context) + size_of::<ibv_context>(),
            size_of::<verbs_context>()
        );
    }

    #[test]
    fn legacy_context_has_no_verbs_context() {
        let mut ctx = ibv_context::default();
        // SAFETY: ctx is a live (zeroed) ibv_context with abi_compat null.
        assert!(unsafe { verbs_get_ctx(&mut ctx) }.is_null());
    }
}
