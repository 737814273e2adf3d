//! Reading the device's sysfs attributes (GID types and netdevs, counters).

use std::path::Path;

/// A sysfs attribute without its trailing newline; `None` when it cannot be
/// read or is empty (some attributes read as EINVAL for empty entries).
pub(crate) fn read_attr(path: &Path) -> Option<String> {
    let s = std::fs::read_to_string(path).ok()?;
    let s = s.trim_end_matches('\n').to_owned();
    (!s.is_empty()).then_some(s)
}

/// RoCE version (1 or 2) of a GID from `ports/P/gid_attrs/types/I`.
pub(crate) fn gid_roce_version(dev: &Path, port: u8, index: u32) -> Option<u8> {
    let t = read_attr(&dev.join(format!("ports/{port}/gid_attrs/types/{index}")))?;
    parse_gid_type(&t)
}

/// The RoCE version named by a sysfs GID type string.
pub(crate) fn parse_gid_type(t: &str) -> Option<u8> {
    if t.starts_with("RoCE v2") {
        Some(2)
    } else if t.starts_with("IB/RoCE v1") || t.starts_with("RoCE v1") {
        Some(1)
    } else {
        None
    }
}

/// The netdev of a GID from `ports/P/gid_attrs/ndevs/I`.
pub(crate) fn gid_netdev(dev: &Path, port: u8, index: u32) -> Option<String> {
    read_attr(&dev.join(format!("ports/{port}/gid_attrs/ndevs/{index}")))
}

/// The name of a network interface index (0: none).
pub(crate) fn ifindex_name(ifindex: u32) -> Option<String> {
    if ifindex == 0 {
        return None;
    }
    let mut buf = [0 as libc::c_char; libc::IF_NAMESIZE];
    // SAFETY: buf has IF_NAMESIZE bytes as if_indextoname requires.
    let p = unsafe { libc::if_indextoname(ifindex, buf.as_mut_ptr()) };
    if p.is_null() {
        return None;
    }
    // SAFETY: on success buf holds a NUL-terminated name.
    Some(
        unsafe { std::ffi::CStr::from_ptr(buf.as_ptr()) }
            .to_string_lossy()
            .into_owned(),
    )
}

/// The interface whose MAC address is `mac` (iWARP GIDs embed the MAC).
pub(crate) fn netdev_by_mac(mac: &[u8]) -> Option<String> {
    let want: Vec<String> = mac.iter().map(|b| format!("{b:02x}")).collect();
    let want = want.join(":");
    let mut names: Vec<_> = std::fs::read_dir("/sys/class/net")
        .ok()?
        .flatten()
        .collect();
    names.sort_by_key(|e| e.file_name());
    names.into_iter().find_map(|e| {
        let addr = read_attr(&e.path().join("address"))?;
        (addr.eq_ignore_ascii_case(&want)).then(|| e.file_name().to_string_lossy().into_owned())
    })
}

/// The network interface of port `port` as sysfs names it: the PCI function's
/// `device/net/*` entry whose `dev_port` is `port - 1` (or its only entry), else
/// the `parent` attribute (rxe). `None` when neither tells (iWARP devices such as
/// siw and eRDMA, whose netdev only the GID table gives).
pub(crate) fn port_netdev(dev: &Path, port: u8) -> Option<String> {
    if let Ok(rd) = std::fs::read_dir(dev.join("device/net")) {
        let mut names: Vec<_> = rd.flatten().collect();
        names.sort_by_key(|e| e.file_name());
        let want = u32::from(port.saturating_sub(1));
        let by_port = names.iter().find(|e| {
            read_attr(&e.path().join("dev_port")).and_then(|v| v.trim().parse::<u32>().ok())
                == Some(want)
        });
        if let Some(e) = by_port.or(if names.len() == 1 {
            names.first()
        } else {
            None
        }) {
            return Some(e.file_name().to_string_lossy().into_owned());
        }
    }
    read_attr(&dev.join("parent"))
}

/// The counters in `ports/P/hw_counters` and `ports/P/counters`, sorted by
/// name (a name in both keeps the hw_counters value).
pub(crate) fn port_counters(dev: &Path, port: u8) -> Vec<(String, u64)> {
    let mut out: Vec<(String, u64)> = Vec::new();
    for sub in ["hw_counters", "counters"] {
        let Ok(rd) = std::fs::read_dir(dev.join(format!("ports/{port}/{sub}"))) else {
            continue;
        };
        for e in rd.flatten() {
            let name = e.file_name().to_string_lossy().into_owned();
            if name == "lifespan" || out.iter().any(|(n, _)| *n == name) {
                continue;
            }
            if let Some(v) = read_attr(&e.path()).and_then(|v| v.trim().parse::<u64>().ok()) {
                out.push((name, v));
            }
        }
    }
    out.sort();
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gid_type_strings() {
        assert_eq!(parse_gid_type("RoCE v2"), Some(2));
        assert_eq!(parse_gid_type("IB/RoCE v1"), Some(1));
        assert_eq!(parse_gid_type("RoCE v1"), Some(1));
        assert_eq!(parse_gid_type("garbage"), None);
    }

    #[test]
    fn counters_from_a_fake_sysfs_tree() {
        let dir = std::env::temp_dir().join(format!("erdma-sysfs-{}", std::process::id()));
        let hw = dir.join("ports/1/hw_counters");
        std::fs::create_dir_all(&hw).unwrap();
        std::fs::write(hw.join("tx_bytes_cnt"), "1234\n").unwrap();
        std::fs::write(hw.join("rx_bytes_cnt"), "99\n").unwrap();
        std::fs::write(hw.join("lifespan"), "10\n").unwrap();
        std::fs::write(hw.join("broken"), "xyz\n").unwrap();
        let c = port_counters(&dir, 1);
        assert_eq!(
            c,
            vec![("rx_bytes_cnt".into(), 99), ("tx_bytes_cnt".into(), 1234)]
        );
        assert!(port_counters(&dir, 2).is_empty());
        assert_eq!(read_attr(&hw.join("tx_bytes_cnt")).as_deref(), Some("1234"));
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn port_netdev_from_pci_net_dir_or_parent() {
        let dir = std::env::temp_dir().join(format!("erdma-netdev-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        // A two-port PCI NIC: dev_port picks the interface.
        for (name, port) in [("ens1f0", "0"), ("ens1f1", "1")] {
            let n = dir.join("pci/device/net").join(name);
            std::fs::create_dir_all(&n).unwrap();
            std::fs::write(n.join("dev_port"), format!("{port}\n")).unwrap();
        }
        assert_eq!(port_netdev(&dir.join("pci"), 1).as_deref(), Some("ens1f0"));
        assert_eq!(port_netdev(&dir.join("pci"), 2).as_deref(), Some("ens1f1"));
        // One interface without dev_port: that one.
        std::fs::create_dir_all(dir.join("one/device/net/eth0")).unwrap();
        assert_eq!(port_netdev(&dir.join("one"), 1).as_deref(), Some("eth0"));
        // rxe: the parent attribute.
        std::fs::create_dir_all(dir.join("rxe")).unwrap();
        std::fs::write(dir.join("rxe/parent"), "veth0\n").unwrap();
        assert_eq!(port_netdev(&dir.join("rxe"), 1).as_deref(), Some("veth0"));
        // siw: nothing in sysfs.
        std::fs::create_dir_all(dir.join("siw")).unwrap();
        assert_eq!(port_netdev(&dir.join("siw"), 1), None);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn loopback_has_index_one_name() {
        // ifindex 0 is never an interface.
        assert_eq!(ifindex_name(0), None);
        assert_eq!(netdev_by_mac(&[0xde, 0xad, 0xbe, 0xef, 0x00, 0x42]), None);
    }
}
