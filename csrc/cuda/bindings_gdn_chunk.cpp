// Test entry points of the gdn_chunk prefill ops (registered from bindings.cpp): raw device pointers
// (torch data_ptr() ints), synchronised on the default stream.
#include <pybind11/pybind11.h>

#include "common.cuh"
#include "gdn_chunk.h"

namespace py = pybind11;
using namespace monorail;

namespace {

template <typename T>
T* gptr(uintptr_t p) { return reinterpret_cast<T*>(p); }

void prefill(uintptr_t conv_out, uintptr_t z, uintptr_t b, uintptr_t a, int ldp, int T, const GdnDims& d,
             uintptr_t a_log, uintptr_t dt_bias, uintptr_t norm_w, uintptr_t state, uintptr_t out_h, uintptr_t scratch,
             int64_t scratch_bytes) {
  gdn_prefill(gptr<float>(conv_out), gptr<float>(z), gptr<float>(b), gptr<float>(a), ldp, T, d, gptr<float>(a_log),
              gptr<float>(dt_bias), gptr<float>(norm_w), gptr<float>(state), gptr<__half>(out_h),
              gptr<void>(scratch), scratch_bytes, 0);
}

}  // namespace

void register_gdn_chunk_bindings(py::module_& m) {
  m.def("gdn_prefill_scratch_bytes", [](int k_heads, int v_heads, int64_t T) {
    return gdn_prefill_scratch_bytes(GdnDims{k_heads, v_heads, 128, 128, 1e-6f}, T);
  });
  m.def("op_gdn_prefill", [](uintptr_t conv_out, uintptr_t z, uintptr_t b, uintptr_t a, int ldp, int T, int k_heads,
                             int v_heads, float eps, uintptr_t a_log, uintptr_t dt_bias, uintptr_t norm_w,
                             uintptr_t state, uintptr_t out_h, uintptr_t scratch, int64_t scratch_bytes) {
    GdnDims d{k_heads, v_heads, 128, 128, eps};
    prefill(conv_out, z, b, a, ldp, T, d, a_log, dt_bias, norm_w, state, out_h, scratch, scratch_bytes);
    MR_CHECK(cudaStreamSynchronize(0), "gdn_prefill");
  });
  // ms per call (CUDA events over `reps` calls after one warm-up); the state keeps evolving.
  m.def("op_gdn_prefill_time", [](uintptr_t conv_out, uintptr_t z, uintptr_t b, uintptr_t a, int ldp, int T,
                                  int k_heads, int v_heads, float eps, uintptr_t a_log, uintptr_t dt_bias,
                                  uintptr_t norm_w, uintptr_t state, uintptr_t out_h, uintptr_t scratch,
                                  int64_t scratch_bytes, int reps) {
    GdnDims d{k_heads, v_heads, 128, 128, eps};
    if (reps < 1) reps = 1;
    prefill(conv_out, z, b, a, ldp, T, d, a_log, dt_bias, norm_w, state, out_h, scratch, scratch_bytes);
    cudaEvent_t e0, e1;
    MR_CHECK(cudaEventCreate(&e0), "gdn_prefill_time");
    MR_CHECK(cudaEventCreate(&e1), "gdn_prefill_time");
    float ms = 0.f;
    try {
      MR_CHECK(cudaEventRecord(e0, 0), "gdn_prefill_time");
      for (int i = 0; i < reps; ++i)
        prefill(conv_out, z, b, a, ldp, T, d, a_log, dt_bias, norm_w, state, out_h, scratch, scratch_bytes);
      MR_CHECK(cudaEventRecord(e1, 0), "gdn_prefill_time");
      MR_CHECK(cudaEventSynchronize(e1), "gdn_prefill_time");
      MR_CHECK(cudaEventElapsedTime(&ms, e0, e1), "gdn_prefill_time");
    } catch (...) {
      cudaEventDestroy(e0);
      cudaEventDestroy(e1);
      throw;
    }
    cudaEventDestroy(e0);
    cudaEventDestroy(e1);
    return ms / reps;
  });
}
