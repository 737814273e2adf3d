//! The NCCL backend (the default) where NCCL or the GPU driver is missing:
//! a one-line error and nccl-tests' exit status from every `*_perf`
//! binary, never a panic. The "NCCL present, no driver" case loads a stub
//! library built here with the C compiler (skipped when there is none, or
//! when this machine has a GPU driver).
#![allow(clippy::disallowed_methods)] // a test reads and writes its files directly

mod nccltests_common;
use erdma::nccl::Version;
use nccltests_common::*;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// The NCCL 2.19 entry points `erdma::nccl` requires.
const REQUIRED: [&str; 27] = [
    "ncclGetUniqueId",
    "ncclCommInitRankConfig",
    "ncclCommInitAll",
    "ncclCommFinalize",
    "ncclCommDestroy",
    "ncclCommAbort",
    "ncclGetErrorString",
    "ncclGetLastError",
    "ncclCommGetAsyncError",
    "ncclCommCount",
    "ncclCommCuDevice",
    "ncclCommUserRank",
    "ncclRedOpCreatePreMulSum",
    "ncclRedOpDestroy",
    "ncclReduce",
    "ncclBroadcast",
    "ncclAllReduce",
    "ncclReduceScatter",
    "ncclAllGather",
    "ncclSend",
    "ncclRecv",
    "ncclGroupStart",
    "ncclGroupEnd",
    "ncclCommRegister",
    "ncclCommDeregister",
    "ncclMemAlloc",
    "ncclMemFree",
];

/// Asserts a failed run printed exactly nccl-tests' two failure lines and
/// no panic, and returns the first.
fn one_line_error(o: &Output, status: i32, what: &str) -> String {
    let out = stdout(o);
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(status), "{what}:\n{out}{err}");
    assert!(!err.contains("panicked"), "{what}: {err}");
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines.len(), 2, "{what}:\n{out}");
    assert!(
        lines[1].contains(": Test failure common.cu:1454"),
        "{what}:\n{out}"
    );
    lines[0].to_string()
}

#[test]
fn missing_nccl_is_an_nccl_failure_in_every_binary() {
    for name in ALL {
        let o = run(
            name,
            &["-b", "8", "-e", "8"],
            &[("ERDMA_NCCL_LIBRARY", "/nonexistent/libnccl.so.2")],
        );
        let line = one_line_error(&o, 3, name);
        assert!(
            line.contains(": Test NCCL failure dlopen '/nonexistent/libnccl.so.2 not found: "),
            "{name}: {line}"
        );
        assert!(line.contains("hint: install the NCCL runtime"), "{line}");
    }
}

#[test]
fn a_library_that_is_not_nccl_is_named() {
    let o = run(
        "all_reduce_perf",
        &[],
        &[("ERDMA_NCCL_LIBRARY", "libc.so.6")],
    );
    let line = one_line_error(&o, 3, "libc as NCCL");
    assert!(
        line.contains("libc.so.6 is not a usable NCCL library: it lacks ncclGetVersion"),
        "{line}"
    );
}

/// Builds a stub NCCL reporting `version` (every other entry point
/// returns ncclSuccess and does nothing); None without a C compiler.
fn stub_nccl(version: i32) -> Option<PathBuf> {
    let dir = std::env::temp_dir().join(format!(
        "nccltests-stub-nccl-{}-{version}",
        std::process::id()
    ));
    std::fs::create_dir_all(&dir).ok()?;
    let mut src = format!("int ncclGetVersion(int* v) {{ *v = {version}; return 0; }}\n");
    for f in REQUIRED {
        src.push_str(&format!("int {f}(void) {{ return 0; }}\n"));
    }
    let c = dir.join("stub.c");
    std::fs::write(&c, src).ok()?;
    let lib = dir.join("libnccl.so.2");
    let built = Command::new("cc")
        .args(["-shared", "-fPIC", "-o"])
        .arg(&lib)
        .arg(&c)
        .status()
        .ok()?;
    built.success().then_some(lib)
}

fn gpu_driver_present() -> bool {
    erdma::cuda::is_available()
}

fn path_str(p: &Path) -> &str {
    p.to_str().expect("utf-8 temp path")
}

#[test]
fn nccl_present_but_no_driver_is_a_cuda_failure() {
    if gpu_driver_present() {
        eprintln!("skipped: this machine has a GPU driver");
        return;
    }
    let Some(lib) = stub_nccl(22803) else {
        eprintln!("skipped: no C compiler to build the stub NCCL");
        return;
    };
    for name in ["all_reduce_perf", "alltoall_perf"] {
        let o = run(name, &[], &[("ERDMA_NCCL_LIBRARY", path_str(&lib))]);
        let line = one_line_error(&o, 2, name);
        assert!(
            line.contains(": Test CUDA failure cudaGetDeviceCount '"),
            "{name}: {line}"
        );
    }
}

#[test]
fn option_parsing_follows_the_loaded_nccl_version() {
    if gpu_driver_present() {
        eprintln!("skipped: this machine has a GPU driver");
        return;
    }
    let (Some(v219), Some(v228)) = (stub_nccl(21903), stub_nccl(22803)) else {
        eprintln!("skipped: no C compiler to build the stub NCCL");
        return;
    };
    // NCCL 2.19 has no fp8: nccl-tests falls back to float with a note.
    let o = run(
        "all_reduce_perf",
        &["-d", "f8e4m3", "-R", "2"],
        &[("ERDMA_NCCL_LIBRARY", path_str(&v219))],
    );
    let out = stdout(&o);
    assert!(
        out.starts_with(
            "invalid type f8e4m3, defaulting to float .. \nOption -R 2 (symmetric) is not supported before NCCL 2.27. Defaulting to local registration\n"
        ),
        "{out}"
    );
    assert_eq!(o.status.code(), Some(2), "{out}");
    let o = run(
        "all_reduce_perf",
        &["-d", "f8e4m3", "-R", "2"],
        &[("ERDMA_NCCL_LIBRARY", path_str(&v228))],
    );
    let out = stdout(&o);
    assert!(!out.contains("invalid type"), "{out}");
    assert!(!out.contains("Option -R 2"), "{out}");
    // A library older than 2.19 is refused by name.
    let Some(v218) = stub_nccl(21805) else { return };
    let o = run(
        "all_reduce_perf",
        &[],
        &[("ERDMA_NCCL_LIBRARY", path_str(&v218))],
    );
    let line = one_line_error(&o, 3, "NCCL 2.18");
    assert!(
        line.contains("is NCCL 2.18.5, older than the required 2.19.0"),
        "{line}"
    );
}

/// The same with NVIDIA's real libraries (`ERDMA_TEST_NCCL_LIBS`, `VERSION=PATH`
/// entries separated by `:`, set by scripts/test.sh): what each release lacks
/// is refused or replaced the way nccl-tests does it, before any GPU is needed.
#[test]
fn option_parsing_with_real_nccl_releases() {
    if gpu_driver_present() {
        eprintln!("skipped: this machine has a GPU driver");
        return;
    }
    let Ok(list) = std::env::var("ERDMA_TEST_NCCL_LIBS") else {
        eprintln!("skipped: ERDMA_TEST_NCCL_LIBS is not set (scripts/test.sh sets it)");
        return;
    };
    let entries: Vec<&str> = list.split(':').filter(|e| !e.is_empty()).collect();
    assert!(!entries.is_empty(), "ERDMA_TEST_NCCL_LIBS lists no library");
    for entry in entries {
        let (release, path) = entry.split_once('=').expect("VERSION=PATH");
        let want: Version = release.parse().expect("ERDMA_TEST_NCCL_LIBS: a version");
        let at_least = |minor: u32| want >= Version::new(2, minor, 0);
        let env = [("ERDMA_NCCL_LIBRARY", path)];
        let o = run(
            "all_reduce_perf",
            &["-d", "f8e4m3", "-R", "2", "-x", "2"],
            &env,
        );
        let out = stdout(&o);
        assert_eq!(o.status.code(), Some(2), "{release}: {out}");
        assert!(
            out.contains(": Test CUDA failure cudaGetDeviceCount '"),
            "{release}: {out}"
        );
        let said = |s: &str| out.contains(s);
        assert_eq!(
            !said("invalid type f8e4m3, defaulting to float"),
            at_least(24),
            "{release}: {out}"
        );
        assert_eq!(
            !said("Defaulting to local registration"),
            at_least(27),
            "{release}: {out}"
        );
        assert_eq!(
            !said("Option -x (cta_policy) 2 is not supported before NCCL 2.28. Ignoring"),
            at_least(28),
            "{release}: {out}"
        );
        let o = run("all_reduce_perf", &["-D", "1", "-R", "2"], &env);
        let err = String::from_utf8_lossy(&o.stderr);
        if at_least(28) {
            assert_eq!(o.status.code(), Some(2), "{release}: {err}");
        } else {
            assert_eq!(o.status.code(), Some(255), "{release}: {err}");
            assert_eq!(
                err,
                "Option -D (device implementation) requires NCCL >= 2.28.0\n"
            );
        }
    }
}
