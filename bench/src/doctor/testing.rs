//! A fake host for the checks' unit tests: a temporary root directory (fake
//! sysfs, procfs, /dev), a fake environment and limits, and device, GPU and
//! NCCL snapshots built to order.

use std::collections::BTreeMap;
use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};

use erdma::{Gid, GidEntry, GidType, LinkLayer, Mtu, PhysState, PortState, Transport};

use super::gpuhealth::{GpuHealth, GpuState, KernelLog, NvmlView};
use super::host::{
    Gpu, Gpus, Host, Interface, Limit, NcclLibrary, RLimit, RdmaDevice, RdmaPort, RdmaSnapshot,
    VerbsLibrary,
};
use super::model::{Check, Ctx, Outcome};

/// What the NVML reader says on a host without the NVIDIA driver.
pub const NO_NVML: &str = "libnvidia-ml.so.1 not found (no NVIDIA driver)";

/// A temporary directory, removed on drop.
pub struct TempRoot(PathBuf);

impl TempRoot {
    fn new() -> TempRoot {
        static N: AtomicUsize = AtomicUsize::new(0);
        let p = std::env::temp_dir().join(format!(
            "erdma-doctor-test-{}-{}",
            std::process::id(),
            N.fetch_add(1, Ordering::Relaxed)
        ));
        let _ = std::fs::remove_dir_all(&p);
        std::fs::create_dir_all(&p).unwrap();
        TempRoot(p)
    }
}

impl Drop for TempRoot {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// A host made of test data.
pub struct FakeHost {
    /// The fake `/`.
    pub root: TempRoot,
    /// The environment.
    pub env: BTreeMap<String, String>,
    /// `RLIMIT_MEMLOCK`.
    pub memlock: Option<RLimit>,
    /// `RLIMIT_NOFILE`.
    pub nofile: Option<RLimit>,
    /// File system sizes by mount point.
    pub fs: BTreeMap<String, u64>,
    /// RDMA devices.
    pub rdma: RdmaSnapshot,
    /// GPUs.
    pub gpus: Result<Gpus, String>,
    /// NCCL.
    pub nccl: Result<NcclLibrary, String>,
    /// Interfaces.
    pub interfaces: Vec<Interface>,
    /// GPU health (NVML and the kernel log).
    pub gpu_health: GpuHealth,
    /// `--expect-gpus` for [`FakeHost::run`].
    pub expect_gpus: Option<u32>,
}

impl Host for FakeHost {
    fn root(&self) -> &Path {
        &self.root.0
    }
    fn env(&self, name: &str) -> Option<String> {
        self.env.get(name).cloned()
    }
    fn rlimit(&self, which: Limit) -> Option<RLimit> {
        match which {
            Limit::Memlock => self.memlock,
            Limit::Nofile => self.nofile,
        }
    }
    fn fs_size(&self, abs: &str) -> Option<u64> {
        self.fs.get(abs).copied()
    }
    fn rdma(&self) -> &RdmaSnapshot {
        &self.rdma
    }
    fn gpus(&self) -> &Result<Gpus, String> {
        &self.gpus
    }
    fn nccl(&self) -> &Result<NcclLibrary, String> {
        &self.nccl
    }
    fn interfaces(&self) -> &[Interface] {
        &self.interfaces
    }
    fn gpu_health(&self) -> &GpuHealth {
        &self.gpu_health
    }
}

/// A fully privileged process's capabilities (`CapEff` of root).
pub const CAPS_ALL: &str = "000001ffffffffff";
/// Docker's default capabilities (no CAP_IPC_LOCK).
pub const CAPS_DOCKER: &str = "00000000a80425fb";

impl FakeHost {
    /// A host without RDMA (kernel without it), GPU or NCCL: just `lo`.
    pub fn bare() -> FakeHost {
        let h = FakeHost {
            root: TempRoot::new(),
            env: BTreeMap::new(),
            memlock: Some(RLimit {
                soft: None,
                hard: None,
            }),
            nofile: Some(RLimit {
                soft: Some(1_048_576),
                hard: Some(1_048_576),
            }),
            fs: BTreeMap::from([("/dev/shm".to_owned(), 8 << 30)]),
            rdma: RdmaSnapshot {
                library: Ok(VerbsLibrary {
                    path: Some("/usr/lib/x86_64-linux-gnu/libibverbs.so.1.14.44.0".into()),
                    providers: Vec::new(),
                }),
                devices: Vec::new(),
                none_reason: Some(erdma::NoDevicesReason::KernelWithoutRdma.to_string()),
            },
            gpus: Err(erdma::cuda::CudaError::DriverNotFound.to_string()),
            nccl: Err("libnccl.so.2 not found".into()),
            interfaces: vec![iface("lo", "127.0.0.1")],
            gpu_health: GpuHealth::absent(NO_NVML),
            expect_gpus: None,
        };
        h.file(
            "/proc/self/status",
            &format!("Name:\tx\nCapEff:\t{CAPS_ALL}\n"),
        );
        h.file("/proc/meminfo", "MemTotal:       16000000 kB\n");
        h.file("/proc/1/cgroup", "0::/init.scope\n");
        h
    }

    /// The rig: rxe0 (veth0 10.99.0.1) / rxe1 (veth1) RoCE, siw0 (veth2) / siw1
    /// (veth3) iWARP, their sysfs and /dev/infiniband nodes.
    pub fn rig() -> FakeHost {
        let mut h = FakeHost::bare();
        let devs = [
            roce("rxe0", "veth0", "10.99.0.1"),
            roce("rxe1", "veth1", "10.99.0.2"),
            iwarp("siw0", "veth2"),
            iwarp("siw1", "veth3"),
        ];
        h.interfaces = vec![
            iface("lo", "127.0.0.1"),
            iface("veth0", "10.99.0.1"),
            iface("veth1", "10.99.0.2"),
            iface("veth2", "10.99.1.1"),
            iface("veth3", "10.99.1.2"),
        ];
        h.set_devices(devs.to_vec());
        h.rdma.library = Ok(VerbsLibrary {
            path: Some("/usr/lib/x86_64-linux-gnu/libibverbs.so.1.14.44.0".into()),
            providers: vec![
                "/usr/lib/x86_64-linux-gnu/libibverbs/librxe-rdmav34.so".into(),
                "/usr/lib/x86_64-linux-gnu/libibverbs/libsiw-rdmav34.so".into(),
            ],
        });
        for nd in ["veth0", "veth1", "veth2", "veth3"] {
            h.file(&format!("/sys/class/net/{nd}/mtu"), "1500\n");
        }
        h
    }

    /// An eRDMA GPU host: erdma_0 (eth0) and erdma_1 (eth1) in RoCE-style
    /// mode, MTU 8500, on PCIe switches shared with GPUs 0-3 and 4-7, NCCL
    /// 2.21.5 and nvidia_peermem loaded.
    pub fn erdma_gpu() -> FakeHost {
        let mut h = FakeHost::bare();
        let mut e0 = roce("erdma_0", "eth0", "192.168.0.10");
        let mut e1 = roce("erdma_1", "eth1", "192.168.1.10");
        for d in [&mut e0, &mut e1] {
            d.vendor_id = Some(0x1ded);
            d.vendor_part_id = Some(0x107f);
        }
        h.interfaces = vec![
            iface("lo", "127.0.0.1"),
            iface("eth0", "192.168.0.10"),
            iface("eth1", "192.168.1.10"),
        ];
        h.set_devices(vec![e0, e1]);
        h.rdma.library = Ok(VerbsLibrary {
            path: Some("/usr/lib/x86_64-linux-gnu/libibverbs.so.1.14.44.0".into()),
            providers: vec!["/usr/lib/x86_64-linux-gnu/libibverbs/liberdma-rdmav34.so".into()],
        });
        for nd in ["eth0", "eth1"] {
            h.file(&format!("/sys/class/net/{nd}/mtu"), "8500\n");
        }
        let mut gpus = Vec::new();
        for i in 0..8u32 {
            let (root, sw) = if i < 4 {
                ("pci0000:00", 0x10)
            } else {
                ("pci0000:80", 0x90)
            };
            let bus = sw + 2 + i;
            let addr = format!("0000:{bus:02x}:00.0");
            let p = format!(
                "/sys/devices/{root}/0000:{rp:02x}:01.0/0000:{up:02x}:00.0/0000:{dn:02x}:{i:02x}.0/{addr}",
                rp = sw - 0x10,
                up = sw,
                dn = sw + 1
            );
            h.pci(&addr, &p, if i < 4 { 0 } else { 1 });
            gpus.push(Gpu {
                ordinal: i as usize,
                name: "NVIDIA H200".into(),
                pci: addr,
            });
        }
        for (n, (root, sw)) in [("pci0000:00", 0x10u32), ("pci0000:80", 0x90)]
            .iter()
            .enumerate()
        {
            let addr = format!("0000:{:02x}:00.0", sw + 0x0e);
            let p = format!(
                "/sys/devices/{root}/0000:{:02x}:01.0/0000:{sw:02x}:00.0/0000:{:02x}:1f.0/{addr}",
                sw - 0x10,
                sw + 1
            );
            h.pci(&addr, &p, n as i32);
            h.symlink(
                &format!("/sys/class/infiniband/erdma_{n}/device"),
                &format!("/sys/bus/pci/devices/{addr}"),
            );
            h.file(&format!("{p}/vendor"), "0x1ded\n");
            h.file(&format!("{p}/device"), "0x107f\n");
            h.dir(&format!("{p}/infiniband/erdma_{n}"));
        }
        h.gpus = Ok(Gpus {
            driver_version: 12040,
            gpus,
        });
        h.nccl = Ok(NcclLibrary {
            version: "2.21.5".into(),
            path: "libnccl.so.2".into(),
        });
        h.gpu_health = healthy_gpus(8);
        h.dir("/sys/module/nvidia_peermem");
        h.file("/dev/nvidiactl", "");
        h.file("/dev/nvidia0", "");
        h
    }

    /// Replaces the devices, writing their sysfs and /dev/infiniband entries.
    pub fn set_devices(&mut self, devs: Vec<RdmaDevice>) {
        for (i, d) in devs.iter().enumerate() {
            self.dir(&d.sysfs);
            self.file(
                &format!("/sys/class/infiniband_verbs/uverbs{i}/ibdev"),
                &format!("{}\n", d.name),
            );
            self.file(&format!("/dev/infiniband/uverbs{i}"), "");
        }
        self.file("/dev/infiniband/rdma_cm", "");
        self.rdma.none_reason = devs
            .is_empty()
            .then(|| erdma::NoDevicesReason::NoDevices.to_string());
        self.rdma.devices = devs;
    }

    /// Writes a file (and its directories).
    pub fn file(&self, abs: &str, content: &str) {
        let p = self.root.0.join(abs.trim_start_matches('/'));
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, content).unwrap();
    }

    /// Makes a directory.
    pub fn dir(&self, abs: &str) {
        std::fs::create_dir_all(self.root.0.join(abs.trim_start_matches('/'))).unwrap();
    }

    /// Removes a file or directory.
    pub fn remove(&self, abs: &str) {
        let p = self.root.0.join(abs.trim_start_matches('/'));
        let _ = std::fs::remove_dir_all(&p);
        let _ = std::fs::remove_file(&p);
    }

    /// A symlink at `abs` to the absolute `target` (inside the root).
    pub fn symlink(&self, abs: &str, target: &str) {
        let p = self.root.0.join(abs.trim_start_matches('/'));
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        let _ = std::fs::remove_file(&p);
        std::os::unix::fs::symlink(self.root.0.join(target.trim_start_matches('/')), p).unwrap();
    }

    /// A PCI function at sysfs path `real`, linked from /sys/bus/pci/devices.
    pub fn pci(&self, addr: &str, real: &str, numa: i32) {
        self.dir(real);
        self.file(&format!("{real}/numa_node"), &format!("{numa}\n"));
        self.symlink(&format!("/sys/bus/pci/devices/{addr}"), real);
    }

    /// Sets an environment variable.
    pub fn set_env(&mut self, k: &str, v: &str) -> &mut FakeHost {
        self.env.insert(k.into(), v.into());
        self
    }

    /// Runs one check on this host.
    pub fn run(&self, check: Check) -> Outcome {
        self.run_skipping(check, &[])
    }

    /// Runs one check with some groups or checks skipped.
    pub fn run_skipping(&self, check: Check, skipped: &[&str]) -> Outcome {
        let skipped: Vec<String> = skipped.iter().map(|s| s.to_string()).collect();
        (check.run)(&Ctx {
            host: self,
            skipped: &skipped,
            expect_gpus: self.expect_gpus,
        })
    }
}

/// A bare fake host with `n` healthy GPUs, changed by `edit`.
pub fn gpu_host(n: u32, edit: impl FnOnce(&mut [GpuState])) -> FakeHost {
    let mut h = FakeHost::bare();
    h.gpu_health = healthy_gpus(n);
    if let Ok(v) = &mut h.gpu_health.nvml {
        edit(&mut v.gpus);
    }
    h
}

/// NVML and the kernel log of a host with `n` healthy H100s and no XID.
pub fn healthy_gpus(n: u32) -> GpuHealth {
    GpuHealth {
        nvml: Ok(NvmlView {
            driver_version: Ok("580.65.06".into()),
            count: n,
            gpus: (0..n).map(GpuState::healthy).collect(),
        }),
        kernel_log: Ok(KernelLog {
            source: "journalctl -k -b".into(),
            starts_after_boot_s: None,
            lines: Vec::new(),
        }),
    }
}

/// An interface with one IPv4 address, running.
pub fn iface(name: &str, ip: &str) -> Interface {
    Interface {
        name: name.into(),
        running: true,
        addrs: vec![ip.parse::<IpAddr>().unwrap()],
    }
}

fn entry(index: u32, gid: &str, t: GidType, nd: &str) -> GidEntry {
    GidEntry {
        port: 1,
        index,
        gid: gid.parse::<Gid>().unwrap(),
        gid_type: t,
        netdev: Some(nd.into()),
    }
}

/// A RoCE device (rxe-like): GID 0 link-local, GID 1 the IPv4 address.
pub fn roce(name: &str, netdev: &str, ip: &str) -> RdmaDevice {
    let v4 = entry(1, &format!("::ffff:{ip}"), GidType::RoceV2, netdev);
    RdmaDevice {
        name: name.into(),
        transport: Transport::InfiniBand,
        vendor_id: Some(0),
        vendor_part_id: Some(0),
        open_error: None,
        ports: vec![RdmaPort {
            port: 1,
            state: PortState::Active,
            phys_state: PhysState::LinkUp,
            link_layer: LinkLayer::Ethernet,
            active_mtu: Some(Mtu::Mtu1024),
            netdev: Some(netdev.into()),
            gids: vec![
                entry(0, "fe80::aff:fe63:1", GidType::RoceV2, netdev),
                v4.clone(),
            ],
            gid_table_len: 1024,
            nccl_gid: Ok(v4),
            rate_gbps: Some(2.5),
        }],
        sysfs: format!("/sys/class/infiniband/{name}"),
    }
}

/// An iWARP device (siw-like): one MAC-derived GID.
pub fn iwarp(name: &str, netdev: &str) -> RdmaDevice {
    let g = entry(0, "200:a63:101::", GidType::Iwarp, netdev);
    RdmaDevice {
        name: name.into(),
        transport: Transport::Iwarp,
        vendor_id: Some(0x626d74),
        vendor_part_id: Some(0),
        open_error: None,
        ports: vec![RdmaPort {
            port: 1,
            state: PortState::Active,
            phys_state: PhysState::LinkUp,
            link_layer: LinkLayer::Ethernet,
            active_mtu: Some(Mtu::Mtu1024),
            netdev: Some(netdev.into()),
            gids: vec![g.clone()],
            gid_table_len: 1,
            nccl_gid: Ok(g),
            rate_gbps: Some(25.0),
        }],
        sysfs: format!("/sys/class/infiniband/{name}"),
    }
}
