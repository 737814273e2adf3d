//! An opened device: attributes, ports, GID tables, and the factory of PDs and CQs.

use std::any::Any;
use std::ffi::CStr;
use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock};

use erdma_sys as sys;

use crate::cq::{CompletionQueue, CqOptions};
use crate::device::{Device, Guid, RawList, Transport, devices};
use crate::error::{Error, Result};
use crate::ffi::{self, Ptr};
use crate::gid::{Gid, GidEntry, GidType, nccl_gid_index};
use crate::pd::ProtectionDomain;
use crate::port::{LinkLayer, PortAttributes, c_enum};
use crate::sysfs;

/// PCI vendor id of Alibaba Cloud eRDMA NICs.
pub const ERDMA_VENDOR_ID: u32 = 0x1ded;
/// PCI device (vendor part) id of eRDMA NICs (4223).
pub const ERDMA_VENDOR_PART_ID: u32 = 0x107f;

c_enum! {
    /// Atomic operation support (`ibv_atomic_cap`).
    AtomicCap: u32 {
        /// No atomics (siw, eRDMA without the capability).
        None = sys::IBV_ATOMIC_NONE => "ATOMIC_NONE",
        /// Atomic within this HCA.
        Hca = sys::IBV_ATOMIC_HCA => "ATOMIC_HCA",
        /// Atomic with respect to every agent.
        Glob = sys::IBV_ATOMIC_GLOB => "ATOMIC_GLOB",
    } unknown "invalid atomic capability"
}

/// The kind of RDMA a port speaks, from the device transport and the port's
/// link layer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
pub enum Protocol {
    /// InfiniBand (connect with LIDs or GIDs through modify_qp).
    InfiniBand,
    /// RoCE (connect with GIDs through modify_qp): eRDMA's RoCE mode, rxe, mlx5 on Ethernet.
    Roce,
    /// iWARP (connect through RDMA CM only): eRDMA's default mode, siw.
    Iwarp,
    /// Something else (usNIC, unspecified).
    Other,
}

/// Device attributes (`ibv_device_attr_ex`, from `ibv_query_device_ex` or,
/// for providers without it, `ibv_query_device` with the extended part zero).
#[derive(Clone, Copy)]
pub struct DeviceAttributes {
    raw: sys::ibv_device_attr_ex,
}

impl fmt::Debug for DeviceAttributes {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("DeviceAttributes")
            .field("fw_ver", &self.fw_ver())
            .field("node_guid", &self.node_guid())
            .field("vendor_id", &format_args!("{:#06x}", self.vendor_id()))
            .field("vendor_part_id", &self.vendor_part_id())
            .field("phys_port_cnt", &self.phys_port_cnt())
            .field("max_qp", &self.max_qp())
            .field("max_sge", &self.max_sge())
            .field("atomic_cap", &self.atomic_cap())
            .finish_non_exhaustive()
    }
}

impl DeviceAttributes {
    fn orig(&self) -> &sys::ibv_device_attr {
        &self.raw.orig_attr
    }

    /// Firmware version (may be empty).
    pub fn fw_ver(&self) -> String {
        let b = &self.orig().fw_ver;
        let bytes: Vec<u8> = b
            .iter()
            .take_while(|c| **c != 0)
            .map(|c| *c as u8)
            .collect();
        String::from_utf8_lossy(&bytes).into_owned()
    }
    /// Node GUID.
    pub fn node_guid(&self) -> Guid {
        Guid::from_be(self.orig().node_guid)
    }
    /// System image GUID.
    pub fn sys_image_guid(&self) -> Guid {
        Guid::from_be(self.orig().sys_image_guid)
    }
    /// PCI vendor id (0x1ded for eRDMA).
    pub fn vendor_id(&self) -> u32 {
        self.orig().vendor_id
    }
    /// Vendor part id (0x107f = 4223 for eRDMA).
    pub fn vendor_part_id(&self) -> u32 {
        self.orig().vendor_part_id
    }
    /// Hardware version.
    pub fn hw_ver(&self) -> u32 {
        self.orig().hw_ver
    }
    /// Number of ports.
    pub fn phys_port_cnt(&self) -> u8 {
        self.orig().phys_port_cnt
    }
    /// Largest memory region.
    pub fn max_mr_size(&self) -> u64 {
        self.orig().max_mr_size
    }
    /// Maximum queue pairs.
    pub fn max_qp(&self) -> u32 {
        self.orig().max_qp.max(0) as u32
    }
    /// Maximum work requests per queue.
    pub fn max_qp_wr(&self) -> u32 {
        self.orig().max_qp_wr.max(0) as u32
    }
    /// Maximum completion queues.
    pub fn max_cq(&self) -> u32 {
        self.orig().max_cq.max(0) as u32
    }
    /// Maximum entries per completion queue.
    pub fn max_cqe(&self) -> u32 {
        self.orig().max_cqe.max(0) as u32
    }
    /// Maximum memory regions.
    pub fn max_mr(&self) -> u32 {
        self.orig().max_mr.max(0) as u32
    }
    /// Maximum protection domains.
    pub fn max_pd(&self) -> u32 {
        self.orig().max_pd.max(0) as u32
    }
    /// Maximum scatter/gather entries per send or receive request.
    pub fn max_sge(&self) -> u32 {
        self.orig().max_sge.max(0) as u32
    }
    /// Maximum scatter entries of an RDMA READ (1 on siw and eRDMA).
    pub fn max_sge_rd(&self) -> u32 {
        self.orig().max_sge_rd.max(0) as u32
    }
    /// Outstanding RDMA READ/atomic requests a QP can answer.
    pub fn max_qp_rd_atom(&self) -> u32 {
        self.orig().max_qp_rd_atom.max(0) as u32
    }
    /// Outstanding RDMA READ/atomic requests a QP can issue.
    pub fn max_qp_init_rd_atom(&self) -> u32 {
        self.orig().max_qp_init_rd_atom.max(0) as u32
    }
    /// Atomic operation support.
    pub fn atomic_cap(&self) -> AtomicCap {
        AtomicCap::from_raw(self.orig().atomic_cap)
    }
    /// Whether compare-and-swap and fetch-and-add work.
    pub fn supports_atomics(&self) -> bool {
        !matches!(self.atomic_cap(), AtomicCap::None | AtomicCap::Unknown(_))
    }
    /// Device capability flags (`IBV_DEVICE_*`).
    pub fn device_cap_flags(&self) -> u32 {
        self.orig().device_cap_flags
    }
    /// Whether this is an Alibaba Cloud eRDMA device (vendor 0x1ded, part 0x107f).
    pub fn is_erdma(&self) -> bool {
        self.vendor_id() == ERDMA_VENDOR_ID && self.vendor_part_id() == ERDMA_VENDOR_PART_ID
    }
    /// All attributes, including the extended ones.
    pub fn raw(&self) -> &sys::ibv_device_attr_ex {
        &self.raw
    }
}

/// What keeps a context's `ibv_context` valid.
enum Owner {
    /// Opened by us from a device list (kept alive: device pointers are only
    /// guaranteed while their list is); closed on drop.
    Opened(#[allow(dead_code)] Arc<RawList>),
    /// Borrowed from librdmacm, which owns it while any CM id on the device
    /// lives; the value keeps such an id alive.
    Borrowed(#[allow(dead_code)] Arc<dyn Any + Send + Sync>),
}

pub(crate) struct ContextInner {
    raw: Ptr<sys::ibv_context>,
    owner: Owner,
    name: String,
    transport: Transport,
    sysfs: PathBuf,
    attrs: DeviceAttributes,
    max_inline: OnceLock<Result<u32>>,
}

impl Drop for ContextInner {
    fn drop(&mut self) {
        if let (Owner::Opened(_), Ok(lib)) = (&self.owner, ffi::verbs()) {
            // SAFETY: we opened the context and every object created on it
            // holds an Arc to this inner value, so all are gone by now.
            unsafe { lib.ibv_close_device(self.raw.0) };
        }
    }
}

/// An opened RDMA device. Cheap to clone (shared); everything created from
/// it keeps it open.
#[derive(Clone)]
pub struct Context {
    pub(crate) inner: Arc<ContextInner>,
}

impl fmt::Debug for Context {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Context")
            .field("name", &self.inner.name)
            .finish()
    }
}

fn query_device(raw: *mut sys::ibv_context) -> Result<DeviceAttributes> {
    let mut attr = sys::ibv_device_attr_ex::default();
    // SAFETY: raw is a live context; attr is a writable ibv_device_attr_ex.
    let rc = unsafe { sys::inline::ibv_query_device_ex(raw, std::ptr::null(), &mut attr) };
    Error::check("ibv_query_device_ex", rc)?;
    Ok(DeviceAttributes { raw: attr })
}

impl Context {
    /// Opens the device with this name (`erdma_0`, `rxe0`, ...).
    /// [`Error::NoSuchDevice`] lists the devices there are, or why there are none.
    pub fn open(name: &str) -> Result<Context> {
        devices().find(name)?.open()
    }

    pub(crate) fn from_device(dev: &Device) -> Result<Context> {
        let lib = ffi::verbs()?;
        // SAFETY: dev.raw() is a device of a live list (dev holds it).
        let raw = unsafe { lib.ibv_open_device(dev.raw()) };
        if raw.is_null() {
            return Err(Error::last_os("ibv_open_device"));
        }
        let attrs = match query_device(raw) {
            Ok(a) => a,
            Err(e) => {
                // SAFETY: raw was just opened and nothing else uses it.
                unsafe { lib.ibv_close_device(raw) };
                return Err(e);
            }
        };
        Ok(Context {
            inner: Arc::new(ContextInner {
                raw: Ptr(raw),
                owner: Owner::Opened(dev.list()),
                name: dev.name().to_owned(),
                transport: dev.transport(),
                sysfs: dev.sysfs_path().to_owned(),
                attrs,
                max_inline: OnceLock::new(),
            }),
        })
    }

    /// Wraps a context owned by librdmacm; `keep` keeps it valid.
    pub(crate) fn borrowed(
        raw: *mut sys::ibv_context,
        keep: Arc<dyn Any + Send + Sync>,
    ) -> Result<Context> {
        let lib = ffi::verbs()?;
        // SAFETY: raw is librdmacm's live context of a CM id that `keep` holds.
        let (dev, transport) = unsafe {
            (
                (*raw).device,
                (*raw).device.as_ref().map(|d| d.transport_type),
            )
        };
        if dev.is_null() {
            return Err(Error::invalid("rdma_cm context", "the CM id has no device"));
        }
        // SAFETY: dev is the context's live device.
        let (name, sysfs) = unsafe {
            let n = lib.ibv_get_device_name(dev);
            let name = if n.is_null() {
                String::new()
            } else {
                CStr::from_ptr(n).to_string_lossy().into_owned()
            };
            (
                name,
                CStr::from_ptr((*dev).ibdev_path.as_ptr())
                    .to_string_lossy()
                    .into_owned(),
            )
        };
        let attrs = query_device(raw)?;
        Ok(Context {
            inner: Arc::new(ContextInner {
                raw: Ptr(raw),
                owner: Owner::Borrowed(keep),
                name,
                transport: Transport::from_raw(transport.unwrap_or(-1)),
                sysfs: PathBuf::from(sysfs),
                attrs,
                max_inline: OnceLock::new(),
            }),
        })
    }

    /// The device name.
    pub fn name(&self) -> &str {
        &self.inner.name
    }

    /// The device transport (InfiniBand for IB and RoCE, iWARP).
    pub fn transport(&self) -> Transport {
        self.inner.transport
    }

    /// The device's sysfs directory.
    pub fn sysfs_path(&self) -> &Path {
        &self.inner.sysfs
    }

    /// Device attributes (queried when the device was opened).
    pub fn attributes(&self) -> &DeviceAttributes {
        &self.inner.attrs
    }

    /// Whether this is an Alibaba Cloud eRDMA device.
    pub fn is_erdma(&self) -> bool {
        self.inner.attrs.is_erdma()
    }

    /// Number of completion vectors.
    pub fn num_comp_vectors(&self) -> i32 {
        // SAFETY: the context is live while self is.
        unsafe { (*self.inner.raw.0).num_comp_vectors }
    }

    /// The raw `ibv_context`, valid while this `Context` (or a clone) lives.
    pub fn as_raw(&self) -> *mut sys::ibv_context {
        self.inner.raw.0
    }

    fn check_port(&self, port: u8) -> Result<()> {
        let count = self.inner.attrs.phys_port_cnt();
        if port == 0 || port > count {
            return Err(Error::BadPort {
                device: self.inner.name.clone(),
                port: port.into(),
                count: count.into(),
            });
        }
        Ok(())
    }

    /// Attributes of port `port` (numbered from 1).
    pub fn port(&self, port: u8) -> Result<PortAttributes> {
        self.check_port(port)?;
        let mut attr = sys::ibv_port_attr::default();
        // SAFETY: live context, writable attr (the full current struct).
        let rc = unsafe { sys::inline::___ibv_query_port(self.inner.raw.0, port, &mut attr) };
        Error::check("ibv_query_port", rc)?;
        Ok(PortAttributes::new(port, attr))
    }

    /// Attributes of every port.
    pub fn ports(&self) -> Result<Vec<PortAttributes>> {
        (1..=self.inner.attrs.phys_port_cnt())
            .map(|p| self.port(p))
            .collect()
    }

    /// What kind of RDMA port `port` speaks (decides how QPs connect).
    pub fn protocol(&self, port: u8) -> Result<Protocol> {
        let ll = self.port(port)?.link_layer();
        Ok(match (self.inner.transport, ll) {
            (Transport::Iwarp, _) => Protocol::Iwarp,
            (Transport::InfiniBand, LinkLayer::Ethernet) => Protocol::Roce,
            (Transport::InfiniBand, _) => Protocol::InfiniBand,
            _ => Protocol::Other,
        })
    }

    /// GID table entry `index` of `port`; `None` for an empty entry.
    /// [`Error::BadGidIndex`] when the index is outside the table.
    pub fn gid(&self, port: u8, index: u32) -> Result<Option<GidEntry>> {
        let pa = self.port(port)?;
        if index >= pa.gid_tbl_len() {
            return Err(Error::BadGidIndex {
                device: self.inner.name.clone(),
                port,
                index,
                problem: format!("the table has {} entries", pa.gid_tbl_len()),
            });
        }
        self.gid_entry(&pa, index)
    }

    fn gid_entry(&self, pa: &PortAttributes, index: u32) -> Result<Option<GidEntry>> {
        let port = pa.port();
        let mut e = sys::ibv_gid_entry::default();
        // SAFETY: live context; e is a writable ibv_gid_entry.
        let rc = unsafe {
            sys::inline::ibv_query_gid_ex(self.inner.raw.0, port.into(), index, &mut e, 0)
        };
        let (gid, raw_type, ifindex) = match rc {
            // SAFETY: every bit pattern of the union is a valid raw GID.
            0 => (Gid(unsafe { e.gid.raw }), Some(e.gid_type), e.ndev_ifindex),
            libc::ENODATA => return Ok(None),
            libc::EOPNOTSUPP | libc::ENOSYS => {
                // Old rdma-core: the GID, and the type from sysfs.
                let lib = ffi::verbs()?;
                let mut g = sys::ibv_gid::default();
                // SAFETY: live context; g is a writable ibv_gid.
                let rc = unsafe { lib.ibv_query_gid(self.inner.raw.0, port, index as i32, &mut g) };
                Error::check("ibv_query_gid", rc)?;
                // SAFETY: every bit pattern is a valid raw GID.
                (Gid(unsafe { g.raw }), None, 0)
            }
            err => return Err(Error::verb("ibv_query_gid_ex", err)),
        };
        if gid.is_zero() {
            return Ok(None);
        }
        Ok(Some(self.make_entry(pa, index, gid, raw_type, ifindex)))
    }

    /// A GID entry with its type and netdev resolved.
    fn make_entry(
        &self,
        pa: &PortAttributes,
        index: u32,
        gid: Gid,
        raw_type: Option<u32>,
        ifindex: u32,
    ) -> GidEntry {
        let port = pa.port();
        let gid_type = if self.inner.transport == Transport::Iwarp {
            GidType::Iwarp
        } else {
            match raw_type {
                Some(t) if t == sys::IBV_GID_TYPE_IB => GidType::Ib,
                Some(t) if t == sys::IBV_GID_TYPE_ROCE_V1 => GidType::RoceV1,
                Some(t) if t == sys::IBV_GID_TYPE_ROCE_V2 => GidType::RoceV2,
                Some(t) => GidType::Unknown(t),
                None => match sysfs::gid_roce_version(&self.inner.sysfs, port, index) {
                    Some(2) => GidType::RoceV2,
                    Some(_) if pa.link_layer() == LinkLayer::Ethernet => GidType::RoceV1,
                    _ => GidType::Ib,
                },
            }
        };
        let netdev = sysfs::gid_netdev(&self.inner.sysfs, port, index)
            .or_else(|| sysfs::ifindex_name(ifindex))
            .or_else(|| {
                (gid_type == GidType::Iwarp)
                    .then(|| sysfs::netdev_by_mac(&gid.0[..6]))
                    .flatten()
            });
        GidEntry {
            port,
            index,
            gid,
            gid_type,
            netdev,
        }
    }

    /// The non-empty entries of `port`'s GID table (one `ibv_query_gid_table`
    /// call where the library and kernel have it).
    pub fn gid_table(&self, port: u8) -> Result<Vec<GidEntry>> {
        let pa = self.port(port)?;
        let total: usize = self
            .ports()?
            .iter()
            .map(|p| p.gid_tbl_len() as usize)
            .sum::<usize>()
            .max(1);
        let mut raw = vec![sys::ibv_gid_entry::default(); total];
        // SAFETY: live context; raw has room for `total` entries.
        let n = unsafe {
            sys::inline::ibv_query_gid_table(self.inner.raw.0, raw.as_mut_ptr(), total, 0)
        };
        if n >= 0 {
            let mut out: Vec<GidEntry> = raw[..n as usize]
                .iter()
                .filter(|e| e.port_num == u32::from(port) && e.gid_index < pa.gid_tbl_len())
                .map(|e| {
                    // SAFETY: every bit pattern of the union is a valid raw GID.
                    let gid = Gid(unsafe { e.gid.raw });
                    self.make_entry(&pa, e.gid_index, gid, Some(e.gid_type), e.ndev_ifindex)
                })
                .filter(|e| !e.gid.is_zero())
                .collect();
            out.sort_by_key(|e| e.index);
            return Ok(out);
        }
        let mut out = Vec::new();
        for i in 0..pa.gid_tbl_len() {
            if let Some(e) = self.gid_entry(&pa, i)? {
                out.push(e);
            }
        }
        Ok(out)
    }

    /// The GID to connect with: entry `index` when given (an error when it is
    /// outside the table or empty), else the one NCCL would pick (the
    /// IPv4-mapped RoCE v2 entry on Ethernet, see [`nccl_gid_index`]).
    pub fn select_gid(&self, port: u8, index: Option<u32>) -> Result<GidEntry> {
        let pa = self.port(port)?;
        let pick = match index {
            Some(i) => i,
            None => {
                let entries = self.gid_table(port)?;
                let len = entries
                    .iter()
                    .map(|e| e.index as usize + 1)
                    .max()
                    .unwrap_or(0);
                let mut table = vec![(Gid::default(), None); len];
                for e in &entries {
                    let ver = match e.gid_type {
                        GidType::RoceV2 => Some(2),
                        GidType::RoceV1 => Some(1),
                        _ => None,
                    };
                    table[e.index as usize] = (e.gid, ver);
                }
                let infiniband = matches!(
                    pa.link_layer(),
                    LinkLayer::InfiniBand | LinkLayer::Unspecified
                ) && self.inner.transport == Transport::InfiniBand;
                nccl_gid_index(infiniband, &table)
            }
        };
        if pick >= pa.gid_tbl_len() {
            return Err(Error::BadGidIndex {
                device: self.inner.name.clone(),
                port,
                index: pick,
                problem: format!("the table has {} entries", pa.gid_tbl_len()),
            });
        }
        self.gid_entry(&pa, pick)?
            .ok_or_else(|| Error::BadGidIndex {
                device: self.inner.name.clone(),
                port,
                index: pick,
                problem: if index.is_some() {
                    "the entry is empty".into()
                } else {
                    "the port has no usable GID (is an IP address configured on its interface?)"
                        .into()
                },
            })
    }

    /// The network interface port `port` sends through (RoCE, iWARP and eRDMA
    /// ports each sit on one): from sysfs (the PCI function's `net/` entry,
    /// rxe's `parent`), else the interface of the port's GID entries (iWARP
    /// GIDs embed its MAC). `None` on InfiniBand ports and when nothing tells,
    /// e.g. a port whose interface is down and has no GID left.
    pub fn netdev(&self, port: u8) -> Result<Option<String>> {
        self.check_port(port)?;
        if let Some(n) = sysfs::port_netdev(&self.inner.sysfs, port) {
            return Ok(Some(n));
        }
        Ok(self.gid_table(port)?.into_iter().find_map(|e| e.netdev))
    }

    /// Allocates a protection domain.
    pub fn alloc_pd(&self) -> Result<ProtectionDomain> {
        ProtectionDomain::new(self)
    }

    /// Creates a completion queue with at least `entries` entries, polled
    /// only (no completion channel).
    pub fn create_cq(&self, entries: u32) -> Result<CompletionQueue> {
        CompletionQueue::new(self, entries, &CqOptions::default())
    }

    /// Creates a completion queue with options (e.g. a completion channel
    /// for [`CompletionQueue::wait`]).
    pub fn create_cq_with(&self, entries: u32, options: &CqOptions) -> Result<CompletionQueue> {
        CompletionQueue::new(self, entries, options)
    }

    /// Whether the library and kernel support dma-buf registration
    /// (`ibv_reg_dmabuf_mr`). A provider may still refuse it with EOPNOTSUPP
    /// (eRDMA does: register device memory with `ibv_reg_mr` and a
    /// peer-memory module instead).
    pub fn supports_dmabuf(&self) -> bool {
        ffi::verbs()
            .map(|l| l.ibv_reg_dmabuf_mr.is_ok())
            .unwrap_or(false)
    }

    /// The largest inline data a send of an RC QP on this device takes,
    /// probed once by creating throw-away QPs (the verbs do not report it).
    pub fn max_inline_data(&self) -> Result<u32> {
        self.inner
            .max_inline
            .get_or_init(|| crate::qp::probe_max_inline(self))
            .clone()
    }

    /// A sysfs attribute of the device (`board_id`, `fw_ver`, ...), without
    /// its trailing newline; `None` when absent or empty.
    pub fn sysfs_attribute(&self, name: &str) -> Option<String> {
        if name.contains("..") {
            return None;
        }
        sysfs::read_attr(&self.inner.sysfs.join(name))
    }

    /// The port's counters (`ports/N/hw_counters/*` and `ports/N/counters/*`
    /// in sysfs; names as the driver exports them). Empty when the driver
    /// exports none.
    pub fn port_counters(&self, port: u8) -> Result<Vec<(String, u64)>> {
        self.check_port(port)?;
        Ok(sysfs::port_counters(&self.inner.sysfs, port))
    }
}
