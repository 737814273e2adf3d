//! `erdma-cluster`: erdma-doctor's checks on every host of a cluster, under
//! mpirun with one rank per host; rank 0 prints one report (see
//! `erdma_bench::cluster`). Exit status, the same on every rank: 0 every check
//! ok on every host, 1 a warning, 2 a failure, 3 bad arguments, 4 a report
//! could not be written or read, 5 a rank was lost (it did not take part
//! in a stage within `--timeout`: the live ranks name it) or MPI failed.
//! Built without the `mpi` feature it checks
//! this host alone, as a cluster of one. `--pairs` adds the NIC pair matrix
//! (erdma-perf between every two ranks, both directions, every rail),
//! `--nccl` the collectives (every host alone, then all), and both the
//! traffic proof (the RDMA counters around each stage).

#![cfg_attr(not(test), no_main)]

erdma_bench::c_main!(erdma_bench::cluster::command::run);
