//! `erdma-stat`: RDMA traffic from the port counters. Once (totals), live
//! (`-l`: rx/tx bytes/s and packets/s every interval, like `eadm stat -d
//! erdma_0 -l`), or around a command (`--during -- CMD`: what each device
//! moved while it ran, so a benchmark's bytes are seen to go over RDMA).
//!
//! Exit status:
//! - 0: success
//! - 1: the counters could not be read
//! - 2: bad arguments
//! - 3: no RDMA device
//! - 4: libibverbs missing
//! - 5: no such device or port
//! - 6: `--serve`: the address cannot be listened on
//!
//! With `--during`: the command's exit status; 128+N when a signal N killed
//! it; 125 when erdma-stat itself failed (before the command ran: nothing
//! ran); 126 the command cannot be executed; 127 it was not found.

pub mod counters;
pub mod prometheus;
mod render;
pub mod serve;
mod signals;

use std::io::Write;
use std::path::PathBuf;
use std::process::Command;
use std::time::{Duration, Instant};

use clap::Parser;

use crate::meta::RunMeta;
pub use counters::{Delta, Metric, PortCounters, Sample};

/// Success.
pub const EXIT_OK: i32 = 0;
/// The counters could not be read.
pub const EXIT_FAILED: i32 = 1;
/// Bad arguments.
pub const EXIT_USAGE: i32 = 2;
/// No RDMA device.
pub const EXIT_NO_DEVICES: i32 = 3;
/// libibverbs missing.
pub const EXIT_NO_LIBRARY: i32 = 4;
/// No such device or port.
pub const EXIT_NOT_FOUND: i32 = 5;
/// `--serve`: the address cannot be listened on.
pub const EXIT_LISTEN: i32 = 6;
/// `--during`: erdma-stat itself failed.
pub const EXIT_DURING_FAILED: i32 = 125;
/// `--during`: the command cannot be executed.
pub const EXIT_NOT_EXECUTABLE: i32 = 126;
/// `--during`: the command was not found.
pub const EXIT_NOT_FOUND_CMD: i32 = 127;

/// Command-line options.
#[derive(Debug, Parser)]
#[command(
    name = "erdma-stat",
    version,
    about = "RDMA traffic from the port counters: totals, live rates (-l), or during a command",
    after_help = "Counters: eRDMA hw_counters (tx/rx_bytes_cnt, with or without the hw_ prefix), IB \
                  counters/port_*_data and *_packets, rxe's sent_pkts/rcvd_pkts (packets only), \
                  EFA/bnxt_re tx/rx_bytes; siw has none. A missing counter is shown as missing, \
                  never 0; without byte counters the interface's counters are shown, marked: they \
                  include non-RDMA traffic.\n\
                  Exit status: 0 ok, 1 counters unreadable, 2 bad arguments, 3 no RDMA device, \
                  4 libibverbs missing, 5 no such device or port, 6 --serve cannot listen. With --during: the command's \
                  status (128+N if killed by signal N), 125 erdma-stat failed, 126 command not \
                  executable, 127 command not found."
)]
pub struct Args {
    /// Device(s) to show (default: all); repeat or separate with commas.
    #[arg(
        short = 'd',
        long = "device",
        value_name = "DEV",
        value_delimiter = ','
    )]
    pub devices: Vec<String>,
    /// Port (default: all ports).
    #[arg(short = 'p', long = "port", value_name = "PORT", value_parser = clap::value_parser!(u8).range(1..))]
    pub port: Option<u8>,
    /// Live: print rates every interval until interrupted (or --count).
    #[arg(short = 'l', long = "loop")]
    pub live: bool,
    /// Seconds between live samples.
    #[arg(short = 'i', long, value_name = "S", default_value = "1", value_parser = parse_interval)]
    pub interval: f64,
    /// Live: stop after this many intervals.
    #[arg(short = 'c', long, value_name = "N", requires = "live", value_parser = clap::value_parser!(u64).range(1..))]
    pub count: Option<u64>,
    /// One JSON document on stdout (with --during the command's stdout goes to stderr).
    #[arg(long)]
    pub json: bool,
    /// Run the command after `--` and report what each device moved during it.
    #[arg(long, requires = "command", conflicts_with = "live")]
    pub during: bool,
    /// Serve Prometheus' text format at http://ADDR/metrics (e.g. 127.0.0.1:9851,
    /// [::]:9851), reading sysfs on each scrape, until killed.
    #[arg(long, value_name = "ADDR", conflicts_with_all = ["live", "during", "json", "devices", "port"])]
    pub serve: Option<String>,
    /// --serve: rerun erdma-doctor's checks on a scrape once their result is
    /// older than S seconds (0: do not export checks).
    #[arg(long, value_name = "S", default_value = "60", requires = "serve", value_parser = clap::value_parser!(u64).range(0..=86400))]
    pub checks_every: u64,
    /// --serve: checks or groups of erdma-doctor to leave out (e.g. gpu); repeat or separate with commas.
    #[arg(long, value_name = "NAME", value_delimiter = ',', requires = "serve")]
    pub skip: Vec<String>,
    /// The command to run with --during.
    #[arg(last = true, value_name = "CMD", requires = "during")]
    pub command: Vec<String>,
}

fn parse_interval(s: &str) -> Result<f64, String> {
    match s.trim().parse::<f64>() {
        Ok(v) if v.is_finite() && (0.01..=3600.0).contains(&v) => Ok(v),
        _ => Err(format!(
            "'{s}' is not an interval in seconds (0.01 to 3600)"
        )),
    }
}

/// The ports to watch, or (exit status, message) when there are none.
pub fn targets(args: &Args, list: &erdma::DeviceList) -> Result<Vec<PortCounters>, (i32, String)> {
    if list.is_empty() {
        let (code, msg) = crate::devinfo::no_devices(list.reason());
        return Err((code, msg));
    }
    let devs: Vec<&erdma::Device> = if args.devices.is_empty() {
        list.iter().collect()
    } else {
        let mut v = Vec::new();
        for name in &args.devices {
            match list.find(name) {
                Ok(d) => v.push(d),
                Err(e) => return Err((EXIT_NOT_FOUND, e.to_string())),
            }
        }
        v
    };
    let mut out = Vec::new();
    for d in devs {
        let dir = d.sysfs_path().to_path_buf();
        let ports = sysfs_ports(&dir);
        let ctx = d.open().ok();
        let selected: Vec<u8> = match args.port {
            Some(p) if ports.contains(&p) => vec![p],
            Some(p) => {
                return Err((
                    EXIT_NOT_FOUND,
                    format!(
                        "{} has no port {p} (ports: {ports:?}): pick one with -p",
                        d.name()
                    ),
                ));
            }
            None => ports.clone(),
        };
        for p in selected {
            let netdev = ctx
                .as_ref()
                .and_then(|c| c.netdev(p).ok().flatten())
                .map(|n| {
                    let stats = PathBuf::from(format!("/sys/class/net/{n}/statistics"));
                    (n, stats)
                });
            out.push(PortCounters::resolve(
                d.name(),
                p,
                &dir,
                ports.len() == 1,
                netdev,
            ));
        }
    }
    Ok(out)
}

/// The port numbers under `<dev>/ports`.
pub(crate) fn sysfs_ports(dir: &std::path::Path) -> Vec<u8> {
    let mut v: Vec<u8> = std::fs::read_dir(dir.join("ports"))
        .map(|rd| {
            rd.flatten()
                .filter_map(|e| e.file_name().to_str()?.parse().ok())
                .collect()
        })
        .unwrap_or_default();
    v.sort();
    v
}

/// Runs erdma-stat; returns the exit status.
pub fn run(args: &Args, list: &erdma::DeviceList, out: &mut dyn Write, err: &mut dyn Write) -> i32 {
    if let Some(addr) = &args.serve {
        return serve_on(args, addr, err);
    }
    let meta = RunMeta::now("erdma-stat");
    let ports = match targets(args, list) {
        Ok(p) => p,
        // No RDMA here: the command still runs (its status passes through);
        // the report says there was nothing to count.
        Err((code, msg))
            if args.during
                && args.devices.is_empty()
                && matches!(code, EXIT_NO_DEVICES | EXIT_NO_LIBRARY) =>
        {
            let _ = writeln!(
                err,
                "erdma-stat: {msg}: nothing to count, running the command anyway"
            );
            Vec::new()
        }
        Err((code, msg)) => {
            let _ = writeln!(err, "erdma-stat: {msg}");
            return if args.during {
                EXIT_DURING_FAILED
            } else {
                code
            };
        }
    };
    if args.during {
        return during(args, &meta, &ports, out, err);
    }
    if args.live {
        return live(args, &meta, &ports, out, err);
    }
    let s: Vec<Sample> = ports.iter().map(PortCounters::sample).collect();
    let text = if args.json {
        format!("{}\n", render::totals_json(&meta, &ports, &s))
    } else {
        render::totals_text(&ports, &s)
    };
    write_or(out, err, &text, EXIT_OK)
}

/// `--serve ADDR`: listens, then serves until the process is ended.
fn serve_on(args: &Args, addr: &str, err: &mut dyn Write) -> i32 {
    if let Some(bad) = args.skip.iter().find(|s| !crate::doctor::known(s)) {
        let _ = writeln!(
            err,
            "erdma-stat: --skip {bad}: no such check or group: see erdma-doctor --list"
        );
        return EXIT_USAGE;
    }
    let listener = match std::net::TcpListener::bind(addr) {
        Ok(l) => l,
        Err(e) => {
            let _ = writeln!(
                err,
                "erdma-stat: --serve {addr}: cannot listen: {e}: give a free HOST:PORT of this machine (e.g. 127.0.0.1:9851)"
            );
            return EXIT_LISTEN;
        }
    };
    let local = listener
        .local_addr()
        .map(|a| a.to_string())
        .unwrap_or_else(|_| addr.to_owned());
    let every = (args.checks_every > 0).then(|| Duration::from_secs(args.checks_every));
    let ex = serve::Exporter::new(
        prometheus::sysfs_root(),
        every,
        args.skip.clone(),
        Box::new(|| Box::new(crate::doctor::system::SystemHost::new())),
    );
    let _ = writeln!(
        err,
        "erdma-stat: serving http://{local}/metrics (RDMA devices from {}; doctor checks {})",
        ex.root.display(),
        match every {
            Some(d) => format!("every {} s at most", d.as_secs()),
            None => "off".to_owned(),
        }
    );
    let _ = err.flush();
    let e = serve::serve(listener, std::sync::Arc::new(ex));
    let _ = writeln!(
        err,
        "erdma-stat: --serve {local}: accepting connections failed: {e}"
    );
    EXIT_FAILED
}

fn write_or(out: &mut dyn Write, err: &mut dyn Write, text: &str, code: i32) -> i32 {
    match out.write_all(text.as_bytes()).and_then(|_| out.flush()) {
        Ok(()) => code,
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => code,
        Err(e) => {
            let _ = writeln!(err, "erdma-stat: writing the output failed: {e}");
            EXIT_FAILED
        }
    }
}

fn live(
    args: &Args,
    meta: &RunMeta,
    ports: &[PortCounters],
    out: &mut dyn Write,
    err: &mut dyn Write,
) -> i32 {
    signals::catch_stop();
    let interval = Duration::from_secs_f64(args.interval);
    let mut prev: Vec<Sample> = ports.iter().map(PortCounters::sample).collect();
    let mut t_prev = Instant::now();
    let mut rows = Vec::new();
    if !args.json {
        let head = render::live_header(ports, args.interval);
        if write_or(out, err, &head, EXIT_OK) != EXIT_OK {
            return EXIT_FAILED;
        }
    }
    let mut n = 0u64;
    while args.count.is_none_or(|c| n < c) {
        if !signals::sleep_unless_stopped(interval) {
            break;
        }
        let now: Vec<Sample> = ports.iter().map(PortCounters::sample).collect();
        let secs = t_prev.elapsed().as_secs_f64();
        t_prev = Instant::now();
        let line = render::live_rows(ports, &prev, &now, secs);
        if args.json {
            rows.push(render::interval_json(ports, &prev, &now, secs));
        } else if write_or(out, err, &line, EXIT_OK) != EXIT_OK {
            return EXIT_FAILED;
        }
        prev = now;
        n += 1;
    }
    if args.json {
        let doc = render::live_json(meta, ports, args.interval, rows);
        return write_or(out, err, &format!("{doc}\n"), EXIT_OK);
    }
    EXIT_OK
}

/// How a command ended.
fn exit_of(status: std::process::ExitStatus) -> (i32, String) {
    use std::os::unix::process::ExitStatusExt;
    match (status.code(), status.signal()) {
        (Some(c), _) => (c, format!("exited {c}")),
        (None, Some(s)) => (128 + s, format!("killed by signal {s}")),
        _ => (EXIT_DURING_FAILED, "ended".into()),
    }
}

fn during(
    args: &Args,
    meta: &RunMeta,
    ports: &[PortCounters],
    out: &mut dyn Write,
    err: &mut dyn Write,
) -> i32 {
    let before: Vec<Sample> = ports.iter().map(PortCounters::sample).collect();
    let t0 = Instant::now();
    let mut cmd = Command::new(&args.command[0]);
    cmd.args(&args.command[1..]);
    if args.json {
        // stdout carries only the JSON document: the command's output goes to stderr.
        if let Ok(e) = std::os::fd::AsFd::as_fd(&std::io::stderr()).try_clone_to_owned() {
            cmd.stdout(std::process::Stdio::from(e));
        }
    }
    signals::forward_to_child();
    let mut child = match cmd.spawn() {
        Ok(c) => c,
        Err(e) => {
            let code = match e.kind() {
                std::io::ErrorKind::NotFound => EXIT_NOT_FOUND_CMD,
                _ => EXIT_NOT_EXECUTABLE,
            };
            let _ = writeln!(
                err,
                "erdma-stat: cannot run {}: {e}: check the command and its PATH",
                args.command[0]
            );
            return code;
        }
    };
    let status = signals::wait_forwarding(&mut child);
    let secs = t0.elapsed().as_secs_f64();
    let after: Vec<Sample> = ports.iter().map(PortCounters::sample).collect();
    let (code, how) = match status {
        Ok(s) => exit_of(s),
        Err(e) => {
            let _ = writeln!(err, "erdma-stat: waiting for the command failed: {e}");
            (EXIT_DURING_FAILED, "was lost".into())
        }
    };
    let text = if args.json {
        format!(
            "{}\n",
            render::during_json(meta, ports, &before, &after, secs, &args.command, code)
        )
    } else {
        render::during_text(ports, &before, &after, secs, &args.command, &how)
    };
    match out.write_all(text.as_bytes()).and_then(|_| out.flush()) {
        Ok(()) => code,
        Err(e) => {
            let _ = writeln!(err, "erdma-stat: writing the report failed: {e}");
            EXIT_DURING_FAILED
        }
    }
}
