// Chunked Gated DeltaNet for prefill (WY / UT form, chunk 64, fp32 state carried across chunks).
// Same inputs, state and output layout as gdn_step (ops.h), for any T >= 1: it must leave exactly
// the state that the recurrent gdn_step would, so decode continues from it.
#pragma once
#include <cstdint>

#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include "ops.h"

namespace monorail {

// Bytes of device scratch gdn_prefill needs for T tokens (the memory plan reserves this for the
// prefill chunk; no allocation happens inside the op).
int64_t gdn_prefill_scratch_bytes(const GdnDims& d, int64_t T);

void gdn_prefill(const float* conv_out, const float* z, const float* b, const float* a, int ldp, int T,
                 const GdnDims& d, const float* a_log, const float* dt_bias, const float* norm_w, float* state,
                 __half* out_h, void* scratch, int64_t scratch_bytes, cudaStream_t stream);

}  // namespace monorail
