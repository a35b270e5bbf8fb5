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

// This thread's dim i of head row `hh` (0..nh-1 q, then k heads, then v heads) of the projection row,
// normalised and rotated for q and k (positions pos[0..2] = t, h, w), as is for v. kind: 0 q, 1 k, 2 v.
// Block-uniform branches only: every thread of the block reaches the same barriers.
__device__ inline float prep_norm_rope(const float* row, const AttnDims& d, int hh, int i, const float* q_norm,
                                       const float* k_norm, const float* inv_freq, const int* sec,
                                       const int32_t* pos, int& kind, int& head, float* xs, float* red) {
  const int nh = d.n_heads, nkv = d.n_kv_heads;
  float x;
  if (hh < nh) { kind = 0; head = hh; x = row[head * 2 * kPrepDim + i]; }
  else if (hh < nh + nkv) { kind = 1; head = hh - nh; x = row[nh * 2 * kPrepDim + head * kPrepDim + i]; }
  else { kind = 2; head = hh - nh - nkv; x = row[nh * 2 * kPrepDim + nkv * kPrepDim + head * kPrepDim + i]; }
  if (kind == 2) return x;
  float ss = block_sum(x * x, red);
  const float* w = kind == 0 ? q_norm : k_norm;
  x = x * rsqrtf(ss / kPrepDim + d.eps) * (1.f + w[i]);
  xs[i] = x;
  __syncthreads();
  const int rot = d.rotary_dim, half = rot / 2;
  if (i < rot) {
    const int pair = i % half;
    float sn, cs;
    sincosf((float)pos[mrope_axis(pair, sec)] * inv_freq[pair], &sn, &cs);
    x = i < half ? x * cs - xs[i + half] * sn : x * cs + xs[i - half] * sn;
  }
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
