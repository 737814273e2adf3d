//! Without an NVIDIA driver (CI, this build machine) every entry point of `erdma::cuda`
//! returns a typed error and nothing panics. Where a driver exists, the same calls are
//! checked against it instead.

#![cfg(feature = "cuda")]

use erdma::cuda::{
    CudaError, Device, Stream, device_count, device_properties, driver_version, is_available,
};

/// Whether the driver library can be loaded at all, decided independently of erdma.
fn driver_library_loadable() -> bool {
    ["libcuda.so.1", "libcuda.so"].iter().any(|name| {
        // SAFETY: loading the NVIDIA driver library runs only its initializers.
        unsafe { libloading::Library::new(*name) }.is_ok()
    })
}

#[test]
fn missing_driver_is_a_typed_one_line_error() {
    if driver_library_loadable() {
        // A driver is installed: an absurd ordinal must still be a typed error.
        match Device::new(1_000_000) {
            Err(CudaError::NoSuchDevice { ordinal, .. }) => assert_eq!(ordinal, 1_000_000),
            Err(CudaError::Driver { call, .. }) => assert!(call.starts_with("cu")),
            other => panic!("expected an error for GPU 1000000, got {other:?}"),
        }
        match device_properties(1_000_000) {
            Err(CudaError::NoSuchDevice { ordinal, .. }) => assert_eq!(ordinal, 1_000_000),
            Err(CudaError::Driver { call, .. }) => assert!(call.starts_with("cu")),
            other => panic!("expected an error for GPU 1000000, got {other:?}"),
        }
        return;
    }
    assert!(!is_available());
    let e = Device::new(0).unwrap_err();
    assert_eq!(e, CudaError::DriverNotFound);
    assert_eq!(
        e.to_string(),
        "libcuda.so.1 not found: no NVIDIA driver in this container; run with --gpus all / install the driver"
    );
    assert_eq!(e.exit_status(), 2);
    // The failure is remembered, not retried into a panic.
    assert_eq!(device_count().unwrap_err(), CudaError::DriverNotFound);
    assert_eq!(driver_version().unwrap_err(), CudaError::DriverNotFound);
    assert_eq!(Device::new(7).unwrap_err(), CudaError::DriverNotFound);
    assert_eq!(device_properties(0).unwrap_err(), CudaError::DriverNotFound);
}

#[test]
fn error_checks_happen_before_the_driver_when_possible() {
    // Stream creation needs a Device, so without a driver it cannot even be attempted:
    // the type system keeps every driver call behind a successfully opened Device.
    if let Ok(gpu) = Device::new(0) {
        let s = Stream::new(&gpu).expect("stream on GPU 0");
        assert!(s.query().expect("query"));
    } else {
        assert!(!is_available() || device_count().map(|n| n == 0).unwrap_or(true));
    }
}
