// The per-token GEMV kernel (qgemv_kernel): the generic T = 1 path (variants 1..5, and the fallback of the 5/6/8-bit
// routes) and, with the tensor-core GEMV off (set_qgemv_mma(false)), T = 2..16 with each chunk decoded again for every
// token. A translation unit of its own since session 49 (qgemv_common.cuh), so that a cold build compiles it beside
// qgemv.cu and qgemv_mma.cu.
#include <algorithm>

#include "common.cuh"
#include "pdl.cuh"
#include "stamps.cuh"
#include "ptx.cuh"
#include "q4_half2.cuh"
#include "qgemv_common.cuh"
#include "ops.h"

namespace monorail {
namespace {

using namespace gemv;

// Variants (chosen per launch; bench/decode.py times them side by side):
//   U      chunks per row loaded before use (2 rows x U x 16 B in flight per lane)
//   PERSIST grid = one resident wave, grid-stride over row pairs; else one pair per warp
//   PIPE   the next batch of chunks is loaded before the current one is used (software pipeline)
//   XL     x in the lanes layout (common.cuh lanes_pos): the warp's p-th 16-byte load of x is one contiguous 512 bytes
template <int BITS, int TT, int U, bool PERSIST, bool PIPE, bool XL = false>
__global__ void __launch_bounds__(kWarps * 32) qgemv_kernel(GemvArgs a) {
  MR_WARP_STAMP(kStampGemvGeneric, a.codes);
  const int lane = threadIdx.x & 31;
  const int npairs = (a.N + 1) >> 1;
  const int nch = a.K >> 5;
  const int ngroups = a.K >> a.gshift;
  const int first = blockIdx.x * kWarps + (threadIdx.x >> 5);
  const int stride = PERSIST ? gridDim.x * kWarps : npairs;
  bool waited = false;  // pdl.cuh: the first batch of weights is loaded before the wait, x only after it
  auto wait_once = [&]() {
    if (!waited) {
      pdl_wait();
      pdl_trigger();
      waited = true;
    }
  };
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
      wait_once();
#pragma unroll
      for (int u = 0; u < U; ++u) {
        const int c = cb + 32 * u;
        if (c >= nch) break;
#pragma unroll
        for (int t = 0; t < TT; ++t) {
          if (t < a.T) {
            uint4 xv[4];
            load_x_global<XL>(reinterpret_cast<const uint4*>(a.x + (size_t)t * a.K), c, nch, xv);
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
    wait_once();  // lanes that loaded no chunk (K < 32 T) still write outputs
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
        a.out_h[(size_t)t * a.ldo + swiglu_pos(a, pair)] = __float2half(silu(acc[0][t]) * acc[1][t]);
      }
    }
  }
  wait_once();  // a warp without work still waits (pdl.cuh: completion stays transitive)
}

}  // namespace

namespace gemv {

template <int BITS, int TT, int U, bool PERSIST, bool PIPE, bool XL>
void launch_generic(const GemvArgs& a, cudaStream_t st) {
  auto kern = qgemv_kernel<BITS, TT, U, PERSIST, PIPE, XL>;
  int blocks = ceil_div(ceil_div(a.N, 2), kWarps);
  if (PERSIST) {  // one resident wave, from the occupancy calculator
    static int per_sm = 0;
    if (!per_sm && (cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kern, kWarps * 32, 0) != cudaSuccess ||
                    per_sm <= 0))
      per_sm = 4;
    blocks = std::min(blocks, sm_count() * per_sm);
  }
  launch_pdl("qgemv", kern, dim3(blocks), dim3(kWarps * 32), 0, st, a);
}

// The forms qgemv.cu's launch_bits launches (every width: T = 1, 2, 4, 8, 16 at U = 2; 4-bit T = 1 also variants 2..5
// and the lanes layout).
template void launch_generic<4, 1, 2, false, false, false>(const GemvArgs&, cudaStream_t);
template void launch_generic<4, 1, 2, false, true, false>(const GemvArgs&, cudaStream_t);
template void launch_generic<4, 1, 2, false, true, true>(const GemvArgs&, cudaStream_t);
template void launch_generic<4, 1, 2, true, true, false>(const GemvArgs&, cudaStream_t);
template void launch_generic<4, 1, 4, false, false, false>(const GemvArgs&, cudaStream_t);
template void launch_generic<4, 1, 4, true, false, false>(const GemvArgs&, cudaStream_t);
template void launch_generic<4, 2, 2, false, false, false>(const GemvArgs&, cudaStream_t);
template void launch_generic<4, 4, 2, false, false, false>(const GemvArgs&, cudaStream_t);
template void launch_generic<4, 8, 2, false, false, false>(const GemvArgs&, cudaStream_t);
template void launch_generic<4, 16, 2, false, false, false>(const GemvArgs&, cudaStream_t);
template void launch_generic<5, 1, 2, false, false, false>(const GemvArgs&, cudaStream_t);
template void launch_generic<5, 2, 2, false, false, false>(const GemvArgs&, cudaStream_t);
template void launch_generic<5, 4, 2, false, false, false>(const GemvArgs&, cudaStream_t);
template void launch_generic<5, 8, 2, false, false, false>(const GemvArgs&, cudaStream_t);
template void launch_generic<5, 16, 2, false, false, false>(const GemvArgs&, cudaStream_t);
template void launch_generic<6, 1, 2, false, false, false>(const GemvArgs&, cudaStream_t);
template void launch_generic<6, 2, 2, false, false, false>(const GemvArgs&, cudaStream_t);
template void launch_generic<6, 4, 2, false, false, false>(const GemvArgs&, cudaStream_t);
template void launch_generic<6, 8, 2, false, false, false>(const GemvArgs&, cudaStream_t);
template void launch_generic<6, 16, 2, false, false, false>(const GemvArgs&, cudaStream_t);
template void launch_generic<8, 1, 2, false, false, false>(const GemvArgs&, cudaStream_t);
template void launch_generic<8, 2, 2, false, false, false>(const GemvArgs&, cudaStream_t);
template void launch_generic<8, 4, 2, false, false, false>(const GemvArgs&, cudaStream_t);
template void launch_generic<8, 8, 2, false, false, false>(const GemvArgs&, cudaStream_t);
template void launch_generic<8, 16, 2, false, false, false>(const GemvArgs&, cudaStream_t);

}  // namespace gemv

MR_STAMPS_TU(qgemv_generic)

}  // namespace monorail
