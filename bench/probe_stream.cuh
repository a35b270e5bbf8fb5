// Shared by the standalone streaming probes (bench/boundary_probe.cu, bench/stream_probe.cu): the non-coherent
// 16-byte load that bypasses L1, the flat stream every probe measures against, the fill of the weight codes, a launch
// with or without programmatic dependent launch, and a CUDA graph timed as the median of its replays.
#pragma once

#include <cuda_runtime.h>

#include "probe_common.cuh"

__device__ __forceinline__ uint4 ldna(const uint4* p) {
  uint4 v;
  asm volatile("ld.global.nc.L1::no_allocate.v4.u32 {%0,%1,%2,%3}, [%4];"
               : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
               : "l"(p));
  return v;
}

// One flat stream over n16 16-byte units: every thread 4 x 16 bytes in flight, grid-strided (the reference rate).
__global__ void flat_stream_kernel(const uint4* a, long long n16, unsigned* out) {
  unsigned x = 0;
  const long long stride = (long long)gridDim.x * blockDim.x;
  long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
  for (; i + 3 * stride < n16; i += 4 * stride) {
    const uint4 v0 = ldna(a + i), v1 = ldna(a + i + stride);
    const uint4 v2 = ldna(a + i + 2 * stride), v3 = ldna(a + i + 3 * stride);
    x ^= v0.x ^ v0.y ^ v0.z ^ v0.w ^ v1.x ^ v1.y ^ v1.z ^ v1.w ^ v2.x ^ v2.y ^ v2.z ^ v2.w ^ v3.x ^ v3.y ^ v3.z ^ v3.w;
  }
  for (; i < n16; i += stride) {
    const uint4 v = ldna(a + i);
    x ^= v.x ^ v.y ^ v.z ^ v.w;
  }
  if (x == 0x9E3779B9u) out[0] = x;
}

__global__ void fill_codes_kernel(uint4* a, long long n16, unsigned seed) {
  const long long stride = (long long)gridDim.x * blockDim.x;
  for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n16; i += stride) {
    unsigned h = (unsigned)i * 2654435761u ^ seed;
    a[i] = make_uint4(h, h * 3u, h * 5u, h * 7u);
  }
}

template <typename Kern, typename... Args>
void launch_nt(Kern kern, int grid, int threads, bool pdl, cudaStream_t st, Args... args) {
  cudaLaunchAttribute attr[1];
  attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attr[0].val.programmaticStreamSerializationAllowed = 1;
  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = dim3(grid);
  cfg.blockDim = dim3(threads);
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
  const float ms = median_ms(st, reps, [&] { CK(cudaGraphLaunch(ge, st)); });
  CK(cudaGraphExecDestroy(ge));
  CK(cudaGraphDestroy(g));
  return ms;
}
