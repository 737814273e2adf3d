//! What `devinfo` prints, gathered from the devices first (so that the
//! formatting is pure and tested without devices).

use erdma::sys;
use erdma::{Context, Device, Error, Gid, GidType};

/// One GID table entry as `ibv_devinfo` sees it.
#[derive(Debug, Clone, PartialEq)]
pub struct GidReport {
    /// Table index.
    pub index: u32,
    /// The GID.
    pub gid: Gid,
    /// Its type (`None`: the type query failed; not printed).
    pub gid_type: Option<GidType>,
    /// Its network device, when known.
    pub netdev: Option<String>,
}

/// One port.
#[derive(Clone)]
pub struct PortReport {
    /// Port number.
    pub port: u32,
    /// `ibv_query_port` result.
    pub attr: sys::ibv_port_attr,
    /// Non-empty GID entries in index order.
    pub gids: Vec<GidReport>,
    /// Set when reading the GID table failed at `index` (printing stops there,
    /// as `ibv_devinfo` does).
    pub gid_error: Option<(u32, String)>,
}

/// One device.
#[derive(Clone)]
pub struct DeviceReport {
    /// Device name (hca_id).
    pub name: String,
    /// Raw `ibv_transport_type`.
    pub transport: i32,
    /// `ibv_query_device_ex` result.
    pub attr: sys::ibv_device_attr_ex,
    /// sysfs `board_id`, when present.
    pub board_id: Option<String>,
    /// Number of completion vectors.
    pub num_comp_vectors: i32,
    /// The ports asked for.
    pub ports: Vec<PortReport>,
    /// Set when querying a port failed (printing stops there).
    pub port_error: Option<(u32, String)>,
}

impl DeviceReport {
    /// The firmware version: `fw_ver` up to its NUL (empty when unset).
    pub fn fw_ver(&self) -> String {
        let fw: Vec<u8> = self
            .attr
            .orig_attr
            .fw_ver
            .iter()
            .take_while(|c| **c != 0)
            .map(|c| *c as u8)
            .collect();
        String::from_utf8_lossy(&fw).into_owned()
    }
}

/// Why a device could not be reported, with `ibv_devinfo`'s message.
#[derive(Debug)]
pub enum ReportError {
    /// `ibv_open_device` failed.
    Open(Error),
    /// `ibv_query_device_ex` failed.
    Query(Error),
    /// The port asked for does not exist.
    BadPort {
        /// The port asked for.
        port: u32,
        /// How many there are.
        count: u32,
    },
}

/// Opens `dev` and reads everything `devinfo` prints. `port`: only that
/// port; `verbose`: also read the GID tables.
pub fn gather(dev: &Device, port: Option<u32>, verbose: bool) -> Result<DeviceReport, ReportError> {
    let ctx = dev.open().map_err(|e| match e {
        e @ Error::Verb {
            verb: "ibv_query_device_ex",
            ..
        } => ReportError::Query(e),
        e => ReportError::Open(e),
    })?;
    let attr = *ctx.attributes().raw();
    let count = u32::from(attr.orig_attr.phys_port_cnt);
    if let Some(p) = port
        && p > count
    {
        return Err(ReportError::BadPort { port: p, count });
    }
    let mut ports = Vec::new();
    let mut port_error = None;
    for p in 1..=count {
        if port.is_some_and(|want| want != p) {
            continue;
        }
        match ctx.port(p as u8) {
            Ok(pa) => ports.push(port_report(&ctx, p, *pa.raw(), verbose)),
            Err(e) => {
                port_error = Some((p, e.to_string()));
                break;
            }
        }
    }
    Ok(DeviceReport {
        name: dev.name().to_owned(),
        transport: dev.transport().raw(),
        attr,
        board_id: ctx.sysfs_attribute("board_id"),
        num_comp_vectors: ctx.num_comp_vectors(),
        ports,
        port_error,
    })
}

fn port_report(ctx: &Context, port: u32, attr: sys::ibv_port_attr, verbose: bool) -> PortReport {
    let mut gids = Vec::new();
    let mut gid_error = None;
    if verbose {
        // One query for the whole table; ibv_devinfo's per-index loop shows
        // the same entries (it skips the empty ones too).
        match ctx.gid_table(port as u8) {
            Ok(table) => {
                gids = table
                    .into_iter()
                    .map(|e| GidReport {
                        index: e.index,
                        gid: e.gid,
                        gid_type: Some(e.gid_type),
                        netdev: e.netdev,
                    })
                    .collect();
            }
            Err(e) => gid_error = Some((0, e.to_string())),
        }
    }
    PortReport {
        port,
        attr,
        gids,
        gid_error,
    }
}
