//! Stage 2 of erdma-cluster (`--pairs`): RDMA bandwidth between every pair of
//! ranks' NICs, both directions, each direction one erdma-perf run in-process
//! (the client on one rank, the server on the other, perftest's exchange), in
//! rounds in which every rank has at most one partner. The MPI part (swapping
//! addresses, a barrier after each run, gathering the runs on rank 0) is the
//! binary's; this module runs one rank's share and renders the matrix.

use std::net::Ipv4Addr;

use serde_json::{Value, json};

use super::steps;
use crate::doctor::Status;
use crate::doctor::host::Host;
use crate::perf;
use crate::perf::options::{Options, Parsed};

/// The erdma-perf tests a pair may run.
pub const TESTS: [&str; 3] = ["write_bw", "read_bw", "send_bw"];

/// The rail index of the NCCL pairs (`--nccl-pairs`) in the matrix: far
/// above any host's NIC count, so that the NIC rails keep theirs. Defined
/// here, where the matrix is rendered and named, so that the stages on top
/// (`ncclpairs`, `latency`) import the matrix and never the other way.
pub const NCCL_RAIL: usize = 1000;

/// The collective each NCCL pair runs.
pub const NCCL_TEST: &str = "all_reduce";

/// `--latency-args` by default: 1000 ping-pongs of erdma-perf's default
/// size (2 bytes).
pub const LATENCY_ARGS: &str = "-n 1000";

/// The options of the pair stage (part of erdma-cluster's command line).
#[derive(Debug, Clone, clap::Args)]
pub struct PairArgs {
    /// Also measure every pair of ranks' NICs with erdma-perf, both
    /// directions (after the checks).
    #[arg(long)]
    pub pairs: bool,
    /// The erdma-perf test of each pair.
    #[arg(long, value_name = "TEST", default_value = "write_bw", value_parser = TESTS)]
    pub pair_test: String,
    /// Each rank's devices: rank i takes entry i modulo the list's length;
    /// an entry may name several, `rxe0+siw0`, its rails (default: -d of
    /// --perf-args, else every device of the host, in name order).
    #[arg(long, value_name = "D0,D1,...", value_delimiter = ',')]
    pub devices: Vec<String>,
    /// Do not check every byte received (erdma-perf --verify is on by
    /// default; off it, a corrupted transfer goes unseen).
    #[arg(long)]
    pub no_verify: bool,
    /// Besides rail k against rail k, every NIC of a rank against every
    /// other NIC of its partner.
    #[arg(long)]
    pub cross_rails: bool,
    /// Run a host's rails one after another (for NICs that share a PCIe
    /// switch or the host's CPUs); by default every rail's runs go at once.
    #[arg(long)]
    pub rails_serial: bool,
    /// Run each direction of a pair on its own, one after the other; by
    /// default a pair's two directions run at once (one run each way, each
    /// direction measured on its own).
    #[arg(long)]
    pub directions_serial: bool,
    /// More erdma-perf options for every pair, e.g. "-x 1 -s 1048576 -n 1000
    /// --report_gbits" (iWARP devices get -R without asking).
    #[arg(
        long,
        value_name = "OPTIONS",
        default_value = "",
        allow_hyphen_values = true
    )]
    pub perf_args: String,
    /// After the bandwidth rounds, erdma-perf write_lat between every pair
    /// the schedule meets (rail 0): median and p99 per cell, and the hosts
    /// and paths whose latency is over the cluster's.
    #[arg(long, requires = "pairs")]
    pub latency: bool,
    /// erdma-perf options of the latency runs, after the path options of
    /// --perf-args (-x, -m, -i, -c, -T, -L, --tclass, -R, -z).
    #[arg(
        long,
        value_name = "OPTIONS",
        default_value = LATENCY_ARGS,
        allow_hyphen_values = true
    )]
    pub latency_args: String,
    /// TCP port of the first run's exchange; each run takes the next one
    /// (the next N with N ranks on one host: one port for each).
    #[arg(long, value_name = "PORT", default_value_t = 18600)]
    pub pair_port: u16,
}

/// One direction of one pair, as the rank that ran it reports it.
#[derive(Debug, Clone, PartialEq)]
pub struct PairRun {
    /// The rank of the client (erdma-perf's initiator).
    pub client: usize,
    /// The rank of the server.
    pub server: usize,
    /// Which side this is: `client` or `server`.
    pub role: String,
    /// The client's BW average in Gb/s at the largest size (none when the
    /// run failed or on the server side).
    pub gbps: Option<f64>,
    /// What failed, in one line.
    pub error: Option<String>,
    /// The erdma-perf document (`null` when the run failed before it had one).
    pub doc: Value,
    /// The rail (the NICs' index on both ranks); None for a cross-rail run.
    pub rail: Option<usize>,
    /// The client's NIC (None: erdma-perf's default).
    pub client_device: Option<String>,
    /// The server's NIC.
    pub server_device: Option<String>,
    /// Whether every byte received was checked and found as sent.
    pub verified: bool,
    /// Whether the check found wrong data (a corrupted transfer).
    pub corrupt: bool,
    /// The commands that rerun this run alone (the server's, then the
    /// client's, each on its rank's host).
    pub rerun: String,
    /// How many runs shared the busier of its two ports at once (1 but
    /// with `--budget`'s several partners per round): the diagnosis scales
    /// the rate by it.
    pub share: usize,
}

impl PairRun {
    /// As JSON (what a rank sends to rank 0).
    pub fn to_json(&self) -> Value {
        json!({"client": self.client, "server": self.server, "role": self.role,
               "gbps": self.gbps, "error": self.error, "doc": self.doc,
               "rail": self.rail, "client_device": self.client_device,
               "server_device": self.server_device, "verified": self.verified,
               "corrupt": self.corrupt, "rerun": self.rerun, "share": self.share})
    }

    /// The part of its file name after `perf-CLIENT-SERVER` (see
    /// [`Matrix::client_docs`]).
    pub fn file_suffix(&self) -> String {
        let safe = |d: &Option<String>| {
            d.as_deref()
                .unwrap_or("default")
                .chars()
                .map(|c| {
                    if c.is_ascii_alphanumeric() || c == '_' {
                        c
                    } else {
                        '_'
                    }
                })
                .collect::<String>()
        };
        match self.rail {
            Some(0) => String::new(),
            Some(NCCL_RAIL) => "-nccl".into(),
            Some(k) => format!("-rail{k}"),
            None => format!(
                "-{}-{}",
                safe(&self.client_device),
                safe(&self.server_device)
            ),
        }
    }

    /// From [`PairRun::to_json`]; `None` when it is not one.
    pub fn from_json(v: &Value) -> Option<PairRun> {
        Some(PairRun {
            client: v["client"].as_u64()? as usize,
            server: v["server"].as_u64()? as usize,
            role: v["role"].as_str()?.to_owned(),
            gbps: v["gbps"].as_f64(),
            error: v["error"].as_str().map(str::to_owned),
            doc: v["doc"].clone(),
            rail: v["rail"].as_u64().map(|r| r as usize),
            client_device: v["client_device"].as_str().map(str::to_owned),
            server_device: v["server_device"].as_str().map(str::to_owned),
            verified: v["verified"].as_bool().unwrap_or(false),
            corrupt: v["corrupt"].as_bool().unwrap_or(false),
            rerun: v["rerun"].as_str().unwrap_or("").to_owned(),
            share: v["share"].as_u64().map_or(1, |k| k.max(1) as usize),
        })
    }
}

pub use super::schedule::{partner, rounds};

/// Whether the port range of all runs fits below 65536 (with the rails
/// `--devices` names; a host's own device count is checked per run).
pub fn check_ports(a: &PairArgs, size: usize) -> Result<(), String> {
    let rails = (0..a.devices.len())
        .filter_map(|r| given_rails(a, r).map(|v| v.len()))
        .max()
        .unwrap_or(1);
    // The main rounds and the most retest rounds.
    let steps = rounds(size) + super::schedule::retest_rounds(size);
    let mut runs = 2 * (steps * combos(rails, a.cross_rails).len()) as u32;
    // --latency: the main rounds again on one rail, after them.
    if a.latency {
        runs += 2 * rounds(size) as u32;
    }
    if u32::from(a.pair_port) + runs > 65535 {
        return Err(format!(
            "--pair-port {}: {size} ranks need {runs} ports from there: take a lower port",
            a.pair_port
        ));
    }
    Ok(())
}

/// erdma-perf's command line for this rank's side of a run (`peer`: the
/// server's address, for the client).
fn perf_argv(
    a: &PairArgs,
    dev: Option<&str>,
    port: u16,
    iwarp: bool,
    peer: Option<&str>,
) -> Vec<String> {
    let mut v: Vec<String> = vec!["erdma-perf".into(), a.pair_test.clone()];
    v.extend(["--timeout", "30"].map(String::from));
    v.extend(a.perf_args.split_whitespace().map(String::from));
    if !a.no_verify && !v.iter().any(|s| s == "--verify") {
        v.push("--verify".into());
    }
    if let Some(d) = dev {
        v.extend(["-d".into(), d.to_owned()]);
    }
    if iwarp && !v.iter().any(|s| s == "-R" || s == "--rdma_cm") {
        v.push("-R".into());
    }
    v.extend(["--json".into(), "-p".into(), port.to_string()]);
    v.extend(peer.map(str::to_owned));
    v
}

/// A client's erdma-perf arguments: [`perf_argv`] towards `peer`, and over
/// RDMA CM (iWARP) from the client's own address `src` (`--source_ip`):
/// without it the kernel's route to the peer picks the device, which on a
/// host with several NICs in one subnet need not be the rail's one
/// (erdma-perf then refuses the run).
fn client_argv(
    a: &PairArgs,
    dev: Option<&str>,
    port: u16,
    iwarp: bool,
    peer: &str,
    src: &str,
) -> Vec<String> {
    let mut v = perf_argv(a, dev, port, iwarp, None);
    if iwarp && src.parse::<Ipv4Addr>().is_ok() && !v.iter().any(|x| x == "--source_ip") {
        v.extend(["--source_ip".into(), src.to_owned()]);
    }
    v.push(peer.to_owned());
    v
}

/// The options of this rank's runs (as its server side), or why they are
/// wrong (said once by rank 0 as a usage error).
pub fn options(a: &PairArgs, rank: usize) -> Result<Options, String> {
    let dev = given_rails(a, rank).and_then(|r| r.into_iter().next());
    let argv = perf_argv(a, dev.as_deref(), a.pair_port, false, None);
    match perf::options::parse(&argv) {
        Ok(Parsed::Run(o)) if o.server.is_some() => Err(format!(
            "--perf-args: '{}' is a server address: each pair's client is given its peer's",
            o.server.unwrap_or_default()
        )),
        Ok(Parsed::Run(o)) => Ok(*o),
        Ok(Parsed::Print(_)) => Err("--perf-args: -h/-V are not options of a run".into()),
        Err(e) if !a.no_verify && e.to_string().contains("--verify") => Err(format!(
            "--perf-args: {e}: the pair stage checks the payload by default; add --no-verify"
        )),
        Err(e) => Err(format!("--perf-args: {e}")),
    }
}

/// This rank's NICs as `--devices` names them (None: not given).
pub fn given_rails(a: &PairArgs, rank: usize) -> Option<Vec<String>> {
    let entry = a.devices.get(rank % a.devices.len().max(1))?;
    Some(entry.split('+').map(str::to_owned).collect())
}

/// This rank's rails: `--devices`' entry, else -d of `--perf-args` (one
/// rail), else every RDMA device of the host in name order; `[None]` (the
/// default device) when the host has none, so that the runs say why.
pub fn rails(a: &PairArgs, rank: usize, o: &Options) -> Vec<Option<String>> {
    if let Some(r) = given_rails(a, rank) {
        return r.into_iter().map(Some).collect();
    }
    if o.device.is_some() {
        return vec![None];
    }
    let mut names: Vec<String> = erdma::devices()
        .iter()
        .map(|d| d.name().to_owned())
        .collect();
    names.sort();
    if names.is_empty() {
        vec![None]
    } else {
        names.into_iter().map(Some).collect()
    }
}

/// One of a rank's NICs as its peers see it.
#[derive(Debug, Clone, PartialEq)]
pub struct Endpoint {
    /// The device (None: erdma-perf's default).
    pub device: Option<String>,
    /// Whether it is iWARP (RDMA CM only).
    pub iwarp: bool,
    /// The address peers reach it at.
    pub addr: String,
    /// Its port's active rate in Gb/s (none when the device does not tell).
    pub gbps: Option<f64>,
}

/// Every rail of this rank, as the JSON text it sends to the others.
pub fn local_endpoints(a: &PairArgs, rank: usize, o: &Options, host: &dyn Host) -> String {
    let eps: Vec<Value> = rails(a, rank, o)
        .into_iter()
        .map(|d| {
            let mut o = o.clone();
            if d.is_some() {
                o.device = d.clone();
            }
            let (iwarp, addr) = local_endpoint(&o, host);
            json!({"device": d, "iwarp": iwarp, "addr": addr, "gbps": port_gbps(&o)})
        })
        .collect();
    Value::Array(eps).to_string()
}

/// A rank's endpoints from [`local_endpoints`]' text (a bare address, as
/// older ranks sent, is one rail on the default device).
pub fn parse_endpoints(text: &str) -> Vec<Endpoint> {
    match serde_json::from_str::<Value>(text) {
        Ok(Value::Array(v)) => v
            .iter()
            .map(|e| Endpoint {
                device: e["device"].as_str().map(str::to_owned),
                iwarp: e["iwarp"].as_bool().unwrap_or(false),
                addr: e["addr"].as_str().unwrap_or("").to_owned(),
                gbps: e["gbps"].as_f64().filter(|g| *g > 0.0),
            })
            .collect(),
        _ => vec![Endpoint {
            device: None,
            iwarp: false,
            addr: text.to_owned(),
            gbps: None,
        }],
    }
}

pub use super::schedule::combos;

/// What this rank's device is: whether it is iWARP (connects through RDMA
/// CM only) and the address its peers reach it at (the device's IPv4: an
/// IPv4-mapped GID, else its interface's; else the host name).
pub fn local_endpoint(o: &Options, host: &dyn Host) -> (bool, String) {
    let list = erdma::devices();
    let dev = match &o.device {
        Some(n) => list.find(n).ok(),
        None => list.iter().next(),
    };
    let Some(ctx) = dev.and_then(|d| d.open().ok()) else {
        return (false, perf::output::hostname());
    };
    let iwarp = ctx.transport() == erdma::Transport::Iwarp;
    let table = ctx.gid_table(o.ib_port).unwrap_or_default();
    let ip = table.iter().find_map(|g| g.gid.to_ipv4()).or_else(|| {
        let netdev = table.iter().find_map(|g| g.netdev.clone())?;
        interface_ipv4(host, &netdev)
    });
    (
        iwarp,
        ip.map_or_else(perf::output::hostname, |ip| ip.to_string()),
    )
}

/// The active rate of `o`'s device and port in Gb/s (width x speed), none
/// when it cannot be read.
fn port_gbps(o: &Options) -> Option<f64> {
    let list = erdma::devices();
    let dev = match &o.device {
        Some(n) => list.find(n).ok(),
        None => list.iter().next(),
    }?;
    dev.open().ok()?.port(o.ib_port).ok()?.rate_gbps()
}

/// The slowest port rate of the rails every rank runs (`common_rails`
/// of each), none when any rank's is unknown: what the job sizes its runs
/// by ([`steps::run_source`]). A lost rank (no endpoints) is left out.
pub fn slowest_gbps(eps: &[Vec<Endpoint>]) -> Option<f64> {
    let rails = common_rails(eps);
    let mut slowest: Option<f64> = None;
    for e in eps.iter().filter(|e| !e.is_empty()) {
        for ep in e.iter().take(rails) {
            let g = ep.gbps?;
            slowest = Some(slowest.map_or(g, |s| s.min(g)));
        }
    }
    slowest
}

fn interface_ipv4(host: &dyn Host, name: &str) -> Option<Ipv4Addr> {
    let i = host.interfaces().iter().find(|i| i.name == name)?;
    i.addrs.iter().find_map(|a| match a {
        std::net::IpAddr::V4(v4) => Some(*v4),
        std::net::IpAddr::V6(_) => None,
    })
}

/// The rails every rank runs: the fewest any rank has (a rank with more
/// NICs has its extra ones untested, which the report says).
pub fn common_rails(eps: &[Vec<Endpoint>]) -> usize {
    // A rank lost before the exchange has none: it runs nothing.
    eps.iter()
        .map(Vec::len)
        .filter(|&n| n > 0)
        .min()
        .unwrap_or(0)
        .max(1)
}

/// This rank's share: in every round, with its partner, every rail (and
/// with `--cross-rails` every other NIC combination) both directions, the
/// lower rank the client first. The rails run one after another, each run
/// followed by `barrier`, so that each NIC's number is its own (runs of
/// several NICs at once would share the hosts' CPUs and PCIe). `eps[i]`:
/// rank i's endpoints ([`parse_endpoints`]).
pub fn run_rank(
    a: &PairArgs,
    rank: usize,
    eps: &[Vec<Endpoint>],
    barrier: &mut dyn FnMut(),
) -> Vec<PairRun> {
    let mut runs = Vec::new();
    let slots = vec![0; eps.len()];
    run_rounds(
        a,
        rank,
        eps,
        &slots,
        &[],
        &|_| false,
        barrier,
        &mut |_, r| runs.extend_from_slice(r),
    );
    runs
}

/// [`run_rank`] round by round: the rounds in `done` (measured by an
/// earlier, interrupted job) are skipped, and `after_round` gets each
/// other round's runs as soon as it ends (every rank calls it for every
/// round it runs, so it may meet the others there). A skipped round still
/// uses its ports, so that each run keeps the port it had. `slots[i]`:
/// rank i's index among the ranks of its host ([`crate::cluster::host_slots`]).
/// A run whose partner is `lost` (it stopped answering the barriers) is
/// not started: the others go on without it.
#[allow(clippy::too_many_arguments)]
pub fn run_rounds(
    a: &PairArgs,
    rank: usize,
    eps: &[Vec<Endpoint>],
    slots: &[usize],
    done: &[usize],
    lost: &dyn Fn(usize) -> bool,
    barrier: &mut dyn FnMut(),
    after_round: &mut dyn FnMut(usize, &[PairRun]),
) {
    let size = eps.len();
    let n = size.div_ceil(2) * 2;
    let pairs = combos(common_rails(eps), a.cross_rails);
    // Every run takes a block of ports, one per rank sharing a host: the
    // servers of one round that share a host each listen on their own.
    let block = slots.iter().max().map_or(1, |m| m + 1) as u32;
    let mut port = u32::from(a.pair_port);
    for r in 0..rounds(size) {
        if done.contains(&r) {
            port += 2 * pairs.len() as u32 * block;
            continue;
        }
        round_hook(rank, r);
        let mut runs = Vec::new();
        for &(ci, si) in &pairs {
            for d in 0..2 {
                if let Some(p) = partner(rank, r, n, size).filter(|&p| !lost(p)) {
                    let client = if d == 0 { rank.min(p) } else { rank.max(p) };
                    let server = if client == rank { p } else { rank };
                    let side = Side {
                        me: rank,
                        peer: p,
                        client: client == rank,
                        rail: (ci == si).then_some(ci),
                        client_ep: eps[client].get(ci).cloned(),
                        server_ep: eps[server].get(si).cloned(),
                    };
                    let mine = port + slots.get(server).copied().unwrap_or(0) as u32;
                    runs.push(one_run(a, &side, u16::try_from(mine).ok()));
                }
                port += block;
                barrier();
            }
        }
        after_round(r, &runs);
    }
}

/// `ERDMA_CLUSTER_HOOK=stop-in-round:R:K` (tests; with others,
/// comma-separated): rank R stops itself
/// (SIGSTOP) as round K starts, as a host that hangs mid-stage would;
/// `kill-in-round:R:K`: it dies (SIGKILL), as a host that crashes would.
fn round_hook(rank: usize, round: usize) {
    let (sig, rk) = if let Some(rk) = super::hook("stop-in-round") {
        (libc::SIGSTOP, rk)
    } else if let Some(rk) = super::hook("kill-in-round") {
        (libc::SIGKILL, rk)
    } else {
        return;
    };
    let target = rk.split_once(':').and_then(|(r, k)| {
        Some((
            r.trim().parse::<usize>().ok()?,
            k.trim().parse::<usize>().ok()?,
        ))
    });
    if target == Some((rank, round)) {
        // SAFETY: raise has no memory-safety preconditions.
        unsafe {
            libc::raise(sig);
        }
    }
}

/// `ERDMA_CLUSTER_HOOK=slow:R` (tests; with others, comma-separated):
/// every run rank R takes part in
/// runs with a path MTU of 256 bytes on both sides (`-m 256`), which
/// really moves its bytes slower (4 times the packets of a 1024-byte MTU
/// on Soft-RoCE), as a host with a wrong MTU would: the retest then finds
/// it slow again.
fn slow_hook(argv: &mut Vec<String>, me: usize, peer: usize) {
    let target = super::hook("slow").and_then(|r| r.parse::<usize>().ok());
    if target.is_some_and(|t| t == me || t == peer) {
        // After the test's name: the options before the peer's address.
        argv.splice(2..2, ["-m".to_owned(), "256".to_owned()]);
    }
}

/// The rounds of a [`steps::JobPlan`] (the main pass with `--budget`, or
/// a retest): in each step this rank runs its flows at once (one thread
/// each: a client and a server side, or several partners), every run on
/// the port [`steps::ports`] gives it from `first_port`, then meets the
/// others at `barrier`. Rounds in `done` are skipped (their ports kept),
/// and `after_round` gets each other round's runs, as in [`run_rounds`].
#[allow(clippy::too_many_arguments)]
pub fn run_plan(
    a: &PairArgs,
    rank: usize,
    eps: &[Vec<Endpoint>],
    slots: &[usize],
    rounds: &[steps::Round],
    first_port: u32,
    done: &[usize],
    lost: &dyn Fn(usize) -> bool,
    barrier: &mut dyn FnMut(),
    after_round: &mut dyn FnMut(usize, &[PairRun]),
) {
    let block = slots.iter().max().map_or(1, |m| m + 1) as u32;
    let width = steps::width(rounds);
    let mut port = first_port;
    for (r, round) in rounds.iter().enumerate() {
        if !done.contains(&r) {
            let runs = run_round(a, rank, eps, slots, r, round, port, width, lost, barrier);
            after_round(r, &runs);
        }
        port += round.len() as u32 * block * width as u32;
    }
}

/// This rank's share of round `r` of a plan (`round`: its steps), the
/// first step's ports from `port`, `width` ports per server in a step
/// ([`steps::ports`]): each step's runs at once, then a meeting of the
/// ranks at `barrier`. Runs with a `lost` partner are not started.
#[allow(clippy::too_many_arguments)]
pub fn run_round(
    a: &PairArgs,
    rank: usize,
    eps: &[Vec<Endpoint>],
    slots: &[usize],
    r: usize,
    round: &steps::Round,
    mut port: u32,
    width: usize,
    lost: &dyn Fn(usize) -> bool,
    barrier: &mut dyn FnMut(),
) -> Vec<PairRun> {
    let block = slots.iter().max().map_or(1, |m| m + 1) as u32;
    round_hook(rank, r);
    let mut runs = Vec::new();
    for step in round {
        let (at, next) = steps::ports(step, port, slots, block, width);
        port = next;
        let mine: Vec<(Side, Option<u16>, usize)> = step
            .iter()
            .zip(&at)
            .filter(|(f, _)| f.client == rank || f.server == rank)
            // A lost partner's runs are not started (see run_rounds).
            .filter(|(f, _)| !lost(if f.client == rank { f.server } else { f.client }))
            .map(|(f, &p)| {
                let side = Side {
                    me: rank,
                    peer: if f.client == rank { f.server } else { f.client },
                    client: f.client == rank,
                    rail: (f.ci == f.si).then_some(f.ci),
                    client_ep: eps.get(f.client).and_then(|e| e.get(f.ci)).cloned(),
                    server_ep: eps.get(f.server).and_then(|e| e.get(f.si)).cloned(),
                };
                (side, u16::try_from(p).ok(), steps::share(step, f))
            })
            .collect();
        runs.extend(at_once(a, &mine));
        barrier();
    }
    runs
}

/// This rank's runs of one step, each in its own thread (one alone runs
/// here), in the order given.
fn at_once(a: &PairArgs, mine: &[(Side, Option<u16>, usize)]) -> Vec<PairRun> {
    let one = |(side, port, share): &(Side, Option<u16>, usize)| PairRun {
        share: *share,
        ..one_run(a, side, *port)
    };
    if mine.len() < 2 {
        return mine.iter().map(one).collect();
    }
    std::thread::scope(|sc| {
        let handles: Vec<_> = mine.iter().map(|m| sc.spawn(move || one(m))).collect();
        handles
            .into_iter()
            .zip(mine)
            .map(|(h, (side, _, share))| {
                h.join().unwrap_or_else(|_| PairRun {
                    error: Some("the run's thread panicked".into()),
                    gbps: None,
                    doc: Value::Null,
                    verified: false,
                    share: *share,
                    ..one_run(a, side, None)
                })
            })
            .collect()
    })
}

/// How many times [`run_rank`] meets the others (once after each run of
/// every round, whether or not the rank has a partner in it).
pub fn barriers(a: &PairArgs, eps: &[Vec<Endpoint>]) -> usize {
    2 * rounds(eps.len()) * combos(common_rails(eps), a.cross_rails).len()
}

/// One side of one run.
struct Side {
    me: usize,
    peer: usize,
    client: bool,
    rail: Option<usize>,
    client_ep: Option<Endpoint>,
    server_ep: Option<Endpoint>,
}

/// `ERDMA_CLUSTER_HOOK=corrupt:R` (tests; with others, comma-separated):
/// rank R's first checked receive
/// reads as corrupted.
fn corrupt_hook(rank: usize) {
    let target = super::hook("corrupt").and_then(|r| r.parse().ok());
    if target == Some(rank) {
        perf::memory::corrupt_next_check();
    }
}

fn one_run(a: &PairArgs, s: &Side, port: Option<u16>) -> PairRun {
    let (me, peer, client) = (s.me, s.peer, s.client);
    let (mine, theirs) = if client {
        (&s.client_ep, &s.server_ep)
    } else {
        (&s.server_ep, &s.client_ep)
    };
    let dev = mine.as_ref().and_then(|e| e.device.clone());
    let iwarp = mine.as_ref().is_some_and(|e| e.iwarp);
    let peer_addr = theirs.as_ref().map_or("", |e| e.addr.as_str());
    let rank = me;
    let rerun = rerun_of(a, s, port.unwrap_or(a.pair_port));
    let Some(port) = port else {
        return PairRun {
            client: if client { me } else { peer },
            server: if client { peer } else { me },
            role: if client { "client" } else { "server" }.into(),
            gbps: None,
            error: Some("no TCP port left for this run: take a lower --pair-port".into()),
            doc: Value::Null,
            rail: s.rail,
            client_device: s.client_ep.as_ref().and_then(|e| e.device.clone()),
            server_device: s.server_ep.as_ref().and_then(|e| e.device.clone()),
            verified: false,
            corrupt: false,
            rerun,
            share: 1,
        };
    };
    corrupt_hook(rank);
    let mut argv = if client {
        let src = mine.as_ref().map_or("", |e| e.addr.as_str());
        client_argv(a, dev.as_deref(), port, iwarp, peer_addr, src)
    } else {
        perf_argv(a, dev.as_deref(), port, iwarp, None)
    };
    slow_hook(&mut argv, me, peer);
    let (doc, outcome) = match perf::options::parse(&argv) {
        Ok(Parsed::Run(mut o)) => {
            // A server whose client never comes (it failed first) gives
            // up like any other step, so that the rounds go on.
            o.wait = Some(o.timeout);
            perf::run_quiet(&o)
        }
        Ok(Parsed::Print(_)) => (None, Ok(())),
        Err(e) => (None, Err(e)),
    };
    let doc = doc.unwrap_or(Value::Null);
    let gbps = if client { last_gbps(&doc) } else { None };
    let corrupt = matches!(outcome, Err(perf::error::PerfError::Verify(_)));
    let error = outcome.err().map(|e| e.to_string());
    PairRun {
        client: if client { rank } else { peer },
        server: if client { peer } else { rank },
        role: if client { "client" } else { "server" }.into(),
        gbps,
        verified: !a.no_verify && error.is_none(),
        corrupt,
        error,
        doc,
        rail: s.rail,
        client_device: s.client_ep.as_ref().and_then(|e| e.device.clone()),
        server_device: s.server_ep.as_ref().and_then(|e| e.device.clone()),
        rerun,
        share: 1,
    }
}

/// The two erdma-perf commands of a run, each on its rank's host.
fn rerun_of(a: &PairArgs, s: &Side, port: u16) -> String {
    let cmd = |ep: &Option<Endpoint>, peer: Option<&str>| {
        let dev = ep.as_ref().and_then(|e| e.device.as_deref());
        let iwarp = ep.as_ref().is_some_and(|e| e.iwarp);
        let mut v = match (peer, ep) {
            (Some(peer), Some(e)) => client_argv(a, dev, port, iwarp, peer, &e.addr),
            _ => perf_argv(a, dev, port, iwarp, peer),
        };
        v.retain(|x| x != "--json");
        v.join(" ")
    };
    let (client, server) = if s.client {
        (s.me, s.peer)
    } else {
        (s.peer, s.me)
    };
    let addr = s.server_ep.as_ref().map_or("SERVER", |e| e.addr.as_str());
    format!(
        "rank {server}: {}; rank {client}: {}",
        cmd(&s.server_ep, None),
        cmd(&s.client_ep, Some(addr))
    )
}

/// The BW average (Gb/s) of the document's last row.
pub fn last_gbps(doc: &Value) -> Option<f64> {
    doc["results"].as_array()?.last()?["bw_avg_gbps"].as_f64()
}

/// One rail's matrix: the NICs of index `rail` on every rank.
#[derive(Debug, Clone, PartialEq)]
pub struct Rail {
    /// The index.
    pub rail: usize,
    /// Each rank's NIC on this rail (None: the default device).
    pub devices: Vec<Option<String>>,
    /// `gbps[client][server]`.
    pub gbps: Vec<Vec<Option<f64>>>,
}

/// One NIC's share of the pair stage.
#[derive(Debug, Clone, PartialEq)]
pub struct NicRuns {
    /// Its rank.
    pub rank: usize,
    /// The device (None: the default).
    pub device: Option<String>,
    /// Run sides it took part in.
    pub runs: usize,
    /// Those that failed.
    pub failed: usize,
    /// The slowest Gb/s of its runs.
    pub slowest: Option<f64>,
}

impl NicRuns {
    fn slower(&mut self, g: Option<f64>) {
        if let Some(g) = g {
            self.slowest = Some(self.slowest.map_or(g, |x| x.min(g)));
        }
    }
}

/// The index of (rank, device) in `m`, added when new.
fn nic_at(m: &mut Vec<NicRuns>, rank: usize, dev: &Option<String>) -> usize {
    if let Some(i) = m.iter().position(|n| n.rank == rank && n.device == *dev) {
        return i;
    }
    m.push(NicRuns {
        rank,
        device: dev.clone(),
        runs: 0,
        failed: 0,
        slowest: None,
    });
    m.len() - 1
}

/// What the text grid shows in a cell no round of the schedule planned.
pub const NOT_MEASURED: &str = "n/m";

/// A matrix of Gb/s as text (row: client, column: server); a cell without
/// a value reads "failed" when `planned` says it was to be measured, else
/// [`NOT_MEASURED`].
fn grid(
    gbps: &[Vec<Option<f64>>],
    labels: &[String],
    planned: &dyn Fn(usize, usize) -> bool,
) -> String {
    let w = labels.iter().map(|l| l.len()).max().unwrap_or(6).max(8);
    let mut s = format!("{:<w$}", "client");
    for l in labels {
        s.push_str(&format!(" {l:>w$}"));
    }
    s.push('\n');
    for (i, row) in gbps.iter().enumerate() {
        s.push_str(&format!("{:<w$}", labels[i]));
        for (j, v) in row.iter().enumerate() {
            let cell = match (i == j, v) {
                (true, _) => "-".to_owned(),
                (false, Some(g)) => format!("{g:.2}"),
                (false, None) if planned(i, j) => "failed".to_owned(),
                (false, None) => NOT_MEASURED.to_owned(),
            };
            s.push_str(&format!(" {cell:>w$}"));
        }
        s.push('\n');
    }
    s
}

/// The gathered runs of every rank, as a matrix.
#[derive(Debug, Clone)]
pub struct Matrix {
    /// The test every pair ran.
    pub test: String,
    /// `gbps[client][server]` of rail 0.
    pub gbps: Vec<Vec<Option<f64>>>,
    /// Every rail's matrix (rail 0 first).
    pub rails: Vec<Rail>,
    /// Every run, both sides.
    pub runs: Vec<PairRun>,
    /// `planned[client][server]`: whether a round of the schedule was to
    /// measure the cell (on every rail); `None`: every cell was (the full
    /// matrix). A planned cell without a value failed; one no round
    /// planned is not measured, which fails nothing.
    pub planned: Option<Vec<Vec<bool>>>,
}

impl Matrix {
    /// From the runs each rank sent (index = rank; each a JSON array).
    pub fn from_ranks(test: &str, raw: &[Vec<u8>]) -> Result<Matrix, String> {
        let n = raw.len();
        let mut runs = Vec::new();
        for (rank, bytes) in raw.iter().enumerate() {
            let v: Value = serde_json::from_slice(bytes)
                .map_err(|e| format!("rank {rank}: its pair runs are not JSON: {e}"))?;
            for r in v.as_array().into_iter().flatten() {
                let run = PairRun::from_json(r)
                    .filter(|r| r.client < n && r.server < n)
                    .ok_or_else(|| format!("rank {rank}: a pair run is malformed: {r}"))?;
                runs.push(run);
            }
        }
        let mut rails: Vec<Rail> = Vec::new();
        for r in runs.iter().filter(|r| r.role == "client") {
            let Some(k) = r.rail else { continue };
            let i = match rails.iter().position(|x| x.rail == k) {
                Some(i) => i,
                None => {
                    rails.push(Rail {
                        rail: k,
                        devices: vec![None; n],
                        gbps: vec![vec![None; n]; n],
                    });
                    rails.len() - 1
                }
            };
            let rail = &mut rails[i];
            rail.gbps[r.client][r.server] = r.gbps;
            rail.devices[r.client] = r.client_device.clone();
            rail.devices[r.server] = r.server_device.clone();
        }
        rails.sort_by_key(|r| r.rail);
        let gbps = rails
            .first()
            .map_or_else(|| vec![vec![None; n]; n], |r| r.gbps.clone());
        Ok(Matrix {
            test: test.to_owned(),
            gbps,
            rails,
            runs,
            planned: None,
        })
    }

    /// The matrix with only the directed `(client, server)` cells of
    /// `flows` planned (what the schedule's rounds ran); flows naming a
    /// rank outside the matrix are ignored.
    pub fn with_planned(mut self, flows: &[(usize, usize)]) -> Matrix {
        let n = self.gbps.len();
        let mut planned = vec![vec![false; n]; n];
        for &(c, s) in flows.iter().filter(|(c, s)| *c < n && *s < n) {
            planned[c][s] = true;
        }
        self.planned = Some(planned);
        self
    }

    /// Whether the cell (`client`, `server`) was to be measured.
    pub fn is_planned(&self, client: usize, server: usize) -> bool {
        self.planned.as_ref().is_none_or(|p| {
            p.get(client)
                .and_then(|row| row.get(server))
                .copied()
                .unwrap_or(false)
        })
    }

    /// The off-diagonal cells no round planned, `(client, server)` in
    /// order (none for the full matrix).
    pub fn not_measured(&self) -> Vec<(usize, usize)> {
        let n = self.gbps.len();
        if self.planned.is_none() {
            return Vec::new();
        }
        (0..n)
            .flat_map(|i| (0..n).map(move |j| (i, j)))
            .filter(|&(i, j)| i != j && !self.is_planned(i, j))
            .collect()
    }

    /// How rank `i` is named with its NIC: `host/rxe0`.
    fn who(labels: &[String], i: usize, dev: &Option<String>) -> String {
        match dev {
            Some(d) => format!("{}/{d}", labels[i]),
            None => labels[i].clone(),
        }
    }

    /// Every NIC's runs (both roles), in rank order.
    pub fn per_nic(&self) -> Vec<NicRuns> {
        let mut m: Vec<NicRuns> = Vec::new();
        for r in &self.runs {
            let (rank, dev) = if r.role == "client" {
                (r.client, &r.client_device)
            } else {
                (r.server, &r.server_device)
            };
            let i = nic_at(&mut m, rank, dev);
            m[i].runs += 1;
            m[i].failed += usize::from(r.error.is_some());
            // The client's number is the pair's: it counts for both NICs.
            m[i].slower(r.gbps);
            if r.role == "client" {
                let j = nic_at(&mut m, r.server, &r.server_device);
                m[j].slower(r.gbps);
            }
        }
        m.sort_by(|a, b| (a.rank, &a.device).cmp(&(b.rank, &b.device)));
        m
    }

    /// Fail when a run failed or a planned cell ([`Matrix::is_planned`])
    /// has no value; ok otherwise (a cell no round planned fails nothing).
    pub fn status(&self) -> Status {
        let n = self.gbps.len();
        let missing = self
            .rails
            .iter()
            .map(|r| &r.gbps)
            .chain(std::iter::once(&self.gbps))
            .any(|g| {
                (0..n).any(|i| (0..n).any(|j| i != j && g[i][j].is_none() && self.is_planned(i, j)))
            });
        if missing || self.runs.iter().any(|r| r.error.is_some()) {
            Status::Fail
        } else {
            Status::Ok
        }
    }

    /// The text section (`labels[i]`: rank i's name).
    pub fn render_text(&self, labels: &[String]) -> String {
        let n = self.gbps.len();
        let nccl = NCCL_RAIL;
        let mut s = if !self.rails.is_empty() && self.rails.iter().all(|r| r.rail == nccl) {
            format!(
                "# NCCL pairs: {} busbw x 8 in Gb/s (each pair's cells alike)\n",
                NCCL_TEST
            )
        } else {
            format!(
                "# NIC pairs: erdma-perf {}, BW average in Gb/s (row: client, column: server)\n",
                self.test
            )
        };
        if n < 2 {
            s.push_str("one rank: no pair to measure\n");
            return s;
        }
        let planned = |i: usize, j: usize| self.is_planned(i, j);
        if self.rails.len() < 2 {
            s.push_str(&grid(&self.gbps, labels, &planned));
        }
        for r in self.rails.iter().filter(|_| self.rails.len() > 1) {
            let devs: Vec<String> = r
                .devices
                .iter()
                .map(|d| d.clone().unwrap_or_else(|| "default".into()))
                .collect();
            if r.rail == nccl {
                s.push_str(&format!(
                    "rail nccl: {} busbw x 8 in Gb/s (each pair's cells alike)\n",
                    NCCL_TEST
                ));
            } else {
                s.push_str(&format!("rail {} ({})\n", r.rail, devs.join(", ")));
            }
            s.push_str(&grid(&r.gbps, labels, &planned));
        }
        s.push_str(&self.not_measured_line());
        for r in self
            .runs
            .iter()
            .filter(|r| r.rail.is_none() && r.role == "client")
        {
            s.push_str(&format!(
                "cross-rail {} -> {}: {}\n",
                Self::who(labels, r.client, &r.client_device),
                Self::who(labels, r.server, &r.server_device),
                r.gbps.map_or("failed".into(), |g| format!("{g:.2} Gb/s"))
            ));
        }
        s.push_str(&self.nic_lines(labels));
        s.push_str(&self.verified_line());
        s.push_str(&self.tail_text(labels));
        s
    }

    /// One line per NIC when there are several per rank or one failed.
    fn nic_lines(&self, labels: &[String]) -> String {
        let nics = self.per_nic();
        let several = nics.iter().filter(|n| n.rank == 0).count() > 1;
        if !several && nics.iter().all(|n| n.failed == 0) {
            return String::new();
        }
        let mut s = String::from("# per NIC (every run it took part in, both roles)\n");
        for n in nics {
            let name = Self::who(labels, n.rank, &n.device);
            let slow = n
                .slowest
                .map_or("-".into(), |g| format!("slowest {g:.2} Gb/s"));
            let (runs, failed) = (n.runs, n.failed);
            let v = if failed == 0 { "ok  " } else { "fail" };
            s.push_str(&format!(
                "{v}  {name}: {runs} run(s), {failed} failed, {slow}\n"
            ));
        }
        s
    }

    /// How many cells the schedule left out, when it left any.
    fn not_measured_line(&self) -> String {
        let n = self.gbps.len();
        match self.not_measured().len() {
            0 => String::new(),
            k => format!(
                "{NOT_MEASURED}: not measured, no round of the schedule planned it ({k} of {} \
                 cells; not a failure)\n",
                n * (n - 1)
            ),
        }
    }

    /// Whether the payload was checked.
    fn verified_line(&self) -> String {
        let ok = self.runs.iter().filter(|r| r.verified).count();
        match self.runs.iter().any(|r| r.verified || r.corrupt) {
            true => format!(
                "payload: {ok} of {} run sides checked every byte as sent\n",
                self.runs.len()
            ),
            false => String::new(),
        }
    }

    fn tail_text(&self, labels: &[String]) -> String {
        let mut s = String::new();
        for r in self.runs.iter().filter(|r| r.corrupt) {
            s.push_str(&format!(
                "fail  payload corrupted: {} -> {} (found by the {}): {}\n",
                Self::who(labels, r.client, &r.client_device),
                Self::who(labels, r.server, &r.server_device),
                r.role,
                r.error.as_deref().unwrap_or("")
            ));
        }
        if let (Some(lo), Some(hi)) = (self.extreme(false), self.extreme(true)) {
            s.push_str(&format!(
                "slowest {} -> {} {:.2} Gb/s, fastest {} -> {} {:.2} Gb/s\n",
                labels[lo.0], labels[lo.1], lo.2, labels[hi.0], labels[hi.1], hi.2
            ));
        }
        // Each error once, with the runs that had it (a missing device
        // fails every run alike).
        let mut by_error: std::collections::BTreeMap<&str, Vec<String>> = Default::default();
        for r in self.runs.iter().filter(|r| !r.corrupt) {
            if let Some(e) = &r.error {
                let run = format!(
                    "{} -> {} ({})",
                    Self::who(labels, r.client, &r.client_device),
                    Self::who(labels, r.server, &r.server_device),
                    r.role
                );
                by_error.entry(e).or_default().push(run);
            }
        }
        for (e, runs) in by_error {
            let shown = runs.iter().take(4).cloned().collect::<Vec<_>>().join(", ");
            let more = match runs.len() {
                n if n > 4 => format!(", ... ({} more)", n - 4),
                _ => String::new(),
            };
            s.push_str(&format!(
                "fail  {} run(s): {e}\n      in: {shown}{more}\n",
                runs.len()
            ));
        }
        s
    }

    /// The slowest (`fastest` false) or fastest pair: (client, server, Gb/s).
    fn extreme(&self, fastest: bool) -> Option<(usize, usize, f64)> {
        let all = self.gbps.iter().enumerate().flat_map(|(i, row)| {
            row.iter()
                .enumerate()
                .filter_map(move |(j, v)| v.map(|g| (i, j, g)))
        });
        all.reduce(|a, b| if (b.2 > a.2) == fastest { b } else { a })
    }

    /// The `pairs` object of the cluster's JSON document; with a schedule
    /// that left cells out, `not_measured` lists them as `[client,
    /// server]` (their `gbps` is null as a failed cell's is).
    pub fn to_json(&self) -> Value {
        let mut v = json!({
            "test": self.test,
            "unit": "Gb/s",
            "status": self.status(),
            "gbps": self.gbps,
            "rails": self.rails.iter().map(|r| json!({
                "rail": r.rail, "devices": r.devices, "gbps": r.gbps,
            })).collect::<Vec<_>>(),
            "verified": self.runs.iter().any(|r| r.verified || r.corrupt),
            "runs": self.runs.iter().map(PairRun::to_json).collect::<Vec<_>>(),
        });
        if self.planned.is_some() {
            let cells: Vec<[usize; 2]> = self.not_measured().iter().map(|&(c, s)| [c, s]).collect();
            v["not_measured"] = json!(cells);
        }
        v
    }

    /// The client documents to write under `--out`: (client, server, doc).
    /// Rail 0's runs keep the name `perf-CLIENT-SERVER.json` (what
    /// `--baseline` reads); the file name's `suffix` is `-railK` for other
    /// rails and `-CLIENTNIC-SERVERNIC` for cross-rail runs.
    pub fn client_docs(&self) -> impl Iterator<Item = (usize, usize, String, &Value)> {
        self.runs
            .iter()
            .filter(|r| r.role == "client" && !r.doc.is_null())
            .map(|r| (r.client, r.server, r.file_suffix(), &r.doc))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn schedule_meets_every_pair_once() {
        for size in 2..=9usize {
            let n = size.div_ceil(2) * 2;
            let mut met = vec![vec![0; size]; size];
            for r in 0..rounds(size) {
                for (rank, row) in met.iter_mut().enumerate() {
                    if let Some(p) = partner(rank, r, n, size) {
                        assert_eq!(partner(p, r, n, size), Some(rank), "symmetric");
                        row[p] += 1;
                    }
                }
            }
            for (i, row) in met.iter().enumerate() {
                for (j, &m) in row.iter().enumerate() {
                    assert_eq!(m, usize::from(i != j), "size {size}: {i} and {j}");
                }
            }
        }
        assert_eq!(rounds(1), 0);
    }

    fn args(extra: &str) -> PairArgs {
        PairArgs {
            pairs: true,
            pair_test: "write_bw".into(),
            devices: vec!["rxe0".into(), "rxe1".into()],
            perf_args: extra.into(),
            pair_port: 18600,
            no_verify: false,
            cross_rails: false,
            latency: false,
            latency_args: super::LATENCY_ARGS.into(),
            rails_serial: false,
            directions_serial: false,
        }
    }

    #[test]
    fn argv_of_each_side() {
        let a = args("-x 1 -s 65536");
        let c = perf_argv(&a, Some("rxe1"), 18601, false, Some("10.0.0.1"));
        assert_eq!(
            c.join(" "),
            "erdma-perf write_bw --timeout 30 -x 1 -s 65536 --verify -d rxe1 --json -p 18601 10.0.0.1"
        );
        let mut nv = args("-x 1");
        nv.no_verify = true;
        let s = perf_argv(&nv, Some("siw0"), 18600, true, None);
        assert_eq!(
            s.join(" "),
            "erdma-perf write_bw --timeout 30 -x 1 -d siw0 -R --json -p 18600"
        );
        // An iWARP client connects from its own address (its rail's NIC);
        // a RoCE one, or one without an IPv4 address, as before.
        let w = client_argv(&a, Some("siw2"), 18602, true, "10.0.0.1", "10.0.0.3");
        assert_eq!(
            w.join(" "),
            "erdma-perf write_bw --timeout 30 -x 1 -s 65536 --verify -d siw2 -R --json -p 18602 \
             --source_ip 10.0.0.3 10.0.0.1"
        );
        let r = client_argv(&a, Some("rxe1"), 18601, false, "10.0.0.1", "10.0.0.3");
        assert_eq!(r, c);
        let h = client_argv(&a, Some("siw2"), 18602, true, "10.0.0.1", "host-b");
        assert!(!h.contains(&"--source_ip".to_owned()), "{h:?}");
        let d = options(&args("-D 2"), 0).unwrap_err();
        assert!(d.ends_with("add --no-verify"), "{d}");
        assert!(options(&a, 0).is_ok());
        let bad = options(&args("--no-such-option"), 0).unwrap_err();
        assert!(bad.starts_with("--perf-args: "), "{bad}");
        let addr = options(&args("-s 4096 10.0.0.9"), 0).unwrap_err();
        assert!(addr.contains("'10.0.0.9' is a server address"), "{addr}");
    }

    #[test]
    fn ports_must_fit() {
        let mut a = args("");
        assert!(check_ports(&a, 64).is_ok());
        a.pair_port = 65500;
        assert!(
            check_ports(&a, 64)
                .unwrap_err()
                .contains("take a lower port")
        );
    }

    fn run(
        client: usize,
        server: usize,
        role: &str,
        gbps: Option<f64>,
        err: Option<&str>,
    ) -> Value {
        PairRun {
            client,
            server,
            role: role.into(),
            gbps,
            error: err.map(str::to_owned),
            doc: json!({"tool": "erdma-perf", "results": [{"bw_avg_gbps": gbps}]}),
            rail: Some(0),
            client_device: Some(format!("d{client}")),
            server_device: Some(format!("d{server}")),
            verified: err.is_none(),
            corrupt: err.is_some_and(|e| e.contains("corrupted")),
            rerun: String::new(),
            share: 1,
        }
        .to_json()
    }

    #[test]
    fn matrix_from_gathered_runs() {
        let r0 = json!([
            run(0, 1, "client", Some(20.5), None),
            run(1, 0, "server", None, None)
        ]);
        let r1 = json!([
            run(0, 1, "server", None, None),
            run(1, 0, "client", Some(19.0), None)
        ]);
        let raw: Vec<Vec<u8>> = [r0, r1]
            .iter()
            .map(|v| v.to_string().into_bytes())
            .collect();
        let m = Matrix::from_ranks("write_bw", &raw).unwrap();
        assert_eq!(m.gbps, vec![vec![None, Some(20.5)], vec![Some(19.0), None]]);
        assert_eq!(m.status(), Status::Ok);
        let text = m.render_text(&["a".into(), "b".into()]);
        assert!(
            text.contains("slowest b -> a 19.00 Gb/s, fastest a -> b 20.50 Gb/s"),
            "{text}"
        );
        assert_eq!(m.client_docs().count(), 2);
        assert_eq!(m.to_json()["gbps"][0][1], 20.5);
    }

    #[test]
    fn a_failed_side_fails_the_matrix() {
        let r0 = json!([run(
            0,
            1,
            "client",
            None,
            Some("connect to 10.0.0.2: refused")
        )]);
        let r1 = json!([run(0, 1, "server", None, Some("accept: timed out"))]);
        let raw: Vec<Vec<u8>> = [r0, r1]
            .iter()
            .map(|v| v.to_string().into_bytes())
            .collect();
        let m = Matrix::from_ranks("write_bw", &raw).unwrap();
        assert_eq!(m.status(), Status::Fail);
        let text = m.render_text(&["a".into(), "b".into()]);
        assert!(
            text.contains(
                "fail  1 run(s): connect to 10.0.0.2: refused\n      in: a/d0 -> b/d1 (client)"
            ),
            "{text}"
        );
        assert!(text.contains("failed"), "{text}");
    }

    /// Three ranks whose schedule planned 0 <-> 1 and 1 -> 2 only: 0 -> 1
    /// measured, 1 -> 0 and 1 -> 2 with `missing` as their runs.
    fn scheduled(missing: &[Value]) -> Matrix {
        let mut r0 = vec![run(0, 1, "client", Some(20.0), None)];
        r0.extend(missing.iter().cloned());
        let raw = vec![
            Value::Array(r0).to_string().into_bytes(),
            b"[]".to_vec(),
            b"[]".to_vec(),
        ];
        Matrix::from_ranks("write_bw", &raw)
            .unwrap()
            .with_planned(&[(0, 1), (1, 0), (1, 2)])
    }

    #[test]
    fn a_cell_no_round_planned_is_not_measured_not_failed() {
        let ok = [
            run(1, 0, "client", Some(19.0), None),
            run(1, 2, "client", Some(18.0), None),
        ];
        let m = scheduled(&ok);
        assert_eq!(
            m.status(),
            Status::Ok,
            "4 cells unplanned, every planned one measured"
        );
        assert!(m.is_planned(1, 2) && !m.is_planned(2, 1) && !m.is_planned(0, 2));
        assert_eq!(m.not_measured(), vec![(0, 2), (2, 0), (2, 1)]);
        let text = m.render_text(&["a".into(), "b".into(), "c".into()]);
        assert!(!text.contains("failed"), "{text}");
        let c_row = text.lines().find(|l| l.starts_with("c ")).unwrap();
        assert_eq!(c_row.matches(NOT_MEASURED).count(), 2, "{text}");
        assert!(
            text.contains("n/m: not measured, no round of the schedule planned it (3 of 6 cells; not a failure)"),
            "{text}"
        );
        let j = m.to_json();
        assert_eq!(j["status"], "ok");
        assert_eq!(j["not_measured"], json!([[0, 2], [2, 0], [2, 1]]));
        assert_eq!(j["gbps"][2][0], Value::Null, "null as before");
    }

    #[test]
    fn a_planned_cell_without_a_value_still_fails() {
        // 1 -> 2's run failed; 1 -> 0 was planned but no run came back.
        let m = scheduled(&[run(1, 2, "client", None, Some("connect: refused"))]);
        assert_eq!(m.status(), Status::Fail);
        let m = scheduled(&[run(1, 2, "client", Some(18.0), None)]);
        assert_eq!(m.status(), Status::Fail, "planned 1 -> 0 has no record");
        let text = m.render_text(&["a".into(), "b".into(), "c".into()]);
        let b_row = text.lines().find(|l| l.starts_with("b ")).unwrap();
        assert!(
            b_row.contains("failed") && b_row.contains("18.00"),
            "{text}"
        );
        // The full matrix (no plan): every empty cell fails, no key added.
        let raw = vec![
            json!([run(0, 1, "client", Some(20.0), None)])
                .to_string()
                .into_bytes(),
            b"[]".to_vec(),
        ];
        let full = Matrix::from_ranks("write_bw", &raw).unwrap();
        assert_eq!(full.status(), Status::Fail);
        assert!(full.not_measured().is_empty());
        assert!(full.to_json().get("not_measured").is_none());
        assert!(
            !full
                .render_text(&["a".into(), "b".into()])
                .contains(NOT_MEASURED)
        );
    }

    #[test]
    fn garbage_from_a_rank_is_an_error() {
        assert!(Matrix::from_ranks("write_bw", &[b"[{\"client\": 7}]".to_vec()]).is_err());
        assert!(Matrix::from_ranks("write_bw", &[b"not json".to_vec()]).is_err());
        let far = json!([run(0, 5, "client", Some(1.0), None)])
            .to_string()
            .into_bytes();
        assert!(
            Matrix::from_ranks("write_bw", &[far]).is_err(),
            "rank out of range"
        );
    }

    #[test]
    fn rails_from_devices_and_combos() {
        let mut a = args("");
        a.devices = vec!["rxe0+siw0".into(), "rxe1+siw1".into()];
        assert_eq!(given_rails(&a, 1), Some(vec!["rxe1".into(), "siw1".into()]));
        assert_eq!(given_rails(&a, 2).unwrap()[0], "rxe0");
        assert_eq!(combos(2, false), vec![(0, 0), (1, 1)]);
        assert_eq!(combos(2, true), vec![(0, 0), (1, 1), (0, 1), (1, 0)]);
        // 64 ranks, 2 rails: 2 x 63 rounds x 2 runs from 65100 fit, x 4 (cross) not.
        a.pair_port = 65100;
        assert!(check_ports(&a, 64).is_ok());
        a.cross_rails = true;
        assert!(check_ports(&a, 64).is_err());
        let eps = vec![
            parse_endpoints(
                r#"[{"device":"rxe0","iwarp":false,"addr":"10.0.0.1"},{"device":"siw0","iwarp":true,"addr":"10.0.0.1"}]"#,
            ),
            parse_endpoints("10.0.0.2"),
        ];
        assert_eq!(eps[0][1].device.as_deref(), Some("siw0"));
        assert!(eps[0][1].iwarp);
        assert_eq!(eps[1][0].addr, "10.0.0.2");
        assert_eq!(common_rails(&eps), 1);
        assert_eq!(barriers(&a, &eps), 2);
    }

    #[test]
    fn per_rail_matrices_nics_and_a_corrupted_run() {
        let mut r1 = PairRun::from_json(&run(0, 1, "client", Some(10.0), None)).unwrap();
        r1.rail = Some(1);
        r1.client_device = Some("siw0".into());
        r1.server_device = Some("siw1".into());
        let mut bad = PairRun::from_json(&run(
            0,
            1,
            "server",
            None,
            Some("RDMA WRITE target 0: the data was corrupted"),
        ))
        .unwrap();
        bad.rail = Some(1);
        bad.client_device = Some("siw0".into());
        bad.server_device = Some("siw1".into());
        let r0 = json!([run(0, 1, "client", Some(20.0), None), r1.to_json()]);
        let rr = json!([
            run(1, 0, "client", Some(19.0), None),
            run(0, 1, "server", None, None),
            bad.to_json()
        ]);
        let raw: Vec<Vec<u8>> = [r0, rr]
            .iter()
            .map(|v| v.to_string().into_bytes())
            .collect();
        let m = Matrix::from_ranks("write_bw", &raw).unwrap();
        assert_eq!(m.rails.len(), 2);
        assert_eq!(
            m.rails[1].devices,
            vec![Some("siw0".into()), Some("siw1".into())]
        );
        assert_eq!(m.rails[1].gbps[0][1], Some(10.0));
        assert_eq!(m.gbps[0][1], Some(20.0), "rail 0 stays the main matrix");
        // Rail 1 has no 1 -> 0 run: a failure, as is the corrupted payload.
        assert_eq!(m.status(), Status::Fail);
        let t = m.render_text(&["a".into(), "b".into()]);
        assert!(t.contains("rail 1 (siw0, siw1)"), "{t}");
        assert!(
            t.contains("fail  payload corrupted: a/siw0 -> b/siw1 (found by the server): RDMA WRITE target 0"),
            "{t}"
        );
        assert!(
            t.contains("fail  b/siw1: 1 run(s), 1 failed, slowest 10.00 Gb/s"),
            "{t}"
        );
        let j = m.to_json();
        assert_eq!(j["rails"][1]["devices"][1], "siw1");
        assert_eq!(j["runs"][0]["verified"], true);
        let sfx: Vec<String> = m.client_docs().map(|d| d.2).collect();
        assert_eq!(sfx, vec!["", "-rail1", ""]);
    }
}
