// The tensor-core GEMV kernel's forms at 5 and 6 bits (qgemv_mma_launch.cuh): compiled apart from qgemv_mma.cu and the
// other widths so that a cold build compiles them side by side (session 49). Their high planes make these the largest forms.
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
