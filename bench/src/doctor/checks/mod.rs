//! The checks, one file each; [`ALL`] is the order they run and print in.
//! Adding a check: a file with a `pub const CHECK: Check` (and its tests), and
//! a line here.

pub mod container_flags;
pub mod gpu_affinity;
pub mod gpu_clocks;
pub mod gpu_count;
pub mod gpu_driver;
pub mod gpu_ecc;
pub mod gpu_nccl;
pub mod gpu_nvlink;
pub mod gpu_peermem;
pub mod gpu_persistence;
pub mod gpu_power;
pub mod gpu_remap;
pub mod gpu_temperature;
pub mod gpu_xid;
pub mod limits_memlock;
pub mod limits_nofile;
pub mod limits_shm;
pub mod nccl_gdr_level;
pub mod nccl_ib_disable;
pub mod nccl_ib_hca;
pub mod nccl_qps;
pub mod nccl_socket_ifname;
pub mod rdma_dev_nodes;
pub mod rdma_devices;
pub mod rdma_gid;
pub mod rdma_library;
pub mod rdma_mode;
pub mod rdma_mtu;
pub mod rdma_ports;

use super::model::Check;

/// Every check, in report order.
pub const ALL: &[Check] = &[
    rdma_library::CHECK,
    rdma_devices::CHECK,
    rdma_dev_nodes::CHECK,
    rdma_ports::CHECK,
    rdma_mode::CHECK,
    rdma_gid::CHECK,
    rdma_mtu::CHECK,
    limits_memlock::CHECK,
    limits_shm::CHECK,
    limits_nofile::CHECK,
    gpu_driver::CHECK,
    gpu_peermem::CHECK,
    gpu_nccl::CHECK,
    gpu_affinity::CHECK,
    gpu_count::CHECK,
    gpu_xid::CHECK,
    gpu_ecc::CHECK,
    gpu_remap::CHECK,
    gpu_nvlink::CHECK,
    gpu_clocks::CHECK,
    gpu_temperature::CHECK,
    gpu_power::CHECK,
    gpu_persistence::CHECK,
    nccl_ib_hca::CHECK,
    nccl_socket_ifname::CHECK,
    nccl_ib_disable::CHECK,
    nccl_gdr_level::CHECK,
    nccl_qps::CHECK,
    container_flags::CHECK,
];

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_are_unique_and_prefixed_by_their_group() {
        let mut ids: Vec<&str> = ALL.iter().map(|c| c.id).collect();
        for c in ALL {
            assert!(
                c.id.starts_with(&format!("{}.", c.group.as_str())),
                "{}",
                c.id
            );
        }
        ids.sort();
        ids.dedup();
        assert_eq!(ids.len(), ALL.len());
    }
}
