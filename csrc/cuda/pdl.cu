// Host side of pdl.cuh: whether programmatic dependent launch is supported, enabled and in scope.
#include "pdl.cuh"

namespace monorail {
namespace {
bool g_enabled = true;
int g_scope_depth = 0;
}  // namespace

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
