// The GEMV of T = 2..16 tokens on tensor cores (the kernels in qgemv_mma.cuh): its switches, how it splits K, its
// launch and the split-K reduce. qgemv.cu routes a GEMV here (gemv::launch_mma) when T > 1 and set_qgemv_mma is on.
// The kernel's forms are instantiated by width in qgemv_mma_4_8bit.cu and qgemv_mma_5_6bit.cu
// (gemv::launch_mma_kernel), so that a cold build compiles them side by side (session 49; qgemv_common.cuh).
#include <algorithm>
#include <stdexcept>
#include <tuple>

#include "common.cuh"
#include "pdl.cuh"
#include "ptx.cuh"
#include "qgemv_common.cuh"
#include "ops.h"

namespace monorail {
namespace {

using namespace gemv;

#include "qgemv_mma.cuh"

float* g_gemv_scratch = nullptr;   // GemvScratchScope
int64_t g_gemv_scratch_floats = 0;

// The tensor-core GEMV's shape of work, set_qgemv_mma_shape: the warps an SM should get (K is split until the row
// tiles give that many), and the 128-element spans a warp loads together before it multiplies (2 or 4, or 0: by
// width; 8-bit loads half as many). 8 warps an SM for 32-row warps since session 42 (16, with 2 or 4 spans, was
// slower at T = 2, 4 and 16: bench/mma_shape_sweep.py, bench/results/mma-shape-sweep-h100-s42-call1.json).
// Spans by width (0, the default since session 45, with loads first below): 4 for one n8 tile of tokens (T <= 8), 2
// for two. On an H100 with loads first, T = 2 / 4 / 16 took 8.24-8.28 / 8.78 / 12.68-12.70 ms at 4 spans and 8.60 /
// 9.22 / 11.77 at 2, against 8.55-8.56 / 8.90-8.99 / 12.08-12.13 for session 42's default (4 spans, loads as ptxas
// schedules them) (mma-shape-sweep-h100-s45-call1.json): two tiles hold twice the accumulators and x, and the fourth
// span's registers then cost more than its bytes in flight give. Confirmed with both defaults twice each
// (mma-shape-sweep-h100-s45-call2.json), T = 2 / 3 / 4 / 8 / 9 / 16: 8.08-8.19 / 8.42-8.44 / 8.63-8.64 / 9.52-9.57 /
// 9.70 / 11.60-11.76 ms against 8.46-8.49 / 8.63-8.67 / 8.81 / 9.47-9.51 / 10.30-10.31 / 11.93-11.95.
// Rows a warp owns (set_qgemv_mma_shape's third field): 32 (two m16 tiles) or 16 (one; issues loads first whatever
// set_qgemv_mma_loads_first says: qgemv_mma_kernel's MT), or 0, by width (the default since session 46): 16 rows at
// 16 warps an SM for T <= 6, 32 rows at 8 warps above. 16 rows take 96 registers instead of 158, so gate_up's 2,176
// row tiles fit one wave at 16 warps an SM instead of 8. On an H100 (MONORAIL_COMMIT=3601041 bash
// bench/calls/device_s45_call4.sh and the sweep after it, mma-shape-sweep-h100-s46-call1.json / -call2.json)
// T = 2 / 3 / 4 / 6 / 8 / 12 steps took 7.56-7.57 / 7.77-7.78 / 8.06-8.08 / 8.90-8.91 / 9.84-9.86 / 12.54 ms at (16, 0, 16) against
// 8.20-8.23 / 8.49-8.50 / 8.70-8.71 / 9.15-9.17 / 9.58 / 10.59-10.62 at (8, 0, 32); T = 16 15.35 against 11.85-11.92
// (with two n8 tiles of tokens, 16 rows read each token's x for half the rows 32 do, and the kernel spills 12 bytes
// in its 96 registers: ptxas -v, sm_90). 12 and 24 warps an SM were no better than 16; 8 warps with 16 rows fell
// between the two. Nsight Compute on gate_up at T = 4: 47.3 us against 53.6, DRAM 62 % against 55 %, 16 warps an SM
// against 8 (ncu-34816-T4-rows16-w16-h100-s46.txt).
// Warps an SM (the first field): 0, the default, takes the form's (16 for 16 rows, 8 for 32).
int g_mma_warps_per_sm = 0;
int g_mma_spans = 0;
int g_mma_rows_per_warp = 0;
constexpr int kSixteenRowsUpToT = 6;
// Warps a block (set_qgemv_mma_block_warps: 4, the default, 2 or 1; session 46, not yet timed). A block's warps share
// nothing, so this only changes how evenly the row tiles spread over the SMs: gate_up at T = 4 is 544 blocks of 4
// 16-row warps for 132 SMs (H100), so 16 SMs hold 5 blocks and 116 hold 4, and the kernel waits on the 16; as 2,176
// one-warp blocks the SMs hold 16 or 17 (all resident: 96 registers allow 21 a SM). With 32 rows (T > 6) it is 272
// blocks: 8 SMs hold 3, the rest 2.
int g_mma_block_warps = mma_gemv::kWarpsPerBlock;
// Passes whose spans all hold four chunks before the split's end run without bounds checks (qgemv_mma_kernel's
// unchecked_passes; session 47: 11-30 % fewer instructions a pass at 4 bits, bench/results/sass-loops-mma-s47.txt).
// Off (the default) runs every pass checked, as before session 47: the same sums, a benchmark's A/B in one build.
// Off by default since session 49: no GPU has run it yet (sessions 47-49 got no device machine), and a verify step
// that sums wrongly would change speculative replies; its op tests (tests/test_native_qgemv_mma.py) and the whole
// suite under MONORAIL_QGEMV_MMA_UNCHECKED=1 decide whether it becomes the default.
bool g_mma_unchecked = false;

int mma_rows_per_warp(int T) {
  return g_mma_rows_per_warp ? g_mma_rows_per_warp : (T <= kSixteenRowsUpToT ? 16 : 32);
}
int mma_warps_per_sm(int rows_per_warp) {
  return g_mma_warps_per_sm ? g_mma_warps_per_sm : (rows_per_warp == 16 ? 16 : 8);
}
int mma_spans_a_pass(int T) { return g_mma_spans ? g_mma_spans : (T > 8 ? 2 : 4); }
// (Two other forms were measured on whole steps on an H100 and removed, both bit for bit the default's: session 43's
// pipelined form, each warp's next pass of weights loaded into a second register set before it multiplies the current
// one: 8.35-8.45 / 9.08-9.10 / 15.80-15.85 ms at T = 2 / 4 / 16 against 8.49-8.50 / 8.78-8.81 / 11.99-12.23
// (mma-shape-sweep-h100-s43-call3.json; code in 1cf42e1); session 44's long runs, each warp walking 16-row tiles in
// turn and reading 512 bytes of each row a pass instead of 256 of each of 32 rows: 9.73 / 10.10 / 16.2-16.5 ms against
// 8.51-8.52 / 8.82-8.90 / 12.19-12.28 (mma-shape-sweep-h100-s44-call2.json; code in 714a2b2). And 6 spans a pass at
// 4 bits in 3-warp blocks (12 KB of codes in flight a warp, one wave kept), after Nsight Compute found the 4-token
// kernel with 8 warps an SM on gate_up, 70 % of cycles waiting on its loads (ncu-34816-T4-h100-s44-call3.txt):
// 9.31-9.32 / 9.69 / 15.46-15.52 ms against 8.46-8.48 / 8.83-8.85 / 12.00-12.01 (mma-shape-sweep-h100-s44-call5.json;
// code in e3a72dd).)

// set_qgemv_mma_loads_first (on by default since session 45): each pass's weight loads all issued before its first
// product (qgemv_mma_kernel's LF). The SASS without it (bench/sass_load_order.py, sm_90,
// bench/results/sass-load-order-mma-s44.txt) issues a 4-span pass's spans 2 and 3 only after spans 0 and 1 are
// multiplied: ptxas sinks the loads (the PTX has them all first), so a warp has about half of its 8 KB in flight. 158
// registers at 4 bits, 4 spans, one n8 tile (147 without): still 3 blocks an SM. Measured (H100, above): T = 2 -3.4 %,
// T = 4 -1.8 % a step; at 4 spans T = 16 +5 %, hence 2 spans there. Less than session 44 predicted (T = 4 8.8 -> ~7.9
// ms): Nsight Compute on gate_up at T = 4 still finds 58 % of cycles waiting on L1TEX, 52.0 us against 54.5 (DRAM 57 %,
// 8.2 warps an SM: ncu-34816-T4-loads-first-h100-s45-call1.txt), so the loads' order was a small part of the wait.
bool g_mma_loads_first = true;
// (Session 45's 4-bit group-scaled form, set_qgemv_mma_group_scale: each lane loaded one 8-byte half of each
// 64-element group so that a k-step stayed in one group, (code - 8) x summed per group and scaled once in fp32, ~11 %
// fewer instructions a pass. Right against the fp64 oracle on an H100 (tests-forms-op-h100-s46-call1.txt) and slower:
// T = 2 / 4 / 16 steps 10.35-10.38 / 10.84-10.85 / 12.39-12.40 ms against 8.12-8.16 / 8.67-8.69 / 11.85-11.92, and
// with 16 rows 8.85 / 9.38-9.41 / 13.31-13.52 against 7.87-7.89 / 8.29-8.39 / 15.97-16.00
// (mma-shape-sweep-h100-s46-call1.json); removed in session 46, code in 3601041.)

// Splits of K for the tensor-core GEMV: enough warps for mma_warps_per_sm an SM (the bytes in flight a stream
// needs), each split at least 4 spans of 128, and the partials within the scratch.
int mma_splits(int N, int K, int T, int64_t floats) {
  const int rows = mma_rows_per_warp(T);
  const int tiles = ceil_div(N, rows);
  const int spans = ceil_div(K, mma_gemv::kSpan);
  int splits = std::min({mma_gemv::kMaxSplits, ceil_div(mma_warps_per_sm(rows) * sm_count(), tiles),
                         std::max(1, spans / 4)});
  while (splits > 1 && (int64_t)splits * T * N > floats) --splits;
  if (splits < 1) splits = 1;
  const int per = ceil_div(spans, splits);
  return ceil_div(spans, per);  // no empty split
}

// Sums the splits' partials in split order and applies the epilogue: one thread per (token, output).
__global__ void __launch_bounds__(256) qgemv_mma_reduce_kernel(GemvArgs a, const float* part, int splits) {
  pdl_wait();
  pdl_trigger();
  const int outs = a.epi == GEMV_SWIGLU ? a.N / 2 : a.N;
  const int idx = blockIdx.x * blockDim.x + threadIdx.x;
  if (idx >= a.T * outs) return;
  mma_reduce_output(a, part, splits, idx / outs, idx % outs);
}

// The form of the tensor-core kernel the switches choose: 16 rows a warp (always loads first), else 32 rows with or
// without loads first.
template <int BITS, int U>
void launch_mma_form(const GemvArgs& a, bool two, bool wide, bool sixteen_rows, dim3 grid, dim3 block, cudaStream_t st,
                     float* part, int per) {
  if (sixteen_rows) {
    if (wide) launch_mma_kernel<BITS, 2 * U, true, 1>(two, grid, block, st, a, part, per, g_mma_unchecked);
    else launch_mma_kernel<BITS, U, true, 1>(two, grid, block, st, a, part, per, g_mma_unchecked);
  } else if (g_mma_loads_first) {
    if (wide) launch_mma_kernel<BITS, 2 * U, true>(two, grid, block, st, a, part, per, g_mma_unchecked);
    else launch_mma_kernel<BITS, U, true>(two, grid, block, st, a, part, per, g_mma_unchecked);
  } else if (wide) {
    launch_mma_kernel<BITS, 2 * U, false>(two, grid, block, st, a, part, per, g_mma_unchecked);
  } else {
    launch_mma_kernel<BITS, U, false>(two, grid, block, st, a, part, per, g_mma_unchecked);
  }
}

template <int BITS>
void launch_mma_bits(const GemvArgs& a, cudaStream_t st) {
  const int64_t part_floats = g_gemv_scratch ? g_gemv_scratch_floats : 0;
  const int splits = mma_splits(a.N, a.K, a.T, part_floats);
  const int spans = ceil_div(a.K, mma_gemv::kSpan);
  const int per = ceil_div(spans, splits);
  const int rows = mma_rows_per_warp(a.T);
  const dim3 grid(ceil_div(ceil_div(a.N, rows), g_mma_block_warps), splits);
  const dim3 block(g_mma_block_warps * 32);
  float* part = splits > 1 ? g_gemv_scratch : nullptr;
  constexpr int U = BITS == 8 ? 1 : 2;
  const bool two = a.T > 8;
  const bool wide = BITS != 8 && mma_spans_a_pass(a.T) == 4;
  launch_mma_form<BITS, U>(a, two, wide, rows == 16, grid, block, st, part, per);
  if (splits > 1) {
    const int outs = a.T * (a.epi == GEMV_SWIGLU ? a.N / 2 : a.N);
    launch_pdl("qgemv_mma_reduce", qgemv_mma_reduce_kernel, dim3(ceil_div(outs, 256)), dim3(256), 0, st, a,
               static_cast<const float*>(part), splits);
  }
}

}  // namespace

namespace gemv {
void launch_mma(int bits, const GemvArgs& a, cudaStream_t st) {
  switch (bits) {
    case 4: launch_mma_bits<4>(a, st); break;
    case 5: launch_mma_bits<5>(a, st); break;
    case 6: launch_mma_bits<6>(a, st); break;
    default: launch_mma_bits<8>(a, st); break;   // qgemv checked the width
  }
}
}  // namespace gemv

void set_qgemv_mma_shape(int warps_per_sm, int spans, int rows_per_warp) {
  if (warps_per_sm < 0 || warps_per_sm > 64) throw std::invalid_argument("warps_per_sm must be 0 (by form) or 1..64");
  if (spans != 0 && spans != 2 && spans != 4) throw std::invalid_argument("spans must be 0 (by width), 2 or 4");
  if (rows_per_warp != 0 && rows_per_warp != 16 && rows_per_warp != 32)
    throw std::invalid_argument("rows_per_warp must be 0 (by width), 16 or 32");
  g_mma_warps_per_sm = warps_per_sm;
  g_mma_spans = spans;
  g_mma_rows_per_warp = rows_per_warp;
}
std::tuple<int, int, int> qgemv_mma_shape() { return {g_mma_warps_per_sm, g_mma_spans, g_mma_rows_per_warp}; }
std::tuple<int, int, int> qgemv_mma_shape_for(int T) {
  const int rows = mma_rows_per_warp(T);
  return {mma_warps_per_sm(rows), mma_spans_a_pass(T), rows};
}

void set_qgemv_mma_block_warps(int warps) {
  if (warps != 1 && warps != 2 && warps != mma_gemv::kWarpsPerBlock)
    throw std::invalid_argument("the tensor-core GEMV's warps a block must be 1, 2 or 4");
  g_mma_block_warps = warps;
}
int qgemv_mma_block_warps() { return g_mma_block_warps; }

void set_qgemv_mma_unchecked_passes(bool on) { g_mma_unchecked = on; }
bool qgemv_mma_unchecked_passes() { return g_mma_unchecked; }

void set_qgemv_mma_loads_first(bool on) { g_mma_loads_first = on; }
bool qgemv_mma_loads_first() { return g_mma_loads_first; }

GemvScratchScope::GemvScratchScope(float* scratch, int64_t floats)
    : saved_ptr(g_gemv_scratch), saved_floats(g_gemv_scratch_floats) {
  g_gemv_scratch = scratch;
  g_gemv_scratch_floats = scratch ? floats : 0;
}

GemvScratchScope::~GemvScratchScope() {
  g_gemv_scratch = saved_ptr;
  g_gemv_scratch_floats = saved_floats;
}

int qgemv_mma_splits(int N, int K, int T, int64_t floats) { return mma_splits(N, K, T, floats); }

}  // namespace monorail
