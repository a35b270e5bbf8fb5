// Chunked Gated DeltaNet prefill (WY / UT form, chunk C = 64), fp32 state carried across chunks.
//
// Per value head h and chunk of L <= 64 tokens with cumulative log-decay G (G_t = g_1 + .. + g_t inside
// the chunk), incoming state S0 [k = 128][v = 128]:
//   A[t,s] = beta_t exp(G_t - G_s) k_t.k_s (s < t),  W = (I+A)^-1 (beta exp(G) K),  U' = (I+A)^-1 (beta V)
//   U = U' - W S0,   O = exp(G) Q S0 + M U  with M[t,s] = exp(G_t - G_s) q_t.k_s (s <= t)
//   S_C = exp(G_L) S0 + sum_s exp(G_L - G_s) k_s u_s^T
// (the same algebra as engine/reference/gdn.py, delta_rule_chunked). Three launches:
//
// 1. gdn_prep_kernel, grid (chunks, v_heads), 256 threads, 85.5 KB smem: everything that does not
//    depend on the state, in parallel over all chunks. Normalised q (scaled) and k into smem (and, once
//    per key head, into scratch), gates g / beta and the in-chunk cumulative G, the 64x64 products K K^T
//    and Q K^T (4x4 register tiles), the decay-masked M (to scratch) and A (smem, transposed), then the
//    unit lower-triangular solve for the 256 right-hand columns [beta exp(G) K | beta V] by forward
//    substitution: one thread per column holds it in 64 registers (right-looking, fully unrolled; A is
//    read as smem broadcasts). W and U' go to scratch.
// 2. gdn_scan_kernel, grid (v_heads, 128 / 32), 256 threads, 94.7 KB smem: the sequential part. Each
//    block owns 32 value columns of one head's state (columns evolve independently given k, q, g, beta)
//    in smem and walks the chunks in order: X = [W ; exp(G) Q] S0 (128 x 32, k = 128), U = U' - X_W,
//    O = X_Q + M U, S = exp(G_L) S0 + (exp(G_L - G) K)^T U. fp32 FMA, 4x4 register tiles fed by float4
//    smem loads. O (fp32, un-normalised) overwrites U' in scratch (same block, same elements).
// 3. gdn_norm_kernel: the gated RMS norm over each (token, head), one warp each, fp16 perm8 output.
//
// exp() is only taken of G_t - G_s with s <= t, of G_t and of G_L - G_s (all <= 0 since g <= 0).
#include "common.cuh"
#include "gdn_chunk.h"

namespace monorail {
namespace {

constexpr int kC = 64;       // chunk length
constexpr int kD = 128;      // dk = dv
constexpr int kLdQK = 132;   // smem row stride of 128-wide rows (float4 rows, conflict-free across rows)
constexpr int kLdM = 68;     // smem row stride of 64-wide rows
constexpr int kLdS = 36;     // smem row stride of the 32-column state slice
constexpr int kCols = 32;    // value columns per scan block
constexpr int kThreads = 256;

// Scratch layout (fp32 elements; every segment a multiple of 4 elements so float4 stays aligned):
//   qn [T][k_heads][128]   normalised q (scaled by 1/sqrt(dk))
//   kn [T][k_heads][128]   normalised k
//   w  [T][v_heads][128]   W rows
//   uo [T][v_heads][128]   U' rows, overwritten by the un-normalised outputs o
//   m  [chunks][v_heads][64][64]  decay-masked Q K^T
//   g  [T][v_heads]        in-chunk cumulative log decay G
struct Scratch {
  float *qn, *kn, *w, *uo, *m, *g;
};

__host__ __device__ inline int64_t n_chunks(int64_t T) { return (T + kC - 1) / kC; }

int64_t scratch_floats(const GdnDims& d, int64_t T, Scratch* s, float* base) {
  const int64_t nqk = T * d.k_heads * kD, nv = T * d.v_heads * kD, nm = n_chunks(T) * d.v_heads * kC * kC;
  const int64_t ng = (T * d.v_heads + 3) / 4 * 4;
  if (s) {
    s->qn = base;
    s->kn = s->qn + nqk;
    s->w = s->kn + nqk;
    s->uo = s->w + nv;
    s->m = s->uo + nv;
    s->g = s->m + nm;
  }
  return 2 * nqk + 2 * nv + nm + ng;
}

__device__ inline float4 f4scale(float4 v, float s) { return make_float4(v.x * s, v.y * s, v.z * s, v.w * s); }
__device__ inline float4 ld4(const float* p) { return *reinterpret_cast<const float4*>(p); }
__device__ inline void st4(float* p, float4 v) { *reinterpret_cast<float4*>(p) = v; }

constexpr int kPrepSmemFloats = 2 * kC * kLdQK + kC * kLdM + 3 * kC + 4;
constexpr int kScanSmemFloats = 2 * kC * kLdQK + kD * kLdS + kC * kCols + 2 * kC + 4;
static_assert(kC * kLdM + kC * kD <= 2 * kC * kLdQK, "scan: M and K~ must fit in the P buffer");
static_assert(kPrepSmemFloats * 4 <= 99 * 1024 && kScanSmemFloats * 4 <= 99 * 1024, "smem over 99 KB");

__global__ void __launch_bounds__(kThreads, 2)
    gdn_prep_kernel(const float* __restrict__ conv_out, const float* __restrict__ b, const float* __restrict__ a,
                    int ldp, int T, GdnDims d, const float* __restrict__ a_log, const float* __restrict__ dt_bias,
                    Scratch sc) {
  extern __shared__ __align__(16) float smem[];
  float* Ks = smem;                  // [64][132] normalised k rows
  float* Qs = Ks + kC * kLdQK;       // [64][132] normalised, scaled q rows
  float* At = Qs + kC * kLdQK;       // [64 s][68] A transposed: At[s][t] = A[t][s]
  float* Gs = At + kC * kLdM;        // [64] cumulative G
  float* Bs = Gs + kC;               // [64] beta
  float* eGs = Bs + kC;              // [64] exp(G)
  float* red = eGs + kC;             // [4]

  const int c = blockIdx.x, h = blockIdx.y;
  const int rep = d.v_heads / d.k_heads, hk = h / rep;
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int t0 = c * kC, L = min(kC, T - t0);
  const int conv_dim = 2 * d.k_heads * kD + d.v_heads * kD;

  // gates: threads 0..63 (warps 0 and 1 whole); padded tokens get g = 0, beta = 0
  float gsum = 0.f, bv = 0.f;
  if (tid < kC) {
    float gv = 0.f;
    if (tid < L) {
      const size_t r = (size_t)(t0 + tid) * ldp + h;
      const float av = a[r] + dt_bias[h];
      const float sp = av > 20.f ? av : log1pf(expf(av));
      gv = -expf(a_log[h]) * sp;
      bv = 1.f / (1.f + expf(-b[r]));
    }
    gsum = gv;
#pragma unroll
    for (int o = 1; o < 32; o <<= 1) {
      const float n = __shfl_up_sync(0xffffffffu, gsum, o);
      if (lane >= o) gsum += n;
    }
    if (tid == 31) red[0] = gsum;
  }

  // q, k rows: warp w takes rows w, w+8, ..; lane holds 4 of the 128 values
  const float q_scale = rsqrtf((float)kD);
  const bool write_qk = (h % rep) == 0;
  for (int r = warp; r < kC; r += kThreads / 32) {
    float4 qv = make_float4(0.f, 0.f, 0.f, 0.f), kv = qv;
    if (r < L) {  // warp-uniform
      const float* row = conv_out + (size_t)(t0 + r) * conv_dim + hk * kD + lane * 4;
      qv = ld4(row);
      kv = ld4(row + d.k_heads * kD);
      const float sq = warp_sum(qv.x * qv.x + qv.y * qv.y + qv.z * qv.z + qv.w * qv.w);
      const float sk = warp_sum(kv.x * kv.x + kv.y * kv.y + kv.z * kv.z + kv.w * kv.w);
      qv = f4scale(qv, rsqrtf(sq + 1e-6f) * q_scale);
      kv = f4scale(kv, rsqrtf(sk + 1e-6f));
      if (write_qk) {
        const size_t o = ((size_t)(t0 + r) * d.k_heads + hk) * kD + lane * 4;
        st4(sc.qn + o, qv);
        st4(sc.kn + o, kv);
      }
    }
    st4(Qs + r * kLdQK + lane * 4, qv);
    st4(Ks + r * kLdQK + lane * 4, kv);
  }
  __syncthreads();
  if (tid < kC) {
    if (tid >= 32) gsum += red[0];
    Gs[tid] = gsum;
    Bs[tid] = bv;
    eGs[tid] = expf(gsum);
    if (tid < L) sc.g[(size_t)(t0 + tid) * d.v_heads + h] = gsum;
  }
  __syncthreads();

  // K K^T and Q K^T: thread (tg, sg) owns rows t = tg + 16 m, columns s = sg + 16 n
  {
    const int tg = tid >> 4, sg = tid & 15;
    float kk[4][4], qk[4][4];
#pragma unroll
    for (int m = 0; m < 4; ++m)
#pragma unroll
      for (int n = 0; n < 4; ++n) kk[m][n] = qk[m][n] = 0.f;
#pragma unroll 1
    for (int i = 0; i < kD; i += 4) {
      float4 kt[4], qt[4], ks[4];
#pragma unroll
      for (int m = 0; m < 4; ++m) {
        kt[m] = ld4(Ks + (tg + 16 * m) * kLdQK + i);
        qt[m] = ld4(Qs + (tg + 16 * m) * kLdQK + i);
        ks[m] = ld4(Ks + (sg + 16 * m) * kLdQK + i);
      }
#pragma unroll
      for (int m = 0; m < 4; ++m)
#pragma unroll
        for (int n = 0; n < 4; ++n) {
          kk[m][n] = fmaf(kt[m].x, ks[n].x, fmaf(kt[m].y, ks[n].y, fmaf(kt[m].z, ks[n].z, fmaf(kt[m].w, ks[n].w, kk[m][n]))));
          qk[m][n] = fmaf(qt[m].x, ks[n].x, fmaf(qt[m].y, ks[n].y, fmaf(qt[m].z, ks[n].z, fmaf(qt[m].w, ks[n].w, qk[m][n]))));
        }
    }
    float* M = sc.m + ((size_t)c * d.v_heads + h) * kC * kC;
#pragma unroll
    for (int m = 0; m < 4; ++m) {
      const int t = tg + 16 * m;
      const float gt = Gs[t], bt = Bs[t];
#pragma unroll
      for (int n = 0; n < 4; ++n) {
        const int s = sg + 16 * n;
        const float dec = s <= t ? expf(gt - Gs[s]) : 0.f;  // never exp of a positive number
        At[s * kLdM + t] = s < t ? bt * dec * kk[m][n] : 0.f;
        M[t * kC + s] = dec * qk[m][n];
      }
    }
  }
  __syncthreads();

  // (I + A) X = B for the 256 columns of B = [beta exp(G) K | beta V]; thread = column
  {
    float x[kC];
    const bool isv = tid >= kD;  // warp-uniform
    const int col = tid & (kD - 1);
    if (!isv) {
#pragma unroll
      for (int t = 0; t < kC; ++t) x[t] = Bs[t] * eGs[t] * Ks[t * kLdQK + col];
    } else {
      const float* vcol = conv_out + (size_t)t0 * conv_dim + 2 * d.k_heads * kD + h * kD + col;
#pragma unroll
      for (int t = 0; t < kC; ++t) x[t] = t < L ? Bs[t] * vcol[(size_t)t * conv_dim] : 0.f;
    }
    // right-looking: once x[s] is final, take its contribution out of every later row. At[s][t] = 0 for
    // t <= s, so starting at the aligned quad below s+1 changes nothing.
#pragma unroll
    for (int s = 0; s < kC - 1; ++s) {
      const float xs = x[s];
#pragma unroll
      for (int t = ((s + 1) / 4) * 4; t < kC; t += 4) {
        const float4 av = ld4(At + s * kLdM + t);
        x[t] = fmaf(-av.x, xs, x[t]);
        x[t + 1] = fmaf(-av.y, xs, x[t + 1]);
        x[t + 2] = fmaf(-av.z, xs, x[t + 2]);
        x[t + 3] = fmaf(-av.w, xs, x[t + 3]);
      }
    }
    float* dst = (isv ? sc.uo : sc.w) + (size_t)t0 * d.v_heads * kD + h * kD + col;
#pragma unroll
    for (int t = 0; t < kC; ++t)
      if (t < L) dst[(size_t)t * d.v_heads * kD] = x[t];
  }
}

__global__ void __launch_bounds__(kThreads, 2)
    gdn_scan_kernel(int T, GdnDims d, Scratch sc, float* __restrict__ state) {
  extern __shared__ __align__(16) float smem[];
  float* Ps = smem;                  // [128][132]: rows 0..63 W, 64..127 exp(G) Q
  float* Ms = smem;                  // [64][68] (aliases Ps after the X product)
  float* Kts = smem + kC * kLdM;     // [64][128] exp(G_L - G_s) k_s (aliases Ps)
  float* Ss = smem + 2 * kC * kLdQK; // [128 k][36]: the state slice, columns j0 .. j0+31
  float* Us = Ss + kD * kLdS;        // [64][32]
  float* eG = Us + kC * kCols;       // [64] exp(G_t)
  float* eGt = eG + kC;              // [64] exp(G_L - G_t)
  float* eGL = eGt + kC;             // [1] exp(G_L)

  const int h = blockIdx.x, j0 = blockIdx.y * kCols;
  const int rep = d.v_heads / d.k_heads, hk = h / rep;
  const int tid = threadIdx.x;
  const int ldv = d.v_heads * kD, ldk = d.k_heads * kD;
  const int rg = tid >> 3, jg = tid & 7;  // X / O tiles: rows rg + 32 m, columns jg*4 .. +3
  const int ig = tid >> 3;                // S tiles: rows ig*4 .. +3, columns jg*4 .. +3

  float* Sg = state + ((size_t)h * kD + j0) * kD;  // [32 j][128 i] of this block
  for (int e = tid; e < kCols * kD; e += kThreads) Ss[(e & (kD - 1)) * kLdS + (e >> 7)] = Sg[e];

  const int nch = (int)n_chunks(T);
  for (int c = 0; c < nch; ++c) {
    const int t0 = c * kC, L = min(kC, T - t0);
    if (tid < kC) {
      const float GL = sc.g[(size_t)(t0 + L - 1) * d.v_heads + h];
      const float Gt = sc.g[(size_t)(t0 + min(tid, L - 1)) * d.v_heads + h];
      eG[tid] = expf(Gt);
      eGt[tid] = expf(GL - Gt);
      if (tid == 0) eGL[0] = expf(GL);
    }
    __syncthreads();  // eG (and, first time round, Ss) ready; previous chunk done with Ps/Us
    // P = [W ; exp(G) Q], rows >= L zero
#pragma unroll 4
    for (int e = tid; e < 2 * kC * (kD / 4); e += kThreads) {
      const int r = e >> 5, c4 = (e & 31) * 4, t = r & (kC - 1);
      float4 v = make_float4(0.f, 0.f, 0.f, 0.f);
      if (t < L) {
        if (r < kC) v = ld4(sc.w + (size_t)(t0 + t) * ldv + h * kD + c4);
        else v = f4scale(ld4(sc.qn + (size_t)(t0 + t) * ldk + hk * kD + c4), eG[t]);
      }
      st4(Ps + r * kLdQK + c4, v);
    }
    __syncthreads();

    // X = P S0: rows rg + 32 m (m = 0, 1: W rows t = rg, rg+32; m = 2, 3: Q rows t = rg, rg+32)
    float acc[4][4];
#pragma unroll
    for (int m = 0; m < 4; ++m)
#pragma unroll
      for (int n = 0; n < 4; ++n) acc[m][n] = 0.f;
#pragma unroll 2
    for (int i = 0; i < kD; i += 4) {
      float4 p[4], s[4];
#pragma unroll
      for (int m = 0; m < 4; ++m) p[m] = ld4(Ps + (rg + 32 * m) * kLdQK + i);
#pragma unroll
      for (int q = 0; q < 4; ++q) s[q] = ld4(Ss + (i + q) * kLdS + jg * 4);
#pragma unroll
      for (int m = 0; m < 4; ++m) {
        acc[m][0] = fmaf(p[m].x, s[0].x, fmaf(p[m].y, s[1].x, fmaf(p[m].z, s[2].x, fmaf(p[m].w, s[3].x, acc[m][0]))));
        acc[m][1] = fmaf(p[m].x, s[0].y, fmaf(p[m].y, s[1].y, fmaf(p[m].z, s[2].y, fmaf(p[m].w, s[3].y, acc[m][1]))));
        acc[m][2] = fmaf(p[m].x, s[0].z, fmaf(p[m].y, s[1].z, fmaf(p[m].z, s[2].z, fmaf(p[m].w, s[3].z, acc[m][2]))));
        acc[m][3] = fmaf(p[m].x, s[0].w, fmaf(p[m].y, s[1].w, fmaf(p[m].z, s[2].w, fmaf(p[m].w, s[3].w, acc[m][3]))));
      }
    }
    // U = U' - W S0 (zero for padded rows)
#pragma unroll
    for (int m = 0; m < 2; ++m) {
      const int t = rg + 32 * m;
      float4 u = make_float4(0.f, 0.f, 0.f, 0.f);
      if (t < L) {
        const float4 up = ld4(sc.uo + (size_t)(t0 + t) * ldv + h * kD + j0 + jg * 4);
        u = make_float4(up.x - acc[m][0], up.y - acc[m][1], up.z - acc[m][2], up.w - acc[m][3]);
      }
      st4(Us + t * kCols + jg * 4, u);
    }
    __syncthreads();  // Ps free, Us complete

    // M (64 x 64) and K~ = exp(G_L - G_s) k_s into the P buffer
#pragma unroll 4
    for (int e = tid; e < kC * (kC / 4); e += kThreads) {
      const int r = e >> 4, c4 = (e & 15) * 4;
      st4(Ms + r * kLdM + c4, ld4(sc.m + (((size_t)c * d.v_heads + h) * kC + r) * kC + c4));
    }
#pragma unroll 4
    for (int e = tid; e < kC * (kD / 4); e += kThreads) {
      const int s = e >> 5, c4 = (e & 31) * 4;
      float4 v = make_float4(0.f, 0.f, 0.f, 0.f);
      if (s < L) v = f4scale(ld4(sc.kn + (size_t)(t0 + s) * ldk + hk * kD + c4), eGt[s]);
      st4(Kts + s * kD + c4, v);
    }
    __syncthreads();

    // O = exp(G) Q S0 + M U  (M is zero above the diagonal and for padded rows/columns)
#pragma unroll 2
    for (int s0 = 0; s0 < kC; s0 += 4) {
      float4 mv[2], u[4];
#pragma unroll
      for (int m = 0; m < 2; ++m) mv[m] = ld4(Ms + (rg + 32 * m) * kLdM + s0);
#pragma unroll
      for (int q = 0; q < 4; ++q) u[q] = ld4(Us + (s0 + q) * kCols + jg * 4);
#pragma unroll
      for (int m = 0; m < 2; ++m) {
        float* o = acc[2 + m];
        o[0] = fmaf(mv[m].x, u[0].x, fmaf(mv[m].y, u[1].x, fmaf(mv[m].z, u[2].x, fmaf(mv[m].w, u[3].x, o[0]))));
        o[1] = fmaf(mv[m].x, u[0].y, fmaf(mv[m].y, u[1].y, fmaf(mv[m].z, u[2].y, fmaf(mv[m].w, u[3].y, o[1]))));
        o[2] = fmaf(mv[m].x, u[0].z, fmaf(mv[m].y, u[1].z, fmaf(mv[m].z, u[2].z, fmaf(mv[m].w, u[3].z, o[2]))));
        o[3] = fmaf(mv[m].x, u[0].w, fmaf(mv[m].y, u[1].w, fmaf(mv[m].z, u[2].w, fmaf(mv[m].w, u[3].w, o[3]))));
      }
    }
#pragma unroll
    for (int m = 0; m < 2; ++m) {
      const int t = rg + 32 * m;
      if (t < L)
        st4(sc.uo + (size_t)(t0 + t) * ldv + h * kD + j0 + jg * 4,
            make_float4(acc[2 + m][0], acc[2 + m][1], acc[2 + m][2], acc[2 + m][3]));
    }

    // S = exp(G_L) S0 + K~^T U: rows ig*4 .. +3, columns jg*4 .. +3 (only this thread touches them)
    {
      const float gl = eGL[0];
      float sa[4][4];
#pragma unroll
      for (int m = 0; m < 4; ++m) {
        const float4 v = ld4(Ss + (ig * 4 + m) * kLdS + jg * 4);
        sa[m][0] = v.x * gl; sa[m][1] = v.y * gl; sa[m][2] = v.z * gl; sa[m][3] = v.w * gl;
      }
#pragma unroll 4
      for (int s = 0; s < kC; ++s) {
        const float4 k4 = ld4(Kts + s * kD + ig * 4);
        const float4 u = ld4(Us + s * kCols + jg * 4);
        const float kv[4] = {k4.x, k4.y, k4.z, k4.w};
#pragma unroll
        for (int m = 0; m < 4; ++m) {
          sa[m][0] = fmaf(kv[m], u.x, sa[m][0]);
          sa[m][1] = fmaf(kv[m], u.y, sa[m][1]);
          sa[m][2] = fmaf(kv[m], u.z, sa[m][2]);
          sa[m][3] = fmaf(kv[m], u.w, sa[m][3]);
        }
      }
#pragma unroll
      for (int m = 0; m < 4; ++m)
        st4(Ss + (ig * 4 + m) * kLdS + jg * 4, make_float4(sa[m][0], sa[m][1], sa[m][2], sa[m][3]));
    }
    __syncthreads();  // Ss updated; Ms/Kts/Us/eG free for the next chunk
  }
  for (int e = tid; e < kCols * kD; e += kThreads) Sg[e] = Ss[(e & (kD - 1)) * kLdS + (e >> 7)];
}

// out_h[t, perm8(h*128 + j)] = o * rsqrt(mean(o^2) + eps) * norm_w[j] * silu(z[t, h*128 + j]); warp per (t, h)
__global__ void __launch_bounds__(kThreads)
    gdn_norm_kernel(const float* __restrict__ o, const float* __restrict__ z, int ldp, int T, int v_heads,
                    float eps, const float* __restrict__ norm_w, __half* __restrict__ out_h) {
  const int lane = threadIdx.x & 31;
  const int64_t idx = (int64_t)blockIdx.x * (kThreads / 32) + (threadIdx.x >> 5);
  if (idx >= (int64_t)T * v_heads) return;  // whole warps; no block barriers below
  const int t = (int)(idx / v_heads), h = (int)(idx % v_heads);
  const float4 v = ld4(o + (size_t)idx * kD + lane * 4);
  const float ss = warp_sum(v.x * v.x + v.y * v.y + v.z * v.z + v.w * v.w);
  const float r = rsqrtf(ss / kD + eps);
  const float ov[4] = {v.x, v.y, v.z, v.w};
  const float* zr = z + (size_t)t * ldp + h * kD;
  __half* orow = out_h + (size_t)t * v_heads * kD;
#pragma unroll
  for (int q = 0; q < 4; ++q) {
    const int j = lane * 4 + q;
    orow[perm8(h * kD + j)] = __float2half(ov[q] * r * norm_w[j] * silu(zr[j]));
  }
}

void check_dims(const GdnDims& d, const char* op) {
  if (d.dk != kD || d.dv != kD) throw std::invalid_argument(std::string(op) + ": head dims must be 128 x 128");
  if (d.k_heads <= 0 || d.v_heads <= 0 || d.v_heads % d.k_heads)
    throw std::invalid_argument(std::string(op) + ": v_heads must be a positive multiple of k_heads");
}

}  // namespace

int64_t gdn_prefill_scratch_bytes(const GdnDims& d, int64_t T) {
  check_dims(d, "gdn_prefill_scratch_bytes");
  if (T <= 0) return 0;
  return scratch_floats(d, T, nullptr, nullptr) * (int64_t)sizeof(float);
}

void gdn_prefill(const float* conv_out, const float* z, const float* b, const float* a, int ldp, int T,
                 const GdnDims& d, const float* a_log, const float* dt_bias, const float* norm_w, float* state,
                 __half* out_h, void* scratch, int64_t scratch_bytes, cudaStream_t stream) {
  check_dims(d, "gdn_prefill");
  if (T <= 0) return;
  Scratch sc;
  const int64_t need = scratch_floats(d, T, &sc, static_cast<float*>(scratch)) * (int64_t)sizeof(float);
  if (scratch_bytes < need)
    throw std::invalid_argument("gdn_prefill: scratch of " + std::to_string(scratch_bytes) + " bytes, needs " +
                                std::to_string(need));
  if (reinterpret_cast<uintptr_t>(scratch) % 16 || reinterpret_cast<uintptr_t>(conv_out) % 16 ||
      reinterpret_cast<uintptr_t>(state) % 16)
    throw std::invalid_argument("gdn_prefill: scratch, conv_out and state must be 16-byte aligned");
  const int nch = (int)n_chunks(T);
  const int prep_smem = kPrepSmemFloats * (int)sizeof(float), scan_smem = kScanSmemFloats * (int)sizeof(float);
  MR_CHECK(cudaFuncSetAttribute(gdn_prep_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, prep_smem),
           "gdn_prefill (prep smem)");
  MR_CHECK(cudaFuncSetAttribute(gdn_scan_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, scan_smem),
           "gdn_prefill (scan smem)");
  gdn_prep_kernel<<<dim3(nch, d.v_heads), kThreads, prep_smem, stream>>>(conv_out, b, a, ldp, T, d, a_log, dt_bias,
                                                                          sc);
  MR_CHECK_LAUNCH("gdn_prefill (prep)");
  gdn_scan_kernel<<<dim3(d.v_heads, kD / kCols), kThreads, scan_smem, stream>>>(T, d, sc, state);
  MR_CHECK_LAUNCH("gdn_prefill (scan)");
  const int64_t rows = (int64_t)T * d.v_heads;
  gdn_norm_kernel<<<ceil_div(rows, kThreads / 32), kThreads, 0, stream>>>(sc.uo, z, ldp, T, d.v_heads, d.eps,
                                                                          norm_w, out_h);
  MR_CHECK_LAUNCH("gdn_prefill (norm)");
}

}  // namespace monorail
