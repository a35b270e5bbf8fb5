// The engine's device allocation sequence, written once and executed twice: by a dry arena
// (records names, sizes and alignments; no GPU needed, compiled in every build) for the memory
// plan, and by the device arena at launch, which replays the identical sequence over one block.
// Because both runs call the same code, the plan printed by `monorail plan` and the bytes the
// engine takes can never disagree.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace monorail {

// Shapes of the text model (from config.json). Vision dims are only used for the vision workspace.
struct ModelDims {
  int64_t hidden = 0, n_layers = 0, intermediate = 0, vocab = 0;
  std::vector<int> layer_is_full;  // 1 = gated full attention, 0 = Gated DeltaNet
  int64_t n_heads = 0, n_kv_heads = 0, head_dim = 0, rotary_dim = 0;
  int64_t lin_k_heads = 0, lin_k_dim = 0, lin_v_heads = 0, lin_v_dim = 0, conv_kernel = 4;
  int64_t vision_hidden = 0, vision_intermediate = 0, vision_params = 0, vision_merge = 4;

  int64_t lin_q_dim() const { return lin_k_heads * lin_k_dim; }
  int64_t lin_v_total() const { return lin_v_heads * lin_v_dim; }
  int64_t conv_dim() const { return 2 * lin_q_dim() + lin_v_total(); }
  // Rows of the fused GDN input projection: qkv | z | b | a.
  int64_t gdn_in_rows() const { return conv_dim() + lin_v_total() + 2 * lin_v_heads; }
  // Rows of the fused attention input projection: q (with gate, 2 x head_dim per head) | k | v.
  int64_t attn_qkv_rows() const { return 2 * n_heads * head_dim + 2 * n_kv_heads * head_dim; }
  // The tail segments a recipe may store in their own format: GDN b | a, attention k | v.
  int64_t gdn_in_tail_rows() const { return 2 * lin_v_heads; }
  int64_t attn_qkv_tail_rows() const { return 2 * n_kv_heads * head_dim; }
  int n_full() const;
  int n_linear() const { return static_cast<int>(n_layers) - n_full(); }
};

// Groupwise symmetric integer format of one matrix role (bits in {4,5,6,8}, group in {32,64}).
struct QuantSpec {
  int bits = 4;
  int group = 64;
  bool operator==(const QuantSpec& o) const { return bits == o.bits && group == o.group; }
  bool operator!=(const QuantSpec& o) const { return !(*this == o); }
};

// The matrix roles of the recipe. Fused roles are stored as one device matrix, except that GDN_IN and
// ATTN_QKV may keep their last rows (the tail: GDN b | a, attention k | v) in a format of their own,
// so that an artifact's 8-bit a/b and 6-bit k/v are held as stored. MLP_GATE_UP has no tail: its
// gate and up rows are interleaved pairs for the SwiGLU epilogue.
enum Role : int { EMBED = 0, LM_HEAD, GDN_IN, GDN_OUT, ATTN_QKV, ATTN_O, MLP_GATE_UP, MLP_DOWN, N_ROLES };
// The MTP head's fc ([hidden, 2 hidden]) as a load_matrix role. It is not a recipe role: it takes attn_qkv's head
// format (an input projection of normalised activations), and the MTP layer takes its roles' formats.
constexpr int kMtpFcRole = N_ROLES;
const char* role_name(int role);     // also "mtp_fc" for kMtpFcRole
int role_index(const std::string& name);  // -1 when no role has this name; kMtpFcRole for "mtp_fc"
bool role_has_tail(int role);
// Rows of `role`'s tail segment (0 for a role without one).
int64_t role_tail_rows(const ModelDims& d, int role);
// What the head and tail rows of a split role hold ("qkv|z" / "b|a", "q" / "k|v"): plan line names.
const char* role_head_label(int role);
const char* role_tail_label(int role);

// KV cache formats; the values are the attention kernels' KvFormat (csrc/cuda/ops.h). Group 64 formats keep
// one fp16 scale per 64 dims of a (position, kv head) row beside the codes.
enum class KvDtype : int { BF16 = 0, INT8G64 = 1, INT4G64 = 2 };
// Bytes of the codes of `elems` cached elements (bf16 2, int8 1, int4 1/2 per element) and of their fp16
// group-64 scales (none for bf16). elems is a multiple of 64.
int64_t kv_code_bytes(KvDtype kv, int64_t elems);
int64_t kv_scale_bytes(KvDtype kv, int64_t elems);

struct EngineShape {
  int64_t max_context = 4096;   // per sequence
  int64_t kv_capacity = 4096;   // tokens in the shared KV pool (>= max_lanes * max_context for now)
  KvDtype kv = KvDtype::INT8G64;
  int64_t max_lanes = 1;        // concurrent sequences (GDN state slots)
  int64_t max_step_tokens = 1;  // T of a decode/verify step (speculative window + 1), <= 16
  // Drafts of a speculative round (0: no speculation). Above 0 the engine holds the MTP head (its weights and its
  // one attention layer's KV) and the recurrent state after each draft position of a verify step (checkpoints), so
  // that a rejected draft costs no recomputation. At most max_step_tokens - 1.
  int64_t mtp_drafts = 0;
  int64_t prefill_chunk = 0;    // 0: prefill goes through the decode path
  int64_t vision_max_tokens = 0;  // 0: vision off; else LLM tokens of the largest image
  int64_t graph_allowance = 0;  // bytes held back for instantiated CUDA graphs
  int64_t margin = 0;           // bytes left free for the driver, fragmentation, etc.
  QuantSpec recipe[N_ROLES];
  // Format of a role's tail rows; unset (or equal to recipe[role]) keeps the role one matrix.
  std::optional<QuantSpec> recipe_tail[N_ROLES];

  QuantSpec tail_spec(int role) const { return recipe_tail[role].value_or(recipe[role]); }
  bool split(int role) const { return tail_spec(role) != recipe[role]; }
};

// Attention split-K: at most this many chunks of the context per (kv head, token).
constexpr int64_t kMaxAttnSplits = 128;
// Splits of K the tensor-core GEMV of T = 2..16 tokens may use (csrc/cuda/qgemv_mma.cuh kMaxSplits).
constexpr int64_t kMaxGemvSplits = 16;
constexpr int64_t kMaxStepTokens = 16;

struct Allocation {
  std::string name;
  std::string category;  // "weights:<role>", "weights:small", "kv", "gdn_state", "conv_state", ...
  int64_t bytes = 0;
  int64_t align = 256;
  int64_t offset = 0;
};

// Bump allocator over one block. A dry arena has base == nullptr and only records.
class Arena {
 public:
  explicit Arena(char* base = nullptr) : base_(base) {}
  char* take(const std::string& name, const std::string& category, int64_t bytes, int64_t align = 256);
  int64_t used() const { return used_; }
  const std::vector<Allocation>& log() const { return log_; }
  bool dry() const { return base_ == nullptr; }
  // Moves the quantized matrices taken since log entry `first` to another plan line (the MTP head's own line).
  void recategorize_matrices(size_t first, const std::string& category);

 private:
  char* base_;
  int64_t used_ = 0;
  std::vector<Allocation> log_;
};

// One quantized matrix in device memory (canonical layout: codes, optional high bits, fp16 scales).
struct QMatrix {
  char* codes = nullptr;
  char* high = nullptr;
  char* scales = nullptr;
  int64_t rows = 0, cols = 0;
  QuantSpec q;
};
int64_t qmatrix_code_bytes(int64_t rows, int64_t cols, int bits);
int64_t qmatrix_high_bytes(int64_t rows, int64_t cols, int bits);
int64_t qmatrix_scale_bytes(int64_t rows, int64_t cols, int group);

// A projection held as one quantized matrix, or as two over consecutive rows when its recipe gives
// the tail rows another format: `head` holds rows [0, head.rows), `tail` the remaining ones
// (tail.rows == 0 when unsplit). Both write the same output rows, the tail from column head.rows on.
struct SplitQMatrix {
  QMatrix head, tail;
  int64_t rows() const { return head.rows + tail.rows; }
  bool split() const { return tail.rows > 0; }
};

struct LayerBuffers {
  bool full = false;
  float* input_norm = nullptr;  // [hidden]
  float* post_norm = nullptr;   // [hidden]
  SplitQMatrix mixer_in;  // GDN: qkv | z | b | a; attention: q (with gate) | k | v
  QMatrix mixer_out, gate_up, down;
  // GDN
  float* conv_w = nullptr;   // [conv_dim, kernel]
  float* a_log = nullptr;    // [v_heads]
  float* dt_bias = nullptr;  // [v_heads]
  float* gdn_norm = nullptr;  // [v_dim]
  int gdn_index = -1;        // index among GDN layers (state slot)
  // attention
  float* q_norm = nullptr;  // [head_dim]
  float* k_norm = nullptr;  // [head_dim]
  int attn_index = -1;      // index among attention layers (KV pool slot)
  char* k_cache = nullptr;  // [capacity, kv_heads, head_dim] bf16 or int8; int4: [capacity, kv_heads, head_dim / 2]
  char* v_cache = nullptr;
  char* k_scales = nullptr;  // int8 / int4 only: [capacity, kv_heads, head_dim/64] fp16
  char* v_scales = nullptr;
};

// Pointers into the step workspace (sized for max_step_tokens).
struct StepWorkspace {
  char* inputs = nullptr;      // StepInputs (device copy)
  float* resid = nullptr;      // [T, hidden] residual stream
  char* xin = nullptr;         // [T, max(hidden, ...)] fp16 GEMV input (permuted)
  char* act = nullptr;         // [T, intermediate] fp16 SwiGLU output (permuted)
  char* mix = nullptr;         // [T, max(v_dim, heads*head_dim)] fp16 mixer output (permuted)
  float* proj = nullptr;       // [T, max(gdn_in_rows, attn_qkv_rows)]
  float* conv_out = nullptr;   // [T, conv_dim]
  float* q = nullptr;          // [T, heads, head_dim] normed, rotated, scaled query
  float* attn_part = nullptr;  // [T, heads, kMaxAttnSplits, head_dim + 2]
  float* logits = nullptr;     // [T, vocab]
  char* sampler = nullptr;     // sampler scratch
  int32_t* out_tokens = nullptr;  // [T]
  float* gemv_part = nullptr;  // [kMaxGemvSplits, min(T, 16), hidden] the tensor-core GEMV's split-K partials (T > 1)
  int64_t gemv_part_floats = 0;
  int64_t bytes = 0;
};

// The prefill chunk's view of the workspace: the step workspace carved for `chunk` tokens (it aliases
// the decode/verify layout, which is carved at the same base) plus what only prefill uses.
struct PrefillWorkspace {
  int64_t chunk = 0;               // 0: no prefill path (prompts go through the decode step)
  StepWorkspace step;
  int32_t* tokens = nullptr;       // [chunk]
  int32_t* pos3 = nullptr;         // [chunk, 3] mRoPE positions
  char* gdn_scratch = nullptr;     // chunked GDN scratch
  int64_t gdn_scratch_bytes = 0;
  char* gemm_dequant = nullptr;    // fp16 slice of a dequantized weight (GEMM path)
  int64_t gemm_dequant_bytes = 0;
  char* cublas = nullptr;          // cuBLAS workspace
  int64_t cublas_bytes = 0;
};

// Fixed sizes of the GEMM path's device memory: a 64 MiB dequantization slice (gate_up of the 27B is
// 356 MB in fp16, so it runs in 6 slices; each slice is still a large GEMM) and cuBLAS's workspace.
constexpr int64_t kGemmDequantBytes = 64ll << 20;
constexpr int64_t kCublasWorkspaceBytes = 32ll << 20;

// Device scratch the chunked GDN prefill (csrc/cuda/gdn_chunk.cu) may use for T tokens; the kernel
// checks that its own need is within this.
int64_t gdn_prefill_scratch_reserve(const ModelDims& d, int64_t T);

// The multi-token-prediction head (shape.mtp_drafts > 0): h' = fc([norm_e(embed(token_{t+1})) | norm_h(h_t)]), one
// full-attention layer with its own KV (slot i pairs the trunk's hidden at position i with the token after it), then
// lm_head(norm(h')). The head reads the trunk's residual rows of the last step (hidden, before the final norm),
// or, for a chained draft, its own last output row (chain).
struct MtpBuffers {
  bool on = false;
  QMatrix fc;
  float* norm_embedding = nullptr;  // mtp.pre_fc_norm_embedding [hidden]
  float* norm_hidden = nullptr;     // mtp.pre_fc_norm_hidden [hidden]
  float* norm = nullptr;            // mtp.norm [hidden]
  LayerBuffers layer;               // mtp.layers.0 (full attention; attn_index = the trunk's attention layer count)
  float* hidden = nullptr;          // [lanes, max_step_tokens, hidden] the last step's residual rows (pre final norm)
  float* chain = nullptr;           // [hidden] the head's last output row (pre mtp.norm), a chained draft's input
};

struct EngineBuffers {
  std::vector<LayerBuffers> layers;
  MtpBuffers mtp;
  float* final_norm = nullptr;
  QMatrix embed, lm_head;
  char* vision_weights = nullptr;
  float* gdn_state = nullptr;   // [lanes, n_linear, v_heads, k_dim, v_dim]
  float* conv_state = nullptr;  // [lanes, n_linear, conv_dim, kernel]: a ring, position p in slot p mod kernel
  int32_t* token_counts = nullptr;  // [lanes, vocab] for repetition penalties
  char* lane_meta = nullptr;        // [lanes] LaneMeta
  // mtp_drafts images of one lane's recurrent state, each laid out as NativeEngine::lane_state_regions (every GDN
  // layer's state, then every conv ring): image t is the state after token t of a verify step (keep_states), so
  // that accepting t + 1 of its tokens is a copy. One set for all lanes: a verify is committed before the next step.
  float* spec_ckpt = nullptr;
  StepWorkspace ws;
  PrefillWorkspace pre;
};

constexpr int64_t kLaneMetaBytes = 256;

// The whole sequence: weights, KV pool, recurrent state, workspaces, graph allowance, margin.
// Throws std::invalid_argument on impossible shapes.
EngineBuffers allocate_engine(Arena& arena, const ModelDims& dims, const EngineShape& shape);

// Bytes of the step workspace for T tokens with `logit_rows` rows of logits (sub-sequence of
// allocate_engine, exposed so the plan can show decode, prefill and vision needs separately).
int64_t step_workspace_bytes(const ModelDims& dims, int64_t tokens, int64_t logit_rows);
int64_t vision_workspace_bytes(const ModelDims& dims, int64_t vision_tokens);
int64_t prefill_workspace_bytes(const ModelDims& dims, int64_t chunk);

}  // namespace monorail
