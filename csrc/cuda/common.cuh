// Shared helpers of the CUDA engine: error handling that names the op, activation layout, and
// small numeric helpers. Every launch goes through MR_CHECK_LAUNCH so a CUDA error becomes a
// C++ exception (a Python CudaError) that names the op; nothing here aborts the process.
#pragma once
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <stdexcept>
#include <string>

namespace monorail {

struct CudaError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

inline void cuda_check(cudaError_t e, const char* op) {
  if (e != cudaSuccess) {
    cudaGetLastError();  // clear non-sticky errors so the next op starts clean
    throw CudaError(std::string(op) + ": " + cudaGetErrorName(e) + " (" + cudaGetErrorString(e) + ")");
  }
}
#define MR_CHECK(call, op) ::monorail::cuda_check((call), (op))
#define MR_CHECK_LAUNCH(op) ::monorail::cuda_check(cudaGetLastError(), (op))

#ifdef __CUDACC__
// GEMV inputs are fp16 with each group of 8 elements stored as (0,4,1,5,2,6,3,7), so that the
// 4-bit kernel can turn nibble pairs (k, k+4) of one 32-bit code word into half2 with one mask
// and pair them with one half2 load of x. Producers write through perm8().
__host__ __device__ inline int perm8(int k) { return (k & ~7) | ((k & 3) << 1) | ((k >> 2) & 1); }

// The "lanes" layout of a GEMV input of K elements (K a multiple of 32), read by qgemv's variant 4 (ops.h
// GEMV_X_LANES). Variant 4's lane l walks chunks c = l, l + 32, ... of 32 elements (64 bytes, four 16-byte pieces);
// in perm8 order a lane's pieces sit 64 bytes from its neighbour's, so each 16-byte load of the warp touches 16
// cache lines. Here each run of 32 chunks (1024 elements; fewer in the last run) is stored piece-major: piece p of
// chunk c sits at run * 1024 + (p * run_chunks + c % 32) * 8, so the warp's p-th load is one contiguous 512 bytes.
// Within a piece the 8 elements keep their perm8 order.
__host__ __device__ inline int lanes_pos(int k, int K) {
  const int c = k >> 5, run = c >> 5;
  const int left = (K >> 5) - 32 * run;
  const int run_chunks = left < 32 ? left : 32;
  return run * 1024 + (((k >> 3) & 3) * run_chunks + (c & 31)) * 8 + (perm8(k) & 7);
}

__device__ inline float silu(float x) { return x / (1.f + __expf(-x)); }
__device__ inline float sigmoidf_(float x) { return 1.f / (1.f + __expf(-x)); }

template <typename T>
__device__ inline T warp_sum(T v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}
__device__ inline float warp_max(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}

// Block-wide sum for blockDim.x a multiple of 32 (<= 1024); every thread gets the result.
__device__ inline float block_sum(float v, float* smem32) {
  v = warp_sum(v);
  int w = threadIdx.x >> 5, l = threadIdx.x & 31, nw = blockDim.x >> 5;
  __syncthreads();
  if (l == 0) smem32[w] = v;
  __syncthreads();
  float r = l < nw ? smem32[l] : 0.f;
  return warp_sum(r);
}

#endif  // __CUDACC__

inline int ceil_div(long long a, long long b) { return static_cast<int>((a + b - 1) / b); }

}  // namespace monorail
