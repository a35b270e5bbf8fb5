// Gated DeltaNet decode: causal depthwise conv update + SiLU, and the delta-rule recurrence with
// fp32 state followed by the gated RMS norm. T tokens are processed in order inside one launch.
//
// Conv state: a ring of Kc slots per channel, the input at position p in slot p mod Kc (ops.h). A step at
// positions p0.. reads the slots of p0 - Kc + 1 .. p0 - 1 and writes those of p0 .. p0 + T - 1, so for T = 1 no
// slot is both read and written by one step: several blocks can read a channel's window while one of them
// writes the new input (gdn_conv_step, i.e. gdn_conv_decode_kernel: the T = 1 decode step with the conv inside, one
// kernel fewer per GDN layer). Before session 8 the state held the last Kc - 1 inputs oldest first, rewritten by every step.
//
// gdn_step: one block per value head, 512 threads; thread (j = tid/4, part = tid%4) owns state
// column j and 32 of its key rows, interleaved in 16-byte pieces (see gdn_kernel). Sums over k are 32
// in-thread FMAs plus two shuffles.
#include "common.cuh"
#include "ops.h"
#include "pdl.cuh"
#include "stamps.cuh"

namespace monorail {
namespace {

// Slot of position p in a ring of Kc (p may be negative: the zeros before position 0).
__device__ inline int ring_slot(int p, int Kc) {
  const int r = p % Kc;
  return r < 0 ? r + Kc : r;
}
// The first position of a step: read from the step's inputs when given (a captured graph serves every position).
__device__ inline int step_pos(int pos_host, const int32_t* pos_dev) { return pos_dev ? *pos_dev : pos_host; }

// y = silu(sum_j w[j] win[j] + w[Kc-1] x): one channel's conv output, the same products in the same order in every
// kernel below (bit-identical paths). The window's part needs no new input: gdn_conv_decode_kernel loads the weights
// and the window before its PDL wait and sums them after it (summed before the wait, until session 12, the wait
// itself waited for those loads). Loops unrolled to the largest Kc with guards: the arrays stay in registers.
__device__ inline float conv_window_sum(const float (&wc)[8], const float (&win)[8], int Kc) {
  float y = 0.f;
#pragma unroll
  for (int j = 0; j < 7; ++j)
    if (j < Kc - 1) y = j == 0 ? wc[0] * win[0] : fmaf(wc[j], win[j], y);
  return y;
}
__device__ inline float conv_finish(float window_sum, float wlast, float xin) { return silu(fmaf(wlast, xin, window_sum)); }
// The window after one more input: drop the oldest, append xin.
__device__ inline void conv_shift(float (&win)[8], int Kc, float xin) {
#pragma unroll
  for (int j = 0; j < 7; ++j)
    if (j < Kc - 2) win[j] = win[j + 1];
#pragma unroll
  for (int j = 0; j < 7; ++j)
    if (j == Kc - 2) win[j] = xin;
}
// Channel c's weights (wc[0 .. Kc-2], wlast = w[Kc-1]) and the window of the step at p0 (inputs p0 - Kc + 1 ..
// p0 - 1, oldest first).
__device__ inline void conv_load(const float* w, const float* state, int c, int Kc, int p0, float (&wc)[8],
                                 float (&win)[8], float& wlast) {
#pragma unroll
  for (int j = 0; j < 7; ++j)
    if (j < Kc - 1) {
      win[j] = state[(size_t)c * Kc + ring_slot(p0 - (Kc - 1) + j, Kc)];
      wc[j] = w[(size_t)c * Kc + j];
    }
  wlast = w[(size_t)c * Kc + Kc - 1];
}

// The decode step's form of conv_load (session 24): the channel's whole ring (Kc slots in slot order) and its
// weights, with no address that depends on the position, so that every load goes out at once before the PDL wait;
// conv_load's window addresses waited for the position (a round trip from the step's inputs) before they could
// be issued. conv_window_from_ring then picks the window out of the registers once the position is known.
__device__ inline void conv_load_ring(const float* w, const float* state, int c, int Kc, float (&ring)[8],
                                      float (&wc)[8], float& wlast) {
#pragma unroll
  for (int j = 0; j < 7; ++j)
    if (j < Kc - 1) wc[j] = w[(size_t)c * Kc + j];
  wlast = w[(size_t)c * Kc + Kc - 1];
#pragma unroll
  for (int q = 0; q < 8; ++q)
    if (q < Kc) ring[q] = state[(size_t)c * Kc + q];
}
// win[j] = the input at position p0 - Kc + 1 + j (what conv_load reads), chosen by unrolled compares so that the ring
// stays in registers.
__device__ inline void conv_window_from_ring(const float (&ring)[8], int Kc, int p0, float (&win)[8]) {
  int slot = ring_slot(p0 - (Kc - 1), Kc);
#pragma unroll
  for (int j = 0; j < 7; ++j)
    if (j < Kc - 1) {
      float v = 0.f;
#pragma unroll
      for (int q = 0; q < 8; ++q)
        if (q == slot) v = ring[q];
      win[j] = v;
      slot = slot + 1 == Kc ? 0 : slot + 1;
    }
}

__global__ void conv_kernel(const float* x, int ldx, int T, int C, int Kc, const float* w, float* state, int pos_host,
                            const int32_t* pos_dev, float* out) {
  MR_WARP_STAMP(kStampConv, state);
  const int c = blockIdx.x * blockDim.x + threadIdx.x;
  float win[8];  // Kc - 1 <= 7 previous inputs, oldest first
  float wc[8], wlast = 0.f;
  // weights and the window (written by this layer one step earlier) before the wait (pdl.cuh); the step's
  // inputs were copied before the graph started
  const int p0 = step_pos(pos_host, pos_dev);
  if (c < C) conv_load(w, state, c, Kc, p0, wc, win, wlast);
  pdl_wait();
  pdl_trigger();
  if (c >= C) return;
  for (int t = 0; t < T; ++t) {
    float xin = x[(size_t)t * ldx + c];
    out[(size_t)t * C + c] = conv_finish(conv_window_sum(wc, win, Kc), wlast, xin);
    conv_shift(win, Kc, xin);
    state[(size_t)c * Kc + ring_slot(p0 + t, Kc)] = xin;
  }
}

// Prefill-sized T: the loop above runs T dependent iterations per channel on only C threads (48 layers x
// 0.2 s per 8K-token prompt on the H200, bench/NOTES.md session 3 call 3). Here each thread takes one
// channel and a run of kConvRun tokens: y_t = sum_j w_j in(t - (Kc - 1) + j), where in(s) = x[s] for
// s >= 0 and the saved window state[Kc - 1 + s] for s < 0 (oldest first). Same products and order as
// conv_kernel, so both give bit-identical outputs.
constexpr int kConvSequentialMaxT = 16;
constexpr int kConvRun = 16;

__global__ void conv_parallel_kernel(const float* x, int ldx, int T, int C, int Kc, const float* w,
                                     const float* state, int p0, float* out) {
  const int c = blockIdx.x * blockDim.x + threadIdx.x;
  if (c >= C) return;
  const int t0 = blockIdx.y * kConvRun;
  float wc[8], win[8];
  const float wlast = w[(size_t)c * Kc + Kc - 1];
#pragma unroll
  for (int j = 0; j < 7; ++j) {  // inputs t0 - (Kc - 1) .. t0 - 1, oldest first
    const int s = t0 - (Kc - 1) + j;
    if (j < Kc - 1) {
      wc[j] = w[(size_t)c * Kc + j];
      win[j] = s >= 0 ? x[(size_t)s * ldx + c] : state[(size_t)c * Kc + ring_slot(p0 + s, Kc)];
    }
  }
  const int t1 = min(T, t0 + kConvRun);
  for (int t = t0; t < t1; ++t) {
    const float xin = x[(size_t)t * ldx + c];
    out[(size_t)t * C + c] = conv_finish(conv_window_sum(wc, win, Kc), wlast, xin);
    conv_shift(win, Kc, xin);
  }
}

// The ring after T > Kc - 1 tokens: the last Kc - 1 inputs into their slots.
__global__ void conv_state_kernel(const float* x, int ldx, int T, int C, int Kc, int p0, float* state) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= C * (Kc - 1)) return;
  const int c = i / (Kc - 1), j = i - c * (Kc - 1);
  const int t = T - (Kc - 1) + j;
  state[(size_t)c * Kc + ring_slot(p0 + t, Kc)] = x[(size_t)t * ldx + c];
}

// A verify step's conv checkpoints (conv_ring_checkpoints): thread i is slot i % Kc of channel i / Kc; image t gets
// the slot as it stands after token t of the step at p0, i.e. the ring the step found with the inputs of positions
// p0 .. p0 + t written into their slots (a later input over an earlier one in the same slot, as the step itself
// writes them). Slots no input reaches keep the ring's value: older inputs, or the zeros of positions below 0.
// Launched before the step's conv (which rewrites the ring after its PDL wait): the ring, written one step earlier,
// and the position are read before the wait, the inputs (the projection just computed) after it.
__global__ void conv_checkpoint_kernel(const float* x, int ldx, int T, int C, int Kc, const float* state,
                                       int pos_host, const int32_t* pos_dev, float* ckpt, int64_t ckpt_stride) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  const bool mine = i < C * Kc;
  const int p0 = step_pos(pos_host, pos_dev);
  float v = mine ? state[i] : 0.f;
  pdl_wait();
  pdl_trigger();
  if (!mine) return;
  const int c = i / Kc, slot = i - c * Kc;
  for (int t = 0; t < T - 1; ++t) {
    if (ring_slot(p0 + t, Kc) == slot) v = x[(size_t)t * ldx + c];
    ckpt[t * ckpt_stride + i] = v;
  }
}

constexpr int kDk = 128, kDv = 128;

// Thread (j = tid / 4, part = tid % 4) owns state column j (one value dim), 32 of its 128 key rows:
// s[4m + c] = S[j][16m + 4part + c], m = 0..7, c = 0..3. The state is stored v-major [dv][dk], so for
// each m a warp reads 8 columns x 64 contiguous bytes (8 cache lines per float4 load). The earlier
// mapping (rows 32part .. 32part + 31 per thread) touched 32 lines per load instruction and made the
// kernel L1-wavefront bound (ncu: 12.5 us per layer, DRAM 5 %, 0.09 issues per cycle); it also read
// ks/qs with a 4-way bank conflict, which this interleave removes. Both kernels below use this mapping.

// This thread's 32 state values (S: its first, s[4m + c] = S[16m + c]) in and out, 16 bytes at a time.
__device__ __forceinline__ void load_state(const float* S, float (&s)[32]) {
#pragma unroll
  for (int m = 0; m < 8; ++m) {
    const float4 v = *reinterpret_cast<const float4*>(S + 16 * m);
    s[4 * m] = v.x; s[4 * m + 1] = v.y; s[4 * m + 2] = v.z; s[4 * m + 3] = v.w;
  }
}
__device__ __forceinline__ void store_state(float* S, const float (&s)[32]) {
#pragma unroll
  for (int m = 0; m < 8; ++m)
    *reinterpret_cast<float4*>(S + 16 * m) = make_float4(s[4 * m], s[4 * m + 1], s[4 * m + 2], s[4 * m + 3]);
}

// One token of the delta rule on this thread's 32 state values s (column j, its 32 key rows; k4 / q4: this thread's
// pieces of the normalised key and query in shared memory): S *= decay; kv = S^T k (over the column's 4 threads);
// S += k kn (beta (v - kv kn)); returns this thread's part of o = S^T q (the caller adds the column's 4 parts).
// Shared by gdn_kernel and gdn_conv_decode_kernel, so both run the same products in the same order.
__device__ __forceinline__ float delta_rule_token(float (&s)[32], const float4* k4, const float4* q4, float decay,
                                                  float kn, float beta, float vj) {
  float kv = 0.f;
#pragma unroll
  for (int m = 0; m < 8; ++m) {
    const float4 kk = k4[4 * m];
    s[4 * m] *= decay; s[4 * m + 1] *= decay; s[4 * m + 2] *= decay; s[4 * m + 3] *= decay;
    kv = fmaf(s[4 * m], kk.x, kv);
    kv = fmaf(s[4 * m + 1], kk.y, kv);
    kv = fmaf(s[4 * m + 2], kk.z, kv);
    kv = fmaf(s[4 * m + 3], kk.w, kv);
  }
  kv += __shfl_xor_sync(0xffffffffu, kv, 1);
  kv += __shfl_xor_sync(0xffffffffu, kv, 2);
  const float u = beta * (vj - kv * kn);
  float o = 0.f;
#pragma unroll
  for (int m = 0; m < 8; ++m) {
    const float4 kk = k4[4 * m], qq = q4[4 * m];
    s[4 * m] = fmaf(kk.x * kn, u, s[4 * m]);
    s[4 * m + 1] = fmaf(kk.y * kn, u, s[4 * m + 1]);
    s[4 * m + 2] = fmaf(kk.z * kn, u, s[4 * m + 2]);
    s[4 * m + 3] = fmaf(kk.w * kn, u, s[4 * m + 3]);
    o = fmaf(s[4 * m], qq.x, o);
    o = fmaf(s[4 * m + 1], qq.y, o);
    o = fmaf(s[4 * m + 2], qq.z, o);
    o = fmaf(s[4 * m + 3], qq.w, o);
  }
  return o;
}

// The conv inputs of gdn_conv_decode_kernel (below).
struct ConvIn {
  const float* w;
  float* state;
  int Kc, pos_host;
  const int32_t* pos_dev;
};
// CKPT (a verify step that keeps checkpoints, gdn_step's ckpt): after each token t < T - 1 the state is also stored
// into checkpoint image t, at the same offset as in the layer's state (ckpt: the layer's state in image 0, images
// ckpt_stride floats apart). A template argument, so that the step without checkpoints compiles as before.
template <bool CKPT>
__global__ void __launch_bounds__(512) gdn_kernel(const float* conv_out, const float* z, const float* b,
                                                  const float* a, int ldp, int T, GdnDims d, const float* a_log,
                                                  const float* dt_bias, const float* norm_w, float* state,
                                                  __half* out_h, int out_lanes, float* ckpt, int64_t ckpt_stride) {
  MR_WARP_STAMP(kStampGdnStep, state);
  __shared__ __align__(16) float qs[kDk];
  __shared__ __align__(16) float ks[kDk];
  __shared__ float red[32];
  __shared__ float gb[2];
  const int h = blockIdx.x, hk = h / (d.v_heads / d.k_heads);
  const int tid = threadIdx.x, j = tid >> 2, part = tid & 3;
  const int conv_dim = 2 * d.k_heads * kDk + d.v_heads * kDv;
  const size_t own = ((size_t)h * kDv + j) * kDk + 4 * part;  // this thread's values in the state (and in an image)
  float* S = state + own;
  float s[32];
  load_state(S, s);
  const float q_scale = rsqrtf((float)kDk);
  const float neg_a = -expf(a_log[h]);
  const float nw = norm_w[j];
  const int ch_qk = (tid >= 128 ? d.k_heads * kDk : 0) + hk * kDk + (tid & 127);  // tid < 256
  const int ch_v = 2 * d.k_heads * kDk + h * kDv + j;
  // the state (this layer's, written one step earlier) is read before the wait
  pdl_wait();
  pdl_trigger();
  for (int t = 0; t < T; ++t) {
    const float* row = conv_out + (size_t)t * conv_dim;
    // every global read of this token is issued before the first barrier, so they share one round trip
    // (and, for t = 0, the state loads' round trip)
    float qk = 0.f;
    if (tid < 256) qk = row[ch_qk];
    float vj = row[ch_v];
    const float zz = z[(size_t)t * ldp + h * kDv + j];
    float av = 0.f, bv = 0.f;
    if (tid == 0) {
      av = a[(size_t)t * ldp + h] + dt_bias[h];
      bv = b[(size_t)t * ldp + h];
    }
    // q, k: L2-normalised (eps 1e-6) key head hk; warps 0-3 take q, 4-7 take k
    if (tid < 256) {
      const float sq = warp_sum(qk * qk);
      if ((tid & 31) == 0) red[tid >> 5] = sq;
      if (tid >= 128) ks[tid & 127] = qk; else qs[tid] = qk;
    }
    if (tid == 0) {
      const float sp = av > 20.f ? av : log1pf(expf(av));
      gb[0] = expf(neg_a * sp);          // decay exp(g)
      gb[1] = 1.f / (1.f + expf(-bv));   // beta
    }
    __syncthreads();
    const float qn = rsqrtf(red[0] + red[1] + red[2] + red[3] + 1e-6f) * q_scale;
    const float kn = rsqrtf(red[4] + red[5] + red[6] + red[7] + 1e-6f);
    const float decay = gb[0], beta = gb[1];
    const float4* k4 = reinterpret_cast<const float4*>(ks) + part;  // piece m of this thread: k4[4m]
    const float4* q4 = reinterpret_cast<const float4*>(qs) + part;
    float o = delta_rule_token(s, k4, q4, decay, kn, beta, vj);
    if constexpr (CKPT)
      if (t < T - 1) store_state(ckpt + t * ckpt_stride + own, s);  // the state after token t (the last: below)
    o += __shfl_xor_sync(0xffffffffu, o, 1);
    o += __shfl_xor_sync(0xffffffffu, o, 2);
    o *= qn;
    // gated RMS norm over this head's dv outputs (each value held by 4 threads: count it once)
    __syncthreads();  // red[] reuse
    const float ss = block_sum(part == 0 ? o * o : 0.f, red);
    const float r = rsqrtf(ss / kDv + d.eps);
    if (part == 0) {
      const int k = h * kDv + j, K = d.v_heads * kDv;  // out_lanes: the output GEMV reads the lanes layout
      out_h[(size_t)t * K + (out_lanes ? lanes_pos(k, K) : perm8(k))] = __float2half(o * r * nw * silu(zz));
    }
    __syncthreads();
  }
  store_state(S, s);
}

// The T = 1 decode step with the conv inside (gdn_conv_step): gdn_kernel's thread roles and arithmetic, in the same
// order (the same sums, bit for bit up to the compiler's contractions), plus the conv update + SiLU of the channels
// the block reads (q and k of its key head: threads 0..255, one channel each; v of column j: the 4 threads of the
// column, redundantly), conv_kernel's arithmetic exactly. Two changes of schedule against session 12's kernel
// (gdn_kernel with the conv inside), worth -0.077 ms a step at depth 0 (bench/NOTES.md, session 13 call 2):
//  - the conv's weights and windows are loaded before the PDL wait but summed after it, so no load is waited for
//    ahead of the wait (this block becomes resident only as gdn_in's block on its SM exits, near gdn_in's end, so a
//    DRAM round trip there sat on the step's critical path);
//  - the new state is stored as soon as it is known, so its 64 KB drain while the gated norm's reduction runs.
// (Also measured and removed in call 2: a head over a thread block cluster of 2 or 4 blocks, the norm's partial
// sums exchanged through distributed shared memory, so that the state's 64 KB in and out spread over several SMs:
// 4.853 / 4.871 ms a step against 4.756 for this kernel.)
// RING (session 24, the default; set_gdn_conv_ring): each conv window read as its channel's whole ring, so that no
// load before the wait has an address waiting for the position, and the position read after the wait with the
// step's other inputs (bench/sass_prewait.py found the window loads and the write slot's arithmetic waiting for it
// before the wait). !RING: the earlier form, kept to measure the difference on whole steps. Bit-equal (tests).
template <bool RING>
__global__ void __launch_bounds__(512) gdn_conv_decode_kernel(const float* x, const float* z, const float* b,
                                                              const float* a, GdnDims d, const float* a_log,
                                                              const float* dt_bias, const float* norm_w, float* state,
                                                              __half* out_h, ConvIn cv, int out_lanes) {
  MR_WARP_STAMP(kStampGdnStep, state);
  __shared__ __align__(16) float qs[kDk];
  __shared__ __align__(16) float ks[kDk];
  __shared__ float red[32];
  __shared__ float gb[2];
  const int h = blockIdx.x, hk = h / (d.v_heads / d.k_heads);
  const int tid = threadIdx.x, part = tid & 3, j = tid >> 2;
  float* S = state + ((size_t)h * kDv + j) * kDk + 4 * part;
  float s[32];
  load_state(S, s);
  const float q_scale = rsqrtf((float)kDk);
  const float neg_a = -expf(a_log[h]);
  const float nw = norm_w[j];
  // threads 0..255: q / k channel tid (q below 128) of key head hk; every thread: the v channel of column j. Their
  // conv weights and whole rings (written one step earlier) are loaded before the wait, with no address waiting for
  // the position; the window is picked from the ring and summed after it
  const int ch_qk = (tid >= kDk ? d.k_heads * kDk : 0) + hk * kDk + (tid & (kDk - 1));  // tid < 256
  const int ch_v = 2 * d.k_heads * kDk + h * kDv + j;
  float wc_qk[8], ring_qk[8], win_qk[8], wl_qk = 0.f;
  float wc_v[8], ring_v[8], win_v[8], wl_v;
  int p0 = 0;
  if constexpr (RING) {
    if (tid < 2 * kDk) conv_load_ring(cv.w, cv.state, ch_qk, cv.Kc, ring_qk, wc_qk, wl_qk);
    conv_load_ring(cv.w, cv.state, ch_v, cv.Kc, ring_v, wc_v, wl_v);
  } else {
    p0 = step_pos(cv.pos_host, cv.pos_dev);
    if (tid < 2 * kDk) conv_load(cv.w, cv.state, ch_qk, cv.Kc, p0, wc_qk, win_qk, wl_qk);
    conv_load(cv.w, cv.state, ch_v, cv.Kc, p0, wc_v, win_v, wl_v);
  }
  pdl_wait();
  pdl_trigger();
  // every global read of the step is issued before the first barrier, so they share one round trip; with RING the
  // position too (read before the wait, the slot's arithmetic waited for it there)
  if constexpr (RING) p0 = step_pos(cv.pos_host, cv.pos_dev);
  const int slot = ring_slot(p0, cv.Kc);
  float qk = tid < 2 * kDk ? x[ch_qk] : 0.f;
  float vj = x[ch_v];
  const float zz = z[h * kDv + j];
  float av = 0.f, bv = 0.f;
  if (tid == 0) {
    av = a[h] + dt_bias[h];
    bv = b[h];
  }
  // each key head's q / k channels are read by the blocks of its v_heads / k_heads value heads: all read the window,
  // the first of them writes the new input, into a slot no block of this step uses (the ring above; with RING every
  // block loads that slot too, before its wait, but the window it picks is the other Kc - 1)
  if (tid < 2 * kDk) {
    if (h % (d.v_heads / d.k_heads) == 0) cv.state[(size_t)ch_qk * cv.Kc + slot] = qk;
    if constexpr (RING) conv_window_from_ring(ring_qk, cv.Kc, p0, win_qk);
    qk = conv_finish(conv_window_sum(wc_qk, win_qk, cv.Kc), wl_qk, qk);
    // q, k: L2-normalised (eps 1e-6) key head hk; warps 0-3 take q, 4-7 take k
    const float sq = warp_sum(qk * qk);
    if ((tid & 31) == 0) red[tid >> 5] = sq;
    if (tid >= kDk) ks[tid & (kDk - 1)] = qk; else qs[tid] = qk;
  }
  if (part == 0) cv.state[(size_t)ch_v * cv.Kc + slot] = vj;
  if constexpr (RING) conv_window_from_ring(ring_v, cv.Kc, p0, win_v);
  vj = conv_finish(conv_window_sum(wc_v, win_v, cv.Kc), wl_v, vj);
  if (tid == 0) {
    const float sp = av > 20.f ? av : log1pf(expf(av));
    gb[0] = expf(neg_a * sp);
    gb[1] = 1.f / (1.f + expf(-bv));
  }
  __syncthreads();
  const float qn = rsqrtf(red[0] + red[1] + red[2] + red[3] + 1e-6f) * q_scale;
  const float kn = rsqrtf(red[4] + red[5] + red[6] + red[7] + 1e-6f);
  const float decay = gb[0], beta = gb[1];
  const float4* k4 = reinterpret_cast<const float4*>(ks) + part;
  const float4* q4 = reinterpret_cast<const float4*>(qs) + part;
  float o = delta_rule_token(s, k4, q4, decay, kn, beta, vj);
  store_state(S, s);  // the new state, stored while the norm below runs
  o += __shfl_xor_sync(0xffffffffu, o, 1);
  o += __shfl_xor_sync(0xffffffffu, o, 2);
  o *= qn;
  // gated RMS norm over this head's dv outputs (each value held by 4 threads: count it once); block_sum's first
  // barrier follows every thread's reads of red[0..7] above
  const float ss = block_sum(part == 0 ? o * o : 0.f, red);
  const float rn = rsqrtf(ss / kDv + d.eps);
  if (part == 0) {
    const int k = h * kDv + j, K = d.v_heads * kDv;
    out_h[out_lanes ? lanes_pos(k, K) : perm8(k)] = __float2half(o * rn * nw * silu(zz));
  }
}

}  // namespace

void conv_update_silu(const float* x, int ldx, int T, int C, int Kc, const float* w, float* state, int pos_host,
                      const int32_t* pos_dev, float* out, cudaStream_t stream) {
  if (Kc < 1 || Kc > 8) throw std::invalid_argument("conv_update_silu: kernel width must be 1..8");
  if (T <= kConvSequentialMaxT) {
    launch_pdl("conv_update_silu", conv_kernel, dim3(ceil_div(C, 256)), dim3(256), 0, stream, x, ldx, T, C, Kc, w, state,
               pos_host, pos_dev, out);
    return;
  }
  if (pos_dev) throw std::invalid_argument("conv_update_silu: more than 16 tokens take the position from the host");
  // prefill: outputs in parallel over (channel, run of tokens), then the new window from the last inputs
  // (T > 16 >= Kc - 1, so it never depends on the old state, which the first launch is still reading)
  conv_parallel_kernel<<<dim3(ceil_div(C, 256), ceil_div(T, kConvRun)), 256, 0, stream>>>(x, ldx, T, C, Kc, w, state,
                                                                                          pos_host, out);
  MR_CHECK_LAUNCH("conv_update_silu");
  if (Kc > 1) {
    conv_state_kernel<<<ceil_div(C * (Kc - 1), 256), 256, 0, stream>>>(x, ldx, T, C, Kc, pos_host, state);
    MR_CHECK_LAUNCH("conv_update_silu: state");
  }
}

void conv_ring_checkpoints(const float* x, int ldx, int T, int C, int Kc, const float* state, int pos_host,
                           const int32_t* pos_dev, float* ckpt, int64_t ckpt_stride, cudaStream_t stream) {
  if (Kc < 1 || Kc > 8) throw std::invalid_argument("conv_ring_checkpoints: kernel width must be 1..8");
  if (T < 2 || T > kMaxStepTokens)
    throw std::invalid_argument("conv_ring_checkpoints: a verify step runs 2..16 tokens");
  if (ckpt_stride < (int64_t)C * Kc) throw std::invalid_argument("conv_ring_checkpoints: images overlap");
  launch_pdl("conv_ring_checkpoints", conv_checkpoint_kernel, dim3(ceil_div(C * Kc, 256)), dim3(256), 0, stream, x,
             ldx, T, C, Kc, state, pos_host, pos_dev, ckpt, ckpt_stride);
}

void gdn_step(const float* conv_out, const float* z, const float* b, const float* a, int ldp, int T,
              const GdnDims& d, const float* a_log, const float* dt_bias, const float* norm_w, float* state,
              __half* out_h, cudaStream_t stream, int out_layout, float* ckpt, int64_t ckpt_stride) {
  if (d.dk != kDk || d.dv != kDv) throw std::invalid_argument("gdn_step: head dims must be 128 x 128");
  if (d.v_heads % d.k_heads) throw std::invalid_argument("gdn_step: v_heads must be a multiple of k_heads");
  const int out_lanes = out_layout == GEMV_X_LANES;
  if (!ckpt) {
    launch_pdl("gdn_step", gdn_kernel<false>, dim3(d.v_heads), dim3(512), 0, stream, conv_out, z, b, a, ldp, T, d,
               a_log, dt_bias, norm_w, state, out_h, out_lanes, ckpt, ckpt_stride);
    return;
  }
  // the images are stored 16 bytes at a time, at the state's own offsets
  if (ckpt_stride < (int64_t)d.v_heads * kDv * kDk || ckpt_stride % 4 || reinterpret_cast<uintptr_t>(ckpt) % 16)
    throw std::invalid_argument("gdn_step: checkpoint images must not overlap and must be 16-byte aligned");
  launch_pdl("gdn_step", gdn_kernel<true>, dim3(d.v_heads), dim3(512), 0, stream, conv_out, z, b, a, ldp, T, d, a_log,
             dt_bias, norm_w, state, out_h, out_lanes, ckpt, ckpt_stride);
}

static bool g_conv_ring = true;  // set_gdn_conv_ring
void set_gdn_conv_ring(bool on) { g_conv_ring = on; }

void gdn_conv_step(const float* x, const float* z, const float* b, const float* a, const GdnDims& d, int Kc,
                   const float* conv_w, float* conv_state, int pos_host, const int32_t* pos_dev, const float* a_log,
                   const float* dt_bias, const float* norm_w, float* state, __half* out_h, cudaStream_t stream,
                   int out_layout) {
  if (d.dk != kDk || d.dv != kDv) throw std::invalid_argument("gdn_conv_step: head dims must be 128 x 128");
  if (d.v_heads % d.k_heads) throw std::invalid_argument("gdn_conv_step: v_heads must be a multiple of k_heads");
  if (Kc < 1 || Kc > 8) throw std::invalid_argument("gdn_conv_step: kernel width must be 1..8");
  launch_pdl("gdn_conv_step", g_conv_ring ? gdn_conv_decode_kernel<true> : gdn_conv_decode_kernel<false>,
             dim3(d.v_heads), dim3(512), 0, stream, x, z, b, a, d, a_log, dt_bias, norm_w, state, out_h,
             ConvIn{conv_w, conv_state, Kc, pos_host, pos_dev}, out_layout == GEMV_X_LANES);
}

MR_STAMPS_TU(gdn)

}  // namespace monorail
