// Quantized GEMM for T >= 17 tokens (prefill chunks): the weight is dequantized slice by slice into
// an fp16 workspace (columns in perm8 order, matching the activations) and multiplied with cuBLAS;
// the epilogues are those of qgemv (ops.h), so the engine routes by T without other changes.
#pragma once
#include <cstdint>

#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include "../alloc_sequence.h"

namespace monorail {

// W's rows are dequantized in slices of a multiple of this many rows (or all N rows when they fit).
constexpr int64_t kGemmSliceRows = 64;

// Device memory the GEMM works in, all carved from the engine arena by the memory plan.
// Alignment: dequant and scratch 16 bytes, cublas 256 bytes. cuBLAS workspace: NVIDIA recommends
// 32 MiB on Hopper/Blackwell and 4 MiB elsewhere; 0 bytes works (fewer algorithms) and cuBLAS never
// allocates its own (it is set explicitly on every call).
// Rows per slice = min(dequant_bytes / (2 K), SwiGLU: scratch_bytes / (4 T)), rounded down to a
// multiple of kGemmSliceRows unless all N rows fit.
struct GemmWorkspace {
  __half* dequant = nullptr;     // fp16 slice of the dequantized weight
  int64_t dequant_bytes = 0;
  void* cublas = nullptr;        // cuBLAS workspace (cublasSetWorkspace)
  int64_t cublas_bytes = 0;
  float* scratch = nullptr;      // SwiGLU: the slice's gate/up products before the epilogue
  int64_t scratch_bytes = 0;
};

// Same contract as qgemv (ops.h) for any T >= 1: x fp16 [T, K] perm8, epilogue GEMV_STORE / GEMV_ADD
// (out_f32, row stride ldo) or GEMV_SWIGLU (out_h fp16 perm8, row stride ldo). Throws CudaError naming
// the op on CUDA or cuBLAS failure, std::invalid_argument when the workspace is too small for T.
void qgemm(const QMatrix& W, const __half* x, int T, int epilogue, float* out_f32, __half* out_h, int ldo,
           const GemmWorkspace& ws, cudaStream_t stream);

// Rows per dequantized slice for this workspace (see GemmWorkspace); throws std::invalid_argument
// naming the bytes needed when not even kGemmSliceRows rows fit. Host-only, touches no device.
int64_t qgemm_slice_rows(int64_t N, int64_t K, int T, int epilogue, const GemmWorkspace& ws);

// Dequant/GEMM overlap on a side stream (default on); off restores the single-buffer sequence.
void set_qgemm_overlap(bool on);

// Release the per-thread cuBLAS handle and the overlap's side stream and events (engine teardown). Safe to call when none was created.
void qgemm_release();

}  // namespace monorail
