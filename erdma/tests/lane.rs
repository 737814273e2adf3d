//! Lanes (prepared requests on a QP with CQs of its own) on the rig's real
//! devices: data checked byte for byte over rxe (GID connection) and siw
//! (RDMA CM), regions kept until the lane is gone, and every refusal a typed
//! error. Run in the rig.

mod common;

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc;

use common::*;
use erdma::cm::{CmId, CmListener, ConnParams};
use erdma::*;

fn caps() -> QpCapabilities {
    QpCapabilities {
        max_send_wr: 32,
        max_recv_wr: 32,
        max_send_sge: 2,
        max_recv_sge: 1,
        max_inline_data: 32,
    }
}

/// Spins until one completion on the lane's send (or receive) CQ.
fn one_of(lane: &Lane, recv: bool) -> Completion {
    let mut wc = [Completion::default()];
    let t0 = std::time::Instant::now();
    loop {
        let n = if recv {
            lane.poll_recv(&mut wc).unwrap()
        } else {
            lane.poll_send(&mut wc).unwrap()
        };
        if n == 1 {
            return wc[0];
        }
        assert!(t0.elapsed() < T, "no completion within {T:?}");
    }
}

fn lanes(a: Side, b: Side) -> (Lane, ProtectionDomain, Lane, ProtectionDomain) {
    (
        Lane::new(a.qp).unwrap(),
        a.pd,
        Lane::new(b.qp).unwrap(),
        b.pd,
    )
}

/// A connected rxe pair whose CQs have 64 entries (its queues' 32 + 32).
fn small_pair(x: &str, y: &str) -> (Side, Side) {
    let side = |dev: &str| side_with_cq(dev, &caps(), |ctx| ctx.create_cq(64));
    connect(side(x), side(y))
}

#[test]
#[ignore = "needs RDMA devices: run in the rig"]
fn rxe_lane_write_send_read() {
    let r = rig();
    let (a, b) = rc_pair(&r.rxe[0], &r.rxe[1], &caps());
    let (la, pa, lb, pb) = lanes(a, b);
    let mut src = pa
        .register(pattern(4096, 1), AccessFlags::LOCAL_WRITE)
        .unwrap();
    let dst = pb
        .register(
            vec![0u8; 4096],
            AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE | AccessFlags::REMOTE_READ,
        )
        .unwrap();
    let rbuf = pb
        .register(vec![0u8; 4096], AccessFlags::LOCAL_WRITE)
        .unwrap();
    let remote = dst.remote();

    // An inline WRITE prepared once, posted 500 times; then a plain one.
    let mut w = la
        .prepare_send(
            SendRequest::write([src.slice(..8).unwrap()], remote)
                .inline()
                .wr_id(11),
        )
        .unwrap();
    for _ in 0..500 {
        w.post().unwrap();
        let c = one_of(&la, false);
        c.ok().unwrap();
        assert_eq!((c.wr_id(), c.opcode()), (11, WcOpcode::RdmaWrite));
    }
    let mut big = la
        .prepare_send(SendRequest::write(
            [src.slice(..1000).unwrap(), src.slice(2000..3000).unwrap()],
            remote.slice(100..).unwrap(),
        ))
        .unwrap();
    big.set_wr_id(12);
    assert_eq!(big.wr_id(), 12);
    big.post().unwrap();
    assert_eq!(one_of(&la, false).ok().unwrap().wr_id(), 12);
    let got = dst.to_vec();
    let want = pattern(4096, 1);
    assert_eq!(&got[..8], &want[..8], "inline WRITE data");
    // Single bytes, as write_lat polls and sets them (regions in use: copies).
    assert_eq!(dst.read_byte(7).unwrap(), want[7]);
    assert!(dst.read_byte(4096).is_err());
    src.write_byte(4095, 0xa5).unwrap();
    assert_eq!(src.read_byte(4095).unwrap(), 0xa5);
    assert!(src.write_byte(4096, 0).is_err());
    assert_eq!(&got[100..1100], &want[..1000], "first gathered entry");
    assert_eq!(&got[1100..2100], &want[2000..3000], "second gathered entry");

    // SEND/receive ping: the receive prepared once, reposted every time.
    let mut recv = lb
        .prepare_recv(RecvRequest::new([rbuf.slice(..64).unwrap()]).wr_id(21))
        .unwrap();
    let mut send = la
        .prepare_send(SendRequest::send([src.slice(64..128).unwrap()]).wr_id(22))
        .unwrap();
    for _ in 0..200 {
        recv.post().unwrap();
        send.post().unwrap();
        assert_eq!(one_of(&la, false).ok().unwrap().wr_id(), 22);
        let c = one_of(&lb, true);
        c.ok().unwrap();
        assert_eq!(
            (c.wr_id(), c.byte_len(), c.opcode()),
            (21, 64, WcOpcode::Recv)
        );
    }
    assert_eq!(&rbuf.to_vec()[..64], &want[64..128], "SEND data");
    // The receive walked to other slots: of the same region, then of a
    // region bound on the way.
    let other = pb
        .register(vec![0u8; 256], AccessFlags::LOCAL_WRITE)
        .unwrap();
    for slot in [rbuf.slice(256..320).unwrap(), other.slice(64..128).unwrap()] {
        recv.set_local(slot).unwrap();
        recv.post().unwrap();
        send.post().unwrap();
        one_of(&la, false).ok().unwrap();
        assert_eq!(one_of(&lb, true).ok().unwrap().byte_len(), 64);
    }
    assert_eq!(
        &rbuf.to_vec()[256..320],
        &want[64..128],
        "SEND into slot 256"
    );
    assert_eq!(
        &other.to_vec()[64..128],
        &want[64..128],
        "SEND into the other region"
    );
    assert_eq!(other.in_flight(), 1, "bound by set_local");

    // WRITE with immediate consumes a receive and carries the value.
    let mut imm = la
        .prepare_send(SendRequest::write_with_imm(
            [src.slice(..16).unwrap()],
            remote,
            0xfeed_beef,
        ))
        .unwrap();
    recv.post().unwrap();
    imm.post().unwrap();
    one_of(&la, false).ok().unwrap();
    let c = one_of(&lb, true);
    assert_eq!(
        (c.opcode(), c.imm_data()),
        (WcOpcode::RecvRdmaWithImm, Some(0xfeed_beef))
    );

    // READ back into the source's second half.
    let mut read = la
        .prepare_send(SendRequest::read(
            [src.slice(2048..2048 + 1000).unwrap()],
            remote.slice(100..1100).unwrap(),
        ))
        .unwrap();
    read.post().unwrap();
    assert_eq!(
        one_of(&la, false).ok().unwrap().opcode(),
        WcOpcode::RdmaRead
    );
    let mut back = vec![0u8; 1000];
    src.read_at(2048, &mut back).unwrap();
    assert_eq!(back, want[..1000], "READ data");

    // The regions are the lanes' until they are dropped, however often
    // they were prepared from: one share each.
    assert_eq!(src.in_flight(), 1);
    assert_eq!(rbuf.in_flight(), 1);
    assert!(matches!(src.as_mut_slice(), Err(Error::Busy { .. })));
    assert!(matches!(src.as_mut_slice(), Err(Error::Busy { .. })));
    drop(la);
    drop(lb);
    assert_eq!(src.as_mut_slice().unwrap()[2048..3048], want[..1000]);
    assert_eq!((dst.in_flight(), rbuf.in_flight()), (0, 0));
}

#[test]
#[ignore = "needs RDMA devices: run in the rig"]
fn rxe_lane_refusals() {
    let r = rig();
    let ctx = Context::open(&r.rxe[0]).unwrap();
    let pd = ctx.alloc_pd().unwrap();
    // Not connected: RESET.
    let cq = ctx.create_cq(64).unwrap();
    let qp = pd.create_rc_qp(&cq, &cq, &caps()).unwrap();
    let e = Lane::new(qp).unwrap_err();
    assert!(matches!(e, Error::QpState { .. }), "{e}");
    assert!(e.to_string().contains("RTS"), "{e}");

    // A CQ shared with another QP.
    let (a, b) = rc_pair(&r.rxe[0], &r.rxe[1], &caps());
    let other = a.pd.create_rc_qp(&a.cq, &a.cq, &caps()).unwrap();
    let e = Lane::new(a.qp).unwrap_err();
    assert!(e.to_string().contains("other queue pair"), "{e}");
    drop(other);

    // Requests outstanding on the tracked path.
    let rbuf =
        b.pd.register(vec![0u8; 64], AccessFlags::LOCAL_WRITE)
            .unwrap();
    b.qp.post_recv(RecvRequest::new([rbuf.all()])).unwrap();
    let e = Lane::new(b.qp).unwrap_err();
    assert!(e.to_string().contains("outstanding"), "{e}");
}

#[test]
#[ignore = "needs RDMA devices: run in the rig"]
fn rxe_lane_misuse_is_typed() {
    let r = rig();
    let (a, b) = small_pair(&r.rxe[0], &r.rxe[1]);
    let a_cq = a.cq.clone();
    let a_ctx = a.ctx.clone();
    let (la, pa, _lb, pb) = lanes(a, b);
    // The lane's CQ serves it alone: no other QP, no other poller.
    let e = pa.create_rc_qp(&a_cq, &a_cq, &caps()).unwrap_err();
    assert!(e.to_string().contains("serves a Lane"), "{e}");
    let e = a_cq.poll(&mut [WorkCompletion::default()]).unwrap_err();
    assert!(e.to_string().contains("Lane::poll_send"), "{e}");

    let src = pa.register(pattern(256, 2), AccessFlags::empty()).unwrap();
    let dst = pb
        .register(
            vec![0u8; 256],
            AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE,
        )
        .unwrap();
    let remote = dst.remote();
    // Checked when prepared: another PD, inline too long, three entries,
    // a receive into memory without LOCAL_WRITE, a READ into it.
    let other_pd = a_ctx.alloc_pd().unwrap();
    let foreign = other_pd
        .register(vec![0u8; 64], AccessFlags::LOCAL_WRITE)
        .unwrap();
    let e = la
        .prepare_send(SendRequest::write([foreign.all()], remote))
        .unwrap_err();
    assert!(e.to_string().contains("protection domain"), "{e}");
    let e = la
        .prepare_send(SendRequest::write([src.slice(..64).unwrap()], remote).inline())
        .unwrap_err();
    assert!(e.to_string().contains("max_inline_data"), "{e}");
    let three = [
        src.slice(..8).unwrap(),
        src.slice(8..16).unwrap(),
        src.slice(16..24).unwrap(),
    ];
    let e = la
        .prepare_send(SendRequest::write(three, remote))
        .unwrap_err();
    assert!(matches!(e, Error::InvalidArgument { .. }), "{e}");
    let e = la
        .prepare_recv(RecvRequest::new([src.slice(..8).unwrap()]))
        .unwrap_err();
    assert!(e.to_string().contains("LOCAL_WRITE"), "{e}");
    let rbuf = pa
        .register(vec![0u8; 64], AccessFlags::LOCAL_WRITE)
        .unwrap();
    let mut recv = la.prepare_recv(RecvRequest::new([rbuf.all()])).unwrap();
    let e = recv.set_local(src.slice(..8).unwrap()).unwrap_err();
    assert!(e.to_string().contains("LOCAL_WRITE"), "{e}");
    let e = recv.set_local(foreign.all()).unwrap_err();
    assert!(e.to_string().contains("protection domain"), "{e}");
    let e = la
        .prepare_send(SendRequest::read([src.slice(..8).unwrap()], remote))
        .unwrap_err();
    assert!(e.to_string().contains("LOCAL_WRITE"), "{e}");

    // Credits: a request the send CQ might not hold is refused until
    // completions are polled; an unsignaled one holds its credit until a
    // signaled one posted after it completes.
    let mut w = la
        .prepare_send(SendRequest::write([src.slice(..8).unwrap()], remote).inline())
        .unwrap();
    let credits = la.send_credits();
    assert!((64..1024).contains(&credits), "CQ of {credits} entries");
    let mut posted = 0;
    let e = loop {
        match w.post() {
            Ok(()) => posted += 1,
            // The send queue (32) is full: rxe frees its slots as the
            // requests complete, without a poll; the CQ keeps filling.
            Err(e) if e.errno() == Some(libc::ENOMEM) => {
                std::thread::sleep(std::time::Duration::from_millis(50))
            }
            Err(e) => break e,
        }
    };
    assert!(matches!(e, Error::QueueFull { .. }), "{e}");
    assert_eq!((posted, la.send_credits()), (credits, 0));
    let mut wc = vec![Completion::default(); credits as usize];
    let mut got = 0;
    let t0 = std::time::Instant::now();
    while got < credits as usize {
        got += la.poll_send(&mut wc[got..]).unwrap();
        assert!(t0.elapsed() < T, "{got} of {credits} completions");
    }
    assert!(wc.iter().all(Completion::is_ok));
    assert_eq!(la.send_credits(), credits);
    let mut quiet = la
        .prepare_send(
            SendRequest::write([src.slice(..8).unwrap()], remote)
                .inline()
                .unsignaled(),
        )
        .unwrap();
    for _ in 0..3 {
        quiet.post().unwrap();
    }
    assert_eq!(la.send_credits(), credits - 3);
    w.post().unwrap();
    assert_eq!(la.send_credits(), credits - 4);
    one_of(&la, false).ok().unwrap();
    assert_eq!(
        la.send_credits(),
        credits,
        "the run came back with its signaled send"
    );

    // A failed request: a completion with its status, as a typed error.
    let bad = RemoteBuffer {
        rkey: remote.rkey ^ 0xff,
        ..remote
    };
    let mut wrong = la
        .prepare_send(SendRequest::write([src.slice(..8).unwrap()], bad).wr_id(99))
        .unwrap();
    wrong.post().unwrap();
    let c = one_of(&la, false);
    assert!(!c.is_ok());
    let e = c.ok().unwrap_err();
    assert!(matches!(e, Error::Completion { wr_id: 99, .. }), "{e}");
    assert_eq!(la.query_state().unwrap(), QpState::Err);
}

#[test]
#[ignore = "needs RDMA devices: run in the rig"]
fn siw_lane_over_rdma_cm() {
    let r = rig();
    let ip = r
        .siw_ip
        .expect("ERDMA_RIG_SIW is empty: the rig ran without --siw");
    let server_addr: SocketAddr = (ip[1], 7481).into();
    let (ready_tx, ready_rx) = mpsc::channel();
    let server = std::thread::spawn(move || {
        let l = CmListener::bind(server_addr).unwrap();
        ready_tx.send(()).unwrap();
        let req = l.get_request(T).unwrap();
        let ctx = req.context().unwrap();
        let pd = ctx.alloc_pd().unwrap();
        let cq = ctx.create_cq(256).unwrap();
        let qp = req.create_qp(&pd, &cq, &cq, &caps()).unwrap();
        let exposed = pd
            .register(
                vec![0u8; 4096],
                AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE,
            )
            .unwrap();
        let inbox = pd
            .register(vec![0u8; 4096], AccessFlags::LOCAL_WRITE)
            .unwrap();
        qp.post_recv(RecvRequest::new([inbox.all()]).wr_id(1))
            .unwrap();
        let params = ConnParams {
            private_data: exposed.remote().to_bytes().to_vec(),
            ..Default::default()
        };
        let id = req.accept(&qp, &params, T).unwrap();
        let wc = one(&cq);
        assert_eq!((wc.wr_id, wc.byte_len), (1, 4096));
        let data = (exposed.to_vec(), inbox.to_vec());
        id.wait_disconnect(T).unwrap();
        data
    });
    ready_rx.recv().unwrap();
    let id = CmId::resolve(server_addr, Some((ip[0], 0).into()), T).unwrap();
    let ctx = id.context().unwrap();
    let pd = ctx.alloc_pd().unwrap();
    let cq = ctx.create_cq(256).unwrap();
    let qp = id.create_qp(&pd, &cq, &cq, &caps()).unwrap();
    let reply = id.connect(&qp, &ConnParams::default(), T).unwrap();
    let remote = RemoteBuffer::from_bytes(&reply).expect("server sent its buffer");
    let lane = Lane::new(qp).unwrap();
    let src = pd.register(pattern(4096, 3), AccessFlags::empty()).unwrap();
    // Memory the library cannot vouch is host memory is never sent inline
    // (siw copies inline data with the CPU).
    let backing: &'static mut [u8] = Box::leak(vec![0u8; 64].into_boxed_slice());
    // SAFETY: leaked host memory, allocated for ever.
    let raw = unsafe { RawBuffer::new(backing.as_mut_ptr(), backing.len()) };
    let raw = pd.register(raw, AccessFlags::empty()).unwrap();
    let e = lane
        .prepare_send(SendRequest::send([raw.slice(..8).unwrap()]).inline())
        .unwrap_err();
    assert!(matches!(e, Error::NotHostMemory { .. }), "{e}");
    let mut w = lane
        .prepare_send(SendRequest::write([src.slice(..2048).unwrap()], remote))
        .unwrap();
    for _ in 0..20 {
        w.post().unwrap();
        one_of(&lane, false).ok().unwrap();
    }
    // iWARP has no immediate data: the provider refuses the post, a typed
    // error, and the credit it took is given back.
    let credits = lane.send_credits();
    let mut imm = lane
        .prepare_send(SendRequest::write_with_imm(
            [src.slice(..8).unwrap()],
            remote,
            5,
        ))
        .unwrap();
    let e = imm.post().unwrap_err();
    assert!(matches!(e, Error::Unsupported { .. }), "{e}");
    assert_eq!(lane.send_credits(), credits);
    let mut send = lane.prepare_send(SendRequest::send([src.all()])).unwrap();
    send.post().unwrap();
    one_of(&lane, false).ok().unwrap();
    id.disconnect().unwrap();
    let (exposed, inbox) = server.join().unwrap();
    let want = pattern(4096, 3);
    assert_eq!(&exposed[..2048], &want[..2048], "RDMA WRITE data");
    assert_eq!(inbox, want, "SEND data");
}

/// write_lat's pattern: an inline WRITE whose source is rewritten between
/// posts, through the prepared request that holds the source exclusively;
/// a request naming another region is refused.
#[test]
#[ignore = "needs RDMA devices: run in the rig"]
fn rxe_lane_source_rewritten_between_posts() {
    let r = rig();
    let (a, b) = small_pair(&r.rxe[0], &r.rxe[1]);
    let (la, pa, _lb, pb) = lanes(a, b);
    let mut src = pa.register(vec![0u8; 64], AccessFlags::empty()).unwrap();
    // The request is built for any lifetime of the source's borrow: only a
    // 'static region can be named beside it, and is refused.
    let other: &'static MemoryRegion = Box::leak(Box::new(
        pa.register(vec![0u8; 64], AccessFlags::empty()).unwrap(),
    ));
    let dst = pb
        .register(
            vec![0u8; 64],
            AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE,
        )
        .unwrap();
    let remote = dst.remote().slice(..8).unwrap();
    let e = la
        .prepare_send_mut(&mut src, |m| {
            Ok(SendRequest::write(
                [m.slice(..4)?, other.slice(..4)?],
                remote,
            ))
        })
        .unwrap_err();
    assert!(matches!(e, Error::InvalidArgument { .. }), "{e}");
    let mut w = la
        .prepare_send_mut(&mut src, |m| {
            Ok(SendRequest::write([m.slice(..8)?], remote).inline())
        })
        .unwrap();
    for n in 1..=200u32 {
        w.source_mut().write_at(0, &n.to_le_bytes()).unwrap();
        w.post().unwrap();
        one_of(&la, false).ok().unwrap();
        assert_eq!(dst.to_vec()[..4], n.to_le_bytes(), "message {n}");
    }
    assert_eq!(w.source().read_byte(0).unwrap(), 200);
    drop(w);
    // The lane still holds the region (bound): copies only.
    assert!(matches!(src.as_mut_slice(), Err(Error::Busy { .. })));
}

/// One rxe QP on a CQ of its own, connected (RTS) to `peer`: what a lane is
/// made of, cheap enough to make hundreds of times.
/// Returns the endpoint it connected with (each `endpoint()` has a new PSN).
fn rts_qp(
    ctx: &Context,
    pd: &ProtectionDomain,
    peer: &Endpoint,
) -> (CompletionQueue, QueuePair, Endpoint) {
    // Room for the lane's 32 + 32 and another QP's 4 + 4: only the lane's
    // ownership can refuse that QP.
    let cq = ctx.create_cq(128).unwrap();
    let qp = pd.create_rc_qp(&cq, &cq, &caps()).unwrap();
    let gid = ctx.select_gid(1, None).unwrap();
    let me = qp.endpoint(&gid).unwrap();
    qp.connect(&me, peer, &ConnectOptions::default()).unwrap();
    (cq, qp, me)
}

/// A lane's CQ may serve no other QP, also one created on another thread
/// while the lane is made (it reserves CQ room before it exists as a QP),
/// and a CompletionQueue::poll already running when the lane is made cannot
/// take the lane's completions. Hundreds of rounds, two threads each.
#[test]
#[ignore = "needs RDMA devices: run in the rig"]
fn rxe_lane_dedication_races() {
    let r = rig();
    let (a, b) = small_pair(&r.rxe[0], &r.rxe[1]);
    let peer = b.qp.endpoint(&b.gid).unwrap();
    let dst =
        b.pd.register(
            vec![0u8; 64],
            AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE,
        )
        .unwrap();
    let src = a.pd.register(vec![5u8; 64], AccessFlags::empty()).unwrap();
    let rounds = 200;
    let (mut lanes_won, mut qps_won) = (0, 0);
    for round in 0..rounds {
        let (cq, qp, _) = rts_qp(&a.ctx, &a.pd, &peer);
        let barrier = std::sync::Barrier::new(2);
        let (lane, other) = std::thread::scope(|s| {
            let other = s.spawn(|| {
                barrier.wait();
                a.pd.create_rc_qp(
                    &cq,
                    &cq,
                    &QpCapabilities {
                        max_send_wr: 4,
                        max_recv_wr: 4,
                        ..caps()
                    },
                )
            });
            barrier.wait();
            (Lane::new(qp), other.join().unwrap())
        });
        match (&lane, &other) {
            (Ok(_), Err(e)) => {
                assert!(
                    e.to_string().contains("serves a Lane"),
                    "round {round}: {e}"
                );
                lanes_won += 1;
            }
            (Err(e), Ok(_)) => {
                assert!(
                    e.to_string().contains("other queue pair"),
                    "round {round}: {e}"
                );
                qps_won += 1;
            }
            _ => panic!("round {round}: lane {lane:?} and QP {other:?}: exactly one may win"),
        }
    }
    eprintln!("{rounds} rounds: the lane won {lanes_won}, the other QP {qps_won}");
    let mut stolen = 0;
    for round in 0..rounds {
        // A peer QP of its own, so that the lane's WRITE completes.
        let pcq = b.ctx.create_cq(128).unwrap();
        let pqp = b.pd.create_rc_qp(&pcq, &pcq, &caps()).unwrap();
        let pend = pqp.endpoint(&b.gid).unwrap();
        let (cq, qp, me) = rts_qp(&a.ctx, &a.pd, &pend);
        pqp.connect(&pend, &me, &ConnectOptions::default()).unwrap();
        let stop = AtomicBool::new(false);
        let lane = std::thread::scope(|s| {
            let poller = s.spawn(|| {
                let mut wcs = [WorkCompletion::default(); 4];
                let mut n = 0;
                while !stop.load(Ordering::Acquire) {
                    match cq.poll(&mut wcs) {
                        Ok(k) => n += k,
                        Err(_) => break,
                    }
                }
                n
            });
            let lane = Lane::new(qp).unwrap();
            // Posted at once: a poll still running would take it.
            let mut w = lane
                .prepare_send(SendRequest::write([src.slice(..8).unwrap()], dst.remote()).wr_id(7))
                .unwrap();
            w.post().unwrap();
            let mut wc = [Completion::default()];
            let t0 = std::time::Instant::now();
            while lane.poll_send(&mut wc).unwrap() == 0 && t0.elapsed() < T / 6 {}
            stop.store(true, Ordering::Release);
            let taken = poller.join().unwrap();
            assert_eq!(
                (wc[0].wr_id(), taken),
                (7, 0),
                "round {round}: the lane's completion (state {:?}), taken by the poller",
                lane.query_state()
            );
            wc[0].ok().unwrap();
            stolen += taken;
            assert_eq!(
                lane.send_credits(),
                cq.entries(),
                "round {round}: every credit back"
            );
            lane
        });
        drop(lane);
    }
    assert_eq!(stolen, 0, "a poll took a lane's completion");
    eprintln!("{rounds} lanes made while their CQ was polled: no completion taken");
}

/// Completions a dropped QP left in a CQ are discarded when a lane takes
/// the CQ: its credits start from an empty CQ and its polls return only its
/// own completions.
#[test]
#[ignore = "needs RDMA devices: run in the rig"]
fn rxe_lane_discards_stale_completions() {
    let r = rig();
    let (a, b) = small_pair(&r.rxe[0], &r.rxe[1]);
    let peer = b.qp.endpoint(&b.gid).unwrap();
    let cq = a.ctx.create_cq(64).unwrap();
    let inbox =
        a.pd.register(vec![0u8; 64], AccessFlags::LOCAL_WRITE)
            .unwrap();
    let old = a.pd.create_rc_qp(&cq, &cq, &caps()).unwrap();
    old.to_init(&InitAttributes {
        port: 1,
        access: AccessFlags::LOCAL_WRITE,
        pkey_index: 0,
    })
    .unwrap();
    for i in 0..8 {
        old.post_recv(RecvRequest::new([inbox.slice(..8).unwrap()]).wr_id(100 + i))
            .unwrap();
    }
    // ERR flushes the receives: 8 completions wait in the CQ, unpolled.
    old.to_error().unwrap();
    std::thread::sleep(std::time::Duration::from_millis(200));
    drop(old);
    let qp = a.pd.create_rc_qp(&cq, &cq, &caps()).unwrap();
    let gid = a.ctx.select_gid(1, None).unwrap();
    qp.connect(
        &qp.endpoint(&gid).unwrap(),
        &peer,
        &ConnectOptions::default(),
    )
    .unwrap();
    let lane = Lane::new(qp).unwrap();
    assert_eq!(lane.send_credits(), cq.entries());
    let mut wc = [Completion::default(); 16];
    std::thread::sleep(std::time::Duration::from_millis(100));
    assert_eq!(
        lane.poll_send(&mut wc).unwrap(),
        0,
        "stale completions discarded"
    );
}
