// Test entry points of the prefill GEMM (registered from bindings.cpp): qgemm on raw device pointers
// (ints from torch's data_ptr()), on the default stream and synchronised, plus an event-timed loop
// for the benchmark. Errors surface as engine._native.CudaError / ValueError like the other ops.
#include <pybind11/pybind11.h>

#include "binding_helpers.h"
#include "common.cuh"
#include "ops.h"
#include "qgemm.h"

namespace py = pybind11;
using namespace monorail;

namespace {

GemmWorkspace gemm_ws(uintptr_t dq, int64_t dq_bytes, uintptr_t cb, int64_t cb_bytes, uintptr_t sc, int64_t sc_bytes) {
  GemmWorkspace ws;
  ws.dequant = dev_ptr<__half>(dq);
  ws.dequant_bytes = dq_bytes;
  ws.cublas = dev_ptr<void>(cb);
  ws.cublas_bytes = cb_bytes;
  ws.scratch = dev_ptr<float>(sc);
  ws.scratch_bytes = sc_bytes;
  return ws;
}

}  // namespace

void register_gemm_bindings(py::module_& m) {
  m.def("op_qgemm",
        [](uintptr_t codes, uintptr_t high, uintptr_t scales, int64_t N, int64_t K, int bits, int group, uintptr_t x,
           int T, int epi, uintptr_t out_f32, uintptr_t out_h, int ldo, uintptr_t dequant_ptr, int64_t dequant_bytes,
           uintptr_t cublas_ptr, int64_t cublas_bytes, uintptr_t scratch_ptr, int64_t scratch_bytes) {
          qgemm(qmatrix_at(codes, high, scales, N, K, bits, group), dev_ptr<const __half>(x), T, epi, dev_ptr<float>(out_f32),
                dev_ptr<__half>(out_h), ldo,
                gemm_ws(dequant_ptr, dequant_bytes, cublas_ptr, cublas_bytes, scratch_ptr, scratch_bytes), 0);
          MR_CHECK(cudaStreamSynchronize(0), "qgemm");
        },
        py::arg("codes"), py::arg("high"), py::arg("scales"), py::arg("N"), py::arg("K"), py::arg("bits"),
        py::arg("group"), py::arg("x"), py::arg("T"), py::arg("epi"), py::arg("out_f32"), py::arg("out_h"),
        py::arg("ldo"), py::arg("dequant_ptr"), py::arg("dequant_bytes"), py::arg("cublas_ptr"),
        py::arg("cublas_bytes"), py::arg("scratch_ptr"), py::arg("scratch_bytes"));

  // ms per call over `reps` back-to-back calls (after 3 warm-up calls), timed with events.
  m.def("op_qgemm_time",
        [](uintptr_t codes, uintptr_t high, uintptr_t scales, int64_t N, int64_t K, int bits, int group, uintptr_t x,
           int T, int epi, uintptr_t out_f32, uintptr_t out_h, int ldo, uintptr_t dequant_ptr, int64_t dequant_bytes,
           uintptr_t cublas_ptr, int64_t cublas_bytes, uintptr_t scratch_ptr, int64_t scratch_bytes, int reps) {
          const QMatrix W = qmatrix_at(codes, high, scales, N, K, bits, group);
          const GemmWorkspace ws = gemm_ws(dequant_ptr, dequant_bytes, cublas_ptr, cublas_bytes, scratch_ptr, scratch_bytes);
          auto call = [&] {
            qgemm(W, dev_ptr<const __half>(x), T, epi, dev_ptr<float>(out_f32), dev_ptr<__half>(out_h), ldo, ws, 0);
          };
          return time_ms_per_call(call, reps, 3, "qgemm_time");
        },
        py::arg("codes"), py::arg("high"), py::arg("scales"), py::arg("N"), py::arg("K"), py::arg("bits"),
        py::arg("group"), py::arg("x"), py::arg("T"), py::arg("epi"), py::arg("out_f32"), py::arg("out_h"),
        py::arg("ldo"), py::arg("dequant_ptr"), py::arg("dequant_bytes"), py::arg("cublas_ptr"),
        py::arg("cublas_bytes"), py::arg("scratch_ptr"), py::arg("scratch_bytes"), py::arg("reps") = 20);

  m.def("qgemm_slice_rows",
        [](int64_t N, int64_t K, int T, int epi, int64_t dequant_bytes, int64_t scratch_bytes) {
          // host-only: the slicing the workspace sizes imply (non-null stand-in pointers)
          GemmWorkspace ws;
          ws.dequant = reinterpret_cast<__half*>(uintptr_t(256));
          ws.dequant_bytes = dequant_bytes;
          ws.scratch = reinterpret_cast<float*>(uintptr_t(256));
          ws.scratch_bytes = scratch_bytes;
          return qgemm_slice_rows(N, K, T, epi, ws);
        },
        py::arg("N"), py::arg("K"), py::arg("T"), py::arg("epi"), py::arg("dequant_bytes"), py::arg("scratch_bytes"));
  m.def("qgemm_release", &qgemm_release);
  m.def("set_qgemm_overlap", &set_qgemm_overlap, py::arg("on"),
        "dequantize the next slice on a side stream while the GEMM runs (default on)");
}
