//! GIDs: the 128-bit port addresses, their table entries and types, and the
//! NCCL-style choice of the entry to connect with.

use std::fmt;
use std::net::{Ipv4Addr, Ipv6Addr};
use std::str::FromStr;

/// A GID (`union ibv_gid`): 16 bytes in network order.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Default, PartialOrd, Ord)]
pub struct Gid(pub [u8; 16]);

impl Gid {
    /// The raw bytes.
    pub fn raw(&self) -> [u8; 16] {
        self.0
    }

    /// All sixteen bytes zero (an empty table entry).
    pub fn is_zero(&self) -> bool {
        self.0 == [0; 16]
    }

    /// The IPv4 address of an IPv4-mapped GID (`::ffff:a.b.c.d`, RoCE v2).
    pub fn to_ipv4(&self) -> Option<Ipv4Addr> {
        let b = &self.0;
        (b[..10] == [0; 10] && b[10] == 0xff && b[11] == 0xff)
            .then(|| Ipv4Addr::new(b[12], b[13], b[14], b[15]))
    }

    /// The GID as an IPv6 address.
    pub fn to_ipv6(&self) -> Ipv6Addr {
        Ipv6Addr::from(self.0)
    }

    /// The IPv4-mapped GID of an IPv4 address.
    pub fn from_ipv4(ip: Ipv4Addr) -> Gid {
        Gid(ip.to_ipv6_mapped().octets())
    }

    /// Link-local (`fe80::/64`).
    pub fn is_link_local(&self) -> bool {
        self.0[..8] == [0xfe, 0x80, 0, 0, 0, 0, 0, 0]
    }

    /// Eight groups of four hex digits (`fe80:0000:...`), the form sysfs and
    /// `ibv_devinfo` (for RoCE v1/IB GIDs) print.
    pub fn to_hex_groups(&self) -> String {
        let b = &self.0;
        (0..8)
            .map(|i| format!("{:02x}{:02x}", b[2 * i], b[2 * i + 1]))
            .collect::<Vec<_>>()
            .join(":")
    }
}

impl fmt::Display for Gid {
    /// The IPv6 text form exactly as glibc's `inet_ntop(AF_INET6)` writes it
    /// (what `ibv_devinfo` prints for RoCE v2 GIDs): the longest run of two or
    /// more zero groups compressed, and a dotted IPv4 tail for IPv4-mapped and
    /// IPv4-compatible addresses.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let b = &self.0;
        let w: [u16; 8] = std::array::from_fn(|i| u16::from_be_bytes([b[2 * i], b[2 * i + 1]]));
        // Longest run of zero words (first one on ties), at least two long.
        let (mut best, mut cur): ((isize, usize), (isize, usize)) = ((-1, 0), (-1, 0));
        for (i, word) in w.iter().enumerate() {
            if *word == 0 {
                if cur.0 == -1 {
                    cur = (i as isize, 1);
                } else {
                    cur.1 += 1;
                }
            } else if cur.0 != -1 {
                if best.0 == -1 || cur.1 > best.1 {
                    best = cur;
                }
                cur = (-1, 0);
            }
        }
        if cur.0 != -1 && (best.0 == -1 || cur.1 > best.1) {
            best = cur;
        }
        if best.0 != -1 && best.1 < 2 {
            best = (-1, 0);
        }
        let mut out = String::with_capacity(46);
        let mut i = 0usize;
        while i < 8 {
            let in_best =
                best.0 != -1 && i as isize >= best.0 && (i as isize) < best.0 + best.1 as isize;
            if in_best {
                if i as isize == best.0 {
                    out.push(':');
                }
                i += 1;
                continue;
            }
            if i != 0 {
                out.push(':');
            }
            if i == 6 && best.0 == 0 && (best.1 == 6 || (best.1 == 5 && w[5] == 0xffff)) {
                out.push_str(&format!("{}.{}.{}.{}", b[12], b[13], b[14], b[15]));
                return f.write_str(&out);
            }
            out.push_str(&format!("{:x}", w[i]));
            i += 1;
        }
        if best.0 != -1 && best.0 as usize + best.1 == 8 {
            out.push(':');
        }
        f.write_str(&out)
    }
}

impl fmt::Debug for Gid {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Gid({self})")
    }
}

impl FromStr for Gid {
    type Err = String;
    /// Any IPv6 text form, including sysfs's eight hex groups.
    fn from_str(s: &str) -> Result<Gid, String> {
        Ipv6Addr::from_str(s.trim())
            .map(|a| Gid(a.octets()))
            .map_err(|_| format!("invalid GID '{s}': expected an IPv6-style address"))
    }
}

impl serde::Serialize for Gid {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&self.to_string())
    }
}

impl<'de> serde::Deserialize<'de> for Gid {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Gid, D::Error> {
        let s = String::deserialize(d)?;
        Gid::from_str(&s).map_err(serde::de::Error::custom)
    }
}

/// The type of a GID table entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
pub enum GidType {
    /// InfiniBand.
    Ib,
    /// RoCE v1 (Ethernet frames, ethertype 0x8915).
    RoceV1,
    /// RoCE v2 (UDP port 4791): what NCCL and eRDMA's RoCE mode use.
    RoceV2,
    /// An iWARP port's (MAC-derived) GID.
    Iwarp,
    /// A value this build does not know.
    Unknown(u32),
}

impl fmt::Display for GidType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            GidType::Ib => f.write_str("IB"),
            GidType::RoceV1 => f.write_str("RoCE v1"),
            GidType::RoceV2 => f.write_str("RoCE v2"),
            GidType::Iwarp => f.write_str("iWARP"),
            GidType::Unknown(x) => write!(f, "unknown ({x})"),
        }
    }
}

/// One entry of a port's GID table.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct GidEntry {
    /// Port number (from 1).
    pub port: u8,
    /// Index in the table (the `gid_index` / `NCCL_IB_GID_INDEX`).
    pub index: u32,
    /// The GID.
    pub gid: Gid,
    /// Its type.
    pub gid_type: GidType,
    /// The network interface it belongs to (from sysfs), when known.
    pub netdev: Option<String>,
}

/// Address family of a GID the way NCCL classifies it: IPv4 for IPv4-mapped
/// unicast and multicast GIDs.
fn is_ipv4_family(g: &Gid) -> bool {
    let b = &g.0;
    let mapped = b[..10] == [0; 10] && b[10] == 0xff && b[11] == 0xff;
    let mapped_mc =
        b[..4] == [0xff, 0x0e, 0, 0] && b[4..10] == [0; 6] && b[10] == 0xff && b[11] == 0xff;
    mapped || mapped_mc
}

/// NCCL's `validGid`: configured (not all zero, not a bare `fe80::`) and not link-local.
fn valid_gid(g: &Gid) -> bool {
    let b = &g.0;
    let trailer_zero = b[4..] == [0; 12];
    let first_zero = b[..4] == [0; 4];
    let fe80 = b[..4] == [0xfe, 0x80, 0, 0];
    // Unconfigured: all zero, or a bare fe80:: prefix.
    let configured = !(trailer_zero && (first_zero || fe80));
    let link_local = fe80 && b[4..8] == [0; 4];
    configured && !link_local
}

/// The GID index NCCL would choose (`ncclIbGetGidIndex` with its defaults:
/// `NCCL_IB_ADDR_FAMILY=AF_INET`, `NCCL_IB_ROCE_VERSION_NUM=2`, no address
/// range): on Ethernet ports the IPv4-mapped RoCE v2 entry. `table[i]` is
/// entry `i` (zero GID when empty) with its RoCE version (1, 2) when known.
pub fn nccl_gid_index(infiniband: bool, table: &[(Gid, Option<u8>)]) -> u32 {
    if table.is_empty() {
        return 0;
    }
    if infiniband {
        // Routable FLID entry (index 1) when its FLID is set, else 0.
        if let Some((g, _)) = table.get(1)
            && u16::from_be_bytes([g.0[4], g.0[5]]) != 0
        {
            return 1;
        }
        return 0;
    }
    let mut best = 0usize;
    for cand in 1..table.len() {
        let (gid, ver) = table[best];
        let (cgid, cver) = table[cand];
        let (fam4, cfam4) = (is_ipv4_family(&gid), is_ipv4_family(&cgid));
        if cfam4 != fam4 && cfam4 {
            best = cand;
        } else {
            if !cfam4 || !valid_gid(&cgid) {
                continue;
            }
            if (ver != cver || !valid_gid(&gid)) && cver == Some(2) {
                best = cand;
            }
        }
    }
    best as u32
}

#[cfg(test)]
mod tests {
    use super::*;

    fn g(s: &str) -> Gid {
        s.parse().unwrap()
    }

    #[test]
    fn display_matches_inet_ntop() {
        // Expected strings are what glibc's inet_ntop prints.
        assert_eq!(
            g("0000:0000:0000:0000:0000:ffff:0a63:0001").to_string(),
            "::ffff:10.99.0.1"
        );
        assert_eq!(
            g("fe80:0000:0000:0000:0000:0aff:fe63:0001").to_string(),
            "fe80::aff:fe63:1"
        );
        assert_eq!(g("::").to_string(), "::");
        assert_eq!(g("::1").to_string(), "::1");
        assert_eq!(g("::0.0.0.2").to_string(), "::2");
        assert_eq!(g("::2:3").to_string(), "::0.2.0.3");
        assert_eq!(g("::ffff:0:1").to_string(), "::ffff:0.0.0.1");
        assert_eq!(g("ff0e::ffff:1.2.3.4").to_string(), "ff0e::ffff:102:304");
        assert_eq!(
            g("0200:0a63:0101:0000:0000:0000:0000:0000").to_string(),
            "200:a63:101::"
        );
        assert_eq!(g("1:0:1:0:1:0:1:0").to_string(), "1:0:1:0:1:0:1:0");
        assert_eq!(g("1:0:0:1:0:0:0:1").to_string(), "1:0:0:1::1");
        assert_eq!(g("1:0:0:2:0:0:3:4").to_string(), "1::2:0:0:3:4");
        assert_eq!(g("2001:db8::ffff:1:2").to_string(), "2001:db8::ffff:1:2");
    }

    #[test]
    fn hex_groups_and_ipv4() {
        let x = Gid::from_ipv4(Ipv4Addr::new(10, 99, 0, 2));
        assert_eq!(x.to_hex_groups(), "0000:0000:0000:0000:0000:ffff:0a63:0002");
        assert_eq!(x.to_ipv4(), Some(Ipv4Addr::new(10, 99, 0, 2)));
        assert_eq!(g("fe80::1").to_ipv4(), None);
        assert!(g("fe80::1").is_link_local());
        assert!(Gid::default().is_zero());
    }

    #[test]
    fn serde_round_trip_and_garbage() {
        let x = g("::ffff:10.0.0.1");
        let j = serde_json::to_string(&x).unwrap();
        assert_eq!(j, "\"::ffff:10.0.0.1\"");
        assert_eq!(serde_json::from_str::<Gid>(&j).unwrap(), x);
        assert!(serde_json::from_str::<Gid>("\"not a gid\"").is_err());
        assert!(serde_json::from_str::<Gid>("42").is_err());
    }

    #[test]
    fn nccl_picks_ipv4_roce_v2() {
        let ll = g("fe80::aff:fe63:1");
        let v4 = g("::ffff:10.99.0.1");
        let v6 = g("2001:db8::1");
        // rxe: [link-local v2, ipv4 v2]
        assert_eq!(nccl_gid_index(false, &[(ll, Some(2)), (v4, Some(2))]), 1);
        // mlx5 style: ll v1, ll v2, v4 v1, v4 v2
        let t = [(ll, Some(1)), (ll, Some(2)), (v4, Some(1)), (v4, Some(2))];
        assert_eq!(nccl_gid_index(false, &t), 3);
        // IPv6 only: stays at 0 (family never matches AF_INET)
        assert_eq!(nccl_gid_index(false, &[(ll, Some(2)), (v6, Some(2))]), 0);
        // empty entries skipped
        let z = Gid::default();
        assert_eq!(
            nccl_gid_index(false, &[(ll, Some(2)), (z, None), (v4, Some(2))]),
            2
        );
        // iWARP: one entry
        assert_eq!(nccl_gid_index(false, &[(g("200:a63:101::"), None)]), 0);
        assert_eq!(nccl_gid_index(false, &[]), 0);
        // InfiniBand: 0 unless entry 1 has a FLID
        assert_eq!(nccl_gid_index(true, &[(ll, None), (ll, None)]), 0);
        assert_eq!(
            nccl_gid_index(true, &[(ll, None), (g("fe80:0:1::1"), None)]),
            1
        );
    }
}
