//! The NCCL environment this host's devices want, as `mpirun -x` arguments:
//! Alibaba's recommendation for eRDMA (NCCL_IB_GID_INDEX=1, NCCL_IB_HCA,
//! NCCL_IB_QPS_PER_CONNECTION=8, NCCL_MIN_NCHANNELS=16, NCCL_NET_PLUGIN=none,
//! NCCL_SOCKET_IFNAME, NCCL_NET_GDR_LEVEL) filled in with the real device,
//! GID index and interface names.

use erdma::Protocol;

use super::host::{self, Host, RdmaDevice, RdmaPort, RdmaSnapshot};
use super::ncclenv::nccl_ports;

/// What to pass to mpirun.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Recommendation {
    /// The devices (and ports) NCCL should use.
    pub devices: Vec<String>,
    /// `NCCL_*` variables, in the order printed.
    pub env: Vec<(String, String)>,
    /// Open MPI MCA parameters.
    pub mca: Vec<(String, String)>,
}

impl Recommendation {
    /// The arguments as one line: `-mca k v ... -x K=V ...`.
    pub fn args_line(&self) -> String {
        let mut v: Vec<String> = self
            .mca
            .iter()
            .map(|(k, val)| format!("-mca {k} {val}"))
            .collect();
        v.extend(self.env.iter().map(|(k, val)| format!("-x {k}={val}")));
        v.join(" ")
    }

    /// A ready-to-paste mpirun command (hosts and sizes are placeholders).
    pub fn mpirun_lines(&self) -> Vec<String> {
        let mut lines = vec![{
            let mut first = "mpirun --allow-run-as-root --bind-to none".to_owned();
            for (k, v) in &self.mca {
                first.push_str(&format!(" -mca {k} {v}"));
            }
            first
        }];
        lines.extend(self.env.iter().map(|(k, v)| format!("  -x {k}={v}")));
        lines.push("  -np 16 -H host1:8,host2:8 all_reduce_perf -b 1G -e 1G -f 2 -g 1".into());
        let n = lines.len();
        lines
            .into_iter()
            .enumerate()
            .map(|(i, l)| if i + 1 < n { format!("{l} \\") } else { l })
            .collect()
    }
}

/// The ports NCCL's IB transport can use well: ACTIVE, RoCE-style or
/// InfiniBand (not iWARP: NCCL connects QPs with GIDs, not RDMA CM); the
/// eRDMA ones only, when there are any.
pub fn usable_ports(rdma: &RdmaSnapshot) -> Vec<(&RdmaDevice, &RdmaPort)> {
    let all: Vec<_> = nccl_ports(rdma, None)
        .into_iter()
        .filter(|(d, p)| matches!(d.protocol(p), Protocol::Roce | Protocol::InfiniBand))
        .collect();
    if all.iter().any(|(d, _)| d.is_erdma()) {
        all.into_iter().filter(|(d, _)| d.is_erdma()).collect()
    } else {
        all
    }
}

/// NCCL_IB_HCA naming exactly `ports`: names, `:port` where a device has
/// other ports, and `=` when a name is a prefix of a device left out.
pub fn ib_hca_value(rdma: &RdmaSnapshot, ports: &[(&RdmaDevice, &RdmaPort)]) -> String {
    let mut entries: Vec<String> = Vec::new();
    let mut names: Vec<&str> = Vec::new();
    for (d, p) in ports {
        let partial = d.ports.len() > 1
            && d.ports.iter().any(|q| {
                !ports
                    .iter()
                    .any(|(d2, p2)| d2.name == d.name && p2.port == q.port)
            });
        let e = if partial {
            format!("{}:{}", d.name, p.port)
        } else {
            d.name.clone()
        };
        if !entries.contains(&e) {
            entries.push(e);
            names.push(&d.name);
        }
    }
    let ambiguous = rdma
        .devices
        .iter()
        .filter(|d| !names.contains(&d.name.as_str()))
        .any(|d| names.iter().any(|n| d.name.starts_with(n)));
    format!("{}{}", if ambiguous { "=" } else { "" }, entries.join(","))
}

/// The interface NCCL should bootstrap over: the first usable port's netdev
/// that is running with an IPv4 address.
pub fn socket_ifname(h: &dyn Host, ports: &[(&RdmaDevice, &RdmaPort)]) -> Option<String> {
    let ifs = h.interfaces();
    let name = ports.iter().find_map(|(_, p)| {
        let nd = p.netdev.as_deref()?;
        ifs.iter()
            .find(|i| i.name == nd && i.running && i.addrs.iter().any(|a| a.is_ipv4()))
            .map(|i| i.name.clone())
    })?;
    // NCCL matches prefixes: pin the name when another interface starts with it.
    let ambiguous = ifs
        .iter()
        .any(|i| i.name != name && i.name.starts_with(&name) && !i.addrs.is_empty());
    Some(if ambiguous { format!("={name}") } else { name })
}

/// Whether the eRDMA MTU rule holds for every eRDMA port (8500 or 1400 on
/// the interface, else LL128 corrupts data).
pub fn erdma_mtu_ok(h: &dyn Host, rdma: &RdmaSnapshot) -> bool {
    rdma.devices
        .iter()
        .filter(|d| d.is_erdma())
        .flat_map(|d| &d.ports)
        .filter_map(|p| p.netdev.as_deref())
        .all(|nd| {
            matches!(
                host::read(h, &format!("/sys/class/net/{nd}/mtu"))
                    .as_deref()
                    .map(str::trim),
                Some("8500") | Some("1400") | None
            )
        })
}

/// The recommendation for this host; `None` when no device suits NCCL.
pub fn recommend(h: &dyn Host) -> Option<Recommendation> {
    let rdma = h.rdma();
    let ports = usable_ports(rdma);
    if ports.is_empty() {
        return None;
    }
    let mut env: Vec<(String, String)> = Vec::new();
    let mut set = |k: &str, v: String| env.push((k.to_owned(), v));
    set("NCCL_IB_HCA", ib_hca_value(rdma, &ports));
    let roce: Vec<_> = ports
        .iter()
        .filter(|(d, p)| d.protocol(p) == Protocol::Roce)
        .collect();
    let picks: Vec<u32> = roce
        .iter()
        .filter_map(|(_, p)| p.nccl_gid.as_ref().ok().map(|g| g.index))
        .collect();
    if !roce.is_empty() && picks.len() == roce.len() && picks.windows(2).all(|w| w[0] == w[1]) {
        set("NCCL_IB_GID_INDEX", picks[0].to_string());
    }
    let ifname = socket_ifname(h, &ports);
    if let Some(i) = &ifname {
        set("NCCL_SOCKET_IFNAME", i.clone());
    }
    set("NCCL_IB_DISABLE", "0".into());
    if h.gpus().as_ref().is_ok_and(|g| !g.gpus.is_empty()) {
        set("NCCL_NET_GDR_LEVEL", "SYS".into());
    }
    let erdma = ports.iter().any(|(d, _)| d.is_erdma());
    if erdma {
        set("NCCL_IB_QPS_PER_CONNECTION", "8".into());
        set("NCCL_MIN_NCHANNELS", "16".into());
        set("NCCL_NET_PLUGIN", "none".into());
        if !erdma_mtu_ok(h, rdma) {
            set("NCCL_PROTO", "^LL128".into());
        }
    }
    let mca = ifname
        .map(|i| {
            vec![(
                "btl_tcp_if_include".to_owned(),
                i.trim_start_matches('=').to_owned(),
            )]
        })
        .unwrap_or_default();
    Some(Recommendation {
        devices: ports
            .iter()
            .map(|(d, p)| format!("{}:{}", d.name, p.port))
            .collect(),
        env,
        mca,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::doctor::testing::{FakeHost, iface, roce};

    #[test]
    fn rig_leaves_out_iwarp() {
        let h = FakeHost::rig();
        let r = recommend(&h).unwrap();
        assert_eq!(r.devices, ["rxe0:1", "rxe1:1"]);
        assert_eq!(
            r.args_line(),
            "-mca btl_tcp_if_include veth0 -x NCCL_IB_HCA=rxe0,rxe1 -x NCCL_IB_GID_INDEX=1 \
             -x NCCL_SOCKET_IFNAME=veth0 -x NCCL_IB_DISABLE=0"
        );
        let lines = r.mpirun_lines();
        assert!(lines[0].starts_with(
            "mpirun --allow-run-as-root --bind-to none -mca btl_tcp_if_include veth0 \\"
        ));
        assert!(lines.last().unwrap().ends_with("-g 1"));
        assert!(lines[..lines.len() - 1].iter().all(|l| l.ends_with(" \\")));
    }

    #[test]
    fn erdma_gets_alibabas_settings() {
        let h = FakeHost::erdma_gpu();
        let r = recommend(&h).unwrap();
        let env: Vec<String> = r.env.iter().map(|(k, v)| format!("{k}={v}")).collect();
        assert_eq!(
            env,
            [
                "NCCL_IB_HCA=erdma_0,erdma_1",
                "NCCL_IB_GID_INDEX=1",
                "NCCL_SOCKET_IFNAME=eth0",
                "NCCL_IB_DISABLE=0",
                "NCCL_NET_GDR_LEVEL=SYS",
                "NCCL_IB_QPS_PER_CONNECTION=8",
                "NCCL_MIN_NCHANNELS=16",
                "NCCL_NET_PLUGIN=none"
            ]
        );
        // MTU 1500 breaks LL128.
        h.file("/sys/class/net/eth1/mtu", "1500\n");
        let r = recommend(&h).unwrap();
        assert!(r.env.contains(&("NCCL_PROTO".into(), "^LL128".into())));
    }

    #[test]
    fn exact_match_when_a_name_prefixes_another() {
        let mut h = FakeHost::rig();
        let mut other = roce("rxe10", "veth9", "10.99.9.1");
        other.ports[0].state = erdma::PortState::Down;
        let mut devs = h.rdma.devices.clone();
        devs.push(other);
        h.set_devices(devs);
        h.interfaces.push(iface("veth0.5", "10.99.5.1"));
        let r = recommend(&h).unwrap();
        assert!(r.env.contains(&("NCCL_IB_HCA".into(), "=rxe0,rxe1".into())));
        assert!(
            r.env
                .contains(&("NCCL_SOCKET_IFNAME".into(), "=veth0".into()))
        );
        assert_eq!(r.mca[0].1, "veth0");
    }

    #[test]
    fn nothing_usable_nothing_recommended() {
        assert_eq!(recommend(&FakeHost::bare()), None);
        let mut h = FakeHost::rig();
        let devs = h.rdma.devices[2..].to_vec();
        h.set_devices(devs);
        assert_eq!(recommend(&h), None, "iWARP only");
    }
}
