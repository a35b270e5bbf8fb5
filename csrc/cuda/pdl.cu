// Host side of pdl.cuh: whether programmatic dependent launch is supported, enabled and in scope.
#include "pdl.cuh"

#include <stdexcept>
#include <string>

namespace monorail {
namespace {
bool g_enabled = true;
int g_scope_depth = 0;
int g_carveout = -1;  // set_step_smem_carveout
}  // namespace

void set_step_smem_carveout(int percent) {
  if (percent < -1 || percent > 100)
    throw std::invalid_argument("shared-memory carveout must be -1 (each kernel's own) or 0..100 percent, got " +
                                std::to_string(percent));
  g_carveout = percent;
}
int step_smem_carveout() { return g_scope_depth > 0 ? g_carveout : -1; }

bool pdl_supported() {
  static int cc = -1;
  if (cc < 0) {
    int dev = 0, major = 0;
    cc = (cudaGetDevice(&dev) == cudaSuccess &&
          cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev) == cudaSuccess) ? major : 0;
  }
  return cc >= 9;
}

bool pdl_active() { return g_enabled && g_scope_depth > 0 && pdl_supported(); }
void set_pdl(bool on) { g_enabled = on; }
PdlScope::PdlScope() { ++g_scope_depth; }
PdlScope::~PdlScope() { --g_scope_depth; }

}  // namespace monorail
