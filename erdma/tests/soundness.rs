//! The soundness holes of the safe API that can only be closed at run time,
//! each exercised with real devices (run in the rig: rxe0<->rxe1,
//! siw0<->siw1). The ones closed at compile time are in tests/ui/.

mod common;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Barrier};
use std::time::Duration;

use common::*;
use erdma::cm::CmId;
use erdma::*;

fn caps(send: u32, recv: u32) -> QpCapabilities {
    QpCapabilities {
        max_send_wr: send,
        max_recv_wr: recv,
        max_send_sge: 1,
        max_recv_sge: 1,
        max_inline_data: 0,
    }
}

/// Held by every test that creates QPs on siw: the test of QP number
/// reuse needs the number it freed to be the lowest free one, which a QP
/// created meanwhile by a test running beside it would take.
fn siw_qps() -> std::sync::MutexGuard<'static, ()> {
    static SIW_QPS: std::sync::Mutex<()> = std::sync::Mutex::new(());
    SIW_QPS.lock().unwrap_or_else(|e| e.into_inner())
}

fn siw_dev() -> String {
    let r = rig();
    r.siw
        .expect("the rig has siw0/siw1 (rig/vm.sh without --no-siw)")[0]
        .clone()
}

/// A region a peer may write is never lent out as a slice: the owner reads
/// it by copies while the peer's RDMA WRITEs land, and sees the final data
/// once the writes are complete.
#[test]
#[ignore = "needs RDMA devices: run in the rig"]
fn remote_writes_while_owner_reads() {
    let r = rig();
    let (a, b) = rc_pair(&r.rxe[0], &r.rxe[1], &caps(64, 64));
    let n = 64 * 1024;
    let exposed =
        b.pd.register(
            AlignedBuffer::new(n).unwrap(),
            AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE,
        )
        .unwrap();
    let mut exposed = exposed;
    assert!(exposed.is_remotely_writable());
    assert!(matches!(
        exposed.as_slice(),
        Err(Error::RemotelyWritable { .. })
    ));
    assert!(matches!(
        exposed.as_mut_slice(),
        Err(Error::RemotelyWritable { .. })
    ));
    let remote = exposed.remote();
    let exposed = Arc::new(exposed);
    let stop = Arc::new(AtomicBool::new(false));
    // The owner keeps reading while the writes land.
    let reader = {
        let (exposed, stop) = (exposed.clone(), stop.clone());
        std::thread::spawn(move || {
            let mut reads = 0u64;
            let mut buf = vec![0u8; n];
            while !stop.load(Ordering::Acquire) {
                exposed.read_at(0, &mut buf).unwrap();
                reads += 1;
            }
            reads
        })
    };
    let rounds = 40u64;
    let mut last = Vec::new();
    for i in 0..rounds {
        last = pattern(n, 100 + i);
        let src = a.pd.register(last.clone(), AccessFlags::empty()).unwrap();
        a.qp.post_send(SendRequest::write([src.all()], remote).wr_id(i))
            .unwrap();
        // On RC the requester's completion means the data is placed.
        assert_eq!(one(&a.cq).wr_id, i);
    }
    stop.store(true, Ordering::Release);
    let reads = reader.join().unwrap();
    assert!(reads > 0);
    assert!(
        exposed.to_vec() == last,
        "the last WRITE is what the copy sees"
    );
    let mut tail = [0u8; 100];
    exposed.read_at(n - 100, &mut tail).unwrap();
    assert_eq!(&tail[..], &last[n - 100..]);
    assert!(exposed.read_at(n - 99, &mut tail).is_err(), "range checked");
    // Taking the buffer back deregisters it: then it is plain memory.
    let exposed = Arc::try_unwrap(exposed).unwrap();
    let buf: AlignedBuffer = exposed.into_inner().unwrap();
    assert!(buf[..] == last[..]);
    eprintln!("{rounds} RDMA WRITEs of {n} B landed during {reads} reads by copy");
}

/// QP numbers are reused at once (siw hands out the lowest free one). A
/// completion of a dropped QP left in the CQ must not release the holds of
/// the new QP that got its number: the new QP's receive buffer stays held.
#[test]
#[ignore = "needs RDMA devices: run in the rig"]
fn stale_completion_of_dropped_qp_is_ignored() {
    let _siw = siw_qps();
    let dev = siw_dev();
    let ctx = Context::open(&dev).unwrap();
    let pd = ctx.alloc_pd().unwrap();
    let cq = ctx.create_cq(64).unwrap();
    let init = InitAttributes {
        port: 1,
        access: AccessFlags::LOCAL_WRITE,
        pkey_index: 0,
    };
    let old = pd.create_rc_qp(&cq, &cq, &caps(4, 4)).unwrap();
    old.to_init(&init).unwrap();
    let r1 = pd
        .register(vec![0u8; 64], AccessFlags::LOCAL_WRITE)
        .unwrap();
    old.post_recv(RecvRequest::new([r1.all()]).wr_id(1))
        .unwrap();
    // ERR flushes the receive: its completion now waits in the CQ, unpolled.
    old.to_error().unwrap();
    std::thread::sleep(Duration::from_millis(200));
    let old_num = old.qp_num();
    drop(old);
    let new = pd.create_rc_qp(&cq, &cq, &caps(4, 4)).unwrap();
    assert_eq!(
        new.qp_num(),
        old_num,
        "siw reuses the lowest free QP number (the case this test is about)"
    );
    new.to_init(&init).unwrap();
    let mut r2 = pd
        .register(vec![0u8; 64], AccessFlags::LOCAL_WRITE)
        .unwrap();
    new.post_recv(RecvRequest::new([r2.all()]).wr_id(2))
        .unwrap();
    assert_eq!(r2.in_flight(), 1);
    // Poll the stale completion: it must not be taken for the new QP's.
    let mut wcs = [WorkCompletion::default(); 8];
    let mut stale = 0;
    for _ in 0..20 {
        stale += cq.poll(&mut wcs).unwrap();
        std::thread::sleep(Duration::from_millis(10));
    }
    assert_eq!(stale, 0, "the dropped QP's completion is not reported");
    assert_eq!(
        r2.in_flight(),
        1,
        "the new QP's receive still holds its buffer"
    );
    assert!(matches!(r2.as_mut_slice(), Err(Error::Busy { .. })));
    assert_eq!(new.outstanding(), (0, 1));
    // The new QP's own completion releases it.
    new.to_error().unwrap();
    let wc = cq.collect(1, T).unwrap()[0];
    assert_eq!((wc.wr_id, wc.status), (2, WcStatus::WrFlushErr));
    assert_eq!(r2.in_flight(), 0);
    assert!(r2.as_mut_slice().is_ok());
}

/// Issue 34 holes 8 and 10, at the wrap of the 30-bit QP generations (test
/// hook): a QP dropped with completions left in its CQ keeps its generation
/// (the next QP given the same number would take the stale completion for
/// its own live request, releasing its buffer) and the CQ room they take
/// (the next QP could overrun the CQ), until they are polled or the CQ is
/// seen empty.
#[cfg(feature = "fault-injection")]
#[test]
#[ignore = "needs RDMA devices: run in the rig"]
fn dropped_qp_keeps_generation_and_cq_room_until_its_completions_are_gone() {
    let _siw = siw_qps();
    let dev = siw_dev();
    let ctx = Context::open(&dev).unwrap();
    let pd = ctx.alloc_pd().unwrap();
    let cq = ctx.create_cq(8).unwrap();
    let init = InitAttributes {
        port: 1,
        access: AccessFlags::LOCAL_WRITE,
        pkey_index: 0,
    };
    let near_wrap = (1 << 30) - 1;
    erdma::fault::start_generations_at(near_wrap);
    let old = pd.create_rc_qp(&cq, &cq, &caps(1, 4)).unwrap();
    old.to_init(&init).unwrap();
    let r1 = pd
        .register(vec![0u8; 64], AccessFlags::LOCAL_WRITE)
        .unwrap();
    for id in [1, 2] {
        old.post_recv(RecvRequest::new([r1.all()]).wr_id(id))
            .unwrap();
    }
    // ERR flushes both receives: their completions wait in the CQ, unpolled.
    old.to_error().unwrap();
    std::thread::sleep(Duration::from_millis(200));
    drop(old);
    assert_eq!(cq.reserved(), 2, "room kept for the two completions left");
    let e = pd.create_rc_qp(&cq, &cq, &caps(4, 4)).unwrap_err();
    assert!(e.to_string().contains("8 entries"), "{e}");
    // The counter comes round to the dropped QP's generation.
    erdma::fault::start_generations_at(near_wrap);
    let new = pd.create_rc_qp(&cq, &cq, &caps(2, 4)).unwrap();
    new.to_init(&init).unwrap();
    let mut r2 = pd
        .register(vec![0u8; 64], AccessFlags::LOCAL_WRITE)
        .unwrap();
    new.post_recv(RecvRequest::new([r2.all()]).wr_id(100))
        .unwrap();
    let mut wcs = [WorkCompletion::default(); 8];
    let mut got = Vec::new();
    for _ in 0..20 {
        let n = cq.poll(&mut wcs).unwrap();
        got.extend(wcs[..n].iter().map(|wc| wc.wr_id));
        std::thread::sleep(Duration::from_millis(10));
    }
    assert_eq!(
        got,
        [] as [u64; 0],
        "the stale completions are not reported"
    );
    assert_eq!(
        r2.in_flight(),
        1,
        "the new QP's receive still holds its buffer"
    );
    assert!(matches!(r2.as_mut_slice(), Err(Error::Busy { .. })));
    assert_eq!(new.outstanding(), (0, 1));
    assert_eq!(
        cq.reserved(),
        6,
        "the stale completions polled, their room given back"
    );
    new.to_error().unwrap();
    let wc = cq.collect(1, T).unwrap()[0];
    assert_eq!((wc.wr_id, wc.status), (100, WcStatus::WrFlushErr));
    assert!(r2.as_mut_slice().is_ok());

    // A dropped QP whose requests never complete (a QP in INIT destroyed
    // with a receive posted): its room comes back once a poll finds the CQ
    // empty.
    let quiet = pd.create_rc_qp(&cq, &cq, &caps(1, 1)).unwrap();
    quiet.to_init(&init).unwrap();
    quiet
        .post_recv(RecvRequest::new([r1.all()]).wr_id(7))
        .unwrap();
    assert_eq!(cq.reserved(), 8);
    drop(quiet);
    assert_eq!(cq.reserved(), 7, "the send queue's room back, one kept");
    for _ in 0..5 {
        assert_eq!(cq.poll(&mut wcs).unwrap(), 0);
    }
    assert_eq!(cq.reserved(), 6, "an empty poll gave the rest back");
    drop(new);
    assert_eq!(cq.reserved(), 0);
}

/// Issue 34 hole 9: making a lane waits for the polls of its CQ in progress;
/// it did so holding the lock a poll takes to translate what it polled, so a
/// poll with leftover completions of a dropped QP in hand and the lane's
/// creation waited for each other for ever. The test hook holds such a poll
/// (one stale completion polled, not yet translated) for a second while the
/// lane is made.
#[cfg(feature = "fault-injection")]
#[test]
#[ignore = "needs RDMA devices: run in the rig"]
fn lane_made_while_a_poll_translates_leftovers() {
    let r = rig();
    let (a, b) = rc_pair(&r.rxe[0], &r.rxe[1], &caps(4, 4));
    let peer = b.qp.endpoint(&b.gid).unwrap();
    let cq = a.ctx.create_cq(64).unwrap();
    let inbox =
        a.pd.register(vec![0u8; 64], AccessFlags::LOCAL_WRITE)
            .unwrap();
    let old = a.pd.create_rc_qp(&cq, &cq, &caps(4, 8)).unwrap();
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
    std::thread::sleep(Duration::from_millis(200));
    drop(old);
    let qp = a.pd.create_rc_qp(&cq, &cq, &caps(4, 4)).unwrap();
    qp.connect(
        &qp.endpoint(&a.gid).unwrap(),
        &peer,
        &ConnectOptions::default(),
    )
    .unwrap();
    let poller = {
        let cq = cq.clone();
        std::thread::spawn(move || {
            erdma::fault::pause_next_poll(Duration::from_secs(1));
            let mut wc = [WorkCompletion::default(); 1];
            cq.poll(&mut wc)
        })
    };
    // The poller has its stale completion in hand and sleeps.
    std::thread::sleep(Duration::from_millis(300));
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(Lane::new(qp).map(|l| l.send_credits()));
    });
    let credits = rx
        .recv_timeout(Duration::from_secs(20))
        .expect("Lane::new and a poll in progress wait for each other");
    assert_eq!(credits.unwrap(), cq.entries());
    assert_eq!(
        poller.join().unwrap().unwrap(),
        0,
        "the stale completion is not reported"
    );
}

/// Issue 34 hole 4: `rdma_disconnect` moves the id's QP (`id->qp`) to ERR
/// inside librdmacm; on a clone of the id it raced the QP's drop, which
/// destroys that QP (a use after free in C). Both now run under the id's QP
/// lock: many rounds of a connected id's clone disconnecting while the QP is
/// dropped on another thread end with the QP destroyed and nothing reported.
#[test]
#[ignore = "needs RDMA devices: run in the rig"]
fn disconnect_on_a_clone_races_the_qp_drop() {
    let r = rig();
    let server_addr: std::net::SocketAddr = (r.rxe_ip[1], 7331).into();
    let rounds = 20;
    let (ready_tx, ready_rx) = std::sync::mpsc::channel();
    let server = std::thread::spawn(move || {
        let l = erdma::cm::CmListener::bind(server_addr).unwrap();
        ready_tx.send(()).unwrap();
        for _ in 0..rounds {
            let req = l.get_request(T).unwrap();
            let ctx = req.context().unwrap();
            let pd = ctx.alloc_pd().unwrap();
            let cq = ctx.create_cq(64).unwrap();
            let qp = req.create_qp(&pd, &cq, &cq, &caps(8, 8)).unwrap();
            let id = req.accept(&qp, &Default::default(), T).unwrap();
            id.wait_disconnect(T).unwrap();
        }
    });
    ready_rx.recv().unwrap();
    for round in 0..rounds {
        let id = CmId::resolve(server_addr, Some((r.rxe_ip[0], 0).into()), T).unwrap();
        let ctx = id.context().unwrap();
        let pd = ctx.alloc_pd().unwrap();
        let cq = ctx.create_cq(64).unwrap();
        let qp = id.create_qp(&pd, &cq, &cq, &caps(8, 8)).unwrap();
        id.connect(&qp, &Default::default(), T).unwrap();
        let barrier = Arc::new(Barrier::new(2));
        let clone = id.clone();
        let b = barrier.clone();
        let t = std::thread::spawn(move || {
            b.wait();
            clone.disconnect()
        });
        barrier.wait();
        drop(qp);
        t.join()
            .unwrap()
            .unwrap_or_else(|e| panic!("round {round}: {e}"));
        assert_eq!(cq.reserved(), 0, "round {round}: the QP was destroyed");
    }
    server.join().unwrap();
    eprintln!("{rounds} rounds of disconnect on a clone racing the QP's drop");
}

/// Issue 34 hole 1: siw completes a signaled WRITE when it is sent, before an
/// earlier unsignaled RDMA READ's response has landed. Polling the WRITE must
/// not release the READ's sink: the sink is not lendable (`as_slice`) until the
/// READ's own completion, and then holds the peer's bytes.
#[test]
#[ignore = "needs RDMA devices: run in the rig"]
fn siw_read_sink_released_only_by_its_own_completion() {
    let _siw = siw_qps();
    let r = rig();
    let ip = r.siw_ip.expect("the rig has siw0/siw1");
    let len = 1 << 20;
    let server_addr: std::net::SocketAddr = (ip[1], 7341).into();
    let (ready_tx, ready_rx) = std::sync::mpsc::channel();
    let server = std::thread::spawn(move || {
        let l = erdma::cm::CmListener::bind(server_addr).unwrap();
        ready_tx.send(()).unwrap();
        let req = l.get_request(T).unwrap();
        let ctx = req.context().unwrap();
        let pd = ctx.alloc_pd().unwrap();
        let cq = ctx.create_cq(64).unwrap();
        let qp = req.create_qp(&pd, &cq, &cq, &caps(8, 4)).unwrap();
        let exposed = pd
            .register(
                pattern(len, 9),
                AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_READ | AccessFlags::REMOTE_WRITE,
            )
            .unwrap();
        let params = erdma::cm::ConnParams {
            private_data: exposed.remote().to_bytes().to_vec(),
            ..Default::default()
        };
        let id = req.accept(&qp, &params, T).unwrap();
        let _ = id.wait_disconnect(T);
    });
    ready_rx.recv().unwrap();
    let id = CmId::resolve(server_addr, Some((ip[0], 0).into()), T).unwrap();
    let ctx = id.context().unwrap();
    let pd = ctx.alloc_pd().unwrap();
    let cq = ctx.create_cq(64).unwrap();
    let qp = id.create_qp(&pd, &cq, &cq, &caps(8, 4)).unwrap();
    let reply = id
        .connect(&qp, &erdma::cm::ConnParams::default(), T)
        .unwrap();
    let remote = RemoteBuffer::from_bytes(&reply).expect("the server sent its buffer");
    // The READ takes all but the last 64 bytes; the WRITE goes to those (a
    // READ response may carry a later WRITE's bytes where the two overlap).
    let part = len - 64;
    let mut sink = pd
        .register(vec![0u8; part], AccessFlags::LOCAL_WRITE)
        .unwrap();
    let src = pd.register(vec![1u8; 64], AccessFlags::empty()).unwrap();
    let want = pattern(len, 9)[..part].to_vec();
    for round in 0..3 {
        sink.fill(0);
        qp.post_send(
            SendRequest::read([sink.all()], remote.slice(..part).unwrap())
                .unsignaled()
                .wr_id(1),
        )
        .unwrap();
        qp.post_send(SendRequest::write([src.all()], remote.slice(part..).unwrap()).wr_id(2))
            .unwrap();
        let wc = one(&cq);
        assert_eq!(
            (wc.wr_id, wc.status),
            (2, WcStatus::Success),
            "round {round}"
        );
        // Whenever the sink is lendable, the READ has landed.
        let t0 = std::time::Instant::now();
        let mut wcs = [WorkCompletion::default(); 4];
        loop {
            match sink.as_slice() {
                Ok(bytes) => {
                    let wrong = bytes.iter().zip(&want).filter(|(a, b)| a != b).count();
                    assert_eq!(
                        wrong, 0,
                        "round {round}: the sink was lent with {wrong} of {part} bytes not yet the peer's"
                    );
                    break;
                }
                Err(Error::Busy { .. }) => {
                    assert_eq!(
                        cq.poll(&mut wcs).unwrap(),
                        0,
                        "the READ's success is not reported"
                    );
                }
                Err(e) => panic!("{e}"),
            }
            assert!(t0.elapsed() < T, "round {round}: the READ never completed");
        }
        assert_eq!(qp.outstanding(), (0, 0));
    }
    let _ = id.disconnect();
    drop(qp);
    drop(id);
    server.join().unwrap();
}

/// Issue 34 hole 1 through a lane, on siw: a large unsignaled READ, then a
/// signaled WRITE, which siw completes when it is sent, before the READ's
/// response has landed. Polling the WRITE must not give the READ's credit
/// back (a READ that then fails adds a completion the credits would not
/// count): whenever it is back, the sink holds the peer's bytes. A later
/// signaled READ's success gives it back; the sink is never lendable while
/// the lane lives, and holds the peer's bytes once the lane is gone.
#[test]
#[ignore = "needs RDMA devices: run in the rig"]
fn siw_lane_read_credit_kept_until_a_read_proves_it_done() {
    let _siw = siw_qps();
    let r = rig();
    let ip = r.siw_ip.expect("the rig has siw0/siw1");
    let len = 1 << 20;
    let server_addr: std::net::SocketAddr = (ip[1], 7343).into();
    let (ready_tx, ready_rx) = std::sync::mpsc::channel();
    let server = std::thread::spawn(move || {
        let l = erdma::cm::CmListener::bind(server_addr).unwrap();
        ready_tx.send(()).unwrap();
        let req = l.get_request(T).unwrap();
        let ctx = req.context().unwrap();
        let pd = ctx.alloc_pd().unwrap();
        let cq = ctx.create_cq(64).unwrap();
        let qp = req.create_qp(&pd, &cq, &cq, &caps(8, 4)).unwrap();
        let exposed = pd
            .register(
                pattern(len, 11),
                AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_READ | AccessFlags::REMOTE_WRITE,
            )
            .unwrap();
        let params = erdma::cm::ConnParams {
            private_data: exposed.remote().to_bytes().to_vec(),
            ..Default::default()
        };
        let id = req.accept(&qp, &params, T).unwrap();
        let _ = id.wait_disconnect(T);
    });
    ready_rx.recv().unwrap();
    let id = CmId::resolve(server_addr, Some((ip[0], 0).into()), T).unwrap();
    let ctx = id.context().unwrap();
    let pd = ctx.alloc_pd().unwrap();
    let cq = ctx.create_cq(16).unwrap();
    let qp = id.create_qp(&pd, &cq, &cq, &caps(8, 4)).unwrap();
    let reply = id
        .connect(&qp, &erdma::cm::ConnParams::default(), T)
        .unwrap();
    let remote = RemoteBuffer::from_bytes(&reply).expect("the server sent its buffer");
    // The big READ takes all but the last 64 bytes; the WRITE goes to those,
    // and the small READ reads them back.
    let part = len - 64;
    let mut sink = pd
        .register(vec![0u8; part], AccessFlags::LOCAL_WRITE)
        .unwrap();
    let small = pd
        .register(vec![0u8; 64], AccessFlags::LOCAL_WRITE)
        .unwrap();
    let src = pd.register(vec![1u8; 64], AccessFlags::empty()).unwrap();
    let want = pattern(len, 11)[..part].to_vec();
    let lane = Lane::new(qp).unwrap();
    let limit = lane.send_credits();
    let mut wc = [Completion::default(); 4];
    let poll_one = |wc: &mut [Completion]| {
        let t0 = std::time::Instant::now();
        loop {
            let n = lane.poll_send(&mut wc[..1]).unwrap();
            if n == 1 {
                wc[0].ok().unwrap();
                return wc[0].wr_id();
            }
            assert!(t0.elapsed() < T, "no completion in {T:?}");
        }
    };
    for round in 0..3 {
        // Prepared each round: the sink is cleared between rounds.
        let mut read = lane
            .prepare_send(
                SendRequest::read([sink.all()], remote.slice(..part).unwrap())
                    .unsignaled()
                    .wr_id(1),
            )
            .unwrap();
        let mut write = lane
            .prepare_send(SendRequest::write([src.all()], remote.slice(part..).unwrap()).wr_id(2))
            .unwrap();
        let mut check = lane
            .prepare_send(SendRequest::read([small.all()], remote.slice(part..).unwrap()).wr_id(3))
            .unwrap();
        {
            read.post().unwrap();
            write.post().unwrap();
            assert_eq!(poll_one(&mut wc), 2, "round {round}");
            // Whenever the READ's credit is back, its data has landed.
            if lane.send_credits() == limit {
                let got = sink.to_vec();
                let wrong = got.iter().zip(&want).filter(|(a, b)| a != b).count();
                assert_eq!(
                    wrong, 0,
                    "round {round}: the READ's credit came back with the WRITE's success, \
                     {wrong} of {part} bytes of its sink not yet the peer's"
                );
            }
            assert_eq!(
                lane.send_credits(),
                limit - 1,
                "round {round}: the READ's credit is kept"
            );
            // A later READ's success proves the earlier one done.
            check.post().unwrap();
            assert_eq!(poll_one(&mut wc), 3, "round {round}");
            assert_eq!(lane.send_credits(), limit, "round {round}");
            let wrong = sink
                .to_vec()
                .iter()
                .zip(&want)
                .filter(|(a, b)| a != b)
                .count();
            assert_eq!(wrong, 0, "round {round}: {wrong} bytes not the peer's");
            assert_eq!(small.to_vec(), vec![1u8; 64], "round {round}");
            assert_eq!(
                lane.poll_send(&mut wc).unwrap(),
                0,
                "nothing else completes"
            );
        }
        drop((read, write, check));
        // Bound to the lane: never lent while it lives.
        assert!(matches!(sink.as_slice(), Err(Error::Busy { .. })));
        sink.fill(0);
    }
    let _ = id.disconnect();
    drop(lane);
    // The lane's QP is gone: the sink is lendable again.
    sink.as_slice().expect("no lane or request holds the sink");
    drop(id);
    server.join().unwrap();
}

/// Clones of one CM id on two threads race to create its QP, many times:
/// exactly one wins each time, and dropping the winner frees the id for the
/// next round (no double destroy, no QP destroyed by a value that did not
/// create it).
#[test]
#[ignore = "needs RDMA devices: run in the rig"]
fn create_qp_race_on_cloned_cm_ids() {
    let r = rig();
    let id = CmId::resolve((r.rxe_ip[1], 7311).into(), Some((r.rxe_ip[0], 0).into()), T).unwrap();
    let ctx = id.context().unwrap();
    let pd = ctx.alloc_pd().unwrap();
    let cq = ctx.create_cq(1024).unwrap();
    let rounds = 50;
    for round in 0..rounds {
        let barrier = Arc::new(Barrier::new(2));
        let handles: Vec<_> = (0..2)
            .map(|_| {
                let (id, pd, cq, barrier) = (id.clone(), pd.clone(), cq.clone(), barrier.clone());
                std::thread::spawn(move || {
                    barrier.wait();
                    id.create_qp(&pd, &cq, &cq, &caps(8, 8))
                })
            })
            .collect();
        let results: Vec<Result<QueuePair>> =
            handles.into_iter().map(|h| h.join().unwrap()).collect();
        let won = results.iter().filter(|r| r.is_ok()).count();
        assert_eq!(won, 1, "round {round}: exactly one QP per id");
        for r in &results {
            if let Err(e) = r {
                assert!(matches!(e, Error::InvalidArgument { .. }), "{e}");
                assert!(e.to_string().contains("already has a QP"), "{e}");
            }
        }
        drop(results);
        assert_eq!(
            cq.reserved(),
            0,
            "round {round}: the loser reserved nothing"
        );
    }
    // The id is still usable after all that.
    let qp = id.create_qp(&pd, &cq, &cq, &caps(8, 8)).unwrap();
    assert_eq!(cq.reserved(), 16);
    drop(qp);
    eprintln!("{rounds} rounds of two threads racing create_qp on one CM id");
}

/// A chain the device refuses part way keeps the holds of what was posted:
/// libsiw refuses a receive without a buffer, after the valid one before it.
#[test]
#[ignore = "needs RDMA devices: run in the rig"]
fn holds_kept_after_failed_post() {
    let _siw = siw_qps();
    let dev = siw_dev();
    let ctx = Context::open(&dev).unwrap();
    let pd = ctx.alloc_pd().unwrap();
    let cq = ctx.create_cq(64).unwrap();
    let qp = pd.create_rc_qp(&cq, &cq, &caps(4, 4)).unwrap();
    qp.to_init(&InitAttributes {
        port: 1,
        access: AccessFlags::LOCAL_WRITE,
        pkey_index: 0,
    })
    .unwrap();
    let mut r = pd
        .register(vec![0u8; 64], AccessFlags::LOCAL_WRITE)
        .unwrap();
    let e = qp
        .post_recv_batch([
            RecvRequest::new([r.all()]).wr_id(1),
            RecvRequest::new([]).wr_id(2),
        ])
        .unwrap_err();
    assert_eq!(e.errno(), Some(libc::EINVAL), "{e}");
    assert_eq!(qp.outstanding(), (0, 1), "the first receive was posted");
    assert_eq!(r.in_flight(), 1);
    assert!(matches!(r.as_mut_slice(), Err(Error::Busy { .. })));
    qp.to_error().unwrap();
    let wc = cq.collect(1, T).unwrap()[0];
    assert_eq!(wc.wr_id, 1);
    assert_eq!(r.in_flight(), 0);
}

/// A batch runs the caller's iterator without the QP's lock (issue 34 hole
/// 11): an iterator that panics leaves nothing recorded (before, the requests
/// it had yielded stayed recorded, never posted, holding their regions and
/// queue slots for ever), and one that uses the QP does not deadlock.
#[test]
#[ignore = "needs RDMA devices: run in the rig"]
fn batch_iterator_panics_or_reenters_the_qp() {
    let _siw = siw_qps();
    let dev = siw_dev();
    let ctx = Context::open(&dev).unwrap();
    let pd = ctx.alloc_pd().unwrap();
    let cq = ctx.create_cq(64).unwrap();
    let qp = Arc::new(pd.create_rc_qp(&cq, &cq, &caps(4, 4)).unwrap());
    qp.to_init(&InitAttributes {
        port: 1,
        access: AccessFlags::LOCAL_WRITE,
        pkey_index: 0,
    })
    .unwrap();
    let mut r = pd
        .register(vec![0u8; 64], AccessFlags::LOCAL_WRITE)
        .unwrap();
    let panicked = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        let mut n = 0;
        let it = std::iter::from_fn(|| {
            n += 1;
            assert!(n < 3, "the caller's iterator panics");
            Some(RecvRequest::new([r.all()]).wr_id(n))
        });
        qp.post_recv_batch(it)
    }));
    assert!(panicked.is_err());
    assert_eq!(qp.outstanding(), (0, 0), "nothing recorded");
    assert_eq!(r.in_flight(), 0);
    assert!(r.as_mut_slice().is_ok());

    // Re-entering the QP from the iterator: each item posts one receive of
    // its own first. Run on a thread so that a deadlock fails the test.
    let (tx, rx) = std::sync::mpsc::channel();
    let t = {
        let qp = qp.clone();
        let r = Arc::new(r);
        std::thread::spawn(move || {
            let mut k = 0u64;
            let it = std::iter::from_fn(|| {
                k += 1;
                (k <= 2).then(|| {
                    qp.post_recv(RecvRequest::new([r.all()]).wr_id(100 + k))
                        .unwrap();
                    RecvRequest::new([r.all()]).wr_id(k)
                })
            });
            let posted = qp.post_recv_batch(it);
            let _ = tx.send((posted, qp.outstanding(), r.in_flight()));
        })
    };
    let (posted, outstanding, in_flight) = rx
        .recv_timeout(Duration::from_secs(20))
        .expect("post_recv_batch deadlocked on an iterator that posts on the same QP");
    t.join().unwrap();
    posted.unwrap();
    assert_eq!(outstanding, (0, 4));
    assert_eq!(in_flight, 4);
    qp.to_error().unwrap();
    let mut ids: Vec<u64> = cq
        .collect(4, T)
        .unwrap()
        .iter()
        .map(|wc| wc.wr_id)
        .collect();
    ids.sort();
    assert_eq!(ids, [1, 2, 101, 102]);
    assert_eq!(qp.outstanding(), (0, 0));
}

/// perftest's pattern: a run of unsignaled requests closed by a signaled
/// one whose completion releases them all never fills the queue; a queue
/// that is really full is a typed error.
#[test]
#[ignore = "needs RDMA devices: run in the rig"]
fn unsignaled_runs_and_full_queue() {
    let r = rig();
    let depth = 16;
    let (a, b) = rc_pair(&r.rxe[0], &r.rxe[1], &caps(depth, 4));
    let src =
        a.pd.register(pattern(256, 3), AccessFlags::empty())
            .unwrap();
    let dst =
        b.pd.register(
            vec![0u8; 256],
            AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE,
        )
        .unwrap();
    for round in 0..30u64 {
        for i in 0..depth {
            let w = SendRequest::write([src.all()], dst.remote()).wr_id(round);
            let w = if i + 1 == depth { w } else { w.unsignaled() };
            a.qp.post_send(w).unwrap();
        }
        assert_eq!(one(&a.cq).wr_id, round);
        assert_eq!(a.qp.outstanding().0, 0, "round {round}");
    }
    for _ in 0..depth - 1 {
        a.qp.post_send(SendRequest::write([src.all()], dst.remote()).unsignaled())
            .unwrap();
    }
    a.qp.post_send(SendRequest::write([src.all()], dst.remote()).wr_id(99))
        .unwrap();
    let e =
        a.qp.post_send(SendRequest::write([src.all()], dst.remote()))
            .unwrap_err();
    assert!(
        matches!(
            e,
            Error::QueueFull {
                queue: "send",
                outstanding: 16,
                capacity: 16,
                ..
            }
        ),
        "{e}"
    );
    assert_eq!(one(&a.cq).wr_id, 99);
    assert_eq!(src.in_flight(), 0);
    assert!(dst.to_vec() == pattern(256, 3));
}

/// A CQ must hold every completion its queues can have outstanding: a QP
/// that would overrun it is refused with the size to use, and dropping a QP
/// gives its share back.
#[test]
#[ignore = "needs RDMA devices: run in the rig"]
fn cq_too_small_is_refused() {
    let r = rig();
    let ctx = Context::open(&r.rxe[0]).unwrap();
    let pd = ctx.alloc_pd().unwrap();
    let cq = ctx.create_cq(8).unwrap();
    let entries = cq.entries() as u64;
    let room = u32::try_from(entries / 2).unwrap();
    let first = pd.create_rc_qp(&cq, &cq, &caps(room, room)).unwrap();
    assert_eq!(cq.reserved(), 2 * u64::from(room));
    let e = pd.create_rc_qp(&cq, &cq, &caps(4, 4)).unwrap_err();
    assert!(matches!(e, Error::InvalidArgument { .. }), "{e}");
    assert!(e.to_string().contains("create the CQ with at least"), "{e}");
    assert_eq!(
        cq.reserved(),
        2 * u64::from(room),
        "a refused QP reserves nothing"
    );
    drop(first);
    assert_eq!(cq.reserved(), 0);
    let _second = pd.create_rc_qp(&cq, &cq, &caps(4, 4)).unwrap();
}

/// Host memory behind a [`RawBuffer`], leaked so that it outlives every
/// region made of it: the stand-in for device memory the CPU cannot read
/// (the library cannot tell them apart, and must not assume either).
fn raw_region(pd: &ProtectionDomain, len: usize) -> MemoryRegion<RawBuffer> {
    let backing: &'static mut [u8] = Box::leak(vec![7u8; len].into_boxed_slice());
    // SAFETY: leaked host memory, allocated for ever, reached only by the
    // device through the region.
    let raw = unsafe { RawBuffer::new(backing.as_mut_ptr(), backing.len()) };
    pd.register(raw, AccessFlags::empty()).unwrap()
}

/// Inline data is copied by the CPU: a region the library cannot vouch is
/// host memory (RawBuffer here; GPU and dma-buf regions alike) is refused
/// inline with a typed error, on post_send and on a lane, and still sent by
/// DMA without `.inline()`.
#[test]
#[ignore = "needs RDMA devices: run in the rig"]
fn inline_from_non_host_region_is_refused() {
    let r = rig();
    let caps = QpCapabilities {
        max_inline_data: 64,
        ..caps(16, 16)
    };
    let (a, b) = rc_pair(&r.rxe[0], &r.rxe[1], &caps);
    let dst =
        b.pd.register(
            vec![0u8; 64],
            AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE,
        )
        .unwrap();
    let raw = raw_region(&a.pd, 64);
    assert!(!raw.is_cpu_readable());
    let host = a.pd.register(vec![1u8; 64], AccessFlags::empty()).unwrap();
    assert!(host.is_cpu_readable());
    let e =
        a.qp.post_send(SendRequest::write([host.all(), raw.all()], dst.remote()).inline())
            .unwrap_err();
    assert!(matches!(e, Error::NotHostMemory { .. }), "{e}");
    assert!(e.to_string().contains("local buffer 1"), "{e}");
    assert_eq!(raw.in_flight(), 0, "nothing was posted");
    // Without inline the NIC reads it by DMA: fine.
    a.qp.post_send(SendRequest::write([raw.all()], dst.remote()))
        .unwrap();
    one(&a.cq);
    assert_eq!(dst.to_vec(), vec![7u8; 64]);
    // A lane checks the same when the request is prepared.
    let lane = Lane::new(a.qp).unwrap();
    let e = lane
        .prepare_send(SendRequest::send([raw.slice(..8).unwrap()]).inline())
        .unwrap_err();
    assert!(matches!(e, Error::NotHostMemory { .. }), "{e}");
    assert!(
        lane.prepare_send(SendRequest::send([host.slice(..8).unwrap()]).inline())
            .is_ok()
    );
}

/// A QP dropped by its owner while another thread polls its CQ: the poller
/// may hold the last reference, and the QP's drop (which detaches it from
/// the CQ) must not run under the CQ's lock. Many rounds, bounded time, and
/// every QP destroyed (the CQ's reservations all returned).
#[test]
#[ignore = "needs RDMA devices: run in the rig"]
fn qp_dropped_while_its_cq_is_polled() {
    let _siw = siw_qps();
    let dev = siw_dev();
    let ctx = Context::open(&dev).unwrap();
    let pd = ctx.alloc_pd().unwrap();
    let cq = ctx.create_cq(64).unwrap();
    let init = InitAttributes {
        port: 1,
        access: AccessFlags::LOCAL_WRITE,
        pkey_index: 0,
    };
    let buf = pd
        .register(vec![0u8; 64], AccessFlags::LOCAL_WRITE)
        .unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let poller = {
        let (cq, stop) = (cq.clone(), stop.clone());
        std::thread::spawn(move || {
            let mut wcs = [WorkCompletion::default(); 8];
            let mut seen = 0usize;
            while !stop.load(Ordering::Acquire) {
                seen += cq.poll(&mut wcs).unwrap();
            }
            seen
        })
    };
    let rounds = 2000;
    let (done_tx, done_rx) = std::sync::mpsc::channel();
    let driver = {
        let cq = cq.clone();
        std::thread::spawn(move || {
            for _ in 0..rounds {
                let qp = pd.create_rc_qp(&cq, &cq, &caps(4, 4)).unwrap();
                qp.to_init(&init).unwrap();
                qp.post_recv(RecvRequest::new([buf.all()])).unwrap();
                // The flush completion lands while the poller spins, and
                // the owner drops the QP at about the same time.
                qp.to_error().unwrap();
                drop(qp);
            }
            done_tx.send(()).unwrap();
        })
    };
    let finished = done_rx.recv_timeout(Duration::from_secs(300));
    stop.store(true, Ordering::Release);
    assert!(
        finished.is_ok(),
        "{rounds} rounds did not finish in 300 s: a QP drop deadlocked against the poller"
    );
    driver.join().unwrap();
    let seen = poller.join().unwrap();
    // The last QPs' leftovers keep their room until a poll has taken them
    // or found the CQ empty (issue 34 hole 10).
    let mut wcs = [WorkCompletion::default(); 8];
    for _ in 0..3 {
        assert_eq!(cq.poll(&mut wcs).unwrap(), 0, "only stale completions");
    }
    assert_eq!(cq.reserved(), 0, "every QP was destroyed");
    eprintln!("{rounds} QPs dropped while polled; {seen} completions reported");
}

/// One clone of a CM id creates and drops its QP in a loop while another
/// connects with a QP that is not the id's: the check reads the id's QP
/// under the lock its writers hold, and refuses every time with a typed
/// error.
/// The QP a CQ's polls found last is kept by the CQ between polls (a share
/// of it: `cq/cache.rs`), and a QP keeps its CQs: dropping the QP must still
/// destroy it (its room in the CQ given back), round after round, with the
/// poll that cached it long returned.
#[test]
#[ignore = "needs RDMA devices: run in the rig"]
fn qp_cached_by_its_cq_is_destroyed_when_dropped() {
    let _siw = siw_qps();
    let dev = siw_dev();
    let ctx = Context::open(&dev).unwrap();
    let pd = ctx.alloc_pd().unwrap();
    let cq = ctx.create_cq(16).unwrap();
    let init = InitAttributes {
        port: 1,
        access: AccessFlags::LOCAL_WRITE,
        pkey_index: 0,
    };
    let buf = pd
        .register(vec![0u8; 64], AccessFlags::LOCAL_WRITE)
        .unwrap();
    let mut wcs = [WorkCompletion::default(); 4];
    for round in 0..3u64 {
        let qp = pd.create_rc_qp(&cq, &cq, &caps(4, 4)).unwrap();
        qp.to_init(&init).unwrap();
        qp.post_recv(RecvRequest::new([buf.all()]).wr_id(round))
            .unwrap();
        qp.to_error().unwrap();
        // Its completion polled: the CQ now keeps the QP.
        let n = cq.wait(&mut wcs, Duration::from_secs(10)).unwrap();
        assert_eq!(n, 1);
        assert_eq!((wcs[0].wr_id, wcs[0].status), (round, WcStatus::WrFlushErr));
        assert!(cq.reserved() > 0);
        drop(qp);
        assert_eq!(cq.poll(&mut wcs).unwrap(), 0);
        assert_eq!(
            cq.reserved(),
            0,
            "round {round}: the QP the CQ kept was not destroyed when dropped"
        );
    }
}

#[test]
#[ignore = "needs RDMA devices: run in the rig"]
fn connect_check_while_a_clone_creates_qps() {
    let r = rig();
    let id = CmId::resolve((r.rxe_ip[1], 7313).into(), Some((r.rxe_ip[0], 0).into()), T).unwrap();
    let ctx = id.context().unwrap();
    let pd = ctx.alloc_pd().unwrap();
    let cq = ctx.create_cq(1024).unwrap();
    let foreign = pd.create_rc_qp(&cq, &cq, &caps(4, 4)).unwrap();
    let rounds = 300;
    let creator = {
        let (id, pd, cq) = (id.clone(), pd.clone(), cq.clone());
        std::thread::spawn(move || {
            for _ in 0..rounds {
                drop(id.create_qp(&pd, &cq, &cq, &caps(4, 4)).unwrap());
            }
        })
    };
    let mut refused = 0;
    while !creator.is_finished() || refused < rounds {
        let e = id
            .connect(&foreign, &erdma::cm::ConnParams::default(), T)
            .unwrap_err();
        assert!(matches!(e, Error::InvalidArgument { .. }), "{e}");
        refused += 1;
    }
    creator.join().unwrap();
    eprintln!("{refused} connects with a foreign QP refused while {rounds} QPs came and went");
}

/// A failed deregistration (injected: no device refuses one at will) leaves
/// the region whole and registered: it can still be used, read, retried;
/// no half-deregistered region exists.
#[cfg(feature = "fault-injection")]
#[test]
#[ignore = "needs RDMA devices: run in the rig"]
fn failed_deregistration_leaves_the_region_whole() {
    let r = rig();
    let (a, b) = rc_pair(&r.rxe[0], &r.rxe[1], &caps(16, 16));
    let dst =
        b.pd.register(
            vec![0u8; 64],
            AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE,
        )
        .unwrap();
    let src = a.pd.register(pattern(64, 5), AccessFlags::empty()).unwrap();
    let lkey = src.lkey();
    erdma::fault::inject_dereg_failures(1);
    let (mut src, e) = src.into_inner().unwrap_err();
    assert_eq!(e.errno(), Some(libc::EBUSY), "{e}");
    assert!(e.to_string().contains("still registered"), "{e}");
    assert_eq!(src.lkey(), lkey);
    assert_eq!(src.as_slice().unwrap(), &pattern(64, 5)[..]);
    // Still registered: the NIC still reads it.
    a.qp.post_send(SendRequest::write([src.all()], dst.remote()))
        .unwrap();
    one(&a.cq);
    assert_eq!(dst.to_vec(), pattern(64, 5));
    // The retry deregisters and hands the buffer back.
    let back = src.into_inner().unwrap();
    assert_eq!(back, pattern(64, 5));
    // A failure in drop leaks the buffer rather than freeing it.
    let leaked = a.pd.register(vec![3u8; 64], AccessFlags::empty()).unwrap();
    erdma::fault::inject_dereg_failures(1);
    drop(leaked);
}

/// Posts `send` (unsignaled) until the lane refuses it for want of credits
/// (waiting while the send queue is full), has `fail` move the QP to error,
/// then drains the send CQ until no completion comes for a second: a QP in
/// error completes each request still queued (an error or a flush), the
/// lane's credits must have left room for all of them, and each credit
/// comes back with its request's completion. A request that succeeded
/// before the error completes without one (it is unsignaled): its credit
/// stays taken, as no later signaled send proves it done. A lost completion
/// (an overrun CQ drops it) shows as a credit count that does not add up.
/// Returns (posted, completions).
fn unsignaled_sends_flush(
    lane: &Lane,
    send: &mut PreparedSend<'_>,
    fail: impl FnOnce(),
    what: &str,
) -> (u32, u32) {
    let limit = lane.send_credits();
    let t0 = std::time::Instant::now();
    let mut posted = 0u32;
    let e = loop {
        assert!(t0.elapsed() < T, "{what}: {posted} posts in {T:?}");
        match send.post() {
            Ok(()) => posted += 1,
            Err(e) if e.errno() == Some(libc::ENOMEM) => {
                std::thread::sleep(Duration::from_millis(10))
            }
            Err(e) => break e,
        }
    };
    assert!(matches!(e, Error::QueueFull { .. }), "{what}: {e}");
    assert_eq!((posted, lane.send_credits()), (limit, 0), "{what}");
    fail();
    let mut wc = vec![Completion::default(); 2 * limit as usize];
    let mut got = 0;
    let mut last = std::time::Instant::now();
    while got < posted as usize && last.elapsed() < Duration::from_secs(5) {
        let n = lane.poll_send(&mut wc[got..]).unwrap();
        if n > 0 {
            got += n;
            last = std::time::Instant::now();
        }
        assert!(
            t0.elapsed() < 2 * T,
            "{what}: {got} of {posted} completions"
        );
    }
    std::thread::sleep(Duration::from_millis(200));
    got += lane.poll_send(&mut wc[got..]).unwrap();
    assert!(
        got <= posted as usize,
        "{what}: {got} completions of {posted} requests"
    );
    assert!(
        wc[..got].iter().all(|c| !c.is_ok()),
        "{what}: unsignaled, so errors only"
    );
    let flushed = wc[..got]
        .iter()
        .filter(|c| c.status() == WcStatus::WrFlushErr)
        .count();
    assert!(flushed + 1 >= got, "{what}: {flushed} of {got} flushed");
    assert_eq!(
        lane.send_credits(),
        limit - (posted - got as u32),
        "{what}: a credit back per completion, none for the requests that succeeded silently"
    );
    eprintln!("{what}: {posted} unsignaled sends, {got} completions ({flushed} flushed)");
    (posted, got as u32)
}

/// Issue 22, hole 10: a lane whose peer stopped answering, its send queue
/// full of unsignaled RDMA WRITEs (none of which would complete on
/// success): the retries run out, the QP goes to error, and each request
/// flushes into a send CQ exactly as large as the lane's credits.
#[test]
#[ignore = "needs RDMA devices: run in the rig"]
fn rxe_lane_flushes_a_full_queue_of_unsignaled_sends() {
    let r = rig();
    let depth = 16;
    let a = side_with_cq(&r.rxe[0], &caps(depth, 4), |ctx| ctx.create_cq(depth));
    let b = side(&r.rxe[1], &caps(depth, 4));
    let opts = ConnectOptions {
        timeout: 10,
        retry_cnt: 1,
        ..Default::default()
    };
    let (ea, eb) = (
        a.qp.endpoint(&a.gid).unwrap(),
        b.qp.endpoint(&b.gid).unwrap(),
    );
    a.qp.connect(&ea, &eb, &opts).unwrap();
    b.qp.connect(&eb, &ea, &opts).unwrap();
    let dst =
        b.pd.register(
            vec![0u8; 64],
            AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE,
        )
        .unwrap();
    let src = a.pd.register(pattern(64, 1), AccessFlags::empty()).unwrap();
    // The peer stops answering: every WRITE is retried, then fails.
    b.qp.to_error().unwrap();
    let lane = Lane::new(a.qp).unwrap();
    let lane_limit = lane.send_credits();
    assert_eq!(lane_limit, a.cq.entries());
    let mut w = lane
        .prepare_send(SendRequest::write([src.all()], dst.remote()).unsignaled())
        .unwrap();
    // The retries run out by themselves; none succeeded, so every request
    // completes and every credit comes back.
    let (posted, got) = unsignaled_sends_flush(&lane, &mut w, || (), "rxe");
    assert_eq!(got, posted, "one completion per request");
    assert_eq!(lane.send_credits(), lane_limit);
    assert_eq!(lane.query_state().unwrap(), QpState::Err);
}

/// The same on siw over RDMA CM, with RDMA READs of 256 KiB: siw completes
/// a WRITE once it has sent it (iWARP acknowledges nothing), so unsignaled
/// WRITEs leave the queue at once, while a READ waits for its response.
/// The QP is moved to error (`ibv_modify_qp`, as a failing device would)
/// with the queue full: the READs not done by then flush, each into a
/// credit it holds. (siw 6.1 flushes nothing queued behind a terminated
/// stream, after a wrong rkey, nor after rdma_disconnect, which moves an
/// iWARP QP to SQD: such READs stay queued, and keep their credits.)
#[test]
#[ignore = "needs RDMA devices: run in the rig"]
fn siw_lane_flushes_a_full_queue_of_unsignaled_sends() {
    let _siw = siw_qps();
    let r = rig();
    let ip = r.siw_ip.expect("the rig has siw0/siw1");
    let depth = 16;
    let server_addr: std::net::SocketAddr = (ip[1], 7315).into();
    let (ready_tx, ready_rx) = std::sync::mpsc::channel();
    let server = std::thread::spawn(move || {
        let l = erdma::cm::CmListener::bind(server_addr).unwrap();
        ready_tx.send(()).unwrap();
        let req = l.get_request(T).unwrap();
        let ctx = req.context().unwrap();
        let pd = ctx.alloc_pd().unwrap();
        let cq = ctx.create_cq(64).unwrap();
        let qp = req.create_qp(&pd, &cq, &cq, &caps(depth, 4)).unwrap();
        let exposed = pd
            .register(
                vec![5u8; 256 << 10],
                AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_READ,
            )
            .unwrap();
        let params = erdma::cm::ConnParams {
            private_data: exposed.remote().to_bytes().to_vec(),
            ..Default::default()
        };
        let id = req.accept(&qp, &params, T).unwrap();
        // The client's QP errs; its connection closes.
        let _ = id.wait_disconnect(T);
    });
    ready_rx.recv().unwrap();
    let id = CmId::resolve(server_addr, Some((ip[0], 0).into()), T).unwrap();
    let ctx = id.context().unwrap();
    let pd = ctx.alloc_pd().unwrap();
    let (scq, rcq) = (ctx.create_cq(depth).unwrap(), ctx.create_cq(4).unwrap());
    let qp = id.create_qp(&pd, &scq, &rcq, &caps(depth, 4)).unwrap();
    let reply = id
        .connect(&qp, &erdma::cm::ConnParams::default(), T)
        .unwrap();
    let remote = RemoteBuffer::from_bytes(&reply).expect("the server sent its buffer");
    let dst = pd
        .register(vec![0u8; 256 << 10], AccessFlags::LOCAL_WRITE)
        .unwrap();
    let raw = qp.as_raw();
    let lane = Lane::new(qp).unwrap();
    let limit = lane.send_credits();
    assert_eq!(limit, scq.entries());
    let to_error = || {
        let mut attr = erdma::sys::ibv_qp_attr {
            qp_state: erdma::sys::IBV_QPS_ERR,
            ..Default::default()
        };
        let lib = erdma::sys::ibverbs().unwrap();
        // SAFETY: the lane's QP, alive while the lane is; a move to ERR is
        // the failure this test stands for (the lane never changes state).
        let rc = unsafe { lib.ibv_modify_qp(raw, &mut attr, erdma::sys::IBV_QP_STATE as i32) };
        assert_eq!(rc, 0, "ibv_modify_qp(ERR)");
    };
    let mut w = lane
        .prepare_send(SendRequest::read([dst.all()], remote).unsignaled())
        .unwrap();
    let (posted, got) = unsignaled_sends_flush(&lane, &mut w, to_error, "siw");
    assert!(got > 0, "the READs queued when the QP went to error flush");
    assert_eq!(lane.send_credits(), limit - (posted - got));
    drop(w);
    let _ = id.disconnect();
    drop(lane);
    drop(id);
    server.join().unwrap();
}
