//! One NCCL all-reduce across MPI ranks, with the library-level API of `erdma::nccl`.
//!
//! ```text
//! mpirun -np 2 target/release/examples/nccl_all_reduce
//! ```
//!
//! Rank 0 creates the NCCL unique id and broadcasts its 128 bytes over MPI; every rank takes
//! the GPU numbered by its rank on the node, joins the communicator, sums a buffer of floats
//! (rank r contributes r + 1) and checks the result. Each rank prints one line.
//!
//! Exit status (nccl-tests' numbering): 0 success; 1 MPI failure; 2 CUDA (no driver or
//! GPU); 3 NCCL (library missing or too old, communicator creation failed); 4 timeout (a
//! peer never joined or the all-reduce hung: 60 s); 5 fewer GPUs on the node than ranks;
//! 7 wrong result.

use std::process::ExitCode;
use std::time::Duration;

use erdma::cuda::{Device, DeviceBuffer, Stream};
use erdma::nccl::{Comm, Config, Nccl, NcclError, RedOp, UniqueId};
use mpi::collective::SystemOperation;
use mpi::traits::*;

const COUNT: usize = 1 << 20;
const TIMEOUT: Duration = Duration::from_secs(60);

/// A failure: its exit status and one line of text.
type Failure = (i32, String);

fn fail(e: impl Into<NcclError>) -> Failure {
    let e = e.into();
    (e.exit_status(), e.to_string())
}

/// What each rank can check alone: NCCL loads and its GPU exists.
fn prepare(local_rank: usize) -> Result<(&'static Nccl, Device), Failure> {
    let nccl = Nccl::load().map_err(fail)?;
    let gpus = erdma::cuda::device_count().map_err(fail)?;
    if local_rank >= gpus {
        return Err((
            5,
            format!(
                "needs GPU {local_rank} but this node has {gpus}: run at most {gpus} ranks per node"
            ),
        ));
    }
    Ok((nccl, Device::new(local_rank).map_err(fail)?))
}

/// Joins the communicator and runs the all-reduce; returns the line to print.
fn all_reduce(
    nccl: &'static Nccl,
    gpu: &Device,
    id: &UniqueId,
    rank: usize,
    size: usize,
) -> Result<String, Failure> {
    let config = Config {
        timeout: Some(TIMEOUT),
        ..Config::default()
    };
    let comm = Comm::init_rank(nccl, gpu, size, rank, id, &config).map_err(fail)?;
    let stream = Stream::new(gpu).map_err(fail)?;
    let send =
        DeviceBuffer::from_host(gpu, &vec![(rank + 1) as f32; COUNT], &stream).map_err(fail)?;
    let mut recv = DeviceBuffer::<f32>::alloc(gpu, COUNT).map_err(fail)?;
    comm.all_reduce(&send, &mut recv, RedOp::SUM, &stream)
        .map_err(fail)?;
    comm.wait(&stream, Some(TIMEOUT)).map_err(fail)?;
    let got = recv.to_vec(&stream).map_err(fail)?;
    let expected = (size * (size + 1) / 2) as f32;
    let wrong = got.iter().filter(|&&v| v != expected).count();
    comm.destroy().map_err(fail)?;
    let pci = gpu.pci_bus_id().map(|p| p.to_string()).unwrap_or_default();
    let line = format!(
        "GPU {} [{pci}] NCCL {}: all_reduce of {COUNT} floats gave {} (expected {expected}), {wrong} wrong",
        gpu.ordinal(),
        nccl.version(),
        got.first().copied().unwrap_or(f32::NAN)
    );
    if wrong > 0 {
        return Err((7, line));
    }
    Ok(line)
}

fn main() -> ExitCode {
    let Some(universe) = mpi::initialize() else {
        eprintln!("nccl_all_reduce: MPI initialization failed");
        return ExitCode::from(1);
    };
    let world = universe.world();
    let (rank, size) = (world.rank(), world.size());
    let local_rank = world.split_shared(rank).rank() as usize;
    let who = format!("rank {rank}/{size}");

    // Agree on whether every rank is ready, so that no rank waits for one that quit.
    let prepared = prepare(local_rank);
    let mine = prepared.as_ref().err().map_or(0, |f| f.0);
    let mut worst = 0i32;
    world.all_reduce_into(&mine, &mut worst, SystemOperation::max());
    let (nccl, gpu) = match prepared {
        Ok(p) if worst == 0 => p,
        Ok(_) => {
            println!("{who}: stopped: another rank could not start (status {worst})");
            return ExitCode::from(worst as u8);
        }
        Err((status, msg)) => {
            println!("{who}: {msg}");
            return ExitCode::from(status as u8);
        }
    };

    // Rank 0 creates the id; one status byte travels with it.
    let mut msg = [0u8; 1 + UniqueId::BYTES];
    if rank == 0 {
        match nccl.unique_id() {
            Ok(id) => msg[1..].copy_from_slice(id.as_bytes()),
            Err(e) => {
                println!("{who}: {e}");
                msg[0] = 3;
            }
        }
    }
    world.process_at_rank(0).broadcast_into(&mut msg[..]);
    if msg[0] != 0 {
        if rank != 0 {
            println!("{who}: stopped: rank 0 could not create the NCCL id");
        }
        return ExitCode::from(msg[0]);
    }
    let id = match UniqueId::from_bytes(&msg[1..]) {
        Ok(id) => id,
        Err(e) => {
            println!("{who}: {e}");
            return ExitCode::from(e.exit_status() as u8);
        }
    };

    match all_reduce(nccl, &gpu, &id, rank as usize, size as usize) {
        Ok(line) => {
            println!("{who}: {line}: OK");
            ExitCode::SUCCESS
        }
        Err((status, line)) => {
            println!("{who}: {line}");
            ExitCode::from(status as u8)
        }
    }
}
