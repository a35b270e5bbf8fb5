// NativeEngine: arena from the plan, weight loading, the decode step and its CUDA graphs.
#include <cmath>
#include <cstring>

#include "attn_prefill.h"
#include "common.cuh"
#include "engine.h"
#include "gdn_chunk.h"
#include "pdl.cuh"
#include "qgemm.h"

namespace monorail {
namespace {

constexpr int64_t kInvFreqOffset = 1024;  // inside ws.inputs (4 KiB): StepInputs first, then inv_freq
static_assert(sizeof(StepInputs) <= kInvFreqOffset, "StepInputs must end before inv_freq in the inputs page");

__device__ inline uint64_t mix64(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

__global__ void fill_bytes_kernel(uint32_t* p, int64_t n_words, uint64_t seed) {
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n_words; i += (int64_t)gridDim.x * blockDim.x)
    p[i] = (uint32_t)mix64(seed ^ (uint64_t)i * 0x100000001B3ull);
}

__global__ void fill_scales_kernel(__half* p, int64_t n, uint64_t seed, float mag) {
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
    float u = (mix64(seed ^ (uint64_t)i) >> 40) * (1.f / 16777216.f);
    p[i] = __float2half(mag * (0.5f + 0.5f * u));
  }
}

__global__ void fill_f32_kernel(float* p, int64_t n, uint64_t seed, float lo, float hi) {
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
    float u = (mix64(seed ^ (uint64_t)i) >> 40) * (1.f / 16777216.f);
    p[i] = lo + (hi - lo) * u;
  }
}

__global__ void fill_bf16_kernel(__nv_bfloat16* p, int64_t n, uint64_t seed, float lo, float hi) {
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
    float u = (mix64(seed ^ (uint64_t)i) >> 40) * (1.f / 16777216.f);
    p[i] = __float2bfloat16(lo + (hi - lo) * u);
  }
}

}  // namespace

void fill_random_qmatrix(const QMatrix& W, uint64_t seed, float scale_mag, cudaStream_t st) {
  fill_bytes_kernel<<<1024, 256, 0, st>>>(reinterpret_cast<uint32_t*>(W.codes),
                                          qmatrix_code_bytes(W.rows, W.cols, W.q.bits) / 4, seed);
  if (W.high)
    fill_bytes_kernel<<<1024, 256, 0, st>>>(reinterpret_cast<uint32_t*>(W.high),
                                            qmatrix_high_bytes(W.rows, W.cols, W.q.bits) / 4, seed + 1);
  fill_scales_kernel<<<1024, 256, 0, st>>>(reinterpret_cast<__half*>(W.scales), W.rows * (W.cols / W.q.group),
                                           seed + 2, scale_mag);
  MR_CHECK_LAUNCH("fill_random_qmatrix");
}

void fill_random_f32(float* p, int64_t n, uint64_t seed, float lo, float hi, cudaStream_t st) {
  fill_f32_kernel<<<256, 256, 0, st>>>(p, n, seed, lo, hi);
  MR_CHECK_LAUNCH("fill_random_f32");
}

NativeEngine::NativeEngine(const ModelDims& dims, const EngineShape& shape, int64_t budget_bytes, float eps,
                           const RopeSpec& rope)
    : dims_(dims), shape_(shape), eps_(eps) {
  // 1. dry run: the same sequence, no memory. Refuse before touching the device when over budget.
  Arena dry;
  allocate_engine(dry, dims_, shape_);
  plan_log_ = dry.log();
  planned_total_ = dry.used();
  for (const auto& a : plan_log_)
    if (a.category != "graphs" && a.category != "margin") arena_bytes_ = std::max(arena_bytes_, a.offset + a.bytes);
  if (planned_total_ > budget_bytes)
    throw BudgetError("memory plan needs " + std::to_string(planned_total_) + " bytes but the budget is " +
                      std::to_string(budget_bytes) + " (deficit " + std::to_string(planned_total_ - budget_bytes) +
                      " bytes); nothing was allocated");
  size_t free_b = 0, total_b = 0;
  MR_CHECK(cudaMemGetInfo(&free_b, &total_b), "cudaMemGetInfo");
  if ((int64_t)free_b < planned_total_)
    throw BudgetError("memory plan needs " + std::to_string(planned_total_) + " bytes but the GPU has " +
                      std::to_string(free_b) + " free; nothing was allocated");
  // 2. one allocation, then the identical sequence over it.
  MR_CHECK(cudaMalloc(&arena_, arena_bytes_), "cudaMalloc(arena)");
  Arena real(arena_);
  buf_ = allocate_engine(real, dims_, shape_);
  MR_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking), "cudaStreamCreate");
  MR_CHECK(cudaHostAlloc(reinterpret_cast<void**>(&host_inputs_), sizeof(StepInputs), cudaHostAllocDefault),
           "cudaHostAlloc(step inputs)");
  std::memset(host_inputs_, 0, sizeof(StepInputs));
  MR_CHECK(cudaEventCreateWithFlags(&inputs_copied_, cudaEventDisableTiming), "cudaEventCreate(step inputs)");
  MR_CHECK(cudaHostAlloc(reinterpret_cast<void**>(&ring_host_), kLoopRing * 4, cudaHostAllocMapped),
           "cudaHostAlloc(decode loop tokens)");
  MR_CHECK(cudaHostGetDevicePointer(reinterpret_cast<void**>(&ring_dev_), ring_host_, 0),
           "cudaHostGetDevicePointer(decode loop tokens)");
  for (auto& e : ring_events_)
    MR_CHECK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming), "cudaEventCreate(decode loop)");
  MR_CHECK(cudaMemsetAsync(arena_, 0, arena_bytes_, stream_), "cudaMemset(arena)");
  // rope inverse frequencies live in the inputs page of the workspace
  int half = (int)dims_.rotary_dim / 2;
  std::vector<float> inv = rope.inv_freq;
  if (inv.empty())
    for (int i = 0; i < half; ++i) inv.push_back((float)(1.0 / std::pow((double)rope.theta, 2.0 * i / dims_.rotary_dim)));
  if ((int)inv.size() != half) throw std::invalid_argument("inv_freq must have rotary_dim / 2 entries");
  inv_freq_dev_ = reinterpret_cast<float*>(buf_.ws.inputs + kInvFreqOffset);
  MR_CHECK(cudaMemcpyAsync(inv_freq_dev_, inv.data(), half * 4, cudaMemcpyHostToDevice, stream_), "upload inv_freq");
  for (int i = 0; i < 3; ++i) mrope_section_[i] = rope.mrope_section[i];
  synchronize();
}

NativeEngine::~NativeEngine() {
  for (auto& g : graphs_) cudaGraphExecDestroy(g.second);
  qgemm_release();
  if (stream_) cudaStreamDestroy(stream_);
  if (inputs_copied_) cudaEventDestroy(inputs_copied_);
  if (host_inputs_) cudaFreeHost(host_inputs_);
  for (auto& e : ring_events_)
    if (e) cudaEventDestroy(e);
  if (ring_host_) cudaFreeHost(ring_host_);
  if (arena_) cudaFree(arena_);
}

void NativeEngine::synchronize() { MR_CHECK(cudaStreamSynchronize(stream_), "decode step (synchronize)"); }

LayerBuffers& NativeEngine::layer_at(int layer) {
  if (layer == (int)buf_.layers.size() && buf_.mtp.on) return buf_.mtp.layer;  // the MTP head's layer: index n_layers
  if (layer < 0 || layer >= (int)buf_.layers.size()) throw std::out_of_range("layer index out of range");
  return buf_.layers[layer];
}

LayerBuffers& NativeEngine::layer_of(int role, int layer) {
  LayerBuffers& L = layer_at(layer);
  const bool attention_role = role == ATTN_QKV || role == ATTN_O;
  const bool gdn_role = role == GDN_IN || role == GDN_OUT;
  if ((attention_role && !L.full) || (gdn_role && L.full))
    throw std::invalid_argument("role does not match the layer type");
  return L;
}

QMatrix& NativeEngine::segment_of(int role, int layer, int64_t& row) {
  if (role == EMBED) return buf_.embed;
  if (role == LM_HEAD) return buf_.lm_head;
  if (role == kMtpFcRole) {
    if (!buf_.mtp.on) throw std::invalid_argument("load_matrix: this engine was planned without the MTP head");
    return buf_.mtp.fc;
  }
  LayerBuffers& L = layer_of(role, layer);
  switch (role) {
    case GDN_IN: case ATTN_QKV:
      if (!L.mixer_in.split() || row < L.mixer_in.head.rows) return L.mixer_in.head;
      row -= L.mixer_in.head.rows;
      return L.mixer_in.tail;
    case GDN_OUT: case ATTN_O: return L.mixer_out;
    case MLP_GATE_UP: return L.gate_up;
    case MLP_DOWN: return L.down;
  }
  throw std::invalid_argument("unknown role");
}

// A host array must hold exactly `rows` rows of the destination's format: an upload in another
// format than the plan's (a recipe mismatch on the Python side) would read past it or misplace codes.
static void check_upload(const QMatrix& M, int role, int64_t rows, int64_t codes_bytes, int64_t high_bytes,
                         int64_t scales_bytes) {
  if (codes_bytes == qmatrix_code_bytes(rows, M.cols, M.q.bits) &&
      high_bytes == qmatrix_high_bytes(rows, M.cols, M.q.bits) &&
      scales_bytes == qmatrix_scale_bytes(rows, M.cols, M.q.group))
    return;
  throw std::invalid_argument(std::string("load_matrix: these rows of role ") + role_name(role) + " are held as q" +
                              std::to_string(M.q.bits) + "g" + std::to_string(M.q.group) + " (" +
                              std::to_string(qmatrix_code_bytes(rows, M.cols, M.q.bits)) + " code, " +
                              std::to_string(qmatrix_high_bytes(rows, M.cols, M.q.bits)) + " high-bit, " +
                              std::to_string(qmatrix_scale_bytes(rows, M.cols, M.q.group)) +
                              " scale bytes for " + std::to_string(rows) + " rows); the upload has " +
                              std::to_string(codes_bytes) + ", " + std::to_string(high_bytes) + " and " +
                              std::to_string(scales_bytes));
}

void NativeEngine::load_matrix(int role, int layer, int64_t row_offset, int64_t row_stride, int64_t rows,
                               const void* codes, int64_t codes_bytes, const void* high, int64_t high_bytes,
                               const void* scales, int64_t scales_bytes) {
  int64_t first = row_offset;
  QMatrix& M = segment_of(role, layer, first);
  if (rows < 1 || first < 0 || row_stride < 1 || first + (rows - 1) * row_stride >= M.rows)
    throw std::out_of_range(std::string("load_matrix: rows do not fit one matrix of role ") + role_name(role));
  check_upload(M, role, rows, codes_bytes, high_bytes, scales_bytes);
  auto put = [&](char* dst, const void* src, int64_t row_bytes, const char* what) {
    if (!row_bytes) return;
    if (!src) throw std::invalid_argument(std::string("load_matrix: missing ") + what);
    MR_CHECK(cudaMemcpy2DAsync(dst + first * row_bytes, row_stride * row_bytes, src, row_bytes, row_bytes, rows,
                               cudaMemcpyHostToDevice, stream_), "load_matrix (upload)");
  };
  put(M.codes, codes, qmatrix_code_bytes(1, M.cols, M.q.bits), "codes");
  put(M.high, high, qmatrix_high_bytes(1, M.cols, M.q.bits), "high bits");
  put(M.scales, scales, qmatrix_scale_bytes(1, M.cols, M.q.group), "scales");
  synchronize();
}

void NativeEngine::load_vector(const std::string& kind, int layer, const float* data, int64_t n) {
  float* dst = nullptr;
  int64_t want = 0;
  const MtpBuffers& M = buf_.mtp;
  if (kind == "final_norm") { dst = buf_.final_norm; want = dims_.hidden; }
  else if (kind.rfind("mtp_", 0) == 0) {
    if (!M.on) throw std::invalid_argument("load_vector: this engine was planned without the MTP head");
    want = dims_.hidden;
    if (kind == "mtp_norm_embedding") dst = M.norm_embedding;
    else if (kind == "mtp_norm_hidden") dst = M.norm_hidden;
    else if (kind == "mtp_norm") dst = M.norm;
    else throw std::invalid_argument("load_vector: unknown kind " + kind);
  } else {
    LayerBuffers& L = layer_at(layer);
    if (kind == "input_norm") { dst = L.input_norm; want = dims_.hidden; }
    else if (kind == "post_norm") { dst = L.post_norm; want = dims_.hidden; }
    else if (kind == "conv_w") { dst = L.conv_w; want = dims_.conv_dim() * dims_.conv_kernel; }
    else if (kind == "a_log") { dst = L.a_log; want = dims_.lin_v_heads; }
    else if (kind == "dt_bias") { dst = L.dt_bias; want = dims_.lin_v_heads; }
    else if (kind == "gdn_norm") { dst = L.gdn_norm; want = dims_.lin_v_dim; }
    else if (kind == "q_norm") { dst = L.q_norm; want = dims_.head_dim; }
    else if (kind == "k_norm") { dst = L.k_norm; want = dims_.head_dim; }
    else throw std::invalid_argument("load_vector: unknown kind " + kind);
  }
  if (!dst) throw std::invalid_argument("load_vector: " + kind + " does not exist in layer " + std::to_string(layer));
  if (n != want) throw std::invalid_argument("load_vector: " + kind + " needs " + std::to_string(want) + " values");
  MR_CHECK(cudaMemcpyAsync(dst, data, n * 4, cudaMemcpyHostToDevice, stream_), "load_vector (upload)");
  synchronize();
}

void NativeEngine::randomize(uint64_t seed) {
  auto mat = [&](const QMatrix& M, uint64_t s) {
    // scale so that one projection keeps activations O(1): value std ~ 4.6 * scale for 4-bit codes
    float mag = 0.5f / (4.6f * std::sqrt((float)M.cols)) * (float)(1 << (4 - std::min(M.q.bits, 4)));
    if (M.q.bits > 4) mag /= (float)(1 << (M.q.bits - 4));
    fill_random_qmatrix(M, s, mag, stream_);
  };
  uint64_t s = seed * 1000003ull;
  mat(buf_.embed, s++ * 7919);
  mat(buf_.lm_head, s++ * 7919);
  fill_random_f32(buf_.final_norm, dims_.hidden, s++, -0.1f, 0.1f, stream_);
  for (auto& L : buf_.layers) {
    mat(L.mixer_in.head, s++ * 7919);
    // a seed outside the sequence, so an unsplit engine's weights stay what they always were
    if (L.mixer_in.split()) mat(L.mixer_in.tail, ~(s * 7919));
    mat(L.mixer_out, s++ * 7919);
    mat(L.gate_up, s++ * 7919);
    mat(L.down, s++ * 7919);
    fill_random_f32(L.input_norm, dims_.hidden, s++, -0.1f, 0.1f, stream_);
    fill_random_f32(L.post_norm, dims_.hidden, s++, -0.1f, 0.1f, stream_);
    if (L.full) {
      fill_random_f32(L.q_norm, dims_.head_dim, s++, -0.1f, 0.1f, stream_);
      fill_random_f32(L.k_norm, dims_.head_dim, s++, -0.1f, 0.1f, stream_);
    } else {
      fill_random_f32(L.conv_w, dims_.conv_dim() * dims_.conv_kernel, s++, -0.5f, 0.5f, stream_);
      fill_random_f32(L.a_log, dims_.lin_v_heads, s++, -1.f, 1.f, stream_);
      fill_random_f32(L.dt_bias, dims_.lin_v_heads, s++, -0.5f, 0.5f, stream_);
      fill_random_f32(L.gdn_norm, dims_.lin_v_dim, s++, 0.5f, 1.5f, stream_);
    }
  }
  std::vector<LayerBuffers*> attention_layers;
  for (auto& L : buf_.layers)
    if (L.full) attention_layers.push_back(&L);
  if (buf_.mtp.on) {  // seeds past the trunk's (which stay what they were without the head)
    MtpBuffers& M = buf_.mtp;
    uint64_t m = ~(seed * 1000003ull) * 31;
    mat(M.fc, m++ * 7919);
    fill_random_f32(M.norm_embedding, dims_.hidden, m++, -0.1f, 0.1f, stream_);
    fill_random_f32(M.norm_hidden, dims_.hidden, m++, -0.1f, 0.1f, stream_);
    fill_random_f32(M.norm, dims_.hidden, m++, -0.1f, 0.1f, stream_);
    LayerBuffers& L = M.layer;
    mat(L.mixer_in.head, m++ * 7919);
    if (L.mixer_in.split()) mat(L.mixer_in.tail, m++ * 7919);
    mat(L.mixer_out, m++ * 7919);
    mat(L.gate_up, m++ * 7919);
    mat(L.down, m++ * 7919);
    fill_random_f32(L.input_norm, dims_.hidden, m++, -0.1f, 0.1f, stream_);
    fill_random_f32(L.post_norm, dims_.hidden, m++, -0.1f, 0.1f, stream_);
    fill_random_f32(L.q_norm, dims_.head_dim, m++, -0.1f, 0.1f, stream_);
    fill_random_f32(L.k_norm, dims_.head_dim, m++, -0.1f, 0.1f, stream_);
    attention_layers.push_back(&L);  // its KV after the trunk's, from the same seed sequence
  }
  // the KV pool too, so attention at depth is timed on real-looking data, never on zeros
  const int64_t kv_elems = shape_.kv_capacity * dims_.n_kv_heads * dims_.head_dim;
  for (LayerBuffers* Lp : attention_layers) {
    LayerBuffers& L = *Lp;
    if (shape_.kv == KvDtype::BF16) {
      fill_bf16_kernel<<<1024, 256, 0, stream_>>>(reinterpret_cast<__nv_bfloat16*>(L.k_cache), kv_elems, s++, -2.f, 2.f);
      fill_bf16_kernel<<<1024, 256, 0, stream_>>>(reinterpret_cast<__nv_bfloat16*>(L.v_cache), kv_elems, s++, -2.f, 2.f);
    } else {
      // random codes (any byte is one valid int8 code or two valid int4 codes)
      const int64_t words = kv_code_bytes(shape_.kv, kv_elems) / 4;
      fill_bytes_kernel<<<1024, 256, 0, stream_>>>(reinterpret_cast<uint32_t*>(L.k_cache), words, s++);
      fill_bytes_kernel<<<1024, 256, 0, stream_>>>(reinterpret_cast<uint32_t*>(L.v_cache), words, s++);
      fill_scales_kernel<<<1024, 256, 0, stream_>>>(reinterpret_cast<__half*>(L.k_scales), kv_elems / 64, s++, 0.02f);
      fill_scales_kernel<<<1024, 256, 0, stream_>>>(reinterpret_cast<__half*>(L.v_scales), kv_elems / 64, s++, 0.02f);
    }
    MR_CHECK_LAUNCH("randomize (KV pool)");
  }
  synchronize();
}

void NativeEngine::reset_lane(int lane) {
  if (lane < 0 || lane >= shape_.max_lanes) throw std::out_of_range("lane out of range");
  refuse_while_looping("reset_lane");
  forget_checkpoints();
  const LaneStateRegions r = lane_state_regions(lane);
  MR_CHECK(cudaMemsetAsync(r.gdn, 0, r.gdn_floats * 4, stream_), "reset_lane");
  MR_CHECK(cudaMemsetAsync(r.conv, 0, r.conv_floats * 4, stream_), "reset_lane");
  MR_CHECK(cudaMemsetAsync(buf_.token_counts + lane * dims_.vocab, 0, dims_.vocab * 4, stream_), "reset_lane");
  synchronize();
}

NativeEngine::LaneStateRegions NativeEngine::lane_state_regions(int lane) const {
  const int64_t nl = dims_.n_linear();
  const int64_t gs = nl * dims_.lin_v_heads * dims_.lin_k_dim * dims_.lin_v_dim;
  const int64_t cs = nl * dims_.conv_dim() * dims_.conv_kernel;  // a ring of conv_kernel slots per channel (gdn.cu)
  return {buf_.gdn_state + lane * gs, gs, buf_.conv_state + lane * cs, cs};
}

NativeEngine::LaneStateRegions NativeEngine::checkpoint_regions(int t) const {
  const LaneStateRegions lane0 = lane_state_regions(0);
  float* image = buf_.spec_ckpt + t * (lane0.gdn_floats + lane0.conv_floats);
  return {image, lane0.gdn_floats, image + lane0.gdn_floats, lane0.conv_floats};
}

int64_t NativeEngine::lane_state_floats() const {
  const LaneStateRegions r = lane_state_regions(0);
  return r.gdn_floats + r.conv_floats;
}

// The checks both copies make; the regions of a valid lane.
NativeEngine::LaneStateRegions NativeEngine::lane_state_for_copy(int lane, int64_t n, const char* op) const {
  if (lane < 0 || lane >= shape_.max_lanes) throw std::out_of_range("lane out of range");
  if (n != lane_state_floats()) throw std::invalid_argument(std::string(op) + ": the buffer must hold lane_state_floats()");
  refuse_while_looping(op);
  return lane_state_regions(lane);
}

void NativeEngine::save_lane_state(int lane, float* host, int64_t n) {
  const LaneStateRegions r = lane_state_for_copy(lane, n, "save_lane_state");
  MR_CHECK(cudaMemcpyAsync(host, r.gdn, r.gdn_floats * 4, cudaMemcpyDeviceToHost, stream_), "save_lane_state");
  MR_CHECK(cudaMemcpyAsync(host + r.gdn_floats, r.conv, r.conv_floats * 4, cudaMemcpyDeviceToHost, stream_),
           "save_lane_state");
  synchronize();
}

void NativeEngine::load_lane_state(int lane, const float* host, int64_t n) {
  const LaneStateRegions r = lane_state_for_copy(lane, n, "load_lane_state");
  forget_checkpoints();
  MR_CHECK(cudaMemcpyAsync(r.gdn, host, r.gdn_floats * 4, cudaMemcpyHostToDevice, stream_), "load_lane_state");
  MR_CHECK(cudaMemcpyAsync(r.conv, host + r.gdn_floats, r.conv_floats * 4, cudaMemcpyHostToDevice, stream_),
           "load_lane_state");
  synchronize();
}

int64_t NativeEngine::lane_kv_bytes(int n_tokens) const {
  const int64_t elems = (int64_t)n_tokens * dims_.n_kv_heads * dims_.head_dim;
  int64_t per_layer = 2 * (kv_code_bytes(shape_.kv, elems) + kv_scale_bytes(shape_.kv, elems));
  int64_t layers = buf_.mtp.on ? 1 : 0;  // the MTP head's attention layer: its cache goes with the trunk's
  for (const auto& L : buf_.layers) layers += L.full ? 1 : 0;
  return layers * per_layer;
}

// A lane's slots are consecutive within each layer (lane_layer), so its first n_tokens are one run per array.
std::vector<NativeEngine::KvRegion> NativeEngine::lane_kv_regions(int lane, int n_tokens, int64_t nbytes,
                                                                  const char* op) const {
  if (lane < 0 || lane >= shape_.max_lanes) throw std::out_of_range("lane out of range");
  if (n_tokens < 0 || n_tokens > shape_.max_context)
    throw std::out_of_range(std::string(op) + ": n_tokens outside the lane's planned context");
  if (nbytes != lane_kv_bytes(n_tokens)) throw std::invalid_argument(std::string(op) + ": the buffer must hold lane_kv_bytes(n_tokens)");
  refuse_while_looping(op);
  const int64_t elems = (int64_t)n_tokens * dims_.n_kv_heads * dims_.head_dim;
  const int64_t codes = kv_code_bytes(shape_.kv, elems), scales = kv_scale_bytes(shape_.kv, elems);
  std::vector<KvRegion> out;
  auto add = [&](const LayerBuffers& L) {
    const LaneLayer S = lane_layer(L, lane);
    out.push_back({S.k_cache, codes});
    out.push_back({S.v_cache, codes});
    if (scales > 0) {
      out.push_back({S.k_scales, scales});
      out.push_back({S.v_scales, scales});
    }
  };
  for (const auto& L : buf_.layers)
    if (L.full) add(L);
  // the MTP head's cache last: a sequence resumed from a detached snapshot drafts with its whole history
  if (buf_.mtp.on) add(buf_.mtp.layer);
  return out;
}

void NativeEngine::save_lane_kv(int lane, int n_tokens, uint8_t* host, int64_t nbytes) {
  for (const KvRegion& r : lane_kv_regions(lane, n_tokens, nbytes, "save_lane_kv")) {
    MR_CHECK(cudaMemcpyAsync(host, r.device, r.bytes, cudaMemcpyDeviceToHost, stream_), "save_lane_kv");
    host += r.bytes;
  }
  synchronize();
}

void NativeEngine::load_lane_kv(int lane, int n_tokens, const uint8_t* host, int64_t nbytes) {
  for (const KvRegion& r : lane_kv_regions(lane, n_tokens, nbytes, "load_lane_kv")) {
    MR_CHECK(cudaMemcpyAsync(r.device, host, r.bytes, cudaMemcpyHostToDevice, stream_), "load_lane_kv");
    host += r.bytes;
  }
  synchronize();
}

void NativeEngine::count_tokens(int lane, const std::vector<int32_t>& ids, bool in_prompt, bool remove) {
  if (lane < 0 || lane >= shape_.max_lanes) throw std::out_of_range("lane out of range");
  refuse_while_looping("count_tokens");
  if (in_prompt && remove) throw std::invalid_argument("count_tokens: prompt marks are not removed");
  for (int32_t id : ids)
    if (id < 0 || id >= dims_.vocab) throw std::out_of_range("token id out of range");
  int32_t* counts = buf_.token_counts + lane * dims_.vocab;
  if (buf_.pre.chunk > 0) {  // staged through the prefill token buffer, a chunk at a time (stream order, as prefill)
    for (size_t i = 0; i < ids.size(); i += buf_.pre.chunk) {
      const int n = (int)std::min<size_t>(buf_.pre.chunk, ids.size() - i);
      MR_CHECK(cudaMemcpyAsync(buf_.pre.tokens, ids.data() + i, n * 4, cudaMemcpyHostToDevice, stream_), "count_tokens");
      monorail::count_tokens(counts, buf_.pre.tokens, n, in_prompt, stream_, remove);
    }
    synchronize();
    return;
  }
  // no prefill workspace: staged through the step-inputs page, 16 ids at a time (no allocation per call)
  for (size_t i = 0; i < ids.size(); i += kMaxStepTokens) {
    int n = (int)std::min<size_t>(kMaxStepTokens, ids.size() - i);
    StepInputs* in = inputs_for_write();
    for (int j = 0; j < n; ++j) in->tokens[j] = ids[i + j];
    upload_inputs(stream_);
    monorail::count_tokens(counts, reinterpret_cast<StepInputs*>(buf_.ws.inputs)->tokens, n, in_prompt, stream_,
                           remove);
    synchronize();
  }
}

void NativeEngine::upload_inputs(cudaStream_t st) {
  MR_CHECK(cudaMemcpyAsync(buf_.ws.inputs, host_inputs_, sizeof(StepInputs), cudaMemcpyHostToDevice, st),
           "upload step inputs");
  MR_CHECK(cudaEventRecord(inputs_copied_, st), "upload step inputs (event)");
}

StepInputs* NativeEngine::inputs_for_write() {
  MR_CHECK(cudaEventSynchronize(inputs_copied_), "step inputs (previous upload)");
  return host_inputs_;
}

GdnDims NativeEngine::gdn_dims() const {
  const ModelDims& d = dims_;
  return GdnDims{(int)d.lin_k_heads, (int)d.lin_v_heads, (int)d.lin_k_dim, (int)d.lin_v_dim, eps_};
}

AttnDims NativeEngine::attn_dims() const {
  const ModelDims& d = dims_;
  const int fmt = shape_.kv == KvDtype::INT4G64 ? kKvInt4 : shape_.kv == KvDtype::INT8G64 ? kKvInt8 : kKvBf16;
  return AttnDims{(int)d.n_heads, (int)d.n_kv_heads, (int)d.head_dim, (int)d.rotary_dim, eps_, fmt};
}

NativeEngine::LaneLayer NativeEngine::lane_layer(const LayerBuffers& L, int lane) const {
  const ModelDims& d = dims_;
  LaneLayer S;
  if (!L.full) {
    const int64_t gstate_layer = d.lin_v_heads * d.lin_k_dim * d.lin_v_dim;
    const int64_t cstate_layer = d.conv_dim() * d.conv_kernel;
    S.gdn_state = buf_.gdn_state + (lane * d.n_linear() + L.gdn_index) * gstate_layer;
    S.conv_state = buf_.conv_state + (lane * d.n_linear() + L.gdn_index) * cstate_layer;
    return S;
  }
  // each lane owns max_context consecutive cache slots
  const int64_t row_elems = (int64_t)lane * shape_.max_context * d.n_kv_heads * d.head_dim;
  const int64_t off = kv_code_bytes(shape_.kv, row_elems);
  S.k_cache = L.k_cache + off;
  S.v_cache = L.v_cache + off;
  if (shape_.kv != KvDtype::BF16) {
    S.k_scales = L.k_scales + kv_scale_bytes(shape_.kv, row_elems);
    S.v_scales = L.v_scales + kv_scale_bytes(shape_.kv, row_elems);
  }
  return S;
}

void NativeEngine::enqueue_step(int lane, int T, bool keep_hidden, bool keep_states) {
  const PdlScope pdl_scope;  // the step's kernels may overlap their predecessor's tail (pdl.cuh)
  const ModelDims& d = dims_;
  StepWorkspace& w = buf_.ws;
  const GemvScratchScope gemv_scratch(w.gemv_part, w.gemv_part_floats);  // split K of the T > 1 GEMVs
  cudaStream_t st = stream_;
  const StepInputs* in = reinterpret_cast<const StepInputs*>(w.inputs);
  auto* xin = reinterpret_cast<__half*>(w.xin);
  auto* mix = reinterpret_cast<__half*>(w.mix);
  const int H = (int)d.hidden;
  const GdnDims gd = gdn_dims();
  // keep_states: checkpoint image 0's regions; a layer's part of an image sits at its gdn_index, as in a lane's
  const LaneStateRegions ckpt = keep_states ? checkpoint_regions(0) : LaneStateRegions{};
  const int64_t ckpt_stride = ckpt.gdn_floats + ckpt.conv_floats;
  const int64_t gdn_layer_floats = d.lin_v_heads * d.lin_k_dim * d.lin_v_dim;
  const int64_t conv_layer_floats = d.conv_dim() * d.conv_kernel;

  embed_gather(buf_.embed, in->tokens, T, w.resid, st);
  mark("embed");
  for (auto& L : buf_.layers) {
    if (!L.full) {
      const int ldp = (int)d.gdn_in_rows();
      const int C = (int)d.conv_dim();
      normed_store(L.mixer_in, L.input_norm, T, w.proj, ldp);
      mark("gemv gdn_in");
      const LaneLayer S = lane_layer(L, lane);
      const float* z = w.proj + C;
      const float* b = z + d.lin_v_total();
      const float* a = b + d.lin_v_heads;
      const int Kc = (int)d.conv_kernel;
      const int mix_layout = qgemv_x_layout(L.mixer_out, T);  // the order gdn_out's GEMV reads fastest
      if (T == 1 && !(skip_ & 6)) {  // one token: the conv inside the GDN step's kernel (one kernel fewer)
        gdn_conv_step(w.proj, z, b, a, gd, Kc, L.conv_w, S.conv_state, 0, &in->kv_start, L.a_log, L.dt_bias,
                      L.gdn_norm, S.gdn_state, mix, st, mix_layout);
        mark("gdn_conv_step");
      } else {  // T > 1, or leave-one-out timings (skip_ bit 2: the conv alone left out, 4: the recurrence)
        if (keep_states && !(skip_ & 2)) {  // the rings after each token, before the conv rewrites the ring
          conv_ring_checkpoints(w.proj, ldp, T, C, Kc, S.conv_state, 0, &in->kv_start,
                                ckpt.conv + L.gdn_index * conv_layer_floats, ckpt_stride, st);
          mark("conv checkpoints");
        }
        if (!(skip_ & 2)) conv_update_silu(w.proj, ldp, T, C, Kc, L.conv_w, S.conv_state, 0, &in->kv_start, w.conv_out, st);
        mark("conv_update_silu");
        float* gdn_ckpt = keep_states ? ckpt.gdn + L.gdn_index * gdn_layer_floats : nullptr;
        if (!(skip_ & 4))
          gdn_step(w.conv_out, z, b, a, ldp, T, gd, L.a_log, L.dt_bias, L.gdn_norm, S.gdn_state, mix, st, mix_layout,
                   gdn_ckpt, ckpt_stride);
        mark("gdn_step");
      }
      if (!(skip_ & 32)) qgemv(L.mixer_out, mix, T, GEMV_ADD, w.resid, nullptr, H, st, mix_layout);
      mark("gemv gdn_out");
    } else {
      enqueue_attention_mixer(L, lane, T);
    }
    enqueue_mlp(L, T);
  }
  qgemv_normed(buf_.lm_head, w.resid, buf_.final_norm, eps_, true, T, GEMV_STORE, w.logits, nullptr, (int)d.vocab, xin,
               st);
  mark("gemv lm_head");
  if (keep_hidden && buf_.mtp.on)  // the MTP head's input: these residual rows, until the lane's next step
    MR_CHECK(cudaMemcpyAsync(mtp_hidden_rows(lane), w.resid, (size_t)T * H * 4, cudaMemcpyDeviceToDevice, st),
             "decode step (MTP hidden rows)");
}

// A full-attention layer's mixer in a decode/verify step (a trunk layer or the MTP head's): the normed q|k|v
// projection, q/k norm + mRoPE + the KV write, attention over the lane's cache, the output GEMV into the residual.
void NativeEngine::enqueue_attention_mixer(const LayerBuffers& L, int lane, int T) {
  const ModelDims& d = dims_;
  StepWorkspace& w = buf_.ws;
  cudaStream_t st = stream_;
  const StepInputs* in = reinterpret_cast<const StepInputs*>(w.inputs);
  auto* mix = reinterpret_cast<__half*>(w.mix);
  const AttnDims ad = attn_dims();
  const int ldp = (int)d.attn_qkv_rows();
  normed_store(L.mixer_in, L.input_norm, T, w.proj, ldp);
  mark("gemv attn_qkv");
  const LaneLayer S = lane_layer(L, lane);
  char *kc = S.k_cache, *vc = S.v_cache, *ks = S.k_scales, *vs = S.v_scales;
  if (!(skip_ & 8)) attn_prep(w.proj, ldp, T, ad, L.q_norm, L.k_norm, inv_freq_dev_, mrope_section_, in, w.q, kc, vc, ks, vs, st);
  mark("attn_prep");
  const int mix_layout = qgemv_x_layout(L.mixer_out, T);  // the order the output GEMV reads fastest
  if (!(skip_ & 8))
    attn_decode(w.q, T, ad, in, kc, vc, ks, vs, w.attn_part, w.proj + d.head_dim, ldp, mix, st, mix_layout);
  mark("attn_decode");
  if (!(skip_ & 32)) qgemv(L.mixer_out, mix, T, GEMV_ADD, w.resid, nullptr, (int)d.hidden, st, mix_layout);
  mark("gemv attn_o");
}

// A layer's MLP in a decode/verify step: post-norm, gate|up GEMV with the SwiGLU epilogue, down GEMV into the residual.
void NativeEngine::enqueue_mlp(const LayerBuffers& L, int T) {
  StepWorkspace& w = buf_.ws;
  cudaStream_t st = stream_;
  auto* xin = reinterpret_cast<__half*>(w.xin);
  auto* act = reinterpret_cast<__half*>(w.act);
  const int H = (int)dims_.hidden, I = (int)dims_.intermediate;
  // the SwiGLU output in the order down's GEMV reads fastest (ops.h GemvXLayout)
  const int act_layout = qgemv_x_layout(L.down, T);
  if (!(skip_ & 16) && !(skip_ & 1)) {  // qgemv_normed fuses the norm where it can, else runs it first
    qgemv_normed(L.gate_up, w.resid, L.post_norm, eps_, true, T, GEMV_SWIGLU, nullptr, act, I, xin, st, act_layout);
  } else {  // leave-one-out timings (skip_): the norm or the GEMV alone
    if (!(skip_ & 1)) rmsnorm_to_gemv_input(w.resid, T, H, L.post_norm, eps_, true, xin, st);
    mark("rmsnorm");
    if (!(skip_ & 16)) qgemv(L.gate_up, xin, T, GEMV_SWIGLU, nullptr, act, I, st, GEMV_X_PERM8, act_layout);
  }
  mark("gemv gate_up");
  if (!(skip_ & 16)) qgemv(L.down, act, T, GEMV_ADD, w.resid, nullptr, H, st, act_layout);
  mark("gemv down");
}

float* NativeEngine::mtp_hidden_rows(int lane) const {
  return buf_.mtp.hidden + (int64_t)lane * shape_.max_step_tokens * dims_.hidden;
}

// The MTP head over T pairs (hidden row, next token) of `lane` at its cache slots kv_start .. kv_start + T - 1 (step
// inputs: the tokens, positions and kv_start). The hidden rows are rows hidden_row .. of the lane's last trunk step,
// or (chained, T = 1) the head's own last output. Leaves logits rows 0 .. T - 1, and its last output row in chain.
void NativeEngine::enqueue_mtp(int lane, int T, int hidden_row, bool chained) {
  const PdlScope pdl_scope;
  const ModelDims& d = dims_;
  const MtpBuffers& M = buf_.mtp;
  StepWorkspace& w = buf_.ws;
  const GemvScratchScope gemv_scratch(w.gemv_part, w.gemv_part_floats);
  cudaStream_t st = stream_;
  const StepInputs* in = reinterpret_cast<const StepInputs*>(w.inputs);
  const int H = (int)d.hidden;
  auto* fc_in = reinterpret_cast<__half*>(w.act);  // [T, 2H] fp16 (intermediate >= 2 hidden: allocate_engine)
  // the next tokens' embeddings go to the projection buffer, free until the layer's q|k|v projection
  embed_gather(buf_.embed, in->tokens, T, w.proj, st);
  const float* h = chained ? M.chain : mtp_hidden_rows(lane) + (int64_t)hidden_row * H;
  mtp_fc_input(w.proj, h, T, H, M.norm_embedding, chained ? M.norm : buf_.final_norm, M.norm_hidden, eps_, fc_in, st);
  mark("mtp fc input");
  qgemv(M.fc, fc_in, T, GEMV_STORE, w.resid, nullptr, H, st);
  mark("gemv mtp fc");
  enqueue_attention_mixer(M.layer, lane, T);
  enqueue_mlp(M.layer, T);
  qgemv_normed(buf_.lm_head, w.resid, M.norm, eps_, true, T, GEMV_STORE, w.logits, nullptr, (int)d.vocab,
               reinterpret_cast<__half*>(w.xin), st);
  mark("gemv lm_head (mtp)");
  MR_CHECK(cudaMemcpyAsync(M.chain, w.resid + (int64_t)(T - 1) * H, (size_t)H * 4, cudaMemcpyDeviceToDevice, st),
           "MTP step (chain row)");
}

// A layer's input projection on its normalised input: qgemv_normed (the norm fused into the GEMV where the GEMV can
// take it, else the norm kernel first); a projection in two segments runs the norm once, then both GEMVs. skip_ bit 1
// leaves the norm out (the GEMV reads xin as it is), bit 32 the mixer GEMVs (leave-one-out timings).
void NativeEngine::normed_store(const SplitQMatrix& W, const float* norm_w, int T, float* out, int ldo) {
  StepWorkspace& w = buf_.ws;
  auto* xin = reinterpret_cast<__half*>(w.xin);
  // Two segments: qgemv_normed_split, one kernel for both where the route allows (set_qgemv_split_fused), else the
  // head on the normalised input leaving it in xin (keep_x: the head's fused kernel writes it, or the norm kernel runs
  // first), then the tail on xin. (Session 15 call 4 measured each GEMV fusing the norm instead, the tail on the
  // column split: 5.612 ms a q4-27b step against 5.481; step-tails-normed-q4-27b-h200-s15-call4.txt.)
  if (!(skip_ & 1) && !(skip_ & 32)) {
    if (W.split()) qgemv_normed_split(W.head, W.tail, w.resid, norm_w, eps_, true, T, out, ldo, xin, stream_);
    else qgemv_normed(W.head, w.resid, norm_w, eps_, true, T, GEMV_STORE, out, nullptr, ldo, xin, stream_);
    return;
  }
  if (!(skip_ & 1)) rmsnorm_to_gemv_input(w.resid, T, (int)dims_.hidden, norm_w, eps_, true, xin, stream_);
  mark("rmsnorm");
  if (!(skip_ & 32)) matmul_store(W, xin, T, out, ldo);
}

void NativeEngine::matmul(const QMatrix& W, const __half* x, int T, int epilogue, float* out_f32, __half* out_h,
                          int ldo, float* gemm_scratch, int64_t gemm_scratch_bytes) {
  if (T <= kMaxStepTokens) {
    qgemv(W, x, T, epilogue, out_f32, out_h, ldo, stream_);
    return;
  }
  const PrefillWorkspace& P = buf_.pre;
  GemmWorkspace g;
  g.dequant = reinterpret_cast<__half*>(P.gemm_dequant);
  g.dequant_bytes = P.gemm_dequant_bytes;
  g.cublas = P.cublas;
  g.cublas_bytes = P.cublas_bytes;
  g.scratch = gemm_scratch;
  g.scratch_bytes = gemm_scratch_bytes;
  qgemm(W, x, T, epilogue, out_f32, out_h, ldo, g, stream_);
}

void NativeEngine::matmul_store(const SplitQMatrix& W, const __half* x, int T, float* out, int ldo) {
  matmul(W.head, x, T, GEMV_STORE, out, nullptr, ldo, nullptr, 0);
  if (W.split()) matmul(W.tail, x, T, GEMV_STORE, out + W.head.rows, nullptr, ldo, nullptr, 0);
}

// One prefill chunk of T tokens (tokens and positions already in the prefill workspace) whose first
// token goes to cache slot kv_start. The same layer sequence as enqueue_step, with the prefill ops.
void NativeEngine::enqueue_prefill_chunk(int lane, int T, int kv_start) {
  const ModelDims& d = dims_;
  const PrefillWorkspace& P = buf_.pre;
  const StepWorkspace& w = P.step;
  cudaStream_t st = stream_;
  auto* xin = reinterpret_cast<__half*>(w.xin);
  auto* mix = reinterpret_cast<__half*>(w.mix);
  const int H = (int)d.hidden;
  const GdnDims gd = gdn_dims();

  embed_gather(buf_.embed, P.tokens, T, w.resid, st);
  for (auto& L : buf_.layers) {
    rmsnorm_to_gemv_input(w.resid, T, H, L.input_norm, eps_, true, xin, st);
    if (!L.full) {
      const int ldp = (int)d.gdn_in_rows();
      const int C = (int)d.conv_dim();
      if (!(skip_ & 32)) matmul_store(L.mixer_in, xin, T, w.proj, ldp);
      const LaneLayer S = lane_layer(L, lane);
      if (!(skip_ & 2))
        conv_update_silu(w.proj, ldp, T, C, (int)d.conv_kernel, L.conv_w, S.conv_state, kv_start, nullptr, w.conv_out, st);
      const float* z = w.proj + C;
      const float* b = z + d.lin_v_total();
      const float* a = b + d.lin_v_heads;
      if (!(skip_ & 4)) gdn_prefill(w.conv_out, z, b, a, ldp, T, gd, L.a_log, L.dt_bias, L.gdn_norm, S.gdn_state, mix,
                                    P.gdn_scratch, P.gdn_scratch_bytes, st);
      if (!(skip_ & 32)) matmul(L.mixer_out, mix, T, GEMV_ADD, w.resid, nullptr, H, nullptr, 0);
    } else {
      prefill_attention_mixer(L, lane, T, kv_start);
    }
    prefill_mlp(L, T);
  }
}

// A full-attention layer's mixer over a prefill chunk (its input norm already in xin): projections by GEMM, q/k norm
// + mRoPE + the KV write, flash attention over the lane's cache, the output GEMM into the residual.
void NativeEngine::prefill_attention_mixer(const LayerBuffers& L, int lane, int T, int kv_start) {
  const ModelDims& d = dims_;
  const PrefillWorkspace& P = buf_.pre;
  const StepWorkspace& w = P.step;
  cudaStream_t st = stream_;
  auto* xin = reinterpret_cast<__half*>(w.xin);
  auto* mix = reinterpret_cast<__half*>(w.mix);
  const AttnDims ad = attn_dims();
  const int ldp = (int)d.attn_qkv_rows();
  if (!(skip_ & 32)) matmul_store(L.mixer_in, xin, T, w.proj, ldp);
  const LaneLayer S = lane_layer(L, lane);
  char *kc = S.k_cache, *vc = S.v_cache, *ks = S.k_scales, *vs = S.v_scales;
  if (!(skip_ & 8)) {
    attn_prefill_prep(w.proj, ldp, T, ad, L.q_norm, L.k_norm, inv_freq_dev_, mrope_section_, P.pos3, kv_start, w.q, kc,
                      vc, ks, vs, st);
    attn_prefill(w.q, T, kv_start, ad, kc, vc, ks, vs, w.proj + d.head_dim, ldp, mix, st);
  }
  if (!(skip_ & 32)) matmul(L.mixer_out, mix, T, GEMV_ADD, w.resid, nullptr, (int)d.hidden, nullptr, 0);
}

void NativeEngine::prefill_mlp(const LayerBuffers& L, int T) {
  const ModelDims& d = dims_;
  const PrefillWorkspace& P = buf_.pre;
  const StepWorkspace& w = P.step;
  auto* xin = reinterpret_cast<__half*>(w.xin);
  auto* act = reinterpret_cast<__half*>(w.act);
  const int H = (int)d.hidden, I = (int)d.intermediate;
  // the SwiGLU GEMM stages its gate/up products in the projection buffer, which is free by then
  float* swiglu_scratch = w.proj;
  const int64_t swiglu_scratch_bytes = P.chunk * std::max(d.gdn_in_rows(), d.attn_qkv_rows()) * 4;
  rmsnorm_to_gemv_input(w.resid, T, H, L.post_norm, eps_, true, xin, stream_);
  if (!(skip_ & 16)) matmul(L.gate_up, xin, T, GEMV_SWIGLU, nullptr, act, I, swiglu_scratch, swiglu_scratch_bytes);
  if (!(skip_ & 16)) matmul(L.down, act, T, GEMV_ADD, w.resid, nullptr, H, nullptr, 0);
}

void NativeEngine::enqueue_prefill_mtp(int lane, int T, int kv_start) {
  const ModelDims& d = dims_;
  const PrefillWorkspace& P = buf_.pre;
  const StepWorkspace& w = P.step;
  const MtpBuffers& M = buf_.mtp;
  cudaStream_t st = stream_;
  const int H = (int)d.hidden;
  auto* fc_in = reinterpret_cast<__half*>(w.act);  // [T, 2H] fp16
  embed_gather(buf_.embed, P.tokens, T, w.proj, st);  // the next tokens' embeddings
  mtp_fc_input(w.proj, w.resid, T, H, M.norm_embedding, buf_.final_norm, M.norm_hidden, eps_, fc_in, st);
  matmul(M.fc, fc_in, T, GEMV_STORE, w.resid, nullptr, H, nullptr, 0);
  rmsnorm_to_gemv_input(w.resid, T, H, M.layer.input_norm, eps_, true, reinterpret_cast<__half*>(w.xin), st);
  prefill_attention_mixer(M.layer, lane, T, kv_start);
  prefill_mlp(M.layer, T);
}

void NativeEngine::prefill(int lane, const std::vector<int32_t>& tokens, const std::vector<int32_t>& rope_pos,
                           int kv_start) {
  const int n = (int)tokens.size();
  const PrefillWorkspace& P = buf_.pre;
  if (P.chunk <= 0)
    throw std::invalid_argument("prefill: this engine was planned without a prefill chunk (prefill_chunk = 0)");
  if (lane < 0 || lane >= shape_.max_lanes) throw std::out_of_range("lane out of range");
  if (n < 1) throw std::invalid_argument("prefill needs at least one token");
  refuse_while_looping("prefill");
  forget_checkpoints();
  if (kv_start < 0 || (int64_t)kv_start + n > shape_.max_context)
    throw std::out_of_range("prefill: context would exceed max_context (" + std::to_string(shape_.max_context) + ")");
  if (!rope_pos.empty() && (int64_t)rope_pos.size() != 3ll * n) throw std::invalid_argument("rope_pos must be T x 3");
  for (int32_t t : tokens)
    if (t < 0 || t >= dims_.vocab) throw std::out_of_range("token id out of range");
  const int C = (int)P.chunk;
  std::vector<int32_t> pos((size_t)3 * std::min(n, C));
  for (int s = 0; s < n; s += C) {
    const int T = std::min(C, n - s);
    for (int t = 0; t < T; ++t)
      for (int a = 0; a < 3; ++a) pos[3 * t + a] = rope_pos.empty() ? kv_start + s + t : rope_pos[3 * (s + t) + a];
    // pageable sources: the copies are staged before these calls return, and run in stream order
    // after the previous chunk's kernels, which read the same buffers
    MR_CHECK(cudaMemcpyAsync(P.tokens, tokens.data() + s, T * 4, cudaMemcpyHostToDevice, stream_), "prefill (tokens)");
    MR_CHECK(cudaMemcpyAsync(P.pos3, pos.data(), T * 12, cudaMemcpyHostToDevice, stream_), "prefill (positions)");
    enqueue_prefill_chunk(lane, T, kv_start + s);
    if (buf_.mtp.on) {
      // The MTP head over this chunk's pairs whose next token is in the prompt (all but the prompt's last position:
      // its token is the first one sampled, and mtp_step pairs it with hidden row 0, kept here for it and the logits).
      const int64_t H = dims_.hidden;
      if (s + T == n)
        MR_CHECK(cudaMemcpyAsync(mtp_hidden_rows(lane), P.step.resid + (T - 1) * H, H * 4, cudaMemcpyDeviceToDevice,
                                 stream_), "prefill (MTP hidden row)");
      const int pairs = s + T < n ? T : T - 1;
      if (pairs > 0) {
        MR_CHECK(cudaMemcpyAsync(P.tokens, tokens.data() + s + 1, pairs * 4, cudaMemcpyHostToDevice, stream_),
                 "prefill (MTP next tokens)");
        enqueue_prefill_mtp(lane, pairs, kv_start + s);
      }
    }
  }
  // Logits of the last token, in the decode workspace (whose residual rows start where the prefill
  // view's do): move that row to row 0, then the final norm and lm_head as a T = 1 step.
  const int last = (n - 1) % C;
  const int64_t H = dims_.hidden;
  if (buf_.mtp.on)  // the MTP pass overwrote the residual rows; the last one was kept
    MR_CHECK(cudaMemcpyAsync(buf_.ws.resid, mtp_hidden_rows(lane), H * 4, cudaMemcpyDeviceToDevice, stream_),
             "prefill (last row)");
  else if (last > 0)
    MR_CHECK(cudaMemcpyAsync(buf_.ws.resid, P.step.resid + last * H, H * 4, cudaMemcpyDeviceToDevice, stream_),
             "prefill (last row)");
  qgemv_normed(buf_.lm_head, buf_.ws.resid, buf_.final_norm, eps_, true, 1, GEMV_STORE, buf_.ws.logits, nullptr,
               (int)dims_.vocab, reinterpret_cast<__half*>(buf_.ws.xin), stream_);  // as the decode step does
  // step inputs as after a decode step of the last token, so sample(lane, 1) keys its draw the same way
  StepInputs* in = inputs_for_write();
  in->tokens[0] = tokens.back();
  for (int a = 0; a < 3; ++a) in->rope_pos[0][a] = rope_pos.empty() ? kv_start + n - 1 : rope_pos[3 * (n - 1) + a];
  in->kv_start = kv_start + n - 1;
  in->T = 1;
  in->lane = lane;
  upload_inputs(stream_);
  synchronize();
}

void NativeEngine::reset_graphs() {
  for (auto& g : graphs_) cudaGraphExecDestroy(g.second);
  graphs_.clear();
}

void NativeEngine::set_skip_mask(int m) {
  if (m == skip_) return;
  reset_graphs();
  skip_ = m;
}

void NativeEngine::mark(const char* op) {
  if (!trace_) return;
  cudaEvent_t e;
  MR_CHECK(cudaEventCreate(&e), "profile event");
  MR_CHECK(cudaEventRecord(e, stream_), "profile event");
  trace_->emplace_back(op, e);
}

std::vector<std::pair<std::string, float>> NativeEngine::profile_step(int lane, int kv_start) {
  std::vector<int32_t> tok{1};
  const bool g = use_graphs_;
  use_graphs_ = false;
  std::vector<std::pair<std::string, cudaEvent_t>> trace;
  try {
    forward(lane, tok, {}, kv_start);  // warm
    synchronize();
    trace_ = &trace;
    mark("start");
    forward(lane, tok, {}, kv_start);
  } catch (...) {
    trace_ = nullptr;
    use_graphs_ = g;
    throw;
  }
  trace_ = nullptr;
  use_graphs_ = g;
  synchronize();
  std::vector<std::pair<std::string, float>> out;
  for (size_t i = 1; i < trace.size(); ++i) {
    float ms = 0;
    cudaEventElapsedTime(&ms, trace[i - 1].second, trace[i].second);
    out.emplace_back(trace[i].first, ms);
  }
  for (auto& e : trace) cudaEventDestroy(e.second);
  return out;
}

cudaGraphExec_t NativeEngine::captured(std::pair<int, int> key, const std::function<void()>& enqueue) {
  auto it = graphs_.find(key);
  if (it != graphs_.end()) return it->second;
  cudaGraph_t g;
  MR_CHECK(cudaStreamBeginCapture(stream_, cudaStreamCaptureModeThreadLocal), "graph capture (begin)");
  try {
    enqueue();
  } catch (...) {
    cudaStreamEndCapture(stream_, &g);
    cudaGetLastError();
    throw;
  }
  MR_CHECK(cudaStreamEndCapture(stream_, &g), "graph capture (end)");
  cudaGraphExec_t ge;
  MR_CHECK(cudaGraphInstantiate(&ge, g, 0), "graph instantiate");
  cudaGraphDestroy(g);
  graphs_.emplace(key, ge);
  return ge;
}

void NativeEngine::forward(int lane, const std::vector<int32_t>& tokens, const std::vector<int32_t>& rope_pos,
                           int kv_start, bool keep_states) {
  const int T = (int)tokens.size();
  if (lane < 0 || lane >= shape_.max_lanes) throw std::out_of_range("lane out of range");
  refuse_while_looping("forward");
  forget_checkpoints();  // this step changes the lane's state (a keep_states step sets new checkpoints below)
  if (T < 1 || T > shape_.max_step_tokens)
    throw std::invalid_argument("forward: 1 <= T <= max_step_tokens (" + std::to_string(shape_.max_step_tokens) + ")");
  if (keep_states && (T < 2 || T > shape_.mtp_drafts + 1))
    throw std::invalid_argument("forward: keep_states needs 2 <= T <= mtp_drafts + 1 (a verify step of the drafts and "
                                "the token before them; T = " + std::to_string(T) + ", mtp_drafts = " +
                                std::to_string(shape_.mtp_drafts) + " in the plan)");
  stage_step_inputs("forward", lane, tokens, rope_pos, kv_start);
  if (!use_graphs_) {
    enqueue_step(lane, T, true, keep_states);
  } else {
    const int key = keep_states ? -T : T;  // a verify step's graph also writes the checkpoints
    cudaGraphExec_t ge = captured(std::make_pair(lane, key), [&] { enqueue_step(lane, T, true, keep_states); });
    MR_CHECK(cudaGraphLaunch(ge, stream_), "decode step (graph launch)");
  }
  if (keep_states) kept_ = KeptStates{lane, T};
}

// A step's inputs checked (cache slots, positions, token ids) and uploaded: tokens at slots kv_start .., rope_pos
// T x 3 or text positions kv_start + t on all axes.
void NativeEngine::stage_step_inputs(const char* op, int lane, const std::vector<int32_t>& tokens,
                                     const std::vector<int32_t>& rope_pos, int kv_start) {
  const int T = (int)tokens.size();
  if (kv_start < 0 || kv_start + T > shape_.max_context)
    throw std::out_of_range(std::string(op) + ": context would exceed max_context (" +
                            std::to_string(shape_.max_context) + ")");
  if (!rope_pos.empty() && (int)rope_pos.size() != 3 * T) throw std::invalid_argument("rope_pos must be T x 3");
  for (int t = 0; t < T; ++t)
    if (tokens[t] < 0 || tokens[t] >= dims_.vocab) throw std::out_of_range("token id out of range");
  StepInputs* in = inputs_for_write();
  for (int t = 0; t < T; ++t) {
    in->tokens[t] = tokens[t];
    for (int a = 0; a < 3; ++a) in->rope_pos[t][a] = rope_pos.empty() ? kv_start + t : rope_pos[3 * t + a];
  }
  in->kv_start = kv_start;
  in->T = T;
  in->lane = lane;
  upload_inputs(stream_);
}

void NativeEngine::commit_states(int lane, int kept) {
  refuse_while_looping("commit_states");
  if (kept_.T == 0)
    throw std::logic_error("commit_states: no verify step kept checkpoints (forward with keep_states, then commit "
                           "before any other forward, prefill or change of the lane's state)");
  if (lane != kept_.lane)
    throw std::invalid_argument("commit_states: the verify step ran lane " + std::to_string(kept_.lane) + ", not " +
                                std::to_string(lane));
  if (kept < 1 || kept > kept_.T)
    throw std::invalid_argument("commit_states: kept must be in 1.." + std::to_string(kept_.T) +
                                " (the verify step's tokens), got " + std::to_string(kept));
  const int T = kept_.T;
  forget_checkpoints();  // the lane's state is the step's end no longer: a second commit would start from elsewhere
  if (kept == T) return;  // the step's own end state
  const LaneStateRegions r = lane_state_regions(lane), image = checkpoint_regions(kept - 1);
  // stream order: after the step that wrote the image, before the next step reads the lane's state
  MR_CHECK(cudaMemcpyAsync(r.gdn, image.gdn, r.gdn_floats * 4, cudaMemcpyDeviceToDevice, stream_), "commit_states");
  MR_CHECK(cudaMemcpyAsync(r.conv, image.conv, r.conv_floats * 4, cudaMemcpyDeviceToDevice, stream_), "commit_states");
}

void NativeEngine::mtp_step(int lane, const std::vector<int32_t>& next_tokens, const std::vector<int32_t>& rope_pos,
                            int kv_start, int hidden_row, bool chained) {
  const int T = (int)next_tokens.size();
  if (!buf_.mtp.on) throw std::logic_error("mtp_step: this engine was planned without the MTP head (mtp_drafts = 0)");
  if (lane < 0 || lane >= shape_.max_lanes) throw std::out_of_range("lane out of range");
  refuse_while_looping("mtp_step");
  if (T < 1 || T > shape_.max_step_tokens)
    throw std::invalid_argument("mtp_step: 1 <= pairs <= max_step_tokens (" + std::to_string(shape_.max_step_tokens) + ")");
  if (chained && (T != 1 || hidden_row != 0))
    throw std::invalid_argument("mtp_step: a chained draft is one pair on the head's own last output (hidden_row 0)");
  if (hidden_row < 0 || hidden_row + T > shape_.max_step_tokens)
    throw std::out_of_range("mtp_step: hidden rows past the step's rows");
  stage_step_inputs("mtp_step", lane, next_tokens, rope_pos, kv_start);
  if (!use_graphs_) {
    enqueue_mtp(lane, T, hidden_row, chained);
  } else {
    // graph keys past the trunk's (lane, 0..16): one per (rows, first row, chained)
    const int key = 1000 + (chained ? 500 : 0) + hidden_row * 17 + T;
    cudaGraphExec_t ge = captured(std::make_pair(lane, key), [&] { enqueue_mtp(lane, T, hidden_row, chained); });
    MR_CHECK(cudaGraphLaunch(ge, stream_), "MTP step (graph launch)");
  }
}

// The checks both copies of MTP hidden rows make.
static void check_mtp_rows(bool on, int lane, int lanes, int first_row, int rows, int step_rows, const char* op) {
  if (!on) throw std::logic_error(std::string(op) + ": this engine was planned without the MTP head");
  if (lane < 0 || lane >= lanes) throw std::out_of_range("lane out of range");
  if (first_row < 0 || rows < 0 || first_row + rows > step_rows)
    throw std::out_of_range(std::string(op) + ": rows past a step's rows");
}

void NativeEngine::save_mtp_hidden(int lane, int first_row, int rows, float* host) {
  check_mtp_rows(buf_.mtp.on, lane, shape_.max_lanes, first_row, rows, shape_.max_step_tokens, "save_mtp_hidden");
  refuse_while_looping("save_mtp_hidden");
  const int64_t H = dims_.hidden;
  MR_CHECK(cudaMemcpyAsync(host, mtp_hidden_rows(lane) + first_row * H, (size_t)rows * H * 4, cudaMemcpyDeviceToHost,
                           stream_), "save_mtp_hidden");
  synchronize();
}

void NativeEngine::load_mtp_hidden(int lane, int first_row, int rows, const float* host) {
  check_mtp_rows(buf_.mtp.on, lane, shape_.max_lanes, first_row, rows, shape_.max_step_tokens, "load_mtp_hidden");
  refuse_while_looping("load_mtp_hidden");
  const int64_t H = dims_.hidden;
  MR_CHECK(cudaMemcpyAsync(mtp_hidden_rows(lane) + first_row * H, host, (size_t)rows * H * 4, cudaMemcpyHostToDevice,
                           stream_), "load_mtp_hidden");
  synchronize();
}

std::vector<float> NativeEngine::logits(int T) {
  std::vector<float> out((size_t)T * dims_.vocab);
  MR_CHECK(cudaMemcpyAsync(out.data(), buf_.ws.logits, out.size() * 4, cudaMemcpyDeviceToHost, stream_), "read logits");
  synchronize();
  return out;
}

std::vector<int32_t> NativeEngine::sample(int lane, int T, const SamplingParams& p, int64_t draw, int first_row) {
  refuse_while_looping("sample");
  if (lane < 0 || lane >= shape_.max_lanes) throw std::out_of_range("lane out of range");
  if (T < 1 || first_row < 0 || first_row + T > shape_.max_step_tokens)
    throw std::invalid_argument("sample: 1 <= T and first_row >= 0 within the step's logit rows");
  if (draw < 0 || draw > INT32_MAX - T) throw std::out_of_range("sample: draw index out of range");
  StepInputs* in = inputs_for_write();
  in->lane = lane;
  in->draw = (int32_t)draw;
  in->sampling = p;
  upload_inputs(stream_);
  sample_tokens(buf_.ws.logits + (size_t)first_row * dims_.vocab, T, (int)dims_.vocab, buf_.token_counts,
                reinterpret_cast<StepInputs*>(buf_.ws.inputs), buf_.ws.sampler, buf_.ws.out_tokens, stream_);
  std::vector<int32_t> out(T);
  MR_CHECK(cudaMemcpyAsync(out.data(), buf_.ws.out_tokens, T * 4, cudaMemcpyDeviceToHost, stream_), "read tokens");
  synchronize();
  return out;
}

void NativeEngine::refuse_while_looping(const char* op) const {
  if (loop_.active) throw std::logic_error(std::string(op) + ": a decode loop is running (decode_stop first)");
}

void NativeEngine::enqueue_loop_draw(const float* logits_row) {
  sample_tokens(logits_row, 1, (int)dims_.vocab, buf_.token_counts, reinterpret_cast<StepInputs*>(buf_.ws.inputs),
                buf_.ws.sampler, buf_.ws.out_tokens, stream_, true, ring_dev_, kLoopRing);
}

void NativeEngine::record_draw_event() {
  const int64_t k = loop_.draws++;
  MR_CHECK(cudaEventRecord(ring_events_[(loop_.draw0 + k) % kLoopRing], stream_), "decode loop (event)");
}

void NativeEngine::decode_start(int lane, int logits_row, int kv_next, const SamplingParams& p, int64_t draw) {
  refuse_while_looping("decode_start");
  forget_checkpoints();  // the loop's steps change the lane's state
  if (lane < 0 || lane >= shape_.max_lanes) throw std::out_of_range("lane out of range");
  if (logits_row < 0 || logits_row >= shape_.max_step_tokens) throw std::out_of_range("decode_start: logits row out of range");
  if (kv_next < 1 || kv_next > shape_.max_context) throw std::out_of_range("decode_start: kv_next out of range");
  if (draw < 0 || draw > INT32_MAX / 2) throw std::out_of_range("decode_start: draw index out of range");
  // the inputs as after a step of the token before token 0: the draw advances them to token 0's step
  StepInputs* in = inputs_for_write();
  in->tokens[0] = 0;
  for (int a = 0; a < 3; ++a) in->rope_pos[0][a] = kv_next - 1;
  in->kv_start = kv_next - 1;
  in->T = 1;
  in->lane = lane;
  in->draw = (int32_t)draw;
  in->sampling = p;
  upload_inputs(stream_);
  loop_ = DecodeLoop{true, lane, kv_next, draw, 0, 0};
  enqueue_loop_draw(buf_.ws.logits + (size_t)logits_row * dims_.vocab);
  record_draw_event();
}

void NativeEngine::decode_push() {
  if (!loop_.active) throw std::logic_error("decode_push: no decode loop (decode_start first)");
  // the step of draw k uses cache slot kv_next + k
  if (loop_.kv_next + loop_.draws > shape_.max_context)
    throw std::out_of_range("decode_push: context would exceed max_context (" + std::to_string(shape_.max_context) + ")");
  if (loop_.draws - loop_.read >= kLoopRing) throw std::logic_error("decode_push: too many draws queued past the last read");
  const int lane = loop_.lane;
  cudaGraphExec_t ge = captured(std::make_pair(lane, 0), [&] {
    enqueue_step(lane, 1);
    enqueue_loop_draw(buf_.ws.logits);
  });
  MR_CHECK(cudaGraphLaunch(ge, stream_), "decode loop (graph launch)");
  record_draw_event();
}

int32_t NativeEngine::decode_token(int64_t k) {
  if (!loop_.active) throw std::logic_error("decode_token: no decode loop");
  if (k < 0 || k >= loop_.draws) throw std::out_of_range("decode_token: that draw is not queued");
  if (k < loop_.read - kLoopRing + 1) throw std::out_of_range("decode_token: that draw's slot was reused");
  const int slot = (int)((loop_.draw0 + k) % kLoopRing);
  MR_CHECK(cudaEventSynchronize(ring_events_[slot]), "decode loop (step)");
  loop_.read = std::max(loop_.read, k + 1);
  return reinterpret_cast<volatile int32_t*>(ring_host_)[slot];
}

int64_t NativeEngine::decode_stop() {
  if (!loop_.active) throw std::logic_error("decode_stop: no decode loop");
  loop_.active = false;
  synchronize();
  // the device advanced the inputs; the host page follows, so later uploads start from the truth
  StepInputs* in = inputs_for_write();
  MR_CHECK(cudaMemcpy(in, buf_.ws.inputs, sizeof(StepInputs), cudaMemcpyDeviceToHost), "decode_stop (inputs)");
  return loop_.kv_next + loop_.draws - 1;
}

float NativeEngine::time_steps(int lane, int kv_start, int n) {
  std::vector<int32_t> tok{1};
  forward(lane, tok, {}, kv_start);  // capture + warm
  synchronize();
  cudaEvent_t a, b;
  MR_CHECK(cudaEventCreate(&a), "event");
  MR_CHECK(cudaEventCreate(&b), "event");
  auto ge = graphs_.at(std::make_pair(lane, 1));
  for (int i = 0; i < 3; ++i) MR_CHECK(cudaGraphLaunch(ge, stream_), "graph launch");
  MR_CHECK(cudaEventRecord(a, stream_), "event");
  for (int i = 0; i < n; ++i) MR_CHECK(cudaGraphLaunch(ge, stream_), "graph launch");
  MR_CHECK(cudaEventRecord(b, stream_), "event");
  synchronize();
  float ms = 0;
  cudaEventElapsedTime(&ms, a, b);
  cudaEventDestroy(a);
  cudaEventDestroy(b);
  return ms / n;
}

int64_t NativeEngine::step_bytes(int64_t ctx) const {
  int64_t bytes = 0;
  for (const auto& a : plan_log_)
    if (a.category.rfind("weights:", 0) == 0 && a.category != "weights:embed" && a.category != "weights:vision")
      bytes += a.bytes;
  const int64_t nl = dims_.n_linear();
  bytes += 2 * nl * dims_.lin_v_heads * dims_.lin_k_dim * dims_.lin_v_dim * 4;  // GDN state read + write
  const int64_t per_tok = dims_.n_full() * 2 * dims_.n_kv_heads * dims_.head_dim;
  bytes += ctx * (kv_code_bytes(shape_.kv, per_tok) + kv_scale_bytes(shape_.kv, per_tok));
  return bytes;
}

}  // namespace monorail
