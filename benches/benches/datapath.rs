//! The safe API's data path against the same loops written in C, on a
//! loopback pair (two devices of one fabric, or one device twice), and the
//! cost of memory registration by size.
//!
//! ```sh
//! cargo bench -p erdma-benches --bench datapath            # first device, twice
//! ERDMA_BENCH_DEVS="rxe0 rxe1" cargo bench -p erdma-benches --bench datapath
//! ```
//! Groups: `post_poll/{rust,c}/write_inline_8B` (a signaled inline RDMA WRITE
//! posted and polled to completion), `post_poll/{rust,c}/send_recv_8B` (a
//! receive posted, an 8-byte SEND, both completions polled), and
//! `reg_mr/<size>` (ibv_reg_mr + ibv_dereg_mr of an already touched buffer,
//! 4 KiB to 1 GiB, sizes above half the available memory skipped).
//! `scripts/bench-datapath.sh` runs it in the rig and prints the Rust/C ratios.
use std::time::{Duration, Instant};

use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use erdma::{
    AccessFlags, AlignedBuffer, CompletionQueue, MemoryRegion, QpCapabilities, RecvRequest,
    SendRequest, WorkCompletion,
};
use erdma_benches::{c_loops, loopback, skip};

const MSG: usize = 8;

type Group<'a> = criterion::BenchmarkGroup<'a, criterion::measurement::WallTime>;

/// Spins until one completion arrives; panics on a failed one (a bench has
/// no other way to stop).
fn poll_one(cq: &CompletionQueue, wc: &mut [WorkCompletion; 1]) {
    loop {
        match cq.poll(wc) {
            Ok(0) => continue,
            Ok(_) => {
                if let Err(e) = wc[0].ok() {
                    panic!("datapath: {e}");
                }
                return;
            }
            Err(e) => panic!("datapath: {e}"),
        }
    }
}

fn check(rc: i32, what: &str) {
    assert_eq!(rc, 0, "datapath: the C loop {what} failed");
}

fn post_poll(c: &mut Criterion) {
    let (da, db) = match loopback::devices() {
        Ok(d) => d,
        Err(why) => return skip(&why),
    };
    let probe = erdma::Context::open(&da).and_then(|ctx| ctx.max_inline_data());
    let inline = match probe {
        Ok(n) => n.min(64),
        Err(e) => return skip(&format!("{da}: {e}")),
    };
    let caps = QpCapabilities {
        max_send_wr: 64,
        max_recv_wr: 64,
        max_send_sge: 1,
        max_recv_sge: 1,
        max_inline_data: inline,
    };
    let (a, b) = match loopback::connect(&da, &db, &caps) {
        Ok(p) => p,
        Err(e) => return skip(&format!("loopback pair {da} <-> {db}: {e}")),
    };
    eprintln!("datapath: loopback {da} <-> {db}, inline up to {inline} B");
    let reg = |pd: &erdma::ProtectionDomain, access| -> MemoryRegion<AlignedBuffer> {
        pd.register(AlignedBuffer::new(4096).expect("4 KiB"), access)
            .expect("register 4 KiB")
    };
    let src = reg(&a.pd, AccessFlags::empty());
    let dst = reg(&b.pd, AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE);
    let rbuf = reg(&b.pd, AccessFlags::LOCAL_WRITE);
    let remote = dst.remote().slice(..MSG).expect("8 B");
    let mut wc = [WorkCompletion::default(); 1];

    let mut g = c.benchmark_group("post_poll");
    g.throughput(Throughput::Elements(1));
    // ERDMA_BENCH_C_FIRST=1 measures the C loops first, so that a script can
    // alternate the order between runs (scripts/bench-datapath.sh).
    let c_first = std::env::var("ERDMA_BENCH_C_FIRST").is_ok_and(|v| v == "1");
    if inline as usize >= MSG {
        let local = src.slice(..MSG).expect("8 B");
        let mut rust = |g: &mut Group<'_>| {
            g.bench_function("rust/write_inline_8B", |bch| {
                bch.iter_custom(|n| {
                    let t0 = Instant::now();
                    for _ in 0..n {
                        a.qp.post_send(SendRequest::write([local], remote).inline())
                            .expect("post_send");
                        poll_one(&a.cq, &mut wc);
                    }
                    t0.elapsed()
                })
            });
        };
        let c_loop = |g: &mut Group<'_>| {
            g.bench_function("c/write_inline_8B", |bch| {
                bch.iter_custom(|n| {
                    let t0 = Instant::now();
                    // SAFETY: live QP and CQ of a connected pair; src and the
                    // remote slice are registered and outlive the call; the loop
                    // consumes every completion it causes.
                    let rc = unsafe {
                        c_loops::erdma_c_write_inline(
                            a.qp.as_raw(),
                            a.cq.as_raw(),
                            src.addr() as usize as *mut u8,
                            MSG as u32,
                            src.lkey(),
                            remote.addr,
                            remote.rkey,
                            n as std::ffi::c_long,
                        )
                    };
                    let t = t0.elapsed();
                    check(rc, "write_inline");
                    t
                })
            });
        };
        if c_first {
            c_loop(&mut g);
            rust(&mut g);
        } else {
            rust(&mut g);
            c_loop(&mut g);
        }
    } else {
        skip(&format!(
            "{da} has no inline data: write_inline_8B not measured"
        ));
    }
    let (sl, rl) = (
        src.slice(..MSG).expect("8 B"),
        rbuf.slice(..MSG).expect("8 B"),
    );
    let mut rust = |g: &mut Group<'_>| {
        g.bench_function("rust/send_recv_8B", |bch| {
            bch.iter_custom(|n| {
                let t0 = Instant::now();
                for _ in 0..n {
                    b.qp.post_recv(RecvRequest::new([rl])).expect("post_recv");
                    a.qp.post_send(SendRequest::send([sl])).expect("post_send");
                    poll_one(&a.cq, &mut wc);
                    poll_one(&b.cq, &mut wc);
                }
                t0.elapsed()
            })
        });
    };
    let c_loop = |g: &mut Group<'_>| {
        g.bench_function("c/send_recv_8B", |bch| {
            bch.iter_custom(|n| {
                let t0 = Instant::now();
                // SAFETY: as for write_inline; the receive buffer is registered
                // with LOCAL_WRITE on b's PD and outlives the call.
                let rc = unsafe {
                    c_loops::erdma_c_send_recv(
                        a.qp.as_raw(),
                        a.cq.as_raw(),
                        src.addr() as usize as *mut u8,
                        src.lkey(),
                        b.qp.as_raw(),
                        b.cq.as_raw(),
                        rbuf.addr() as usize as *mut u8,
                        rbuf.lkey(),
                        MSG as u32,
                        n as std::ffi::c_long,
                    )
                };
                let t = t0.elapsed();
                check(rc, "send_recv");
                t
            })
        });
    };
    if c_first {
        c_loop(&mut g);
        rust(&mut g);
    } else {
        rust(&mut g);
        c_loop(&mut g);
    }
    g.finish();
}

/// Bytes of memory available (MemAvailable), if /proc says.
fn mem_available() -> Option<usize> {
    let m = std::fs::read_to_string("/proc/meminfo").ok()?;
    let line = m.lines().find(|l| l.starts_with("MemAvailable:"))?;
    let kib: usize = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib * 1024)
}

fn reg_mr(c: &mut Criterion) {
    let (dev, _) = match loopback::devices() {
        Ok(d) => d,
        Err(why) => return skip(&why),
    };
    let pd = match erdma::Context::open(&dev).and_then(|ctx| ctx.alloc_pd()) {
        Ok(pd) => pd,
        Err(e) => return skip(&format!("{dev}: {e}")),
    };
    let limit = mem_available().map_or(usize::MAX, |m| m / 2);
    let mut g = c.benchmark_group("reg_mr");
    g.sample_size(10).warm_up_time(Duration::from_millis(500));
    for size in [
        4usize << 10,
        64 << 10,
        1 << 20,
        16 << 20,
        256 << 20,
        1 << 30,
    ] {
        if size > limit {
            skip(&format!(
                "reg_mr/{size}: more than half the available memory"
            ));
            continue;
        }
        let Ok(mut buf) = AlignedBuffer::new(size) else {
            skip(&format!("reg_mr/{size}: cannot allocate"));
            continue;
        };
        buf.fill(1); // touched: registration pins pages, it does not fault them in
        let mut slot = Some(buf);
        g.throughput(Throughput::Bytes(size as u64));
        g.bench_with_input(BenchmarkId::from_parameter(size), &size, |bch, _| {
            bch.iter_custom(|n| {
                let mut total = Duration::ZERO;
                for _ in 0..n {
                    let b = slot.take().expect("the buffer comes back each time");
                    let t0 = Instant::now();
                    let mr = pd
                        .register(b, AccessFlags::LOCAL_WRITE)
                        .expect("ibv_reg_mr");
                    let b = mr.into_inner().map_err(|(_, e)| e).expect("ibv_dereg_mr");
                    total += t0.elapsed();
                    slot = Some(b);
                }
                total
            })
        });
    }
    g.finish();
}

criterion_group!(benches, post_poll, reg_mr);
criterion_main!(benches);
