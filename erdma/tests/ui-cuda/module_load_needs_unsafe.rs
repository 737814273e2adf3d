// The driver reads a cubin or fatbin as far as its headers say, past the slice
// when they lie (issue 34 hole 5): loading a binary image is `unsafe`, and a
// caller-chosen NVRTC library, whose symbols are called with assumed
// prototypes, is `unsafe` to open (hole 7). PTX text loads safely (load_ptx).
use erdma::cuda::nvrtc::Nvrtc;
use erdma::cuda::{Device, Module};
use std::path::Path;

fn truncated_cubin(device: &Device) {
    let _ = Module::load(device, b"\x7fELF");
}

fn ptx_is_safe(device: &Device) {
    let _ = Module::load_ptx(device, c".version 8.0\n.target sm_90\n.address_size 64\n");
}

fn nvrtc_at(path: &Path) {
    let _ = Nvrtc::open(path);
}

fn main() {}
