//! Device discovery: the list of RDMA devices, or the reason there is none.

use std::ffi::CStr;
use std::fmt;
use std::path::PathBuf;
use std::sync::Arc;

use erdma_sys as sys;

use crate::context::Context;
use crate::error::{Error, Result};
use crate::ffi::{self, Ptr};

/// Why [`devices`] found no device. Each reason prints as one line that says
/// how to fix it.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum NoDevicesReason {
    /// libibverbs could not be loaded (the loader's message).
    LibraryMissing(String),
    /// `ibv_get_device_list` failed with ENOSYS: the kernel has no RDMA
    /// support (no `/sys/class/infiniband_verbs`).
    KernelWithoutRdma,
    /// The kernel has RDMA but no device is visible.
    NoDevices,
    /// `ibv_get_device_list` failed with another errno.
    ListFailed(i32),
}

impl fmt::Display for NoDevicesReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            NoDevicesReason::LibraryMissing(detail) => write!(
                f,
                "libibverbs missing: install rdma-core/ibverbs-providers (Debian/Ubuntu: apt-get install \
                 ibverbs-providers; RHEL: dnf install rdma-core) [{detail}]"
            ),
            NoDevicesReason::KernelWithoutRdma => write!(
                f,
                "kernel without RDMA: ibv_get_device_list failed with ENOSYS (no /sys/class/infiniband_verbs); \
                 load the NIC driver (modprobe erdma) or use a kernel with RDMA support; in Docker mount /sys \
                 and pass --privileged"
            ),
            NoDevicesReason::NoDevices => write!(
                f,
                "no RDMA devices: the kernel supports RDMA but no device is visible; load the NIC driver \
                 (modprobe erdma); in Docker pass --privileged or --device=/dev/infiniband"
            ),
            NoDevicesReason::ListFailed(errno) => {
                write!(f, "{}", Error::verb("ibv_get_device_list", *errno))
            }
        }
    }
}

/// The array returned by `ibv_get_device_list`, freed when the last
/// [`Device`] or [`Context`] made from it is gone (a device pointer is only
/// guaranteed valid while its list is).
#[derive(Debug)]
pub(crate) struct RawList(Ptr<*mut sys::ibv_device>);

impl Drop for RawList {
    fn drop(&mut self) {
        if let Ok(lib) = ffi::verbs() {
            // SAFETY: the pointer came from ibv_get_device_list and is freed
            // exactly once, here, after every user (each holds an Arc) is gone.
            unsafe { lib.ibv_free_device_list(self.0.0) };
        }
    }
}

/// The transport of a device (`ibv_transport_type`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
pub enum Transport {
    /// InfiniBand transport: InfiniBand and RoCE devices (eRDMA in RoCE mode).
    InfiniBand,
    /// iWARP (eRDMA in its default mode, siw): connect through RDMA CM.
    Iwarp,
    /// Cisco usNIC.
    Usnic,
    /// Cisco usNIC over UDP.
    UsnicUdp,
    /// Unspecified.
    Unspecified,
    /// A value this build does not know.
    Unknown(i32),
}

impl Transport {
    /// From the raw `ibv_transport_type`.
    pub fn from_raw(raw: i32) -> Transport {
        match raw {
            x if x == sys::IBV_TRANSPORT_IB => Transport::InfiniBand,
            x if x == sys::IBV_TRANSPORT_IWARP => Transport::Iwarp,
            x if x == sys::IBV_TRANSPORT_USNIC => Transport::Usnic,
            x if x == sys::IBV_TRANSPORT_USNIC_UDP => Transport::UsnicUdp,
            x if x == sys::IBV_TRANSPORT_UNSPECIFIED => Transport::Unspecified,
            x => Transport::Unknown(x),
        }
    }

    /// The raw `ibv_transport_type` value.
    pub fn raw(self) -> i32 {
        match self {
            Transport::InfiniBand => sys::IBV_TRANSPORT_IB,
            Transport::Iwarp => sys::IBV_TRANSPORT_IWARP,
            Transport::Usnic => sys::IBV_TRANSPORT_USNIC,
            Transport::UsnicUdp => sys::IBV_TRANSPORT_USNIC_UDP,
            Transport::Unspecified => sys::IBV_TRANSPORT_UNSPECIFIED,
            Transport::Unknown(x) => x,
        }
    }
}

impl fmt::Display for Transport {
    /// The names `ibv_devinfo` prints.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Transport::InfiniBand => "InfiniBand",
            Transport::Iwarp => "iWARP",
            Transport::Usnic => "usNIC",
            Transport::UsnicUdp => "usNIC UDP",
            Transport::Unspecified => "unspecified",
            Transport::Unknown(_) => "invalid transport",
        })
    }
}

/// A 64-bit GUID (node GUID, system image GUID), in host order.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Hash, Default, serde::Serialize, serde::Deserialize,
)]
pub struct Guid(pub u64);

impl Guid {
    /// From the big-endian value the verbs return.
    pub fn from_be(be: u64) -> Guid {
        Guid(u64::from_be(be))
    }
}

impl fmt::Display for Guid {
    /// `xxxx:xxxx:xxxx:xxxx`, as `ibv_devinfo` prints it.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let g = self.0;
        write!(
            f,
            "{:04x}:{:04x}:{:04x}:{:04x}",
            (g >> 48) & 0xffff,
            (g >> 32) & 0xffff,
            (g >> 16) & 0xffff,
            g & 0xffff
        )
    }
}

/// One RDMA device, before it is opened.
#[derive(Debug, Clone)]
pub struct Device {
    list: Arc<RawList>,
    raw: Ptr<sys::ibv_device>,
    name: String,
    transport: Transport,
    node_type: i32,
    guid: Guid,
    ibdev_path: PathBuf,
}

impl Device {
    /// The kernel name (`erdma_0`, `rxe0`, `mlx5_1`).
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The transport (InfiniBand for IB and RoCE, iWARP).
    pub fn transport(&self) -> Transport {
        self.transport
    }

    /// The raw `ibv_node_type` (1 = CA, 4 = RNIC, ...).
    pub fn node_type(&self) -> i32 {
        self.node_type
    }

    /// The node GUID.
    pub fn guid(&self) -> Guid {
        self.guid
    }

    /// The device's sysfs directory (`/sys/class/infiniband/<name>`).
    pub fn sysfs_path(&self) -> &std::path::Path {
        &self.ibdev_path
    }

    /// Opens the device.
    pub fn open(&self) -> Result<Context> {
        Context::from_device(self)
    }

    pub(crate) fn raw(&self) -> *mut sys::ibv_device {
        self.raw.0
    }

    pub(crate) fn list(&self) -> Arc<RawList> {
        self.list.clone()
    }
}

/// The RDMA devices of this host, or the reason there are none.
#[derive(Debug, Clone, Default)]
pub struct DeviceList {
    devices: Vec<Device>,
    reason: Option<NoDevicesReason>,
}

impl DeviceList {
    /// An empty list with a reason (what [`devices`] returns on a host
    /// without RDMA; useful to tools and their tests).
    pub fn empty(reason: NoDevicesReason) -> DeviceList {
        DeviceList {
            devices: Vec::new(),
            reason: Some(reason),
        }
    }

    /// Why the list is empty; `None` when it is not.
    pub fn reason(&self) -> Option<&NoDevicesReason> {
        self.reason.as_ref()
    }

    /// The devices, in the order libibverbs lists them.
    pub fn iter(&self) -> std::slice::Iter<'_, Device> {
        self.devices.iter()
    }

    /// Number of devices.
    pub fn len(&self) -> usize {
        self.devices.len()
    }

    /// Whether there is no device (see [`DeviceList::reason`]).
    pub fn is_empty(&self) -> bool {
        self.devices.is_empty()
    }

    /// The device with this name, or [`Error::NoSuchDevice`] listing the others.
    pub fn find(&self, name: &str) -> Result<&Device> {
        self.devices
            .iter()
            .find(|d| d.name == name)
            .ok_or_else(|| Error::NoSuchDevice {
                name: name.to_owned(),
                available: self.devices.iter().map(|d| d.name.clone()).collect(),
                reason: self.reason.as_ref().map(|r| r.to_string()),
            })
    }

    /// The device names.
    pub fn names(&self) -> Vec<String> {
        self.devices.iter().map(|d| d.name.clone()).collect()
    }
}

impl<'a> IntoIterator for &'a DeviceList {
    type Item = &'a Device;
    type IntoIter = std::slice::Iter<'a, Device>;
    fn into_iter(self) -> Self::IntoIter {
        self.devices.iter()
    }
}

/// Lists the RDMA devices. Never fails: on a host without RDMA (no
/// libibverbs, a kernel without RDMA, no device) the list is empty and
/// [`DeviceList::reason`] says why.
pub fn devices() -> DeviceList {
    let lib = match ffi::verbs() {
        Ok(lib) => lib,
        Err(Error::LibraryMissing { detail, .. }) => {
            return DeviceList::empty(NoDevicesReason::LibraryMissing(detail));
        }
        Err(e) => return DeviceList::empty(NoDevicesReason::LibraryMissing(e.to_string())),
    };
    let mut n: i32 = 0;
    // SAFETY: ibv_get_device_list writes the count to n and returns a
    // NULL-terminated array (or NULL with errno set).
    let raw = unsafe { lib.ibv_get_device_list(&mut n) };
    if raw.is_null() {
        let errno = std::io::Error::last_os_error().raw_os_error().unwrap_or(0);
        let reason = match errno {
            libc::ENOSYS => NoDevicesReason::KernelWithoutRdma,
            0 | libc::ENODEV | libc::ENOENT => NoDevicesReason::NoDevices,
            e => NoDevicesReason::ListFailed(e),
        };
        return DeviceList::empty(reason);
    }
    let list = Arc::new(RawList(Ptr(raw)));
    let mut devices = Vec::new();
    for i in 0..n.max(0) as usize {
        // SAFETY: the array has n valid entries.
        let dev = unsafe { *raw.add(i) };
        if dev.is_null() {
            break;
        }
        // SAFETY: dev is a valid ibv_device of the live list; the name is a
        // NUL-terminated string owned by it.
        let name = unsafe {
            let p = lib.ibv_get_device_name(dev);
            if p.is_null() {
                continue;
            }
            CStr::from_ptr(p).to_string_lossy().into_owned()
        };
        // SAFETY: dev is valid; the fields are plain values and a
        // NUL-terminated path array.
        let (transport, node_type, ibdev_path) = unsafe {
            (
                (*dev).transport_type,
                (*dev).node_type,
                CStr::from_ptr((*dev).ibdev_path.as_ptr())
                    .to_string_lossy()
                    .into_owned(),
            )
        };
        // SAFETY: dev is valid; the call reads sysfs.
        let guid = Guid::from_be(unsafe { lib.ibv_get_device_guid(dev) });
        devices.push(Device {
            list: list.clone(),
            raw: Ptr(dev),
            name,
            transport: Transport::from_raw(transport),
            node_type,
            guid,
            ibdev_path: PathBuf::from(ibdev_path),
        });
    }
    let reason = devices.is_empty().then_some(NoDevicesReason::NoDevices);
    DeviceList { devices, reason }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn guid_prints_like_ibv_devinfo() {
        assert_eq!(
            Guid::from_be(0x0200_0aff_fe63_0001u64.to_be()).to_string(),
            "0200:0aff:fe63:0001"
        );
    }

    #[test]
    fn transport_round_trips() {
        for raw in -1..6 {
            assert_eq!(Transport::from_raw(raw).raw(), raw);
        }
        assert_eq!(Transport::from_raw(1).to_string(), "iWARP");
        assert_eq!(Transport::from_raw(0).to_string(), "InfiniBand");
    }

    #[test]
    fn reasons_are_one_line() {
        for r in [
            NoDevicesReason::LibraryMissing("x".into()),
            NoDevicesReason::KernelWithoutRdma,
            NoDevicesReason::NoDevices,
            NoDevicesReason::ListFailed(libc::EPERM),
        ] {
            assert!(!r.to_string().contains('\n'));
        }
    }

    #[test]
    fn find_on_empty_list_gives_reason() {
        let l = DeviceList::empty(NoDevicesReason::KernelWithoutRdma);
        let e = l.find("rxe0").unwrap_err().to_string();
        assert!(
            e.starts_with("no RDMA device named 'rxe0' (kernel without RDMA"),
            "{e}"
        );
    }
}
