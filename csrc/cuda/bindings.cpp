// Python bindings of the CUDA engine. Ops register themselves here.
#include <pybind11/pybind11.h>

namespace py = pybind11;

void register_cuda_bindings(py::module_& m) {
  (void)m;
}
