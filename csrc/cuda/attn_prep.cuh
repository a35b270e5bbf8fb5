// The per-token preparation shared by decode (attention.cu: attn_prep) and prefill (attn_prefill.cu:
// attn_prefill_prep): q/k zero-centred RMSNorm, partial interleaved mRoPE, and the K/V append in bf16,
// int8 group 64 or int4 group 64. One copy of this code is what makes the cache prefill writes
// bit-identical to the one decode writes. One block of kPrepDim threads per (token, head); blockIdx.y picks q head, k head or v head.
#pragma once
#include "common.cuh"
#include "ops.h"

namespace monorail {

constexpr int kPrepDim = 256;  // head_dim these kernels are built for

__device__ inline int mrope_axis(int i, const int* sec) {
  if (i % 3 == 1 && i < 3 * sec[1]) return 1;
  if (i % 3 == 2 && i < 3 * sec[2]) return 2;
  return 0;
}

// What a thread's dim i of head row `hh` (0..nh-1 q, then k heads, then v heads) needs besides the projection row:
// its kind (0 q, 1 k, 2 v), head, norm factor (1 + w[i]) and rotation (positions pos[0..2] = t, h, w). None of it
// is written by a kernel of the step, so the decode prep forms it before its PDL wait.
struct PrepConsts {
  int kind, head;
  float w1 = 1.f, sn = 0.f, cs = 1.f;
};
__device__ inline PrepConsts prep_consts(const AttnDims& d, int hh, int i, const float* q_norm, const float* k_norm,
                                         const float* inv_freq, const int* sec, const int32_t* pos) {
  const int nh = d.n_heads, nkv = d.n_kv_heads;
  PrepConsts c;
  c.kind = hh < nh ? 0 : hh < nh + nkv ? 1 : 2;
  c.head = c.kind == 0 ? hh : c.kind == 1 ? hh - nh : hh - nh - nkv;
  if (c.kind == 2) return c;
  c.w1 = 1.f + (c.kind == 0 ? q_norm : k_norm)[i];
  const int half = d.rotary_dim / 2;
  if (i < d.rotary_dim) {
    const int pair = i % half;
    sincosf((float)pos[mrope_axis(pair, sec)] * inv_freq[pair], &c.sn, &c.cs);
  }
  return c;
}

// This thread's dim i of its head row of the projection row (prep_consts), normalised and rotated for q and k, as
// is for v. Block-uniform branches only: every thread of the block reaches the same barriers.
__device__ inline float prep_norm_rope(const float* row, const AttnDims& d, int i, const PrepConsts& c, float* xs,
                                       float* red) {
  const int nh = d.n_heads, nkv = d.n_kv_heads;
  float x;
  if (c.kind == 0) x = row[c.head * 2 * kPrepDim + i];
  else if (c.kind == 1) x = row[nh * 2 * kPrepDim + c.head * kPrepDim + i];
  else x = row[nh * 2 * kPrepDim + nkv * kPrepDim + c.head * kPrepDim + i];
  if (c.kind == 2) return x;
  float ss = block_sum(x * x, red);
  x = x * rsqrtf(ss / kPrepDim + d.eps) * c.w1;
  xs[i] = x;
  __syncthreads();
  const int rot = d.rotary_dim, half = rot / 2;
  if (i < rot) x = i < half ? x * c.cs - xs[i + half] * c.sn : x * c.cs + xs[i - half] * c.sn;
  return x;
}

// Append dim i of a k (kind 1) or v (kind 2) head to the cache at `slot` in the format d.kv_fmt (ops.h):
// bf16; or int8 / int4 group 64: absmax over the 64 dims across two warps, an fp16 scale absmax / 127
// (int8) or absmax / 7 (int4: symmetric codes -7..7, the largest magnitude of the group exact; the 16th
// code is left unused so that the grid stays symmetric), codes quantized with that rounded scale.
// int4 packs two dims per byte (even dim low nibble, code + 8); the odd dim's code comes from the next
// lane by a shuffle, so every thread of the block must call this (it does: block-uniform kinds).
__device__ inline void prep_append_kv(float x, int i, int kind, int head, size_t slot, const AttnDims& d,
                                      char* k_cache, char* v_cache, char* k_scales, char* v_scales, float* gmax) {
  const int nkv = d.n_kv_heads;
  const size_t idx = (slot * nkv + head) * kPrepDim + i;
  char* cache = kind == 1 ? k_cache : v_cache;
  if (d.kv_fmt == kKvBf16) {
    reinterpret_cast<__nv_bfloat16*>(cache)[idx] = __float2bfloat16(x);
    return;
  }
  const bool int4 = d.kv_fmt == kKvInt4;
  float m = warp_max(fabsf(x));
  if ((i & 31) == 0) gmax[i >> 5] = m;
  __syncthreads();
  const int g = i >> 6;
  m = fmaxf(gmax[2 * g], gmax[2 * g + 1]);
  const __half sh = __float2half(int4 ? m / 7.f : m / 127.f);
  const float s = __half2float(sh);
  int q = s > 0.f ? __float2int_rn(x / s) : 0;
  if (int4) {
    q = max(-7, min(7, q)) + 8;
    const int odd = __shfl_down_sync(0xffffffffu, q, 1);  // dim i + 1 (same warp: i even)
    if ((i & 1) == 0) reinterpret_cast<unsigned char*>(cache)[idx >> 1] = (unsigned char)(q | (odd << 4));
  } else {
    q = max(-127, min(127, q));
    reinterpret_cast<int8_t*>(cache)[idx] = (int8_t)q;
  }
  if ((i & 63) == 0) {
    char* sc = kind == 1 ? k_scales : v_scales;
    reinterpret_cast<__half*>(sc)[(slot * nkv + head) * (kPrepDim / 64) + g] = sh;
  }
}

}  // namespace monorail
