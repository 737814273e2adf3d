//! `erdma-cluster`: erdma-doctor's checks on every host of a cluster, under
//! mpirun with one rank per host; rank 0 prints one report (see
//! `erdma_bench::cluster`). Exit status, the same on every rank: 0 every check
//! ok on every host, 1 a warning, 2 a failure, 3 bad arguments, 4 a report
//! could not be written or read. Built without the `mpi` feature it checks
//! this host alone, as a cluster of one.

use clap::Parser;
use erdma_bench::cluster::{self, Args};
use erdma_bench::doctor::{self, system::SystemHost};
use erdma_bench::meta::RunMeta;

/// This rank's erdma-doctor document.
fn local_report(args: &Args) -> Vec<u8> {
    let host = SystemHost::new();
    let report = doctor::evaluate(&host, &args.skip);
    doctor::render_json(&RunMeta::now("erdma-doctor"), &report)
        .to_string()
        .into_bytes()
}

/// Parses the arguments; on an error, `speak` decides whether this rank
/// prints it (rank 0 only, so that N ranks do not print it N times).
fn parse(speak: bool) -> Result<Args, i32> {
    let a = match Args::try_parse() {
        Ok(a) => a,
        Err(e) => {
            if speak {
                let _ = e.print();
            }
            return Err(if e.use_stderr() {
                cluster::EXIT_USAGE
            } else {
                cluster::EXIT_OK
            });
        }
    };
    if let Err(e) = cluster::check_skips(&a) {
        if speak {
            eprintln!("erdma-cluster: {e}");
        }
        return Err(cluster::EXIT_USAGE);
    }
    Ok(a)
}

#[cfg(feature = "mpi")]
fn main() {
    use mpi::datatype::PartitionMut;
    use mpi::traits::*;

    let Some(universe) = mpi::initialize() else {
        eprintln!("erdma-cluster: MPI initialization failed: start it with mpirun");
        std::process::exit(cluster::EXIT_USAGE);
    };
    let world = universe.world();
    let (rank, size) = (world.rank(), world.size() as usize);
    let root = world.process_at_rank(0);
    // Every rank parses the same command line, so all agree on the outcome.
    let args = match parse(rank == 0) {
        Ok(a) => a,
        Err(code) => std::process::exit(code),
    };
    let mine = local_report(&args);
    let len = i32::try_from(mine.len()).unwrap_or(i32::MAX);
    let mut code = 0i32;
    if rank == 0 {
        let mut counts = vec![0i32; size];
        root.gather_into_root(&len, &mut counts[..]);
        let displs: Vec<i32> = counts
            .iter()
            .scan(0i32, |at, &c| {
                let d = *at;
                *at += c;
                Some(d)
            })
            .collect();
        let total: usize = counts.iter().map(|&c| c as usize).sum();
        let mut all = vec![0u8; total];
        {
            let mut part = PartitionMut::new(&mut all[..], &counts[..], &displs[..]);
            root.gather_varcount_into_root(&mine[..], &mut part);
        }
        let raw: Vec<Vec<u8>> = counts
            .iter()
            .zip(&displs)
            .map(|(&c, &d)| all[d as usize..(d + c) as usize].to_vec())
            .collect();
        code = cluster::report(
            &args,
            &RunMeta::now("erdma-cluster"),
            &raw,
            &mut std::io::stdout().lock(),
            &mut std::io::stderr().lock(),
        );
    } else {
        root.gather_into(&len);
        root.gather_varcount_into(&mine[..]);
    }
    // One exit status for the whole job, whichever rank mpirun reports.
    root.broadcast_into(&mut code);
    drop(universe);
    std::process::exit(code);
}

#[cfg(not(feature = "mpi"))]
fn main() {
    let args = match parse(true) {
        Ok(a) => a,
        Err(code) => std::process::exit(code),
    };
    let code = cluster::report(
        &args,
        &RunMeta::now("erdma-cluster"),
        &[local_report(&args)],
        &mut std::io::stdout().lock(),
        &mut std::io::stderr().lock(),
    );
    std::process::exit(code);
}
