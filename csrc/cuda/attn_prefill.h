// Causal gated attention for prefill chunks (any T >= 1 query tokens), head_dim 256, GQA: flash-style,
// no T x T matrix in memory. Queries of the chunk sit at cache slots kv_start .. kv_start + T - 1 and
// attend to every slot up to their own, i.e. to everything already cached plus the chunk itself.
#pragma once
#include <cstdint>

#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include "ops.h"

namespace monorail {

// attn_prep for T tokens: q/k zero-centred RMSNorm, partial interleaved mRoPE with positions pos3
// (device int32 [T, 3]), K and V appended at cache slots kv_start + t (bf16, int8 or int4 group 64, exactly
// as attn_prep writes them), queries written to q_buf in the layout attn_prefill reads (q_buf holds
// T * n_heads * head_dim floats of space).
// Layout written (attn_prefill.cu): 16-bit [T, n_heads, 256] scaled by 1/sqrt(256), bf16 for a bf16 cache
// and fp16 for an int8 or int4 cache (the mma input type of each path); half of q_buf's space is used.
void attn_prefill_prep(const float* qkv, int ldp, int T, const AttnDims& d, const float* q_norm, const float* k_norm,
                       const float* inv_freq, const int mrope_section[3], const int32_t* pos3, int kv_start,
                       float* q_buf, char* k_cache, char* v_cache, char* k_scales, char* v_scales,
                       cudaStream_t stream);

// out_h[t, perm8(h * hd + j)] = sigmoid(gate[t * ld_gate + h * 2 * hd + j]) * (softmax attention of query
// (t, h) over slots [0, kv_start + t])[j]; the same gate convention as attn_decode (gate = qkv + head_dim).
// Requires head_dim 256 and n_heads % n_kv_heads == 0; uses up to 212 KB of dynamic shared memory per
// block where the device allows it, else 96 KB (opted in on first use per device), no global scratch.
// Deterministic for a given variant: a row's result does not depend on how the prompt is chunked (key
// tiles are aligned to absolute cache slots).
void attn_prefill(const float* q_buf, int T, int kv_start, const AttnDims& d, const char* k_cache, const char* v_cache,
                  const char* k_scales, const char* v_scales, const float* gate, int ld_gate, __half* out_h,
                  cudaStream_t stream);

// Kernel selection for attn_prefill (process-wide; for tests and timing):
//   0 (default): variant 3 where cudaDevAttrMaxSharedMemoryPerBlockOptin allows its 212 KB, else variant 2
//   1: the first kernel (64 rows x 4 warps, int8 dequantized by a shared-memory pass), kept for comparison;
//      bf16 and int8 KV only (throws std::invalid_argument for int4)
//   2: pair-split kernel, small configuration: 64 rows, 4 warps, 32-key tiles, 96 KB (consumer cards)
//   3: pair-split kernel, large configuration: 128 rows, 8 warps in pairs, 64-key tiles, 212 KB
// set_attn_prefill_variant throws std::invalid_argument outside 0..3; attn_prefill throws for variant 3 on
// a device without the shared memory. attn_prefill_variant_supported says whether the device can run v.
void set_attn_prefill_variant(int v);
int attn_prefill_variant();
bool attn_prefill_variant_supported(int v);

}  // namespace monorail
