//! Soft-iWARP (siw0 <-> siw1 on their own veth pair): iWARP devices connect
//! only through RDMA CM (like eRDMA in its default mode), then RDMA WRITE,
//! READ and SEND with data checked byte for byte. Run in the rig.

mod common;

use std::net::SocketAddr;
use std::sync::mpsc;
use std::time::{Duration, Instant};

use common::*;
use erdma::cm::{CmId, CmListener, ConnParams};
use erdma::*;

fn siw() -> ([String; 2], [std::net::IpAddr; 2]) {
    let r = rig();
    match (r.siw, r.siw_ip) {
        (Some(d), Some(ip)) => (d, ip),
        _ => panic!("ERDMA_RIG_SIW is empty: the rig ran without --siw"),
    }
}

#[test]
#[ignore = "needs RDMA devices: run in the rig"]
fn siw_attributes() {
    let (dev, _) = siw();
    let ctx = Context::open(&dev[0]).unwrap();
    assert_eq!(ctx.transport(), Transport::Iwarp);
    assert_eq!(ctx.protocol(1).unwrap(), Protocol::Iwarp);
    let a = ctx.attributes();
    assert_eq!(a.atomic_cap(), AtomicCap::None);
    assert!(!a.supports_atomics());
    assert_eq!(a.max_sge_rd(), 1);
    let p = ctx.port(1).unwrap();
    assert_eq!(p.state(), PortState::Active);
    assert_eq!(p.gid_tbl_len(), 1);
    let g = ctx.select_gid(1, None).unwrap();
    assert_eq!((g.index, g.gid_type), (0, GidType::Iwarp));
    assert_eq!(
        g.netdev.as_deref(),
        Some("veth2"),
        "found through the MAC in the GID"
    );
    // A GID-based modify_qp cannot connect iWARP: a typed error, not EINVAL.
    let pd = ctx.alloc_pd().unwrap();
    let cq = ctx.create_cq(256).unwrap();
    let qp = pd
        .create_rc_qp(&cq, &cq, &QpCapabilities::default())
        .unwrap();
    let ep = qp.endpoint(&g).unwrap();
    let e = qp
        .connect(&ep, &ep, &ConnectOptions::default())
        .unwrap_err();
    assert!(matches!(e, Error::Unsupported { .. }), "{e}");
    assert!(e.to_string().contains("RDMA CM"), "{e}");
}

/// What the server side reports back to the test thread.
struct Server {
    remote: RemoteBuffer,
}

#[test]
#[ignore = "needs RDMA devices: run in the rig"]
fn siw_cm_write_read_send() {
    let (_, ip) = siw();
    let server_addr: SocketAddr = (ip[1], 7471).into();
    let n = 1 << 20;
    let (ready_tx, ready_rx) = mpsc::channel();
    let (done_tx, done_rx) = mpsc::channel::<()>();
    let server = std::thread::spawn(move || {
        let l = CmListener::bind(server_addr).unwrap();
        ready_tx.send(()).unwrap();
        let req = l.get_request(T).unwrap();
        let client_buf =
            RemoteBuffer::from_bytes(req.private_data()).expect("client sent its buffer");
        let ctx = req.context().unwrap();
        assert_eq!(ctx.transport(), Transport::Iwarp);
        let pd = ctx.alloc_pd().unwrap();
        let cq = ctx.create_cq(256).unwrap();
        let qp = req
            .create_qp(&pd, &cq, &cq, &QpCapabilities::default())
            .unwrap();
        // Exposed region: the client writes into its first half and reads
        // its second half.
        let mut exposed = pd
            .register(
                vec![0u8; 2 * n],
                AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE | AccessFlags::REMOTE_READ,
            )
            .unwrap();
        exposed.write_at(n, &pattern(n, 21)).unwrap();
        let mut inbox = pd
            .register(vec![0u8; 4096], AccessFlags::LOCAL_WRITE)
            .unwrap();
        qp.post_recv(RecvRequest::new([inbox.all()]).wr_id(1))
            .unwrap();
        let params = ConnParams {
            private_data: exposed.remote().to_bytes().to_vec(),
            ..Default::default()
        };
        let id = req.accept(&qp, &params, T).unwrap();
        assert_eq!(qp.state(), QpState::Rts);
        // The client SENDs after its WRITE: when the SEND is here, so is the data.
        let wc = one(&cq);
        assert_eq!((wc.wr_id, wc.byte_len), (1, 4096));
        assert_eq!(inbox.as_slice().unwrap(), &pattern(4096, 23)[..]);
        assert!(
            exposed.to_vec()[..n] == pattern(n, 22)[..],
            "RDMA WRITE data"
        );
        // Server-initiated WRITE into the client's buffer.
        let src = pd
            .register(pattern(1000, 24), AccessFlags::empty())
            .unwrap();
        qp.post_send(SendRequest::write(
            [src.all()],
            client_buf.slice(..1000).unwrap(),
        ))
        .unwrap();
        one(&cq);
        done_tx.send(()).unwrap();
        id.wait_disconnect(T).unwrap();
        Server {
            remote: exposed.remote(),
        }
    });
    ready_rx.recv().unwrap();
    let id = CmId::resolve(server_addr, Some((ip[0], 0).into()), T).unwrap();
    let ctx = id.context().unwrap();
    assert_eq!(ctx.transport(), Transport::Iwarp);
    let pd = ctx.alloc_pd().unwrap();
    let cq = ctx.create_cq(256).unwrap();
    let qp = id
        .create_qp(&pd, &cq, &cq, &QpCapabilities::default())
        .unwrap();
    let mine = pd
        .register(
            vec![0u8; n],
            AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE,
        )
        .unwrap();
    let params = ConnParams {
        private_data: mine.remote().to_bytes().to_vec(),
        ..Default::default()
    };
    let t0 = Instant::now();
    let reply = id.connect(&qp, &params, T).unwrap();
    let remote = RemoteBuffer::from_bytes(&reply).expect("server sent its buffer");
    assert_eq!(qp.state(), QpState::Rts);
    // RDMA WRITE 1 MiB, then READ 1 MiB back from the other half.
    let src = pd.register(pattern(n, 22), AccessFlags::empty()).unwrap();
    qp.post_send(SendRequest::write([src.all()], remote.slice(..n).unwrap()))
        .unwrap();
    assert_eq!(one(&cq).opcode, WcOpcode::RdmaWrite);
    let mut back = pd.register(vec![0u8; n], AccessFlags::LOCAL_WRITE).unwrap();
    qp.post_send(SendRequest::read([back.all()], remote.slice(n..).unwrap()))
        .unwrap();
    assert_eq!(one(&cq).opcode, WcOpcode::RdmaRead);
    assert!(
        back.as_slice().unwrap() == &pattern(n, 21)[..],
        "RDMA READ data"
    );
    // SEND.
    let msg = pd
        .register(pattern(4096, 23), AccessFlags::empty())
        .unwrap();
    qp.post_send(SendRequest::send([msg.all()])).unwrap();
    assert_eq!(one(&cq).opcode, WcOpcode::Send);
    // iWARP (siw) has no immediate data: a typed error, the QP still usable.
    let e = qp
        .post_send(SendRequest::write_with_imm(
            [msg.all()],
            remote.slice(..4096).unwrap(),
            1,
        ))
        .unwrap_err();
    assert!(matches!(e, Error::Unsupported { .. }), "{e}");
    // libsiw refuses receives without a buffer (EINVAL, with a hint).
    let e = qp.post_recv(RecvRequest::new([])).unwrap_err();
    assert_eq!(e.errno(), Some(libc::EINVAL), "{e}");
    assert!(e.to_string().contains("scatter/gather entry"), "{e}");
    // siw limits, as typed errors before posting: no atomics, one READ entry.
    let mut eight = pd
        .register(AlignedBuffer::new(8).unwrap(), AccessFlags::LOCAL_WRITE)
        .unwrap();
    let e = qp
        .post_send(SendRequest::fetch_add(
            eight.all(),
            remote.slice(..8).unwrap(),
            1,
        ))
        .unwrap_err();
    assert!(matches!(e, Error::Unsupported { .. }), "{e}");
    let e = qp
        .post_send(SendRequest::read(
            [back.slice(..10).unwrap(), back.slice(10..20).unwrap()],
            remote.slice(n..n + 20).unwrap(),
        ))
        .unwrap_err();
    assert!(e.to_string().contains("max_sge_rd"), "{e}");
    assert!(eight.as_mut_slice().is_ok());
    done_rx.recv_timeout(T).unwrap();
    assert_eq!(&mine.to_vec()[..1000], &pattern(1000, 24)[..]);
    eprintln!(
        "siw CM connect + 2 MiB write/read + send: {:?}",
        t0.elapsed()
    );
    id.disconnect().unwrap();
    let s = server.join().unwrap();
    assert_eq!(s.remote, remote);
}

#[test]
#[ignore = "needs RDMA devices: run in the rig"]
fn siw_cm_errors() {
    let (_, ip) = siw();
    // Nobody listens on this port: rejected (or unreachable), not a hang.
    let id = CmId::resolve((ip[1], 7999).into(), Some((ip[0], 0).into()), T).unwrap();
    let ctx = id.context().unwrap();
    let pd = ctx.alloc_pd().unwrap();
    let cq = ctx.create_cq(512).unwrap();
    let qp = id
        .create_qp(&pd, &cq, &cq, &QpCapabilities::default())
        .unwrap();
    let t0 = Instant::now();
    let e = id
        .connect(&qp, &ConnParams::default(), Duration::from_secs(30))
        .unwrap_err();
    // iWARP refuses synchronously (TCP), RoCE with a REJECTED event.
    assert!(
        matches!(
            e,
            Error::Cm { .. }
                | Error::Verb {
                    errno: libc::ECONNREFUSED,
                    ..
                }
        ),
        "{e}"
    );
    assert!(e.to_string().contains("start the server side first"), "{e}");
    assert!(t0.elapsed() < Duration::from_secs(31));
    // An address no RDMA device owns.
    let e = CmId::resolve(
        "192.0.2.1:7471".parse().unwrap(),
        Some("192.0.2.2:0".parse().unwrap()),
        T,
    );
    assert!(e.is_err());
    // Too much private data.
    let p = ConnParams {
        private_data: vec![0; 100],
        ..Default::default()
    };
    assert!(matches!(
        id.connect(&qp, &p, T),
        Err(Error::InvalidArgument { .. })
    ));
    // A QP that is not the id's.
    let other = pd
        .create_rc_qp(&cq, &cq, &QpCapabilities::default())
        .unwrap();
    assert!(id.connect(&other, &ConnParams::default(), T).is_err());
}
