// What does a kernel boundary cost inside a decode step, and what would a grid barrier cost instead?
//
// Standalone (no engine, no Python):  nvcc -O3 -std=c++17 -arch=sm_90 -o /tmp/bp bench/boundary_probe.cu && /tmp/bp
//
// A "layer" is the four 4-bit weight matrices of a GDN layer of the 27B model, codes only: gdn_in (16480 x 5120),
// gdn_out (5120 x 6144), gate_up (34816 x 5120), down (5120 x 17408). Each matrix is one phase: the GEMV's read
// pattern (a warp owns R consecutive rows, lane l reads 16 bytes at chunk l + 32 u of each, U chunks per row in
// flight, the next batch loaded while the current one is folded, row groups strided over one resident wave) with
// no arithmetic beyond an XOR. Phase p + 1 depends on phase p as a GEMV does: every block first reads the previous
// phase's output vector (its "x": K / 2 words, the bytes of K fp16 values) and folds it into what it writes.
// The layers' weights are distinct (about 3 GB in all, far past the 50 MB L2), so every byte comes from DRAM.
//
// Bodies (how a phase reads its bytes): "flat" (every thread 4 x 16 bytes in flight, grid-strided: the ideal
// pattern), "rowmajor RxUy" (the GEMV's pattern on today's layout), "ordered RxUy" (the same on a layout in
// consumption order: the grid's batches contiguous at every instant).
// Each body is timed (one CUDA graph over all layers, median of replays) as a kernel per phase with plain launches
// and with programmatic dependent launch (the first batch requested before griddepcontrol.wait, as the engine's
// GEMVs do), as one persistent kernel per layer with grid barriers (the next phase's first batch requested before
// the barrier; PDL between the layer kernels), and as one kernel for all layers; then each shape alone; then the
// chain with a quarter and none of the x read per block; then each shape with no x read over more patterns.
// The reference is one flat stream over all the bytes. Printed: us per phase, GB/s, % of the flat stream, and the
// time per phase over the flat stream's rate.
// `/tmp/bp --anatomy` (written after session 7's last device call; not yet run): the floor of a dependent launch
// (empty kernels), and per-block %globaltimer stamps of every phase: how early blocks are resident, how long after the
// previous phase's last block the wait releases, the x read, the stream, and the tail.
// `/tmp/bp --smflat` (session 8): one block per SM streaming one contiguous range of whole rows (smflat_kernel),
// against the grid-strided flat stream and the row-per-warp patterns, per shape and on whole layers, with no x read
// and with x read once per block.
// `/tmp/bp --dataflow` (session 12): gate_up and down in one kernel ordered by per-slice counters (flow_kernel)
// against two kernels with PDL, for the MLP alone and inside whole layers.
// `/tmp/bp --prefetch-only` (session 7 call 5): one kernel for all layers with each warp also L2-prefetching its
// next PF batches of the next phase before it arrives at a barrier, with and without the x read.
// Results: bench/results/boundary-probe-h200-s7-call*.txt (call 1 ran the first version, whose modes were plain,
// pdl, pdl2 (two batches before the wait), persist and mega for the row-major body only); bench/NOTES.md, session 7.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "probe_stream.cuh"

struct Phase {
  const uint4* w;    // rows x nch chunks of 16 bytes (nch a multiple of 32: P = nch / 32 pieces of 512 bytes per row)
  int rows, nch;
  const unsigned* in;  // previous phase's output (nin words), nullptr for the first phase
  int nin;
  unsigned* out;     // rows words
  // --replicas (session 26): `in` and `out` as `reps` copies `rep_stride` words apart; a phase writes every copy of
  // each output word and each block reads copy blockIdx.x % in_reps (1: one copy, as every other mode)
  int in_reps = 1, out_reps = 1;
  long long rep_stride = 0;
};

__device__ __forceinline__ void gdc_wait() { asm volatile("griddepcontrol.wait;" ::: "memory"); }
__device__ __forceinline__ void gdc_trigger() { asm volatile("griddepcontrol.launch_dependents;" ::: "memory"); }

template <int R, int U>
struct Batch {
  uint4 v[R][U];
};

// Where piece p (512 bytes: 32 chunks, lane l reads chunk 32 p + l) of row i of row group g lies, in 16-byte units.
// LAYOUT 0: row-major (the engine's layout today). LAYOUT 1: consumption order for a grid of W = gridDim.x * 4 warps
// that walks row groups g = w, w + W, ...: round r = g / W holds, batch by batch (a batch = U pieces of each of the
// R rows), every warp's batch as one contiguous run, so at any moment the grid reads one window of memory as a flat
// copy does. No padding: a row's last batch holds P mod U pieces, a last partial round Wr < W warps.
template <int R, int U, int LAYOUT>
__device__ __forceinline__ size_t piece_at(const Phase& ph, int g, int i, int p) {
  if (LAYOUT == 0) return (size_t)min(g * R + i, ph.rows - 1) * ph.nch + 32 * p;
  const int P = ph.nch >> 5, ngroups = (ph.rows + R - 1) / R;
  const int W = gridDim.x * (blockDim.x >> 5);
  const int r = g / W, w = g - r * W, Wr = min(W, ngroups - r * W);
  const int b = p / U, u = p - b * U, ub = min(U, P - b * U);
  const size_t idx = (size_t)r * W * R * P + (size_t)Wr * R * (b * U) + (size_t)w * R * ub + i * ub + u;
  return idx * 32;  // rows past the end (last group) read the padding-free tail of the round: same bytes, any values
}

template <int R, int U, int LAYOUT>
__device__ __forceinline__ void load_batch(Batch<R, U>& b, const Phase& ph, int g, int cb) {
  const int lane = threadIdx.x & 31, p0 = (cb - lane) >> 5;
#pragma unroll
  for (int u = 0; u < U; ++u) {
    const int c = cb + 32 * u;
#pragma unroll
    for (int i = 0; i < R; ++i) {
      const bool ok = c < ph.nch && (LAYOUT == 0 || g * R + i < ph.rows);
      b.v[i][u] = ok ? ldna(ph.w + piece_at<R, U, LAYOUT>(ph, g, i, p0 + u) + lane) : make_uint4(0, 0, 0, 0);
    }
  }
}

// The block's fold of the previous phase's output: L2 reads (ld.global.cg: written by other blocks of this
// grid in the persistent modes, so never through the non-coherent path) and a block-wide reduction.
__device__ unsigned stage_in(const Phase& ph, unsigned* red) {
  unsigned x = 0;
  if (ph.in) {
    const unsigned* in = ph.in + (ph.in_reps > 1 ? (long long)(blockIdx.x % ph.in_reps) * ph.rep_stride : 0);
    for (int i = threadIdx.x; i < ph.nin; i += blockDim.x) x ^= __ldcg(in + i);
  }
  for (int o = 16; o; o >>= 1) x ^= __shfl_xor_sync(0xffffffffu, x, o);
  if ((threadIdx.x & 31) == 0) red[threadIdx.x >> 5] = x;
  __syncthreads();
  unsigned y = 0;
  for (int i = 0; i < (int)(blockDim.x >> 5); ++i) y ^= red[i];
  __syncthreads();
  return y;
}

// One warp's share of one phase; `cur` holds the warp's first batch (requested earlier), `nxt` is the next batch's
// registers (each batch is requested while the one before it is folded).
template <int R, int U, int LAYOUT>
__device__ void run_phase(const Phase& ph, unsigned xin, Batch<R, U>& cur, Batch<R, U>& nxt) {
  const int lane = threadIdx.x & 31;
  const int stride = gridDim.x * (blockDim.x >> 5);
  const int ngroups = (ph.rows + R - 1) / R;
  for (int g = blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5); g < ngroups; g += stride) {
    unsigned acc[R];
#pragma unroll
    for (int i = 0; i < R; ++i) acc[i] = 0;
    for (int cb = lane; cb < ph.nch; cb += 32 * U) {
      int ncb = cb + 32 * U, ng = g;
      if (ncb >= ph.nch) {
        ncb = lane;
        ng = g + stride;
      }
      if (ng < ngroups) load_batch<R, U, LAYOUT>(nxt, ph, ng, ncb);
#pragma unroll
      for (int i = 0; i < R; ++i)
#pragma unroll
        for (int u = 0; u < U; ++u) acc[i] ^= cur.v[i][u].x ^ cur.v[i][u].y ^ cur.v[i][u].z ^ cur.v[i][u].w;
      cur = nxt;
    }
#pragma unroll
    for (int i = 0; i < R; ++i) {
      unsigned a = acc[i];
      for (int o = 16; o; o >>= 1) a ^= __shfl_xor_sync(0xffffffffu, a, o);
      if (lane == i && g * R + i < ph.rows)
        for (int r = 0; r < ph.out_reps; ++r) ph.out[r * ph.rep_stride + g * R + i] = a ^ xin;
    }
  }
}

template <int R, int U, int LAYOUT>
__device__ __forceinline__ void first_batch(const Phase& ph, Batch<R, U>& b) {
  const int g = blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5);
  if (g < (ph.rows + R - 1) / R) load_batch<R, U, LAYOUT>(b, ph, g, threadIdx.x & 31);
}
// One phase per kernel (launched plainly or with PDL). Call 1 also tried a second batch requested before the wait
// (slower: 2275 against 2389 GB/s for R4 U2) and the probe no longer has it.
template <int R, int U, int LAYOUT>
__global__ void __launch_bounds__(128) phase_kernel(Phase ph) {
  __shared__ unsigned red[32];
  Batch<R, U> cur, nxt;
  first_batch<R, U, LAYOUT>(ph, cur);
  gdc_wait();
  gdc_trigger();
  const unsigned xin = stage_in(ph, red);
  run_phase<R, U, LAYOUT>(ph, xin, cur, nxt);
}

// Grid barrier over a counter zeroed at the start of each graph replay; barrier number n (counted over the replay)
// completes when the counter reaches n * gridDim.x.
__device__ __forceinline__ void grid_barrier(unsigned* ctr, unsigned target) {
  __syncthreads();
  if (threadIdx.x == 0) {
    __threadfence();
    atomicAdd(ctr, 1u);
    unsigned v;
    do {
      asm volatile("ld.acquire.gpu.global.u32 %0, [%1];" : "=r"(v) : "l"(ctr) : "memory");
    } while (v < target);
  }
  __syncthreads();
}

// L2 prefetch of this warp's batches 1..PF of phase ph (batch 0 goes to registers: first_batch). Lane l takes piece
// l / 4 of the batch (R x U pieces of 512 bytes; R U <= 8) and line l % 4 of it.
template <int R, int U, int PF>
__device__ __forceinline__ void prefetch_batches(const Phase& ph) {
  if (PF == 0) return;
  const int lane = threadIdx.x & 31, piece = lane >> 2, line = lane & 3;
  if (piece >= R * U) return;
  const int i = piece / U, u = piece - i * U;
  const int P = ph.nch >> 5, nb = (P + U - 1) / U, ngroups = (ph.rows + R - 1) / R;
  const int stride = gridDim.x * (blockDim.x >> 5);
  const int g0 = blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5);
#pragma unroll
  for (int b = 1; b <= PF; ++b) {
    const int g = g0 + (b / nb) * stride, p = (b % nb) * U + u;
    if (g >= ngroups || p >= P) continue;
    const uint4* a = ph.w + piece_at<R, U, 0>(ph, g, i, p) + 8 * line;
    asm volatile("prefetch.global.L2 [%0];" ::"l"(a));
  }
}

// Phases [p0, p1) of `phases` in one kernel, a grid barrier between every two; bar0 barriers of the replay precede
// this kernel's first. PF (call 5): before it arrives at a barrier, each warp also L2-prefetches its next PF batches
// of the next phase, so that DRAM stays busy while the grid drains and waits.
template <int R, int U, int LAYOUT, int PF = 0>
__global__ void __launch_bounds__(128) persist_kernel(const Phase* phases, int p0, int p1, unsigned* ctr, int bar0) {
  __shared__ unsigned red[32];
  Batch<R, U> cur, nxt;
  Phase ph = phases[p0];
  first_batch<R, U, LAYOUT>(ph, cur);
  gdc_wait();
  for (int p = p0; p < p1; ++p) {
    if (p > p0) grid_barrier(ctr, (unsigned)(bar0 + p - p0) * gridDim.x);
    if (p == p1 - 1) gdc_trigger();  // only after the last barrier: every block of this grid is resident by then
    const unsigned xin = stage_in(ph, red);
    run_phase<R, U, LAYOUT>(ph, xin, cur, nxt);
    if (p + 1 < p1) {
      ph = phases[p + 1];
      first_batch<R, U, LAYOUT>(ph, cur);  // in flight while this block waits at the barrier
      if (LAYOUT == 0) prefetch_batches<R, U, PF>(ph);
    }
  }
}

// A phase's bytes as a flat stream (every thread 4 x 16 bytes in flight, grid-strided): the ideal pattern, with the
// same dependency on the previous phase (stage_in) and one word out per warp.
__device__ void flat_phase(const Phase& ph, unsigned xin, uint4 (&v)[4]) {
  const long long n16 = (long long)ph.rows * ph.nch;
  const long long stride = (long long)gridDim.x * blockDim.x;
  long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
  unsigned x = 0;
  for (; i < n16; i += 4 * stride) {
#pragma unroll
    for (int j = 0; j < 4; ++j) x ^= v[j].x ^ v[j].y ^ v[j].z ^ v[j].w;
#pragma unroll
    for (int j = 0; j < 4; ++j) v[j] = i + (4 + j) * stride < n16 ? ldna(ph.w + i + (4 + j) * stride) : make_uint4(0, 0, 0, 0);
  }
  for (int o = 16; o; o >>= 1) x ^= __shfl_xor_sync(0xffffffffu, x, o);
  const int warp = blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5);
  if ((threadIdx.x & 31) == 0 && warp < ph.rows)
    for (int r = 0; r < ph.out_reps; ++r) ph.out[r * ph.rep_stride + warp] = x ^ xin;
}
__device__ __forceinline__ void flat_first(const Phase& ph, uint4 (&v)[4]) {
  const long long n16 = (long long)ph.rows * ph.nch, stride = (long long)gridDim.x * blockDim.x;
  const long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
#pragma unroll
  for (int j = 0; j < 4; ++j) v[j] = i + j * stride < n16 ? ldna(ph.w + i + j * stride) : make_uint4(0, 0, 0, 0);
}
__global__ void __launch_bounds__(128) flat_phase_kernel(Phase ph) {
  __shared__ unsigned red[32];
  uint4 v[4];
  flat_first(ph, v);
  gdc_wait();
  gdc_trigger();
  flat_phase(ph, stage_in(ph, red), v);
}
__global__ void __launch_bounds__(128) flat_persist_kernel(const Phase* phases, int p0, int p1, unsigned* ctr, int bar0) {
  __shared__ unsigned red[32];
  uint4 v[4];
  Phase ph = phases[p0];
  flat_first(ph, v);
  gdc_wait();
  for (int p = p0; p < p1; ++p) {
    if (p > p0) grid_barrier(ctr, (unsigned)(bar0 + p - p0) * gridDim.x);
    if (p == p1 - 1) gdc_trigger();
    flat_phase(ph, stage_in(ph, red), v);
    if (p + 1 < p1) {
      ph = phases[p + 1];
      flat_first(ph, v);
    }
  }
}



// ---- --smflat (session 8): one block per SM streams one contiguous range of whole rows ----
// Block b of a grid of one block per SM owns rows [N b / G, N (b + 1) / G): in row-major order that is one
// contiguous run of bytes. Its NT threads walk it as a flat stream (thread t takes 16-byte units t, t + NT, ...)
// with D units in flight per thread (a register ring: a unit is re-requested right after it is folded), so the SM
// keeps NT D 16 bytes in flight whatever the row length, and the SMs' shares differ by at most one row. The x of
// the phase is read once per block, i.e. once per SM. The question: does a phase of a 5120-row shape (down,
// gdn_out) stream near the flat rate this way, where the row-per-warp patterns leave it latency-bound?
template <int NT, int D>
__global__ void __launch_bounds__(NT, 1) smflat_kernel(Phase ph) {
  __shared__ unsigned red[32];
  const int b = blockIdx.x, nb = gridDim.x;
  const long long r0 = (long long)ph.rows * b / nb, r1 = (long long)ph.rows * (b + 1) / nb;
  const long long nu = (r1 - r0) * ph.nch;
  const uint4* base = ph.w + r0 * ph.nch;
  const int t = threadIdx.x;
  uint4 v[D];
#pragma unroll
  for (int j = 0; j < D; ++j) v[j] = t + (long long)j * NT < nu ? ldna(base + t + (long long)j * NT) : make_uint4(0, 0, 0, 0);
  gdc_wait();
  gdc_trigger();
  const unsigned xin = stage_in(ph, red);
  unsigned acc = 0;
  for (long long u0 = 0; u0 < nu; u0 += (long long)D * NT) {
#pragma unroll
    for (int j = 0; j < D; ++j) {
      acc ^= v[j].x ^ v[j].y ^ v[j].z ^ v[j].w;
      const long long u = u0 + t + (long long)(j + D) * NT;
      v[j] = u < nu ? ldna(base + u) : make_uint4(0, 0, 0, 0);
    }
  }
  for (int o = 16; o; o >>= 1) acc ^= __shfl_xor_sync(0xffffffffu, acc, o);
  const long long row = r0 + (t >> 5);
  if ((t & 31) == 0 && row < r1) ph.out[row] = acc ^ xin;
}

// ---- --anatomy (session 7, written after the last device call: not yet run) ----
// Where a phase's time goes, from per-block %globaltimer stamps: thread 0 of every block records when the block
// starts (t0), passes griddepcontrol.wait (t1), has read x (t2) and has finished (t3, after a block barrier).
__device__ __forceinline__ unsigned long long now_ns() {
  unsigned long long t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}
constexpr int kMaxStampBlocks = 2048;
template <int R, int U>
__global__ void __launch_bounds__(128) anatomy_phase_kernel(Phase ph, unsigned long long* stamps) {
  __shared__ unsigned red[32];
  unsigned long long t0 = now_ns();
  Batch<R, U> cur, nxt;
  first_batch<R, U, 0>(ph, cur);
  gdc_wait();
  const unsigned long long t1 = now_ns();
  gdc_trigger();
  const unsigned xin = stage_in(ph, red);
  const unsigned long long t2 = now_ns();
  run_phase<R, U, 0>(ph, xin, cur, nxt);
  __syncthreads();
  if (threadIdx.x == 0 && blockIdx.x < kMaxStampBlocks) {
    unsigned long long* s = stamps + 4 * blockIdx.x;
    s[0] = t0;
    s[1] = t1;
    s[2] = t2;
    s[3] = now_ns();
  }
}
// The floor of a dependent launch: a kernel that only waits and triggers.
// ---- --dataflow (session 12): the MLP's two phases in one kernel, ordered by per-slice counters, no barrier ----
// Sessions 7-8 found ~2 us per phase of drain and refill that neither grid barriers nor L2 prefetch remove: a
// barrier still makes every SM wait for the slowest. Here down depends on gate_up only through its K slice (act[k]
// needs gate and up rows k alone), so down is split over K into S slices of 1024 columns (one 512-byte piece a row)
// and an item of down (slice s, RB rows) starts as soon as the gate_up row groups of slice s are done; a warp that
// finishes its gate_up groups early streams down items while the others finish theirs. gate_up's rows are taken to
// be laid out slice by slice (the 1024 gate rows of slice s, then its 1024 up rows), as the engine's loader could
// write them. Down's partial sums per slice go to a scratch; the warp that completes the last slice of a row group
// adds the S partials in a fixed order (the engine's numerics would stay deterministic). Static schedule: warp w of W
// takes gate_up groups w, w + W, ... then down items w, w + W, ... (item j = slice j / groups, group j % groups), so
// every warp a down item waits on has already been given all its gate_up work: no deadlock with a resident grid.
struct Flow {
  Phase gu, dn;        // dn.nch = K / 32 chunks; one slice = 32 chunks
  unsigned* ready;     // [S] gate_up row groups done, per slice (zeroed each replay)
  unsigned* rowdone;   // [dn.rows / RB] slices done, per down row group (zeroed each replay)
  unsigned* part;      // [S][dn.rows] partial sums
  int xslice;          // 1: each down item reads its x slice (16 words a lane, 32 fp16 values) from L2
};

__device__ __forceinline__ unsigned ld_acquire(const unsigned* p) {
  unsigned v;
  asm volatile("ld.acquire.gpu.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
  return v;
}

// Phase A of the flow kernels: gate_up, R4 U2 as run_phase, plus a release of the group's slice after each group
// (FENCE false: the timing-only bound without the fence).
template <int RA, int UA, bool FENCE>
__device__ void flow_phase_a(const Flow& f, int w, int W, int lane, int rows_per_slice) {
  Batch<RA, UA> cur, nxt;
  first_batch<RA, UA, 0>(f.gu, cur);
  gdc_wait();
  const Phase& ph = f.gu;
  const int ngroups = ph.rows / RA;
  for (int g = w; g < ngroups; g += W) {
    unsigned acc[RA];
#pragma unroll
    for (int i = 0; i < RA; ++i) acc[i] = 0;
    for (int cb = lane; cb < ph.nch; cb += 32 * UA) {
      int ncb = cb + 32 * UA, ng = g;
      if (ncb >= ph.nch) {
        ncb = lane;
        ng = g + W;
      }
      if (ng < ngroups) load_batch<RA, UA, 0>(nxt, ph, ng, ncb);
#pragma unroll
      for (int i = 0; i < RA; ++i)
#pragma unroll
        for (int u = 0; u < UA; ++u) acc[i] ^= cur.v[i][u].x ^ cur.v[i][u].y ^ cur.v[i][u].z ^ cur.v[i][u].w;
      cur = nxt;
    }
#pragma unroll
    for (int i = 0; i < RA; ++i) {
      unsigned a = acc[i];
      for (int o = 16; o; o >>= 1) a ^= __shfl_xor_sync(0xffffffffu, a, o);
      if (lane == i) ph.out[g * RA + i] = a;
    }
    if (FENCE) __threadfence();
    __syncwarp();
    if (lane == 0) atomicAdd(f.ready + (g * RA) / rows_per_slice, 1u);
  }
}

template <int RA, int UA, int RB>
__global__ void __launch_bounds__(128) flow_kernel(Flow f) {
  const int lane = threadIdx.x & 31;
  const int W = gridDim.x * (blockDim.x >> 5), w = blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5);
  const int S = f.dn.nch / 32;
  const int rows_per_slice = f.gu.rows / S, groups_per_slice = rows_per_slice / RA;
  flow_phase_a<RA, UA, true>(f, w, W, lane, rows_per_slice);
  gdc_trigger();
  // phase B: down items (slice, RB rows), one 16-byte chunk a row a lane
  const Phase& dn = f.dn;
  const int ngb = dn.rows / RB, total = S * ngb;
  uint4 cur[RB], nxt[RB];
  auto load_item = [&](uint4(&v)[RB], int j) {
    const int s = j / ngb, g = j - s * ngb;
#pragma unroll
    for (int i = 0; i < RB; ++i) v[i] = ldna(dn.w + (size_t)(g * RB + i) * dn.nch + 32 * s + lane);
  };
  if (w < total) load_item(cur, w);
  int known = -1;
  for (int j = w; j < total; j += W) {
    if (j + W < total) load_item(nxt, j + W);
    const int s = j / ngb, g = j - s * ngb;
    if (s != known) {
      if (lane == 0)
        while (ld_acquire(f.ready + s) < (unsigned)groups_per_slice) __nanosleep(32);
      __syncwarp();
      known = s;
    }
    unsigned x = 0;
    if (f.xslice) {
      const unsigned* xs = f.gu.out + s * 512 + lane * 16;
#pragma unroll
      for (int k = 0; k < 16; ++k) x ^= __ldcg(xs + k);
    }
#pragma unroll
    for (int i = 0; i < RB; ++i) {
      unsigned a = cur[i].x ^ cur[i].y ^ cur[i].z ^ cur[i].w ^ x;
      for (int o = 16; o; o >>= 1) a ^= __shfl_xor_sync(0xffffffffu, a, o);
      if (lane == i) f.part[(size_t)s * dn.rows + g * RB + i] = a;
    }
    __threadfence();
    __syncwarp();
    unsigned prev = 0;
    if (lane == 0) prev = atomicAdd(f.rowdone + g, 1u);
    prev = __shfl_sync(0xffffffffu, prev, 0);
    if (prev == (unsigned)S - 1) {  // the last slice of this row group: add the partials in slice order
      __threadfence();
      if (lane < RB) {
        unsigned sum = 0;
        for (int t = 0; t < S; ++t) sum += __ldcg(f.part + (size_t)t * dn.rows + g * RB + lane);
        dn.out[g * RB + lane] = sum;
      }
    }
#pragma unroll
    for (int i = 0; i < RB; ++i) cur[i] = nxt[i];
  }
}

// flow2_kernel (session 12, second form): phase A as flow_kernel's; phase B as the engine's variant 4 walks down (a
// warp owns RB whole rows, UB chunks a row in flight, lane l takes chunks l, l + 32, ...), waiting before it folds a
// batch until the slices the batch covers (chunk c is in slice c / 32) are ready. No split over K, so no partial sums,
// no atomics in phase B: each warp checks a slice's counter once (lane-wide acquire loads). MODE 0: as described;
// timing-only bounds (not correct synchronisation): 1 without the fence before each release, 2 also without waits.
template <int RA, int UA, int RB, int UB, int MODE = 0>
__global__ void __launch_bounds__(128, 6) flow2_kernel(Flow f) {
  const int lane = threadIdx.x & 31;
  const int W = gridDim.x * (blockDim.x >> 5), w = blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5);
  const int S = f.dn.nch / 32;
  const int rows_per_slice = f.gu.rows / S, groups_per_slice = rows_per_slice / RA;
  flow_phase_a<RA, UA, MODE == 0>(f, w, W, lane, rows_per_slice);
  gdc_trigger();
  const Phase& dn = f.dn;
  const int ngb = dn.rows / RB;
  Batch<RB, UB> cur, nxt;
  int ready_upto = 0;  // slices [0, ready_upto) seen ready by this warp
  for (int g = w; g < ngb; g += W) {
    if (g == w) load_batch<RB, UB, 0>(cur, dn, g, lane);
    unsigned acc[RB];
#pragma unroll
    for (int i = 0; i < RB; ++i) acc[i] = 0;
    for (int cb = lane; cb < dn.nch; cb += 32 * UB) {
      int ncb = cb + 32 * UB, ng = g;
      if (ncb >= dn.nch) {
        ncb = lane;
        ng = g + W;
      }
      if (ng < ngb) load_batch<RB, UB, 0>(nxt, dn, ng, ncb);
      const int need = min(S, (cb - lane) / 32 + UB);  // slices this batch covers, all of them
      while (MODE < 2 && ready_upto < need) {
        while (ld_acquire(f.ready + ready_upto) < (unsigned)groups_per_slice) __nanosleep(32);
        ++ready_upto;
      }
      unsigned x = 0;
      if (f.xslice) {  // the batch's x through L1 (weak loads after the acquire), 16 words a lane per chunk
#pragma unroll
        for (int u = 0; u < UB; ++u) {
          const unsigned* xs = f.gu.out + (cb + 32 * u) * 16;
          if (cb + 32 * u < dn.nch)
#pragma unroll
            for (int k = 0; k < 16; k += 4) {
              const uint4 v = *reinterpret_cast<const uint4*>(xs + k);
              x ^= v.x ^ v.y ^ v.z ^ v.w;
            }
        }
      }
#pragma unroll
      for (int i = 0; i < RB; ++i)
#pragma unroll
        for (int u = 0; u < UB; ++u) acc[i] ^= cur.v[i][u].x ^ cur.v[i][u].y ^ cur.v[i][u].z ^ cur.v[i][u].w ^ x;
      cur = nxt;
    }
#pragma unroll
    for (int i = 0; i < RB; ++i) {
      unsigned a = acc[i];
      for (int o = 16; o; o >>= 1) a ^= __shfl_xor_sync(0xffffffffu, a, o);
      if (lane == i) dn.out[g * RB + i] = a;
    }
  }
}

__global__ void empty_pdl_kernel() {
  gdc_wait();
  gdc_trigger();
}

template <typename Kern, typename... Args>
void launch(Kern kern, int grid, bool pdl, cudaStream_t st, Args... args) {
  launch_nt(kern, grid, 128, pdl, st, args...);
}


struct Setup {
  std::vector<Phase> phases;
  Phase* d_phases;
  unsigned* ctr;
  double bytes;
  uint4* base;
  long long n16;
};

int occupancy(const void* kern) {
  int n = 0;
  CK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&n, kern, 128, 0));
  return n;
}

// One chain of phases (indices `idx` into S.phases) timed in four ways for one body: a kernel per phase (plain and
// PDL), a persistent kernel per group of `per_kernel` phases (PDL between them), and all in one kernel.
struct Bodies {
  void (*phase)(Phase);                                     // one phase per launch
  void (*persist)(const Phase*, int, int, unsigned*, int);  // phases [p0, p1) with grid barriers
  int rows_per_warp;                                        // 0: flat (grid = one resident wave)
};

struct Named {
  const char* name;
  Bodies b;
};

struct Chain {
  std::vector<int> idx;  // phases, in order (consecutive in S.phases for the persistent modes)
  double bytes;
};

float time_per_phase(const Setup& S, cudaStream_t st, int sms, const Bodies& b, const Chain& c, bool pdl) {
  const int occ = occupancy((const void*)b.phase);
  return time_graph(st, [&] {
    for (int i : c.idx) {
      const Phase& ph = S.phases[i];
      int grid = sms * occ;
      if (b.rows_per_warp) grid = std::min(grid, ((ph.rows + b.rows_per_warp - 1) / b.rows_per_warp + 3) / 4);
      launch(b.phase, grid, pdl, st, ph);
    }
  }, 15);
}
float time_persist(const Setup& S, cudaStream_t st, int sms, const Bodies& b, const Chain& c, int per_kernel) {
  const int grid = sms * occupancy((const void*)b.persist);
  const int n = (int)c.idx.size();
  return time_graph(st, [&] {
    CK(cudaMemsetAsync(S.ctr, 0, 4, st));
    for (int k = 0; k < n; k += per_kernel) {
      const int p0 = c.idx[k], p1 = c.idx[std::min(n, k + per_kernel) - 1] + 1;
      launch(b.persist, grid, k > 0, st, (const Phase*)S.d_phases, p0, p1, S.ctr, k - k / per_kernel);
    }
  }, 15);
}

void report(const char* what, float ms, const Chain& c, double flat_gbs) {
  const double gbs = c.bytes / 1e9 / (ms * 1e-3);
  const double over = (ms * 1e3 - c.bytes / (flat_gbs * 1e3)) / c.idx.size();
  std::printf("  %-28s %8.2f us/phase %7.0f GB/s (%4.1f%% of flat)  %6.2f us/phase over flat\n", what,
              ms * 1e3 / c.idx.size(), gbs, 100.0 * gbs / flat_gbs, over);
}

template <int R, int U, int LAYOUT>
Bodies rows_body() {
  return {phase_kernel<R, U, LAYOUT>, persist_kernel<R, U, LAYOUT>, R};
}

int main(int argc, char** argv) {
  const std::string mode = argc > 1 ? argv[1] : "";
  const bool prefetch_only = mode == "--prefetch-only";
  int dev = 0, sms = 0;
  CK(cudaGetDevice(&dev));
  CK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
  const int layers = 16;
  const int shapes[4][2] = {{16480, 5120}, {5120, 6144}, {34816, 5120}, {5120, 17408}};  // rows, K (4-bit)
  const char* names[4] = {"gdn_in", "gdn_out", "gate_up", "down"};
  long long per_layer16 = 0;
  for (auto& s : shapes) per_layer16 += (long long)s[0] * (s[1] / 32);
  Setup S;
  S.n16 = per_layer16 * layers;
  S.bytes = 16.0 * (double)S.n16;
  CK(cudaMalloc(&S.base, S.n16 * 16));
  fill_codes_kernel<<<sms * 8, 256>>>(S.base, S.n16, 12345u);
  unsigned* outs;
  CK(cudaMalloc(&outs, sizeof(unsigned) * 40000 * 4 * layers));
  CK(cudaMemset(outs, 0, sizeof(unsigned) * 40000 * 4 * layers));
  CK(cudaMalloc(&S.ctr, 4));
  long long off = 0;
  const unsigned* prev = nullptr;
  int prev_n = 0;
  for (int l = 0; l < layers; ++l)
    for (int p = 0; p < 4; ++p) {
      Phase ph;
      ph.w = S.base + off;
      ph.rows = shapes[p][0];
      ph.nch = shapes[p][1] / 32;
      ph.in = prev;
      ph.nin = prev ? std::min(prev_n, shapes[p][1] / 2) : 0;  // K fp16 values = K / 2 words, as a GEMV stages x
      ph.out = outs + (size_t)(l * 4 + p) * 40000;
      off += (long long)ph.rows * ph.nch;
      S.phases.push_back(ph);
      prev = ph.out;
      prev_n = ph.rows;
    }
  CK(cudaMalloc(&S.d_phases, sizeof(Phase) * S.phases.size()));
  CK(cudaMemcpy(S.d_phases, S.phases.data(), sizeof(Phase) * S.phases.size(), cudaMemcpyHostToDevice));
  CK(cudaDeviceSynchronize());
  cudaStream_t st;
  CK(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
  const float flat_ms = time_graph(st, [&] { flat_stream_kernel<<<sms * 8, 256, 0, st>>>(S.base, S.n16, outs); }, 15);
  const double flat_gbs = S.bytes / 1e9 / (flat_ms * 1e-3);
  std::printf("%d layers x 4 phases, %.3f GB; one flat stream over all of it: %.0f GB/s (%d SMs)\n", layers,
              S.bytes / 1e9, flat_gbs, sms);

  Chain all;
  for (int i = 0; i < 4 * layers; ++i) all.idx.push_back(i);
  all.bytes = S.bytes;
  if (mode == "--replicas") {
    // Session 26: is the x read in front of each phase slow because every block reads the same few L2 lines at
    // once (the slices holding x serve all SMs' requests for them), or because of its round trips? Each phase
    // writes its output to `reps` copies (160 KB + 256 B apart, so a line's copies sit in different slices) and
    // block b reads copy b % reps. If hot slices are the cost, more copies recover the x-free rate; if round trips
    // are, copies change nothing. Whole layers, a kernel per phase with PDL.
    const long long stride = 40064;
    constexpr int kMaxReps = 32;
    unsigned* reps_buf;
    CK(cudaMalloc(&reps_buf, sizeof(unsigned) * stride * kMaxReps * S.phases.size()));
    CK(cudaMemset(reps_buf, 0, sizeof(unsigned) * stride * kMaxReps * S.phases.size()));
    const std::vector<Phase> base_phases = S.phases;
    const Named rb[] = {{"flat", {flat_phase_kernel, flat_persist_kernel, 0}},
                        {"rowmajor R2U4", rows_body<2, 4, 0>()},
                        {"rowmajor R4U2", rows_body<4, 2, 0>()}};
    for (int div : {1, 4, 1000000}) {
      std::printf("\nwhole layers, x staged per block / %d%s, by copies of x, a kernel per phase with PDL\n", div,
                  div > 1000 ? " (none)" : "");
      for (int reps : {1, 2, 4, 8, 16, 32}) {
        if (div > 1000 && reps > 1) break;
        for (size_t i = 0; i < S.phases.size(); ++i) {
          Phase& ph = S.phases[i];
          ph = base_phases[i];
          ph.out = reps_buf + (long long)i * stride * kMaxReps;
          ph.in = i ? reps_buf + (long long)(i - 1) * stride * kMaxReps : nullptr;  // the chain of main's setup
          ph.nin = ph.in ? std::max(0, base_phases[i].nin / div) : 0;
          ph.in_reps = ph.out_reps = reps;
          ph.rep_stride = stride;
        }
        for (const Named& n : rb) {
          char label[64];
          std::snprintf(label, sizeof label, "%s, %d cop%s", n.name, reps, reps > 1 ? "ies" : "y");
          report(label, time_per_phase(S, st, sms, n.b, all, true), all, flat_gbs);
        }
      }
    }
    return 0;
  }
  if (mode == "--dataflow") {
    // Session 12: gate_up + down as one dataflow kernel (flow_kernel) against two kernels with PDL, no x read in
    // the phase kernels (the engine stages x once per SM; the probe's per-block read is heavier than it).
    for (Phase& ph : S.phases) ph.nin = 0;
    const int S_ = shapes[3][1] / 1024;
    unsigned *ctrs, *parts;
    const size_t ctr_words = 2048, part_words = (size_t)S_ * shapes[3][0];
    CK(cudaMalloc(&ctrs, sizeof(unsigned) * ctr_words * layers));
    CK(cudaMalloc(&parts, sizeof(unsigned) * part_words * layers));
    auto flows = [&](int xslice) {
      std::vector<Flow> v;
      for (int l = 0; l < layers; ++l) {
        Flow f;
        f.gu = S.phases[l * 4 + 2];
        f.dn = S.phases[l * 4 + 3];
        f.ready = ctrs + ctr_words * l;
        f.rowdone = f.ready + 32;
        f.part = parts + part_words * l;
        f.xslice = xslice;
        v.push_back(f);
      }
      return v;
    };
    struct FlowBody {
      const char* name;
      void (*k)(Flow);
    };
    const FlowBody fb[] = {{"flow A R4U2, B RB4", flow_kernel<4, 2, 4>},
                           {"flow A R4U2, B RB8", flow_kernel<4, 2, 8>},
                           {"flow A R4U2, B RB16", flow_kernel<4, 2, 16>},
                           {"flow2 A R4U2, B R2U2", flow2_kernel<4, 2, 2, 2>},
                           {"flow2 A R4U2, B R2U4", flow2_kernel<4, 2, 2, 4>},
                           {"flow2 A R4U2, B R4U2", flow2_kernel<4, 2, 4, 2>},
                           {"flow2 R2U2, no fence (bound)", flow2_kernel<4, 2, 2, 2, 1>},
                           {"flow2 R2U2, no sync (bound)", flow2_kernel<4, 2, 2, 2, 2>}};
    const Bodies r42 = rows_body<4, 2, 0>();
    Chain mlp;
    for (int l = 0; l < layers; ++l) mlp.idx.insert(mlp.idx.end(), {l * 4 + 2, l * 4 + 3});
    mlp.bytes = 16.0 * ((double)shapes[2][0] * (shapes[2][1] / 32) + (double)shapes[3][0] * (shapes[3][1] / 32)) * layers;
    // The flow kernels' own check: every down output is the sum of its S partials, so a replay must leave the same
    // outputs as the next (a missed or double count changes them); printed as "outputs stable".
    auto time_flow = [&](const FlowBody& b, int xslice, bool whole) {
      const std::vector<Flow> v = flows(xslice);
      const int grid = sms * occupancy((const void*)b.k);
      return time_graph(st, [&] {
        CK(cudaMemsetAsync(ctrs, 0, sizeof(unsigned) * ctr_words * layers, st));
        for (int l = 0; l < layers; ++l) {
          if (whole)
            for (int p : {0, 1}) {
              const Phase& ph = S.phases[l * 4 + p];
              launch(r42.phase, std::min(sms * occupancy((const void*)r42.phase), ((ph.rows + 3) / 4 + 3) / 4), true, st, ph);
            }
          launch(b.k, grid, true, st, v[l]);
        }
      }, 15);
    };
    std::printf("\nMLP only (gate_up + down) x %d, no x read; occupancy: phase kernel %d", layers, occupancy((const void*)r42.phase));
    for (const FlowBody& b : fb) std::printf(", %s %d", b.name, occupancy((const void*)b.k));
    std::printf("\n");
    report("R4U2 two kernels, PDL", time_per_phase(S, st, sms, r42, mlp, true), mlp, flat_gbs);
    for (const FlowBody& b : fb)
      for (int xs : {0, 1}) {
        char label[64];
        std::snprintf(label, sizeof label, "%s%s", b.name, xs ? " +x slice" : "");
        report(label, time_flow(b, xs, false), mlp, flat_gbs);
      }
    std::printf("whole layers (gdn_in, gdn_out as kernels, then the MLP)\n");
    report("R4U2 four kernels, PDL", time_per_phase(S, st, sms, r42, all, true), all, flat_gbs);
    for (const FlowBody& b : fb) report(b.name, time_flow(b, 0, true), all, flat_gbs);
    // correctness of the counting: the down outputs of two replays agree, and equal a host sum of the partials
    std::vector<unsigned> o1(shapes[3][0]), o2(shapes[3][0]), pp(part_words);
    for (int rep = 0; rep < 2; ++rep) {
      time_flow(fb[1], 1, false);
      CK(cudaMemcpy((rep ? o2 : o1).data(), S.phases[3].out, sizeof(unsigned) * shapes[3][0], cudaMemcpyDeviceToHost));
    }
    CK(cudaMemcpy(pp.data(), parts, sizeof(unsigned) * part_words, cudaMemcpyDeviceToHost));
    int bad = 0;
    for (int r = 0; r < shapes[3][0]; ++r) {
      unsigned s = 0;
      for (int t = 0; t < S_; ++t) s += pp[(size_t)t * shapes[3][0] + r];
      bad += s != o1[r] || o1[r] != o2[r];
    }
    std::printf("outputs stable and equal to the partials' sums: %s (%d rows differ)\n", bad ? "NO" : "yes", bad);
    std::vector<unsigned> q1(shapes[3][0]), q2(shapes[3][0]);
    for (int rep = 0; rep < 2; ++rep) {
      time_flow(fb[3], 0, false);
      CK(cudaMemcpy((rep ? q2 : q1).data(), S.phases[3].out, sizeof(unsigned) * shapes[3][0], cudaMemcpyDeviceToHost));
    }
    time_per_phase(S, st, sms, r42, mlp, true);  // the two-kernel chain writes the same words as flow2 with no x
    CK(cudaMemcpy(o1.data(), S.phases[3].out, sizeof(unsigned) * shapes[3][0], cudaMemcpyDeviceToHost));
    bad = 0;
    for (int r = 0; r < shapes[3][0]; ++r) bad += q1[r] != q2[r];
    std::printf("flow2 outputs stable over replays: %s (%d rows differ)\n", bad ? "NO" : "yes", bad);
    return 0;
  }
  if (mode == "--anatomy") {
    // (1) the launch floor: 64 kernels that only wait and trigger, with PDL and without
    for (int pdl : {1, 0}) {
      const float ms = time_graph(st, [&] {
        for (int i = 0; i < 64; ++i) launch(empty_pdl_kernel, sms, pdl, st);
      }, 15);
      std::printf("empty kernels (%d blocks), %s: %.2f us each\n", sms, pdl ? "PDL" : "plain", ms * 1e3 / 64);
    }
    // (2) every phase of the whole-layer chain (R4 U2, row-major, PDL), stamped per block, with and without the x read
    const int occ = occupancy((const void*)anatomy_phase_kernel<4, 2>);
    const int nph = (int)S.phases.size();
    unsigned long long* stamps;
    CK(cudaMalloc(&stamps, sizeof(unsigned long long) * 4 * kMaxStampBlocks * nph));
    std::vector<int> grids(nph);
    // blocks per SM: every slot of a resident wave, or half of them (the next phase's blocks can then be resident,
    // their first batch requested, while this phase still runs)
    for (int slots : {occ, std::max(1, occ / 2)})
    for (int staged : {1, 0}) {
      for (int i = 0; i < nph; ++i) grids[i] = std::min(sms * slots, ((S.phases[i].rows + 3) / 4 + 3) / 4);
      for (Phase& ph : S.phases) ph.nin = staged && ph.in ? ph.nch * 16 : 0;
      CK(cudaMemset(stamps, 0, sizeof(unsigned long long) * 4 * kMaxStampBlocks * nph));
      const float ms = time_graph(st, [&] {
        for (int i = 0; i < nph; ++i)
          launch(anatomy_phase_kernel<4, 2>, grids[i], true, st, S.phases[i], stamps + (size_t)4 * kMaxStampBlocks * i);
      }, 15);
      std::vector<unsigned long long> h((size_t)4 * kMaxStampBlocks * nph);
      CK(cudaMemcpy(h.data(), stamps, h.size() * sizeof(unsigned long long), cudaMemcpyDeviceToHost));  // last replay
      std::printf("\nanatomy, R4 U2 row-major, kernel per phase with PDL, %d of %d block slots per SM, %s: %.2f us per "
                  "phase (%.0f GB/s, %.1f%% of flat); per shape, averaged over layers 1..%d (us):\n", slots, occ,
                  staged ? "every block reads x" : "no x read", ms * 1e3 / nph, S.bytes / 1e9 / (ms * 1e-3),
                  100.0 * S.bytes / 1e9 / (ms * 1e-3) / flat_gbs, layers - 1);
      std::printf("  %-8s %9s %9s %9s %9s %9s %9s\n", "shape", "early", "release", "x read", "stream", "tail", "phase");
      // early: the previous phase's last block end minus this phase's first block start (blocks resident ahead);
      // release: median wait exit after the previous phase's last block end; x read: median t2 - t1; stream: median
      // t3 - median t2; tail: last t3 - median t3; phase: last t3 - the previous phase's last t3
      double acc[4][6] = {};
      for (int i = 4; i < nph; ++i) {
        auto col = [&](int phase, int k) {
          std::vector<double> v;
          const int n = std::min(grids[phase], kMaxStampBlocks);
          for (int b = 0; b < n; ++b) v.push_back((double)h[(size_t)4 * kMaxStampBlocks * phase + 4 * b + k]);
          std::sort(v.begin(), v.end());
          return v;
        };
        const std::vector<double> p3 = col(i - 1, 3), t0 = col(i, 0), t1 = col(i, 1), t2 = col(i, 2), t3 = col(i, 3);
        const double prev_end = p3.back();
        auto med = [](const std::vector<double>& v) { return v[v.size() / 2]; };
        const double m[6] = {prev_end - t0.front(), med(t1) - prev_end, med(t2) - med(t1), med(t3) - med(t2),
                             t3.back() - med(t3), t3.back() - prev_end};
        for (int k = 0; k < 6; ++k) acc[i % 4][k] += m[k] * 1e-3;
      }
      for (int p = 0; p < 4; ++p) {
        std::printf("  %-8s", names[p]);
        for (int k = 0; k < 6; ++k) std::printf(" %9.2f", acc[p][k] / (layers - 1));
        std::printf("\n");
      }
    }
    return 0;
  }
  if (mode == "--smflat") {
    struct Sm {
      const char* name;
      void (*k)(Phase);
      int nt;
    };
    const Sm sm_bodies[] = {
        {"smflat 256 thr D16", smflat_kernel<256, 16>, 256},   {"smflat 512 thr D8", smflat_kernel<512, 8>, 512},
        {"smflat 512 thr D16", smflat_kernel<512, 16>, 512},   {"smflat 1024 thr D4", smflat_kernel<1024, 4>, 1024},
        {"smflat 1024 thr D8", smflat_kernel<1024, 8>, 1024},
    };
    auto time_sm = [&](const Sm& b, const Chain& c) {
      return time_graph(st, [&] {
        for (int i : c.idx) launch_nt(b.k, sms, b.nt, true, st, S.phases[i]);
      }, 15);
    };
    const Bodies flat = {flat_phase_kernel, flat_persist_kernel, 0}, r22 = rows_body<2, 2, 0>(), r42 = rows_body<4, 2, 0>(),
                 r24 = rows_body<2, 4, 0>();
    for (int staged : {0, 1}) {
      for (Phase& ph : S.phases) ph.nin = staged && ph.in ? ph.nch * 16 : 0;
      std::printf("\n%s, a kernel per phase with PDL\n", staged ? "every block reads x (K / 2 words; smflat: once per SM)"
                                                              : "no x read");
      std::printf("whole layers\n");
      report("flat (grid-strided)", time_per_phase(S, st, sms, flat, all, true), all, flat_gbs);
      report("rowmajor R2U2", time_per_phase(S, st, sms, r22, all, true), all, flat_gbs);
      report("rowmajor R4U2", time_per_phase(S, st, sms, r42, all, true), all, flat_gbs);
      for (const Sm& b : sm_bodies) report(b.name, time_sm(b, all), all, flat_gbs);
      for (int p = 0; p < 4; ++p) {
        Chain c;
        for (int l = 0; l < layers; ++l) c.idx.push_back(l * 4 + p);
        c.bytes = 16.0 * shapes[p][0] * (shapes[p][1] / 32) * layers;
        std::printf("%s (%d x %d, %.1f MB)\n", names[p], shapes[p][0], shapes[p][1], c.bytes / layers / 1e6);
        report("flat (grid-strided)", time_per_phase(S, st, sms, flat, c, true), c, flat_gbs);
        report("rowmajor R2U2", time_per_phase(S, st, sms, r22, c, true), c, flat_gbs);
        report("rowmajor R4U2", time_per_phase(S, st, sms, r42, c, true), c, flat_gbs);
        report("rowmajor R2U4", time_per_phase(S, st, sms, r24, c, true), c, flat_gbs);
        for (const Sm& b : sm_bodies) report(b.name, time_sm(b, c), c, flat_gbs);
      }
    }
    return 0;
  }
  if (prefetch_only) {
    // Call 5: one kernel for all layers, grid barriers between phases, and each warp's next PF batches of the next
    // phase prefetched to L2 before it arrives at a barrier; with every block's x read (K / 2 words) and without.
    const Bodies pdl42 = rows_body<4, 2, 0>(), pdl24 = rows_body<2, 4, 0>();
    const struct {
      const char* name;
      Bodies b;
    } pf[] = {
        {"R4U2 one kernel, PF 0", {nullptr, persist_kernel<4, 2, 0, 0>, 4}},
        {"R4U2 one kernel, PF 1", {nullptr, persist_kernel<4, 2, 0, 1>, 4}},
        {"R4U2 one kernel, PF 2", {nullptr, persist_kernel<4, 2, 0, 2>, 4}},
        {"R4U2 one kernel, PF 4", {nullptr, persist_kernel<4, 2, 0, 4>, 4}},
        {"R4U2 one kernel, PF 8", {nullptr, persist_kernel<4, 2, 0, 8>, 4}},
        {"R2U4 one kernel, PF 0", {nullptr, persist_kernel<2, 4, 0, 0>, 2}},
        {"R2U4 one kernel, PF 2", {nullptr, persist_kernel<2, 4, 0, 2>, 2}},
        {"R2U4 one kernel, PF 4", {nullptr, persist_kernel<2, 4, 0, 4>, 2}},
    };
    for (int staged : {1, 0}) {
      for (Phase& ph : S.phases) ph.nin = staged && ph.in ? ph.nch * 16 : 0;  // K / 2 words = 16 per 16-byte chunk
      CK(cudaMemcpy(S.d_phases, S.phases.data(), sizeof(Phase) * S.phases.size(), cudaMemcpyHostToDevice));
      std::printf("\nwhole layers, %s\n", staged ? "every block reads x (K / 2 words)" : "no x read");
      report("R4U2 kernel per phase, PDL", time_per_phase(S, st, sms, pdl42, all, true), all, flat_gbs);
      report("R2U4 kernel per phase, PDL", time_per_phase(S, st, sms, pdl24, all, true), all, flat_gbs);
      for (const auto& n : pf) report(n.name, time_persist(S, st, sms, n.b, all, 4 * layers), all, flat_gbs);
    }
    return 0;
  }
  const Named bodies[] = {
      {"flat", {flat_phase_kernel, flat_persist_kernel, 0}},
      {"rowmajor R4U2", rows_body<4, 2, 0>()},
      {"ordered  R4U2", rows_body<4, 2, 1>()},
      {"rowmajor R2U4", rows_body<2, 4, 0>()},
      {"ordered  R2U4", rows_body<2, 4, 1>()},
      {"ordered  R4U1", rows_body<4, 1, 1>()},
      {"ordered  R1U4", rows_body<1, 4, 1>()},
      {"ordered  R2U2", rows_body<2, 2, 1>()},
  };
  std::printf("\nwhole layers (gdn_in, gdn_out, gate_up, down) x %d; occupancy per phase kernel / persistent kernel\n", layers);
  for (const Named& n : bodies) {
    std::printf("%s (occ %d / %d)\n", n.name, occupancy((const void*)n.b.phase), occupancy((const void*)n.b.persist));
    report("kernel per phase, plain", time_per_phase(S, st, sms, n.b, all, false), all, flat_gbs);
    report("kernel per phase, PDL", time_per_phase(S, st, sms, n.b, all, true), all, flat_gbs);
    report("kernel per layer, barriers", time_persist(S, st, sms, n.b, all, 4), all, flat_gbs);
    report("one kernel, barriers", time_persist(S, st, sms, n.b, all, 4 * layers), all, flat_gbs);
  }
  std::printf("\none shape at a time: %d matrices of the shape, a kernel per phase with PDL\n", layers);
  for (int p = 0; p < 4; ++p) {
    Chain c;
    for (int l = 0; l < layers; ++l) c.idx.push_back(l * 4 + p);
    c.bytes = 16.0 * shapes[p][0] * (shapes[p][1] / 32) * layers;
    std::printf("%s (%d x %d, %.1f MB)\n", names[p], shapes[p][0], shapes[p][1], c.bytes / layers / 1e6);
    for (const Named& n : bodies) report(n.name, time_per_phase(S, st, sms, n.b, c, true), c, flat_gbs);
  }
  // The same whole-layer chain with less x staged per block: does the per-phase loss follow the bytes every block
  // reads from L2 before it streams (blocks x K / 2 words), or is it fixed?
  for (int div : {4, 1000000}) {
    for (Phase& ph : S.phases) ph.nin = ph.in ? std::max(0, ph.nin / div) : 0;
    CK(cudaMemcpy(S.d_phases, S.phases.data(), sizeof(Phase) * S.phases.size(), cudaMemcpyHostToDevice));
    std::printf("\nwhole layers, x staged per block / %d%s, a kernel per phase with PDL\n", div, div > 1000 ? " (none)" : "");
    for (int k = 0; k < 4; ++k) report(bodies[k].name, time_per_phase(S, st, sms, bodies[k].b, all, true), all, flat_gbs);
  }
  // Call 4: with no x staged, each shape alone, over more row-major patterns (the 5120-row shapes are the slow ones)
  const Named more[] = {
      {"flat", {flat_phase_kernel, flat_persist_kernel, 0}}, {"rowmajor R4U2", rows_body<4, 2, 0>()},
      {"rowmajor R2U4", rows_body<2, 4, 0>()}, {"rowmajor R2U2", rows_body<2, 2, 0>()},
      {"rowmajor R2U8", rows_body<2, 8, 0>()}, {"rowmajor R1U8", rows_body<1, 8, 0>()},
      {"rowmajor R4U4", rows_body<4, 4, 0>()}, {"rowmajor R1U4", rows_body<1, 4, 0>()},
  };
  std::printf("\nno x staged, one shape at a time, a kernel per phase with PDL\n");
  for (int p = 0; p < 4; ++p) {
    Chain c;
    for (int l = 0; l < layers; ++l) c.idx.push_back(l * 4 + p);
    c.bytes = 16.0 * shapes[p][0] * (shapes[p][1] / 32) * layers;
    std::printf("%s (%d x %d, %.1f MB)\n", names[p], shapes[p][0], shapes[p][1], c.bytes / layers / 1e6);
    for (const Named& n : more) {
      char label[64];
      std::snprintf(label, sizeof label, "%s (occ %d)", n.name, occupancy((const void*)n.b.phase));
      report(label, time_per_phase(S, st, sms, n.b, c, true), c, flat_gbs);
    }
  }
  return 0;
}
