// Inside an NCCL group an operation is only recorded, and launched at
// Group::end: the group keeps its buffers borrowed until then, so a buffer
// cannot be freed in between.
use erdma::cuda::{DeviceBuffer, Stream};
use erdma::nccl::{Comm, Group, Nccl, RedOp};

fn grouped(nccl: &'static Nccl, comm: &Comm, send: DeviceBuffer<f32>, stream: &Stream) {
    let mut recv = DeviceBuffer::<f32>::alloc(send.device(), send.len()).unwrap();
    let group = Group::start(nccl).unwrap();
    group
        .all_reduce(comm, &send, &mut recv, RedOp::SUM, stream)
        .unwrap();
    drop(send);
    group.end().unwrap();
}

fn main() {}
