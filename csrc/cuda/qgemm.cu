// Quantized GEMM for prefill (T >= 17 tokens): dequantize a slice of W's rows into an fp16 workspace
// (columns in perm8 order, like the activations), then one cuBLAS GEMM per slice (fp16 inputs, fp32
// accumulate and fp32 output, tensor cores allowed). SwiGLU: the slice's products go to an fp32
// scratch and a small kernel writes silu(gate) * up as fp16 perm8.
//
// Overlap: when the workspace holds at least two slices' worth of rows, it is used as two buffers and
// the dequantization of slice i + 1 runs on a side stream while cuBLAS multiplies slice i on the
// caller's stream (dequant is memory-bound, the GEMM compute-bound, so the pair mostly hides the
// dequant pass). Events order the two streams: a buffer is rewritten only after the GEMM that read it.
//
// Numerics: the dequantized weight (code - 2^(B-1)) * scale is computed exactly (fp32 or fp16 FMA of
// exact operands) and rounded once to fp16 (relative rounding <= 2^-11); x is already fp16; products
// and sums are fp32 inside cuBLAS.
//
// Layout (bit-exact with engine/quant.py pack_codes and qgemv.cu's decode):
//   codes [N, K/2]: element k of a row is byte k/2, low nibble for even k, high nibble for odd k
//                   (so a little-endian 32-bit word holds elements 8c..8c+7 at nibbles 0..7);
//   8-bit codes [N, K]: element k is byte k;
//   5-bit high [N, K/8]: bit 4 of element k is bit k%8 of byte k/8;
//   6-bit high [N, K/4]: bits 4..5 of element k are bits 2(k%4)..2(k%4)+1 of byte k/4;
//   scales fp16 [N, K/G].
#include <cublas_v2.h>

#include <algorithm>
#include <stdexcept>
#include <string>

#include "common.cuh"
#include "ptx.cuh"
#include "ops.h"
#include "qgemm.h"

namespace monorail {
namespace {

// ---- cuBLAS plumbing ----

void cublas_check(cublasStatus_t s, const char* op) {
  if (s != CUBLAS_STATUS_SUCCESS) {
    cudaGetLastError();  // a failed cuBLAS launch may leave a non-sticky CUDA error behind
    throw CudaError(std::string(op) + ": " + cublasGetStatusName(s) + " (" + cublasGetStatusString(s) + ")");
  }
}

// One handle per thread, created on first use. Deliberately a plain pointer (no destructor): a
// thread_local destructor could run at process exit after the CUDA context is gone; the engine calls
// qgemm_release() at teardown instead.
thread_local cublasHandle_t t_handle = nullptr;

// Side stream and events of the dequant/GEMM overlap, per thread like the handle (same teardown).
struct OverlapStreams {
  cudaStream_t side = nullptr;
  cudaEvent_t fork = nullptr;        // the caller's stream reached this qgemm call
  cudaEvent_t dequant_done[2] = {};  // buffer b holds its slice
  cudaEvent_t gemm_done[2] = {};     // the GEMM that read buffer b has run
};
thread_local OverlapStreams t_overlap;
bool g_overlap = true;  // set_qgemm_overlap(): off gives the single-buffer sequence (A/B timing, tests)

OverlapStreams& overlap_streams() {
  OverlapStreams& o = t_overlap;
  if (!o.side) {
    MR_CHECK(cudaStreamCreateWithFlags(&o.side, cudaStreamNonBlocking), "qgemm: side stream");
    MR_CHECK(cudaEventCreateWithFlags(&o.fork, cudaEventDisableTiming), "qgemm: event");
    for (int b = 0; b < 2; ++b) {
      MR_CHECK(cudaEventCreateWithFlags(&o.dequant_done[b], cudaEventDisableTiming), "qgemm: event");
      MR_CHECK(cudaEventCreateWithFlags(&o.gemm_done[b], cudaEventDisableTiming), "qgemm: event");
    }
  }
  return o;
}

cublasHandle_t handle_for(cudaStream_t stream, const GemmWorkspace& ws) {
  if (!t_handle) cublas_check(cublasCreate(&t_handle), "qgemm: cublasCreate");
  // cublasSetStream resets the workspace to cuBLAS's own pool (which would cudaMalloc behind the
  // memory plan's back), so the workspace is set after it, on every call, even when it is empty.
  cublas_check(cublasSetStream(t_handle, stream), "qgemm: cublasSetStream");
  cublas_check(cublasSetWorkspace(t_handle, ws.cublas, ws.cublas ? static_cast<size_t>(ws.cublas_bytes) : 0),
               "qgemm: cublasSetWorkspace");
  return t_handle;
}

// ---- dequantization ----

// Thread u writes elements 8c..8c+7 of row r (u = r * K/8 + c) as one 16-byte store. In perm8 order
// position 2j holds element j and position 2j+1 element j+4, so half2 j = (elem j, elem j+4).
template <int BITS>
__global__ void __launch_bounds__(256) dequant_kernel(const uint8_t* __restrict__ codes,
                                                      const uint8_t* __restrict__ high,
                                                      const __half* __restrict__ scales, int K, int gshift,
                                                      int64_t units, __half* __restrict__ out) {
  const int k8 = K >> 3;
  const int ngroups = K >> gshift;
  for (int64_t u = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; u < units; u += (int64_t)gridDim.x * blockDim.x) {
    const int64_t r = u / k8;
    const int c = static_cast<int>(u - r * k8);
    const __half s = scales[r * ngroups + ((c * 8) >> gshift)];
    uint4 o;
    uint32_t* o32 = &o.x;
    if (BITS == 4) {
      // (w >> 4j) & 0x000F000F puts nibbles j and j+4 in the two halves; | 0x64006400 makes them the
      // fp16 values 1024 + code, exact; - 1032 gives code - 8 exactly; one correctly rounded multiply.
      const uint32_t w = __ldg(reinterpret_cast<const uint32_t*>(codes + r * (K / 2)) + c);
      const __half2 s2 = __half2half2(s);
      const __half2 bias = __float2half2_rn(1032.f);
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        uint32_t b = and_or<0x000F000Fu, 0x64006400u>(w >> (4 * j));
        __half2 v = __hmul2(__hsub2(*reinterpret_cast<__half2*>(&b), bias), s2);
        o32[j] = *reinterpret_cast<uint32_t*>(&v);
      }
    } else {
      int code[8];
      if (BITS == 8) {
        const uint2 w = __ldg(reinterpret_cast<const uint2*>(codes + r * K) + c);
#pragma unroll
        for (int i = 0; i < 8; ++i) code[i] = ((i < 4 ? w.x : w.y) >> ((i & 3) * 8)) & 0xFF;
      } else {
        const uint32_t w = __ldg(reinterpret_cast<const uint32_t*>(codes + r * (K / 2)) + c);
#pragma unroll
        for (int i = 0; i < 8; ++i) code[i] = (w >> (4 * i)) & 0xF;
        if (BITS == 5) {
          const uint32_t h = __ldg(high + r * (K / 8) + c);
#pragma unroll
          for (int i = 0; i < 8; ++i) code[i] |= ((h >> i) & 1) << 4;
        } else {  // 6-bit: two bytes per 8 elements
          const uint32_t h = __ldg(reinterpret_cast<const uint16_t*>(high + r * (K / 4)) + c);
#pragma unroll
          for (int i = 0; i < 8; ++i) code[i] |= ((h >> (2 * i)) & 3) << 4;
        }
      }
      const float sf = __half2float(s);
      constexpr int off = 1 << (BITS - 1);
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        // (code - off) * scale is exact in fp32 (<= 8 + 11 significant bits): one rounding to fp16
        __half2 v = __floats2half2_rn(float(code[j] - off) * sf, float(code[j + 4] - off) * sf);
        o32[j] = *reinterpret_cast<uint32_t*>(&v);
      }
    }
    reinterpret_cast<uint4*>(out)[u] = o;
  }
}

// SwiGLU epilogue of one slice: S [T, rows] fp32 (rows interleaved gate/up, first pair = p0).
__global__ void swiglu_epilogue_kernel(const float* __restrict__ S, int T, int rows, int p0,
                                       __half* __restrict__ out, int ldo) {
  const int pairs = rows >> 1;
  const int64_t total = (int64_t)T * pairs;
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < total; i += (int64_t)gridDim.x * blockDim.x) {
    const int t = static_cast<int>(i / pairs);
    const int j = static_cast<int>(i - (int64_t)t * pairs);
    const float2 gu = *reinterpret_cast<const float2*>(S + (int64_t)t * rows + 2 * j);
    out[(int64_t)t * ldo + perm8(p0 + j)] = __float2half(silu(gu.x) * gu.y);
  }
}

int grid_for(int64_t work, int threads) {
  // grid-stride loops: enough blocks to fill any GPU many times over, bounded for int grids
  return static_cast<int>(std::max<int64_t>(1, std::min<int64_t>((work + threads - 1) / threads, 1 << 20)));
}

void launch_dequant(const QMatrix& W, int64_t r0, int64_t rows, __half* out, cudaStream_t stream) {
  const int64_t K = W.cols;
  const int bits = W.q.bits;
  const int gshift = W.q.group == 64 ? 6 : 5;
  const int64_t code_row = bits == 8 ? K : K / 2;
  const int64_t high_row = bits == 5 ? K / 8 : bits == 6 ? K / 4 : 0;
  const uint8_t* codes = reinterpret_cast<const uint8_t*>(W.codes) + r0 * code_row;
  const uint8_t* high = high_row ? reinterpret_cast<const uint8_t*>(W.high) + r0 * high_row : nullptr;
  const __half* scales = reinterpret_cast<const __half*>(W.scales) + r0 * (K / W.q.group);
  const int64_t units = rows * (K / 8);
  const int threads = 256, blocks = grid_for(units, threads);
  switch (bits) {
    case 4: dequant_kernel<4><<<blocks, threads, 0, stream>>>(codes, high, scales, (int)K, gshift, units, out); break;
    case 5: dequant_kernel<5><<<blocks, threads, 0, stream>>>(codes, high, scales, (int)K, gshift, units, out); break;
    case 6: dequant_kernel<6><<<blocks, threads, 0, stream>>>(codes, high, scales, (int)K, gshift, units, out); break;
    default: dequant_kernel<8><<<blocks, threads, 0, stream>>>(codes, high, scales, (int)K, gshift, units, out); break;
  }
  MR_CHECK_LAUNCH("qgemm: dequant");
}

}  // namespace

int64_t qgemm_slice_rows(int64_t N, int64_t K, int T, int epilogue, const GemmWorkspace& ws) {
  if (N < 1 || K < 1 || T < 1) throw std::invalid_argument("qgemm: N, K and T must be positive");
  int64_t fit = ws.dequant ? ws.dequant_bytes / (K * (int64_t)sizeof(__half)) : 0;
  if (epilogue == GEMV_SWIGLU) fit = std::min<int64_t>(fit, ws.scratch ? ws.scratch_bytes / (T * (int64_t)sizeof(float)) : 0);
  if (fit >= N) return N;
  fit = fit / kGemmSliceRows * kGemmSliceRows;
  if (fit < kGemmSliceRows) {
    std::string msg = "qgemm: workspace too small for N=" + std::to_string(N) + ", K=" + std::to_string(K) +
                      ", T=" + std::to_string(T) + ": a slice of " + std::to_string(kGemmSliceRows) + " rows needs " +
                      std::to_string(kGemmSliceRows * K * (int64_t)sizeof(__half)) + " bytes of dequant workspace (have " +
                      std::to_string(ws.dequant ? ws.dequant_bytes : 0) + ")";
    if (epilogue == GEMV_SWIGLU)
      msg += " and " + std::to_string(kGemmSliceRows * (int64_t)T * (int64_t)sizeof(float)) +
             " bytes of SwiGLU scratch (have " + std::to_string(ws.scratch ? ws.scratch_bytes : 0) + ")";
    throw std::invalid_argument(msg + "; use a smaller prefill chunk or a larger workspace");
  }
  return fit;
}

// Rows per slice when the dequant workspace is split into two buffers for the overlap, or 0 when the
// overlap does not apply (switched off, a single slice of at most kGemmSliceRows rows, or half the
// workspace holds fewer than kGemmSliceRows rows). At least two slices, so that one dequant can hide
// behind a GEMM even for a matrix that would fit the workspace whole.
int64_t overlap_slice_rows(int64_t N, int64_t K, int T, int epilogue, const GemmWorkspace& ws, int64_t* half_bytes) {
  if (!g_overlap || !ws.dequant || N <= kGemmSliceRows) return 0;
  *half_bytes = ws.dequant_bytes / 2 / 256 * 256;  // the second buffer starts 256-byte aligned
  int64_t fit = *half_bytes / (K * (int64_t)sizeof(__half));
  if (epilogue == GEMV_SWIGLU) fit = std::min<int64_t>(fit, ws.scratch ? ws.scratch_bytes / (T * (int64_t)sizeof(float)) : 0);
  const int64_t half_n = ((N + 1) / 2 + kGemmSliceRows - 1) / kGemmSliceRows * kGemmSliceRows;
  const int64_t rows = std::min(fit / kGemmSliceRows * kGemmSliceRows, half_n);
  return rows >= kGemmSliceRows && rows < N ? rows : 0;
}

void qgemm(const QMatrix& W, const __half* x, int T, int epilogue, float* out_f32, __half* out_h, int ldo,
           const GemmWorkspace& ws, cudaStream_t stream) {
  const int64_t N = W.rows, K = W.cols;
  if (T < 1) throw std::invalid_argument("qgemm: T must be >= 1");
  if (W.q.bits != 4 && W.q.bits != 5 && W.q.bits != 6 && W.q.bits != 8)
    throw std::invalid_argument("qgemm: bits must be 4, 5, 6 or 8");
  if (W.q.group != 32 && W.q.group != 64) throw std::invalid_argument("qgemm: group must be 32 or 64");
  if (K % 32 != 0 || K % W.q.group != 0) throw std::invalid_argument("qgemm: K must be a multiple of 32 and of the group");
  if (N > INT32_MAX || K > INT32_MAX) throw std::invalid_argument("qgemm: N and K must fit in int");
  if (epilogue != GEMV_STORE && epilogue != GEMV_ADD && epilogue != GEMV_SWIGLU)
    throw std::invalid_argument("qgemm: unknown epilogue");
  if (epilogue == GEMV_SWIGLU) {
    if (N % 2 != 0) throw std::invalid_argument("qgemm: SwiGLU needs an even row count");
    if (!out_h || ldo < N / 2) throw std::invalid_argument("qgemm: SwiGLU needs out_h and ldo >= N/2");
  } else if (!out_f32 || ldo < N) {
    throw std::invalid_argument("qgemm: STORE/ADD need out_f32 and ldo >= N");
  }
  if (reinterpret_cast<uintptr_t>(ws.dequant) % 16 != 0 || reinterpret_cast<uintptr_t>(ws.cublas) % 256 != 0 ||
      reinterpret_cast<uintptr_t>(ws.scratch) % 16 != 0)
    throw std::invalid_argument("qgemm: workspace alignment (dequant/scratch 16 bytes, cublas 256 bytes)");
  int64_t half_bytes = 0;
  const int64_t two_buffer_rows = overlap_slice_rows(N, K, T, epilogue, ws, &half_bytes);
  const bool overlap = two_buffer_rows > 0;
  const int64_t slice = overlap ? two_buffer_rows : qgemm_slice_rows(N, K, T, epilogue, ws);
  __half* buffers[2] = {ws.dequant, overlap ? reinterpret_cast<__half*>(reinterpret_cast<char*>(ws.dequant) + half_bytes)
                                            : ws.dequant};
  cublasHandle_t h = handle_for(stream, ws);
  OverlapStreams* os = nullptr;
  if (overlap) {  // the side stream starts after everything already queued on the caller's stream
    os = &overlap_streams();
    MR_CHECK(cudaEventRecord(os->fork, stream), "qgemm: fork");
    MR_CHECK(cudaStreamWaitEvent(os->side, os->fork, 0), "qgemm: fork");
  }

  // cuBLAS is column-major; every buffer here is row-major. A row-major [R, C] matrix with row
  // stride ld is the column-major [C, R] matrix with leading dimension ld (its transpose). So:
  //   Wd  row-major [n, K], ld K      = column-major A' [K, n], lda = K;  we need Wd = A'^T  -> op(A) = T
  //   x   row-major [T, K], ld K      = column-major B' [K, T], ldb = K;  we need x^T = B'   -> op(B) = N
  //   out row-major [T, ldo] at col r0 = column-major C' [n, T], ldc = ldo, C'(i, t) = out[t, r0 + i]
  // and out[t, r0 + i] = sum_k Wd[i, k] x[t, k] is C' = op(A) op(B) = Wd x^T with m = n, n = T, k = K.
  // (The "TN" case, cuBLAS's best-tuned layout.) Wd's columns are in perm8 order like x's, so the
  // permutation cancels in the dot product.
  const float one = 1.f, zero = 0.f;
  for (int64_t r0 = 0, i = 0; r0 < N; r0 += slice, ++i) {
    const int n = static_cast<int>(std::min(slice, N - r0));
    const int b = static_cast<int>(i & 1);
    __half* const buf = buffers[b];
    if (overlap) {
      // buffer b was last read by the GEMM of slice i - 2
      if (i >= 2) MR_CHECK(cudaStreamWaitEvent(os->side, os->gemm_done[b], 0), "qgemm: wait gemm");
      launch_dequant(W, r0, n, buf, os->side);
      MR_CHECK(cudaEventRecord(os->dequant_done[b], os->side), "qgemm: record dequant");
      MR_CHECK(cudaStreamWaitEvent(stream, os->dequant_done[b], 0), "qgemm: wait dequant");
    } else {
      launch_dequant(W, r0, n, buf, stream);
    }
    float* C;
    int ldc;
    const float* beta = &zero;  // beta = 0: C is not read (NaN garbage in it is fine)
    if (epilogue == GEMV_SWIGLU) {
      C = ws.scratch;
      ldc = n;
    } else {
      C = out_f32 + r0;
      ldc = ldo;
      if (epilogue == GEMV_ADD) beta = &one;  // residual add: C = W x + C
    }
    cublas_check(cublasGemmEx(h, CUBLAS_OP_T, CUBLAS_OP_N, n, T, static_cast<int>(K), &one, buf, CUDA_R_16F,
                              static_cast<int>(K), x, CUDA_R_16F, static_cast<int>(K), beta, C, CUDA_R_32F, ldc,
                              CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
                 "qgemm: cublasGemmEx");
    if (epilogue == GEMV_SWIGLU) {
      const int threads = 256;
      swiglu_epilogue_kernel<<<grid_for((int64_t)T * (n / 2), threads), threads, 0, stream>>>(
          ws.scratch, T, n, static_cast<int>(r0 / 2), out_h, ldo);
      MR_CHECK_LAUNCH("qgemm: swiglu epilogue");
    }
    if (overlap) MR_CHECK(cudaEventRecord(os->gemm_done[b], stream), "qgemm: record gemm");
  }
}

void set_qgemm_overlap(bool on) { g_overlap = on; }

void qgemm_release() {
  OverlapStreams& o = t_overlap;
  if (o.side) {
    cudaStreamSynchronize(o.side);
    for (int b = 0; b < 2; ++b) {
      cudaEventDestroy(o.dequant_done[b]);
      cudaEventDestroy(o.gemm_done[b]);
    }
    cudaEventDestroy(o.fork);
    cudaStreamDestroy(o.side);
    o = OverlapStreams{};
  }
  if (!t_handle) return;
  cublasHandle_t h = t_handle;
  t_handle = nullptr;
  cublas_check(cublasDestroy(h), "qgemm: cublasDestroy");
}

}  // namespace monorail
