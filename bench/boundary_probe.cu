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
// Modes (each timed as one CUDA graph over all layers, median of replays):
//   plain      one kernel per phase, ordinary launches
//   pdl        one kernel per phase with programmatic dependent launch: the first batch is requested before
//              griddepcontrol.wait (what the engine's GEMVs do today)
//   pdl2       the same with two batches requested before the wait
//   persist    one kernel per layer: the four phases separated by grid barriers; before a block arrives at a
//              barrier its warps request their first batch of the next phase; PDL between the layer kernels
//   mega       one kernel for all layers (one launch, a grid barrier between every two phases)
//   flat       the same bytes read as one flat stream by one kernel (the bandwidth reference)
// Printed per (R, U): ms per layer, GB/s, and the time per boundary over the flat stream's rate.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <vector>

#define CK(x)                                                                                    \
  do {                                                                                           \
    cudaError_t e_ = (x);                                                                        \
    if (e_ != cudaSuccess) {                                                                     \
      std::fprintf(stderr, "%s:%d %s: %s\n", __FILE__, __LINE__, #x, cudaGetErrorString(e_));   \
      std::exit(1);                                                                              \
    }                                                                                            \
  } while (0)

struct Phase {
  const uint4* w;    // rows x nch chunks of 16 bytes
  int rows, nch;
  const unsigned* in;  // previous phase's output (nin words), nullptr for the first phase
  int nin;
  unsigned* out;     // rows words
};

__device__ __forceinline__ uint4 ldna(const uint4* p) {
  uint4 v;
  asm volatile("ld.global.nc.L1::no_allocate.v4.u32 {%0,%1,%2,%3}, [%4];"
               : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
               : "l"(p));
  return v;
}
__device__ __forceinline__ void gdc_wait() { asm volatile("griddepcontrol.wait;" ::: "memory"); }
__device__ __forceinline__ void gdc_trigger() { asm volatile("griddepcontrol.launch_dependents;" ::: "memory"); }

template <int R, int U>
struct Batch {
  uint4 v[R][U];
};

template <int R, int U>
__device__ __forceinline__ void load_batch(Batch<R, U>& b, const Phase& ph, int g, int cb) {
#pragma unroll
  for (int u = 0; u < U; ++u) {
    const int c = cb + 32 * u;
#pragma unroll
    for (int i = 0; i < R; ++i) {
      const int r = min(g * R + i, ph.rows - 1);
      b.v[i][u] = c < ph.nch ? ldna(ph.w + (size_t)r * ph.nch + c) : make_uint4(0, 0, 0, 0);
    }
  }
}

// The block's fold of the previous phase's output: L2 reads (ld.global.cg: written by other blocks of this
// grid in the persistent modes, so never through the non-coherent path) and a block-wide reduction.
__device__ unsigned stage_in(const Phase& ph, unsigned* red) {
  unsigned x = 0;
  if (ph.in)
    for (int i = threadIdx.x; i < ph.nin; i += blockDim.x) x ^= __ldcg(ph.in + i);
  for (int o = 16; o; o >>= 1) x ^= __shfl_xor_sync(0xffffffffu, x, o);
  if ((threadIdx.x & 31) == 0) red[threadIdx.x >> 5] = x;
  __syncthreads();
  unsigned y = 0;
  for (int i = 0; i < (int)(blockDim.x >> 5); ++i) y ^= red[i];
  __syncthreads();
  return y;
}

// One warp's share of one phase; `cur` holds the warp's first batch (requested earlier), `have_next` says that
// the second batch is already in `nxt` too.
template <int R, int U>
__device__ void run_phase(const Phase& ph, unsigned xin, Batch<R, U>& cur, Batch<R, U>& nxt, bool have_next) {
  const int lane = threadIdx.x & 31;
  const int stride = gridDim.x * (blockDim.x >> 5);
  const int ngroups = (ph.rows + R - 1) / R;
  for (int g = blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5); g < ngroups; g += stride) {
    unsigned acc[R];
#pragma unroll
    for (int i = 0; i < R; ++i) acc[i] = 0;
    for (int cb = lane; cb < ph.nch; cb += 32 * U) {
      if (!have_next) {
        int ncb = cb + 32 * U, ng = g;
        if (ncb >= ph.nch) {
          ncb = lane;
          ng = g + stride;
        }
        if (ng < ngroups) load_batch<R, U>(nxt, ph, ng, ncb);
      }
      have_next = false;
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
      if (lane == i && g * R + i < ph.rows) ph.out[g * R + i] = a ^ xin;
    }
  }
}

template <int R, int U>
__device__ __forceinline__ void first_batch(const Phase& ph, Batch<R, U>& b) {
  const int g = blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5);
  if (g < (ph.rows + R - 1) / R) load_batch<R, U>(b, ph, g, threadIdx.x & 31);
}
template <int R, int U>
__device__ __forceinline__ void second_batch(const Phase& ph, Batch<R, U>& b) {
  const int lane = threadIdx.x & 31;
  int g = blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5), cb = lane + 32 * U;
  if (cb >= ph.nch) {
    cb = lane;
    g += gridDim.x * (blockDim.x >> 5);
  }
  if (g < (ph.rows + R - 1) / R) load_batch<R, U>(b, ph, g, cb);
}

// One phase per kernel (plain / pdl / pdl2).
template <int R, int U, bool TWO>
__global__ void __launch_bounds__(128) phase_kernel(Phase ph) {
  __shared__ unsigned red[32];
  Batch<R, U> cur, nxt;
  first_batch<R, U>(ph, cur);
  if (TWO) second_batch<R, U>(ph, nxt);
  gdc_wait();
  gdc_trigger();
  const unsigned xin = stage_in(ph, red);
  run_phase<R, U>(ph, xin, cur, nxt, TWO);
}

// Grid barrier over a counter zeroed at the start of each graph replay; barrier number n (counted over the replay)
// completes when the counter reaches (n + 1) * gridDim.x.
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

// Phases [p0, p1) of `phases` in one kernel, a grid barrier between every two; bar0 barriers of the replay precede
// this kernel's first.
template <int R, int U>
__global__ void __launch_bounds__(128) persist_kernel(const Phase* phases, int p0, int p1, unsigned* ctr, int bar0) {
  __shared__ unsigned red[32];
  Batch<R, U> cur, nxt;
  Phase ph = phases[p0];
  first_batch<R, U>(ph, cur);
  gdc_wait();
  for (int p = p0; p < p1; ++p) {
    if (p > p0) grid_barrier(ctr, (unsigned)(bar0 + p - p0) * gridDim.x);
    if (p == p1 - 1) gdc_trigger();  // only after the last barrier: every block of this grid is resident by then
    const unsigned xin = stage_in(ph, red);
    run_phase<R, U>(ph, xin, cur, nxt, false);
    if (p + 1 < p1) {
      ph = phases[p + 1];
      first_batch<R, U>(ph, cur);  // in flight while this block waits at the barrier
    }
  }
}

__global__ void flat_kernel(const uint4* a, long long n16, unsigned* out) {
  unsigned x = 0;
  const long long stride = (long long)gridDim.x * blockDim.x;
  long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
  for (; i + 3 * stride < n16; i += 4 * stride) {
    const uint4 v0 = ldna(a + i), v1 = ldna(a + i + stride), v2 = ldna(a + i + 2 * stride), v3 = ldna(a + i + 3 * stride);
    x ^= v0.x ^ v0.y ^ v0.z ^ v0.w ^ v1.x ^ v1.y ^ v1.z ^ v1.w ^ v2.x ^ v2.y ^ v2.z ^ v2.w ^ v3.x ^ v3.y ^ v3.z ^ v3.w;
  }
  for (; i < n16; i += stride) {
    const uint4 v = ldna(a + i);
    x ^= v.x ^ v.y ^ v.z ^ v.w;
  }
  if (x == 0x9E3779B9u) out[0] = x;
}

__global__ void fill_kernel(uint4* a, long long n16, unsigned seed) {
  for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n16; i += (long long)gridDim.x * blockDim.x) {
    unsigned h = (unsigned)i * 2654435761u ^ seed;
    a[i] = make_uint4(h, h * 3u, h * 5u, h * 7u);
  }
}

template <typename Kern, typename... Args>
void launch(Kern kern, int grid, bool pdl, cudaStream_t st, Args... args) {
  cudaLaunchAttribute attr[1];
  attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attr[0].val.programmaticStreamSerializationAllowed = 1;
  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = dim3(grid);
  cfg.blockDim = dim3(128);
  cfg.stream = st;
  cfg.attrs = attr;
  cfg.numAttrs = pdl ? 1 : 0;
  CK(cudaLaunchKernelEx(&cfg, kern, args...));
}

template <typename F>
float time_graph(cudaStream_t st, F enqueue, int reps) {
  cudaGraph_t g;
  cudaGraphExec_t ge;
  CK(cudaStreamBeginCapture(st, cudaStreamCaptureModeGlobal));
  enqueue();
  CK(cudaStreamEndCapture(st, &g));
  CK(cudaGraphInstantiate(&ge, g, 0));
  for (int i = 0; i < 3; ++i) CK(cudaGraphLaunch(ge, st));
  CK(cudaStreamSynchronize(st));
  cudaEvent_t a, b;
  CK(cudaEventCreate(&a));
  CK(cudaEventCreate(&b));
  std::vector<float> ms;
  for (int i = 0; i < reps; ++i) {
    CK(cudaEventRecord(a, st));
    CK(cudaGraphLaunch(ge, st));
    CK(cudaEventRecord(b, st));
    CK(cudaEventSynchronize(b));
    float t;
    CK(cudaEventElapsedTime(&t, a, b));
    ms.push_back(t);
  }
  CK(cudaGetLastError());
  std::sort(ms.begin(), ms.end());
  CK(cudaGraphExecDestroy(ge));
  CK(cudaGraphDestroy(g));
  return ms[ms.size() / 2];
}

struct Setup {
  std::vector<Phase> phases;
  Phase* d_phases;
  unsigned* ctr;
  int layers, per_layer;
  double bytes;
  uint4* base;
  long long n16;
};

template <int R, int U>
void run_config(const Setup& S, cudaStream_t st, int sms, double flat_ms) {
  int occ_p = 0, occ_k = 0;
  CK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&occ_p, phase_kernel<R, U, false>, 128, 0));
  CK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&occ_k, persist_kernel<R, U>, 128, 0));
  const int nph = (int)S.phases.size();
  auto grid_of = [&](const Phase& ph, int occ) {
    const int groups = (ph.rows + R - 1) / R;
    return std::min(sms * occ, (groups + 3) / 4);
  };
  const int reps = 15;
  auto per_phase = [&](bool pdl, bool two) {
    return time_graph(st, [&] {
      for (const Phase& ph : S.phases) {
        if (two) launch(phase_kernel<R, U, true>, grid_of(ph, occ_p), pdl, st, ph);
        else launch(phase_kernel<R, U, false>, grid_of(ph, occ_p), pdl, st, ph);
      }
    }, reps);
  };
  const int pgrid = sms * occ_k;  // persistent: one resident wave
  const float t_plain = per_phase(false, false), t_pdl = per_phase(true, false), t_pdl2 = per_phase(true, true);
  const float t_persist = time_graph(st, [&] {
    CK(cudaMemsetAsync(S.ctr, 0, 4, st));
    for (int l = 0; l < S.layers; ++l)
      launch(persist_kernel<R, U>, pgrid, true, st, (const Phase*)S.d_phases, l * S.per_layer, (l + 1) * S.per_layer, S.ctr,
             l * (S.per_layer - 1));
  }, reps);
  const float t_mega = time_graph(st, [&] {
    CK(cudaMemsetAsync(S.ctr, 0, 4, st));
    launch(persist_kernel<R, U>, pgrid, false, st, (const Phase*)S.d_phases, 0, nph, S.ctr, 0);
  }, reps);
  const double gb = S.bytes / 1e9;
  auto row = [&](const char* mode, float ms, int boundaries) {
    std::printf("R%d U%d %-8s %8.3f ms/layer %7.0f GB/s  %6.2f us per boundary over flat (occ %d/%d)\n", R, U, mode,
                ms / S.layers, gb / (ms * 1e-3), (ms - flat_ms) * 1e3 / boundaries, occ_p, occ_k);
  };
  row("plain", t_plain, nph);
  row("pdl", t_pdl, nph);
  row("pdl2", t_pdl2, nph);
  row("persist", t_persist, nph);
  row("mega", t_mega, nph);
}

int main() {
  int dev = 0, sms = 0;
  CK(cudaGetDevice(&dev));
  CK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
  const int layers = 16;
  const int shapes[4][2] = {{16480, 5120}, {5120, 6144}, {34816, 5120}, {5120, 17408}};  // rows, K (4-bit)
  long long per_layer16 = 0;
  for (auto& s : shapes) per_layer16 += (long long)s[0] * (s[1] / 32);
  Setup S;
  S.layers = layers;
  S.per_layer = 4;
  S.n16 = per_layer16 * layers;
  S.bytes = 16.0 * (double)S.n16;
  CK(cudaMalloc(&S.base, S.n16 * 16));
  fill_kernel<<<sms * 8, 256>>>(S.base, S.n16, 12345u);
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
  const float flat_ms = time_graph(st, [&] { flat_kernel<<<sms * 8, 256, 0, st>>>(S.base, S.n16, outs); }, 15);
  std::printf("%d layers x 4 phases, %.3f GB; flat stream %.3f ms/layer = %.0f GB/s (%d SMs)\n", layers, S.bytes / 1e9,
              flat_ms / layers, S.bytes / 1e9 / (flat_ms * 1e-3), sms);
  run_config<4, 2>(S, st, sms, flat_ms);
  run_config<2, 4>(S, st, sms, flat_ms);
  run_config<2, 2>(S, st, sms, flat_ms);
  run_config<4, 4>(S, st, sms, flat_ms);
  return 0;
}
