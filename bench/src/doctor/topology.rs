//! GPU-NIC distance from sysfs: the PCIe path between two PCI functions and
//! their NUMA nodes, classified with NCCL's path types (PIX, PXB, PHB, SYS).

use super::host::{self, Host, RdmaDevice};
use super::ncclenv::PathType;

/// A PCI function's place in the PCIe tree.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PciNode {
    /// Address, `0000:18:00.0`.
    pub addr: String,
    /// The components of its sysfs path from the root complex down:
    /// `["pci0000:17", "0000:17:01.0", ..., "0000:18:00.0"]`.
    pub chain: Vec<String>,
    /// NUMA node (`None`: unknown, -1 in sysfs).
    pub numa: Option<i32>,
}

/// The PCI function at `addr` (`/sys/bus/pci/devices/<addr>`).
pub fn pci_node(h: &dyn Host, addr: &str) -> Option<PciNode> {
    let real = host::canonical(h, &format!("/sys/bus/pci/devices/{addr}"))?;
    let rest = real.strip_prefix("/sys/devices/")?;
    let chain: Vec<String> = rest.split('/').map(str::to_owned).collect();
    if !chain.first()?.starts_with("pci") {
        return None;
    }
    let numa = host::read(h, &format!("/sys/bus/pci/devices/{addr}/numa_node"))
        .and_then(|v| v.trim().parse::<i32>().ok())
        .filter(|n| *n >= 0);
    Some(PciNode {
        addr: addr.to_owned(),
        chain,
        numa,
    })
}

/// The PCI address of an RDMA device (`device` link of its sysfs directory);
/// `None` for software devices (rxe, siw).
pub fn rdma_pci(h: &dyn Host, dev: &RdmaDevice) -> Option<String> {
    let real = host::canonical(h, &format!("{}/device", dev.sysfs))?;
    let last = real.rsplit('/').next()?;
    is_pci_addr(last).then(|| last.to_owned())
}

/// `dddd:bb:dd.f`.
fn is_pci_addr(s: &str) -> bool {
    let b = s.as_bytes();
    b.len() == 12
        && b[4] == b':'
        && b[7] == b':'
        && b[10] == b'.'
        && s.chars()
            .enumerate()
            .all(|(i, c)| matches!(i, 4 | 7 | 10) || c.is_ascii_hexdigit())
}

/// How far apart two PCI functions are, in NCCL's terms: PIX (one PCIe
/// switch between them), PXB (several switches, no host bridge), PHB (through
/// the host bridge of one CPU socket), SYS (across sockets).
pub fn path_type(a: &PciNode, b: &PciNode) -> PathType {
    let common = a
        .chain
        .iter()
        .zip(&b.chain)
        .take_while(|(x, y)| x == y)
        .count();
    if common >= 2 {
        // They share a bridge below the root complex: a switch. Each side is a
        // downstream port plus the function when only that switch is between.
        let (da, db) = (a.chain.len() - common, b.chain.len() - common);
        return if da <= 2 && db <= 2 {
            PathType::Pix
        } else {
            PathType::Pxb
        };
    }
    match (a.numa, b.numa) {
        (Some(x), Some(y)) if x != y => PathType::Sys,
        _ => PathType::Phb,
    }
}

/// The NIC nearest to one GPU.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Nearest {
    /// The GPU's CUDA ordinal.
    pub gpu: usize,
    /// The GPU's PCI address.
    pub gpu_pci: String,
    /// The GPU's NUMA node.
    pub gpu_numa: Option<i32>,
    /// The nearest RDMA device.
    pub nic: String,
    /// The path between them.
    pub path: PathType,
}

/// For each GPU whose PCI function sysfs shows, the nearest of `nics` (by path
/// type, then list order). Empty when no GPU or no NIC has a PCI function.
pub fn nearest_nics(h: &dyn Host, gpus: &[super::host::Gpu], nics: &[&RdmaDevice]) -> Vec<Nearest> {
    let nic_nodes: Vec<(&str, PciNode)> = nics
        .iter()
        .filter_map(|d| Some((d.name.as_str(), pci_node(h, &rdma_pci(h, d)?)?)))
        .collect();
    let mut out = Vec::new();
    for g in gpus {
        let Some(gn) = pci_node(h, &g.pci) else {
            continue;
        };
        let best = nic_nodes
            .iter()
            .map(|(name, nn)| (path_type(&gn, nn), *name))
            .min_by_key(|(p, _)| *p);
        if let Some((path, nic)) = best {
            out.push(Nearest {
                gpu: g.ordinal,
                gpu_pci: g.pci.clone(),
                gpu_numa: gn.numa,
                nic: nic.to_owned(),
                path,
            });
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn node(path: &str, numa: Option<i32>) -> PciNode {
        let chain: Vec<String> = path.split('/').map(str::to_owned).collect();
        PciNode {
            addr: chain.last().unwrap().clone(),
            chain,
            numa,
        }
    }

    #[test]
    fn path_types_from_the_pcie_tree() {
        let gpu = node(
            "pci0000:00/0000:00:01.0/0000:01:00.0/0000:02:08.0/0000:05:00.0",
            Some(0),
        );
        let nic_same_switch = node(
            "pci0000:00/0000:00:01.0/0000:01:00.0/0000:02:10.0/0000:06:00.0",
            Some(0),
        );
        assert_eq!(path_type(&gpu, &nic_same_switch), PathType::Pix);
        let nic_nested = node(
            "pci0000:00/0000:00:01.0/0000:01:00.0/0000:02:10.0/0000:06:00.0/0000:07:00.0/0000:08:00.0",
            Some(0),
        );
        assert_eq!(path_type(&gpu, &nic_nested), PathType::Pxb);
        let nic_flat = node("pci0000:00/0000:00:06.0", None);
        let gpu_flat = node("pci0000:00/0000:00:05.0", None);
        assert_eq!(path_type(&gpu_flat, &nic_flat), PathType::Phb);
        let nic_other_root = node("pci0000:80/0000:80:01.0/0000:81:00.0", Some(1));
        assert_eq!(path_type(&gpu, &nic_other_root), PathType::Sys);
        let nic_other_root_same_numa = node("pci0000:40/0000:40:01.0/0000:41:00.0", Some(0));
        assert_eq!(path_type(&gpu, &nic_other_root_same_numa), PathType::Phb);
    }

    #[test]
    fn pci_addresses() {
        assert!(is_pci_addr("0000:18:00.0"));
        assert!(is_pci_addr("0000:af:1f.7"));
        assert!(!is_pci_addr("pci0000:00"));
        assert!(!is_pci_addr("rxe0"));
    }
}
