// Causal gated attention for prefill chunks (attn_prefill.h), FlashAttention-2 style, head_dim 256.
//
//  attn_prefill_prep : attn_prep for any T (positions from a device pos3 array, kv_start on the host).
//                      K/V are appended to the cache with exactly attn_prep's arithmetic (same code), so
//                      decode reads what prefill wrote. Queries are written as 16-bit values scaled by
//                      1/sqrt(256): bf16 for a bf16 cache, fp16 for an int8 or int4 cache ([T, n_heads, 256]).
//  attn_prefill      : one block (4 warps) per (64-row query tile, kv head). Rows of the tile are
//                      (token, head) pairs r = t * G + g of the G query heads sharing the kv head, so each
//                      K/V tile in shared memory serves all of them. Warp w owns rows 16w .. 16w + 15;
//                      scores S (16 x 64 keys, 32 fp32 registers) and the output O (16 x 256, 128 fp32
//                      registers) live in registers; online softmax (base 2) per row.
//
// Tiles: 64 keys of 256 dims. Shared memory (rows of 512 B, 16-byte chunks XOR-swizzled by row & 7 so
// ldmatrix of 8 rows at one chunk column hits 8 distinct bank groups):
//   bf16 cache : Q 32 KB | K tile 32 KB | V tile 32 KB                                     = 96 KB
//   int8 cache : Q 32 KB | X tile 32 KB (fp16, K then V) | raw K 16 KB | raw V 16 KB | scales 1 KB = 97 KB
// Pipeline (cp.async): bf16 as FA2: V_j is fetched during S = Q K_j^T, K_{j+1} during softmax and P V_j.
// int8: raw K_{j+1} / V_{j+1} are fetched a whole tile ahead into their own buffers; each raw tile is
// dequantized (code * fp16 scale, rounded to fp16: the decode kernel's dequantization) into X right
// before its use, so X holds K_j during the scores and V_j during the values.
//
// Precision: the bf16 cache runs bf16 mma (K, V exact; q and P rounded to bf16, 8 bits of mantissa);
// the int8 cache runs fp16 mma (q, P and the dequantized K/V rounded to fp16). fp32 accumulation and
// fp32 softmax statistics throughout.
//
// Work: keys [0, kv_start + t_last] for the tile's last token; key tiles ascend from 0, tiles past
// kv_start + t_first (the tile's first token) are masked per row, the others run without masks. Blocks
// are numbered longest-first (the last query tiles walk the most keys).
//
// The above is variant 1 (the first kernel). Variant 0, the default, runs the pair-split kernel
// (attn_prefill_v2_kernel) in one of two configurations (variant 3 large, variant 2 small):
//
// Why. With mma.sync and head_dim 256 the first kernel is bound by shared-memory bandwidth, not by the
// tensor cores: per warp and 64-key tile it issues 256 mma (4 KFLOP each) but reads 144 ldmatrix.x4
// (Q 16, K 64, V 64: 72 KB) plus its share of the cp.async writes (16 KB); at 128 B/clock per SM that is
// ~2.7 clocks of shared memory per mma, where the mma pipe needs ~1. The int8 path adds a dequant pass
// (raw read, fp16 write) and four block barriers per tile: 106 KB per warp-tile, hence 218 vs 300 TFLOP/s.
// Measured throughput times bytes per warp-tile is nearly constant (300 x 90 ~ 218 x 106), so the plan
// is to cut bytes per mma and barriers:
//  * Warp pairs (large configuration). A pair owns 32 query rows. Each warp computes S and the softmax
//    of its own 16 rows over the whole tile (no cross-warp max), then the pair swaps P fragments and
//    rescale factors through shared memory (2 KB per warp, conflict-free, one 64-thread named barrier),
//    and each warp accumulates O for all 32 rows over half of the 256 output dims. O stays 128 fp32
//    registers per thread, but each V fragment now feeds 4 mma instead of 2: V reads halve. Per warp and
//    tile: Q 8 + K 32 + V 16 + exchange 4 = 60 KB of reads (was 72). Splitting the keys instead (each warp
//    16 of 32 keys for all 32 rows) would save 8 KB more but needs a max exchange and a second barrier.
//  * 128 rows per block (8 warps): K/V tiles are loaded (and int8 dequantized) once for twice the rows,
//    halving cp.async/dequant shared-memory writes and L2 traffic per FLOP (64 rows x 64 keys of bf16 K/V
//    per 2.1 MFLOP moved ~4.6 TB/s of L2 reads at 300 TFLOP/s). With G = 6, 128 rows are ~21 tokens of 6 heads.
//  * int8: no raw tile in shared memory. At the top of tile j each thread issues its global loads of
//    tile j + 1's codes (8 x 8 codes of K and of V, scales by one 16-bit load each, spread by shuffles)
//    into 34 registers; after the S mma of tile j (which hides the latency) it converts them with the
//    decode kernel's dequantization (0x64 magic, code * fp16 scale rounded to fp16: bit-identical values
//    to the first kernel's pass) and stores fp16 into the second buffer. The raw round trip (cp.async
//    write + read, 64 KB per tile) disappears, the conversion overlaps other warps' mma, and int8 costs
//    the same shared-memory bytes as bf16 (the fp16 stores equal the bf16 cp.async writes).
//    Converting B fragments in registers right before each mma was weighed and rejected: every warp
//    would redo the conversion of the whole tile (8x the ALU work of a shared conversion, ~7 instructions
//    per mma against an issue budget of ~4-6), and the group-64 scale varies along k per key, so it
//    cannot be hoisted out of the mma; int8 mma would need Q and P quantized (accuracy).
//  * Double-buffered fp16 K|V tiles, one __syncthreads per tile: the barrier at the top of tile j both
//    publishes buffer j % 2 and frees buffer (j + 1) % 2, into which tile j + 1 is loaded (bf16 cp.async)
//    or stored (int8) during tile j, a whole tile ahead. Triple buffering does not fit.
//  * Rescale of O skipped when no row of the warp raised its maximum (warp vote; alpha is exactly 1 then
//    because the maxima are scaled by log2(e) with unfused multiplies): 128 FMUL per thread per tile saved
//    on most tiles. exp2 with the log2(e) scale folded into one FFMA per score, as before.
//  * Not done: Q in registers (64 more registers over O's 128), skipping masked diagonal tiles per warp
//    (at most 2 of the ~n_keys/64 tiles of a block touch the diagonal), Hopper-only instructions.
// Configurations (both mma.sync m16n8k16, same code, template parameters):
//   large (variant 3): 8 warps in 4 pairs, 128 rows, 64-key tiles: Q 64 KB + 2 x (K 32 + V 32) KB + P,
//                      alpha, l exchange 20 KB = 212 KB; used by variant 0 where the opt-in limit allows
//                      (H100/H200: 227 KB), 1 block (8 warps) per SM.
//   small (variant 2): 4 single warps (no exchange), 64 rows, 32-key tiles: Q 32 KB + 2 x (16 + 16) KB =
//                      96 KB, for sm_86/89/120 (99 KB per block); same per-warp S/V traffic as the first
//                      kernel but the int8 raw round trip and three of four barriers per tile are gone.
// Both keep the first kernel's numerics: same mma types, fp32 softmax, same dequantized values; results
// differ from it only by the tile size (32 keys for small) moving the online-softmax rescale points.
//
// int4 cache (ops.h: two codes per byte, code + 8, even dim in the low nibble; the int8 scales): variants
// 2 and 3 only (the first kernel refuses it). Exactly the int8 scheme with half the bytes per register:
// a thread's 8 codes of a tile row are one 32-bit load; they become fp16 with the 0x6400 magic number
// ((w >> 4j) & 0x000F000F | 0x64006400 is the half2 (1024 + n_j, 1024 + n_{j+4}), exact), minus 1032
// (exact: the code), times the fp16 scale (the one rounding), then PRMT back into dim order for the
// same 16-byte fp16 store. The tiles, the mma and everything after the store are the int8 path's.
#include "attn_prefill.h"

#include <stdexcept>
#include <string>
#include <type_traits>

#include "attn_prep.cuh"
#include "common.cuh"
#include "ptx.cuh"

namespace monorail {
namespace {

constexpr int kHd = kPrepDim;
constexpr int kBM = 64;        // query rows ((token, head) pairs) per block
constexpr int kBN = 64;        // keys per tile
constexpr int kThreads = 128;  // 4 warps x 16 rows
constexpr int kRowBytes = kHd * 2;
constexpr int kTileBytes = kBN * kRowBytes;         // 32768
constexpr int kQBytes = kBM * kRowBytes;            // 32768
constexpr int kRawBytes = kBN * kHd;                // 16384 (int8 tile)
constexpr int kScaleBytes = kBN * (kHd / 64) * 2;   // 512
constexpr int kSmemBf16 = kQBytes + 2 * kTileBytes;                                  // 98304
constexpr int kSmemInt8 = kQBytes + kTileBytes + 2 * kRawBytes + 2 * kScaleBytes;  // 99328
static_assert(kSmemInt8 <= 99 * 1024 && kSmemBf16 <= 99 * 1024, "shared memory over 99 KB");
constexpr float kLog2e = 1.4426950408889634f;

// ---------------------------------------------------------------------------------------------
// prep: the decode prep's code (attn_prep.cuh), positions from pos3 [T, 3] and queries stored 16-bit

struct PrepArgs {
  const float* qkv; int ldp; AttnDims d;
  const float* q_norm; const float* k_norm; const float* inv_freq; int sec[3];
  const int32_t* pos3; int kv_start; void* q_out; char* k_cache; char* v_cache; char* k_scales; char* v_scales;
};

__global__ void __launch_bounds__(kHd) attn_prefill_prep_kernel(PrepArgs p) {
  __shared__ float xs[kHd], red[32], gmax[8];
  const int t = blockIdx.x, i = threadIdx.x;
  const PrepConsts c = prep_consts(p.d, blockIdx.y, i, p.q_norm, p.k_norm, p.inv_freq, p.sec, p.pos3 + (size_t)t * 3);
  const int kind = c.kind, head = c.head;
  const float x = prep_norm_rope(p.qkv + (size_t)t * p.ldp, p.d, i, c, xs, red);
  if (kind == 0) {  // block-uniform: the whole block is one query head
    const float qv = x * rsqrtf((float)kHd);
    const size_t qi = ((size_t)t * p.d.n_heads + head) * kHd + i;
    if (p.d.kv_fmt != kKvBf16) reinterpret_cast<__half*>(p.q_out)[qi] = __float2half_rn(qv);
    else reinterpret_cast<__nv_bfloat16*>(p.q_out)[qi] = __float2bfloat16(qv);
    return;
  }
  prep_append_kv(x, i, kind, head, (size_t)p.kv_start + t, p.d, p.k_cache, p.v_cache, p.k_scales, p.v_scales, gmax);
}

// ---------------------------------------------------------------------------------------------
// device helpers

// byte offset of 16-byte chunk `chunk` (0..31) of row `row` in a swizzled [rows][256] 16-bit tile
__device__ inline uint32_t swz(int row, int chunk) { return (uint32_t)(row * kRowBytes + ((chunk ^ (row & 7)) << 4)); }

// cp.async, ldmatrix and mma16816 (with its fragment layout): ptx.cuh

// ldmatrix lane addressing of swizzled Q (A operand), K (B) and V (B^T) tiles whose first rows sit at the
// shared addresses q0 (this warp's 16 rows), k0 and v0. Every tile row a lane addresses is = lrow (mod 8), so
// chunk 2 kk + hi sits at physical chunk (2 kk + hi) ^ lrow = 8 (kk / 4) + ((2 (kk % 4) + hi) ^ lrow): four
// per-lane offsets per operand plus an immediate of 128 B * (kk / 4).
__device__ inline void ldsm_offsets(uint32_t q0, uint32_t k0, uint32_t v0, int lane, uint32_t (&q_off)[4],
                                    uint32_t (&k_off)[4], uint32_t (&v_off)[4]) {
  const int lrow = lane & 7;
  const uint32_t q_row = q0 + (lrow + ((lane >> 3) & 1) * 8) * kRowBytes;  // A: a0..a3
  const uint32_t k_row = k0 + (lrow + (lane >> 4) * 8) * kRowBytes;         // B: b0 b1 (n 0-7), (n 8-15)
  const uint32_t v_row = v0 + (lrow + ((lane >> 3) & 1) * 8) * kRowBytes;  // B^T: (d 0-7), (d 8-15)
  const int q_hi = lane >> 4, k_hi = (lane >> 3) & 1, v_hi = lane >> 4;
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    q_off[i] = q_row + (((2 * i + q_hi) ^ lrow) << 4);
    k_off[i] = k_row + (((2 * i + k_hi) ^ lrow) << 4);
    v_off[i] = v_row + (((2 * i + v_hi) ^ lrow) << 4);
  }
}

template <bool F16>
__device__ inline uint32_t pack2(float lo, float hi) {
  if constexpr (F16) {
    __half2 h = __floats2half2_rn(lo, hi);
    return *reinterpret_cast<uint32_t*>(&h);
  } else {
    __nv_bfloat162 h = __floats2bfloat162_rn(lo, hi);
    return *reinterpret_cast<uint32_t*>(&h);
  }
}
__device__ inline float ex2(float x) {  // 2^x; -inf -> +0
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
  return y;
}

// The online-softmax numerators of a tile: s <- 2^(s log2 e - mu) in place, each row's sum added to rs (row 0:
// accumulators 0, 1 of every n-tile; row 1: 2, 3). mu is the row maximum already scaled by log2 e.
template <int NT>
__device__ inline void exp_tile_rows(float (&s)[NT][4], const float (&mu)[2], float (&rs)[2]) {
#pragma unroll
  for (int nt = 0; nt < NT; ++nt)
#pragma unroll
    for (int c = 0; c < 4; ++c) {
      const float p = ex2(fmaf(s[nt][c], kLog2e, -mu[c >> 1]));
      s[nt][c] = p;
      rs[c >> 1] += p;
    }
}
// two int8 (bytes 2*sel, 2*sel+1 of w) times a scale -> half2 (attention.cu's decode dequantization):
// 0x64 | (c + 128) is 1024 + c + 128 in fp16, exact; then c * scale rounded once to fp16.
__device__ inline uint32_t i8x2_to_h2(uint32_t w, int sel, __half2 scale) {
  const uint32_t x = w ^ 0x80808080u;
  const uint32_t h = __byte_perm(x, 0x64646464u, sel ? 0x4342 : 0x4140);
  __half2 v = __hsub2(*reinterpret_cast<const __half2*>(&h), __floats2half2_rn(1152.f, 1152.f));
  v = __hmul2(v, scale);
  return *reinterpret_cast<uint32_t*>(&v);
}

struct FwdArgs {
  const char* q;  // 16-bit [T, nh, 256]
  int T, kv_start, nh, nkv, G;
  const char* kc; const char* vc; const char* ks; const char* vs;
  const float* gate; int ld_gate; __half* out;
};

// Q rows r0 .. r0 + 63 (row r = token r / G, head kvh * G + r % G); rows past T * G are zero.
__device__ inline void load_q(const FwdArgs& a, int r0, int kvh, uint32_t sq, int tid) {
  const int R = a.T * a.G;
#pragma unroll 4
  for (int i = 0; i < kBM * 32 / kThreads; ++i) {
    const int e = i * kThreads + tid, row = e >> 5, c = e & 31;
    const int r = r0 + row;
    const bool ok = r < R;
    const int rr = ok ? r : 0;
    const int t = rr / a.G, h = kvh * a.G + rr % a.G;
    cp_async16(sq + swz(row, c), a.q + (((size_t)t * a.nh + h) * kHd + c * 8) * 2, ok);
  }
}
// bf16 K or V rows p0 .. p0 + 63 (zero past n_keys): one warp per 512-byte row per step
__device__ inline void load_tile_bf16(const char* cache, const FwdArgs& a, int kvh, int p0, int n_keys, uint32_t dst,
                                      int tid) {
#pragma unroll 4
  for (int i = 0; i < kBN * 32 / kThreads; ++i) {
    const int e = i * kThreads + tid, row = e >> 5, c = e & 31;
    const int p = p0 + row;
    const bool ok = p < n_keys;
    cp_async16(dst + swz(row, c), cache + (((size_t)(ok ? p : 0) * a.nkv + kvh) * kHd + c * 8) * 2, ok);
  }
}
// int8 K or V rows p0 .. p0 + 63 as raw codes [64][256] plus their 4 fp16 group scales [64][4]
__device__ inline void load_tile_int8(const char* cache, const char* scales, const FwdArgs& a, int kvh, int p0,
                                      int n_keys, uint32_t raw, uint32_t sc, int tid) {
#pragma unroll 2
  for (int i = 0; i < kBN * 16 / kThreads; ++i) {
    const int e = i * kThreads + tid, row = e >> 4, c = e & 15;
    const int p = p0 + row;
    const bool ok = p < n_keys;
    cp_async16(raw + row * kHd + c * 16, cache + ((size_t)(ok ? p : 0) * a.nkv + kvh) * kHd + c * 16, ok);
  }
  if (tid < kBN) {
    const int p = p0 + tid;
    const bool ok = p < n_keys;
    cp_async8(sc + tid * 8, scales + ((size_t)(ok ? p : 0) * a.nkv + kvh) * (kHd / 64) * 2, ok);
  }
}
// raw int8 tile -> fp16 swizzled tile; a warp converts one 256-code row per step (8 codes per lane)
__device__ inline void dequant_tile(const char* raw, const char* sc, char* dst, int tid) {
  const __half* s = reinterpret_cast<const __half*>(sc);
#pragma unroll 2
  for (int i = 0; i < kBN * 32 / kThreads; ++i) {
    const int u = i * kThreads + tid, row = u >> 5, c = u & 31;
    const uint2 w = *reinterpret_cast<const uint2*>(raw + row * kHd + c * 8);
    const __half2 s2 = __half2half2(s[row * 4 + (c >> 3)]);
    uint4 h;
    h.x = i8x2_to_h2(w.x, 0, s2);
    h.y = i8x2_to_h2(w.x, 1, s2);
    h.z = i8x2_to_h2(w.y, 0, s2);
    h.w = i8x2_to_h2(w.y, 1, s2);
    *reinterpret_cast<uint4*>(dst + swz(row, c)) = h;
  }
}

template <bool INT8>
__global__ void __launch_bounds__(kThreads, 2) attn_prefill_kernel(FwdArgs a) {
  constexpr bool F16 = INT8;  // int8 cache: fp16 mma; bf16 cache: bf16 mma
  extern __shared__ __align__(128) char smem[];
  char* sQ = smem;
  char* sK = smem + kQBytes;                            // bf16: K tile; int8: the dequantized tile X
  char* sV = INT8 ? sK : sK + kTileBytes;               // bf16: V tile; int8: X again
  char* sRK = smem + kQBytes + kTileBytes;              // int8 only: raw K, raw V, K scales, V scales
  char* sRV = sRK + kRawBytes;
  char* sSK = sRV + kRawBytes;
  char* sSV = sSK + kScaleBytes;

  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
  const int g = lane >> 2, tig = lane & 3;
  const int G = a.G, R = a.T * G;
  const int n_rt = (R + kBM - 1) / kBM;
  const int kvh = blockIdx.x % a.nkv;
  const int rt = n_rt - 1 - (int)(blockIdx.x / a.nkv);  // longest first
  const int r0 = rt * kBM;
  const int t_first = r0 / G;
  const int t_last = min(a.T - 1, (r0 + kBM - 1) / G);
  const int n_keys = a.kv_start + t_last + 1;
  const int n_tiles = (n_keys + kBN - 1) / kBN;
  const int full_tiles = (a.kv_start + t_first + 1) / kBN;  // tiles j < full_tiles need no mask

  int lim[2];  // last key of this thread's rows g and g + 8 (padding rows: the last token)
#pragma unroll
  for (int i = 0; i < 2; ++i) lim[i] = a.kv_start + min((r0 + warp * 16 + g + 8 * i) / G, a.T - 1);

  // prologue: bf16 [Q + K_0]; int8 [Q + K_0 raw], [V_0 raw]
  load_q(a, r0, kvh, smem_u32(sQ), tid);
  if constexpr (INT8) {
    load_tile_int8(a.kc, a.ks, a, kvh, 0, n_keys, smem_u32(sRK), smem_u32(sSK), tid);
    cp_commit();
    load_tile_int8(a.vc, a.vs, a, kvh, 0, n_keys, smem_u32(sRV), smem_u32(sSV), tid);
    cp_commit();
  } else {
    load_tile_bf16(a.kc, a, kvh, 0, n_keys, smem_u32(sK), tid);
    cp_commit();
  }

  float o[32][4];
#pragma unroll
  for (int nt = 0; nt < 32; ++nt) o[nt][0] = o[nt][1] = o[nt][2] = o[nt][3] = 0.f;
  float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.f, 0.f};

  uint32_t q_off[4], k_off[4], v_off[4];
  ldsm_offsets(smem_u32(sQ) + warp * 16 * kRowBytes, smem_u32(sK), smem_u32(sV), lane, q_off, k_off, v_off);

  for (int j = 0; j < n_tiles; ++j) {
    const bool more = j + 1 < n_tiles;
    // ---- K_j in shared memory; start the next transfer
    if constexpr (INT8) {
      cp_wait<1>();  // pending: K_j, V_j
      __syncthreads();  // K_j visible to all; every warp is done with X (V_{j-1})
      dequant_tile(sRK, sSK, sK, tid);
      __syncthreads();  // X = K_j; raw K free
      if (more) load_tile_int8(a.kc, a.ks, a, kvh, (j + 1) * kBN, n_keys, smem_u32(sRK), smem_u32(sSK), tid);
      cp_commit();
    } else {
      cp_wait<0>();
      __syncthreads();  // K_j visible; every warp is done with V_{j-1}
      load_tile_bf16(a.vc, a, kvh, j * kBN, n_keys, smem_u32(sV), tid);
      cp_commit();
    }
    // ---- S = Q K_j^T (16 rows x 64 keys per warp)
    float s[8][4];
#pragma unroll
    for (int nt = 0; nt < 8; ++nt) s[nt][0] = s[nt][1] = s[nt][2] = s[nt][3] = 0.f;
#pragma unroll
    for (int kk = 0; kk < 16; ++kk) {
      uint32_t qa[4];
      ldsm_x4(qa, q_off[kk & 3] + (kk >> 2) * 128);
#pragma unroll
      for (int np = 0; np < 4; ++np) {
        uint32_t kb[4];
        ldsm_x4(kb, k_off[kk & 3] + (kk >> 2) * 128 + np * 16 * kRowBytes);
        mma16816<F16>(s[2 * np], qa, kb[0], kb[1]);
        mma16816<F16>(s[2 * np + 1], qa, kb[2], kb[3]);
      }
    }
    // ---- V_j in shared memory; start the next transfer
    if constexpr (INT8) {
      cp_wait<1>();  // pending: V_j, K_{j+1}
      __syncthreads();  // V_j raw visible; every warp is done with X (K_j)
      dequant_tile(sRV, sSV, sV, tid);
      __syncthreads();  // X = V_j; raw V free
      if (more) load_tile_int8(a.vc, a.vs, a, kvh, (j + 1) * kBN, n_keys, smem_u32(sRV), smem_u32(sSV), tid);
      cp_commit();
    } else {
      cp_wait<0>();
      __syncthreads();  // V_j visible; every warp is done with K_j
      if (more) load_tile_bf16(a.kc, a, kvh, (j + 1) * kBN, n_keys, smem_u32(sK), tid);
      cp_commit();
    }
    // ---- causal mask (diagonal tiles only; also covers keys past n_keys, which are zero-filled)
    if (j >= full_tiles) {
#pragma unroll
      for (int nt = 0; nt < 8; ++nt)
#pragma unroll
        for (int c = 0; c < 4; ++c) {
          const int key = j * kBN + nt * 8 + 2 * tig + (c & 1);
          if (key > lim[c >> 1]) s[nt][c] = -INFINITY;
        }
    }
    // ---- online softmax (rows g: c = 0,1; rows g + 8: c = 2,3); a quad shares a row
    float alpha[2], mu[2];
#pragma unroll
    for (int i = 0; i < 2; ++i) {
      float mx = m[i];
#pragma unroll
      for (int nt = 0; nt < 8; ++nt) mx = fmaxf(mx, fmaxf(s[nt][2 * i], s[nt][2 * i + 1]));
      mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
      mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
      mu[i] = mx == -INFINITY ? 0.f : mx * kLog2e;  // a row with no visible key yet: keep everything 0
      alpha[i] = ex2(m[i] * kLog2e - mu[i]);        // m = -inf -> 0
      m[i] = mx;
    }
    float rs[2] = {0.f, 0.f};
    exp_tile_rows(s, mu, rs);
#pragma unroll
    for (int i = 0; i < 2; ++i) l[i] = l[i] * alpha[i] + rs[i];  // per-thread partial sums (quad-reduced at the end)
#pragma unroll
    for (int nt = 0; nt < 32; ++nt) {
      o[nt][0] *= alpha[0]; o[nt][1] *= alpha[0];
      o[nt][2] *= alpha[1]; o[nt][3] *= alpha[1];
    }
    // ---- O += P V_j: the S accumulators of n-tiles 2kk, 2kk+1 are the A fragment of key step kk
#pragma unroll
    for (int kk = 0; kk < 4; ++kk) {
      const uint32_t pa[4] = {pack2<F16>(s[2 * kk][0], s[2 * kk][1]), pack2<F16>(s[2 * kk][2], s[2 * kk][3]),
                              pack2<F16>(s[2 * kk + 1][0], s[2 * kk + 1][1]),
                              pack2<F16>(s[2 * kk + 1][2], s[2 * kk + 1][3])};
#pragma unroll
      for (int dp = 0; dp < 16; ++dp) {
        uint32_t vb[4];
        ldsm_x4_t(vb, v_off[dp & 3] + (dp >> 2) * 128 + kk * 16 * kRowBytes);
        mma16816<F16>(o[2 * dp], pa, vb[0], vb[1]);
        mma16816<F16>(o[2 * dp + 1], pa, vb[2], vb[3]);
      }
    }
  }

  // ---- epilogue: normalise, gate, fp16 perm8 store
#pragma unroll
  for (int i = 0; i < 2; ++i) {
    float lt = l[i];
    lt += __shfl_xor_sync(0xffffffffu, lt, 1);
    lt += __shfl_xor_sync(0xffffffffu, lt, 2);
    const float inv = 1.f / lt;  // > 0: key 0 is visible to every row
    const int r = r0 + warp * 16 + g + 8 * i;
    if (r < R) {
      const int t = r / G, h = kvh * G + r % G;
      const float* gp = a.gate + (size_t)t * a.ld_gate + (size_t)h * 2 * kHd;
      __half* op = a.out + (size_t)t * a.nh * kHd + (size_t)h * kHd;  // perm8 keeps groups of 8 in place
#pragma unroll
      for (int nt = 0; nt < 32; ++nt)
#pragma unroll
        for (int c = 0; c < 2; ++c) {
          const int dd = nt * 8 + 2 * tig + c;
          op[perm8(dd)] = __float2half(o[nt][2 * i + c] * inv * sigmoidf_(gp[dd]));
        }
    }
  }
}

// =============================================================================================
// Variant 0 (default): pair-split kernel (see the file header, "Variant 0").

template <int NW, int WPG, int BN>
struct V2Cfg {
  static constexpr int kThreads = NW * 32;
  static constexpr int kRows = NW * 16;         // query rows per block: 16 per warp (its softmax rows)
  static constexpr int kOD = kHd / WPG;         // output dims a warp accumulates
  static constexpr int kONT = kOD / 8;          // O n-tiles per m-tile
  static constexpr int kSNT = BN / 8;           // S n-tiles (8 keys each)
  static constexpr int kKS = BN / 16;           // P V k-steps (16 keys each)
  static constexpr int kQBytes = kRows * kRowBytes;
  static constexpr int kTile = BN * kRowBytes;  // one 16-bit K or V tile
  static constexpr int kXBytes = 2 * kTile;     // one buffer: K tile then V tile
  static constexpr int kPBytes = WPG > 1 ? NW * 32 * kKS * 16 : 0;  // P fragments: a uint4 per lane per k-step
  static constexpr int kABytes = WPG > 1 ? NW * 32 * 8 : 0;         // rescale factors: a float2 per lane
  static constexpr int kLBytes = WPG > 1 ? NW * 32 * 8 : 0;         // final row sums: a float2 per lane
  static constexpr int kSmem = kQBytes + 2 * kXBytes + kPBytes + kABytes + kLBytes;
  static constexpr int kChunks = BN * 32 / kThreads;  // per thread and K (or V) tile: 16-byte / 8-code chunks
  static_assert(WPG == 1 || WPG == 2, "a warp group is one warp or a pair");
  static_assert(NW % WPG == 0 && BN % 16 == 0 && kONT % 2 == 0, "tile shape");
  static_assert(kChunks == 8, "the int8 scale shuffle assumes 8 tile rows x 4 groups per warp");
};
using V2Large = V2Cfg<8, 2, 64>;  // 128 rows, warp pairs, 64-key tiles: 212 KB (H100/H200: 227 KB opt-in)
using V2Small = V2Cfg<4, 1, 32>;  // 64 rows, single warps, 32-key tiles: 96 KB (sm_86/89/120: 99 KB)
static_assert(V2Large::kSmem <= 227 * 1024, "large configuration over 227 KB");
static_assert(V2Small::kSmem <= 99 * 1024, "small configuration over 99 KB");

__device__ inline void bar_pair(int id) { asm volatile("bar.sync %0, 64;\n" ::"r"(id) : "memory"); }

// Q rows r0 .. r0 + kRows - 1 (as load_q)
template <class C>
__device__ inline void v2_load_q(const FwdArgs& a, int r0, int kvh, uint32_t sq, int tid) {
  const int R = a.T * a.G;
#pragma unroll 4
  for (int i = 0; i < C::kRows * 32 / C::kThreads; ++i) {
    const int e = i * C::kThreads + tid, row = e >> 5, c = e & 31;
    const int r = r0 + row;
    const bool ok = r < R;
    const int rr = ok ? r : 0;
    const int t = rr / a.G, h = kvh * a.G + rr % a.G;
    cp_async16(sq + swz(row, c), a.q + (((size_t)t * a.nh + h) * kHd + c * 8) * 2, ok);
  }
}
// bf16 K and V rows p0 .. p0 + BN - 1 into one buffer (zero past n_keys); a warp moves one 512-byte row
template <class C>
__device__ inline void v2_load_kv_bf16(const FwdArgs& a, int kvh, int p0, int n_keys, uint32_t dst, int tid) {
#pragma unroll
  for (int i = 0; i < C::kChunks; ++i) {
    const int e = i * C::kThreads + tid, row = e >> 5, c = e & 31;
    const int p = p0 + row;
    const bool ok = p < n_keys;
    const size_t off = (((size_t)(ok ? p : 0) * a.nkv + kvh) * kHd + c * 8) * 2;
    cp_async16(dst + swz(row, c), a.kc + off, ok);
    cp_async16(dst + C::kTile + swz(row, c), a.vc + off, ok);
  }
}
// int8 K and V tile held in registers between the global load and the dequantizing shared-memory store.
// Chunk i of a thread: tile row i * NW + warp, codes lane * 8 .. lane * 8 + 7 (group lane / 8). Scales:
// lane l holds the scale of row (l / 4) * NW + warp, group l % 4; chunk i takes it from lane 4 i + lane / 8.
// KV: kKvInt8 (8 codes = a uint2) or kKvInt4 (8 codes = a uint32).
template <class C, int KV>
struct RawKV {
  using Codes = typename std::conditional<KV == kKvInt4, uint32_t, uint2>::type;
  static constexpr int kRow = KV == kKvInt4 ? kHd / 2 : kHd;  // bytes of a cache row
  Codes k[C::kChunks], v[C::kChunks];
  uint32_t ks, vs;
};
template <class C, int KV>
__device__ inline void v2_fetch_int8(RawKV<C, KV>& r, const FwdArgs& a, int kvh, int p0, int n_keys, int warp,
                                     int lane) {
  constexpr int NW = C::kThreads / 32;
  using R = RawKV<C, KV>;
  using Codes = typename R::Codes;
#pragma unroll
  for (int i = 0; i < C::kChunks; ++i) {
    const int p = p0 + i * NW + warp;
    const bool ok = p < n_keys;
    const size_t off = ((size_t)(ok ? p : 0) * a.nkv + kvh) * R::kRow + lane * sizeof(Codes);
    const Codes k = __ldg(reinterpret_cast<const Codes*>(a.kc + off));
    const Codes v = __ldg(reinterpret_cast<const Codes*>(a.vc + off));
    r.k[i] = ok ? k : Codes{};
    r.v[i] = ok ? v : Codes{};
  }
  const int p = p0 + (lane >> 2) * NW + warp;
  const bool ok = p < n_keys;
  const size_t off = ((size_t)(ok ? p : 0) * a.nkv + kvh) * (kHd / 64) + (lane & 3);
  const uint32_t ks = __ldg(reinterpret_cast<const unsigned short*>(a.ks) + off);
  const uint32_t vs = __ldg(reinterpret_cast<const unsigned short*>(a.vs) + off);
  r.ks = ok ? ks : 0u;
  r.vs = ok ? vs : 0u;
}
// 8 int4 codes (nibbles 0..7 of w = dims 0..7) -> 8 fp16 (code * scale, rounded once), in dim order
__device__ inline uint4 i4x8_to_h8(uint32_t w, __half2 scale) {
  const __half2 off = __floats2half2_rn(1032.f, 1032.f);  // 0x6400 | (code + 8) is 1032 + code
  uint32_t q[4];  // q[j] = dims (j, j + 4)
#pragma unroll
  for (int j = 0; j < 4; ++j) {
    const uint32_t h = and_or<0x000F000Fu, 0x64006400u>(w >> (4 * j));
    const __half2 v = __hmul2(__hsub2(*reinterpret_cast<const __half2*>(&h), off), scale);
    q[j] = *reinterpret_cast<const uint32_t*>(&v);
  }
  return make_uint4(__byte_perm(q[0], q[1], 0x5410), __byte_perm(q[2], q[3], 0x5410), __byte_perm(q[0], q[1], 0x7632),
                    __byte_perm(q[2], q[3], 0x7632));
}
// code * fp16 scale rounded to fp16 (i8x2_to_h2: the decode kernel's and the old dequant pass's values,
// bit for bit; int4: i4x8_to_h8) into the swizzled tile; a warp writes one 512-byte row per chunk,
// conflict-free
template <class C, int KV>
__device__ inline void v2_store_int8(const RawKV<C, KV>& r, char* dst, int warp, int lane) {
  constexpr int NW = C::kThreads / 32;
#pragma unroll
  for (int i = 0; i < C::kChunks; ++i) {
    const int row = i * NW + warp, src = i * 4 + (lane >> 3);
    const uint32_t ks = __shfl_sync(0xffffffffu, r.ks, src);
    const uint32_t vs = __shfl_sync(0xffffffffu, r.vs, src);
    const uint32_t ks2 = ks | (ks << 16), vs2 = vs | (vs << 16);
    const __half2 sk = *reinterpret_cast<const __half2*>(&ks2), sv = *reinterpret_cast<const __half2*>(&vs2);
    uint4 hk, hv;
    if constexpr (KV == kKvInt4) {
      hk = i4x8_to_h8(r.k[i], sk);
      hv = i4x8_to_h8(r.v[i], sv);
    } else {
      hk.x = i8x2_to_h2(r.k[i].x, 0, sk);
      hk.y = i8x2_to_h2(r.k[i].x, 1, sk);
      hk.z = i8x2_to_h2(r.k[i].y, 0, sk);
      hk.w = i8x2_to_h2(r.k[i].y, 1, sk);
      hv.x = i8x2_to_h2(r.v[i].x, 0, sv);
      hv.y = i8x2_to_h2(r.v[i].x, 1, sv);
      hv.z = i8x2_to_h2(r.v[i].y, 0, sv);
      hv.w = i8x2_to_h2(r.v[i].y, 1, sv);
    }
    *reinterpret_cast<uint4*>(dst + swz(row, lane)) = hk;
    *reinterpret_cast<uint4*>(dst + C::kTile + swz(row, lane)) = hv;
  }
}

template <int KV, int NW, int WPG, int BN>
__global__ void __launch_bounds__(NW * 32, 1) attn_prefill_v2_kernel(FwdArgs a) {
  using C = V2Cfg<NW, WPG, BN>;
  constexpr bool INT8 = KV != kKvBf16;  // a quantized cache (int8 or int4): the register -> fp16 store path
  constexpr bool F16 = INT8;  // int8 / int4 cache: fp16 mma; bf16 cache: bf16 mma
  extern __shared__ __align__(128) char smem[];
  char* sQ = smem;
  char* sX = smem + C::kQBytes;  // two buffers of [K tile | V tile], 16-bit swizzled
  char* sP = sX + 2 * C::kXBytes;
  char* sA = sP + C::kPBytes;
  char* sL = sA + C::kABytes;

  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
  const int g = lane >> 2, tig = lane & 3;
  const int part = warp % WPG;  // which kOD output dims this warp accumulates
  const int G = a.G, R = a.T * G;
  const int n_rt = (R + C::kRows - 1) / C::kRows;
  const int kvh = blockIdx.x % a.nkv;
  const int rt = n_rt - 1 - (int)(blockIdx.x / a.nkv);  // longest first
  const int r0 = rt * C::kRows;
  const int t_first = r0 / G;
  const int t_last = min(a.T - 1, (r0 + C::kRows - 1) / G);
  const int n_keys = a.kv_start + t_last + 1;
  const int n_tiles = (n_keys + BN - 1) / BN;
  const int full_tiles = (a.kv_start + t_first + 1) / BN;  // tiles j < full_tiles need no mask

  int lim[2];  // last visible key of this thread's softmax rows g and g + 8 (padding rows: the last token)
#pragma unroll
  for (int i = 0; i < 2; ++i) lim[i] = a.kv_start + min((r0 + warp * 16 + g + 8 * i) / G, a.T - 1);

  // prologue: Q (cp.async) and tile 0 into buffer 0 (bf16: cp.async; int8: registers -> dequant -> store)
  v2_load_q<C>(a, r0, kvh, smem_u32(sQ), tid);
  [[maybe_unused]] RawKV<C, KV == kKvInt4 ? kKvInt4 : kKvInt8> raw;
  if constexpr (INT8) {
    cp_commit();
    v2_fetch_int8(raw, a, kvh, 0, n_keys, warp, lane);
    v2_store_int8(raw, sX, warp, lane);
  } else {
    v2_load_kv_bf16<C>(a, kvh, 0, n_keys, smem_u32(sX), tid);
    cp_commit();
  }

  // o[0]: this warp's own 16 rows; o[1] (pairs): the partner warp's 16 rows. Dims part * kOD .. + kOD - 1.
  float o[WPG][C::kONT][4];
#pragma unroll
  for (int mt = 0; mt < WPG; ++mt)
#pragma unroll
    for (int nt = 0; nt < C::kONT; ++nt) o[mt][nt][0] = o[mt][nt][1] = o[mt][nt][2] = o[mt][nt][3] = 0.f;
  float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.f, 0.f};

  // ldmatrix lane addressing (offsets into buffer 0; buffer 1 adds kXBytes); this warp's V columns start at
  // part * kOD
  const uint32_t x0 = smem_u32(sX);
  uint32_t q_off[4], k_off[4], v_off[4];
  ldsm_offsets(smem_u32(sQ) + warp * 16 * kRowBytes, x0, x0 + C::kTile + part * C::kOD * 2, lane, q_off, k_off, v_off);

  for (int j = 0; j < n_tiles; ++j) {
    // The one block barrier of a tile: buffer j % 2 is complete (bf16: this thread's cp.async waited;
    // int8: stored during tile j - 1) and every warp is done with tile j - 1, so buffer (j + 1) % 2 is free.
    cp_wait<0>();
    __syncthreads();
    const bool more = j + 1 < n_tiles;
    const uint32_t buf = (j & 1) ? C::kXBytes : 0u, nbuf = (j & 1) ? 0u : C::kXBytes;
    if (more) {
      if constexpr (INT8) {
        v2_fetch_int8(raw, a, kvh, (j + 1) * BN, n_keys, warp, lane);  // consumed after S below
      } else {
        v2_load_kv_bf16<C>(a, kvh, (j + 1) * BN, n_keys, x0 + nbuf, tid);
        cp_commit();
      }
    }
    // ---- S = Q K_j^T: this warp's 16 rows x BN keys
    float s[C::kSNT][4];
#pragma unroll
    for (int nt = 0; nt < C::kSNT; ++nt) s[nt][0] = s[nt][1] = s[nt][2] = s[nt][3] = 0.f;
#pragma unroll
    for (int kk = 0; kk < 16; ++kk) {
      uint32_t qa[4];
      ldsm_x4(qa, q_off[kk & 3] + (kk >> 2) * 128);
#pragma unroll
      for (int np = 0; np < C::kSNT / 2; ++np) {
        uint32_t kb[4];
        ldsm_x4(kb, k_off[kk & 3] + buf + (kk >> 2) * 128 + np * 16 * kRowBytes);
        mma16816<F16>(s[2 * np], qa, kb[0], kb[1]);
        mma16816<F16>(s[2 * np + 1], qa, kb[2], kb[3]);
      }
    }
    // ---- int8: tile j + 1 (loaded into registers before S) dequantized into the free buffer
    if constexpr (INT8) {
      if (more) v2_store_int8(raw, sX + nbuf, warp, lane);
    }
    // ---- causal mask (diagonal tiles only; also covers keys past n_keys, which are zero-filled)
    if (j >= full_tiles) {
#pragma unroll
      for (int nt = 0; nt < C::kSNT; ++nt)
#pragma unroll
        for (int c = 0; c < 4; ++c) {
          const int key = j * BN + nt * 8 + 2 * tig + (c & 1);
          if (key > lim[c >> 1]) s[nt][c] = -INFINITY;
        }
    }
    // ---- online softmax of the own rows (base 2). The maxima are scaled by log2(e) with an unfused
    // multiply so that an unchanged maximum gives alpha = 2^0 = 1 exactly (and the rescale can be skipped).
    float alpha[WPG][2], mu[2];
#pragma unroll
    for (int i = 0; i < 2; ++i) {
      float mx = m[i];
#pragma unroll
      for (int nt = 0; nt < C::kSNT; ++nt) mx = fmaxf(mx, fmaxf(s[nt][2 * i], s[nt][2 * i + 1]));
      mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
      mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
      const float mu_old = __fmul_rn(m[i], kLog2e);           // -inf on the first tile -> alpha 0
      mu[i] = mx == -INFINITY ? 0.f : __fmul_rn(mx, kLog2e);  // no visible key yet: keep everything 0
      alpha[0][i] = ex2(mu_old - mu[i]);
      m[i] = mx;
    }
    float rs[2] = {0.f, 0.f};
    exp_tile_rows(s, mu, rs);
#pragma unroll
    for (int i = 0; i < 2; ++i) l[i] = l[i] * alpha[0][i] + rs[i];  // per-thread partial sums
    // P as A fragments: the S accumulators of n-tiles 2kk, 2kk+1 are the A fragment of key step kk
    uint32_t pa[WPG][C::kKS][4];
#pragma unroll
    for (int kk = 0; kk < C::kKS; ++kk) {
      pa[0][kk][0] = pack2<F16>(s[2 * kk][0], s[2 * kk][1]);
      pa[0][kk][1] = pack2<F16>(s[2 * kk][2], s[2 * kk][3]);
      pa[0][kk][2] = pack2<F16>(s[2 * kk + 1][0], s[2 * kk + 1][1]);
      pa[0][kk][3] = pack2<F16>(s[2 * kk + 1][2], s[2 * kk + 1][3]);
    }
    if constexpr (WPG == 2) {
      // Pair exchange: the partner's lane holds the same fragment positions for its 16 rows, so a lane
      // stores its fragments and reads the partner's at the same lane index (contiguous, conflict-free).
      // Reuse is safe: the next tile writes these slots only after the block barrier, which the partner
      // reaches after reading them.
      uint4* xp = reinterpret_cast<uint4*>(sP);
      float2* xa = reinterpret_cast<float2*>(sA);
#pragma unroll
      for (int kk = 0; kk < C::kKS; ++kk)
        xp[(warp * C::kKS + kk) * 32 + lane] = make_uint4(pa[0][kk][0], pa[0][kk][1], pa[0][kk][2], pa[0][kk][3]);
      xa[warp * 32 + lane] = make_float2(alpha[0][0], alpha[0][1]);
      bar_pair(1 + warp / 2);
      const int pw = warp ^ 1;
#pragma unroll
      for (int kk = 0; kk < C::kKS; ++kk) {
        const uint4 u = xp[(pw * C::kKS + kk) * 32 + lane];
        pa[1][kk][0] = u.x; pa[1][kk][1] = u.y; pa[1][kk][2] = u.z; pa[1][kk][3] = u.w;
      }
      const float2 pa2 = xa[pw * 32 + lane];
      alpha[1][0] = pa2.x;
      alpha[1][1] = pa2.y;
    }
    // ---- rescale O, skipped when no row of the warp changed its maximum (multiplying by 1 is exact)
    bool rescale = false;
#pragma unroll
    for (int mt = 0; mt < WPG; ++mt) rescale |= (alpha[mt][0] != 1.f) | (alpha[mt][1] != 1.f);
    if (__any_sync(0xffffffffu, rescale)) {
#pragma unroll
      for (int mt = 0; mt < WPG; ++mt)
#pragma unroll
        for (int nt = 0; nt < C::kONT; ++nt) {
          o[mt][nt][0] *= alpha[mt][0]; o[mt][nt][1] *= alpha[mt][0];
          o[mt][nt][2] *= alpha[mt][1]; o[mt][nt][3] *= alpha[mt][1];
        }
    }
    // ---- O += P V_j: each V fragment (16 keys x 16 dims) feeds 2 * WPG mma
#pragma unroll
    for (int kk = 0; kk < C::kKS; ++kk) {
#pragma unroll
      for (int dq = 0; dq < C::kONT / 2; ++dq) {
        uint32_t vb[4];
        ldsm_x4_t(vb, v_off[dq & 3] + buf + (dq >> 2) * 128 + kk * 16 * kRowBytes);
#pragma unroll
        for (int mt = 0; mt < WPG; ++mt) {
          mma16816<F16>(o[mt][2 * dq], pa[mt][kk], vb[0], vb[1]);
          mma16816<F16>(o[mt][2 * dq + 1], pa[mt][kk], vb[2], vb[3]);
        }
      }
    }
  }

  // ---- epilogue: row sums (own rows reduced over the quad; a pair swaps them), normalise, gate, store
  float lt[WPG][2];
#pragma unroll
  for (int i = 0; i < 2; ++i) {
    float x = l[i];
    x += __shfl_xor_sync(0xffffffffu, x, 1);
    x += __shfl_xor_sync(0xffffffffu, x, 2);
    lt[0][i] = x;  // > 0: key 0 is visible to every row
  }
  if constexpr (WPG == 2) {
    float2* xl = reinterpret_cast<float2*>(sL);
    xl[warp * 32 + lane] = make_float2(lt[0][0], lt[0][1]);
    bar_pair(1 + warp / 2);
    const float2 p2 = xl[(warp ^ 1) * 32 + lane];
    lt[1][0] = p2.x;
    lt[1][1] = p2.y;
  }
#pragma unroll
  for (int mt = 0; mt < WPG; ++mt) {
    const int rw = mt == 0 ? warp : (warp ^ 1);
#pragma unroll
    for (int i = 0; i < 2; ++i) {
      const float inv = 1.f / lt[mt][i];
      const int r = r0 + rw * 16 + g + 8 * i;
      if (r < R) {
        const int t = r / G, h = kvh * G + r % G;
        const float* gp = a.gate + (size_t)t * a.ld_gate + (size_t)h * 2 * kHd;
        __half* op = a.out + (size_t)t * a.nh * kHd + (size_t)h * kHd;  // perm8 keeps groups of 8 in place
#pragma unroll
        for (int nt = 0; nt < C::kONT; ++nt)
#pragma unroll
          for (int c = 0; c < 2; ++c) {
            const int dd = part * C::kOD + nt * 8 + 2 * tig + c;
            op[perm8(dd)] = __float2half(o[mt][nt][2 * i + c] * inv * sigmoidf_(gp[dd]));
          }
      }
    }
  }
}

// dynamic shared memory opt-in, once per kernel and device
template <class Kernel>
void opt_in_smem(Kernel kernel, int smem, unsigned long long& configured) {
  int dev = 0;
  MR_CHECK(cudaGetDevice(&dev), "attn_prefill");
  const unsigned long long bit = 1ull << (dev & 63);
  if (!(configured & bit)) {
    MR_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem),
             "attn_prefill (shared memory opt-in)");
    configured |= bit;
  }
}

int max_smem_optin() {  // cudaDevAttrMaxSharedMemoryPerBlockOptin of the current device, cached
  static int cache[64] = {};
  int dev = 0;
  MR_CHECK(cudaGetDevice(&dev), "attn_prefill");
  int& v = cache[dev & 63];
  if (v == 0) MR_CHECK(cudaDeviceGetAttribute(&v, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev), "attn_prefill");
  return v;
}

template <bool INT8>
void launch_prefill(const FwdArgs& a, int blocks, cudaStream_t stream) {
  constexpr int smem = INT8 ? kSmemInt8 : kSmemBf16;
  static unsigned long long configured = 0;  // one bit per device
  opt_in_smem(attn_prefill_kernel<INT8>, smem, configured);
  attn_prefill_kernel<INT8><<<blocks, kThreads, smem, stream>>>(a);
}

template <int KV, int NW, int WPG, int BN>
void launch_prefill_v2(const FwdArgs& a, cudaStream_t stream) {
  using C = V2Cfg<NW, WPG, BN>;
  static unsigned long long configured = 0;
  opt_in_smem(attn_prefill_v2_kernel<KV, NW, WPG, BN>, C::kSmem, configured);
  const long long rows = (long long)a.T * a.G;
  const long long blocks = (rows + C::kRows - 1) / C::kRows * a.nkv;
  if (blocks > 0x7fffffffLL) throw std::invalid_argument("attn_prefill: too many query rows");
  attn_prefill_v2_kernel<KV, NW, WPG, BN><<<(int)blocks, C::kThreads, C::kSmem, stream>>>(a);
}
template <int KV, class C>
struct V2Launch;
template <int KV, int NW, int WPG, int BN>
struct V2Launch<KV, V2Cfg<NW, WPG, BN>> {
  static void run(const FwdArgs& a, cudaStream_t s) { launch_prefill_v2<KV, NW, WPG, BN>(a, s); }
};
template <class C>
void launch_v2(const FwdArgs& a, int kv_fmt, cudaStream_t s) {
  if (kv_fmt == kKvInt8) V2Launch<kKvInt8, C>::run(a, s);
  else if (kv_fmt == kKvInt4) V2Launch<kKvInt4, C>::run(a, s);
  else V2Launch<kKvBf16, C>::run(a, s);
}

int g_variant = 0;  // set_attn_prefill_variant

void check_dims(const AttnDims& d, const char* op) {
  if (d.head_dim != kHd) throw std::invalid_argument(std::string(op) + ": head_dim must be 256");
  if (d.n_kv_heads <= 0 || d.n_heads % d.n_kv_heads)
    throw std::invalid_argument(std::string(op) + ": n_heads must be a multiple of n_kv_heads");
  if (d.kv_fmt < kKvBf16 || d.kv_fmt > kKvInt4)
    throw std::invalid_argument(std::string(op) + ": kv format must be 0 (bf16), 1 (int8) or 2 (int4), got " +
                                std::to_string(d.kv_fmt));
}

}  // namespace

void attn_prefill_prep(const float* qkv, int ldp, int T, const AttnDims& d, const float* q_norm, const float* k_norm,
                       const float* inv_freq, const int mrope_section[3], const int32_t* pos3, int kv_start,
                       float* q_buf, char* k_cache, char* v_cache, char* k_scales, char* v_scales,
                       cudaStream_t stream) {
  check_dims(d, "attn_prefill_prep");
  if (T <= 0) return;
  PrepArgs p{qkv, ldp, d, q_norm, k_norm, inv_freq, {mrope_section[0], mrope_section[1], mrope_section[2]},
             pos3, kv_start, q_buf, k_cache, v_cache, k_scales, v_scales};
  attn_prefill_prep_kernel<<<dim3(T, d.n_heads + 2 * d.n_kv_heads), kHd, 0, stream>>>(p);
  MR_CHECK_LAUNCH("attn_prefill_prep");
}

void attn_prefill(const float* q_buf, int T, int kv_start, const AttnDims& d, const char* k_cache, const char* v_cache,
                  const char* k_scales, const char* v_scales, const float* gate, int ld_gate, __half* out_h,
                  cudaStream_t stream) {
  check_dims(d, "attn_prefill");
  if (T <= 0) return;
  const int G = d.n_heads / d.n_kv_heads;
  const long long rows = (long long)T * G;
  const long long blocks = (rows + kBM - 1) / kBM * d.n_kv_heads;
  if (blocks > 0x7fffffffLL) throw std::invalid_argument("attn_prefill: too many query rows");
  FwdArgs a{reinterpret_cast<const char*>(q_buf), T, kv_start, d.n_heads, d.n_kv_heads, G,
            k_cache, v_cache, k_scales, v_scales, gate, ld_gate, out_h};
  int v = g_variant;
  if (v == 0) v = max_smem_optin() >= V2Large::kSmem ? 3 : 2;
  switch (v) {
    case 1:
      if (d.kv_fmt == kKvInt4)
        throw std::invalid_argument("attn_prefill: variant 1 (the first kernel) is built for bf16 and int8 KV only; "
                                    "int4 KV runs on variants 0, 2 and 3");
      if (d.kv_fmt == kKvInt8) launch_prefill<true>(a, (int)blocks, stream);
      else launch_prefill<false>(a, (int)blocks, stream);
      break;
    case 2: launch_v2<V2Small>(a, d.kv_fmt, stream); break;
    default:
      if (max_smem_optin() < V2Large::kSmem)
        throw std::invalid_argument("attn_prefill: variant 3 needs " + std::to_string(V2Large::kSmem) +
                                    " bytes of shared memory per block; this device allows " +
                                    std::to_string(max_smem_optin()));
      launch_v2<V2Large>(a, d.kv_fmt, stream);
  }
  MR_CHECK_LAUNCH("attn_prefill");
}

void set_attn_prefill_variant(int v) {
  if (v < 0 || v > 3) throw std::invalid_argument("attn_prefill: variant must be 0..3");
  g_variant = v;
}
int attn_prefill_variant() { return g_variant; }
bool attn_prefill_variant_supported(int v) {
  if (v < 0 || v > 3) return false;
  return v != 3 || max_smem_optin() >= V2Large::kSmem;
}

}  // namespace monorail
