// The native decode engine: one device arena holding exactly the memory plan, weights loaded into
// it, and the decode step (T = 1..16 tokens of one lane) as a sequence of ops, captured as a CUDA
// graph per (lane, T) on first use.
#pragma once
#include <functional>
#include <map>
#include <utility>
#include <vector>

#include "../alloc_sequence.h"
#include "ops.h"

namespace monorail {

struct BudgetError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

struct RopeSpec {
  float theta = 1e7f;
  int mrope_section[3] = {11, 11, 10};
  std::vector<float> inv_freq;  // rotary_dim / 2 entries; empty: theta^(-2i/rotary_dim)
};

class NativeEngine {
 public:
  NativeEngine(const ModelDims& dims, const EngineShape& shape, int64_t budget_bytes, float eps, const RopeSpec& rope);
  ~NativeEngine();
  NativeEngine(const NativeEngine&) = delete;
  NativeEngine& operator=(const NativeEngine&) = delete;

  // Weights. Matrix rows land at dst row = row_offset + r * row_stride of the role's rows (counted over
  // the whole fused role: rows of a split role's tail go to its tail matrix, in the tail's format).
  // The byte counts are the host arrays' sizes, checked against the destination's format.
  void load_matrix(int role, int layer, int64_t row_offset, int64_t row_stride, int64_t rows, const void* codes,
                   int64_t codes_bytes, const void* high, int64_t high_bytes, const void* scales,
                   int64_t scales_bytes);
  // kind: input_norm, post_norm, conv_w, a_log, dt_bias, gdn_norm, q_norm, k_norm, final_norm
  void load_vector(const std::string& kind, int layer, const float* data, int64_t n);
  void randomize(uint64_t seed);

  void reset_lane(int lane);
  // A lane's recurrent state (every GDN layer's state, then every conv ring) copied to or from host memory:
  // the snapshot a continuing conversation resumes from. The KV cache needs no copy: the slots below the
  // snapshot's position stay as written until the lane is reset for another sequence (the caller's rule).
  int64_t lane_state_floats() const;
  void save_lane_state(int lane, float* host, int64_t n);
  void load_lane_state(int lane, const float* host, int64_t n);
  // A lane's first n_tokens KV slots of every attention layer (per layer: K codes, V codes, then K and V scales
  // where the format has them) copied to or from host memory, for a snapshot that must outlive the lane serving
  // another sequence (a conversation the user left and comes back to).
  int64_t lane_kv_bytes(int n_tokens) const;
  void save_lane_kv(int lane, int n_tokens, uint8_t* host, int64_t nbytes);
  void load_lane_kv(int lane, int n_tokens, const uint8_t* host, int64_t nbytes);
  // The sampler's penalty counts: generated ids (+1 each), or prompt ids (marked seen; in_prompt).
  void count_tokens(int lane, const std::vector<int32_t>& ids, bool in_prompt = false, bool remove = false);
  // Runs T = tokens.size() tokens of `lane` whose first token goes to cache slot kv_start.
  // rope_pos: T x 3 (t, h, w) positions; empty means text positions kv_start + i on all axes.
  // keep_states (a speculative verify step, 2 <= T <= mtp_drafts + 1): the step also keeps the lane's recurrent
  // state after each of its first T - 1 tokens (checkpoints), so that commit_states can settle on any prefix.
  void forward(int lane, const std::vector<int32_t>& tokens, const std::vector<int32_t>& rope_pos, int kv_start,
               bool keep_states = false);
  // After a keep_states forward of T tokens (the last forward: any other forward, prefill, decode loop or change of
  // the lane's state forgets its checkpoints): makes the lane's recurrent state the one after its first `kept`
  // tokens, 1 <= kept <= T. The KV cache needs nothing: the slots past the kept tokens are rewritten before any
  // step reads them. Once per verify step.
  void commit_states(int lane, int kept);
  // The MTP head (shape mtp_drafts > 0) over T pairs: the lane's hidden rows hidden_row .. hidden_row + T - 1 of its
  // last forward (or row 0 after a prefill: the prompt's last position), each with the token that follows it
  // (next_tokens), at the head's cache slots kv_start .. (the pairs' positions; rope_pos as in forward). chained: one
  // pair on the head's own last output instead (a second draft from the first). Logits rows 0 .. T - 1 as forward's;
  // sample() draws from them.
  void mtp_step(int lane, const std::vector<int32_t>& next_tokens, const std::vector<int32_t>& rope_pos, int kv_start,
                int hidden_row, bool chained);
  bool has_mtp() const { return buf_.mtp.on; }
  // Rows first_row .. first_row + rows - 1 of the lane's MTP hidden rows (the trunk's residual rows of its last step,
  // the inputs of the head's pending pairs) copied to / from host memory [rows, hidden] fp32: a snapshot keeps the
  // pairs its sequence left pending, so that a resumed sequence's head misses no position.
  void save_mtp_hidden(int lane, int first_row, int rows, float* host);
  void load_mtp_hidden(int lane, int first_row, int rows, const float* host);
  // Prefill: any number of tokens of `lane` from cache slot kv_start, in chunks of the planned
  // prefill_chunk (GEMMs on tensor cores, chunked GDN, flash attention), no graph, no allocation.
  // Leaves the last token's logits in row 0 (logits(1)) and the step inputs set so that sample(lane, 1)
  // draws exactly as after a decode step of that token.
  void prefill(int lane, const std::vector<int32_t>& tokens, const std::vector<int32_t>& rope_pos, int kv_start);
  int64_t prefill_chunk() const { return buf_.pre.chunk; }
  std::vector<float> logits(int T);
  // One token from each of the T logit rows first_row .. first_row + T - 1 of the last forward; row first_row + t
  // draws with index draw + t. (A speculative round draws only the MTP head's last row of several.)
  std::vector<int32_t> sample(int lane, int T, const SamplingParams& p, int64_t draw = 0, int first_row = 0);

  // The decode loop on the device: each token is sampled on the GPU and becomes the next step's input
  // there, so the host only reads tokens (from mapped host memory) and can keep steps queued ahead of
  // them. decode_start samples token 0 from logits row `logits_row` of the last forward (or prefill)
  // with draw index `draw`; the step of that token will use cache slot kv_next. Each decode_push
  // queues one step of the last sampled token and the draw after it (the step and the draw are one
  // CUDA graph per lane). decode_token(k) waits for draw k of this loop (k < pushes + 1) and returns
  // it (-1: the logits held NaN / +inf, or nothing could be drawn). decode_stop waits for the queue
  // and returns the lane's cache length: kv_next + the steps run. forward, prefill and sample refuse
  // while a loop runs. At most kLoopRing draws may be queued past the last one read.
  static constexpr int kLoopRing = 64;
  void decode_start(int lane, int logits_row, int kv_next, const SamplingParams& p, int64_t draw);
  void decode_push();
  int32_t decode_token(int64_t k);
  int64_t decode_stop();
  bool decode_running() const { return loop_.active; }
  void set_use_graphs(bool on) { use_graphs_ = on; }
  // Benchmark-only: leave op classes out of the step (1 rmsnorm, 2 conv, 4 gdn_step, 8 attention,
  // 16 MLP GEMVs, 32 mixer GEMVs) to read each class's in-graph cost as a difference. Output is wrong.
  void set_skip_mask(int m);
  // Drop the captured graphs (after switching a kernel variant); they are recaptured on next use.
  void reset_graphs();
  void synchronize();
  // Timing: replays the captured T=1 step n times (same inputs), returns milliseconds per step.
  float time_steps(int lane, int kv_start, int n);
  // Runs one un-captured T=1 step with an event after every op: (op name, milliseconds) in order.
  std::vector<std::pair<std::string, float>> profile_step(int lane, int kv_start);

  int64_t arena_bytes() const { return arena_bytes_; }
  int64_t planned_total() const { return planned_total_; }
  const std::vector<Allocation>& plan_log() const { return plan_log_; }
  const ModelDims& dims() const { return dims_; }
  const EngineShape& shape() const { return shape_; }
  // Bytes a T=1 step reads at context length `ctx` (weights streamed + state + KV).
  int64_t step_bytes(int64_t ctx) const;

 private:
  // One layer's per-lane state: GDN conv and recurrent state (GDN layers), K/V cache rows (attention layers).
  struct LaneLayer {
    float* conv_state = nullptr;
    float* gdn_state = nullptr;
    char *k_cache = nullptr, *v_cache = nullptr, *k_scales = nullptr, *v_scales = nullptr;
  };
  LaneLayer lane_layer(const LayerBuffers& L, int lane) const;
  // save_lane_kv / load_lane_kv: each attention layer's regions of a lane's first n_tokens slots, in copy order (the
  // MTP head's layer last, when the engine holds it).
  struct KvRegion {
    char* device;
    int64_t bytes;
  };
  std::vector<KvRegion> lane_kv_regions(int lane, int n_tokens, int64_t nbytes, const char* op) const;
  // A lane's recurrent state: every GDN layer's state, then every conv ring (save/load_lane_state).
  struct LaneStateRegions {
    float* gdn;
    int64_t gdn_floats;
    float* conv;
    int64_t conv_floats;
  };
  LaneStateRegions lane_state_regions(int lane) const;
  // Checkpoint image t of a verify step (EngineBuffers::spec_ckpt), in lane_state_regions' layout.
  LaneStateRegions checkpoint_regions(int t) const;
  void forget_checkpoints() { kept_ = KeptStates{}; }
  LaneStateRegions lane_state_for_copy(int lane, int64_t n, const char* op) const;
  GdnDims gdn_dims() const;
  AttnDims attn_dims() const;
  // keep_hidden: copy the residual rows to the lane's MTP hidden rows (forward; the decode loop does not);
  // keep_states: write the verify checkpoints (forward's keep_states)
  void enqueue_step(int lane, int T, bool keep_hidden = false, bool keep_states = false);
  void enqueue_attention_mixer(const LayerBuffers& L, int lane, int T);
  void enqueue_mlp(const LayerBuffers& L, int T);
  void enqueue_mtp(int lane, int T, int hidden_row, bool chained);
  float* mtp_hidden_rows(int lane) const;
  void prefill_attention_mixer(const LayerBuffers& L, int lane, int T, int kv_start);
  void prefill_mlp(const LayerBuffers& L, int T);
  // The MTP head over a prefill chunk's T pairs (the chunk's residual rows, the prompt's next tokens in pre.tokens).
  void enqueue_prefill_mtp(int lane, int T, int kv_start);
  void enqueue_prefill_chunk(int lane, int T, int kv_start);
  // y = W x for T tokens: the GEMV for T <= 16, the GEMM (prefill workspace) above.
  void matmul(const QMatrix& W, const __half* x, int T, int epilogue, float* out_f32, __half* out_h, int ldo,
              float* gemm_scratch, int64_t gemm_scratch_bytes);
  // out[:, 0:rows) = W x for a projection held as one or two row segments (GEMV_STORE): each segment
  // writes its own columns of the same output rows, the tail from column head.rows on.
  void matmul_store(const SplitQMatrix& W, const __half* x, int T, float* out, int ldo);
  void normed_store(const SplitQMatrix& W, const float* norm_w, int T, float* out, int ldo);
  void upload_inputs(cudaStream_t st);
  void stage_step_inputs(const char* op, int lane, const std::vector<int32_t>& tokens,
                         const std::vector<int32_t>& rope_pos, int kv_start);
  LayerBuffers& layer_at(int layer);  // n_layers: the MTP head's layer
  LayerBuffers& layer_of(int role, int layer);
  // The device matrix holding row `row` of a role; `row` becomes that row's index inside it.
  QMatrix& segment_of(int role, int layer, int64_t& row);

  ModelDims dims_;
  EngineShape shape_;
  float eps_;
  int64_t arena_bytes_ = 0, planned_total_ = 0;
  std::vector<Allocation> plan_log_;
  char* arena_ = nullptr;
  EngineBuffers buf_;
  cudaStream_t stream_ = nullptr;
  StepInputs* host_inputs_ = nullptr;  // pinned; write it only through inputs_for_write()
  cudaEvent_t inputs_copied_ = nullptr;  // recorded after each upload of host_inputs_
  // The pinned step-inputs page, once the device has copied its previous contents: an asynchronous
  // copy reads pinned memory when the stream reaches it, so writing the page earlier would change the
  // inputs of a step still queued (back-to-back forward calls with no readback in between).
  StepInputs* inputs_for_write();
  float* inv_freq_dev_ = nullptr;      // in the arena's small-weights? kept separate: 32 floats, see .cu
  int mrope_section_[3];
  bool use_graphs_ = true;
  int skip_ = 0;
  // (lane, T); (lane, 0): the decode loop's step + draw; (lane, -T): a verify step that keeps checkpoints
  std::map<std::pair<int, int>, cudaGraphExec_t> graphs_;
  // The verify step whose checkpoints commit_states may still use (T = 0: none).
  struct KeptStates {
    int lane = -1, T = 0;
  } kept_;
  struct DecodeLoop {
    bool active = false;
    int lane = 0;
    int64_t kv_next = 0, draw0 = 0;
    int64_t draws = 0;  // draws queued (decode_start's and one per push)
    int64_t read = 0;   // draws read by decode_token
  } loop_;
  int32_t* ring_host_ = nullptr;  // mapped pinned host memory, kLoopRing tokens
  int32_t* ring_dev_ = nullptr;   // its device address
  cudaEvent_t ring_events_[kLoopRing] = {};
  void refuse_while_looping(const char* op) const;
  void record_draw_event();
  // The decode loop's draw from one row of logits: the token becomes the next step's input (sample_tokens' advance).
  void enqueue_loop_draw(const float* logits_row);
  // The graph captured for `key` (capturing enqueue() on first use).
  cudaGraphExec_t captured(std::pair<int, int> key, const std::function<void()>& enqueue);
  std::vector<std::pair<std::string, cudaEvent_t>>* trace_ = nullptr;  // set only by profile_step
  void mark(const char* op);
};

}  // namespace monorail
