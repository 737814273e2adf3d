// all_reduce over NCCL's device API (NCCL 2.28 nccl_device.h): the kernels
// behind `all_reduce_perf -D 1..4`, the same algorithms nccl-tests 2.19.6
// runs for those numbers.
//
// This file is compiled at run time by NVRTC against the nccl_device.h of the
// NCCL that is installed (see device.rs), so the ncclDevComm layout always
// matches the library that fills it in. Every kernel takes nccl-tests'
// arguments: (send window, send offset, recv window, recv offset, count,
// root, ncclDevComm by value), runs on -V CTAs of 512 threads, and brackets
// its work with an LSA barrier on both sides.
//
// -D 1: each thread sums one element over all LSA peers and stores the sum
//       to every peer (grid-stride loop over elements).
// -D 2: the same with 16-byte vectors, 128 bytes in flight per thread.
// -D 3: multimem ld_reduce/st through the NVLS multicast address (float,
//       double).
// -D 4: -D 3 with float4 vectors.
//
// Entry points are extern "C" so the host finds them by a plain name:
// ar_<impl>_<type>, for example ar_lsa_f32.

#include <nccl.h>
// NVRTC differs from nvcc in two ways that nccl_device.h (2.28) trips on:
// - the header declares the host half of the API (ncclDevCommCreate, ...)
//   with an explicit __host__, which NVRTC refuses; with __host__ empty they
//   are plain declarations (device ones under -default-device), never called;
// - nccl::utility::loadConst<T> declares arrays of sizeof(T)/16 elements in
//   branches dead for small T, zero-length arrays that nvcc's host compiler
//   accepts and NVRTC does not; explicit specializations for the three types
//   the header loads (declared before its first use) avoid instantiating them.
#undef __host__
#define __host__
#include <nccl_device/utility.h>
namespace nccl { namespace utility {
template <> __device__ __forceinline__ char* loadConst<char*>(char* const* p) {
  return (char*)__ldg((const unsigned long long*)p);
}
template <> __device__ __forceinline__ uint32_t loadConst<uint32_t>(const uint32_t* p) {
  return __ldg((const unsigned int*)p);
}
template <> __device__ __forceinline__ int loadConst<int>(const int* p) { return __ldg(p); }
} }
#include <nccl_device.h>
#include <cuda/std/cstddef>  // offsetof

namespace {

constexpr int kWarp = 32;

// The widest built-in vector of T (as close to 16 bytes as CUDA has).
template <typename T> struct Wide { using Type = T; };
template <> struct Wide<float> { using Type = float4; };
template <> struct Wide<double> { using Type = double2; };
template <> struct Wide<int8_t> { using Type = char4; };
template <> struct Wide<uint8_t> { using Type = uchar4; };
template <> struct Wide<int32_t> { using Type = int4; };
template <> struct Wide<uint32_t> { using Type = uint4; };

template <typename T> __device__ __forceinline__ T add(T a, T b) { return a + b; }
__device__ __forceinline__ float4 add(float4 a, float4 b) {
  return make_float4(a.x + b.x, a.y + b.y, a.z + b.z, a.w + b.w);
}
__device__ __forceinline__ double2 add(double2 a, double2 b) {
  return make_double2(a.x + b.x, a.y + b.y);
}
__device__ __forceinline__ char4 add(char4 a, char4 b) {
  return make_char4(a.x + b.x, a.y + b.y, a.z + b.z, a.w + b.w);
}
__device__ __forceinline__ uchar4 add(uchar4 a, uchar4 b) {
  return make_uchar4(a.x + b.x, a.y + b.y, a.z + b.z, a.w + b.w);
}
__device__ __forceinline__ int4 add(int4 a, int4 b) {
  return make_int4(a.x + b.x, a.y + b.y, a.z + b.z, a.w + b.w);
}
__device__ __forceinline__ uint4 add(uint4 a, uint4 b) {
  return make_uint4(a.x + b.x, a.y + b.y, a.z + b.z, a.w + b.w);
}

template <typename T> __device__ __forceinline__ T zero() { return T{}; }

// Elements to take one at a time before `soff` reaches a V boundary; all of
// them (no vectors) when the receive side is out of phase with the send side
// or the offsets are not whole elements.
template <typename T, typename V>
__device__ __forceinline__ size_t vectorHead(size_t soff, size_t roff, size_t count) {
  if (soff % sizeof(T) != 0 || soff % sizeof(V) != roff % sizeof(V)) return count;
  const size_t head = (sizeof(V) - soff % sizeof(V)) % sizeof(V) / sizeof(T);
  return head < count ? head : count;
}

// Where this thread starts and how far the grid strides: ranks interleave
// their CTAs so that every rank works on a different slice.
struct Grid {
  int tid, nthreads;
  __device__ Grid(const ncclDevComm& c)
      : tid(threadIdx.x + blockDim.x * (c.rank + blockIdx.x * c.nRanks)),
        nthreads(blockDim.x * gridDim.x * c.nRanks) {}
};

template <typename T>
__device__ __forceinline__ T* peer(ncclWindow_t w, size_t offset, int p) {
  return (T*)ncclGetLsaPointer(w, offset, p);
}

// Elements [first + tid, end) stepping by nthreads, one at a time.
template <typename T>
__device__ void lsaScalar(ncclWindow_t send, size_t soff, ncclWindow_t recv, size_t roff,
                          size_t first, size_t end, const Grid& g, int nRanks) {
  for (size_t i = first + g.tid; i < end; i += g.nthreads) {
    T v = zero<T>();
    for (int p = 0; p < nRanks; p++) v = add(v, peer<T>(send, soff, p)[i]);
    for (int p = 0; p < nRanks; p++) peer<T>(recv, roff, p)[i] = v;
  }
}

template <typename T>
__device__ void lsa(ncclWindow_t send, size_t soff, ncclWindow_t recv, size_t roff, size_t count,
                    const ncclDevComm& c) {
  ncclLsaBarrierSession<ncclCoopCta> bar{ncclCoopCta(), c, ncclTeamLsa(c), c.lsaBarrier, blockIdx.x};
  bar.sync(ncclCoopCta(), cuda::memory_order_acquire);
  lsaScalar<T>(send, soff, recv, roff, 0, count, Grid(c), c.nRanks);
  bar.sync(ncclCoopCta(), cuda::memory_order_release);
}

template <typename T>
__device__ void lsaVector(ncclWindow_t send, size_t soff, ncclWindow_t recv, size_t roff,
                          size_t count, const ncclDevComm& c) {
  using V = typename Wide<T>::Type;
  constexpr int kLanes = sizeof(V) / sizeof(T);
  constexpr int kUnroll = 128 / sizeof(V);
  ncclLsaBarrierSession<ncclCoopCta> bar{ncclCoopCta(), c, ncclTeamLsa(c), c.lsaBarrier, blockIdx.x};
  bar.sync(ncclCoopCta(), cuda::memory_order_acquire);

  const Grid g(c);
  const int nRanks = c.nRanks;
  // Leading elements before the first vector boundary go one at a time,
  // then whole vectors, then the trailing elements. (nccl-tests computes the
  // head as (soff % sizeof(V)) / sizeof(T), which is right only for offset
  // 0, all it ever passes; -u passes others.)
  const size_t head = vectorHead<T, V>(soff, roff, count);
  const size_t nvec = (count - head) / kLanes;
  const size_t tail = (count - head) % kLanes;
  const size_t vsoff = soff + head * sizeof(T), vroff = roff + head * sizeof(T);
  const int chunks = nvec / ((size_t)g.nthreads * kUnroll);
  // Each warp owns kUnroll consecutive 32-vector runs of a chunk.
  const int lane = (g.tid / kWarp) * kWarp * kUnroll + g.tid % kWarp;

  if (head > 0) lsaScalar<T>(send, soff, recv, roff, 0, head, g, nRanks);
  // Whole chunks without bounds checks, then the partial chunk with them (one
  // loop for both costs registers and a stack spill).
  for (int chunk = 0; chunk < chunks; chunk++) {
    const size_t base = (size_t)chunk * g.nthreads * kUnroll + lane;
    V v[kUnroll];
#pragma unroll
    for (int u = 0; u < kUnroll; u++) v[u] = zero<V>();
    for (int p = 0; p < nRanks; p++) {
      const V* src = peer<V>(send, vsoff, p);
#pragma unroll
      for (int u = 0; u < kUnroll; u++) v[u] = add(v[u], src[base + u * kWarp]);
    }
    for (int p = 0; p < nRanks; p++) {
      V* dst = peer<V>(recv, vroff, p);
#pragma unroll
      for (int u = 0; u < kUnroll; u++) dst[base + u * kWarp] = v[u];
    }
  }
  {
    const size_t base = (size_t)chunks * g.nthreads * kUnroll + lane;
    V v[kUnroll];
#pragma unroll
    for (int u = 0; u < kUnroll; u++) v[u] = zero<V>();
    for (int p = 0; p < nRanks; p++) {
      const V* src = peer<V>(send, vsoff, p);
#pragma unroll
      for (int u = 0; u < kUnroll; u++) {
        const size_t i = base + u * kWarp;
        if (i < nvec) v[u] = add(v[u], src[i]);
      }
    }
    for (int p = 0; p < nRanks; p++) {
      V* dst = peer<V>(recv, vroff, p);
#pragma unroll
      for (int u = 0; u < kUnroll; u++) {
        const size_t i = base + u * kWarp;
        if (i < nvec) dst[i] = v[u];
      }
    }
  }
  if (tail > 0) {
    const size_t start = head + nvec * kLanes;
    lsaScalar<T>(send, soff, recv, roff, start, start + tail, g, nRanks);
  }
  bar.sync(ncclCoopCta(), cuda::memory_order_release);
}

// multimem.ld_reduce (sum over every LSA peer, done by the NVSwitch) and
// multimem.st (store to every peer), sm_90 and later. Older GPUs have no
// multimem (ncclDevCommCreate refuses it first); their build traps.
template <typename V> __device__ __forceinline__ V mmSum(const void* a);
template <typename V> __device__ __forceinline__ void mmStore(void* a, V v);
#if __CUDA_ARCH__ >= 900
template <> __device__ __forceinline__ float mmSum<float>(const void* a) {
  float r;
  asm volatile("multimem.ld_reduce.global.add.f32 %0, [%1];" : "=f"(r) : "l"(a) : "memory");
  return r;
}
template <> __device__ __forceinline__ double mmSum<double>(const void* a) {
  double r;
  asm volatile("multimem.ld_reduce.global.add.f64 %0, [%1];" : "=d"(r) : "l"(a) : "memory");
  return r;
}
template <> __device__ __forceinline__ float4 mmSum<float4>(const void* a) {
  float4 r;
  asm volatile("multimem.ld_reduce.global.add.v4.f32 {%0, %1, %2, %3}, [%4];"
               : "=f"(r.x), "=f"(r.y), "=f"(r.z), "=f"(r.w) : "l"(a) : "memory");
  return r;
}
template <> __device__ __forceinline__ void mmStore<float>(void* a, float v) {
  asm volatile("multimem.st.global.f32 [%0], %1;" : : "l"(a), "f"(v) : "memory");
}
template <> __device__ __forceinline__ void mmStore<double>(void* a, double v) {
  asm volatile("multimem.st.global.f64 [%0], %1;" : : "l"(a), "d"(v) : "memory");
}
template <> __device__ __forceinline__ void mmStore<float4>(void* a, float4 v) {
  asm volatile("multimem.st.global.v4.f32 [%0], {%1, %2, %3, %4};"
               : : "l"(a), "f"(v.x), "f"(v.y), "f"(v.z), "f"(v.w) : "memory");
}
#else
template <typename V> __device__ __forceinline__ V mmSum(const void*) { __trap(); return V{}; }
template <typename V> __device__ __forceinline__ void mmStore(void*, V) { __trap(); }
#endif

template <typename T>
__device__ void mmScalar(T* send, T* recv, size_t first, size_t end, const Grid& g) {
  for (size_t i = first + g.tid; i < end; i += g.nthreads) mmStore<T>(recv + i, mmSum<T>(send + i));
}

template <typename T>
__device__ void multimem(ncclWindow_t send, size_t soff, ncclWindow_t recv, size_t roff, size_t count,
                         const ncclDevComm& c) {
  ncclLsaBarrierSession<ncclCoopCta> bar{ncclCoopCta(), c, ncclTeamTagLsa(), blockIdx.x, true};
  bar.sync(ncclCoopCta(), cuda::memory_order_acquire);
  T* s = (T*)ncclGetLsaMultimemPointer(send, soff, c);
  T* r = (T*)ncclGetLsaMultimemPointer(recv, roff, c);
  mmScalar<T>(s, r, 0, count, Grid(c));
  bar.sync(ncclCoopCta(), cuda::memory_order_release);
}

// Vectorized multimem, float only (float4), as nccl-tests has it.
__device__ void multimemVector(ncclWindow_t send, size_t soff, ncclWindow_t recv, size_t roff,
                               size_t count, const ncclDevComm& c) {
  constexpr int kLanes = 4, kUnroll = 128 / sizeof(float4);
  ncclLsaBarrierSession<ncclCoopCta> bar{ncclCoopCta(), c, ncclTeamTagLsa(), blockIdx.x, true};
  bar.sync(ncclCoopCta(), cuda::memory_order_acquire);

  const Grid g(c);
  const size_t head = vectorHead<float, float4>(soff, roff, count);
  const size_t nvec = (count - head) / kLanes;
  const size_t tail = (count - head) % kLanes;
  float* s = (float*)ncclGetLsaMultimemPointer(send, soff, c);
  float* r = (float*)ncclGetLsaMultimemPointer(recv, roff, c);
  float4* sv = (float4*)(s + head);
  float4* rv = (float4*)(r + head);
  const int chunks = nvec / ((size_t)g.nthreads * kUnroll);
  const int lane = (g.tid / kWarp) * kWarp * kUnroll + g.tid % kWarp;

  if (head > 0) mmScalar<float>(s, r, 0, head, g);
  for (int chunk = 0; chunk < chunks; chunk++) {
    const size_t base = (size_t)chunk * g.nthreads * kUnroll + lane;
    float4 v[kUnroll];
#pragma unroll
    for (int u = 0; u < kUnroll; u++) v[u] = mmSum<float4>(sv + base + u * kWarp);
#pragma unroll
    for (int u = 0; u < kUnroll; u++) mmStore<float4>(rv + base + u * kWarp, v[u]);
  }
  {
    const size_t base = (size_t)chunks * g.nthreads * kUnroll + lane;
    float4 v[kUnroll];
#pragma unroll
    for (int u = 0; u < kUnroll; u++) {
      const size_t i = base + u * kWarp;
      if (i < nvec) v[u] = mmSum<float4>(sv + i);
    }
#pragma unroll
    for (int u = 0; u < kUnroll; u++) {
      const size_t i = base + u * kWarp;
      if (i < nvec) mmStore<float4>(rv + i, v[u]);
    }
  }
  if (tail > 0) mmScalar<float>(s, r, head + nvec * kLanes, head + nvec * kLanes + tail, g);
  bar.sync(ncclCoopCta(), cuda::memory_order_release);
}

}  // namespace

#define ARGS ncclWindow_t send, size_t soff, ncclWindow_t recv, size_t roff, size_t count, int root, ncclDevComm comm
#define ENTRY(name, body) extern "C" __global__ void name(ARGS) { body(send, soff, recv, roff, count, comm); }
// Vectors of 1-byte types unroll to 32 char4 per thread: unbounded they need
// 173 registers, more than a 512-thread CTA may have (nccl-tests' own int8
// kernel needs 252 and cannot launch); bounded they fit, spilling a little.
// Only these get the bound: it changes the others' register allocation, and
// they are meant to compile as nccl-tests' do.
#define ENTRY_512(name, body) extern "C" __global__ void __launch_bounds__(512) name(ARGS) { body(send, soff, recv, roff, count, comm); }
#define LSA_TYPE(suffix, T) \
  ENTRY(ar_lsa_##suffix, lsa<T>) \
  ENTRY(ar_lsa_vec_##suffix, lsaVector<T>)
#define LSA_BYTE_TYPE(suffix, T) \
  ENTRY(ar_lsa_##suffix, lsa<T>) \
  ENTRY_512(ar_lsa_vec_##suffix, lsaVector<T>)

LSA_BYTE_TYPE(i8, int8_t)
LSA_BYTE_TYPE(u8, uint8_t)
LSA_TYPE(i32, int32_t)
LSA_TYPE(u32, uint32_t)
LSA_TYPE(i64, int64_t)
LSA_TYPE(u64, uint64_t)
LSA_TYPE(f16, half)
LSA_TYPE(f32, float)
LSA_TYPE(f64, double)
ENTRY(ar_mm_f32, multimem<float>)
ENTRY(ar_mm_f64, multimem<double>)
ENTRY(ar_mm_vec_f32, multimemVector)

// What the host must know of this NCCL's device-API structures, read from the
// loaded module by device.rs: the header's NCCL version, sizeof(ncclDevComm),
// sizeof(ncclDevCommRequirements), the offsets of the two fields set, and
// sizeof(ncclWindow_vidmem).
extern "C" __device__ unsigned long long erdma_layout[6] = {
    NCCL_VERSION_CODE, sizeof(ncclDevComm), sizeof(ncclDevCommRequirements),
    offsetof(ncclDevCommRequirements, lsaMultimem),
    offsetof(ncclDevCommRequirements, lsaBarrierCount), sizeof(ncclWindow_vidmem)};
// An initialized ncclDevCommRequirements (NCCL 2.29 adds an initializer with
// a magic and a version; 2.28 zero-initializes).
#ifdef NCCL_DEV_COMM_REQUIREMENTS_INITIALIZER
extern "C" __device__ ncclDevCommRequirements erdma_requirements = NCCL_DEV_COMM_REQUIREMENTS_INITIALIZER;
#else
extern "C" __device__ ncclDevCommRequirements erdma_requirements = {};
#endif

// The `fake-devcomm` test hook (hooks.rs): a one-rank device communicator and
// windows over plain device memory, so that the kernels above run where NCCL
// has no symmetric memory (one GPU). Only what they and a one-rank LSA barrier
// read is set: ranks, the LSA team, the barrier handle and its state buffer.
extern "C" __global__ void erdma_fake_window(ncclWindow_vidmem* w, char* base) {
  *w = ncclWindow_vidmem{};
  w->lsaFlatBase = base;
}

extern "C" __global__ void erdma_fake_devcomm(ncclDevComm* c, ncclWindow_vidmem* resource, int nBarriers) {
  *c = ncclDevComm{};
  c->rank = 0;
  c->nRanks = 1;
  c->lsaRank = 0;
  c->lsaSize = 1;
  c->nRanks_rcp32 = c->lsaSize_rcp32 = nccl::utility::idivRcp32(1);
  c->resourceWindow = resource;
  c->resourceWindow_inlined = *resource;
  c->lsaBarrier.bufHandle = 0;
  c->lsaBarrier.nBarriers = nBarriers;
}
