//! Runs one data-path loop of `benches/datapath.rs` a fixed number of times,
//! so that an instruction counter can compare the safe Rust API with the
//! same loop in C exactly (`scripts/datapath-instructions.sh` runs it under
//! callgrind at two counts and takes the difference per iteration).
//!
//! ```text
//! usage: erdma-datapath-count rust|lane|c write_inline|send_recv ITERS
//! ```
//! Devices as for the bench (`ERDMA_BENCH_DEVS`, the rig's rxe pair, or the
//! first device twice). Prints `LANG LOOP ITERS empty_polls=N`.
//! exit status: 0 done, 1 no loopback pair or a loop failed (printed), 2 bad
//! arguments.
use erdma_benches::loops::Fixture;

const USAGE: &str = "usage: erdma-datapath-count rust|lane|c write_inline|send_recv ITERS";

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let (lang, name, iters) = match &args[..] {
        [l, n, i] => (l.as_str(), n.as_str(), i),
        _ => usage("three arguments"),
    };
    if !matches!(lang, "rust" | "lane" | "c") {
        usage(&format!("unknown language '{lang}'"));
    }
    if !matches!(name, "write_inline" | "send_recv") {
        usage(&format!("unknown loop '{name}'"));
    }
    let Ok(iters) = iters.parse::<u64>() else {
        usage(&format!("ITERS must be a number, got '{iters}'"))
    };
    let fixture = Fixture::new().unwrap_or_else(|why| fail(&why));
    let outcome = match (lang, name) {
        ("rust", "write_inline") if fixture.has_inline() => fixture.rust_write_inline(iters),
        ("lane", "write_inline") if fixture.has_inline() => fixture.lane_write_inline(iters),
        ("c", "write_inline") if fixture.has_inline() => fixture.c_write_inline(iters),
        (_, "write_inline") => Err(format!("{} has no inline data", fixture.label)),
        ("rust", _) => fixture.rust_send_recv(iters),
        ("lane", _) => fixture.lane_send_recv(iters),
        _ => fixture.c_send_recv(iters),
    };
    match outcome {
        Ok(empty) => println!("{lang} {name} {iters} empty_polls={empty}"),
        Err(e) => fail(&e),
    }
}

fn usage(why: &str) -> ! {
    eprintln!("erdma-datapath-count: {why}\n{USAGE}");
    std::process::exit(2)
}

fn fail(why: &str) -> ! {
    eprintln!("erdma-datapath-count: {why}");
    std::process::exit(1)
}
