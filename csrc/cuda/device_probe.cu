// Device probe for CUDA builds: never throws, reports why a GPU is not usable.
#include <cuda_runtime.h>

#include <string>

#include "build_info.h"

namespace monorail {

DeviceReport probe_device() {
  DeviceReport r;
  int count = 0;
  cudaError_t err = cudaGetDeviceCount(&count);
  if (err != cudaSuccess) {
    r.reason = std::string("cudaGetDeviceCount: ") + cudaGetErrorString(err);
    cudaGetLastError();  // clear the sticky-free error so later calls start clean
    return r;
  }
  r.device_count = count;
  if (count == 0) {
    r.reason = "no CUDA device";
    return r;
  }
  cudaDeviceProp prop{};
  err = cudaGetDeviceProperties(&prop, 0);
  if (err != cudaSuccess) {
    r.reason = std::string("cudaGetDeviceProperties: ") + cudaGetErrorString(err);
    return r;
  }
  r.name = prop.name;
  r.compute_capability = prop.major * 10 + prop.minor;
  r.total_memory = static_cast<long long>(prop.totalGlobalMem);
  if (r.compute_capability < 80) {
    r.reason = "compute capability " + std::to_string(r.compute_capability) + " is below 8.0 (Ampere)";
    return r;
  }
  r.usable = true;
  return r;
}

}  // namespace monorail
