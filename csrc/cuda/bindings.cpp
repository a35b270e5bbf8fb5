// Python bindings of the CUDA engine: the NativeEngine class, and each op on raw device pointers
// (ints from torch's data_ptr()) so the device tests can compare every kernel with a torch oracle.
// CUDA failures raise engine._native.CudaError naming the op; an over-budget plan raises BudgetError.
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <algorithm>
#include <cmath>
#include <cstring>

#include "../plan_bindings.h"
#include "binding_helpers.h"
#include "common.cuh"
#include "engine.h"
#include "ops.h"
#include "pdl.cuh"
#include "stamps.cuh"

namespace py = pybind11;
using namespace monorail;

namespace {

template <typename T>
T* ptr(uintptr_t p) { return dev_ptr<T>(p); }

QMatrix qmat(uintptr_t codes, uintptr_t high, uintptr_t scales, int64_t N, int64_t K, int bits, int group) {
  return qmatrix_at(codes, high, scales, N, K, bits, group);
}

// The device sampler's parameters from a dict (engine/native_backend.py device_sampling), checked here so
// that a bad value is a ValueError, not a wrong draw.
SamplingParams sampling_from_dict(const py::dict& d, int vocab) {
  SamplingParams p{};
  auto num = [&](const char* k, double dflt) { return d.contains(k) ? d[k].cast<double>() : dflt; };
  const double temperature = num("temperature", 0.0), top_p = num("top_p", 1.0), min_p = num("min_p", 0.0);
  p.temperature = (float)temperature;
  p.top_k = d.contains("top_k") ? d["top_k"].cast<int>() : 0;
  p.top_p = top_p;
  p.min_p = (float)min_p;
  p.log_min_p = min_p > 0.0 ? (float)std::log(min_p) : 0.f;
  p.repetition_penalty = (float)num("repetition_penalty", 1.0);
  p.presence_penalty = (float)num("presence_penalty", 0.0);
  p.frequency_penalty = (float)num("frequency_penalty", 0.0);
  p.vocab_limit = d.contains("vocab_limit") ? d["vocab_limit"].cast<int>() : vocab;
  p.seed = d.contains("seed") ? d["seed"].cast<uint64_t>() : 0;
  if (!(temperature >= 0.0) || p.top_k < 0 || !(top_p > 0.0 && top_p <= 1.0) || !(min_p >= 0.0 && min_p <= 1.0) ||
      !(p.repetition_penalty > 0.f) || p.vocab_limit < 1 || p.vocab_limit > vocab)
    throw py::value_error("sampling parameters out of range");
  return p;
}

void sync0(const char* op) { MR_CHECK(cudaStreamSynchronize(0), op); }

}  // namespace

// Prefill ops register their own test entry points (bindings_gemm.cpp, bindings_gdn_chunk.cpp,
// bindings_attn_prefill.cpp).
void register_gemm_bindings(py::module_& m);
void register_gdn_chunk_bindings(py::module_& m);
void register_attn_prefill_bindings(py::module_& m);

void register_cuda_bindings(py::module_& m) {
  static py::exception<CudaError> cuda_exc(m, "CudaError", PyExc_RuntimeError);
  static py::exception<BudgetError> budget_exc(m, "BudgetError", PyExc_MemoryError);
  py::register_exception_translator([](std::exception_ptr p) {
    try {
      if (p) std::rethrow_exception(p);
    } catch (const BudgetError& e) {
      py::set_error(budget_exc, e.what());
    } catch (const CudaError& e) {
      py::set_error(cuda_exc, e.what());
    }
  });

  py::class_<NativeEngine>(m, "NativeEngine")
      .def(py::init([](py::dict dims, py::dict shape, int64_t budget, float eps, float theta, std::vector<int> sec,
                       std::vector<float> inv_freq) {
             RopeSpec r;
             r.theta = theta;
             for (int i = 0; i < 3; ++i) r.mrope_section[i] = sec.at(i);
             r.inv_freq = inv_freq;
             return new NativeEngine(dims_from_dict(dims), shape_from_dict(shape), budget, eps, r);
           }),
           py::arg("dims"), py::arg("shape"), py::arg("budget"), py::arg("eps"), py::arg("rope_theta"),
           py::arg("mrope_section"), py::arg("inv_freq") = std::vector<float>())
      .def("load_matrix", [](NativeEngine& e, const std::string& role, int layer, int64_t row_offset, int64_t row_stride,
                             py::array_t<uint8_t, py::array::c_style> codes, py::object high,
                             py::array_t<uint16_t, py::array::c_style> scales) {
             const int r = role_index(role);
             if (r < 0) throw std::invalid_argument("unknown role " + role);
             const void* hp = nullptr;
             int64_t high_bytes = 0;
             py::array_t<uint8_t, py::array::c_style> harr;
             if (!high.is_none()) {
               harr = high.cast<py::array_t<uint8_t, py::array::c_style>>();
               hp = harr.data();
               high_bytes = harr.nbytes();
             }
             e.load_matrix(r, layer, row_offset, row_stride, codes.shape(0), codes.data(), codes.nbytes(), hp,
                           high_bytes, scales.data(), scales.nbytes());
           })
      .def("load_vector", [](NativeEngine& e, const std::string& kind, int layer,
                             py::array_t<float, py::array::c_style | py::array::forcecast> v) {
             e.load_vector(kind, layer, v.data(), v.size());
           })
      .def("randomize", &NativeEngine::randomize)
      .def("reset_lane", &NativeEngine::reset_lane)
      .def("lane_state_floats", &NativeEngine::lane_state_floats)
      .def("save_lane_state", [](NativeEngine& e, int lane) {
             py::array_t<float> a((py::ssize_t)e.lane_state_floats());
             e.save_lane_state(lane, a.mutable_data(), a.size());
             return a;
           })
      .def("load_lane_state", [](NativeEngine& e, int lane, py::array_t<float, py::array::c_style | py::array::forcecast> a) {
             e.load_lane_state(lane, a.data(), a.size());
           })
      .def("lane_kv_bytes", &NativeEngine::lane_kv_bytes, py::arg("n_tokens"))
      .def("save_lane_kv", [](NativeEngine& e, int lane, int n_tokens) {
             py::array_t<uint8_t> a((py::ssize_t)e.lane_kv_bytes(std::max(n_tokens, 0)));
             e.save_lane_kv(lane, n_tokens, a.mutable_data(), a.size());
             return a;
           }, py::arg("lane"), py::arg("n_tokens"))
      .def("load_lane_kv", [](NativeEngine& e, int lane, int n_tokens,
                              py::array_t<uint8_t, py::array::c_style | py::array::forcecast> a) {
             e.load_lane_kv(lane, n_tokens, a.data(), a.size());
           }, py::arg("lane"), py::arg("n_tokens"), py::arg("data"))
      .def("count_tokens", &NativeEngine::count_tokens, py::arg("lane"), py::arg("ids"), py::arg("in_prompt") = false,
           py::arg("remove") = false)
      .def("forward", &NativeEngine::forward, py::arg("lane"), py::arg("tokens"), py::arg("rope_pos"),
           py::arg("kv_start"), py::arg("keep_states") = false)
      .def("commit_states", &NativeEngine::commit_states, py::arg("lane"), py::arg("kept"))
      .def("mtp_step", &NativeEngine::mtp_step, py::arg("lane"), py::arg("next_tokens"), py::arg("rope_pos"),
           py::arg("kv_start"), py::arg("hidden_row") = 0, py::arg("chained") = false)
      .def_property_readonly("has_mtp", &NativeEngine::has_mtp)
      .def("save_mtp_hidden", [](NativeEngine& e, int lane, int first_row, int rows) {
             py::array_t<float> a(std::vector<py::ssize_t>{(py::ssize_t)std::max(rows, 0), (py::ssize_t)e.dims().hidden});
             e.save_mtp_hidden(lane, first_row, rows, a.mutable_data());
             return a;
           }, py::arg("lane"), py::arg("first_row"), py::arg("rows"),
           "rows of the lane's MTP hidden rows (the head's pending pairs' inputs) as float32 [rows, hidden]")
      .def("load_mtp_hidden", [](NativeEngine& e, int lane, int first_row,
                                 py::array_t<float, py::array::c_style | py::array::forcecast> a) {
             if (a.ndim() != 2 || a.shape(1) != e.dims().hidden)
               throw std::invalid_argument("load_mtp_hidden: the rows must be float32 [rows, hidden]");
             e.load_mtp_hidden(lane, first_row, (int)a.shape(0), a.data());
           }, py::arg("lane"), py::arg("first_row"), py::arg("rows"))
      .def("prefill", &NativeEngine::prefill, py::arg("lane"), py::arg("tokens"), py::arg("rope_pos"), py::arg("kv_start"),
           py::call_guard<py::gil_scoped_release>())
      .def_property_readonly("prefill_chunk", &NativeEngine::prefill_chunk)
      .def("logits", [](NativeEngine& e, int T) {
             auto v = e.logits(T);
             py::array_t<float> a({(py::ssize_t)T, (py::ssize_t)e.dims().vocab});
             std::memcpy(a.mutable_data(), v.data(), v.size() * 4);
             return a;
           })
      .def("sample", [](NativeEngine& e, int lane, int T, py::dict params, int64_t draw, int first_row) {
             return e.sample(lane, T, sampling_from_dict(params, (int)e.dims().vocab), draw, first_row);
           }, py::arg("lane"), py::arg("T"), py::arg("params"), py::arg("draw") = 0, py::arg("first_row") = 0)
      .def("decode_start", [](NativeEngine& e, int lane, int logits_row, int kv_next, py::dict params, int64_t draw) {
             e.decode_start(lane, logits_row, kv_next, sampling_from_dict(params, (int)e.dims().vocab), draw);
           }, py::arg("lane"), py::arg("logits_row"), py::arg("kv_next"), py::arg("params"), py::arg("draw"))
      .def("decode_push", &NativeEngine::decode_push)
      .def("decode_token", &NativeEngine::decode_token, py::call_guard<py::gil_scoped_release>())
      .def("decode_stop", &NativeEngine::decode_stop, py::call_guard<py::gil_scoped_release>())
      .def_property_readonly("decode_running", &NativeEngine::decode_running)
      .def("set_use_graphs", &NativeEngine::set_use_graphs)
      .def("synchronize", &NativeEngine::synchronize)
      .def("time_steps", &NativeEngine::time_steps)
      .def("profile_step", &NativeEngine::profile_step)
      .def("set_skip_mask", &NativeEngine::set_skip_mask)
      .def("reset_graphs", &NativeEngine::reset_graphs)
      .def("step_bytes", &NativeEngine::step_bytes)
      .def_property_readonly("arena_bytes", &NativeEngine::arena_bytes)
      .def_property_readonly("planned_total", &NativeEngine::planned_total);

  m.def("device_memory", []() {
    size_t f = 0, t = 0;
    MR_CHECK(cudaMemGetInfo(&f, &t), "cudaMemGetInfo");
    return py::make_tuple((int64_t)f, (int64_t)t);
  }, "(free, total) bytes of device 0");

  // ---- op-level entry points (default stream, synchronised) for the device tests ----
  m.def("op_qgemv", [](uintptr_t codes, uintptr_t high, uintptr_t scales, int64_t N, int64_t K, int bits, int group,
                       uintptr_t x, int T, int epi, uintptr_t out_f32, uintptr_t out_h, int ldo, int x_layout,
                       int out_layout, uintptr_t scratch, int64_t scratch_floats) {
    const GemvScratchScope scope(ptr<float>(scratch), scratch_floats);
    qgemv(qmat(codes, high, scales, N, K, bits, group), ptr<const __half>(x), T, epi, ptr<float>(out_f32),
          ptr<__half>(out_h), ldo, 0, x_layout, out_layout);
    sync0("qgemv");
  }, py::arg("codes"), py::arg("high"), py::arg("scales"), py::arg("N"), py::arg("K"), py::arg("bits"),
     py::arg("group"), py::arg("x"), py::arg("T"), py::arg("epi"), py::arg("out_f32"), py::arg("out_h"),
     py::arg("ldo"), py::arg("x_layout") = 0, py::arg("out_layout") = 0, py::arg("scratch") = 0,
     py::arg("scratch_floats") = 0);
  m.def("op_qgemv_normed", [](uintptr_t codes, uintptr_t high, uintptr_t scales, int64_t N, int64_t K, int bits,
                              int group, uintptr_t resid, uintptr_t norm_w, float eps, bool add_one, int T, int epi,
                              uintptr_t out_f32, uintptr_t out_h, int ldo, uintptr_t xin, int out_layout,
                              bool keep_x) {
    qgemv_normed(qmat(codes, high, scales, N, K, bits, group), ptr<const float>(resid), ptr<const float>(norm_w), eps,
                 add_one, T, epi, ptr<float>(out_f32), ptr<__half>(out_h), ldo, ptr<__half>(xin), 0, out_layout,
                 keep_x);
    sync0("qgemv_normed");
  }, py::arg("codes"), py::arg("high"), py::arg("scales"), py::arg("N"), py::arg("K"), py::arg("bits"),
     py::arg("group"), py::arg("resid"), py::arg("norm_w"), py::arg("eps"), py::arg("add_one"), py::arg("T"),
     py::arg("epi"), py::arg("out_f32"), py::arg("out_h"), py::arg("ldo"), py::arg("xin"), py::arg("out_layout") = 0,
     py::arg("keep_x") = false);
  m.def("qgemv_x_layout", [](int64_t N, int64_t K, int bits, int group, int T) {
    return qgemv_x_layout(qmat(0, 0, 0, N, K, bits, group), T);
  }, "the input order (0 perm8, 1 lanes) a GEMV of this shape reads on the current route");
  m.def("qgemv_spread_launch", [](int64_t N, bool x_lanes) {
    const SpreadLaunch s = qgemv_spread_launch((int)N, x_lanes);
    return py::dict(py::arg("blocks") = s.blocks, py::arg("threads") = s.threads,
                    py::arg("blocks_per_sm") = s.blocks_per_sm, py::arg("fair_share") = s.fair_share);
  }, "variant 49's launch for N rows: threads a block and the blocks an SM holds against its fair share");
  m.def("spread_idle_warps", &spread_idle_warps, py::arg("per_sm_by_idle"), py::arg("fair_share"),
        "the idle warps a block of variant 49 carries, from the blocks an SM holds with 0, 1, ... of them");
  m.def("set_sampler_slice_draw", &set_sampler_slice_draw,
        "draws with neither top-k nor top-p reduced over the slices (and min-p's floor applied to the collected ids) "
        "instead of sorted candidates (default on)");
  m.def("get_sampler_slice_draw", &get_sampler_slice_draw, "whether the sampler's slice draw is on");
  m.def("set_sampler_wide_select", &set_sampler_wide_select,
        "top-p cuts among more narrowed candidates than finish sorts found by a radix select (default off)");
  m.def("get_sampler_wide_select", &get_sampler_wide_select, "whether the sampler's wide select is on");
  m.def("set_sampler_top_k_narrowing", &set_sampler_top_k_narrowing,
        "top-k above 64 over more ids within reach than finish sorts narrowed to the bins of the k best (default off)");
  m.def("get_sampler_top_k_narrowing", &get_sampler_top_k_narrowing, "whether the sampler's top-k narrowing is on");
  m.def("set_gdn_conv_ring", &set_gdn_conv_ring,
        "the GDN decode step's conv windows loaded as whole rings before the PDL wait (default on; off: by position)");
  m.def("set_qgemv_norm_weights_early", &set_qgemv_norm_weights_early,
        "the fused norm's weights loaded before the PDL wait (default on; off: after it)");
  m.def("set_qgemv_split_fused", &set_qgemv_split_fused,
        "qgemv_normed_split in one launch where the route allows (on, the default) or as two GEMVs (off)");
  m.def("qgemv_split_fuses", [](int64_t head_rows, int64_t tail_rows, int64_t K, int tail_bits, int tail_group, int T) {
    return qgemv_split_fuses(qmat(0, 0, 0, head_rows, K, 4, 64), qmat(0, 0, 0, tail_rows, K, tail_bits, tail_group), T);
  }, "whether qgemv_normed_split of these shapes (a 4-bit group-64 head) runs as one kernel");
  m.def("op_qgemv_normed_split", [](uintptr_t hcodes, uintptr_t hscales, int64_t head_rows, uintptr_t tcodes,
                                    uintptr_t thigh, uintptr_t tscales, int64_t tail_rows, int tail_bits,
                                    int tail_group, int64_t K, uintptr_t resid, uintptr_t norm_w, float eps,
                                    bool add_one, int T, uintptr_t out, int ldo, uintptr_t xin) {
    qgemv_normed_split(qmat(hcodes, 0, hscales, head_rows, K, 4, 64),
                       qmat(tcodes, thigh, tscales, tail_rows, K, tail_bits, tail_group), ptr<const float>(resid),
                       ptr<const float>(norm_w), eps, add_one, T, ptr<float>(out), ldo, ptr<__half>(xin), 0);
    sync0("qgemv_normed_split");
  }, "a split projection (4-bit group-64 head, 5/6/8-bit tail) on the normalised input, into out's head.rows + "
     "tail.rows rows");
  m.def("set_qgemv_keep_x_fused", &set_qgemv_keep_x_fused,
        "qgemv_normed's keep_x by the fused kernel writing x where the route has one (on) or by the norm kernel "
        "first (off; on is the default)");
  m.def("set_qgemv_lanes", &set_qgemv_lanes, "allow the lanes input layout where variant 4 is the route (default on)");
  m.def("set_qgemv_mma", &set_qgemv_mma, "GEMVs of T = 2..16 on tensor cores (on, the default) or per token (off)");
  m.def("qgemv_mma", []() { return qgemv_mma(); }, "whether 4-bit GEMVs of T = 2..16 run on tensor cores");
  m.def("set_qgemv_mma_shape", &set_qgemv_mma_shape, py::arg("warps_per_sm"), py::arg("spans"),
        py::arg("rows_per_warp") = 0,
        "the tensor-core GEMV's rows a warp owns (16 or 32; 0, the default: 16 for T <= 6, 32 above), warps an SM "
        "(K split to reach them; 0, the default: 16 with 16 rows, 8 with 32) and spans a warp loads together (2 or 4; "
        "0, the default: 4 for T <= 8, 2 above)");
  m.def("qgemv_mma_shape", &qgemv_mma_shape, "(warps_per_sm, spans, rows_per_warp) as set (0: by width / form)");
  m.def("set_qgemv_mma_block_warps", &set_qgemv_mma_block_warps, py::arg("warps"),
        "warps a block of the tensor-core GEMV: 4 (the default), 2 or 1; the same work a warp, spread finer over "
        "the SMs");
  m.def("qgemv_mma_block_warps", &qgemv_mma_block_warps, "warps a block of the tensor-core GEMV");
  m.def("set_qgemv_mma_unchecked_passes", &set_qgemv_mma_unchecked_passes, py::arg("on"),
        "the tensor-core GEMV's passes that lie wholly within K and the split without bounds checks (on, the "
        "default) or every pass checked (off); the same sums");
  m.def("qgemv_mma_unchecked_passes", []() { return qgemv_mma_unchecked_passes(); },
        "whether the tensor-core GEMV's whole passes run without bounds checks");
  m.def("qgemv_mma_shape_for", &qgemv_mma_shape_for, py::arg("T"),
        "(warps_per_sm, spans, rows_per_warp) a GEMV of T tokens runs under, the zeros resolved");
  m.def("set_qgemv_mma_loads_first", &set_qgemv_mma_loads_first, py::arg("on"),
        "the tensor-core GEMV issues each pass's weight loads before its first product (on, the default) or as "
        "scheduled (off)");
  m.def("qgemv_mma_loads_first", &qgemv_mma_loads_first, "whether the tensor-core GEMV issues a pass's loads first");
  m.def("qgemv_mma_splits", &qgemv_mma_splits, py::arg("N"), py::arg("K"), py::arg("T"), py::arg("floats"),
        "splits of K the tensor-core GEMV uses for this shape with this much fp32 scratch");
  m.def("qgemv_fuses_norm", [](int64_t N, int64_t K, int bits, int group, int T) {
    return qgemv_fuses_norm(qmat(0, 0, 0, N, K, bits, group), T);
  }, "whether qgemv_normed of this shape runs the norm inside the GEMV (else as its own kernel first)");
  m.def("op_qgemv_time", [](uintptr_t codes, uintptr_t high, uintptr_t scales, int64_t N, int64_t K, int bits,
                            int group, uintptr_t x, int T, uintptr_t out_f32, int reps, int copies,
                            int64_t codes_stride, int64_t high_stride, int64_t scales_stride) {
    // back-to-back launches timed with events: the kernel's own time, launch gaps included. With copies > 1
    // the launches cycle through that many copies of the matrix (byte strides between them), so a matrix that
    // fits in L2 is read from DRAM as in a decode step, where the other layers evict it.
    if (copies < 1) throw std::invalid_argument("op_qgemv_time: copies must be >= 1");
    int next = 0;
    return time_ms_per_call(
        [&] {
          const int i = next;
          next = next + 1 == copies ? 0 : next + 1;
          QMatrix W = qmat(codes + i * codes_stride, high ? high + i * high_stride : 0, scales + i * scales_stride,
                           N, K, bits, group);
          qgemv(W, ptr<const __half>(x), T, GEMV_STORE, ptr<float>(out_f32), nullptr, (int)N, 0);
        },
        reps, 3, "qgemv_time");
  }, py::arg("codes"), py::arg("high"), py::arg("scales"), py::arg("N"), py::arg("K"), py::arg("bits"),
     py::arg("group"), py::arg("x"), py::arg("T"), py::arg("out_f32"), py::arg("reps"), py::arg("copies") = 1,
     py::arg("codes_stride") = 0, py::arg("high_stride") = 0, py::arg("scales_stride") = 0);
  m.def("set_qgemv_variant", &set_qgemv_variant);
  m.def("set_qgemv_shape_variant", &set_qgemv_shape_variant,
        "T = 1 GEMV variant for one shape (N, K), over the route (0 removes the override); for measurements");
  m.def("clear_qgemv_shape_variants", &clear_qgemv_shape_variants);
  m.def("set_pdl", &set_pdl, "programmatic dependent launch inside decode steps (default on where supported); "
        "graphs captured before keep their mode");
  m.def("pdl_supported", &pdl_supported);
  m.def("set_step_smem_carveout", &set_step_smem_carveout,
        "one shared-memory carveout preference (0..100 percent) for every kernel of the step, or -1 (default): each "
        "kernel's own; for measurements (graphs captured before keep theirs)");
  m.def("stamps_built", &stamps_built, "whether the module records warp timestamps (built with MONORAIL_STAMPS=ON)");
  m.def("stamps_arm", [](uintptr_t rec, uintptr_t count, unsigned per_sm) {
    stamps_arm(ptr<StampRecord>(rec), ptr<unsigned>(count), per_sm);
  }, "point the step kernels' warp stamps at rec (num_sms x per_sm 40-byte records) and count (num_sms zeroed "
     "uint32 counters); rec = 0 disarms (bench/step_anatomy.py)");
  m.def("set_attn_variant", &set_attn_variant);
  m.def("get_attn_variant", &get_attn_variant);
  m.def("op_rmsnorm", [](uintptr_t x, int T, int H, uintptr_t w, float eps, bool add_one, uintptr_t out) {
    rmsnorm_to_gemv_input(ptr<float>(x), T, H, ptr<float>(w), eps, add_one, ptr<__half>(out), 0);
    sync0("rmsnorm");
  });
  m.def("op_embed", [](uintptr_t codes, uintptr_t high, uintptr_t scales, int64_t N, int64_t K, int bits, int group,
                       uintptr_t tokens, int T, uintptr_t out) {
    embed_gather(qmat(codes, high, scales, N, K, bits, group), ptr<int32_t>(tokens), T, ptr<float>(out), 0);
    sync0("embed_gather");
  });
  // state: [C, Kc] ring (ops.h); pos: the position of the first of the T tokens (pos_dev: a device int32 holding it
  // instead, T <= 16)
  m.def("op_conv", [](uintptr_t x, int ldx, int T, int C, int Kc, uintptr_t w, uintptr_t state, int pos, uintptr_t out,
                      uintptr_t pos_dev) {
    conv_update_silu(ptr<float>(x), ldx, T, C, Kc, ptr<float>(w), ptr<float>(state), pos, ptr<int32_t>(pos_dev),
                     ptr<float>(out), 0);
    sync0("conv_update_silu");
  }, py::arg("x"), py::arg("ldx"), py::arg("T"), py::arg("C"), py::arg("Kc"), py::arg("w"), py::arg("state"),
     py::arg("pos"), py::arg("out"), py::arg("pos_dev") = 0);
  // one token: x the raw projection row (conv inputs first), z/b/a addressed from their own pointers
  m.def("op_gdn_conv", [](uintptr_t x, uintptr_t z, uintptr_t b, uintptr_t a, int k_heads, int v_heads,
                          float eps, int Kc, uintptr_t conv_w, uintptr_t conv_state, int pos, uintptr_t a_log,
                          uintptr_t dt_bias, uintptr_t norm_w, uintptr_t state, uintptr_t out_h, uintptr_t pos_dev,
                          int out_layout) {
    GdnDims d{k_heads, v_heads, 128, 128, eps};
    gdn_conv_step(ptr<float>(x), ptr<float>(z), ptr<float>(b), ptr<float>(a), d, Kc, ptr<float>(conv_w),
                  ptr<float>(conv_state), pos, ptr<int32_t>(pos_dev), ptr<float>(a_log), ptr<float>(dt_bias),
                  ptr<float>(norm_w), ptr<float>(state), ptr<__half>(out_h), 0, out_layout);
    sync0("gdn_conv_step");
  }, py::arg("x"), py::arg("z"), py::arg("b"), py::arg("a"), py::arg("k_heads"), py::arg("v_heads"),
     py::arg("eps"), py::arg("Kc"), py::arg("conv_w"), py::arg("conv_state"), py::arg("pos"), py::arg("a_log"),
     py::arg("dt_bias"), py::arg("norm_w"), py::arg("state"), py::arg("out_h"), py::arg("pos_dev") = 0,
     py::arg("out_layout") = 0);
  // ckpt: the state after each token t < T - 1 also into ckpt + t * ckpt_stride floats (0: off)
  m.def("op_gdn", [](uintptr_t conv_out, uintptr_t z, uintptr_t b, uintptr_t a, int ldp, int T, int k_heads,
                     int v_heads, float eps, uintptr_t a_log, uintptr_t dt_bias, uintptr_t norm_w, uintptr_t state,
                     uintptr_t out_h, uintptr_t ckpt, int64_t ckpt_stride) {
    GdnDims d{k_heads, v_heads, 128, 128, eps};
    gdn_step(ptr<float>(conv_out), ptr<float>(z), ptr<float>(b), ptr<float>(a), ldp, T, d, ptr<float>(a_log),
             ptr<float>(dt_bias), ptr<float>(norm_w), ptr<float>(state), ptr<__half>(out_h), 0, GEMV_X_PERM8,
             ptr<float>(ckpt), ckpt_stride);
    sync0("gdn_step");
  }, py::arg("conv_out"), py::arg("z"), py::arg("b"), py::arg("a"), py::arg("ldp"), py::arg("T"), py::arg("k_heads"),
     py::arg("v_heads"), py::arg("eps"), py::arg("a_log"), py::arg("dt_bias"), py::arg("norm_w"), py::arg("state"),
     py::arg("out_h"), py::arg("ckpt") = 0, py::arg("ckpt_stride") = 0);
  // the rings [C, Kc] after each token t < T - 1 of a step at pos (pos_dev as op_conv's) into ckpt + t * ckpt_stride
  m.def("op_conv_checkpoints", [](uintptr_t x, int ldx, int T, int C, int Kc, uintptr_t state, int pos, uintptr_t ckpt,
                                  int64_t ckpt_stride, uintptr_t pos_dev) {
    conv_ring_checkpoints(ptr<float>(x), ldx, T, C, Kc, ptr<float>(state), pos, ptr<int32_t>(pos_dev), ptr<float>(ckpt),
                          ckpt_stride, 0);
    sync0("conv_ring_checkpoints");
  }, py::arg("x"), py::arg("ldx"), py::arg("T"), py::arg("C"), py::arg("Kc"), py::arg("state"), py::arg("pos"),
     py::arg("ckpt"), py::arg("ckpt_stride"), py::arg("pos_dev") = 0);
  // kv_fmt: KvFormat (ops.h): 0 bf16, 1 int8 group 64, 2 int4 group 64 (ks, vs: fp16 scales; unused for bf16)
  m.def("op_attention", [](uintptr_t qkv, int ldp, int T, int n_heads, int n_kv, int rotary_dim, float eps, int kv_fmt,
                           uintptr_t q_norm, uintptr_t k_norm, uintptr_t inv_freq, std::vector<int> sec, uintptr_t inputs,
                           uintptr_t q_buf, uintptr_t kc, uintptr_t vc, uintptr_t ks, uintptr_t vs, uintptr_t partials,
                           uintptr_t out_h) {
    AttnDims d{n_heads, n_kv, 256, rotary_dim, eps, kv_fmt};
    int s3[3] = {sec.at(0), sec.at(1), sec.at(2)};
    const StepInputs* in = ptr<const StepInputs>(inputs);
    attn_prep(ptr<float>(qkv), ldp, T, d, ptr<float>(q_norm), ptr<float>(k_norm), ptr<float>(inv_freq), s3, in,
              ptr<float>(q_buf), ptr<char>(kc), ptr<char>(vc), ptr<char>(ks), ptr<char>(vs), 0);
    attn_decode(ptr<float>(q_buf), T, d, in, ptr<char>(kc), ptr<char>(vc), ptr<char>(ks), ptr<char>(vs),
                ptr<float>(partials), ptr<float>(qkv) + 256, ldp, ptr<__half>(out_h), 0);
    sync0("attention");
  });
  // inputs: a StepInputs page on the device (its lane and draw); the parameters are copied into it.
  m.def("op_sample", [](uintptr_t logits, int T, int V, py::dict params, uintptr_t counts, uintptr_t inputs,
                        uintptr_t scratch, uintptr_t out) {
    const SamplingParams p = sampling_from_dict(params, V);
    StepInputs* in = ptr<StepInputs>(inputs);
    MR_CHECK(cudaMemcpy(&in->sampling, &p, sizeof p, cudaMemcpyHostToDevice), "sample_tokens (parameters)");
    sample_tokens(ptr<float>(logits), T, V, ptr<int32_t>(counts), in, ptr<char>(scratch), ptr<int32_t>(out), 0);
    sync0("sample_tokens");
  });
  m.attr("STEP_INPUTS_INT32") = py::int_(sizeof(StepInputs) / 4);
  m.attr("MAX_ATTN_SPLITS") = py::int_(kMaxAttnSplits);
  register_gemm_bindings(m);
  register_gdn_chunk_bindings(m);
  register_attn_prefill_bindings(m);
}
