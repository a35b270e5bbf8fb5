// Embedding gather (dequantizing one row of the quantized table per token) and zero-centred RMSNorm
// writing the fp16 perm8 GEMV input. One block per token.
#include "common.cuh"
#include "ops.h"
#include "pdl.cuh"
#include "stamps.cuh"

namespace monorail {
namespace {

// One pass: each thread keeps its (at most kPer) elements in registers between the sum of squares
// and the scaled write, so the row is read from L2 once (this op is latency-bound at T = 1).
constexpr int kNormThreads = 1024, kPer = 8;

__global__ void __launch_bounds__(kNormThreads) rmsnorm_kernel(const float* x, int H, const float* w, float eps,
                                                               float add_one, __half* out) {
  MR_WARP_STAMP(kStampRmsnorm, w);
  __shared__ float red[32];
  const float* xr = x + (size_t)blockIdx.x * H;
  float v[kPer], wv[kPer];
#pragma unroll
  for (int i = 0; i < kPer; ++i) {  // the norm weights before the wait (pdl.cuh: no kernel writes them)
    const int k = threadIdx.x + i * kNormThreads;
    wv[i] = k < H ? w[k] : 0.f;
  }
  pdl_wait();
  pdl_trigger();
  float ss = 0.f;
#pragma unroll
  for (int i = 0; i < kPer; ++i) {
    const int k = threadIdx.x + i * kNormThreads;
    v[i] = k < H ? xr[k] : 0.f;
    ss += v[i] * v[i];
  }
  ss = block_sum(ss, red);
  const float r = rsqrtf(ss / H + eps);
  __half* o = out + (size_t)blockIdx.x * H;
#pragma unroll
  for (int i = 0; i < kPer; ++i) {
    const int k = threadIdx.x + i * kNormThreads;
    if (k < H) o[perm8(k)] = __float2half(v[i] * r * (wv[i] + add_one));
  }
}

// The MTP head's fc input for one token (block): [norm_e(e) | norm_h(norm_src(h))] in fp16 perm8 order, row width
// 2H. h is a residual row before its own final norm (the trunk's final norm, or mtp.norm for a chained draft), so
// it is normalised twice, as the reference normalises the trunk's output. Zero-centred norms (weight + 1).
__global__ void __launch_bounds__(kNormThreads) mtp_fc_input_kernel(const float* e, const float* h, int H,
                                                                    const float* w_e, const float* w_src,
                                                                    const float* w_h, float eps, __half* out) {
  __shared__ float red[32];
  const float* er = e + (size_t)blockIdx.x * H;
  const float* hr = h + (size_t)blockIdx.x * H;
  pdl_wait();
  pdl_trigger();
  float ev[kPer], hv[kPer];
  float se = 0.f, sh = 0.f;
#pragma unroll
  for (int i = 0; i < kPer; ++i) {
    const int k = threadIdx.x + i * kNormThreads;
    ev[i] = k < H ? er[k] : 0.f;
    hv[i] = k < H ? hr[k] : 0.f;
    se += ev[i] * ev[i];
    sh += hv[i] * hv[i];
  }
  se = block_sum(se, red);
  __syncthreads();  // red[] reuse
  sh = block_sum(sh, red);
  const float re = rsqrtf(se / H + eps), rs = rsqrtf(sh / H + eps);
  float s2 = 0.f;
#pragma unroll
  for (int i = 0; i < kPer; ++i) {
    const int k = threadIdx.x + i * kNormThreads;
    hv[i] = k < H ? hv[i] * rs * (w_src[k] + 1.f) : 0.f;
    s2 += hv[i] * hv[i];
  }
  __syncthreads();
  s2 = block_sum(s2, red);
  const float r2 = rsqrtf(s2 / H + eps);
  __half* o = out + (size_t)blockIdx.x * 2 * H;
#pragma unroll
  for (int i = 0; i < kPer; ++i) {
    const int k = threadIdx.x + i * kNormThreads;
    if (k < H) {
      o[perm8(k)] = __float2half(ev[i] * re * (w_e[k] + 1.f));
      o[H + perm8(k)] = __float2half(hv[i] * r2 * (w_h[k] + 1.f));
    }
  }
}

__device__ inline int qcode(const QMatrix& E, const uint8_t* codes, const uint8_t* high, size_t row, int k) {
  const size_t K = E.cols;
  const int bits = E.q.bits;
  if (bits == 8) return codes[row * K + k];
  int c = (codes[row * (K / 2) + k / 2] >> ((k & 1) * 4)) & 0xF;
  if (bits == 5) c |= ((high[row * (K / 8) + k / 8] >> (k & 7)) & 1) << 4;
  if (bits == 6) c |= ((high[row * (K / 4) + k / 4] >> ((k & 3) * 2)) & 3) << 4;
  return c;
}

// One element a thread, the row spread over blocks: every load is issued at once after the wait (the loop
// this replaced ran its ten loads a thread one after another, ~8 us for one token's 10 KB).
constexpr int kEmbedThreads = 256;
__global__ void embed_kernel(QMatrix E, const int32_t* __restrict__ tokens, float* __restrict__ out) {
  MR_WARP_STAMP(kStampEmbed, E.codes);
  pdl_wait();
  pdl_trigger();
  const int t = blockIdx.x;
  const int k = blockIdx.y * kEmbedThreads + threadIdx.x;
  const int K = (int)E.cols;
  if (k >= K) return;
  const size_t row = (size_t)tokens[t];
  const auto* __restrict__ codes = reinterpret_cast<const uint8_t*>(E.codes);
  const auto* __restrict__ high = reinterpret_cast<const uint8_t*>(E.high);
  const auto* __restrict__ scales = reinterpret_cast<const __half*>(E.scales);
  const float off = float(1 << (E.q.bits - 1));
  const float s = __half2float(scales[row * (K / E.q.group) + k / E.q.group]);
  out[(size_t)t * K + k] = (float(qcode(E, codes, high, row, k)) - off) * s;
}

}  // namespace

void rmsnorm_to_gemv_input(const float* x, int T, int H, const float* w, float eps, bool add_one, __half* out,
                           cudaStream_t stream) {
  if (H > kNormThreads * kPer) throw std::invalid_argument("rmsnorm: hidden size above 8192 is not built");
  launch_pdl("rmsnorm", rmsnorm_kernel, dim3(T), dim3(kNormThreads), 0, stream, x, H, w, eps, add_one ? 1.f : 0.f, out);
}

void mtp_fc_input(const float* e, const float* h, int T, int H, const float* w_e, const float* w_src, const float* w_h,
                  float eps, __half* out, cudaStream_t stream) {
  if (H > kNormThreads * kPer) throw std::invalid_argument("mtp_fc_input: hidden size above 8192 is not built");
  if (H % 8 != 0) throw std::invalid_argument("mtp_fc_input: hidden size must be a multiple of 8 (perm8 halves)");
  launch_pdl("mtp_fc_input", mtp_fc_input_kernel, dim3(T), dim3(kNormThreads), 0, stream, e, h, H, w_e, w_src, w_h, eps,
             out);
}

void embed_gather(const QMatrix& E, const int32_t* tokens, int T, float* out, cudaStream_t stream) {
  launch_pdl("embed_gather", embed_kernel, dim3(T, ceil_div(E.cols, kEmbedThreads)), dim3(kEmbedThreads), 0, stream, E,
             tokens, out);
}

MR_STAMPS_TU(norm_embed)

}  // namespace monorail
