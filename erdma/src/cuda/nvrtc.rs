//! Run-time compilation of CUDA C++ with NVRTC (`libnvrtc.so`, loaded at run time).
//!
//! For code that must be compiled against headers of the machine it runs on, such as
//! kernels over NCCL's device API, whose structures change between NCCL releases. The
//! library is optional: without it [`Nvrtc::load`] returns [`NvrtcError::NotFound`] naming
//! what was tried and how to install it.
//!
//! ```no_run
//! use erdma::cuda::nvrtc::{Nvrtc, Options};
//! # fn main() -> Result<(), erdma::cuda::nvrtc::NvrtcError> {
//! let nvrtc = Nvrtc::load()?;
//! let src = r#"extern "C" __global__ void twice(float* x) { x[threadIdx.x] *= 2; }"#;
//! let out = nvrtc.compile(src, "twice.cu", &[], &Options::for_arch(9, 0))?;
//! println!("{} bytes of cubin", out.image.len());
//! # Ok(()) }
//! ```

use std::ffi::{CStr, CString, c_char, c_int, c_void};
use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

type NvrtcResult = c_int;
type Program = *mut c_void;

/// Sonames tried in order (CUDA 13, 12, 11.2+ keep ABI-compatible NVRTC entry points).
pub const NVRTC_SONAMES: [&str; 4] = [
    "libnvrtc.so.13",
    "libnvrtc.so.12",
    "libnvrtc.so.11.2",
    "libnvrtc.so",
];

/// Environment variable naming the NVRTC library to load instead of searching.
pub const NVRTC_LIBRARY_ENV: &str = "ERDMA_NVRTC_LIBRARY";

/// Everything that can go wrong loading NVRTC or compiling with it.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum NvrtcError {
    /// No NVRTC library could be loaded.
    NotFound {
        /// The names and paths tried.
        tried: String,
    },
    /// The library lacks an entry point (not an NVRTC library, or older than CUDA 11.2).
    MissingSymbol {
        /// The missing function.
        symbol: &'static str,
    },
    /// An NVRTC call failed outside compilation (out of memory, bad option).
    Call {
        /// The function that failed.
        call: &'static str,
        /// `nvrtcGetErrorString` of the result.
        message: String,
    },
    /// The source did not compile.
    Compile {
        /// The source's name.
        name: String,
        /// The first error line of the log.
        first_error: String,
        /// The whole compiler log.
        log: String,
    },
}

impl fmt::Display for NvrtcError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            NvrtcError::NotFound { tried } => write!(
                f,
                "NVRTC (libnvrtc.so) not found (tried {tried}); hint: install the CUDA toolkit's NVRTC (apt install cuda-nvrtc-13-0, or pip install nvidia-cuda-nvrtc), set CUDA_HOME, or name the library in {NVRTC_LIBRARY_ENV}"
            ),
            NvrtcError::MissingSymbol { symbol } => write!(
                f,
                "the NVRTC library lacks {symbol}: it is older than CUDA 11.2 or not NVRTC; hint: install a current cuda-nvrtc"
            ),
            NvrtcError::Call { call, message } => write!(f, "{call} failed: {message}"),
            NvrtcError::Compile {
                name, first_error, ..
            } => write!(f, "NVRTC could not compile {name}: {first_error}"),
        }
    }
}

impl std::error::Error for NvrtcError {}

/// Result of NVRTC operations.
pub type Result<T, E = NvrtcError> = std::result::Result<T, E>;

macro_rules! nvrtc_table {
    ($($name:ident($($arg:ty),*);)*) => {
        /// The NVRTC library and its entry points.
        #[allow(non_snake_case)]
        pub struct Nvrtc {
            $($name: unsafe extern "C" fn($($arg),*) -> NvrtcResult,)*
            nvrtcGetErrorString: unsafe extern "C" fn(NvrtcResult) -> *const c_char,
            path: String,
        }

        impl Nvrtc {
            fn resolve(lib: &'static libloading::Library, path: String) -> Result<Nvrtc> {
                Ok(Nvrtc {
                    $($name: {
                        // SAFETY: the prototype written above is nvrtc.h's (CUDA 11.2+).
                        unsafe { symbol(lib, stringify!($name))? }
                    },)*
                    // SAFETY: `const char* nvrtcGetErrorString(nvrtcResult)` in nvrtc.h.
                    nvrtcGetErrorString: unsafe { symbol(lib, "nvrtcGetErrorString")? },
                    path,
                })
            }
        }
    };
}

nvrtc_table! {
    nvrtcVersion(*mut c_int, *mut c_int);
    nvrtcCreateProgram(*mut Program, *const c_char, *const c_char, c_int, *const *const c_char, *const *const c_char);
    nvrtcDestroyProgram(*mut Program);
    nvrtcCompileProgram(Program, c_int, *const *const c_char);
    nvrtcGetProgramLogSize(Program, *mut usize);
    nvrtcGetProgramLog(Program, *mut c_char);
    nvrtcGetCUBINSize(Program, *mut usize);
    nvrtcGetCUBIN(Program, *mut c_char);
    nvrtcGetPTXSize(Program, *mut usize);
    nvrtcGetPTX(Program, *mut c_char);
    nvrtcGetNumSupportedArchs(*mut c_int);
    nvrtcGetSupportedArchs(*mut c_int);
}

/// # Safety
/// `F` must be the C prototype of `name`.
unsafe fn symbol<F: Copy>(lib: &'static libloading::Library, name: &'static str) -> Result<F> {
    // SAFETY: the caller guarantees the prototype; the library is never unloaded.
    match unsafe { lib.get::<F>(name.as_bytes()) } {
        Ok(s) => Ok(*s),
        Err(_) => Err(NvrtcError::MissingSymbol { symbol: name }),
    }
}

/// Compiler options for [`Nvrtc::compile`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Options {
    /// Compute capability (major, minor) to build for.
    pub arch: (u32, u32),
    /// Include directories, searched in order.
    pub include_dirs: Vec<PathBuf>,
    /// Further options passed as they are (`-std=c++17`, `-DNAME=1`, ...).
    pub extra: Vec<String>,
}

impl Options {
    /// Options for a GPU of compute capability `major.minor`, C++17, nothing else.
    pub fn for_arch(major: u32, minor: u32) -> Options {
        Options {
            arch: (major, minor),
            include_dirs: Vec::new(),
            extra: vec!["-std=c++17".into()],
        }
    }
}

/// What [`Nvrtc::compile`] produced.
#[derive(Debug, Clone)]
pub struct Compiled {
    /// A cubin for the requested architecture, or NUL-terminated PTX when this NVRTC does
    /// not know the GPU (the driver then compiles it at load time).
    pub image: Vec<u8>,
    /// Whether `image` is PTX.
    pub is_ptx: bool,
    /// The compiler log (warnings), possibly empty.
    pub log: String,
}

/// Owns an `nvrtcProgram` so every exit path destroys it.
struct ProgramGuard<'a> {
    nvrtc: &'a Nvrtc,
    raw: Program,
}

impl Drop for ProgramGuard<'_> {
    fn drop(&mut self) {
        // SAFETY: `raw` was created by nvrtcCreateProgram and is destroyed once, here.
        unsafe { (self.nvrtc.nvrtcDestroyProgram)(&mut self.raw) };
    }
}

static NVRTC: OnceLock<Result<Nvrtc>> = OnceLock::new();

impl Nvrtc {
    /// Loads NVRTC once per process: `$ERDMA_NVRTC_LIBRARY`, else the sonames of
    /// [`NVRTC_SONAMES`] on the library path, else the same names in `$CUDA_HOME/lib64`,
    /// `$CUDA_PATH/lib64` and `/usr/local/cuda*/lib64`. Never panics.
    pub fn load() -> Result<&'static Nvrtc> {
        NVRTC.get_or_init(load).as_ref().map_err(Clone::clone)
    }

    /// Loads the NVRTC library at `path` (for example a given release, whose PTX a
    /// development tool must reproduce), independently of [`Nvrtc::load`]'s. The library
    /// stays loaded for the life of the process. A library missing one of NVRTC's symbols
    /// is refused.
    ///
    /// # Safety
    ///
    /// `path` must name a genuine NVRTC library (or none at all): loading it runs its
    /// initializers, and its symbols, found by name, are called with the prototypes of
    /// `nvrtc.h`, which no check can confirm (issue 34 hole 7). [`Nvrtc::load`] is the safe
    /// entry point (NVRTC's sonames, the CUDA installation, or `ERDMA_NVRTC_LIBRARY`).
    pub unsafe fn open(path: &Path) -> Result<&'static Nvrtc> {
        let c = path.to_string_lossy().into_owned();
        // SAFETY: a genuine NVRTC (the caller's contract), whose loading runs no
        // initialisation with preconditions.
        match unsafe { libloading::Library::new(path) } {
            Ok(lib) => {
                let lib: &'static libloading::Library = Box::leak(Box::new(lib));
                preload_builtins(&c);
                Ok(Box::leak(Box::new(Nvrtc::resolve(lib, c)?)))
            }
            Err(_) => Err(NvrtcError::NotFound { tried: c }),
        }
    }

    /// The library file or soname that was loaded.
    pub fn path(&self) -> &str {
        &self.path
    }

    /// NVRTC's (major, minor) version.
    pub fn version(&self) -> Result<(i32, i32)> {
        let (mut major, mut minor) = (0, 0);
        // SAFETY: writes two ints.
        self.check("nvrtcVersion", unsafe {
            (self.nvrtcVersion)(&mut major, &mut minor)
        })?;
        Ok((major, minor))
    }

    /// The `sm_XY` architectures this NVRTC can build cubins for, as 10 * major + minor.
    pub fn supported_archs(&self) -> Result<Vec<i32>> {
        let mut n: c_int = 0;
        // SAFETY: writes one int.
        self.check("nvrtcGetNumSupportedArchs", unsafe {
            (self.nvrtcGetNumSupportedArchs)(&mut n)
        })?;
        let mut archs = vec![0 as c_int; usize::try_from(n).unwrap_or(0)];
        if !archs.is_empty() {
            // SAFETY: the array has the number of entries NVRTC just reported.
            self.check("nvrtcGetSupportedArchs", unsafe {
                (self.nvrtcGetSupportedArchs)(archs.as_mut_ptr())
            })?;
        }
        Ok(archs)
    }

    /// Compiles `source` (named `name` in messages) with in-memory `headers` (name, text:
    /// found by `#include` before the include directories) into a cubin for `opts.arch`,
    /// or PTX for the newest older architecture NVRTC knows when it does not know that one.
    pub fn compile(
        &self,
        source: &str,
        name: &str,
        headers: &[(&str, &str)],
        opts: &Options,
    ) -> Result<Compiled> {
        let want = (opts.arch.0 * 10 + opts.arch.1) as i32;
        let archs = self.supported_archs()?;
        let (arch_flag, is_ptx) = if archs.contains(&want) {
            (format!("--gpu-architecture=sm_{want}"), false)
        } else {
            let best = archs
                .iter()
                .copied()
                .filter(|a| *a <= want)
                .max()
                .ok_or_else(|| NvrtcError::Call {
                    call: "nvrtcGetSupportedArchs",
                    message: format!(
                        "this NVRTC ({}) cannot build for compute capability {}.{}",
                        self.path, opts.arch.0, opts.arch.1
                    ),
                })?;
            (format!("--gpu-architecture=compute_{best}"), true)
        };
        self.build(source, name, headers, opts, arch_flag, is_ptx)
    }

    /// Compiles `source` as [`Nvrtc::compile`] does, but always into PTX for the virtual
    /// architecture `compute_XY` of `opts.arch`: code that the driver of any GPU of that
    /// capability or newer compiles at load time, and which keeps the PTX ISA version of
    /// this NVRTC (so an older NVRTC gives PTX that older drivers accept).
    pub fn compile_ptx(
        &self,
        source: &str,
        name: &str,
        headers: &[(&str, &str)],
        opts: &Options,
    ) -> Result<Compiled> {
        let arch = format!("--gpu-architecture=compute_{}{}", opts.arch.0, opts.arch.1);
        self.build(source, name, headers, opts, arch, true)
    }

    fn build(
        &self,
        source: &str,
        name: &str,
        headers: &[(&str, &str)],
        opts: &Options,
        arch_flag: String,
        is_ptx: bool,
    ) -> Result<Compiled> {
        let cstr = |s: &str, what: &str| {
            CString::new(s).map_err(|_| NvrtcError::Call {
                call: "nvrtcCreateProgram",
                message: format!("{what} contains a NUL byte"),
            })
        };
        let src = cstr(source, "the source")?;
        let cname = cstr(name, "the name")?;
        let hnames = headers
            .iter()
            .map(|h| cstr(h.0, "a header name"))
            .collect::<Result<Vec<_>>>()?;
        let htexts = headers
            .iter()
            .map(|h| cstr(h.1, "a header"))
            .collect::<Result<Vec<_>>>()?;
        let hname_ptrs: Vec<*const c_char> = hnames.iter().map(|c| c.as_ptr()).collect();
        let htext_ptrs: Vec<*const c_char> = htexts.iter().map(|c| c.as_ptr()).collect();
        let mut options = vec![arch_flag];
        options.extend(
            opts.include_dirs
                .iter()
                .map(|d| format!("-I{}", d.display())),
        );
        options.extend(opts.extra.iter().cloned());
        let copts = options
            .iter()
            .map(|o| cstr(o, "an option"))
            .collect::<Result<Vec<_>>>()?;
        let opt_ptrs: Vec<*const c_char> = copts.iter().map(|c| c.as_ptr()).collect();

        let mut raw: Program = std::ptr::null_mut();
        // SAFETY: every pointer is a NUL-terminated string alive for the call; the two header
        // arrays have `headers.len()` entries.
        self.check("nvrtcCreateProgram", unsafe {
            (self.nvrtcCreateProgram)(
                &mut raw,
                src.as_ptr(),
                cname.as_ptr(),
                headers.len() as c_int,
                htext_ptrs.as_ptr(),
                hname_ptrs.as_ptr(),
            )
        })?;
        let prog = ProgramGuard { nvrtc: self, raw };
        // SAFETY: the program is live; the option array has `opt_ptrs.len()` strings.
        let rc = unsafe {
            (self.nvrtcCompileProgram)(prog.raw, opt_ptrs.len() as c_int, opt_ptrs.as_ptr())
        };
        let log = self.log(&prog)?;
        if rc != 0 {
            let first_error = log
                .lines()
                .find(|l| l.contains("error"))
                .unwrap_or_else(|| log.lines().next().unwrap_or("no compiler log"))
                .trim()
                .to_string();
            return Err(NvrtcError::Compile {
                name: name.to_string(),
                first_error,
                log,
            });
        }
        let image = if is_ptx {
            self.output(&prog, "nvrtcGetPTX", self.nvrtcGetPTXSize, self.nvrtcGetPTX)?
        } else {
            self.output(
                &prog,
                "nvrtcGetCUBIN",
                self.nvrtcGetCUBINSize,
                self.nvrtcGetCUBIN,
            )?
        };
        Ok(Compiled { image, is_ptx, log })
    }

    fn log(&self, prog: &ProgramGuard<'_>) -> Result<String> {
        let bytes = self.output(
            prog,
            "nvrtcGetProgramLog",
            self.nvrtcGetProgramLogSize,
            self.nvrtcGetProgramLog,
        )?;
        let text = CStr::from_bytes_until_nul(&bytes)
            .map(|c| c.to_string_lossy().into_owned())
            .unwrap_or_else(|_| String::from_utf8_lossy(&bytes).into_owned());
        Ok(text)
    }

    /// Reads one of the program's outputs: its size, then its bytes (NUL included for text).
    fn output(
        &self,
        prog: &ProgramGuard<'_>,
        call: &'static str,
        size_fn: unsafe extern "C" fn(Program, *mut usize) -> NvrtcResult,
        get_fn: unsafe extern "C" fn(Program, *mut c_char) -> NvrtcResult,
    ) -> Result<Vec<u8>> {
        let mut n = 0usize;
        // SAFETY: the program is live; writes one size.
        self.check(call, unsafe { size_fn(prog.raw, &mut n) })?;
        let mut out = vec![0u8; n.max(1)];
        // SAFETY: the buffer holds the `n` bytes NVRTC just reported.
        self.check(call, unsafe { get_fn(prog.raw, out.as_mut_ptr().cast()) })?;
        out.truncate(n);
        Ok(out)
    }

    fn check(&self, call: &'static str, rc: NvrtcResult) -> Result<()> {
        if rc == 0 {
            return Ok(());
        }
        // SAFETY: nvrtcGetErrorString returns a static string for any value.
        let p = unsafe { (self.nvrtcGetErrorString)(rc) };
        let message = if p.is_null() {
            format!("NVRTC error {rc}")
        } else {
            // SAFETY: a NUL-terminated static string.
            unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned()
        };
        Err(NvrtcError::Call { call, message })
    }
}

/// The CUDA installations to search, in order: `$CUDA_HOME`, `$CUDA_PATH`,
/// `/usr/local/cuda`, then `/usr/local/cuda-*` newest first.
pub fn cuda_roots() -> Vec<PathBuf> {
    let mut roots: Vec<PathBuf> = ["CUDA_HOME", "CUDA_PATH"]
        .iter()
        .filter_map(std::env::var_os)
        .filter(|v| !v.is_empty())
        .map(PathBuf::from)
        .collect();
    roots.push(PathBuf::from("/usr/local/cuda"));
    let mut versioned: Vec<PathBuf> = std::fs::read_dir("/usr/local")
        .into_iter()
        .flatten()
        .flatten()
        .map(|e| e.path())
        .filter(|p| {
            p.file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.starts_with("cuda-"))
        })
        .collect();
    versioned.sort_by_key(|p| std::cmp::Reverse(cuda_dir_version(p)));
    roots.extend(versioned);
    roots.dedup();
    roots
}

/// `(major, minor)` of a `/usr/local/cuda-13.0` style directory, (0, 0) when unnamed.
fn cuda_dir_version(p: &Path) -> (u32, u32) {
    let name = p.file_name().and_then(|n| n.to_str()).unwrap_or("");
    let v = name.trim_start_matches("cuda-");
    let mut it = v.split('.').map(|x| x.parse::<u32>().unwrap_or(0));
    (it.next().unwrap_or(0), it.next().unwrap_or(0))
}

fn load() -> Result<Nvrtc> {
    let mut tried = Vec::new();
    let mut candidates: Vec<String> = Vec::new();
    if let Some(p) = std::env::var_os(NVRTC_LIBRARY_ENV).filter(|p| !p.is_empty()) {
        candidates.push(p.to_string_lossy().into_owned());
    } else {
        candidates.extend(NVRTC_SONAMES.iter().map(|s| s.to_string()));
        for root in cuda_roots() {
            for sub in ["lib64", "lib", "targets/x86_64-linux/lib"] {
                for so in NVRTC_SONAMES {
                    let p = root.join(sub).join(so);
                    if p.exists() {
                        candidates.push(p.to_string_lossy().into_owned());
                    }
                }
            }
        }
    }
    for c in candidates {
        // SAFETY: NVRTC's sonames (found by the dynamic loader), the CUDA installation's
        // copies, or the library the process's environment names (trusted as
        // LD_LIBRARY_PATH is: docs/soundness.md, section 6); loading NVRTC runs no
        // initialisation with preconditions.
        match unsafe { libloading::Library::new(&c) } {
            Ok(lib) => {
                let lib: &'static libloading::Library = Box::leak(Box::new(lib));
                preload_builtins(&c);
                return Nvrtc::resolve(lib, c);
            }
            Err(_) => tried.push(c),
        }
    }
    Err(NvrtcError::NotFound {
        tried: tried.join(", "),
    })
}

/// NVRTC dlopens `libnvrtc-builtins.so.X.Y` by name at compile time; when NVRTC itself was
/// found by path outside the library search path, that lookup fails. Loading the builtins
/// from the same directory first makes the later lookup find the loaded copy.
fn preload_builtins(nvrtc_path: &str) {
    let Some(dir) = Path::new(nvrtc_path)
        .parent()
        .filter(|d| !d.as_os_str().is_empty())
    else {
        return;
    };
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for e in entries.flatten() {
        let name = e.file_name();
        let name = name.to_string_lossy();
        if name.starts_with("libnvrtc-builtins.so.") && !name.contains(".alt.") {
            // SAFETY: the builtins library has no initialisation with preconditions; it is
            // kept loaded for the life of the process.
            if let Ok(lib) = unsafe { libloading::Library::new(e.path()) } {
                std::mem::forget(lib);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn not_found_is_one_line_with_a_fix() {
        let e = NvrtcError::NotFound {
            tried: "libnvrtc.so.13".into(),
        };
        let s = e.to_string();
        assert!(!s.contains('\n'));
        assert!(s.contains("cuda-nvrtc") && s.contains(NVRTC_LIBRARY_ENV));
    }

    #[test]
    fn cuda_directories_sort_by_version() {
        assert_eq!(cuda_dir_version(Path::new("/usr/local/cuda-13.0")), (13, 0));
        assert_eq!(
            cuda_dir_version(Path::new("/usr/local/cuda-12.10")),
            (12, 10)
        );
        assert_eq!(cuda_dir_version(Path::new("/usr/local/cuda")), (0, 0));
    }

    /// NVRTC itself, when installed (CI installs it and sets ERDMA_REQUIRE_NVRTC=1).
    fn nvrtc_or_skip() -> Option<&'static Nvrtc> {
        match Nvrtc::load() {
            Ok(n) => Some(n),
            Err(e) => {
                let required = std::env::var("ERDMA_REQUIRE_NVRTC").is_ok_and(|v| v == "1");
                assert!(!required, "ERDMA_REQUIRE_NVRTC=1 but {e}");
                eprintln!("skipped: {e}");
                None
            }
        }
    }

    const KERNEL: &str = r#"extern "C" __global__ void twice(float* x) { x[threadIdx.x] *= 2; }"#;

    #[test]
    fn compiles_a_cubin_for_a_known_gpu_and_ptx_for_a_newer_one() {
        let Some(nvrtc) = nvrtc_or_skip() else { return };
        assert!(nvrtc.version().is_ok_and(|(major, _)| major >= 11));
        let cubin = nvrtc
            .compile(KERNEL, "twice.cu", &[], &Options::for_arch(9, 0))
            .unwrap();
        assert!(!cubin.is_ptx && cubin.image.starts_with(b"\x7fELF"));
        // A GPU newer than this NVRTC: PTX for the newest architecture it knows, which the
        // driver compiles at load time.
        let ptx = nvrtc
            .compile(KERNEL, "twice.cu", &[], &Options::for_arch(99, 9))
            .unwrap();
        assert!(ptx.is_ptx);
        let text = String::from_utf8_lossy(&ptx.image);
        assert!(
            text.contains(".entry twice") && text.contains(".target sm_"),
            "{text}"
        );
    }

    #[test]
    fn compile_ptx_targets_the_virtual_architecture_asked_for() {
        let Some(nvrtc) = nvrtc_or_skip() else { return };
        let oldest = nvrtc.supported_archs().unwrap()[0] as u32;
        let opts = Options::for_arch(oldest / 10, oldest % 10);
        let ptx = nvrtc.compile_ptx(KERNEL, "twice.cu", &[], &opts).unwrap();
        assert!(ptx.is_ptx && ptx.image.ends_with(&[0]));
        let text = String::from_utf8_lossy(&ptx.image);
        assert!(text.contains(&format!(".target sm_{oldest}\n")), "{text}");
        // The same library, opened by path.
        // SAFETY: the NVRTC `load` found.
        let again = unsafe { Nvrtc::open(Path::new(nvrtc.path())) };
        if Path::new(nvrtc.path()).is_absolute() {
            let again = again.unwrap();
            assert_eq!(again.version().unwrap(), nvrtc.version().unwrap());
        }
        assert!(matches!(
            // SAFETY: no such file: nothing is loaded.
            unsafe { Nvrtc::open(Path::new("/nonexistent/libnvrtc.so.12")) },
            Err(NvrtcError::NotFound { .. })
        ));
    }

    #[test]
    fn in_memory_headers_are_found_and_errors_name_the_line() {
        let Some(nvrtc) = nvrtc_or_skip() else { return };
        let src = "#include <scale.h>\nextern \"C\" __global__ void k(float* x) { x[0] *= SCALE; }";
        let opts = Options::for_arch(9, 0);
        let ok = nvrtc.compile(src, "k.cu", &[("scale.h", "#define SCALE 3.0f\n")], &opts);
        assert!(ok.is_ok(), "{ok:?}");
        let err = nvrtc.compile(
            "__global__ void k() { undefined_name; }",
            "bad.cu",
            &[],
            &opts,
        );
        match err {
            Err(NvrtcError::Compile {
                name,
                first_error,
                log,
            }) => {
                assert_eq!(name, "bad.cu");
                assert!(
                    first_error.contains("bad.cu(1)") && first_error.contains("undefined_name")
                );
                assert!(log.contains("error"));
            }
            other => panic!("expected a compile error, got {other:?}"),
        }
    }

    #[test]
    fn compile_error_names_the_first_error() {
        let e = NvrtcError::Compile {
            name: "k.cu".into(),
            first_error: "k.cu(3): error: identifier \"x\" is undefined".into(),
            log: "k.cu(3): error: identifier \"x\" is undefined\n1 error".into(),
        };
        assert_eq!(
            e.to_string(),
            "NVRTC could not compile k.cu: k.cu(3): error: identifier \"x\" is undefined"
        );
    }
}
