// Token sampling from logits: the same draw as engine/sampling.py's Sampler (its module doc has the order of the
// steps and the RNG), on the device, in three kernels so that a decode loop can keep the token on the GPU. The
// mode follows the parameters (read on the device, so one captured graph serves every request):
//
//   greedy: prepare (many blocks of 256 threads, a 2048-id slice each) finds each slice's best (logit, lowest
//     id) after the penalties and the vocabulary mask; finish takes the best of those.
//   top-k 1..64: prepare keeps each slice's k best by (logit desc, id asc) from a stable block radix sort (the
//     row's k best lie among them); finish sorts the slices' candidates the same way, then one warp applies
//     temperature, top-p (float64 softmax over the k, as the host), min-p and the Gumbel-max draw in float64.
//   no top-k: prepare writes each slice's largest value (logit / temperature); collect (same grid) keeps, in id
//     order, every value within kCutoff of the row's largest (no other token can win the draw: its score is below
//     the largest value's score whatever the noise) and sums the slice's share of the softmax normaliser in
//     float64 (for top-p); finish sorts the candidates (at most 8192), cuts top-p and min-p and draws.
//   top-k above 64, or too many candidates: finish alone, exact radix-select thresholds over the whole row (float32
//     mass for top-p), then the draw pruned as the host prunes (no noise exceeds kGumbelMax).
//   slice draw (set_sampler_slice_draw, on by default since its first GPU run): with neither top-k nor top-p,
//     collect draws each slice's winner and finish takes the best (no candidates, no fallback); without top-k, ids
//     below min-p's floor are not collected; with top-p and no top-k, collect bins its ids by value and, where the
//     candidates overflow, narrow keeps only the bins where top-p's cut may fall (the ids above them: each slice's
//     winner; finish cuts top-p among the rest from the mass above). Two more switches, on by default: top-k's
//     narrowing (top-k above 64: the bins that hold the k best) and the wide select (a cut among more narrowed ids
//     than finish sorts: finish_wide's radix select over up to ~56K of them, their masses stored by narrow).
// Philox-4x32-10, key (seed lo, seed hi), counter (token id, draw lo, draw hi, purpose 0): word 0 gives
// u = (w + 0.5) / 2^32 and the noise -log(-log(u)), as the host computes it.
#include <cub/block/block_radix_sort.cuh>
#include <cub/block/block_scan.cuh>

#include "common.cuh"
#include "ops.h"

namespace monorail {
namespace {

constexpr int kPrepThreads = 256, kPrepItems = 8, kSlice = kPrepThreads * kPrepItems;
constexpr int kFinishThreads = 1024, kFinishItems = 8, kMaxCandidates = kFinishThreads * kFinishItems;
constexpr int kMaxFastTopK = 64;
constexpr uint32_t kPurposeSample = 0;  // engine/sampling.py PURPOSE_SAMPLE
// -log(-log((2^32 - 0.5) / 2^32)) + 1e-6: no draw's noise exceeds it (engine/sampling.py GUMBEL_MAX).
constexpr double kGumbelMax = 22.87385795841999;
struct Candidate {
  uint32_t key;  // f2key of the penalised logit (top-k) or of the value after temperature (no top-k)
  int32_t id;
};
constexpr uint32_t kBadKey = 0xFFC00000u;  // f2key of the canonical NaN: above every finite logit and +inf
// A token can win the draw only if its value is within kGumbelMax - (smallest noise, -log(-log(2^-33)) = -3.13) =
// 26.004 of the largest value (whose own score is at least the largest value plus the smallest noise).
constexpr float kCutoff = 26.1f;
static_assert(kCutoff > kGumbelMax + 3.1301, "kCutoff must cover the largest noise minus the smallest");
constexpr int kMaxCutoffSlices = 512;  // rows of up to 1M ids take the no-top-k path; longer ones the fallback

// Top-p's narrowing (the slice draw's switch, no top-k): collect counts each slice's ids within kCutoff into kBins
// bins of value below the row's largest, with their mass exp(v - M) in fixed point (integer sums: the same bits in
// any order). bin_of is monotone in v, so equal values share a bin and a higher bin never holds a larger value.
constexpr int kBins = 64;
constexpr float kBinScale = kBins / kCutoff;
constexpr double kMassScale = 0x1p40;  // fixed-point unit of a bin's mass: each id's share truncated by < 2^-40
// How far the bins' mass may lie from the host's float64 cumulative sums, in units of the row's normaliser Z (>= 1,
// the largest value's own mass): truncation (< 2^-40 an id, 2^20 ids at most: < 1e-6) and the sums' rounding.
constexpr double kNarrowMargin = 4e-6;
// A value that overflowed to +inf (M too: inf - inf is NaN) falls in bin 0 with no mass; such a row's Z is NaN, so
// narrow keeps every id within reach whole and the slices draw the lowest id holding +inf, as the host.
__device__ inline int bin_of(float v, float M) {
  const float d = __fmul_rn(__fsub_rn(M, v), kBinScale);
  return d >= 0.f ? min(kBins - 1, (int)d) : 0;
}
__device__ inline unsigned long long to_fixed_mass(double e) {
  return e >= 0.0 ? (unsigned long long)(e * kMassScale) : 0ull;  // NaN (inf - inf): no mass
}
// atomicAdd of a 64-bit integer into shared memory, from two native 32-bit adds. The 64-bit form compiles to a
// compare-and-swap loop (ATOMS.CAST.SPIN.64 in the SASS of sm_86, sm_89, sm_90 and sm_120), whose retries serialise a block whose
// lanes all add to the same few bins (a flat row). The low word's add returns the old word, so each add knows whether
// it carried; the word pair ends as the exact sum mod 2^64 (little-endian), like the 64-bit atomic. Read it only
// after a barrier.
__device__ inline void shared_add_u64(unsigned long long* sum, unsigned long long m) {
  unsigned int* word = reinterpret_cast<unsigned int*>(sum);
  const unsigned int lo = (unsigned int)m;
  const unsigned int old = lo ? atomicAdd(word, lo) : 0u;
  const unsigned int hi = (unsigned int)(m >> 32) + (old + lo < old ? 1u : 0u);
  if (hi) atomicAdd(word + 1, hi);
}
// The wide select's fixed-point mass of one id: a finer unit than the bins' (2^-44: its list holds under 2^19 ids of
// mass <= 1, so the sums stay below 2^63). sample_narrow stores it beside the packed list, so finish_wide's passes
// (one block) read integers instead of computing a float64 exp per id per pass (float64 runs at 1/64 rate on
// consumer cards).
constexpr double kWideScale = 0x1p44;
__device__ inline unsigned long long wide_mass(float v, float M) {
  return to_fixed_mass(exp((double)v - (double)M) * (kWideScale / kMassScale));
}

// The no-top-k mode's layout of a row's scratch: a header (each slice's largest value, candidate count, float64
// share of the normaliser and, for the slice draw, its winner's float64 score and id; for top-p's narrowing the mass
// of the slice's surely-kept ids, its bins, and the row's narrowing state), then each slice's candidates in a region
// of equal capacity (a narrowed row: one packed list from the start of the regions instead).
struct CutoffLayout {
  float* slice_max;
  int32_t* slice_count;
  double* slice_z;
  double* slice_score;
  int32_t* slice_winner;
  double* slice_above;      // narrowing: the mass exp(v - M) of the slice's ids in bins below b_in (surely kept)
  uint64_t* bin_mass;       // [slice][kBins], fixed point (kMassScale): every id within kCutoff
  int32_t* bin_count;       // [slice][kBins]: the ids collect keeps (within kCutoff and above min-p's floor)
  int32_t* narrow;          // 8 ints: {state, b_in, b_out} by narrow's block 0; finish_wide's {verdict, ids of the
                            // list it keeps, the last of them in the host's order} (read by the tests); the wide
                            // list's smallest and largest key (collect sets the range empty, narrow's blocks fill it)
  int32_t* slice_collected; // narrowing: collect's count (slice_count before narrow rewrites it)
  Candidate* cand;
  int capacity;  // candidates a slice's region holds
  // The wide select's list (n candidates) and, after it, each candidate's wide_mass: the regions must hold both.
  __device__ bool wide_fits(int n, int slices) const { return 2 * (size_t)n <= (size_t)capacity * slices; }
  __device__ unsigned long long* wide_masses(int n) const { return reinterpret_cast<unsigned long long*>(cand + n); }
  static __host__ __device__ size_t header_bytes(int slices) { return (812 * (size_t)slices + 32 + 255) / 256 * 256; }
  __device__ CutoffLayout(char* row, size_t row_bytes, int slices) {
    slice_z = reinterpret_cast<double*>(row);
    slice_max = reinterpret_cast<float*>(row + 8 * slices);
    slice_count = reinterpret_cast<int32_t*>(row + 12 * slices);
    slice_score = reinterpret_cast<double*>(row + 16 * slices);
    slice_winner = reinterpret_cast<int32_t*>(row + 24 * slices);
    slice_above = reinterpret_cast<double*>(row + 32 * (size_t)slices);
    bin_mass = reinterpret_cast<uint64_t*>(row + 40 * (size_t)slices);
    bin_count = reinterpret_cast<int32_t*>(row + (40 + 8 * kBins) * (size_t)slices);
    narrow = reinterpret_cast<int32_t*>(row + (40 + 12 * kBins) * (size_t)slices);
    slice_collected = reinterpret_cast<int32_t*>(row + (40 + 12 * kBins) * (size_t)slices + 32);
    static_assert(40 + 12 * kBins + 4 == 812, "header_bytes");
    cand = reinterpret_cast<Candidate*>(row + header_bytes(slices));
    capacity = (int)((row_bytes - header_bytes(slices)) / (8 * (size_t)slices));
  }
  // The row's largest value from the slices' maxima, read by one thread; NaN when a slice saw a NaN or +inf logit
  // (a broken row). Not above -inf: nothing to draw, and collect wrote nothing else for the row.
  __device__ float serial_row_max(int slices) const {
    float m = -INFINITY;
    bool bad = false;
    for (int s = 0; s < slices; ++s) {
      bad |= isnan(slice_max[s]);
      m = fmaxf(m, slice_max[s]);
    }
    return bad ? NAN : m;
  }
};

// Order-preserving key of a float; -0 takes +0's key, since the host compares them equal (its ties go by id).
__device__ inline uint32_t f2key(float f) {
  const uint32_t u = __float_as_uint(f);
  if (u == 0x80000000u) return 0x80000000u;
  return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
}
__device__ inline float key2f(uint32_t k) { return __uint_as_float((k & 0x80000000u) ? (k & 0x7FFFFFFFu) : ~k); }

__device__ inline uint4 philox(uint4 c, uint2 k) {
#pragma unroll
  for (int r = 0; r < 10; ++r) {
    const uint32_t hi0 = __umulhi(0xD2511F53u, c.x), lo0 = 0xD2511F53u * c.x;
    const uint32_t hi1 = __umulhi(0xCD9E8D57u, c.z), lo1 = 0xCD9E8D57u * c.z;
    c = make_uint4(hi1 ^ c.y ^ k.x, lo1, hi0 ^ c.w ^ k.y, lo0);
    k.x += 0x9E3779B9u;
    k.y += 0xBB67AE85u;
  }
  return c;
}

__device__ inline double gumbel(const SamplingParams& p, uint64_t draw, int id) {
  const uint4 r = philox(make_uint4((uint32_t)id, (uint32_t)draw, (uint32_t)(draw >> 32), kPurposeSample),
                         make_uint2((uint32_t)p.seed, (uint32_t)(p.seed >> 32)));
  const double u = ((double)r.x + 0.5) * 0x1p-32;
  return -log(-log(u));
}

// The same noise in float32, for the fallback's first pass (finish_full). Within ~2e-6 of gumbel(): u is formed
// without cancellation (for u >= 1/2, -log(u) comes from log1p of the complement 1 - u, which float32 holds to full
// relative precision), so -log(u) carries a few float32 ulps of relative error and its logarithm a few 1e-7 more.
__device__ inline float gumbel_approx(const SamplingParams& p, uint64_t draw, int id) {
  const uint4 r = philox(make_uint4((uint32_t)id, (uint32_t)draw, (uint32_t)(draw >> 32), kPurposeSample),
                         make_uint2((uint32_t)p.seed, (uint32_t)(p.seed >> 32)));
  const float t = r.x < 0x80000000u ? -logf(((float)r.x + 0.5f) * 0x1p-32f)
                                    : -log1pf(-(((float)(0xFFFFFFFFu - r.x) + 0.5f) * 0x1p-32f));
  return -logf(t);
}
// How far below the best float32 score an id's float32 score may lie and still be the float64 winner: twice the
// scores' error (gumbel_approx's, plus the float32 sum's rounding, at most 2^-24 of the score's size), with room.
__device__ inline float approx_margin(float score) { return 1e-3f + fabsf(score) * 0x1p-20f; }
// The float32 score an id must reach to get the float64 noise, from the best float32 score. A value that overflowed
// to +inf (a huge logit over a tiny temperature) makes the best +inf: then the ids holding +inf, of which the host
// draws the lowest (inf - inf would be NaN and keep none).
__device__ inline float approx_floor(float top) { return isinf(top) ? top : top - approx_margin(top); }

// The host's steps 1-2 in its float32 arithmetic (no fused multiply-add); NaN and +inf become the canonical NaN.
__device__ inline float penalised_logit(const float* row, int i, const SamplingParams& p, const int32_t* counts) {
  if (i >= p.vocab_limit) return -INFINITY;
  float l = row[i];
  if (counts) {
    const int32_t c = counts[i];
    if (c != 0 && p.repetition_penalty != 1.f)
      l = l > 0.f ? __fdiv_rn(l, p.repetition_penalty) : __fmul_rn(l, p.repetition_penalty);
    const int32_t generated = c & (kPromptSeen - 1);
    if (generated > 0 && (p.frequency_penalty != 0.f || p.presence_penalty != 0.f))
      l = __fsub_rn(l, __fadd_rn(__fmul_rn(p.frequency_penalty, (float)generated), p.presence_penalty));
  }
  if (isnan(l) || l == INFINITY) l = __uint_as_float(0x7FC00000u);
  return l;
}

__device__ inline bool is_greedy(const SamplingParams& p) { return p.temperature <= 0.f; }
__device__ inline bool is_fast(const SamplingParams& p, int slices) {
  return !is_greedy(p) && p.top_k >= 1 && p.top_k <= kMaxFastTopK && slices * p.top_k <= kMaxCandidates;
}
// The candidate ("cutoff") mode: no top-k, or a top-k too large for the fast path. Top-k there is exact when at least
// k ids lie within kCutoff of the row's largest value (finish_cutoff checks, and falls back otherwise).
__device__ inline bool is_cutoff(const SamplingParams& p, int slices) {
  return !is_greedy(p) && !is_fast(p, slices) && p.top_k <= kMaxCandidates;
}
// The slice draw (set_sampler_slice_draw): with neither top-k nor top-p the host draws over the ids in id order with
// no ranking, so each collect block takes its slice's Gumbel-max winner among the ids within reach (and above
// min-p's floor) and finish takes the best of the slices' winners: no candidate list, no sort, no fallback.
__device__ inline bool is_slice_draw(const SamplingParams& p, bool slice_draw) {
  return slice_draw && !is_greedy(p) && p.top_k == 0 && !(p.top_p < 1.0);
}
// Top-p's narrowing (the slice draw's switch): with top-p and no top-k, where more ids lie within reach of the draw
// than finish can sort, sample_narrow keeps as candidates only the bins where the host's top-p cut may fall; the bins
// above it are kept whole (each slice draws its winner there, as the slice draw), those below it are dropped.
__device__ inline bool is_narrowing(const SamplingParams& p, bool slice_draw) {
  return slice_draw && !is_greedy(p) && p.top_k == 0 && p.top_p < 1.0;
}
// Top-k's narrowing (set_sampler_top_k_narrowing, with the slice draw's switch): top-k above the fast path's 64, where
// more ids lie within reach than finish sorts. The row's k best by penalised logit are the k best by value (division
// by the temperature keeps the order), so they lie in the bins up to the first where the count from the top reaches
// k: narrow keeps those bins as one packed list and finish's top-k path takes it as it takes collect's candidates.
__device__ inline bool is_top_k_narrowing(const SamplingParams& p, int slices, bool slice_draw, bool top_k_narrowing) {
  return top_k_narrowing && slice_draw && p.top_k > 0 && is_cutoff(p, slices);
}
// The draw index of row t: the step's (tokens generated so far) plus the row.
__device__ inline uint64_t row_draw(const StepInputs* in, int t) { return (uint64_t)(uint32_t)in->draw + t; }

// Better = larger value, then lower id.
template <typename V>
__device__ inline void keep_better(V& v, int& i, V ov, int oi) {
  if (ov > v || (ov == v && oi < i)) { v = ov; i = oi; }
}
// Block-wide best (value desc, id asc); every thread gets the winner's id. smem: blockDim.x / 32 entries each.
template <typename V>
__device__ int block_best(V v, int i, V* sv, int* si) {
  for (int o = 16; o > 0; o >>= 1) keep_better(v, i, (V)__shfl_xor_sync(0xffffffffu, v, o), __shfl_xor_sync(0xffffffffu, i, o));
  const int w = threadIdx.x >> 5, l = threadIdx.x & 31, nw = blockDim.x >> 5;
  __syncthreads();
  if (l == 0) { sv[w] = v; si[w] = i; }
  __syncthreads();
  if (w == 0) {
    v = l < nw ? sv[l] : sv[0];
    i = l < nw ? si[l] : si[0];
    for (int o = 16; o > 0; o >>= 1) keep_better(v, i, (V)__shfl_xor_sync(0xffffffffu, v, o), __shfl_xor_sync(0xffffffffu, i, o));
    if (l == 0) si[0] = i;
  }
  __syncthreads();
  const int r = si[0];
  __syncthreads();
  return r;
}

// The value the draw compares: the penalised logit over the temperature (float32 division, as the host).
__device__ inline float drawn_value(const float* row, int i, const SamplingParams& p, const int32_t* counts) {
  return __fdiv_rn(penalised_logit(row, i, p, counts), p.temperature);
}

__global__ void __launch_bounds__(kPrepThreads) sample_prepare_kernel(const float* logits, int V, const StepInputs* in,
                                                                      const int32_t* counts_all, char* scratch,
                                                                      size_t row_bytes) {
  using Sort = cub::BlockRadixSort<uint32_t, kPrepThreads, kPrepItems, int32_t>;
  __shared__ union {
    typename Sort::TempStorage sort;
    struct { uint32_t v[32]; int i[32]; } best;
  } smem;
  const SamplingParams p = in->sampling;
  const int t = blockIdx.y, slice = blockIdx.x, slices = gridDim.x;
  const float* row = logits + (size_t)t * V;
  const int32_t* counts = counts_all ? counts_all + (size_t)in->lane * V : nullptr;
  char* row_scratch = scratch + t * row_bytes;
  Candidate* cand = reinterpret_cast<Candidate*>(row_scratch);  // greedy / top-k
  const bool greedy = is_greedy(p), fast = is_fast(p, slices), cutoff = is_cutoff(p, slices);
  if (!greedy && !fast && !cutoff) return;  // top-k above kMaxCandidates: finish reads the logits itself

  uint32_t keys[kPrepItems];
  int32_t ids[kPrepItems];
  for (int j = 0; j < kPrepItems; ++j) {
    const int i = slice * kSlice + threadIdx.x * kPrepItems + j;  // blocked: item order is id order
    if (i < V) {
      keys[j] = f2key(cutoff ? drawn_value(row, i, p, counts) : penalised_logit(row, i, p, counts));
      ids[j] = i;
    } else {
      keys[j] = 0;  // below every value, -inf included
      ids[j] = INT_MAX;
    }
  }
  if (greedy || cutoff) {  // the slice's best (key desc, id asc)
    uint32_t bk = keys[0];
    int bi = ids[0];
    for (int j = 1; j < kPrepItems; ++j) keep_better(bk, bi, keys[j], ids[j]);
    const int win = block_best(bk, bi, smem.best.v, smem.best.i);
    for (int j = 0; j < kPrepItems; ++j) {
      if (ids[j] != win) continue;
      if (greedy) cand[slice] = Candidate{keys[j], win};
      else CutoffLayout(row_scratch, row_bytes, slices).slice_max[slice] = key2f(keys[j]);  // NaN: a broken row
    }
    return;
  }
  Sort(smem.sort).SortDescending(keys, ids);
  for (int j = 0; j < kPrepItems; ++j) {
    const int r = threadIdx.x * kPrepItems + j;
    if (r < p.top_k) cand[slice * p.top_k + r] = Candidate{keys[j], ids[j]};
  }
}

struct SliceBest {
  double v[32];
  float f[32];
  int i[32];
};

// The slice's Gumbel-max winner among its `eligible` ids (kPrepItems a thread, blocked), into the header's slice_score
// and slice_winner (-inf and INT_MAX when none is eligible). In two passes as finish_full draws: float32 scores first
// (gumbel_approx), then the float64 score (the host's) only for ids within twice the float32 error of the slice's best
// float32 score, which the slice's float64 winner must be. Ties: the lower id, as the host's argmax over id order.
// All threads of the block.
__device__ void draw_slice_winner(const float* v, const int* eligible, const SamplingParams& p, uint64_t draw, int slice,
                                  const CutoffLayout& L, SliceBest& best) {
  float f[kPrepItems];
  float top = -INFINITY;
  for (int j = 0; j < kPrepItems; ++j) {
    const int i = slice * kSlice + threadIdx.x * kPrepItems + j;
    f[j] = eligible[j] ? __fadd_rn(v[j], gumbel_approx(p, draw, i)) : -INFINITY;
    top = fmaxf(top, f[j]);
  }
  top = warp_max(top);
  __syncthreads();  // best may still be read by an earlier use
  if ((threadIdx.x & 31) == 0) best.f[threadIdx.x >> 5] = top;
  __syncthreads();
  top = -INFINITY;
  for (int w = 0; w < kPrepThreads / 32; ++w) top = fmaxf(top, best.f[w]);
  const float score_floor = approx_floor(top);
  double bs = -INFINITY;
  int bi = INT_MAX;
  for (int j = 0; j < kPrepItems; ++j) {
    const int i = slice * kSlice + threadIdx.x * kPrepItems + j;
    if (eligible[j] && f[j] >= score_floor) keep_better(bs, bi, (double)v[j] + gumbel(p, draw, i), i);
  }
  const int win = block_best(bs, bi, best.v, best.i);
  if (win == INT_MAX ? threadIdx.x == 0 : bi == win) {  // no eligible id in this slice: no winner
    L.slice_score[slice] = win == INT_MAX ? -INFINITY : bs;
    L.slice_winner[slice] = win;
  }
}

using PrepScan = cub::BlockScan<int, kPrepThreads>;
// The shared memory collect's and narrow's blocks use in turn: the candidates' scan, a fixed-order sum, the slice draw.
union PrepShared {
  typename PrepScan::TempStorage scan;
  double z[kPrepThreads / 32];
  SliceBest best;
};

// A fixed-order sum over the block (the same bits on every call), returned to thread 0; `partial` may alias storage
// the block used just before, so the caller syncs first.
__device__ inline double block_sum_in_order(double v, double* partial) {
  v = warp_sum(v);
  if ((threadIdx.x & 31) == 0) partial[threadIdx.x >> 5] = v;
  __syncthreads();
  double total = 0.0;
  if (threadIdx.x == 0)
    for (int w = 0; w < kPrepThreads / 32; ++w) total += partial[w];
  return total;
}

// No-top-k mode: each slice's candidates (values within kCutoff of the row's largest), in id order, and its share of
// the softmax normaliser in float64 (only when top-p needs it).
__global__ void __launch_bounds__(kPrepThreads) sample_collect_kernel(const float* logits, int V, const StepInputs* in,
                                                                      const int32_t* counts_all, char* scratch,
                                                                      size_t row_bytes, bool slice_draw,
                                                                      bool top_k_narrowing) {
  using Scan = PrepScan;
  __shared__ PrepShared smem;
  __shared__ float row_max;
  __shared__ unsigned long long bin_mass[kBins];
  __shared__ int bin_count[kBins];
  const SamplingParams p = in->sampling;
  const int t = blockIdx.y, slice = blockIdx.x, slices = gridDim.x;
  if (!is_cutoff(p, slices)) return;
  const float* row = logits + (size_t)t * V;
  const int32_t* counts = counts_all ? counts_all + (size_t)in->lane * V : nullptr;
  CutoffLayout L(scratch + t * row_bytes, row_bytes, slices);
  for (int b = threadIdx.x; b < kBins; b += kPrepThreads) { bin_mass[b] = 0; bin_count[b] = 0; }
  if (threadIdx.x < 32) {  // the row's largest value, from the slices' (a NaN: the row is broken)
    float m = -INFINITY;
    bool bad = false;
    for (int s = threadIdx.x; s < slices; s += 32) {
      bad |= isnan(L.slice_max[s]);
      m = fmaxf(m, L.slice_max[s]);
    }
    m = warp_max(m);
    const bool any_bad = __any_sync(0xffffffffu, bad);
    if (threadIdx.x == 0) row_max = any_bad ? NAN : m;
  }
  __syncthreads();
  const float M = row_max;
  if (!(M > -INFINITY) || isnan(M)) return;  // nothing to draw, or broken: finish reports it
  float floor_value = M - kCutoff;
  // Without top-k, min-p keeps only values >= M + log(min_p) (finish's own test, the same float32 sum), and no id
  // below that floor changes top-p's cut for the ids above it (their mass before them comes from higher values):
  // with the slice draw on, such ids are not collected. With top-k they are: top-k ranks and normalises over them.
  if (slice_draw && p.top_k == 0 && p.min_p > 0.f) floor_value = fmaxf(floor_value, __fadd_rn(M, p.log_min_p));
  const bool need_z = p.top_p < 1.0 && p.top_k == 0;  // with top-k, finish sums over the k kept
  // the slice's bins too, for sample_narrow (top-k's narrowing counts alone)
  const bool binning = is_narrowing(p, slice_draw) || is_top_k_narrowing(p, slices, slice_draw, top_k_narrowing);
  float v[kPrepItems];
  int flags[kPrepItems];
  double z = 0.0;
  for (int j = 0; j < kPrepItems; ++j) {
    const int i = slice * kSlice + threadIdx.x * kPrepItems + j;
    v[j] = i < V ? drawn_value(row, i, p, counts) : -INFINITY;
    flags[j] = v[j] > -INFINITY && v[j] >= floor_value;
    if (!(v[j] > -INFINITY)) continue;
    double e = 0.0;
    if (need_z) {
      e = exp((double)v[j] - (double)M);  // once (float64 is slow on consumer cards)
      z += e;
    }
    if (binning && v[j] >= M - kCutoff) {
      const int b = bin_of(v[j], M);
      if (need_z) shared_add_u64(&bin_mass[b], to_fixed_mass(e));
      if (flags[j]) atomicAdd(&bin_count[b], 1);
    }
  }
  if (binning) {
    __syncthreads();
    for (int b = threadIdx.x; b < kBins; b += kPrepThreads) {
      L.bin_mass[(size_t)slice * kBins + b] = bin_mass[b];
      L.bin_count[(size_t)slice * kBins + b] = bin_count[b];
    }
    if (slice == 0 && threadIdx.x == 0) {  // the wide list's key range, which narrow's blocks narrow by atomics
      L.narrow[6] = (int)0xFFFFFFFFu;
      L.narrow[7] = 0;
    }
  }
  if (is_slice_draw(p, slice_draw)) {
    draw_slice_winner(v, flags, p, row_draw(in, t), slice, L, smem.best);
    return;
  }
  int offsets[kPrepItems], total;
  Scan(smem.scan).ExclusiveSum(flags, offsets, total);
  for (int j = 0; j < kPrepItems; ++j)
    if (flags[j] && offsets[j] < L.capacity)
      L.cand[(size_t)slice * L.capacity + offsets[j]] = Candidate{f2key(v[j]), slice * kSlice + (int)threadIdx.x * kPrepItems + j};
  __syncthreads();
  if (need_z) {
    const double zs = block_sum_in_order(z, smem.z);
    if (threadIdx.x == 0) L.slice_z[slice] = zs;
  }
  if (threadIdx.x == 0) {
    L.slice_count[slice] = total;
    if (binning) L.slice_collected[slice] = total;
  }
}

// Top-p's narrowing, between collect and finish (no top-k, top-p, the slice draw's switch). Where the ids collect kept
// would overflow finish's sort, every block finds, from all slices' bins (integer sums: each block gets the same
// answer), the bins [b_in, b_out] where the host's top-p cut may fall: the mass in bins 0..b is the mass before every
// id of bin b + 1 and beyond, so bins whose cumulative mass stays below top_p * Z (less a margin for the bins'
// fixed point and the host's rounding) are kept whole, and bins past the first whose cumulative mass reaches it (plus
// the margin) are dropped. Each block then writes its ids in [b_in, b_out] into one packed list of candidates, in id
// order across the slices (finish sorts them and cuts top-p there, starting from the mass above them; packed, since
// a slice's ids near the cut may outnumber its region) and draws its winner among its ids above b_in
// (as the slice draw; min-p applies to both). Leaves the row as collect left it when nothing overflowed, or when the
// narrowed candidates would overflow too (finish falls back to finish_full). With top-k's narrowing (top-k above 64),
// the bins kept are those up to the first where the count from the top reaches k, and none is kept whole.
__global__ void __launch_bounds__(kPrepThreads) sample_narrow_kernel(const float* logits, int V, const StepInputs* in,
                                                                     const int32_t* counts_all, char* scratch,
                                                                     size_t row_bytes, bool slice_draw, bool wide,
                                                                     bool top_k_narrowing) {
  using Scan = PrepScan;
  __shared__ PrepShared smem;
  __shared__ unsigned long long part_mass[kPrepThreads / kBins][kBins];
  __shared__ int part_count[kPrepThreads / kBins][kBins];
  __shared__ float row_max;
  __shared__ int decision[4];  // narrowed, b_in, b_out, the candidates in the packed list
  __shared__ int overflow, collected, first;
  __shared__ unsigned int key_lo, key_hi;  // state 2: the block's smallest and largest key in the list
  const SamplingParams p = in->sampling;
  const int t = blockIdx.y, slice = blockIdx.x, slices = gridDim.x;
  const bool top_k_mode = is_top_k_narrowing(p, slices, slice_draw, top_k_narrowing);
  if (!(is_narrowing(p, slice_draw) || top_k_mode) || !is_cutoff(p, slices) || slices > kMaxCutoffSlices) return;
  const float* row = logits + (size_t)t * V;
  const int32_t* counts = counts_all ? counts_all + (size_t)in->lane * V : nullptr;
  CutoffLayout L(scratch + t * row_bytes, row_bytes, slices);
  if (threadIdx.x == 0) {
    row_max = L.serial_row_max(slices);
    overflow = 0;
    collected = 0;
  }
  __syncthreads();
  const float M = row_max;
  // Nothing to draw, or a broken row (NaN): collect wrote no bins; finish reports it. Otherwise, did collect's
  // candidates overflow finish's sort? (slice_collected: collect's counts, which this kernel does not rewrite.)
  if (M > -INFINITY) {
    for (int s = threadIdx.x; s < slices; s += kPrepThreads) {
      const int c = L.slice_collected[s];
      if (c > L.capacity) overflow = 1;
      atomicAdd(&collected, c);
    }
  }
  __syncthreads();
  if (!(M > -INFINITY) || !(overflow || collected > kMaxCandidates)) {  // finish takes collect's candidates
    if (slice == 0 && threadIdx.x == 0) L.narrow[0] = 0;
    return;
  }
  // the row's bins: thread (g, b) sums bin b over the slices g, g + G, ...; then the G partial sums (integers: the
  // same totals in every block)
  {
    constexpr int G = kPrepThreads / kBins;
    const int b = threadIdx.x % kBins, g = threadIdx.x / kBins;
    unsigned long long m = 0;
    int c = 0;
    for (int s = g; s < slices; s += G) {
      m += L.bin_mass[(size_t)s * kBins + b];
      c += L.bin_count[(size_t)s * kBins + b];
    }
    part_mass[g][b] = m;
    part_count[g][b] = c;
    __syncthreads();
    if (g == 0)
      for (int h = 1; h < G; ++h) { part_mass[0][b] += part_mass[h][b]; part_count[0][b] += part_count[h][b]; }
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    const unsigned long long* bin_m = part_mass[0];  // the row's bins
    const int* bin_c = part_count[0];
    int b_in = kBins, b_out = kBins - 1, boundary = 0, narrowed = 0;
    if (top_k_mode) {
      // every bin up to the first where the count from the top reaches k (none: fewer than k ids within reach, and
      // finish falls back); no ids kept whole, so no slice draws a winner
      b_in = 0;
      b_out = -1;
      for (int b = 0; b < kBins && b_out < 0; ++b) {
        boundary += bin_c[b];
        if (boundary >= p.top_k) b_out = b;
      }
      narrowed = b_out >= 0 && boundary <= kMaxCandidates && boundary <= L.capacity * slices;
    } else {
      double z = 0.0;  // the row's normaliser, summed in finish_cutoff's order
      for (int s = 0; s < slices; ++s) z += L.slice_z[s];
      const double target = p.top_p * z * kMassScale, margin = kNarrowMargin * z * kMassScale;
      // b_in: the first bin whose cumulative mass may reach the target (kBins: none does, so every id within reach
      // is kept by top-p); b_out: the first from b_in whose cumulative mass surely reaches it (else the last bin)
      unsigned long long cum = 0;
      for (int b = 0; b < kBins; ++b) {
        cum += bin_m[b];
        if (b_in == kBins && (double)cum + margin >= target) b_in = b;
        if (b_in < kBins && (double)cum - margin >= target) { b_out = b; break; }
      }
      for (int b = b_in; b <= b_out; ++b) boundary += bin_c[b];
      // the candidates go in one packed list (a slice's ids near the cut may outnumber its region): it must fit.
      // State 1: finish sorts them; 2 (the wide select's switch): more than it sorts, finish_wide selects the cut.
      // State 2 also needs room for the candidates' masses after the list.
      narrowed = boundary > L.capacity * slices          ? 0
                 : boundary <= kMaxCandidates             ? 1
                 : wide && L.wide_fits(boundary, slices) ? 2
                                                          : 0;
    }
    decision[0] = narrowed;
    decision[1] = b_in;
    decision[2] = b_out;
    decision[3] = boundary;
    if (slice == 0) {
      L.narrow[0] = narrowed;
      L.narrow[1] = b_in;
      L.narrow[2] = b_out;
    }
  }
  __syncthreads();
  if (!decision[0]) return;
  const int b_in = decision[1], b_out = decision[2];
  // collect's floor: min-p's too without top-k (with top-k, min-p applies after it, in finish)
  const float floor_value =
      p.min_p > 0.f && p.top_k == 0 ? fmaxf(M - kCutoff, __fadd_rn(M, p.log_min_p)) : M - kCutoff;
  float v[kPrepItems];
  int above[kPrepItems], boundary[kPrepItems];
  double mass_above = 0.0;
  for (int j = 0; j < kPrepItems; ++j) {
    const int i = slice * kSlice + threadIdx.x * kPrepItems + j;
    v[j] = i < V ? drawn_value(row, i, p, counts) : -INFINITY;
    const bool reach = v[j] > -INFINITY && v[j] >= M - kCutoff;
    const int b = reach ? bin_of(v[j], M) : kBins;
    if (b < b_in) mass_above += exp((double)v[j] - (double)M);
    above[j] = b < b_in && v[j] >= floor_value;  // surely kept by top-p; min-p decides
    boundary[j] = b >= b_in && b <= b_out && v[j] >= floor_value;
  }
  draw_slice_winner(v, above, p, row_draw(in, t), slice, L, smem.best);
  __syncthreads();
  // this slice's place in the packed list: the earlier slices' ids in the cut's bins (collect's counts, the same
  // test as `boundary`; integer sums, so every block agrees)
  if (threadIdx.x == 0) {
    first = 0;
    key_lo = 0xFFFFFFFFu;
    key_hi = 0u;
  }
  __syncthreads();
  int before_me = 0;
  for (int s = threadIdx.x; s < slice; s += kPrepThreads)
    for (int b = b_in; b <= b_out; ++b) before_me += L.bin_count[(size_t)s * kBins + b];
  if (before_me) atomicAdd(&first, before_me);
  __syncthreads();
  int offsets[kPrepItems], total;
  Scan(smem.scan).ExclusiveSum(boundary, offsets, total);
  for (int j = 0; j < kPrepItems; ++j)
    if (boundary[j])
      L.cand[first + offsets[j]] = Candidate{f2key(v[j]), slice * kSlice + (int)threadIdx.x * kPrepItems + j};
  if (decision[0] == 2) {  // finish_wide's inputs: each candidate's mass, and the list's key range
    unsigned long long* mass = L.wide_masses(decision[3]);
    uint32_t lo = 0xFFFFFFFFu, hi = 0u;
    for (int j = 0; j < kPrepItems; ++j)
      if (boundary[j]) {
        mass[first + offsets[j]] = wide_mass(v[j], M);  // v: the key's value (-0 is +0 to exp)
        const uint32_t key = f2key(v[j]);
        lo = min(lo, key);
        hi = max(hi, key);
      }
    lo = __reduce_min_sync(0xFFFFFFFFu, lo);
    hi = __reduce_max_sync(0xFFFFFFFFu, hi);
    if ((threadIdx.x & 31) == 0 && lo <= hi) {
      atomicMin(&key_lo, lo);
      atomicMax(&key_hi, hi);
    }
  }
  __syncthreads();
  if (decision[0] == 2 && threadIdx.x == 0 && key_lo <= key_hi) {
    atomicMin(reinterpret_cast<unsigned int*>(&L.narrow[6]), key_lo);
    atomicMax(reinterpret_cast<unsigned int*>(&L.narrow[7]), key_hi);
  }
  const double a = block_sum_in_order(mass_above, smem.z);
  if (threadIdx.x == 0) {
    L.slice_above[slice] = a;
    L.slice_count[slice] = total;
  }
}

// Top-k finish in one warp: the k best candidates (sorted by key desc, id asc) -> token, or -1.
__device__ int finish_top_k(const uint32_t* key, const int32_t* id, const SamplingParams& p, uint64_t draw,
                            float* sv, int32_t* sid, double* se) {
  const int lane = threadIdx.x & 31, K = p.top_k;
  if (key[0] >= kBadKey) return -1;
  const uint32_t neg_inf = f2key(-INFINITY);
  int m = 0;  // finite candidates: a prefix of the sorted list
  for (int c = lane; c < K; c += 32) m += key[c] > neg_inf && id[c] != INT_MAX;
  m = warp_sum(m);
  if (m == 0) return -1;
  // temperature (float32 division, as the host), then order by (value desc, id asc) as the host's stable sort
  for (int c = lane; c < m; c += 32) {
    const float v = __fdiv_rn(key2f(key[c]), p.temperature);
    int rank = 0;
    for (int d = 0; d < m; ++d) {
      const float w = __fdiv_rn(key2f(key[d]), p.temperature);
      rank += w > v || (w == v && id[d] < id[c]);
    }
    sv[rank] = v;
    sid[rank] = id[c];
  }
  __syncwarp();
  int keep = m;
  if (p.top_p < 1.0) {  // softmax in float64 over the candidates; keep those whose mass before them < top_p
    for (int c = lane; c < m; c += 32) se[c] = exp((double)sv[c] - (double)sv[0]);
    __syncwarp();
    if (lane == 0) {
      double z = 0.0;
      for (int c = 0; c < m; ++c) z += se[c];
      double cum = 0.0;
      keep = 0;
      for (int c = 0; c < m; ++c) {
        const double pc = se[c] / z;
        cum += pc;
        if (cum - pc < p.top_p) keep = c + 1;
      }
      if (keep < 1) keep = 1;
    }
    keep = __shfl_sync(0xffffffffu, keep, 0);
  }
  const float min_logit = p.min_p > 0.f ? __fadd_rn(sv[0], p.log_min_p) : -INFINITY;
  double best = -INFINITY;
  int best_c = INT_MAX;
  for (int c = lane; c < keep; c += 32)
    if (sv[c] >= min_logit) keep_better(best, best_c, (double)sv[c] + gumbel(p, draw, sid[c]), c);
  for (int o = 16; o > 0; o >>= 1)
    keep_better(best, best_c, __shfl_xor_sync(0xffffffffu, best, o), __shfl_xor_sync(0xffffffffu, best_c, o));
  return sid[best_c];
}

using TieScan = cub::BlockScan<int, kFinishThreads>;

// Fallback finish over the whole row (top-k above 64, or too many candidates), all threads of the block; the values
// are recomputed from the logits at each pass.
__device__ int finish_full(const float* row, const int32_t* counts, int V, const SamplingParams& p, uint64_t draw,
                           double* sd, int* si, float* sf) {
  __shared__ float hist_mass[256];
  __shared__ uint32_t hist_cnt[256];
  __shared__ uint32_t sel_prefix, sel_ties;
  __shared__ float sel_above;
  __shared__ int bad, sel_tie_last;
  __shared__ typename TieScan::TempStorage tie_scan;
  if (threadIdx.x == 0) bad = 0;
  __syncthreads();
  auto value = [&](int i) { return drawn_value(row, i, p, counts); };
  // the best (value, lowest id); any NaN / +inf is an error
  float bv = -INFINITY;
  int bi = INT_MAX;
  for (int i = threadIdx.x; i < V; i += kFinishThreads) {
    const float v = value(i);
    if (isnan(v)) bad = 1;
    keep_better(bv, bi, v, i);
  }
  const int best = block_best(bv, bi, sf, si);
  if (bad) return -1;
  const float M = value(best);
  if (M == -INFINITY) return -1;  // no finite logit

  // Top-k as the host takes it: over the penalised logits (before temperature, which can round two of them to one
  // value), exactly k ids, ties at the k-th logit to the lowest ids. thr_k is the k-th logit's key; ids holding it
  // are kept up to tie_last.
  const bool use_k = p.top_k > 0 && p.top_k < p.vocab_limit;
  const bool use_p = p.top_p < 1.0;
  uint32_t thr_k = 0;
  int tie_last = INT_MAX;
  auto logit_key = [&](int i) { return f2key(penalised_logit(row, i, p, counts)); };
  auto radix_pass = [&](uint32_t prefix, uint32_t mask, int shift, auto&& weigh) {
    for (int b = threadIdx.x; b < 256; b += kFinishThreads) { hist_cnt[b] = 0; hist_mass[b] = 0.f; }
    __syncthreads();
    for (int i = threadIdx.x; i < V; i += kFinishThreads) weigh(i, prefix, mask, shift);
    __syncthreads();
  };
  // The id of the n-th (from 1, in id order) id that `match` holds for; one block-wide scan over contiguous chunks.
  auto nth_match = [&](int n, auto&& match) {
    const int chunk = (V + kFinishThreads - 1) / kFinishThreads, i0 = threadIdx.x * chunk, i1 = min(V, i0 + chunk);
    int mine = 0;
    for (int i = i0; i < i1; ++i) mine += match(i);
    int before;
    __syncthreads();  // every thread has read an earlier call's result
    if (threadIdx.x == 0) sel_tie_last = INT_MAX;  // n beyond the matches: no cut
    __syncthreads();
    TieScan(tie_scan).ExclusiveSum(mine, before);
    if (before < n && n <= before + mine) {
      int seen = before;
      for (int i = i0; i < i1; ++i)
        if (match(i) && ++seen == n) {
          sel_tie_last = i;
          break;
        }
    }
    __syncthreads();
    return sel_tie_last;
  };
  if (use_k) {
    uint32_t prefix = 0, mask = 0, remaining = (uint32_t)p.top_k, ties = 0;
    for (int shift = 24; shift >= 0; shift -= 8) {
      radix_pass(prefix, mask, shift, [&](int i, uint32_t pre, uint32_t msk, int sh) {
        const float x = penalised_logit(row, i, p, counts);
        const uint32_t k = f2key(x);
        if (x != -INFINITY && (k & msk) == pre) atomicAdd(&hist_cnt[(k >> sh) & 0xFF], 1u);
      });
      if (threadIdx.x == 0) {
        uint32_t cum = 0;
        int b = 255;
        for (; b > 0 && cum + hist_cnt[b] < remaining; --b) cum += hist_cnt[b];
        sel_prefix = prefix | ((uint32_t)b << shift);
        sel_above = __uint_as_float(remaining - cum);
        sel_ties = hist_cnt[b];
      }
      __syncthreads();
      prefix = sel_prefix;
      mask |= 0xFFu << shift;
      remaining = __float_as_uint(sel_above);
      ties = sel_ties;
      __syncthreads();
    }
    thr_k = prefix;
    if (remaining < ties)  // keep the `remaining` lowest of the ids holding the k-th logit
      tie_last = nth_match((int)remaining, [&](int i) {
        return logit_key(i) == thr_k && penalised_logit(row, i, p, counts) != -INFINITY;
      });
  }
  // kept by top-k and by the value thresholds thr (keys of values after temperature: top-p by float32 mass, min-p);
  // top-p, like top-k, keeps a prefix of the host's order (value down, id up), so its ties are cut at tie_last_p
  uint32_t thr = 0, thr_p = 0;
  int tie_last_p = INT_MAX;
  auto kept_k = [&](int i, float v) {
    if (v == -INFINITY || f2key(v) < thr) return false;
    if (!use_k) return true;
    const uint32_t kx = logit_key(i);
    return kx > thr_k || (kx == thr_k && i <= tie_last);
  };
  auto kept = [&](int i, float v) { return kept_k(i, v) && (f2key(v) != thr_p || i <= tie_last_p); };
  if (use_p) {  // mass of the set kept so far, then the value whose cumulative mass from the top reaches top_p
    float z = 0.f;
    for (int i = threadIdx.x; i < V; i += kFinishThreads) {
      const float v = value(i);
      if (kept(i, v)) z += __expf(v - M);
    }
    const float target = (float)p.top_p * block_sum(z, sf);
    uint32_t prefix = 0, mask = 0;
    float above = 0.f;
    for (int shift = 24; shift >= 0; shift -= 8) {
      radix_pass(prefix, mask, shift, [&](int i, uint32_t pre, uint32_t msk, int sh) {
        const float v = value(i);
        const uint32_t k = f2key(v);
        if ((k & msk) == pre && kept(i, v)) atomicAdd(&hist_mass[(k >> sh) & 0xFF], __expf(v - M));
      });
      if (threadIdx.x == 0) {
        float cm = above;
        int b = 255;
        for (; b > 0 && cm + hist_mass[b] < target; --b) cm += hist_mass[b];
        sel_prefix = prefix | ((uint32_t)b << shift);
        sel_above = cm;
      }
      __syncthreads();
      prefix = sel_prefix;
      mask |= 0xFFu << shift;
      above = sel_above;
      __syncthreads();
    }
    // the host keeps tied ids (equal mass q each) in id order while the mass before them is below top_p
    const float q = __expf(key2f(prefix) - M);
    const int n = max(1, (int)ceilf((target - above) / q));
    thr = prefix;
    thr_p = prefix;
    tie_last_p = nth_match(n, [&](int i) {
      const float v = value(i);
      return f2key(v) == thr_p && kept_k(i, v);
    });
  }
  if (p.min_p > 0.f) thr = max(thr, f2key(__fadd_rn(M, p.log_min_p)));

  // Gumbel-max over the kept set, in two passes. The first scores every kept id in float32 (gumbel_approx); only
  // ids within twice the float32 scores' error of the best float32 score can be the float64 winner, and only those
  // get the float64 noise in the second pass. On a flat row every id is kept: float64 noise for all of them would
  // take milliseconds on a consumer card (float64 at 1/64 of float32's rate); on the H200 the extra pass costs
  // ~0.1 ms (bench/NOTES.md, session 26).
  float bf = -INFINITY;
  int bfi = INT_MAX;
  for (int i = threadIdx.x; i < V; i += kFinishThreads) {
    const float v = value(i);
    if (kept(i, v)) keep_better(bf, bfi, __fadd_rn(v, gumbel_approx(p, draw, i)), i);
  }
  const int best_f = block_best(bf, bfi, sf, si);
  const float top = __fadd_rn(value(best_f), gumbel_approx(p, draw, best_f));
  const float score_floor = approx_floor(top);
  double bs = -INFINITY;
  int bsi = INT_MAX;
  for (int i = threadIdx.x; i < V; i += kFinishThreads) {
    const float v = value(i);
    if (kept(i, v) && __fadd_rn(v, gumbel_approx(p, draw, i)) >= score_floor)
      keep_better(bs, bsi, (double)v + gumbel(p, draw, i), i);
  }
  return block_best(bs, bsi, sd, si);
}

// Slice-draw finish: the best of the slices' winners (float64 score desc, id asc); -1 for a broken row (a NaN or
// +inf logit) or nothing to draw.
__device__ int finish_slice_draw(char* row_scratch, size_t row_bytes, int slices, double* sd, int* si) {
  CutoffLayout L(row_scratch, row_bytes, slices);
  __shared__ int drawable;
  if (threadIdx.x == 0) drawable = L.serial_row_max(slices) > -INFINITY;  // else collect wrote no winners
  __syncthreads();
  if (!drawable) return -1;
  double best = -INFINITY;
  int bi = INT_MAX;
  for (int s = threadIdx.x; s < slices; s += blockDim.x) keep_better(best, bi, L.slice_score[s], L.slice_winner[s]);
  const int win = block_best(best, bi, sd, si);
  return win == INT_MAX ? -1 : win;
}

using FinishSort = cub::BlockRadixSort<uint32_t, kFinishThreads, kFinishItems, int32_t>;
using FinishScan = cub::BlockScan<double, kFinishThreads>;

// The host's rounding against the wide select's sums, in units of Z: float64 sums over at most 2^20 terms in another
// order (~1e-16 each) and the normaliser's own; far below one id's share where the select must decide.
constexpr double kWideMargin = 1e-9;

// The best of the slices' winners among the ids above a narrowed cut (score desc, id asc); every thread gets the id
// (INT_MAX: none) and `score` its float64 score.
__device__ int best_slice_winner(const CutoffLayout& L, int slices, double* sd, int* si, double& score) {
  __shared__ double best_score;
  double bs = -INFINITY;
  int bi = INT_MAX;
  for (int s = threadIdx.x; s < slices; s += blockDim.x) keep_better(bs, bi, L.slice_score[s], L.slice_winner[s]);
  const int win = block_best(bs, bi, sd, si);
  if (threadIdx.x == 0) best_score = -INFINITY;
  __syncthreads();
  if (win != INT_MAX && bi == win) best_score = bs;
  __syncthreads();
  score = best_score;
  __syncthreads();
  return win;
}

// finish_wide's radix digit: 2048 buckets a pass over the key range left, so a list whose keys span 22 bits or fewer
// takes two passes. The first pass sees the whole list; the later ones histogram only the ids in the chosen bucket.
constexpr int kWideDigitBits = 11, kWideBuckets = 1 << kWideDigitBits;
constexpr int kWideBucketsPerThread = kWideBuckets / kFinishThreads;
static_assert(kWideBuckets % kFinishThreads == 0, "each finish thread owns whole buckets in the select's scan");
constexpr int kWideBatch = 4;  // finish_wide's ids a thread per round of its radix passes
using WideMassScan = cub::BlockScan<unsigned long long, kFinishThreads, cub::BLOCK_SCAN_WARP_SCANS>;
using WideCountScan = cub::BlockScan<unsigned int, kFinishThreads, cub::BLOCK_SCAN_WARP_SCANS>;
// finish_wide's shared memory, carved from the sort's storage (free in that path)
constexpr size_t kWideCountAt = kWideBuckets * sizeof(unsigned long long);
constexpr size_t kWideMassScanAt = kWideCountAt + kWideBuckets * sizeof(unsigned int);
constexpr size_t kWideCountScanAt = (kWideMassScanAt + sizeof(WideMassScan::TempStorage) + 15) / 16 * 16;
constexpr size_t kWideTieScanAt = (kWideCountScanAt + sizeof(WideCountScan::TempStorage) + 15) / 16 * 16;
constexpr size_t kWideSharedBytes = kWideTieScanAt + sizeof(TieScan::TempStorage);
static_assert(kWideSharedBytes <= sizeof(FinishSort::TempStorage), "finish_wide's histograms and scans fit the sort's storage");

// Adds each lane's (mass, 1) to bucket b of finish_wide's shared histogram (b < 0: nothing, and m must be 0). Where
// the warp's ids all fall in one bucket (a flat row whose keys the range barely splits), one lane adds the warp's
// totals: shared atomics on one address serialise. The masses (wide_mass: at most 2^44) are reduced as two 22-bit
// halves, so the 32-bit warp sums cannot overflow. Every lane of the warp must call it.
__device__ inline void add_to_histogram(int b, unsigned long long m, unsigned long long* hist_mass,
                                        unsigned int* hist_count) {
  const unsigned active = __ballot_sync(0xffffffffu, b >= 0);
  if (!active) return;
  const int lowest = __reduce_min_sync(0xffffffffu, b >= 0 ? b : INT_MAX);
  if (lowest == __reduce_max_sync(0xffffffffu, b)) {
    const unsigned lo = __reduce_add_sync(0xffffffffu, (unsigned)(m & 0x3FFFFFu));
    const unsigned hi = __reduce_add_sync(0xffffffffu, (unsigned)(m >> 22));
    if ((int)(threadIdx.x & 31) == __ffs(active) - 1) {
      shared_add_u64(&hist_mass[lowest], ((unsigned long long)hi << 22) + lo);
      atomicAdd(&hist_count[lowest], (unsigned)__popc(active));
    }
    return;
  }
  if (b >= 0) {
    shared_add_u64(&hist_mass[b], m);
    atomicAdd(&hist_count[b], 1u);
  }
}

// Finish for a row that sample_narrow left wide (state 2): the n > kMaxCandidates ids of the bins where top-p's cut
// falls, in one packed list in id order, too many to sort. A radix select over their keys, each bucket weighted by
// its ids' fixed-point mass (wide_mass, which sample_narrow stored after the list), finds the value t* at which the
// mass from the top (after the mass above the list) reaches top_p * Z: every id above t* is kept, and of the ids
// holding t* the host keeps, in id order, those whose mass before them stays below it. The passes cut the list's key
// range (narrow recorded it) into kWideBuckets equal parts, then the chosen part again, until a part is one key. Where
// the fixed-point sums (within n units) and the host's rounding (kWideMargin) cannot decide, returns -2 (the caller
// falls back to finish_full). Then the draw over the kept ids above min-p's floor (float32 scores first, float64 for
// the near-best, as finish_full) against the slices' winners above the list, which come first in the host's order.
// `work`: the sort's storage, free here.
__device__ int finish_wide(const CutoffLayout& L, int n, int slices, const SamplingParams& p, uint64_t draw, float M,
                           double z, double above, char* work, double* sd, int* si, float* sf) {
  unsigned long long* hist_mass = reinterpret_cast<unsigned long long*>(work);
  unsigned int* hist_count = reinterpret_cast<unsigned int*>(work + kWideCountAt);
  auto& mass_scan = *reinterpret_cast<WideMassScan::TempStorage*>(work + kWideMassScanAt);
  auto& count_scan = *reinterpret_cast<WideCountScan::TempStorage*>(work + kWideCountScanAt);
  auto& tie_scan = *reinterpret_cast<typename TieScan::TempStorage*>(work + kWideTieScanAt);
  __shared__ uint32_t sel_base;
  __shared__ unsigned long long sel_cum;
  __shared__ unsigned int sel_count, sel_above;
  __shared__ int verdict, keep_ties, tie_last;  // verdict: 0 select, 1 keep every candidate, 2 undecidable
  const unsigned long long* mass = L.wide_masses(n);  // sample_narrow's wide_mass of each candidate
  const double target = (p.top_p * z - above) * kWideScale;  // the mass the list must supply, fixed point
  const double slack = (double)n + kWideMargin * z * kWideScale;
  // the range left: keys base .. base + 2^bits - 1 (every key of the list at first)
  const uint32_t key_lo = (uint32_t)L.narrow[6], key_hi = (uint32_t)L.narrow[7];
  uint32_t base = key_lo;
  int bits = key_lo == key_hi ? 0 : 32 - __clz(key_hi - key_lo);
  unsigned long long cum = 0;  // mass of the ids whose key lies above the range
  unsigned int count_above = 0;  // and how many they are
  for (bool first = true;; first = false) {
    const int shift = max(0, bits - kWideDigitBits);  // a bucket: 2^shift keys
    for (int b = threadIdx.x; b < kWideBuckets; b += blockDim.x) { hist_mass[b] = 0; hist_count[b] = 0; }
    __syncthreads();
    // whole warps every round (add_to_histogram's warp reductions); kWideBatch ids a thread a round, their loads
    // issued together: one thread block walks the whole list, so each round's L2 latency is paid once, not per id
    for (int round = 0; round < n; round += kWideBatch * blockDim.x) {
      uint32_t key[kWideBatch];
      bool in_range[kWideBatch];
#pragma unroll
      for (int j = 0; j < kWideBatch; ++j) {
        const int c = round + j * blockDim.x + threadIdx.x;
        key[j] = c < n ? L.cand[c].key : 0u;
      }
      unsigned long long m[kWideBatch];
#pragma unroll
      for (int j = 0; j < kWideBatch; ++j) {
        const int c = round + j * blockDim.x + threadIdx.x;
        in_range[j] = c < n && key[j] >= base && ((unsigned long long)(key[j] - base) >> bits) == 0;
        m[j] = in_range[j] ? mass[c] : 0ull;
      }
#pragma unroll
      for (int j = 0; j < kWideBatch; ++j)
        add_to_histogram(in_range[j] ? (int)((key[j] - base) >> shift) : -1, m[j], hist_mass, hist_count);
    }
    __syncthreads();
    // the cut's bucket: the highest b whose mass from the top (after cum) reaches the target; none: bucket 0. Thread
    // t owns kWideBucketsPerThread buckets counted down from the top, so an exclusive scan gives each thread the mass
    // and count of the buckets above its own.
    const int top_b = kWideBuckets - 1 - (int)threadIdx.x * kWideBucketsPerThread;
    unsigned long long own_mass = 0, mass_before, list_mass;
    unsigned int own_count = 0, count_before;
#pragma unroll
    for (int j = 0; j < kWideBucketsPerThread; ++j) {
      own_mass += hist_mass[top_b - j];
      own_count += hist_count[top_b - j];
    }
    WideMassScan(mass_scan).ExclusiveSum(own_mass, mass_before, list_mass);
    WideCountScan(count_scan).ExclusiveSum(own_count, count_before);
    if (first && threadIdx.x == 0)  // the whole list's mass: does the cut fall inside it at all?
      verdict = (double)list_mass + slack < target ? 1 : (double)list_mass - slack < target ? 2 : 0;
    unsigned long long cm = cum + mass_before;
    unsigned int cc = count_above + count_before;
#pragma unroll
    for (int j = 0; j < kWideBucketsPerThread; ++j) {
      const int b = top_b - j;
      const bool reaches = (double)(cm + hist_mass[b]) >= target;
      if ((reaches && (b == kWideBuckets - 1 || (double)cm < target)) || (b == 0 && !reaches)) {
        sel_base = base + ((uint32_t)b << shift);
        sel_cum = cm;
        sel_above = cc;
        sel_count = hist_count[b];
      }
      cm += hist_mass[b];
      cc += hist_count[b];
    }
    __syncthreads();
    if (threadIdx.x == 0) L.narrow[3] = verdict;  // for the tests: which way finish_wide went
    if (verdict == 2) return -2;
    if (verdict == 1) break;
    base = sel_base;
    cum = sel_cum;
    count_above = sel_above;
    bits = shift;
    __syncthreads();
    if (shift == 0) break;  // the bucket is one key: t*
  }
  const uint32_t prefix = base;
  // the ids holding t* (sel_count of them, each of mass q) that the host keeps: tie j has mass before it
  // above + cum + j q, kept while below top_p * Z, so ceil((target - cum) / q) of them, if the slack cannot move it
  if (threadIdx.x == 0 && verdict == 0) {
    const double q = exp((double)key2f(prefix) - (double)M) * kWideScale;
    const double x = (target - (double)cum) / q, dx = slack / q;
    const double lo = ceil(x - dx), hi = ceil(x + dx);
    if ((double)cum + slack >= target || lo != hi || lo < 1.0 || hi > (double)sel_count) verdict = 2;
    else keep_ties = (int)lo;
    L.narrow[3] = verdict;
  }
  __syncthreads();
  if (verdict == 2) return -2;
  const bool keep_all = verdict == 1;
  const uint32_t thr = prefix;
  // the packed position of the keep_ties-th id holding t* (the list is in id order): one scan over contiguous chunks
  if (!keep_all) {
    const int chunk = (n + blockDim.x - 1) / blockDim.x, c0 = threadIdx.x * chunk, c1 = min(n, c0 + chunk);
    int mine = 0;
    for (int c = c0; c < c1; ++c) mine += L.cand[c].key == thr;
    int before;
    TieScan(tie_scan).ExclusiveSum(mine, before);
    if (before < keep_ties && keep_ties <= before + mine) {
      int seen = before;
      for (int c = c0; c < c1; ++c)
        if (L.cand[c].key == thr && ++seen == keep_ties) tie_last = c;
    }
    __syncthreads();
  }
  const int last_tie = keep_all ? INT_MAX : tie_last;
  if (threadIdx.x == 0) {  // for the tests: the list's ids top-p keeps, and the last of them in the host's order
    L.narrow[4] = keep_all ? n : (int)count_above + keep_ties;
    L.narrow[5] = keep_all ? -1 : L.cand[last_tie].id;
  }
  const float min_value = p.min_p > 0.f ? __fadd_rn(M, p.log_min_p) : -INFINITY;
  auto kept = [&](int c, const Candidate& cd) {
    return key2f(cd.key) >= min_value && (keep_all || cd.key > thr || (cd.key == thr && c <= last_tie));
  };
  // the draw among the kept, in two passes
  float bf = -INFINITY;
  int bfi = INT_MAX;
  for (int c = threadIdx.x; c < n; c += blockDim.x) {
    const Candidate cd = L.cand[c];
    if (kept(c, cd)) keep_better(bf, bfi, __fadd_rn(key2f(cd.key), gumbel_approx(p, draw, cd.id)), cd.id);
  }
  const int best_f = block_best(bf, bfi, sf, si);
  double bs = -INFINITY;
  int bsi = INT_MAX;
  if (best_f != INT_MAX) {
    __shared__ float top;
    if (bfi == best_f) top = bf;  // the winner's thread holds its score
    __syncthreads();
    const float score_floor = approx_floor(top);
    // a thread whose best float32 score lies below the floor has no id there: only a few threads pass this
    for (int c = threadIdx.x; bf >= score_floor && c < n; c += blockDim.x) {
      const Candidate cd = L.cand[c];
      const float v = key2f(cd.key);
      if (kept(c, cd) && __fadd_rn(v, gumbel_approx(p, draw, cd.id)) >= score_floor)
        keep_better(bs, bsi, (double)v + gumbel(p, draw, cd.id), cd.id);
    }
  }
  const int win = block_best(bs, bsi, sd, si);
  __shared__ double win_score;
  if (threadIdx.x == 0) win_score = -INFINITY;
  __syncthreads();
  if (win != INT_MAX && bsi == win) win_score = bs;
  __syncthreads();
  const double list_score = win_score;
  double above_score;
  const int above_win = best_slice_winner(L, slices, sd, si, above_score);
  if (above_win != INT_MAX && (win == INT_MAX || above_score >= list_score)) return above_win;
  return win == INT_MAX ? -1 : win;
}

// Candidate-mode finish: the candidates (the ids within kCutoff of the row's largest value) sorted by (value desc, id
// asc); with top-k by (penalised logit desc, id asc) and cut to the first k. Then top-p (mass before a candidate <
// top_p, the masses exp(v - M) / Z in float64 with Z over the whole row, or over the k kept), min-p and the draw, all
// threads of the block. Returns -2 when the candidates overflowed, or hold fewer than k ids (the caller falls back to
// finish_full). Where sample_narrow narrowed the row (`narrowing`: its mode), the candidates are the ids of the bins
// where top-p's cut may fall, their mass before starts from the mass of the ids above them, and the draw also weighs
// the slices' winners among those ids above (which come first in the host's order, so they win a tied score).
__device__ int finish_cutoff(char* row_scratch, size_t row_bytes, int slices, const SamplingParams& p, uint64_t draw,
                             const float* row, const int32_t* counts, bool narrowing,
                             typename FinishSort::TempStorage& sort_storage,
                             typename FinishScan::TempStorage& scan_storage, int* offsets, double* sd, int* si,
                             float* sf) {
  CutoffLayout L(row_scratch, row_bytes, slices);
  __shared__ int n_total, broken, narrowed;
  __shared__ float row_max;
  __shared__ double row_z, row_above;
  if (threadIdx.x == 0) {
    const float m = L.serial_row_max(slices);
    const bool drawable = m > -INFINITY;  // false for a broken row (NaN) too
    const int narrow = drawable && narrowing ? L.narrow[0] : 0;  // sample_narrow's state: 0, 1 or 2 (wide)
    int bad = 0, n = 0;
    double z = 0.0, above = 0.0;
    for (int s = 0; drawable && s < slices; ++s) {
      offsets[s] = n;
      const int c = L.slice_count[s];
      if (c > L.capacity && !narrow) bad = 2;  // narrowed: one packed list of at most kMaxCandidates
      n += c;
      if (p.top_p < 1.0) z += L.slice_z[s];
      if (narrow) above += L.slice_above[s];
    }
    if (drawable && n > kMaxCandidates && narrow != 2) bad = 2;
    broken = drawable ? bad : 1;
    n_total = n;
    row_max = m;
    row_z = z;
    row_above = above;
    narrowed = narrow;
  }
  __syncthreads();
  if (broken == 1) return -1;
  if (broken == 2) return -2;
  if (narrowed == 2)
    return finish_wide(L, n_total, slices, p, draw, row_max, row_z, row_above, reinterpret_cast<char*>(&sort_storage),
                       sd, si, sf);
  const int n = n_total;
  const float M = row_max;
  const bool use_k = p.top_k > 0;
  if (use_k && n < p.top_k) return -2;  // the k-th logit lies below the cutoff: the fallback takes the row
  uint32_t keys[kFinishItems];
  int32_t ids[kFinishItems];
  for (int j = 0; j < kFinishItems; ++j) {
    const int c = threadIdx.x * kFinishItems + j;  // blocked, slice by slice: id order
    keys[j] = 0u;
    ids[j] = INT_MAX;
    if (c < n) {
      int lo = 0, hi = narrowed ? 0 : slices - 1;  // the slice holding candidate c: the last offset <= c
      while (lo < hi) {
        const int mid = (lo + hi + 1) / 2;
        if (offsets[mid] <= c) lo = mid;
        else hi = mid - 1;
      }
      // narrowed: one packed list in id order (sample_narrow); else each slice's region
      const Candidate cd = narrowed ? L.cand[c] : L.cand[(size_t)lo * L.capacity + (c - offsets[lo])];
      // with top-k, sort by the penalised logit (the host's top-k comes before temperature); else by the value
      keys[j] = use_k ? f2key(penalised_logit(row, cd.id, p, counts)) : cd.key;
      ids[j] = cd.id;
    }
  }
  // a stable sort of id-ordered items: ties stay in id order, as the host breaks them
  FinishSort(sort_storage).SortDescending(keys, ids);
  __syncthreads();
  // rank r = threadIdx.x * kFinishItems + j now holds the r-th candidate; the set is its first m
  const int m = use_k ? p.top_k : n;
  float vals[kFinishItems];
  for (int j = 0; j < kFinishItems; ++j)
    vals[j] = use_k ? __fdiv_rn(key2f(keys[j]), p.temperature) : key2f(keys[j]);
  int keep = m;
  int tie_lo = 0, tie_hi = 0, tie_in = 0;  // with top-k and top-p: ranks [tie_lo, tie_hi) hold the boundary's value
  if (p.top_p < 1.0) {
    // masses exp(v - M), normalised by the whole row's Z (no top-k, as the host) or by the k kept ones' sum
    double mass[kFinishItems], before[kFinishItems], z = row_z;
    for (int j = 0; j < kFinishItems; ++j) {
      const int r = threadIdx.x * kFinishItems + j;
      mass[j] = r < m ? exp((double)vals[j] - (double)M) : 0.0;
    }
    if (use_k) {
      FinishScan(scan_storage).ExclusiveSum(mass, before, z);
      __syncthreads();
    }
    for (int j = 0; j < kFinishItems; ++j) mass[j] /= z;
    FinishScan(scan_storage).ExclusiveSum(mass, before);
    if (narrowed)  // the ids above the candidates come first
      for (int j = 0; j < kFinishItems; ++j) before[j] += row_above / z;
    int kept = 0;
    for (int j = 0; j < kFinishItems; ++j) kept += threadIdx.x * kFinishItems + j < m && before[j] < p.top_p;
    __shared__ int kept_total, lo_total, hi_total;
    __shared__ float boundary;
    if (threadIdx.x == 0) { kept_total = 0; lo_total = 0; hi_total = 0; }
    __syncthreads();
    if (kept) atomicAdd(&kept_total, kept);
    __syncthreads();
    keep = narrowed ? kept_total : max(kept_total, 1);  // narrowed: the ids above are kept already
    if (use_k) {
      // Sorted by logit, equal values (logits the temperature rounds together) sit in logit order, where the host
      // has them in id order. The masses at each rank are the same either way, so keep is; but where the boundary
      // value's ranks run past keep, the host keeps the lowest ids among them.
      for (int j = 0; j < kFinishItems; ++j)
        if (threadIdx.x * kFinishItems + j == keep - 1) boundary = vals[j];
      __syncthreads();
      int lo = 0, hi = 0;
      for (int j = 0; j < kFinishItems; ++j) {
        const int r = threadIdx.x * kFinishItems + j;
        lo += r < m && vals[j] > boundary;
        hi += r < m && vals[j] >= boundary;
      }
      if (lo) atomicAdd(&lo_total, lo);
      if (hi) atomicAdd(&hi_total, hi);
      __syncthreads();
      tie_lo = lo_total;
      tie_hi = hi_total;
      tie_in = keep - tie_lo;
    }
  }
  // the boundary's tied ids in shared memory (the sort's storage is free now), to rank them by id
  int* tied_ids = reinterpret_cast<int*>(&sort_storage);
  static_assert(sizeof(typename FinishSort::TempStorage) >= sizeof(int) * kMaxCandidates, "room for the tied ids");
  const bool cut_ties = tie_hi > keep;  // the boundary's value runs past keep: keep its tie_in lowest ids
  if (cut_ties) {
    for (int j = 0; j < kFinishItems; ++j) {
      const int r = threadIdx.x * kFinishItems + j;
      if (r >= tie_lo && r < tie_hi) tied_ids[r - tie_lo] = ids[j];
    }
    __syncthreads();
  }
  auto in_set = [&](int r, int id) {
    if (r >= keep && !(cut_ties && r < tie_hi)) return false;
    if (!cut_ties || r < tie_lo) return true;
    int lower = 0;  // the tied ids below this one: it is kept if fewer than tie_in are
    for (int g = 0; g < tie_hi - tie_lo; ++g) lower += tied_ids[g] < id;
    return lower < tie_in;
  };
  const float min_value = p.min_p > 0.f ? __fadd_rn(M, p.log_min_p) : -INFINITY;
  double best = -INFINITY;
  int best_r = INT_MAX;
  for (int j = 0; j < kFinishItems; ++j) {
    const int r = threadIdx.x * kFinishItems + j;
    if (r < m && vals[j] >= min_value && in_set(r, ids[j]))
      keep_better(best, best_r, (double)vals[j] + gumbel(p, draw, ids[j]), r);
  }
  const int win_r = block_best(best, best_r, sd, si);
  __shared__ int win_id;
  __shared__ double win_score;
  if (threadIdx.x == 0) { win_id = -1; win_score = -INFINITY; }
  __syncthreads();
  for (int j = 0; j < kFinishItems; ++j)
    if (threadIdx.x * kFinishItems + j == win_r) { win_id = ids[j]; win_score = best; }
  __syncthreads();
  if (!narrowed) return win_id;
  // the best of the slices' winners among the ids above the candidates; a tie goes to them (earlier in the host's
  // order). Among themselves a tie goes to the lower id, where the host's order would rank a larger value first: two
  // float64 scores equal to the last bit, from different values, are not expected.
  const double list_score = win_score;
  double above_score;
  const int above_win = best_slice_winner(L, slices, sd, si, above_score);
  return above_win != INT_MAX && above_score >= list_score ? above_win : win_id;
}

__global__ void __launch_bounds__(kFinishThreads) sample_finish_kernel(const float* logits, int V, StepInputs* in,
                                                                       int32_t* counts_all, char* scratch,
                                                                       size_t row_bytes, int slices, int32_t* out,
                                                                       bool advance, int32_t* host_ring,
                                                                       int ring_size, bool slice_draw,
                                                                       bool top_k_narrowing) {
  __shared__ union {
    typename FinishSort::TempStorage sort;
    typename FinishScan::TempStorage scan;
    struct {
      uint32_t key[kMaxFastTopK];
      int32_t id[kMaxFastTopK];
      float v[kMaxFastTopK];
      int32_t vid[kMaxFastTopK];
      double e[kMaxFastTopK];
    } top;
  } smem;
  __shared__ int offsets[kMaxCutoffSlices];  // no-top-k mode: each slice's first candidate
  __shared__ double sd[32];
  __shared__ float sf[32];
  __shared__ uint32_t sk[32];
  __shared__ int si[32];
  const SamplingParams p = in->sampling;
  const int t = blockIdx.x;
  const uint64_t draw = row_draw(in, t);
  char* row_scratch = scratch + t * row_bytes;
  const Candidate* cand = reinterpret_cast<const Candidate*>(row_scratch);
  const float* row = logits + (size_t)t * V;
  const int32_t* counts = counts_all ? counts_all + (size_t)in->lane * V : nullptr;
  int token;
  if (is_greedy(p)) {
    uint32_t bk = 0;
    int bi = INT_MAX;
    for (int c = threadIdx.x; c < slices; c += kFinishThreads) keep_better(bk, bi, cand[c].key, cand[c].id);
    const int win = block_best(bk, bi, sk, si);
    // the winner's key decides whether the row was broken; re-read it from the candidate that holds it
    __shared__ uint32_t win_key;
    for (int c = threadIdx.x; c < slices; c += kFinishThreads)
      if (cand[c].id == win) win_key = cand[c].key;
    __syncthreads();
    token = win_key >= kBadKey ? -1 : win;
  } else if (is_fast(p, slices)) {
    const int n = slices * p.top_k;
    uint32_t keys[kFinishItems];
    int32_t ids[kFinishItems];
    for (int j = 0; j < kFinishItems; ++j) {
      const int c = threadIdx.x * kFinishItems + j;  // blocked: slice order, then the slice's order
      keys[j] = c < n ? cand[c].key : 0u;
      ids[j] = c < n ? cand[c].id : INT_MAX;
    }
    FinishSort(smem.sort).SortDescending(keys, ids);
    __syncthreads();
    for (int j = 0; j < kFinishItems; ++j) {
      const int r = threadIdx.x * kFinishItems + j;
      if (r < p.top_k) { smem.top.key[r] = keys[j]; smem.top.id[r] = ids[j]; }
    }
    __syncthreads();
    __shared__ int fast_token;
    if (threadIdx.x < 32) {
      const int tok = finish_top_k(smem.top.key, smem.top.id, p, draw, smem.top.v, smem.top.vid, smem.top.e);
      if (threadIdx.x == 0) fast_token = tok;
    }
    __syncthreads();
    token = fast_token;
  } else if (is_slice_draw(p, slice_draw)) {
    token = finish_slice_draw(row_scratch, row_bytes, slices, sd, si);
  } else {
    token = is_cutoff(p, slices) && slices <= kMaxCutoffSlices
                ? finish_cutoff(row_scratch, row_bytes, slices, p, draw, row, counts,
                                is_narrowing(p, slice_draw) ||
                                    is_top_k_narrowing(p, slices, slice_draw, top_k_narrowing),
                                smem.sort, smem.scan, offsets, sd, si, sf)
                : -2;
    if (token == -2) token = finish_full(row, counts, V, p, draw, sd, si, sf);
  }
  if (threadIdx.x != 0) return;
  out[t] = token;
  if (!advance) return;
  // the decode loop: this token is the next step's input, one slot further on
  const int32_t next = token < 0 ? 0 : token;
  in->tokens[0] = next;
  in->kv_start += 1;
  for (int a = 0; a < 3; ++a) in->rope_pos[0][a] += 1;
  in->draw += 1;
  if (counts_all && token >= 0) counts_all[(size_t)in->lane * V + token] += 1;
  if (host_ring) {
    volatile int32_t* slot = host_ring + (draw % (uint64_t)ring_size);
    *slot = token;
    __threadfence_system();
  }
}

__global__ void count_kernel(int32_t* counts, const int32_t* ids, int n, bool in_prompt, int delta) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  if (in_prompt) atomicOr(&counts[ids[i]], kPromptSeen);
  else atomicAdd(&counts[ids[i]], delta);
}

}  // namespace

static bool g_slice_draw = true;  // set_sampler_slice_draw (on since its first GPU run, session 28)
void set_sampler_slice_draw(bool on) { g_slice_draw = on; }
bool get_sampler_slice_draw() { return g_slice_draw; }
static bool g_wide_select = true;  // set_sampler_wide_select (on since its tests passed on an H100, session 29)
void set_sampler_wide_select(bool on) { g_wide_select = on; }
bool get_sampler_wide_select() { return g_wide_select; }
static bool g_top_k_narrowing = true;  // set_sampler_top_k_narrowing (on since its first GPU run, session 29)
void set_sampler_top_k_narrowing(bool on) { g_top_k_narrowing = on; }
bool get_sampler_top_k_narrowing() { return g_top_k_narrowing; }

void sample_tokens(const float* logits, int T, int V, int32_t* counts, StepInputs* in, char* scratch,
                   int32_t* out_tokens, cudaStream_t stream, bool advance, int32_t* host_ring, int ring_size) {
  if (T < 1 || (advance && T != 1)) throw std::invalid_argument("sample_tokens: T >= 1, and T == 1 in the decode loop");
  // the no-top-k mode's scratch header (CutoffLayout) and at least a few candidates a slice fit in a row
  if (V < 512) throw std::invalid_argument("sample_tokens: at least 512 logits a row (the scratch header's room)");
  // each row's scratch starts 8-byte aligned (its header holds float64 arrays), inside the caller's V floats a row
  const size_t scratch_row_bytes = (size_t)V * 4 / 8 * 8;
  const int slices = ceil_div(V, kSlice);
  sample_prepare_kernel<<<dim3(slices, T), kPrepThreads, 0, stream>>>(logits, V, in, counts, scratch, scratch_row_bytes);
  MR_CHECK_LAUNCH("sample_tokens (prepare)");
  sample_collect_kernel<<<dim3(slices, T), kPrepThreads, 0, stream>>>(logits, V, in, counts, scratch, scratch_row_bytes,
                                                                       g_slice_draw, g_top_k_narrowing);
  MR_CHECK_LAUNCH("sample_tokens (collect)");
  if (g_slice_draw) {
    sample_narrow_kernel<<<dim3(slices, T), kPrepThreads, 0, stream>>>(logits, V, in, counts, scratch, scratch_row_bytes,
                                                                         true, g_wide_select, g_top_k_narrowing);
    MR_CHECK_LAUNCH("sample_tokens (narrow)");
  }
  sample_finish_kernel<<<T, kFinishThreads, 0, stream>>>(logits, V, in, counts, scratch, scratch_row_bytes, slices,
                                                         out_tokens, advance, host_ring, ring_size, g_slice_draw,
                                                         g_top_k_narrowing);
  MR_CHECK_LAUNCH("sample_tokens (finish)");
}

void count_tokens(int32_t* counts, const int32_t* ids, int n, bool in_prompt, cudaStream_t stream, bool remove) {
  if (n <= 0) return;
  if (in_prompt && remove) throw std::invalid_argument("count_tokens: prompt marks are not removed");
  count_kernel<<<ceil_div(n, 256), 256, 0, stream>>>(counts, ids, n, in_prompt, remove ? -1 : 1);
  MR_CHECK_LAUNCH("count_tokens");
}

}  // namespace monorail
