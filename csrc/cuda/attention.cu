// Gated full attention for decode/verify (T = 1..16 query tokens):
//  attn_prep   : q/k zero-centred RMSNorm, partial interleaved mRoPE, KV append (bf16, int8 or int4 g64).
//  attn_split  : one block per (split, kv head, token); the block streams its chunk of the cache in
//                tiles of 256 positions with an online softmax for the 6 (GQA) query heads of its
//                kv head, so K and V are read once per token for all of them. Variants (set_attn_variant):
//                0-3 attn_split_kernel MODE (see there), 4 attn_split_v4_kernel (flash-decode: per-warp
//                cp.async rings of 16-position chunks, ldmatrix, scores and values on tensor cores); 5 and 6
//                the same with 3 / 4 warps per block (int8 and int4 KV).
//  attn_combine: merges the splits, multiplies by sigmoid(gate), writes fp16 perm8 for o_proj.
// The number of positions per split is derived on the device from kv_start + T, so one captured
// graph serves every context length (blocks past the end exit at once).
#include <stdexcept>
#include <string>

#include "attn_prep.cuh"
#include "common.cuh"
#include "pdl.cuh"
#include "stamps.cuh"
#include "ptx.cuh"
#include "ops.h"

namespace monorail {
namespace {

constexpr int kHd = kPrepDim;  // head_dim this kernel set is built for
constexpr int kGroup = 6;   // query heads per kv head (max)
constexpr int kTile = 256;  // positions per softmax tile

struct PrepArgs {
  const float* qkv; int ldp; AttnDims d;
  const float* q_norm; const float* k_norm; const float* inv_freq; int sec[3];
  const StepInputs* in; float* q_out; char* k_cache; char* v_cache; char* k_scales; char* v_scales;
};

__global__ void __launch_bounds__(kHd) attn_prep_kernel(PrepArgs p) {
  MR_WARP_STAMP(kStampAttnPrep, p.k_cache);
  __shared__ float xs[kHd], red[32], gmax[8];
  const int t = blockIdx.x, i = threadIdx.x;
  // the norm weight, the rotation and the cache slot come from weights and the step's inputs (written by the host
  // before the step): before the wait, so that only the projection row's read follows it
  const PrepConsts c = prep_consts(p.d, blockIdx.y, i, p.q_norm, p.k_norm, p.inv_freq, p.sec, p.in->rope_pos[t]);
  const size_t slot = (size_t)p.in->kv_start + t;
  pdl_wait();
  pdl_trigger();
  const float x = prep_norm_rope(p.qkv + (size_t)t * p.ldp, p.d, i, c, xs, red);
  if (c.kind == 0) {
    p.q_out[((size_t)t * p.d.n_heads + c.head) * kHd + i] = x * rsqrtf((float)kHd);
    return;
  }
  prep_append_kv(x, i, c.kind, c.head, slot, p.d, p.k_cache, p.v_cache, p.k_scales, p.v_scales, gmax);
}

struct SplitArgs {
  const float* q; AttnDims d; const StepInputs* in;
  const char* k_cache; const char* v_cache; const char* k_scales; const char* v_scales;
  float* part;
};

__device__ inline int split_len(int L_all) {
  int s = (L_all + kMaxAttnSplits - 1) / kMaxAttnSplits;
  return max(kTile, (s + kTile - 1) / kTile * kTile);
}

// Raw cache bytes of N consecutive dims of one row (N = 16 for the scores, 8 for the values), loaded first and
// converted later so that several rows' loads are in flight at once. KV: KvFormat.
template <int KV, int N> struct RawDims;
template <> struct RawDims<kKvBf16, 16> { uint4 a, b; };
template <> struct RawDims<kKvBf16, 8> { uint4 a; };
template <> struct RawDims<kKvInt8, 16> { uint4 a; __half s; };
template <> struct RawDims<kKvInt8, 8> { uint2 a; __half s; };
template <> struct RawDims<kKvInt4, 16> { uint2 a; __half s; };
template <> struct RawDims<kKvInt4, 8> { uint32_t a; __half s; };
template <int KV> using Raw16 = RawDims<KV, 16>;
template <int KV> using Raw8 = RawDims<KV, 8>;

// bytes of a cache row (one kv head of one position) and the byte offset of dim `dim0` in it
template <int KV> __host__ __device__ constexpr int row_bytes() { return KV == kKvBf16 ? 2 * kHd : KV == kKvInt8 ? kHd : kHd / 2; }
template <int KV> __device__ inline size_t dim_byte(int dim0) { return KV == kKvBf16 ? 2 * dim0 : KV == kKvInt8 ? dim0 : dim0 / 2; }

template <int KV, int N>
__device__ inline void load_dims(const char* cache, const char* scales, size_t rowidx, int dim0, RawDims<KV, N>& r) {
  const char* p = cache + rowidx * row_bytes<KV>() + dim_byte<KV>(dim0);
  r.a = __ldg(reinterpret_cast<const decltype(r.a)*>(p));
  if constexpr (KV == kKvBf16) {
    if constexpr (N == 16) r.b = __ldg(reinterpret_cast<const uint4*>(p) + 1);
  } else {
    r.s = reinterpret_cast<const __half*>(scales)[rowidx * (kHd / 64) + dim0 / 64];
  }
}
// The 32-bit words of a RawDims, lowest dims first.
__device__ inline void raw_words(const uint4& a, uint32_t* w) { w[0] = a.x; w[1] = a.y; w[2] = a.z; w[3] = a.w; }
__device__ inline void raw_words(const uint2& a, uint32_t* w) { w[0] = a.x; w[1] = a.y; }
__device__ inline void raw_words(const uint32_t& a, uint32_t* w) { w[0] = a; }
template <int KV, int N>
__device__ inline void unpack_dims(const RawDims<KV, N>& r, float (&v)[N]) {
  constexpr int kBits = KV == kKvBf16 ? 16 : KV == kKvInt8 ? 8 : 4;
  uint32_t w[N * kBits / 32];
  raw_words(r.a, w);
  if constexpr (KV == kKvBf16) {
    if constexpr (N == 16) raw_words(r.b, w + 4);
#pragma unroll
    for (int j = 0; j < N / 2; ++j) {
      v[2 * j] = __uint_as_float(w[j] << 16);
      v[2 * j + 1] = __uint_as_float(w[j] & 0xFFFF0000u);
    }
  } else if constexpr (KV == kKvInt8) {
    const float s = __half2float(r.s);
#pragma unroll
    for (int j = 0; j < N; ++j) v[j] = float((int8_t)((w[j >> 2] >> ((j & 3) * 8)) & 0xFF)) * s;
  } else {  // nibble j of the little-endian words is dim j; code - 8 is the quantized value
    const float s = __half2float(r.s);
#pragma unroll
    for (int j = 0; j < N; ++j) v[j] = float((int)((w[j >> 3] >> ((j & 7) * 4)) & 0xF) - 8) * s;
  }
}

// QSMEM: the 6 query heads live in shared memory (read as float4) instead of 96 registers per lane,
// trading shared-memory reads for occupancy (bench/decode.py times both).
__device__ inline uint32_t h2_bits(__half2 h) { return *reinterpret_cast<uint32_t*>(&h); }
// two bf16 (one 32-bit word) -> half2 (exact inside the fp16 range)
__device__ inline uint32_t bf16x2_to_h2(uint32_t w) {
  return h2_bits(__floats2half2_rn(__uint_as_float(w << 16), __uint_as_float(w & 0xFFFF0000u)));
}
// two int8 (bytes 2*sel, 2*sel+1 of w) times a scale -> half2: 0x64 | (c + 128) is 1024 + c + 128 in fp16
__device__ inline uint32_t i8x2_to_h2(uint32_t w, int sel, __half2 scale) {
  const uint32_t x = w ^ 0x80808080u;
  const uint32_t h = __byte_perm(x, 0x64646464u, sel ? 0x4342 : 0x4140);
  __half2 v = __hsub2(*reinterpret_cast<const __half2*>(&h), __floats2half2_rn(1152.f, 1152.f));
  return h2_bits(__hmul2(v, scale));
}

// MODE 0: query heads in registers, CUDA-core dot products (half-warp per position).
// MODE 1: query heads in shared memory (fewer registers, shared-memory bound).
// MODE 3: as 2, and the values too: P (fp16) x V (staged to shared memory as fp16, read with
//         ldmatrix.trans), each warp owning 64 output dims, so no cross-warp reduction is needed.
// MODE 2: scores on tensor cores: mma m16n8k16 with the 6 query heads as rows of A (fp16) and 8
//         cache positions as columns of B (K converted to fp16). The dims of a k-step are permuted
//         identically in A and B so each thread's B fragments come from one 16-byte load per 32 dims.
// KV: KvFormat. int4 runs MODE 0 and 1 only (the CUDA-core paths through load_dims/unpack_dims above).
template <int KV, int MODE>
__global__ void __launch_bounds__(128) attn_split_kernel(SplitArgs a) {
  MR_WARP_STAMP(kStampAttnSplit, a.k_cache);
  static_assert(KV != kKvInt4 || MODE <= 1, "int4 KV: attention variants 0 and 1 only (and 4)");
  constexpr bool INT8 = KV == kKvInt8;  // the MODE 2/3 paths: bf16 or int8
  constexpr bool QSMEM = MODE == 1;
  constexpr int KU = 4;  // positions per half-warp per score iteration (8 rows of K in flight per warp)
  constexpr int VU = 8;  // positions per warp per value iteration (8 rows of V in flight per warp)
  __shared__ float ps[kGroup][kTile];
  __shared__ float mstate[kGroup], lstate[kGroup], alpha_s[kGroup];
  const int split = blockIdx.x, kvh = blockIdx.y, t = blockIdx.z;
  const int T = a.in->T, nkv = a.d.n_kv_heads, nh = a.d.n_heads;
  const int group = nh / nkv;
  const int L_all = a.in->kv_start + T;
  const int L = a.in->kv_start + t + 1;  // causal: slots 0 .. kv_start + t
  const int slen = split_len(L_all);
  const int p0 = split * slen, p1 = min(p0 + slen, L);
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  float* out = a.part + (((size_t)t * nh + kvh * group) * kMaxAttnSplits + split) * (kHd + 2);
  const size_t head_stride = (size_t)kMaxAttnSplits * (kHd + 2);
  if (p0 >= p1) {
    if (threadIdx.x < group) {
      out[threadIdx.x * head_stride + kHd] = -INFINITY;
      out[threadIdx.x * head_stride + kHd + 1] = 0.f;
    }
    return;
  }
  // scores: half-warp per position, lane16 owns dims lane16*16 .. +16; q in registers
  const int hw = lane >> 4, l16 = lane & 15;
  __shared__ float4 qs4[QSMEM ? kGroup : 1][kHd / 4];
  float qr[MODE == 0 ? kGroup : 1][16];
  if (MODE >= 2) {
  } else if (QSMEM) {
    for (int e = threadIdx.x; e < kGroup * kHd; e += blockDim.x) {
      const int g = e / kHd, dd = e % kHd;
      reinterpret_cast<float*>(&qs4[0][0])[e] = g < group ? a.q[((size_t)t * nh + kvh * group + g) * kHd + dd] : 0.f;
    }
    __syncthreads();
  } else {
#pragma unroll
    for (int g = 0; g < (MODE == 0 ? kGroup : 1); ++g)
#pragma unroll
      for (int j = 0; j < 16; ++j)
        qr[g][j] = g < group ? a.q[((size_t)t * nh + kvh * group + g) * kHd + l16 * 16 + j] : 0.f;
  }
  // MODE 3: value accumulators of the MMA (rows g8; rows g8 + 8 are padding) and the staged V tile
  constexpr int kVSub = 64;
  __shared__ __align__(16) __half vs[MODE == 3 ? kVSub : 1][kHd + 8];  // +8: rows 528 B apart, no bank conflicts
  float od[MODE == 3 ? 8 : 1][4] = {};
  // values: lane owns dims lane*8 .. +8
  float acc[MODE == 3 ? 1 : kGroup][8];
#pragma unroll
  for (int g = 0; g < (MODE == 3 ? 1 : kGroup); ++g)
#pragma unroll
    for (int j = 0; j < 8; ++j) acc[g][j] = 0.f;
  if (threadIdx.x < kGroup) { mstate[threadIdx.x] = -INFINITY; lstate[threadIdx.x] = 0.f; }

  // MODE 2: A fragments of the query heads (rows g < group; rows g + 8 are zero), k-step j = 2p + h
  // covers physical dims 32p + 8 tig + 4h + {0,1} (fragment "lo") and + {2,3} ("hi").
  const int g8 = lane >> 2, tig = lane & 3;
  uint32_t qa_lo[MODE >= 2 ? 16 : 1], qa_hi[MODE >= 2 ? 16 : 1];
  if constexpr (MODE >= 2) {
    const float* qrow = a.q + ((size_t)t * nh + kvh * group + min(g8, group - 1)) * kHd;
#pragma unroll
    for (int j = 0; j < 16; ++j) {
      const int d0 = 32 * (j >> 1) + 8 * tig + 4 * (j & 1);
      const bool ok = g8 < group;
      qa_lo[j] = h2_bits(__floats2half2_rn(ok ? qrow[d0] : 0.f, ok ? qrow[d0 + 1] : 0.f));
      qa_hi[j] = h2_bits(__floats2half2_rn(ok ? qrow[d0 + 2] : 0.f, ok ? qrow[d0 + 3] : 0.f));
    }
  }

  for (int tile0 = p0; tile0 < p1; tile0 += kTile) {
    const int n = min(kTile, p1 - tile0);
    if constexpr (MODE >= 2) {
      // each warp takes n-tiles of 8 positions, two at a time (16 rows' loads in flight per warp)
      for (int nt = warp * 2; nt * 8 < n; nt += 8) {
        float d[2][4] = {{0.f, 0.f, 0.f, 0.f}, {0.f, 0.f, 0.f, 0.f}};
#pragma unroll
        for (int u = 0; u < 2; ++u) {
          const int pi = min((nt + u) * 8 + g8, n - 1);
          const size_t rowidx = (size_t)(tile0 + pi) * nkv + kvh;
          if constexpr (!INT8) {
            uint4 raw[8];
            const uint4* kp = reinterpret_cast<const uint4*>(a.k_cache + rowidx * kHd * 2) + tig;
#pragma unroll
            for (int p = 0; p < 8; ++p) raw[p] = __ldg(kp + 4 * p);  // dims 32p + 8 tig .. +7
#pragma unroll
            for (int j = 0; j < 16; ++j) {
              const uint4& r = raw[j >> 1];
              const uint32_t wlo = (j & 1) ? r.z : r.x, whi = (j & 1) ? r.w : r.y;
              mma16816<true>(d[u], qa_lo[j], 0u, qa_hi[j], 0u, bf16x2_to_h2(wlo), bf16x2_to_h2(whi));
            }
          } else {
            uint2 raw[8];
            const uint2* kp = reinterpret_cast<const uint2*>(a.k_cache + rowidx * kHd) + tig;
#pragma unroll
            for (int p = 0; p < 8; ++p) raw[p] = __ldg(kp + 4 * p);
            const uint2 sc = __ldg(reinterpret_cast<const uint2*>(a.k_scales + rowidx * (kHd / 64) * 2));
            const __half sh[4] = {__ushort_as_half((unsigned short)(sc.x & 0xFFFF)),
                                  __ushort_as_half((unsigned short)(sc.x >> 16)),
                                  __ushort_as_half((unsigned short)(sc.y & 0xFFFF)),
                                  __ushort_as_half((unsigned short)(sc.y >> 16))};
#pragma unroll
            for (int j = 0; j < 16; ++j) {
              const int p = j >> 1;
              const __half2 s2 = __half2half2(sh[p >> 1]);
              const uint32_t w = (j & 1) ? raw[p].y : raw[p].x;  // dims 32p + 8tig + 4h .. +3
              mma16816<true>(d[u], qa_lo[j], 0u, qa_hi[j], 0u, i8x2_to_h2(w, 0, s2), i8x2_to_h2(w, 1, s2));
            }
          }
        }
        // d[u][0..1]: head g8, positions (nt + u) * 8 + 2 tig + {0, 1}
        if (g8 < group) {
#pragma unroll
          for (int u = 0; u < 2; ++u)
#pragma unroll
            for (int c = 0; c < 2; ++c) {
              const int pi = (nt + u) * 8 + 2 * tig + c;
              if (pi < n) ps[g8][pi] = d[u][c];
            }
        }
      }
    } else
    // each block iteration covers 4 warps x 2 halves x KU positions; loop bounds are warp-uniform
    for (int base = warp * 2 * KU; base < n; base += 4 * 2 * KU) {
      Raw16<KV> r[KU];
#pragma unroll
      for (int u = 0; u < KU; ++u) {
        const int pi = min(base + 2 * u + hw, n - 1);
        load_dims<KV, 16>(a.k_cache, a.k_scales, (size_t)(tile0 + pi) * nkv + kvh, l16 * 16, r[u]);
      }
#pragma unroll
      for (int u = 0; u < KU; ++u) {
        float kv[16];
        unpack_dims<KV, 16>(r[u], kv);
        float sc[kGroup];
#pragma unroll
        for (int g = 0; g < kGroup; ++g) {
          float s = 0.f;
          if (QSMEM) {
#pragma unroll
            for (int j4 = 0; j4 < 4; ++j4) {
              const float4 q4 = qs4[g][l16 * 4 + j4];
              s = fmaf(q4.x, kv[4 * j4], s);
              s = fmaf(q4.y, kv[4 * j4 + 1], s);
              s = fmaf(q4.z, kv[4 * j4 + 2], s);
              s = fmaf(q4.w, kv[4 * j4 + 3], s);
            }
          } else {
#pragma unroll
            for (int j = 0; j < 16; ++j) s = fmaf(qr[MODE == 0 ? g : 0][j], kv[j], s);
          }
#pragma unroll
          for (int o = 8; o > 0; o >>= 1) s += __shfl_xor_sync(0xffffffffu, s, o);
          sc[g] = s;
        }
        const int pi = base + 2 * u + hw;
        if (l16 == 0 && pi < n)
#pragma unroll
          for (int g = 0; g < kGroup; ++g) ps[g][pi] = sc[g];
      }
    }
    __syncthreads();
    // online softmax bookkeeping, one warp per head
    for (int g = warp; g < group; g += 4) {
      float m = -INFINITY;
      for (int pi = lane; pi < n; pi += 32) m = fmaxf(m, ps[g][pi]);
      m = warp_max(m);
      const float mnew = fmaxf(mstate[g], m);
      float l = 0.f;
      for (int pi = lane; pi < n; pi += 32) {
        float e = __expf(ps[g][pi] - mnew);
        ps[g][pi] = e;
        l += e;
      }
      l = warp_sum(l);
      if (lane == 0) {
        const float alpha = __expf(mstate[g] - mnew);  // exp(-inf) = 0 on the first tile
        alpha_s[g] = alpha;
        lstate[g] = lstate[g] * alpha + l;
        mstate[g] = mnew;
      }
    }
    __syncthreads();
    if constexpr (MODE == 3) {
      // values on tensor cores: warp w owns dims 64w .. 64w+63 (8 n-tiles); V staged in shared
      // memory as fp16, 64 positions at a time, and read transposed with ldmatrix
      const float al = g8 < group ? alpha_s[g8] : 0.f;
#pragma unroll
      for (int nt = 0; nt < 8; ++nt) { od[nt][0] *= al; od[nt][1] *= al; }
      for (int sub = 0; sub < n; sub += kVSub) {
        const int m = min(kVSub, n - sub);
#pragma unroll 4
        for (int e = threadIdx.x; e < kVSub * (kHd / 8); e += 128) {
          const int r = e / (kHd / 8), c8 = e % (kHd / 8);
          uint4 h = make_uint4(0u, 0u, 0u, 0u);
          if (r < m) {
            const size_t rowidx = (size_t)(tile0 + sub + r) * nkv + kvh;
            if constexpr (!INT8) {
              const uint4 v = __ldg(reinterpret_cast<const uint4*>(a.v_cache + (rowidx * kHd + c8 * 8) * 2));
              h = make_uint4(bf16x2_to_h2(v.x), bf16x2_to_h2(v.y), bf16x2_to_h2(v.z), bf16x2_to_h2(v.w));
            } else {
              const uint2 v = __ldg(reinterpret_cast<const uint2*>(a.v_cache + rowidx * kHd + c8 * 8));
              const __half2 s2 = __half2half2(reinterpret_cast<const __half*>(a.v_scales)[rowidx * (kHd / 64) + c8 / 8]);
              h = make_uint4(i8x2_to_h2(v.x, 0, s2), i8x2_to_h2(v.x, 1, s2), i8x2_to_h2(v.y, 0, s2), i8x2_to_h2(v.y, 1, s2));
            }
          }
          *reinterpret_cast<uint4*>(&vs[r][c8 * 8]) = h;
        }
        __syncthreads();
#pragma unroll
        for (int ks = 0; ks < kVSub / 16; ++ks) {
          const int k0 = sub + ks * 16;
          auto pv = [&](int pi) { return (g8 < group && pi < n) ? ps[g8][pi] : 0.f; };
          const uint32_t a0 = h2_bits(__floats2half2_rn(pv(k0 + 2 * tig), pv(k0 + 2 * tig + 1)));
          const uint32_t a2 = h2_bits(__floats2half2_rn(pv(k0 + 2 * tig + 8), pv(k0 + 2 * tig + 9)));
#pragma unroll
          for (int nt = 0; nt < 8; ++nt) {
            uint32_t b0, b1;
            const __half* addr = &vs[ks * 16 + (lane & 15)][warp * 64 + nt * 8];
            const uint32_t sa = (uint32_t)__cvta_generic_to_shared(addr);
            asm volatile("ldmatrix.sync.aligned.m8n8.x2.trans.shared.b16 {%0, %1}, [%2];\n"
                         : "=r"(b0), "=r"(b1) : "r"(sa));
            mma16816<true>(od[nt], a0, 0u, a2, 0u, b0, b1);
          }
        }
        __syncthreads();
      }
    } else {
#pragma unroll
    for (int g = 0; g < kGroup; ++g) {
      const float al = g < group ? alpha_s[g] : 0.f;
#pragma unroll
      for (int j = 0; j < 8; ++j) acc[g][j] *= al;
    }
    for (int base = warp * VU; base < n; base += 4 * VU) {
      Raw8<KV> r[VU];
#pragma unroll
      for (int u = 0; u < VU; ++u) {
        const int pi = min(base + u, n - 1);
        load_dims<KV, 8>(a.v_cache, a.v_scales, (size_t)(tile0 + pi) * nkv + kvh, lane * 8, r[u]);
      }
#pragma unroll
      for (int u = 0; u < VU; ++u) {
        if (base + u >= n) break;
        float vv[8];
        unpack_dims<KV, 8>(r[u], vv);
#pragma unroll
        for (int g = 0; g < kGroup; ++g) {
          const float pg = g < group ? ps[g][base + u] : 0.f;
#pragma unroll
          for (int j = 0; j < 8; ++j) acc[g][j] = fmaf(pg, vv[j], acc[g][j]);
        }
      }
    }
    }  // MODE != 3
    __syncthreads();
  }
  if constexpr (MODE == 3) {
    // each warp holds whole dims: row g8 (a query head), dims 64 warp + 8 nt + 2 tig + {0, 1}
    if (g8 < group) {
#pragma unroll
      for (int nt = 0; nt < 8; ++nt) {
        const int dd = warp * 64 + nt * 8 + 2 * tig;
        out[g8 * head_stride + dd] = od[nt][0];
        out[g8 * head_stride + dd + 1] = od[nt][1];
      }
    }
    if (threadIdx.x < group) {
      out[threadIdx.x * head_stride + kHd] = mstate[threadIdx.x];
      out[threadIdx.x * head_stride + kHd + 1] = lstate[threadIdx.x];
    }
    return;
  }
  // sum the 4 warps' accumulators through shared memory, 128 dims at a time (ps is free now)
  float* red = &ps[0][0];
  for (int half = 0; half < 2; ++half) {
    for (int w = 0; w < 4; ++w) {
      if (warp == w && (lane >> 4) == half) {
#pragma unroll
        for (int g = 0; g < kGroup; ++g)
#pragma unroll
          for (int j = 0; j < 8; ++j) {
            float* dst = red + g * 128 + (lane & 15) * 8 + j;
            *dst = (w == 0 ? 0.f : *dst) + acc[g][j];
          }
      }
      __syncthreads();
    }
    for (int e = threadIdx.x; e < group * 128; e += blockDim.x) {
      const int g = e / 128, dd = e % 128;
      out[g * head_stride + half * 128 + dd] = red[g * 128 + dd];
    }
    __syncthreads();
  }
  if (threadIdx.x < group) {
    out[threadIdx.x * head_stride + kHd] = mstate[threadIdx.x];
    out[threadIdx.x * head_stride + kHd + 1] = lstate[threadIdx.x];
  }
}

// ------------------------------------------------------------------------------------------------
// Variant 4: flash-decode split kernel built for issue efficiency (both products on tensor cores).
//
// Grid (T, kv heads, kMaxAttnSplits): the blocks of the T tokens of one (kv head, split) are adjacent,
// so for T > 1 they run together and share the split's K/V through L2. Each block covers the same
// positions as variants 0-3 (split_len on the device, blocks past the end exit at once) and writes the
// same partials (unnormalised accumulator, running max in natural-log units, running sum).
// Inside a block, kV4Warps warps each stream their own chunks of 16 positions (chunk c goes to warp
// c % kV4Warps) through a private kV4Stages-deep cp.async ring in shared memory, with their own
// online softmax (base 2): no block barrier in the main loop, only __syncwarp. The warps are merged
// once at the end through shared memory.
//
// Products (mma.sync m16n8k16, fp32 accumulate; PTX ISA fragments, g = lane / 4, c = lane % 4:
//   A 16x16 row: a0 (g, 2c..2c+1), a1 (g+8, 2c..), a2 (g, 2c+8..2c+9), a3 (g+8, 2c+8..)
//   B 16x8 col : b0 (k 2c..2c+1, n g), b1 (k 2c+8..2c+9, n g); C 16x8: c0,c1 (g, 2c..), c2,c3 (g+8, 2c..);
//   lower-indexed element in the low 16 bits):
//  scores S = Q K^T : M = query heads (rows g < group; the rest zero), N = 8 positions, K = dims.
//                     B fragments come from ldmatrix (non-trans) of the K rows.
//  values O^T = V^T P^T : M = 16 dims, N = the 8 heads, K = 16 positions. The C fragment of the two
//                     score n-tiles of a chunk (head g, positions 2c.., 8+2c..) is exactly the B
//                     fragment of P^T (k = positions 2c.., 2c+8.., n = head g): no shuffles. The A
//                     fragments (V^T) come from ldmatrix.trans of the V rows. Lane (g, c) accumulates
//                     heads 2c, 2c+1 of 32 dims (16 m-tiles x 2 rows): 64 fp32 registers.
// int8 cache (fp16 mma):
//  K: ldmatrix of 8 rows x 16 bytes gives lane (g, c) bytes 4c..4c+3 of position g, i.e. dims
//     16 s + 4c + {0..3} of k-step s; the query fragments use the same permutation (a0 = dims +0,+1,
//     a2 = +2,+3). Codes become h = 1152 + code in fp16 with one LOP3 and two PRMT per 4 codes
//     (0x64 | (code ^ 0x80)); the 1152 offset is removed after the product: per 64-dim group g,
//     score += kscale[pos, g] * (sum_d q_d h_d - 1152 * sum_d q_d) (exact fp16 products, fp32 sums),
//     so neither the subtraction nor the scale touches the codes.
//  V: ldmatrix.trans of 8 rows x 16 bytes gives lane (g, c) the 16-bit pairs (dims 2g, 2g+1) of
//     positions 2c and 2c+1: bytes (p0 d0, p0 d1, p1 d0, p1 d1). PRMT with 0x64 builds the half2
//     (p0, p1) for dim d0 (A row g) and d1 (A row g + 8); minus 1152, times the half2 of the two
//     positions' group scales (fp16, as variants 0-3 dequantize). m-tile t holds dims 16 t .. 16 t + 15
//     (row g = dim 16 t + 2 g, row g + 8 = dim 16 t + 2 g + 1), all inside group t / 4.
// bf16 cache (bf16 mma, no conversion of the cache at all): q and P are split into bf16 hi + lo parts
//  (two mma each) so that their rounding stays near fp32 (2^-17) instead of bf16's 2^-9.
// int4 cache (fp16 mma, the int8 scheme with nibbles). Codes become fp16 without shifts per nibble:
//  (w & 0x000F000F) | 0x64006400 is the half2 (1024 + n0, 1024 + n4) of nibbles 0 and 4 of w, and
//  (w & 0x00F000F0) | 0x64006400 is (1024 + 16 n1, 1024 + 16 n5): nibbles 1 and 5 at 16 times the step,
//  still exact (fp16 spacing is 1 in [1024, 2048)). w >> 8 gives nibbles 2, 6 and 3, 7 the same way:
//  one shift and four LOP3 per 8 codes. n = code + 8, so lo = 1032 + code and hi = 1152 + 16 code.
//  K: ldmatrix of 8 rows x 16 bytes gives lane (g, c) bytes 4c..4c+3 of a 32-dim segment s of
//     position g, i.e. dims 32 s + 8 c + {0..7}: two k-steps. k-step 2 s + h takes b0 = dims
//     (+2h, +2h+4) (lo) and b1 = (+2h+1, +2h+5) (hi); the query fragments pair the same dims, with the
//     hi ones pre-divided by 16 (exact in fp16 down to 2^-14), so every product is q_d (1032 + code_d)
//     or (q_d / 16)(1152 + 16 code_d) = q_d code_d + 72 q_d, exact in fp32. The offsets are folded after
//     the product as for int8: per group, corr = 1032 sum(lo fragments) + 1152 sum(hi fragments).
//  V: ldmatrix.trans gives lane (g, c) the 16-bit element g of a segment (dims 32 s + 4 g + {0..3}) of
//     positions 2c and 2c + 1: bits 0-15 one position, 16-31 the other, so the two LOP3 forms give
//     A-fragment half2s (p0, p1) of dims 4g (lo) and 4g + 1 (hi) directly (w >> 8: 4g + 2, 4g + 3).
//     m-tile 2 s + j: row g = dim 32 s + 4 g + 2 j (lo: (h - 1032) * scale), row g + 8 = the next dim
//     (hi: (h - 1152) * scale = 16 code scale, i.e. 16 times the dequantized value exactly, fp16 scaling
//     by a power of two); the rows g + 8 of the accumulator are divided by 16 when written.
// Shared memory: rows of 128 B (int4) / 256 B (int8) / 512 B (bf16), 16-byte chunks XOR-swizzled by
// (row & 7) so the 8 rows of every ldmatrix matrix hit 8 distinct bank groups. int8 stage: K 4 KB | V 4 KB
// | K scales 128 B | V scales 128 B; int4 stage: K 2 KB | V 2 KB | the same scales; bf16 stage: K 8 KB |
// V 8 KB. Rows past the split's end are zero-filled by cp.async (src-size 0) and their scores masked to
// -inf.
// ------------------------------------------------------------------------------------------------
constexpr int kV4Chunk = 16;  // positions per chunk
// NWo / So (0: the defaults below) override the warps per block and the ring depth (variants 5 and 6).
template <int KV, int NWo = 0, int So = 0> struct V4Cfg {
  static constexpr bool Q = KV != kKvBf16;  // quantized cache: fp16 mma, group scales in each stage
  static constexpr int kWarps = NWo ? NWo : Q ? 2 : 1;
  // int4 stages are half of int8's bytes: 5 of them keep about the bytes in flight per warp of int8's 3
  // (4 x 4352 B vs 2 x 8448 B outstanding while one stage is consumed)
  static constexpr int kStages = So ? So : KV == kKvInt4 ? 5 : 3;
  static constexpr int kRowBytes = row_bytes<KV>();
  static constexpr int kKVBytes = kV4Chunk * kRowBytes;                   // one of K / V per stage
  static constexpr int kStageBytes = 2 * kKVBytes + (Q ? 2 * kV4Chunk * 8 : 0);
  static constexpr int kWarpBytes = kStages * kStageBytes;
  static constexpr int kSmem = kWarps * kWarpBytes;  // int8 50688 B, int4 43520 B, bf16 49152 B
  static_assert(kWarps == 1 || kWarpBytes >= 64 * 32 * 4, "merge buffer must fit in a warp's ring");
};

// cp.async, ldmatrix and the m16n8k16 mma: ptx.cuh
__device__ inline float v4_ex2(float x) {  // 2^x; -inf -> +0
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
  return y;
}
__device__ inline uint32_t v4_bf2(float lo, float hi) {
  __nv_bfloat162 h = __floats2bfloat162_rn(lo, hi);
  return *reinterpret_cast<uint32_t*>(&h);
}
// x ~= hi + lo with both bf16: (hi, lo) for a pair of floats
__device__ inline void v4_bf2_split(float x0, float x1, uint32_t& hi, uint32_t& lo) {
  const __nv_bfloat162 h = __floats2bfloat162_rn(x0, x1);
  hi = *reinterpret_cast<const uint32_t*>(&h);
  lo = v4_bf2(x0 - __low2float(h), x1 - __high2float(h));
}
__device__ inline float v4_half(uint32_t w, int hi) {  // fp16 in the low (hi = 0) or high half of w
  return __half2float(__ushort_as_half((unsigned short)(hi ? w >> 16 : w & 0xFFFF)));
}
// fp16 h2 (code0 * s0, code1 * s1) from h = (0x64 | code0 ^ 0x80, 0x64 | code1 ^ 0x80) and scales (s0, s1)
__device__ inline uint32_t v4_deq(uint32_t h, uint32_t s) {
  const uint32_t k1152 = 0x64806480u;
  __half2 v = __hsub2(*reinterpret_cast<const __half2*>(&h), *reinterpret_cast<const __half2*>(&k1152));
  v = __hmul2(v, *reinterpret_cast<const __half2*>(&s));
  return h2_bits(v);
}
// int4: the two LOP3 forms of the header (nibbles 0, 4 at 1024 + n; nibbles 1, 5 at 1024 + 16 n)
__device__ inline uint32_t v4_nib_lo(uint32_t w) { return and_or<0x000F000Fu, 0x64006400u>(w); }
__device__ inline uint32_t v4_nib_hi(uint32_t w) { return and_or<0x00F000F0u, 0x64006400u>(w); }
// fp16 h2 (code0 * s0, code1 * s1) from lo nibbles (h = 1032 + code), and 16 times that from hi nibbles
// (h = 1152 + 16 code): one subtraction (exact) and one rounding, as v4_deq
__device__ inline uint32_t v4_deq4(uint32_t h, uint32_t s, uint32_t off) {
  __half2 v = __hsub2(*reinterpret_cast<const __half2*>(&h), *reinterpret_cast<const __half2*>(&off));
  v = __hmul2(v, *reinterpret_cast<const __half2*>(&s));
  return h2_bits(v);
}
constexpr uint32_t kH2_1032 = 0x64086408u, kH2_1152 = 0x64806480u;  // half2 (1032, 1032), (1152, 1152)

// Issue the cp.async copies of the chunk at positions [pos0, pos0 + 16) (rows >= p1 zero-filled).
template <int KV>
__device__ inline void v4_load_chunk(uint32_t st, const SplitArgs& a, int pos0, int p1, int nkv, int kvh, int lane) {
  using C = V4Cfg<KV>;
  if constexpr (C::Q) {
    constexpr int kSegs = C::kRowBytes / 16;  // 16-byte pieces per row: 16 (int8), 8 (int4)
#pragma unroll
    for (int i = 0; i < kV4Chunk * kSegs / 32; ++i) {
      const unsigned e = lane + 32u * i;
      const int row = e / kSegs, c = e % kSegs;
      const int p = pos0 + row;
      const bool ok = p < p1;
      const size_t off = ((size_t)(ok ? p : pos0) * nkv + kvh) * C::kRowBytes + c * 16;
      const uint32_t dst = st + row * C::kRowBytes + ((c ^ (row & 7)) << 4);
      cp_async16(dst, a.k_cache + off, ok);
      cp_async16(dst + C::kKVBytes, a.v_cache + off, ok);
    }
    const int row = lane & 15, p = pos0 + row;
    const bool ok = p < p1;
    const char* src = (lane < 16 ? a.k_scales : a.v_scales) + ((size_t)(ok ? p : pos0) * nkv + kvh) * (kHd / 64) * 2;
    cp_async8(st + 2 * C::kKVBytes + (lane >> 4) * (kV4Chunk * 8) + row * 8, src, ok);
  } else {
#pragma unroll
    for (int row = 0; row < kV4Chunk; ++row) {
      const int p = pos0 + row;
      const bool ok = p < p1;
      const size_t off = (((size_t)(ok ? p : pos0) * nkv + kvh) * kHd + lane * 8) * 2;
      const uint32_t dst = st + row * C::kRowBytes + ((lane ^ (row & 7)) << 4);
      cp_async16(dst, a.k_cache + off, ok);
      cp_async16(dst + C::kKVBytes, a.v_cache + off, ok);
    }
  }
}

template <int KV, int NWo = 0, int So = 0>
__global__ void __launch_bounds__(32 * V4Cfg<KV, NWo, So>::kWarps) attn_split_v4_kernel(SplitArgs a) {
  MR_WARP_STAMP(kStampAttnSplit, a.k_cache);
  using C = V4Cfg<KV, NWo, So>;
  constexpr bool Q = C::Q, I4 = KV == kKvInt4;  // Q: int8 or int4
  constexpr int NW = C::kWarps, S = C::kStages;
  constexpr float kLog2e = 1.4426950408889634f, kLn2 = 0.6931471805599453f;
  extern __shared__ __align__(16) unsigned char v4_smem[];
  __shared__ float m_sh[NW][8], l_sh[NW][8];
  // the step's inputs are host-written, and the cache slots before kv_start were written by earlier steps: the
  // split's bounds and the prologue chunks wholly before kv_start are known and loaded before the wait (pdl.cuh)
  const int t = blockIdx.x, kvh = blockIdx.y, split = blockIdx.z;
  const int T = a.in->T, kv_start = a.in->kv_start, nkv = a.d.n_kv_heads, nh = a.d.n_heads;
  const int group = nh / nkv;
  const int L_all = kv_start + T;
  const int L = kv_start + t + 1;  // causal: slots 0 .. kv_start + t
  const int slen = split_len(L_all);
  const int p0 = split * slen, p1 = min(p0 + slen, L);
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g8 = lane >> 2, tig = lane & 3;
  const int nchunks = (p1 - p0 + kV4Chunk - 1) / kV4Chunk;
  const int nmine = nchunks > warp ? (nchunks - warp + NW - 1) / NW : 0;
  const uint32_t ring = smem_u32(v4_smem) + warp * C::kWarpBytes;
  const unsigned char* ring_ptr = v4_smem + warp * C::kWarpBytes;
  // prologue: chunks 0 .. S-2 of this warp, one commit group per chunk (empty past the end); j_pre of them here
  int j_pre = 0;
  if (t < T && p0 < p1) {
    for (; j_pre < S - 1 && j_pre < nmine; ++j_pre) {
      const int pos0 = p0 + (warp + j_pre * NW) * kV4Chunk;
      if (pos0 + kV4Chunk > kv_start) break;
      v4_load_chunk<KV>(ring + j_pre * C::kStageBytes, a, pos0, p1, nkv, kvh, lane);
      cp_commit();
    }
  }
  pdl_wait();
  pdl_trigger();
  if (t >= T) return;
  float* out = a.part + (((size_t)t * nh + kvh * group) * kMaxAttnSplits + split) * (kHd + 2);
  const size_t head_stride = (size_t)kMaxAttnSplits * (kHd + 2);
  if (p0 >= p1) {
    if (threadIdx.x < group) {
      out[threadIdx.x * head_stride + kHd] = -INFINITY;
      out[threadIdx.x * head_stride + kHd + 1] = 0.f;
    }
    return;
  }
  // the rest of the prologue (chunks this step's prep wrote to), in flight with the query loads below
  for (int j = j_pre; j < S - 1; ++j) {
    if (j < nmine)
      v4_load_chunk<KV>(ring + j * C::kStageBytes, a, p0 + (warp + j * NW) * kV4Chunk, p1, nkv, kvh, lane);
    cp_commit();
  }
  const bool hv = g8 < group;  // this lane's score row is a real query head

  // query fragments (scaled by log2 e: the softmax runs in base 2), a1 = a3 = 0 (rows 8..15)
  const float* qrow = a.q + ((size_t)t * nh + kvh * group + (hv ? g8 : 0)) * kHd;
  uint32_t qa[16][2];                      // int8 / int4: fp16; bf16: hi parts
  __shared__ uint2 ql_sh[Q ? 1 : 16][32];  // bf16: lo parts (own lane only; keeps registers < 255)
  float corr[4] = {0.f, 0.f, 0.f, 0.f};    // int8 / int4: the code offsets' share of group g (row g8)
#pragma unroll
  for (int ks = 0; ks < 16; ++ks) {
    if constexpr (I4) {
      // k-step ks = 2 sg + h: a0 = dims (d, d + 4), a2 = (d + 1, d + 5) / 16 with d = 32 sg + 8 tig + 2 h
      const int d = 32 * (ks >> 1) + 8 * tig + 2 * (ks & 1);
      float2 x0 = *reinterpret_cast<const float2*>(qrow + d);
      float2 x1 = *reinterpret_cast<const float2*>(qrow + d + 4);
      if (!hv) x0 = x1 = make_float2(0.f, 0.f);
      const __half2 lo = __floats2half2_rn(x0.x * kLog2e, x1.x * kLog2e);
      const __half2 hi = __floats2half2_rn(x0.y * kLog2e * 0.0625f, x1.y * kLog2e * 0.0625f);
      qa[ks][0] = h2_bits(lo);
      qa[ks][1] = h2_bits(hi);
      corr[ks >> 2] += 1032.f * (__low2float(lo) + __high2float(lo)) + 1152.f * (__low2float(hi) + __high2float(hi));
    } else if constexpr (Q) {
      float4 x = *reinterpret_cast<const float4*>(qrow + 16 * ks + 4 * tig);
      if (!hv) x = make_float4(0.f, 0.f, 0.f, 0.f);
      const __half2 lo = __floats2half2_rn(x.x * kLog2e, x.y * kLog2e);
      const __half2 hi = __floats2half2_rn(x.z * kLog2e, x.w * kLog2e);
      qa[ks][0] = h2_bits(lo);
      qa[ks][1] = h2_bits(hi);
      corr[ks >> 2] += (__low2float(lo) + __high2float(lo)) + (__low2float(hi) + __high2float(hi));
    } else {
      float2 x0 = *reinterpret_cast<const float2*>(qrow + 16 * ks + 2 * tig);
      float2 x1 = *reinterpret_cast<const float2*>(qrow + 16 * ks + 8 + 2 * tig);
      if (!hv) x0 = x1 = make_float2(0.f, 0.f);
      uint2 lo;
      v4_bf2_split(x0.x * kLog2e, x0.y * kLog2e, qa[ks][0], lo.x);
      v4_bf2_split(x1.x * kLog2e, x1.y * kLog2e, qa[ks][1], lo.y);
      ql_sh[ks][lane] = lo;
    }
  }
  if constexpr (Q) {
#pragma unroll
    for (int g = 0; g < 4; ++g) {
      corr[g] += __shfl_xor_sync(0xffffffffu, corr[g], 1);
      corr[g] += __shfl_xor_sync(0xffffffffu, corr[g], 2);
      if constexpr (!I4) corr[g] *= 1152.f;
    }
  }

  float acc[16][4];
#pragma unroll
  for (int mt = 0; mt < 16; ++mt) acc[mt][0] = acc[mt][1] = acc[mt][2] = acc[mt][3] = 0.f;
  float m_run = -INFINITY, l_run = 0.f;  // head g8, base 2; l_run is this lane's part of the sum

  for (int j = 0; j < nmine; ++j) {
    // the stage of chunk j + S - 1 last held chunk j - 1: every lane is done reading it
    __syncwarp();
    if (j + S - 1 < nmine) {
      const int jn = j + S - 1;
      v4_load_chunk<KV>(ring + (jn % S) * C::kStageBytes, a, p0 + (warp + jn * NW) * kV4Chunk, p1, nkv, kvh, lane);
    }
    cp_commit();
    cp_wait<S - 1>();  // groups 0 .. j complete (this lane's copies)
    __syncwarp();      // ... and visible to the whole warp
    const int pos0 = p0 + (warp + j * NW) * kV4Chunk;
    const int nvalid = p1 - pos0;  // >= 1
    const uint32_t sK = ring + (j % S) * C::kStageBytes, sV = sK + C::kKVBytes;
    const unsigned char* sSc = ring_ptr + (j % S) * C::kStageBytes + 2 * C::kKVBytes;  // int8 / int4 scales

    // ---- scores: s[nt][c] = head g8, position 8 nt + 2 tig + c of the chunk (log2 units)
    float s[2][2];
#pragma unroll
    for (int nt = 0; nt < 2; ++nt) {
      const int row = nt * 8 + (lane & 7);  // the K row this lane addresses for ldmatrix
      if constexpr (I4) {
        const uint2 ksc0 = *reinterpret_cast<const uint2*>(sSc + (nt * 8 + 2 * tig) * 8);
        const uint2 ksc1 = *reinterpret_cast<const uint2*>(sSc + (nt * 8 + 2 * tig + 1) * 8);
        float s0 = 0.f, s1 = 0.f;
#pragma unroll
        for (int gg = 0; gg < 2; ++gg) {  // groups 2 gg, 2 gg + 1: segments 4 gg .. 4 gg + 3
          uint32_t r[4];
          const int seg = 4 * gg + (lane >> 3);
          ldsm_x4(r, sK + row * C::kRowBytes + ((seg ^ (row & 7)) << 4));
          float d[2][4] = {};
#pragma unroll
          for (int i = 0; i < 4; ++i) {
            const int sg = 4 * gg + i;
            const uint32_t y = r[i] >> 8;
            mma16816<true>(d[i >> 1], qa[2 * sg][0], 0u, qa[2 * sg][1], 0u, v4_nib_lo(r[i]), v4_nib_hi(r[i]));
            mma16816<true>(d[i >> 1], qa[2 * sg + 1][0], 0u, qa[2 * sg + 1][1], 0u, v4_nib_lo(y), v4_nib_hi(y));
          }
#pragma unroll
          for (int h = 0; h < 2; ++h) {
            const int g = 2 * gg + h;
            const uint32_t w0 = g < 2 ? ksc0.x : ksc0.y, w1 = g < 2 ? ksc1.x : ksc1.y;
            s0 = fmaf(v4_half(w0, g & 1), d[h][0] - corr[g], s0);
            s1 = fmaf(v4_half(w1, g & 1), d[h][1] - corr[g], s1);
          }
        }
        s[nt][0] = s0;
        s[nt][1] = s1;
      } else if constexpr (Q) {
        const uint2 ksc0 = *reinterpret_cast<const uint2*>(sSc + (nt * 8 + 2 * tig) * 8);
        const uint2 ksc1 = *reinterpret_cast<const uint2*>(sSc + (nt * 8 + 2 * tig + 1) * 8);
        float s0 = 0.f, s1 = 0.f;
#pragma unroll
        for (int g = 0; g < 4; ++g) {
          uint32_t r[4];
          const int seg = 4 * g + (lane >> 3);
          ldsm_x4(r, sK + row * C::kRowBytes + ((seg ^ (row & 7)) << 4));
          float d[4] = {0.f, 0.f, 0.f, 0.f};
#pragma unroll
          for (int i = 0; i < 4; ++i) {
            const uint32_t y = r[i] ^ 0x80808080u;
            mma16816<true>(d, qa[4 * g + i][0], 0u, qa[4 * g + i][1], 0u, __byte_perm(y, 0x64646464u, 0x4140),
                         __byte_perm(y, 0x64646464u, 0x4342));
          }
          const uint32_t w0 = g < 2 ? ksc0.x : ksc0.y, w1 = g < 2 ? ksc1.x : ksc1.y;
          s0 = fmaf(v4_half(w0, g & 1), d[0] - corr[g], s0);
          s1 = fmaf(v4_half(w1, g & 1), d[1] - corr[g], s1);
        }
        s[nt][0] = s0;
        s[nt][1] = s1;
      } else {
        float d[2][4] = {};  // independent chains for q hi and q lo (and the two n-tiles)
#pragma unroll
        for (int kk = 0; kk < 8; ++kk) {
          uint32_t r[4];
          const int seg = 4 * kk + (lane >> 3);
          ldsm_x4(r, sK + row * C::kRowBytes + ((seg ^ (row & 7)) << 4));
          // r0, r1: b0, b1 of k-step 2 kk; r2, r3: of k-step 2 kk + 1
#pragma unroll
          for (int h = 0; h < 2; ++h) {
            const int ks = 2 * kk + h;
            const uint2 lo = ql_sh[ks][lane];
            mma16816<false>(d[0], qa[ks][0], 0u, qa[ks][1], 0u, r[2 * h], r[2 * h + 1]);
            mma16816<false>(d[1], lo.x, 0u, lo.y, 0u, r[2 * h], r[2 * h + 1]);
          }
        }
        s[nt][0] = d[0][0] + d[1][0];
        s[nt][1] = d[0][1] + d[1][1];
      }
    }
    if (nvalid < kV4Chunk) {  // the split's last chunk: positions past p1 do not exist
#pragma unroll
      for (int nt = 0; nt < 2; ++nt)
#pragma unroll
        for (int c = 0; c < 2; ++c)
          if (nt * 8 + 2 * tig + c >= nvalid) s[nt][c] = -INFINITY;
    }

    // ---- online softmax (base 2) for head g8; the quad (tig 0..3) holds the chunk's 16 positions
    float cmax = fmaxf(fmaxf(s[0][0], s[0][1]), fmaxf(s[1][0], s[1][1]));
    cmax = fmaxf(cmax, __shfl_xor_sync(0xffffffffu, cmax, 1));
    cmax = fmaxf(cmax, __shfl_xor_sync(0xffffffffu, cmax, 2));  // finite: the chunk has a valid position
    const float m_new = fmaxf(m_run, cmax);
    const float alpha = v4_ex2(m_run - m_new);  // 0 on the first chunk (m_run = -inf)
    const bool grew = m_new > m_run;
    m_run = m_new;
    float p[2][2];
#pragma unroll
    for (int nt = 0; nt < 2; ++nt)
#pragma unroll
      for (int c = 0; c < 2; ++c) p[nt][c] = v4_ex2(s[nt][c] - m_new);
    l_run = fmaf(l_run, alpha, (p[0][0] + p[0][1]) + (p[1][0] + p[1][1]));
    if (__any_sync(0xffffffffu, grew)) {
      // the accumulator of lane (g8, tig) holds heads 2 tig and 2 tig + 1: their factors live in quads 2 tig, 2 tig + 1
      const float a_lo = __shfl_sync(0xffffffffu, alpha, 8 * tig);
      const float a_hi = __shfl_sync(0xffffffffu, alpha, 8 * tig + 4);
#pragma unroll
      for (int mt = 0; mt < 16; ++mt) {
        acc[mt][0] *= a_lo; acc[mt][1] *= a_hi; acc[mt][2] *= a_lo; acc[mt][3] *= a_hi;
      }
    }

    // ---- values: acc[mt] += V^T (16 dims x 16 positions) P^T (16 positions x 8 heads)
    if constexpr (Q) {
      const uint32_t b0 = h2_bits(__floats2half2_rn(p[0][0], p[0][1]));
      const uint32_t b1 = h2_bits(__floats2half2_rn(p[1][0], p[1][1]));
      // group scales of positions (2tig, 2tig+1) for rows k 2c.. (a0, a1) and (2tig+8, 2tig+9) for a2, a3
      const unsigned char* vsc = sSc + kV4Chunk * 8;
      const uint2 v0 = *reinterpret_cast<const uint2*>(vsc + (2 * tig) * 8);
      const uint2 v1 = *reinterpret_cast<const uint2*>(vsc + (2 * tig + 1) * 8);
      const uint2 v2 = *reinterpret_cast<const uint2*>(vsc + (2 * tig + 8) * 8);
      const uint2 v3 = *reinterpret_cast<const uint2*>(vsc + (2 * tig + 9) * 8);
      const uint32_t sA[4] = {__byte_perm(v0.x, v1.x, 0x5410), __byte_perm(v0.x, v1.x, 0x7632),
                              __byte_perm(v0.y, v1.y, 0x5410), __byte_perm(v0.y, v1.y, 0x7632)};
      const uint32_t sB[4] = {__byte_perm(v2.x, v3.x, 0x5410), __byte_perm(v2.x, v3.x, 0x7632),
                              __byte_perm(v2.y, v3.y, 0x5410), __byte_perm(v2.y, v3.y, 0x7632)};
      const int row = lane & 15;  // matrices: (pos 0-7, seg 2u), (pos 8-15, seg 2u), (0-7, 2u+1), (8-15, 2u+1)
      if constexpr (I4) {
#pragma unroll
        for (int u = 0; u < 4; ++u) {
          uint32_t r[4];
          const int seg = 2 * u + (lane >> 4);
          ldsm_x4_t(r, sV + row * C::kRowBytes + ((seg ^ (row & 7)) << 4));
#pragma unroll
          for (int h = 0; h < 2; ++h) {
            const int sg = 2 * u + h, g = sg >> 1;  // segment: dims 32 sg .. +31, group sg / 2
#pragma unroll
            for (int jj = 0; jj < 2; ++jj) {  // m-tile 2 sg + jj: dims 32 sg + 4 g8 + 2 jj (row g8) and + 1 (row g8 + 8)
              const uint32_t x = jj ? r[2 * h] >> 8 : r[2 * h], y = jj ? r[2 * h + 1] >> 8 : r[2 * h + 1];
              mma16816<true>(acc[2 * sg + jj], v4_deq4(v4_nib_lo(x), sA[g], kH2_1032), v4_deq4(v4_nib_hi(x), sA[g], kH2_1152),
                           v4_deq4(v4_nib_lo(y), sB[g], kH2_1032), v4_deq4(v4_nib_hi(y), sB[g], kH2_1152), b0, b1);
            }
          }
        }
      } else {
#pragma unroll
        for (int u = 0; u < 8; ++u) {
          uint32_t r[4];
          const int seg = 2 * u + (lane >> 4);
          ldsm_x4_t(r, sV + row * C::kRowBytes + ((seg ^ (row & 7)) << 4));
#pragma unroll
          for (int h = 0; h < 2; ++h) {
            const int mt = 2 * u + h, g = mt >> 2;
            const uint32_t x = r[2 * h] ^ 0x80808080u, y = r[2 * h + 1] ^ 0x80808080u;
            mma16816<true>(acc[mt], v4_deq(__byte_perm(x, 0x64646464u, 0x4240), sA[g]),
                         v4_deq(__byte_perm(x, 0x64646464u, 0x4341), sA[g]),
                         v4_deq(__byte_perm(y, 0x64646464u, 0x4240), sB[g]),
                         v4_deq(__byte_perm(y, 0x64646464u, 0x4341), sB[g]), b0, b1);
          }
        }
      }
    } else {
      uint32_t bh0, bl0, bh1, bl1;
      v4_bf2_split(p[0][0], p[0][1], bh0, bl0);
      v4_bf2_split(p[1][0], p[1][1], bh1, bl1);
      // matrices: (pos 0-7, seg 2mt) a0, (0-7, 2mt+1) a1, (8-15, 2mt) a2, (8-15, 2mt+1) a3
      const int row = (lane >> 4) * 8 + (lane & 7);
#pragma unroll
      for (int mt = 0; mt < 16; ++mt) {
        uint32_t r[4];
        const int seg = 2 * mt + ((lane >> 3) & 1);
        ldsm_x4_t(r, sV + row * C::kRowBytes + ((seg ^ (row & 7)) << 4));
        mma16816<false>(acc[mt], r[0], r[1], r[2], r[3], bh0, bh1);
        mma16816<false>(acc[mt], r[0], r[1], r[2], r[3], bl0, bl1);
      }
    }
  }
  cp_wait<0>();  // only empty groups can be pending here; drain before the ring is reused
  l_run += __shfl_xor_sync(0xffffffffu, l_run, 1);
  l_run += __shfl_xor_sync(0xffffffffu, l_run, 2);

  // merge the warps: M = max over warps, each warp's share scaled by 2^(m_w - M)
  const int hA = 2 * tig, hB = 2 * tig + 1;  // the heads of this lane's accumulator columns
  float m_fin = m_run, l_fin = l_run;        // head g8
  float fA = 1.f, fB = 1.f;                  // this warp's factors for heads hA, hB
  if constexpr (NW > 1) {
    if (tig == 0) { m_sh[warp][g8] = m_run; l_sh[warp][g8] = l_run; }
    __syncthreads();
    float MA = -INFINITY, MB = -INFINITY, Mg = -INFINITY;
#pragma unroll
    for (int w = 0; w < NW; ++w) {
      MA = fmaxf(MA, m_sh[w][hA]); MB = fmaxf(MB, m_sh[w][hB]); Mg = fmaxf(Mg, m_sh[w][g8]);
    }
    // warp 0 always has chunk 0, so the maxima are finite; a warp without chunks gets factor 0
    fA = v4_ex2(m_sh[warp][hA] - MA);
    fB = v4_ex2(m_sh[warp][hB] - MB);
    l_fin = 0.f;
#pragma unroll
    for (int w = 0; w < NW; ++w) l_fin = fmaf(l_sh[w][g8], v4_ex2(m_sh[w][g8] - Mg), l_fin);
    m_fin = Mg;
    float* buf = reinterpret_cast<float*>(v4_smem + warp * C::kWarpBytes);  // [64][32], own ring: free now
    if (warp > 0) {
#pragma unroll
      for (int mt = 0; mt < 16; ++mt) {
        buf[(4 * mt + 0) * 32 + lane] = acc[mt][0] * fA;
        buf[(4 * mt + 1) * 32 + lane] = acc[mt][1] * fB;
        buf[(4 * mt + 2) * 32 + lane] = acc[mt][2] * fA;
        buf[(4 * mt + 3) * 32 + lane] = acc[mt][3] * fB;
      }
    }
    __syncthreads();
    if (warp > 0) return;
#pragma unroll
    for (int mt = 0; mt < 16; ++mt) {
      acc[mt][0] *= fA; acc[mt][1] *= fB; acc[mt][2] *= fA; acc[mt][3] *= fB;
    }
#pragma unroll
    for (int w = 1; w < NW; ++w) {
      const float* bw = reinterpret_cast<const float*>(v4_smem + w * C::kWarpBytes);
#pragma unroll
      for (int mt = 0; mt < 16; ++mt)
#pragma unroll
        for (int c = 0; c < 4; ++c) acc[mt][c] += bw[(4 * mt + c) * 32 + lane];
    }
  }
  (void)fA; (void)fB;
  if (hv && tig == 0) {
    out[g8 * head_stride + kHd] = m_fin * kLn2;  // natural-log units, as variants 0-3
    out[g8 * head_stride + kHd + 1] = l_fin;
  }
#pragma unroll
  for (int mt = 0; mt < 16; ++mt)
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      // int4: rows g8 + 8 (r = 1) accumulated 16 times the values (hi nibbles); dividing by 16 is exact
      const int dd = I4 ? 32 * (mt >> 1) + 4 * g8 + 2 * (mt & 1) + r : Q ? 16 * mt + 2 * g8 + r : 16 * mt + 8 * r + g8;
      const float f = I4 && r ? 0.0625f : 1.f;
      if (hA < group) out[hA * head_stride + dd] = acc[mt][2 * r] * f;
      if (hB < group) out[hB * head_stride + dd] = acc[mt][2 * r + 1] * f;
    }
}

template <int KV, int NWo = 0, int So = 0>
void launch_attn_split_v4(const SplitArgs& a, int T, int nkv, cudaStream_t stream) {
  using C = V4Cfg<KV, NWo, So>;
  constexpr int smem = C::kSmem;
  static unsigned long long configured = 0;  // one bit per device
  int dev = 0;
  MR_CHECK(cudaGetDevice(&dev), "attn_split");
  const unsigned long long bit = 1ull << (dev & 63);
  if (!(configured & bit)) {
    MR_CHECK(cudaFuncSetAttribute(attn_split_v4_kernel<KV, NWo, So>, cudaFuncAttributeMaxDynamicSharedMemorySize, smem),
             "attn_split (shared memory opt-in)");
    configured |= bit;
  }
  launch_pdl("attn_split", attn_split_v4_kernel<KV, NWo, So>, dim3(T, nkv, kMaxAttnSplits), dim3(32 * C::kWarps), smem,
             stream, a);
}

// Merges the splits of one (token, head) for a slice of kCombineDims output dims: block (t, h, slice), 256 threads.
// Session 8: the previous kernel (one block of 256 threads per (t, h), each thread walking all the splits twice)
// ran 2 x nsplit dependent L2 round trips on only 24 blocks: ~15-20 us per layer at 128K (128 splits), where the
// split kernel itself streams the cache in ~72 us (Nsight Compute, bench/results/ncu-attn-s8-call3.txt). Here the
// splits' maxima and sums are loaded in one round (a thread per split), and thread (dim d, group j) adds splits
// j, j + 8, ... of dim d, all its loads issued together; the 8 groups are added in a fixed order (deterministic).
// Session 13: the values are loaded in the same round as the maxima (they were a second round trip after the maxima's
// reduction) and the gate before the PDL wait (a third, at the end).
constexpr int kCombineDims = 32;                 // output dims per block
constexpr int kCombineGroups = 256 / kCombineDims;  // split groups per block
constexpr int kCombinePerGroup = (kMaxAttnSplits + kCombineGroups - 1) / kCombineGroups;
static_assert(kMaxAttnSplits <= 256, "one thread per split for the maxima");
__global__ void __launch_bounds__(256) attn_combine_kernel(const float* part, AttnDims d, const StepInputs* in,
                                                           const float* gate, int ld_gate, __half* out_h,
                                                           int out_lanes) {
  MR_WARP_STAMP(kStampAttnCombine, part);
  __shared__ float w_sh[kMaxAttnSplits];
  __shared__ float red[32];
  __shared__ float acc_sh[kCombineGroups][kCombineDims];
  const int t = blockIdx.x, h = blockIdx.y, d0 = blockIdx.z * kCombineDims, tid = threadIdx.x;
  const float* base = part + ((size_t)t * d.n_heads + h) * kMaxAttnSplits * (kHd + 2);
  // before the wait: the step's inputs (host-written) and the gate (the qkv projection's, written before the split
  // kernel, this kernel's predecessor, started: pdl.cuh)
  const int L_all = in->kv_start + in->T;
  const int nsplit = min((int)kMaxAttnSplits, (L_all + split_len(L_all) - 1) / split_len(L_all));
  const float gv = tid < kCombineDims ? gate[(size_t)t * ld_gate + h * 2 * kHd + d0 + tid] : 0.f;
  pdl_wait();
  pdl_trigger();
  // every load of the partials in one round: the splits' running maxima (natural-log units; -inf: an empty split)
  // and sums, one thread each, and this thread's dim of split group grp
  float m = -INFINITY, l = 0.f;
  if (tid < nsplit) {
    m = base[tid * (kHd + 2) + kHd];
    l = base[tid * (kHd + 2) + kHd + 1];
  }
  const int dim = tid % kCombineDims, grp = tid / kCombineDims;
  float v[kCombinePerGroup];
#pragma unroll
  for (int k = 0; k < kCombinePerGroup; ++k) {
    const int sp = grp + k * kCombineGroups;
    v[k] = sp < nsplit ? base[sp * (kHd + 2) + d0 + dim] : 0.f;
  }
  float M = m;
  for (int o = 16; o; o >>= 1) M = fmaxf(M, __shfl_xor_sync(0xffffffffu, M, o));
  if ((tid & 31) == 0) red[tid >> 5] = M;
  __syncthreads();
  M = red[0];
  for (int i = 1; i < 8; ++i) M = fmaxf(M, red[i]);
  const float w = m == -INFINITY ? 0.f : __expf(m - M);
  if (tid < kMaxAttnSplits) w_sh[tid] = w;
  __syncthreads();  // red[] is reused by block_sum below
  const float den = block_sum(w * l, red);
  float num = 0.f;
#pragma unroll
  for (int k = 0; k < kCombinePerGroup; ++k) {
    const int sp = grp + k * kCombineGroups;
    // an empty split (m = -inf: w = 0) wrote no values, so its slots hold whatever was there: skip, never multiply
    if (sp < nsplit && w_sh[sp] > 0.f) num = fmaf(w_sh[sp], v[k], num);
  }
  acc_sh[grp][dim] = num;
  __syncthreads();
  if (tid < kCombineDims) {
    float y = acc_sh[0][tid];
#pragma unroll
    for (int g = 1; g < kCombineGroups; ++g) y += acc_sh[g][tid];
    const int i = d0 + tid;
    const int k = h * kHd + i, K = d.n_heads * kHd;  // out_lanes: the output GEMV reads the lanes layout
    out_h[(size_t)t * K + (out_lanes ? lanes_pos(k, K) : perm8(k))] = __float2half(y / den * sigmoidf_(gv));
  }
}

// -1: the route by KV format (attn_route); else a forced variant (set_attn_variant)
int g_attn_mode = -1;

// Flash-decode (variant 4), the fastest on H200 at 128K: 0.087 ms per layer for the context part with int8 KV
// against 0.361 for variant 2 (bench/NOTES.md, session 2 call 2). int8 KV on variant 6 (4 warps a block, 2 ring
// stages): whole decode steps 4.997 against 5.144 ms at 8K, 5.217 against 5.306 at 32K, 6.127 against 6.231 at 128K
// (session 10 call 2, bench/results/step-routes-h200-s10-call2.txt; isolated, session 8 had it no faster); int4 KV
// stays on 4 (5.856 against 5.901 ms at 128K for 6, call 1).
int attn_route(int kv_fmt) { return kv_fmt == kKvInt8 ? 6 : 4; }

}  // namespace

int get_attn_variant() { return g_attn_mode; }

void set_attn_variant(int v) {
  if (v < -1 || v > 6)
    throw std::invalid_argument("attention variant must be -1 (the route by KV format), 0 (CUDA cores, q in registers), 1 (q in shared memory), "
                                "2 (scores on tensor cores), 3 (scores and values on tensor cores), 4 "
                                "(flash-decode: cp.async rings, ldmatrix, both products on tensor cores), or 5 / 6 "
                                "(4 with 3 / 4 warps per block and shallower rings, int8 and int4 KV)");
  g_attn_mode = v;
}

void attn_prep(const float* qkv, int ldp, int T, const AttnDims& d, const float* q_norm, const float* k_norm,
               const float* inv_freq, const int mrope_section[3], const StepInputs* in, float* q_out,
               char* k_cache, char* v_cache, char* k_scales, char* v_scales, cudaStream_t stream) {
  if (d.head_dim != kHd) throw std::invalid_argument("attn_prep: head_dim must be 256");
  if (d.kv_fmt < kKvBf16 || d.kv_fmt > kKvInt4)
    throw std::invalid_argument("attn_prep: kv format must be 0 (bf16), 1 (int8) or 2 (int4), got " + std::to_string(d.kv_fmt));
  PrepArgs p{qkv, ldp, d, q_norm, k_norm, inv_freq, {mrope_section[0], mrope_section[1], mrope_section[2]},
             in, q_out, k_cache, v_cache, k_scales, v_scales};
  launch_pdl("attn_prep", attn_prep_kernel, dim3(T, d.n_heads + 2 * d.n_kv_heads), dim3(kHd), 0, stream, p);
}

void attn_decode(const float* q, int T, const AttnDims& d, const StepInputs* in, const char* k_cache,
                 const char* v_cache, const char* k_scales, const char* v_scales, float* partials,
                 const float* gate, int ld_gate, __half* out_h, cudaStream_t stream, int out_layout) {
  if (d.head_dim != kHd) throw std::invalid_argument("attn_decode: head_dim must be 256");
  if (d.n_heads % d.n_kv_heads || d.n_heads / d.n_kv_heads > kGroup)
    throw std::invalid_argument("attn_decode: at most 6 query heads per kv head");
  if (d.kv_fmt < kKvBf16 || d.kv_fmt > kKvInt4)
    throw std::invalid_argument("attn_decode: kv format must be 0 (bf16), 1 (int8) or 2 (int4), got " + std::to_string(d.kv_fmt));
  SplitArgs a{q, d, in, k_cache, v_cache, k_scales, v_scales, partials};
  dim3 grid(kMaxAttnSplits, d.n_kv_heads, T);
  const int m = g_attn_mode >= 0 ? g_attn_mode : attn_route(d.kv_fmt);
  if (d.kv_fmt == kKvInt4) {
    if (m == 4) launch_attn_split_v4<kKvInt4>(a, T, d.n_kv_heads, stream);
    else if (m == 5) launch_attn_split_v4<kKvInt4, 3, 4>(a, T, d.n_kv_heads, stream);
    else if (m == 6) launch_attn_split_v4<kKvInt4, 4, 3>(a, T, d.n_kv_heads, stream);
    else if (m == 1) attn_split_kernel<kKvInt4, 1><<<grid, 128, 0, stream>>>(a);
    else if (m == 0) attn_split_kernel<kKvInt4, 0><<<grid, 128, 0, stream>>>(a);
    else
      throw std::invalid_argument("attn_decode: int4 KV runs on attention variants 0, 1 and 4..6; variant " +
                                  std::to_string(m) + " (" + (m == 2 ? "scores on tensor cores" : "scores and values on tensor cores") +
                                  ") is built for bf16 and int8 KV only");
  } else if (m >= 4) {
    // 5 / 6 (session 8): more warps per block on shallower rings, meant to put more warps on an SM; but the kernel
    // takes ~250 registers a thread, which holds an SM to 8 warps whatever the block shape, so at 128K int8 they
    // are no faster (0.111 / 0.094 ms against 0.090; int4 0.111 / 0.080 against 0.088, one timing run; bench/NOTES.md
    // session 8 call 3). Session 19 measured and removed a variant 7: 5 held to 168 registers (__launch_bounds__(96, 4),
    // 40-76 bytes spilled), 12 warps an SM. The module's timing probe had it faster on int4 at 128K (0.032 against
    // 0.049 ms for the context part, but that difference of two synchronised calls is noisy by ~0.03 ms); in whole
    // steps it was slower on both formats (int8 6.198 against 5.88-5.90 ms, int4 5.875 against 5.633-5.646; the int4
    // split kernel 70.0 against 60.7 us a layer in the step's timeline; bench/NOTES.md session 19). Session 19 also measured and removed a two-chunks-a-step loop for int4 (both chunks' scores in flight, one
    // softmax update for 32 positions, 6 stages; 205 registers): 5.746 against 5.627-5.642 ms at 128K, the split 64.0
    // against 60.7 us a layer. bf16 KV runs the default for both
    if (d.kv_fmt == kKvInt8 && m == 5) launch_attn_split_v4<kKvInt8, 3, 2>(a, T, d.n_kv_heads, stream);
    else if (d.kv_fmt == kKvInt8 && m == 6) launch_attn_split_v4<kKvInt8, 4, 2>(a, T, d.n_kv_heads, stream);
    else if (d.kv_fmt == kKvInt8) launch_attn_split_v4<kKvInt8>(a, T, d.n_kv_heads, stream);
    else launch_attn_split_v4<kKvBf16>(a, T, d.n_kv_heads, stream);
  } else if (d.kv_fmt == kKvInt8) {
    if (m == 3) attn_split_kernel<kKvInt8, 3><<<grid, 128, 0, stream>>>(a);
    else if (m == 2) attn_split_kernel<kKvInt8, 2><<<grid, 128, 0, stream>>>(a);
    else if (m == 1) attn_split_kernel<kKvInt8, 1><<<grid, 128, 0, stream>>>(a);
    else attn_split_kernel<kKvInt8, 0><<<grid, 128, 0, stream>>>(a);
  } else {
    if (m == 3) attn_split_kernel<kKvBf16, 3><<<grid, 128, 0, stream>>>(a);
    else if (m == 2) attn_split_kernel<kKvBf16, 2><<<grid, 128, 0, stream>>>(a);
    else if (m == 1) attn_split_kernel<kKvBf16, 1><<<grid, 128, 0, stream>>>(a);
    else attn_split_kernel<kKvBf16, 0><<<grid, 128, 0, stream>>>(a);
  }
  MR_CHECK_LAUNCH("attn_split");
  launch_pdl("attn_combine", attn_combine_kernel, dim3(T, d.n_heads, kHd / kCombineDims), dim3(256), 0, stream, partials,
             d, in, gate, ld_gate, out_h, out_layout == GEMV_X_LANES);
}

MR_STAMPS_TU(attention)

}  // namespace monorail
