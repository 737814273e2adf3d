//! `erdma-cluster`: erdma-doctor's checks on every host of a cluster, under
//! mpirun with one rank per host; rank 0 prints one report (see
//! `erdma_bench::cluster`). Exit status, the same on every rank: 0 every check
//! ok on every host, 1 a warning, 2 a failure, 3 bad arguments, 4 a report
//! could not be written or read. Built without the `mpi` feature it checks
//! this host alone, as a cluster of one. `--pairs` adds the NIC pair matrix
//! (erdma-perf between every two ranks, both directions).

#![no_main]

use erdma_bench::cli;
use erdma_bench::cluster::{self, Args, pairs};
use erdma_bench::doctor::{self, system::SystemHost};
use erdma_bench::meta::RunMeta;

/// This rank's erdma-doctor document.
fn local_report(args: &Args, host: &SystemHost) -> Vec<u8> {
    let report = doctor::evaluate(host, &args.skip);
    doctor::render_json(&RunMeta::now("erdma-doctor"), &report)
        .to_string()
        .into_bytes()
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
        }
        Ok(())
    };
    if let Err(e) = cluster::check_args(&a).and_then(|()| pairs_ok()) {
        if speak {
            eprintln!("erdma-cluster: {e}");
        }
        return Err(cluster::EXIT_USAGE);
    }
    Ok(a)
}

/// This rank's side of the pair stage, as the JSON array it sends to rank
/// 0: `exchange` swaps the ranks' addresses, `barrier` keeps them in step.
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
            let (iwarp, addr) = pairs::local_endpoint(&o, host);
            let addrs = exchange(addr);
            pairs::run_rank(&args.pair, rank, &addrs, iwarp, barrier)
        }
        Err(_) => {
            // Not reached (rank 0 checked the same options), but a rank
            // that leaves the exchange or the barriers would hang the rest.
            let addrs = exchange(String::new());
            for _ in 0..2 * pairs::rounds(addrs.len()) {
                barrier();
            }
            Vec::new()
        }
    };
    serde_json::Value::Array(runs.iter().map(pairs::PairRun::to_json).collect())
        .to_string()
        .into_bytes()
}

erdma_bench::c_main!(run);

#[cfg(feature = "mpi")]
fn run() -> i32 {
    use mpi::traits::*;

    let Some(universe) = mpi::initialize() else {
        eprintln!("erdma-cluster: MPI initialization failed: start it with mpirun");
        std::process::exit(cluster::EXIT_USAGE);
    };
    let world = universe.world();
    let (rank, size) = (world.rank(), world.size() as usize);
    let root = world.process_at_rank(0);
    // Every rank parses the same command line, so all agree on the outcome.
    let args = match parse(rank == 0, size) {
        Ok(a) => a,
        Err(code) => std::process::exit(code),
    };
    let host = SystemHost::new();
    let reports = gather(&world, &local_report(&args, &host));
    let pair_raw = args.pair.pairs.then(|| {
        let exchange = |mine: String| {
            all_gather(&world, mine.as_bytes())
                .into_iter()
                .map(|b| String::from_utf8_lossy(&b).into_owned())
                .collect()
        };
        let mine = pair_runs(&args, rank as usize, &host, exchange, &mut || {
            world.barrier()
        });
        gather(&world, &mine)
    });
    let mut code = 0i32;
    if let Some(raw) = reports {
        code = cluster::report(
            &args,
            &RunMeta::now("erdma-cluster"),
            &raw,
            pair_raw.flatten().as_deref(),
            &mut cli::Stdout,
            &mut std::io::stderr().lock(),
        );
    }
    // One exit status for the whole job, whichever rank mpirun reports.
    root.broadcast_into(&mut code);
    drop(universe);
    std::process::exit(code);
}

/// Every rank's bytes on rank 0 (index = rank); `None` on the other ranks.
#[cfg(feature = "mpi")]
fn gather(world: &mpi::topology::SimpleCommunicator, mine: &[u8]) -> Option<Vec<Vec<u8>>> {
    use mpi::datatype::PartitionMut;
    use mpi::traits::*;

    let root = world.process_at_rank(0);
    let len = i32::try_from(mine.len()).unwrap_or(i32::MAX);
    if world.rank() != 0 {
        root.gather_into(&len);
        root.gather_varcount_into(mine);
        return None;
    }
    let mut counts = vec![0i32; world.size() as usize];
    root.gather_into_root(&len, &mut counts[..]);
    let displs = displacements(&counts);
    let mut all = vec![0u8; counts.iter().map(|&c| c as usize).sum()];
    {
        let mut part = PartitionMut::new(&mut all[..], &counts[..], &displs[..]);
        root.gather_varcount_into_root(mine, &mut part);
    }
    Some(split(&all, &counts, &displs))
}

/// Every rank's bytes on every rank (index = rank).
#[cfg(feature = "mpi")]
fn all_gather(world: &mpi::topology::SimpleCommunicator, mine: &[u8]) -> Vec<Vec<u8>> {
    use mpi::datatype::PartitionMut;
    use mpi::traits::*;

    let len = i32::try_from(mine.len()).unwrap_or(i32::MAX);
    let mut counts = vec![0i32; world.size() as usize];
    world.all_gather_into(&len, &mut counts[..]);
    let displs = displacements(&counts);
    let mut all = vec![0u8; counts.iter().map(|&c| c as usize).sum()];
    {
        let mut part = PartitionMut::new(&mut all[..], &counts[..], &displs[..]);
        world.all_gather_varcount_into(mine, &mut part);
    }
    split(&all, &counts, &displs)
}

#[cfg(feature = "mpi")]
fn displacements(counts: &[i32]) -> Vec<i32> {
    counts
        .iter()
        .scan(0i32, |at, &c| {
            let d = *at;
            *at += c;
            Some(d)
        })
        .collect()
}

#[cfg(feature = "mpi")]
fn split(all: &[u8], counts: &[i32], displs: &[i32]) -> Vec<Vec<u8>> {
    counts
        .iter()
        .zip(displs)
        .map(|(&c, &d)| all[d as usize..(d + c) as usize].to_vec())
        .collect()
}

#[cfg(not(feature = "mpi"))]
fn run() -> i32 {
    let args = match parse(true, 1) {
        Ok(a) => a,
        Err(code) => std::process::exit(code),
    };
    let host = SystemHost::new();
    let pair_raw = args
        .pair
        .pairs
        .then(|| vec![pair_runs(&args, 0, &host, |a| vec![a], &mut || {})]);
    let code = cluster::report(
        &args,
        &RunMeta::now("erdma-cluster"),
        &[local_report(&args, &host)],
        pair_raw.as_deref(),
        &mut cli::Stdout,
        &mut std::io::stderr().lock(),
    );
    std::process::exit(code);
}
