// Python bindings of the allocation sequence (CPU-only, present in every build): the memory plan
// in engine/plan.py calls dry_run() so that its numbers come from the code the engine executes.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include "alloc_sequence.h"
#include "plan_bindings.h"

namespace py = pybind11;

namespace monorail {

template <typename T>
static T get_or(const py::dict& d, const char* key, T dflt) {
  return d.contains(key) ? d[key].cast<T>() : dflt;
}

ModelDims dims_from_dict(const py::dict& d) {
  ModelDims m;
  m.hidden = d["hidden"].cast<int64_t>();
  m.n_layers = d["n_layers"].cast<int64_t>();
  m.intermediate = d["intermediate"].cast<int64_t>();
  m.vocab = d["vocab"].cast<int64_t>();
  m.layer_is_full = d["layer_is_full"].cast<std::vector<int>>();
  m.n_heads = d["n_heads"].cast<int64_t>();
  m.n_kv_heads = d["n_kv_heads"].cast<int64_t>();
  m.head_dim = d["head_dim"].cast<int64_t>();
  m.rotary_dim = d["rotary_dim"].cast<int64_t>();
  m.lin_k_heads = d["lin_k_heads"].cast<int64_t>();
  m.lin_k_dim = d["lin_k_dim"].cast<int64_t>();
  m.lin_v_heads = d["lin_v_heads"].cast<int64_t>();
  m.lin_v_dim = d["lin_v_dim"].cast<int64_t>();
  m.conv_kernel = get_or<int64_t>(d, "conv_kernel", 4);
  m.vision_hidden = get_or<int64_t>(d, "vision_hidden", 0);
  m.vision_intermediate = get_or<int64_t>(d, "vision_intermediate", 0);
  m.vision_params = get_or<int64_t>(d, "vision_params", 0);
  m.vision_merge = get_or<int64_t>(d, "vision_merge", 4);
  return m;
}

// (bits, group) from Python.
static QuantSpec spec_from(const py::handle& bits_group) {
  auto bg = bits_group.cast<std::pair<int, int>>();
  QuantSpec q;
  q.bits = bg.first;
  q.group = bg.second;
  return q;
}

EngineShape shape_from_dict(const py::dict& d) {
  EngineShape s;
  s.max_context = d["max_context"].cast<int64_t>();
  s.kv_capacity = get_or<int64_t>(d, "kv_capacity", s.max_context);
  std::string kv = get_or<std::string>(d, "kv_dtype", "int8");
  if (kv == "bf16") s.kv = KvDtype::BF16;
  else if (kv == "int8") s.kv = KvDtype::INT8G64;
  else if (kv == "int4") s.kv = KvDtype::INT4G64;
  else throw std::invalid_argument("kv_dtype '" + kv + "' is not built in the native engine (bf16, int8, int4)");
  s.max_lanes = get_or<int64_t>(d, "max_lanes", 1);
  s.max_step_tokens = get_or<int64_t>(d, "max_step_tokens", 1);
  s.mtp_drafts = get_or<int64_t>(d, "mtp_drafts", 0);
  s.prefill_chunk = get_or<int64_t>(d, "prefill_chunk", 0);
  s.vision_max_tokens = get_or<int64_t>(d, "vision_max_tokens", 0);
  s.graph_allowance = get_or<int64_t>(d, "graph_allowance", 0);
  s.margin = get_or<int64_t>(d, "margin", 0);
  py::dict recipe = get_or<py::dict>(d, "recipe", py::dict());
  py::dict tails = get_or<py::dict>(d, "recipe_tail", py::dict());
  for (const auto& item : tails)
    if (role_index(item.first.cast<std::string>()) < 0)
      throw std::invalid_argument("recipe_tail: unknown role '" + item.first.cast<std::string>() + "'");
  for (int r = 0; r < N_ROLES; ++r) {
    if (recipe.contains(role_name(r))) s.recipe[r] = spec_from(recipe[role_name(r)]);
    if (tails.contains(role_name(r))) s.recipe_tail[r] = spec_from(tails[role_name(r)]);
  }
  return s;
}

}  // namespace monorail

void register_plan_bindings(py::module_& m) {
  using namespace monorail;
  m.def("dry_run", [](py::dict dims, py::dict shape) {
    ModelDims d = dims_from_dict(dims);
    EngineShape s = shape_from_dict(shape);
    Arena arena;
    allocate_engine(arena, d, s);
    py::list out;
    for (const auto& a : arena.log())
      out.append(py::make_tuple(a.name, a.category, a.bytes, a.align, a.offset));
    return out;
  }, py::arg("dims"), py::arg("shape"),
  "Run the engine's allocation sequence on a dry arena: [(name, category, bytes, align, offset)].");
  m.def("step_workspace_bytes", [](py::dict dims, int64_t tokens, int64_t logit_rows) {
    return step_workspace_bytes(dims_from_dict(dims), tokens, logit_rows);
  });
  m.def("prefill_workspace_bytes", [](py::dict dims, int64_t chunk) {
    return prefill_workspace_bytes(dims_from_dict(dims), chunk);
  }, "Bytes of the prefill chunk's workspace (step workspace for the chunk, GDN scratch, GEMM slice, cuBLAS).");
  m.def("vision_workspace_bytes", [](py::dict dims, int64_t tokens) {
    return vision_workspace_bytes(dims_from_dict(dims), tokens);
  });
  m.def("role_names", []() {
    std::vector<std::string> v;
    for (int r = 0; r < N_ROLES; ++r) v.push_back(role_name(r));
    return v;
  });
}
