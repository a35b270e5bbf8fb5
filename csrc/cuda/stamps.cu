// Host side of stamps.cuh: point every translation unit's copy of the warp-stamp buffer at one buffer (or none).
#include "common.cuh"
#include "stamps.cuh"

namespace monorail {

bool stamps_built() {
#ifdef MONORAIL_STAMPS
  return true;
#else
  return false;
#endif
}

// rec: num_sms * per_sm records; count: num_sms counters, zeroed by the caller. nullptr disarms.
void stamps_arm(StampRecord* rec, unsigned* count, unsigned per_sm) {
  if (!stamps_built() && rec != nullptr)
    throw std::runtime_error("stamps_arm: this module was built without MONORAIL_STAMPS (build with "
                             "MONORAIL_STAMPS=ON for the warp timestamps of bench/step_anatomy.py)");
  int dev = 0, sms = 0;
  if (rec) {
    MR_CHECK(cudaGetDevice(&dev), "stamps_arm");
    MR_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev), "stamps_arm");
  }
  const StampBuffer b{rec, count, rec ? per_sm : 0u, rec ? (unsigned)sms * per_sm : 0u};
  stamps_set_qgemv(b);
  stamps_set_qgemv_generic(b);
  stamps_set_gdn(b);
  stamps_set_attention(b);
  stamps_set_norm_embed(b);
}

}  // namespace monorail
