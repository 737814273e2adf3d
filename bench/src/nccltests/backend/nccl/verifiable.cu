// Verifiable data on the GPU: generation (`erdma_verifiable_fill`) and checking
// (`erdma_verifiable_check`) of nccl-tests' inputs and expected results, element for
// element the formulas of bench/src/nccltests/verifiable/ (the host reference, itself a
// bit-exact port of nccl-tests' verifiable.cu). The host resolves which formula applies
// (type, op, rank count) once per range and passes it as a `Formula`; everything here
// is integer arithmetic on element bits, so no float unit or CUDA header is involved
// and the result cannot depend on the GPU.
//
// Not compiled at run time: scripts/gen-verifiable-ptx.sh turns this file into
// verifiable.ptx (NVRTC 12.0, compute_50, PTX ISA 8.0: loads on every driver of CUDA
// 12.0 or newer and every GPU NCCL supports), which is committed and loaded by the
// driver. A test fails when the committed PTX is not what this source compiles to.
//
// Keep the `Formula` layout and the kind numbers in step with
// bench/src/nccltests/verifiable/device.rs.

typedef unsigned long long u64;
typedef long long i64;
typedef unsigned int u32;

enum {
  KIND_INT_COPY = 0,     // mix_bits(seed ^ ix) >> shift & mask
  KIND_INT_HASH = 1,     // integer reduction input
  KIND_RANDOM_FLOAT = 2, // random float (copies, min, max)
  KIND_FLOAT_SUM = 3,    // genInOutFloatSum
  KIND_FLOAT_PROD = 4,   // genInOutFloatProd
  KIND_PREMULSUM = 5,    // genInOutFloatPreMulSum
  KIND_CONST = 6,        // the same bits everywhere (float avg, zeros)
  KIND_REDUCE_INT = 7,   // every rank's integer input reduced in rank order
  KIND_REDUCE_FLOAT = 8, // every rank's random float, min or max
};

enum { OP_SUM = 0, OP_PROD = 1, OP_MAX = 2, OP_MIN = 3, OP_AVG = 4, OP_PREMULSUM = 5 };

enum {
  FLAG_INPUT = 1,        // an input (else the expected output)
  FLAG_W64 = 2,          // mantissa arithmetic in 64 bits (double)
  FLAG_PROD = 4,         // integer input never 0 (prod)
  FLAG_SIGNED = 8,       // signed integer type
  FLAG_WANT_MAX = 16,    // float reduce: max (else min)
  FLAG_NAN_ALL_ONES = 32 // e4m3: only the all-ones magnitude is NaN
};

struct Formula {
  u64 seed;
  u64 bits;      // KIND_CONST: the value; integer kinds: the element mask
  int kind;
  int rank_n;
  int rank_me;
  int exp_bits;  // float kinds
  int mant_bits; // float kinds
  int flags;
  int op;        // KIND_REDUCE_INT
  int shift;     // integer kinds: 64 - element bits
};

__device__ __forceinline__ u64 mix_bits(u64 x) {
  u32 lo = (u32)x, hi = (u32)(x >> 32);
  hi += 1;
  lo ^= hi;
  u64 v = (((u64)hi << 32) | lo) * 0x9e3779b97f4a7c13ull;
  u32 hi2 = (u32)(v >> 32);
  u32 lo2 = (u32)v ^ (hi2 << 16 ^ hi2 >> 16);
  return (v & 0xffffffff00000000ull) | lo2;
}

__device__ __forceinline__ u64 hash_of(u64 a, u64 b) {
  a += 1ull << 32;
  a += b;
  a ^= a >> 32;
  a *= 0x9e3779b97f4a7c13ull;
  a += b >> 16 ^ b << 48;
  a ^= a >> 32;
  return a * 0xc4ceb9fe1a85ec53ull;
}

__device__ __forceinline__ u64 umul32hi(u32 a, u32 b) { return __umulhi(a, b); }

// A shift by 32 is 0 here, as on the GPU nccl-tests runs on (and Rust's checked_shr).
__device__ __forceinline__ u32 shr32(u32 x, int s) { return s >= 32 ? 0u : x >> s; }

__device__ __forceinline__ int shuffle_rank(int rank_n, int rank_me, u64 *rng) {
  u32 a = (u32)*rng, b = (u32)(*rng >> 32);
  *rng = mix_bits(*rng);
  u32 r = (u32)rank_me;
  u32 n2 = shr32(0x7fffffffu, __clz(rank_n));
  if (r <= n2) {
    r = (r * (a | 1) + b) & n2;
    r = ((r * r + r) / 2) & n2;
    r += (u32)rank_n - (n2 + 1);
  } else {
    r -= n2 + 1;
  }
  if (r <= n2) {
    r = (r * (b | 1) + a) & n2;
    r = ((r * r + r) / 2) & n2;
  }
  return (int)r;
}

__device__ __forceinline__ u64 width_mask(bool w64) { return w64 ? ~0ull : 0xffffffffull; }

// genSumXY's first half: draws y, mixes rng.
__device__ __forceinline__ void gen_sum_y(bool w64, u64 *rng, u64 y_max, u64 *y, bool avoid_y) {
  u64 m = width_mask(w64);
  u64 y_min = ((y_max + 1) & m) / 2;
  u64 bump = avoid_y ? 0 : 1;
  u64 d = (w64 ? __umul64hi(*rng, y_max / 2 + bump)
               : umul32hi((u32)*rng, (u32)(y_max / 2 + bump))) & m;
  u64 base = avoid_y ? ((*y + 1) & m) : y_min;
  u64 y1 = (base + d) & m;
  bool out = avoid_y && (y1 < y_min || y_max < y1);
  *y = (y1 - (out ? y_max / 2 : 0)) & m;
  *rng = mix_bits(*rng);
}

__device__ __forceinline__ u64 part_sum(u64 pn, u64 y_max, u64 m) {
  u64 s = y_max <= 0x7fffffffull ? (u64)((u32)pn * ((u32)pn + 1) / 2) : pn * (pn + 1) / 2;
  return s & m;
}

// genSumXY's second half as written (any y).
__device__ u64 sum_part_general(bool w64, int rank_n, int rank_me, u64 y_max, u64 y) {
  u64 m = width_mask(w64);
  u64 r = (u32)rank_me, rn = (u32)rank_n;
  u64 pn = rn == 1 ? 1 : (2 * (y / rn) - 1) & m;
  if (pn == 0) pn = 1;
  if (rn < pn) pn = rn;
  u64 p_sum = part_sum(pn, y_max, m);
  u64 per = p_sum != 0 ? y / p_sum : m;
  u32 s = (u32)(per < rn / pn ? per : rn / pn);
  u64 x = 0;
  if (s != 0) {
    u32 q = (u32)r / s;
    if ((u64)q < pn) x = 1 + (u64)q;
  }
  if (r == ((rn - 1) & 0xffffffffull)) x = (x + (y - (u64)s * p_sum)) & m;
  return x;
}

// genSumXY's second half: rank_me's part of y, without divisions when every
// partition has one rank (all but small y).
__device__ __forceinline__ u64 sum_part(bool w64, int rank_n, int rank_me, u64 y_max, u64 y) {
  u64 r = (u32)rank_me, rn = (u32)rank_n;
  if (y >= rn && y < (rn / 2 + 1) * rn) return sum_part_general(w64, rank_n, rank_me, y_max, y);
  u64 m = width_mask(w64);
  u64 p_sum = part_sum(rn, y_max, m);
  u64 s = (p_sum == 0 || y >= p_sum) ? 1 : 0;
  u64 x = (s == 1 && r < rn) ? 1 + r : 0;
  if (r == ((rn - 1) & 0xffffffffull)) x = (x + (y - s * p_sum)) & m;
  return x;
}

__device__ __forceinline__ u64 ix_mix(i64 ix, int rank_me) {
  return (u64)ix ^ ((u64)ix << 16) ^ (u64)(i64)rank_me;
}

__device__ __forceinline__ u64 mant_mask(const Formula &f) { return (1ull << f.mant_bits) - 1; }

__device__ __forceinline__ u64 make_float(const Formula &f, u64 sign, u64 exp, u64 mant) {
  return ((sign << f.exp_bits | exp) << f.mant_bits) | mant;
}

__device__ __forceinline__ u64 normalized(const Formula &f, u64 sign, int exp, u64 mant) {
  if (mant == 0) return 0;
  int shift = __clzll((i64)mant) - (64 - f.mant_bits - 1);
  u64 m = mant << shift;
  return make_float(f, sign, (u64)(i64)(exp - shift), m & mant_mask(f));
}

__device__ __forceinline__ u64 int_hash(const Formula &f, int rank_me, i64 ix) {
  u64 bits = f.bits & hash_of(ix_mix(ix, rank_me), f.seed);
  return (f.flags & FLAG_PROD) && bits == 0 ? 1 : bits;
}

__device__ __forceinline__ u64 random_float(const Formula &f, int rank_me, i64 ix) {
  u64 rng = hash_of(ix_mix(ix, rank_me), f.seed);
  u64 sign = rng & 1;
  rng ^= rng >> 1;
  u64 exp = rng & ((1ull << (f.exp_bits - 1)) - 1);
  exp += 1ull << (f.exp_bits - 2);
  rng ^= rng >> f.exp_bits;
  return make_float(f, sign, exp, rng & mant_mask(f));
}

__device__ __forceinline__ u64 float_sum(const Formula &f, i64 ix) {
  bool w64 = f.flags & FLAG_W64;
  int rank_n = f.rank_n;
  int exp_lo = 1 + f.mant_bits;
  int exp_hi = (1 << f.exp_bits) - 1;
  u64 max_mant = 2 * mant_mask(f) + 1;
  u64 rng = hash_of(f.seed, (u64)ix);
  u64 y_sign = rng & 1, x_sign = y_sign;
  int xy_exp = exp_lo + (int)umul32hi((u32)(rng >> 32), (u32)(exp_hi - exp_lo));
  rng = mix_bits(rng);
  int me = shuffle_rank(rank_n, f.rank_me, &rng);
  u64 y0 = 0;
  gen_sum_y(w64, &rng, max_mant, &y0, false);
  int part_n = (rank_n + 1) / 2;
  u64 part_y = y0;
  if (rank_n / 2 != 0) {
    u64 y1 = y0;
    gen_sum_y(w64, &rng, max_mant, &y1, true);
    y_sign ^= y0 < y1 ? 1 : 0;
    y0 = y0 < y1 ? y1 - y0 : y0 - y1;
    x_sign ^= (u64)(me % 2);
    if (me % 2 != 0) {
      part_n = rank_n / 2;
      part_y = y1;
    }
  }
  if (f.flags & FLAG_INPUT) {
    u64 x = sum_part(w64, part_n, me / 2, max_mant, part_y);
    return normalized(f, x_sign, xy_exp, x);
  }
  return normalized(f, y_sign, xy_exp, y0);
}

__device__ __forceinline__ u64 float_prod(const Formula &f, i64 ix) {
  int rank_n = f.rank_n;
  u64 rng = hash_of(f.seed, (u64)ix);
  int me = shuffle_rank(rank_n, f.rank_me, &rng);
  u64 y_sign = (u64)((rank_n / 2) % 2);
  u64 x_sign = (u64)(me % 2);
  u64 max_exp = (1ull << (f.exp_bits - 1)) - 1;
  u64 y_exp = 0;
  gen_sum_y(false, &rng, max_exp, &y_exp, false);
  u64 bias = (u64)((1 << (f.exp_bits - 1)) - 1);
  u64 y_mant = rng & mant_mask(f);
  if (y_mant == 0) y_mant = 1;
  if (f.flags & FLAG_INPUT) {
    u64 x_exp = sum_part(false, rank_n, me, max_exp, y_exp);
    return make_float(f, x_sign, (x_exp + bias) & 0xffffffffull, me == 0 ? y_mant : 0);
  }
  return make_float(f, y_sign, (y_exp + bias) & 0xffffffffull, y_mant);
}

__device__ __forceinline__ u64 float_premulsum(const Formula &f, i64 ix) {
  bool w64 = f.flags & FLAG_W64;
  int rank_n = f.rank_n, rank_me = f.rank_me;
  int exp_lo = 1 + f.mant_bits;
  int exp_hi = (1 << f.exp_bits) - 1;
  u64 max_mant = 2 * mant_mask(f) + 1;
  u64 rng = hash_of(f.seed, (u64)ix);
  u64 y_sign = rng & 1;
  int y_exp = exp_lo + (int)umul32hi((u32)(rng >> 32), (u32)(exp_hi - exp_lo));
  rng = mix_bits(rng);
  int sub0 = shuffle_rank((rank_n + 1) / 2, rank_me / 2, &rng);
  int sub1 = shuffle_rank(rank_n / 2, rank_me / 2, &rng);
  int n0 = (rank_n + 1) / 2, n1 = rank_n / 2;
  u64 y0 = 0, y1 = 0;
  gen_sum_y(w64, &rng, max_mant >> 1, &y0, false);
  if (n1 != 0) gen_sum_y(w64, &rng, max_mant >> 2, &y1, false);
  u64 mant;
  if (!(f.flags & FLAG_INPUT)) {
    mant = y0 + 2 * y1;
  } else if (rank_me % 2 == 0) {
    mant = sum_part(w64, n0, sub0, max_mant >> 1, y0);
  } else if (n1 != 0) {
    mant = sum_part(w64, n1, sub1, max_mant >> 2, y1);
  } else {
    mant = 0;
  }
  return normalized(f, y_sign, y_exp, mant);
}

// An unsigned key ordered as the integer element's value.
__device__ __forceinline__ u64 int_key(const Formula &f, u64 x) {
  return (x << f.shift) ^ ((f.flags & FLAG_SIGNED) ? 1ull << 63 : 0);
}

template <int OP>
__device__ __forceinline__ u64 reduce_int(const Formula &f, i64 ix) {
  u64 m = f.bits;
  u64 acc = int_hash(f, 0, ix);
  for (int r = 1; r < f.rank_n; r++) {
    u64 x = int_hash(f, r, ix);
    if (OP == OP_SUM || OP == OP_AVG) acc = (acc + x) & m;
    if (OP == OP_PREMULSUM) acc = (acc + ((x * (u64)(1 + (r & 1))) & m)) & m;
    if (OP == OP_PROD) acc = (acc * x) & m;
    if (OP == OP_MAX) acc = int_key(f, acc) < int_key(f, x) ? x : acc;
    if (OP == OP_MIN) acc = int_key(f, acc) < int_key(f, x) ? acc : x;
  }
  if (OP == OP_AVG && f.rank_n > 0) {
    if (f.flags & FLAG_SIGNED) {
      i64 v = (i64)(acc << f.shift) >> f.shift;
      acc = (u64)(v / (i64)f.rank_n) & m;
    } else {
      acc = acc / (u64)f.rank_n;
    }
  }
  return acc;
}

// Sign-magnitude float bits as an ordered integer; *nan when a NaN.
__device__ __forceinline__ i64 float_key(const Formula &f, u64 bits, bool *nan) {
  u64 sign_bit = 1ull << (f.exp_bits + f.mant_bits);
  u64 inf = ((1ull << f.exp_bits) - 1) << f.mant_bits;
  u64 mag = bits & (sign_bit - 1);
  *nan = (f.flags & FLAG_NAN_ALL_ONES) ? mag == (inf | mant_mask(f)) : mag > inf;
  i64 neg = (bits & sign_bit) ? -1 : 0;
  return ((i64)mag ^ neg) - neg;
}

__device__ __forceinline__ u64 reduce_float(const Formula &f, i64 ix) {
  bool want_max = f.flags & FLAG_WANT_MAX;
  u64 acc = random_float(f, 0, ix);
  for (int r = 1; r < f.rank_n; r++) {
    u64 b = random_float(f, r, ix);
    bool an, bn;
    i64 x = float_key(f, acc, &an), y = float_key(f, b, &bn);
    bool wins = want_max ? x > y : x < y;
    acc = (wins && !an && !bn) ? acc : b;
  }
  return acc;
}

// The element at index ix, as little-endian bits (only the element's bytes count).
// The kind is the same for every element of a launch, so the switch never diverges.
__device__ __noinline__ u64 element(const Formula &f, i64 ix) {
  switch (f.kind) {
  case KIND_INT_COPY: return mix_bits(f.seed ^ (u64)ix) >> f.shift & f.bits;
  case KIND_INT_HASH: return int_hash(f, f.rank_me, ix);
  case KIND_RANDOM_FLOAT: return random_float(f, f.rank_me, ix);
  case KIND_FLOAT_SUM: return float_sum(f, ix);
  case KIND_FLOAT_PROD: return float_prod(f, ix);
  case KIND_PREMULSUM: return float_premulsum(f, ix);
  case KIND_REDUCE_FLOAT: return reduce_float(f, ix);
  case KIND_REDUCE_INT:
    switch (f.op) {
    case OP_SUM: return reduce_int<OP_SUM>(f, ix);
    case OP_PROD: return reduce_int<OP_PROD>(f, ix);
    case OP_MAX: return reduce_int<OP_MAX>(f, ix);
    case OP_MIN: return reduce_int<OP_MIN>(f, ix);
    case OP_AVG: return reduce_int<OP_AVG>(f, ix);
    default: return reduce_int<OP_PREMULSUM>(f, ix);
    }
  default: return f.bits;
  }
}

// What follows is GPU-only; the formulas above also compile as host C++ (a unit test
// compares them with the Rust reference without a GPU).
#ifndef ERDMA_VERIFIABLE_HOST

__device__ __forceinline__ void store(void *out, u64 i, int ws, u64 v) {
  switch (ws) {
  case 1: ((unsigned char *)out)[i] = (unsigned char)v; break;
  case 2: ((unsigned short *)out)[i] = (unsigned short)v; break;
  case 4: ((u32 *)out)[i] = (u32)v; break;
  default: ((u64 *)out)[i] = v; break;
  }
}

__device__ __forceinline__ u64 load(const void *p, u64 i, int ws) {
  switch (ws) {
  case 1: return ((const unsigned char *)p)[i];
  case 2: return ((const unsigned short *)p)[i];
  case 4: return ((const u32 *)p)[i];
  default: return ((const u64 *)p)[i];
  }
}

// Writes elements ix0..ix0+n of the formula (ws bytes each) to out.
extern "C" __global__ void erdma_verifiable_fill(void *out, u64 n, i64 ix0, Formula f, int ws) {
  u64 stride = (u64)gridDim.x * blockDim.x;
  for (u64 i = (u64)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride)
    store(out, i, ws, element(f, ix0 + (i64)i));
}

// Adds to *wrong_total the number of the n elements at got whose bits differ from the
// formula's (elements ix0..) by more than tol, compared as unsigned integers of the
// element width (as verifiable.cu compares).
extern "C" __global__ void erdma_verifiable_check(const void *got, u64 n, i64 ix0, Formula f,
                                                  int ws, u64 tol, u64 *wrong_total) {
  u64 stride = (u64)gridDim.x * blockDim.x, wrong = 0;
  u64 mask = ws >= 8 ? ~0ull : (1ull << (8 * ws)) - 1;
  for (u64 i = (u64)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {
    u64 a = load(got, i, ws), b = element(f, ix0 + (i64)i) & mask;
    wrong += (a < b ? b - a : a - b) > tol ? 1 : 0;
  }
  for (int d = 16; d > 0; d /= 2) wrong += __shfl_down_sync(0xffffffffu, wrong, d);
  if ((threadIdx.x & 31) == 0 && wrong != 0) atomicAdd(wrong_total, wrong);
}

#endif // ERDMA_VERIFIABLE_HOST
