// Causal gated attention for prefill chunks (attn_prefill.h), FlashAttention-2 style, head_dim 256.
//
//  attn_prefill_prep : attn_prep for any T (positions from a device pos3 array, kv_start on the host).
//                      K/V are appended to the cache with exactly attn_prep's arithmetic (same code), so
//                      decode reads what prefill wrote. Queries are written as 16-bit values scaled by
//                      1/sqrt(256): bf16 for a bf16 cache, fp16 for an int8 cache ([T, n_heads, 256]).
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
#include "attn_prefill.h"

#include <stdexcept>

#include "attn_prep.cuh"
#include "common.cuh"

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
  int kind, head;
  const float x = prep_norm_rope(p.qkv + (size_t)t * p.ldp, p.d, blockIdx.y, i, p.q_norm, p.k_norm, p.inv_freq, p.sec,
                                 p.pos3 + (size_t)t * 3, kind, head, xs, red);
  if (kind == 0) {  // block-uniform: the whole block is one query head
    const float qv = x * rsqrtf((float)kHd);
    const size_t qi = ((size_t)t * p.d.n_heads + head) * kHd + i;
    if (p.d.kv_int8) reinterpret_cast<__half*>(p.q_out)[qi] = __float2half_rn(qv);
    else reinterpret_cast<__nv_bfloat16*>(p.q_out)[qi] = __float2bfloat16(qv);
    return;
  }
  prep_append_kv(x, i, kind, head, (size_t)p.kv_start + t, p.d, p.k_cache, p.v_cache, p.k_scales, p.v_scales, gmax);
}

// ---------------------------------------------------------------------------------------------
// device helpers

__device__ inline uint32_t smem_u32(const void* p) { return (uint32_t)__cvta_generic_to_shared(p); }
// byte offset of 16-byte chunk `chunk` (0..31) of row `row` in a swizzled [rows][256] 16-bit tile
__device__ inline uint32_t swz(int row, int chunk) { return (uint32_t)(row * kRowBytes + ((chunk ^ (row & 7)) << 4)); }

__device__ inline void cp_async16(uint32_t dst, const void* src, bool ok) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src), "r"(ok ? 16 : 0) : "memory");
}
__device__ inline void cp_async8(uint32_t dst, const void* src, bool ok) {
  asm volatile("cp.async.ca.shared.global [%0], [%1], 8, %2;\n" ::"r"(dst), "l"(src), "r"(ok ? 8 : 0) : "memory");
}
__device__ inline void cp_commit() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }
template <int N>
__device__ inline void cp_wait() { asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory"); }

__device__ inline void ldsm_x4(uint32_t (&r)[4], uint32_t addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(addr) : "memory");
}
__device__ inline void ldsm_x4_t(uint32_t (&r)[4], uint32_t addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(addr) : "memory");
}

// m16n8k16, fp32 accumulate. Fragments (PTX ISA, g = lane / 4, c = lane % 4):
//   A 16x16 row: a0 (g, 2c..2c+1), a1 (g+8, 2c..), a2 (g, 2c+8..2c+9), a3 (g+8, 2c+8..)
//   B 16x8 col : b0 (k 2c..2c+1, n g), b1 (k 2c+8..2c+9, n g)
//   C 16x8     : c0, c1 (g, 2c..2c+1), c2, c3 (g+8, 2c..2c+1)
// the lower-indexed element sits in the low 16 bits of each register.
template <bool F16>
__device__ inline void mma16816(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  if constexpr (F16) {
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
                 "{%0,%1,%2,%3};\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  } else {
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
                 "{%0,%1,%2,%3};\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
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

  // ldmatrix lane addressing. Every tile row a lane addresses is = lrow (mod 8), so chunk 2 kk + hi sits at
  // physical chunk (2 kk + hi) ^ lrow = 8 (kk / 4) + ((2 (kk % 4) + hi) ^ lrow): four per-lane offsets per
  // operand plus an immediate of 128 B * (kk / 4).
  const int lrow = lane & 7;
  uint32_t q_off[4], k_off[4], v_off[4];
  {
    const uint32_t q_row = smem_u32(sQ) + (warp * 16 + lrow + ((lane >> 3) & 1) * 8) * kRowBytes;  // A: a0..a3
    const uint32_t k_row = smem_u32(sK) + (lrow + (lane >> 4) * 8) * kRowBytes;  // B: b0 b1 (n 0-7), (n 8-15)
    const uint32_t v_row = smem_u32(sV) + (lrow + ((lane >> 3) & 1) * 8) * kRowBytes;  // B^T: (d 0-7), (d 8-15)
    const int q_hi = lane >> 4, k_hi = (lane >> 3) & 1, v_hi = lane >> 4;
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      q_off[i] = q_row + (((2 * i + q_hi) ^ lrow) << 4);
      k_off[i] = k_row + (((2 * i + k_hi) ^ lrow) << 4);
      v_off[i] = v_row + (((2 * i + v_hi) ^ lrow) << 4);
    }
  }

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
#pragma unroll
    for (int nt = 0; nt < 8; ++nt)
#pragma unroll
      for (int c = 0; c < 4; ++c) {
        const float p = ex2(fmaf(s[nt][c], kLog2e, -mu[c >> 1]));
        s[nt][c] = p;
        rs[c >> 1] += p;
      }
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

template <bool INT8>
void launch_prefill(const FwdArgs& a, int blocks, cudaStream_t stream) {
  constexpr int smem = INT8 ? kSmemInt8 : kSmemBf16;
  static unsigned long long configured = 0;  // one bit per device
  int dev = 0;
  MR_CHECK(cudaGetDevice(&dev), "attn_prefill");
  const unsigned long long bit = 1ull << (dev & 63);
  if (!(configured & bit)) {
    MR_CHECK(cudaFuncSetAttribute(attn_prefill_kernel<INT8>, cudaFuncAttributeMaxDynamicSharedMemorySize, smem),
             "attn_prefill (shared memory opt-in)");
    configured |= bit;
  }
  attn_prefill_kernel<INT8><<<blocks, kThreads, smem, stream>>>(a);
}

void check_dims(const AttnDims& d, const char* op) {
  if (d.head_dim != kHd) throw std::invalid_argument(std::string(op) + ": head_dim must be 256");
  if (d.n_kv_heads <= 0 || d.n_heads % d.n_kv_heads)
    throw std::invalid_argument(std::string(op) + ": n_heads must be a multiple of n_kv_heads");
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
  if (d.kv_int8) launch_prefill<true>(a, (int)blocks, stream);
  else launch_prefill<false>(a, (int)blocks, stream);
  MR_CHECK_LAUNCH("attn_prefill");
}

}  // namespace monorail
