// The 4-bit T = 1 GEMV's half2 pieces, shared by qgemv.cu and the standalone probe bench/gemv_ablation.cu (so the
// probe times exactly the engine's arithmetic): the dot of one 32-element chunk of codes with its x, and the
// swizzle of x staged in shared memory.
#pragma once

#include <cuda_fp16.h>

#include <cstdint>

#include "ptx.cuh"

namespace monorail {

// Sum over a chunk of (code - 8) * x: w holds 32 4-bit codes (a 32-bit word per 8 elements), xv the chunk's x in
// perm8 order. Nibble pairs (i, i+4) of a word: i = 0 and 2 sit at bits 0-3/16-19 of w and w >> 8 (value
// 1024 + c after the magic OR); i = 1 and 3 sit at bits 4-7/20-23 (value 1024 + 16 c), which one HFMA2
// (x 1/16, - 72) turns into c - 8 without a shift. Sixteen products are summed in fp16, then in fp32.
__device__ inline float dot_q4_half2(const uint4& codes, const uint4 (&xv)[4]) {
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
      const uint32_t w = (&codes.x)[j];
      const uint32_t w8 = w >> 8;
      uint32_t b0 = and_or<0x000F000Fu, 0x64006400u>(w);
      uint32_t b1 = and_or<0x00F000F0u, 0x64006400u>(w);
      uint32_t b2 = and_or<0x000F000Fu, 0x64006400u>(w8);
      uint32_t b3 = and_or<0x00F000F0u, 0x64006400u>(w8);
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
}

// Slot of 16-byte piece p (0..3) of chunk c in x staged in shared memory (the sx kernels' copy; qgemv.cu, above
// qgemv4_sx_kernel, says why a warp's loads of it meet no bank conflict).
__device__ inline int xs_slot(int c, int p) { return 4 * c + (p ^ ((c >> 1) & 3)); }

}  // namespace monorail
