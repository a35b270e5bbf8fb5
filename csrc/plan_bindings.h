// Conversions between Python dicts and the allocation-sequence structs (shared by the plan
// bindings and the CUDA engine bindings).
#pragma once
#include <pybind11/pybind11.h>

#include "alloc_sequence.h"

namespace monorail {
ModelDims dims_from_dict(const pybind11::dict& d);
EngineShape shape_from_dict(const pybind11::dict& d);
}  // namespace monorail

void register_plan_bindings(pybind11::module_& m);
