// A prepared request borrows its lane: it cannot be kept once the lane (its
// QP, and the regions bound to it) is gone.
use erdma::{Lane, PreparedSend, SendRequest};

fn keep(lane: Lane, request: SendRequest<'static>) -> PreparedSend<'static> {
    lane.prepare_send(request).unwrap()
}

fn main() {}
