// Quantized GEMV for T = 1..16 tokens over the canonical groupwise formats (4/5/6/8-bit, group 32/64).
//
// Work split: one warp owns a pair of output rows (so a SwiGLU pair gate/up lands in one warp);
// lane l reads chunk c = l, l+32, ... of 32 consecutive weights of each row: 16 bytes of codes per
// row per chunk (4-bit), coalesced as 512 contiguous bytes per warp; U chunks of both rows are
// loaded before any is used. x (fp16, perm8 order) is read through L1, where every warp of the SM
// shares it. Launch variants for T = 1 (persistent grid, software pipelining) are listed below.
//
// 4-bit path: a 32-bit code word holds elements k..k+7; (w >> 4i) & 0x000F000F | 0x64006400 is the
// half2 (1024 + c_i, 1024 + c_{i+4}), which pairs with the perm8 half2 (x_i, x_{i+4}). Sixteen
// products are summed in fp16, then in fp32. 5/6/8-bit: codes are decoded to fp32 per element.
#include <algorithm>

#include "common.cuh"
#include "ops.h"

namespace monorail {
namespace {

constexpr int kWarps = 4;

struct GemvArgs {
  const uint8_t* codes;
  const uint8_t* high;
  const __half* scales;
  int N, K, gshift;
  const __half* x;
  int T;
  int epi;
  float* out_f32;
  __half* out_h;
  int ldo;
};

template <int BITS>
struct Chunk {
  uint4 lo;    // 32 x 4-bit (or the first 16 bytes of 8-bit)
  uint4 hi8;   // 8-bit: second 16 bytes
  uint2 high;  // 5-bit: .x, 6-bit: .x,.y
};

template <int BITS>
__device__ inline void load_chunk(const GemvArgs& a, int row, int c, Chunk<BITS>& ch) {
  const size_t K = a.K;
  if (BITS == 8) {
    const uint4* p = reinterpret_cast<const uint4*>(a.codes + row * K + c * 32);
    ch.lo = __ldg(p);
    ch.hi8 = __ldg(p + 1);
  } else {
    ch.lo = __ldg(reinterpret_cast<const uint4*>(a.codes + row * (K / 2) + c * 16));
    if (BITS == 5) ch.high.x = __ldg(reinterpret_cast<const uint32_t*>(a.high + row * (K / 8) + c * 4));
    if (BITS == 6) ch.high = __ldg(reinterpret_cast<const uint2*>(a.high + row * (K / 4) + c * 8));
  }
}

// Code of element k (0..31) of a chunk, for the generic path (compile-time k after unrolling).
template <int BITS>
__device__ inline int code_of(const Chunk<BITS>& ch, int k) {
  if (BITS == 8) {
    uint32_t w = k < 16 ? (&ch.lo.x)[k >> 2] : (&ch.hi8.x)[(k - 16) >> 2];
    return (w >> ((k & 3) * 8)) & 0xFF;
  }
  uint32_t w = (&ch.lo.x)[k >> 3];
  int c = (w >> ((k & 7) * 4)) & 0xF;
  if (BITS == 5) c |= ((ch.high.x >> k) & 1) << 4;
  if (BITS == 6) c |= ((((&ch.high.x)[k >> 4]) >> ((k & 15) * 2)) & 3) << 4;
  return c;
}

template <int BITS>
__device__ inline float chunk_dot(const Chunk<BITS>& ch, const uint4 (&xv)[4]) {
  if (BITS == 4) {
    // Nibble pairs (i, i+4) of a word: i = 0 and 2 sit at bits 0-3/16-19 of w and w >> 8 (value
    // 1024 + c after the magic OR); i = 1 and 3 sit at bits 4-7/20-23 (value 1024 + 16 c), which one
    // HFMA2 (x 1/16, - 72) turns into c - 8 without a shift.
    const __half2* x2 = reinterpret_cast<const __half2*>(xv);
    const __half2 bias_lo = __floats2half2_rn(1032.f, 1032.f);
    const __half2 sixteenth = __floats2half2_rn(1.f / 16.f, 1.f / 16.f);
    const __half2 bias_hi = __floats2half2_rn(-72.f, -72.f);
    float s = 0.f;
#pragma unroll
    for (int jj = 0; jj < 4; jj += 2) {
      __half2 acc = __floats2half2_rn(0.f, 0.f);
#pragma unroll
      for (int j = jj; j < jj + 2; ++j) {
        const uint32_t w = (&ch.lo.x)[j];
        const uint32_t w8 = w >> 8;
        uint32_t b0 = (w & 0x000F000Fu) | 0x64006400u;
        uint32_t b1 = (w & 0x00F000F0u) | 0x64006400u;
        uint32_t b2 = (w8 & 0x000F000Fu) | 0x64006400u;
        uint32_t b3 = (w8 & 0x00F000F0u) | 0x64006400u;
        __half2 v0 = __hsub2(*reinterpret_cast<__half2*>(&b0), bias_lo);
        __half2 v1 = __hfma2(*reinterpret_cast<__half2*>(&b1), sixteenth, bias_hi);
        __half2 v2 = __hsub2(*reinterpret_cast<__half2*>(&b2), bias_lo);
        __half2 v3 = __hfma2(*reinterpret_cast<__half2*>(&b3), sixteenth, bias_hi);
        acc = __hfma2(v0, x2[4 * j + 0], acc);
        acc = __hfma2(v1, x2[4 * j + 1], acc);
        acc = __hfma2(v2, x2[4 * j + 2], acc);
        acc = __hfma2(v3, x2[4 * j + 3], acc);
      }
      float2 f = __half22float2(acc);
      s += f.x + f.y;
    }
    return s;
  } else {
    const __half* xh = reinterpret_cast<const __half*>(xv);
    const float off = float(1 << (BITS - 1));
    float s = 0.f;
#pragma unroll
    for (int k = 0; k < 32; ++k) s = fmaf(float(code_of<BITS>(ch, k)) - off, __half2float(xh[perm8(k)]), s);
    return s;
  }
}

// Variants (chosen per launch; bench/decode.py times them side by side):
//   U      chunks per row loaded before use (2 rows x U x 16 B in flight per lane)
//   PERSIST grid = one resident wave, grid-stride over row pairs; else one pair per warp
//   PIPE   the next batch of chunks is loaded before the current one is used (software pipeline)
template <int BITS, int TT, int U, bool PERSIST, bool PIPE>
__global__ void __launch_bounds__(kWarps * 32) qgemv_kernel(GemvArgs a) {
  const int lane = threadIdx.x & 31;
  const int npairs = (a.N + 1) >> 1;
  const int nch = a.K >> 5;
  const int ngroups = a.K >> a.gshift;
  const int first = blockIdx.x * kWarps + (threadIdx.x >> 5);
  const int stride = PERSIST ? gridDim.x * kWarps : npairs;
  for (int pair = first; pair < npairs; pair += stride) {
    const int r0 = 2 * pair;
    const int r1 = min(r0 + 1, a.N - 1);
    float acc[2][TT];
#pragma unroll
    for (int r = 0; r < 2; ++r)
#pragma unroll
      for (int t = 0; t < TT; ++t) acc[r][t] = 0.f;
    Chunk<BITS> w[2][U], wn[2][U];
    float s[2][U], sn[2][U];
    auto load_batch = [&](int cb, Chunk<BITS> (&ww)[2][U], float (&ss)[2][U]) {
#pragma unroll
      for (int u = 0; u < U; ++u) {
        const int c = cb + 32 * u;
        if (c < nch) {
          load_chunk<BITS>(a, r0, c, ww[0][u]);
          load_chunk<BITS>(a, r1, c, ww[1][u]);
          ss[0][u] = __half2float(a.scales[(size_t)r0 * ngroups + ((c * 32) >> a.gshift)]);
          ss[1][u] = __half2float(a.scales[(size_t)r1 * ngroups + ((c * 32) >> a.gshift)]);
        }
      }
    };
    if (PIPE) load_batch(lane, w, s);
    for (int cb = lane; cb < nch; cb += 32 * U) {
      if (PIPE) {
        if (cb + 32 * U < nch) load_batch(cb + 32 * U, wn, sn);
      } else {
        load_batch(cb, w, s);
      }
#pragma unroll
      for (int u = 0; u < U; ++u) {
        const int c = cb + 32 * u;
        if (c >= nch) break;
#pragma unroll
        for (int t = 0; t < TT; ++t) {
          if (t < a.T) {
            const uint4* xp = reinterpret_cast<const uint4*>(a.x + (size_t)t * a.K + c * 32);
            uint4 xv[4] = {__ldg(xp), __ldg(xp + 1), __ldg(xp + 2), __ldg(xp + 3)};
            acc[0][t] = fmaf(s[0][u], chunk_dot<BITS>(w[0][u], xv), acc[0][t]);
            acc[1][t] = fmaf(s[1][u], chunk_dot<BITS>(w[1][u], xv), acc[1][t]);
          }
        }
      }
      if (PIPE) {
#pragma unroll
        for (int u = 0; u < U; ++u) {
          w[0][u] = wn[0][u];
          w[1][u] = wn[1][u];
          s[0][u] = sn[0][u];
          s[1][u] = sn[1][u];
        }
      }
    }
#pragma unroll
    for (int t = 0; t < TT; ++t) {
      acc[0][t] = warp_sum(acc[0][t]);
      acc[1][t] = warp_sum(acc[1][t]);
    }
    // lane t writes token t: the epilogue is spread over lanes instead of serialised on lane 0
#pragma unroll
    for (int t = 0; t < TT; ++t) {
      if (lane != t || t >= a.T) continue;
      float* o = a.out_f32 + (size_t)t * a.ldo;
      if (a.epi == GEMV_STORE) {
        o[r0] = acc[0][t];
        if (r0 + 1 < a.N) o[r0 + 1] = acc[1][t];
      } else if (a.epi == GEMV_ADD) {
        o[r0] += acc[0][t];
        if (r0 + 1 < a.N) o[r0 + 1] += acc[1][t];
      } else {
        a.out_h[(size_t)t * a.ldo + perm8(pair)] = __float2half(silu(acc[0][t]) * acc[1][t]);
      }
    }
  }
}

int sm_count() {
  static int n = 0;
  if (!n) {
    int dev = 0;
    cudaGetDevice(&dev);
    if (cudaDeviceGetAttribute(&n, cudaDevAttrMultiProcessorCount, dev) != cudaSuccess || n <= 0) n = 132;
  }
  return n;
}

template <int BITS, int TT, int U, bool PERSIST, bool PIPE>
void launch(const GemvArgs& a, cudaStream_t st) {
  auto kern = qgemv_kernel<BITS, TT, U, PERSIST, PIPE>;
  int blocks = ceil_div(ceil_div(a.N, 2), kWarps);
  if (PERSIST) {  // one resident wave, from the occupancy calculator
    static int per_sm = 0;
    if (!per_sm && (cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kern, kWarps * 32, 0) != cudaSuccess ||
                    per_sm <= 0))
      per_sm = 4;
    blocks = std::min(blocks, sm_count() * per_sm);
  }
  kern<<<blocks, kWarps * 32, 0, st>>>(a);
}

int g_variant = 0;  // T = 1, 4-bit: 0 = route by shape, 1..5 = force one variant (set_qgemv_variant)

template <int BITS>
void launch_bits(const GemvArgs& a, cudaStream_t st) {
  // 5/6/8-bit decode per element and are instantiated for T = 1 and T <= 16 only (compile time).
  if (a.T <= 1) {
    // route (measured on H200, bench/NOTES.md call 3): the software pipeline pays for long rows
    // (K = 17408: 19.5 vs 21.2 us), plain U2 wins elsewhere
    const int v = g_variant ? g_variant : (a.K > 8192 ? 4 : 1);
    if (BITS == 4 && v == 2) launch<BITS, 1, 4, false, false>(a, st);
    else if (BITS == 4 && v == 3) launch<BITS, 1, 4, true, false>(a, st);
    else if (BITS == 4 && v == 4) launch<BITS, 1, 2, false, true>(a, st);
    else if (BITS == 4 && v == 5) launch<BITS, 1, 2, true, true>(a, st);
    else launch<BITS, 1, 2, false, false>(a, st);
  }
  else if (BITS != 4) launch<BITS, 16, 2, false, false>(a, st);
  else if (a.T <= 2) launch<BITS, 2, 2, false, false>(a, st);
  else if (a.T <= 4) launch<BITS, 4, 2, false, false>(a, st);
  else if (a.T <= 8) launch<BITS, 8, 2, false, false>(a, st);
  else launch<BITS, 16, 2, false, false>(a, st);
}

}  // namespace

void set_qgemv_variant(int v) {
  if (v < 0 || v > 5) throw std::invalid_argument("qgemv variant must be 0 (route by shape) or 1..5");
  g_variant = v;
}

void qgemv(const QMatrix& W, const __half* x, int T, int epilogue, float* out_f32, __half* out_h, int ldo,
           cudaStream_t stream) {
  if (T < 1 || T > kMaxStepTokens) throw std::invalid_argument("qgemv: T must be in 1..16");
  if (W.cols % 32 != 0 || W.cols % W.q.group != 0) throw std::invalid_argument("qgemv: K must be a multiple of 32 and of the group");
  if (epilogue == GEMV_SWIGLU && W.rows % 2 != 0) throw std::invalid_argument("qgemv: SwiGLU needs an even row count");
  GemvArgs a{reinterpret_cast<const uint8_t*>(W.codes), reinterpret_cast<const uint8_t*>(W.high),
             reinterpret_cast<const __half*>(W.scales), (int)W.rows, (int)W.cols, W.q.group == 64 ? 6 : 5,
             x, T, epilogue, out_f32, out_h, ldo};
  switch (W.q.bits) {
    case 4: launch_bits<4>(a, stream); break;
    case 5: launch_bits<5>(a, stream); break;
    case 6: launch_bits<6>(a, stream); break;
    case 8: launch_bits<8>(a, stream); break;
    default: throw std::invalid_argument("qgemv: bits must be 4, 5, 6 or 8");
  }
  MR_CHECK_LAUNCH("qgemv");
}

}  // namespace monorail
