// Test entry points of the attn_prefill prefill ops (registered from bindings.cpp): raw device pointers
// (ints from torch's data_ptr()), like op_attention. The gate is read from qkv + 256 with row stride ldp
// (the q_proj layout [q(256) | gate(256)] per head), as in decode.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <vector>

#include "attn_prefill.h"
#include "binding_helpers.h"
#include "common.cuh"

namespace py = pybind11;
using namespace monorail;

namespace {


struct PrefillCall {
  uintptr_t qkv; int ldp, T; AttnDims d; uintptr_t q_norm, k_norm, inv_freq; int sec[3];
  uintptr_t pos3; int kv_start; uintptr_t q_buf, kc, vc, ks, vs, out_h;

  void prep(cudaStream_t s) const {
    attn_prefill_prep(dev_ptr<float>(qkv), ldp, T, d, dev_ptr<float>(q_norm), dev_ptr<float>(k_norm), dev_ptr<float>(inv_freq),
                      sec, dev_ptr<int32_t>(pos3), kv_start, dev_ptr<float>(q_buf), dev_ptr<char>(kc), dev_ptr<char>(vc),
                      dev_ptr<char>(ks), dev_ptr<char>(vs), s);
  }
  void attend(cudaStream_t s) const {
    attn_prefill(dev_ptr<float>(q_buf), T, kv_start, d, dev_ptr<char>(kc), dev_ptr<char>(vc), dev_ptr<char>(ks), dev_ptr<char>(vs),
                 dev_ptr<float>(qkv) + 256, ldp, dev_ptr<__half>(out_h), s);
  }
};

PrefillCall make_call(uintptr_t qkv, int ldp, int T, int n_heads, int n_kv, int rotary_dim, float eps, int kv_fmt,
                      uintptr_t q_norm, uintptr_t k_norm, uintptr_t inv_freq, const std::vector<int>& sec,
                      uintptr_t pos3, int kv_start, uintptr_t q_buf, uintptr_t kc, uintptr_t vc, uintptr_t ks,
                      uintptr_t vs, uintptr_t out_h) {
  PrefillCall c{qkv, ldp, T, AttnDims{n_heads, n_kv, 256, rotary_dim, eps, kv_fmt}, q_norm, k_norm, inv_freq,
                {sec.at(0), sec.at(1), sec.at(2)}, pos3, kv_start, q_buf, kc, vc, ks, vs, out_h};
  return c;
}

}  // namespace

void register_attn_prefill_bindings(py::module_& m) {
  // Kernel selection (attn_prefill.h): 0 default (3 where the device has the shared memory, else 2),
  // 1 the first kernel, 2 small pair-split configuration, 3 large. Process-wide; tests reset it to 0.
  m.def("set_attn_prefill_variant", [](int v) { set_attn_prefill_variant(v); });
  m.def("attn_prefill_variant", [] { return attn_prefill_variant(); });
  m.def("attn_prefill_variant_supported", [](int v) { return attn_prefill_variant_supported(v); });
  // attn_prefill_prep then attn_prefill on stream 0, synchronised. kv_fmt: 0 bf16, 1 int8, 2 int4 (ops.h).
  m.def("op_attn_prefill", [](uintptr_t qkv, int ldp, int T, int n_heads, int n_kv, int rotary_dim, float eps,
                              int kv_fmt, uintptr_t q_norm, uintptr_t k_norm, uintptr_t inv_freq, std::vector<int> sec,
                              uintptr_t pos3, int kv_start, uintptr_t q_buf, uintptr_t kc, uintptr_t vc, uintptr_t ks,
                              uintptr_t vs, uintptr_t out_h) {
    const PrefillCall c = make_call(qkv, ldp, T, n_heads, n_kv, rotary_dim, eps, kv_fmt, q_norm, k_norm, inv_freq,
                                    sec, pos3, kv_start, q_buf, kc, vc, ks, vs, out_h);
    c.prep(0);
    c.attend(0);
    MR_CHECK(cudaStreamSynchronize(0), "attn_prefill");
  });
  // prep once, one untimed attn_prefill, then `reps` timed ones: milliseconds per attn_prefill call.
  m.def("op_attn_prefill_time", [](uintptr_t qkv, int ldp, int T, int n_heads, int n_kv, int rotary_dim, float eps,
                                   int kv_fmt, uintptr_t q_norm, uintptr_t k_norm, uintptr_t inv_freq,
                                   std::vector<int> sec, uintptr_t pos3, int kv_start, uintptr_t q_buf, uintptr_t kc,
                                   uintptr_t vc, uintptr_t ks, uintptr_t vs, uintptr_t out_h, int reps) {
    const PrefillCall c = make_call(qkv, ldp, T, n_heads, n_kv, rotary_dim, eps, kv_fmt, q_norm, k_norm, inv_freq,
                                    sec, pos3, kv_start, q_buf, kc, vc, ks, vs, out_h);
    c.prep(0);
    return (double)time_ms_per_call([&] { c.attend(0); }, reps, 1, "attn_prefill_time");
  });
}
