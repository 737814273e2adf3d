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

use std::io::Write;
use std::process::ExitCode;

use error::{PerfError, PerfResult};
use options::{Options, Parsed};
use output::Output;
use session::Session;
use wire::Role;
use wire::cm::{CmComm, CmCommListener};
use wire::eth::{EthComm, EthListener};

/// The program: parses `std::env::args`, runs, exits with the documented
/// status.
pub fn main() -> ExitCode {
    let argv: Vec<String> = std::env::args().collect();
    let code = match options::parse(&argv) {
        Ok(Parsed::Print(text)) => {
            let _ = std::io::stdout().write_all(text.as_bytes());
            0
        }
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
    };
    ExitCode::from(code as u8)
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
    // GPU first: a host without CUDA fails here, before any connection.
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
    let dev = rdma::open_device(o)?;
    if let Some(server) = &o.server {
        let comm: Box<dyn wire::Comm> = if o.rdma_cm {
            let ip = session::resolve_ipv4(server)?;
            Box::new(CmComm::connect(ip, o.port, o.source_ip, o.timeout)?)
        } else {
            Box::new(EthComm::connect(server, o.port, o.source_ip, o.timeout)?)
        };
        return one(o, Role::Client, comm, &dev, gpu.as_ref());
    }
    let eth = if o.rdma_cm {
        None
    } else {
        Some(EthListener::bind(o.source_ip, o.port)?)
    };
    loop {
        // Listening before the banner: a script may start the client when
        // it sees it. The RDMA CM listener goes after each accept: the test
        // QPs listen on the same port later (as perftest).
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
        let comm: Box<dyn wire::Comm> = match (&eth, cm) {
            (Some(l), _) => Box::new(l.accept(o.timeout)?),
            (None, Some(l)) => Box::new(l.accept(o.timeout)?),
            (None, None) => unreachable!("one listener exists"),
        };
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

/// One run with one peer, with its reports.
fn one(
    o: &Options,
    role: Role,
    comm: Box<dyn wire::Comm>,
    dev: &erdma::Context,
    gpu: Option<&(erdma::cuda::Device, String)>,
) -> PerfResult<()> {
    let mut out = Output::new(o);
    let result = (|| {
        let mut s = Session::open(o, role, comm, dev, gpu, &mut out)?;
        (o.case.run)(&mut s)
    })();
    if let Some(path) = &o.out_json {
        output::write_perftest_json(path, &out)?;
    }
    if let Some(path) = &o.csv {
        output::write_csv(path, o, &out)?;
    }
    match result {
        Ok(()) => {
            if out.wants_json() {
                println!("{}", output::json_document(o, &out, None));
            }
            Ok(())
        }
        Err(e) => {
            if out.wants_json() && !out.rows.is_empty() {
                println!("{}", output::json_document(o, &out, Some(&e)));
            }
            Err(e)
        }
    }
}
