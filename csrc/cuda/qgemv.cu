// Quantized GEMV for T = 1..16 tokens over the canonical groupwise formats (4/5/6/8-bit, group 32/64).
//
// Work split: one warp owns a pair of output rows (so a SwiGLU pair gate/up lands in one warp);
// lane l reads chunk c = l, l+32, ... of 32 consecutive weights of each row: 16 bytes of codes per
// row per chunk (4-bit), coalesced as 512 contiguous bytes per warp; U chunks of both rows are
// loaded before any is used. x (fp16, perm8 order; for variant 4 the lanes layout where the producer writes it, see
// common.cuh lanes_pos) is read through L1, where every warp of the SM shares it. Launch variants for T = 1 (persistent grid, software pipelining) are listed below;
// variants 6..15 (qgemv4_sx_kernel) stage x once per block in shared memory instead and stream the
// weights past L1; variants 16..19 (qgemv_ring_kernel, every width, the 5/6/8-bit T = 1 default) also
// land the weights in a per-warp cp.async ring in shared memory instead of registers; variants 20..28 run the sx
// kernel on integer dot products (x staged as 16-bit integers, dp4a).
// A tensor-core T = 1 kernel (mma.sync m16n8k16 fed with the magic-number values, per-group bias in the C
// operand) was built and measured in session 4 and removed: correct, but 45-140 us against 31 / 18 for the
// routed kernels on gate_up / down (bench/NOTES.md, session 4 calls 1-2).
//
// 4-bit path: a 32-bit code word holds elements k..k+7; (w >> 4i) & 0x000F000F | 0x64006400 is the
// half2 (1024 + c_i, 1024 + c_{i+4}), which pairs with the perm8 half2 (x_i, x_{i+4}). Sixteen
// products are summed in fp16, then in fp32. 5/6/8-bit at T = 1 (ring kernel): the same with the high
// bits ORed in (chunk_dot_fast); T > 1 and the generic T = 1 path decode them to fp32 per element.
#include <algorithm>
#include <type_traits>
#include <vector>

#include "common.cuh"
#include "pdl.cuh"
#include "stamps.cuh"
#include "ptx.cuh"
#include "q4_half2.cuh"
#include "qgemv_common.cuh"
#include "ops.h"

namespace monorail {

int spread_idle_warps(const std::vector<int>& per_sm_by_idle, int fair_share) {
  for (size_t idle = 0; idle < per_sm_by_idle.size(); ++idle)
    if (per_sm_by_idle[idle] <= fair_share) return (int)idle;
  return 0;  // even the most idle warps leave an SM above its share: none (they would only hold registers)
}

namespace gemv {
int sm_count() {
  static int n = 0;
  if (!n) {
    int dev = 0;
    cudaGetDevice(&dev);
    if (cudaDeviceGetAttribute(&n, cudaDevAttrMultiProcessorCount, dev) != cudaSuccess || n <= 0) n = 132;
  }
  return n;
}
}  // namespace gemv

namespace {

using namespace gemv;  // GemvArgs, Chunk and the chunk loads (qgemv_common.cuh), shared with qgemv_mma.cu

constexpr int kNumVariants = 49;  // T = 1 launch variants 1..49 (launch_bits; 16..19, 45, 46 for every width; 47 in qgemv_normed only; 48 at 5 / 6 / 8 bits; 49 4-bit)

// Fast chunk dot for every width (T = 1 ring kernel). 4-bit: chunk_dot<4> (same arithmetic as variant 1).
// 5/6-bit: the high bits of elements (i, i+4) are ORed into the nibble pair before the 0x6400 magic, so
// the half2 is (1024 + c_i, 1024 + c_{i+4}) (pairs i = 0, 2) or (1024 + 16 c_i, ...) (pairs 1, 3, whose
// nibbles sit at bits 4-7); both stay below 2048, where fp16 holds every integer. 8-bit: two byte_perms
// build the (i, i+4) byte pairs of words 2j and 2j+1 with 0x64 above each byte.
// One HFMA2 per pair then gives (c - 2^(B-1)) / D with D = 2^(B-4), exactly (the result has at most B-4
// fractional bits and |.| <= 8): the fp16 partial sums have the 4-bit path's magnitude, so 8 products
// per half summed in fp16 cannot overflow where the 4-bit path does not. The chunk sum is times D in fp32.
template <int BITS>
__device__ inline float chunk_dot_fast(const Chunk<BITS>& ch, const uint4 (&xv)[4]) {
  if constexpr (BITS == 4) {
    return chunk_dot<4>(ch, xv);
  } else {
    const __half2* x2 = reinterpret_cast<const __half2*>(xv);
    constexpr float D = float(1 << (BITS - 4));
    constexpr float off = float(1 << (BITS - 1));
    const __half2 mul_lo = __floats2half2_rn(1.f / D, 1.f / D);  // code at bits 0..(B-1) of each half
    const __half2 add_lo = __floats2half2_rn(-(1024.f + off) / D, -(1024.f + off) / D);
    const __half2 mul_hi = __floats2half2_rn(1.f / (16.f * D), 1.f / (16.f * D));  // code at bits 4..(B+3)
    const __half2 add_hi = __floats2half2_rn(-(64.f + off) / D, -(64.f + off) / D);
    float s = 0.f;
#pragma unroll
    for (int jj = 0; jj < 4; jj += 2) {
      __half2 acc = __floats2half2_rn(0.f, 0.f);
#pragma unroll
      for (int j = jj; j < jj + 2; ++j) {  // elements 8j..8j+7
        uint32_t b[4];
        magic_words<BITS>(ch, j, b);
#pragma unroll
        for (int i = 0; i < 4; ++i) {
          const bool hi = BITS != 8 && (i & 1);
          const __half2 v = __hfma2(*reinterpret_cast<const __half2*>(&b[i]), hi ? mul_hi : mul_lo, hi ? add_hi : add_lo);
          acc = __hfma2(v, x2[4 * j + i], acc);
        }
      }
      float2 f = __half22float2(acc);
      s += f.x + f.y;
    }
    return s * D;
  }
}

// Variant 36 (written in session 13 from the SASS, routed for down in session 14): variant 4 (T = 1, 4-bit, one row
// pair per warp, U = 2) with a software pipeline that keeps two batches in flight. Variant 4's SASS (sm_90, cuobjdump
// of qgemv_kernel<4, 1, 2, false, true, true>) shows why its PIPE does not pipeline:
//  - each batch's fp16 scales are converted (HADD2.F32) right after their loads, inside the conditional block that
//    issues the next batch (a basic block of its own, so ptxas cannot sink them), and the second chunk's loads are
//    issued after the first chunk's conversions: the warp waits there for the next batch's DRAM round trips, twice,
//    before it computes the current batch;
//  - the copies w = wn at the loop top wait for the batch in flight before the next one is issued.
// So a warp has about one batch (2 KB) in flight and pays ~2 round trips a batch: ~1 KB a warp a round trip, ~20 KB an
// SM, ~2.1-2.5 TB/s over 132 SMs, what down, gdn_out and the attention output stream at in the step. This kernel
// alternates two register buffers (no copies) and keeps the scales in fp16 until their product, so the loads of batch
// b + 1 are in flight while batch b is waited for and computed. The same products in the same order as variant 4:
// bit-equal (tests). Predicted: down 18.7 -> ~14 us a layer, ~-0.3 ms a step. Measured (session 14 call 1, whole
// steps): down 18.74 -> 17.39 us, -0.054 ms a step; the pipeline was a small part of what down loses.
//
// PRE: batches loaded before the PDL wait (2: variant 36, 1: variant 39, as variant 4; 0: variant 40). Session 14 call
// 1: 36 on down -0.054 ms a step, but on gdn_out / o +0.016: their increments fell (gdn_out 7.88 -> 6.34 us) while the
// GDN step before gdn_out (4.11 -> 4.64) and the combine before o (2.46 -> 3.99) grew. Loads issued during a
// latency-bound kernel lengthen it (as the L2 prefetch did in session 11), so 39 / 40 issue fewer of them there.
// CG: codes and scales loaded with ld.global.cg (L2 only, a builtin the compiler may schedule freely, unlike the asm
// volatile no_allocate loads of session 9's variant 39), so that the streamed weights do not evict x from L1.
// BITS 5 / 6 (variant 36 at those widths, session 14): the high plane's 4 / 8 bytes a chunk loaded beside the codes
// and chunk_dot_fast as the ring kernel runs it, over the same chunks in the same order as ring variants 16, 17 and
// 19 (two rows a warp, lane l takes chunks l, l + 32, ...): bit-equal to them (tests), without their shared-memory ring.
template <bool XL, int PRE, int R, bool CG, int BITS>
__device__ __forceinline__ void qgemv_pp_body(const GemvArgs& a) {
  static_assert(R == 2 || R == 4, "R: rows a warp, whole SwiGLU pairs");
  static_assert(BITS >= 4 && BITS <= 6, "BITS: 4, 5 or 6 (a nibble plane, plus a high plane for 5 / 6)");
  constexpr int U = 2;
  const int lane = threadIdx.x & 31;
  const int ngroups_r = (a.N + R - 1) >> (R == 4 ? 2 : 1);
  const int nch = a.K >> 5;
  const int grp = blockIdx.x * kWarps + (threadIdx.x >> 5);
  if (grp >= ngroups_r) {  // pdl.cuh: a warp without work still waits
    pdl_wait();
    pdl_trigger();
    return;
  }
  int r[R];
#pragma unroll
  for (int i = 0; i < R; ++i) r[i] = i == 0 ? R * grp : min(R * grp + i, a.N - 1);  // the group's first row exists
  const size_t rowb = (size_t)(a.K >> 1);
  const size_t ngroups = (size_t)(a.K >> a.gshift);
  uint4 wa[R][U], wb[R][U];
  uint2 ha[R][U], hb[R][U];  // 5 / 6-bit high planes (.x / .x, .y); never touched at 4 bits
  __half sa[R][U], sb[R][U];
  auto load = [&](int cb, uint4 (&w)[R][U], uint2 (&h)[R][U], __half (&sc)[R][U]) {
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const int c = cb + 32 * u;
      if (c < nch) {
#pragma unroll
        for (int i = 0; i < R; ++i) {
          const uint4* wp = reinterpret_cast<const uint4*>(a.codes + r[i] * rowb + c * 16);
          w[i][u] = CG ? __ldcg(wp) : __ldg(wp);
        }
#pragma unroll
        for (int i = 0; i < R; ++i) load_high<BITS>(a, r[i], c, h[i][u]);
#pragma unroll
        for (int i = 0; i < R; ++i) {
          const __half* sp = a.scales + r[i] * ngroups + ((c * 32) >> a.gshift);
          sc[i][u] = CG ? __ldcg(sp) : *sp;
        }
      }
    }
  };
  float acc[R];
#pragma unroll
  for (int i = 0; i < R; ++i) acc[i] = 0.f;
  auto compute = [&](int cb, const uint4 (&w)[R][U], const uint2 (&h)[R][U], const __half (&sc)[R][U]) {
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const int c = cb + 32 * u;
      if (c >= nch) break;
      uint4 xv[4];
      load_x_global<XL>(reinterpret_cast<const uint4*>(a.x), c, nch, xv);
#pragma unroll
      for (int i = 0; i < R; ++i) {
        if constexpr (BITS == 4) {
          acc[i] = fmaf(__half2float(sc[i][u]), dot_q4_half2(w[i][u], xv), acc[i]);
        } else {
          Chunk<BITS> ch;
          ch.lo = w[i][u];
          ch.high = h[i][u];
          acc[i] = fmaf(__half2float(sc[i][u]), chunk_dot_fast<BITS>(ch, xv), acc[i]);
        }
      }
    }
  };
  // batches 0 and 1 (PRE of them before the wait: weights only), then: compute a batch, reload its buffer two
  // batches ahead
  int cb = lane;
  if (PRE < 1) pdl_wait();
  if (cb < nch) load(cb, wa, ha, sa);
  if (PRE == 1) pdl_wait();
  if (cb + 32 * U < nch) load(cb + 32 * U, wb, hb, sb);
  if (PRE >= 2) pdl_wait();
  pdl_trigger();
  while (cb < nch) {
    compute(cb, wa, ha, sa);
    if (cb + 64 * U < nch) load(cb + 64 * U, wa, ha, sa);
    cb += 32 * U;
    if (cb >= nch) break;
    compute(cb, wb, hb, sb);
    if (cb + 64 * U < nch) load(cb + 64 * U, wb, hb, sb);
    cb += 32 * U;
  }
#pragma unroll
  for (int i = 0; i < R; ++i) acc[i] = warp_sum(acc[i]);
  if (lane != 0) return;  // lane 0 writes the group (T = 1), as variant 4's lane t = 0 does
#pragma unroll
  for (int i = 0; i < R; i += 2) {
    const int r0 = R * grp + i;
    if (r0 >= a.N) break;
    if (a.epi == GEMV_STORE) {
      a.out_f32[r0] = acc[i];
      if (r0 + 1 < a.N) a.out_f32[r0 + 1] = acc[i + 1];
    } else if (a.epi == GEMV_ADD) {
      a.out_f32[r0] += acc[i];
      if (r0 + 1 < a.N) a.out_f32[r0 + 1] += acc[i + 1];
    } else {
      a.out_h[swiglu_pos(a, r0 >> 1)] = __float2half(silu(acc[i]) * acc[i + 1]);
    }
  }
}

template <bool XL, int PRE, int R = 2, bool CG = false>
__global__ void __launch_bounds__(kWarps * 32) qgemv_pp_kernel(GemvArgs a) {
  MR_WARP_STAMP(kStampGemvPp, a.codes);
  qgemv_pp_body<XL, PRE, R, CG, 4>(a);
}

// 5 / 6 bits: capped at 5 blocks (20 warps) an SM, so that down's 2560 row pairs run in one round on 132 SMs (uncapped,
// ptxas gives them 128 registers: 16 warps an SM, 1.2 rounds). A kernel of its own: a minimum in the 4-bit kernel's
// launch bounds would change its register allocation too (session 13's lesson).
template <bool XL, int BITS>
__global__ void __launch_bounds__(kWarps * 32, 5) qgemv_pp_wide_kernel(GemvArgs a) {
  MR_WARP_STAMP(kStampGemvPp, a.codes);
  qgemv_pp_body<XL, 2, 2, false, BITS>(a);
}

template <bool XL, int PRE, int R = 2, bool CG = false>
void launch_pp(const GemvArgs& a, cudaStream_t st) {
  launch_pdl("qgemv", qgemv_pp_kernel<XL, PRE, R, CG>, dim3(ceil_div(ceil_div(a.N, R), kWarps)), dim3(kWarps * 32), 0,
             st, a);
}

// Variant 49 (session 24; routed for down): 36 with its 4-warp blocks spread evenly over the SMs. The warp stamps
// (session 20 call 2) found down's 640 blocks placed 6 an SM (24 warps) on the SMs gate_up leaves first and 0-4 on
// the rest, the 24-warp SMs ending ~1.6 us after the launch's median warp; blocks of 10 or 20 warps evened that out
// but lost their early start (they wait for a whole free SM). Here a block still needs only a 4-warp block's room,
// but carries D idle warps beside its 4 working ones, which wait, release and exit at once: a block's registers are
// held for all its warps until it ends, so D sets how many blocks share an SM. The launch takes the least D (0..3)
// whose occupancy is at most the blocks' fair share, ceil(blocks / SMs) (H200 and RTX 4090: 5 of 640; with fewer
// SMs than one round of the uncapped kernel needs, as on an RTX 3090, D = 0). Measured with ptxas's occupancy, so
// the cap holds whatever registers the body gets (80 under one nvcc, 95 under another). Session 24 calls 1-2: down
// 17.18 -> 16.27 us a layer, -0.05 ms a step at depth 0 and at 128K (bench/NOTES.md). The working warps run 36's
// code: bit-equal. No launch bounds: variant 4's body wrapped the same way under a bound of 224 threads spilled.
// (Measured in the same calls and removed: the cap by a shared-memory request under a fixed carveout, -0.02 ms on
// down and +0.20 ms on gdn_out / o, whose other L1 / shared split kept gate_up's block from starting beside them;
// variant 4 on gdn_out / o capped by idle warps, no change: 48 of their SMs are held by the GDN step until it ends.)
constexpr int kMaxIdleWarps = 3;
template <bool XL>
__global__ void qgemv_pp_spread_kernel(GemvArgs a) {
  if ((threadIdx.x >> 5) >= kWarps) {  // an idle warp: pdl.cuh, every warp waits before it exits
    pdl_wait();
    pdl_trigger();
    return;
  }
  MR_WARP_STAMP(kStampGemvPp, a.codes);
  qgemv_pp_body<XL, 2, 2, false, 4>(a);
}
// Variant 49's launch for N rows (XL: x in the lanes layout): threads a block, the blocks an SM then holds, and the
// fair share it aims at. Found once per (XL, fair share).
SpreadLaunch pp_spread_launch(bool XL, int N) {
  auto kern = XL ? qgemv_pp_spread_kernel<true> : qgemv_pp_spread_kernel<false>;
  SpreadLaunch s;
  s.blocks = ceil_div(ceil_div(N, 2), kWarps);
  s.fair_share = ceil_div(s.blocks, sm_count());
  static std::vector<std::pair<int, SpreadLaunch>> known;  // (2 * fair share + XL, launch)
  const int key = 2 * s.fair_share + (XL ? 1 : 0);
  for (const auto& k : known)
    if (k.first == key) return {s.blocks, k.second.threads, k.second.blocks_per_sm, s.fair_share};
  std::vector<int> per_sm_by_idle;  // blocks an SM holds with 0, 1, ... idle warps a block
  for (int idle = 0; idle <= kMaxIdleWarps; ++idle) {
    int per_sm = 0;
    if (cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kern, (kWarps + idle) * 32, 0) != cudaSuccess ||
        per_sm < 1)
      break;
    per_sm_by_idle.push_back(per_sm);
  }
  const int idle = spread_idle_warps(per_sm_by_idle, s.fair_share);
  s.threads = (kWarps + idle) * 32;
  s.blocks_per_sm = per_sm_by_idle.empty() ? 0 : per_sm_by_idle[idle];
  known.emplace_back(key, s);
  return s;
}
template <bool XL>
void launch_pp_spread(const GemvArgs& a, cudaStream_t st) {
  const SpreadLaunch s = pp_spread_launch(XL, a.N);
  launch_pdl("qgemv", qgemv_pp_spread_kernel<XL>, dim3(s.blocks), dim3(s.threads), 0, st, a);
}

// Variant 36 at 5 / 6 bits.
template <bool XL, int BITS>
void launch_pp_wide(const GemvArgs& a, cudaStream_t st) {
  launch_pdl("qgemv", qgemv_pp_wide_kernel<XL, BITS>, dim3(ceil_div(ceil_div(a.N, 2), kWarps)), dim3(kWarps * 32), 0,
             st, a);
}

// Variants 36 / 39 / 40: qgemv_pp_kernel with 2 / 1 / 0 batches before the PDL wait (one row pair a warp); 41 / 42:
// 4 rows a warp (each x load feeds 4 rows: half of variant 4's x traffic through L1 a weight byte), 2 / 1 batches;
// 43 / 44: 36 / 41 with the weights loaded past L1 (CG).
inline bool is_pp_variant(int v) { return v == 36 || (v >= 39 && v <= 44) || v == 49; }
template <bool XL>
void launch_pp_variant(const GemvArgs& a, cudaStream_t st, int v) {
  if (v == 36) launch_pp<XL, 2>(a, st);
  else if (v == 49) launch_pp_spread<XL>(a, st);
  else if (v == 39) launch_pp<XL, 1>(a, st);
  else if (v == 40) launch_pp<XL, 0>(a, st);
  else if (v == 41) launch_pp<XL, 2, 4>(a, st);
  else if (v == 42) launch_pp<XL, 1, 4>(a, st);
  else if (v == 43) launch_pp<XL, 2, 2, true>(a, st);
  else launch_pp<XL, 2, 4, true>(a, st);
}

// ---- T = 1, every width: the row split across K (variants 45 / 46, session 15) ----
// Down (5120 x 17408) streams at 2.75 TB/s in a step against gate_up's 3.6, and nothing that keeps a warp on whole
// rows fixed it: x in shared memory (31..33), more bytes in flight through a cp.async ring (session 12), two
// register buffers (36). What those share: a warp walks one row pair from end to end (17 dependent batches of 1 KB at
// K = 17408), and each row pair's x traffic (34 KB) exceeds its weights (19.6 KB). Here a warp owns one column of
// 1024 weights (32 chunks, one a lane) and walks a run of rows in it: its x is 16 registers loaded once per column,
// each row is one coalesced 512-byte load of codes (a batch of B rows is B independent loads), and the rows of a batch
// are summed across the warp together (a transposing reduction: B - 1 + log2(32 / B) shuffles for B rows, not 5 B).
// A block owns a range of rows; its (column, row) cells, column-major, are cut evenly among its warps, each cell's
// sum goes to shared memory, and after a barrier each row adds its columns in column order (fixed, so a row's result
// does not depend on the launch: deterministic, though not bit-equal to the row-walking kernels).
constexpr int kColWarps = 16;  // one 512-thread block an SM

// The B per-lane values v[i] (rows i of a batch) summed over the warp. Afterwards lane l holds the sum of row
// col_reduce_row<B>(l), and every lane whose low log2(32 / B) bits are zero holds a different row.
template <int B>
__device__ __forceinline__ int col_reduce_row(int lane) {
  int row = 0;
#pragma unroll
  for (int n = B, o = 16; n > 1; n >>= 1, o >>= 1) row += (lane & o) ? n / 2 : 0;
  return row;
}
template <int B>
__device__ __forceinline__ float col_reduce(float (&v)[B], int lane) {
#pragma unroll
  for (int n = B, o = 16; n > 1; n >>= 1, o >>= 1) {  // halve the values a lane holds, exchanging the other half
    const bool upper = lane & o;
#pragma unroll
    for (int i = 0; i < n / 2; ++i) {
      const float send = upper ? v[i] : v[i + n / 2];
      const float keep = upper ? v[i + n / 2] : v[i];
      v[i] = keep + __shfl_xor_sync(0xffffffffu, send, o);
    }
  }
#pragma unroll
  for (int o = 16 / B; o >= 1; o >>= 1) v[0] += __shfl_xor_sync(0xffffffffu, v[0], o);
  return v[0];
}

// B rows a batch, two batches in registers (the next one loads while this one is summed); PRE: the first batch's
// weights are loaded before the PDL wait. rows_per_block (even for SwiGLU: whole pairs) rows to a block.
// NORM (qgemv_normed): x is the RMSNorm of a.nx, x_k = fp16(nx_k * rstd * (nw_k + nadd)) as rmsnorm_kernel rounds it;
// every block sums the squares of the row itself (K fp32 from L2) and each warp normalises its column's 32 chunks.
template <int BITS, int B, bool PRE, bool NORM>
__global__ void __launch_bounds__(kColWarps * 32, 1) qgemv_col_kernel(GemvArgs a, int rows_per_block) {
  MR_WARP_STAMP(kStampGemvCol, a.codes);
  static_assert(B >= 1 && B <= 32 && (B & (B - 1)) == 0, "B: a power of two up to 32");
  extern __shared__ float cell[];  // [column][row of the block]
  const int lane = threadIdx.x & 31;
  const int warp = threadIdx.x >> 5;
  const int nch = a.K >> 5;
  const int ncol = (nch + 31) >> 5;
  const int row0 = blockIdx.x * rows_per_block;
  const int rows = min(rows_per_block, a.N - row0);  // >= 1: the grid covers N exactly
  const int cells = ncol * rows;
  const int cell_end = (int)((long long)cells * (warp + 1) / kColWarps);
  int u = (int)((long long)cells * warp / kColWarps);
  const size_t ngroups = (size_t)(a.K >> a.gshift);
  Chunk<BITS> wa[B], wb[B];
  __half sa[B], sb[B];
  // rows rl .. rl + B - 1 of column col (clamped to the run's last row re - 1: re-read, never summed)
  auto load = [&](int col, int rl, int re, Chunk<BITS> (&w)[B], __half (&sc)[B]) {
    const int c = col * 32 + lane;
    if (c >= nch) return;
#pragma unroll
    for (int i = 0; i < B; ++i) {
      const int row = row0 + min(rl + i, re - 1);
      load_chunk<BITS>(a, row, c, w[i]);
      sc[i] = a.scales[(size_t)row * ngroups + ((c * 32) >> a.gshift)];
    }
  };
  auto sum = [&](int col, int rl, int re, const uint4 (&xv)[4], const Chunk<BITS> (&w)[B], const __half (&sc)[B]) {
    const bool live = col * 32 + lane < nch;
    float v[B];
#pragma unroll
    for (int i = 0; i < B; ++i) v[i] = live ? __half2float(sc[i]) * chunk_dot_fast<BITS>(w[i], xv) : 0.f;
    const float total = col_reduce<B>(v, lane);
    const int r = rl + col_reduce_row<B>(lane);
    if ((lane & (32 / B - 1)) == 0 && r < re) cell[col * rows + r] = total;
  };
  // the first run: its first batch may load before the wait
  int col = u / max(rows, 1);
  if (PRE && u < cell_end) load(col, u - col * rows, min(cell_end - col * rows, rows), wa, sa);
  pdl_wait();
  pdl_trigger();
  // the residual this thread's row adds to (GEMV_ADD), read now so that its latency hides under the stream
  const float prior = a.epi == GEMV_ADD && (int)threadIdx.x < rows ? a.out_f32[row0 + threadIdx.x] : 0.f;
  float rstd = 0.f;
  if constexpr (NORM) {
    __shared__ float red[32];
    float ss = 0.f;
    for (int k = threadIdx.x * 4; k < a.K; k += blockDim.x * 4) {
      const float4 v = *reinterpret_cast<const float4*>(a.nx + k);
      ss += v.x * v.x + v.y * v.y + v.z * v.z + v.w * v.w;
    }
    rstd = rsqrtf(block_sum(ss, red) / a.K + a.neps);
  }
  bool preloaded = PRE;
  while (u < cell_end) {  // one run of rows rb .. re - 1 in column col a pass
    col = u / rows;
    const int rb = u - col * rows;
    const int re = min(cell_end - col * rows, rows);
    uint4 xv[4] = {};
    const int c = col * 32 + lane;
    if (c < nch) {
      if constexpr (NORM) {  // elements 32c .. 32c + 31, natural order in nx / nw, perm8 order in xv
        __half* xh = reinterpret_cast<__half*>(xv);
        const float4* xp = reinterpret_cast<const float4*>(a.nx + c * 32);
        const float4* wp = reinterpret_cast<const float4*>(a.nw + c * 32);
#pragma unroll
        for (int q = 0; q < 8; ++q) {
          const float4 v = xp[q], w = __ldg(wp + q);
          xh[perm8(4 * q + 0)] = __float2half(v.x * rstd * (w.x + a.nadd));
          xh[perm8(4 * q + 1)] = __float2half(v.y * rstd * (w.y + a.nadd));
          xh[perm8(4 * q + 2)] = __float2half(v.z * rstd * (w.z + a.nadd));
          xh[perm8(4 * q + 3)] = __float2half(v.w * rstd * (w.w + a.nadd));
        }
      } else {
        const uint4* xp = reinterpret_cast<const uint4*>(a.x) + c * 4;
#pragma unroll
        for (int p = 0; p < 4; ++p) xv[p] = __ldg(xp + p);
      }
    }
    if (!preloaded) load(col, rb, re, wa, sa);
    preloaded = false;
    for (int rl = rb; rl < re; rl += 2 * B) {
      if (rl + B < re) load(col, rl + B, re, wb, sb);
      sum(col, rl, re, xv, wa, sa);
      if (rl + 2 * B < re) load(col, rl + 2 * B, re, wa, sa);
      if (rl + B < re) sum(col, rl + B, re, xv, wb, sb);
    }
    u += re - rb;
  }
  __syncthreads();
  if (a.epi == GEMV_SWIGLU) {
    for (int p = threadIdx.x; 2 * p + 1 < rows; p += blockDim.x) {
      float g = 0.f, up = 0.f;
      for (int cc = 0; cc < ncol; ++cc) {
        g += cell[cc * rows + 2 * p];
        up += cell[cc * rows + 2 * p + 1];
      }
      a.out_h[swiglu_pos(a, (row0 >> 1) + p)] = __float2half(silu(g) * up);
    }
  } else {
    for (int r = threadIdx.x; r < rows; r += blockDim.x) {
      float y = 0.f;
      for (int cc = 0; cc < ncol; ++cc) y += cell[cc * rows + r];
      if (a.epi == GEMV_STORE) a.out_f32[row0 + r] = y;
      else a.out_f32[row0 + r] = (r == (int)threadIdx.x ? prior : a.out_f32[row0 + r]) + y;
    }
  }
}

// Variants 45 / 46: qgemv_col_kernel with / without its first batch loaded before the PDL wait. One block an SM, rows
// cut evenly among the blocks (whole SwiGLU pairs). B = 8 rows a batch at 4 bits, 4 at 5 / 6 / 8 (registers).
template <int BITS, bool PRE, bool NORM = false>
void launch_col(const GemvArgs& a, cudaStream_t st) {
  constexpr int B = BITS == 4 ? 8 : 4;
  int rows_per_block = ceil_div(a.N, sm_count());
  if (a.epi == GEMV_SWIGLU) rows_per_block += rows_per_block & 1;
  const int blocks = ceil_div(a.N, rows_per_block);
  const int ncol = ceil_div(a.K >> 5, 32);
  const size_t smem = (size_t)ncol * rows_per_block * sizeof(float);
  if (smem > 48 * 1024)
    throw std::invalid_argument("qgemv variant 45 / 46: " + std::to_string(smem) + " bytes of partial sums a block "
                                "(at most 48 KiB: fewer rows or columns)");
  launch_pdl("qgemv", qgemv_col_kernel<BITS, B, PRE, NORM>, dim3(blocks), dim3(kColWarps * 32), smem, st, a,
             rows_per_block);
}
inline bool is_col_variant(int v) { return v == 45 || v == 46; }

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

// One fp16 streamed past L1, as its bits (the LAZY sx variants and the ring kernel keep them so: converted where
// used, so that no conversion waits for the load early) or converted.
__device__ inline unsigned short ld_stream_f16_bits(const __half* p) {
  unsigned short h;
  asm volatile("ld.global.nc.L1::no_allocate.b16 %0, [%1];" : "=h"(h) : "l"(p));
  return h;
}
__device__ inline float ld_stream_half(const __half* p) { return __half2float(__ushort_as_half(ld_stream_f16_bits(p))); }
__device__ inline float scale_of(float s) { return s; }
__device__ inline float scale_of(unsigned short s) { return __half2float(__ushort_as_half(s)); }


// x (nch chunks of 64 bytes) -> xs in the swizzled order, by NT threads, 4 loads in flight per thread.
template <int NT>
__device__ inline void stage_x(uint4* xs, const __half* x, int nch) {
  const uint4* xg = reinterpret_cast<const uint4*>(x);
  const int npieces = 4 * nch;
  int q = threadIdx.x;
  for (; q + 3 * NT < npieces; q += 4 * NT) {
    uint4 v[4];
#pragma unroll
    for (int j = 0; j < 4; ++j) v[j] = __ldg(xg + q + j * NT);
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const int qq = q + j * NT;
      xs[xs_slot(qq >> 2, qq & 3)] = v[j];
    }
  }
  for (; q < npieces; q += NT) xs[xs_slot(q >> 2, q & 3)] = __ldg(xg + q);
}

// The 64 x bytes of chunk c from the swizzled shared copy (4 conflict-free LDS.128 per quarter warp).
__device__ inline void load_x_chunk(const uint4* xs, int c, uint4 (&xv)[4]) {
  const uint4* xr = xs + 4 * c;
  const int sw = (c >> 1) & 3;
#pragma unroll
  for (int p = 0; p < 4; ++p) xv[p] = xr[p ^ sw];
}

// ---- integer dot products (IDOT: variants 20..28 of qgemv4_sx_kernel) ----
// The half2 path spends 13 instructions per 8 weights (shift, 4 LOP3, 4 bias HFMA2, 4 HFMA2) and sums 8
// products in fp16. Here the block stages x once as 16-bit integers per 32-element chunk (q = rint(x / s),
// s = absmax / 32512, so |q| <= 32512), split into two signed byte planes q = 256 h + l (h = (q + 128) >> 8,
// l in -128..127), and one code word (8 weights) costs 2 LOP3 + 4 dp4a, summed exactly in int32:
//   lo = w & 0x0F0F0F0F holds c of elements 0, 2, 4, 6; hi = w & 0xF0F0F0F0 holds 16 c of elements 1, 3, 5, 7.
//   16 sum (c - 8) q = 4096 H_even + 256 H_odd + 16 L_even + L_odd - 128 sum q    (H/L: dp4a sums over h/l)
// |16 sum (c - 8) q| <= 16 * 32 * 8 * 32512 < 2^28 and every partial term < 2^27: no int32 overflow. The only
// rounding is q's (half a step, 1 / 65024 of the chunk's absmax), far below fp16 x's own rounding, so these
// variants are closer to the fp64 product than the half2 path (tests: TOL_GEMV_IDOT).
// Shared layout: 4 swizzled 16-byte pieces per chunk (xs_slot, as the fp16 copy): piece 0 = h words of
// elements 0..15 as (even, odd) byte pairs (even = elements 8j + 0/2/4/6, odd = 8j + 1/3/5/7, j = 0, 1),
// piece 1 = h of elements 16..31, pieces 2, 3 = the l plane; then per chunk an int2 (s / 16 as float bits,
// -128 sum q).
constexpr int kXqBytesPerChunk = 64 + 8;

__device__ inline uint32_t pack_bytes(int b0, int b1, int b2, int b3) {
  return (uint32_t)(b0 & 255) | (uint32_t)(b1 & 255) << 8 | (uint32_t)(b2 & 255) << 16 | (uint32_t)(b3 & 255) << 24;
}

// One quad's share of a chunk: thread j (0..3) of the quad holds f[0..7], the values of perm8 storage slots
// 8j..8j+7 of chunk c. The quad agrees on the chunk's absmax and sum by shuffles; the planes and the metadata go
// to the layout above. Shared by stage_xq and stage_xq_normed.
__device__ __forceinline__ void store_xq_quad(uint4* xs, int2* meta, int c, int j, unsigned quad, const float (&f)[8]) {
  float amax = 0.f, poison = 0.f;  // poison: NaN when x holds a NaN or an infinity (fmaxf would drop a NaN)
#pragma unroll
  for (int i = 0; i < 8; ++i) {
    amax = fmaxf(amax, fabsf(f[i]));
    poison = fmaf(f[i], 0.f, poison);
  }
  amax = fmaxf(amax, __shfl_xor_sync(quad, amax, 1));
  amax = fmaxf(amax, __shfl_xor_sync(quad, amax, 2));
  const float inv = amax > 0.f ? 32512.f / amax : 0.f;
  int hq[8], lq[8], sum = 0;
#pragma unroll
  for (int i = 0; i < 8; ++i) {
    const int q = __float2int_rn(f[i] * inv);
    sum += q;
    hq[i] = (q + 128) >> 8;
    lq[i] = q - 256 * hq[i];
  }
  // storage slots of elements 0, 2, 4, 6 are 0, 4, 1, 5; of elements 1, 3, 5, 7 they are 2, 6, 3, 7
  uint2* hp = reinterpret_cast<uint2*>(xs + xs_slot(c, j >> 1)) + (j & 1);
  uint2* lp = reinterpret_cast<uint2*>(xs + xs_slot(c, 2 + (j >> 1))) + (j & 1);
  *hp = make_uint2(pack_bytes(hq[0], hq[4], hq[1], hq[5]), pack_bytes(hq[2], hq[6], hq[3], hq[7]));
  *lp = make_uint2(pack_bytes(lq[0], lq[4], lq[1], lq[5]), pack_bytes(lq[2], lq[6], lq[3], lq[7]));
  sum += __shfl_xor_sync(quad, sum, 1);
  sum += __shfl_xor_sync(quad, sum, 2);
  poison += __shfl_xor_sync(quad, poison, 1);
  poison += __shfl_xor_sync(quad, poison, 2);
  if (j == 0) meta[c] = make_int2(__float_as_int(amax / (32512.f * 16.f) + poison), -128 * sum);
}

// x (fp16, perm8 order: storage slot s of an 8-element group holds element 0, 4, 1, 5, 2, 6, 3, 7) ->
// the integer planes above. Four threads per chunk (thread j: elements 8j..8j+7, one 16-byte load), so the
// staging holds 8 values per thread and no register array spills under the main loop's register cap; the
// chunk's absmax and sum go round the quad by shuffles (nt, the block's threads, is a multiple of 32: a quad is
// all in or all out). (Session 8 call 3 issued each thread's loads of x together, in one round instead of 2-4
// dependent ones: no gain on whole steps, 5.004 against 4.979-4.983 ms; reverted.)
__device__ inline void stage_xq(uint4* xs, const __half* x, int nch, int nt) {
  const uint4* xg = reinterpret_cast<const uint4*>(x);
  int2* meta = reinterpret_cast<int2*>(xs + 4 * nch);
  const unsigned quad = 0xFu << (threadIdx.x & 28);
  for (int t = threadIdx.x; t < 4 * nch; t += nt) {
    const int c = t >> 2, j = t & 3;
    const uint4 v = __ldg(xg + t);
    const __half2* h2 = reinterpret_cast<const __half2*>(&v);
    float f[8];
#pragma unroll
    for (int p = 0; p < 4; ++p) {
      const float2 e = __half22float2(h2[p]);
      f[2 * p] = e.x;
      f[2 * p + 1] = e.y;
    }
    store_xq_quad(xs, meta, c, j, quad, f);
  }
}

// The norm weights plus nadd of a thread's first NPRE items (8 elements each) of stage_xq_normed: constant, so the
// kernel may load them before its PDL wait and read only the residual from L2 after it. NPRE: the items a thread
// stages at K = 5120 (640 items): 2 for the 16-warp blocks of variant 30 (gdn_in, the attention qkv), else 1 (the
// 22-warp blocks of 34 stage one item; a second set would spill 34 (80 registers) and 23 (8 warps, 3 blocks an SM)).
template <int NPRE>
struct NormW {
  float4 w[NPRE][2];
};
template <int WARPS>
constexpr int norm_pre_items() { return WARPS >= 14 && WARPS * 32 < 640 ? 2 : 1; }
__device__ inline float4 add4(float4 v, float s) { return make_float4(v.x + s, v.y + s, v.z + s, v.w + s); }
// ADD = false (LAZY sx variants): the weights as loaded, nadd added where stage_xq_normed uses them (after the wait).
template <int NPRE, bool ADD = true>
__device__ inline void load_norm_w(NormW<NPRE>& nw, const GemvArgs& a, int nch, int nt) {
  const float4* wg = reinterpret_cast<const float4*>(a.nw);
#pragma unroll
  for (int i = 0; i < NPRE; ++i) {
    const int t = threadIdx.x + i * nt;
    if (t < 4 * nch) {
      nw.w[i][0] = ADD ? add4(__ldg(wg + 2 * t), a.nadd) : __ldg(wg + 2 * t);
      nw.w[i][1] = ADD ? add4(__ldg(wg + 2 * t + 1), a.nadd) : __ldg(wg + 2 * t + 1);
    }
  }
}

// stage_xq for x = rmsnorm(a.nx) * (a.nw + a.nadd) (zero-centred RMSNorm fused into the GEMV, qgemv_normed), in one
// pass: the norm's factor r = rsqrt(mean(nx^2) + eps) is one scalar for the whole row, so the chunks are quantized
// from nx * (nw + nadd) as they are loaded, the sum of squares is gathered on the way (then block_sum: a fixed
// order), and r is returned for the caller to apply to its dot products. A first version normalised before
// quantizing (two passes over the row: two L2 round trips and a barrier on the critical path) and saved nothing
// against the separate norm kernel (session 6 call 6). No fp16 rounding of x in between. nw holds the norm weights of
// the thread's first items (load_norm_w); the items past them load their own here.
template <int NPRE, bool NW_ADDED = true>
__device__ inline float stage_xq_normed(uint4* xs, const GemvArgs& a, int nch, int nt, float* red, const NormW<NPRE>& nw) {
  const float4* xg = reinterpret_cast<const float4*>(a.nx);
  const float4* wg = reinterpret_cast<const float4*>(a.nw);
  int2* meta = reinterpret_cast<int2*>(xs + 4 * nch);
  const unsigned quad = 0xFu << (threadIdx.x & 28);
  float ss = 0.f;
  auto item = [&](int t, const float4& w0, const float4& w1) {  // w: norm weight + nadd
    const int c = t >> 2, j = t & 3;
    const float4 u0 = __ldg(xg + 2 * t), u1 = __ldg(xg + 2 * t + 1);
    ss += u0.x * u0.x + u0.y * u0.y + u0.z * u0.z + u0.w * u0.w + u1.x * u1.x + u1.y * u1.y + u1.z * u1.z + u1.w * u1.w;
    const float y[8] = {u0.x * w0.x, u0.y * w0.y, u0.z * w0.z, u0.w * w0.w, u1.x * w1.x, u1.y * w1.y, u1.z * w1.z, u1.w * w1.w};
    const float f[8] = {y[0], y[4], y[1], y[5], y[2], y[6], y[3], y[7]};  // perm8 slot order
    store_xq_quad(xs, meta, c, j, quad, f);
  };
  int t = threadIdx.x;
#pragma unroll
  for (int i = 0; i < NPRE; ++i, t += nt)
    if (t < 4 * nch) {
      if constexpr (NW_ADDED) item(t, nw.w[i][0], nw.w[i][1]);
      else item(t, add4(nw.w[i][0], a.nadd), add4(nw.w[i][1], a.nadd));
    }
  for (; t < 4 * nch; t += nt) item(t, add4(__ldg(wg + 2 * t), a.nadd), add4(__ldg(wg + 2 * t + 1), a.nadd));
  return rsqrtf(block_sum(ss, red) / (32 * nch) + a.neps);  // NaN in nx: NaN here too
}

// 16 sum_k (c_k - 8) q_k of one chunk (32 codes in w, x pieces xv from load_x_chunk, bias = -128 sum q).
__device__ inline int chunk_dot_idot(const uint4& w, const uint4 (&xv)[4], int bias) {
  int he = 0, ho = 0, le = 0, lo = 0;
#pragma unroll
  for (int j = 0; j < 4; ++j) {
    const uint32_t cw = (&w.x)[j];
    const uint32_t even = cw & 0x0F0F0F0Fu, odd = cw & 0xF0F0F0F0u;
    const uint32_t* h = &xv[j >> 1].x + 2 * (j & 1);
    const uint32_t* l = &xv[2 + (j >> 1)].x + 2 * (j & 1);
    he = dp4a_us(even, h[0], he);
    ho = dp4a_us(odd, h[1], ho);
    le = dp4a_us(even, l[0], le);
    lo = dp4a_us(odd, l[1], lo);
  }
  return 4096 * he + 256 * ho + 16 * le + lo + bias;
}

// T = 1 epilogue of one warp's row group g (rows g*ROWS ..): warp-reduce the per-lane sums, then lane i
// writes row i (SwiGLU: lane j writes pair j); compile-time indices only, so acc stays in registers.
template <int ROWS>
__device__ inline void store_group(const GemvArgs& a, int g, int lane, float (&acc)[ROWS]) {
#pragma unroll
  for (int i = 0; i < ROWS; ++i) acc[i] = warp_sum(acc[i]);
  const int r0 = g * ROWS;
  if (a.epi == GEMV_SWIGLU) {
#pragma unroll
    for (int j = 0; j < ROWS / 2; ++j) {
      const int pair = g * (ROWS / 2) + j;
      if (lane == j && 2 * pair + 1 < a.N) a.out_h[swiglu_pos(a, pair)] = __float2half(silu(acc[2 * j]) * acc[2 * j + 1]);
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

__host__ __device__ constexpr int align16(int bytes) { return (bytes + 15) & ~15; }

// The fp16 copy of x after the integer planes (kXqBytesPerChunk a chunk), 16-byte aligned.
__device__ inline uint4* tail_x(uint4* xs, int nch) {
  return reinterpret_cast<uint4*>(reinterpret_cast<char*>(xs) + align16(nch * kXqBytesPerChunk));
}

// x = fp16(nx * r * (nw + nadd)) (as XOUT and rmsnorm_to_gemv_input round it) into the swizzled fp16 layout of
// stage_x, once the norm's factor r is known: piece q is elements 8q..8q+7 in perm8 order (0, 4, 1, 5, 2, 6, 3, 7).
// The residual and the norm weights come back from L1 / L2, where stage_xq_normed has just read them.
__device__ inline void stage_x_normed_f16(uint4* xh, const GemvArgs& a, int nch, int nt, float r) {
  const float4* xg = reinterpret_cast<const float4*>(a.nx);
  const float4* wg = reinterpret_cast<const float4*>(a.nw);
  for (int q = threadIdx.x; q < 4 * nch; q += nt) {
    const float4 u0 = __ldg(xg + 2 * q), u1 = __ldg(xg + 2 * q + 1);
    const float4 w0 = __ldg(wg + 2 * q), w1 = __ldg(wg + 2 * q + 1);
    const float e[8] = {u0.x * r * (w0.x + a.nadd), u0.y * r * (w0.y + a.nadd), u0.z * r * (w0.z + a.nadd),
                        u0.w * r * (w0.w + a.nadd), u1.x * r * (w1.x + a.nadd), u1.y * r * (w1.y + a.nadd),
                        u1.z * r * (w1.z + a.nadd), u1.w * r * (w1.w + a.nadd)};
    uint4 v;
    __half2* h2 = reinterpret_cast<__half2*>(&v);
#pragma unroll
    for (int p = 0; p < 4; ++p) h2[p] = __halves2half2(__float2half(e[p]), __float2half(e[p + 4]));
    xh[xs_slot(q >> 2, q & 3)] = v;
  }
}

// TAIL (5, 6 or 8; session 16): a split projection's second segment in the same launch (qgemv4_split_kernel, on
// variant 30's template only): its rows are row groups of kTailRows after the head's, walked by the warps the head
// leaves without a row group (gdn_in's 2048 groups of 8 rows leave 64 of 2112 warps; the attention q's 1536 leave
// 576), on x in fp16 as the norm kernel rounds it (staged in shared memory beside the integer planes), into out_f32
// past the head's N rows. The tail's batch reuses the head's registers (w, s), so the register cap holds.
struct SplitTail {
  const uint8_t* codes;
  const uint8_t* high;
  const __half* scales;
  int N, gshift;
};
constexpr int kTailRows = 4;

// The tail's batch: chunk c of rows 4 tg .. 4 tg + 3, in the head's batch registers (8 rows x one 16-byte chunk): 8-bit
// codes in w[2i], w[2i + 1]; 5/6-bit codes in w[i], their high-plane bits in w[4 + i].
template <int TB, typename ScaleT>
__device__ inline void load_tail_batch(const SplitTail& t, int K, int tg, int c, Chunk<4> (&w)[8][1], ScaleT (&s)[8][1]) {
  const int ngroups = K >> t.gshift;
#pragma unroll
  for (int i = 0; i < kTailRows; ++i) {
    const size_t r = min(tg * kTailRows + i, t.N - 1);  // last partial group: re-read the last row
    if constexpr (TB == 8) {
      w[2 * i][0].lo = ld_stream16<false>(t.codes + r * K + c * 32, 0);
      w[2 * i + 1][0].lo = ld_stream16<false>(t.codes + r * K + c * 32 + 16, 0);
    } else {
      w[i][0].lo = ld_stream16<false>(t.codes + r * (K / 2) + c * 16, 0);
      if constexpr (TB == 6) {
        const uint8_t* hp = t.high + r * (K / 4) + c * 8;
        asm volatile("ld.global.nc.L1::no_allocate.v2.u32 {%0,%1}, [%2];"
                     : "=r"(w[4 + i][0].lo.x), "=r"(w[4 + i][0].lo.y) : "l"(hp));
      } else {
        const uint8_t* hp = t.high + r * (K / 8) + c * 4;
        asm volatile("ld.global.nc.L1::no_allocate.u32 %0, [%1];" : "=r"(w[4 + i][0].lo.x) : "l"(hp));
      }
    }
    const __half* sp = t.scales + r * ngroups + ((c * 32) >> t.gshift);
    if constexpr (std::is_same_v<ScaleT, float>) s[i][0] = ld_stream_half(sp);
    else s[i][0] = ld_stream_f16_bits(sp);
  }
}

template <int TB>
__device__ inline Chunk<TB> tail_chunk(const Chunk<4> (&w)[8][1], int i) {
  Chunk<TB> ch;
  if constexpr (TB == 8) {
    ch.lo = w[2 * i][0].lo;
    ch.hi8 = w[2 * i + 1][0].lo;
  } else {
    ch.lo = w[i][0].lo;
    ch.high = make_uint2(w[4 + i][0].lo.x, w[4 + i][0].lo.y);
  }
  return ch;
}

// One finished row group tg of the walk kernel (acc: its row sums, the same in every lane): rows to out_f32 (store or
// add), or (SwiGLU: gate_up) pairs to out_h. The walk covers a whole matrix (t), so row r is output r.
__device__ inline void store_tail_group(const GemvArgs& a, const SplitTail& t, int tg, int lane,
                                        const float (&acc)[kTailRows]) {
  if (a.epi == GEMV_SWIGLU) {  // lane j writes pair 2 tg + j, as store_group
#pragma unroll
    for (int j = 0; j < kTailRows / 2; ++j) {
      const int pair = tg * (kTailRows / 2) + j;
      if (lane == j && 2 * pair + 1 < t.N)
        a.out_h[a.out_lanes ? lanes_pos(pair, t.N >> 1) : perm8(pair)] = __float2half(silu(acc[2 * j]) * acc[2 * j + 1]);
    }
  } else {
#pragma unroll
    for (int i = 0; i < kTailRows; ++i) {
      const int r = tg * kTailRows + i;
      if (lane != i || r >= t.N) continue;
      if (a.epi == GEMV_ADD) a.out_f32[r] += acc[i];
      else a.out_f32[r] = acc[i];
    }
  }
}

// The balanced walk of the headless kernels (47 / 48, session 17): a whole matrix's row groups rarely fill whole rounds
// of the grid's warps (gate_up's 8704 groups are 4.12 rounds of 2112 warps: the warps with a fifth group made the
// kernel a fifth longer, session 17 call 2). So only the whole rounds are walked a group a warp; the L groups left over
// go ceil(L / grid) to a block, and each is cut across K among 16 / that many of the block's warps, whose sums are added
// in warp order through shared memory (deterministic for a given grid). walk_start: a lane's first (group, chunk) and
// the end of that group's chunk range, which the kernel loads ahead of the PDL wait; group -1 when it has none.
struct WalkStart {
  int tg, cb, c1;
};
struct WalkLeftover {  // this warp's share of the leftover groups: group g, chunks [c0, c1), part `part` of `parts`
  int g, c0, c1, part, parts;
  bool mine;
};
__device__ inline WalkLeftover walk_leftover(int ntg, int full, int nch) {
  const int gpb = (ntg - full + gridDim.x - 1) / gridDim.x, parts = (blockDim.x >> 5) / gpb;
  const int warp = threadIdx.x >> 5, m = warp / parts, part = warp % parts;
  WalkLeftover w;
  w.g = full + blockIdx.x * gpb + m;
  w.mine = m < gpb && w.g < ntg;
  w.c0 = part * nch / parts;
  w.c1 = w.mine ? (part + 1) * nch / parts : 0;
  w.part = part;
  w.parts = parts;
  return w;
}
__device__ inline WalkStart walk_start(int ntg, int tg0, int stride, int nch) {
  const int lane = threadIdx.x & 31;
  const int full = ntg / stride * stride;
  if (tg0 < full) return {lane < nch ? tg0 : -1, lane, nch};  // a lane past the row's chunks loads nothing
  if (full == ntg) return {-1, 0, 0};
  const WalkLeftover w = walk_leftover(ntg, full, nch);
  if (w.c0 + lane >= w.c1) return {-1, 0, 0};
  return {w.g, w.c0 + lane, w.c1};
}

// The tail's row groups tg, tg + stride, ... of one warp of the split kernel on the fp16 x in shared memory xh, stored
// past the head's a.N rows; `first`: the batch in (w, s) was loaded ahead (before the PDL wait) for the warp's first
// group.
template <int TB, typename ScaleT>
__device__ inline void walk_tail_groups(const GemvArgs& a, const SplitTail& t, int tg, int stride, bool first,
                                        Chunk<4> (&w)[8][1], ScaleT (&s)[8][1], const uint4* xh) {
  const int lane = threadIdx.x & 31, nch = a.K >> 5;
  const int ntg = (t.N + kTailRows - 1) / kTailRows;
  for (; tg < ntg; tg += stride) {
    float acc[kTailRows];
#pragma unroll
    for (int i = 0; i < kTailRows; ++i) acc[i] = 0.f;
    for (int cb = lane; cb < nch; cb += 32) {
      if (!first) load_tail_batch<TB>(t, a.K, tg, cb, w, s);
      first = false;
      uint4 xv[4];
      load_x_chunk(xh, cb, xv);
#pragma unroll
      for (int i = 0; i < kTailRows; ++i)
        acc[i] = fmaf(scale_of(s[i][0]), chunk_dot_fast<TB>(tail_chunk<TB>(w, i), xv), acc[i]);
    }
#pragma unroll
    for (int i = 0; i < kTailRows; ++i) {
      acc[i] = warp_sum(acc[i]);
      const int r = tg * kTailRows + i;
      if (lane == i && r < t.N) a.out_f32[a.N + r] = acc[i];
    }
  }
}

// ROWS rows per warp, U chunks per row in flight, WARPS warps per block, MINB min blocks per SM (register cap),
// SX x from shared memory (else __ldg through L1 as in qgemv_kernel), PIPE software pipeline, EVICT L2 evict-first,
// IDOT integer dot products on x staged as 16-bit integers (needs SX).
// NORM (IDOT only): x is the RMSNorm of a.nx, computed by every block while it stages x (qgemv_normed).
// LAZY (variants 37 / 38, session 13; 37 routed for gate_up and lm_head since session 14): the batches' fp16 scales and the fused norm's weights stay as
// loaded until they are used. Otherwise (SASS of 34 on sm_90) each chunk's scales are converted right after their
// loads, before the next chunk's loads are issued (U = 2: two DRAM round trips a batch instead of one), and before
// the PDL wait a thread converts its first batch's scales and then adds nadd to the norm weights it only then loads:
// up to three round trips ahead of the wait, on the critical path wherever the block became resident late (after
// its predecessor's block on the SM exited). The same arithmetic: bit-equal.
// XOUT (NORM only; session 15): the blocks also write the normalised x (fp16, perm8 order, rounded as
// rmsnorm_to_gemv_input rounds it) to a.x, which the fused kernel never reads (qgemv_normed passes its xin scratch
// there), each block a slice of K once it knows the norm's factor, so that another GEMV on the same input (a split
// projection's tail) reads it without a norm kernel of its own (qgemv_normed's keep_x). GemvArgs keeps its layout:
// a field more changes the code of every kernel that takes it.
// TAIL (0, or 5 / 6 / 8 for qgemv4_split_kernel): a split projection's tail walked after the head (SplitTail above).
template <int ROWS, int U, int WARPS, int MINB, bool SX, bool PIPE, bool EVICT, bool IDOT, bool NORM, bool LAZY,
          bool XOUT, int TAIL>
__device__ __forceinline__ void sx_gemv(const GemvArgs& a, const SplitTail& t) {
  static_assert(SX || !IDOT, "the integer planes of x live in shared memory");
  static_assert(IDOT || !NORM, "the fused norm stages the integer planes");
  static_assert(NORM || !XOUT, "only the fused norm has a normalised x to write");
  static_assert(TAIL == 0 || (NORM && ROWS == 8 && U == 1 && !PIPE && !XOUT), "the tail rides on variant 30's walk");
  extern __shared__ uint4 xs[];  // 4 * (K / 32) slots of 16 bytes (SX only), then (IDOT) K / 32 int2; TAIL: fp16 x
  __shared__ float nred[NORM ? 32 : 1];
  const int lane = threadIdx.x & 31;
  const int nch = a.K >> 5;
  const int ngroups = a.K >> a.gshift;
  const int nrg = (a.N + ROWS - 1) / ROWS;
  const int stride = gridDim.x * WARPS;
  const size_t rowb = (size_t)(a.K >> 1);
  uint64_t pol = 0;
  if (EVICT) asm volatile("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;" : "=l"(pol));

  using ScaleT = std::conditional_t<LAZY, unsigned short, float>;
  Chunk<4> w[ROWS][U], wn[ROWS][U];
  ScaleT s[ROWS][U], sn[ROWS][U];
  auto load_batch = [&](int g, int cb, Chunk<4> (&ww)[ROWS][U], ScaleT (&ss)[ROWS][U]) {
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const int c = cb + 32 * u;
      if (c < nch) {
#pragma unroll
        for (int i = 0; i < ROWS; ++i) {
          const int r = min(g * ROWS + i, a.N - 1);  // last partial group: re-read the last row
          ww[i][u].lo = ld_stream16<EVICT>(a.codes + r * rowb + c * 16, pol);
          const __half* sp = a.scales + (size_t)r * ngroups + ((c * 32) >> a.gshift);
          if constexpr (LAZY) ss[i][u] = ld_stream_f16_bits(sp);
          else ss[i][u] = ld_stream_half(sp);
        }
      }
    }
  };

  int g = blockIdx.x * WARPS + (threadIdx.x >> 5);
  // first batch in flight while x is staged (both modes)
  if (g < nrg && lane < nch) load_batch(g, lane, w, s);
  const int ntg = TAIL ? (t.N + kTailRows - 1) / kTailRows : 0;  // the tail's row groups, after the head's
  if constexpr (TAIL != 0) {
    if (g >= nrg && g < nrg + ntg && lane < nch) load_tail_batch<TAIL>(t, a.K, g - nrg, lane, w, s);
  }
  float norm_r = 1.f;  // NORM: the norm's factor, applied to the row sums
  NormW<norm_pre_items<WARPS>()> nw;  // NORM: the norm weights of this thread's first items, before the wait (a.nw_early)
  if (NORM && a.nw_early) load_norm_w<norm_pre_items<WARPS>(), !LAZY>(nw, a, nch, WARPS * 32);
  pdl_wait();  // pdl.cuh: the first batch of weights is in flight before the wait, x is read after it
  pdl_trigger();
  if (NORM && !a.nw_early) load_norm_w<norm_pre_items<WARPS>(), !LAZY>(nw, a, nch, WARPS * 32);
  if (SX) {
    if constexpr (NORM) norm_r = stage_xq_normed<norm_pre_items<WARPS>(), !LAZY>(xs, a, nch, WARPS * 32, nred, nw);
    else if (IDOT) stage_xq(xs, a.x, nch, WARPS * 32);
    else stage_x<WARPS * 32>(xs, a.x, nch);
    if constexpr (TAIL != 0) stage_x_normed_f16(tail_x(xs, nch), a, nch, WARPS * 32, norm_r);
    __syncthreads();  // every thread of the block reaches this (no early exit above)
  }
  if constexpr (XOUT) {  // this block's slice of K (its first threads; the row walk's first batch is in flight)
    __half* xout = const_cast<__half*>(a.x);
    const int per = (a.K + gridDim.x - 1) / gridDim.x;
    const int k_end = min(a.K, (int)(blockIdx.x + 1) * per);
    for (int k = blockIdx.x * per + threadIdx.x; k < k_end; k += blockDim.x)
      xout[perm8(k)] = __float2half(a.nx[k] * norm_r * (a.nw[k] + a.nadd));
  }
  const int2* xmeta = reinterpret_cast<const int2*>(xs + 4 * nch);  // IDOT only

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
          load_x_chunk(xs, c, xv);
        } else {
          const uint4* xp = reinterpret_cast<const uint4*>(a.x + c * 32);
#pragma unroll
          for (int p = 0; p < 4; ++p) xv[p] = __ldg(xp + p);
        }
        if constexpr (IDOT) {
          const int2 m = xmeta[c];
          const float xscale = __int_as_float(m.x);
#pragma unroll
          for (int i = 0; i < ROWS; ++i)
            acc[i] = fmaf(__int2float_rn(chunk_dot_idot(w[i][u].lo, xv, m.y)), scale_of(s[i][u]) * xscale, acc[i]);
        } else {
#pragma unroll
          for (int i = 0; i < ROWS; ++i) acc[i] = fmaf(scale_of(s[i][u]), chunk_dot<4>(w[i][u], xv), acc[i]);
        }
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
    if constexpr (NORM) {
#pragma unroll
      for (int i = 0; i < ROWS; ++i) acc[i] *= norm_r;
    }
    store_group<ROWS>(a, g, lane, acc);
  }
  if constexpr (TAIL != 0)  // the tail's row groups, on fp16 x (the batch loaded before the wait is used first)
    walk_tail_groups<TAIL>(a, t, g - nrg, stride, first, w, s, tail_x(xs, nch));
}

template <int ROWS, int U, int WARPS, int MINB, bool SX, bool PIPE, bool EVICT, bool IDOT = false, bool NORM = false,
          bool LAZY = false, bool XOUT = false>
__global__ void __launch_bounds__(WARPS * 32, MINB) qgemv4_sx_kernel(GemvArgs a) {
  MR_WARP_STAMP(kStampGemvSx, a.codes);
  sx_gemv<ROWS, U, WARPS, MINB, SX, PIPE, EVICT, IDOT, NORM, LAZY, XOUT, 0>(a, SplitTail{});
}

// Variant 30 (fused norm) on a split projection's head with its TAIL-bit tail in the same launch (qgemv_normed_split).
template <int TAIL>
__global__ void __launch_bounds__(16 * 32, 1) qgemv4_split_kernel(GemvArgs a, SplitTail t) {
  MR_WARP_STAMP(kStampGemvSplit, a.codes);
  sx_gemv<8, 1, 16, 1, true, false, false, true, true, false, false, TAIL>(a, t);
}

// Grid: one resident wave (occupancy calculator, cached per shared-memory size), or fewer blocks when
// the row groups run out. BALANCED: the fewest warps that still need the same number of rounds, so
// every warp walks the same number of row groups (no last partial round).
struct OccupancyCache {  // resident blocks per SM of one kernel, per (block size, dynamic shared-memory size)
  static constexpr int kSlots = 16;
  size_t bytes[kSlots];
  int threads_of[kSlots];
  int n[kSlots];
  int len = 0;
  template <typename Kern>
  int get(Kern kern, int threads, size_t smem) {
    for (int i = 0; i < len; ++i)
      if (bytes[i] == smem && threads_of[i] == threads) return n[i];
    int per_sm = 0;
    if (cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kern, threads, smem) != cudaSuccess || per_sm <= 0)
      per_sm = 1;
    if (len < kSlots) {
      bytes[len] = smem;
      threads_of[len] = threads;
      n[len++] = per_sm;
    }
    return per_sm;
  }
};

int wave_blocks(long long groups, int warps_per_block, int per_sm, bool balanced) {
  const long long cap = (long long)sm_count() * per_sm;  // blocks of one wave
  long long blocks = (groups + warps_per_block - 1) / warps_per_block;
  if (blocks > cap) {
    if (balanced) {
      const long long rounds = (groups + cap * warps_per_block - 1) / (cap * warps_per_block);
      const long long warps = (groups + rounds - 1) / rounds;
      blocks = std::min(cap, (warps + warps_per_block - 1) / warps_per_block);
    } else {
      blocks = cap;
    }
  }
  return (int)blocks;
}

struct SmemLimits {
  int per_block = 48 * 1024;  // opt-in maximum of one block
  int per_sm = 48 * 1024;
  int reserved = 1024;        // the runtime's share of each resident block
};
const SmemLimits& smem_limits() {
  static SmemLimits L;
  static bool done = false;
  if (!done) {
    int dev = 0, v = 0;
    cudaGetDevice(&dev);
    if (cudaDeviceGetAttribute(&v, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev) == cudaSuccess && v > 0) L.per_block = v;
    if (cudaDeviceGetAttribute(&v, cudaDevAttrMaxSharedMemoryPerMultiprocessor, dev) == cudaSuccess && v > 0) L.per_sm = v;
    if (cudaDeviceGetAttribute(&v, cudaDevAttrReservedSharedMemoryPerBlock, dev) == cudaSuccess && v >= 0) L.reserved = v;
    done = true;
  }
  return L;
}

// Lets `kern` take `smem` bytes of dynamic shared memory: false when one block cannot have that much on this
// device (the caller falls back); past the 48 KB default the kernel's limit is raised when a larger size first
// appears (`raised`: the limit already set for this kernel).
template <typename Kern>
bool allow_dynamic_smem(Kern kern, size_t smem, size_t& raised, const char* op) {
  if (smem > (size_t)smem_limits().per_block) return false;
  if (smem > raised) {
    MR_CHECK(cudaFuncSetAttribute(kern, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem), op);
    raised = smem;
  }
  return true;
}

template <int ROWS, int U, int WARPS, int MINB, bool SX, bool PIPE, bool EVICT, bool IDOT = false, bool NORM = false,
          bool LAZY = false, bool XOUT = false>
bool launch_sx(const GemvArgs& a, cudaStream_t st, bool balanced) {
  auto kern = qgemv4_sx_kernel<ROWS, U, WARPS, MINB, SX, PIPE, EVICT, IDOT, NORM, LAZY, XOUT>;
  const size_t smem = IDOT ? (size_t)(a.K / 32) * kXqBytesPerChunk : SX ? (size_t)a.K * 2 : 0;
  if constexpr (SX) {
    static size_t raised = 48 * 1024;  // only a long K needs more (fp16 x: K > 24576; IDOT: K > 21845)
    if (!allow_dynamic_smem(kern, smem, raised, "qgemv smem attr")) return false;  // x does not fit
  }
  static OccupancyCache occ;
  const int per_sm = occ.get(kern, WARPS * 32, smem);
  launch_pdl("qgemv", kern, dim3(wave_blocks((a.N + ROWS - 1) / ROWS, WARPS, per_sm, balanced)), dim3(WARPS * 32), smem, st,
             a);
  return true;
}

// Variant 30 with a TB-bit tail in one launch (qgemv4_split_kernel): the grid covers both segments' row groups.
template <int TB>
bool launch_split(const GemvArgs& a, const SplitTail& t, cudaStream_t st) {
  auto kern = qgemv4_split_kernel<TB>;
  const int nch = a.K / 32;
  const size_t smem = (size_t)align16(nch * kXqBytesPerChunk) + (size_t)a.K * 2;  // integer planes, then fp16 x
  static size_t raised = 48 * 1024;
  if (!allow_dynamic_smem(kern, smem, raised, "qgemv split smem attr")) return false;
  static OccupancyCache occ;
  const int per_sm = occ.get(kern, 16 * 32, smem);
  const long long groups = (a.N + 7) / 8 + (t.N + kTailRows - 1) / kTailRows;
  launch_pdl("qgemv split", kern, dim3(wave_blocks(groups, 16, per_sm, false)), dim3(16 * 32), smem, st, a, t);
  return true;
}

// launch_split at the tail's width (5, 6 or 8).
bool launch_split_bits(const GemvArgs& a, const SplitTail& t, int tail_bits, cudaStream_t st) {
  switch (tail_bits) {
    case 5: return launch_split<5>(a, t, st);
    case 6: return launch_split<6>(a, t, st);
    default: return launch_split<8>(a, t, st);
  }
}

// Variants 47 / 48 (5 / 6 / 8 bits, T = 1; session 17): a whole matrix in row groups of 4 rows (one group a warp at a
// time, the balanced walk above), one 16-warp block per SM, x staged once per block in shared memory as fp16 (stage_x's
// swizzled copy). A lane's chunks of a group are taken two at a time (both batches in flight before either is summed;
// predicted to lift 5-bit gate_up from 2.81 TB/s, it gained ~1 us of 41.6: session 17 call 5), summed into the rows in
// chunk order, so the figures are those of one at a time. NORM (47, qgemv_normed: store or SwiGLU): x is the RMSNorm of a.nx,
// each block summing the squares in the split kernel's order and rounding x to fp16 as the norm kernel does; else
// (48, qgemv: every epilogue) x is given in perm8 order.
struct WalkBatch {  // one chunk of a row group, as load_tail_batch fills it
  Chunk<4> w[8][1];
  float s[8][1];
};
template <int TB>
__device__ inline void walk_dot(const WalkBatch& b, const uint4* xh, int cb, float (&acc)[kTailRows]) {
  uint4 xv[4];
  load_x_chunk(xh, cb, xv);
#pragma unroll
  for (int i = 0; i < kTailRows; ++i) acc[i] = fmaf(b.s[i][0], chunk_dot_fast<TB>(tail_chunk<TB>(b.w, i), xv), acc[i]);
}

template <int TB, bool NORM>
__global__ void __launch_bounds__(16 * 32, 1) qgemv_walk_kernel(GemvArgs a, SplitTail t) {
  MR_WARP_STAMP(kStampGemvWalk, t.codes);
  extern __shared__ uint4 xs[];
  __shared__ float red[32];
  __shared__ float part_sums[16][kTailRows];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nch = a.K >> 5;
  const int ntg = (t.N + kTailRows - 1) / kTailRows, stride = gridDim.x * 16;
  const int full = ntg / stride * stride;
  WalkBatch b0, b1;
  const WalkStart ws = walk_start(ntg, blockIdx.x * 16 + warp, stride, nch);
  if (ws.tg >= 0) {  // weights before the wait (pdl.cuh): the lane's first two chunks
    load_tail_batch<TB>(t, a.K, ws.tg, ws.cb, b0.w, b0.s);
    if (ws.cb + 32 < ws.c1) load_tail_batch<TB>(t, a.K, ws.tg, ws.cb + 32, b1.w, b1.s);
  }
  pdl_wait();
  pdl_trigger();
  if constexpr (NORM) {
    const float4* xg = reinterpret_cast<const float4*>(a.nx);
    float ss = 0.f;
    for (int q = threadIdx.x; q < 4 * nch; q += 16 * 32) {
      const float4 u0 = __ldg(xg + 2 * q), u1 = __ldg(xg + 2 * q + 1);
      ss += u0.x * u0.x + u0.y * u0.y + u0.z * u0.z + u0.w * u0.w + u1.x * u1.x + u1.y * u1.y + u1.z * u1.z + u1.w * u1.w;
    }
    const float r = rsqrtf(block_sum(ss, red) / (32 * nch) + a.neps);  // NaN in nx: NaN here too
    stage_x_normed_f16(xs, a, nch, 16 * 32, r);
  } else {
    stage_x<16 * 32>(xs, a.x, nch);
  }
  __syncthreads();
  bool first = true;
  auto walk = [&](int g, int c0, int c1, float (&acc)[kTailRows]) {
#pragma unroll
    for (int i = 0; i < kTailRows; ++i) acc[i] = 0.f;
    for (int cb = c0 + lane; cb < c1; cb += 64) {
      const bool two = cb + 32 < c1;
      if (!first) {
        load_tail_batch<TB>(t, a.K, g, cb, b0.w, b0.s);
        if (two) load_tail_batch<TB>(t, a.K, g, cb + 32, b1.w, b1.s);
      }
      first = false;
      walk_dot<TB>(b0, xs, cb, acc);
      if (two) walk_dot<TB>(b1, xs, cb + 32, acc);
    }
#pragma unroll
    for (int i = 0; i < kTailRows; ++i) acc[i] = warp_sum(acc[i]);
  };
  for (int tg = blockIdx.x * 16 + warp; tg < full; tg += stride) {
    float acc[kTailRows];
    walk(tg, 0, nch, acc);
    store_tail_group(a, t, tg, lane, acc);
  }
  if (full == ntg) return;  // block-uniform: no leftover groups
  const WalkLeftover lo = walk_leftover(ntg, full, nch);
  float acc[kTailRows];
  walk(lo.mine ? lo.g : 0, lo.c0, lo.c1, acc);
  if (lane == 0) {
#pragma unroll
    for (int i = 0; i < kTailRows; ++i) part_sums[warp][i] = acc[i];
  }
  __syncthreads();
  if (lo.mine && lo.part == 0) {
    float sum[kTailRows];
#pragma unroll
    for (int i = 0; i < kTailRows; ++i) sum[i] = part_sums[warp][i];
    for (int p = 1; p < lo.parts; ++p) {
#pragma unroll
      for (int i = 0; i < kTailRows; ++i) sum[i] += part_sums[warp + p][i];
    }
    store_tail_group(a, t, lo.g, lane, sum);
  }
}

// The walk over a whole matrix t (a: its x or fused norm, epilogue and outputs), on one whole wave.
template <int TB, bool NORM>
bool launch_walk(const GemvArgs& a, const SplitTail& t, cudaStream_t st) {
  auto kern = qgemv_walk_kernel<TB, NORM>;
  const size_t smem = (size_t)a.K * 2;
  static size_t raised = 48 * 1024;
  if (!allow_dynamic_smem(kern, smem, raised, "qgemv walk smem attr")) return false;
  static OccupancyCache occ;
  const int per_sm = occ.get(kern, 16 * 32, smem);
  const long long groups = std::max<long long>((t.N + kTailRows - 1) / kTailRows, 16LL * sm_count() * per_sm);
  launch_pdl("qgemv walk", kern, dim3(wave_blocks(groups, 16, per_sm, false)), dim3(16 * 32), smem, st, a, t);
  return true;
}
template <bool NORM>
bool launch_walk_bits(const GemvArgs& a, const SplitTail& t, int bits, cudaStream_t st) {
  switch (bits) {
    case 5: return launch_walk<5, NORM>(a, t, st);
    case 6: return launch_walk<6, NORM>(a, t, st);
    default: return launch_walk<8, NORM>(a, t, st);
  }
}

// ---- T = 1, every width: per-warp cp.async ring in shared memory (variants 16..19; 5/6/8-bit default) ----
// Variants 1..15 hold the weight bytes in flight in registers (U chunks x ROWS rows x 16 B per lane):
// 2-4 KB per warp, and every such byte costs occupancy. Here each warp owns a ring of S stages in
// shared memory. A stage is one batch: for each of the warp's ROWS rows, lane l's chunk cb*32 + l, i.e.
// its codes (cp.async.cg, 16 B: cached in L2 only, L1 untouched; 8-bit: two of them), its high-plane
// bits (5-bit 4 B, 6-bit 8 B; cp.async.ca, the only sizes below 16 B) and the aligned 4-byte word that
// holds its scale. The warp keeps S - 1 batches in flight while it computes on the oldest, straight
// across row-group boundaries, with no registers tied up by them.
//   * A lane reads back only the bytes it copied itself, so the per-thread cp.async.wait_group is all
//     the synchronisation there is: no barrier, no mbarrier. A slot is refilled one step after it was
//     read, and that read fed the FMAs that precede the refill in program order.
//   * One commit group per batch, empty ones included (past the warp's last row group, or lanes past
//     the row end), so "S - 1 groups pending" always means "the oldest batch has landed".
//   * Ring reads are conflict-free: lane l's 16 B at l * 16 (4 wavefronts per LDS.128, the minimum),
//     high and scale words at l * 4 / l * 8.
//   * x: staged once per block in the swizzled copy of variant 6, while the first S - 1 batches fly.
//   * S is picked at launch (launch_ring) from the shared-memory budget, so one instantiation serves
//     every K and every card: the deepest ring up to S_MAX that leaves room for 2 blocks per SM.
template <int BITS>
struct RingFmt {
  static constexpr int kPieces = BITS == 8 ? 2 : 1;                    // 16-byte code pieces per chunk
  static constexpr int kHighBytes = BITS == 5 ? 4 : (BITS == 6 ? 8 : 0);  // high-plane bytes per chunk
  static constexpr int kLaneBytes = 16 * kPieces + kHighBytes + 4;       // + the scale word
};
template <int BITS, int ROWS>
constexpr int ring_stage_bytes() { return ROWS * 32 * RingFmt<BITS>::kLaneBytes; }  // one warp's stage
constexpr int kRingMaxStages = 8;  // cp_async_wait_pending handles up to 7 pending groups

__device__ inline void cp_async_cg16(uint32_t dst, const void* src) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(dst), "l"(src) : "memory");
}
template <int BYTES>  // 4 or 8 (.cg takes 16 only)
__device__ inline void cp_async_ca(uint32_t dst, const void* src) {
  asm volatile("cp.async.ca.shared.global [%0], [%1], %2;" ::"r"(dst), "l"(src), "n"(BYTES) : "memory");
}
__device__ inline void cp_async_commit() { asm volatile("cp.async.commit_group;" ::: "memory"); }
template <int N>
__device__ inline void cp_async_wait() { asm volatile("cp.async.wait_group %0;" ::"n"(N) : "memory"); }
// wait_group takes an immediate; S is a kernel argument, hence the (warp-uniform) switch
__device__ inline void cp_async_wait_pending(int n) {
  switch (n) {
    case 0: cp_async_wait<0>(); break;
    case 1: cp_async_wait<1>(); break;
    case 2: cp_async_wait<2>(); break;
    case 3: cp_async_wait<3>(); break;
    case 4: cp_async_wait<4>(); break;
    case 5: cp_async_wait<5>(); break;
    case 6: cp_async_wait<6>(); break;
    default: cp_async_wait<7>(); break;
  }
}
__device__ inline void st_shared_u32(uint32_t addr, uint32_t v) {
  asm volatile("st.shared.u32 [%0], %1;" ::"r"(addr), "r"(v) : "memory");
}

// ROWS rows per warp, WARPS warps per block, MINB min resident blocks per SM (register cap); S stages.
template <int BITS, int ROWS, int WARPS, int MINB>
__global__ void __launch_bounds__(WARPS * 32, MINB) qgemv_ring_kernel(GemvArgs a, int S) {
  MR_WARP_STAMP(kStampGemvRing, a.codes);
  using F = RingFmt<BITS>;
  constexpr int kStage = ring_stage_bytes<BITS, ROWS>();
  constexpr int kHighOff = ROWS * F::kPieces * 512;           // [ROWS][kPieces][32 lanes] x 16 B codes first
  constexpr int kScaleOff = kHighOff + ROWS * 32 * F::kHighBytes;  // then [ROWS][32] high, [ROWS][32] scale words
  extern __shared__ uint4 xs[];  // x: 4 * (K / 32) swizzled 16-byte slots, then WARPS rings of S stages
  const int lane = threadIdx.x & 31;
  const int warp = threadIdx.x >> 5;
  const int nch = a.K >> 5;
  const int nb = (nch + 31) >> 5;  // batches per row group
  const int nrg = (a.N + ROWS - 1) / ROWS;
  const int stride = gridDim.x * WARPS;
  const int ngroups = a.K >> a.gshift;
  const long long nsc = (long long)a.N * ngroups;
  // parity of a scale's half within its 4-byte word: (address / 2) & 1, from the base and the index
  const uint32_t sc_par = (uint32_t)(reinterpret_cast<uintptr_t>(a.scales) >> 1);
  const uint8_t* ring = reinterpret_cast<const uint8_t*>(xs) + (size_t)nch * 64 + (size_t)warp * S * kStage;
  const uint32_t ring_s = smem_u32(ring);

  int ig = blockIdx.x * WARPS + warp, ib = 0, is = 0;  // issue cursor: row group, batch in group, slot
  auto issue = [&]() {
    const int c = ib * 32 + lane;
    if (ig < nrg && c < nch) {
      const uint32_t st = ring_s + is * kStage;
#pragma unroll
      for (int r = 0; r < ROWS; ++r) {
        const int row = min(ig * ROWS + r, a.N - 1);  // last partial group: re-read the last row
        if (BITS == 8) {
          const uint8_t* src = a.codes + (size_t)row * a.K + c * 32;
          cp_async_cg16(st + (2 * r) * 512 + lane * 16, src);
          cp_async_cg16(st + (2 * r + 1) * 512 + lane * 16, src + 16);
        } else {
          cp_async_cg16(st + r * 512 + lane * 16, a.codes + (size_t)row * (a.K >> 1) + c * 16);
        }
        if (BITS == 5) cp_async_ca<4>(st + kHighOff + (r * 32 + lane) * 4, a.high + (size_t)row * (a.K >> 3) + c * 4);
        if (BITS == 6) cp_async_ca<8>(st + kHighOff + (r * 32 + lane) * 8, a.high + (size_t)row * (a.K >> 2) + c * 8);
        // The scale's aligned word may reach 2 bytes outside the scale array only for its first and last
        // element: those are loaded and stored synchronously (the same thread reads them back).
        const long long idx = (long long)row * ngroups + ((c * 32) >> a.gshift);
        const uint32_t sdst = st + kScaleOff + (r * 32 + lane) * 4;
        const int upper = (int)((sc_par + (uint32_t)idx) & 1);
        if (idx > 0 && idx < nsc - 1) cp_async_ca<4>(sdst, a.scales + idx - upper);
        else st_shared_u32(sdst, (uint32_t)ld_stream_f16_bits(a.scales + idx) << (16 * upper));
      }
    }
    cp_async_commit();
    if (++ib == nb) {
      ib = 0;
      ig += stride;
    }
    is = is + 1 == S ? 0 : is + 1;
  };

  for (int i = 0; i < S - 1; ++i) issue();
  pdl_wait();  // pdl.cuh: the first S - 1 batches of weights are in flight before the wait, x is read after it
  pdl_trigger();
  stage_x<WARPS * 32>(xs, a.x, nch);
  __syncthreads();  // every thread reaches this (no early exit above)

  int g = blockIdx.x * WARPS + warp, cb = 0, cs = 0;  // consume cursor
  float acc[ROWS];
#pragma unroll
  for (int i = 0; i < ROWS; ++i) acc[i] = 0.f;
  while (g < nrg) {
    issue();  // S - 1 batches ahead, into the slot read in the previous step
    cp_async_wait_pending(S - 1);
    const int c = cb * 32 + lane;
    if (c < nch) {
      uint4 xv[4];
      load_x_chunk(xs, c, xv);
      const uint8_t* st = ring + cs * kStage;
#pragma unroll
      for (int r = 0; r < ROWS; ++r) {
        Chunk<BITS> ch;
        ch.lo = *reinterpret_cast<const uint4*>(st + (F::kPieces * r) * 512 + lane * 16);
        if (BITS == 8) ch.hi8 = *reinterpret_cast<const uint4*>(st + (2 * r + 1) * 512 + lane * 16);
        if (BITS == 5) ch.high.x = *reinterpret_cast<const uint32_t*>(st + kHighOff + (r * 32 + lane) * 4);
        if (BITS == 6) ch.high = *reinterpret_cast<const uint2*>(st + kHighOff + (r * 32 + lane) * 8);
        const uint32_t row = (uint32_t)min(g * ROWS + r, a.N - 1);
        const uint32_t upper = (sc_par + row * (uint32_t)ngroups + (uint32_t)((c * 32) >> a.gshift)) & 1;  // mod 2^32: parity kept
        const uint32_t sw = *reinterpret_cast<const uint32_t*>(st + kScaleOff + (r * 32 + lane) * 4);
        const float scale = __half2float(__ushort_as_half((unsigned short)(sw >> (16 * upper))));
        acc[r] = fmaf(scale, chunk_dot_fast<BITS>(ch, xv), acc[r]);
      }
    }
    cs = cs + 1 == S ? 0 : cs + 1;
    if (++cb == nb) {
      store_group<ROWS>(a, g, lane, acc);
#pragma unroll
      for (int i = 0; i < ROWS; ++i) acc[i] = 0.f;
      cb = 0;
      g += stride;
    }
  }
  cp_async_wait<0>();  // only empty groups can be pending here; leave nothing in flight at exit anyway
}

// Stage count: the deepest ring (<= s_max) with x + rings small enough for 2 resident blocks per SM
// (consumer parts: 100 KB per SM, so about 48 KB per block); when x alone leaves no room for 2 stages
// there (K = 17408 with 8 warps), the largest block that fits at all. Grid: one resident wave from the
// occupancy calculator, as launch_sx. Returns false when not even 2 stages fit (caller falls back).
template <int BITS, int ROWS, int WARPS, int MINB>
bool launch_ring(const GemvArgs& a, cudaStream_t st, int s_max, bool balanced) {
  auto kern = qgemv_ring_kernel<BITS, ROWS, WARPS, MINB>;
  constexpr long long stage = (long long)ring_stage_bytes<BITS, ROWS>() * WARPS;  // one stage of every warp
  const long long xbytes = (long long)a.K * 2;
  const SmemLimits& L = smem_limits();
  auto stages_within = [&](long long budget) {
    return budget > xbytes ? (int)std::min<long long>(std::min(s_max, kRingMaxStages), (budget - xbytes) / stage) : 0;
  };
  int S = stages_within(std::min<long long>(L.per_block, L.per_sm / 2 - L.reserved));
  if (S < 2) S = stages_within(L.per_block);
  if (S < 2) return false;
  const size_t smem = (size_t)(xbytes + S * stage);
  static bool attrs_set = false;
  if (!attrs_set) {
    MR_CHECK(cudaFuncSetAttribute(kern, cudaFuncAttributeMaxDynamicSharedMemorySize, L.per_block), "qgemv ring smem attr");
    // the ring takes L1's place as the landing buffer: ask for the largest shared-memory carveout
    MR_CHECK(cudaFuncSetAttribute(kern, cudaFuncAttributePreferredSharedMemoryCarveout, (int)cudaSharedmemCarveoutMaxShared),
             "qgemv ring carveout");
    attrs_set = true;
  }
  static OccupancyCache occ;
  const int per_sm = occ.get(kern, WARPS * 32, smem);
  launch_pdl("qgemv", kern, dim3(wave_blocks((a.N + ROWS - 1) / ROWS, WARPS, per_sm, balanced)), dim3(WARPS * 32), smem, st,
             a, S);
  return true;
}

int g_variant = 0;  // T = 1: 0 = route by shape, 1..kNumVariants = force one variant (set_qgemv_variant)
struct ShapeVariant {
  int N, K, v;
};
std::vector<ShapeVariant> g_shape_variants;  // set_qgemv_shape_variant (measurements only)
int shape_variant(const GemvArgs& a) {
  for (const ShapeVariant& s : g_shape_variants)
    if (s.N == a.N && s.K == a.K) return s.v;
  return 0;
}

// Ring variants (qgemv_ring_kernel; every width): id -> rows per warp, most stages, warps per block, grid.
template <int BITS>
bool launch_ring_variant(const GemvArgs& a, cudaStream_t st, int v) {
  switch (v) {
    // register caps (MINB) of <= 64 per thread: shared memory, not registers, limits the resident blocks
    case 16: return launch_ring<BITS, 2, 8, 4>(a, st, 4, true);
    case 17: return launch_ring<BITS, 2, 4, 8>(a, st, 8, true);
    case 18: return launch_ring<BITS, 4, 4, 8>(a, st, 4, true);
    default: return launch_ring<BITS, 2, 8, 5>(a, st, 3, true);  // 19
  }
}
// T = 1 route by width and shape.
//   4-bit: chosen on whole decode steps (bench/route_search.py, H200, int8 KV, depth 0; session 5 call 3,
//          bench/results/route-search-h200.json: 5.439 -> 5.077 ms per step), not on isolated GEMVs, whose
//          table does not add up to a step (PDL overlaps each GEMV's start with its predecessor's tail, and the
//          sx kernels stage x after the wait). K > 8192 variant 49 (down: 36 spread evenly over the SMs, session
//          24: -0.05 ms a step; 36 until then, and variant 4 until session 14, whose call 1 measured 4.653 against
//          4.707 ms a step); N >= 24576 variant 37 (34 until session 14: 4.661 against 4.707,
//          bench/results/step-pp-lazy-h200-s14-call1.txt) or 34 (integer dot,
//          R4 U2, one 22-warp block per SM: gate_up, lm_head; 29's 24 warps until session 8, whose call 4 measured
//          4.878 against 4.944 ms a step: 22 warps fill gate_up's last round on 132 SMs, see variant 34; other SM
//          counts have other best widths, not yet searched); N >= 12288 variant 30 (integer dot, R8 U1, one
//          16-warp block per SM: gdn_in, the attention qkv); else 4 (gdn_out and the attention output, 5120 x
//          6144). 29 / 30 replaced 23 / 27 (the same code as 3 / 2 blocks per SM) in session 7: x, 8 bytes an
//          element with the fused norm, is then staged from L2 once per SM (5.071 -> 4.973 ms a step, call 3).
//          The ring (16..19) lost everywhere (44-51 us on gate_up in bench/gemv_probe.py).
//   5/6/8-bit (isolated GEMVs, bench/gemv_probe.py, sessions 3-4):
//   5-bit: K > 8192 ring 19 (34.9 vs 41.1 generic), else ring 18 (52.7 / 28.5 / 12.7 vs 68.0 / 36.2 / 14.8).
//   6-bit: K > 8192 ring 17 (38.4 vs 41.2), else ring 18 (53.9 / 30.0 / 13.1 vs 69.6 / 36.8 / 15.0).
//   8-bit: the generic per-element path (54.6 / 34.9 / 30.8 / 11.8, up to 3.37 TB/s) beat the ring (~100 / 62).
//   Whole steps with the q4-27b recipe (5-bit down / gdn_out / o, 6-bit lm_head and k|v): on the rings above,
//   6.401 ms at depth 0, and no other ring / generic choice faster beyond noise (session 14 call 5,
//   bench/results/step-q4-27b-routes-h200-s14-call5.txt). Variant 36 at 5 bits (qgemv_pp_wide_kernel) on down:
//   6.054 ms, on gdn_out / o: 6.131, on both: 5.658 (session 15 call 1, step-q4-27b-wide-h200-s15-call1.txt),
//   so 5-bit runs 36 on K > 8192 and on the 5120-row shapes; other 5-bit shapes keep ring 18 (not timed on steps).
//   The tails of q4-27b's split input projections (GDN b|a: 96 x 5120 at 8 bits, 48 warps on 12 SMs on the generic
//   path; attention k|v: 2048 x 5120 at 6 bits) run the column split 45, which spreads a few rows over every SM:
//   5.653 -> 5.481 ms a step, b|a 5.78 -> 2.37 us, k|v 7.47 -> 4.83 (session 15 call 3,
//   bench/results/step-tails-q4-27b-h200-s15-call3.txt). On down / gdn_out / o, 45 / 46 lost (call 2: q4g64 down
//   4.736 / 4.821 ms against 4.647, gdn_out / o 4.837 / 4.885; q4-27b 5.757 / 5.807 against 5.684).
template <int BITS>
int t1_route(const GemvArgs& a) {
  if (BITS == 4) return a.K > 8192 ? 49 : a.N >= 24576 ? 37 : a.N >= 12288 ? 30 : 4;
  if (a.N <= 2048) return 45;  // 5 / 6 / 8-bit: few rows (the tails above)
  if (BITS == 5) return a.K > 8192 || a.N <= 5120 ? 36 : 18;
  if (BITS == 6) return a.K > 8192 ? 17 : 18;
  return a.K >= 2048 ? 48 : 1;  // 8-bit: the walk (session 17), the generic path for small K (the demo model)
}

// The T = 1 variant a launch of a runs: forced (set_qgemv_variant), per shape (set_qgemv_shape_variant), or routed.
template <int BITS>
int t1_variant(const GemvArgs& a) {
  const int v = g_variant ? g_variant : shape_variant(a);
  return v ? v : t1_route<BITS>(a);
}

// set_qgemv_mma: on by default since session 40, whose fix (x loads after the PDL wait: ld_after_wait) made it right
// inside the engine (H100: the engine-level, verify, MTP, model, prefill and routing GPU tests with it on,
// bench/results/tests-*-mma-fixed-h100-s40-*.txt); off runs the per-token kernel (a step of T tokens then costs nearly
// T steps)
bool g_mma = true;

template <int BITS>
void launch_bits(const GemvArgs& a, cudaStream_t st) {
  // T > 1 and the generic T = 1 path of 5/6/8-bit decode per element (code_of), instantiated for T = 1 and
  // T <= 16 only (compile time).
  if (a.T <= 1) {
    const int v = t1_variant<BITS>(a);
    if (a.x_lanes) {  // the lanes layout is read by variants 4, 36, 39..44, 49 only (qgemv checks v before it gets here)
      if constexpr (BITS == 4) {
        if (is_pp_variant(v)) launch_pp_variant<true>(a, st, v);
        else launch_generic<BITS, 1, 2, false, true, true>(a, st);
      } else if constexpr (BITS == 5 || BITS == 6) {
        launch_pp_wide<true, BITS>(a, st);  // 36
      }
      return;
    }
    if (is_col_variant(v)) {  // every width, x in perm8 order
      if (v == 45) launch_col<BITS, true>(a, st);
      else launch_col<BITS, false>(a, st);
      return;
    }
    // 48 at 5 / 6 / 8 bits: variant 47's walk on the given x (perm8 order), every epilogue (session 17)
    if constexpr (BITS != 4) {
      if (v == 48 && launch_walk<BITS, false>(a, SplitTail{a.codes, a.high, a.scales, a.N, a.gshift}, st)) return;
    }
    // 36 at 5 / 6 bits: qgemv_pp_kernel with the high plane (session 14), x in perm8 order here
    if constexpr (BITS == 5 || BITS == 6) {
      if (v == 36) {
        launch_pp_wide<false, BITS>(a, st);
        return;
      }
    }
    // 16..19 (qgemv_ring_kernel, every width; persistent grid; cp.async ring of S stages per warp, S <= S_MAX
    // chosen at launch from the shared-memory budget; per-warp in-flight bytes (S - 1) x R x 512 B of codes):
    //   16 R2, S_MAX 4, 256 thr, balanced grid (3 KB of codes in flight per warp)
    //   17 R2, S_MAX 8, 128 thr, balanced (7 KB per warp, half the warps)
    //   18 R4, S_MAX 4, 128 thr, balanced (each x read feeds 4 rows: less shared-memory traffic)
    //   19 R2, S_MAX 3, 256 thr, <= 48 regs: more resident warps (H200, 4-bit, K <= 6144: 5 blocks = 40 warps
    //      per SM instead of 4 x 8 for 16), 2 KB of codes in flight per warp
    // A shape whose x leaves no room for 2 stages falls back to variant 1 (4-bit) / the generic path.
    if (v >= 16 && v <= 19) {
      if (!launch_ring_variant<BITS>(a, st, v)) launch_generic<BITS, 1, 2, false, false>(a, st);
      return;
    }
    // 5/6/8-bit, 1..15: the generic per-element path (kept for comparison)
    if constexpr (BITS != 4) {
      launch_generic<BITS, 1, 2, false, false>(a, st);
      return;
    }
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
    //   20..25: IDOT (x as 16-bit integers in shared memory, dp4a; see stage_xq): 20 = 6, 21 = 7, 22 R2 U4
    //      <= 128 regs, 23 R4 U2 <= 80 regs, 24 = 10, 25 = 6 capped at 48 regs (5 blocks/SM, 40 warps);
    //      more bytes in flight per SM than 23's 96 KB: 26 R4 U2 pipelined <= 128 regs (128 KB), 27 R8 U1
    //      <= 128 regs (64 KB, x read once per 8 rows), 28 R8 U2 <= 128 regs (128 KB)
    //   (session 6's notes used the ids 29..37 for kernels since removed; the ones below are session 7's)
    //   29, 30: 23 and 27 as one block per SM (24 and 16 warps: the same warps and register cap per SM), so x is
    //      staged once per SM instead of 3 / 2 times. Why: every block reads all of x from L2 through the same
    //      L2 -> SM path as the weights; with the fused norm that is 8 bytes per element (fp32 residual and norm
    //      weight), 120 KB per SM for 23 on K = 5120 against 320 KB of gdn_in's weights per SM (session 7, calls 2-3
    //      of bench/boundary_probe.cu: a flat stream cut into the layer's phases keeps 52 % of one long stream's rate
    //      when every block reads x first, 85 % when none does)
    //   31..33: for the 5120-row shapes (down, gdn_out, attention output), one block of 20 warps per SM (2560 row
    //      pairs = 128 blocks, one round), x staged once per SM: 31 integer dot R2 U2 pipelined, 32 integer dot
    //      R2 U4, 33 the fp16 half2 path R2 U2 pipelined (x staged as fp16, not re-quantized); no gain on whole
    //      steps (session 7 final call: 4.970-5.087 ms against 4.979), kept for route searches
    //   34, 35: 29 with 22 warps and 30 with 14 warps per SM, so that the row groups fill whole rounds on 132 SMs
    //      (gate_up: 8704 groups of 4 rows = 2.997 rounds of 2904 warps instead of 2.75 of 3168; the attention qkv:
    //      1792 groups of 8 = 0.97 rounds of 1848 instead of 0.85 of 2112): the tail of a phase, not its width.
    //      34 is the route's for gate_up and lm_head; 35 gained nothing on qkv and lost on gdn_in (session 8 call 4)
    //   36: qgemv_pp_kernel, variant 4 with a software pipeline that works (see there); 37 / 38: 34 / 30 with their
    //      scales and norm weights converted where used (LAZY, see qgemv4_sx_kernel). Session 13, written after its
    //      last device call from the SASS, bit-equal to 4 / 34 / 30 by construction (tests). Session 14 call 1, whole
    //      steps at depth 0 / 128K against 4.707 / 5.839 ms: 36 on down 4.653 / 5.778 (routed), on gdn_out / o 4.723 /
    //      5.830; 37 on gate_up + lm_head 4.661 / 5.788 (routed); 38 on gdn_in + qkv 4.713 / 5.841 (not routed)
    //   39 / 40: 36 with one / no batch before the PDL wait (qgemv_pp_kernel's PRE), for gdn_out / o, whose
    //      predecessors (the GDN step, the combine) are latency-bound and lengthened by loads issued under them. Call 2:
    //      4.665 / 4.709 ms on gdn_out / o, 4.670 / 4.716 on down, against 4.643 and 4.663 for the route before and
    //      after (bench/results/step-pp-pre-h200-s14-call2.txt): no gain, not routed
    //   41 / 42: qgemv_pp_kernel with 4 rows a warp (R = 4), 2 / 1 batches before the wait; 43 / 44: 36 / 41 with the
    //      weights loaded past L1 (ld.global.cg)
    // (session 13 call 4, measured and removed: 36, variant 4 with U = 6 and no pipeline, so that gdn_out's / the
    // attention output's whole row pair (K = 6144) is in registers before the PDL wait, capped at 102 registers by
    // __launch_bounds__(128, U >= 6 ? 5 : 1). Bit-equal to 4 (517 GEMV tests passed), but the explicit minimum of 1 block
    // for U < 6 raised variant 4 itself from 95 to 121 registers (16 warps an SM: down's 2560 row pairs in 1.2
    // rounds, 18.7 -> 26.9 us), which spoiled the A/B; 36's own increments, gdn_out 8.59 and o 8.51 us, were no better
    // than 4's 7.88 / 8.05 in call 3 (bench/results/step-variant36-h200-s13-call4.txt, step-timeline-variant36-*))
    // (session 12, measured on whole steps and removed: 36 / 37, each 4-warp block's 8 rows (codes and scales, 25.5 KB
    // at K = 6144) copied into shared memory with cp.async before the PDL wait, so that gdn_out / the attention output
    // stream in while the latency-bound GDN step / combine runs; bit-equal to variant 4. gdn_out's own increment fell
    // (8.47 -> 7.08 us) but every other role got slower (the GDN step +0.7 us, gate_up +1.7, gdn_in +1.2, even
    // lm_head): steps 5.039-5.074 ms against 4.811-4.834, with or without the max-shared carveout (37 / 36), and 5.132
    // with one carveout for the whole step (bench/results/step-preload-h200-s12-call{4,5}.txt, step-carveout-h200-s12-call6.txt))
    // (session 11-12, measured on whole steps and removed: 36, the cp.async ring kernel with only weights in its ring
    // (up to 8 stages of 1.25 KB a warp, ~175 KB in flight an SM for down) and x read through L1 as variant 4 reads it:
    // down 5.346 ms a step against 4.836, gdn_out / o 5.215 (bench/results/step-variant36-h200-s12-call1.txt): more
    // bytes in flight is not what down lacks.)
    // (session 10, measured on whole steps and removed: 36 / 37, variant 4 with x staged per block one batch at a
    // time, double-buffered, a barrier per batch (U = 2 / 1): down 4.973 / 5.006 ms a step against 4.899, gdn_out / o
    // 4.880 / 4.890 (bench/results/step-routes-h200-s10-call1.txt). Variant 4 with x in the lanes layout
    // (GEMV_X_LANES) keeps its lazy walk and fixes the pattern instead)
    // (session 9, measured on whole steps and removed, bench/NOTES.md: an ablation of variant 4's loop
    // (bench/gemv_ablation.cu) put ~4 us of down's 21.7 on x read through L1 (lanes 64 bytes apart: 16 lines per
    // LDG.128) and ~2 us on the scale loads, so for down / gdn_out / o: 36..38, the sx kernel with fp16 x staged by
    // every 4-warp block, one row group per warp (alone 20.1 / 9.1 us against 22.2 / 10.4; steps 4.980 against 4.908
    // ms: the staging sits after the PDL wait); 39, variant 4 with weights and scales past L1 (21.6 us alone; steps
    // 5.020 against 4.903); 40, variant 4 with each row pair's walk over K rotated so the grid does not read the same
    // x lines at once (steps 5.181). Variant 4's lazy x, read chunk by chunk as the walk needs it, wins in the step)
    // (session 8 call 2, measured and removed: one block per SM streaming a contiguous run of whole rows, 512-byte
    // items round-robin over its warps, D items in flight per thread: 2-4x slower, each item paying a warp sum and
    // its own x reads; the ids 34..37 then were that kernel)
    // (session 23, measured on whole steps and removed, bench/NOTES.md call 2: 49 / 50, 37 with 2 rows a warp (R2 U4 /
    // R2 U2, 80 / 67 registers, bit-equal to 37) so that gate_up's warps walk 6 row groups of ~4 us instead of 3 of ~8:
    // +0.06 / +0.025 ms a step on gate_up (26.34 -> 27.12 us a layer for R2 U4), lm_head within noise
    // (bench/results/step-gateup-r2-h200-s23-call2.txt, step-timeline-gateup-r2-h200-s23-call2.txt))
    // (session 23, measured on whole steps and removed, bench/NOTES.md: 49..51, gdn_out's / the attention output's
    // rows wholly in registers before the PDL wait (2 or 4 rows a warp, 6 chunks a lane), the row groups claimed by
    // blocks from a counter so that blocks on the SMs free during the GDN step / combine take most of them: +0.09 /
    // +0.17 / +0.23 ms a step (20 x 2, 8 x 2, 8 x 4 warps x rows); in the timeline (20 x 2) gdn_out 8.18 -> 7.86 us but
    // the GDN step 4.09 -> 5.41 (its own traffic queues behind the preload) and the attention output 8.37 -> 11.09
    // (its 20-warp blocks wait for whole SMs). 52, variant 36 held to 72 registers (__launch_bounds__(128, 7), 16-24
    // bytes spilled) so that one down block fits beside gate_up's 22-warp block: +0.19 ms
    // (bench/results/step-preload-h200-s23-call1.txt, step-timeline-preload-h200-s23-call1.txt)); call 3, 20 x 2 and
    // 12 x 4 on gdn_out alone (the attention output on 4): +0.045 ms with a block on every SM, +0.24 / +0.32 with the
    // grid held to the 84 SMs the GDN step leaves free (gdn_out 8.2 -> 11.5 us: the second claims stream after the
    // release on fewer SMs; bench/results/step-preload-gdnout-h200-s23-call3.txt))
    // (session 20, measured on whole steps and removed, bench/NOTES.md call 7: 37 in 24 warps with each block walking
    // its own contiguous run of row groups, so that the 4 SM sub-partitions get 16-17 groups each instead of 18 / 15
    // (the 22-warp block's 6 / 5 warps): gate_up and lm_head unchanged within 0.005 ms a step, as with 22 warps)
    // (session 20, measured on whole steps and removed, bench/NOTES.md calls 4-6: L2 prefetches (prefetch.global.L2,
    // no registers held) of 1-4 more batches before the PDL wait in 36 (down), 37 (gate_up) and 30 (gdn_in / qkv):
    // 36 with one batch unchanged, every other form +0.04 to +0.10 ms a step, the more the slower; 36 prefetching 1 / 2
    // / 4 batches ahead inside its loop: +0.10 to +0.12 ms; and, as a timing probe on random weights, 36 and 37 reading
    // their codes as if each batch were one contiguous block (a tiled layout): no faster)
    // (session 20, measured on whole steps and removed, bench/NOTES.md: 36 and 4 in blocks of 20 or 10 warps, 49..52
    // then, so that no SM holds more than 20 of the 2560 row pairs of down / gdn_out / o: the 4-warp blocks fit 6 an SM
    // and PDL places them greedily on the SMs their predecessor leaves first, 24 warps on ~100 SMs and none on 15-20,
    // whose SMs end 1.6 us after the median (warp stamps, call 2); but every wide form was slower, +0.05 to +0.08 ms a
    // step each, +0.11 / +0.18 together: a wide block starts only when its SM is free, and starting early beats balance)
    // (session 6, measured on whole steps and removed, bench/NOTES.md: a block-wide cp.async ring with the bytes in
    // flight in shared memory (37-79 us on gate_up), a dynamic row-group schedule on one atomic ticket counter
    // (34.5 us), a K split over a block's warps for down (22.3-24.9 us against 22.2), 3-4 chunks per row in flight
    // for down (24.3-30.6 us), and an L2 prefetch of each warp's first row group before the PDL wait (+7.7 % a step))
    // (session 7, measured and removed: the GDN conv update in the epilogue of gdn_in's GEMV (variant 30), its first
    // group's conv weights and window L2-prefetched before the PDL wait; bit-identical to the separate kernel, 48
    // fewer kernels a step, but 5.024 ms against 4.979 a step: the epilogue's loads sit on the GEMV's critical path)
    // (an x-in-register kernel, K split over a block's warps with x held per lane and whole rows streamed per
    // batch, was measured in session 5 call 2 and removed: 33-40 us on gate_up, slower than 6 and 23 on every
    // shape; bench/NOTES.md)
    // (bench/read_probe.py, session 4: the variant-6 pattern without arithmetic streams at 3.3 TB/s with U = 2
    // and 3.8 with U = 4, against 4.1 for a flat stream; but variants with more bytes in flight per warp (R2 U3,
    // R2 U5, R1 U5; measured in call 4 and removed) ran no faster than 6 with the arithmetic in: ~3.08 TB/s)
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
      else if (v == 20) done = launch_sx<2, 2, 8, 4, true, false, false, true>(a, st, false);
      else if (v == 21) done = launch_sx<2, 2, 8, 4, true, true, false, true>(a, st, false);
      else if (v == 22) done = launch_sx<2, 4, 8, 2, true, false, false, true>(a, st, false);
      else if (v == 23) done = launch_sx<4, 2, 8, 3, true, false, false, true>(a, st, false);
      else if (v == 24) done = launch_sx<2, 2, 16, 2, true, true, false, true>(a, st, false);
      else if (v == 25) done = launch_sx<2, 2, 8, 5, true, false, false, true>(a, st, false);
      else if (v == 26) done = launch_sx<4, 2, 8, 2, true, true, false, true>(a, st, false);
      else if (v == 27) done = launch_sx<8, 1, 8, 2, true, false, false, true>(a, st, false);
      else if (v == 28) done = launch_sx<8, 2, 8, 2, true, false, false, true>(a, st, false);
      else if (v == 29) done = launch_sx<4, 2, 24, 1, true, false, false, true>(a, st, false);
      else if (v == 30) done = launch_sx<8, 1, 16, 1, true, false, false, true>(a, st, false);
      else if (v == 31) done = launch_sx<2, 2, 20, 1, true, true, false, true>(a, st, false);
      else if (v == 32) done = launch_sx<2, 4, 20, 1, true, false, false, true>(a, st, false);
      else if (v == 33) done = launch_sx<2, 2, 20, 1, true, true, false, false>(a, st, false);
      else if (v == 34) done = launch_sx<4, 2, 22, 1, true, false, false, true>(a, st, false);
      else if (v == 35) done = launch_sx<8, 1, 14, 1, true, false, false, true>(a, st, false);
      else done = false;
      if (done) return;
      if (is_pp_variant(v)) {
        launch_pp_variant<false>(a, st, v);
        return;
      }
      if (v == 37 && launch_sx<4, 2, 22, 1, true, false, false, true, false, true>(a, st, false)) return;
      if (v == 38 && launch_sx<8, 1, 16, 1, true, false, false, true, false, true>(a, st, false)) return;
      if (v >= 6) {
        launch_generic<BITS, 1, 2, false, false>(a, st);
        return;
      }
      if (v == 2) launch_generic<BITS, 1, 4, false, false>(a, st);
      else if (v == 3) launch_generic<BITS, 1, 4, true, false>(a, st);
      else if (v == 4) launch_generic<BITS, 1, 2, false, true>(a, st);
      else if (v == 5) launch_generic<BITS, 1, 2, true, true>(a, st);
      else launch_generic<BITS, 1, 2, false, false>(a, st);
    }
  }
  else if (g_mma && !a.x_lanes && a.nx == nullptr) launch_mma(BITS, a, st);
  else if (BITS != 4) launch_generic<BITS, 16, 2, false, false>(a, st);
  else if (a.T <= 2) launch_generic<BITS, 2, 2, false, false>(a, st);
  else if (a.T <= 4) launch_generic<BITS, 4, 2, false, false>(a, st);
  else if (a.T <= 8) launch_generic<BITS, 8, 2, false, false>(a, st);
  else launch_generic<BITS, 16, 2, false, false>(a, st);
}

}  // namespace

namespace {
void check_variant(int v) {
  if (v < 0 || v > kNumVariants)
    throw std::invalid_argument("qgemv variant must be 0 (route by shape) or 1.." + std::to_string(kNumVariants));
}
}  // namespace

void set_qgemv_variant(int v) {
  check_variant(v);
  g_variant = v;
}

void set_qgemv_shape_variant(int N, int K, int v) {
  check_variant(v);
  for (auto it = g_shape_variants.begin(); it != g_shape_variants.end(); ++it)
    if (it->N == N && it->K == K) {
      g_shape_variants.erase(it);
      break;
    }
  if (v) g_shape_variants.push_back({N, K, v});
}

void clear_qgemv_shape_variants() { g_shape_variants.clear(); }

namespace {
GemvArgs gemv_args(const QMatrix& W, const __half* x, int T, int epilogue, float* out_f32, __half* out_h, int ldo,
                   int x_layout = GEMV_X_PERM8, int out_layout = GEMV_X_PERM8) {
  if ((x_layout != GEMV_X_PERM8 && x_layout != GEMV_X_LANES) || (out_layout != GEMV_X_PERM8 && out_layout != GEMV_X_LANES))
    throw std::invalid_argument("qgemv: the x / out layout must be 0 (perm8) or 1 (lanes)");
  if (out_layout == GEMV_X_LANES && (epilogue != GEMV_SWIGLU || W.rows % 64 != 0))
    throw std::invalid_argument("qgemv: the lanes output layout needs the SwiGLU epilogue and N / 2 a multiple of 32");
  if (T < 1 || T > kMaxStepTokens) throw std::invalid_argument("qgemv: T must be in 1..16");
  if (W.cols % 32 != 0 || W.cols % W.q.group != 0) throw std::invalid_argument("qgemv: K must be a multiple of 32 and of the group");
  if (epilogue == GEMV_SWIGLU && W.rows % 2 != 0) throw std::invalid_argument("qgemv: SwiGLU needs an even row count");
  GemvArgs a{};  // fields by name: a positional list silently shifts when a field is added (session 11's bug)
  a.codes = reinterpret_cast<const uint8_t*>(W.codes);
  a.high = reinterpret_cast<const uint8_t*>(W.high);
  a.scales = reinterpret_cast<const __half*>(W.scales);
  a.N = (int)W.rows;
  a.K = (int)W.cols;
  a.gshift = W.q.group == 64 ? 6 : 5;
  a.x = x;
  a.T = T;
  a.epi = epilogue;
  a.out_f32 = out_f32;
  a.out_h = out_h;
  a.ldo = ldo;
  a.x_lanes = x_layout == GEMV_X_LANES;
  a.out_lanes = out_layout == GEMV_X_LANES;
  return a;
}

// The fused norm runs in the integer-dot sx variants 23 and 27 and their one-block-per-SM forms 29 and 30 (the
// route's) and 34 / 35; for any other variant, width or T the caller runs the norm as its own kernel.
int fused_norm_variant(const GemvArgs& a) {
  if (a.T != 1) return 0;
  const int v = t1_variant<4>(a);
  return v == 23 || v == 27 || v == 29 || v == 30 || v == 34 || v == 35 || v == 37 || v == 38 ? v : 0;
}

// The T = 1 variant of a matrix of any width (t1_variant of its width).
int t1_variant_any(const GemvArgs& a, int bits) {
  switch (bits) {
    case 4: return t1_variant<4>(a);
    case 5: return t1_variant<5>(a);
    case 6: return t1_variant<6>(a);
    default: return t1_variant<8>(a);
  }
}

// Variant 47's epilogues (the walk kernel with the norm fused stores rows or SwiGLU pairs; the residual add is left to
// 48, which takes x as given).
bool normed_walk_epilogue(int epilogue) { return epilogue == GEMV_STORE || epilogue == GEMV_SWIGLU; }

// The T = 1 variant qgemv_normed runs for a 5/6/8-bit matrix: forced or per shape as t1_variant, else 47 (the fused
// norm, then the walk on fp16 x) for the store and SwiGLU epilogues at K >= 2048 and N >= 8192 (the lm_head, gate_up and
// the uniform recipes' input projections: session 16 call 6 measured the 6-bit lm_head 296 -> 255 us, session 17 the
// 5-bit one and the rest; the demo model's K = 128 keeps the ring it was tested on), else the width's route.
int normed_wide_variant(const GemvArgs& a, int bits, int epilogue) {
  const int chosen = g_variant ? g_variant : shape_variant(a);
  if (chosen) return chosen;
  if (bits != 4 && a.T == 1 && normed_walk_epilogue(epilogue) && a.N >= 8192 && a.K >= 2048) return 47;
  return t1_variant_any(a, bits);
}

SplitTail split_tail(const QMatrix& W) {
  SplitTail t{};
  t.codes = reinterpret_cast<const uint8_t*>(W.codes);
  t.high = reinterpret_cast<const uint8_t*>(W.high);
  t.scales = reinterpret_cast<const __half*>(W.scales);
  t.N = (int)W.rows;
  t.gshift = W.q.group == 64 ? 6 : 5;
  return t;
}

// T = 1 on the column split (variants 45 / 46, every width): it takes the norm fused.
bool col_fuses_norm(const GemvArgs& a, int bits) { return a.T == 1 && is_col_variant(t1_variant_any(a, bits)); }

// The column split with the norm fused (a.nx / a.nw / a.neps / a.nadd set; col_fuses_norm).
void launch_col_normed(const GemvArgs& a, int bits, cudaStream_t st) {
  const bool pre = t1_variant_any(a, bits) == 45;
  switch (bits) {
    case 4: pre ? launch_col<4, true, true>(a, st) : launch_col<4, false, true>(a, st); break;
    case 5: pre ? launch_col<5, true, true>(a, st) : launch_col<5, false, true>(a, st); break;
    case 6: pre ? launch_col<6, true, true>(a, st) : launch_col<6, false, true>(a, st); break;
    default: pre ? launch_col<8, true, true>(a, st) : launch_col<8, false, true>(a, st); break;
  }
}
}  // namespace

static bool g_lanes = true;  // set_qgemv_lanes
static bool g_norm_w_early = true;  // set_qgemv_norm_weights_early
static bool g_keep_x_fused = true;  // set_qgemv_keep_x_fused (q4-27b 5.524 -> 5.467 ms a step: bench/NOTES.md session 16)

void set_qgemv_norm_weights_early(bool on) { g_norm_w_early = on; }

void set_qgemv_keep_x_fused(bool on) { g_keep_x_fused = on; }

namespace {
// The fused norm's inputs of a qgemv_normed launch: x = rmsnorm(resid) * (norm_w + add_one), eps.
void set_fused_norm(GemvArgs& a, const float* resid, const float* norm_w, float eps, bool add_one) {
  a.nx = resid;
  a.nw = norm_w;
  a.nw_early = g_norm_w_early;
  a.neps = eps;
  a.nadd = add_one ? 1.f : 0.f;
}

// The fused norm reads the residual and its weights as float4.
bool norm_inputs_aligned(const float* resid, const float* norm_w) {
  return ((reinterpret_cast<uintptr_t>(resid) | reinterpret_cast<uintptr_t>(norm_w)) & 15) == 0;
}
}  // namespace

int qgemv_x_layout(const QMatrix& W, int T) {
  if (!g_lanes || T != 1) return GEMV_X_PERM8;
  const GemvArgs a = gemv_args(W, nullptr, T, GEMV_STORE, nullptr, nullptr, 0);
  if (W.q.bits == 5) return t1_variant<5>(a) == 36 ? GEMV_X_LANES : GEMV_X_PERM8;
  if (W.q.bits == 6) return t1_variant<6>(a) == 36 ? GEMV_X_LANES : GEMV_X_PERM8;
  if (W.q.bits != 4) return GEMV_X_PERM8;
  const int v = t1_variant<4>(a);
  return v == 4 || is_pp_variant(v) ? GEMV_X_LANES : GEMV_X_PERM8;
}

void set_qgemv_lanes(bool on) { g_lanes = on; }

void set_qgemv_mma(bool on) { g_mma = on; }
bool qgemv_mma() { return g_mma; }


SpreadLaunch qgemv_spread_launch(int N, bool x_lanes) { return pp_spread_launch(x_lanes, N); }

bool qgemv_fuses_norm(const QMatrix& W, int T) {
  if (T != 1) return false;
  const GemvArgs a = gemv_args(W, nullptr, T, GEMV_STORE, nullptr, nullptr, 0);
  if (col_fuses_norm(a, W.q.bits)) return true;
  if (W.q.bits != 4 && normed_wide_variant(a, W.q.bits, GEMV_STORE) == 47) return true;
  return W.q.bits == 4 && fused_norm_variant(a) != 0;
}

void qgemv_normed(const QMatrix& W, const float* resid, const float* norm_w, float eps, bool add_one, int T,
                  int epilogue, float* out_f32, __half* out_h, int ldo, __half* xin, cudaStream_t stream,
                  int out_layout, bool keep_x) {
  GemvArgs a = gemv_args(W, xin, T, epilogue, out_f32, out_h, ldo, GEMV_X_PERM8, out_layout);
  const bool aligned = norm_inputs_aligned(resid, norm_w);
  if (keep_x) {  // xin must hold the normalised x afterwards: variant 30 writes it (XOUT), else the norm kernel does
    const int v = W.q.bits == 4 && aligned && g_keep_x_fused ? fused_norm_variant(a) : 0;
    if (v == 30) {
      set_fused_norm(a, resid, norm_w, eps, add_one);  // a.x is xin: XOUT writes the normalised x there
      if (launch_sx<8, 1, 16, 1, true, false, false, true, true, false, true>(a, stream, false)) {
        MR_CHECK_LAUNCH("qgemv_normed");
        return;
      }
    }
    rmsnorm_to_gemv_input(resid, T, (int)W.cols, norm_w, eps, add_one, xin, stream);
    qgemv(W, xin, T, epilogue, out_f32, out_h, ldo, stream, GEMV_X_PERM8, out_layout);
    return;
  }
  // 47 (5/6/8-bit, T = 1, store or SwiGLU; sessions 16-17; normed_wide_variant's route): the walk kernel with the norm
  // fused (row groups of 4 on fp16 x in shared memory over the whole matrix; session 16 ran it as the split kernel with
  // no head rows).
  if (aligned && T == 1 && W.q.bits != 4 && normed_walk_epilogue(epilogue) &&
      normed_wide_variant(a, W.q.bits, epilogue) == 47) {
    set_fused_norm(a, resid, norm_w, eps, add_one);
    if (launch_walk_bits<true>(a, split_tail(W), W.q.bits, stream)) {
      MR_CHECK_LAUNCH("qgemv_normed");
      return;
    }
  }
  if (aligned && col_fuses_norm(a, W.q.bits)) {
    set_fused_norm(a, resid, norm_w, eps, add_one);  // (the column split does not read nw_early)
    launch_col_normed(a, W.q.bits, stream);
    MR_CHECK_LAUNCH("qgemv_normed");
    return;
  }
  const int v = W.q.bits == 4 && aligned ? fused_norm_variant(a) : 0;
  if (v) {
    set_fused_norm(a, resid, norm_w, eps, add_one);
    bool done = false;
    switch (v) {
      case 23: done = launch_sx<4, 2, 8, 3, true, false, false, true, true>(a, stream, false); break;
      case 27: done = launch_sx<8, 1, 8, 2, true, false, false, true, true>(a, stream, false); break;
      case 29: done = launch_sx<4, 2, 24, 1, true, false, false, true, true>(a, stream, false); break;
      case 34: done = launch_sx<4, 2, 22, 1, true, false, false, true, true>(a, stream, false); break;
      case 35: done = launch_sx<8, 1, 14, 1, true, false, false, true, true>(a, stream, false); break;
      case 37: done = launch_sx<4, 2, 22, 1, true, false, false, true, true, true>(a, stream, false); break;
      case 38: done = launch_sx<8, 1, 16, 1, true, false, false, true, true, true>(a, stream, false); break;
      default: done = launch_sx<8, 1, 16, 1, true, false, false, true, true>(a, stream, false); break;  // 30
    }
    if (done) {
      MR_CHECK_LAUNCH("qgemv_normed");
      return;
    }
  }
  rmsnorm_to_gemv_input(resid, T, (int)W.cols, norm_w, eps, add_one, xin, stream);
  qgemv(W, xin, T, epilogue, out_f32, out_h, ldo, stream, GEMV_X_PERM8, out_layout);
}

static bool g_split_fused = true;  // set_qgemv_split_fused (q4-27b 5.422 -> 5.263 ms a step: bench/NOTES.md session 16)
void set_qgemv_split_fused(bool on) { g_split_fused = on; }

bool qgemv_split_fuses(const QMatrix& head, const QMatrix& tail, int T) {
  if (!g_split_fused || T != 1 || head.q.bits != 4 || head.cols != tail.cols || tail.rows < 1) return false;
  if (tail.q.bits != 5 && tail.q.bits != 6 && tail.q.bits != 8) return false;
  return fused_norm_variant(gemv_args(head, nullptr, T, GEMV_STORE, nullptr, nullptr, 0)) == 30;
}

void qgemv_normed_split(const QMatrix& head, const QMatrix& tail, const float* resid, const float* norm_w, float eps,
                        bool add_one, int T, float* out, int ldo, __half* xin, cudaStream_t stream) {
  if (norm_inputs_aligned(resid, norm_w) && qgemv_split_fuses(head, tail, T)) {
    GemvArgs a = gemv_args(head, xin, T, GEMV_STORE, out, nullptr, ldo);
    set_fused_norm(a, resid, norm_w, eps, add_one);
    if (launch_split_bits(a, split_tail(tail), tail.q.bits, stream)) {
      MR_CHECK_LAUNCH("qgemv_normed_split");
      return;
    }
  }
  qgemv_normed(head, resid, norm_w, eps, add_one, T, GEMV_STORE, out, nullptr, ldo, xin, stream, GEMV_X_PERM8,
               /*keep_x=*/true);
  qgemv(tail, xin, T, GEMV_STORE, out + head.rows, nullptr, ldo, stream);
}

void qgemv(const QMatrix& W, const __half* x, int T, int epilogue, float* out_f32, __half* out_h, int ldo,
           cudaStream_t stream, int x_layout, int out_layout) {
  const GemvArgs a = gemv_args(W, x, T, epilogue, out_f32, out_h, ldo, x_layout, out_layout);
  if (a.x_lanes && qgemv_x_layout(W, T) != GEMV_X_LANES)
    throw std::invalid_argument("qgemv: x in the lanes layout is read by the T = 1 variants 4, 36, 39..44 and 49 "
                                "(4-bit) and 36 (5 / 6-bit) only (qgemv_x_layout)");
  switch (W.q.bits) {
    case 4: launch_bits<4>(a, stream); break;
    case 5: launch_bits<5>(a, stream); break;
    case 6: launch_bits<6>(a, stream); break;
    case 8: launch_bits<8>(a, stream); break;
    default: throw std::invalid_argument("qgemv: bits must be 4, 5, 6 or 8");
  }
  MR_CHECK_LAUNCH("qgemv");
}

MR_STAMPS_TU(qgemv)

}  // namespace monorail
