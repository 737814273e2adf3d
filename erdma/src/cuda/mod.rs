//! CUDA device memory and streams (driver API through cudarc, loaded at run time).
//!
//! Everything here works on a machine without a GPU or driver in the sense that it returns
//! [`CudaError::DriverNotFound`] (or another typed error) instead of panicking, so a binary
//! built with this module starts anywhere.
//!
//! Layers, as in cudarc: `driver` resolves the driver entry points (raw, integer result
//! codes), and the types here ([`Device`], [`Stream`], [`Event`], [`DeviceBuffer`],
//! [`Graph`], [`Module`]) own driver objects and release them on drop. [`nvrtc`] compiles
//! CUDA C++ at run time for [`Module::load`].
//!
//! ```no_run
//! use erdma::cuda::{Device, DeviceBuffer, Stream};
//! # fn main() -> Result<(), erdma::cuda::CudaError> {
//! let gpu = Device::new(0)?;
//! println!("{} [{}]", gpu.name()?, gpu.pci_bus_id()?);
//! let stream = Stream::new(&gpu)?;
//! let buf = DeviceBuffer::from_host(&gpu, &[1.0f32, 2.0, 3.0], &stream)?;
//! assert_eq!(buf.to_vec(&stream)?, vec![1.0, 2.0, 3.0]);
//! # Ok(()) }
//! ```

mod device;
mod driver;
mod error;
mod graph;
mod memory;
mod module;
pub mod nvrtc;
mod stream;

pub use device::{Device, DeviceProperties, MemoryInfo, PciBusId, device_properties};
pub use driver::{device_count, driver_version, is_available};
pub use error::{CuResultCode, CudaError, Result};
pub use graph::{Graph, GraphExec};
pub use memory::{
    DeviceBuffer, DevicePtr, DeviceRepr, copy_dtod_raw, copy_dtoh_raw, copy_htod_raw, memset_raw,
};
pub use module::{Function, LaunchConfig, Module};
pub use stream::{CaptureMode, Event, Stream};

/// The cudarc driver bindings this module is built on (types such as `CUstream`).
pub use cudarc::driver::sys;
