// What the GEMV translation units share: qgemv.cu (the T = 1 kernels, routing and the public entry points),
// qgemv_generic.cu (the per-token kernel: the generic T = 1 path and T > 1 with the tensor-core GEMV off),
// qgemv_mma.cu (the tensor-core GEMV of T = 2..16 tokens: switches, splits, launch, reduce) and the files that
// compile its kernel's forms by width (qgemv_mma_4_8bit.cu, qgemv_mma_5_6bit.cu). They were one file until session 49;
// now they compile side by side (that file was a cold build's longest object, ~120 s on the device,
// bench/results/build-times-h100-s46-call1.txt).
#pragma once

#include <cstdint>

#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include "common.cuh"
#include "ptx.cuh"
#include "q4_half2.cuh"

namespace monorail {
namespace gemv {

constexpr int kWarps = 4;  // warps a block of the T = 1 kernels and the per-token kernel

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
  // qgemv_normed, fused path (NORM kernels): x = rmsnorm(nx) (fp32 [K], natural order) * (nw + nadd), eps neps
  const float* nx = nullptr;
  const float* nw = nullptr;
  float neps = 0.f, nadd = 0.f;
  int x_lanes = 0;    // x in the lanes layout (variant 4 only; ops.h GEMV_X_LANES)
  int out_lanes = 0;  // the SwiGLU epilogue writes out_h in the lanes layout of its N / 2 elements
  int nw_early = 1;   // NORM: the norm weights (constant) loaded before the PDL wait (set_qgemv_norm_weights_early)
};

// Where the SwiGLU epilogue stores pair p of its N / 2 outputs (a row of the next GEMV's x).
__device__ inline int swiglu_pos(const GemvArgs& a, int pair) {
  return a.out_lanes ? lanes_pos(pair, a.N >> 1) : perm8(pair);
}

template <int BITS>
struct Chunk {
  uint4 lo;    // 32 x 4-bit (or the first 16 bytes of 8-bit)
  uint4 hi8;   // 8-bit: second 16 bytes
  uint2 high;  // 5-bit: .x, 6-bit: .x,.y
};

// The high-plane bits of chunk c of a row: 5-bit 4 bytes (.x), 6-bit 8 bytes (.x, .y); nothing at other widths.
template <int BITS>
__device__ inline void load_high(const GemvArgs& a, int row, int c, uint2& high) {
  const size_t K = a.K;
  if (BITS == 5) high.x = __ldg(reinterpret_cast<const uint32_t*>(a.high + row * (K / 8) + c * 4));
  if (BITS == 6) high = __ldg(reinterpret_cast<const uint2*>(a.high + row * (K / 4) + c * 8));
}

template <int BITS>
__device__ inline void load_chunk(const GemvArgs& a, int row, int c, Chunk<BITS>& ch) {
  const size_t K = a.K;
  if (BITS == 8) {
    const uint4* p = reinterpret_cast<const uint4*>(a.codes + row * K + c * 32);
    ch.lo = __ldg(p);
    ch.hi8 = __ldg(p + 1);
  } else {
    ch.lo = __ldg(reinterpret_cast<const uint4*>(a.codes + row * (K / 2) + c * 16));
    load_high<BITS>(a, row, c, ch.high);
  }
}

// The magic-number words of word j (elements 8j..8j+7) of a 5/6/8-bit chunk: b[i] holds the half2 pair of elements
// (8j + i, 8j + i + 4), as (1024 + c, ...) for i = 0, 2 (and every i at 8 bits) and (1024 + 16 c, ...) for i = 1, 3
// at 5 / 6 bits (chunk_dot_fast's and the tensor-core GEMV's decode).
template <int BITS>
__device__ __forceinline__ void magic_words(const Chunk<BITS>& ch, int j, uint32_t (&b)[4]) {
  if constexpr (BITS == 8) {
    const uint32_t e0 = j < 2 ? (&ch.lo.x)[2 * j] : (&ch.hi8.x)[2 * j - 4];  // elements 8j..8j+3
    const uint32_t e1 = j < 2 ? (&ch.lo.x)[2 * j + 1] : (&ch.hi8.x)[2 * j - 3];  // 8j+4..8j+7
    const uint32_t p01 = __byte_perm(e0, e1, 0x5140);  // bytes c0 c4 c1 c5
    const uint32_t p23 = __byte_perm(e0, e1, 0x7362);  // bytes c2 c6 c3 c7
    const uint32_t magic = 0x64646464u;
    b[0] = __byte_perm(p01, magic, 0x4140);  // 0x64 c0 | 0x64 c4 (little end first)
    b[1] = __byte_perm(p01, magic, 0x4342);
    b[2] = __byte_perm(p23, magic, 0x4140);
    b[3] = __byte_perm(p23, magic, 0x4342);
  } else {
    const uint32_t w = (&ch.lo.x)[j];
    const uint32_t w8 = w >> 8;
    uint32_t g[4];  // high bits of pair i, at bits 4/20 (i even) or 8/24 (i odd)
    if constexpr (BITS == 5) {
      // hb bit i = bit 4 of element 8j+i; hb * (2^a + 2^(a+12)) is two disjoint copies of hb, so the
      // mask picks element i at bit a+i and element i+4 at bit a+12+i+4 = a+i+16
      const uint32_t hb = __byte_perm(ch.high.x, 0, 0x4440 + j);
      g[0] = and_or<0x00100010u, 0x64006400u>(hb * 0x10010u);  // a = 4: elements 0, 4 -> bits 4, 20
      g[1] = and_or<0x01000100u, 0x64006400u>(hb * 0x80080u);  // a = 7: elements 1, 5 -> bits 8, 24
      g[2] = and_or<0x00100010u, 0x64006400u>(hb * 0x04004u);  // a = 2: elements 2, 6 -> bits 4, 20
      g[3] = and_or<0x01000100u, 0x64006400u>(hb * 0x20020u);  // a = 5: elements 3, 7 -> bits 8, 24
    } else {
      // 16 bits for elements 8j..8j+7, 2 per element: elements 0..3 -> byte 0, 4..7 -> byte 2 of z,
      // so element i sits at bits 2i and element i+4 at 16 + 2i: one shift places both
      const uint32_t src = j < 2 ? ch.high.x : ch.high.y;
      const uint32_t z = __byte_perm(src, 0, (j & 1) ? 0x4342 : 0x4140);
      g[0] = and_or<0x00300030u, 0x64006400u>(z << 4);
      g[1] = and_or<0x03000300u, 0x64006400u>(z << 6);
      g[2] = and_or<0x00300030u, 0x64006400u>(z);
      g[3] = and_or<0x03000300u, 0x64006400u>(z << 2);
    }
    // g[i] already carries the 0x6400 exponent bits: one LOP3 per pair
    b[0] = and_or<0x000F000Fu>(w, g[0]);
    b[1] = and_or<0x00F000F0u>(w, g[1]);
    b[2] = and_or<0x000F000Fu>(w8, g[2]);
    b[3] = and_or<0x00F000F0u>(w8, g[3]);
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
    return dot_q4_half2(ch.lo, xv);
  } else {
    const __half* xh = reinterpret_cast<const __half*>(xv);
    const float off = float(1 << (BITS - 1));
    float s = 0.f;
#pragma unroll
    for (int k = 0; k < 32; ++k) s = fmaf(float(code_of<BITS>(ch, k)) - off, __half2float(xh[perm8(k)]), s);
    return s;
  }
}

// The four 16-byte pieces of chunk c of one token's x (nch chunks) read through L1, in perm8 order or (XL) in the
// lanes layout, where piece p of chunk c sits at run * 128 + p * run_chunks + c % 32 (16-byte units).
template <bool XL>
__device__ __forceinline__ void load_x_global(const uint4* xt, int c, int nch, uint4 (&xv)[4]) {
  if (XL) {
    const int run = c >> 5;
    const int run_chunks = min(32, nch - 32 * run);
    const uint4* xp = xt + run * 128 + (c & 31);
#pragma unroll
    for (int p = 0; p < 4; ++p) xv[p] = __ldg(xp + p * run_chunks);
  } else {
    const uint4* xp = xt + c * 4;
#pragma unroll
    for (int p = 0; p < 4; ++p) xv[p] = __ldg(xp + p);
  }
}

// Host side. The SMs of the current device (cached; 132 when the query fails). Defined in qgemv.cu.
int sm_count();
// Launches the tensor-core GEMV of a.T = 2..16 tokens for a BITS-bit matrix (and its split-K reduce); defined in
// qgemv_mma.cu, whose switches (set_qgemv_mma_shape and the others) choose the form.
void launch_mma(int bits, const GemvArgs& a, cudaStream_t st);
// Launches one form of the tensor-core kernel (qgemv_mma_kernel<BITS, 1 or 2 n8 tiles, U, LF, MT>, qgemv_mma.cuh);
// defined in qgemv_mma_launch.cuh and instantiated by width in qgemv_mma_4_8bit.cu and qgemv_mma_5_6bit.cu.
template <int BITS, int U, bool LF, int MT = 2>
void launch_mma_kernel(bool two_tiles, dim3 grid, dim3 block, cudaStream_t st, const GemvArgs& a, float* part, int per,
                       bool unchecked);
// Launches the per-token kernel (qgemv_kernel) in one of its forms; defined in qgemv_generic.cu, which instantiates the
// forms qgemv.cu launches (a form missing there is an undefined symbol when the module loads).
template <int BITS, int TT, int U, bool PERSIST, bool PIPE, bool XL = false>
void launch_generic(const GemvArgs& a, cudaStream_t st);

}  // namespace gemv
}  // namespace monorail
