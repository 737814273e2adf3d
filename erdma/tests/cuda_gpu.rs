//! `erdma::cuda` on a real GPU. Ignored by default; scripts/gpu/check-nccl-layer.sh runs
//! them on the GPU machine with `--ignored`.

#![cfg(feature = "cuda")]

use std::ffi::c_void;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use erdma::cuda::{
    CaptureMode, CudaError, Device, DeviceBuffer, Event, Stream, copy_dtoh_raw, copy_htod_raw,
    device_count, device_properties, driver_version, memset_raw,
};

fn gpu0() -> Device {
    Device::new(0).unwrap_or_else(|e| panic!("GPU 0: {e}"))
}

#[test]
#[ignore = "needs an NVIDIA GPU: scripts/gpu/check-nccl-layer.sh runs it"]
fn device_facts() {
    let n = device_count().unwrap();
    assert!(n >= 1);
    let v = driver_version().unwrap();
    assert!(v >= 12000, "driver supports CUDA {v}");
    let gpu = gpu0();
    let name = gpu.name().unwrap();
    assert!(!name.is_empty());
    let pci = gpu.pci_bus_id().unwrap();
    let mem = gpu.memory_info().unwrap();
    assert!(mem.total > 0 && mem.free <= mem.total);
    assert_eq!(gpu.total_memory().unwrap(), mem.total);
    let cc = gpu.compute_capability();
    assert!(cc >= (7, 0), "{cc:?}");
    // The context-free query tells the same.
    let p = device_properties(0).unwrap();
    assert_eq!((p.ordinal, &p.name, p.pci_bus_id), (0, &name, pci));
    assert_eq!((p.compute_capability, p.total_memory), (cc, mem.total));
    println!(
        "GPUs {n}, driver CUDA {v}, GPU 0 {name} [{pci}] cc {}.{} memory {} MiB total {} MiB free",
        cc.0,
        cc.1,
        mem.total >> 20,
        mem.free >> 20
    );
    assert!(matches!(
        Device::new(n),
        Err(CudaError::NoSuchDevice { ordinal, count }) if ordinal == n && count == n
    ));
}

#[test]
#[ignore = "needs an NVIDIA GPU: scripts/gpu/check-nccl-layer.sh runs it"]
fn buffers_copy_fill_and_offsets() {
    let gpu = gpu0();
    let s = Stream::new(&gpu).unwrap();
    let host: Vec<u32> = (0..4096).collect();
    let a = DeviceBuffer::from_host(&gpu, &host, &s).unwrap();
    assert_eq!(a.to_vec(&s).unwrap(), host);
    assert_eq!(a.byte_len(), 4096 * 4);

    let mut b = DeviceBuffer::<u32>::zeroed(&gpu, 4096, &s).unwrap();
    assert!(b.to_vec(&s).unwrap().iter().all(|&v| v == 0));
    b.copy_from_device(&a, &s).unwrap();
    b.fill_byte_range(16..32, 0xff, &s).unwrap();
    let got = b.to_vec(&s).unwrap();
    assert_eq!(&got[..4], &host[..4]);
    assert!(got[4..8].iter().all(|&v| v == u32::MAX));
    assert_eq!(&got[8..], &host[8..]);

    // Raw access at byte offsets, as a harness does.
    let base = b.device_ptr();
    let p = b.ptr_at(400).unwrap();
    assert_eq!(p, base.byte_add(400));
    // SAFETY: 400..408 lies inside b, which outlives the synchronous calls.
    unsafe {
        copy_htod_raw(p, &[1, 2, 3, 4, 5, 6, 7, 8], &s).unwrap();
        memset_raw(p.byte_add(4), 9, 2, &s).unwrap();
        let mut out = [0u8; 8];
        copy_dtoh_raw(&mut out, p, &s).unwrap();
        assert_eq!(out, [1, 2, 3, 4, 9, 9, 7, 8]);
    }

    // Checked misuse is a typed error.
    assert!(matches!(
        b.ptr_at(4096 * 4 + 1),
        Err(CudaError::InvalidArgument { .. })
    ));
    assert!(b.fill_byte_range(0..4096 * 4 + 1, 0, &s).is_err());
    assert!(b.copy_from_host(&vec![0u32; 4097], &s).is_err());
    let empty = DeviceBuffer::<f64>::alloc(&gpu, 0).unwrap();
    assert!(empty.is_empty());
    assert!(empty.to_vec(&s).unwrap().is_empty());
    // A huge allocation fails with the driver's out-of-memory error, not a panic.
    match DeviceBuffer::<u8>::alloc(&gpu, 1 << 50) {
        Err(CudaError::Driver { code: 2, .. }) => {}
        other => panic!("expected CUDA_ERROR_OUT_OF_MEMORY, got {other:?}"),
    }
}

#[test]
#[ignore = "needs an NVIDIA GPU: scripts/gpu/check-nccl-layer.sh runs it"]
fn events_time_work_and_order_streams() {
    let gpu = gpu0();
    let s1 = Stream::new(&gpu).unwrap();
    let s2 = Stream::new(&gpu).unwrap();
    let mut buf = DeviceBuffer::<u8>::alloc(&gpu, 256 << 20).unwrap();
    let start = Event::new(&gpu, true, false).unwrap();
    let end = Event::new(&gpu, true, false).unwrap();
    start.record(&s1).unwrap();
    buf.fill_bytes(7, &s1).unwrap();
    end.record(&s1).unwrap();
    s2.wait_event(&end).unwrap();
    let mut small = DeviceBuffer::<u8>::alloc(&gpu, 4).unwrap();
    // Ordered after the fill through the event: the copy sees 7s.
    // SAFETY: both ranges lie in live buffers; s2 waits for the fill.
    unsafe {
        erdma::cuda::copy_dtod_raw(small.device_ptr(), buf.ptr_at(1000).unwrap(), 4, &s2).unwrap()
    };
    assert_eq!(small.to_vec(&s2).unwrap(), [7, 7, 7, 7]);
    end.synchronize().unwrap();
    assert!(end.query().unwrap());
    let ms = start.elapsed_ms(&end).unwrap();
    assert!(ms > 0.0 && ms < 1000.0, "{ms}");
    println!(
        "memset of 256 MiB: {ms:.3} ms ({:.0} GB/s)",
        (256 << 20) as f64 / 1e6 / ms as f64
    );
    small.fill_bytes(0, &s2).unwrap();
    s2.synchronize().unwrap();
    assert!(s1.query().unwrap() && s2.query().unwrap());
    // The NULL stream works too.
    let null = Stream::null(&gpu);
    assert!(null.is_null());
    small.fill_bytes(3, &null).unwrap();
    assert_eq!(small.to_vec(&null).unwrap(), [3, 3, 3, 3]);
}

static RELEASE: AtomicBool = AtomicBool::new(false);

unsafe extern "C" fn block_until_released(_: *mut c_void) {
    while !RELEASE.load(Ordering::Acquire) {
        std::thread::sleep(Duration::from_millis(1));
    }
}

#[test]
#[ignore = "needs an NVIDIA GPU: scripts/gpu/check-nccl-layer.sh runs it"]
fn stream_query_sees_unfinished_work() {
    let gpu = gpu0();
    let s = Stream::new(&gpu).unwrap();
    // SAFETY: the callback uses only a static and no CUDA.
    unsafe {
        s.launch_host_func(block_until_released, std::ptr::null_mut())
            .unwrap()
    };
    let t = Instant::now();
    while t.elapsed() < Duration::from_millis(200) {
        assert!(!s.query().unwrap(), "stream finished while blocked");
        std::thread::sleep(Duration::from_millis(20));
    }
    RELEASE.store(true, Ordering::Release);
    s.synchronize().unwrap();
    assert!(s.query().unwrap());
}

#[test]
#[ignore = "needs an NVIDIA GPU: scripts/gpu/check-nccl-layer.sh runs it"]
fn graph_capture_and_replay() {
    let gpu = gpu0();
    let s = Stream::new(&gpu).unwrap();
    let src = DeviceBuffer::from_host(&gpu, &[5u8; 64], &s).unwrap();
    let mut dst = DeviceBuffer::<u8>::zeroed(&gpu, 64, &s).unwrap();
    s.begin_capture(CaptureMode::Global).unwrap();
    assert!(s.is_capturing().unwrap());
    dst.copy_from_device(&src, &s).unwrap();
    dst.fill_byte_range(0..8, 1, &s).unwrap();
    let graph = s.end_capture().unwrap();
    assert!(!s.is_capturing().unwrap());
    // Captured, not run.
    assert!(dst.to_vec(&s).unwrap().iter().all(|&v| v == 0));
    let exec = graph.instantiate().unwrap();
    exec.upload(&s).unwrap();
    for _ in 0..5 {
        // SAFETY: src and dst outlive the replays (dropped after synchronize).
        unsafe { exec.launch(&s).unwrap() };
    }
    s.synchronize().unwrap();
    let got = dst.to_vec(&s).unwrap();
    assert_eq!(&got[..8], &[1; 8]);
    assert_eq!(&got[8..], &[5; 56]);
    // The NULL stream cannot be captured: a typed driver error.
    let null = Stream::null(&gpu);
    assert!(matches!(
        null.begin_capture(CaptureMode::Global),
        Err(CudaError::Driver { .. })
    ));
}

#[test]
#[ignore = "needs an NVIDIA GPU: scripts/gpu/check-nccl-layer.sh runs it"]
fn devices_and_streams_work_from_other_threads() {
    let gpu = gpu0();
    let s = Stream::new(&gpu).unwrap();
    let handles: Vec<_> = (0..4u8)
        .map(|i| {
            let gpu = gpu.clone();
            std::thread::spawn(move || {
                let s = Stream::new(&gpu).unwrap();
                let b = DeviceBuffer::from_host(&gpu, &[i; 1000], &s).unwrap();
                b.to_vec(&s).unwrap().iter().all(|&v| v == i)
            })
        })
        .collect();
    for h in handles {
        assert!(h.join().unwrap());
    }
    s.synchronize().unwrap();
}

/// GPU memory exported as a dma-buf (what `ProtectionDomain::register_gpu`
/// hands to `ibv_reg_dmabuf_mr` on NICs that have it): a real descriptor
/// whose size covers the buffer, for an aligned and an unaligned buffer.
#[test]
#[ignore = "needs an NVIDIA GPU: scripts/gpu/check-nccl-layer.sh runs it"]
fn dmabuf_export() {
    use std::os::fd::AsRawFd;
    let gpu = gpu0();
    // CU_DEVICE_ATTRIBUTE_DMA_BUF_SUPPORTED = 124.
    let supported = gpu.attribute(124).unwrap_or(0);
    let big = DeviceBuffer::<u8>::alloc(&gpu, 8 << 20).unwrap();
    let small = DeviceBuffer::<u8>::alloc(&gpu, 1000).unwrap();
    let mid = DeviceBuffer::<u8>::alloc(&gpu, 3 << 16).unwrap();
    // What the refusal's message advises (after small allocations).
    let two = DeviceBuffer::<u8>::alloc(&gpu, 2 << 20).unwrap();
    let bufs = [
        ("8 MiB", &big),
        ("1000 B", &small),
        ("192 KiB", &mid),
        ("2 MiB", &two),
    ];
    for (name, buf) in bufs {
        match buf.export_dmabuf() {
            Ok((fd, offset)) => {
                assert!(fd.as_raw_fd() >= 0);
                // SAFETY: lseek on a descriptor we own.
                let size = unsafe { libc::lseek(fd.as_raw_fd(), 0, libc::SEEK_END) };
                assert!(
                    size < 0 || size as u64 >= offset + buf.byte_len() as u64,
                    "{name}: dma-buf of {size} B, buffer at {offset} + {}",
                    buf.byte_len()
                );
                println!(
                    "dma-buf export of {name}: fd {}, size {size}, offset {offset}",
                    fd.as_raw_fd()
                );
            }
            // Allocations under 2 MiB may sit inside a page (the driver packs
            // them: H200, driver 580): then the export is refused before the
            // driver call, which would answer CUDA_ERROR_INVALID_VALUE.
            Err(e)
                if buf.byte_len() < 2 << 20
                    && e.to_string().contains("-byte host pages of one allocation") =>
            {
                println!("dma-buf export of {name}: refused: {e}");
            }
            Err(e) => {
                assert_eq!(
                    supported, 0,
                    "{name}: export failed on a GPU that supports dma-buf: {e}"
                );
                println!("dma-buf export of {name}: not supported here: {e}");
            }
        }
    }
    let empty = DeviceBuffer::<u8>::alloc(&gpu, 0).unwrap();
    assert!(empty.export_dmabuf().is_err());
}
