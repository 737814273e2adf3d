//! `-D 1..4`: all_reduce through NCCL's device API, with the kernels nccl-tests 2.19.6 runs
//! for those numbers (`device_kernels.cu`), compiled at run time by NVRTC against the
//! nccl_device.h of the installed NCCL.
//!
//! Why at run time: `ncclDevComm` and `ncclDevCommRequirements` change layout between NCCL
//! releases (even 2.28.3 to 2.28.7), so a kernel is only right for the headers of the
//! library that fills them in. The module reports those layouts itself (`erdma_layout`),
//! and a header of another version than the loaded library is refused.
//!
//! Needs, beyond the NCCL runtime: NVRTC (libnvrtc), the CUDA headers (cuda_runtime.h and
//! CCCL's cuda/atomic) and NCCL's headers (libnccl-dev). What is missing is named in a
//! one-line error with the package to install (exit 5, not implemented here).

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use erdma::cuda::nvrtc::{self, Nvrtc, Options as NvrtcOptions};
use erdma::cuda::{Device, DeviceBuffer, DevicePtr, Function, LaunchConfig, Module, Stream};
use erdma::nccl::{DevCommLayout, DevRequirements, Nccl};

use super::{cuda_error, kernel_cache};
use crate::nccltests::colls::CollKind;
use crate::nccltests::errors::{TestError, TestResult};
use crate::nccltests::options::Options;
use crate::nccltests::types::DataType;

/// The kernels' source (ours, written from nccl-tests' algorithm description).
const SOURCE: &str = include_str!("device_kernels.cu");

/// Threads per CTA, as nccl-tests launches them.
const THREADS: u32 = 512;

/// Headers NVRTC lacks and nccl.h/nccl_device.h include; given in memory so that no host
/// system include directory (glibc's) is on NVRTC's path. `limits.h` only feeds a macro
/// nccl.h defines and this code never expands.
const SHIM_HEADERS: [(&str, &str); 4] = [
    ("limits.h", "#pragma once\n"),
    ("stdint.h", "#pragma once\n#include <cuda/std/cstdint>\n"),
    ("stdbool.h", "#pragma once\n"),
    // cuda.h (included by NCCL >= 2.28.7's headers) includes it for size_t, which NVRTC
    // has built in.
    ("stdlib.h", "#pragma once\n"),
];

/// NVRTC options beyond the architecture and include directories: unannotated
/// declarations are device ones (the headers' host API), and NCCL >= 2.28.7's GPU-initiated
/// networking backends (device code only, no layout; host headers NVRTC lacks) are left
/// out.
const EXTRA_OPTIONS: [&str; 3] = [
    "-default-device",
    "-DNCCL_GIN_PROXY_ENABLE=0",
    "-DNCCL_GIN_GDAKI_ENABLE=0",
];

/// The kernel family of `-D`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Impl {
    /// `-D 1`: one element per thread over LSA pointers.
    Lsa,
    /// `-D 2`: 16-byte vectors over LSA pointers.
    LsaVector,
    /// `-D 3`: multimem (NVLS) loads and stores.
    Multimem,
    /// `-D 4`: multimem with float4 vectors.
    MultimemVector,
}

impl Impl {
    fn from_option(d: i32) -> Option<Impl> {
        match d {
            1 => Some(Impl::Lsa),
            2 => Some(Impl::LsaVector),
            3 => Some(Impl::Multimem),
            4 => Some(Impl::MultimemVector),
            _ => None,
        }
    }

    fn prefix(self) -> &'static str {
        match self {
            Impl::Lsa => "ar_lsa",
            Impl::LsaVector => "ar_lsa_vec",
            Impl::Multimem => "ar_mm",
            Impl::MultimemVector => "ar_mm_vec",
        }
    }

    fn multimem(self) -> bool {
        matches!(self, Impl::Multimem | Impl::MultimemVector)
    }

    /// The kernel's name for `dt`, None where nccl-tests has no kernel (it returns
    /// testNotImplemented, or for multimem types other than float and double traps on the
    /// GPU; refused here instead).
    fn kernel_name(self, dt: DataType) -> Option<String> {
        let suffix = match dt {
            DataType::Int8 => "i8",
            DataType::Uint8 => "u8",
            DataType::Int32 => "i32",
            DataType::Uint32 => "u32",
            DataType::Int64 => "i64",
            DataType::Uint64 => "u64",
            DataType::Float16 => "f16",
            DataType::Float32 => "f32",
            DataType::Float64 => "f64",
            DataType::Bfloat16 | DataType::Float8e4m3 | DataType::Float8e5m2 => return None,
        };
        let ok = match self {
            Impl::Lsa | Impl::LsaVector => true,
            Impl::Multimem => matches!(dt, DataType::Float32 | DataType::Float64),
            Impl::MultimemVector => dt == DataType::Float32,
        };
        ok.then(|| format!("{}_{suffix}", self.prefix()))
    }
}

/// A compiled image and the compute capability it was built for.
type Image = ((u32, u32), Arc<Vec<u8>>);

/// `-D` for this run: what to build and how to launch it. One per process.
pub(super) struct DeviceApi {
    imp: Impl,
    ctas: u32,
    nccl: &'static Nccl,
    /// Compiled images by compute capability.
    images: Mutex<Vec<Image>>,
}

impl DeviceApi {
    /// None for `-D 0`; the checks nccl-tests makes before creating device communicators
    /// otherwise (a device implementation exists for this collective and number).
    pub(super) fn new(
        o: &Options,
        kind: CollKind,
        nccl: &'static Nccl,
    ) -> TestResult<Option<Self>> {
        if o.device_impl == 0 {
            return Ok(None);
        }
        let imp = match Impl::from_option(o.device_impl) {
            Some(imp) if kind == CollKind::AllReduce => imp,
            _ => {
                return Err(TestError::NotImplemented(format!(
                    "Device implementation {} is not supported by this test",
                    o.device_impl
                )));
            }
        };
        Ok(Some(DeviceApi {
            imp,
            ctas: o.device_cta_count.clamp(1, 128) as u32,
            nccl,
            images: Mutex::new(Vec::new()),
        }))
    }

    /// What every rank's device communicator needs (nccl-tests' requirements: one LSA
    /// barrier per CTA, multimem for `-D 3/4`).
    pub(super) fn requirements(&self) -> DevRequirements {
        DevRequirements {
            lsa_barrier_count: self.ctas,
            lsa_multimem: self.imp.multimem(),
        }
    }

    /// The kernels loaded on `device` (compiled on first use for its architecture).
    pub(super) fn kernels(&self, device: &Device, stream: &Stream) -> TestResult<Kernels> {
        let image = self.image(device.compute_capability())?;
        // SAFETY: the image is what NVRTC wrote (`nvrtcGetCUBIN`, or its PTX with a NUL
        // added), now or when this program stored it in the kernel cache (written whole,
        // then renamed into place), so a cubin is complete.
        let module = unsafe { Module::load(device, &image) }
            .map_err(|e| cuda_error("cuModuleLoadData", e))?;
        let (layout, window_size) = self.layout(&module, stream)?;
        let mut fns: [Option<Function>; 12] = Default::default();
        for dt in DataType::ALL {
            if let Some(name) = self.imp.kernel_name(dt) {
                fns[dt.raw() as usize] = Some(
                    module
                        .function(&name)
                        .map_err(|e| cuda_error("cuModuleGetFunction", e))?,
                );
            }
        }
        Ok(Kernels {
            module,
            fns,
            layout,
            window_size,
            imp: self.imp,
            cfg: LaunchConfig {
                grid: self.ctas,
                block: THREADS,
                shared_bytes: 0,
            },
        })
    }

    fn image(&self, arch: (u32, u32)) -> TestResult<Arc<Vec<u8>>> {
        let mut images = self.images.lock().unwrap_or_else(|p| p.into_inner());
        if let Some((_, img)) = images.iter().find(|(a, _)| *a == arch) {
            return Ok(img.clone());
        }
        let img = Arc::new(compile(arch)?);
        images.push((arch, img.clone()));
        Ok(img)
    }

    /// The layouts the module was compiled with, checked against the loaded library, and
    /// `sizeof(ncclWindow_vidmem)`.
    fn layout(&self, module: &Module, stream: &Stream) -> TestResult<(DevCommLayout, usize)> {
        let read = |name: &str| {
            module
                .read_global(name, stream)
                .map_err(|e| cuda_error("cuModuleGetGlobal", e))
        };
        let words: Vec<u64> = read("erdma_layout")?
            .chunks_exact(8)
            .map(|c| u64::from_ne_bytes(c.try_into().unwrap_or([0; 8])))
            .collect();
        let [header, comm_size, req_size, mm_off, bar_off, win_size] = words[..] else {
            return Err(TestError::Internal(
                "-D: erdma_layout has the wrong size".into(),
            ));
        };
        let lib = self.nccl.version().code() as u64;
        if header != lib {
            return Err(TestError::InvalidUsage(format!(
                "Incompatible NCCL versions: nccl_device.h is NCCL {header} but the loaded library is NCCL {lib}; the device API differs between releases. Point NCCL_HOME at the headers of the loaded library (its libnccl-dev)"
            )));
        }
        let reqs = read("erdma_requirements")?;
        if reqs.len() as u64 != req_size {
            return Err(TestError::Internal(
                "-D: erdma_requirements has the wrong size".into(),
            ));
        }
        // SAFETY: the sizes, offsets and initializer come from the nccl_device.h of the
        // loaded library's own version (checked just above), compiled into this module.
        let layout = unsafe {
            DevCommLayout::new(comm_size as usize, reqs, mm_off as usize, bar_off as usize)
        }
        .map_err(|e| TestError::Internal(format!("-D: {e}")))?;
        Ok((layout, win_size as usize))
    }
}

/// One rank's loaded kernels.
pub(super) struct Kernels {
    module: Module,
    fns: [Option<Function>; 12],
    /// The device-communicator layout of the headers they were built with.
    pub(super) layout: DevCommLayout,
    window_size: usize,
    imp: Impl,
    cfg: LaunchConfig,
}

/// The `fake-devcomm` hook's one-rank device communicator and windows (see
/// `device_kernels.cu`), in plain device memory this value owns.
pub(super) struct FakeDevComm {
    _mem: DeviceBuffer<u8>,
    devcomm: Vec<u128>,
}

/// The send and receive windows (`ncclWindow_t`) of a rank.
pub(super) type Windows = (*mut std::ffi::c_void, *mut std::ffi::c_void);

impl FakeDevComm {
    /// The `ncclDevComm` kernel parameter.
    pub fn as_kernel_param(&self) -> *mut std::ffi::c_void {
        self.devcomm.as_ptr() as *mut std::ffi::c_void
    }
}

/// Byte offsets in a `FakeDevComm`'s memory: three windows, the communicator, then the
/// barrier state (a one-rank barrier uses 2 words per CTA).
const FAKE_WINDOW_SLOT: usize = 256;
const FAKE_DEVCOMM_AT: usize = 1024;
const FAKE_RESOURCE_AT: usize = 8192;
const FAKE_BYTES: usize = 65536;

/// The window arguments of one launch.
pub(super) struct WindowArgs {
    /// Send window (`ncclWindow_t`).
    pub send: *mut std::ffi::c_void,
    /// Byte offset into the send window.
    pub send_offset: usize,
    /// Receive window.
    pub recv: *mut std::ffi::c_void,
    /// Byte offset into the receive window.
    pub recv_offset: usize,
}

impl Kernels {
    /// The `fake-devcomm` hook: a one-rank device communicator, and windows over `send` and
    /// `recv` (returned, valid while the communicator lives), built on the GPU by the
    /// module's own helpers (so in its layout).
    pub(super) fn fake_one_rank(
        &self,
        device: &Device,
        stream: &Stream,
        send: DevicePtr,
        recv: DevicePtr,
    ) -> TestResult<(FakeDevComm, Windows)> {
        let size = self.layout.comm_size();
        if self.window_size > FAKE_WINDOW_SLOT || FAKE_DEVCOMM_AT + size > FAKE_RESOURCE_AT {
            return Err(TestError::Internal(
                "fake-devcomm: structures too large".into(),
            ));
        }
        let err = |call: &'static str| move |e| cuda_error(call, e);
        let mem =
            DeviceBuffer::<u8>::zeroed(device, FAKE_BYTES, stream).map_err(err("cudaMalloc"))?;
        let at = |off: usize| mem.device_ptr().byte_add(off).0;
        let one = LaunchConfig {
            grid: 1,
            block: 1,
            shared_bytes: 0,
        };
        let window = self
            .module
            .function("erdma_fake_window")
            .map_err(err("cuModuleGetFunction"))?;
        for (slot, base) in [(0, send.0), (1, recv.0), (2, at(FAKE_RESOURCE_AT))] {
            let (mut w, mut b) = (at(slot * FAKE_WINDOW_SLOT), base);
            let mut params = [(&raw mut w).cast(), (&raw mut b).cast()];
            // SAFETY: erdma_fake_window(ncclWindow_vidmem*, char*): the window slot lies in
            // `mem` (window_size <= FAKE_WINDOW_SLOT, checked), which outlives the
            // synchronization below.
            unsafe { window.launch(one, stream, &mut params) }.map_err(err("cudaLaunchKernel"))?;
        }
        let fill = self
            .module
            .function("erdma_fake_devcomm")
            .map_err(err("cuModuleGetFunction"))?;
        let (mut c, mut r, mut n) = (
            at(FAKE_DEVCOMM_AT),
            at(2 * FAKE_WINDOW_SLOT),
            self.cfg.grid as i32,
        );
        let mut params = [
            (&raw mut c).cast(),
            (&raw mut r).cast(),
            (&raw mut n).cast(),
        ];
        // SAFETY: erdma_fake_devcomm(ncclDevComm*, ncclWindow_vidmem*, int): both lie in `mem`
        // (sizes checked above).
        unsafe { fill.launch(one, stream, &mut params) }.map_err(err("cudaLaunchKernel"))?;
        let mut devcomm = vec![0u128; size.div_ceil(16)];
        // SAFETY: the destination holds at least `size` bytes; the source lies in `mem`; the
        // copy waits for the kernels before it on the stream.
        let bytes =
            unsafe { std::slice::from_raw_parts_mut(devcomm.as_mut_ptr().cast::<u8>(), size) };
        // SAFETY: as above.
        unsafe { erdma::cuda::copy_dtoh_raw(bytes, DevicePtr(at(FAKE_DEVCOMM_AT)), stream) }
            .map_err(err("cudaMemcpy"))?;
        let windows = (
            at(0) as *mut std::ffi::c_void,
            at(FAKE_WINDOW_SLOT) as *mut std::ffi::c_void,
        );
        Ok((FakeDevComm { _mem: mem, devcomm }, windows))
    }

    /// Launches the all_reduce kernel for `dt` on `stream`, as nccl-tests'
    /// `testLaunchDeviceKernel`: `-V` CTAs of 512 threads.
    ///
    /// # Safety
    /// The windows must be this rank's send/receive windows of the device communicator at
    /// `devcomm` (sizeof(ncclDevComm) bytes in this module's layout), holding `count`
    /// elements of `dt` past their offsets, and must stay valid until the kernel completes.
    pub(super) unsafe fn launch(
        &self,
        dt: DataType,
        w: &WindowArgs,
        count: usize,
        root: i32,
        devcomm: *mut std::ffi::c_void,
        stream: &Stream,
    ) -> TestResult<()> {
        let Some(f) = &self.fns[dt.raw() as usize] else {
            return Err(TestError::NotImplemented(format!(
                "device implementation {:?} has no {} kernel (nccl-tests has none either)",
                self.imp,
                dt.name()
            )));
        };
        let (mut send, mut soff, mut recv, mut roff) =
            (w.send, w.send_offset, w.recv, w.recv_offset);
        let (mut count, mut root) = (count, root);
        let mut params = [
            (&raw mut send).cast(),
            (&raw mut soff).cast(),
            (&raw mut recv).cast(),
            (&raw mut roff).cast(),
            (&raw mut count).cast(),
            (&raw mut root).cast(),
            devcomm,
        ];
        // SAFETY: the seven pointers match the kernels' signature (ncclWindow_t, size_t,
        // ncclWindow_t, size_t, size_t, int, ncclDevComm by value); the caller guarantees
        // the windows and that `devcomm` addresses sizeof(ncclDevComm) bytes of the module's
        // own layout.
        unsafe { f.launch(self.cfg, stream, &mut params) }
            .map_err(|e| cuda_error("cudaLaunchKernel", e))
    }
}

/// Where the headers NVRTC needs are.
#[derive(Debug)]
struct Headers {
    /// Directory holding nccl.h, nccl_device.h and nccl_device/.
    nccl: PathBuf,
    /// CUDA include directories (cuda_runtime.h, then CCCL's).
    cuda: Vec<PathBuf>,
}

/// Compiles the kernels for `arch`.
fn compile(arch: (u32, u32)) -> TestResult<Vec<u8>> {
    let headers = find_headers(nccl_home_env()).map_err(TestError::NotImplemented)?;
    compile_cached(arch, &headers, kernel_cache::dir().as_deref())
}

/// [`compile`] against `headers`, with the kernel cache in `cache` (None: no cache).
fn compile_cached(
    arch: (u32, u32),
    headers: &Headers,
    cache: Option<&Path>,
) -> TestResult<Vec<u8>> {
    let nvrtc =
        Nvrtc::load().map_err(|e| TestError::NotImplemented(format!("-D needs NVRTC: {e}")))?;
    let key = cache_key(nvrtc, headers, arch);
    if let Some(image) = cache.and_then(|d| kernel_cache::load(d, &key)) {
        return Ok(image);
    }
    let stage = stage_nccl_headers(&headers.nccl)?;
    let opts = options(arch, &stage, headers);
    let out = compile_with(nvrtc, &opts).map_err(|e| {
        TestError::NotImplemented(format!(
            "-D kernels do not build against {}/nccl_device.h: {e}",
            headers.nccl.display()
        ))
    })?;
    if let Some(d) = cache {
        kernel_cache::store(d, &key, &out);
    }
    Ok(out)
}

/// The NVRTC options for `arch` with NCCL's headers staged in `stage`.
fn options(arch: (u32, u32), stage: &Stage, headers: &Headers) -> NvrtcOptions {
    let mut opts = NvrtcOptions::for_arch(arch.0, arch.1);
    opts.include_dirs.push(stage.path().to_path_buf());
    opts.include_dirs.extend(headers.cuda.iter().cloned());
    opts.extra.extend(EXTRA_OPTIONS.map(String::from));
    opts
}

/// Everything that goes into [`compile`]: the source, the options and headers, NVRTC.
fn cache_key(nvrtc: &Nvrtc, headers: &Headers, arch: (u32, u32)) -> kernel_cache::Key {
    let mut key = kernel_cache::Key::new();
    key.add(SOURCE)
        .add(SHIM_HEADERS)
        .add(EXTRA_OPTIONS)
        .add(arch)
        .add(nvrtc.path())
        .add(nvrtc.version().ok())
        .add(&headers.cuda);
    for name in ["nccl.h", "nccl_device.h", "nccl_device"] {
        key.add(name).add_path(&headers.nccl.join(name));
    }
    key.add_path(&headers.cuda[0].join("cuda_runtime.h"));
    key
}

fn compile_with(nvrtc: &Nvrtc, opts: &NvrtcOptions) -> nvrtc::Result<Vec<u8>> {
    let mut image = nvrtc
        .compile(SOURCE, "device_kernels.cu", &SHIM_HEADERS, opts)?
        .image;
    if image.last() != Some(&0) && !image.starts_with(b"\x7fELF") {
        image.push(0);
    }
    Ok(image)
}

/// A private include directory with links to NCCL's headers only, so that NVRTC does not
/// see the rest of /usr/include (glibc's headers do not compile as device code).
struct Stage(PathBuf);

impl Stage {
    fn path(&self) -> &Path {
        &self.0
    }
}

impl Drop for Stage {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn stage_nccl_headers(dir: &Path) -> TestResult<Stage> {
    use std::sync::atomic::{AtomicUsize, Ordering};
    static N: AtomicUsize = AtomicUsize::new(0);
    let stage = Stage(std::env::temp_dir().join(format!(
        "erdma-nccl-headers-{}-{}",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    )));
    let fail = |e: std::io::Error| {
        TestError::Internal(format!(
            "-D: staging NCCL headers in {}: {e}",
            stage.path().display()
        ))
    };
    std::fs::create_dir_all(stage.path()).map_err(fail)?;
    for name in ["nccl.h", "nccl_device.h", "nccl_device"] {
        std::os::unix::fs::symlink(dir.join(name), stage.path().join(name)).map_err(fail)?;
    }
    Ok(stage)
}

/// `$NCCL_HOME`, when set.
fn nccl_home_env() -> Option<PathBuf> {
    std::env::var_os("NCCL_HOME")
        .filter(|v| !v.is_empty())
        .map(PathBuf::from)
}

/// NCCL's include directory: `nccl_home/include`, then next to the loaded libnccl
/// (`lib/../include`, `lib/x86_64-linux-gnu/../../include`), then /usr/include,
/// /usr/local/include; the first holding nccl_device.h. CUDA's: the first of
/// `nvrtc::cuda_roots()` holding include/cuda_runtime.h, with its CCCL directory.
fn find_headers(nccl_home: Option<PathBuf>) -> Result<Headers, String> {
    let mut nccl_dirs: Vec<PathBuf> = nccl_home.map(|h| h.join("include")).into_iter().collect();
    if let Some(lib) = loaded_library_dir("libnccl") {
        nccl_dirs.push(lib.join("../include"));
        nccl_dirs.push(lib.join("../../include"));
    }
    nccl_dirs.extend(["/usr/include", "/usr/local/include"].map(PathBuf::from));
    let nccl = nccl_dirs
        .iter()
        .find(|d| d.join("nccl_device.h").is_file() && d.join("nccl.h").is_file())
        .cloned()
        .ok_or_else(|| {
            format!(
                "-D needs NCCL's device-API headers (nccl_device.h, NCCL >= 2.28) and none were found in {}; hint: install libnccl-dev of the same version as libnccl2, or set NCCL_HOME",
                join(&nccl_dirs)
            )
        })?;
    let roots = nvrtc::cuda_roots();
    let cuda_root = roots
        .iter()
        .map(|r| r.join("include"))
        .find(|d| d.join("cuda_runtime.h").is_file())
        .ok_or_else(|| {
            format!(
                "-D needs the CUDA headers (cuda_runtime.h, cuda/atomic) and none were found under {}; hint: install cuda-cudart-dev and cuda-cccl, or set CUDA_HOME",
                join(&roots)
            )
        })?;
    let mut cuda = vec![cuda_root.clone()];
    if cuda_root.join("cccl").is_dir() {
        cuda.push(cuda_root.join("cccl"));
    }
    Ok(Headers {
        nccl: nccl.canonicalize().unwrap_or(nccl),
        cuda,
    })
}

fn join(dirs: &[PathBuf]) -> String {
    dirs.iter()
        .map(|d| d.display().to_string())
        .collect::<Vec<_>>()
        .join(", ")
}

/// The directory of the first mapped file whose name starts with `prefix`.
fn loaded_library_dir(prefix: &str) -> Option<PathBuf> {
    let maps = crate::input::read_text("/proc/self/maps").ok()?;
    maps.lines()
        .filter_map(|l| l.split_whitespace().nth(5))
        .map(Path::new)
        .find(|p| {
            p.file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.starts_with(prefix))
        })
        .and_then(|p| p.parent().map(Path::to_path_buf))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kernel_names_follow_nccl_tests_coverage() {
        assert_eq!(
            Impl::Lsa.kernel_name(DataType::Float16).as_deref(),
            Some("ar_lsa_f16")
        );
        assert_eq!(
            Impl::LsaVector.kernel_name(DataType::Uint64).as_deref(),
            Some("ar_lsa_vec_u64")
        );
        assert_eq!(Impl::Lsa.kernel_name(DataType::Bfloat16), None);
        assert_eq!(
            Impl::Multimem.kernel_name(DataType::Float64).as_deref(),
            Some("ar_mm_f64")
        );
        assert_eq!(Impl::Multimem.kernel_name(DataType::Int32), None);
        assert_eq!(Impl::MultimemVector.kernel_name(DataType::Float64), None);
        assert_eq!(Impl::from_option(5), None);
    }

    #[test]
    fn every_named_kernel_is_in_the_source() {
        for imp in [
            Impl::Lsa,
            Impl::LsaVector,
            Impl::Multimem,
            Impl::MultimemVector,
        ] {
            for dt in DataType::ALL {
                if let Some(name) = imp.kernel_name(dt) {
                    let (kind, suffix) = name.rsplit_once('_').unwrap();
                    let entry = match kind {
                        "ar_lsa" | "ar_lsa_vec" => format!("_TYPE({suffix},"),
                        _ => format!("ENTRY({name},"),
                    };
                    assert!(SOURCE.contains(&entry), "{name}: {entry} missing");
                }
            }
        }
    }

    /// Compiles the real kernels against real NCCL and CUDA headers when NVRTC and the
    /// headers are installed; needs no GPU. CI installs them from NVIDIA's wheels, names
    /// every NCCL release to build against in ERDMA_TEST_NCCL_HOMES (colon-separated) and
    /// sets ERDMA_REQUIRE_NVRTC=1, which turns a missing piece into a failure.
    #[test]
    fn kernels_compile_with_nvrtc_against_installed_headers() {
        let required = std::env::var("ERDMA_REQUIRE_NVRTC").is_ok_and(|v| v == "1");
        let skip = |why: String| {
            assert!(!required, "ERDMA_REQUIRE_NVRTC=1 but {why}");
            eprintln!("skipped: {why}");
        };
        if let Err(e) = Nvrtc::load() {
            return skip(e.to_string());
        }
        let homes: Vec<Option<PathBuf>> = match std::env::var("ERDMA_TEST_NCCL_HOMES") {
            Ok(v) if !v.is_empty() => v.split(':').map(|h| Some(PathBuf::from(h))).collect(),
            _ => vec![nccl_home_env()],
        };
        for home in homes {
            let headers = match find_headers(home.clone()) {
                Ok(h) => h,
                Err(e) => return skip(e),
            };
            if let Some(h) = &home {
                assert!(
                    headers
                        .nccl
                        .starts_with(h.canonicalize().unwrap_or(h.clone())),
                    "{h:?}"
                );
            }
            // Through the kernel cache: a miss compiles and stores, a hit returns the same.
            let cache =
                std::env::temp_dir().join(format!("erdma-kcache-test-{}", std::process::id()));
            let image = compile_cached((9, 0), &headers, Some(&cache))
                .unwrap_or_else(|e| panic!("{}: {e}", headers.nccl.display()));
            assert!(image.starts_with(b"\x7fELF"), "sm_90 gives a cubin");
            for sym in [
                "ar_lsa_f32",
                "ar_lsa_vec_i8",
                "ar_mm_vec_f32",
                "erdma_layout",
                "erdma_fake_devcomm",
            ] {
                assert!(
                    image.windows(sym.len()).any(|w| w == sym.as_bytes()),
                    "{sym} missing from the cubin built against {}",
                    headers.nccl.display()
                );
            }
            let t = std::time::Instant::now();
            let again =
                compile_cached((9, 0), &headers, Some(&cache)).unwrap_or_else(|e| panic!("{e}"));
            assert!(image == again && t.elapsed().as_millis() < 500, "cache hit");
            std::fs::remove_dir_all(&cache).unwrap();
        }
    }
}
