//! RDMA WRITE bandwidth between every pair of ranks' NICs, as a matrix: the
//! first thing to run on a new cluster (one rank per host).
//!
//! ```text
//! mpirun -np 4 -H host1,host2,host3,host4 target/release/examples/nic_bw_matrix -d erdma_0
//! mpirun -np 2 --mca pml ob1 --mca btl self,vader,tcp nic_bw_matrix --devices rxe0,rxe1
//! ```
//!
//! Every rank opens its device (`-d DEV`, or the rank's entry of
//! `--devices D0,D1,...` / `$ERDMA_DEVICES`, or the first device), creates one
//! RC QP per peer and swaps the connection records through MPI (RoCE-style:
//! GIDs and `modify_qp`; iWARP devices, or `--cm`, connect through RDMA CM at
//! the addresses swapped through MPI). Then, in `N-1` rounds in which every
//! rank has one partner, each pair measures one direction and then the other
//! (`-n` RDMA WRITEs of `-s` bytes, `-t` in flight); rank 0 prints the matrix
//! in Gb/s (row: sender, column: receiver) and the slowest and fastest pair.
//! MPI itself only carries the records (Open MPI's TCP/shared-memory
//! transports are enough: `--mca pml ob1 --mca btl self,vader,tcp`).
//!
//! Options: `-d DEV`, `--devices LIST`, `-x GID_INDEX`, `-i PORT`, `-s SIZE`
//! (default 1 MiB), `-n ITERS` (default 200), `-t DEPTH` (default 16), `--cm`,
//! `--cm-port PORT` (default 18700), `--json`.
//!
//! Exit status: 0 ok; 1 an RDMA step failed; 2 bad arguments (or one rank);
//! 3 no RDMA device (or not the one named, or its port or GID index);
//! 6 a peer failed or timed out. Every rank that fails
//! prints one line naming what failed; the others stop at the next step.

use std::net::{IpAddr, Ipv4Addr, SocketAddr, SocketAddrV4};
use std::process::ExitCode;
use std::time::{Duration, Instant};

use erdma::cm::{CmId, CmListener, ConnParams};
use erdma::*;
use mpi::collective::SystemOperation;
use mpi::traits::*;

const TIMEOUT: Duration = Duration::from_secs(30);
/// Bytes of a connection record swapped through MPI.
const REC: usize = 64;
/// Bytes of a rank's name (host and device) swapped through MPI.
const NAME: usize = 64;

/// A failure: its exit status and one line.
type Failure = (i32, String);

fn rdma(what: &str) -> impl Fn(Error) -> Failure + '_ {
    move |e| {
        let code = match e {
            Error::Cm { .. } | Error::Timeout { .. } => 6,
            Error::NoSuchDevice { .. } | Error::BadPort { .. } | Error::BadGidIndex { .. } => 3,
            _ => 1,
        };
        (code, format!("{what}: {e}"))
    }
}

struct Opts {
    device: Option<String>,
    devices: Vec<String>,
    gid_index: Option<u32>,
    port: u8,
    size: usize,
    iters: u64,
    depth: u64,
    cm: bool,
    cm_port: u16,
    json: bool,
}

fn parse(args: &[String]) -> Result<Opts, String> {
    let mut o = Opts {
        device: None,
        devices: std::env::var("ERDMA_DEVICES")
            .map(|v| {
                v.split(',')
                    .filter(|s| !s.is_empty())
                    .map(str::to_owned)
                    .collect()
            })
            .unwrap_or_default(),
        gid_index: None,
        port: 1,
        size: 1 << 20,
        iters: 200,
        depth: 16,
        cm: false,
        cm_port: 18700,
        json: false,
    };
    let mut it = args.iter().skip(1);
    let num = |v: Option<&String>, name: &str, min: u64, max: u64| -> Result<u64, String> {
        let v = v.ok_or_else(|| format!("{name} needs a value"))?;
        let n: u64 = v.parse().map_err(|_| format!("{name} {v}: not a number"))?;
        if n < min || n > max {
            return Err(format!("{name} {v}: must be {min}..={max}"));
        }
        Ok(n)
    };
    while let Some(a) = it.next() {
        match a.as_str() {
            "-d" => o.device = it.next().cloned(),
            "--devices" => {
                o.devices = it
                    .next()
                    .map(|v| v.split(',').map(str::to_owned).collect())
                    .unwrap_or_default()
            }
            "-x" => o.gid_index = Some(num(it.next(), "-x", 0, 255)? as u32),
            "-i" => o.port = num(it.next(), "-i", 1, 255)? as u8,
            "-s" => o.size = num(it.next(), "-s", 1, 1 << 30)? as usize,
            "-n" => o.iters = num(it.next(), "-n", 1, 100_000_000)?,
            "-t" => o.depth = num(it.next(), "-t", 1, 4096)?,
            "--cm" => o.cm = true,
            "--cm-port" => o.cm_port = num(it.next(), "--cm-port", 1, 65535)? as u16,
            "--json" => o.json = true,
            "-h" | "--help" => return Err("help".into()),
            other => return Err(format!("unknown argument '{other}'")),
        }
    }
    Ok(o)
}

/// This rank's device.
struct Node {
    ctx: Context,
    gid: Option<GidEntry>,
}

/// PD, CQ and buffers, on the opened device (GIDs) or on the device
/// context of the first RDMA CM connection (librdmacm has its own).
struct Res {
    pd: ProtectionDomain,
    cq: CompletionQueue,
    src: MemoryRegion<AlignedBuffer>,
    dst: MemoryRegion<AlignedBuffer>,
    caps: QpCapabilities,
}

/// A connection to one peer.
struct Link {
    qp: QueuePair,
    remote: RemoteBuffer,
    _id: Option<CmId>,
}

fn open(o: &Opts, rank: usize) -> Result<Node, Failure> {
    let list = devices();
    if let Some(reason) = list.reason() {
        return Err((3, reason.to_string()));
    }
    let name = o
        .device
        .clone()
        .or_else(|| o.devices.get(rank % o.devices.len().max(1)).cloned());
    let dev = match &name {
        Some(n) => list.find(n).map_err(rdma("open the device"))?,
        None => list.iter().next().expect("a non-empty list"),
    };
    let ctx = dev.open().map_err(rdma("open the device"))?;
    let pa = ctx.port(o.port).map_err(rdma("query the port"))?;
    let gid = if ctx.transport() == Transport::Iwarp || o.cm {
        None
    } else if pa.link_layer() == LinkLayer::Ethernet || o.gid_index.is_some() {
        Some(
            ctx.select_gid(o.port, o.gid_index)
                .map_err(rdma("pick the GID"))?,
        )
    } else {
        None
    };
    Ok(Node { ctx, gid })
}

fn resources(ctx: &Context, o: &Opts, rank: usize, size: usize) -> Result<Res, Failure> {
    let pd = ctx.alloc_pd().map_err(rdma("allocate a PD"))?;
    // One CQ for every QP's sends and its one receive.
    let entries = ((size as u64 - 1) * (o.depth + 1)).max(16);
    let cq = ctx
        .create_cq(entries.min(u64::from(u32::MAX)) as u32)
        .map_err(rdma("create the CQ"))?;
    let mut buf = AlignedBuffer::new(o.size).map_err(rdma("allocate the buffer"))?;
    for (i, b) in buf.iter_mut().enumerate() {
        *b = (i as u8).wrapping_mul(31) ^ rank as u8;
    }
    let src = pd
        .register(buf, AccessFlags::LOCAL_WRITE)
        .map_err(rdma("register the source buffer"))?;
    let dst = pd
        .register(
            AlignedBuffer::new(o.size).map_err(rdma("allocate the buffer"))?,
            AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE,
        )
        .map_err(rdma("register the target buffer"))?;
    let caps = QpCapabilities {
        max_send_wr: o.depth as u32,
        max_recv_wr: 1,
        max_send_sge: 1,
        max_recv_sge: 1,
        max_inline_data: 0,
    };
    Ok(Res {
        pd,
        cq,
        src,
        dst,
        caps,
    })
}

/// The connection record: QPN, PSN, GID, GID index, LID, port, MTU and
/// the target buffer.
fn record(ep: &Endpoint, dst: RemoteBuffer) -> [u8; REC] {
    let mut b = [0u8; REC];
    b[0..4].copy_from_slice(&ep.qp_num.to_be_bytes());
    b[4..8].copy_from_slice(&ep.psn.to_be_bytes());
    b[8..24].copy_from_slice(&ep.gid.0);
    b[24..28].copy_from_slice(&ep.gid_index.to_be_bytes());
    b[28..30].copy_from_slice(&ep.lid.to_be_bytes());
    b[30] = ep.port;
    b[31] = ep.mtu.raw() as u8;
    b[32..52].copy_from_slice(&dst.to_bytes());
    b
}

fn from_record(b: &[u8]) -> Result<(Endpoint, RemoteBuffer), Failure> {
    let u32_at = |o: usize| u32::from_be_bytes([b[o], b[o + 1], b[o + 2], b[o + 3]]);
    let mut gid = [0u8; 16];
    gid.copy_from_slice(&b[8..24]);
    let ep = Endpoint {
        qp_num: u32_at(0),
        psn: u32_at(4),
        gid: Gid(gid),
        gid_index: u32_at(24),
        lid: u16::from_be_bytes([b[28], b[29]]),
        port: b[30],
        mtu: Mtu::from_raw(u32::from(b[31])).unwrap_or(Mtu::Mtu1024),
        buffers: Vec::new(),
    };
    ep.validate()
        .map_err(rdma("the peer's connection record"))?;
    let rb = RemoteBuffer::from_bytes(&b[32..52]).ok_or((6, "short record".to_string()))?;
    Ok((ep, rb))
}

/// The IPv4 address of this rank's device for RDMA CM: the IPv4-mapped
/// GID (RoCE), else the address of its network interface (iWARP).
fn device_ip(node: &Node, port: u8) -> Result<Ipv4Addr, Failure> {
    let table = node
        .ctx
        .gid_table(port)
        .map_err(rdma("read the GID table"))?;
    if let Some(ip) = table.iter().find_map(|g| g.gid.to_ipv4()) {
        return Ok(ip);
    }
    let netdev = table.iter().find_map(|g| g.netdev.clone()).ok_or((
        1,
        format!("{} has no IPv4 GID and no network interface: give -d of an RDMA interface with an IPv4 address", node.ctx.name()),
    ))?;
    interface_ipv4(&netdev).ok_or((
        1,
        format!(
            "{}'s interface {netdev} has no IPv4 address: RDMA CM needs one",
            node.ctx.name()
        ),
    ))
}

fn interface_ipv4(name: &str) -> Option<Ipv4Addr> {
    let mut ifa: *mut libc::ifaddrs = std::ptr::null_mut();
    // SAFETY: getifaddrs fills ifa with a list we free below.
    if unsafe { libc::getifaddrs(&mut ifa) } != 0 {
        return None;
    }
    let mut found = None;
    let mut p = ifa;
    while !p.is_null() {
        // SAFETY: p walks the list getifaddrs returned; each entry's name is
        // a C string and its address, when not null, a sockaddr of the
        // family it names.
        unsafe {
            let e = &*p;
            let n = std::ffi::CStr::from_ptr(e.ifa_name).to_string_lossy();
            if n == name
                && !e.ifa_addr.is_null()
                && i32::from((*e.ifa_addr).sa_family) == libc::AF_INET
            {
                let sin = &*(e.ifa_addr as *const libc::sockaddr_in);
                found = Some(Ipv4Addr::from(sin.sin_addr.s_addr.to_ne_bytes()));
                break;
            }
            p = e.ifa_next;
        }
    }
    // SAFETY: the list from getifaddrs, freed once.
    unsafe { libc::freeifaddrs(ifa) };
    found
}

/// The round-robin schedule: this rank's partner in round `r` of `n` (even)
/// slots, or None when it sits out (odd rank counts).
fn partner(rank: usize, r: usize, n: usize, real: usize) -> Option<usize> {
    let m = n - 1;
    let p = if rank == m {
        r
    } else if rank == r {
        m
    } else {
        (2 * r + m - rank) % m
    };
    (p != rank && p < real && rank < real).then_some(p)
}

/// Sends `iters` WRITEs of the whole buffer to `link`; returns Gb/s.
fn measure(node: &Res, link: &Link, o: &Opts) -> Result<f64, Failure> {
    let mut wc = [WorkCompletion::default(); 16];
    let (mut posted, mut done) = (0u64, 0u64);
    let start = Instant::now();
    let mut last_progress = Instant::now();
    while done < o.iters {
        while posted < o.iters && posted - done < o.depth {
            let req = SendRequest::write([node.src.all()], link.remote).wr_id(posted);
            link.qp.post_send(req).map_err(rdma("post an RDMA WRITE"))?;
            posted += 1;
        }
        let k = node.cq.poll(&mut wc).map_err(rdma("poll the CQ"))?;
        for w in &wc[..k] {
            w.ok().map_err(rdma("an RDMA WRITE"))?;
            done += 1;
        }
        if k > 0 {
            last_progress = Instant::now();
        } else if last_progress.elapsed() > TIMEOUT {
            return Err((
                6,
                format!("no RDMA WRITE completed for {TIMEOUT:?}: the peer is gone or unreachable"),
            ));
        }
    }
    let secs = start.elapsed().as_secs_f64();
    Ok((o.size as u64 * o.iters) as f64 * 8.0 / secs / 1e9)
}

fn connect_gid(
    world: &impl Communicator,
    node: &Node,
    o: &Opts,
    rank: usize,
    size: usize,
) -> Result<(Res, Vec<Option<Link>>), Failure> {
    let gid = node
        .gid
        .clone()
        .ok_or((1, "no GID on an InfiniBand port: give -x".to_string()))?;
    let res = resources(&node.ctx, o, rank, size)?;
    let node = &res;
    let mut qps = Vec::new();
    let mut mine = vec![0u8; REC * size];
    let mut eps = Vec::new();
    for p in 0..size {
        if p == rank {
            qps.push(None);
            eps.push(None);
            continue;
        }
        let qp = node
            .pd
            .create_rc_qp(&node.cq, &node.cq, &node.caps)
            .map_err(rdma("create a QP"))?;
        let ep = qp.endpoint(&gid).map_err(rdma("describe the QP"))?;
        mine[p * REC..(p + 1) * REC].copy_from_slice(&record(&ep, node.dst.remote()));
        qps.push(Some(qp));
        eps.push(Some(ep));
    }
    let mut theirs = vec![0u8; REC * size];
    world.all_to_all_into(&mine[..], &mut theirs[..]);
    let mut links = Vec::new();
    for (p, (qp, ep)) in qps.into_iter().zip(eps).enumerate() {
        let (Some(qp), Some(ep)) = (qp, ep) else {
            links.push(None);
            continue;
        };
        let (remote_ep, remote) = from_record(&theirs[p * REC..(p + 1) * REC])?;
        qp.connect(&ep, &remote_ep, &ConnectOptions::default())
            .map_err(rdma("connect the QP"))?;
        links.push(Some(Link {
            qp,
            remote,
            _id: None,
        }));
    }
    Ok((res, links))
}

fn connect_cm(
    world: &impl Communicator,
    node: &Node,
    o: &Opts,
    rank: usize,
    size: usize,
    slots: usize,
) -> Result<(Res, Vec<Option<Link>>), Failure> {
    let ip = device_ip(node, o.port)?;
    let mut res: Option<Res> = None;
    let mut flat = vec![0u8; 4 * size];
    world.all_gather_into(&ip.octets()[..], &mut flat[..]);
    let ips: Vec<[u8; 4]> = flat.chunks(4).map(|c| [c[0], c[1], c[2], c[3]]).collect();
    let listener = CmListener::bind(SocketAddr::V4(SocketAddrV4::new(ip, o.cm_port)))
        .map_err(rdma("listen with RDMA CM"))?;
    world.barrier();
    let mut links: Vec<Option<Link>> = (0..size).map(|_| None).collect();
    for r in 0..slots - 1 {
        let p = partner(rank, r, slots, size);
        if let Some(p) = p {
            let link = if rank < p {
                // The lower rank accepts.
                let req = listener
                    .get_request(TIMEOUT)
                    .map_err(rdma("wait for the peer's RDMA CM connection"))?;
                let data = req.private_data().to_vec();
                let from = data
                    .get(..4)
                    .map(|b| u32::from_be_bytes([b[0], b[1], b[2], b[3]]) as usize);
                if from != Some(p) {
                    return Err((6, format!("expected rank {p} to connect, got {from:?}")));
                }
                let remote = RemoteBuffer::from_bytes(&data[4..])
                    .ok_or((6, "short private data".to_string()))?;
                if res.is_none() {
                    let ctx = req.context().map_err(rdma("the RDMA CM device"))?;
                    res = Some(resources(&ctx, o, rank, size)?);
                }
                let r = res.as_ref().expect("created above");
                let qp = req
                    .create_qp(&r.pd, &r.cq, &r.cq, &r.caps)
                    .map_err(rdma("create the QP"))?;
                let id = req
                    .accept(&qp, &params(rank, r), TIMEOUT)
                    .map_err(rdma("accept"))?;
                Link {
                    qp,
                    remote,
                    _id: Some(id),
                }
            } else {
                let dst = SocketAddr::V4(SocketAddrV4::new(Ipv4Addr::from(ips[p]), o.cm_port));
                let src = SocketAddr::new(IpAddr::V4(ip), 0);
                let id =
                    CmId::resolve(dst, Some(src), TIMEOUT).map_err(rdma("resolve the peer"))?;
                if res.is_none() {
                    let ctx = id.context().map_err(rdma("the RDMA CM device"))?;
                    res = Some(resources(&ctx, o, rank, size)?);
                }
                let r = res.as_ref().expect("created above");
                let qp = id
                    .create_qp(&r.pd, &r.cq, &r.cq, &r.caps)
                    .map_err(rdma("create the QP"))?;
                let data = id
                    .connect(&qp, &params(rank, r), TIMEOUT)
                    .map_err(rdma("connect to the peer"))?;
                let remote = RemoteBuffer::from_bytes(data.get(4..).unwrap_or(&[]))
                    .ok_or((6, "short private data".to_string()))?;
                Link {
                    qp,
                    remote,
                    _id: Some(id),
                }
            };
            links[p] = Some(link);
        }
        world.barrier();
    }
    let res = res.ok_or((1, "no peer connected".to_string()))?;
    Ok((res, links))
}

/// Private data of a connection: this rank and its target buffer.
fn params(rank: usize, r: &Res) -> ConnParams {
    let mut data = (rank as u32).to_be_bytes().to_vec();
    data.extend_from_slice(&r.dst.remote().to_bytes());
    ConnParams {
        private_data: data,
        ..ConnParams::default()
    }
}

/// Agrees on the worst status so far; a rank that failed printed its line.
fn agree(world: &impl Communicator, mine: i32) -> i32 {
    let mut worst = 0i32;
    world.all_reduce_into(&mine, &mut worst, SystemOperation::max());
    worst
}

fn run(
    world: &impl Communicator,
    rank: usize,
    size: usize,
    args: &[String],
) -> Result<(), Failure> {
    let o = parse(args).map_err(|e| {
        (
            2,
            if e == "help" {
                "usage: mpirun -np N nic_bw_matrix [-d DEV | --devices D0,D1,..] [-x GID] [-i PORT] [-s SIZE] [-n ITERS] \
                 [-t DEPTH] [--cm] [--cm-port P] [--json]"
                    .to_string()
            } else {
                e
            },
        )
    })?;
    let checked = |r: Result<Node, Failure>| -> Result<Node, Failure> {
        let code = r.as_ref().err().map_or(0, |f| f.0);
        match (agree(world, code), r) {
            (0, Ok(n)) => Ok(n),
            (_, Err(f)) => Err(f),
            (w, Ok(_)) => Err((w, "stopped: another rank failed".into())),
        }
    };
    let node = checked(open(&o, rank))?;
    let iwarp = node.ctx.transport() == Transport::Iwarp;
    let slots = size + size % 2;
    let links = if o.cm || iwarp {
        connect_cm(world, &node, &o, rank, size, slots)
    } else {
        connect_gid(world, &node, &o, rank, size)
    };
    let code = links.as_ref().err().map_or(0, |f| f.0);
    let w = agree(world, code);
    let (res, links) = match (w, links) {
        (0, Ok(l)) => l,
        (_, Err(f)) => return Err(f),
        (w, Ok(_)) => return Err((w, "stopped: another rank failed to connect".into())),
    };
    // My row: Gb/s to each receiver.
    let mut row = vec![0f64; size];
    for r in 0..slots - 1 {
        let p = partner(rank, r, slots, size);
        for direction in 0..2 {
            world.barrier();
            if let Some(p) = p {
                let sender = (direction == 0) == (rank < p);
                if sender {
                    let link = links[p].as_ref().expect("connected");
                    row[p] = measure(&res, link, &o)?;
                }
            }
        }
    }
    world.barrier();
    let mut name = [0u8; NAME];
    let me = format!("{}:{}", hostname(), node.ctx.name());
    let n = me.len().min(NAME);
    name[..n].copy_from_slice(&me.as_bytes()[..n]);
    let mut flat = vec![0u8; NAME * size];
    world.all_gather_into(&name[..], &mut flat[..]);
    let names: Vec<&[u8]> = flat.chunks(NAME).collect();
    let mut all = vec![0f64; size * size];
    world.all_gather_into(&row[..], &mut all[..]);
    if rank == 0 {
        let names: Vec<String> = names
            .iter()
            .map(|b| {
                String::from_utf8_lossy(&b[..b.iter().position(|&c| c == 0).unwrap_or(NAME)])
                    .into_owned()
            })
            .collect();
        print_matrix(&o, &names, &all, size);
    }
    Ok(())
}

fn hostname() -> String {
    let mut b = [0u8; 256];
    // SAFETY: b is writable for its length.
    unsafe { libc::gethostname(b.as_mut_ptr().cast(), b.len()) };
    let end = b.iter().position(|&c| c == 0).unwrap_or(b.len());
    String::from_utf8_lossy(&b[..end]).into_owned()
}

fn print_matrix(o: &Opts, names: &[String], m: &[f64], n: usize) {
    let off: Vec<(usize, usize, f64)> = (0..n)
        .flat_map(|i| {
            (0..n)
                .filter(move |&j| j != i)
                .map(move |j| (i, j, m[i * n + j]))
        })
        .collect();
    let min = off
        .iter()
        .cloned()
        .fold((0, 0, f64::INFINITY), |a, b| if b.2 < a.2 { b } else { a });
    let max = off
        .iter()
        .cloned()
        .fold((0, 0, 0.0), |a, b| if b.2 > a.2 { b } else { a });
    if o.json {
        let rows: Vec<String> = (0..n)
            .map(|i| {
                let v: Vec<String> = (0..n)
                    .map(|j| {
                        if i == j {
                            "null".to_string()
                        } else {
                            format!("{:.4}", m[i * n + j])
                        }
                    })
                    .collect();
                format!("[{}]", v.join(","))
            })
            .collect();
        let ns: Vec<String> = names.iter().map(|s| format!("{s:?}")).collect();
        println!(
            "{{\"tool\":\"nic_bw_matrix\",\"ranks\":[{}],\"bytes\":{},\"iterations\":{},\"unit\":\"Gb/s\",\"matrix\":[{}]}}",
            ns.join(","),
            o.size,
            o.iters,
            rows.join(",")
        );
        return;
    }
    println!(
        "# nic_bw_matrix: {n} ranks, {} RDMA WRITEs of {} bytes per direction, {} in flight; Gb/s, row = sender, column = receiver",
        o.iters, o.size, o.depth
    );
    for (i, name) in names.iter().enumerate() {
        println!("#  rank {i}: {name}");
    }
    let mut head = format!("{:>8}", "from\\to");
    for j in 0..n {
        head.push_str(&format!("{:>10}", format!("rank {j}")));
    }
    println!("{head}");
    for i in 0..n {
        let mut line = format!("{:>8}", format!("rank {i}"));
        for j in 0..n {
            if i == j {
                line.push_str(&format!("{:>10}", "-"));
            } else {
                line.push_str(&format!("{:>10.3}", m[i * n + j]));
            }
        }
        println!("{line}");
    }
    println!(
        "# slowest: rank {} -> rank {} {:.3} Gb/s; fastest: rank {} -> rank {} {:.3} Gb/s",
        min.0, min.1, min.2, max.0, max.1, max.2
    );
}

fn main() -> ExitCode {
    let Some(universe) = mpi::initialize() else {
        eprintln!("nic_bw_matrix: MPI initialization failed");
        return ExitCode::from(1);
    };
    let world = universe.world();
    let (rank, size) = (world.rank() as usize, world.size() as usize);
    let args: Vec<String> = std::env::args().collect();
    if size < 2 {
        println!(
            "rank 0/1: nic_bw_matrix needs at least 2 ranks (one per host): mpirun -np N -H host1,host2,..."
        );
        return ExitCode::from(2);
    }
    match run(&world, rank, size, &args) {
        Ok(()) => ExitCode::SUCCESS,
        Err((code, msg)) => {
            println!("rank {rank}/{size}: {msg}");
            ExitCode::from(code as u8)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_pair_meets_exactly_once() {
        for real in 2..9 {
            let slots = real + real % 2;
            let mut seen = std::collections::HashSet::new();
            for r in 0..slots - 1 {
                for a in 0..real {
                    if let Some(b) = partner(a, r, slots, real) {
                        assert_eq!(partner(b, r, slots, real), Some(a));
                        seen.insert((a.min(b), a.max(b)));
                    }
                }
            }
            assert_eq!(seen.len(), real * (real - 1) / 2, "{real} ranks");
        }
    }

    #[test]
    fn records_round_trip() {
        let ep = Endpoint {
            qp_num: 0x11,
            psn: 0x123456,
            gid: "::ffff:10.99.0.1".parse().unwrap(),
            gid_index: 1,
            lid: 0,
            port: 1,
            mtu: Mtu::Mtu1024,
            buffers: Vec::new(),
        };
        let rb = RemoteBuffer {
            addr: 0x1000,
            rkey: 7,
            len: 4096,
        };
        let (e, r) = from_record(&record(&ep, rb)).unwrap();
        assert_eq!((e, r), (ep, rb));
    }
}
