// What the native module was built with, and what device it can see.
#pragma once
#include <string>

namespace monorail {

struct DeviceReport {
  bool usable = false;       // a CUDA device is present and the driver accepts this build
  int device_count = 0;
  std::string name;          // device 0
  int compute_capability = 0;  // e.g. 90
  long long total_memory = 0;  // bytes, device 0
  std::string reason;        // why not usable, when it is not
};

// Implemented in csrc/cuda/device_probe.cu for CUDA builds, in module.cpp otherwise.
DeviceReport probe_device();

}  // namespace monorail
