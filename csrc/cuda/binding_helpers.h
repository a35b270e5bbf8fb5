// Shared by the op-level test bindings: device pointers from torch's data_ptr() ints, a quantized
// matrix over raw pointers, and event timing of back-to-back calls on the default stream.
#pragma once
#include <cstdint>

#include "../alloc_sequence.h"
#include "common.cuh"

namespace monorail {

template <typename T>
inline T* dev_ptr(uintptr_t p) { return reinterpret_cast<T*>(p); }

inline QMatrix qmatrix_at(uintptr_t codes, uintptr_t high, uintptr_t scales, int64_t N, int64_t K, int bits,
                          int group) {
  QMatrix m;
  m.codes = dev_ptr<char>(codes);
  m.high = dev_ptr<char>(high);
  m.scales = dev_ptr<char>(scales);
  m.rows = N;
  m.cols = K;
  m.q.bits = bits;
  m.q.group = group;
  return m;
}

// Milliseconds per call of `call` (which launches on stream 0): `warmup` untimed calls, then `reps`
// (at least 1) between two events. The events are released on every path; errors name `op`.
template <typename F>
float time_ms_per_call(F&& call, int reps, int warmup, const char* op) {
  struct Events {
    cudaEvent_t a = nullptr, b = nullptr;
    ~Events() {
      if (a) cudaEventDestroy(a);
      if (b) cudaEventDestroy(b);
    }
  } ev;
  if (reps < 1) reps = 1;
  MR_CHECK(cudaEventCreate(&ev.a), op);
  MR_CHECK(cudaEventCreate(&ev.b), op);
  for (int i = 0; i < warmup; ++i) call();
  MR_CHECK(cudaEventRecord(ev.a, 0), op);
  for (int i = 0; i < reps; ++i) call();
  MR_CHECK(cudaEventRecord(ev.b, 0), op);
  MR_CHECK(cudaEventSynchronize(ev.b), op);
  float ms = 0.f;
  MR_CHECK(cudaEventElapsedTime(&ms, ev.a, ev.b), op);
  return ms / reps;
}

}  // namespace monorail
