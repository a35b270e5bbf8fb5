// The tensor-core GEMV kernel's forms at 4 and 8 bits (qgemv_mma_launch.cuh): compiled apart from qgemv_mma.cu and the
// other widths so that a cold build compiles them side by side (session 49). 8 bits loads one span a pass (U = 1),
// 4 bits two.
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

MR_MMA_FORMS(4, 2)
MR_MMA_FORMS(8, 1)
