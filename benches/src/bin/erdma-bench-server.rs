//! The other end of the two-host bench (`benches/two_host.rs`): run it on
//! host B, then `ERDMA_BENCH_PEER=hostB:18700 cargo bench -p erdma-benches
//! --bench two_host` on host A.
//!
//! ```text
//! usage: erdma-bench-server [BIND_ADDR:PORT] [SESSIONS]
//!   BIND_ADDR:PORT  where to listen (default 0.0.0.0:18700; with RDMA CM,
//!                   i.e. iWARP devices or ERDMA_BENCH_CM=1, an address of
//!                   the RDMA interface)
//!   SESSIONS        serve this many clients, then exit (default 0: for ever)
//! ```
//! env: ERDMA_BENCH_DEV (device, default the first), ERDMA_BENCH_GID_INDEX,
//!      ERDMA_BENCH_CM=1 (connect through RDMA CM on RoCE/IB too),
//!      ERDMA_BENCH_SERVER_SLEEP=1 (sleep on a completion channel between
//!      messages instead of spinning: for machines with few cores).
//! exit status: 0 done, 1 a setup error (printed), 2 bad arguments.
use erdma_benches::peer;

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.iter().any(|a| a == "-h" || a == "--help") {
        println!("usage: erdma-bench-server [BIND_ADDR:PORT] [SESSIONS]  (see the source header)");
        return;
    }
    let bind = args
        .first()
        .cloned()
        .unwrap_or_else(|| format!("0.0.0.0:{}", peer::DEFAULT_PORT));
    let sessions = match args.get(1).map(|s| s.parse::<u64>()) {
        None => 0,
        Some(Ok(n)) => n,
        Some(Err(_)) => {
            eprintln!(
                "erdma-bench-server: SESSIONS must be a number, got '{}'",
                args[1]
            );
            std::process::exit(2);
        }
    };
    let outcome =
        peer::device_from_env().and_then(|(ctx, gid)| peer::serve(&bind, &ctx, gid, sessions));
    if let Err(e) = outcome {
        eprintln!("erdma-bench-server: {e}");
        std::process::exit(1);
    }
}
