// How fast can a subset of the SMs stream from DRAM? One block of 1024 threads per SM, each block reading its own
// contiguous share of a 2 GB buffer (16-byte loads, 4 in flight per thread, XOR-folded so nothing is dropped), for a
// grid of 1..all SMs. The answer bounds any schedule that gives a phase only part of the GPU: the GDN step's 48
// blocks, a GEMV held to the SMs its predecessor leaves free (session 23 call 3), two GEMVs side by side on disjoint SMs.
//   nvcc -O3 -arch=sm_90 -o /tmp/sm_share_probe bench/sm_share_probe.cu && /tmp/sm_share_probe
#include <cstdio>
#include <cstdint>
#include <vector>
#include <cuda_runtime.h>

#define CHECK(x) do { cudaError_t e = (x); if (e != cudaSuccess) { printf("%s: %s\n", #x, cudaGetErrorString(e)); return 1; } } while (0)

__global__ void __launch_bounds__(1024) stream_share(const uint4* __restrict__ buf, size_t per_block, int nshares, int rot,
                                                     unsigned* sink) {
  // launch k reads shares rot, rot + 1, ... (mod nshares): successive launches of a small grid read other shares, not
  // what the last one left in L2
  const uint4* p = buf + (size_t)((blockIdx.x + rot) % nshares) * per_block;
  uint4 acc = make_uint4(0, 0, 0, 0);
  const unsigned nt = blockDim.x;
  for (size_t i = threadIdx.x; i < per_block; i += 4 * nt) {
    uint4 v[4];
#pragma unroll
    for (int u = 0; u < 4; ++u) v[u] = i + u * nt < per_block ? __ldcs(p + i + u * nt) : make_uint4(0, 0, 0, 0);
#pragma unroll
    for (int u = 0; u < 4; ++u) { acc.x ^= v[u].x; acc.y ^= v[u].y; acc.z ^= v[u].z; acc.w ^= v[u].w; }
  }
  if ((acc.x ^ acc.y ^ acc.z ^ acc.w) == 0x9e3779b9u) atomicAdd(sink, 1u);  // practically never: keeps the loads
}

int main() {
  int dev = 0, sms = 0;
  CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
  const size_t bytes = size_t(2) << 30;
  uint4* buf;
  unsigned* sink;
  CHECK(cudaMalloc(&buf, bytes));
  CHECK(cudaMalloc(&sink, 4));
  CHECK(cudaMemset(buf, 1, bytes));
  cudaEvent_t a, b;
  cudaEventCreate(&a);
  cudaEventCreate(&b);
  std::vector<int> grids = {1, 2, 4, 8, 16, 32, 48, 64, 84, 100, 116, sms};
  printf("SMs %d, buffer %zu MB; a grid of g blocks reads g shares of buffer / SMs, one a block\n", sms, bytes >> 20);
  for (int g : grids) {
    // a grid of g blocks reads bytes * g / sms (at most the buffer), so each block's share is the same size
    const size_t per_block = bytes / 16 / sms;
    int rot = 0;
    for (int w = 0; w < 2; ++w, rot += g + 7) stream_share<<<g, 1024>>>(buf, per_block, sms, rot % sms, sink);
    CHECK(cudaEventRecord(a));
    const int reps = 5;
    for (int r = 0; r < reps; ++r, rot += g + 7) stream_share<<<g, 1024>>>(buf, per_block, sms, rot % sms, sink);
    CHECK(cudaEventRecord(b));
    CHECK(cudaEventSynchronize(b));
    float ms = 0.f;
    cudaEventElapsedTime(&ms, a, b);
    const double gb = double(per_block) * 16 * g * reps / 1e9;
    printf("grid %3d SMs: %7.1f GB/s total, %6.1f GB/s an SM (%.1f MB a block, %.1f us a launch)\n", g, gb / (ms / 1e3),
           gb / (ms / 1e3) / g, per_block * 16 / 1e6, ms * 1e3 / reps);
  }
  // bytes in flight against rate on every SM: blocks of 128..1024 threads (8..64 KB in flight a block), one block an SM
  printf("all %d SMs, one block each, by threads a block (16-byte loads, 4 in flight a thread):\n", sms);
  for (int nt : {128, 256, 512, 768, 1024}) {
    const size_t per_block = bytes / 16 / sms;
    int rot = 0;
    for (int w = 0; w < 2; ++w, rot += 7) stream_share<<<sms, nt>>>(buf, per_block, sms, rot % sms, sink);
    CHECK(cudaEventRecord(a));
    const int reps = 3;
    for (int r = 0; r < reps; ++r, rot += 7) stream_share<<<sms, nt>>>(buf, per_block, sms, rot % sms, sink);
    CHECK(cudaEventRecord(b));
    CHECK(cudaEventSynchronize(b));
    float ms = 0.f;
    cudaEventElapsedTime(&ms, a, b);
    const double gbs = double(per_block) * 16 * sms * reps / 1e9 / (ms / 1e3);
    const double kb = nt * 64 / 1024.0;
    printf("%4d threads: %5.0f KB in flight an SM, %7.1f GB/s total -> %.2f us to turn over the bytes in flight\n", nt, kb,
           gbs, kb * 1024 * sms / (gbs * 1e9) * 1e6);
  }
  return 0;
}
