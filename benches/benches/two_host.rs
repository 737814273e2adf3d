//! Latency and bandwidth to another host running `erdma-bench-server`:
//!
//! ```sh
//! hostB$ erdma-bench-server                      # cargo run --release -p erdma-benches --bin erdma-bench-server
//! hostA$ ERDMA_BENCH_PEER=hostB:18700 cargo bench -p erdma-benches --bench two_host
//! ```
//! `ERDMA_BENCH_DEV` picks the device, `ERDMA_BENCH_GID_INDEX` the GID
//! (RoCE-style eRDMA: 1); iWARP devices connect through RDMA CM (then the
//! peer address is the server's RDMA interface). Without `ERDMA_BENCH_PEER`
//! the bench says so and measures nothing.
use std::time::{Duration, Instant};

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use erdma_benches::{peer, skip};

fn two_host(c: &mut Criterion) {
    let Ok(addr) = std::env::var("ERDMA_BENCH_PEER") else {
        skip("set ERDMA_BENCH_PEER=host:port (the host running erdma-bench-server)");
        return;
    };
    let client =
        peer::device_from_env().and_then(|(ctx, gid)| peer::Client::connect(&addr, &ctx, gid));
    let mut client = match client {
        Ok(c) => c,
        Err(e) => {
            eprintln!("two_host: cannot reach {addr}: {e}");
            std::process::exit(1);
        }
    };
    let mut g = c.benchmark_group("two_host");
    g.throughput(Throughput::Bytes(peer::PING as u64));
    g.bench_function("send_8B_round_trip", |b| {
        b.iter_custom(|n| timed(n, || client.ping()))
    });
    g.throughput(Throughput::Bytes(peer::BW_SIZE as u64));
    g.bench_function("write_64KiB", |b| {
        b.iter_custom(|n| {
            let t0 = Instant::now();
            if let Err(e) = client.write_burst(n) {
                fail(e)
            }
            t0.elapsed()
        })
    });
    g.finish();
}

fn timed(n: u64, mut f: impl FnMut() -> erdma::Result<()>) -> Duration {
    let t0 = Instant::now();
    for _ in 0..n {
        if let Err(e) = f() {
            fail(e)
        }
    }
    t0.elapsed()
}

fn fail(e: erdma::Error) -> ! {
    eprintln!("two_host: {e}");
    std::process::exit(1)
}

criterion_group!(benches, two_host);
criterion_main!(benches);
