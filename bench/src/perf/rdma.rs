//! The RDMA side of a run: the device, protection domain, CQs, QPs and
//! registered buffers, set up the way perftest sets them up (`ctx_init`,
//! `ctx_connect`, RDMA CM's `rdma_cm_*_connection`), with the erdma library's
//! safe API.

use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4};
use std::time::{Duration, Instant};

use erdma::cm::{CmId, CmListener, ConnParams};
use erdma::{
    AccessFlags, AlignedBuffer, CompletionQueue, ConnectOptions, Context, Endpoint, Gid, GidEntry,
    Lane, LinkLayer, MemoryRegion, Mtu, ProtectionDomain, QpCapabilities, QueuePair, Transport,
};

use super::cases::Verb;
use super::error::{Context as _, PerfError, PerfResult};
use super::gpu;
use super::memory::{Layout, Region};
use super::options::Options;
use super::wire::keys::Dest;

/// Receive buffer bytes per QP that `--verify` gives SEND tests (each
/// posted receive its own slot, so no message is overwritten before it is
/// checked).
pub const VERIFY_RX_BYTES: u64 = 16 << 20;

/// Opens the device of `-d` (or the first) and checks the port.
pub fn open_device(o: &Options) -> PerfResult<Context> {
    let list = erdma::devices();
    if let Some(reason) = list.reason() {
        return Err(match reason {
            erdma::NoDevicesReason::LibraryMissing(detail) => PerfError::rdma(
                "load libibverbs",
                erdma::Error::LibraryMissing {
                    library: "libibverbs",
                    detail: detail.clone(),
                },
            ),
            other => PerfError::NoDevice(format!("no RDMA device: {other}")),
        });
    }
    let dev = match &o.device {
        Some(name) => list.find(name).ctx(|| format!("-d {name}"))?,
        None => list.iter().next().expect("a non-empty list"),
    };
    let ctx = dev.open().ctx(|| format!("open {}", dev.name()))?;
    ctx.port(o.ib_port)
        .ctx(|| format!("-i {} on {}", o.ib_port, ctx.name()))?;
    if ctx.transport() == Transport::Iwarp && !o.rdma_cm {
        return Err(PerfError::Unsupported(format!(
            "{} is an iWARP device (eRDMA in its default mode, siw): it connects only through RDMA CM: add -R \
             on both sides",
            ctx.name()
        )));
    }
    if let (Some(i), false) = (o.gid_index, o.rdma_cm) {
        ctx.select_gid(o.ib_port, Some(i))
            .ctx(|| format!("-x {i}"))?;
    }
    if o.case.verb == Verb::Atomic && !ctx.attributes().supports_atomics() {
        return Err(PerfError::Unsupported(format!(
            "{} has no atomic operations (atomic_cap {}): {} cannot run on it (iWARP devices such as siw and \
             eRDMA lack them)",
            ctx.name(),
            ctx.attributes().atomic_cap(),
            o.case.name
        )));
    }
    Ok(ctx)
}

/// The port's MTU for the exchange (`-m`, capped to the active MTU).
pub fn port_mtu(ctx: &Context, o: &Options) -> PerfResult<Mtu> {
    let pa = ctx
        .port(o.ib_port)
        .ctx(|| format!("query port {}", o.ib_port))?;
    let active = pa.active_mtu().unwrap_or(Mtu::Mtu1024);
    Ok(o.mtu.map_or(active, |m| m.min(active)))
}

/// Credits of SEND tests on iWARP (no RNR retry there): the receiver
/// RDMA-writes how many messages it received into the sender's `target`.
pub struct Credits {
    /// Where the peer writes its receive counts (one u32 per QP).
    pub target: Region,
    /// Where this side's counts are written from.
    pub source: MemoryRegion<AlignedBuffer>,
    /// A credit write every this many receives (perftest: RX depth / 3).
    pub every: u64,
}

/// A latency loop without its lane: a bug (the session makes it on connect).
#[cold]
pub fn no_lane() -> PerfError {
    PerfError::rdma(
        "the latency loop",
        erdma::Error::invalid("erdma-perf", "the QP was not made a lane: connect first"),
    )
}

/// Everything RDMA of a run. Fields drop in order: QPs first (they hold
/// their buffers' leases), then memory, CQs, PD, and the CM ids last.
pub struct Resources {
    /// Latency tests, once connected: their one QP as a lane (requests
    /// prepared once and posted without per-request bookkeeping, as
    /// perftest's loops post); `qps` is then empty.
    pub lane: Option<Lane>,
    /// One QP per `-q`.
    pub qps: Vec<QueuePair>,
    /// Local buffer: sources, READ destinations, atomic results.
    pub lmr: Region,
    /// Exposed buffer: WRITE targets, READ sources, atomic targets, receives.
    pub xmr: Region,
    /// iWARP SEND credits.
    pub credits: Option<Credits>,
    /// Send completions.
    pub send_cq: CompletionQueue,
    /// Receive completions.
    pub recv_cq: CompletionQueue,
    /// The protection domain.
    pub pd: ProtectionDomain,
    /// The device.
    pub ctx: Context,
    /// Port.
    pub port: u8,
    /// The GID used (Ethernet, or `-x`).
    pub gid: Option<GidEntry>,
    /// Buffer layout.
    pub layout: Layout,
    /// Bytes per QP of the receive area (SEND tests).
    pub recv_stride: u64,
    /// Inline size granted.
    pub inline: u32,
    /// Outstanding READs/atomics.
    pub out_reads: u32,
    /// Memory description (`host`, GPU name and registration).
    pub memory: String,
    /// Receives posted per QP in the current size (SEND tests).
    pub recv_posted: Vec<u64>,
    /// The RDMA CM connections (`-R`): kept so that they stay up until the
    /// resources go (dropping one disconnects).
    _cm: Vec<CmId>,
}

/// What resources need from the run.
pub struct Plan<'a> {
    /// Options.
    pub o: &'a Options,
    /// Layout for the largest size.
    pub layout: Layout,
    /// GPU, with `--use_cuda`.
    pub gpu: Option<&'a (erdma::cuda::Device, String)>,
}

impl Plan<'_> {
    /// Receives outstanding per QP for messages of `size`.
    pub fn rx_window(&self, size: u64) -> u64 {
        rx_window(self.o, &self.layout, size)
    }
}

/// Receives outstanding per QP for messages of `size` (`--verify` bounds
/// them so that each has its own slot).
pub fn rx_window(o: &Options, layout: &Layout, size: u64) -> u64 {
    let depth = u64::from(o.rx_depth.max(1));
    if o.verify {
        depth.min((VERIFY_RX_BYTES / layout.inc(size)).max(2))
    } else {
        depth
    }
}

fn access(o: &Options, transport: Transport) -> (AccessFlags, AccessFlags) {
    let mut local = AccessFlags::LOCAL_WRITE;
    let mut exposed = AccessFlags::LOCAL_WRITE
        | match o.case.verb {
            Verb::Write => AccessFlags::REMOTE_WRITE,
            Verb::Read => AccessFlags::REMOTE_READ,
            Verb::Atomic => AccessFlags::REMOTE_ATOMIC,
            Verb::Send => AccessFlags::empty(),
        };
    // iWARP returns READ data as a WRITE into the reader's buffer.
    if o.case.verb == Verb::Read && transport == Transport::Iwarp {
        local |= AccessFlags::REMOTE_WRITE;
        exposed |= AccessFlags::REMOTE_WRITE;
    }
    if o.relaxed_ordering {
        local |= AccessFlags::RELAXED_ORDERING;
        exposed |= AccessFlags::RELAXED_ORDERING;
    }
    (local, exposed)
}

fn host_region(pd: &ProtectionDomain, len: u64, flags: AccessFlags) -> PerfResult<Region> {
    let buf = AlignedBuffer::new(len as usize).ctx(|| format!("allocate {len} bytes"))?;
    let mr = pd
        .register(buf, flags)
        .ctx(|| format!("register the {len}-byte buffer"))?;
    Ok(Region::Host(mr))
}

fn region(plan: &Plan, pd: &ProtectionDomain, len: u64, flags: AccessFlags) -> PerfResult<Region> {
    match plan.gpu {
        Some((dev, _)) => Ok(Region::Gpu(gpu::register(
            dev,
            pd,
            len as usize,
            flags,
            plan.o.cuda_reg,
        )?)),
        None => host_region(pd, len, flags),
    }
}

/// PD, CQs and buffers on `ctx` (before the QPs).
struct Parts {
    pd: ProtectionDomain,
    send_cq: CompletionQueue,
    recv_cq: CompletionQueue,
    lmr: Region,
    xmr: Region,
    credits: Option<Credits>,
    recv_stride: u64,
    caps: QpCapabilities,
    out_reads: u32,
    memory: String,
}

fn parts(plan: &Plan, ctx: &Context) -> PerfResult<Parts> {
    let o = plan.o;
    let q = u64::from(o.qps);
    let what = |w: &str| format!("{w} on {}", ctx.name());
    let pd = ctx
        .alloc_pd()
        .ctx(|| what("allocate a protection domain"))?;
    let transport = ctx.transport();
    let (lflags, xflags) = access(o, transport);
    let send = o.case.verb == Verb::Send;
    let recv_stride = if send && o.verify {
        o.sizes()
            .iter()
            .map(|&s| plan.rx_window(s) * plan.layout.inc(s))
            .max()
            .unwrap_or(plan.layout.stride)
            .max(plan.layout.stride)
    } else {
        plan.layout.stride
    };
    let lmr = region(plan, &pd, q * plan.layout.stride, lflags)?;
    let xmr = region(plan, &pd, q * recv_stride, xflags)?;
    let credits = if send && transport == Transport::Iwarp {
        let target = host_region(
            &pd,
            4 * q,
            AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE,
        )?;
        let source = pd
            .register(
                AlignedBuffer::new(4 * q as usize).ctx(|| what("allocate the credit buffer"))?,
                AccessFlags::LOCAL_WRITE,
            )
            .ctx(|| what("register the credit buffer"))?;
        Some(Credits {
            target,
            source,
            every: (u64::from(o.rx_depth) / 3).max(1),
        })
    } else {
        None
    };
    let a = ctx.attributes();
    let max_wr = a.max_qp_wr().max(1);
    let tx = o.tx_depth + if credits.is_some() { o.tx_depth } else { 0 };
    if tx > max_wr || (send && o.rx_depth > max_wr) {
        return Err(PerfError::Usage(format!(
            "-t {} / -r {}: {} allows at most {max_wr} requests per queue",
            o.tx_depth,
            o.rx_depth,
            ctx.name()
        )));
    }
    // Inline data is copied by the CPU: never from GPU memory (the library
    // refuses it, Error::NotHostMemory; perftest turns inline off too).
    let inline = if o.inline_size() > 0 && plan.gpu.is_none() {
        o.inline_size().min(ctx.max_inline_data().unwrap_or(0))
    } else {
        0
    };
    let caps = QpCapabilities {
        max_send_wr: tx,
        max_recv_wr: if send { o.rx_depth.max(1) } else { 1 },
        max_send_sge: 1,
        max_recv_sge: 1,
        max_inline_data: inline,
    };
    let max_cqe = a.max_cqe().max(1);
    let cqe = |n: u64| n.clamp(1, u64::from(max_cqe)) as u32;
    let send_cq = ctx
        .create_cq(cqe(u64::from(tx) * q))
        .ctx(|| what("create the send CQ"))?;
    let recv_cq = ctx
        .create_cq(cqe(if send { u64::from(o.rx_depth) * q } else { q }))
        .ctx(|| what("create the receive CQ"))?;
    let dev_reads = a.max_qp_rd_atom().clamp(1, 255);
    let out_reads = match o.case.verb {
        Verb::Read | Verb::Atomic => o.out_reads.map_or(dev_reads, |r| r.min(dev_reads)),
        _ => 1,
    };
    let memory = match (&plan.gpu, &lmr) {
        (Some((_, name)), Region::Gpu(g)) => {
            format!("cuda:{} {name}, {}", o.cuda.unwrap_or(0), g.how())
        }
        _ => "host".to_string(),
    };
    Ok(Parts {
        pd,
        send_cq,
        recv_cq,
        lmr,
        xmr,
        credits,
        recv_stride,
        caps,
        out_reads,
        memory,
    })
}

impl Resources {
    fn assemble(
        ctx: Context,
        p: Parts,
        qps: Vec<QueuePair>,
        port: u8,
        gid: Option<GidEntry>,
        plan: &Plan,
        cm: Vec<CmId>,
    ) -> Resources {
        Resources {
            lane: None,
            qps,
            lmr: p.lmr,
            xmr: p.xmr,
            credits: p.credits,
            send_cq: p.send_cq,
            recv_cq: p.recv_cq,
            pd: p.pd,
            ctx,
            port,
            gid,
            layout: plan.layout,
            recv_stride: p.recv_stride,
            inline: p.caps.max_inline_data,
            out_reads: p.out_reads,
            memory: p.memory,
            recv_posted: Vec::new(),
            _cm: cm,
        }
    }

    /// QPs created with `ibv_create_qp` on the opened device, connected later
    /// by [`Resources::connect`] (perftest's Ethernet exchange).
    pub fn verbs(plan: &Plan, ctx: Context) -> PerfResult<Resources> {
        let o = plan.o;
        let p = parts(plan, &ctx)?;
        let pa = ctx
            .port(o.ib_port)
            .ctx(|| format!("query port {}", o.ib_port))?;
        // GIDs on Ethernet always (perftest: GID index 0 unless -x; we
        // take the IPv4 RoCE v2 entry, as NCCL and perftest's
        // get_best_gid_index do), on InfiniBand only with -x.
        let gid = if pa.link_layer() == LinkLayer::Ethernet || o.gid_index.is_some() {
            Some(
                ctx.select_gid(o.ib_port, o.gid_index)
                    .ctx(|| format!("pick the GID of {} port {}", ctx.name(), o.ib_port))?,
            )
        } else {
            None
        };
        let mut qps = Vec::new();
        for i in 0..o.qps {
            qps.push(
                p.pd.create_rc_qp(&p.send_cq, &p.recv_cq, &p.caps)
                    .ctx(|| format!("create QP {i} on {}", ctx.name()))?,
            );
        }
        Ok(Resources::assemble(
            ctx,
            p,
            qps,
            o.ib_port,
            gid,
            plan,
            Vec::new(),
        ))
    }

    /// The client's QPs through RDMA CM (`-R`): one connection per QP to
    /// the server's port, retried while the server is not listening yet.
    pub fn cm_client(plan: &Plan, server: Ipv4Addr) -> PerfResult<Resources> {
        let o = plan.o;
        let dst = SocketAddr::V4(SocketAddrV4::new(server, o.port));
        let src = o.source_ip.map(|s| SocketAddr::V4(SocketAddrV4::new(s, 0)));
        let params = conn_params(o, None);
        let mut state: Option<(Context, Parts)> = None;
        let mut qps = Vec::new();
        let mut ids = Vec::new();
        for i in 0..o.qps {
            let deadline = Instant::now() + o.timeout;
            loop {
                let attempt = (|| -> PerfResult<(CmId, QueuePair)> {
                    let id = CmId::resolve(dst, src, o.timeout)
                        .ctx(|| format!("resolve {dst} with RDMA CM for QP {i}"))?;
                    if state.is_none() {
                        let ctx = id
                            .context()
                            .ctx(|| "the device of the RDMA CM route".into())?;
                        let p = parts(plan, &ctx)?;
                        state = Some((ctx, p));
                    }
                    let (_, p) = state.as_ref().expect("set above");
                    let qp = id
                        .create_qp(&p.pd, &p.send_cq, &p.recv_cq, &p.caps)
                        .ctx(|| format!("create QP {i} with RDMA CM"))?;
                    id.connect(&qp, &params, o.timeout)
                        .ctx(|| format!("connect QP {i} to {dst} with RDMA CM"))?;
                    Ok((id, qp))
                })();
                match attempt {
                    Ok((id, qp)) => {
                        ids.push(id);
                        qps.push(qp);
                        break;
                    }
                    // The server listens only after the exchange step
                    // before it: retry a refused connection for a while.
                    Err(PerfError::Rdma { err, .. })
                        if crate::perf::wire::cm::refused(&err) && Instant::now() < deadline =>
                    {
                        std::thread::sleep(Duration::from_millis(100))
                    }
                    Err(e) => return Err(e),
                }
            }
        }
        let (ctx, p) = state.ok_or_else(|| PerfError::Usage("-q 0".into()))?;
        let port = ids.first().map(CmId::port).unwrap_or(1);
        let gid = ctx.gid(port, 0).ok().flatten();
        check_device(o, &ctx)?;
        Ok(Resources::assemble(ctx, p, qps, port, gid, plan, ids))
    }

    /// Listens for the test QPs' RDMA CM connections on the port again (the
    /// exchange connection's listener is gone). The server does this before
    /// it answers the record that precedes the connections: a perftest client
    /// connects right after that answer and does not survive a refusal
    /// (its retry path crashes).
    pub fn cm_listen(o: &Options) -> PerfResult<CmListener> {
        let addr = SocketAddr::V4(SocketAddrV4::new(
            o.source_ip.unwrap_or(Ipv4Addr::UNSPECIFIED),
            o.port,
        ));
        CmListener::bind(addr).ctx(|| format!("listen with RDMA CM on {addr}"))
    }

    /// The server's QPs through RDMA CM (`-R`): accepts one connection per
    /// QP on `listener` ([`Resources::cm_listen`]).
    pub fn cm_server(plan: &Plan, listener: CmListener) -> PerfResult<Resources> {
        let o = plan.o;
        let mut state: Option<(Context, Parts)> = None;
        let mut qps = Vec::new();
        let mut ids = Vec::new();
        for i in 0..o.qps {
            let req = listener
                .get_request(o.timeout)
                .ctx(|| format!("wait for the client's RDMA CM connection of QP {i}"))?;
            if state.is_none() {
                let ctx = req
                    .context()
                    .ctx(|| "the device of the RDMA CM connection".into())?;
                let p = parts(plan, &ctx)?;
                state = Some((ctx, p));
            }
            let (_, p) = state.as_ref().expect("set above");
            let qp = req
                .create_qp(&p.pd, &p.send_cq, &p.recv_cq, &p.caps)
                .ctx(|| format!("create QP {i} with RDMA CM"))?;
            let id = req
                .accept(&qp, &conn_params(o, None), o.timeout)
                .ctx(|| format!("accept the RDMA CM connection of QP {i}"))?;
            ids.push(id);
            qps.push(qp);
        }
        drop(listener);
        let (ctx, p) = state.ok_or_else(|| PerfError::Usage("-q 0".into()))?;
        let port = ids.first().map(CmId::port).unwrap_or(1);
        let gid = ctx.gid(port, 0).ok().flatten();
        check_device(o, &ctx)?;
        Ok(Resources::assemble(ctx, p, qps, port, gid, plan, ids))
    }

    /// Makes the one QP of a latency test a lane (see [`Resources::lane`]);
    /// called once it is connected (RTS).
    pub fn make_lane(&mut self) -> PerfResult<()> {
        if self.lane.is_some() || self.qps.len() != 1 {
            return Ok(());
        }
        let qp = self.qps.remove(0);
        let lane =
            Lane::new(qp).map_err(|e| PerfError::rdma("prepare the latency loop's QP", e))?;
        self.lane = Some(lane);
        Ok(())
    }

    /// The lane of a latency test ([`Resources::make_lane`]).
    pub fn lane(&self) -> PerfResult<&Lane> {
        self.lane.as_ref().ok_or_else(no_lane)
    }

    /// This side's connection records (`set_up_connection`).
    pub fn dests(&self) -> PerfResult<Vec<Dest>> {
        let lid = self.ctx.port(self.port).map(|p| p.lid()).unwrap_or(0);
        let gid = self.gid.as_ref().map(|g| g.gid.0).unwrap_or([0; 16]);
        let mut v = Vec::new();
        for (i, qp) in self.qps.iter().enumerate() {
            let (rkey, vaddr) = match &self.credits {
                Some(c) => (c.target.rkey(), c.target.addr() + 4 * i as u64),
                None => (
                    self.xmr.rkey(),
                    self.xmr.addr() + i as u64 * self.recv_stride,
                ),
            };
            v.push(Dest {
                lid: u32::from(lid),
                out_reads: self.out_reads,
                qpn: qp.qp_num(),
                psn: random_psn(),
                rkey,
                vaddr,
                gid,
                srqn: 0,
            });
        }
        Ok(v)
    }

    /// perftest's `ctx_connect`: INIT, RTR, RTS from the peer's records.
    pub fn connect(&self, o: &Options, my: &[Dest], rem: &[Dest], mtu: Mtu) -> PerfResult<()> {
        let gid = self.gid.clone();
        for (i, qp) in self.qps.iter().enumerate() {
            let (m, r) = (&my[i], &rem[i]);
            let local = Endpoint {
                qp_num: qp.qp_num(),
                psn: m.psn,
                gid: gid.as_ref().map(|g| g.gid).unwrap_or_default(),
                gid_index: gid.as_ref().map(|g| g.index).unwrap_or(0),
                lid: m.lid as u16,
                port: self.port,
                mtu,
                buffers: Vec::new(),
            };
            let remote = Endpoint {
                qp_num: r.qpn,
                psn: r.psn,
                gid: Gid(r.gid),
                gid_index: 0,
                lid: r.lid as u16,
                port: 1,
                mtu,
                buffers: Vec::new(),
            };
            let (_, flags) = access(o, self.ctx.transport());
            let opts = ConnectOptions {
                access: flags | AccessFlags::LOCAL_WRITE,
                timeout: o.qp_timeout,
                retry_cnt: 7,
                rnr_retry: 7,
                min_rnr_timer: 12,
                max_rd_atomic: Some(self.out_reads.min(r.out_reads.max(1)).min(255) as u8),
                global: gid.is_some(),
                hop_limit: 0xff,
                traffic_class: o.tclass,
                sl: o.sl,
            };
            qp.connect(&local, &remote, &opts).map_err(|e| {
                PerfError::rdma(
                    format!(
                        "connect QP {i} ({:#x}) to the peer's QP {:#x}",
                        qp.qp_num(),
                        r.qpn
                    ),
                    e,
                )
            })?;
        }
        Ok(())
    }

    /// The remote buffer of QP `i` from the peer's record.
    pub fn remote(&self, rem: &Dest) -> erdma::RemoteBuffer {
        erdma::RemoteBuffer {
            addr: rem.vaddr,
            rkey: rem.rkey,
            len: self.layout.window,
        }
    }

    /// The device's transport.
    pub fn transport(&self) -> Transport {
        self.ctx.transport()
    }

    /// Whether the test uses atomics the device lacks.
    pub fn check_atomics(&self, o: &Options) -> PerfResult<()> {
        if o.case.verb == Verb::Atomic && !self.ctx.attributes().supports_atomics() {
            return Err(PerfError::Unsupported(format!(
                "{} has no atomic operations (atomic_cap {}): {} cannot run there (iWARP devices such as siw \
                 and eRDMA lack them)",
                self.ctx.name(),
                self.ctx.attributes().atomic_cap(),
                o.case.name
            )));
        }
        Ok(())
    }
}

fn check_device(o: &Options, ctx: &Context) -> PerfResult<()> {
    if let Some(want) = &o.device
        && want != ctx.name()
    {
        return Err(PerfError::Usage(format!(
            "-d {want}: the RDMA CM route to the peer uses {} (the device owning the address): give -d {} or \
                 the other device's address",
            ctx.name(),
            ctx.name()
        )));
    }
    Ok(())
}

fn conn_params(o: &Options, _peer: Option<u8>) -> ConnParams {
    let reads = match o.case.verb {
        Verb::Read | Verb::Atomic => o.out_reads.map_or(255, |r| r.min(255) as u8),
        _ => 255,
    };
    ConnParams {
        private_data: Vec::new(),
        responder_resources: reads,
        initiator_depth: reads,
        retry_count: o.retry_count,
        rnr_retry_count: 7,
    }
}

/// A random 24-bit PSN (perftest: `lrand48() & 0xffffff`).
pub fn random_psn() -> u32 {
    let mut b = [0u8; 4];
    // SAFETY: b is 4 writable bytes.
    let n = unsafe { libc::getrandom(b.as_mut_ptr().cast(), 4, 0) };
    if n != 4 {
        let t = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.subsec_nanos())
            .unwrap_or(1);
        return (t ^ std::process::id()) & 0x00ff_ffff;
    }
    u32::from_ne_bytes(b) & 0x00ff_ffff
}
