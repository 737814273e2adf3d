//! erdma-perf's GPU memory on a machine with a GPU (scripts/gpu/perf-check.sh
//! runs these on the H200): CUDA allocation, copies and dma-buf export of
//! the buffers `--use_cuda` uses, and the tool's order of checks (GPU first,
//! then the RDMA device). Ignored elsewhere.

use std::process::Command;

use erdma_bench::perf::gpu;

/// The binary: where cargo built it, or `$ERDMA_PERF_BIN` (the GPU machine
/// runs copies of both).
fn bin() -> String {
    std::env::var("ERDMA_PERF_BIN").unwrap_or_else(|_| env!("CARGO_BIN_EXE_erdma-perf").to_string())
}

#[test]
#[ignore = "needs a GPU: run scripts/gpu/perf-check.sh"]
fn gpu_buffers_allocate_and_copy() {
    let (dev, name) = gpu::open(0).expect("GPU 0");
    println!("GPU 0: {name}");
    let mut b = gpu::GpuBuffer::alloc(&dev, (1 << 20) + 7).expect("allocate");
    assert_eq!(b.len(), (1 << 20) + (1 << 16), "rounded to 64 KiB");
    let data: Vec<u8> = (0..b.len()).map(|i| (i * 7 + 3) as u8).collect();
    b.write(0, &data).expect("copy to the GPU");
    let mut back = vec![0u8; data.len()];
    b.read(0, &mut back).expect("copy from the GPU");
    assert_eq!(back, data);
    let mut tail = [0u8; 16];
    b.read(b.len() - 16, &mut tail).unwrap();
    assert_eq!(&tail[..], &data[data.len() - 16..]);
    let e = b.write(b.len() - 1, &[0, 0]).unwrap_err();
    assert_eq!(e.exit_code(), 8);
    assert!(e.to_string().contains("outside"), "{e}");
    // What --use_cuda_dmabuf registers: the buffer exported as a dma-buf.
    let (fd, offset) = b.device_buffer().export_dmabuf().expect("dma-buf export");
    use std::os::fd::AsRawFd;
    assert!(fd.as_raw_fd() >= 0);
    println!("dma-buf fd {} at offset {offset}", fd.as_raw_fd());
}

#[test]
#[ignore = "needs a GPU: run scripts/gpu/perf-check.sh"]
fn the_gpu_is_opened_before_the_rdma_device() {
    let out = Command::new(bin())
        .args(["write_bw", "--use_cuda=0"])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stdout.contains("Using CUDA device 0: "), "{stdout}{stderr}");
    if !std::path::Path::new("/sys/class/infiniband_verbs/abi_version").exists() {
        assert_eq!(out.status.code(), Some(3), "{stderr}");
        assert_eq!(stderr.lines().count(), 1, "{stderr}");
        assert!(stderr.contains("no RDMA device"), "{stderr}");
    }
    let out = Command::new(bin())
        .args(["write_bw", "--use_cuda=4096"])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(8), "{stderr}");
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    assert!(stderr.contains("GPU 4096 requested"), "{stderr}");
}
