// The tensor-core GEMV kernel's forms at 5 and 6 bits (qgemv_mma_launch.cuh): compiled apart from qgemv_mma.cu and the
// other widths so that a cold build compiles them side by side (session 49). With their high planes these are the
// largest forms (20.3 s to compile for sm_90 here against 14.4 s for 4 and 8 bits: bench/NOTES.md, "Second split").
#include "common.cuh"
#include "pdl.cuh"
#include "ptx.cuh"
#include "qgemv_common.cuh"
#include "ops.h"

namespace monorail {
namespace {

using namespace gemv;

#include "qgemv_mma.cuh"

}  // namespace
}  // namespace monorail

#include "qgemv_mma_launch.cuh"

MR_MMA_FORMS(5, 2)
MR_MMA_FORMS(6, 2)
