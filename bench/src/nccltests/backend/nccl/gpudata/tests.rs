use std::path::{Path, PathBuf};

use erdma::cuda::nvrtc::{Nvrtc, Options};
use erdma::cuda::{self, Device, DeviceBuffer, Stream};

use super::*;
use crate::nccltests::types::{DataType, ReduceOp};
use crate::nccltests::verifiable::{Gen, tolerance};

/// The NVRTC release the committed PTX is made with: its PTX ISA (8.0) is what drivers
/// of CUDA 12.0 and newer accept.
const PTX_NVRTC: (i32, i32) = (12, 0);
/// The oldest GPUs NCCL's CUDA 12 builds run on (Maxwell).
const PTX_ARCH: (u32, u32) = (5, 0);
/// Environment variable naming that NVRTC library (scripts/test.sh sets it to the
/// wheel scripts/setup.sh unpacks).
const PTX_NVRTC_ENV: &str = "ERDMA_PTX_NVRTC";

fn ptx_path() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("src/nccltests/backend/nccl/verifiable.ptx")
}

/// The committed PTX is what NVRTC 12.0 makes of verifiable.cu today;
/// `ERDMA_BLESS_PTX=1` rewrites it instead (scripts/gen-verifiable-ptx.sh).
#[test]
fn committed_ptx_is_what_the_kernel_source_compiles_to() {
    let committed = PTX.trim_end_matches('\0');
    assert!(
        committed.contains("\n.version 8.0\n") && committed.contains("\n.target sm_50\n"),
        "verifiable.ptx must be PTX ISA 8.0 for sm_50 (drivers of CUDA 12.0+, every GPU NCCL supports)"
    );
    let Some(lib) = std::env::var_os(PTX_NVRTC_ENV).filter(|v| !v.is_empty()) else {
        let required = std::env::var("ERDMA_REQUIRE_NVRTC").is_ok_and(|v| v == "1");
        assert!(
            !required,
            "ERDMA_REQUIRE_NVRTC=1 but {PTX_NVRTC_ENV} names no NVRTC {}.{} (scripts/setup.sh fetches it)",
            PTX_NVRTC.0, PTX_NVRTC.1
        );
        eprintln!("skipped: {PTX_NVRTC_ENV} is not set");
        return;
    };
    // SAFETY: the variable names the NVRTC release scripts/setup.sh fetched.
    let nvrtc = unsafe { Nvrtc::open(Path::new(&lib)) }.expect("NVRTC");
    assert_eq!(
        nvrtc.version().expect("nvrtcVersion"),
        PTX_NVRTC,
        "{PTX_NVRTC_ENV} must name NVRTC {}.{}",
        PTX_NVRTC.0,
        PTX_NVRTC.1
    );
    let opts = Options {
        extra: Vec::new(),
        ..Options::for_arch(PTX_ARCH.0, PTX_ARCH.1)
    };
    let out = nvrtc
        .compile_ptx(SOURCE, "verifiable.cu", &[], &opts)
        .expect("verifiable.cu compiles");
    let fresh = String::from_utf8(out.image).expect("PTX is text");
    let fresh = fresh.trim_end_matches('\0');
    if std::env::var("ERDMA_BLESS_PTX").is_ok_and(|v| v == "1") {
        std::fs::write(ptx_path(), fresh).expect("write verifiable.ptx");
        return;
    }
    assert!(
        fresh == committed,
        "verifiable.ptx is not what verifiable.cu compiles to: run scripts/gen-verifiable-ptx.sh and commit the result"
    );
}

/// A GPU, its stream and the loaded kernels.
fn gpu() -> (Device, Stream, GpuData) {
    let device = Device::new(0).expect("a GPU");
    device.bind().expect("bind");
    let stream = Stream::new(&device).expect("stream");
    let data = GpuData::load(&device, &stream).expect("kernels load");
    (device, stream, data)
}

/// Every generator a run can ask for: inputs of several ranks and the expected result,
/// for every type and op and several rank counts (one rank is the copy formula).
fn generators(seed: u64, ix0: i64) -> Vec<Gen> {
    let mut gens = Vec::new();
    for op in ReduceOp::ALL {
        for rank_n in [1, 2, 3, 8, 13] {
            for rank_me in [0, 1, rank_n - 1].into_iter().filter(|r| *r < rank_n) {
                gens.push(Gen::Input {
                    op,
                    rank_n,
                    rank_me,
                    seed,
                    ix0,
                });
            }
            gens.push(Gen::Expected {
                op,
                rank_n,
                seed,
                ix0,
            });
        }
    }
    gens
}

/// Fills `n` elements at byte `off` of `buf` on the GPU and returns them.
fn fill_on_gpu(
    (stream, data): (&Stream, &GpuData),
    buf: &DeviceBuffer<u8>,
    off: usize,
    dt: DataType,
    g: &Gen,
    n: usize,
) -> Vec<u8> {
    let k = g.kernel(dt);
    let ptr = buf.ptr_at(off).expect("offset");
    // SAFETY: off + n * ws lies inside `buf` (the callers size it so), which outlives the
    // synchronous download below.
    unsafe { data.fill(ptr, n, dt.size(), g.ix0(), &k.device_formula(), stream) }.expect("fill");
    let mut out = vec![0u8; n * dt.size()];
    // SAFETY: as above.
    unsafe { cuda::copy_dtoh_raw(&mut out, ptr, stream) }.expect("download");
    out
}

fn count_on_gpu(
    (stream, data): (&Stream, &GpuData),
    buf: &DeviceBuffer<u8>,
    off: usize,
    dt: DataType,
    g: &Gen,
    n: usize,
    tol: u64,
) -> u64 {
    let k = g.kernel(dt);
    let ptr = buf.ptr_at(off).expect("offset");
    data.reset(stream).expect("reset");
    // SAFETY: the range lies inside `buf`, which outlives the synchronous read below.
    unsafe { data.check(ptr, n, dt.size(), g.ix0(), &k.device_formula(), tol, stream) }
        .expect("check");
    data.wrong(stream).expect("read the count")
}

/// The GPU kernels write exactly the host reference's bytes, and count exactly the
/// elements that differ from it, for every type, op, side, several rank counts, lengths,
/// starting indices (beyond 2^32 too) and unaligned byte offsets.
#[test]
#[ignore = "needs a GPU (scripts/gpu/check-verifiable-gpu.sh runs it on one)"]
fn gpu_generator_and_check_match_the_host_reference() {
    let (device, stream, data) = gpu();
    let ctx = (&stream, &data);
    let lens = [1usize, 7, 1000, 70_001];
    let offsets = [0usize, 8, 24];
    let buf = DeviceBuffer::<u8>::alloc(&device, 70_001 * 8 + 64).expect("alloc");
    let (mut cases, mut elements, mut wrong_found) = (0u64, 0u64, 0u64);
    for (seed, ix0) in [(0x1234_5678_9abc_def0u64, 0i64), (99, 1 << 33 | 5), (7, 17)] {
        for dt in DataType::ALL {
            for g in generators(seed, ix0) {
                let k = g.kernel(dt);
                let tol = match g {
                    Gen::Input { op, .. } | Gen::Expected { op, .. } => tolerance(dt, op),
                };
                for (li, &n) in lens.iter().enumerate() {
                    let off = offsets[li % offsets.len()] / dt.size() * dt.size();
                    let got = fill_on_gpu(ctx, &buf, off, dt, &g, n);
                    let mut want = vec![0u8; n * dt.size()];
                    k.fill(g.ix0(), &mut want);
                    if got != want {
                        let ws = dt.size();
                        let first = (0..n)
                            .find(|&e| got[e * ws..(e + 1) * ws] != want[e * ws..(e + 1) * ws])
                            .unwrap_or(0);
                        panic!(
                            "{dt:?} {g:?} n={n}: element {first}: GPU {:02x?}, host {:02x?}",
                            &got[first * ws..(first + 1) * ws],
                            &want[first * ws..(first + 1) * ws]
                        );
                    }
                    assert_eq!(count_on_gpu(ctx, &buf, off, dt, &g, n, tol), 0);
                    // Alter elements (first, middle, last) in device memory: the GPU count
                    // equals the host reference's.
                    let mut bad = got.clone();
                    for e in [0, n / 2, n - 1] {
                        bad[e * dt.size()] ^= 0x5a;
                    }
                    let ptr = buf.ptr_at(off).expect("offset");
                    // SAFETY: the range lies inside `buf`; the copy waits.
                    unsafe { cuda::copy_htod_raw(ptr, &bad, &stream) }.expect("upload");
                    let host = crate::nccltests::verifiable::count_wrong(dt, tol, &bad, &want);
                    assert_eq!(
                        count_on_gpu(ctx, &buf, off, dt, &g, n, tol),
                        host,
                        "{dt:?} {g:?} n={n}"
                    );
                    assert!(host >= 1, "{dt:?} {g:?} n={n}: corruption not seen");
                    wrong_found += host;
                    cases += 1;
                    elements += n as u64;
                }
            }
        }
    }
    println!(
        "gpu generator == host reference: {cases} cases ({} types x {} ops x inputs/expected of 1-13 ranks x {} lengths x 3 seeds/start indices), {elements} elements, {wrong_found} planted wrong elements all counted",
        DataType::ALL.len(),
        ReduceOp::ALL.len(),
        lens.len()
    );
}

/// verifiable.cu's formulas, compiled as host C++ (with the CUDA intrinsics they use
/// written out), give the host reference's element bits for every type, op, side and
/// rank count: the kernel source is checked without a GPU (the GPU test above checks
/// the compiled PTX on one).
#[test]
fn kernel_formulas_compiled_for_the_host_match_the_reference() {
    use std::io::Write;
    use std::process::{Command, Stdio};
    let cxx = std::env::var("CXX").unwrap_or_else(|_| "c++".into());
    if Command::new(&cxx).arg("--version").output().is_err() {
        eprintln!("skipped: no C++ compiler ({cxx})");
        return;
    }
    const HARNESS: &str = r#"
#include <cstdio>
#define ERDMA_VERIFIABLE_HOST
#define __device__
#define __forceinline__ inline
#define __noinline__
static unsigned __umulhi(unsigned a, unsigned b) { return (unsigned)(((unsigned long long)a * b) >> 32); }
static unsigned long long __umul64hi(unsigned long long a, unsigned long long b) {
  return (unsigned long long)(((unsigned __int128)a * b) >> 64);
}
static int __clz(int x) { return x == 0 ? 32 : __builtin_clz((unsigned)x); }
static int __clzll(long long x) { return x == 0 ? 64 : __builtin_clzll((unsigned long long)x); }
#include "verifiable.cu"
int main() {
  Formula f; long long ix; unsigned long long want, mask; long n = 0, bad = 0;
  while (scanf("%llu %llu %d %d %d %d %d %d %d %d %lld %llu %llu", &f.seed, &f.bits, &f.kind,
               &f.rank_n, &f.rank_me, &f.exp_bits, &f.mant_bits, &f.flags, &f.op, &f.shift, &ix,
               &mask, &want) == 13) {
    unsigned long long got = element(f, ix) & mask;
    n++;
    if (got != want && bad++ < 5)
      printf("kind %d op %d ranks %d/%d ix %lld: got %llx want %llx\n", f.kind, f.op, f.rank_me,
             f.rank_n, ix, got, want);
  }
  printf("%ld %ld\n", n, bad);
  return 0;
}
"#;
    let dir = std::env::temp_dir().join(format!("erdma-verifiable-host-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    std::fs::write(dir.join("verifiable.cu"), SOURCE).expect("write source");
    std::fs::write(dir.join("harness.cpp"), HARNESS).expect("write harness");
    let exe = dir.join("harness");
    let built = Command::new(&cxx)
        .args(["-O1", "-std=c++17", "-w", "-o"])
        .arg(&exe)
        .arg(dir.join("harness.cpp"))
        .output()
        .expect("run the C++ compiler");
    assert!(
        built.status.success(),
        "verifiable.cu does not compile as host C++: {}",
        String::from_utf8_lossy(&built.stderr)
    );
    let mut input = String::new();
    let mut lines = 0u64;
    for (seed, ix0) in [(0x1234_5678_9abc_def0u64, 0i64), (99, 1 << 33 | 5)] {
        for dt in DataType::ALL {
            let mask = u64::MAX >> (64 - 8 * dt.size());
            for g in generators(seed, ix0) {
                let k = g.kernel(dt);
                let f = k.device_formula();
                for ix in g.ix0()..g.ix0() + 64 {
                    input += &format!(
                        "{} {} {} {} {} {} {} {} {} {} {ix} {mask} {}\n",
                        f.seed,
                        f.bits,
                        f.kind,
                        f.rank_n,
                        f.rank_me,
                        f.exp_bits,
                        f.mant_bits,
                        f.flags,
                        f.op,
                        f.shift,
                        k.at(ix) & mask
                    );
                    lines += 1;
                }
            }
        }
    }
    let mut child = Command::new(&exe)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("run the harness");
    let mut stdin = child.stdin.take().expect("stdin");
    let feeder = std::thread::spawn(move || stdin.write_all(input.as_bytes()));
    let out = child.wait_with_output().expect("harness output");
    feeder.join().expect("feeder").expect("write input");
    let _ = std::fs::remove_dir_all(&dir);
    let text = String::from_utf8_lossy(&out.stdout);
    let last = text.lines().last().unwrap_or("");
    assert_eq!(
        last,
        format!("{lines} 0"),
        "host-compiled verifiable.cu differs from the reference:\n{text}"
    );
}
