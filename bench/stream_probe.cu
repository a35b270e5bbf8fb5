// Would a decode step streamed by one persistent kernel with a decoupled producer keep DRAM busy across the
// dependencies that today cost every GEMV a few microseconds?
//
// Standalone (no engine, no Python):
//   nvcc -O3 -std=c++17 -arch=sm_90 -o /tmp/sp bench/stream_probe.cu && /tmp/sp
//
// Sessions 7 and 12 (bench/boundary_probe.cu) found that a kernel per GEMV with PDL beats one kernel with grid
// barriers and one ordered by per-slice counters. In all of those, the warps that load the weights are the warps
// that wait for the previous phase, so DRAM idles while they wait; their prefetches (L2, or registers before the
// wait) only reach one batch ahead. Here each SM runs one block whose producer warp streams that SM's share of every
// weight matrix of the step, in order, into a ring of shared-memory stages with cp.async (sm_80+), never waiting for
// activations: only for a free stage. The consumer warps wait for the previous phase (a monotonic grid counter),
// stage its output as int8 x, and fold the ring's stages into row sums (dp4a on 4-bit codes). While they wait, the
// ring fills (today's H200 ring: up to 192 KB an SM, ~6 us of that SM's share of DRAM), so a dependency that is shorter
// than the ring costs no DRAM time. Weights do not depend on the token; only the consumers do.
//
// A layer is the four 4-bit matrices of a GDN layer of the 27B model (codes only): gdn_in (16480 x 5120), then a
// latency-bound "GDN step" phase (48 heads, each one block reading 64 KB of fp32 state and writing 64 KB), gdn_out
// (5120 x 6144), gate_up (34816 x 5120), down (5120 x 17408). 16 layers, about 3 GB of distinct codes.
// Each SM's share of a matrix is a contiguous range of whole rows (row-major codes), so the producer's stream is
// contiguous too.
//
// Timed (one CUDA graph, median of replays): one flat stream over all the codes (the reference), a kernel per
// phase with and without PDL (the first weights loaded into registers before griddepcontrol.wait, x staged after
// it), and the persistent kernel: 12 consumer warps, 1, 2 or 4 producer warps of cp.async (or, "+0", one bulk copy a
// stage, sm_90+), a 12-stage ring of 16 KB; with the fold or without it (stages only waited for and released: the
// schedule's own bound), with the grid counter's waits or without them (racy, a timing bound). The final layer's
// output of the persistent kernel is compared with the kernel-per-phase one (integer sums: equal bit for bit when
// the dataflow is right).
//
// Outcome (session 18, bench/results/stream-probe-h200-s18-call*.txt; bench/NOTES.md): refuted as a way to 85 %.
// With no arithmetic at all the ring streams at most ~77 % of the flat stream (call 7: 2 cp.async producers 77.2 %,
// bulk copies with no waits 77.3 %), the ceiling session 8 found for one contiguous stream an SM (76.7 %); the
// consumers' fold (a 512-byte piece at a time out of shared memory) brings it to ~45 %. Outputs right (0 differ).
// Call 8: reading each block's tiles interleaved over the matrix (a window at a time, as the flat stream) changes
// nothing (77.7 %): the ceiling is not the layout. Call 10: two blocks an SM, each with its own 4-stage ring, 60-66 %
// with no fold: not the number of copy streams an SM either; the bound follows the ring's total size and its release.
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "probe_stream.cuh"

namespace {

constexpr int kPhaseWarps = 8;  // the kernel-per-phase baseline's block (and the GDN stand-in's 256 threads)
constexpr int kPhaseThreads = 32 * kPhaseWarps;
constexpr int kStageBytes = 16384;
constexpr int kPiece = 512;           // one warp-wide 16-byte load; a row's bytes are a multiple of it
constexpr int kHeads = 48, kHeadDim = 128;
constexpr int kMaxK = 17408;
constexpr int kMaxBlockRows = 320;    // gate_up's 34816 rows over >= 110 blocks

struct Phase {
  int kind;                // 0: 4-bit GEMV, 1: the GDN step stand-in
  const uint8_t* w;        // GEMV: rows x K / 2 bytes, row-major
  int rows, K;
  const __half* x;         // the previous phase's output (K values read)
  __half* out;             // rows values (GEMV), kHeads * kHeadDim (GDN step)
  const float4* state;     // GDN step: kHeads x 128 x 128 fp32 in, out
  float4* state_out;
};

__device__ __forceinline__ unsigned smem_u32(const void* p) { return (unsigned)__cvta_generic_to_shared(p); }
// PDL exists from sm_90 on; below it a launch is plainly serialised and these are no-ops.
__device__ __forceinline__ void gdc_wait() {
#if __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}
__device__ __forceinline__ void gdc_trigger() {
#if __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}

__device__ __forceinline__ void mbar_init(uint64_t* b, unsigned count) {
  asm volatile("mbarrier.init.shared.b64 [%0], %1;" ::"r"(smem_u32(b)), "r"(count) : "memory");
}
__device__ __forceinline__ void mbar_arrive(uint64_t* b) {
  asm volatile("{ .reg .b64 st; mbarrier.arrive.shared.b64 st, [%0]; }" ::"r"(smem_u32(b)) : "memory");
}
__device__ __forceinline__ void mbar_wait(uint64_t* b, unsigned parity) {
  unsigned done;
  do {
    asm volatile(
        "{ .reg .pred p; mbarrier.test_wait.parity.shared.b64 p, [%1], %2; selp.u32 %0, 1, 0, p; }"
        : "=r"(done)
        : "r"(smem_u32(b)), "r"(parity)
        : "memory");
  } while (!done);
}
__device__ __forceinline__ void cp_async16(unsigned dst, const void* src) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(dst), "l"(src) : "memory");
}
// The stage's "full" barrier completes once this lane's earlier cp.asyncs have landed (counted: init with 32).
__device__ __forceinline__ void cp_async_arrive(uint64_t* b) {
  asm volatile("cp.async.mbarrier.arrive.noinc.shared.b64 [%0];" ::"r"(smem_u32(b)) : "memory");
}
// sm_90+: one bulk copy a stage (the copy engine's path, TMA without a tensor map), completing the stage's barrier
// by bytes. Below sm_90 this never runs (the host only launches NP = 0 where the device has compute capability 9+).
__device__ __forceinline__ void bulk_copy_stage(uint64_t* full, unsigned dst, const void* src, int bytes) {
#if __CUDA_ARCH__ >= 900
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(smem_u32(full)), "r"(bytes) : "memory");
  asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];" ::"r"(dst),
               "l"(src), "r"(bytes), "r"(smem_u32(full))
               : "memory");
#endif
}
__device__ __forceinline__ unsigned ld_acquire(const unsigned* p) {
  unsigned v;
  asm volatile("ld.acquire.gpu.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
  return v;
}
// Named barrier 1: the consumer warps only (the producer never waits for them).
__device__ __forceinline__ void consumers_sync(int nthreads) {
  asm volatile("bar.sync 1, %0;" ::"r"(nthreads) : "memory");
}

// Block b's rows of a phase of `rows` rows over `nblocks` blocks.
__device__ __forceinline__ void block_rows(int rows, int b, int nblocks, int& r0, int& r1) {
  r0 = (int)((long long)rows * b / nblocks);
  r1 = (int)((long long)rows * (b + 1) / nblocks);
}

// x for a GEMV: the previous phase's K fp16 outputs as int8 (x 64, saturated), read through L2 (written by other
// blocks of this grid), and the block's row sums zeroed. `tid` over `nthreads` threads. Stored permuted so that a
// warp's reads are free of bank conflicts: a piece of codes (512 bytes) meets 1024 x values (256 words), lane l
// the words 8 l .. 8 l + 7 of them; word 8 l + m is kept at 32 m + l. (Call 1 read them in place: 8-way conflicts,
// which made every schedule compute-bound at ~1 TB/s.)
__device__ void stage_x(const Phase& ph, int8_t* xs, int* acc, int nrows, int tid, int nthreads) {
  int* xw = reinterpret_cast<int*>(xs);
  for (int i = tid; i < ph.K / 8; i += nthreads) {
    const uint4 h = __ldcg(reinterpret_cast<const uint4*>(ph.x) + i);
    const __half* hv = reinterpret_cast<const __half*>(&h);
    auto q = [&](int j) { return (signed char)max(-127, min(127, __float2int_rn(__half2float(hv[j]) * 64.f))); };
    const char4 q0 = make_char4(q(0), q(1), q(2), q(3)), q1 = make_char4(q(4), q(5), q(6), q(7));
    for (int k = 0; k < 2; ++k) {
      const int w = 2 * i + k, blk = w >> 8, l = (w & 255) >> 3, m = w & 7;
      const char4 v = k ? q1 : q0;
      xw[(blk << 8) + 32 * m + l] = *reinterpret_cast<const int*>(&v);
    }
  }
  for (int i = tid; i < nrows; i += nthreads) acc[i] = 0;
}

// One lane's 16 bytes of codes (32 weights at byte column `col` of their row, col = a piece's start + 16 lane)
// against x: low nibbles meet one x word, high nibbles the next (a fixed pairing; the probe needs the work, not the
// model's layout).
__device__ __forceinline__ int dot16(uint4 c, const int8_t* xs, int col) {
  const int lane = threadIdx.x & 31;
  const int* xw = reinterpret_cast<const int*>(xs) + ((col >> 9) << 8) + lane;
  const unsigned w[4] = {c.x, c.y, c.z, c.w};
  int s = 0;
#pragma unroll
  for (int j = 0; j < 4; ++j) {
    s = __dp4a((int)(w[j] & 0x0f0f0f0fu), xw[32 * (2 * j)], s);
    s = __dp4a((int)((w[j] >> 4) & 0x0f0f0f0fu), xw[32 * (2 * j + 1)], s);
  }
  return s;
}
__device__ __forceinline__ void add_row(int* acc, int row, int s) {
#pragma unroll
  for (int o = 16; o; o >>= 1) s += __shfl_xor_sync(0xffffffffu, s, o);
  if ((threadIdx.x & 31) == 0) atomicAdd(acc + row, s);
}
// A warp's run of pieces in ascending order: the lane's partial sum is kept until the row changes, then added to the
// block's row sum (one warp reduction a row run, not a piece). `pb` is the piece's first byte in the block's range.
struct RowRun {
  int row = -1, part = 0;
  __device__ __forceinline__ void fold(int* acc, uint4 c, const int8_t* xs, int pb, int rb) {
    const int r = pb / rb;  // a piece lies in one row (rows are whole pieces)
    if (r != row) {
      flush(acc);
      row = r;
      part = 0;
    }
    part += dot16(c, xs, pb - r * rb + (threadIdx.x & 31) * 16);
  }
  __device__ __forceinline__ void flush(int* acc) {
    if (row >= 0) add_row(acc, row, part);
  }
};
__device__ void write_rows(const Phase& ph, const int* acc, int r0, int r1, int tid, int nthreads) {
  for (int r = r0 + tid; r < r1; r += nthreads) ph.out[r] = __float2half_rn((float)acc[r - r0] * (1.f / 4096.f));
}

// The GDN step stand-in, one head per block (blocks >= kHeads idle): 64 KB of state read and 64 KB written, a
// 128-long dot per state row against the head's slice of x. 256 threads: two a row, 32 floats each.
__device__ void gdn_step_head(const Phase& ph, int head, int tid) {
  const int row = tid >> 1, half = tid & 1;
  const float4* s = ph.state + ((size_t)head * kHeadDim + row) * (kHeadDim / 4) + half * 8;
  float4* so = ph.state_out + ((size_t)head * kHeadDim + row) * (kHeadDim / 4) + half * 8;
  const __half* xh = ph.x + head * kHeadDim + half * 32;
  float4 v[8];
#pragma unroll
  for (int j = 0; j < 8; ++j) v[j] = __ldcg(s + j);
  float d = 0.f;
#pragma unroll
  for (int j = 0; j < 8; ++j) {
    const float x0 = __half2float(__ldcg(xh + 4 * j)), x1 = __half2float(__ldcg(xh + 4 * j + 1));
    const float x2 = __half2float(__ldcg(xh + 4 * j + 2)), x3 = __half2float(__ldcg(xh + 4 * j + 3));
    d += v[j].x * x0 + v[j].y * x1 + v[j].z * x2 + v[j].w * x3;
    so[j] = make_float4(v[j].x * 0.99f + x0 * 1e-3f, v[j].y * 0.99f + x1 * 1e-3f, v[j].z * 0.99f + x2 * 1e-3f,
                        v[j].w * 0.99f + x3 * 1e-3f);
  }
  d += __shfl_xor_sync(0xffffffffu, d, 1);
  if (!half) ph.out[head * kHeadDim + row] = __float2half_rn(d * (1.f / 64.f));
}

// ---------------------------------------------------------------------------------------------------------------
// The persistent kernel: one block an SM (two in call 10's mode), warps 0 .. NCW - 1 the consumers, the NP warps after
// them the producers (NP = 0: one warp issuing one bulk copy a stage).
struct RingSmem {
  uint64_t full[16], empty[16];
  int acc[kMaxBlockRows];
  alignas(16) int8_t x[kMaxK];
};

template <int NCW, int NP>  // NP = 0: one producer warp, one bulk copy a stage (sm_90+)
__global__ void __launch_bounds__(32 * (NCW + (NP ? NP : 1)), 1)
    stream_kernel(const Phase* phases, int nphases, int nstages, unsigned* ctr, int wait, int fold, int interleave) {
  extern __shared__ __align__(128) unsigned char smem_raw[];
  RingSmem& sm = *reinterpret_cast<RingSmem*>(smem_raw);
  unsigned char* ring = smem_raw + ((sizeof(RingSmem) + 127) & ~size_t(127));
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int b = blockIdx.x, G = gridDim.x;
  if (threadIdx.x == 0)
    for (int s = 0; s < nstages; ++s) {
      mbar_init(&sm.full[s], NP ? 32 * NP : 1);
      mbar_init(&sm.empty[s], 1);  // one warp owns a stage (nstages is a multiple of NCW)
    }
  __syncthreads();

  constexpr int kThreads = 32 * NCW;
  if (warp >= NCW) {  // producers (NP warps share each stage's copies): every GEMV's share of this block, in order
    long long t = 0;             // tiles issued so far (stage t % nstages, its (t / nstages)-th fill)
    for (int p = 0; p < nphases; ++p) {
      const Phase& ph = phases[p];
      if (ph.kind != 0) continue;
      int r0, r1;
      block_rows(ph.rows, b, G, r0, r1);
      const size_t rb = ph.K / 2;
      const uint8_t* src = ph.w + r0 * rb;
      const int n = (int)((r1 - r0) * rb);
      const size_t phase_bytes = (size_t)ph.rows * rb;
      for (int off = 0; off < n; off += kStageBytes, ++t) {
        const int s = (int)(t % nstages);
        const long long fill = t / nstages;
        if (fill > 0) mbar_wait(&sm.empty[s], (unsigned)((fill - 1) & 1));
        const int len = min(kStageBytes, n - off);
        const unsigned dst = smem_u32(ring + (size_t)s * kStageBytes);
        // interleave (timing only: the codes are then not the rows the fold assumes): tile j of block b read from
        // (j G + b) stages into the matrix, so that at any instant the grid reads one window, as the flat stream does
        const uint8_t* from = src + off;
        if (interleave) from = ph.w + min(((size_t)(off / kStageBytes) * G + b) * kStageBytes, phase_bytes - len);
        if constexpr (NP == 0) {
          if (lane == 0) bulk_copy_stage(&sm.full[s], dst, from, len);
        } else {
          for (int i = (threadIdx.x - 32 * NCW) * 16; i < len; i += 32 * NP * 16) cp_async16(dst + i, from + i);
          cp_async_arrive(&sm.full[s]);
        }
      }
    }
    return;
  }

  const int tid = threadIdx.x;
  long long t = 0;  // tiles consumed so far
  for (int p = 0; p < nphases; ++p) {
    const Phase& ph = phases[p];
    if (p > 0 && wait) {  // wait until every block has finished phase p - 1 (wait = 0: a timing bound, racy)
      if (tid == 0)
        while (ld_acquire(ctr) < (unsigned)(p * G)) {
        }
      consumers_sync(kThreads);
    }
    if (ph.kind == 1) {
      if (b < kHeads)
        for (int i = tid; i < 2 * kHeadDim; i += kThreads) gdn_step_head(ph, b, i);
    } else {
      int r0, r1;
      block_rows(ph.rows, b, G, r0, r1);
      stage_x(ph, sm.x, sm.acc, r1 - r0, tid, kThreads);
      consumers_sync(kThreads);
      const int rb = ph.K / 2;
      const int n = (r1 - r0) * rb;
      for (int off = 0; off < n; off += kStageBytes, ++t) {
        if ((int)(t % NCW) != warp) continue;
        const int s = (int)(t % nstages);
        mbar_wait(&sm.full[s], (unsigned)((t / nstages) & 1));
        const int len = min(kStageBytes, n - off);
        const unsigned char* stage = ring + (size_t)s * kStageBytes;
        // Whole stages a warp (tile t to warp t % NCW), so that warps fold different stages at once; a stage's
        // pieces four at a time.
        RowRun run;
        for (int q = 0; q < (fold ? len : 0); q += 4 * kPiece) {
          uint4 c[4];
#pragma unroll
          for (int u = 0; u < 4; ++u)
            c[u] = q + u * kPiece < len ? *reinterpret_cast<const uint4*>(stage + q + u * kPiece + lane * 16)
                                        : make_uint4(0, 0, 0, 0);
#pragma unroll
          for (int u = 0; u < 4; ++u) {
            if (q + u * kPiece >= len) break;
            run.fold(sm.acc, c[u], sm.x, off + q + u * kPiece, rb);
          }
        }
        run.flush(sm.acc);
        __syncwarp();
        if (lane == 0) mbar_arrive(&sm.empty[s]);
      }
      consumers_sync(kThreads);
      write_rows(ph, sm.acc, r0, r1, tid, kThreads);
    }
    consumers_sync(kThreads);
    if (tid == 0) {
      __threadfence();
      atomicAdd(ctr, 1u);
    }
  }
}

// ---------------------------------------------------------------------------------------------------------------
// A kernel per phase with PDL (the engine's schedule), the same work split, row sums and x.
template <int U>
__global__ void __launch_bounds__(kPhaseThreads) gemv_phase_kernel(Phase ph) {
  __shared__ int acc[kMaxBlockRows];
  __shared__ __align__(16) int8_t xs[kMaxK];
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  int r0, r1;
  block_rows(ph.rows, blockIdx.x, gridDim.x, r0, r1);
  const int rb = ph.K / 2, n = (r1 - r0) * rb;
  const uint8_t* src = ph.w + (size_t)r0 * rb;
  // the warp's contiguous run of pieces, U in flight (the next U loaded while the current U are folded)
  const int np = n / kPiece, p0 = np * warp / kPhaseWarps, p1 = np * (warp + 1) / kPhaseWarps;
  auto load_piece = [&](int p) { return ldna(reinterpret_cast<const uint4*>(src + (size_t)p * kPiece + lane * 16)); };
  uint4 cur[U], nxt[U];
#pragma unroll
  for (int u = 0; u < U; ++u) cur[u] = p0 + u < p1 ? load_piece(p0 + u) : make_uint4(0, 0, 0, 0);
  gdc_trigger();
  gdc_wait();
  stage_x(ph, xs, acc, r1 - r0, threadIdx.x, blockDim.x);
  __syncthreads();
  RowRun run;
  for (int p = p0; p < p1; p += U) {
#pragma unroll
    for (int u = 0; u < U; ++u) nxt[u] = p + U + u < p1 ? load_piece(p + U + u) : make_uint4(0, 0, 0, 0);
#pragma unroll
    for (int u = 0; u < U; ++u) {
      if (p + u >= p1) break;
      run.fold(acc, cur[u], xs, (p + u) * kPiece, rb);
    }
#pragma unroll
    for (int u = 0; u < U; ++u) cur[u] = nxt[u];
  }
  run.flush(acc);
  __syncthreads();
  write_rows(ph, acc, r0, r1, threadIdx.x, blockDim.x);
}

__global__ void __launch_bounds__(kPhaseThreads) gdn_step_kernel(Phase ph) {
  gdc_trigger();
  gdc_wait();
  gdn_step_head(ph, blockIdx.x, threadIdx.x);
}

__global__ void fill_half_kernel(__half* a, int n) {
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x)
    a[i] = __float2half_rn(((i * 37) % 255 - 127) / 64.f);
}

}  // namespace

int main(int argc, char** argv) {
  const int layers = argc > 1 ? std::atoi(argv[1]) : 16;
  int dev = 0, sms = 0, max_optin = 0;
  CK(cudaGetDevice(&dev));
  CK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
  CK(cudaDeviceGetAttribute(&max_optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev));
  const int shapes[4][2] = {{16480, 5120}, {5120, 6144}, {34816, 5120}, {5120, 17408}};  // rows, K (4-bit codes)
  if ((34816 + sms - 1) / sms > kMaxBlockRows) {
    std::printf("too few SMs (%d) for kMaxBlockRows\n", sms);
    return 1;
  }
  long long per_layer = 0;
  for (auto& s : shapes) per_layer += (long long)s[0] * (s[1] / 2);
  const long long code_bytes = per_layer * layers;
  uint8_t* codes;
  CK(cudaMalloc(&codes, code_bytes));
  fill_codes_kernel<<<sms * 8, 256>>>(reinterpret_cast<uint4*>(codes), code_bytes / 16, 12345u);
  const size_t state_floats = (size_t)kHeads * kHeadDim * kHeadDim;
  float *state, *state_out;
  CK(cudaMalloc(&state, state_floats * 4 * layers));
  CK(cudaMalloc(&state_out, state_floats * 4 * layers));
  CK(cudaMemset(state, 0, state_floats * 4 * layers));
  const int act_stride = 40000;
  __half* acts;  // the input x, then one output slot per phase
  const int nph = 5 * layers;
  CK(cudaMalloc(&acts, sizeof(__half) * act_stride * (nph + 1)));
  CK(cudaMemset(acts, 0, sizeof(__half) * act_stride * (nph + 1)));
  fill_half_kernel<<<64, 256>>>(acts, act_stride);
  std::vector<Phase> phases;
  long long off = 0;
  for (int l = 0; l < layers; ++l)
    for (int p = 0; p < 5; ++p) {
      Phase ph = {};
      const int i = (int)phases.size();
      ph.x = acts + (size_t)i * act_stride;
      ph.out = acts + (size_t)(i + 1) * act_stride;
      if (p == 1) {
        ph.kind = 1;
        ph.state = reinterpret_cast<const float4*>(state + state_floats * l);
        ph.state_out = reinterpret_cast<float4*>(state_out + state_floats * l);
      } else {
        const int m = p == 0 ? 0 : p - 1;
        ph.kind = 0;
        ph.rows = shapes[m][0];
        ph.K = shapes[m][1];
        ph.w = codes + off;
        off += (long long)ph.rows * ph.K / 2;
      }
      phases.push_back(ph);
    }
  Phase* d_phases;
  CK(cudaMalloc(&d_phases, sizeof(Phase) * phases.size()));
  CK(cudaMemcpy(d_phases, phases.data(), sizeof(Phase) * phases.size(), cudaMemcpyHostToDevice));
  unsigned *ctr, *sink;
  CK(cudaMalloc(&ctr, 4));
  CK(cudaMalloc(&sink, 4));
  CK(cudaDeviceSynchronize());
  cudaStream_t st;
  CK(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));

  const double gb = code_bytes / 1e9;
  const double state_gb = 2.0 * state_floats * 4 * layers / 1e9;
  const float flat_ms =
      time_graph(st, [&] {
        flat_stream_kernel<<<sms * 8, 256, 0, st>>>(reinterpret_cast<uint4*>(codes), code_bytes / 16, sink);
      }, 15);
  const double flat_gbs = gb / (flat_ms * 1e-3);
  std::printf("%d layers (gdn_in, GDN step, gdn_out, gate_up, down), %.3f GB of 4-bit codes + %.3f GB of state "
              "traffic; %d SMs\n", layers, gb, state_gb, sms);
  std::printf("  flat stream over the codes      %8.3f ms  %6.0f GB/s (the reference)\n", flat_ms, flat_gbs);
  auto report = [&](const char* what, float ms) {
    const double gbs = gb / (ms * 1e-3);
    std::printf("  %-32s %8.3f ms  %6.0f GB/s  %5.1f %% of flat  %6.2f us a phase over flat\n", what, ms, gbs,
                100.0 * gbs / flat_gbs, (ms - flat_ms) * 1e3 / nph);
  };
  const size_t out_n = shapes[3][0];
  std::vector<__half> ref(out_n), got(out_n);
  const __half* last = acts + (size_t)nph * act_stride;

  for (int bps : {1, 2}) {
    for (int pdl : {1, 0}) {
      const float ms = time_graph(st, [&] {
        for (size_t i = 0; i < phases.size(); ++i) {
          const bool dep = pdl && i > 0;
          if (phases[i].kind == 1) launch_nt(gdn_step_kernel, kHeads, kPhaseThreads, dep, st, phases[i]);
          else launch_nt(gemv_phase_kernel<4>, sms * bps, kPhaseThreads, dep, st, phases[i]);
        }
      }, 15);
      char name[64];
      std::snprintf(name, sizeof name, "kernel a phase, %d block/SM%s", bps, pdl ? ", PDL" : "");
      report(name, ms);
    }
  }
  CK(cudaMemcpy(ref.data(), last, out_n * 2, cudaMemcpyDeviceToHost));

  const size_t fixed = (sizeof(RingSmem) + 127) & ~size_t(127);
  int major = 0;
  CK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev));
  // bps: blocks an SM, each with its own ring (the grid's rows split over sms x bps blocks)
  auto run_stream = [&](auto kern, int ncw, int np, int wait, int fold, int interleave = 0, int bps = 1) {
    CK(cudaFuncSetAttribute(kern, cudaFuncAttributeMaxDynamicSharedMemorySize, max_optin));
    for (int nstages = ncw; nstages <= 13; nstages += ncw) {  // a multiple of the consumer warps
      const size_t smem = fixed + (size_t)nstages * kStageBytes;
      if (smem > (size_t)max_optin || nstages > 16) continue;
      int occ = 0;
      CK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&occ, kern, 32 * (ncw + std::max(np, 1)), smem));
      if (occ < bps) continue;
      CK(cudaMemset(acts + act_stride, 0, sizeof(__half) * act_stride * nph));
      const float ms = time_graph(st, [&] {
        CK(cudaMemsetAsync(ctr, 0, 4, st));
        // Cooperative: every block resident at once (they wait on each other through the counter).
        cudaLaunchAttribute attr[1];
        attr[0].id = cudaLaunchAttributeCooperative;
        attr[0].val.cooperative = 1;
        cudaLaunchConfig_t cfg = {};
        cfg.gridDim = dim3(sms * bps);
        cfg.blockDim = dim3(32 * (ncw + std::max(np, 1)));
        cfg.dynamicSmemBytes = smem;
        cfg.stream = st;
        cfg.attrs = attr;
        cfg.numAttrs = 1;
        CK(cudaLaunchKernelEx(&cfg, kern, (const Phase*)d_phases, nph, nstages, ctr, wait, fold, interleave));
      }, 15);
      CK(cudaMemcpy(got.data(), last, out_n * 2, cudaMemcpyDeviceToHost));
      int diff = 0;
      for (size_t i = 0; i < out_n; ++i) diff += std::memcmp(&got[i], &ref[i], sizeof(__half)) != 0;
      char name[112];
      std::snprintf(name, sizeof name, "persistent %s%2d+%d warps, %2d x 16 KB%s%s", bps > 1 ? "2 blocks/SM, " : "",
                    ncw, np, nstages, wait ? "" : ", no wait",
                    fold ? (interleave ? ", interleaved" : "") : (interleave ? ", no fold, interl." : ", no fold"));
      report(name, ms);
      if (wait && fold && !interleave)
        std::printf("      final output against a kernel a phase: %d of %zu differ\n", diff, out_n);
    }
  };
  run_stream(stream_kernel<12, 1>, 12, 1, 1, 1);
  run_stream(stream_kernel<12, 1>, 12, 1, 1, 0);  // the stages only waited for and released: the schedule's bound
  run_stream(stream_kernel<12, 1>, 12, 1, 0, 0);
  run_stream(stream_kernel<12, 2>, 12, 2, 1, 0);
  run_stream(stream_kernel<12, 4>, 12, 4, 1, 0);
  run_stream(stream_kernel<12, 4>, 12, 4, 1, 1);
  if (major >= 9) {  // "+0": one bulk copy a stage
    run_stream(stream_kernel<12, 0>, 12, 0, 1, 0);
    run_stream(stream_kernel<12, 0>, 12, 0, 0, 0);
    run_stream(stream_kernel<12, 0>, 12, 0, 1, 1);
    std::printf("  the same, each block's tiles interleaved over the matrix (timing only):\n");
    run_stream(stream_kernel<12, 0>, 12, 0, 1, 0, 1);
    run_stream(stream_kernel<12, 0>, 12, 0, 0, 0, 1);
  }
  {
    run_stream(stream_kernel<12, 2>, 12, 2, 1, 0, 1);
    run_stream(stream_kernel<12, 2>, 12, 2, 0, 0, 1);
    run_stream(stream_kernel<12, 2>, 12, 2, 1, 1, 1);
  }
  {  // call 10: two blocks an SM, each with its own 4-stage ring (the ring's ceiling with more copy streams an SM)
    std::printf("  one block an SM against two, 4 consumer warps, 4 x 16 KB a block:\n");
    for (int bps : {1, 2}) {
      run_stream(stream_kernel<4, 2>, 4, 2, 1, 0, 0, bps);
      run_stream(stream_kernel<4, 2>, 4, 2, 0, 0, 0, bps);
      run_stream(stream_kernel<4, 2>, 4, 2, 1, 1, 0, bps);
      if (major >= 9) run_stream(stream_kernel<4, 0>, 4, 0, 0, 0, 0, bps);
    }
  }
  return 0;
}
