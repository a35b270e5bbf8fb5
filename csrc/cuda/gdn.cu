// Gated DeltaNet decode: causal depthwise conv update + SiLU, and the delta-rule recurrence with
// fp32 state followed by the gated RMS norm. T tokens are processed in order inside one launch.
//
// gdn_step: one block per value head, 512 threads; thread (j = tid/4, part = tid%4) owns state
// column j, rows part*32 .. part*32+31 (state stored v-major [dv][dk], so the 32 values are one
// contiguous 128-byte run). Sums over k are 32 in-thread FMAs plus two shuffles.
#include "common.cuh"
#include "ops.h"

namespace monorail {
namespace {

__global__ void conv_kernel(const float* x, int ldx, int T, int C, int Kc, const float* w, float* state, float* out) {
  const int c = blockIdx.x * blockDim.x + threadIdx.x;
  if (c >= C) return;
  float win[8];  // Kc - 1 <= 7 previous inputs, oldest first
  float wc[8];
  for (int j = 0; j < Kc - 1; ++j) win[j] = state[(size_t)c * (Kc - 1) + j];
  for (int j = 0; j < Kc; ++j) wc[j] = w[(size_t)c * Kc + j];
  for (int t = 0; t < T; ++t) {
    float xin = x[(size_t)t * ldx + c];
    float y = wc[Kc - 1] * xin;
    for (int j = 0; j < Kc - 1; ++j) y = fmaf(wc[j], win[j], y);
    for (int j = 0; j < Kc - 2; ++j) win[j] = win[j + 1];
    if (Kc > 1) win[Kc - 2] = xin;
    out[(size_t)t * C + c] = silu(y);
  }
  for (int j = 0; j < Kc - 1; ++j) state[(size_t)c * (Kc - 1) + j] = win[j];
}

constexpr int kDk = 128, kDv = 128;

__global__ void __launch_bounds__(512) gdn_kernel(const float* conv_out, const float* z, const float* b,
                                                  const float* a, int ldp, int T, GdnDims d, const float* a_log,
                                                  const float* dt_bias, const float* norm_w, float* state,
                                                  __half* out_h) {
  __shared__ float qs[kDk], ks[kDk], red[32];
  __shared__ float gb[2];
  const int h = blockIdx.x, hk = h / (d.v_heads / d.k_heads);
  const int tid = threadIdx.x, j = tid >> 2, part = tid & 3;
  const int conv_dim = 2 * d.k_heads * kDk + d.v_heads * kDv;
  float* S = state + ((size_t)h * kDv + j) * kDk + part * 32;
  float s[32];
#pragma unroll
  for (int i = 0; i < 32; i += 4) {
    float4 v = *reinterpret_cast<const float4*>(S + i);
    s[i] = v.x; s[i + 1] = v.y; s[i + 2] = v.z; s[i + 3] = v.w;
  }
  const float q_scale = rsqrtf((float)kDk);
  for (int t = 0; t < T; ++t) {
    const float* row = conv_out + (size_t)t * conv_dim;
    // q, k: L2-normalised (eps 1e-6) key head hk; warps 0-3 take q, 4-7 take k
    if (tid < 256) {
      const bool isk = tid >= 128;
      const int i = tid & 127;
      float v = row[(isk ? d.k_heads * kDk : 0) + hk * kDk + i];
      float sq = warp_sum(v * v);
      if ((tid & 31) == 0) red[tid >> 5] = sq;
      __syncwarp();
      (void)v;
      if (isk) ks[i] = v; else qs[i] = v;
    }
    if (tid == 0) {
      float av = a[(size_t)t * ldp + h] + dt_bias[h];
      float sp = av > 20.f ? av : log1pf(expf(av));
      gb[0] = expf(-expf(a_log[h]) * sp);  // decay exp(g)
      gb[1] = 1.f / (1.f + expf(-b[(size_t)t * ldp + h]));  // beta
    }
    __syncthreads();
    const float qn = rsqrtf(red[0] + red[1] + red[2] + red[3] + 1e-6f) * q_scale;
    const float kn = rsqrtf(red[4] + red[5] + red[6] + red[7] + 1e-6f);
    const float decay = gb[0], beta = gb[1];
    const float vj = row[2 * d.k_heads * kDk + h * kDv + j];
    float kv = 0.f;
#pragma unroll
    for (int i = 0; i < 32; ++i) {
      s[i] *= decay;
      kv = fmaf(s[i], ks[part * 32 + i], kv);
    }
    kv += __shfl_xor_sync(0xffffffffu, kv, 1);
    kv += __shfl_xor_sync(0xffffffffu, kv, 2);
    const float u = beta * (vj - kv * kn);
    float o = 0.f;
#pragma unroll
    for (int i = 0; i < 32; ++i) {
      s[i] = fmaf(ks[part * 32 + i] * kn, u, s[i]);
      o = fmaf(s[i], qs[part * 32 + i], o);
    }
    o += __shfl_xor_sync(0xffffffffu, o, 1);
    o += __shfl_xor_sync(0xffffffffu, o, 2);
    o *= qn;
    // gated RMS norm over this head's dv outputs (each value held by 4 threads: count it once)
    __syncthreads();  // red[] reuse
    float ss = block_sum(part == 0 ? o * o : 0.f, red);
    const float r = rsqrtf(ss / kDv + d.eps);
    if (part == 0) {
      float zz = z[(size_t)t * ldp + h * kDv + j];
      out_h[(size_t)t * d.v_heads * kDv + perm8(h * kDv + j)] = __float2half(o * r * norm_w[j] * silu(zz));
    }
    __syncthreads();
  }
#pragma unroll
  for (int i = 0; i < 32; i += 4) *reinterpret_cast<float4*>(S + i) = make_float4(s[i], s[i + 1], s[i + 2], s[i + 3]);
}

}  // namespace

void conv_update_silu(const float* x, int ldx, int T, int C, int Kc, const float* w, float* state, float* out,
                      cudaStream_t stream) {
  if (Kc < 1 || Kc > 8) throw std::invalid_argument("conv_update_silu: kernel width must be 1..8");
  conv_kernel<<<ceil_div(C, 256), 256, 0, stream>>>(x, ldx, T, C, Kc, w, state, out);
  MR_CHECK_LAUNCH("conv_update_silu");
}

void gdn_step(const float* conv_out, const float* z, const float* b, const float* a, int ldp, int T,
              const GdnDims& d, const float* a_log, const float* dt_bias, const float* norm_w, float* state,
              __half* out_h, cudaStream_t stream) {
  if (d.dk != kDk || d.dv != kDv) throw std::invalid_argument("gdn_step: head dims must be 128 x 128");
  if (d.v_heads % d.k_heads) throw std::invalid_argument("gdn_step: v_heads must be a multiple of k_heads");
  gdn_kernel<<<d.v_heads, 512, 0, stream>>>(conv_out, z, b, a, ldp, T, d, a_log, dt_bias, norm_w, state, out_h);
  MR_CHECK_LAUNCH("gdn_step");
}

}  // namespace monorail
