// Gated full attention for decode/verify (T = 1..16 query tokens):
//  attn_prep   : q/k zero-centred RMSNorm, partial interleaved mRoPE, KV append (bf16 or int8 g64).
//  attn_split  : one block per (split, kv head, token); the block streams its chunk of the cache in
//                tiles of 256 positions with an online softmax for the 6 (GQA) query heads of its
//                kv head, so K and V are read once per token for all of them.
//  attn_combine: merges the splits, multiplies by sigmoid(gate), writes fp16 perm8 for o_proj.
// The number of positions per split is derived on the device from kv_start + T, so one captured
// graph serves every context length (blocks past the end exit at once).
#include "common.cuh"
#include "ops.h"

namespace monorail {
namespace {

constexpr int kHd = 256;    // head_dim this kernel set is built for
constexpr int kGroup = 6;   // query heads per kv head (max)
constexpr int kTile = 256;  // positions per softmax tile

__device__ inline int mrope_axis(int i, const int* sec) {
  if (i % 3 == 1 && i < 3 * sec[1]) return 1;
  if (i % 3 == 2 && i < 3 * sec[2]) return 2;
  return 0;
}

struct PrepArgs {
  const float* qkv; int ldp; AttnDims d;
  const float* q_norm; const float* k_norm; const float* inv_freq; int sec[3];
  const StepInputs* in; float* q_out; char* k_cache; char* v_cache; char* k_scales; char* v_scales;
};

__global__ void __launch_bounds__(kHd) attn_prep_kernel(PrepArgs p) {
  __shared__ float xs[kHd], red[32], gmax[8];
  const int t = blockIdx.x, hh = blockIdx.y, i = threadIdx.x;
  const AttnDims& d = p.d;
  const int nh = d.n_heads, nkv = d.n_kv_heads;
  const float* row = p.qkv + (size_t)t * p.ldp;
  int kind, head;  // 0 q, 1 k, 2 v
  float x;
  if (hh < nh) { kind = 0; head = hh; x = row[head * 2 * kHd + i]; }
  else if (hh < nh + nkv) { kind = 1; head = hh - nh; x = row[nh * 2 * kHd + head * kHd + i]; }
  else { kind = 2; head = hh - nh - nkv; x = row[nh * 2 * kHd + nkv * kHd + head * kHd + i]; }
  if (kind != 2) {
    float ss = block_sum(x * x, red);
    const float* w = kind == 0 ? p.q_norm : p.k_norm;
    x = x * rsqrtf(ss / kHd + d.eps) * (1.f + w[i]);
    xs[i] = x;
    __syncthreads();
    const int rot = d.rotary_dim, half = rot / 2;
    if (i < rot) {
      const int pair = i % half;
      const float pos = (float)p.in->rope_pos[t][mrope_axis(pair, p.sec)];
      float sn, cs;
      sincosf(pos * p.inv_freq[pair], &sn, &cs);
      x = i < half ? x * cs - xs[i + half] * sn : x * cs + xs[i - half] * sn;
    }
  }
  if (kind == 0) {
    p.q_out[((size_t)t * nh + head) * kHd + i] = x * rsqrtf((float)kHd);
    return;
  }
  const size_t slot = (size_t)p.in->kv_start + t;
  const size_t idx = (slot * nkv + head) * kHd + i;
  char* cache = kind == 1 ? p.k_cache : p.v_cache;
  if (!d.kv_int8) {
    reinterpret_cast<__nv_bfloat16*>(cache)[idx] = __float2bfloat16(x);
    return;
  }
  // int8 group 64: absmax over the 64 dims (two warps), fp16 scale, codes quantized with that scale
  float m = warp_max(fabsf(x));
  if ((i & 31) == 0) gmax[i >> 5] = m;
  __syncthreads();
  const int g = i >> 6;
  m = fmaxf(gmax[2 * g], gmax[2 * g + 1]);
  const __half sh = __float2half(m / 127.f);
  const float s = __half2float(sh);
  int q = s > 0.f ? __float2int_rn(x / s) : 0;
  q = max(-127, min(127, q));
  reinterpret_cast<int8_t*>(cache)[idx] = (int8_t)q;
  if ((i & 63) == 0) {
    char* sc = kind == 1 ? p.k_scales : p.v_scales;
    reinterpret_cast<__half*>(sc)[(slot * nkv + head) * (kHd / 64) + g] = sh;
  }
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

// Raw cache bytes of 16 consecutive dims (scores) and 8 consecutive dims (values) of one row,
// loaded first and converted later so that several rows' loads are in flight at once.
template <bool INT8> struct Raw16 { uint4 a, b; };
template <> struct Raw16<true> { uint4 a; __half s; };
template <bool INT8> struct Raw8 { uint4 a; };
template <> struct Raw8<true> { uint2 a; __half s; };

template <bool INT8>
__device__ inline void load16(const char* cache, const char* scales, size_t rowidx, int dim0, Raw16<INT8>& r) {
  if constexpr (!INT8) {
    const uint4* p = reinterpret_cast<const uint4*>(cache + (rowidx * kHd + dim0) * 2);
    r.a = __ldg(p);
    r.b = __ldg(p + 1);
  } else {
    r.a = __ldg(reinterpret_cast<const uint4*>(cache + rowidx * kHd + dim0));
    r.s = reinterpret_cast<const __half*>(scales)[rowidx * (kHd / 64) + dim0 / 64];
  }
}
template <bool INT8>
__device__ inline void unpack16(const Raw16<INT8>& r, float (&v)[16]) {
  if constexpr (!INT8) {
    const uint32_t w[8] = {r.a.x, r.a.y, r.a.z, r.a.w, r.b.x, r.b.y, r.b.z, r.b.w};
#pragma unroll
    for (int j = 0; j < 8; ++j) {
      v[2 * j] = __uint_as_float(w[j] << 16);
      v[2 * j + 1] = __uint_as_float(w[j] & 0xFFFF0000u);
    }
  } else {
    const float s = __half2float(r.s);
    const uint32_t w[4] = {r.a.x, r.a.y, r.a.z, r.a.w};
#pragma unroll
    for (int j = 0; j < 16; ++j) v[j] = float((int8_t)((w[j >> 2] >> ((j & 3) * 8)) & 0xFF)) * s;
  }
}
template <bool INT8>
__device__ inline void load8(const char* cache, const char* scales, size_t rowidx, int dim0, Raw8<INT8>& r) {
  if constexpr (!INT8) {
    r.a = __ldg(reinterpret_cast<const uint4*>(cache + (rowidx * kHd + dim0) * 2));
  } else {
    r.a = __ldg(reinterpret_cast<const uint2*>(cache + rowidx * kHd + dim0));
    r.s = reinterpret_cast<const __half*>(scales)[rowidx * (kHd / 64) + dim0 / 64];
  }
}
template <bool INT8>
__device__ inline void unpack8(const Raw8<INT8>& r, float (&v)[8]) {
  if constexpr (!INT8) {
    const uint32_t w[4] = {r.a.x, r.a.y, r.a.z, r.a.w};
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      v[2 * j] = __uint_as_float(w[j] << 16);
      v[2 * j + 1] = __uint_as_float(w[j] & 0xFFFF0000u);
    }
  } else {
    const float s = __half2float(r.s);
    const uint32_t w[2] = {r.a.x, r.a.y};
#pragma unroll
    for (int j = 0; j < 8; ++j) v[j] = float((int8_t)((w[j >> 2] >> ((j & 3) * 8)) & 0xFF)) * s;
  }
}

// QSMEM: the 6 query heads live in shared memory (read as float4) instead of 96 registers per lane,
// trading shared-memory reads for occupancy (bench/decode.py times both).
// m16n8k16 fp16 MMA, fp32 accumulate (sm_80+): D = A B + C for one 16x16 A and 16x8 B fragment.
__device__ inline void mma_16816(float (&d)[4], uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3, uint32_t b0,
                                 uint32_t b1) {
  asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
               "{%0,%1,%2,%3};\n"
               : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
               : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}
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
template <bool INT8, int MODE>
__global__ void __launch_bounds__(128) attn_split_kernel(SplitArgs a) {
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
              mma_16816(d[u], qa_lo[j], 0u, qa_hi[j], 0u, bf16x2_to_h2(wlo), bf16x2_to_h2(whi));
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
              mma_16816(d[u], qa_lo[j], 0u, qa_hi[j], 0u, i8x2_to_h2(w, 0, s2), i8x2_to_h2(w, 1, s2));
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
      Raw16<INT8> r[KU];
#pragma unroll
      for (int u = 0; u < KU; ++u) {
        const int pi = min(base + 2 * u + hw, n - 1);
        load16<INT8>(a.k_cache, a.k_scales, (size_t)(tile0 + pi) * nkv + kvh, l16 * 16, r[u]);
      }
#pragma unroll
      for (int u = 0; u < KU; ++u) {
        float kv[16];
        unpack16<INT8>(r[u], kv);
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
            mma_16816(od[nt], a0, 0u, a2, 0u, b0, b1);
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
      Raw8<INT8> r[VU];
#pragma unroll
      for (int u = 0; u < VU; ++u) {
        const int pi = min(base + u, n - 1);
        load8<INT8>(a.v_cache, a.v_scales, (size_t)(tile0 + pi) * nkv + kvh, lane * 8, r[u]);
      }
#pragma unroll
      for (int u = 0; u < VU; ++u) {
        if (base + u >= n) break;
        float vv[8];
        unpack8<INT8>(r[u], vv);
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

__global__ void __launch_bounds__(kHd) attn_combine_kernel(const float* part, AttnDims d, const StepInputs* in,
                                                           const float* gate, int ld_gate, __half* out_h) {
  const int t = blockIdx.x, h = blockIdx.y, i = threadIdx.x;
  const float* base = part + ((size_t)t * d.n_heads + h) * kMaxAttnSplits * (kHd + 2);
  const int L_all = in->kv_start + in->T;
  const int nsplit = min((int)kMaxAttnSplits, (L_all + split_len(L_all) - 1) / split_len(L_all));
  float M = -INFINITY;
  for (int s = 0; s < nsplit; ++s) M = fmaxf(M, base[s * (kHd + 2) + kHd]);
  float num = 0.f, den = 0.f;
  for (int s = 0; s < nsplit; ++s) {
    const float m = base[s * (kHd + 2) + kHd];
    if (m == -INFINITY) continue;
    const float w = __expf(m - M);
    num = fmaf(w, base[s * (kHd + 2) + i], num);
    den = fmaf(w, base[s * (kHd + 2) + kHd + 1], den);
  }
  const float g = gate[(size_t)t * ld_gate + h * 2 * kHd + i];
  out_h[(size_t)t * d.n_heads * kHd + perm8(h * kHd + i)] = __float2half(num / den * sigmoidf_(g));
}

// default: scores on tensor cores, the fastest on H200 at 128K (bench/NOTES.md, call 6)
int g_attn_mode = 2;

}  // namespace

int get_attn_variant() { return g_attn_mode; }

void set_attn_variant(int v) {
  if (v < 0 || v > 3)
    throw std::invalid_argument("attention variant must be 0 (CUDA cores, q in registers), 1 (q in shared memory), "
                                "2 (scores on tensor cores) or 3 (scores and values on tensor cores)");
  g_attn_mode = v;
}

void attn_prep(const float* qkv, int ldp, int T, const AttnDims& d, const float* q_norm, const float* k_norm,
               const float* inv_freq, const int mrope_section[3], const StepInputs* in, float* q_out,
               char* k_cache, char* v_cache, char* k_scales, char* v_scales, cudaStream_t stream) {
  if (d.head_dim != kHd) throw std::invalid_argument("attn_prep: head_dim must be 256");
  PrepArgs p{qkv, ldp, d, q_norm, k_norm, inv_freq, {mrope_section[0], mrope_section[1], mrope_section[2]},
             in, q_out, k_cache, v_cache, k_scales, v_scales};
  attn_prep_kernel<<<dim3(T, d.n_heads + 2 * d.n_kv_heads), kHd, 0, stream>>>(p);
  MR_CHECK_LAUNCH("attn_prep");
}

void attn_decode(const float* q, int T, const AttnDims& d, const StepInputs* in, const char* k_cache,
                 const char* v_cache, const char* k_scales, const char* v_scales, float* partials,
                 const float* gate, int ld_gate, __half* out_h, cudaStream_t stream) {
  if (d.head_dim != kHd) throw std::invalid_argument("attn_decode: head_dim must be 256");
  if (d.n_heads % d.n_kv_heads || d.n_heads / d.n_kv_heads > kGroup)
    throw std::invalid_argument("attn_decode: at most 6 query heads per kv head");
  SplitArgs a{q, d, in, k_cache, v_cache, k_scales, v_scales, partials};
  dim3 grid(kMaxAttnSplits, d.n_kv_heads, T);
  if (d.kv_int8) {
    if (g_attn_mode == 3) attn_split_kernel<true, 3><<<grid, 128, 0, stream>>>(a);
    else if (g_attn_mode == 2) attn_split_kernel<true, 2><<<grid, 128, 0, stream>>>(a);
    else if (g_attn_mode == 1) attn_split_kernel<true, 1><<<grid, 128, 0, stream>>>(a);
    else attn_split_kernel<true, 0><<<grid, 128, 0, stream>>>(a);
  } else {
    if (g_attn_mode == 3) attn_split_kernel<false, 3><<<grid, 128, 0, stream>>>(a);
    else if (g_attn_mode == 2) attn_split_kernel<false, 2><<<grid, 128, 0, stream>>>(a);
    else if (g_attn_mode == 1) attn_split_kernel<false, 1><<<grid, 128, 0, stream>>>(a);
    else attn_split_kernel<false, 0><<<grid, 128, 0, stream>>>(a);
  }
  MR_CHECK_LAUNCH("attn_split");
  attn_combine_kernel<<<dim3(T, d.n_heads), kHd, 0, stream>>>(partials, d, in, gate, ld_gate, out_h);
  MR_CHECK_LAUNCH("attn_combine");
}

}  // namespace monorail
