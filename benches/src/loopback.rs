//! Two connected RC queue pairs in one process: on two devices of one fabric
//! (rxe0 and rxe1 in the rig) or twice the same device.

use erdma::{
    CompletionQueue, ConnectOptions, Context, GidEntry, ProtectionDomain, QpCapabilities,
    QueuePair, Result, Transport,
};

/// One end: device, PD, CQ, QP and the GID it uses.
pub struct Side {
    /// The device.
    pub ctx: Context,
    /// Its protection domain.
    pub pd: ProtectionDomain,
    /// Send and receive completions.
    pub cq: CompletionQueue,
    /// The queue pair.
    pub qp: QueuePair,
    /// The GID connected with.
    pub gid: GidEntry,
}

/// The two devices to use: `ERDMA_BENCH_DEVS="dev_a dev_b"` (or one name,
/// used twice), else the rig's Soft-RoCE pair (`ERDMA_RIG_RXE`), else the
/// first device twice. `Err` says why there is none.
pub fn devices() -> std::result::Result<(String, String), String> {
    let named = std::env::var("ERDMA_BENCH_DEVS")
        .or_else(|_| std::env::var("ERDMA_RIG_RXE"))
        .unwrap_or_default();
    let names: Vec<&str> = named.split_whitespace().collect();
    match names[..] {
        [a] => return Ok((a.into(), a.into())),
        [a, b, ..] => return Ok((a.into(), b.into())),
        _ => {}
    }
    let list = erdma::devices();
    match list.iter().next() {
        Some(d) => Ok((d.name().to_owned(), d.name().to_owned())),
        None => Err(list
            .reason()
            .map(|r| r.to_string())
            .unwrap_or_else(|| "no RDMA device".into())),
    }
}

fn side(dev: &str, caps: &QpCapabilities) -> Result<Side> {
    let ctx = Context::open(dev)?;
    if ctx.transport() == Transport::Iwarp {
        return Err(erdma::Error::Unsupported {
            feature: "a loopback pair connected with modify_qp".into(),
            device: Some(format!("{dev} (iWARP)")),
            hint: Some(
                "iWARP connects through RDMA CM only: use a RoCE/IB device (ERDMA_BENCH_DEVS), or eRDMA in \
                 RoCE-style mode; the two-host bench (ERDMA_BENCH_PEER) connects iWARP through RDMA CM"
                    .into(),
            ),
        });
    }
    let gid = ctx.select_gid(1, None)?;
    let pd = ctx.alloc_pd()?;
    let cq = ctx.create_cq(caps.max_send_wr + caps.max_recv_wr)?;
    let qp = pd.create_rc_qp(&cq, &cq, caps)?;
    Ok(Side {
        ctx,
        pd,
        cq,
        qp,
        gid,
    })
}

/// Two QPs on `a` and `b`, connected to each other.
pub fn connect(a: &str, b: &str, caps: &QpCapabilities) -> Result<(Side, Side)> {
    let x = side(a, caps)?;
    let y = side(b, caps)?;
    let ex = x.qp.endpoint(&x.gid)?;
    let ey = y.qp.endpoint(&y.gid)?;
    let opts = ConnectOptions::default();
    x.qp.connect(&ex, &ey, &opts)?;
    y.qp.connect(&ey, &ex, &opts)?;
    Ok((x, y))
}
