//! The data-path loops measured against each other: the safe Rust API's two
//! paths (requests posted one by one on a [`erdma::QueuePair`], and requests
//! prepared once on an [`erdma::Lane`]) and the same loops in C
//! ([`c_loops`]), on loopback pairs with their buffers.
//! `benches/datapath.rs` times them with criterion; `erdma-datapath-count`
//! runs a fixed number of iterations so that an instruction counter
//! (callgrind) can compare them exactly.

use erdma::{
    AccessFlags, AlignedBuffer, Completion, CompletionQueue, Lane, LocalSlice, MemoryRegion,
    ProtectionDomain, QpCapabilities, RecvRequest, RemoteBuffer, SendRequest, WorkCompletion,
};

use crate::{c_loops, loopback};

/// Bytes per message.
pub const MSG: usize = 8;

/// The buffers of one pair: `a` writes and sends from `src` into `b`'s
/// `dst` (RDMA WRITE) and `rbuf` (receives).
struct Buffers {
    src: MemoryRegion<AlignedBuffer>,
    dst: MemoryRegion<AlignedBuffer>,
    rbuf: MemoryRegion<AlignedBuffer>,
}

impl Buffers {
    fn new(a: &ProtectionDomain, b: &ProtectionDomain) -> Result<Buffers, String> {
        let reg = |pd: &ProtectionDomain, access| {
            AlignedBuffer::new(4096)
                .and_then(|buf| pd.register(buf, access))
                .map_err(|e| format!("register 4 KiB: {e}"))
        };
        Ok(Buffers {
            src: reg(a, AccessFlags::empty())?,
            dst: reg(b, AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE)?,
            rbuf: reg(b, AccessFlags::LOCAL_WRITE)?,
        })
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
}

/// A second loopback pair, each QP made a [`Lane`], with its own buffers.
struct Lanes {
    a: Lane,
    b: Lane,
    bufs: Buffers,
}

/// Connected loopback pairs and their registered buffers: `a <-> b` for the
/// per-request API and C, a second pair as lanes.
pub struct Fixture {
    /// The sending side.
    pub a: loopback::Side,
    /// The receiving side.
    pub b: loopback::Side,
    bufs: Buffers,
    lanes: Lanes,
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
        let pair = || {
            loopback::connect(&da, &db, &caps).map_err(|e| format!("loopback pair {label}: {e}"))
        };
        let (a, b) = pair()?;
        let (la, lb) = pair()?;
        let lanes = Lanes {
            bufs: Buffers::new(&la.pd, &lb.pd)?,
            a: Lane::new(la.qp).map_err(|e| format!("lane on {da}: {e}"))?,
            b: Lane::new(lb.qp).map_err(|e| format!("lane on {db}: {e}"))?,
        };
        Ok(Fixture {
            bufs: Buffers::new(&a.pd, &b.pd)?,
            lanes,
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

    /// `iters` signaled inline RDMA WRITEs of 8 B, each polled to completion
    /// (safe API); returns the empty polls.
    pub fn rust_write_inline(&self, iters: u64) -> Result<u64, String> {
        let (local, remote) = (self.bufs.local(), self.bufs.remote());
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
        let remote = self.bufs.remote();
        let mut empty: std::ffi::c_long = 0;
        // SAFETY: live QP and CQ of a connected pair; src and the remote
        // slice are registered and outlive the call; the loop consumes every
        // completion it causes.
        let rc = unsafe {
            c_loops::erdma_c_write_inline(
                self.a.qp.as_raw(),
                self.a.cq.as_raw(),
                self.bufs.src.addr() as usize as *mut u8,
                MSG as u32,
                self.bufs.src.lkey(),
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
        let (sl, rl) = (self.bufs.local(), self.bufs.rbuf.slice(..MSG).expect("8 B"));
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

    /// The loop of [`Fixture::rust_write_inline`] on a lane: the request
    /// prepared once, then posted and polled `iters` times.
    pub fn lane_write_inline(&self, iters: u64) -> Result<u64, String> {
        let l = &self.lanes;
        let req = SendRequest::write([l.bufs.local()], l.bufs.remote()).inline();
        let mut write = l.a.prepare_send(req).map_err(|e| e.to_string())?;
        let mut wc = [Completion::default()];
        let mut empty = 0;
        for _ in 0..iters {
            write.post().map_err(|e| e.to_string())?;
            empty += lane_poll_one(&l.a, false, &mut wc)?;
        }
        Ok(empty)
    }

    /// The loop of [`Fixture::rust_send_recv`] on lanes.
    pub fn lane_send_recv(&self, iters: u64) -> Result<u64, String> {
        let l = &self.lanes;
        let err = |e: erdma::Error| e.to_string();
        let rl = l.bufs.rbuf.slice(..MSG).expect("8 B");
        let mut recv = l.b.prepare_recv(RecvRequest::new([rl])).map_err(err)?;
        let mut send =
            l.a.prepare_send(SendRequest::send([l.bufs.local()]))
                .map_err(err)?;
        let mut wc = [Completion::default()];
        let mut empty = 0;
        for _ in 0..iters {
            recv.post().map_err(err)?;
            send.post().map_err(err)?;
            empty += lane_poll_one(&l.a, false, &mut wc)?;
            empty += lane_poll_one(&l.b, true, &mut wc)?;
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
                self.bufs.src.addr() as usize as *mut u8,
                self.bufs.src.lkey(),
                self.b.qp.as_raw(),
                self.b.cq.as_raw(),
                self.bufs.rbuf.addr() as usize as *mut u8,
                self.bufs.rbuf.lkey(),
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

/// [`poll_one`] on a lane's send or receive CQ (inlined, as the C loop's
/// `static` helper is).
#[inline(always)]
fn lane_poll_one(lane: &Lane, recv: bool, wc: &mut [Completion; 1]) -> Result<u64, String> {
    let mut empty = 0;
    loop {
        let polled = if recv {
            lane.poll_recv(wc)
        } else {
            lane.poll_send(wc)
        };
        match polled {
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
