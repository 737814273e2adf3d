//! The real host: files under `/`, this process's environment and limits, and
//! the library's view of the RDMA devices, GPUs and NCCL (each gathered once,
//! when a check first asks).

use std::collections::BTreeMap;
use std::ffi::CStr;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::path::Path;
use std::sync::OnceLock;

use super::gpuhealth::GpuHealth;
use super::host::{
    Gpu, Gpus, Host, Interface, Limit, NcclLibrary, RLimit, RdmaDevice, RdmaPort, RdmaSnapshot,
    VerbsLibrary,
};

/// This host, as the checks see it.
#[derive(Default)]
pub struct SystemHost {
    rdma: OnceLock<RdmaSnapshot>,
    gpus: OnceLock<Result<Gpus, String>>,
    nccl: OnceLock<Result<NcclLibrary, String>>,
    interfaces: OnceLock<Vec<Interface>>,
    gpu_health: OnceLock<GpuHealth>,
}

impl SystemHost {
    /// A host whose facts are gathered on first use.
    pub fn new() -> SystemHost {
        SystemHost::default()
    }
}

impl Host for SystemHost {
    fn root(&self) -> &Path {
        Path::new("/")
    }

    fn env(&self, name: &str) -> Option<String> {
        std::env::var_os(name).map(|v| v.to_string_lossy().into_owned())
    }

    fn rlimit(&self, which: Limit) -> Option<RLimit> {
        let res = match which {
            Limit::Memlock => libc::RLIMIT_MEMLOCK,
            Limit::Nofile => libc::RLIMIT_NOFILE,
        };
        let mut r = libc::rlimit {
            rlim_cur: 0,
            rlim_max: 0,
        };
        // SAFETY: r is a valid, writable rlimit.
        if unsafe { libc::getrlimit(res, &mut r) } != 0 {
            return None;
        }
        let conv = |v: libc::rlim_t| (v != libc::RLIM_INFINITY).then_some(v);
        Some(RLimit {
            soft: conv(r.rlim_cur),
            hard: conv(r.rlim_max),
        })
    }

    fn fs_size(&self, abs: &str) -> Option<u64> {
        let c = std::ffi::CString::new(abs).ok()?;
        // SAFETY: statvfs is plain data; all-zero is a valid value.
        let mut st: libc::statvfs = unsafe { std::mem::zeroed() };
        // SAFETY: c is NUL-terminated; st is writable.
        if unsafe { libc::statvfs(c.as_ptr(), &mut st) } != 0 {
            return None;
        }
        Some(st.f_blocks.saturating_mul(st.f_frsize))
    }

    fn rdma(&self) -> &RdmaSnapshot {
        self.rdma.get_or_init(gather_rdma)
    }

    fn gpus(&self) -> &Result<Gpus, String> {
        self.gpus.get_or_init(gather_gpus)
    }

    fn nccl(&self) -> &Result<NcclLibrary, String> {
        self.nccl.get_or_init(|| {
            erdma::nccl::Nccl::load()
                .map(|n| NcclLibrary {
                    version: n.version().to_string(),
                    path: n.path().to_owned(),
                })
                .map_err(|e| e.to_string())
        })
    }

    fn interfaces(&self) -> &[Interface] {
        self.interfaces.get_or_init(gather_interfaces)
    }

    fn gpu_health(&self) -> &GpuHealth {
        self.gpu_health.get_or_init(super::nvml::gather)
    }
}

fn gather_rdma() -> RdmaSnapshot {
    let list = erdma::devices();
    if let Some(erdma::NoDevicesReason::LibraryMissing(_)) = list.reason() {
        return RdmaSnapshot {
            library: Err(list.reason().map(|r| r.to_string()).unwrap_or_default()),
            devices: Vec::new(),
            none_reason: list.reason().map(|r| r.to_string()),
        };
    }
    let devices: Vec<RdmaDevice> = list.iter().map(gather_device).collect();
    // Providers are loaded when devices are opened: read the maps afterwards.
    let (path, providers) = loaded_verbs_libraries();
    RdmaSnapshot {
        library: Ok(VerbsLibrary { path, providers }),
        devices,
        none_reason: list.reason().map(|r| r.to_string()),
    }
}

fn gather_device(d: &erdma::Device) -> RdmaDevice {
    let mut out = RdmaDevice {
        name: d.name().to_owned(),
        transport: d.transport(),
        vendor_id: None,
        vendor_part_id: None,
        open_error: None,
        ports: Vec::new(),
        sysfs: d.sysfs_path().to_string_lossy().into_owned(),
    };
    let ctx = match d.open() {
        Ok(c) => c,
        Err(e) => {
            out.open_error = Some(e.to_string());
            return out;
        }
    };
    out.vendor_id = Some(ctx.attributes().vendor_id());
    out.vendor_part_id = Some(ctx.attributes().vendor_part_id());
    match ctx.ports() {
        Ok(ports) => {
            out.ports = ports
                .iter()
                .map(|pa| {
                    let n = pa.port();
                    RdmaPort {
                        port: n,
                        state: pa.state(),
                        phys_state: pa.phys_state(),
                        link_layer: pa.link_layer(),
                        active_mtu: pa.active_mtu(),
                        netdev: ctx.netdev(n).ok().flatten(),
                        gids: ctx.gid_table(n).unwrap_or_default(),
                        gid_table_len: pa.gid_tbl_len(),
                        nccl_gid: ctx.select_gid(n, None).map_err(|e| e.to_string()),
                        rate_gbps: pa.rate_gbps(),
                    }
                })
                .collect()
        }
        Err(e) => out.open_error = Some(e.to_string()),
    }
    out
}

/// The libibverbs and provider libraries mapped into this process.
fn loaded_verbs_libraries() -> (Option<String>, Vec<String>) {
    let maps = crate::input::read_text("/proc/self/maps").unwrap_or_default();
    let mut lib = None;
    let mut providers = BTreeMap::new();
    for line in maps.lines() {
        let Some(path) = line.split_whitespace().nth(5) else {
            continue;
        };
        let file = path.rsplit('/').next().unwrap_or(path);
        if file.starts_with("libibverbs.so") {
            lib.get_or_insert_with(|| path.to_owned());
        } else if file.contains("-rdmav") || path.contains("/libibverbs/") {
            providers.insert(path.to_owned(), ());
        }
    }
    (lib, providers.into_keys().collect())
}

fn gather_gpus() -> Result<Gpus, String> {
    use erdma::cuda;
    let driver_version = cuda::driver_version().map_err(|e| e.to_string())?;
    let n = cuda::device_count().map_err(|e| e.to_string())?;
    let mut gpus = Vec::with_capacity(n);
    for i in 0..n {
        let p = cuda::device_properties(i).map_err(|e| format!("GPU {i}: {e}"))?;
        gpus.push(Gpu {
            ordinal: i,
            name: p.name,
            pci: format!("{}.0", p.pci_bus_id),
        });
    }
    Ok(Gpus {
        driver_version,
        gpus,
    })
}

fn gather_interfaces() -> Vec<Interface> {
    // getifaddrs' order (NCCL takes the first match), then interfaces without an address.
    let mut out: Vec<Interface> = Vec::new();
    let mut ifap: *mut libc::ifaddrs = std::ptr::null_mut();
    // SAFETY: getifaddrs allocates a list into ifap, freed below.
    if unsafe { libc::getifaddrs(&mut ifap) } == 0 {
        let mut cur = ifap;
        while !cur.is_null() {
            // SAFETY: cur is a node of the list getifaddrs returned.
            let ifa = unsafe { &*cur };
            cur = ifa.ifa_next;
            if ifa.ifa_name.is_null() {
                continue;
            }
            // SAFETY: ifa_name is a NUL-terminated string of the list.
            let name = unsafe { CStr::from_ptr(ifa.ifa_name) }
                .to_string_lossy()
                .into_owned();
            let flags = ifa.ifa_flags;
            let running = flags & libc::IFF_UP as u32 != 0 && flags & libc::IFF_RUNNING as u32 != 0;
            let i = match out.iter().position(|i| i.name == name) {
                Some(i) => i,
                None => {
                    out.push(Interface {
                        name,
                        running,
                        addrs: Vec::new(),
                    });
                    out.len() - 1
                }
            };
            if let Some(a) = sockaddr_ip(ifa.ifa_addr) {
                out[i].addrs.push(a);
            }
        }
        // SAFETY: ifap came from getifaddrs and is freed once.
        unsafe { libc::freeifaddrs(ifap) };
    }
    if let Ok(rd) = std::fs::read_dir("/sys/class/net") {
        let mut names: Vec<String> = rd
            .flatten()
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .collect();
        names.sort();
        for name in names {
            if !out.iter().any(|i| i.name == name) {
                out.push(Interface {
                    name,
                    running: false,
                    addrs: Vec::new(),
                });
            }
        }
    }
    out
}

/// The IP address of an `ifa_addr`, for AF_INET and AF_INET6.
fn sockaddr_ip(sa: *const libc::sockaddr) -> Option<IpAddr> {
    if sa.is_null() {
        return None;
    }
    // SAFETY: sa points to a sockaddr whose family says its real type.
    let family = i32::from(unsafe { (*sa).sa_family });
    if family == libc::AF_INET {
        // SAFETY: an AF_INET address is a sockaddr_in.
        let sin = unsafe { &*(sa as *const libc::sockaddr_in) };
        Some(IpAddr::V4(Ipv4Addr::from(u32::from_be(
            sin.sin_addr.s_addr,
        ))))
    } else if family == libc::AF_INET6 {
        // SAFETY: an AF_INET6 address is a sockaddr_in6.
        let sin6 = unsafe { &*(sa as *const libc::sockaddr_in6) };
        Some(IpAddr::V6(Ipv6Addr::from(sin6.sin6_addr.s6_addr)))
    } else {
        None
    }
}
