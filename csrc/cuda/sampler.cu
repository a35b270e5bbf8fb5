// Token sampling from logits, one block (1024 threads) per token row.
//   penalties (repetition / presence / frequency, from per-lane token counts) -> mask ids >=
//   vocab_limit -> greedy argmax when temperature == 0; else divide by temperature, then the kept set
//   is {logit >= max(top-k threshold, top-p threshold, min-p threshold)} and the token is the argmax
//   of logit + Gumbel noise over the kept set (an exact draw from the renormalised distribution).
// Thresholds are exact: radix selection over order-preserving 32-bit keys, 4 passes of 8 bits with
// block histograms (counts for top-k, probability mass for top-p). The noise is Philox-4x32-10 keyed
// by (seed) with counter (token id, position, purpose), so a replay gives the same token.
#include "common.cuh"
#include "ops.h"

namespace monorail {
namespace {

constexpr int kThreads = 1024;

__device__ inline uint32_t f2key(float f) {
  uint32_t u = __float_as_uint(f);
  return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
}

__device__ inline uint4 philox(uint4 c, uint2 k) {
#pragma unroll
  for (int r = 0; r < 10; ++r) {
    const uint32_t hi0 = __umulhi(0xD2511F53u, c.x), lo0 = 0xD2511F53u * c.x;
    const uint32_t hi1 = __umulhi(0xCD9E8D57u, c.z), lo1 = 0xCD9E8D57u * c.z;
    c = make_uint4(hi1 ^ c.y ^ k.x, lo1, hi0 ^ c.w ^ k.y, lo0);
    k.x += 0x9E3779B9u;
    k.y += 0xBB67AE85u;
  }
  return c;
}

__device__ inline float adjusted_logit(const float* row, int i, const SamplingParams& p, const int32_t* counts) {
  if (i >= p.vocab_limit) return -INFINITY;
  float l = row[i];
  const int c = counts ? counts[i] : 0;
  if (c > 0) {
    if (p.repetition_penalty != 1.f) l = l > 0.f ? l / p.repetition_penalty : l * p.repetition_penalty;
    l -= p.presence_penalty + p.frequency_penalty * (float)c;
  }
  return l;
}

// Block argmax of (value, index) with the lowest index winning ties.
__device__ inline void argmax_merge(float& v, int& i, float ov, int oi) {
  if (ov > v || (ov == v && oi < i)) { v = ov; i = oi; }
}
__device__ int block_argmax(float v, int i, float* sv, int* si) {
  for (int o = 16; o > 0; o >>= 1) {
    float ov = __shfl_xor_sync(0xffffffffu, v, o);
    int oi = __shfl_xor_sync(0xffffffffu, i, o);
    argmax_merge(v, i, ov, oi);
  }
  const int w = threadIdx.x >> 5, l = threadIdx.x & 31;
  __syncthreads();
  if (l == 0) { sv[w] = v; si[w] = i; }
  __syncthreads();
  if (w == 0) {
    v = sv[l]; i = si[l];
    for (int o = 16; o > 0; o >>= 1) {
      float ov = __shfl_xor_sync(0xffffffffu, v, o);
      int oi = __shfl_xor_sync(0xffffffffu, i, o);
      argmax_merge(v, i, ov, oi);
    }
    if (l == 0) si[0] = i;
  }
  __syncthreads();
  return si[0];
}

__global__ void __launch_bounds__(kThreads) sample_kernel(const float* logits, int V, SamplingParams p,
                                                          const int32_t* counts_all, const StepInputs* in,
                                                          float* scratch, int32_t* out) {
  __shared__ float sv[32];
  __shared__ int si[32];
  __shared__ float hist_mass[256];
  __shared__ uint32_t hist_cnt[256];
  __shared__ uint32_t sel_prefix;
  __shared__ float sel_above;
  const int t = blockIdx.x;
  const float* row = logits + (size_t)t * V;
  const int32_t* counts = counts_all ? counts_all + (size_t)in->lane * V : nullptr;
  float* adj = scratch + (size_t)t * V;  // adjusted, temperature-scaled logits

  // 1. penalties + mask (+ temperature), max
  const float inv_t = p.temperature > 0.f ? 1.f / p.temperature : 1.f;
  float bv = -INFINITY;
  int bi = 0x7fffffff;
  for (int i = threadIdx.x; i < V; i += kThreads) {
    float l = adjusted_logit(row, i, p, counts) * inv_t;
    adj[i] = l;
    argmax_merge(bv, bi, l, i);
  }
  const int best = block_argmax(bv, bi, sv, si);
  if (p.temperature <= 0.f) {
    if (threadIdx.x == 0) out[t] = best;
    return;
  }
  const float M = adj[best];
  __syncthreads();

  // 2. thresholds (keys): top-k by count, then top-p by mass within it, min-p by ratio to the max
  uint32_t thr = 0;
  const bool use_k = p.top_k > 0 && p.top_k < p.vocab_limit;
  const bool use_p = p.top_p < 1.f;
  for (int stage = 0; stage < 2; ++stage) {
    if ((stage == 0 && !use_k) || (stage == 1 && !use_p)) continue;
    float target = 0.f;
    if (stage == 1) {  // mass of the set kept so far
      float z = 0.f;
      for (int i = threadIdx.x; i < V; i += kThreads)
        if (f2key(adj[i]) >= thr && adj[i] > -INFINITY) z += __expf(adj[i] - M);
      target = p.top_p * block_sum(z, sv);
    }
    uint32_t prefix = 0, mask = 0;
    uint32_t remaining = stage == 0 ? (uint32_t)p.top_k : 0;
    float above = 0.f;
    for (int shift = 24; shift >= 0; shift -= 8) {
      for (int b = threadIdx.x; b < 256; b += kThreads) { hist_cnt[b] = 0; hist_mass[b] = 0.f; }
      __syncthreads();
      for (int i = threadIdx.x; i < V; i += kThreads) {
        const float l = adj[i];
        const uint32_t k = f2key(l);
        if (l == -INFINITY || k < thr || (k & mask) != prefix) continue;
        const int b = (k >> shift) & 0xFF;
        if (stage == 0) atomicAdd(&hist_cnt[b], 1u);
        else atomicAdd(&hist_mass[b], __expf(l - M));
      }
      __syncthreads();
      if (threadIdx.x == 0) {
        uint32_t cum = 0;
        float cm = above;
        int b = 255;
        for (; b > 0; --b) {
          if (stage == 0) {
            if (cum + hist_cnt[b] >= remaining) break;
            cum += hist_cnt[b];
          } else {
            if (cm + hist_mass[b] >= target) break;
            cm += hist_mass[b];
          }
        }
        sel_prefix = prefix | ((uint32_t)b << shift);
        sel_above = stage == 0 ? __uint_as_float(remaining - cum) : cm;
      }
      __syncthreads();
      prefix = sel_prefix;
      mask |= 0xFFu << shift;
      if (stage == 0) remaining = __float_as_uint(sel_above);
      else above = sel_above;
      __syncthreads();
    }
    thr = max(thr, prefix);
  }
  if (p.min_p > 0.f) thr = max(thr, f2key(M + __logf(p.min_p)));

  // 3. Gumbel-max over the kept set
  const uint2 key = make_uint2((uint32_t)p.seed, (uint32_t)(p.seed >> 32));
  const uint32_t pos = (uint32_t)(in->kv_start + t);  // absolute position of the token being predicted from
  bv = -INFINITY;
  bi = 0x7fffffff;
  for (int i = threadIdx.x; i < V; i += kThreads) {
    const float l = adj[i];
    if (l == -INFINITY || f2key(l) < thr) continue;
    const uint4 r = philox(make_uint4((uint32_t)i, pos, 0x53414D50u /* purpose "SAMP" */, 0u), key);
    const float u = ((r.x >> 8) + 0.5f) * (1.f / 16777216.f);
    argmax_merge(bv, bi, l - __logf(-__logf(u)), i);
  }
  const int pick = block_argmax(bv, bi, sv, si);
  if (threadIdx.x == 0) out[t] = pick;
}

__global__ void count_kernel(int32_t* counts, const int32_t* ids, int n) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) atomicAdd(&counts[ids[i]], 1);
}

}  // namespace

void sample_tokens(const float* logits, int T, int V, const SamplingParams& p, const int32_t* counts,
                   const StepInputs* in, char* scratch, int32_t* out_tokens, cudaStream_t stream) {
  sample_kernel<<<T, kThreads, 0, stream>>>(logits, V, p, counts, in, reinterpret_cast<float*>(scratch), out_tokens);
  MR_CHECK_LAUNCH("sample_tokens");
}

void count_tokens(int32_t* counts, const int32_t* ids, int n, cudaStream_t stream) {
  if (n <= 0) return;
  count_kernel<<<ceil_div(n, 256), 256, 0, stream>>>(counts, ids, n);
  MR_CHECK_LAUNCH("count_tokens");
}

}  // namespace monorail
