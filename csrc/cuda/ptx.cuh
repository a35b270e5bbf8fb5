// Thin wrappers over the sm_80-class PTX the kernels share: cp.async into shared memory, ldmatrix and
// the m16n8k16 tensor-core mma (all available on sm_86, sm_89, sm_90 and sm_120). One definition, so
// decode attention, prefill attention and the GEMV issue identical instructions.
#pragma once
#include <cstdint>

namespace monorail {

__device__ inline uint32_t smem_u32(const void* p) { return static_cast<uint32_t>(__cvta_generic_to_shared(p)); }

// 16 bytes global -> shared, L2 only; ok == false zero-fills the destination instead of reading.
__device__ inline void cp_async16(uint32_t dst, const void* src, bool ok) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src), "r"(ok ? 16 : 0) : "memory");
}
// 8 bytes global -> shared (through L1: .cg takes 16 bytes only); ok == false zero-fills.
__device__ inline void cp_async8(uint32_t dst, const void* src, bool ok) {
  asm volatile("cp.async.ca.shared.global [%0], [%1], 8, %2;\n" ::"r"(dst), "l"(src), "r"(ok ? 8 : 0) : "memory");
}
__device__ inline void cp_commit() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }
template <int N>  // wait until at most N committed groups are still pending
__device__ inline void cp_wait() { asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory"); }

__device__ inline void ldsm_x4(uint32_t (&r)[4], uint32_t addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(addr) : "memory");
}
__device__ inline void ldsm_x4_t(uint32_t (&r)[4], uint32_t addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(addr) : "memory");
}

// d += A B, m16n8k16, fp32 accumulate; F16: fp16 inputs, else bf16. Fragments (PTX ISA, g = lane / 4,
// c = lane % 4):
//   A 16x16 row: a0 (g, 2c..2c+1), a1 (g+8, 2c..), a2 (g, 2c+8..2c+9), a3 (g+8, 2c+8..)
//   B 16x8 col : b0 (k 2c..2c+1, n g), b1 (k 2c+8..2c+9, n g)
//   C 16x8     : c0, c1 (g, 2c..2c+1), c2, c3 (g+8, 2c..2c+1)
// the lower-indexed element sits in the low 16 bits of each register.
template <bool F16>
__device__ inline void mma16816(float (&d)[4], uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3, uint32_t b0,
                                uint32_t b1) {
  if constexpr (F16) {
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
                 "{%0,%1,%2,%3};\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                 : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
  } else {
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
                 "{%0,%1,%2,%3};\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                 : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
  }
}
template <bool F16>
__device__ inline void mma16816(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  mma16816<F16>(d, a[0], a[1], a[2], a[3], b0, b1);
}
// d = A B + (c0, c1, c2, c3), fp16 inputs: the accumulator comes in separately (a constant or the previous d).
// Not volatile, so the compiler may schedule it like arithmetic.
__device__ inline void mma16816_f16_c(float (&d)[4], uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3, uint32_t b0,
                                      uint32_t b1, float c0, float c1, float c2, float c3) {
  asm("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%10,%11,%12,%13};"
      : "=f"(d[0]), "=f"(d[1]), "=f"(d[2]), "=f"(d[3])
      : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1), "f"(c0), "f"(c1), "f"(c2), "f"(c3));
}

// (w & MASK) | OR in one LOP3. Written in C++, nvcc emits an AND and then an OR (a LOP3 takes one
// immediate, and ptxas does not move either constant into a register on its own); this form makes ptxas
// hold OR in a register (one MOV, hoisted out of loops) and issue a single LOP3. It halves the LOP3 count
// of the 4-bit magic-number decode ((w & 0x000F000F) | 0x64006400 = half2 (1024 + c, 1024 + c')): SASS of
// qgemv4_sx_kernel, 134 -> 70 LOP3 per loop iteration.
template <uint32_t MASK, uint32_t OR>
__device__ __forceinline__ uint32_t and_or(uint32_t w) {
  uint32_t r;
  asm("lop3.b32 %0, %1, %2, %3, 0xEA;" : "=r"(r) : "r"(w), "n"(MASK), "n"(OR));  // 0xEA: (a & b) | c
  return r;
}
// (w & MASK) | c with c in a register (one LOP3).
template <uint32_t MASK>
__device__ __forceinline__ uint32_t and_or(uint32_t w, uint32_t c) {
  uint32_t r;
  asm("lop3.b32 %0, %1, %2, %3, 0xEA;" : "=r"(r) : "r"(w), "n"(MASK), "r"(c));
  return r;
}

// Four-way byte dot product with accumulate: c + sum_i a.byte_i * b.byte_i, a's bytes unsigned (0..255), b's
// signed (-128..127), in int32 (dp4a: sm_61 and later, every target of this project).
__device__ __forceinline__ int dp4a_us(uint32_t a, uint32_t b, int c) {
  int d;
  asm("dp4a.u32.s32 %0, %1, %2, %3;" : "=r"(d) : "r"(a), "r"(b), "r"(c));
  return d;
}

}  // namespace monorail
