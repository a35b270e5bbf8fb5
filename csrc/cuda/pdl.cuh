// Programmatic dependent launch (PDL; sm_90 and newer: H100/H200, RTX 50xx) for the decode step.
//
// A decode step is ~400 short kernels in one CUDA graph. Launched plainly, kernel N + 1 starts only after
// kernel N has fully drained, so every boundary pays N's tail plus N + 1's launch and first DRAM round
// trip. Launched with PDL, N + 1 may start as soon as every block of N has passed its pdl_trigger(), run a
// prologue that touches nothing N writes (a GEMV's first batch of weights, a layer's recurrent state), and
// then block in pdl_wait() until N has completed and its writes are visible.
//
// Rules every kernel launched through launch_pdl follows:
//   * every thread calls pdl_wait() before it reads anything an earlier kernel of the step wrote or writes
//     anything an earlier kernel reads, and before it exits (no early return ahead of it): a block's end
//     then implies its predecessors' end, so completion stays transitive down the stream;
//   * pdl_trigger() comes after pdl_wait(), so at most one kernel runs ahead of its predecessor;
//   * ptxas may schedule a read-only-path load (__ldg, ld.global.nc) above the wait, as it did with the tensor-core
//     GEMV's x (session 40): new code reads predecessor data with ld_after_wait, and tests/test_pdl_load_order.py
//     (bench/pdl_load_order.py) checks every kernel's SASS for a load the PTX has after the wait.
// The prologue may read only data no kernel of the step writes (weights) or data last written before the
// predecessor started (a layer's state, written one step earlier). PDL is used only inside a decode step
// (PdlScope, set by the engine around enqueue_step), where every predecessor is one of these kernels;
// elsewhere (single-op calls, prefill) the same kernels launch plainly and pdl_wait() returns at once.
// Below sm_90 the attribute is never set and both calls compile to nothing.
#pragma once
#include <cuda_runtime.h>

#include <utility>

#include "common.cuh"
#include "stamps.cuh"

namespace monorail {

bool pdl_supported();   // compute capability >= 9 (queried once)
bool pdl_active();      // supported, enabled (set_pdl) and inside a PdlScope
void set_pdl(bool on);  // default on; captured graphs keep the mode they were captured with

// The L1 / shared-memory split an SM runs a kernel with is chosen per kernel (by the driver, or by the kernel's
// carveout preference); consecutive kernels that want different splits might not overlap on an SM. For measurements:
// 0..100 (percent of the most shared memory) asks for the same split for every launch through launch_pdl inside a
// decode step (cudaLaunchAttributePreferredSharedMemoryCarveout, which overrides the kernel's own); -1 (default)
// leaves each kernel's. Session 12 found no single split faster than each kernel's own (bench/NOTES.md, call 6).
void set_step_smem_carveout(int percent);
int step_smem_carveout();  // -1 outside a PdlScope or when unset

struct PdlScope {  // marks the launches of one decode step (not thread-safe: one engine thread)
  PdlScope();
  ~PdlScope();
  PdlScope(const PdlScope&) = delete;
  PdlScope& operator=(const PdlScope&) = delete;
};

#ifdef __CUDACC__
__device__ __forceinline__ void pdl_wait() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  MR_STAMPED_WAIT(asm volatile("griddepcontrol.wait;" ::: "memory"));  // stamps.cuh: the wait alone by default
#endif
}
// A 16-byte load of data the predecessor wrote, after pdl_wait(): a coherent load (ld.global), never the read-only
// path. ld.global.nc promises the data stays unchanged while the kernel runs, which PDL breaks (the predecessor is still
// writing it when this kernel starts), and ptxas acts on the promise: session 40 found the tensor-core GEMV's first x
// load (__ldg) scheduled above griddepcontrol.wait (ACQBULK) in its sm_90 SASS though the PTX had it after the wait,
// so inside a decode step it read x before the previous kernel had written it (bench/results/
// mma-probe-h100-s40-call1.txt: causal and exact with PDL off, wrong with it on).
__device__ __forceinline__ uint4 ld_after_wait(const uint4* p) {
  uint4 v;
  asm volatile("ld.global.v4.u32 {%0, %1, %2, %3}, [%4];"
               : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
               : "l"(p));
  return v;
}
__device__ __forceinline__ void pdl_trigger() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}

// kern<<<grid, block, smem, st>>>(args...), with the programmatic-serialization attribute when pdl_active().
template <typename... KArgs, typename... Args>
void launch_pdl(const char* op, void (*kern)(KArgs...), dim3 grid, dim3 block, size_t smem, cudaStream_t st,
                Args&&... args) {
  cudaLaunchAttribute attr[2];
  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = grid;
  cfg.blockDim = block;
  cfg.dynamicSmemBytes = smem;
  cfg.stream = st;
  cfg.attrs = attr;
  if (pdl_active()) {
    attr[cfg.numAttrs].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attr[cfg.numAttrs++].val.programmaticStreamSerializationAllowed = 1;
  }
#if CUDART_VERSION >= 12040
  if (const int carveout = step_smem_carveout(); carveout >= 0) {
    attr[cfg.numAttrs].id = cudaLaunchAttributePreferredSharedMemoryCarveout;
    attr[cfg.numAttrs++].val.sharedMemCarveout = (unsigned)carveout;
  }
#endif
  MR_CHECK(cudaLaunchKernelEx(&cfg, kern, std::forward<Args>(args)...), op);
}
#endif  // __CUDACC__

}  // namespace monorail
