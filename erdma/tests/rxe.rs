//! Soft-RoCE (rxe0 <-> rxe1 on a veth pair, RoCE v2) with real traffic,
//! data checked byte for byte. Run in the rig: rig/test.sh.

mod common;

use common::*;
use erdma::*;

const RIG: &str = "needs RDMA devices: run in the rig";

#[test]
#[ignore = "needs RDMA devices: run in the rig"]
fn send_recv_smoke() {
    let _ = RIG;
    let r = rig();
    let (a, b) = rc_pair(&r.rxe[0], &r.rxe[1], &QpCapabilities::default());
    let data = pattern(4096, 1);
    let src =
        a.pd.register(data.clone(), AccessFlags::LOCAL_WRITE)
            .unwrap();
    let mut dst =
        b.pd.register(vec![0u8; 4096], AccessFlags::LOCAL_WRITE)
            .unwrap();
    b.qp.post_recv(RecvRequest::new([dst.all()]).wr_id(7))
        .unwrap();
    a.qp.post_send(SendRequest::send([src.all()]).wr_id(9))
        .unwrap();
    let s = one(&a.cq);
    assert_eq!(s.wr_id, 9);
    let rcv = one(&b.cq);
    assert_eq!(
        (rcv.wr_id, rcv.byte_len, rcv.opcode),
        (7, 4096, WcOpcode::Recv)
    );
    assert_eq!(dst.as_slice().unwrap(), &data[..]);
}
