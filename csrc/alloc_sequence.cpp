// The allocation sequence shared by the memory plan (dry arena) and the engine (device arena).
#include "alloc_sequence.h"

#include <algorithm>
#include <stdexcept>

namespace monorail {

int ModelDims::n_full() const {
  int n = 0;
  for (int f : layer_is_full) n += f ? 1 : 0;
  return n;
}

const char* role_name(int role) {
  if (role == kMtpFcRole) return "mtp_fc";
  static const char* names[N_ROLES] = {"embed", "lm_head", "gdn_in", "gdn_out",
                                       "attn_qkv", "attn_o", "mlp_gate_up", "mlp_down"};
  return (role >= 0 && role < N_ROLES) ? names[role] : "?";
}

int role_index(const std::string& name) {
  for (int r = 0; r < N_ROLES; ++r)
    if (name == role_name(r)) return r;
  return name == "mtp_fc" ? kMtpFcRole : -1;
}

bool role_has_tail(int role) { return role == GDN_IN || role == ATTN_QKV; }

int64_t role_tail_rows(const ModelDims& d, int role) {
  if (role == GDN_IN) return d.gdn_in_tail_rows();
  if (role == ATTN_QKV) return d.attn_qkv_tail_rows();
  return 0;
}

const char* role_head_label(int role) { return role == GDN_IN ? "qkv|z" : role == ATTN_QKV ? "q" : ""; }
const char* role_tail_label(int role) { return role == GDN_IN ? "b|a" : role == ATTN_QKV ? "k|v" : ""; }

char* Arena::take(const std::string& name, const std::string& category, int64_t bytes, int64_t align) {
  if (bytes < 0) throw std::invalid_argument("negative allocation for " + name);
  int64_t off = (used_ + align - 1) / align * align;
  log_.push_back({name, category, bytes, align, off});
  used_ = off + bytes;
  return base_ ? base_ + off : nullptr;
}

void Arena::recategorize_matrices(size_t first, const std::string& category) {
  for (size_t i = first; i < log_.size(); ++i)
    if (log_[i].category.rfind("weights:", 0) == 0 && log_[i].category != "weights:small") log_[i].category = category;
}

int64_t qmatrix_code_bytes(int64_t rows, int64_t cols, int bits) {
  return bits == 8 ? rows * cols : rows * cols / 2;  // 5/6-bit keep their low nibbles here
}
int64_t qmatrix_high_bytes(int64_t rows, int64_t cols, int bits) {
  if (bits == 5) return rows * cols / 8;
  if (bits == 6) return rows * cols / 4;
  return 0;
}
int64_t qmatrix_scale_bytes(int64_t rows, int64_t cols, int group) { return rows * (cols / group) * 2; }

int64_t kv_code_bytes(KvDtype kv, int64_t elems) {
  switch (kv) {
    case KvDtype::BF16: return elems * 2;
    case KvDtype::INT8G64: return elems;
    case KvDtype::INT4G64: return elems / 2;  // two codes per byte
  }
  throw std::invalid_argument("unknown KV format");
}
int64_t kv_scale_bytes(KvDtype kv, int64_t elems) { return kv == KvDtype::BF16 ? 0 : elems / 64 * 2; }

static void check_spec(const QuantSpec& q, int64_t cols, const char* role) {
  if (q.bits != 4 && q.bits != 5 && q.bits != 6 && q.bits != 8)
    throw std::invalid_argument(std::string("recipe: role ") + role + " has bits " + std::to_string(q.bits) +
                                "; supported: 4, 5, 6, 8");
  if (q.group != 32 && q.group != 64)
    throw std::invalid_argument(std::string("recipe: role ") + role + " has group " + std::to_string(q.group) +
                                "; supported: 32, 64");
  if (cols % q.group != 0)
    throw std::invalid_argument(std::string("role ") + role + ": K=" + std::to_string(cols) +
                                " is not a multiple of the group " + std::to_string(q.group));
}

// One quantized matrix; its plan line is the category "weights:<line>".
static QMatrix take_qmatrix(Arena& a, const std::string& name, const std::string& line, int64_t rows, int64_t cols,
                            const QuantSpec& q) {
  check_spec(q, cols, line.c_str());
  QMatrix m;
  m.rows = rows;
  m.cols = cols;
  m.q = q;
  const std::string cat = "weights:" + line;
  m.codes = a.take(name + ".qcodes", cat, qmatrix_code_bytes(rows, cols, q.bits), 256);
  int64_t hb = qmatrix_high_bytes(rows, cols, q.bits);
  if (hb) m.high = a.take(name + ".qhigh", cat, hb, 256);
  m.scales = a.take(name + ".qscales", cat, qmatrix_scale_bytes(rows, cols, q.group), 256);
  return m;
}

static QMatrix take_qmatrix(Arena& a, const std::string& name, int role, int64_t rows, int64_t cols,
                            const QuantSpec& q) {
  return take_qmatrix(a, name, role_name(role), rows, cols, q);
}

// A fused input projection: one matrix when its recipe has one format, else a head and a tail
// matrix, each on its own plan line ("weights:gdn_in qkv|z" and "weights:gdn_in b|a").
static SplitQMatrix take_split_qmatrix(Arena& a, const std::string& name, const std::string& tail_name, int role,
                                       int64_t rows, int64_t cols, const ModelDims& d, const EngineShape& s) {
  SplitQMatrix m;
  if (!s.split(role)) {
    m.head = take_qmatrix(a, name, role, rows, cols, s.recipe[role]);
    return m;
  }
  const int64_t tail_rows = role_tail_rows(d, role);
  const std::string line = role_name(role);
  m.head = take_qmatrix(a, name, line + " " + role_head_label(role), rows - tail_rows, cols, s.recipe[role]);
  m.tail = take_qmatrix(a, tail_name, line + " " + role_tail_label(role), tail_rows, cols, s.tail_spec(role));
  return m;
}

// A second format only where the engine can run a role as two row segments.
static void check_recipe_tails(const EngineShape& s) {
  for (int r = 0; r < N_ROLES; ++r)
    if (s.split(r) && !role_has_tail(r))
      throw std::invalid_argument(std::string("recipe: role ") + role_name(r) +
                                  " has one format for all its rows (only gdn_in's b|a rows and attn_qkv's k|v rows "
                                  "may take a second format)");
}

static float* take_f32(Arena& a, const std::string& name, const std::string& cat, int64_t n) {
  return reinterpret_cast<float*>(a.take(name, cat, n * 4, 256));
}

// A full-attention layer's projections and q/k norms (a trunk layer, or the MTP head's layer).
static void take_attention_weights(Arena& a, LayerBuffers& L, const std::string& p, const ModelDims& d,
                                   const EngineShape& s) {
  L.mixer_in = take_split_qmatrix(a, p + "self_attn.qkv_proj", p + "self_attn.kv_proj", ATTN_QKV, d.attn_qkv_rows(),
                                  d.hidden, d, s);
  L.q_norm = take_f32(a, p + "self_attn.q_norm", "weights:small", d.head_dim);
  L.k_norm = take_f32(a, p + "self_attn.k_norm", "weights:small", d.head_dim);
  L.mixer_out = take_qmatrix(a, p + "self_attn.o_proj", ATTN_O, d.hidden, d.n_heads * d.head_dim, s.recipe[ATTN_O]);
}

static void take_mlp_weights(Arena& a, LayerBuffers& L, const std::string& p, const ModelDims& d,
                             const EngineShape& s) {
  L.gate_up = take_qmatrix(a, p + "mlp.gate_up_proj", MLP_GATE_UP, 2 * d.intermediate, d.hidden, s.recipe[MLP_GATE_UP]);
  L.down = take_qmatrix(a, p + "mlp.down_proj", MLP_DOWN, d.hidden, d.intermediate, s.recipe[MLP_DOWN]);
}

// One attention layer's K and V (and scales) for kv_capacity tokens.
static void take_layer_kv(Arena& a, LayerBuffers& L, const std::string& p, const std::string& cat, const ModelDims& d,
                          const EngineShape& s) {
  const int64_t elems = s.kv_capacity * d.n_kv_heads * d.head_dim;
  L.k_cache = a.take(p + "k", cat, kv_code_bytes(s.kv, elems));
  L.v_cache = a.take(p + "v", cat, kv_code_bytes(s.kv, elems));
  if (s.kv != KvDtype::BF16) {
    L.k_scales = a.take(p + "k_scales", cat, kv_scale_bytes(s.kv, elems));
    L.v_scales = a.take(p + "v_scales", cat, kv_scale_bytes(s.kv, elems));
  }
}

// The MTP head's weights (in checkpoint order after lm_head). Its matrices take the formats of the trunk roles
// they mirror (the plan shows them on one line, "weights mtp"); fc takes attn_qkv's head format.
static MtpBuffers take_mtp_weights(Arena& a, const ModelDims& d, const EngineShape& s, int attn_index) {
  MtpBuffers m;
  m.on = true;
  const std::string line = "mtp";
  m.fc = take_qmatrix(a, "mtp.fc", line, d.hidden, 2 * d.hidden, s.recipe[ATTN_QKV]);
  m.norm_embedding = take_f32(a, "mtp.pre_fc_norm_embedding", "weights:small", d.hidden);
  m.norm_hidden = take_f32(a, "mtp.pre_fc_norm_hidden", "weights:small", d.hidden);
  m.norm = take_f32(a, "mtp.norm", "weights:small", d.hidden);
  LayerBuffers& L = m.layer;
  const std::string p = "mtp.layers.0.";
  L.full = true;
  L.attn_index = attn_index;
  L.input_norm = take_f32(a, p + "input_layernorm", "weights:small", d.hidden);
  L.post_norm = take_f32(a, p + "post_attention_layernorm", "weights:small", d.hidden);
  const size_t first = a.log().size();
  take_attention_weights(a, L, p, d, s);
  take_mlp_weights(a, L, p, d, s);
  a.recategorize_matrices(first, "weights:" + line);  // one plan line for the head, not added to the trunk's roles
  return m;
}

// The decode/verify/prefill step workspace, carved from `a` in one fixed order.
static StepWorkspace carve_step_workspace(Arena& a, const ModelDims& d, int64_t T, int64_t logit_rows) {
  StepWorkspace w;
  const std::string c = "workspace";
  int64_t attn_width = d.n_heads * d.head_dim;
  int64_t xin_width = std::max({d.hidden, d.intermediate, d.lin_v_total(), attn_width});
  w.inputs = a.take("ws.inputs", c, 4096);
  w.resid = take_f32(a, "ws.resid", c, T * d.hidden);
  w.xin = a.take("ws.xin", c, T * xin_width * 2);
  w.act = a.take("ws.act", c, T * d.intermediate * 2);
  w.mix = a.take("ws.mix", c, T * std::max(d.lin_v_total(), attn_width) * 2);
  w.proj = take_f32(a, "ws.proj", c, T * std::max(d.gdn_in_rows(), d.attn_qkv_rows()));
  w.conv_out = take_f32(a, "ws.conv_out", c, T * d.conv_dim());
  w.q = take_f32(a, "ws.q", c, T * attn_width);
  int64_t split_tokens = std::min<int64_t>(T, kMaxStepTokens);  // flash-style prefill needs no partials
  w.attn_part = take_f32(a, "ws.attn_part", c, split_tokens * d.n_heads * kMaxAttnSplits * (d.head_dim + 2));
  w.logits = take_f32(a, "ws.logits", c, logit_rows * d.vocab);
  w.sampler = a.take("ws.sampler", c, logit_rows * d.vocab * 4);  // adjusted logits per row
  w.out_tokens = reinterpret_cast<int32_t*>(a.take("ws.out_tokens", c, kMaxStepTokens * 4));
  if (T > 1) {  // one-token plans never run the tensor-core GEMV
    w.gemv_part_floats = kMaxGemvSplits * split_tokens * d.hidden;
    w.gemv_part = take_f32(a, "ws.gemv_part", c, w.gemv_part_floats);
  }
  w.bytes = a.used();
  return w;
}

int64_t step_workspace_bytes(const ModelDims& d, int64_t tokens, int64_t logit_rows) {
  Arena dry;
  carve_step_workspace(dry, d, tokens, logit_rows);
  return dry.used();
}

int64_t gdn_prefill_scratch_reserve(const ModelDims& d, int64_t T) {
  // exactly what csrc/cuda/gdn_chunk.cu lays out (scratch_floats): normalised q and k per key head,
  // W and U/O per value head, the 64 x 64 intra-chunk matrix per (chunk, value head), and the gates
  const int64_t chunks = (T + 63) / 64;
  const int64_t floats = 2 * T * d.lin_k_heads * d.lin_k_dim + 2 * T * d.lin_v_heads * d.lin_v_dim +
                         chunks * d.lin_v_heads * 64 * 64 + (T * d.lin_v_heads + 3) / 4 * 4;
  return floats * 4;
}

// The prefill chunk's layout: the step workspace for `chunk` tokens, then what only prefill uses.
static PrefillWorkspace carve_prefill_workspace(Arena& a, const ModelDims& d, int64_t chunk) {
  PrefillWorkspace p;
  p.chunk = chunk;
  p.step = carve_step_workspace(a, d, chunk, 1);
  const std::string c = "workspace";
  p.tokens = reinterpret_cast<int32_t*>(a.take("pre.tokens", c, chunk * 4));
  p.pos3 = reinterpret_cast<int32_t*>(a.take("pre.pos3", c, chunk * 3 * 4));
  p.gdn_scratch_bytes = gdn_prefill_scratch_reserve(d, chunk);
  p.gdn_scratch = a.take("pre.gdn_scratch", c, p.gdn_scratch_bytes);
  p.gemm_dequant_bytes = kGemmDequantBytes;
  p.gemm_dequant = a.take("pre.gemm_dequant", c, p.gemm_dequant_bytes);
  p.cublas_bytes = kCublasWorkspaceBytes;
  p.cublas = a.take("pre.cublas", c, p.cublas_bytes);
  return p;
}

int64_t prefill_workspace_bytes(const ModelDims& d, int64_t chunk) {
  Arena dry;
  carve_prefill_workspace(dry, d, chunk);
  return dry.used();
}

// Vision tower activations for the largest image (patches = tokens x merge), flash-style attention.
int64_t vision_workspace_bytes(const ModelDims& d, int64_t vision_tokens) {
  if (vision_tokens <= 0 || d.vision_hidden <= 0) return 0;
  Arena dry;
  int64_t P = vision_tokens * d.vision_merge;
  dry.take("vis.x", "workspace", P * d.vision_hidden * 4);
  dry.take("vis.norm", "workspace", P * d.vision_hidden * 2);
  dry.take("vis.qkv", "workspace", P * 3 * d.vision_hidden * 2);
  dry.take("vis.attn", "workspace", P * d.vision_hidden * 2);
  dry.take("vis.mlp", "workspace", P * d.vision_intermediate * 2);
  dry.take("vis.merged", "workspace", vision_tokens * d.hidden * 4);  // image embeddings for the LLM
  return dry.used();
}

EngineBuffers allocate_engine(Arena& a, const ModelDims& d, const EngineShape& s) {
  if (d.hidden <= 0 || d.n_layers <= 0 || (int64_t)d.layer_is_full.size() != d.n_layers)
    throw std::invalid_argument("model dims: layer_is_full must list every layer");
  if (s.max_step_tokens < 1 || s.max_step_tokens > kMaxStepTokens)
    throw std::invalid_argument("max_step_tokens must be in 1..16 (speculative window + 1)");
  if (s.mtp_drafts < 0 || s.mtp_drafts > s.max_step_tokens - 1)
    throw std::invalid_argument("mtp_drafts must be in 0..max_step_tokens - 1 (a verify step runs the drafts + 1)");
  if (s.max_lanes < 1) throw std::invalid_argument("max_lanes must be >= 1");
  if (s.max_context < 1) throw std::invalid_argument("max_context must be >= 1");
  if (s.kv_capacity < s.max_lanes * s.max_context)
    throw std::invalid_argument("kv_capacity must hold max_lanes x max_context tokens");
  if (d.head_dim % 64 != 0) throw std::invalid_argument("head_dim must be a multiple of 64");
  check_recipe_tails(s);

  EngineBuffers b;
  const QuantSpec* r = s.recipe;
  // 1. weights, in checkpoint order.
  b.embed = take_qmatrix(a, "embed_tokens", EMBED, d.vocab, d.hidden, r[EMBED]);
  int gdn_i = 0, attn_i = 0;
  for (int i = 0; i < d.n_layers; ++i) {
    LayerBuffers L;
    std::string p = "layers." + std::to_string(i) + ".";
    L.full = d.layer_is_full[i] != 0;
    L.input_norm = take_f32(a, p + "input_layernorm", "weights:small", d.hidden);
    L.post_norm = take_f32(a, p + "post_attention_layernorm", "weights:small", d.hidden);
    if (L.full) {
      L.attn_index = attn_i++;
      take_attention_weights(a, L, p, d, s);
    } else {
      L.gdn_index = gdn_i++;
      L.mixer_in = take_split_qmatrix(a, p + "linear_attn.in_proj", p + "linear_attn.in_proj_ba", GDN_IN,
                                      d.gdn_in_rows(), d.hidden, d, s);
      L.conv_w = take_f32(a, p + "linear_attn.conv1d", "weights:small", d.conv_dim() * d.conv_kernel);
      L.a_log = take_f32(a, p + "linear_attn.A_log", "weights:small", d.lin_v_heads);
      L.dt_bias = take_f32(a, p + "linear_attn.dt_bias", "weights:small", d.lin_v_heads);
      L.gdn_norm = take_f32(a, p + "linear_attn.norm", "weights:small", d.lin_v_dim);
      L.mixer_out = take_qmatrix(a, p + "linear_attn.out_proj", GDN_OUT, d.hidden, d.lin_v_total(), r[GDN_OUT]);
    }
    take_mlp_weights(a, L, p, d, s);
    b.layers.push_back(L);
  }
  b.final_norm = take_f32(a, "norm", "weights:small", d.hidden);
  b.lm_head = take_qmatrix(a, "lm_head", LM_HEAD, d.vocab, d.hidden, r[LM_HEAD]);
  if (s.mtp_drafts > 0) {
    // the head's fc input [T, 2 hidden] fp16 is staged in the SwiGLU output buffer ([T, intermediate] fp16)
    if (d.intermediate < 2 * d.hidden)
      throw std::invalid_argument("the MTP head needs intermediate_size >= 2 x hidden_size (its fc input's buffer)");
    b.mtp = take_mtp_weights(a, d, s, attn_i);
  }
  if (s.vision_max_tokens > 0 && d.vision_params > 0)
    b.vision_weights = a.take("visual", "weights:vision", d.vision_params * 2);

  // 2. KV pool: per attention layer, K and V for kv_capacity tokens.
  for (auto& L : b.layers)
    if (L.full) take_layer_kv(a, L, "kv." + std::to_string(L.attn_index) + ".", "kv", d, s);
  if (b.mtp.on) take_layer_kv(a, b.mtp.layer, "kv.mtp.", "mtp_kv", d, s);
  // 3. per-lane recurrent state and sampling state.
  int64_t nl = d.n_linear();
  b.gdn_state = take_f32(a, "gdn_state", "gdn_state", s.max_lanes * nl * d.lin_v_heads * d.lin_k_dim * d.lin_v_dim);
  // conv state: a ring of conv_kernel slots per channel (the input at position p in slot p mod conv_kernel, gdn.cu)
  b.conv_state = take_f32(a, "conv_state", "conv_state", s.max_lanes * nl * d.conv_dim() * d.conv_kernel);
  b.token_counts = reinterpret_cast<int32_t*>(a.take("token_counts", "lane_state", s.max_lanes * d.vocab * 4));
  b.lane_meta = a.take("lane_meta", "lane_state", s.max_lanes * kLaneMetaBytes);
  if (s.mtp_drafts > 0) {  // verify checkpoints: one lane's GDN states and conv rings per draft (EngineBuffers)
    const int64_t image = nl * (d.lin_v_heads * d.lin_k_dim * d.lin_v_dim + d.conv_dim() * d.conv_kernel);
    b.spec_ckpt = take_f32(a, "spec_ckpt", "spec_ckpt", s.mtp_drafts * image);
  }
  if (b.mtp.on) {
    b.mtp.hidden = take_f32(a, "mtp.hidden", "mtp_hidden", s.max_lanes * s.max_step_tokens * d.hidden);
    b.mtp.chain = take_f32(a, "mtp.chain", "mtp_hidden", d.hidden);
  }

  // 4. workspace: the max over decode/verify, prefill chunk and vision; the decode layout is
  //    carved at its start.
  int64_t ws_decode = step_workspace_bytes(d, s.max_step_tokens, s.max_step_tokens);
  if (s.prefill_chunk < 0) throw std::invalid_argument("prefill_chunk must be >= 0");
  int64_t ws_prefill = s.prefill_chunk > 0 ? prefill_workspace_bytes(d, s.prefill_chunk) : 0;
  int64_t ws_vision = vision_workspace_bytes(d, s.vision_max_tokens);
  int64_t ws_bytes = std::max({ws_decode, ws_prefill, ws_vision});
  std::string ws_name = ws_bytes == ws_decode ? "workspace (decode/verify)"
                        : ws_bytes == ws_prefill ? "workspace (prefill chunk)" : "workspace (vision)";
  char* ws_base = a.take(ws_name, "workspace", ws_bytes, 4096);
  Arena sub(ws_base ? ws_base : nullptr);
  b.ws = carve_step_workspace(sub, d, s.max_step_tokens, s.max_step_tokens);
  if (s.prefill_chunk > 0) {  // the prefill view of the same block
    Arena pre(ws_base);
    b.pre = carve_prefill_workspace(pre, d, s.prefill_chunk);
  }
  if (a.dry()) {  // a dry run hands out no pointers
    b.ws = StepWorkspace{};
    b.pre = PrefillWorkspace{};
  }

  // 5. allowances that are not arena memory but must fit in the budget.
  if (s.graph_allowance > 0) a.take("decode graphs", "graphs", s.graph_allowance, 1);
  if (s.margin > 0) a.take("margin", "margin", s.margin, 1);
  return b;
}

}  // namespace monorail
