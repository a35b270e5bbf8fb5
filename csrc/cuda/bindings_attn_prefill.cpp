// Test entry points of the attn_prefill prefill ops (registered from bindings.cpp): raw device pointers
// (ints from torch's data_ptr()), like op_attention. The gate is read from qkv + 256 with row stride ldp
// (the q_proj layout [q(256) | gate(256)] per head), as in decode.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <vector>

#include "attn_prefill.h"
#include "common.cuh"

namespace py = pybind11;
using namespace monorail;

namespace {

template <typename T>
T* aptr(uintptr_t p) { return reinterpret_cast<T*>(p); }

struct PrefillCall {
  uintptr_t qkv; int ldp, T; AttnDims d; uintptr_t q_norm, k_norm, inv_freq; int sec[3];
  uintptr_t pos3; int kv_start; uintptr_t q_buf, kc, vc, ks, vs, out_h;

  void prep(cudaStream_t s) const {
    attn_prefill_prep(aptr<float>(qkv), ldp, T, d, aptr<float>(q_norm), aptr<float>(k_norm), aptr<float>(inv_freq),
                      sec, aptr<int32_t>(pos3), kv_start, aptr<float>(q_buf), aptr<char>(kc), aptr<char>(vc),
                      aptr<char>(ks), aptr<char>(vs), s);
  }
  void attend(cudaStream_t s) const {
    attn_prefill(aptr<float>(q_buf), T, kv_start, d, aptr<char>(kc), aptr<char>(vc), aptr<char>(ks), aptr<char>(vs),
                 aptr<float>(qkv) + 256, ldp, aptr<__half>(out_h), s);
  }
};

PrefillCall make_call(uintptr_t qkv, int ldp, int T, int n_heads, int n_kv, int rotary_dim, float eps, int kv_int8,
                      uintptr_t q_norm, uintptr_t k_norm, uintptr_t inv_freq, const std::vector<int>& sec,
                      uintptr_t pos3, int kv_start, uintptr_t q_buf, uintptr_t kc, uintptr_t vc, uintptr_t ks,
                      uintptr_t vs, uintptr_t out_h) {
  PrefillCall c{qkv, ldp, T, AttnDims{n_heads, n_kv, 256, rotary_dim, eps, kv_int8}, q_norm, k_norm, inv_freq,
                {sec.at(0), sec.at(1), sec.at(2)}, pos3, kv_start, q_buf, kc, vc, ks, vs, out_h};
  return c;
}

}  // namespace

void register_attn_prefill_bindings(py::module_& m) {
  // attn_prefill_prep then attn_prefill on stream 0, synchronised.
  m.def("op_attn_prefill", [](uintptr_t qkv, int ldp, int T, int n_heads, int n_kv, int rotary_dim, float eps,
                              int kv_int8, uintptr_t q_norm, uintptr_t k_norm, uintptr_t inv_freq, std::vector<int> sec,
                              uintptr_t pos3, int kv_start, uintptr_t q_buf, uintptr_t kc, uintptr_t vc, uintptr_t ks,
                              uintptr_t vs, uintptr_t out_h) {
    const PrefillCall c = make_call(qkv, ldp, T, n_heads, n_kv, rotary_dim, eps, kv_int8, q_norm, k_norm, inv_freq,
                                    sec, pos3, kv_start, q_buf, kc, vc, ks, vs, out_h);
    c.prep(0);
    c.attend(0);
    MR_CHECK(cudaStreamSynchronize(0), "attn_prefill");
  });
  // prep once, one untimed attn_prefill, then `reps` timed ones: milliseconds per attn_prefill call.
  m.def("op_attn_prefill_time", [](uintptr_t qkv, int ldp, int T, int n_heads, int n_kv, int rotary_dim, float eps,
                                   int kv_int8, uintptr_t q_norm, uintptr_t k_norm, uintptr_t inv_freq,
                                   std::vector<int> sec, uintptr_t pos3, int kv_start, uintptr_t q_buf, uintptr_t kc,
                                   uintptr_t vc, uintptr_t ks, uintptr_t vs, uintptr_t out_h, int reps) {
    const PrefillCall c = make_call(qkv, ldp, T, n_heads, n_kv, rotary_dim, eps, kv_int8, q_norm, k_norm, inv_freq,
                                    sec, pos3, kv_start, q_buf, kc, vc, ks, vs, out_h);
    if (reps < 1) reps = 1;
    c.prep(0);
    c.attend(0);
    cudaEvent_t e0, e1;
    MR_CHECK(cudaEventCreate(&e0), "attn_prefill_time");
    MR_CHECK(cudaEventCreate(&e1), "attn_prefill_time");
    float ms = 0.f;
    try {
      MR_CHECK(cudaEventRecord(e0, 0), "attn_prefill_time");
      for (int r = 0; r < reps; ++r) c.attend(0);
      MR_CHECK(cudaEventRecord(e1, 0), "attn_prefill_time");
      MR_CHECK(cudaEventSynchronize(e1), "attn_prefill_time");
      MR_CHECK(cudaEventElapsedTime(&ms, e0, e1), "attn_prefill_time");
    } catch (...) {
      cudaEventDestroy(e0);
      cudaEventDestroy(e1);
      throw;
    }
    cudaEventDestroy(e0);
    cudaEventDestroy(e1);
    return (double)ms / reps;
  });
}
