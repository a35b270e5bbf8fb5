// pybind11 entry point of engine._native. It always imports: a CPU-only build
// reports that it has no CUDA, and a CUDA build reports whether a usable GPU is present.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include "build_info.h"
#include "plan_bindings.h"

namespace py = pybind11;

#if !MONORAIL_WITH_CUDA
namespace monorail {
DeviceReport probe_device() {
  DeviceReport r;
  r.reason = "engine._native was built without CUDA (no nvcc at build time)";
  return r;
}
}  // namespace monorail
#endif

#if MONORAIL_WITH_CUDA
void register_cuda_bindings(py::module_& m);  // csrc/cuda/bindings.cpp
#endif

PYBIND11_MODULE(_native, m) {
  m.doc() = "Monorail native engine (C++/CUDA)";
  m.def("build_info", []() {
    py::dict d;
#if MONORAIL_WITH_CUDA
    d["cuda"] = true;
    d["cuda_version"] = std::string(MONORAIL_CUDA_VERSION_STR);
    d["cuda_archs"] = std::string(MONORAIL_CUDA_ARCHS_STR);
#else
    d["cuda"] = false;
    d["cuda_version"] = py::none();
    d["cuda_archs"] = std::string();
#endif
    d["compiler"] = std::string(__VERSION__);
    return d;
  }, "How this module was built: CUDA or not, CUDA version, target architectures.");
  m.def("device_info", []() {
    auto r = monorail::probe_device();
    py::dict d;
    d["usable"] = r.usable;
    d["device_count"] = r.device_count;
    d["name"] = r.name;
    d["compute_capability"] = r.compute_capability;
    d["total_memory"] = r.total_memory;
    d["reason"] = r.reason;
    return d;
  }, "Whether a usable CUDA GPU is present, and which.");
  register_plan_bindings(m);
#if MONORAIL_WITH_CUDA
  register_cuda_bindings(m);
#endif
}
