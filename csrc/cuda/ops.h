// Contracts of the decode ops (token counts T = 1..16). Host-callable launchers; each launches on
// `stream`, checks the launch and throws CudaError naming the op. All pointers are device memory.
//
// Layouts: residual stream fp32 [T, H] natural order. GEMV inputs fp16 [T, K] in perm8 order
// (common.cuh). Quantized matrices: canonical groupwise layout (engine/quant.py), codes [N, K/2]
// (4/5/6-bit low nibbles) or [N, K] (8-bit), high bits [N, K/8] (5) or [N, K/4] (6), fp16 scales
// [N, K/G]; value = (code - 2^(B-1)) * scale.
#pragma once
#include <cstdint>
#include <tuple>
#include <utility>
#include <vector>

#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include "../alloc_sequence.h"

namespace monorail {

enum GemvEpilogue : int {
  GEMV_STORE = 0,   // out_f32[t, n] = W x_t
  GEMV_ADD = 1,     // out_f32[t, n] += W x_t           (residual add)
  GEMV_SWIGLU = 2,  // rows interleaved (gate_p, up_p): out_h[t, perm8(p)] = silu(gate) * up
};

// Element order of a GEMV's fp16 input (x, and the SwiGLU output that feeds the next GEMV): GEMV_X_PERM8 (perm8(),
// every kernel reads it) or GEMV_X_LANES (common.cuh lanes_pos(): read by the T = 1 4-bit variant 4 only, whose
// x loads it makes contiguous across the warp). qgemv_x_layout says which one a GEMV of W wants.
enum GemvXLayout : int { GEMV_X_PERM8 = 0, GEMV_X_LANES = 1 };

// y = W x for T tokens. Numerics: codes are combined with x in fp16 over 16 products (every width at
// T = 1, 4-bit at T > 1), every other sum is fp32. ldo: row stride of the output in elements.
// x_layout: the order of x (GEMV_X_LANES only where qgemv_x_layout says so, else invalid_argument); out_layout:
// the order the SwiGLU epilogue writes out_h in (the next GEMV's qgemv_x_layout).
void qgemv(const QMatrix& W, const __half* x, int T, int epilogue, float* out_f32, __half* out_h, int ldo,
           cudaStream_t stream, int x_layout = GEMV_X_PERM8, int out_layout = GEMV_X_PERM8);
// The input order a GEMV of W over T tokens reads fastest on the current route: GEMV_X_LANES where that is variant 4
// (T = 1, 4-bit) and set_qgemv_lanes is on, else GEMV_X_PERM8. The engine asks it when it builds a step, so the
// producer of x (gate_up's SwiGLU epilogue, the GDN step, the attention combine) writes what the consumer reads.
int qgemv_x_layout(const QMatrix& W, int T);
// Lets a benchmark compare the two layouts on whole steps (default on); off, qgemv_x_layout always says perm8.
void set_qgemv_lanes(bool on);
// 4-bit GEMVs of T = 2..16 tokens on tensor cores (qgemv_mma.cuh: the matrix streamed once for all tokens) when on;
// off runs the per-token kernel. On by default (session 40).
void set_qgemv_mma(bool on);
bool qgemv_mma();
// Its shape of work (a benchmark's switch; captured graphs keep the one they were captured with): the warps an SM
// should get, K split until the row tiles give that many (0, the default: by the rows), and the 128-element spans a
// warp loads together (2, 4, or 0, the default since session 45: 4 for T <= 8, 2 above; 8-bit loads half as many).
// And the rows a warp owns: 32 or 16, or 0, the default since session 46: 16 for T <= 6, 32 above (warps an SM 0: 16
// with 16 rows, 8 with 32).
void set_qgemv_mma_shape(int warps_per_sm, int spans, int rows_per_warp = 0);
std::tuple<int, int, int> qgemv_mma_shape();
std::tuple<int, int, int> qgemv_mma_shape_for(int T);  // the shape a T-token GEMV runs under (0s resolved)
// Warps a block of the tensor-core GEMV (4, the default, 2 or 1): the same work a warp, spread over the SMs in finer
// blocks (qgemv_mma.cu g_mma_block_warps).
void set_qgemv_mma_block_warps(int warps);
int qgemv_mma_block_warps();
// Its passes whose spans all lie within K and the split run without bounds checks (on; session 47) or every pass with
// them (off, the default until a GPU has run the unchecked form; session 49): the same sums (qgemv_mma.cu
// g_mma_unchecked).
void set_qgemv_mma_unchecked_passes(bool on);
bool qgemv_mma_unchecked_passes();
// The tensor-core GEMV with each pass's weight loads all issued before its first product (on) or as ptxas schedules
// them (off); on by default since session 45; the same sums (qgemv_mma.cu g_mma_loads_first).
void set_qgemv_mma_loads_first(bool on);
bool qgemv_mma_loads_first();
// fp32 scratch the tensor-core GEMV splits K over when its matrix has few row tiles (the 5120-row outputs): set for
// the duration of a decode step by the engine (its workspace's gemv_part), restored after. Without scratch (or too
// little for a split) the kernel runs unsplit, with the same result up to the order of the sums.
struct GemvScratchScope {
  GemvScratchScope(float* scratch, int64_t floats);
  ~GemvScratchScope();
  GemvScratchScope(const GemvScratchScope&) = delete;
  GemvScratchScope& operator=(const GemvScratchScope&) = delete;
  float* saved_ptr;
  int64_t saved_floats;
};
// The split count the tensor-core GEMV would use for N x K over T tokens with `floats` of scratch (1: unsplit).
int qgemv_mma_splits(int N, int K, int T, int64_t floats);
// Variant 49 (down's route at 4 bits) for N rows: its blocks carry idle warps so that an SM holds at most its fair
// share of them, ceil(blocks / SMs), where the kernel alone would take more (qgemv.cu); what a launch uses.
struct SpreadLaunch {
  int blocks = 0, threads = 0, blocks_per_sm = 0, fair_share = 0;
};
SpreadLaunch qgemv_spread_launch(int N, bool x_lanes);
// The choice behind it: per_sm_by_idle[i] = the blocks an SM holds with i idle warps a block (occupancy calculator);
// the least i whose count is at most fair_share, or 0 when none is (no idle warps where they cannot reach it).
int spread_idle_warps(const std::vector<int>& per_sm_by_idle, int fair_share);

// Which T = 1 GEMV launch variant to use: 0 routes by shape and width (default), 1..49 force one (qgemv.cu
// launch_bits: 1..15 and 20..44 are 4-bit kernels (20..35, 37, 38: integer dot products; 36 also takes 5 / 6 bits),
// 16..19 the cp.async ring kernel and 45 / 46 the column split for every width; 47, in qgemv_normed only, the walk
// kernel (row groups of 4 on fp16 x in shared memory) with the norm fused at 5 / 6 / 8 bits (store or SwiGLU),
// elsewhere the generic kernel; 48, at 5 / 6 / 8 bits, the same walk on the given fp16 x with every epilogue (the
// 8-bit route), at 4 bits the generic kernel; 49, 4-bit, 36 spread evenly over the SMs (qgemv_spread_launch)).
void set_qgemv_variant(int v);
// Per-shape overrides of the T = 1 route (rows N, columns K -> variant; 0 removes one), below a forced
// set_qgemv_variant: lets a benchmark try a route on whole decode steps without rebuilding.
void set_qgemv_shape_variant(int N, int K, int v);
void clear_qgemv_shape_variants();

// qgemv on x = rmsnorm_to_gemv_input(resid, T, K, norm_w, eps, add_one): for T = 1 matrices whose route takes the
// norm fused (qgemv_fuses_norm: 4-bit on the integer-dot kernels, x never rounded to fp16; any width on the column
// split 45 / 46 and 5 / 6 / 8 bits on the walk 47, x rounded as the norm kernel rounds it) every block of the GEMV
// computes the norm of resid itself (one kernel); otherwise the norm runs first, into xin ([T, K] fp16 scratch).
// keep_x: xin holds the normalised x afterwards (fp16 perm8, as rmsnorm_to_gemv_input writes it), for a second GEMV on
// the same input: with set_qgemv_keep_x_fused on, the fused kernel of variant 30 writes it as it goes; otherwise (and
// on any other route) the norm kernel runs first as above.
void qgemv_normed(const QMatrix& W, const float* resid, const float* norm_w, float eps, bool add_one, int T,
                  int epilogue, float* out_f32, __half* out_h, int ldo, __half* xin, cudaStream_t stream,
                  int out_layout = GEMV_X_PERM8, bool keep_x = false);
// qgemv_normed's keep_x by variant 30 writing x (on, the default: q4-27b 5.524 -> 5.467 ms a step, session 16) or by
// the norm kernel (off; bench/step_probe.py --keep-x-fused 0,1 compares them).
void set_qgemv_keep_x_fused(bool on);
bool qgemv_fuses_norm(const QMatrix& W, int T);  // with the store epilogue
// A split projection's two segments on one normalised input x = rmsnorm(resid) * (norm_w + add_one): out[0, head.rows)
// = head x and out[head.rows, head.rows + tail.rows) = tail x (T = 1; T > 1 rows ldo apart). Where
// qgemv_split_fuses (set_qgemv_split_fused on, T = 1, a 4-bit head routed to the fused variant 30, a 5/6/8-bit tail of
// the same K) one kernel runs both, the tail on the warps the head leaves idle; otherwise qgemv_normed(head, keep_x)
// then qgemv(tail, xin). xin: [T, K] fp16 scratch.
void qgemv_normed_split(const QMatrix& head, const QMatrix& tail, const float* resid, const float* norm_w, float eps,
                        bool add_one, int T, float* out, int ldo, __half* xin, cudaStream_t stream);
bool qgemv_split_fuses(const QMatrix& head, const QMatrix& tail, int T);
// qgemv_normed_split in one launch (on, the default: q4-27b 5.422 -> 5.263 ms a step, session 16) or two (off).
void set_qgemv_split_fused(bool on);

// The fused norm's weights (constant) loaded before the PDL wait, so that after it each block reads only the residual
// from L2 (default on); off loads them after the wait, as before session 11 (an A/B switch for bench/step_probe.py).
void set_qgemv_norm_weights_early(bool on);

// y = x * rsqrt(mean(x^2) + eps) * (w + add_one), written fp16 in perm8 order. x fp32 [T, H].
void rmsnorm_to_gemv_input(const float* x, int T, int H, const float* w, float eps, bool add_one, __half* out,
                           cudaStream_t stream);

// The MTP head's fc input, fp16 perm8 [T, 2H]: [rmsnorm(e, w_e) | rmsnorm(rmsnorm(h, w_src), w_h)], zero-centred
// norms (weight + 1). e: the next tokens' embeddings, h: residual rows before their final norm (w_src), fp32 [T, H].
void mtp_fc_input(const float* e, const float* h, int T, int H, const float* w_e, const float* w_src, const float* w_h,
                  float eps, __half* out, cudaStream_t stream);

// out[t, :] = dequantized row tokens[t] of the quantized embedding table (fp32).
void embed_gather(const QMatrix& E, const int32_t* tokens, int T, float* out, cudaStream_t stream);

// Depthwise causal conv (width Kc) + SiLU over T new tokens at positions p0 .. p0 + T - 1; x rows have stride ldx.
// state [C, Kc] is a ring of each channel's inputs: the input at position p sits in slot p mod Kc (all zero before
// position 0); the new inputs are written into it. p0 = *pos_dev when pos_dev is not null (a captured decode step
// reads its position from its inputs; T <= 16 only), else pos_host.
void conv_update_silu(const float* x, int ldx, int T, int C, int Kc, const float* w, float* state, int pos_host,
                      const int32_t* pos_dev, float* out, cudaStream_t stream);
// A verify step's conv checkpoints: image t (t = 0 .. T - 2, ckpt_stride floats apart) gets the ring [C, Kc] as it
// stands after token t of the T tokens (2..16) at positions p0 .. that conv_update_silu is about to consume, so it
// runs before that call, on the same x, state and position (pos_host / pos_dev as there).
void conv_ring_checkpoints(const float* x, int ldx, int T, int C, int Kc, const float* state, int pos_host,
                           const int32_t* pos_dev, float* ckpt, int64_t ckpt_stride, cudaStream_t stream);

struct GdnDims {
  int k_heads, v_heads, dk, dv;
  float eps;  // rms_norm_eps of the gated output norm
};
// Gated DeltaNet recurrence for T tokens with fp32 state [v_heads, dv, dk] (v-major), followed by
// the gated RMS norm: out_h[t, perm8(h*dv + j)] = rmsnorm(o)[j] * norm_w[j] * silu(z[t, h*dv + j]).
// conv_out: [T, 2*k_heads*dk + v_heads*dv] (q | k | v after conv+SiLU); z/b/a rows have stride ldp.
// out_layout: the order of out_h (GemvXLayout: the output GEMV's qgemv_x_layout).
// ckpt (a verify step's checkpoints; null: none): the state after each token t < T - 1 is also written to
// ckpt + t * ckpt_stride, laid out as `state` (16-byte aligned, images ckpt_stride floats apart).
void gdn_step(const float* conv_out, const float* z, const float* b, const float* a, int ldp, int T,
              const GdnDims& d, const float* a_log, const float* dt_bias, const float* norm_w, float* state,
              __half* out_h, cudaStream_t stream, int out_layout = GEMV_X_PERM8, float* ckpt = nullptr,
              int64_t ckpt_stride = 0);
// conv_update_silu then gdn_step for one token in one kernel (the same arithmetic; the state matched the two-kernel
// path to the last bits only up to the compiler, session 8): x is the raw projection row (its first
// 2*k_heads*dk + v_heads*dv entries are the conv's inputs), conv_w [C, Kc] and conv_state the ring above.
void gdn_conv_step(const float* x, const float* z, const float* b, const float* a, const GdnDims& d, int Kc,
                   const float* conv_w, float* conv_state, int pos_host, const int32_t* pos_dev, const float* a_log,
                   const float* dt_bias, const float* norm_w, float* state, __half* out_h, cudaStream_t stream,
                   int out_layout = GEMV_X_PERM8);
// gdn_conv_step's conv windows read as whole rings before the PDL wait, the position after it (default on), or as
// windows addressed by the position before the wait (off: the earlier form, for measurements). Bit-equal.
void set_gdn_conv_ring(bool on);

// KV cache formats of the attention ops (values fixed: the Python test bindings pass them as ints).
//  kKvBf16: bf16 [slots, kv_heads, 256]
//  kKvInt8: int8 codes [slots, kv_heads, 256] + fp16 scales [slots, kv_heads, 4] (group 64, absmax / 127)
//  kKvInt4: 4-bit codes [slots, kv_heads, 128 bytes] + the same fp16 scales (group 64, absmax / 7); byte j
//           of a row holds dim 2j (low nibble) and 2j + 1 (high nibble) as code + 8 (1..15), the nibble
//           order of the 4-bit weight formats (qgemm.cu)
enum KvFormat : int { kKvBf16 = 0, kKvInt8 = 1, kKvInt4 = 2 };
struct AttnDims {
  int n_heads, n_kv_heads, head_dim, rotary_dim;
  float eps;
  int kv_fmt;  // KvFormat
};
// Sampling parameters as the device sampler reads them (a copy lives in StepInputs, so a captured decode
// loop reads each request's values). Arithmetic follows engine/sampling.py's Sampler in float32 where it
// computes in float32 and float64 where it does, so both draw the same token from the same logits.
struct SamplingParams {
  float temperature;  // 0: greedy (the caller maps the host's "below 1e-5" to 0)
  int32_t top_k;      // 0: off
  double top_p;       // 1: off (compared in float64, as the host does)
  float min_p;        // 0: off
  float log_min_p;    // (float) log(min_p), computed on the host in float64
  float repetition_penalty;  // 1: off
  float presence_penalty;
  float frequency_penalty;
  int32_t vocab_limit;  // ids >= this are never sampled
  uint64_t seed;
};
constexpr int32_t kPromptSeen = 1 << 30;  // penalty counts: set for ids in the prompt; low bits count generated ones

// Per-step inputs that change every step (read on the device, so graph replays see new values).
struct StepInputs {
  int32_t tokens[kMaxStepTokens];
  int32_t rope_pos[kMaxStepTokens][3];  // (t, h, w) mRoPE positions
  int32_t kv_start;                      // cache slot of token 0 (tokens already in this lane's cache)
  int32_t T;
  int32_t lane;
  int32_t draw;                          // the sampler's draw index for row 0: tokens generated so far
  SamplingParams sampling;
};

// q/k RMS norm (zero-centred), partial interleaved mRoPE, q scaled by 1/sqrt(head_dim) into q_out
// [T, n_heads, head_dim]; k and v appended to the cache at slots kv_start + t.
void attn_prep(const float* qkv, int ldp, int T, const AttnDims& d, const float* q_norm, const float* k_norm,
               const float* inv_freq, const int mrope_section[3], const StepInputs* in, float* q_out,
               char* k_cache, char* v_cache, char* k_scales, char* v_scales, cudaStream_t stream);

// Causal attention of T query tokens over cache slots [0, kv_start + t], split over up to
// kMaxAttnSplits chunks; the combine multiplies by sigmoid(gate) and writes fp16 [T, heads*hd] in out_layout's
// order (GemvXLayout: the output GEMV's qgemv_x_layout).
void attn_decode(const float* q, int T, const AttnDims& d, const StepInputs* in, const char* k_cache,
                 const char* v_cache, const char* k_scales, const char* v_scales, float* partials,
                 const float* gate, int ld_gate, __half* out_h, cudaStream_t stream, int out_layout = GEMV_X_PERM8);

// Attention split-kernel variant: -1 the route by KV format (default: flash-decode, variant 6's block shape for
// int8, 4's for bf16 and int4), or one forced: 0 CUDA cores (query heads in registers), 1 query heads in shared
// memory, 2 scores on tensor cores, 3 scores and values on tensor cores, 4 flash-decode, 5 / 6 flash-decode with
// 3 / 4 warps a block (attention.cu).
void set_attn_variant(int v);
int get_attn_variant();

// One token per row t of logits [T, V] (sampler.cu), with in->sampling's parameters and draw index
// in->draw + t. scratch: V floats for each row. counts: the lane's penalty counts
// (count_tokens) or null. `advance` (T == 1: the device-side decode loop) makes the token the next step's input
// (tokens[0], kv_start + 1, positions + 1, draw + 1), counts it as generated, and writes it to
// host_ring[draw % ring_size] (mapped host memory). A row whose logits hold NaN or +inf, or (sampling) no finite
// logit, gets token -1 (the loop's next step then runs token 0, and the caller reports the error).
void sample_tokens(const float* logits, int T, int V, int32_t* counts, StepInputs* in, char* scratch,
                   int32_t* out_tokens, cudaStream_t stream, bool advance = false,
                   int32_t* host_ring = nullptr, int ring_size = 0);
// The slice draw (default on; off keeps the sorted-candidate path for every no-top-k draw): with neither top-k nor top-p, each collect block draws its
// slice's Gumbel-max winner and finish takes the best of them, so such draws never sort candidates or fall back to
// the one-block pass; without top-k, ids below min-p's floor are not collected. Read when sample_tokens is enqueued
// (a captured decode loop keeps the value it was captured with). Same tokens either way (tests).
void set_sampler_slice_draw(bool on);
bool get_sampler_slice_draw();
// The wide select (default off until it has run on a GPU; needs the slice draw's switch): where top-p's narrowed
// candidates outnumber what finish sorts (8192) but fit the scratch, finish finds the cut by a radix select over their
// values weighted by mass instead of falling back to the one-block pass over the whole row. Same tokens (tests).
void set_sampler_wide_select(bool on);
bool get_sampler_wide_select();
// Top-k's narrowing (default off until it has run on a GPU; needs the slice draw's switch): top-k above 64 where more
// ids lie within reach than finish sorts keeps the value bins that hold the k best instead of falling back to the
// one-block pass over the whole row. Same tokens (tests).
void set_sampler_top_k_narrowing(bool on);
bool get_sampler_top_k_narrowing();
// Penalty bookkeeping for the sampler: generated ids add 1 to their count; prompt ids (in_prompt) set
// kPromptSeen, which only the repetition penalty reads (as the host Sampler: presence and frequency
// penalties count generated tokens, the repetition penalty every token seen). `remove` takes generated ids off
// again (a speculative round's drafts, counted for the draws after them), each once for each time it was added.
void count_tokens(int32_t* counts, const int32_t* ids, int n, bool in_prompt, cudaStream_t stream,
                  bool remove = false);

// Fill a quantized matrix with random codes and scales (benchmarks): scales ~ scale_mag * U(0.5,1).
void fill_random_qmatrix(const QMatrix& W, uint64_t seed, float scale_mag, cudaStream_t stream);
void fill_random_f32(float* p, int64_t n, uint64_t seed, float lo, float hi, cudaStream_t stream);

}  // namespace monorail
