//! `erdma-perf`: perftest's bandwidth and latency tests (`ib_write_bw`,
//! `ib_send_lat`, ...) on the erdma library, for host and GPU memory.
//!
//! ```text
//! erdma-perf write_bw -d erdma_0 -x 1 --report_gbits            # server
//! erdma-perf write_bw -d erdma_0 -x 1 --report_gbits SERVER     # client
//! ```
//!
//! Same options, output and exchange protocol as perftest 4.5 (so either
//! side may be perftest), plus `--verify`, `--json`, `--csv`,
//! `--persistent`. Layout, as nccl-tests': one common driver and a small
//! file per test.
//! - [`options`]: the command line.
//! - [`cases`]: the tests, each perftest's sequence of steps.
//! - [`session`]: the driver: exchange steps, measurements, reports.
//! - [`wire`]: perftest's exchange protocol over TCP or RDMA CM.
//! - [`rdma`], [`memory`], [`gpu`]: devices, QPs and buffers.
//! - [`bw`], [`lat`]: the measurement loops; [`clock`], [`report`]: time
//!   and perftest's formulas; [`watch`]: no hangs on a dead peer.
//! - [`output`]: perftest's text layout, JSON, CSV.

pub mod bw;
pub mod cases;
pub mod clock;
pub mod error;
pub mod gpu;
pub mod lat;
pub mod memory;
pub mod options;
pub mod output;
pub mod rdma;
pub mod report;
pub mod session;
pub mod watch;
pub mod wire;

use error::{PerfError, PerfResult};
use options::{Options, Parsed};
use output::Output;
use session::Session;
use wire::Role;
use wire::cm::{CmComm, CmCommListener};
use wire::eth::{EthComm, EthListener};

/// The program: parses `std::env::args`, runs, returns the documented
/// exit status (the binary's entry point is [`crate::c_main`]).
pub fn main() -> i32 {
    let argv = match crate::cli::args(Some("erdma-perf"), error::EXIT_USAGE) {
        Ok(a) => a,
        Err(code) => return code,
    };
    match options::parse(&argv) {
        Ok(Parsed::Print(text)) => crate::cli::print_help(&text),
        Ok(Parsed::Run(o)) => match run(&o) {
            Ok(()) => 0,
            Err(e) => {
                report_error(&o, &e);
                e.exit_code()
            }
        },
        Err(e) => {
            eprintln!("erdma-perf: {e}");
            e.exit_code()
        }
    }
}

fn report_error(o: &Options, e: &PerfError) {
    eprintln!("erdma-perf: {e}");
    if o.json {
        let out = Output::new(o);
        println!("{}", output::json_document(o, &out, Some(e)));
    }
}

/// Runs the test of `o`: a client once, a server once or (`--persistent`)
/// for ever.
pub fn run(o: &Options) -> PerfResult<()> {
    let (dev, gpu) = open(o)?;
    if o.server.is_some() {
        return one(o, Role::Client, client_comm(o)?, &dev, gpu.as_ref());
    }
    let eth = eth_listener(o)?;
    loop {
        let comm = accept(o, eth.as_ref())?;
        match one(o, Role::Server, comm, &dev, gpu.as_ref()) {
            Ok(()) if !o.persistent => return Ok(()),
            Ok(()) => {}
            Err(e) if o.persistent => {
                // One line, then the next client.
                report_error(o, &e);
            }
            Err(e) => return Err(e),
        }
    }
}

/// One run in-process, printing nothing (for erdma-cluster): a client of
/// `o.server`, else a server for one client. Returns the document
/// `erdma-perf --json` would print (`None` when the run failed before it
/// had one) and the outcome.
pub fn run_quiet(o: &Options) -> (Option<serde_json::Value>, PerfResult<()>) {
    let go = || -> PerfResult<(Option<serde_json::Value>, PerfResult<()>)> {
        let (dev, gpu) = open(o)?;
        let (role, comm) = if o.server.is_some() {
            (Role::Client, client_comm(o)?)
        } else {
            (Role::Server, accept(o, eth_listener(o)?.as_ref())?)
        };
        Ok(one_doc(o, role, comm, &dev, gpu.as_ref()))
    };
    go().unwrap_or_else(|e| (None, Err(e)))
}

type Gpu = (erdma::cuda::Device, String);

/// The GPU (first: a host without CUDA fails here, before any connection)
/// and the RDMA device.
fn open(o: &Options) -> PerfResult<(erdma::Context, Option<Gpu>)> {
    let gpu = match o.cuda {
        Some(ordinal) => {
            let g = gpu::open(ordinal)?;
            if o.verbosity == options::Verbosity::Full && !o.json {
                println!("Using CUDA device {ordinal}: {}", g.1);
            }
            Some(g)
        }
        None => None,
    };
    Ok((rdma::open_device(o)?, gpu))
}

/// The client's exchange with `o.server`.
fn client_comm(o: &Options) -> PerfResult<Box<dyn wire::Comm>> {
    let server = o.server.as_deref().unwrap_or_default();
    Ok(if o.rdma_cm {
        let ip = session::resolve_ipv4(server)?;
        Box::new(CmComm::connect(ip, o.port, o.source_ip, o.timeout)?)
    } else {
        Box::new(EthComm::connect(server, o.port, o.source_ip, o.timeout)?)
    })
}

/// The server's TCP listener (none with RDMA CM).
fn eth_listener(o: &Options) -> PerfResult<Option<EthListener>> {
    if o.rdma_cm {
        return Ok(None);
    }
    Ok(Some(EthListener::bind(o.source_ip, o.port)?))
}

/// The next client's exchange.
fn accept(o: &Options, eth: Option<&EthListener>) -> PerfResult<Box<dyn wire::Comm>> {
    // Listening before the banner: a script may start the client when it
    // sees it. The RDMA CM listener goes after each accept: the test QPs
    // listen on the same port later (as perftest).
    let cm = if o.rdma_cm {
        Some(CmCommListener::bind(o.source_ip, o.port)?)
    } else {
        None
    };
    if o.verbosity == options::Verbosity::Full && !o.json {
        println!("\n************************************");
        println!("* Waiting for client to connect... *");
        println!("************************************");
    }
    Ok(match (eth, cm) {
        (Some(l), _) => Box::new(l.accept(o.timeout, o.wait)?),
        (None, Some(l)) => Box::new(l.accept(o.timeout, o.wait)?),
        (None, None) => unreachable!("one listener exists"),
    })
}

/// One run with one peer, with its reports.
fn one(
    o: &Options,
    role: Role,
    comm: Box<dyn wire::Comm>,
    dev: &erdma::Context,
    gpu: Option<&Gpu>,
) -> PerfResult<()> {
    let (doc, result) = one_doc(o, role, comm, dev, gpu);
    if let Some(doc) = doc {
        println!("{doc}");
    }
    result
}

/// One run with one peer: writes `--out_json` and `--csv`; returns the JSON
/// document when `--json` asks for one (and the run got that far).
fn one_doc(
    o: &Options,
    role: Role,
    comm: Box<dyn wire::Comm>,
    dev: &erdma::Context,
    gpu: Option<&Gpu>,
) -> (Option<serde_json::Value>, PerfResult<()>) {
    let mut out = Output::new(o);
    let result = (|| {
        let mut s = Session::open(o, role, comm, dev, gpu, &mut out)?;
        (o.case.run)(&mut s)
    })();
    let files = (|| {
        if let Some(path) = &o.out_json {
            output::write_perftest_json(path, &out)?;
        }
        if let Some(path) = &o.csv {
            output::write_csv(path, o, &out)?;
        }
        Ok(())
    })();
    if let Err(e) = files {
        return (None, Err(e));
    }
    let doc = match &result {
        Ok(()) => out.wants_json(),
        Err(_) => out.wants_json() && !out.rows.is_empty(),
    };
    let doc = doc.then(|| output::json_document(o, &out, result.as_ref().err()));
    (doc, result)
}
