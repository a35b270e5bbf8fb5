// Chunked Gated DeltaNet for prefill (WY / UT form, chunk 64, fp32 state carried across chunks).
// Same inputs, state and output layout as gdn_step (ops.h), for any T >= 1: it must leave exactly
// the state that the recurrent gdn_step would, so decode continues from it.
#pragma once
#include <cstdint>

#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include "ops.h"

namespace monorail {

// Implementation (gdn_chunk.cu): three launches on `stream`. (1) per (chunk, value head), in parallel: q/k
// L2 norms, gates, K K^T, Q K^T, and the 64x64 unit-triangular solve giving W and U'; (2) per (value head,
// 32-column slice of the state), sequential over chunks: U = U' - W S, O = exp(G) Q S + M U, S update;
// (3) gated RMS norm into out_h. Scratch holds per token ~(2 k_heads + 2.5 v_heads) x 128 fp32 plus G.
// Pointers conv_out, state and scratch must be 16-byte aligned. Uses up to 94.7 KB of dynamic shared
// memory per block (opted in with cudaFuncSetAttribute on every call).
//
// Bytes of device scratch gdn_prefill needs for T tokens (the memory plan reserves this for the
// prefill chunk; no allocation happens inside the op).
int64_t gdn_prefill_scratch_bytes(const GdnDims& d, int64_t T);

void gdn_prefill(const float* conv_out, const float* z, const float* b, const float* a, int ldp, int T,
                 const GdnDims& d, const float* a_log, const float* dt_bias, const float* norm_w, float* state,
                 __half* out_h, void* scratch, int64_t scratch_bytes, cudaStream_t stream);

}  // namespace monorail
