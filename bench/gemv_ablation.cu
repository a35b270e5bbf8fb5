// Where do the 5120-row GEMVs lose their time? An ablation of the engine's variant 4 (qgemv_kernel<4, 1, 2, false,
// true>: a warp per row pair, U = 2 chunks per row in flight, the next batch loaded while the current one is folded,
// x read as fp16 through L1, one fp16 scale per 64 weights) on the shapes it runs in a decode step: down
// (5120 x 17408), gdn_out / the attention output (5120 x 6144), and gate_up (34816 x 5120) as the shape the sx
// kernels run well.
//
// Standalone (no engine, no Python):
//   nvcc -O3 -std=c++17 -arch=sm_90 -Icsrc/cuda -o /tmp/ga bench/gemv_ablation.cu && /tmp/ga
//
// Why: the isolated GEMV table (bench/results/gemv-probe-h200-s*.txt) puts down at 20-28 us (2.1 TB/s) and gdn_out at
// 9.4-13 us (1.6 TB/s) on every variant tried in sessions 4-8, while boundary_probe's bare read pattern (codes only,
// no scales, no x, an XOR for arithmetic) streams down in ~12 us and gdn_out in ~5 us. Each configuration here adds or
// removes one ingredient of the real kernel, on the same grid (640 blocks of 4 warps for 5120 rows, one row group per
// warp, as variant 4 launches), so the difference between rows is that ingredient's cost:
//   SC  the scales: 0 none; 1 a separate array, 2 bytes per lane per row and chunk (the engine); 2 interleaved with
//       the codes (544-byte superblocks: 32 chunks of codes, then their 16 scales); 3 the separate array, each warp
//       copying its rows' scales to shared memory in one coalesced pass first (session 9 call 2)
//   XM  x: 0 none (a register value), 1 fp16 through L1 (__ldg, as variant 4), 2 staged once per block in shared
//       memory (fp16, the sx kernels' swizzle), 3 through L1 in the lanes layout (csrc/cuda/common.cuh lanes_pos;
//       session 10)
//   AR  arithmetic: 0 an XOR fold of the codes (keeps the loads live), 1 variant 4's half2 magic-number dot
//   NA  weights loaded with ld.global.nc.L1::no_allocate (else __ldg, which allocates in L1 and can evict x)
//   R / U / PIPE  rows per warp, chunks per row per batch, software pipeline
// Every matrix has enough copies that the timed launches cycle past the 50 MB L2 (every byte from DRAM). Printed: us
// per launch (median), GB/s over codes + scales, registers, and the flat stream of the same bytes for reference.
// Results: bench/results/gemv-ablation-h200-s9-call1.txt (first configurations), -call2.txt (scale layouts, x staged
// per block, block sizes); bench/NOTES.md, session 9.
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "probe_common.cuh"
#include "q4_half2.cuh"  // variant 4's arithmetic (chunk_dot<4>) and the sx kernels' x swizzle

using monorail::dot_q4_half2;
using monorail::xs_slot;

struct Args {
  const uint8_t* codes;  // N x K/2
  const __half* scales;  // N x K/64
  const __half* x;       // K (fp16, perm8 order as the engine's; the order does not matter for timing)
  float* out;            // N
  int N, K;
};

__device__ __forceinline__ uint4 ld_na(const uint8_t* p) {
  uint4 v;
  asm volatile("ld.global.nc.L1::no_allocate.v4.u32 {%0,%1,%2,%3}, [%4];"
               : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "l"(p));
  return v;
}

__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
  for (int o = 16; o; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}


// SC: 0 no scales; 1 a separate array, each lane loading its chunk's scale with its codes (the engine today);
//     2 interleaved: each row is a run of 544-byte superblocks (512 bytes of codes = 32 chunks, then their 16 scales),
//       so a warp's scale request sits next to its codes; 3 a separate array, but each warp copies its rows' scales to
//       shared memory in one coalesced pass first and reads them from there.
template <int R, int U, bool PIPE, int SC, int XM, int AR, bool NA, int WARPS = 4>
__global__ void __launch_bounds__(WARPS * 32) abl_kernel(Args a) {
  extern __shared__ uint4 xs[];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int nch = a.K >> 5;
  const int ngroups = a.K >> 6;
  const size_t rowb = SC == 2 ? (size_t)(a.K >> 10) * 544 : (size_t)(a.K >> 1);
  const int g = blockIdx.x * WARPS + warp;
  const bool active = g * R < a.N;
  __half* ws = reinterpret_cast<__half*>(xs + (XM == 2 ? 4 * nch : 0)) + warp * R * ngroups;  // SC 3
  if (SC == 3 && active) {  // the warp's rows' scales, 16 bytes a lane, in one pass
    const int pieces = ngroups / 8;  // per row
    for (int q = lane; q < R * pieces; q += 32) {
      const int i = q / pieces, j = q % pieces;
      reinterpret_cast<uint4*>(ws + i * ngroups)[j] =
          __ldg(reinterpret_cast<const uint4*>(a.scales + (size_t)(g * R + i) * ngroups) + j);
    }
  }
  if (XM == 2) {  // the whole block stages x once (fp16, swizzled)
    const uint4* xg = reinterpret_cast<const uint4*>(a.x);
    for (int q = threadIdx.x; q < 4 * nch; q += WARPS * 32) xs[xs_slot(q >> 2, q & 3)] = __ldg(xg + q);
  }
  if (XM == 2 || SC == 3) __syncthreads();
  if (!active) return;
  uint4 w[R][U], wn[R][U];
  float s[R][U], sn[R][U];
  auto load = [&](int cb, uint4 (&ww)[R][U], float (&ss)[R][U]) {
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const int c = cb + 32 * u;
      if (c < nch) {
#pragma unroll
        for (int i = 0; i < R; ++i) {
          const uint8_t* row = a.codes + (size_t)(g * R + i) * rowb;
          const uint8_t* p = SC == 2 ? row + (c >> 5) * 544 + (c & 31) * 16 : row + c * 16;
          ww[i][u] = NA ? ld_na(p) : __ldg(reinterpret_cast<const uint4*>(p));
          if (SC == 1) ss[i][u] = __half2float(a.scales[(size_t)(g * R + i) * ngroups + (c >> 1)]);
          else if (SC == 2) ss[i][u] = __half2float(*reinterpret_cast<const __half*>(row + (c >> 5) * 544 + 512 + ((c & 31) >> 1) * 2));
          else if (SC == 3) ss[i][u] = 1.f;  // read from shared memory at use
          else ss[i][u] = 1.f;
        }
      }
    }
  };
  float acc[R];
  uint32_t fold[R];
#pragma unroll
  for (int i = 0; i < R; ++i) {
    acc[i] = 0.f;
    fold[i] = 0u;
  }
  if (PIPE) load(lane, w, s);
  for (int cb = lane; cb < nch; cb += 32 * U) {
    if (PIPE) {
      if (cb + 32 * U < nch) load(cb + 32 * U, wn, sn);
    } else {
      load(cb, w, s);
    }
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const int c = cb + 32 * u;
      if (c >= nch) break;
      uint4 xv[4];
      if (XM == 1) {
        const uint4* xp = reinterpret_cast<const uint4*>(a.x + c * 32);
#pragma unroll
        for (int p = 0; p < 4; ++p) xv[p] = __ldg(xp + p);
      } else if (XM == 3) {  // the lanes layout (csrc/cuda/common.cuh lanes_pos): each load of the warp contiguous
        const int run = c >> 5, run_chunks = min(32, nch - 32 * run);
        const uint4* xp = reinterpret_cast<const uint4*>(a.x) + run * 128 + (c & 31);
#pragma unroll
        for (int p = 0; p < 4; ++p) xv[p] = __ldg(xp + p * run_chunks);
      } else if (XM == 2) {
        const uint4* xr = xs + 4 * c;
        const int sw = (c >> 1) & 3;
#pragma unroll
        for (int p = 0; p < 4; ++p) xv[p] = xr[p ^ sw];
      } else {
        const uint32_t k = 0x3C003C00u + (uint32_t)c;  // ~1.0 in fp16, varied so nothing folds
#pragma unroll
        for (int p = 0; p < 4; ++p) xv[p] = make_uint4(k, k ^ 1u, k ^ 2u, k ^ 3u);
      }
#pragma unroll
      for (int i = 0; i < R; ++i) {
        const float sc = SC == 3 ? __half2float(ws[i * ngroups + (c >> 1)]) : s[i][u];
        if (AR) {
          acc[i] = fmaf(sc, dot_q4_half2(w[i][u], xv), acc[i]);
        } else {
          fold[i] ^= w[i][u].x ^ w[i][u].y ^ w[i][u].z ^ w[i][u].w;
          if (XM) fold[i] ^= xv[0].x ^ xv[1].y ^ xv[2].z ^ xv[3].w;
          acc[i] += sc;
        }
      }
    }
    if (PIPE) {
#pragma unroll
      for (int u = 0; u < U; ++u)
#pragma unroll
        for (int i = 0; i < R; ++i) {
          w[i][u] = wn[i][u];
          s[i][u] = sn[i][u];
        }
    }
  }
#pragma unroll
  for (int i = 0; i < R; ++i) {
    const float v = warp_sum(acc[i] + (float)(fold[i] & 1u));
    if (lane == i) a.out[g * R + i] = v;
  }
}

// Reference: one flat stream over the same bytes (codes, then scales), every thread 4 x 16 bytes in flight.
__global__ void __launch_bounds__(256) flat_kernel(const uint4* p, long long n16, unsigned* sink) {
  uint32_t f = 0;
  const long long stride = (long long)gridDim.x * blockDim.x;
  long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
  for (; i + 3 * stride < n16; i += 4 * stride) {
    uint4 v[4];
#pragma unroll
    for (int j = 0; j < 4; ++j) v[j] = ld_na(reinterpret_cast<const uint8_t*>(p + i + j * stride));
#pragma unroll
    for (int j = 0; j < 4; ++j) f ^= v[j].x ^ v[j].y ^ v[j].z ^ v[j].w;
  }
  for (; i < n16; i += stride) {
    uint4 v = ld_na(reinterpret_cast<const uint8_t*>(p + i));
    f ^= v.x ^ v.y ^ v.z ^ v.w;
  }
  if (f == 0x12345678u) sink[0] = f;
}

struct Shape {
  const char* name;
  int N, K;
  int copies;
  std::vector<uint8_t*> codes;
  std::vector<uint8_t*> inter;  // the same bytes in the interleaved superblock layout (SC 2)
  std::vector<__half*> scales;
  __half* x;
  float* out;
  double bytes() const { return (double)N * K / 2 + (double)N * (K / 64) * 2; }
};

__global__ void fill_kernel(uint32_t* p, long long n, uint32_t seed) {
  for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (long long)gridDim.x * blockDim.x) {
    uint32_t h = (uint32_t)i * 2654435761u ^ seed;
    h ^= h >> 15;
    h *= 2246822519u;
    h ^= h >> 13;
    p[i] = h;
  }
}
// fp16 in [0.5, 1) for scales and x: finite, no subnormals
__global__ void fill_half_kernel(__half* p, long long n, uint32_t seed) {
  for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (long long)gridDim.x * blockDim.x) {
    uint32_t h = (uint32_t)i * 2654435761u ^ seed;
    h ^= h >> 15;
    p[i] = __float2half(0.5f + (h & 1023) / 2048.f);
  }
}

template <typename F>
float time_ms(cudaStream_t st, F launch_all, int reps) {
  launch_all();  // warm-up
  CK(cudaStreamSynchronize(st));
  return median_ms(st, reps, launch_all);
}

struct Config {
  const char* label;
  void (*kern)(Args);
  int R, XM, SC, WARPS;
};

template <int R, int U, bool PIPE, int SC, int XM, int AR, bool NA, int WARPS = 4>
Config cfg(const char* label) {
  return {label, abl_kernel<R, U, PIPE, SC, XM, AR, NA, WARPS>, R, XM, SC, WARPS};
}

int main() {
  cudaStream_t st;
  CK(cudaStreamCreate(&st));
  int sms = 0;
  CK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
  std::vector<Shape> shapes = {{"down 5120x17408", 5120, 17408, 10}, {"gdn_out 5120x6144", 5120, 6144, 26},
                               {"gate_up 34816x5120", 34816, 5120, 5}};
  uint32_t seed = 1;
  for (Shape& s : shapes) {
    for (int c = 0; c < s.copies; ++c) {
      uint8_t* p;
      __half* q;
      const long long nc = (long long)s.N * s.K / 2, ns = (long long)s.N * (s.K / 64);
      CK(cudaMalloc(&p, nc));
      CK(cudaMalloc(&q, ns * 2));
      fill_kernel<<<1024, 256, 0, st>>>(reinterpret_cast<uint32_t*>(p), nc / 4, seed++);
      fill_half_kernel<<<1024, 256, 0, st>>>(q, ns, seed++);
      s.codes.push_back(p);
      uint8_t* r;
      CK(cudaMalloc(&r, nc + ns * 2));
      fill_kernel<<<1024, 256, 0, st>>>(reinterpret_cast<uint32_t*>(r), (nc + ns * 2) / 4, seed++);
      s.inter.push_back(r);
      s.scales.push_back(q);
    }
    CK(cudaMalloc(&s.x, (size_t)s.K * 2));
    fill_half_kernel<<<64, 256, 0, st>>>(s.x, s.K, seed++);
    CK(cudaMalloc(&s.out, (size_t)s.N * 4));
  }
  unsigned* sink;
  CK(cudaMalloc(&sink, 4));
  CK(cudaStreamSynchronize(st));

  std::vector<Config> configs = {
      // R, U, PIPE, SC, XM, AR, NA[, WARPS]
      cfg<2, 2, true, 1, 1, 1, false>("v4: R2 U2 pipe, scales, x L1, half2, ldg"),
      cfg<2, 2, true, 1, 3, 1, false>("v4 with x in the lanes layout (L1)"),
      cfg<2, 2, true, 0, 3, 0, true>("bare + x L1 lanes layout"),
      cfg<2, 2, true, 1, 2, 1, true>("x smem, NA, scales 1 (separate)"),
      cfg<2, 2, true, 2, 2, 1, true>("x smem, NA, scales 2 (interleaved)"),
      cfg<2, 2, true, 3, 2, 1, true>("x smem, NA, scales 3 (warp-staged)"),
      cfg<2, 2, true, 0, 2, 1, true>("x smem, NA, no scales"),
      cfg<2, 2, true, 0, 0, 0, true>("bare: codes only, NA"),
      cfg<2, 2, true, 1, 0, 0, true>("bare + scales 1"),
      cfg<2, 2, true, 2, 0, 0, true>("bare + scales 2"),
      cfg<2, 2, true, 3, 0, 0, true>("bare + scales 3"),
      cfg<2, 2, true, 0, 1, 0, true>("bare + x L1 (all pieces used)"),
      cfg<2, 2, true, 0, 2, 0, true>("bare + x smem"),
      cfg<2, 4, false, 3, 2, 1, true>("R2 U4 no pipe, x smem, scales 3"),
      cfg<2, 4, false, 2, 2, 1, true>("R2 U4 no pipe, x smem, scales 2"),
      cfg<2, 1, true, 3, 2, 1, true>("R2 U1 pipe, x smem, scales 3"),
      cfg<4, 2, true, 3, 2, 1, true>("R4 U2 pipe, x smem, scales 3"),
      cfg<4, 1, true, 3, 2, 1, true>("R4 U1 pipe, x smem, scales 3"),
      cfg<2, 2, true, 3, 2, 1, true, 8>("8 warps: R2 U2 pipe, x smem, scales 3"),
      cfg<2, 2, true, 2, 2, 1, true, 8>("8 warps: R2 U2 pipe, x smem, scales 2"),
      cfg<2, 2, true, 3, 1, 1, true>("x L1, NA, scales 3"),
  };


  std::printf("GPU: %d SMs. us per launch (median of 15 rounds over every copy), GB/s over codes + scales\n", sms);
  for (Shape& s : shapes) {
    std::printf("\n%s: %.1f MB per launch, %d copies\n", s.name, s.bytes() / 1e6, s.copies);
    // flat reference over one copy's codes (the scales are 1/16 as many bytes: the same rate)
    {
      const long long n16 = (long long)s.N * s.K / 2 / 16;
      const float ms = time_ms(st, [&] {
        for (int c = 0; c < s.copies; ++c) flat_kernel<<<sms * 8, 256, 0, st>>>(reinterpret_cast<const uint4*>(s.codes[c]), n16, sink);
      }, 15);
      const double us = ms * 1e3 / s.copies;
      std::printf("  %-44s %7.2f us %6.0f GB/s (codes only)\n", "flat stream", us, (double)s.N * s.K / 2 / (us * 1e3));
    }
    for (const Config& c : configs) {
      cudaFuncAttributes fa;
      CK(cudaFuncGetAttributes(&fa, c.kern));
      const size_t smem = (c.XM == 2 ? (size_t)s.K * 2 : 0) + (c.SC == 3 ? (size_t)c.WARPS * c.R * (s.K / 64) * 2 : 0);
      if (smem > 48 * 1024) CK(cudaFuncSetAttribute(c.kern, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
      int occ = 0;
      CK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&occ, c.kern, 32 * c.WARPS, smem));
      const int blocks = (s.N / c.R + c.WARPS - 1) / c.WARPS;
      const float ms = time_ms(st, [&] {
        for (int k = 0; k < s.copies; ++k) {
          Args a{c.SC == 2 ? s.inter[k] : s.codes[k], s.scales[k], s.x, s.out, s.N, s.K};
          c.kern<<<blocks, 32 * c.WARPS, smem, st>>>(a);
        }
      }, 15);
      const double us = ms * 1e3 / s.copies;
      std::printf("  %-44s %7.2f us %6.0f GB/s  %3d regs %2d blocks/SM %5d blocks\n", c.label, us, s.bytes() / (us * 1e3),
                  fa.numRegs, occ, blocks);
    }
  }
  return 0;
}
