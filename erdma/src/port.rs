//! Port attributes: state, MTUs, link layer, LID, speed and width.

use std::fmt;

use erdma_sys as sys;

/// Declares a newtype-like enum over a raw C enum value: named variants for
/// the values this build knows, `Unknown(raw)` for the rest (the library may
/// be newer than these headers).
macro_rules! c_enum {
    (
        $(#[$m:meta])* $name:ident : $raw:ty {
            $( $(#[$vm:meta])* $variant:ident = $value:expr => $text:literal, )*
        } unknown $unknown:literal
    ) => {
        $(#[$m])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
        pub enum $name {
            $( $(#[$vm])* $variant, )*
            /// A value this build does not know.
            Unknown($raw),
        }

        impl $name {
            /// From the raw C value.
            pub fn from_raw(raw: $raw) -> Self {
                $( if raw == ($value) as $raw { return $name::$variant; } )*
                $name::Unknown(raw)
            }

            /// The raw C value.
            pub fn raw(self) -> $raw {
                match self {
                    $( $name::$variant => ($value) as $raw, )*
                    $name::Unknown(raw) => raw,
                }
            }
        }

        impl fmt::Display for $name {
            /// The text `ibv_devinfo` prints for the value.
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(match self {
                    $( $name::$variant => $text, )*
                    $name::Unknown(_) => $unknown,
                })
            }
        }
    };
}
pub(crate) use c_enum;

c_enum! {
    /// Logical port state (`ibv_port_state`).
    PortState: u32 {
        /// No link.
        Nop = sys::IBV_PORT_NOP => "PORT_NOP",
        /// Link down.
        Down = sys::IBV_PORT_DOWN => "PORT_DOWN",
        /// Link up, not configured by the subnet manager.
        Init = sys::IBV_PORT_INIT => "PORT_INIT",
        /// Configured, not yet active.
        Armed = sys::IBV_PORT_ARMED => "PORT_ARMED",
        /// Ready for traffic.
        Active = sys::IBV_PORT_ACTIVE => "PORT_ACTIVE",
        /// Active, deferred.
        ActiveDefer = sys::IBV_PORT_ACTIVE_DEFER => "PORT_ACTIVE_DEFER",
    } unknown "invalid state"
}

c_enum! {
    /// Physical port state (the `phys_state` numbers of the IB spec).
    PhysState: u8 {
        /// Sleep.
        Sleep = 1 => "SLEEP",
        /// Polling.
        Polling = 2 => "POLLING",
        /// Disabled.
        Disabled = 3 => "DISABLED",
        /// Port configuration training.
        Training = 4 => "PORT_CONFIGURATION TRAINNING",
        /// Link up.
        LinkUp = 5 => "LINK_UP",
        /// Link error recovery.
        LinkErrorRecovery = 6 => "LINK_ERROR_RECOVERY",
        /// PHY test.
        PhyTest = 7 => "PHY TEST",
    } unknown "invalid physical state"
}

c_enum! {
    /// Link layer of a port.
    LinkLayer: u8 {
        /// Not reported (treated as InfiniBand).
        Unspecified = sys::IBV_LINK_LAYER_UNSPECIFIED => "Unspecified",
        /// InfiniBand.
        InfiniBand = sys::IBV_LINK_LAYER_INFINIBAND => "InfiniBand",
        /// Ethernet: RoCE and iWARP (eRDMA).
        Ethernet = sys::IBV_LINK_LAYER_ETHERNET => "Ethernet",
    } unknown "Unknown"
}

/// A path MTU of the verbs (`ibv_mtu`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Mtu {
    /// 256 bytes.
    Mtu256,
    /// 512 bytes.
    Mtu512,
    /// 1024 bytes.
    Mtu1024,
    /// 2048 bytes.
    Mtu2048,
    /// 4096 bytes.
    Mtu4096,
}

impl Mtu {
    /// From the raw `ibv_mtu` value (1..=5).
    pub fn from_raw(raw: u32) -> Option<Mtu> {
        Some(match raw {
            1 => Mtu::Mtu256,
            2 => Mtu::Mtu512,
            3 => Mtu::Mtu1024,
            4 => Mtu::Mtu2048,
            5 => Mtu::Mtu4096,
            _ => return None,
        })
    }

    /// The raw `ibv_mtu` value.
    pub fn raw(self) -> u32 {
        match self {
            Mtu::Mtu256 => 1,
            Mtu::Mtu512 => 2,
            Mtu::Mtu1024 => 3,
            Mtu::Mtu2048 => 4,
            Mtu::Mtu4096 => 5,
        }
    }

    /// The MTU in bytes.
    pub fn bytes(self) -> u32 {
        128 << self.raw()
    }

    /// The MTU of exactly `bytes` bytes (256, 512, 1024, 2048, 4096).
    pub fn from_bytes(bytes: u32) -> Option<Mtu> {
        [
            Mtu::Mtu256,
            Mtu::Mtu512,
            Mtu::Mtu1024,
            Mtu::Mtu2048,
            Mtu::Mtu4096,
        ]
        .into_iter()
        .find(|m| m.bytes() == bytes)
    }
}

impl fmt::Display for Mtu {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.bytes())
    }
}

impl serde::Serialize for Mtu {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_u32(self.bytes())
    }
}

impl<'de> serde::Deserialize<'de> for Mtu {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Mtu, D::Error> {
        let b = u32::deserialize(d)?;
        Mtu::from_bytes(b).ok_or_else(|| {
            serde::de::Error::custom(format!(
                "invalid MTU {b}: expected 256, 512, 1024, 2048 or 4096"
            ))
        })
    }
}

/// `ibv_devinfo`'s text for a raw MTU value.
pub fn mtu_text(raw: u32) -> &'static str {
    match raw {
        1 => "256",
        2 => "512",
        3 => "1024",
        4 => "2048",
        5 => "4096",
        _ => "invalid MTU",
    }
}

/// `ibv_devinfo`'s text for a raw `active_width` (lanes).
pub fn width_text(width: u8) -> &'static str {
    match width {
        1 => "1",
        2 => "4",
        4 => "8",
        8 => "12",
        16 => "2",
        _ => "invalid width",
    }
}

/// `ibv_devinfo`'s text for a raw `active_speed` (per lane).
pub fn speed_text(speed: u8) -> &'static str {
    match speed {
        1 => "2.5 Gbps",
        2 => "5.0 Gbps",
        4 | 8 => "10.0 Gbps",
        16 => "14.0 Gbps",
        32 => "25.0 Gbps",
        64 => "50.0 Gbps",
        128 => "100.0 Gbps",
        _ => "invalid speed",
    }
}

/// `ibv_devinfo`'s text for a raw `max_vl_num`.
pub fn vl_text(vl: u8) -> &'static str {
    match vl {
        1 => "1",
        2 => "2",
        3 => "4",
        4 => "8",
        5 => "15",
        _ => "invalid value",
    }
}

/// Lanes of a raw `active_width`.
pub fn width_lanes(width: u8) -> Option<u32> {
    Some(match width {
        1 => 1,
        2 => 4,
        4 => 8,
        8 => 12,
        16 => 2,
        _ => return None,
    })
}

/// Gbit/s per lane of a raw `active_speed`.
pub fn speed_gbps(speed: u8) -> Option<f64> {
    Some(match speed {
        1 => 2.5,
        2 => 5.0,
        4 | 8 => 10.0,
        16 => 14.0,
        32 => 25.0,
        64 => 50.0,
        128 => 100.0,
        _ => return None,
    })
}

/// The attributes of one port (`ibv_port_attr` from `ibv_query_port`).
#[derive(Clone, Copy)]
pub struct PortAttributes {
    port: u8,
    raw: sys::ibv_port_attr,
}

impl fmt::Debug for PortAttributes {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PortAttributes")
            .field("port", &self.port)
            .field("state", &self.state())
            .field("active_mtu", &self.active_mtu())
            .field("link_layer", &self.link_layer())
            .field("lid", &self.lid())
            .field("gid_tbl_len", &self.gid_tbl_len())
            .finish()
    }
}

impl PortAttributes {
    pub(crate) fn new(port: u8, raw: sys::ibv_port_attr) -> PortAttributes {
        PortAttributes { port, raw }
    }

    /// The port number (from 1).
    pub fn port(&self) -> u8 {
        self.port
    }

    /// Logical state; traffic needs [`PortState::Active`].
    pub fn state(&self) -> PortState {
        PortState::from_raw(self.raw.state)
    }

    /// Physical state.
    pub fn phys_state(&self) -> PhysState {
        PhysState::from_raw(self.raw.phys_state)
    }

    /// Largest MTU the port supports (`None` for an invalid raw value).
    pub fn max_mtu(&self) -> Option<Mtu> {
        Mtu::from_raw(self.raw.max_mtu)
    }

    /// MTU in use; QPs cap their path MTU to it.
    pub fn active_mtu(&self) -> Option<Mtu> {
        Mtu::from_raw(self.raw.active_mtu)
    }

    /// Link layer (Ethernet for RoCE, iWARP and eRDMA).
    pub fn link_layer(&self) -> LinkLayer {
        LinkLayer::from_raw(self.raw.link_layer)
    }

    /// Local identifier (InfiniBand; 0 on Ethernet).
    pub fn lid(&self) -> u16 {
        self.raw.lid
    }

    /// Subnet manager LID.
    pub fn sm_lid(&self) -> u16 {
        self.raw.sm_lid
    }

    /// LID mask control.
    pub fn lmc(&self) -> u8 {
        self.raw.lmc
    }

    /// GID table length.
    pub fn gid_tbl_len(&self) -> u32 {
        self.raw.gid_tbl_len.max(0) as u32
    }

    /// Raw `active_width` (see [`width_lanes`]).
    pub fn active_width(&self) -> u8 {
        self.raw.active_width
    }

    /// Raw `active_speed` (see [`speed_gbps`]).
    pub fn active_speed(&self) -> u8 {
        self.raw.active_speed
    }

    /// Link rate in Gbit/s (lanes x per-lane speed), when both are known.
    pub fn rate_gbps(&self) -> Option<f64> {
        Some(width_lanes(self.raw.active_width)? as f64 * speed_gbps(self.raw.active_speed)?)
    }

    /// Largest message size.
    pub fn max_msg_sz(&self) -> u32 {
        self.raw.max_msg_sz
    }

    /// The raw attributes (every field `ibv_query_port` returns).
    pub fn raw(&self) -> &sys::ibv_port_attr {
        &self.raw
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mtu_values() {
        assert_eq!(Mtu::Mtu1024.bytes(), 1024);
        assert_eq!(Mtu::from_bytes(4096), Some(Mtu::Mtu4096));
        assert_eq!(Mtu::from_bytes(1500), None);
        assert_eq!(Mtu::from_raw(0), None);
        assert_eq!(Mtu::from_raw(6), None);
        for r in 1..=5 {
            assert_eq!(Mtu::from_raw(r).map(Mtu::raw), Some(r));
        }
        assert!(Mtu::Mtu1024 < Mtu::Mtu4096);
        assert_eq!(serde_json::to_string(&Mtu::Mtu2048).unwrap(), "2048");
        assert!(serde_json::from_str::<Mtu>("1500").is_err());
    }

    #[test]
    fn state_texts_match_ibv_devinfo() {
        assert_eq!(PortState::from_raw(4).to_string(), "PORT_ACTIVE");
        assert_eq!(PortState::from_raw(1).to_string(), "PORT_DOWN");
        assert_eq!(PortState::from_raw(77), PortState::Unknown(77));
        assert_eq!(PhysState::from_raw(5).to_string(), "LINK_UP");
        assert_eq!(LinkLayer::from_raw(2).to_string(), "Ethernet");
        assert_eq!(LinkLayer::from_raw(9).to_string(), "Unknown");
    }

    #[test]
    fn rate_from_width_and_speed() {
        let mut raw = sys::ibv_port_attr {
            active_width: 2,  // 4x
            active_speed: 32, // 25 Gbps
            ..Default::default()
        };
        assert_eq!(PortAttributes::new(1, raw).rate_gbps(), Some(100.0));
        raw.active_speed = 3;
        assert_eq!(PortAttributes::new(1, raw).rate_gbps(), None);
        assert_eq!(speed_text(3), "invalid speed");
        assert_eq!(width_text(16), "2");
    }
}
