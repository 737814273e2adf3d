//! What the checks read: the [`Host`] trait (files under a root, environment,
//! limits, and snapshots of the RDMA devices, GPUs, NCCL and interfaces). The
//! real host is [`super::system::SystemHost`]; tests give a fake root directory
//! and fake snapshots.

use std::net::IpAddr;
use std::path::{Path, PathBuf};

use erdma::{GidEntry, LinkLayer, Mtu, PhysState, PortState, Protocol, Transport};

/// A resource limit; `None` means unlimited.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct RLimit {
    /// The limit in force (`ulimit -S`).
    pub soft: Option<u64>,
    /// The ceiling an unprivileged process may raise it to (`ulimit -H`).
    pub hard: Option<u64>,
}

/// The limits the checks look at.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Limit {
    /// `RLIMIT_MEMLOCK` (bytes).
    Memlock,
    /// `RLIMIT_NOFILE` (descriptors).
    Nofile,
}

/// libibverbs as loaded: where from, and the provider libraries it loaded.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct VerbsLibrary {
    /// Path of the loaded `libibverbs.so.*` (from `/proc/self/maps`).
    pub path: Option<String>,
    /// Paths of the provider libraries loaded for the opened devices.
    pub providers: Vec<String>,
}

/// One port as the verbs report it.
#[derive(Debug, Clone)]
pub struct RdmaPort {
    /// Port number (from 1).
    pub port: u8,
    /// Logical state.
    pub state: PortState,
    /// Physical state.
    pub phys_state: PhysState,
    /// Link layer.
    pub link_layer: LinkLayer,
    /// Active MTU.
    pub active_mtu: Option<Mtu>,
    /// The network interface (`Context::netdev`).
    pub netdev: Option<String>,
    /// Entries of the GID table (non-empty ones).
    pub gids: Vec<GidEntry>,
    /// Length of the GID table.
    pub gid_table_len: u32,
    /// The entry NCCL would pick (`Context::select_gid(port, None)`), or why none.
    pub nccl_gid: Result<GidEntry, String>,
    /// The port's active rate, Gb/s: active speed x active width
    /// (`erdma::port::PortAttributes::rate_gbps`); none when the verbs do
    /// not say.
    pub rate_gbps: Option<f64>,
}

/// Vendor ids of the kernel's emulated devices, whose ports report a
/// nominal rate that says nothing of what they move: Soft-RoCE
/// (`RXE_VENDOR_ID` 0xffffff) and Soft-iWARP (`SIW_VENDOR_ID` 0x626d74,
/// "bmt").
pub const EMULATED_VENDOR_IDS: [u32; 2] = [0x00ff_ffff, 0x0062_6d74];

/// Whether a device of `vendor_id` is emulated by the kernel
/// ([`EMULATED_VENDOR_IDS`]): its ports' rate is not a reference.
pub fn emulated(vendor_id: Option<u32>) -> bool {
    vendor_id.is_some_and(|v| EMULATED_VENDOR_IDS.contains(&v))
}

/// One RDMA device as libibverbs lists it.
#[derive(Debug, Clone)]
pub struct RdmaDevice {
    /// Kernel name (`erdma_0`, `rxe0`).
    pub name: String,
    /// Transport (InfiniBand for IB and RoCE-style, iWARP).
    pub transport: Transport,
    /// PCI vendor id, when the device could be opened.
    pub vendor_id: Option<u32>,
    /// Vendor part id, when the device could be opened.
    pub vendor_part_id: Option<u32>,
    /// Why opening or querying it failed.
    pub open_error: Option<String>,
    /// Its ports (empty when it could not be opened).
    pub ports: Vec<RdmaPort>,
    /// Its sysfs directory (`/sys/class/infiniband/<name>`).
    pub sysfs: String,
}

impl RdmaDevice {
    /// Alibaba Cloud eRDMA, by vendor 0x1ded and part 0x107f (never by name).
    pub fn is_erdma(&self) -> bool {
        self.vendor_id == Some(erdma::ERDMA_VENDOR_ID)
            && self.vendor_part_id == Some(erdma::ERDMA_VENDOR_PART_ID)
    }

    /// How a port connects (as `Context::protocol`).
    pub fn protocol(&self, port: &RdmaPort) -> Protocol {
        match (self.transport, port.link_layer) {
            (Transport::Iwarp, _) => Protocol::Iwarp,
            (Transport::InfiniBand, LinkLayer::Ethernet) => Protocol::Roce,
            (Transport::InfiniBand, _) => Protocol::InfiniBand,
            _ => Protocol::Other,
        }
    }
}

/// The RDMA side of the host: libibverbs and the devices it lists.
#[derive(Debug, Clone)]
pub struct RdmaSnapshot {
    /// libibverbs loaded, or the reason it did not (one line, with the fix).
    pub library: Result<VerbsLibrary, String>,
    /// The devices, in libibverbs' order.
    pub devices: Vec<RdmaDevice>,
    /// Why there is no device (`NoDevicesReason`), when there is none.
    pub none_reason: Option<String>,
}

/// One GPU as the CUDA driver reports it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Gpu {
    /// CUDA ordinal.
    pub ordinal: usize,
    /// Name, e.g. `NVIDIA H200`.
    pub name: String,
    /// PCI address as sysfs names it (`0000:18:00.0`).
    pub pci: String,
}

/// The GPUs and the driver's CUDA version.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Gpus {
    /// `cuDriverGetVersion`, e.g. 12040.
    pub driver_version: i32,
    /// The visible GPUs.
    pub gpus: Vec<Gpu>,
}

/// The NCCL library found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NcclLibrary {
    /// Its version, e.g. `2.21.5`.
    pub version: String,
    /// What was loaded (path or soname).
    pub path: String,
}

/// A network interface and its addresses (`getifaddrs`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Interface {
    /// Name (`eth0`).
    pub name: String,
    /// `IFF_UP` and `IFF_RUNNING` (NCCL only uses running interfaces).
    pub running: bool,
    /// Its IPv4 and IPv6 addresses.
    pub addrs: Vec<IpAddr>,
}

/// Everything the checks read. Paths are absolute and resolved under
/// [`Host::root`], so a test's fake root stands in for `/`.
pub trait Host {
    /// The root of the file system view (`/` on the real host).
    fn root(&self) -> &Path;
    /// An environment variable of the run being checked.
    fn env(&self, name: &str) -> Option<String>;
    /// A resource limit of this process; `None` when it cannot be read.
    fn rlimit(&self, which: Limit) -> Option<RLimit>;
    /// Size in bytes of the file system mounted at `abs` (`statvfs`); `None`
    /// when there is none.
    fn fs_size(&self, abs: &str) -> Option<u64>;
    /// libibverbs and the devices.
    fn rdma(&self) -> &RdmaSnapshot;
    /// The CUDA driver and GPUs, or why not (one line).
    fn gpus(&self) -> &Result<Gpus, String>;
    /// NCCL, or why not (one line).
    fn nccl(&self) -> &Result<NcclLibrary, String>;
    /// The network interfaces.
    fn interfaces(&self) -> &[Interface];
    /// GPU health: NVML's view of the GPUs and the kernel log's XIDs.
    fn gpu_health(&self) -> &super::gpuhealth::GpuHealth;
}

/// `abs` under the host's root.
pub fn path(h: &dyn Host, abs: &str) -> PathBuf {
    h.root().join(abs.trim_start_matches('/'))
}

/// A file's contents without the trailing newline; `None` when unreadable.
pub fn read(h: &dyn Host, abs: &str) -> Option<String> {
    crate::input::read_text(path(h, abs))
        .ok()
        .map(|s| s.trim_end_matches('\n').to_owned())
}

/// Whether `abs` exists (a broken symlink does not).
pub fn exists(h: &dyn Host, abs: &str) -> bool {
    path(h, abs).exists()
}

/// The sorted names in directory `abs` (empty when it is not one).
pub fn list(h: &dyn Host, abs: &str) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(path(h, abs))
        .map(|rd| {
            rd.flatten()
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .collect()
        })
        .unwrap_or_default();
    v.sort();
    v
}

/// `abs` with symlinks resolved, as an absolute path under the root.
pub fn canonical(h: &dyn Host, abs: &str) -> Option<String> {
    let real = std::fs::canonicalize(path(h, abs)).ok()?;
    let root = std::fs::canonicalize(h.root()).ok()?;
    let rel = real.strip_prefix(&root).ok()?;
    Some(format!("/{}", rel.to_string_lossy()))
}
