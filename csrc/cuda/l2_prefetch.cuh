// The device side of L2Prefetch (ops.h): a kernel's threads share out the requests for the next GEMV's weights.
#pragma once
#include "ops.h"

namespace monorail {

// Thread t of nt asks L2 for lines t, t + nt, ... of every range, so one warp's request covers 32 consecutive
// lines (4 KB at line = 128). prefetch.global.L2 returns nothing to the thread: no registers wait on it, and the
// kernel's own loads, issued before this is called, are ahead of it in the memory pipeline.
__device__ inline void l2_prefetch_share(const L2Prefetch& f, long long t, long long nt) {
  if (f.line <= 0) return;
#pragma unroll  // constant indices: the ranges stay in the kernel's parameter space
  for (int r = 0; r < kL2PrefetchRanges; ++r) {
    const char* p = static_cast<const char*>(f.ptr[r]);
#pragma unroll 1
    for (long long o = t * f.line; o < f.bytes[r]; o += nt * f.line) asm volatile("prefetch.global.L2 [%0];" ::"l"(p + o));
  }
}

}  // namespace monorail
