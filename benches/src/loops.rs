//! The data-path loops measured against each other: the safe Rust API and the
//! same loops in C ([`c_loops`]), on one loopback pair with its buffers.
//! `benches/datapath.rs` times them with criterion; `erdma-datapath-count`
//! runs a fixed number of iterations so that an instruction counter
//! (callgrind) can compare them exactly.

use erdma::{
    AccessFlags, AlignedBuffer, CompletionQueue, LocalSlice, MemoryRegion, QpCapabilities,
    RecvRequest, RemoteBuffer, SendRequest, WorkCompletion,
};

use crate::{c_loops, loopback};

/// Bytes per message.
pub const MSG: usize = 8;

/// A connected loopback pair and its registered buffers: `a` writes and
/// sends from `src` into `b`'s `dst` (RDMA WRITE) and `rbuf` (receives).
pub struct Fixture {
    /// The sending side.
    pub a: loopback::Side,
    /// The receiving side.
    pub b: loopback::Side,
    src: MemoryRegion<AlignedBuffer>,
    dst: MemoryRegion<AlignedBuffer>,
    rbuf: MemoryRegion<AlignedBuffer>,
    /// The inline data `a`'s QP was created with (up to 64 B).
    pub inline: u32,
    /// `a <-> b` device names, for messages.
    pub label: String,
}

impl Fixture {
    /// The pair on [`loopback::devices`]; `Err` says why there is none (no
    /// device, iWARP only, a verb failed).
    pub fn new() -> Result<Fixture, String> {
        let (da, db) = loopback::devices()?;
        let probe = erdma::Context::open(&da).and_then(|ctx| ctx.max_inline_data());
        let inline = probe.map_err(|e| format!("{da}: {e}"))?.min(64);
        let caps = QpCapabilities {
            max_send_wr: 64,
            max_recv_wr: 64,
            max_send_sge: 1,
            max_recv_sge: 1,
            max_inline_data: inline,
        };
        let label = format!("{da} <-> {db}");
        let (a, b) = loopback::connect(&da, &db, &caps)
            .map_err(|e| format!("loopback pair {label}: {e}"))?;
        let reg = |pd: &erdma::ProtectionDomain, access| {
            AlignedBuffer::new(4096)
                .and_then(|buf| pd.register(buf, access))
                .map_err(|e| format!("register 4 KiB: {e}"))
        };
        Ok(Fixture {
            src: reg(&a.pd, AccessFlags::empty())?,
            dst: reg(&b.pd, AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE)?,
            rbuf: reg(&b.pd, AccessFlags::LOCAL_WRITE)?,
            a,
            b,
            inline,
            label,
        })
    }

    /// Whether an 8 B inline write fits the QP's inline limit.
    pub fn has_inline(&self) -> bool {
        self.inline as usize >= MSG
    }

    fn local(&self) -> LocalSlice<'_> {
        self.src.slice(..MSG).expect("8 B of a 4 KiB region")
    }

    fn remote(&self) -> RemoteBuffer {
        self.dst
            .remote()
            .slice(..MSG)
            .expect("8 B of a 4 KiB region")
    }

    /// `iters` signaled inline RDMA WRITEs of 8 B, each polled to completion
    /// (safe API); returns the empty polls.
    pub fn rust_write_inline(&self, iters: u64) -> Result<u64, String> {
        let (local, remote) = (self.local(), self.remote());
        let mut wc = [WorkCompletion::default()];
        let mut empty = 0;
        for _ in 0..iters {
            self.a
                .qp
                .post_send(SendRequest::write([local], remote).inline())
                .map_err(|e| e.to_string())?;
            empty += poll_one(&self.a.cq, &mut wc)?;
        }
        Ok(empty)
    }

    /// The same loop in C; returns the empty polls.
    pub fn c_write_inline(&self, iters: u64) -> Result<u64, String> {
        let remote = self.remote();
        let mut empty: std::ffi::c_long = 0;
        // SAFETY: live QP and CQ of a connected pair; src and the remote
        // slice are registered and outlive the call; the loop consumes every
        // completion it causes.
        let rc = unsafe {
            c_loops::erdma_c_write_inline(
                self.a.qp.as_raw(),
                self.a.cq.as_raw(),
                self.src.addr() as usize as *mut u8,
                MSG as u32,
                self.src.lkey(),
                remote.addr,
                remote.rkey,
                iters as std::ffi::c_long,
                &mut empty,
            )
        };
        c_result(rc, empty, "write_inline")
    }

    /// `iters` times: a receive posted on `b`, an 8 B SEND from `a`, both
    /// completions polled (safe API); returns the empty polls.
    pub fn rust_send_recv(&self, iters: u64) -> Result<u64, String> {
        let (sl, rl) = (self.local(), self.rbuf.slice(..MSG).expect("8 B"));
        let mut wc = [WorkCompletion::default()];
        let mut empty = 0;
        let err = |e: erdma::Error| e.to_string();
        for _ in 0..iters {
            self.b.qp.post_recv(RecvRequest::new([rl])).map_err(err)?;
            self.a.qp.post_send(SendRequest::send([sl])).map_err(err)?;
            empty += poll_one(&self.a.cq, &mut wc)?;
            empty += poll_one(&self.b.cq, &mut wc)?;
        }
        Ok(empty)
    }

    /// The same loop in C; returns the empty polls.
    pub fn c_send_recv(&self, iters: u64) -> Result<u64, String> {
        let mut empty: std::ffi::c_long = 0;
        // SAFETY: as in c_write_inline; the receive buffer is registered
        // with LOCAL_WRITE on b's PD and outlives the call.
        let rc = unsafe {
            c_loops::erdma_c_send_recv(
                self.a.qp.as_raw(),
                self.a.cq.as_raw(),
                self.src.addr() as usize as *mut u8,
                self.src.lkey(),
                self.b.qp.as_raw(),
                self.b.cq.as_raw(),
                self.rbuf.addr() as usize as *mut u8,
                self.rbuf.lkey(),
                MSG as u32,
                iters as std::ffi::c_long,
                &mut empty,
            )
        };
        c_result(rc, empty, "send_recv")
    }
}

/// Spins until one completion arrives; returns the empty polls before it,
/// `Err` for a failed completion or poll.
fn poll_one(cq: &CompletionQueue, wc: &mut [WorkCompletion; 1]) -> Result<u64, String> {
    let mut empty = 0;
    loop {
        match cq.poll(wc) {
            Ok(0) => empty += 1,
            Ok(_) => return wc[0].ok().map(|_| empty).map_err(|e| e.to_string()),
            Err(e) => return Err(e.to_string()),
        }
    }
}

fn c_result(rc: i32, empty: std::ffi::c_long, what: &str) -> Result<u64, String> {
    if rc == 0 {
        Ok(empty as u64)
    } else {
        Err(format!("the C loop {what} failed (a post or a completion)"))
    }
}
