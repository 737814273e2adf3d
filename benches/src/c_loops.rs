//! The C reference loops (`c/loops.c`), compiled by build.rs.

use erdma::sys;

unsafe extern "C" {
    /// `iters` signaled inline RDMA WRITEs of `len` bytes, each polled to
    /// completion; 0 on success. The empty polls are added to `*empty`.
    pub fn erdma_c_write_inline(
        qp: *mut sys::ibv_qp,
        cq: *mut sys::ibv_cq,
        buf: *mut u8,
        len: u32,
        lkey: u32,
        raddr: u64,
        rkey: u32,
        iters: std::ffi::c_long,
        empty: *mut std::ffi::c_long,
    ) -> i32;

    /// `iters` times: a receive posted on `rqp`, a SEND of `len` bytes from
    /// `sqp`, both completions polled; 0 on success. The empty polls are
    /// added to `*empty`.
    pub fn erdma_c_send_recv(
        sqp: *mut sys::ibv_qp,
        scq: *mut sys::ibv_cq,
        sbuf: *mut u8,
        slkey: u32,
        rqp: *mut sys::ibv_qp,
        rcq: *mut sys::ibv_cq,
        rbuf: *mut u8,
        rlkey: u32,
        len: u32,
        iters: std::ffi::c_long,
        empty: *mut std::ffi::c_long,
    ) -> i32;
}
