//! Two separate processes connect rxe0 <-> rxe1 through the TCP endpoint
//! exchange (what two hosts do), then RDMA WRITE_WITH_IMM one way and SEND
//! the other, data checked. The test re-runs its own binary as the two peers.
//! Run in the rig.

mod common;

use std::process::Command;
use std::time::Duration;

use common::*;
use erdma::exchange::{Exchange, ExchangeListener};
use erdma::*;

const ROLE: &str = "ERDMA_TEST_PEER_ROLE";
const PORT: u16 = 18515;
const N: usize = 1 << 20;

#[test]
#[ignore = "needs RDMA devices: run in the rig"]
fn two_processes_tcp_exchange() {
    match std::env::var(ROLE).as_deref() {
        Ok("server") => return server(),
        Ok("client") => return client(),
        _ => {}
    }
    let r = rig();
    let exe = std::env::current_exe().unwrap();
    let spawn = |role: &str| {
        Command::new(&exe)
            .args([
                "--exact",
                "two_processes_tcp_exchange",
                "--include-ignored",
                "--nocapture",
            ])
            .env(ROLE, role)
            .spawn()
            .unwrap()
    };
    let _ = r;
    let mut s = spawn("server");
    let mut c = spawn("client");
    let cs = c.wait().unwrap();
    let ss = s.wait().unwrap();
    assert!(cs.success(), "client process failed: {cs}");
    assert!(ss.success(), "server process failed: {ss}");
}

fn server() {
    let r = rig();
    let s = side(&r.rxe[1], &QpCapabilities::default());
    let inbox =
        s.pd.register(
            vec![0u8; N],
            AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE,
        )
        .unwrap();
    let mut local = s.qp.endpoint(&s.gid).unwrap();
    local.buffers.push(inbox.remote());
    let l = ExchangeListener::bind(&format!("{}:{PORT}", r.rxe_ip[1])).unwrap();
    let mut x = l.accept(T).unwrap();
    let remote: Endpoint = x.swap(&local).unwrap();
    s.qp.connect(&local, &remote, &ConnectOptions::default())
        .unwrap();
    s.qp.post_recv(RecvRequest::new([]).wr_id(1)).unwrap();
    x.barrier().unwrap();
    // The client's WRITE_WITH_IMM: data placed, immediate = length.
    let wc = one(&s.cq);
    assert_eq!(
        (wc.opcode, wc.imm_data),
        (WcOpcode::RecvRdmaWithImm, Some(N as u32))
    );
    // The client may write the inbox (REMOTE_WRITE): it is read by copy.
    let got = inbox.to_vec();
    assert!(got == pattern(N, 31));
    // Reply with a SEND of the first 4 KiB, reversed.
    let mut reply: Vec<u8> = got[..4096].to_vec();
    reply.reverse();
    let reply = s.pd.register(reply, AccessFlags::empty()).unwrap();
    s.qp.post_send(SendRequest::send([reply.all()])).unwrap();
    one(&s.cq);
    x.barrier().unwrap();
}

fn client() {
    let r = rig();
    let s = side(&r.rxe[0], &QpCapabilities::default());
    let src = s.pd.register(pattern(N, 31), AccessFlags::empty()).unwrap();
    let mut back =
        s.pd.register(vec![0u8; 4096], AccessFlags::LOCAL_WRITE)
            .unwrap();
    let local = s.qp.endpoint(&s.gid).unwrap();
    let mut x = Exchange::connect(&format!("{}:{PORT}", r.rxe_ip[1]), T).unwrap();
    let remote: Endpoint = x.swap(&local).unwrap();
    assert_eq!(remote.buffers.len(), 1);
    s.qp.connect(&local, &remote, &ConnectOptions::default())
        .unwrap();
    s.qp.post_recv(RecvRequest::new([back.all()])).unwrap();
    x.barrier().unwrap();
    s.qp.post_send(SendRequest::write_with_imm(
        [src.all()],
        remote.buffers[0],
        N as u32,
    ))
    .unwrap();
    assert_eq!(one(&s.cq).opcode, WcOpcode::RdmaWrite);
    let wc = s.cq.collect(1, T).unwrap()[0];
    wc.ok().unwrap();
    assert_eq!((wc.opcode, wc.byte_len), (WcOpcode::Recv, 4096));
    let mut want = pattern(N, 31)[..4096].to_vec();
    want.reverse();
    assert_eq!(back.as_slice().unwrap(), &want[..]);
    x.set_timeout(Duration::from_secs(60)).unwrap();
    x.barrier().unwrap();
}
