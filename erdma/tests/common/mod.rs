//! Helpers of the rig tests (run inside rig/vm.sh, where rxe0<->rxe1 and
//! siw0<->siw1 exist; see rig/README.md).
#![allow(dead_code)]

use std::net::IpAddr;
use std::time::Duration;

use erdma::*;

/// How long a test waits for anything (TCG-emulated VM: generous).
pub const T: Duration = Duration::from_secs(60);

/// The rig's devices and addresses, from the environment rig/vm.sh sets.
pub struct Rig {
    pub rxe: [String; 2],
    pub rxe_ip: [IpAddr; 2],
    pub rxe_gid_index: u32,
    pub siw: Option<[String; 2]>,
    pub siw_ip: Option<[IpAddr; 2]>,
}

fn var(name: &str) -> String {
    std::env::var(name).unwrap_or_else(|_| {
        panic!("{name} is not set: this test needs RDMA devices; run it in the rig (rig/test.sh or rig/vm.sh)")
    })
}

pub fn rig() -> Rig {
    let rxe: Vec<String> = var("ERDMA_RIG_RXE")
        .split_whitespace()
        .map(String::from)
        .collect();
    let siw: Vec<String> = std::env::var("ERDMA_RIG_SIW")
        .unwrap_or_default()
        .split_whitespace()
        .map(String::from)
        .collect();
    Rig {
        rxe: [rxe[0].clone(), rxe[1].clone()],
        rxe_ip: [
            var("ERDMA_RIG_RXE_IP0").parse().unwrap(),
            var("ERDMA_RIG_RXE_IP1").parse().unwrap(),
        ],
        rxe_gid_index: var("ERDMA_RIG_RXE_GID_INDEX").parse().unwrap(),
        siw: (siw.len() == 2).then(|| [siw[0].clone(), siw[1].clone()]),
        siw_ip: (siw.len() == 2).then(|| {
            [
                var("ERDMA_RIG_SIW_IP0").parse().unwrap(),
                var("ERDMA_RIG_SIW_IP1").parse().unwrap(),
            ]
        }),
    }
}

/// One side of a connection: device, PD, CQ (with channel), QP, GID.
pub struct Side {
    pub ctx: Context,
    pub pd: ProtectionDomain,
    pub cq: CompletionQueue,
    pub qp: QueuePair,
    pub gid: GidEntry,
}

pub fn side(dev: &str, caps: &QpCapabilities) -> Side {
    side_with_cq(dev, caps, |ctx| {
        ctx.create_cq_with(
            1024,
            &CqOptions {
                channel: true,
                comp_vector: 0,
            },
        )
    })
}

/// [`side`] with the CQ `cq` makes.
pub fn side_with_cq(
    dev: &str,
    caps: &QpCapabilities,
    cq: impl FnOnce(&Context) -> Result<CompletionQueue>,
) -> Side {
    let ctx = Context::open(dev).unwrap();
    let gid = ctx.select_gid(1, None).unwrap();
    let pd = ctx.alloc_pd().unwrap();
    let cq = cq(&ctx).unwrap();
    let qp = pd.create_rc_qp(&cq, &cq, caps).unwrap();
    Side {
        ctx,
        pd,
        cq,
        qp,
        gid,
    }
}

/// Two QPs on two devices connected through their endpoint records (the
/// in-process version of what two hosts do over TCP).
pub fn rc_pair(a: &str, b: &str, caps: &QpCapabilities) -> (Side, Side) {
    connect(side(a, caps), side(b, caps))
}

/// Connects two sides' QPs to each other.
pub fn connect(x: Side, y: Side) -> (Side, Side) {
    let ex = x.qp.endpoint(&x.gid).unwrap();
    let ey = y.qp.endpoint(&y.gid).unwrap();
    let opts = ConnectOptions::default();
    x.qp.connect(&ex, &ey, &opts).unwrap();
    y.qp.connect(&ey, &ex, &opts).unwrap();
    (x, y)
}

/// A deterministic byte pattern that differs per `seed` and position.
pub fn pattern(len: usize, seed: u64) -> Vec<u8> {
    let mut x = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}

/// Waits for exactly one completion and checks it succeeded.
pub fn one(cq: &CompletionQueue) -> WorkCompletion {
    let wcs = cq.collect(1, T).unwrap();
    wcs[0].ok().unwrap();
    wcs[0]
}
