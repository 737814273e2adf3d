//! NCCL's environment syntax, parsed and matched the way NCCL does it
//! (`src/misc/utils.cc` `parseStringList`/`matchIfList`, `src/transport/net_ib/init.cc`,
//! `src/graph/paths.cc` `ncclGetLevel`), so that the checks predict what NCCL will do.

use super::host::{RdmaDevice, RdmaPort, RdmaSnapshot};
use erdma::{LinkLayer, PortState};

/// One entry of an NCCL device or interface list: `name[:port]`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ListEntry {
    /// The name (a prefix unless the list is exact).
    pub name: String,
    /// The port (`-1`: any). NCCL reads it with `atoi`: `x` is 0, no port.
    pub port: i32,
    /// The port text when it is not a number (NCCL turns it into 0).
    pub bad_port: Option<String>,
}

/// `NCCL_IB_HCA` / `NCCL_SOCKET_IFNAME`: `[^][=]entry[,entry...]`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NameList {
    /// `^`: the entries are excluded, everything else is used.
    pub exclude: bool,
    /// `=`: names match exactly instead of as prefixes.
    pub exact: bool,
    /// The entries (empty ones dropped, as `strtok` does).
    pub entries: Vec<ListEntry>,
}

impl NameList {
    /// Parses a list as NCCL does.
    pub fn parse(s: &str) -> NameList {
        let mut rest = s;
        let exclude = rest.starts_with('^');
        if exclude {
            rest = &rest[1..];
        }
        let exact = rest.starts_with('=');
        if exact {
            rest = &rest[1..];
        }
        let entries = rest
            .split(',')
            .filter(|e| !e.is_empty())
            .filter_map(|e| {
                let mut parts = e.split(':');
                let name = parts.next().unwrap_or_default();
                if name.is_empty() {
                    return None;
                }
                let (port, bad_port) = match parts.next() {
                    None | Some("") => (-1, None),
                    Some(p) => match p.parse::<i32>() {
                        Ok(v) => (v, None),
                        Err(_) => (atoi(p), Some(p.to_owned())),
                    },
                };
                Some(ListEntry {
                    name: name.to_owned(),
                    port,
                    bad_port,
                })
            })
            .collect();
        NameList {
            exclude,
            exact,
            entries,
        }
    }

    /// Whether `entry` names `name` (port `port`, or any port for `None`).
    pub fn entry_matches(&self, entry: &ListEntry, name: &str, port: Option<u8>) -> bool {
        let name_ok = if self.exact {
            name == entry.name
        } else {
            name.starts_with(&entry.name)
        };
        let port_ok = match port {
            None => true,
            Some(p) => entry.port == -1 || entry.port == i32::from(p),
        };
        name_ok && port_ok
    }

    /// Whether NCCL uses `name` (port `port`): `matchIfList(...) ^ searchNot`;
    /// an empty list keeps everything.
    pub fn selects(&self, name: &str, port: Option<u8>) -> bool {
        if self.entries.is_empty() {
            return true;
        }
        let hit = self
            .entries
            .iter()
            .any(|e| self.entry_matches(e, name, port));
        hit != self.exclude
    }

    /// The list written back in NCCL's syntax.
    pub fn render(&self) -> String {
        let mut s = String::new();
        if self.exclude {
            s.push('^');
        }
        if self.exact {
            s.push('=');
        }
        let entries: Vec<String> = self
            .entries
            .iter()
            .map(|e| match (e.port, &e.bad_port) {
                (_, Some(p)) => format!("{}:{p}", e.name),
                (-1, None) => e.name.clone(),
                (p, None) => format!("{}:{p}", e.name),
            })
            .collect();
        s.push_str(&entries.join(","));
        s
    }
}

/// C's `atoi`: the leading decimal digits (with a sign), else 0.
fn atoi(s: &str) -> i32 {
    let t = s.trim_start();
    let (sign, digits) = match t.strip_prefix('-') {
        Some(r) => (-1, r),
        None => (1, t.strip_prefix('+').unwrap_or(t)),
    };
    let n: String = digits.chars().take_while(char::is_ascii_digit).collect();
    n.parse::<i32>().map(|v| sign * v).unwrap_or(0)
}

/// The device ports NCCL's IB transport would use: ACTIVE ports with an
/// InfiniBand or Ethernet link layer that `NCCL_IB_HCA` (when set) selects.
pub fn nccl_ports<'a>(
    rdma: &'a RdmaSnapshot,
    ib_hca: Option<&str>,
) -> Vec<(&'a RdmaDevice, &'a RdmaPort)> {
    let list = ib_hca.map(NameList::parse);
    let mut out = Vec::new();
    for d in &rdma.devices {
        for p in &d.ports {
            if p.state != PortState::Active
                || !matches!(p.link_layer, LinkLayer::InfiniBand | LinkLayer::Ethernet)
            {
                continue;
            }
            if list
                .as_ref()
                .is_none_or(|l| l.selects(&d.name, Some(p.port)))
            {
                out.push((d, p));
            }
        }
    }
    out
}

/// NCCL's path types, nearest first (`topoPathTypeStr` of NCCL 2.28; 2.19 has
/// no C2C and P2C).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum PathType {
    /// Same device.
    Loc,
    /// NVLink.
    Nvl,
    /// NVLink through a bridge GPU.
    Nvb,
    /// Chip-to-chip (Grace).
    C2c,
    /// At most one PCIe switch.
    Pix,
    /// Several PCIe switches, no host bridge.
    Pxb,
    /// PCIe and C2C.
    P2c,
    /// Through another GPU (PXN).
    Pxn,
    /// Through the PCIe host bridge (same CPU socket).
    Phb,
    /// Across CPU sockets.
    Sys,
}

impl PathType {
    const ALL: [PathType; 10] = [
        PathType::Loc,
        PathType::Nvl,
        PathType::Nvb,
        PathType::C2c,
        PathType::Pix,
        PathType::Pxb,
        PathType::P2c,
        PathType::Pxn,
        PathType::Phb,
        PathType::Sys,
    ];

    /// The name NCCL prints and accepts.
    pub fn as_str(self) -> &'static str {
        match self {
            PathType::Loc => "LOC",
            PathType::Nvl => "NVL",
            PathType::Nvb => "NVB",
            PathType::C2c => "C2C",
            PathType::Pix => "PIX",
            PathType::Pxb => "PXB",
            PathType::P2c => "P2C",
            PathType::Pxn => "PXN",
            PathType::Phb => "PHB",
            PathType::Sys => "SYS",
        }
    }
}

/// `NCCL_NET_GDR_LEVEL` as NCCL reads it: a path name (case-sensitive), or an
/// old-style number (0 LOC, 1 PIX, 2 PXB, 3 PHB, 4 and above SYS). `None`:
/// NCCL ignores the value and keeps its default (PXB).
pub fn parse_gdr_level(s: &str) -> Option<PathType> {
    if let Some(p) = PathType::ALL.iter().find(|p| p.as_str() == s) {
        return Some(*p);
    }
    if s.starts_with(|c: char| c.is_ascii_digit()) {
        let old = strtol_prefix(s);
        return Some(match old {
            0 => PathType::Loc,
            1 => PathType::Pix,
            2 => PathType::Pxb,
            3 => PathType::Phb,
            _ => PathType::Sys,
        });
    }
    None
}

/// `strtol(s, NULL, 0)` for a string starting with a digit (decimal, 0x hex, 0 octal).
fn strtol_prefix(s: &str) -> i64 {
    let (digits, radix) = if let Some(h) = s.strip_prefix("0x").or_else(|| s.strip_prefix("0X")) {
        (h, 16)
    } else if s.len() > 1 && s.starts_with('0') {
        (&s[1..], 8)
    } else {
        (s, 10)
    };
    let n: String = digits.chars().take_while(|c| c.is_digit(radix)).collect();
    i64::from_str_radix(&n, radix).unwrap_or(if n.is_empty() { 0 } else { i64::MAX })
}

/// An integer NCCL parameter as `ncclLoadParam` reads it: `strtoll(s, NULL, 0)`,
/// so trailing junk is ignored (`8x` is 8) and no digits at all is 0; `None` on
/// overflow (NCCL then keeps the default). The flag says whether the whole value
/// was a number.
pub fn parse_param(s: &str) -> (Option<i64>, bool) {
    let t = s.trim_start();
    let (neg, body) = match t.strip_prefix('-') {
        Some(r) => (true, r),
        None => (false, t.strip_prefix('+').unwrap_or(t)),
    };
    let (digits, radix) =
        if let Some(h) = body.strip_prefix("0x").or_else(|| body.strip_prefix("0X")) {
            (h, 16)
        } else if body.len() > 1 && body.starts_with('0') {
            (&body[1..], 8)
        } else {
            (body, 10)
        };
    let n: String = digits.chars().take_while(|c| c.is_digit(radix)).collect();
    let clean = !n.is_empty() && n.len() == digits.len() || body == "0";
    if n.is_empty() {
        return (Some(0), body == "0");
    }
    match i64::from_str_radix(&n, radix) {
        Ok(v) => (Some(if neg { -v } else { v }), clean),
        Err(_) => (None, clean),
    }
}

/// Whether `NCCL_PROTO` leaves LL128 out (`^LL128`, or a list without it).
pub fn ll128_disabled(proto: Option<&str>) -> bool {
    let Some(p) = proto else { return false };
    let (exclude, list) = match p.strip_prefix('^') {
        Some(r) => (true, r),
        None => (false, p),
    };
    let has = list
        .split(',')
        .any(|x| x.trim().eq_ignore_ascii_case("LL128"));
    if exclude { has } else { !has }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lists_parse_like_nccl() {
        let l = NameList::parse("^=mlx5_0:1,,mlx5_1");
        assert!(l.exclude && l.exact);
        assert_eq!(l.entries.len(), 2);
        assert_eq!(l.entries[0].port, 1);
        assert_eq!(l.entries[1].port, -1);
        assert_eq!(l.render(), "^=mlx5_0:1,mlx5_1");
        let l = NameList::parse("erdma:x");
        assert_eq!(l.entries[0].port, 0);
        assert_eq!(l.entries[0].bad_port.as_deref(), Some("x"));
        assert!(NameList::parse("").entries.is_empty());
        assert!(NameList::parse("^").entries.is_empty());
    }

    #[test]
    fn selection_prefix_exact_exclude_and_port() {
        let l = NameList::parse("erdma");
        assert!(l.selects("erdma_0", Some(1)) && l.selects("erdma_1", Some(1)));
        assert!(!l.selects("mlx5_0", Some(1)));
        let l = NameList::parse("=erdma_1");
        assert!(l.selects("erdma_1", Some(1)) && !l.selects("erdma_10", Some(1)));
        let l = NameList::parse("erdma_1");
        assert!(l.selects("erdma_10", Some(1)), "prefix match, as NCCL");
        let l = NameList::parse("^siw");
        assert!(l.selects("rxe0", Some(1)) && !l.selects("siw0", Some(1)));
        let l = NameList::parse("rxe0:2");
        assert!(!l.selects("rxe0", Some(1)) && l.selects("rxe0", Some(2)));
        assert!(l.selects("rxe0", None));
        assert!(NameList::parse("").selects("anything", Some(1)));
    }

    #[test]
    fn gdr_levels_old_and_new() {
        assert_eq!(parse_gdr_level("SYS"), Some(PathType::Sys));
        assert_eq!(parse_gdr_level("PHB"), Some(PathType::Phb));
        assert_eq!(parse_gdr_level("5"), Some(PathType::Sys));
        assert_eq!(parse_gdr_level("4"), Some(PathType::Sys));
        assert_eq!(parse_gdr_level("3"), Some(PathType::Phb));
        assert_eq!(parse_gdr_level("1"), Some(PathType::Pix));
        assert_eq!(parse_gdr_level("0"), Some(PathType::Loc));
        assert_eq!(parse_gdr_level("99"), Some(PathType::Sys));
        assert_eq!(parse_gdr_level("sys"), None, "names are case-sensitive");
        assert_eq!(parse_gdr_level(""), None);
        assert_eq!(parse_gdr_level("-1"), None);
    }

    #[test]
    fn params_and_proto() {
        assert_eq!(parse_param("8"), (Some(8), true));
        assert_eq!(parse_param("0x10"), (Some(16), true));
        assert_eq!(parse_param("010"), (Some(8), true));
        assert_eq!(parse_param("0"), (Some(0), true));
        assert_eq!(parse_param("-1"), (Some(-1), true));
        assert_eq!(parse_param("8x"), (Some(8), false));
        assert_eq!(parse_param("abc"), (Some(0), false));
        assert_eq!(parse_param(""), (Some(0), false));
        assert_eq!(parse_param("99999999999999999999"), (None, true));
        assert!(ll128_disabled(Some("^LL128")));
        assert!(ll128_disabled(Some("Simple,LL")));
        assert!(!ll128_disabled(Some("^LL")));
        assert!(!ll128_disabled(Some("LL128,Simple")));
        assert!(!ll128_disabled(None));
        assert_eq!(atoi("12abc"), 12);
        assert_eq!(atoi("abc"), 0);
    }
}
