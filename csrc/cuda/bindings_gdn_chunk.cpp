// Test entry points of the gdn_chunk prefill ops (registered from bindings.cpp): raw device pointers
// (torch data_ptr() ints), synchronised on the default stream.
#include <pybind11/pybind11.h>

#include "binding_helpers.h"
#include "common.cuh"
#include "gdn_chunk.h"

namespace py = pybind11;
using namespace monorail;

namespace {


void prefill(uintptr_t conv_out, uintptr_t z, uintptr_t b, uintptr_t a, int ldp, int T, const GdnDims& d,
             uintptr_t a_log, uintptr_t dt_bias, uintptr_t norm_w, uintptr_t state, uintptr_t out_h, uintptr_t scratch,
             int64_t scratch_bytes) {
  gdn_prefill(dev_ptr<float>(conv_out), dev_ptr<float>(z), dev_ptr<float>(b), dev_ptr<float>(a), ldp, T, d, dev_ptr<float>(a_log),
              dev_ptr<float>(dt_bias), dev_ptr<float>(norm_w), dev_ptr<float>(state), dev_ptr<__half>(out_h),
              dev_ptr<void>(scratch), scratch_bytes, 0);
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
    return time_ms_per_call(
        [&] { prefill(conv_out, z, b, a, ldp, T, d, a_log, dt_bias, norm_w, state, out_h, scratch, scratch_bytes); },
        reps, 1, "gdn_prefill_time");
  });
}
