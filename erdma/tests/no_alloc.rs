//! Posting and polling do not allocate in the steady state (rig test): a
//! counting allocator sees no allocation on the posting thread over
//! thousands of requests once the queues have been used once.

mod common;

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::sync::atomic::{AtomicUsize, Ordering};

use common::*;
use erdma::*;

struct Counting;

static ALLOCS: AtomicUsize = AtomicUsize::new(0);

thread_local! {
    static COUNTING: Cell<bool> = const { Cell::new(false) };
}

// SAFETY: forwards to the system allocator; counting has no side effect on
// the memory returned.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        if COUNTING.with(Cell::get) {
            ALLOCS.fetch_add(1, Ordering::Relaxed);
        }
        // SAFETY: the caller's contract, forwarded.
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: the caller's contract, forwarded.
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new: usize) -> *mut u8 {
        if COUNTING.with(Cell::get) {
            ALLOCS.fetch_add(1, Ordering::Relaxed);
        }
        // SAFETY: the caller's contract, forwarded.
        unsafe { System.realloc(ptr, layout, new) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

fn spin_one(cq: &CompletionQueue, wc: &mut [WorkCompletion; 4]) {
    loop {
        let n = cq.poll(&mut wc[..1]).unwrap();
        if n == 1 {
            wc[0].ok().unwrap();
            return;
        }
    }
}

#[test]
#[ignore = "needs RDMA devices: run in the rig"]
fn posting_and_polling_do_not_allocate() {
    let r = rig();
    let caps = QpCapabilities {
        max_send_wr: 64,
        max_recv_wr: 64,
        max_send_sge: 2,
        max_recv_sge: 1,
        max_inline_data: 32,
    };
    let (a, b) = rc_pair(&r.rxe[0], &r.rxe[1], &caps);
    let src =
        a.pd.register(pattern(4096, 1), AccessFlags::empty())
            .unwrap();
    let dst =
        b.pd.register(
            vec![0u8; 4096],
            AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE,
        )
        .unwrap();
    let rbuf =
        b.pd.register(vec![0u8; 4096], AccessFlags::LOCAL_WRITE)
            .unwrap();
    let remote = dst.remote();
    let mut wc = [WorkCompletion::default(); 4];
    let round = |wc: &mut [WorkCompletion; 4]| {
        // An inline WRITE, a WRITE of two gathered slices, a receive and a
        // SEND, and a batch of three unsignaled WRITEs closed by a signaled one.
        a.qp.post_send(SendRequest::write([src.slice(..8).unwrap()], remote).inline())
            .unwrap();
        spin_one(&a.cq, wc);
        a.qp.post_send(SendRequest::write(
            [src.slice(..100).unwrap(), src.slice(200..300).unwrap()],
            remote,
        ))
        .unwrap();
        spin_one(&a.cq, wc);
        b.qp.post_recv(RecvRequest::new([rbuf.slice(..64).unwrap()]))
            .unwrap();
        a.qp.post_send(SendRequest::send([src.slice(..64).unwrap()]))
            .unwrap();
        spin_one(&a.cq, wc);
        spin_one(&b.cq, wc);
        let w = || SendRequest::write([src.slice(..512).unwrap()], remote);
        a.qp.post_send_batch([w().unsignaled(), w().unsignaled(), w().unsignaled(), w()])
            .unwrap();
        spin_one(&a.cq, wc);
    };
    for _ in 0..20 {
        round(&mut wc);
    }
    let rounds = 500;
    COUNTING.with(|c| c.set(true));
    let before = ALLOCS.load(Ordering::Relaxed);
    for _ in 0..rounds {
        round(&mut wc);
    }
    let allocs = ALLOCS.load(Ordering::Relaxed) - before;
    COUNTING.with(|c| c.set(false));
    assert_eq!(allocs, 0, "allocations in {rounds} rounds");
    assert_eq!(a.qp.outstanding(), (0, 0));
    eprintln!(
        "{} requests posted and polled without an allocation",
        rounds * 7
    );
}

#[test]
#[ignore = "needs RDMA devices: run in the rig"]
fn lanes_do_not_allocate() {
    let r = rig();
    let caps = QpCapabilities {
        max_send_wr: 64,
        max_recv_wr: 64,
        max_send_sge: 1,
        max_recv_sge: 1,
        max_inline_data: 32,
    };
    let (a, b) = rc_pair(&r.rxe[0], &r.rxe[1], &caps);
    let src =
        a.pd.register(pattern(4096, 1), AccessFlags::empty())
            .unwrap();
    let rbuf =
        b.pd.register(vec![0u8; 4096], AccessFlags::LOCAL_WRITE)
            .unwrap();
    let (la, lb) = (Lane::new(a.qp).unwrap(), Lane::new(b.qp).unwrap());
    let mut send = la
        .prepare_send(SendRequest::send([src.slice(..64).unwrap()]))
        .unwrap();
    let mut recv = lb
        .prepare_recv(RecvRequest::new([rbuf.slice(..64).unwrap()]))
        .unwrap();
    let mut wc = [Completion::default()];
    let mut spin = |lane: &Lane, recv: bool| loop {
        let n = if recv {
            lane.poll_recv(&mut wc)
        } else {
            lane.poll_send(&mut wc)
        };
        if n.unwrap() == 1 {
            wc[0].ok().unwrap();
            return;
        }
    };
    let rounds = 1000;
    COUNTING.with(|c| c.set(true));
    let before = ALLOCS.load(Ordering::Relaxed);
    for _ in 0..rounds {
        recv.post().unwrap();
        send.post().unwrap();
        spin(&la, false);
        spin(&lb, true);
    }
    let allocs = ALLOCS.load(Ordering::Relaxed) - before;
    COUNTING.with(|c| c.set(false));
    assert_eq!(allocs, 0, "allocations in {rounds} rounds");
    eprintln!("{rounds} sends and receives on lanes without an allocation");
}
