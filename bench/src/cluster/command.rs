//! The `erdma-cluster` process: the launch checked against MPI, the
//! arguments, the ranks' world (exchanges bounded by `--timeout`), then
//! the stages in order (the hosts' checks, the pair stage on the job's
//! network through [`super::job`], the NCCL stage) and rank 0's report
//! ([`super::report_with`]); `--simulate` takes the same path on the
//! model's network ([`super::simulate`]). The binary's `main` calls
//! [`run`] alone.
use crate::cli;
use crate::cluster::{self, Args, nccl, pairs, traffic};
use crate::doctor::{self, system::SystemHost};
use crate::meta::RunMeta;

/// `--out DIR` made ready before the first stage
/// ([`crate::outfile::check_dir`]): 0, or [`cluster::EXIT_OUTPUT`]
/// once the line saying why is printed.
fn out_checked(args: &Args) -> i32 {
    match args
        .out
        .as_deref()
        .map(|d| crate::outfile::check_dir("--out", d))
    {
        Some(Err(e)) => {
            let line = format!("erdma-cluster: {e}\n");
            let _ = std::io::Write::write_all(&mut std::io::stderr(), line.as_bytes());
            cluster::EXIT_OUTPUT
        }
        _ => 0,
    }
}

/// This rank's erdma-doctor document, with what tells its machine from
/// the others ([`cluster::Machine`]: `machine_id`, the full `hostname`).
fn local_report(args: &Args, host: &SystemHost) -> Vec<u8> {
    let report = doctor::evaluate(host, &args.skip);
    let mut doc = doctor::render_json(&RunMeta::now("erdma-doctor"), &report);
    let me = cluster::Machine::this();
    doc["machine_id"] = me.id.into();
    doc["hostname"] = me.name.into();
    doc.to_string().into_bytes()
}

/// Parses the arguments; on an error, `speak` decides whether this rank
/// prints it (rank 0 only, so that N ranks do not print it N times).
fn parse(speak: bool, size: usize) -> Result<Args, i32> {
    let argv = if speak {
        cli::args(Some("erdma-cluster"), cluster::EXIT_USAGE)
    } else {
        cli::args_silent(cluster::EXIT_USAGE)
    };
    let a = argv.and_then(|argv| cli::parse::<Args>(&argv, cluster::EXIT_USAGE, speak))?;
    let pairs_ok = || -> Result<(), String> {
        if a.pair.pairs {
            pairs::options(&a.pair, 0)?;
            pairs::check_ports(&a.pair, size)?;
            cluster::check_job(&a, size)?;
        }
        Ok(())
    };
    if let Err(e) = cluster::check_args(&a).and_then(|()| pairs_ok()) {
        if speak {
            // One write: eprintln! writes the parts apart, and mpirun's
            // own lines could land between them.
            let line = format!("erdma-cluster: {e}\n");
            let _ = std::io::Write::write_all(&mut std::io::stderr(), line.as_bytes());
        }
        return Err(cluster::EXIT_USAGE);
    }
    Ok(a)
}

/// This rank's side of the pair stage, as the JSON array it sends to rank
/// 0: `exchange` swaps the ranks' addresses, `barrier` keeps them in step.
#[cfg(not(feature = "mpi"))]
fn pair_runs(
    args: &Args,
    rank: usize,
    host: &SystemHost,
    exchange: impl FnOnce(String) -> Vec<String>,
    barrier: &mut dyn FnMut(),
) -> Vec<u8> {
    // The options were checked by parse(): only the device differs by rank.
    let runs = match pairs::options(&args.pair, rank) {
        Ok(o) => {
            let mine = pairs::local_endpoints(&args.pair, rank, &o, host);
            let eps: Vec<_> = exchange(mine)
                .iter()
                .map(|t| pairs::parse_endpoints(t))
                .collect();
            pairs::run_rank(&args.pair, rank, &eps, barrier)
        }
        Err(_) => {
            // Not reached (rank 0 checked the same options), but a rank
            // that leaves the exchange or the barriers would hang the rest.
            let eps: Vec<_> = exchange(String::new())
                .iter()
                .map(|t| pairs::parse_endpoints(t))
                .collect();
            for _ in 0..pairs::barriers(&args.pair, &eps) {
                barrier();
            }
            Vec::new()
        }
    };
    serde_json::Value::Array(runs.iter().map(pairs::PairRun::to_json).collect())
        .to_string()
        .into_bytes()
}

/// This host's RDMA counters, on the first rank of each host only (the
/// others would count the same NICs again).
fn counters(first: bool) -> serde_json::Value {
    if first {
        traffic::snapshot()
    } else {
        serde_json::Value::Null
    }
}

/// The GPUs this rank sees (0 without CUDA).
fn gpu_count() -> usize {
    erdma::cuda::device_count().unwrap_or(0)
}

/// The memory this rank's host may still take (the collectives' memory
/// check: MemAvailable, or the memory cgroup's room when less).
fn room_now() -> Option<u64> {
    crate::nccltests::alloc::room().map(|r| r.bytes)
}

/// `ERDMA_CLUSTER_HOOK=hosts-apart:K` (tests; with others, comma-separated):
/// the NCCL stage takes ranks K*i .. K*i+K-1 for host i, so that one
/// machine runs the per-host communicators as a cluster would.
#[cfg(feature = "mpi")]
fn nccl_hosts(hosts: Vec<String>) -> Vec<String> {
    match cluster::hook("hosts-apart").and_then(|k| k.parse::<usize>().ok()) {
        Some(k) if k > 0 => hosts
            .into_iter()
            .enumerate()
            .map(|(r, h)| format!("{h}-{}", r / k))
            .collect(),
        _ => hosts,
    }
}

/// This rank's NCCL runs as the JSON array it sends to rank 0; `meet`
/// after each cluster run (see [`nccl::run_rank`]).
fn nccl_runs(
    args: &Args,
    rank: usize,
    hosts: &[String],
    plan: &nccl::Plan,
    first: bool,
    meet: &mut dyn FnMut() -> bool,
) -> Vec<u8> {
    let mut count = || counters(first);
    let runs = nccl::run_rank(
        &args.nccl,
        plan,
        hosts,
        rank,
        args.timeout,
        &mut count,
        meet,
    );
    serde_json::Value::Array(runs.iter().map(nccl::RankRun::to_json).collect())
        .to_string()
        .into_bytes()
}

/// The MPI side. The ranks' exchanges go through rank 0 as point-to-point
/// messages bounded by `--timeout` (`cluster::live`): a rank that does not
/// answer is lost, and the others go on without it. The NCCL stage's
/// collectives need every rank: it runs only while none is lost.
#[cfg(feature = "mpi")]
mod world {
    use std::sync::Arc;
    use std::time::Duration;

    use crate::cluster;
    use crate::cluster::live::{Ended, Live};
    use crate::nccltests::bootstrap::Bootstrap;
    use crate::nccltests::bootstrap::mpi::{self, Mpi, P2p};
    use crate::nccltests::errors::TestError;
    use crate::nccltests::job;

    /// MPI_COMM_WORLD: the collectives' bootstrap (NCCL stage) and the
    /// exchanges among live ranks.
    pub struct World {
        boot: Arc<dyn Bootstrap>,
        live: Live<P2p>,
        timeout: Duration,
    }

    /// Initializes MPI (the one wait that cannot be bounded: mpirun's).
    pub fn init() -> Result<(usize, usize), TestError> {
        let m = Mpi::init(0)?;
        Ok((m.rank(), m.size()))
    }

    impl World {
        /// The world with waits bounded by `timeout_s`.
        pub fn new(timeout_s: u64) -> World {
            let t = i32::try_from(timeout_s).unwrap_or(i32::MAX);
            match Mpi::world(t) {
                Ok(m) => {
                    let timeout = Duration::from_secs(timeout_s);
                    let live = Live::new(P2p::world(&m, timeout), timeout);
                    let boot: Arc<dyn Bootstrap> = Arc::new(m);
                    // A rank that times out in a collective starts the
                    // census: the others' waits then end at once and join it.
                    job::set_world(boot.clone());
                    World {
                        boot,
                        live,
                        timeout,
                    }
                }
                Err(e) => {
                    eprintln!("erdma-cluster: MPI failed while starting: {e}");
                    std::process::exit(cluster::EXIT_LOST)
                }
            }
        }

        /// This rank.
        pub fn rank(&self) -> usize {
            self.live.rank()
        }

        /// The ranks lost so far, with why.
        pub fn lost(&self) -> Vec<(usize, String)> {
            self.live.lost()
        }

        /// Whether `rank` was lost.
        pub fn is_lost(&self, rank: usize) -> bool {
            self.live.is_lost(rank)
        }

        /// Rank 0: `rank` is lost for `why` (proved by another wait), in
        /// `stage`; the next exchange does not wait for it.
        pub fn declare_lost(&self, rank: usize, why: &str, stage: &str) {
            self.live.declare_lost(rank, why, stage);
        }

        /// `--timeout` in seconds.
        pub fn timeout_s(&self) -> u64 {
            self.timeout.as_secs()
        }

        /// Every rank's bytes on every rank (index = rank; empty for a
        /// lost rank); `stage` names the exchange if a rank is lost in it.
        pub fn all_gather(&self, mine: &[u8], stage: &str) -> Vec<Vec<u8>> {
            self.exchange(mine, true, stage)
        }

        /// Every rank's bytes on rank 0 (the others get empty ones).
        pub fn gather(&self, mine: &[u8], stage: &str) -> Vec<Vec<u8>> {
            self.exchange(mine, false, stage)
        }

        fn exchange(&self, mine: &[u8], everyone: bool, stage: &str) -> Vec<Vec<u8>> {
            match self.live.gather(mine, everyone, stage) {
                Ok(g) => g.into_iter().map(Option::unwrap_or_default).collect(),
                Err(e) => ended(self.rank(), e),
            }
        }

        /// Makes this world the one the collectives' waits watch again
        /// (after an in-process benchmark run).
        pub fn reclaim(&self) {
            job::set_world(self.boot.clone());
        }

        /// Waits for every live rank.
        pub fn barrier(&self, stage: &str) {
            self.gather(&[], stage);
        }

        /// Rank 0's exit status, on every rank.
        pub fn agree(&self, code: i32) -> i32 {
            let all = self.all_gather(&code.to_le_bytes(), "agreeing on the exit status");
            all.first()
                .and_then(|b| b.get(..4))
                .and_then(|b| b.try_into().ok())
                .map_or(cluster::EXIT_LOST, i32::from_le_bytes)
        }

        /// Ends MPI, unless a rank was lost: MPI_Finalize waits for every
        /// rank, and a stopped one would hold it for ever (mpirun ends it
        /// when the live ranks exit).
        pub fn finish(self) {
            if self.live.lost().is_empty() {
                mpi::finalize();
            }
        }
    }

    /// This rank cannot go on (rank 0 is lost, or declared this one lost):
    /// says why and exits with [`cluster::EXIT_LOST`].
    fn ended(me: usize, e: Ended) -> ! {
        let msg = match e {
            Ended::RootLost(m) => format!("{m}; the other ranks end"),
            Ended::Excluded(m) => m,
        };
        let hint = super::LOST_HINT.get().map_or("", String::as_str);
        eprintln!("erdma-cluster: rank {me}: {msg}{hint}");
        std::process::exit(cluster::EXIT_LOST)
    }
}

/// What a lost rank's message adds once rounds are kept under `--out`: how
/// to continue the job.
#[cfg(feature = "mpi")]
static LOST_HINT: std::sync::OnceLock<String> = std::sync::OnceLock::new();

/// The job's network ([`cluster::job::Network`]): erdma-perf between the
/// ranks, each round's runs gathered on rank 0 (a lost rank's as none),
/// rank 0's retest plan sent to every rank.
#[cfg(feature = "mpi")]
struct Perf<'a> {
    /// The pair options the runs take (`-n` added when the job chose the
    /// run length).
    pair: pairs::PairArgs,
    rank: usize,
    eps: &'a [Vec<pairs::Endpoint>],
    slots: Vec<usize>,
    world: &'a world::World,
}

#[cfg(feature = "mpi")]
impl cluster::job::Network for Perf<'_> {
    fn root(&self) -> bool {
        self.rank == 0
    }

    fn round(
        &mut self,
        r: usize,
        round: &cluster::steps::Round,
        port: u32,
        width: usize,
        retest: bool,
    ) -> Option<Vec<Vec<u8>>> {
        let (meet, gather) = if retest {
            ("meeting between retest rounds", "gathering a retest round")
        } else {
            ("meeting between pair rounds", "gathering a pair round")
        };
        let world = self.world;
        let runs = pairs::run_round(
            &self.pair,
            self.rank,
            self.eps,
            &self.slots,
            r,
            round,
            port,
            width,
            &|r| world.is_lost(r),
            &mut || world.barrier(meet),
        );
        gather_round(world, self.rank, &runs, gather)
    }

    fn agree(&mut self, mine: Option<cluster::retest::Plan>) -> cluster::retest::Plan {
        agree_retest(self.world, mine)
    }
}

/// Rank 0's retest plan (`mine`) on every rank; the empty plan when it
/// cannot be read.
#[cfg(feature = "mpi")]
fn agree_retest(
    world: &world::World,
    mine: Option<cluster::retest::Plan>,
) -> cluster::retest::Plan {
    let mine = mine.map_or(serde_json::Value::Null, |p| p.to_json());
    let all = world.all_gather(mine.to_string().as_bytes(), "agreeing on the retest rounds");
    all.first()
        .and_then(|b| serde_json::from_slice(b).ok())
        .and_then(|v| cluster::retest::Plan::from_json(&v))
        .unwrap_or_default()
}

/// Rank 0's view of one round: every rank's runs, a lost rank's as none;
/// `None` on the other ranks.
#[cfg(feature = "mpi")]
fn gather_round(
    world: &world::World,
    rank: usize,
    runs: &[pairs::PairRun],
    what: &str,
) -> Option<Vec<Vec<u8>>> {
    let mine = serde_json::Value::Array(runs.iter().map(pairs::PairRun::to_json).collect());
    let mut all = world.gather(mine.to_string().as_bytes(), what);
    if rank != 0 {
        return None;
    }
    // A lost rank ran nothing more: its share is no runs.
    for (i, b) in all.iter_mut().enumerate() {
        if world.is_lost(i) {
            *b = b"[]".to_vec();
        }
    }
    Some(all)
}

/// The NCCL pairs' network ([`cluster::job::Network`]): each round's pairs
/// ([`cluster::ncclpairs::matchings`]) run all_reduce at once, in-process,
/// on communicators split by pair; each round's runs gathered on rank 0.
#[cfg(feature = "mpi")]
struct NcclNet<'a> {
    args: &'a Args,
    rank: usize,
    hosts: &'a [String],
    plan: nccl::Plan,
    world: &'a world::World,
}

#[cfg(feature = "mpi")]
impl cluster::job::Network for NcclNet<'_> {
    fn root(&self) -> bool {
        self.rank == 0
    }

    fn round(
        &mut self,
        r: usize,
        round: &cluster::steps::Round,
        _port: u32,
        _width: usize,
        retest: bool,
    ) -> Option<Vec<Vec<u8>>> {
        use cluster::ncclpairs;
        let (rank, n) = (self.rank, self.hosts.len());
        let mut runs = Vec::new();
        // The collectives need every rank: with one lost no pair runs (its
        // cells fail, the lost rank's verdict says why).
        let go = self.world.lost().is_empty();
        for (k, m) in ncclpairs::matchings(round)
            .iter()
            .enumerate()
            .filter(|_| go)
        {
            let colors = ncclpairs::colors(m, n);
            let tmp = std::env::temp_dir().join(format!(
                "erdma-cluster-{}-pairs-{}{r}-{k}.json",
                std::process::id(),
                if retest { "retest-" } else { "" }
            ));
            let _ = std::fs::remove_file(&tmp);
            let path = tmp.to_string_lossy().into_owned();
            let argv = nccl::argv(
                &self.plan.args,
                ncclpairs::TEST,
                &self.plan.backend,
                self.plan.gpus,
                Some(&path),
                self.args.timeout,
            );
            let done = match nccl::collective(ncclpairs::TEST) {
                Some(c) => crate::nccltests::run::run_embedded_slowed(
                    c,
                    &argv,
                    Some(colors[rank]),
                    nccl::deadline_s(&self.args.nccl, self.args.timeout),
                    nccl_slow_hook(rank),
                ),
                // Not reached: all_reduce is one of the collectives.
                None => crate::nccltests::run::Embedded {
                    code: 2,
                    text: "no collective all_reduce".into(),
                },
            };
            self.world.reclaim();
            let doc = crate::input::read_json(&tmp).ok();
            let _ = std::fs::remove_file(&tmp);
            if let Some(&(a, b)) = m.iter().find(|(a, b)| *a == rank || *b == rank) {
                runs.extend(ncclpairs::runs_of(
                    rank,
                    (a, b),
                    done.code,
                    nccl::error_of(done.code, &done.text),
                    doc,
                    &ncclpairs::rerun(a, b, self.hosts, &argv),
                ));
            }
        }
        let what = if retest {
            "gathering an NCCL pair retest round"
        } else {
            "gathering an NCCL pair round"
        };
        gather_round(self.world, rank, &runs, what)
    }

    fn agree(&mut self, mine: Option<cluster::retest::Plan>) -> cluster::retest::Plan {
        agree_retest(self.world, mine)
    }
}

/// `ERDMA_CLUSTER_HOOK=slow:R` (tests; with others, comma-separated) in
/// the NCCL pairs: rank R waits before each collective it issues, 500 ms
/// or `nccl-slow-ms:MS`, as a rank on a slow host would; every pair it is
/// in measures the collective slower.
#[cfg(feature = "mpi")]
fn nccl_slow_hook(rank: usize) -> Option<u64> {
    let target = cluster::hook("slow").and_then(|r| r.parse::<usize>().ok());
    let ms = cluster::hook("nccl-slow-ms")
        .and_then(|m| m.parse::<u64>().ok())
        .unwrap_or(500)
        .min(60_000);
    (target == Some(rank)).then_some(ms)
}

/// Each rank's GPUs and the memory its host may still take (none:
/// unknown), for the NCCL stage's backend and sizes.
#[cfg(feature = "mpi")]
fn gpus_and_rooms(world: &world::World) -> (Vec<usize>, Vec<Option<u64>>) {
    let mut mine = (gpu_count() as u64).to_le_bytes().to_vec();
    mine.extend(room_now().unwrap_or(u64::MAX).to_le_bytes());
    let got = world.all_gather(&mine, "counting the GPUs and the memory");
    let word = |b: &Vec<u8>, i: usize| {
        b.get(8 * i..8 * i + 8)
            .and_then(|b| b.try_into().ok())
            .map(u64::from_le_bytes)
    };
    let gpus = got
        .iter()
        .map(|b| word(b, 0).unwrap_or(0) as usize)
        .collect();
    let rooms = got
        .iter()
        .map(|b| word(b, 1).filter(|&r| r != u64::MAX))
        .collect();
    (gpus, rooms)
}

/// How many ranks share each rank's host.
#[cfg(feature = "mpi")]
fn ranks_on_host(hosts: &[String]) -> Vec<usize> {
    hosts
        .iter()
        .map(|h| hosts.iter().filter(|x| *x == h).count())
        .collect()
}

/// The NCCL pairs (`--nccl-pairs`): [`cluster::job::pair_stage`] on the
/// split collectives' network with the pair stage's schedule for one rail
/// (the same rounds and `--budget`), its retest planned from its own first
/// pass. Rank 0's result: every rank's runs, the retest's, the schedule,
/// and the collectives' plan (which library, why).
#[cfg(feature = "mpi")]
fn nccl_pair_stage(
    args: &Args,
    rank: usize,
    hosts: &[String],
    reports: &[Vec<u8>],
    world: &world::World,
) -> (cluster::job::PairStage, cluster::steps::JobPlan, nccl::Plan) {
    let (gpus, rooms) = gpus_and_rooms(world);
    let plan = nccl::plan(&args.nccl, &gpus, &ranks_on_host(hosts), &rooms);
    let jp = cluster::job_plan_or_full(args, hosts.len(), 1, None);
    if rank == 0 {
        let line = format!(
            "erdma-cluster: NCCL pairs: {}; {}\n",
            cluster::ncclpairs::schedule_line(&jp),
            plan.why
        );
        let _ = std::io::Write::write_all(&mut std::io::stderr(), line.as_bytes());
    }
    let slots = cluster::host_slots(hosts);
    let mut net = NcclNet {
        args,
        rank,
        hosts,
        plan: plan.clone(),
        world,
    };
    let stage = cluster::job::pair_stage(
        &jp,
        &mut net,
        hosts.len(),
        cluster::job::Ports::new(args.pair.pair_port, &slots),
        Default::default(),
        &mut |_, _| {},
        &|raw| cluster::retest_plan(args, reports, raw),
    );
    (stage, jp, plan)
}

/// The pair stage ([`cluster::job::pair_stage`] on the job's network)
/// round by round: after each round every rank's runs go to rank 0,
/// which writes them under `--out DIR/rounds/` (a job that is interrupted
/// keeps what it measured); with `--resume` the rounds found there are
/// skipped. Then the retest. Rank 0's result: every rank's runs, the
/// retest's, and the schedule.
#[cfg(feature = "mpi")]
fn pair_stage(
    args: &Args,
    rank: usize,
    host: &SystemHost,
    hosts: &[String],
    reports: &[Vec<u8>],
    world: &world::World,
) -> (
    cluster::job::PairStage,
    cluster::steps::JobPlan,
    Option<Latency>,
) {
    // The options were checked by parse(): only the device differs by rank.
    let o = pairs::options(&args.pair, rank).ok();
    let mine = o.as_ref().map_or_else(String::new, |o| {
        pairs::local_endpoints(&args.pair, rank, o, host)
    });
    let eps: Vec<_> = world
        .all_gather(mine.as_bytes(), "exchanging the pair addresses")
        .iter()
        .map(|b| pairs::parse_endpoints(&String::from_utf8_lossy(b)))
        .collect();
    let rails = pairs::common_rails(&eps);
    let mut job = cluster::rounds::job(hosts, &args.pair.pair_test, rails, args.pair.cross_rails);
    let plan = announce(args, rank, &eps, &mut job);
    let done = resumed(args, rank, &job, plan.plan.rounds, world);
    if let Some(out) = &args.out {
        let _ = LOST_HINT.set(format!(
            "; the pair rounds finished are kept in {} on rank 0's host: --resume {} continues the job",
            cluster::rounds::dir(out).display(),
            out.display()
        ));
    }
    let mut after = |r: usize, all: &[Vec<u8>]| {
        let lost_now: Vec<usize> = world.lost().iter().map(|(r, _)| *r).collect();
        if let Some(out) = &args.out
            && let Err(e) = cluster::rounds::write(out, r, &job, all, &lost_now)
        {
            // The report under the same --out then fails with exit 4.
            eprintln!("erdma-cluster: {e}");
        }
    };
    let slots = cluster::host_slots(hosts);
    let ports = cluster::job::Ports::new(args.pair.pair_port, &slots);
    let mut pair = args.pair.clone();
    if let Some(n) = plan.iterations() {
        pair.perf_args = format!("{} -n {n}", pair.perf_args);
    }
    let mut net = Perf {
        pair,
        rank,
        eps: &eps,
        slots: slots.clone(),
        world,
    };
    let stage = cluster::job::pair_stage(
        &plan,
        &mut net,
        eps.len(),
        ports,
        done,
        &mut after,
        &|raw| cluster::retest_plan(args, reports, raw),
    );
    let lat = args
        .pair
        .latency
        .then(|| latency_stage(args, rank, &eps, slots, &plan, ports, world));
    (stage, plan, lat)
}

/// Rank 0's latency runs (each rank's, index = rank) and their wall time, s.
#[cfg(feature = "mpi")]
type Latency = (Vec<Vec<u8>>, f64);

/// The latency rounds (`--latency`): the pair stage's schedule again on
/// rail 0, each run erdma-perf write_lat ([`cluster::latency::perf_args`]),
/// on the ports after the bandwidth rounds' and their retest's; no retest.
/// Rank 0's result: every rank's runs and the rounds' wall time.
#[cfg(feature = "mpi")]
fn latency_stage(
    args: &Args,
    rank: usize,
    eps: &[Vec<pairs::Endpoint>],
    slots: Vec<usize>,
    plan: &cluster::steps::JobPlan,
    ports: cluster::job::Ports,
    world: &world::World,
) -> Latency {
    let mut lat = args.pair.clone();
    lat.pair_test = cluster::latency::TEST.into();
    lat.perf_args = cluster::latency::perf_args(&args.pair.perf_args, &args.pair.latency_args);
    // A 2-byte ping-pong's payload is not what the check is for.
    lat.no_verify = true;
    // One direction a step: a ping-pong timed beside its reverse on the
    // same hosts measures their CPUs' sharing, not the path.
    let lplan = cluster::steps::JobPlan {
        combos: vec![(0, 0)],
        together: false,
        rails_at_once: false,
        ..plan.clone()
    };
    let lports = cluster::job::Ports {
        first: ports.first + plan.all_ports(ports.block),
        block: ports.block,
    };
    if rank == 0 {
        let runs: usize = lplan.rounds().iter().flatten().map(Vec::len).sum();
        let line = format!(
            "erdma-cluster: latency: {} {} runs ({} rounds of the pair stage's schedule, rail 0), \
             options '{}'\n",
            runs,
            cluster::latency::TEST,
            lplan.plan.rounds,
            lat.perf_args
        );
        let _ = std::io::Write::write_all(&mut std::io::stderr(), line.as_bytes());
    }
    let t0 = std::time::Instant::now();
    let mut net = Perf {
        pair: lat.clone(),
        rank,
        eps,
        slots,
        world,
    };
    let st = cluster::job::pair_stage(
        &lplan,
        &mut net,
        eps.len(),
        lports,
        Default::default(),
        &mut |_, _| {},
        &|_| cluster::retest::Plan::default(),
    );
    (st.raw, t0.elapsed().as_secs_f64())
}

/// The pair stage's schedule (the same on every rank); rank 0 prints it
/// and its predicted wall time before the first round. With `--budget`
/// the schedule joins what a resumed job must match.
#[cfg(feature = "mpi")]
fn announce(
    args: &Args,
    rank: usize,
    eps: &[Vec<pairs::Endpoint>],
    job: &mut serde_json::Value,
) -> cluster::steps::JobPlan {
    let plan = cluster::job_plan_or_full(
        args,
        eps.len(),
        pairs::common_rails(eps),
        pairs::slowest_gbps(eps),
    );
    if plan.budgeted {
        job["schedule"] = serde_json::json!(plan.describe());
    }
    if rank == 0 {
        let line = format!("erdma-cluster: pair stage: {}\n", plan.describe());
        let _ = std::io::Write::write_all(&mut std::io::stderr(), line.as_bytes());
    }
    plan
}

/// With `--resume DIR`, the rounds rank 0 found there (rank 0 reads them
/// and tells the others which to skip); a round of another job ends every
/// rank with exit 3, rank 0 saying what differs.
#[cfg(feature = "mpi")]
fn resumed(
    args: &Args,
    rank: usize,
    job: &serde_json::Value,
    planned: usize,
    world: &world::World,
) -> std::collections::BTreeMap<usize, Vec<serde_json::Value>> {
    let Some(dir) = &args.resume else {
        return Default::default();
    };
    let found = if rank == 0 {
        cluster::rounds::read(dir, job, planned)
    } else {
        Ok(Default::default())
    };
    let said = match &found {
        Ok(d) => serde_json::json!(d.keys().collect::<Vec<_>>()),
        Err(e) => {
            let line = format!("erdma-cluster: {e}\n");
            let _ = std::io::Write::write_all(&mut std::io::stderr(), line.as_bytes());
            serde_json::Value::Null
        }
    };
    let all = world.all_gather(
        said.to_string().as_bytes(),
        "agreeing on the rounds to resume",
    );
    let skip: Option<Vec<usize>> = all.first().and_then(|b| serde_json::from_slice(b).ok());
    match (found, skip) {
        (Ok(d), Some(_)) if rank == 0 => d,
        (_, Some(skip)) => skip.into_iter().map(|r| (r, Vec::new())).collect(),
        (_, None) => std::process::exit(cluster::EXIT_USAGE),
    }
}

/// The ranks meet after a cluster run of the NCCL stage; whether the
/// stage goes on (no rank lost). A run that timed out ran the collectives'
/// census: the ranks it found silent are named lost at once (rank 0), not
/// waited for a second time; the others, silent here too, after
/// `--timeout`.
#[cfg(feature = "mpi")]
fn nccl_meet(world: &world::World) -> bool {
    const STAGE: &str = "meeting after an NCCL cluster run";
    for r in crate::nccltests::census::silent() {
        let why = format!(
            "silent in the NCCL stage's timeout census (no answer within {} s after --timeout {} s: stopped, hung or gone)",
            crate::nccltests::census::WINDOW.as_secs(),
            world.timeout_s()
        );
        world.declare_lost(r, &why, "the NCCL stage");
    }
    world.barrier(STAGE);
    world.lost().is_empty()
}

/// `ERDMA_CLUSTER_HOOK=stop:R` (tests; with others, comma-separated):
/// rank R stops itself (SIGSTOP) right after MPI is initialized, as a rank
/// that hangs would.
#[cfg(feature = "mpi")]
fn stop_hook(rank: usize) {
    let stop = cluster::hook("stop").and_then(|r| r.parse().ok());
    if stop == Some(rank) {
        // SAFETY: raise has no memory-safety preconditions.
        unsafe {
            libc::raise(libc::SIGSTOP);
        }
    }
}

/// `--simulate`: the pair stage's schedule, retest and diagnosis on a
/// modelled cluster, before (and without) MPI.
fn simulate() -> i32 {
    match parse(true, 1) {
        Ok(a) if a.sim.as_job => {
            cluster::simulate::job_main(&a, &mut cli::Stdout, &mut std::io::stderr().lock())
        }
        Ok(a) => cluster::simulate::main(&a, &mut cli::Stdout, &mut std::io::stderr().lock()),
        Err(code) => code,
    }
}

/// How long the ranks wait for each other to end a job whose arguments
/// are wrong (rank 0 prints why first).
#[cfg(feature = "mpi")]
const BAD_ARGS_WAIT_S: u64 = 10;

/// The `erdma-cluster` command: `--simulate` without MPI, else the
/// job under mpirun, stage by stage; returns (or exits with) the job's
/// exit status, the same on every rank.
#[cfg(feature = "mpi")]
pub fn run() -> i32 {
    if cluster::simulate::requested() {
        return simulate();
    }
    // Read before MPI starts: Open MPI may set its own while it starts.
    let said = cluster::launch_said(&|k| std::env::var(k).ok());
    let (rank, size) = match world::init() {
        Ok(rs) => rs,
        Err(e) => {
            eprintln!("erdma-cluster: MPI initialization failed: {e}: start it with mpirun");
            std::process::exit(cluster::EXIT_USAGE);
        }
    };
    if let Some(why) = cluster::launch_disagrees(said.as_ref(), rank, size) {
        // One line per job: from the launcher's rank 0 (or any rank when
        // its number is not one).
        let r = said.as_ref().map(|s| s.values.0.trim().parse::<usize>());
        if !matches!(r, Some(Ok(r)) if r != 0) {
            eprintln!("erdma-cluster: {why}");
        }
        std::process::exit(cluster::EXIT_LAUNCH);
    }
    stop_hook(rank);
    // Every rank parses the same command line, so all agree on the outcome.
    let args = match parse(rank == 0, size) {
        Ok(a) => a,
        Err(code) => {
            // Rank 0 has said why; the others leave only once it has:
            // mpirun ends the job at the first exit that is not 0, which
            // could kill rank 0 before its line was written (seen under
            // load: the line missing). Bounded like any exchange.
            world::World::new(BAD_ARGS_WAIT_S).agree(code);
            std::process::exit(code)
        }
    };
    let world = world::World::new(args.timeout);
    // --out is rank 0's: checked before the first stage (an hour of
    // measurements must not end in a directory that cannot be written).
    // Only with --out (the same on every rank): no exchange otherwise.
    if args.out.is_some() {
        let code = if rank == 0 { out_checked(&args) } else { 0 };
        let all = world.all_gather(&[u8::from(code != 0)], "checking --out on rank 0");
        if all.first().is_none_or(|b| b.first() != Some(&0)) {
            std::process::exit(cluster::EXIT_OUTPUT);
        }
    }
    let host = SystemHost::new();
    // The reports to rank 0, the host names to every rank (a star through
    // rank 0 carries every byte it sends to everyone: names, not reports).
    let mine = local_report(&args, &host);
    let me = cluster::Machine::of(&serde_json::from_slice(&mine).unwrap_or_default());
    let reports = world.gather(&mine, "gathering the hosts' checks");
    // Every rank names the machines alike (the same list, the same
    // function): two ranks on one machine share a name, two machines never.
    let machines: Vec<cluster::Machine> = world
        .all_gather(me.to_line().as_bytes(), "gathering the host names")
        .iter()
        .map(|b| cluster::Machine::from_line(&String::from_utf8_lossy(b)))
        .collect();
    let hosts = cluster::machine_names(&machines);
    let first = cluster::first_of_host(&hosts)[rank];
    let mut gathered = cluster::Gathered::default();
    let before = args.pair.pairs.then(|| counters(first));
    let t0 = std::time::Instant::now();
    let stage = args
        .pair
        .pairs
        .then(|| pair_stage(&args, rank, &host, &hosts, &reports, &world));
    if let Some((st, plan, lat)) = &stage {
        gathered.latency = lat.clone().filter(|_| rank == 0);
        gathered.retest = st.retest.clone();
        gathered.schedule = Some(cluster::job::schedule_json(
            plan,
            t0.elapsed().as_secs_f64(),
        ));
        // A budget's schedule may leave cells out: they are not failures.
        gathered.planned = plan.budgeted.then(|| plan.planned());
    }
    let mut pair_raw = stage.map(|(s, _, _)| s.raw);
    // The NCCL pairs need every rank (their collectives): with one lost
    // they are not run (the lost rank's verdict says so).
    let t1 = std::time::Instant::now();
    let npairs = (args.nccl.nccl_pairs && world.lost().is_empty())
        .then(|| nccl_pair_stage(&args, rank, &hosts, &reports, &world));
    if let Some((st, plan, nplan)) = npairs {
        pair_raw = Some(cluster::ncclpairs::join(pair_raw.as_deref(), &st.raw));
        gathered.retest = match (gathered.retest.take(), st.retest) {
            (Some((p, a)), Some((q, b))) => {
                Some((p.merge(q), cluster::ncclpairs::join(Some(&a), &b)))
            }
            (a, b) => a.or(b),
        };
        if gathered.schedule.is_none() {
            gathered.schedule = Some(cluster::ncclpairs::schedule_json(
                &plan,
                t1.elapsed().as_secs_f64(),
            ));
            gathered.planned = plan.budgeted.then(|| plan.planned());
        }
        gathered.nccl_pairs = Some(cluster::ncclpairs::describe(&nplan));
    }
    if let Some(before) = before {
        let mine = serde_json::json!({"before": before, "after": counters(first)});
        gathered.pair_counters =
            Some(world.gather(mine.to_string().as_bytes(), "gathering the counters"));
    }
    // The collectives need every rank: with one lost the stage is not run
    // (the lost rank's verdict says so).
    let nccl_on = args.nccl.nccl && world.lost().is_empty();
    if nccl_on {
        let (gpus, rooms) = gpus_and_rooms(&world);
        let nh = nccl_hosts(hosts.clone());
        let plan = nccl::plan(&args.nccl, &gpus, &ranks_on_host(&nh), &rooms);
        let nfirst = cluster::first_of_host(&nh)[rank];
        let mut meet = || nccl_meet(&world);
        let mine = nccl_runs(&args, rank, &nh, &plan, nfirst, &mut meet);
        world.reclaim();
        gathered.nccl = Some((plan, world.gather(&mine, "gathering the NCCL runs")));
        gathered.nccl_hosts = (nh != hosts).then_some(nh);
    }
    gathered.lost = world.lost();
    if args.nccl.nccl && !nccl_on {
        for (_, why) in gathered.lost.iter_mut() {
            why.push_str(" (the NCCL stage was not run: its collectives need every rank)");
        }
    }
    let mut code = 0i32;
    if world.rank() == 0 {
        code = cluster::report_with(
            &args,
            &RunMeta::now("erdma-cluster"),
            &reports,
            pair_raw.as_deref(),
            &gathered,
            &mut cli::Stdout,
            &mut std::io::stderr().lock(),
        );
    }
    // One exit status for the whole job, whichever rank mpirun reports.
    let code = world.agree(code);
    world.finish();
    std::process::exit(code);
}

/// Built without MPI there is no multi-rank path: N tasks of a launcher
/// (srun, mpirun, torchrun) would each print a cluster of one, so they are
/// refused (exit 3), rank 0 saying how to launch instead.
#[cfg(not(feature = "mpi"))]
fn refuse_several_tasks() {
    use crate::nccltests::bootstrap::env;
    if let Some(Ok(e)) = env::detect()
        && e.size > 1
    {
        if e.rank == 0 {
            eprintln!(
                "erdma-cluster: started as {} tasks ({}), but this build has no MPI and checks one host per process: build it with the default features and launch with mpirun or srun --mpi=pmix",
                e.size, e.source
            );
        }
        std::process::exit(cluster::EXIT_USAGE);
    }
}

/// The `erdma-cluster` command built without MPI: `--simulate`, or this
/// host alone as a cluster of one.
#[cfg(not(feature = "mpi"))]
pub fn run() -> i32 {
    if cluster::simulate::requested() {
        return simulate();
    }
    refuse_several_tasks();
    let args = match parse(true, 1) {
        Ok(a) => a,
        Err(code) => std::process::exit(code),
    };
    if out_checked(&args) != 0 {
        std::process::exit(cluster::EXIT_OUTPUT);
    }
    let host = SystemHost::new();
    let before = args.pair.pairs.then(|| counters(true));
    let pair_raw = args
        .pair
        .pairs
        .then(|| vec![pair_runs(&args, 0, &host, |a| vec![a], &mut || {})]);
    let mut gathered = cluster::Gathered::default();
    if let Some(before) = before {
        let mine = serde_json::json!({"before": before, "after": counters(true)});
        gathered.pair_counters = Some(vec![mine.to_string().into_bytes()]);
    }
    let report = local_report(&args, &host);
    if args.nccl.nccl {
        let hosts = cluster::host_names(std::slice::from_ref(&report));
        let plan = nccl::plan(&args.nccl, &[gpu_count()], &[1], &[room_now()]);
        let mine = nccl_runs(&args, 0, &hosts, &plan, true, &mut || true);
        gathered.nccl = Some((plan.clone(), vec![mine]));
    }
    let code = cluster::report_with(
        &args,
        &RunMeta::now("erdma-cluster"),
        &[report],
        pair_raw.as_deref(),
        &gathered,
        &mut cli::Stdout,
        &mut std::io::stderr().lock(),
    );
    std::process::exit(code);
}
