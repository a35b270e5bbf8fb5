// The GEMV for T = 2..16 tokens on tensor cores (4 / 5 / 6 / 8-bit) (mma.sync m16n8k16, fp32 accumulate): the weights are
// dequantized once and multiplied with every token, so a step of T tokens streams the matrix once, as T = 1 does.
// Included, inside an anonymous namespace, by qgemv_mma.cu (the reduce and the host side) and by the files that
// instantiate the kernel's forms by width (qgemv_mma_4_8bit.cu, qgemv_mma_5_6bit.cu, through qgemv_mma_launch.cuh); it
// uses GemvArgs, swiglu_pos, Chunk, load_chunk and magic_words from qgemv_common.cuh.
//
// Why: the per-token kernel (qgemv_kernel with TT > 1) decodes each chunk again for every token, so its cost grows
// with T: on an H100 a whole 27B step took 6.2 / 19 / 31 / 77 ms at T = 1 / 4 / 7 / 16 (32K depth,
// bench/results/turn-profile-*-s38-call2.txt), which made short prompt tails and speculative verification cost
// nearly a full step per token.
//
// Work split: a warp owns 32 rows (two m16 tiles) over a range of K; the four lanes of a quad (c = lane % 4) own
// four consecutive 32-element chunks of their rows (16 bytes each, so a quad reads 64 contiguous bytes of a row).
// The mma's k index is a reduction index, so any one-to-one map from its 16 k slots to elements serves, provided A
// (weights) and B (x) use the same one: at k-step s (0..7) of a 128-element span, lane c's slots 2c, 2c+1 hold the
// half2 pair (word s / 2, pair 2 (s % 2)) of its own chunk and slots 2c+8, 2c+9 the pair after it, exactly the
// pairing dot_q4_half2 uses with x in perm8 order (word j of a chunk <-> x piece j, pair i <-> x half2 4j + i).
// A = (code - 8) * scale, formed in fp16 (exact code, one rounding for the scale's product); B = x of token
// g (+ 8 for the second n8 tile). With few row tiles (the 5120-row outputs) the K range is split over blockIdx.y
// and the partial sums go through a scratch buffer, summed in a fixed order by qgemv_mma_reduce_kernel (the same
// result on every run). (Session 41 tried the sums in the GEMV itself, by the last of a row block's splits to
// finish: slower at every width, bench/results/mma-shape-sweep-h100-s42-call1.json; removed in session 42.)
#pragma once

namespace mma_gemv {

constexpr int kWarpsPerBlock = 4;  // the most warps a block holds (set_qgemv_mma_block_warps: 1, 2 or 4; no block-level
                                   // sharing, so a warp's work does not depend on it)
constexpr int kSpan = 128;        // elements of K a quad covers per iteration (4 lanes x 32)
constexpr int kMaxSplits = 16;

// Pairs i and i + 1 (i = 0 or 2) of word j of a chunk as (code - offset) / D in fp16, exactly, D = 2^(BITS - 4)
// (1 at 4 bits): dot_q4_half2's decode at 4 bits, magic_words' (chunk_dot_fast's) at 5 / 6 / 8.
template <int BITS>
__device__ __forceinline__ void decode_pairs(const Chunk<BITS>& ch, int j, int i, __half2& p0, __half2& p1) {
  if constexpr (BITS == 4) {
    const __half2 bias_lo = __floats2half2_rn(1032.f, 1032.f);
    const __half2 sixteenth = __floats2half2_rn(1.f / 16.f, 1.f / 16.f);
    const __half2 bias_hi = __floats2half2_rn(-72.f, -72.f);
    const uint32_t w = (&ch.lo.x)[j];
    const uint32_t v = i == 0 ? w : w >> 8;
    uint32_t lo = and_or<0x000F000Fu, 0x64006400u>(v);
    uint32_t hi = and_or<0x00F000F0u, 0x64006400u>(v);
    p0 = __hsub2(*reinterpret_cast<__half2*>(&lo), bias_lo);
    p1 = __hfma2(*reinterpret_cast<__half2*>(&hi), sixteenth, bias_hi);
  } else {
    constexpr float D = float(1 << (BITS - 4));
    constexpr float off = float(1 << (BITS - 1));
    const __half2 mul_lo = __floats2half2_rn(1.f / D, 1.f / D);
    const __half2 add_lo = __floats2half2_rn(-(1024.f + off) / D, -(1024.f + off) / D);
    const __half2 mul_hi = __floats2half2_rn(1.f / (16.f * D), 1.f / (16.f * D));
    const __half2 add_hi = __floats2half2_rn(-(64.f + off) / D, -(64.f + off) / D);
    uint32_t b[4];
    magic_words<BITS>(ch, j, b);
    p0 = __hfma2(*reinterpret_cast<const __half2*>(&b[i]), mul_lo, add_lo);       // i even: always the low form
    p1 = BITS == 8 ? __hfma2(*reinterpret_cast<const __half2*>(&b[i + 1]), mul_lo, add_lo)
                   : __hfma2(*reinterpret_cast<const __half2*>(&b[i + 1]), mul_hi, add_hi);
  }
}

__device__ __forceinline__ uint32_t as_u32(__half2 h) { return *reinterpret_cast<uint32_t*>(&h); }

}  // namespace mma_gemv

// One output of a split GEMV: the splits' partials summed in split order, then the epilogue (t: token; o: output
// row, or for SwiGLU the pair of rows 2o, 2o + 1).
__device__ __forceinline__ void mma_reduce_output(const GemvArgs& a, const float* part, int splits, int t, int o) {
  auto sum = [&](int row) {
    float s = 0.f;
    for (int z = 0; z < splits; ++z) s += part[((size_t)z * a.T + t) * a.N + row];
    return s;
  };
  if (a.epi == GEMV_STORE) {
    a.out_f32[(size_t)t * a.ldo + o] = sum(o);
  } else if (a.epi == GEMV_ADD) {
    a.out_f32[(size_t)t * a.ldo + o] += sum(o);
  } else {
    a.out_h[(size_t)t * a.ldo + swiglu_pos(a, o)] = __float2half(silu(sum(2 * o)) * sum(2 * o + 1));
  }
}

namespace mma_gemv {

// One pass's weights for one lane: U spans of its 2 MT rows' chunks and their scales (x D).
template <int BITS, int U, int MT>
struct Pass {
  Chunk<BITS> wq[U][2 * MT];
  __half2 s2[U][2 * MT];   // scale x D: times (code - offset) / D gives the weight with one rounding
  bool valid[U];
};

// Issues the loads of the pass starting at span sb. FULL: every span of the pass lies before span1 and holds four
// chunks, so nothing is checked and the addresses are the row's base plus offsets that grow by a constant a span
// (the scale's group: (chunk * 32) >> gshift = span * (4 >> (gshift - 5)) + (c >> (gshift - 5)), gshift 5 or 6).
// Otherwise spans past span1 (or past K) load nothing (LF: chunk 0): a zero scale makes their weights 0.
template <int BITS, int U, bool LF, int MT, bool FULL>
__device__ __forceinline__ void load_pass(const GemvArgs& a, const int (&rows)[2 * MT], int sb, int span1, int c,
                                          Pass<BITS, U, MT>& P) {
  constexpr float D = float(1 << (BITS > 4 ? BITS - 4 : 0));
  const int nch = a.K >> 5;
  const int ngroups = a.K >> a.gshift;
#pragma unroll
  for (int u = 0; u < U; ++u) {
    const int ch = (sb + u) * 4 + c;  // this lane's chunk
    P.valid[u] = FULL || (sb + u < span1 && ch < nch);
#pragma unroll
    for (int m = 0; m < 2 * MT; ++m) {
      __half s;
      if constexpr (FULL) {
        const int gsh = a.gshift - 5;
        load_chunk<BITS>(a, rows[m], ch, P.wq[u][m]);
        s = a.scales[(size_t)rows[m] * ngroups + (sb + u) * (4 >> gsh) + (c >> gsh)];
      } else if constexpr (LF) {  // no branch: an invalid span loads chunk 0 (in bounds) and its zero scale drops it
        const int chl = P.valid[u] ? ch : 0;
        load_chunk<BITS>(a, rows[m], chl, P.wq[u][m]);
        const __half sl = a.scales[(size_t)rows[m] * ngroups + ((chl * 32) >> a.gshift)];
        s = P.valid[u] ? sl : __float2half(0.f);
      } else {
        if (P.valid[u]) {
          load_chunk<BITS>(a, rows[m], ch, P.wq[u][m]);
        } else {   // any finite decode: the zero scale makes the weight 0
          P.wq[u][m].lo = make_uint4(0, 0, 0, 0);
          P.wq[u][m].hi8 = make_uint4(0, 0, 0, 0);
          P.wq[u][m].high = make_uint2(0, 0);
        }
        s = P.valid[u] ? a.scales[(size_t)rows[m] * ngroups + ((ch * 32) >> a.gshift)] : __float2half(0.f);
      }
      // x D is exact (a power of two); at 4 bits D = 1 and the product would be one more instruction a scale
      P.s2[u][m] = BITS == 4 ? __halves2half2(s, s) : __hmul2(__halves2half2(s, s), __floats2half2_rn(D, D));
    }
  }
}

// The x of tokens g and g + 8 nt (nt < NT) for span sb + u: lane c's four 16-byte pieces of its chunk. FULL: from
// xrow (the tokens' rows, lane c's piece of span 0; tokens past T read token 0's x, whose products go to output
// columns that no epilogue stores), else zero past T or for an invalid span.
template <int NT, bool FULL>
__device__ __forceinline__ void load_x(const GemvArgs& a, const uint4* const (&xrow)[NT], bool valid, int sb, int u,
                                       int g, int c, uint4 (&xv)[NT][4]) {
#pragma unroll
  for (int nt = 0; nt < NT; ++nt) {
    if constexpr (FULL) {
      const uint4* xp = xrow[nt] + (sb + u) * 16;
#pragma unroll
      for (int p = 0; p < 4; ++p) xv[nt][p] = ld_after_wait(xp + p);
    } else {
      const int t = g + 8 * nt;
      const bool have = valid && t < a.T;
      const uint4* xp = reinterpret_cast<const uint4*>(a.x + (size_t)(have ? t : 0) * a.K) + ((sb + u) * 4 + c) * 4;
#pragma unroll
      for (int p = 0; p < 4; ++p) xv[nt][p] = have ? ld_after_wait(xp + p) : make_uint4(0, 0, 0, 0);
    }
  }
}

// Multiplies a loaded pass with the T tokens' x (read here, after the PDL wait) into acc. MT = 2 reads the x of all U
// spans first; MT = 1 reads each span's x just before its products (16 registers instead of 16 U: the 16-row form's
// point is fewer registers, so more warps an SM; x comes from L1).
template <int BITS, int NT, int U, int MT, bool FULL>
__device__ __forceinline__ void multiply_pass(const GemvArgs& a, const Pass<BITS, U, MT>& P,
                                              const uint4* const (&xrow)[NT], int sb, int g, int c,
                                              float (&acc)[MT][NT][4]) {
  constexpr int XU = MT == 2 ? U : 1;
  uint4 xv[XU][NT][4];
  if constexpr (MT == 2) {
#pragma unroll
    for (int u = 0; u < U; ++u) load_x<NT, FULL>(a, xrow, P.valid[u], sb, u, g, c, xv[u]);
  }
#pragma unroll
  for (int u = 0; u < U; ++u) {
    if constexpr (MT == 1) load_x<NT, FULL>(a, xrow, P.valid[u], sb, u, g, c, xv[0]);
    const int xu = MT == 2 ? u : 0;
#pragma unroll
    for (int s = 0; s < 8; ++s) {  // k-step s: word j = s / 2, pairs i and i + 1
      const int j = s >> 1, i = (s & 1) * 2;
      uint32_t afr[MT][4];
#pragma unroll
      for (int mt = 0; mt < MT; ++mt) {
        __half2 lo0, lo1, hi0, hi1;  // rows g + 16 mt (lo) and g + 8 + 16 mt (hi), pairs i and i + 1
        decode_pairs<BITS>(P.wq[u][2 * mt], j, i, lo0, lo1);
        decode_pairs<BITS>(P.wq[u][2 * mt + 1], j, i, hi0, hi1);
        afr[mt][0] = as_u32(__hmul2(lo0, P.s2[u][2 * mt]));
        afr[mt][1] = as_u32(__hmul2(hi0, P.s2[u][2 * mt + 1]));
        afr[mt][2] = as_u32(__hmul2(lo1, P.s2[u][2 * mt]));
        afr[mt][3] = as_u32(__hmul2(hi1, P.s2[u][2 * mt + 1]));
      }
#pragma unroll
      for (int nt = 0; nt < NT; ++nt) {
        const uint32_t* x32 = reinterpret_cast<const uint32_t*>(&xv[xu][nt][j]);
        const uint32_t b0 = x32[i], b1 = x32[i + 1];
#pragma unroll
        for (int mt = 0; mt < MT; ++mt) mma16816<true>(acc[mt][nt], afr[mt], b0, b1);
      }
    }
  }
}

// One pass: its weights loaded (all before the first product with LF), the PDL wait after the first pass's loads are
// issued (x is the previous kernel's output), then the products.
template <int BITS, int NT, int U, bool LF, int MT, bool FULL>
__device__ __forceinline__ void run_pass(const GemvArgs& a, const int (&rows)[2 * MT], const uint4* const (&xrow)[NT],
                                         int sb, int span0, int span1, int g, int c, float (&acc)[MT][NT][4]) {
  Pass<BITS, U, MT> cur;
  load_pass<BITS, U, LF, MT, FULL>(a, rows, sb, span1, c, cur);
  if constexpr (LF) {
    // Every load of the pass before its first product: a value that depends on each chunk, + 0.f at run time (T
    // >= 1, so T >> 31 is 0), added to the first accumulator. Without it ptxas issues spans 2 and 3 of a pass only
    // after spans 0 and 1 are multiplied (SASS, session 44), so a warp waits on two or three round trips a pass,
    // with half its bytes in flight.
    uint32_t all = 0;
#pragma unroll
    for (int u = 0; u < U; ++u)
#pragma unroll
      for (int m = 0; m < 2 * MT; ++m) {
        all ^= cur.wq[u][m].lo.x;
        if constexpr (BITS == 8) all ^= cur.wq[u][m].hi8.x;
        if constexpr (BITS == 5 || BITS == 6) all ^= cur.wq[u][m].high.x;
      }
    acc[0][0][0] += __int_as_float(all & (uint32_t)(a.T >> 31));
  }
  if (sb == span0) {
    pdl_wait();
    pdl_trigger();
  }
  multiply_pass<BITS, NT, U, MT, FULL>(a, cur, xrow, sb, g, c, acc);
}

}  // namespace mma_gemv

// BITS 4 / 5 / 6 / 8; NT n8 tiles of tokens (1: T <= 8, 2: T <= 16); U spans loaded together (2 or 4; 1 or 2 at 8
// bits, whose chunks are twice as large). part == nullptr: the epilogue is applied here (one split); else this
// split's sums go to part[split][t][row] (fp32) and qgemv_mma_reduce_kernel finishes. LF (set_qgemv_mma_loads_first):
// a pass's weight loads all issued before its first product (see the loop). MT: m16 tiles a warp, 2 (32 rows) or 1
// (16 rows, set_qgemv_mma_shape's rows_per_warp; the default for T <= 6 since session 46): half the weights and
// accumulators a warp, x read a span at a time, so that the registers (96) allow 5 blocks an SM (__launch_bounds__)
// and gate_up's 2176 row tiles fit one wave at 16 warps an SM instead of 8 with 32 rows. Why: Nsight Compute on
// gate_up at T = 4 (ncu-34816-T4-loads-first-h100-s45-call1.txt) found 8.2 warps an SM issuing once every 6.7 cycles
// each, 58 % of the time waiting on their loads: too few warps to cover a load round trip with the dequantization of
// the pass before. With 16 rows at 16 warps an SM the kernel takes 47.3 us against 53.6 (DRAM 62 % against 55 %,
// ncu-34816-T4-rows16-w16-h100-s46.txt).
template <int BITS, int NT, int U, bool LF, int MT>
__global__ void __launch_bounds__(mma_gemv::kWarpsPerBlock * 32, MT == 1 ? 5 : 0)
    qgemv_mma_kernel(GemvArgs a, float* part, int spans_per_split, bool unchecked_passes) {
  using namespace mma_gemv;
  const int lane = threadIdx.x & 31, g = lane >> 2, c = lane & 3;
  const int row0 = (blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5)) * 16 * MT;
  const int nspans = (a.K + kSpan - 1) / kSpan;
  const int span0 = blockIdx.y * spans_per_split;
  const int span1 = min(nspans, span0 + spans_per_split);
  const bool has_rows = row0 < a.N;
  // rows g, g + 8 (, g + 16, g + 24) of the warp's tile (m tile mt: rows g + 16 mt and g + 8 + 16 mt)
  int rows[2 * MT];
#pragma unroll
  for (int m = 0; m < 2 * MT; ++m) rows[m] = min(row0 + g + 8 * m, a.N - 1);
  float acc[MT][NT][4];
#pragma unroll
  for (int mt = 0; mt < MT; ++mt)
#pragma unroll
    for (int nt = 0; nt < NT; ++nt)
#pragma unroll
      for (int e = 0; e < 4; ++e) acc[mt][nt][e] = 0.f;
  // Full passes (every span holds four chunks before span1) take no checks; the passes after them (the last one may
  // be partial; with unchecked_passes off, every pass: set_qgemv_mma_unchecked_passes) take them. A warp without rows
  // runs no pass (its outputs are not stored). Why: the checks (each span's and row's validity, the selects and zeroed
  // registers they need, the scale index's shift by gshift, x's token row recomputed per span) were 11-30 % of a 4-bit
  // pass's instructions (bench/results/sass-loops-mma-s47.txt), and by session 45's count a 4-token pass is bound by
  // its instruction issue (bench/NOTES.md).
  const int span_end = has_rows ? span1 : span0;
  const int full_end = unchecked_passes ? min(span_end, (a.K >> 5) >> 2) : span0;
  const uint4* xrow[NT];  // lane c's piece of span 0 in the x of tokens g and g + 8 nt (token 0's past T)
#pragma unroll
  for (int nt = 0; nt < NT; ++nt)
    xrow[nt] = reinterpret_cast<const uint4*>(a.x + (size_t)(g + 8 * nt < a.T ? g + 8 * nt : 0) * a.K) + c * 4;
  int sb = span0;
  for (; sb + U <= full_end; sb += U)
    mma_gemv::run_pass<BITS, NT, U, LF, MT, true>(a, rows, xrow, sb, span0, span_end, g, c, acc);
  for (; sb < span_end; sb += U)
    mma_gemv::run_pass<BITS, NT, U, LF, MT, false>(a, rows, xrow, sb, span0, span_end, g, c, acc);
  if (span_end <= span0) pdl_wait();  // a warp without work still waits (pdl.cuh: completion stays transitive)
  // C fragment: acc[mt][nt][e] is row g + 16 mt + 8 (e >> 1), token 2c + (e & 1) + 8 nt
#pragma unroll
  for (int mt = 0; mt < MT; ++mt)
#pragma unroll
    for (int nt = 0; nt < NT; ++nt)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int row = row0 + g + 16 * mt + 8 * (e >> 1), t = 2 * c + (e & 1) + 8 * nt;
        // SwiGLU: rows 2p (gate) and 2p + 1 (up) sit in quads g and g + 1 (same c, e): lane + 4 holds the up
        const float up = __shfl_down_sync(0xffffffffu, acc[mt][nt][e], 4);
        if (row >= a.N || t >= a.T) continue;
        const float v = acc[mt][nt][e];
        if (part != nullptr) {    // one split of several: qgemv_mma_reduce_kernel applies the epilogue
          part[((size_t)blockIdx.y * a.T + t) * a.N + row] = v;
        } else if (a.epi == GEMV_STORE) {
          a.out_f32[(size_t)t * a.ldo + row] = v;
        } else if (a.epi == GEMV_ADD) {
          a.out_f32[(size_t)t * a.ldo + row] += v;
        } else if ((g & 1) == 0) {
          a.out_h[(size_t)t * a.ldo + swiglu_pos(a, row >> 1)] = __float2half(silu(v) * up);
        }
      }
}
