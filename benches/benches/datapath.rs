//! The safe API's data path against the same loops written in C, on a
//! loopback pair (two devices of one fabric, or one device twice), and the
//! cost of memory registration by size.
//!
//! ```sh
//! cargo bench -p erdma-benches --bench datapath            # first device, twice
//! ERDMA_BENCH_DEVS="rxe0 rxe1" cargo bench -p erdma-benches --bench datapath
//! ```
//! Groups: `post_poll/{rust,lane,c}/write_inline_8B` (a signaled inline RDMA
//! WRITE posted and polled to completion), `post_poll/{rust,lane,c}/send_recv_8B`
//! (a receive posted, an 8-byte SEND, both completions polled), where `rust`
//! posts each request through `QueuePair::post_send`, `lane` posts a request
//! prepared once on an `erdma::Lane`, and `c` is the loop in C; and
//! `reg_mr/<size>` (ibv_reg_mr + ibv_dereg_mr of an already touched buffer,
//! 4 KiB to 1 GiB, sizes above half the available memory skipped).
//! `scripts/bench-datapath.sh` runs it in the rig and prints the Rust/C ratios.
use std::time::{Duration, Instant};

use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use erdma::{AccessFlags, AlignedBuffer};
use erdma_benches::{loopback, loops::Fixture, skip};

type Group<'a> = criterion::BenchmarkGroup<'a, criterion::measurement::WallTime>;

/// Times `iters` iterations of one loop; panics when it fails (a bench has no
/// other way to stop).
fn timed(iters: u64, run: impl FnOnce(u64) -> Result<u64, String>) -> Duration {
    let t0 = Instant::now();
    let outcome = run(iters);
    let t = t0.elapsed();
    if let Err(e) = outcome {
        panic!("datapath: {e}");
    }
    t
}

/// One loop: its name and how to run it `n` times.
type Loop<'a> = (&'static str, &'a dyn Fn(u64) -> Result<u64, String>);

/// Benches the versions of one loop (Rust, lane, C), in that order or, with
/// `c_first`, the reverse.
fn versions(g: &mut Group<'_>, name: &str, c_first: bool, mut loops: [Loop<'_>; 3]) {
    if c_first {
        loops.reverse();
    }
    for (lang, run) in loops {
        g.bench_function(format!("{lang}/{name}"), |bch| {
            bch.iter_custom(|n| timed(n, run))
        });
    }
}

fn post_poll(c: &mut Criterion) {
    let f = match Fixture::new() {
        Ok(f) => f,
        Err(why) => return skip(&why),
    };
    eprintln!(
        "datapath: loopback {}, inline up to {} B",
        f.label, f.inline
    );
    let mut g = c.benchmark_group("post_poll");
    g.throughput(Throughput::Elements(1));
    // ERDMA_BENCH_C_FIRST=1 measures the C loops first, so that a script can
    // alternate the order between runs (scripts/bench-datapath.sh).
    let c_first = std::env::var("ERDMA_BENCH_C_FIRST").is_ok_and(|v| v == "1");
    if f.has_inline() {
        let loops: [Loop<'_>; 3] = [
            ("rust", &|n| f.rust_write_inline(n)),
            ("lane", &|n| f.lane_write_inline(n)),
            ("c", &|n| f.c_write_inline(n)),
        ];
        versions(&mut g, "write_inline_8B", c_first, loops);
    } else {
        skip(&format!(
            "{} has no inline data: write_inline_8B not measured",
            f.label
        ));
    }
    let loops: [Loop<'_>; 3] = [
        ("rust", &|n| f.rust_send_recv(n)),
        ("lane", &|n| f.lane_send_recv(n)),
        ("c", &|n| f.c_send_recv(n)),
    ];
    versions(&mut g, "send_recv_8B", c_first, loops);
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
