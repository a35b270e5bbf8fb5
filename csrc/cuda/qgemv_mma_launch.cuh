// The launch of one form of the tensor-core GEMV kernel (gemv::launch_mma_kernel, declared in qgemv_common.cuh), and
// the forms qgemv_mma.cu's launch_mma_form launches for one width (MR_MMA_FORMS), for the files that instantiate them:
// qgemv_mma_4_8bit.cu and qgemv_mma_5_6bit.cu. Include after qgemv_mma.cuh (its kernel is found in the enclosing
// anonymous namespace).
#pragma once

namespace monorail {
namespace gemv {

template <int BITS, int U, bool LF, int MT>
void launch_mma_kernel(bool two_tiles, dim3 grid, dim3 block, cudaStream_t st, const GemvArgs& a, float* part, int per,
                       bool unchecked) {
  if (two_tiles)
    launch_pdl("qgemv_mma", qgemv_mma_kernel<BITS, 2, U, LF, MT>, grid, block, 0, st, a, part, per, unchecked);
  else
    launch_pdl("qgemv_mma", qgemv_mma_kernel<BITS, 1, U, LF, MT>, grid, block, 0, st, a, part, per, unchecked);
}

}  // namespace gemv
}  // namespace monorail

// Every form launch_mma_form may take at a width whose pass holds U spans (2 at 4 / 5 / 6 bits, 1 at 8): 16 rows a warp
// (loads first), 32 rows with and without loads first, each at U and 2 U spans a pass.
#define MR_MMA_FORM(BITS, U, LF, MT)                                                                               \
  template void ::monorail::gemv::launch_mma_kernel<BITS, U, LF, MT>(bool, dim3, dim3, cudaStream_t,              \
                                                                     const ::monorail::gemv::GemvArgs&, float*,   \
                                                                     int, bool);
#define MR_MMA_FORMS(BITS, U)                                                                                      \
  MR_MMA_FORM(BITS, U, true, 1)                                                                                    \
  MR_MMA_FORM(BITS, 2 * U, true, 1)                                                                                \
  MR_MMA_FORM(BITS, U, true, 2)                                                                                    \
  MR_MMA_FORM(BITS, 2 * U, true, 2)                                                                                \
  MR_MMA_FORM(BITS, U, false, 2)                                                                                   \
  MR_MMA_FORM(BITS, 2 * U, false, 2)
