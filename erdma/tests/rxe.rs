//! Soft-RoCE (rxe0 <-> rxe1 on a veth pair, RoCE v2) with real traffic and
//! data checked byte for byte. These need the rig's devices:
//! `rig/test.sh`, or `rig/vm.sh target/debug/deps/rxe-* --include-ignored`.

mod common;

use std::time::{Duration, Instant};

use common::*;
use erdma::*;

fn caps(send_sge: u32, recv_sge: u32, inline: u32) -> QpCapabilities {
    QpCapabilities {
        max_send_wr: 256,
        max_recv_wr: 256,
        max_send_sge: send_sge,
        max_recv_sge: recv_sge,
        max_inline_data: inline,
    }
}

#[test]
#[ignore = "needs RDMA devices: run in the rig"]
fn device_port_and_gid_attributes() {
    let r = rig();
    let list = devices();
    assert!(list.reason().is_none());
    for name in &r.rxe {
        let d = list.find(name).unwrap();
        assert_eq!(d.transport(), Transport::InfiniBand);
        let ctx = d.open().unwrap();
        let a = ctx.attributes();
        assert!(!ctx.is_erdma());
        assert_eq!(a.phys_port_cnt(), 1);
        assert!(a.max_qp() > 0 && a.max_cq() > 0 && a.max_mr() > 0 && a.max_sge() > 1);
        assert!(a.supports_atomics(), "rxe reports {}", a.atomic_cap());
        let p = ctx.port(1).unwrap();
        assert_eq!(p.state(), PortState::Active);
        assert_eq!(p.link_layer(), LinkLayer::Ethernet);
        assert_eq!(
            p.active_mtu(),
            Some(Mtu::Mtu1024),
            "veth MTU 1500 gives 1024"
        );
        assert_eq!(ctx.protocol(1).unwrap(), Protocol::Roce);
        assert!(matches!(ctx.port(2), Err(Error::BadPort { .. })));
        assert!(matches!(ctx.port(0), Err(Error::BadPort { .. })));
        let table = ctx.gid_table(1).unwrap();
        assert!(table.len() >= 2, "{table:?}");
        let g = ctx.select_gid(1, None).unwrap();
        assert_eq!(
            g.index, r.rxe_gid_index,
            "NCCL-style choice = the rig's IPv4 GID"
        );
        assert_eq!(g.gid_type, GidType::RoceV2);
        assert!(g.gid.to_ipv4().is_some());
        let veth = if *name == r.rxe[0] { "veth0" } else { "veth1" };
        assert_eq!(g.netdev.as_deref(), Some(veth));
        let ip = if *name == r.rxe[0] {
            r.rxe_ip[0]
        } else {
            r.rxe_ip[1]
        };
        assert_eq!(std::net::IpAddr::V4(g.gid.to_ipv4().unwrap()), ip);
        // The same entry through the per-index query.
        assert_eq!(ctx.gid(1, g.index).unwrap().as_ref(), Some(&g));
        assert_eq!(ctx.select_gid(1, Some(g.index)).unwrap(), g);
        assert!(ctx.max_inline_data().unwrap() > 0);
        assert!(ctx.num_comp_vectors() >= 1);
        assert!(
            !ctx.port_counters(1).unwrap().is_empty(),
            "rxe exports hw_counters"
        );
    }
}

#[test]
#[ignore = "needs RDMA devices: run in the rig"]
fn send_recv_1b_to_4mib() {
    let r = rig();
    let (a, b) = rc_pair(&r.rxe[0], &r.rxe[1], &caps(1, 1, 0));
    let max = 4 << 20;
    let mut src =
        a.pd.register(AlignedBuffer::new(max).unwrap(), AccessFlags::LOCAL_WRITE)
            .unwrap();
    let mut dst =
        b.pd.register(AlignedBuffer::new(max).unwrap(), AccessFlags::LOCAL_WRITE)
            .unwrap();
    let sizes = [
        1usize,
        2,
        3,
        63,
        64,
        1023,
        1024,
        1025,
        4096,
        65537,
        1 << 20,
        max,
    ];
    for (i, &n) in sizes.iter().enumerate() {
        let data = pattern(n, i as u64 + 10);
        src.as_mut_slice().unwrap()[..n].copy_from_slice(&data);
        dst.as_mut_slice().unwrap()[..n + (n < max) as usize].fill(0xee);
        b.qp.post_recv(RecvRequest::new([dst.all()]).wr_id(i as u64))
            .unwrap();
        a.qp.post_send(SendRequest::send([src.slice(..n).unwrap()]).wr_id(100 + i as u64))
            .unwrap();
        assert_eq!(one(&a.cq).wr_id, 100 + i as u64);
        let wc = one(&b.cq);
        assert_eq!(
            (wc.wr_id, wc.opcode, wc.byte_len),
            (i as u64, WcOpcode::Recv, n as u32)
        );
        assert_eq!(wc.imm_data, None);
        let got = dst.as_slice().unwrap();
        assert!(got[..n] == data[..], "{n}-byte message differs");
        if n < max {
            assert_eq!(got[n], 0xee, "{n}-byte message wrote past its end");
        }
    }
}

#[test]
#[ignore = "needs RDMA devices: run in the rig"]
fn send_with_immediate() {
    let r = rig();
    let (a, b) = rc_pair(&r.rxe[0], &r.rxe[1], &caps(1, 1, 0));
    let data = pattern(300, 3);
    let src = a.pd.register(data.clone(), AccessFlags::empty()).unwrap();
    let mut dst =
        b.pd.register(vec![0u8; 512], AccessFlags::LOCAL_WRITE)
            .unwrap();
    b.qp.post_recv(RecvRequest::new([dst.all()]).wr_id(1))
        .unwrap();
    a.qp.post_send(SendRequest::send_with_imm([src.all()], 0xdead_beef))
        .unwrap();
    one(&a.cq);
    let wc = one(&b.cq);
    assert_eq!(wc.opcode, WcOpcode::Recv);
    assert_eq!(wc.imm_data, Some(0xdead_beef));
    assert_eq!(wc.byte_len, 300);
    assert_eq!(&dst.as_slice().unwrap()[..300], &data[..]);
}

#[test]
#[ignore = "needs RDMA devices: run in the rig"]
fn rdma_write_and_write_with_immediate() {
    let r = rig();
    let (a, b) = rc_pair(&r.rxe[0], &r.rxe[1], &caps(1, 1, 0));
    let n = 256 * 1024;
    let data = pattern(n, 4);
    let src = a.pd.register(data.clone(), AccessFlags::empty()).unwrap();
    let mut dst =
        b.pd.register(
            vec![0u8; n + 64],
            AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE,
        )
        .unwrap();
    let remote = dst.remote();
    // Plain WRITE at offset 64: the sender's completion means the data is placed.
    a.qp.post_send(SendRequest::write([src.all()], remote.slice(64..).unwrap()).wr_id(5))
        .unwrap();
    let wc = one(&a.cq);
    assert_eq!((wc.wr_id, wc.opcode), (5, WcOpcode::RdmaWrite));
    {
        assert!(matches!(
            dst.as_slice(),
            Err(Error::RemotelyWritable { .. })
        ));
        let got = dst.to_vec();
        assert!(got[..64].iter().all(|x| *x == 0));
        assert!(got[64..] == data[..]);
    }
    // WRITE_WITH_IMM consumes a receive (here one with no buffer).
    dst.fill(0);
    b.qp.post_recv(RecvRequest::new([]).wr_id(77)).unwrap();
    a.qp.post_send(SendRequest::write_with_imm(
        [src.slice(..1000).unwrap()],
        remote,
        42,
    ))
    .unwrap();
    one(&a.cq);
    let wc = one(&b.cq);
    assert_eq!(
        (wc.wr_id, wc.opcode, wc.imm_data),
        (77, WcOpcode::RecvRdmaWithImm, Some(42))
    );
    assert_eq!(wc.byte_len, 1000);
    assert_eq!(&dst.to_vec()[..1000], &data[..1000]);
}

#[test]
#[ignore = "needs RDMA devices: run in the rig"]
fn rdma_read() {
    let r = rig();
    let (a, b) = rc_pair(&r.rxe[0], &r.rxe[1], &caps(2, 1, 0));
    let n = 3 << 20;
    let data = pattern(n, 5);
    let src =
        b.pd.register(data.clone(), AccessFlags::REMOTE_READ)
            .unwrap();
    let mut dst =
        a.pd.register(vec![0u8; n], AccessFlags::LOCAL_WRITE)
            .unwrap();
    a.qp.post_send(SendRequest::read([dst.all()], src.remote()).wr_id(8))
        .unwrap();
    let wc = one(&a.cq);
    assert_eq!(
        (wc.wr_id, wc.opcode, wc.byte_len),
        (8, WcOpcode::RdmaRead, n as u32)
    );
    assert!(dst.as_slice().unwrap() == &data[..]);
    // A read into a region without LOCAL_WRITE is refused before posting.
    let ro = a.pd.register(vec![0u8; 16], AccessFlags::empty()).unwrap();
    let e =
        a.qp.post_send(SendRequest::read([ro.all()], src.remote()))
            .unwrap_err();
    assert!(matches!(e, Error::InvalidArgument { .. }), "{e}");
    // Reading past the remote region is refused before posting too.
    let e =
        a.qp.post_send(SendRequest::read(
            [dst.all()],
            src.remote().slice(..10).unwrap(),
        ))
        .unwrap_err();
    assert!(matches!(e, Error::InvalidArgument { .. }), "{e}");
}

#[test]
#[ignore = "needs RDMA devices: run in the rig"]
fn inline_sends() {
    let r = rig();
    let max = Context::open(&r.rxe[0]).unwrap().max_inline_data().unwrap();
    let inline = max.min(128);
    let (a, b) = rc_pair(&r.rxe[0], &r.rxe[1], &caps(1, 1, inline));
    assert!(a.qp.capabilities().max_inline_data >= inline);
    let data = pattern(inline as usize, 6);
    let mut src = a.pd.register(data.clone(), AccessFlags::empty()).unwrap();
    let dst =
        b.pd.register(
            vec![0u8; 4096],
            AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE,
        )
        .unwrap();
    b.qp.post_recv(RecvRequest::new([dst.slice(..2048).unwrap()]))
        .unwrap();
    a.qp.post_send(SendRequest::send([src.all()]).inline())
        .unwrap();
    one(&a.cq);
    assert_eq!(one(&b.cq).byte_len, inline);
    assert_eq!(&dst.to_vec()[..inline as usize], &data[..]);
    // Inline RDMA WRITE.
    a.qp.post_send(SendRequest::write([src.all()], dst.remote().slice(2048..).unwrap()).inline())
        .unwrap();
    one(&a.cq);
    assert_eq!(&dst.to_vec()[2048..2048 + inline as usize], &data[..]);
    // Inline data is copied at post time: the buffer is free at once.
    a.qp.post_send(SendRequest::write([src.all()], dst.remote()).inline())
        .unwrap();
    one(&a.cq);
    src.as_mut_slice().unwrap()[0] ^= 1;
    // Too long for the QP: refused before reaching the device.
    let big =
        a.pd.register(vec![1u8; inline as usize + 1], AccessFlags::empty())
            .unwrap();
    let e =
        a.qp.post_send(SendRequest::send([big.all()]).inline())
            .unwrap_err();
    assert!(e.to_string().contains("max_inline_data"), "{e}");
}

#[test]
#[ignore = "needs RDMA devices: run in the rig"]
fn scatter_gather() {
    let r = rig();
    let (a, b) = rc_pair(&r.rxe[0], &r.rxe[1], &caps(4, 3, 0));
    let p1 = pattern(100, 7);
    let p2 = pattern(5000, 8);
    let p3 = pattern(3, 9);
    let m1 = a.pd.register(p1.clone(), AccessFlags::empty()).unwrap();
    let m2 = a.pd.register(p2.clone(), AccessFlags::empty()).unwrap();
    let mut whole = p1.clone();
    whole.extend_from_slice(&p2[1000..3000]);
    whole.extend_from_slice(&p3);
    let m3 = a.pd.register(p3.clone(), AccessFlags::empty()).unwrap();
    // Received into two regions: 1000 bytes, then the rest.
    let mut r1 =
        b.pd.register(vec![0u8; 1000], AccessFlags::LOCAL_WRITE)
            .unwrap();
    let mut r2 =
        b.pd.register(
            vec![0u8; 8192],
            AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE,
        )
        .unwrap();
    b.qp.post_recv(RecvRequest::new([r1.all(), r2.slice(..4096).unwrap()]))
        .unwrap();
    let sges = [m1.all(), m2.slice(1000..3000).unwrap(), m3.all()];
    a.qp.post_send(SendRequest::send(sges)).unwrap();
    one(&a.cq);
    assert_eq!(one(&b.cq).byte_len as usize, whole.len());
    assert_eq!(r1.as_slice().unwrap(), &whole[..1000]);
    assert_eq!(&r2.to_vec()[..whole.len() - 1000], &whole[1000..]);
    // Gathered RDMA WRITE.
    r2.fill(0);
    a.qp.post_send(SendRequest::write(sges, r2.remote()))
        .unwrap();
    one(&a.cq);
    assert_eq!(&r2.to_vec()[..whole.len()], &whole[..]);
    // Scattered RDMA READ where the device allows more than one entry.
    let max_rd = a.ctx.attributes().max_sge_rd();
    if max_rd >= 2 {
        let mut d1 =
            a.pd.register(vec![0u8; 10], AccessFlags::LOCAL_WRITE)
                .unwrap();
        let mut d2 =
            a.pd.register(vec![0u8; 90], AccessFlags::LOCAL_WRITE)
                .unwrap();
        let src =
            b.pd.register(pattern(100, 11), AccessFlags::REMOTE_READ)
                .unwrap();
        a.qp.post_send(SendRequest::read([d1.all(), d2.all()], src.remote()))
            .unwrap();
        one(&a.cq);
        let want = pattern(100, 11);
        assert_eq!(d1.as_slice().unwrap(), &want[..10]);
        assert_eq!(d2.as_slice().unwrap(), &want[10..]);
    }
    // More entries than the QP was created with: refused.
    let five = [m1.all(), m1.all(), m1.all(), m1.all(), m1.all()];
    let e = a.qp.post_send(SendRequest::send(five)).unwrap_err();
    assert!(matches!(e, Error::InvalidArgument { .. }), "{e}");
}

#[test]
#[ignore = "needs RDMA devices: run in the rig"]
fn atomics() {
    let r = rig();
    let (a, b) = rc_pair(&r.rxe[0], &r.rxe[1], &caps(1, 1, 0));
    let access = AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_ATOMIC | AccessFlags::REMOTE_READ;
    let mut target =
        b.pd.register(AlignedBuffer::new(64).unwrap(), access)
            .unwrap();
    target.write_at(8, &1000u64.to_ne_bytes()).unwrap();
    let mut old =
        a.pd.register(AlignedBuffer::new(8).unwrap(), AccessFlags::LOCAL_WRITE)
            .unwrap();
    let t = target.remote().slice(8..16).unwrap();
    a.qp.post_send(SendRequest::fetch_add(old.all(), t, 5))
        .unwrap();
    let wc = one(&a.cq);
    assert_eq!(wc.opcode, WcOpcode::FetchAdd);
    assert_eq!(
        u64::from_ne_bytes(old.as_slice().unwrap().try_into().unwrap()),
        1000
    );
    // Compare-and-swap: a miss leaves the value, a hit replaces it.
    a.qp.post_send(SendRequest::compare_swap(old.all(), t, 1, 77))
        .unwrap();
    one(&a.cq);
    assert_eq!(
        u64::from_ne_bytes(old.as_slice().unwrap().try_into().unwrap()),
        1005
    );
    a.qp.post_send(SendRequest::compare_swap(old.all(), t, 1005, 77))
        .unwrap();
    assert_eq!(one(&a.cq).opcode, WcOpcode::CompSwap);
    assert_eq!(
        u64::from_ne_bytes(old.as_slice().unwrap().try_into().unwrap()),
        1005
    );
    let v = u64::from_ne_bytes(target.to_vec()[8..16].try_into().unwrap());
    assert_eq!(v, 77);
    assert!(target.to_vec()[..8].iter().all(|x| *x == 0));
    // Unaligned target and wrong local size are refused before posting.
    let e =
        a.qp.post_send(SendRequest::fetch_add(
            old.all(),
            target.remote().slice(4..12).unwrap(),
            1,
        ))
        .unwrap_err();
    assert!(e.to_string().contains("aligned"), "{e}");
    let big =
        a.pd.register(vec![0u8; 16], AccessFlags::LOCAL_WRITE)
            .unwrap();
    assert!(
        a.qp.post_send(SendRequest::fetch_add(big.all(), t, 1))
            .is_err()
    );
}

#[test]
#[ignore = "needs RDMA devices: run in the rig"]
fn many_requests_in_flight() {
    let r = rig();
    let n = 200usize;
    let size = 4096usize;
    let (a, b) = rc_pair(&r.rxe[0], &r.rxe[1], &caps(1, 1, 0));
    let mut src =
        a.pd.register(vec![0u8; n * size], AccessFlags::empty())
            .unwrap();
    for i in 0..n {
        src.as_mut_slice().unwrap()[i * size..(i + 1) * size]
            .copy_from_slice(&pattern(size, 1000 + i as u64));
    }
    let mut dst =
        b.pd.register(vec![0u8; n * size], AccessFlags::LOCAL_WRITE)
            .unwrap();
    let recvs: Vec<_> = (0..n)
        .map(|i| RecvRequest::new([dst.slice(i * size..(i + 1) * size).unwrap()]).wr_id(i as u64))
        .collect();
    b.qp.post_recv_batch(recvs).unwrap();
    // Every 10th send signaled: the others complete with it.
    let sends: Vec<_> = (0..n)
        .map(|i| {
            let s =
                SendRequest::send([src.slice(i * size..(i + 1) * size).unwrap()]).wr_id(i as u64);
            if i % 10 == 9 { s } else { s.unsignaled() }
        })
        .collect();
    let t0 = Instant::now();
    a.qp.post_send_batch(sends).unwrap();
    assert!(src.in_flight() > 0);
    assert!(matches!(src.as_mut_slice(), Err(Error::Busy { .. })));
    let sent = a.cq.collect(n / 10, T).unwrap();
    assert!(sent.iter().all(|w| w.is_ok() && w.wr_id % 10 == 9));
    let got = b.cq.collect(n, T).unwrap();
    eprintln!("{n} x {size} B in {:?}", t0.elapsed());
    for (i, wc) in got.iter().enumerate() {
        wc.ok().unwrap();
        assert_eq!(wc.wr_id, i as u64, "receives complete in order");
    }
    assert_eq!(a.qp.outstanding(), (0, 0));
    assert_eq!(b.qp.outstanding(), (0, 0));
    assert_eq!(src.in_flight(), 0);
    let d = dst.as_slice().unwrap();
    for i in 0..n {
        assert!(
            d[i * size..(i + 1) * size] == pattern(size, 1000 + i as u64)[..],
            "message {i}"
        );
    }
    // The send queue has room for 256: more is refused, not overflowed.
    let too_many: Vec<_> = (0..300)
        .map(|_| SendRequest::send([src.slice(..1).unwrap()]))
        .collect();
    assert!(a.qp.post_send_batch(too_many).is_err());
}

#[test]
#[ignore = "needs RDMA devices: run in the rig"]
fn wrong_rkey_gives_remote_access_error() {
    let r = rig();
    let (a, b) = rc_pair(&r.rxe[0], &r.rxe[1], &caps(1, 1, 0));
    let src = a.pd.register(vec![1u8; 64], AccessFlags::empty()).unwrap();
    let dst =
        b.pd.register(
            vec![0u8; 64],
            AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE,
        )
        .unwrap();
    let mut bad = dst.remote();
    bad.rkey ^= 0x5a5a_0000;
    let t0 = Instant::now();
    a.qp.post_send(SendRequest::write([src.all()], bad).wr_id(3))
        .unwrap();
    let wc = a.cq.collect(1, T).unwrap()[0];
    assert_eq!(wc.status, WcStatus::RemAccessErr, "{wc:?}");
    assert_eq!(wc.wr_id, 3);
    let e = wc.ok().unwrap_err();
    assert!(e.to_string().contains("rkey"), "{e}");
    assert!(t0.elapsed() < Duration::from_secs(30));
    // The QP is now in error: later requests are flushed, not hung.
    assert_eq!(a.qp.query_state().unwrap(), QpState::Err);
    let e = a.qp.post_send(SendRequest::send([src.all()])).unwrap_err();
    assert!(matches!(e, Error::QpState { .. }), "{e}");
    // A read from a region without REMOTE_READ: remote access error too.
    let (a, b) = rc_pair(&r.rxe[0], &r.rxe[1], &caps(1, 1, 0));
    let secret =
        b.pd.register(vec![9u8; 64], AccessFlags::LOCAL_WRITE)
            .unwrap();
    let into =
        a.pd.register(vec![0u8; 64], AccessFlags::LOCAL_WRITE)
            .unwrap();
    a.qp.post_send(SendRequest::read([into.all()], secret.remote()))
        .unwrap();
    assert_eq!(
        a.cq.collect(1, T).unwrap()[0].status,
        WcStatus::RemAccessErr
    );
}

#[test]
#[ignore = "needs RDMA devices: run in the rig"]
fn state_and_argument_errors() {
    let r = rig();
    let s = side(&r.rxe[0], &caps(1, 1, 0));
    let m =
        s.pd.register(vec![0u8; 64], AccessFlags::LOCAL_WRITE)
            .unwrap();
    // Posting on a QP that is not RTS.
    assert_eq!(s.qp.state(), QpState::Reset);
    let e = s.qp.post_send(SendRequest::send([m.all()])).unwrap_err();
    assert!(
        matches!(
            e,
            Error::QpState {
                state: QpState::Reset,
                ..
            }
        ),
        "{e}"
    );
    assert!(e.to_string().contains("RTS"), "{e}");
    let e = s.qp.post_recv(RecvRequest::new([m.all()])).unwrap_err();
    assert!(matches!(e, Error::QpState { .. }), "{e}");
    // Transitions out of order.
    let e =
        s.qp.to_rts(&RtsAttributes {
            psn: 0,
            timeout: 14,
            retry_cnt: 7,
            rnr_retry: 7,
            max_rd_atomic: 1,
        })
        .unwrap_err();
    assert!(matches!(e, Error::QpState { .. }), "{e}");
    s.qp.to_init(&InitAttributes {
        port: 1,
        access: AccessFlags::ALL,
        pkey_index: 0,
    })
    .unwrap();
    // Receives may be posted from INIT, sends may not.
    s.qp.post_recv(RecvRequest::new([m.all()])).unwrap();
    assert!(s.qp.post_send(SendRequest::send([m.all()])).is_err());
    // A bad GID index is refused.
    let rtr = |gid_index| RtrAttributes {
        remote_qp_num: 0x11,
        remote_psn: 0,
        remote_gid: s.gid.gid,
        remote_lid: 0,
        path_mtu: Mtu::Mtu4096,
        gid_index,
        global: true,
        max_dest_rd_atomic: 1,
        min_rnr_timer: 12,
        hop_limit: 64,
        traffic_class: 0,
        sl: 0,
    };
    let e = s.qp.to_rtr(&rtr(5000)).unwrap_err();
    assert!(matches!(e, Error::BadGidIndex { index: 5000, .. }), "{e}");
    let e = s.qp.to_rtr(&rtr(200)).unwrap_err();
    assert!(
        matches!(e, Error::BadGidIndex { index: 200, .. }),
        "{e} (an empty entry)"
    );
    assert!(matches!(
        s.ctx.select_gid(1, Some(100_000)),
        Err(Error::BadGidIndex { .. })
    ));
    // Path MTU 4096 asked, 1024 active: capped, not refused.
    s.qp.to_rtr(&rtr(s.gid.index)).unwrap();
    let attr = s.qp.query(erdma::sys::IBV_QP_PATH_MTU).unwrap();
    assert_eq!(attr.path_mtu, Mtu::Mtu1024.raw());
    // Unknown device.
    let e = Context::open("mlx5_42").unwrap_err();
    assert!(matches!(e, Error::NoSuchDevice { .. }), "{e}");
    assert!(e.to_string().contains(&r.rxe[0]), "lists the devices: {e}");
    // Ranges outside a region.
    assert!(m.slice(10..65).is_err());
    assert!(m.remote().slice(..65).is_err());
    // A buffer of another PD.
    let other = s.ctx.alloc_pd().unwrap();
    let foreign = other
        .register(vec![0u8; 8], AccessFlags::LOCAL_WRITE)
        .unwrap();
    assert!(s.qp.post_recv(RecvRequest::new([foreign.all()])).is_err());
    // CQs of another device.
    let ctx2 = Context::open(&r.rxe[1]).unwrap();
    let cq2 = ctx2.create_cq(16).unwrap();
    assert!(
        s.pd.create_rc_qp(&cq2, &cq2, &QpCapabilities::default())
            .is_err()
    );
    // Absurd sizes are refused with the device's limit in the message.
    let e =
        s.pd.create_rc_qp(
            &s.cq,
            &s.cq,
            &QpCapabilities {
                max_send_sge: 10_000,
                ..Default::default()
            },
        )
        .unwrap_err();
    assert!(e.to_string().contains("at most"), "{e}");
    assert!(s.ctx.create_cq(0).is_err());
    assert!(s.pd.register(Vec::new(), AccessFlags::LOCAL_WRITE).is_err());
    let e =
        s.pd.register(vec![0u8; 8], AccessFlags::REMOTE_WRITE)
            .unwrap_err();
    assert!(e.to_string().contains("LOCAL_WRITE"), "{e}");
}

#[test]
#[ignore = "needs RDMA devices: run in the rig"]
fn buffers_held_until_completion() {
    let r = rig();
    let (a, b) = rc_pair(&r.rxe[0], &r.rxe[1], &caps(1, 1, 0));
    let mut dst =
        b.pd.register(vec![0u8; 128], AccessFlags::LOCAL_WRITE)
            .unwrap();
    b.qp.post_recv(RecvRequest::new([dst.all()]).wr_id(1))
        .unwrap();
    // Posted: the region is held by the QP.
    assert_eq!(dst.in_flight(), 1);
    assert!(matches!(
        dst.as_slice(),
        Err(Error::Busy { in_flight: 1, .. })
    ));
    let (dst, e) = dst.into_inner().unwrap_err();
    assert!(matches!(e, Error::Busy { .. }));
    let mut dst = dst;
    let src =
        a.pd.register(pattern(128, 12), AccessFlags::empty())
            .unwrap();
    a.qp.post_send(SendRequest::send([src.all()])).unwrap();
    one(&a.cq);
    one(&b.cq);
    // Completion polled: released.
    assert_eq!(dst.in_flight(), 0);
    assert_eq!(dst.as_slice().unwrap(), &pattern(128, 12)[..]);
    let v: Vec<u8> = dst.into_inner().unwrap();
    assert_eq!(v, pattern(128, 12));
    // Dropping a QP releases what its outstanding requests held.
    let mut held =
        b.pd.register(vec![0u8; 16], AccessFlags::LOCAL_WRITE)
            .unwrap();
    let (_a2, b2) = rc_pair(&r.rxe[0], &r.rxe[1], &caps(1, 1, 0));
    let held_on_b2 = b2
        .pd
        .register(vec![0u8; 16], AccessFlags::LOCAL_WRITE)
        .unwrap();
    b2.qp
        .post_recv(RecvRequest::new([held_on_b2.all()]))
        .unwrap();
    assert_eq!(held_on_b2.in_flight(), 1);
    drop(b2.qp);
    assert_eq!(held_on_b2.in_flight(), 0);
    assert!(held.as_mut_slice().is_ok());
}

#[test]
#[ignore = "needs RDMA devices: run in the rig"]
fn blocking_wait_and_timeout() {
    let r = rig();
    let (a, b) = rc_pair(&r.rxe[0], &r.rxe[1], &caps(1, 1, 0));
    assert!(b.cq.has_channel());
    // Nothing posted: a bounded wait that ends in Timeout.
    let t0 = Instant::now();
    let mut out = [WorkCompletion::default(); 4];
    let e = b.cq.wait(&mut out, Duration::from_millis(300)).unwrap_err();
    assert!(matches!(e, Error::Timeout { .. }), "{e}");
    assert!(t0.elapsed() >= Duration::from_millis(300));
    // A receive completed by a send from another thread wakes the waiter.
    let mut dst =
        b.pd.register(vec![0u8; 16], AccessFlags::LOCAL_WRITE)
            .unwrap();
    b.qp.post_recv(RecvRequest::new([dst.all()]).wr_id(5))
        .unwrap();
    let t = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(200));
        let src = a.pd.register(vec![7u8; 16], AccessFlags::empty()).unwrap();
        a.qp.post_send(SendRequest::send([src.all()])).unwrap();
        one(&a.cq);
    });
    let n = b.cq.wait(&mut out, T).unwrap();
    assert_eq!(n, 1);
    assert_eq!(out[0].wr_id, 5);
    t.join().unwrap();
    assert_eq!(dst.as_slice().unwrap(), &[7u8; 16]);
}

#[test]
#[ignore = "needs RDMA devices: run in the rig"]
fn rdma_cm_on_roce() {
    // RDMA CM works on RoCE too (eRDMA in RoCE mode can use either path).
    let r = rig();
    let port = 7400;
    let server_ip = r.rxe_ip[1];
    let t = std::thread::spawn(move || {
        let l = erdma::cm::CmListener::bind((server_ip, port).into()).unwrap();
        let req = l.get_request(T).unwrap();
        let ctx = req.context().unwrap();
        let pd = ctx.alloc_pd().unwrap();
        let cq = ctx.create_cq(256).unwrap();
        let qp = req
            .create_qp(&pd, &cq, &cq, &QpCapabilities::default())
            .unwrap();
        let mut buf = pd
            .register(vec![0u8; 64], AccessFlags::LOCAL_WRITE)
            .unwrap();
        qp.post_recv(RecvRequest::new([buf.all()])).unwrap();
        let id = req
            .accept(&qp, &erdma::cm::ConnParams::default(), T)
            .unwrap();
        assert_eq!(one(&cq).byte_len, 64);
        assert_eq!(buf.as_slice().unwrap(), &pattern(64, 13)[..]);
        id.wait_disconnect(T).unwrap();
    });
    let id = erdma::cm::CmId::resolve((server_ip, port).into(), Some((r.rxe_ip[0], 0).into()), T)
        .unwrap_or_else(|e| panic!("{e}"));
    let ctx = id.context().unwrap();
    assert_eq!(ctx.name(), r.rxe[0]);
    let pd = ctx.alloc_pd().unwrap();
    let cq = ctx.create_cq(256).unwrap();
    let qp = id
        .create_qp(&pd, &cq, &cq, &QpCapabilities::default())
        .unwrap();
    // The server may not be listening yet: retry while rejected.
    let deadline = Instant::now() + T;
    let mut id = id;
    let (mut qp, mut pd, mut cq) = (qp, pd, cq);
    loop {
        match id.connect(&qp, &erdma::cm::ConnParams::default(), T) {
            Ok(_) => break,
            Err(e @ Error::Cm { .. }) if Instant::now() < deadline => {
                eprintln!("retrying: {e}");
                std::thread::sleep(Duration::from_millis(200));
                drop(qp);
                id = erdma::cm::CmId::resolve(
                    (server_ip, port).into(),
                    Some((r.rxe_ip[0], 0).into()),
                    T,
                )
                .unwrap();
                let ctx = id.context().unwrap();
                pd = ctx.alloc_pd().unwrap();
                cq = ctx.create_cq(256).unwrap();
                qp = id
                    .create_qp(&pd, &cq, &cq, &QpCapabilities::default())
                    .unwrap();
            }
            Err(e) => panic!("{e}"),
        }
    }
    assert_eq!(qp.state(), QpState::Rts);
    let src = pd.register(pattern(64, 13), AccessFlags::empty()).unwrap();
    qp.post_send(SendRequest::send([src.all()])).unwrap();
    one(&cq);
    id.disconnect().unwrap();
    t.join().unwrap();
}

#[test]
#[ignore = "needs RDMA devices: run in the rig"]
fn children_keep_their_parents_alive() {
    // Dropping the handles of the device, PD and CQ first is fine: the QP
    // and regions hold them, and everything is freed in the right order.
    let r = rig();
    let (a, b) = rc_pair(&r.rxe[0], &r.rxe[1], &QpCapabilities::default());
    let Side {
        ctx, pd, cq, qp, ..
    } = a;
    let src = pd.register(pattern(64, 40), AccessFlags::empty()).unwrap();
    drop((ctx, pd, cq));
    let mut dst =
        b.pd.register(vec![0u8; 64], AccessFlags::LOCAL_WRITE)
            .unwrap();
    b.qp.post_recv(RecvRequest::new([dst.all()])).unwrap();
    qp.post_send(SendRequest::send([src.all()])).unwrap();
    one(qp.send_cq());
    one(&b.cq);
    assert_eq!(dst.as_slice().unwrap(), &pattern(64, 40)[..]);
    drop(qp);
    drop(src);
}

#[test]
#[ignore = "needs RDMA devices: run in the rig"]
fn dmabuf_detected_at_run_time() {
    // rdma-core 44 exports ibv_reg_dmabuf_mr, but the rxe provider does not
    // implement it: a typed Unsupported error naming the feature (the same
    // path eRDMA takes), never a crash.
    let r = rig();
    let ctx = Context::open(&r.rxe[0]).unwrap();
    assert!(ctx.supports_dmabuf(), "the library has the symbol");
    let pd = ctx.alloc_pd().unwrap();
    // A memfd is not a dma-buf; a provider without dma-buf support refuses
    // before looking at it.
    // SAFETY: a plain syscall with a NUL-terminated name.
    let fd = unsafe { libc::memfd_create(c"not-a-dmabuf".as_ptr(), 0) };
    assert!(fd >= 0);
    // SAFETY: the region is never used for traffic; registration fails.
    let e = unsafe { pd.register_dmabuf(fd, 0, 4096, 0, AccessFlags::LOCAL_WRITE) }.unwrap_err();
    assert!(matches!(e, Error::Unsupported { .. }), "{e}");
    assert!(e.to_string().contains("dma-buf"), "{e}");
    // SAFETY: closing the fd created above, once.
    unsafe { libc::close(fd) };
}
