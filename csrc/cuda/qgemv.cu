// Quantized GEMV for T = 1..16 tokens over the canonical groupwise formats (4/5/6/8-bit, group 32/64).
//
// Work split: one warp owns a pair of output rows (so a SwiGLU pair gate/up lands in one warp);
// lane l reads chunk c = l, l+32, ... of 32 consecutive weights of each row: 16 bytes of codes per
// row per chunk (4-bit), coalesced as 512 contiguous bytes per warp; U chunks of both rows are
// loaded before any is used. x (fp16, perm8 order) is read through L1, where every warp of the SM
// shares it. Launch variants for T = 1 (persistent grid, software pipelining) are listed below;
// variants 6..15 (qgemv4_sx_kernel) stage x once per block in shared memory instead and stream the
// weights past L1.
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
constexpr int kNumVariants = 15;  // T = 1, 4-bit launch variants 1..15 (launch_bits)

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

// ---- T = 1, 4-bit: x staged in shared memory (variants 6..15) ----
// Profile of variant 1 (ncu, gate_up): L1/TEX is the busiest unit (76 %), DRAM at 52 %. Each lane's
// four 16-byte x loads are 64 bytes apart across lanes (2x the sectors, 16 L1 wavefronts per load
// instead of 4) and repeat for every row pair, and the streamed weights allocate in L1 and evict x.
// Here a block stages x once (fp16, perm8 order) in shared memory and then walks many row groups:
//   * x: piece p (16 bytes) of 64-byte chunk c is stored at slot 4c + (p ^ ((c >> 1) & 3)). A quarter
//     warp (8 lanes, chunks c = 8m..8m+7) reading piece p hits slots 4 (c & 1) + (p ^ ((c >> 1) & 3))
//     mod 8, which are 8 distinct 16-byte bank groups: 4 wavefronts per 512-byte LDS.128, no conflict.
//     The staging stores (thread q -> chunk q >> 2, piece q & 3) are conflict-free the same way.
//   * weights and scales: ld.global.nc.L1::no_allocate (streamed once; L1 is not polluted), optionally
//     with an L2 evict-first policy.
//   * a warp owns ROWS consecutive rows (2 or 4; a SwiGLU pair (2p, 2p+1) never straddles warps) and
//     strides over row groups by the number of warps in the grid (persistent: one resident wave).
//   * PIPE: the next batch (U chunks of each row) is loaded before the current one is used, across
//     row-group boundaries too, and the first batch is in flight while x is being staged.
template <bool EVICT>
__device__ inline uint4 ld_stream16(const uint8_t* p, uint64_t pol) {
  uint4 v;
  if (EVICT)
    asm volatile("ld.global.nc.L1::no_allocate.L2::cache_hint.v4.u32 {%0,%1,%2,%3}, [%4], %5;"
                 : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "l"(p), "l"(pol));
  else
    asm volatile("ld.global.nc.L1::no_allocate.v4.u32 {%0,%1,%2,%3}, [%4];"
                 : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "l"(p));
  return v;
}

__device__ inline float ld_stream_half(const __half* p) {
  unsigned short h;
  asm volatile("ld.global.nc.L1::no_allocate.b16 %0, [%1];" : "=h"(h) : "l"(p));
  return __half2float(__ushort_as_half(h));
}

__device__ inline int xs_slot(int c, int p) { return 4 * c + (p ^ ((c >> 1) & 3)); }

// ROWS rows per warp, U chunks per row in flight, WARPS warps per block, MINB min blocks per SM (register cap),
// SX x from shared memory (else __ldg through L1 as in qgemv_kernel), PIPE software pipeline, EVICT L2 evict-first.
template <int ROWS, int U, int WARPS, int MINB, bool SX, bool PIPE, bool EVICT>
__global__ void __launch_bounds__(WARPS * 32, MINB) qgemv4_sx_kernel(GemvArgs a) {
  extern __shared__ uint4 xs[];  // 4 * (K / 32) slots of 16 bytes (SX only)
  const int lane = threadIdx.x & 31;
  const int nch = a.K >> 5;
  const int ngroups = a.K >> a.gshift;
  const int nrg = (a.N + ROWS - 1) / ROWS;
  const int stride = gridDim.x * WARPS;
  const size_t rowb = (size_t)(a.K >> 1);
  uint64_t pol = 0;
  if (EVICT) asm volatile("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;" : "=l"(pol));

  Chunk<4> w[ROWS][U], wn[ROWS][U];
  float s[ROWS][U], sn[ROWS][U];
  auto load_batch = [&](int g, int cb, Chunk<4> (&ww)[ROWS][U], float (&ss)[ROWS][U]) {
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const int c = cb + 32 * u;
      if (c < nch) {
#pragma unroll
        for (int i = 0; i < ROWS; ++i) {
          const int r = min(g * ROWS + i, a.N - 1);  // last partial group: re-read the last row
          ww[i][u].lo = ld_stream16<EVICT>(a.codes + r * rowb + c * 16, pol);
          ss[i][u] = ld_stream_half(a.scales + (size_t)r * ngroups + ((c * 32) >> a.gshift));
        }
      }
    }
  };

  int g = blockIdx.x * WARPS + (threadIdx.x >> 5);
  // first batch in flight while x is staged (both modes)
  if (g < nrg && lane < nch) load_batch(g, lane, w, s);
  if (SX) {
    const uint4* xg = reinterpret_cast<const uint4*>(a.x);
    const int npieces = 4 * nch;
    int q = threadIdx.x;
    for (; q + 3 * WARPS * 32 < npieces; q += 4 * WARPS * 32) {  // 4 loads in flight per thread
      uint4 v[4];
#pragma unroll
      for (int j = 0; j < 4; ++j) v[j] = __ldg(xg + q + j * WARPS * 32);
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        const int qq = q + j * WARPS * 32;
        xs[xs_slot(qq >> 2, qq & 3)] = v[j];
      }
    }
    for (; q < npieces; q += WARPS * 32) xs[xs_slot(q >> 2, q & 3)] = __ldg(xg + q);
    __syncthreads();  // every thread of the block reaches this (no early exit above)
  }

  bool first = true;  // non-PIPE: the batch loaded before the staging is the first one used
  for (; g < nrg; g += stride) {
    float acc[ROWS];
#pragma unroll
    for (int i = 0; i < ROWS; ++i) acc[i] = 0.f;
    for (int cb = lane; cb < nch; cb += 32 * U) {
      if (PIPE) {
        int ncb = cb + 32 * U, ng = g;
        if (ncb >= nch) {  // next batch is the first one of this warp's next row group
          ncb = lane;
          ng = g + stride;
        }
        if (ng < nrg) load_batch(ng, ncb, wn, sn);
      } else {
        if (!first) load_batch(g, cb, w, s);
        first = false;
      }
#pragma unroll
      for (int u = 0; u < U; ++u) {
        const int c = cb + 32 * u;
        if (c >= nch) break;
        uint4 xv[4];
        if (SX) {
          const uint4* xr = xs + 4 * c;
          const int sw = (c >> 1) & 3;
#pragma unroll
          for (int p = 0; p < 4; ++p) xv[p] = xr[p ^ sw];
        } else {
          const uint4* xp = reinterpret_cast<const uint4*>(a.x + c * 32);
#pragma unroll
          for (int p = 0; p < 4; ++p) xv[p] = __ldg(xp + p);
        }
#pragma unroll
        for (int i = 0; i < ROWS; ++i) acc[i] = fmaf(s[i][u], chunk_dot<4>(w[i][u], xv), acc[i]);
      }
      if (PIPE) {
#pragma unroll
        for (int u = 0; u < U; ++u)
#pragma unroll
          for (int i = 0; i < ROWS; ++i) {
            w[i][u] = wn[i][u];
            s[i][u] = sn[i][u];
          }
      }
    }
#pragma unroll
    for (int i = 0; i < ROWS; ++i) acc[i] = warp_sum(acc[i]);
    // lane i writes row i of the group (SwiGLU: lane j writes pair j); compile-time indices only
    const int r0 = g * ROWS;
    if (a.epi == GEMV_SWIGLU) {
#pragma unroll
      for (int j = 0; j < ROWS / 2; ++j) {
        const int pair = g * (ROWS / 2) + j;
        if (lane == j && 2 * pair + 1 < a.N) a.out_h[perm8(pair)] = __float2half(silu(acc[2 * j]) * acc[2 * j + 1]);
      }
    } else {
#pragma unroll
      for (int i = 0; i < ROWS; ++i) {
        if (lane != i || r0 + i >= a.N) continue;
        if (a.epi == GEMV_STORE) a.out_f32[r0 + i] = acc[i];
        else a.out_f32[r0 + i] += acc[i];
      }
    }
  }
}

// Grid: one resident wave (occupancy calculator, cached per shared-memory size), or fewer blocks when
// the row groups run out. BALANCED: the fewest warps that still need the same number of rounds, so
// every warp walks the same number of row groups (no last partial round).
template <int ROWS, int U, int WARPS, int MINB, bool SX, bool PIPE, bool EVICT>
bool launch_sx(const GemvArgs& a, cudaStream_t st, bool balanced) {
  auto kern = qgemv4_sx_kernel<ROWS, U, WARPS, MINB, SX, PIPE, EVICT>;
  const size_t smem = SX ? (size_t)a.K * 2 : 0;
  if constexpr (SX) {
    static int max_optin = -1;
    if (max_optin < 0) {
      int dev = 0;
      cudaGetDevice(&dev);
      if (cudaDeviceGetAttribute(&max_optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev) != cudaSuccess)
        max_optin = 48 * 1024;
    }
    if (smem > (size_t)max_optin) return false;  // x does not fit: the caller falls back
    static size_t attr_set = 48 * 1024;
    if (smem > attr_set) {  // K > 24576 only
      MR_CHECK(cudaFuncSetAttribute(kern, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem), "qgemv smem attr");
      attr_set = smem;
    }
  }
  static size_t cache_smem[8];
  static int cache_n[8];
  static int cache_len = 0;
  int per_sm = 0;
  for (int i = 0; i < cache_len; ++i)
    if (cache_smem[i] == smem) per_sm = cache_n[i];
  if (!per_sm) {
    if (cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kern, WARPS * 32, smem) != cudaSuccess || per_sm <= 0)
      per_sm = 1;
    if (cache_len < 8) {
      cache_smem[cache_len] = smem;
      cache_n[cache_len++] = per_sm;
    }
  }
  const long long groups = (a.N + ROWS - 1) / ROWS;
  const long long cap = (long long)sm_count() * per_sm;  // blocks of one wave
  long long blocks = (groups + WARPS - 1) / WARPS;
  if (blocks > cap) {
    if (balanced) {
      const long long rounds = (groups + cap * WARPS - 1) / (cap * WARPS);
      const long long warps = (groups + rounds - 1) / rounds;
      blocks = std::min(cap, (warps + WARPS - 1) / WARPS);
    } else {
      blocks = cap;
    }
  }
  kern<<<(int)blocks, WARPS * 32, smem, st>>>(a);
  return true;
}

int g_variant = 0;  // T = 1, 4-bit: 0 = route by shape, 1..15 = force one variant (set_qgemv_variant)

template <int BITS>
void launch_bits(const GemvArgs& a, cudaStream_t st) {
  // 5/6/8-bit decode per element and are instantiated for T = 1 and T <= 16 only (compile time).
  if (a.T <= 1) {
    // route (measured on H200, bench/NOTES.md session 2 call 2): the software pipeline pays for long
    // rows (K = 17408: 18.2 vs 20.5 us); tall matrices (gate_up, lm_head) gain most from x staged in
    // shared memory (gate_up 33.0 vs 39.8 us); plain U2 elsewhere
    const int v = g_variant ? g_variant : (a.K > 8192 ? 4 : (a.N >= 24576 ? 6 : 1));
    // 6..15 (qgemv4_sx_kernel, persistent grid; rows/warp R, chunks in flight U, threads/block, register cap):
    //   6  x in smem, weights L1::no_allocate, R2 U2, 256 thr, <= 64 regs (4 blocks/SM)
    //   7  6 + software pipeline (next batch loaded before use, across row groups and the x staging)
    //   8  R4 U2 (each x read feeds 4 rows; 4 KB in flight per warp), <= 80 regs (3 blocks/SM)
    //   9  R4 U1 pipelined, <= 80 regs
    //   10 7 with 512-thread blocks (x staged half as often per SM)
    //   11 7 with a balanced grid (every warp walks the same number of row groups: no partial last round)
    //   12 7 with x through L1 (__ldg) as in variant 1: isolates the no_allocate weights from the smem x
    //   13 7 with an L2 evict-first policy on the weights (x and the next layer's data stay in L2)
    //   14 6 capped at 48 regs (5 blocks/SM, 40 warps)
    //   15 R2 U4 (4 KB in flight per warp), <= 80 regs
    // A K whose x does not fit in shared memory falls back to variant 1.
    if constexpr (BITS == 4) {
      bool done = true;
      if (v == 6) done = launch_sx<2, 2, 8, 4, true, false, false>(a, st, false);
      else if (v == 7) done = launch_sx<2, 2, 8, 4, true, true, false>(a, st, false);
      else if (v == 8) done = launch_sx<4, 2, 8, 3, true, false, false>(a, st, false);
      else if (v == 9) done = launch_sx<4, 1, 8, 3, true, true, false>(a, st, false);
      else if (v == 10) done = launch_sx<2, 2, 16, 2, true, true, false>(a, st, false);
      else if (v == 11) done = launch_sx<2, 2, 8, 4, true, true, false>(a, st, true);
      else if (v == 12) done = launch_sx<2, 2, 8, 4, false, true, false>(a, st, false);
      else if (v == 13) done = launch_sx<2, 2, 8, 4, true, true, true>(a, st, false);
      else if (v == 14) done = launch_sx<2, 2, 8, 5, true, false, false>(a, st, false);
      else if (v == 15) done = launch_sx<2, 4, 8, 3, true, false, false>(a, st, false);
      else done = false;
      if (done) return;
      if (v >= 6) {
        launch<BITS, 1, 2, false, false>(a, st);
        return;
      }
    }
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
  if (v < 0 || v > kNumVariants) throw std::invalid_argument("qgemv variant must be 0 (route by shape) or 1..15");
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
