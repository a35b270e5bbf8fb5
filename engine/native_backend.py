"""NativeModel: the CUDA engine (engine._native.NativeEngine) behind the reference model's API.

    model = NativeModel.from_checkpoint(path_or_ckpt, kv_dtype="int8", max_context=32768,
                                        vram_budget_bytes=24 << 30, recipe=DEFAULT_RECIPE)
    # kv_dtype: "bf16", "int8" (group 64) or "int4" (group 64, two codes per byte): engine.plan.KV_DTYPES
    state = model.new_state(max_tokens)            # a lane of the engine
    out = model.forward(input_ids, state)          # out.logits: [T, V] fp32 (CPU)
    ids = model.sample(state, temperature=0.7, top_p=0.9, seed=1)
    # a speculative verify step (a model made with mtp_drafts=k): the last token and up to k drafts, then the
    # recurrent state after the first `kept` of them (the KV needs nothing) and seq_len = the step's start + kept
    out = model.forward(torch.tensor([last, *drafts]), state, keep_states=True)
    model.commit(state, kept)
    for token in model.decode_tokens(state, params, seed=1, vocab_limit=V):   # engine.native_loop
        ...

Weights are quantized at load time with engine.quant (round-to-nearest, the recipe's format per
role) unless an artifact stores them in the recipe's format, and uploaded in the canonical layout.
From an artifact the recipe is the artifact's own formats (``recipe_from_artifact``, engine/native_recipe.py): the fused GDN
and attention input projections keep their b|a and k|v rows in their stored formats as a second
device matrix, so nothing the converter chose is re-quantized;
the engine's arena is allocated once, from the memory plan, before any weight is uploaded.
A forward of more than 16 tokens that needs only the last position's logits (a prompt) runs
through the engine's prefill path (tensor-core GEMMs, chunked GDN, flash attention) in chunks of
the planned ``prefill_chunk``; steps of up to 16 tokens (decode, speculative verify) and requests
for every position's logits go through the decode step. ``NativeModel.random_27b`` builds the
real 27B shapes with random weights generated on the GPU, for benchmarks.
"""

from __future__ import annotations

import weakref
from dataclasses import dataclass, field, replace
from typing import Callable

import numpy as np

from engine.config import ModelConfig, TextConfig
from engine.errors import NativeBackendError
from engine.native_recipe import NATIVE_TAIL_MEMBERS, native_weight, recipe_from_artifact
from engine.plan import (DEFAULT_MARGIN, DEFAULT_RECIPE, KV_DTYPES, PREFILL_CHUNK_CHOICES, PlanRequest, Recipe,
                         fit_prefill_chunk, make_plan, model_dims)

ProgressFn = Callable[[float, str], None]
STEP_TOKENS = 16  # tokens per engine step (the verify width)
# What Engine (engine.api) sets NativeModel.step_path_max_tokens to: a short input (a user's question, the generation
# prompt after a resumed history) runs as a few steps rather than one prefill call, whose fixed cost was ~0.1 s at
# 32K of context and ~0.2 s at 128K for a 20-token input on an H100 (its attention is not split over the cache for a
# few queries; bench/results/prefix-reuse-h100-s37-call2.json, turn 2 against regenerate).
CHAT_STEP_PATH_MAX_TOKENS = 8 * STEP_TOKENS
# Prefill chunk: None = the largest of plan.PREFILL_CHUNK_CHOICES that the budget fits (fit_prefill_chunk).
DEFAULT_PREFILL_CHUNK = None


def launch_plan(config: ModelConfig, *, kv_dtype: str, max_context: int, vram_budget_bytes: int | None,
                free_bytes: int | None, recipe: Recipe = DEFAULT_RECIPE, lanes: int = 1,
                step_tokens: int = STEP_TOKENS, margin: int = DEFAULT_MARGIN,
                prefill_chunk: int | None = DEFAULT_PREFILL_CHUNK, mtp_drafts: int = 0):
    """The plan the native engine launches with, as (PlanRequest, MemoryPlan); one function so that the app's
    "Show memory plan" (engine/worker.py) shows the very plan a load would use.

    With a budget, the margin is a line of the plan; without one, the budget is the device's free memory less
    the margin (``free_bytes``: cudaMemGetInfo in the engine, NVML in the worker, which makes no CUDA
    context), or PlanRequest's default card when neither is known. The vision tower is not planned: the
    native engine does not run it yet."""
    if vram_budget_bytes:
        budget, planned_margin = vram_budget_bytes, margin
    elif free_bytes is not None:
        budget, planned_margin = max(0, free_bytes - margin), 0
    else:
        budget, planned_margin = PlanRequest.vram_budget, margin
    req = PlanRequest(max_context=max_context, kv_dtype=kv_dtype, max_concurrency=lanes,
                      speculative_window=step_tokens - 1, mtp_drafts=mtp_drafts, vram_budget=budget, recipe=recipe,
                      margin=planned_margin,
                      prefill_chunk=PREFILL_CHUNK_CHOICES[-1] if prefill_chunk is None else prefill_chunk)
    if prefill_chunk is None:
        req = fit_prefill_chunk(config, req)
    return req, make_plan(config, req)


def planned_mtp_drafts(config: ModelConfig, speculation: bool, drafts: int) -> int:
    """Drafts the native plan holds the MTP head and verify checkpoints for: the requested drafts a round where
    replies may draft (EngineOptions.mtp_speculation), the model has a head and verify steps pay
    (engine.native.verify_steps_pay), else 0 (no device memory for it)."""
    from engine import native
    return drafts if speculation and _text(config).mtp_num_hidden_layers and native.verify_steps_pay() else 0


@dataclass(eq=False)
class NativeState:
    """One sequence: its lane of the engine and how many tokens it has consumed.

    A lane goes back to the engine when the state is released or garbage-collected; when every lane
    is taken, a new sequence takes the oldest one and the older state is revoked (its next forward
    raises), so a caller that simply drops states never runs out of lanes."""
    lane: int
    max_tokens: int
    seq_len: int = 0
    rope_delta: int = 0
    revoked: bool = False
    # MTP head (engine planned with mtp_drafts): the last step's positions not yet paired with their next token in the
    # head's cache, as (first hidden row, cache slot of that row, next tokens known so far); the first token sampled
    # after them closes the last pair (NativeModel.mtp_draft). None: nothing pending (or no head).
    mtp_pending: "tuple[int, int, list[int]] | None" = None
    _model: "NativeModel | None" = field(default=None, repr=False)


# The byte layout of a lane's saved KV and recurrent state (NativeEngine.save_lane_kv / save_lane_state): bump it
# whenever either changes, so that states saved on disk by an older build are not loaded (engine.prefix_store).
SAVED_STATE_LAYOUT = 2


@dataclass(eq=False)
class NativeSnapshot:
    """A sequence's state at a prompt position, to resume a later prompt that starts with the same tokens
    (engine.api's prefix reuse): the lane's recurrent state in host memory (GDN + conv rings: 151 MB for the
    27B), and the lane's KV slots below ``seq_len``, left on the device. Those stay valid while the lane is not
    given to a fresh sequence: ``epoch`` is the lane's claim count when the snapshot was taken. A detached
    snapshot (NativeModel.detach) holds a host copy of those KV slots too and resumes on any lane, any time."""
    lane: int
    epoch: int
    seq_len: int
    rope_delta: int
    recurrent: "object" = field(repr=False)  # numpy float32 [engine.lane_state_floats()]
    kv: "object | None" = field(default=None, repr=False)  # numpy uint8 [engine.lane_kv_bytes(seq_len)] once detached
    # With the MTP head: the pairs the sequence left pending (NativeState.mtp_pending's slot and tokens) and their
    # hidden rows (numpy float32 [pairs, hidden]), so that a resumed sequence's head closes them as the original would
    mtp_pending: "tuple[int, list[int]] | None" = None
    mtp_hidden: "object | None" = field(default=None, repr=False)


@dataclass
class NativeOutput:
    logits: "object"  # torch.Tensor [T, V] fp32 on the CPU
    hidden: None = None


def _text(cfg: ModelConfig | TextConfig) -> TextConfig:
    return cfg.text if isinstance(cfg, ModelConfig) else cfg


def _upload_attention(t: TextConfig, src, matrix, vec, layer: int, a: str) -> None:
    """A full-attention layer's q|k|v rows (per head [q | gate]), o_proj and q/k norms (``a``: its key prefix), through
    NativeModel._load_weights' upload functions."""
    q_rows = t.num_attention_heads * t.head_dim * 2
    k_rows = t.num_key_value_heads * t.head_dim
    matrix("attn_qkv", layer, a + "q_proj.weight", 0)
    matrix("attn_qkv", layer, a + "k_proj.weight", q_rows)
    matrix("attn_qkv", layer, a + "v_proj.weight", q_rows + k_rows)
    matrix("attn_o", layer, a + "o_proj.weight")
    vec("q_norm", layer, src.text(a + "q_norm.weight"))
    vec("k_norm", layer, src.text(a + "k_norm.weight"))


def _upload_mlp(matrix, layer: int, m: str) -> None:
    matrix("mlp_gate_up", layer, m + "gate_proj.weight", 0, 2)  # rows interleaved gate/up
    matrix("mlp_gate_up", layer, m + "up_proj.weight", 1, 2)
    matrix("mlp_down", layer, m + "down_proj.weight")


def _np(t, dtype=None):
    a = t.detach().cpu().contiguous().numpy()
    return a if dtype is None else a.view(dtype)


class NativeModel:
    def __init__(self, config: ModelConfig, engine, plan, *, max_context: int, kv_dtype: str, lanes: int,
                 step_tokens: int = STEP_TOKENS, mtp_drafts: int = 0):
        self.config = config
        self.step_tokens = step_tokens   # the widest step the engine was planned for (forward's short chunks)
        self.mtp_drafts = mtp_drafts     # drafts a verify step may carry (forward(keep_states=True) runs 2..k + 1)
        # the last forward when it kept checkpoints: (its state, seq_len before it, its tokens), for commit
        self._verify: tuple["weakref.ref[NativeState]", int, list[int]] | None = None
        # forward(last_only=True) runs inputs longer than this through the prefill path (when planned), shorter
        # ones as steps of step_tokens; Engine raises it to CHAT_STEP_PATH_MAX_TOKENS
        self.step_path_max_tokens = step_tokens
        self.engine = engine
        self.plan = plan
        self.max_context = max_context
        self.kv_dtype = kv_dtype
        self.recipe: Recipe | None = None   # the weights' formats (from_checkpoint); part of a saved state's identity
        self._free_lanes = list(range(lanes))
        self._owners: dict[int, "weakref.ref[NativeState]"] = {}  # lane -> state, oldest first
        self._lane_epoch = [0] * lanes  # fresh claims of each lane (a snapshot is valid within one)
        self.device = "cuda"

    # ---- construction ------------------------------------------------------------------------
    @staticmethod
    def _make_engine(config: ModelConfig, *, kv_dtype: str, max_context: int, vram_budget_bytes: int | None,
                     recipe: Recipe, lanes: int, step_tokens: int, margin: int,
                     prefill_chunk: int | None = DEFAULT_PREFILL_CHUNK, mtp_drafts: int = 0):
        from engine.native import load_native, native_status
        if kv_dtype not in KV_DTYPES:  # before the device check: a bad option is the caller's error on any machine
            raise NativeBackendError(f"kv_dtype {kv_dtype!r} is not a KV format of the native engine "
                                     f"({', '.join(KV_DTYPES)})")
        if mtp_drafts and not config.text.mtp_num_hidden_layers:
            raise NativeBackendError("this model has no MTP head (mtp_num_hidden_layers = 0): load it with mtp_drafts=0")
        if not 0 <= mtp_drafts < step_tokens:
            raise NativeBackendError(f"mtp_drafts must be in 0..{step_tokens - 1} (a verify step runs the drafts + 1)")
        st = native_status()
        if not st.gpu_usable:
            raise NativeBackendError(f"the native backend needs a CUDA GPU: {st.reason}")
        native = load_native()
        free, _total = native.device_memory()
        req, plan = launch_plan(config, kv_dtype=kv_dtype, max_context=max_context,
                                vram_budget_bytes=vram_budget_bytes, free_bytes=free, recipe=recipe, lanes=lanes,
                                step_tokens=step_tokens, margin=margin, prefill_chunk=prefill_chunk,
                                mtp_drafts=mtp_drafts)
        if not plan.fits:  # refuse before the engine touches the device
            raise native.BudgetError(f"{plan.shortfall()}\n\n{plan.format_table()}")
        t = config.text
        from engine.reference.rope import inverse_frequencies  # same fp32 frequencies as the reference
        inv = inverse_frequencies(t.rotary_dim, t.rope_theta).tolist()
        engine = native.NativeEngine(model_dims(config), req.shape_dict(), req.vram_budget, t.rms_norm_eps,
                                     t.rope_theta, list(t.mrope_section), inv)
        return engine, plan

    @classmethod
    def from_checkpoint(cls, path_or_ckpt, *, kv_dtype: str = "int8", max_context: int = 32768,
                        vram_budget_bytes: int | None = None, recipe: Recipe | None = None, lanes: int = 1,
                        progress: ProgressFn | None = None, margin: int = DEFAULT_MARGIN,
                        prefill_chunk: int | None = DEFAULT_PREFILL_CHUNK, mtp_drafts: int = 0) -> "NativeModel":
        """``mtp_drafts`` > 0 loads the MTP head too and plans verify steps of that many drafts
        (engine.native_speculative); the checkpoint must have the head's tensors."""
        from engine.loader import Checkpoint
        src = Checkpoint.open(path_or_ckpt) if not hasattr(path_or_ckpt, "text") else path_or_ckpt
        cfg: ModelConfig = src.config
        if recipe is None:  # an artifact: keep its stored formats where the fused roles allow
            artifact = getattr(src, "artifact", None)
            recipe = recipe_from_artifact(artifact) if artifact is not None else DEFAULT_RECIPE
        report = progress or (lambda f, m: None)
        report(0.1, "Planning device memory")
        engine, plan = cls._make_engine(cfg, kv_dtype=kv_dtype, max_context=max_context,
                                        vram_budget_bytes=vram_budget_bytes, recipe=recipe, lanes=lanes,
                                        step_tokens=STEP_TOKENS, margin=margin, prefill_chunk=prefill_chunk,
                                        mtp_drafts=mtp_drafts)
        model = cls(cfg, engine, plan, max_context=max_context, kv_dtype=kv_dtype, lanes=lanes, mtp_drafts=mtp_drafts)
        model.recipe = recipe
        model._load_weights(src, recipe, report)
        report(1.0, "Native engine ready")
        return model

    @classmethod
    def random_27b(cls, *, kv_dtype: str = "int8", max_context: int = 131072 + 512, recipe: Recipe = DEFAULT_RECIPE,
                   seed: int = 0, vram_budget_bytes: int | None = None,
                   prefill_chunk: int | None = DEFAULT_PREFILL_CHUNK, step_tokens: int = 1,
                   mtp_drafts: int = 0) -> "NativeModel":
        """Real 27B shapes, random weights generated on the GPU (benchmarks). One-token steps by default (the
        decode benchmarks' plan); STEP_TOKENS plans what a loaded checkpoint gets (prompts through the API).
        mtp_drafts (verify steps that keep checkpoints) needs step_tokens > mtp_drafts."""
        from engine.registry import config_27b
        cfg = config_27b(vision=False)
        engine, plan = cls._make_engine(cfg, kv_dtype=kv_dtype, max_context=max_context,
                                        vram_budget_bytes=vram_budget_bytes, recipe=recipe, lanes=1,
                                        step_tokens=step_tokens, margin=DEFAULT_MARGIN, prefill_chunk=prefill_chunk,
                                        mtp_drafts=mtp_drafts)
        engine.randomize(seed)
        return cls(cfg, engine, plan, max_context=max_context, kv_dtype=kv_dtype, lanes=1, step_tokens=step_tokens,
                   mtp_drafts=mtp_drafts)

    def _load_weights(self, src, recipe: Recipe, report: ProgressFn) -> None:
        t = self.config.text
        e = self.engine
        # progress in bytes uploaded into the arena, against the plan's weight bytes
        total = sum(a.bytes for a in getattr(self.plan, "allocations", ())
                    if a.category.startswith("weights:") and a.category not in ("weights:vision", "weights:small")) or 1
        unit, scale = ("GB", 1e9) if total >= 1e9 else ("MB", 1e6)
        done = 0

        def matrix(role: str, layer: int, rel_key: str, row_offset: int = 0, row_stride: int = 1) -> None:
            """Upload one checkpoint matrix into rows row_offset + r * row_stride of the role (the row
            offset counts over the whole fused role; the engine puts tail rows into its tail matrix)."""
            nonlocal done
            tail = rel_key.endswith(NATIVE_TAIL_MEMBERS.get(role, ()))
            spec_role = "attn_qkv" if role == "mtp_fc" else role   # the head's fc: attn_qkv's head format
            bits, group = recipe.tail_spec(spec_role) if tail else recipe.spec(spec_role)
            q = native_weight(src, rel_key, bits, group)
            codes, scales = _np(q.codes), _np(q.scales, np.uint16)
            high = None if q.high is None else _np(q.high)
            e.load_matrix(role, layer, row_offset, row_stride, codes, high, scales)
            done += codes.nbytes + scales.nbytes + (0 if high is None else high.nbytes)
            report(0.1 + 0.85 * min(1.0, done / total),
                   f"Uploading weights: {done / scale:.2f} of {total / scale:.2f} {unit} "
                   f"({100 * min(1.0, done / total):.0f} %)")

        def vec(kind: str, layer: int, w) -> None:
            e.load_vector(kind, layer, _np(w.float().reshape(-1)))

        matrix("embed", -1, "embed_tokens.weight")
        matrix("lm_head", -1, "lm_head.weight")
        vec("final_norm", -1, src.text("norm.weight"))
        for i in range(t.num_hidden_layers):
            p = f"layers.{i}."
            vec("input_norm", i, src.text(p + "input_layernorm.weight"))
            vec("post_norm", i, src.text(p + "post_attention_layernorm.weight"))
            if t.is_full_attention(i):
                _upload_attention(t, src, matrix, vec, i, p + "self_attn.")
            else:
                g = p + "linear_attn."
                row = 0
                rows = {"in_proj_qkv": t.linear_conv_dim, "in_proj_z": t.linear_v_dim,
                        "in_proj_b": t.linear_num_value_heads, "in_proj_a": t.linear_num_value_heads}
                for name, n_rows in rows.items():
                    matrix("gdn_in", i, g + name + ".weight", row)
                    row += n_rows
                matrix("gdn_out", i, g + "out_proj.weight")
                vec("conv_w", i, src.text(g + "conv1d.weight"))
                vec("a_log", i, src.text(g + "A_log"))
                vec("dt_bias", i, src.text(g + "dt_bias"))
                vec("gdn_norm", i, src.text(g + "norm.weight"))
            _upload_mlp(matrix, i, p + "mlp.")
        if e.has_mtp:
            self._load_mtp(src, matrix, vec)

    def _load_mtp(self, src, matrix, vec) -> None:
        """The MTP head: fc in attn_qkv's format (csrc/alloc_sequence.h kMtpFcRole), its attention layer as engine
        layer num_hidden_layers, in the formats of the trunk roles it mirrors."""
        t = self.config.text
        n = t.num_hidden_layers
        matrix("mtp_fc", -1, "mtp.fc.weight")
        vec("mtp_norm_embedding", -1, src.text("mtp.pre_fc_norm_embedding.weight"))
        vec("mtp_norm_hidden", -1, src.text("mtp.pre_fc_norm_hidden.weight"))
        vec("mtp_norm", -1, src.text("mtp.norm.weight"))
        p = "mtp.layers.0."
        vec("input_norm", n, src.text(p + "input_layernorm.weight"))
        vec("post_norm", n, src.text(p + "post_attention_layernorm.weight"))
        _upload_attention(t, src, matrix, vec, n, p + "self_attn.")
        _upload_mlp(matrix, n, p + "mlp.")

    @property
    def preferred_prefill_call(self) -> int:
        """Tokens per forward call when prefilling: several engine chunks, so that the Python loop
        between calls (cancellation checks) costs nothing measurable, yet stays responsive."""
        return 4 * max(self.engine.prefill_chunk, STEP_TOKENS)

    # ---- the reference model's API -------------------------------------------------------------
    @property
    def text_config(self) -> TextConfig:
        return self.config.text

    @property
    def has_mtp(self) -> bool:
        """Whether the engine holds the MTP head (loaded with mtp_drafts > 0)."""
        return bool(self.engine.has_mtp)

    @property
    def vision(self):
        return None  # the vision tower is not in the native engine yet

    def embed_multimodal(self, input_ids, images, *, start: int = 0):
        raise NativeBackendError("the native engine does not take images yet; use the reference backend "
                                 "(--backend reference) for prompts with images")

    def new_state(self, max_tokens: int) -> NativeState:
        if max_tokens > self.max_context:
            raise NativeBackendError(f"max_tokens {max_tokens} exceeds the planned context {self.max_context}")
        if self._free_lanes:
            lane = self._free_lanes.pop(0)
        else:  # every lane taken: the oldest sequence gives its lane up
            lane = next(iter(self._owners))
            self._revoke_owner(lane)
        self._lane_epoch[lane] += 1   # a fresh sequence overwrites the lane's KV from slot 0
        return self._claim(lane, max_tokens)

    def _revoke_owner(self, lane: int) -> None:
        ref = self._owners.pop(lane, None)
        old = ref() if ref is not None else None
        if old is not None:
            old.revoked = True

    def _claim(self, lane: int, max_tokens: int) -> NativeState:
        self._verify = None  # the engine forgets a verify step's checkpoints when any lane is reset
        self.engine.reset_lane(lane)
        state = NativeState(lane=lane, max_tokens=max_tokens, _model=self)
        self._owners[lane] = weakref.ref(state, lambda _ref, lane=lane: self._lane_dropped(lane, _ref))
        return state

    def snapshot(self, state: NativeState) -> NativeSnapshot:
        """The state as it stands (engine.api takes one where the prompt's history ends)."""
        if state.revoked:
            raise NativeBackendError("this sequence's lane was released or given to a newer sequence")
        pending, hidden = None, None
        if self.has_mtp and state.mtp_pending is not None:
            row, slot, tokens = state.mtp_pending
            pending = (slot, list(tokens))
            hidden = self.engine.save_mtp_hidden(state.lane, row, len(tokens) + 1)
        return NativeSnapshot(lane=state.lane, epoch=self._lane_epoch[state.lane], seq_len=state.seq_len,
                              rope_delta=state.rope_delta, recurrent=self.engine.save_lane_state(state.lane),
                              mtp_pending=pending, mtp_hidden=hidden)

    def detach(self, snap: NativeSnapshot) -> NativeSnapshot | None:
        """``snap`` with its KV slots copied to host memory, so that it survives the lane serving other
        sequences (a conversation set aside while another one runs); None when the lane has already served a
        fresh sequence (the slots are overwritten). The copy is snapshot_bytes(snap, detached=True) of host memory."""
        if snap.kv is not None:
            return snap
        if self._lane_epoch[snap.lane] != snap.epoch:
            return None
        return replace(snap, kv=self.engine.save_lane_kv(snap.lane, snap.seq_len))

    def rebase(self, snap: NativeSnapshot, onto: NativeSnapshot) -> NativeSnapshot | None:
        """``snap`` as a snapshot on ``onto``'s lane, whose KV slots hold snap's (onto extends the same tokens):
        resuming it loads only the recurrent state. None where ``onto`` has lapsed."""
        if onto.kv is not None or self._lane_epoch[onto.lane] != onto.epoch or onto.seq_len < snap.seq_len:
            return None
        return replace(snap, lane=onto.lane, epoch=onto.epoch, kv=None)

    @staticmethod
    def snapshot_needs_lane(snap: NativeSnapshot) -> bool:
        """Whether the snapshot's KV is still only on its lane (not detached): valid until the lane serves another
        sequence, or the same sequence writes again below the snapshot's end (engine.api keeps to both)."""
        return snap.kv is None

    def snapshot_bytes(self, snap: NativeSnapshot, *, detached: bool = False) -> int:
        """Host memory the snapshot holds, or would hold once detached."""
        kv = snap.kv.nbytes if snap.kv is not None else self.engine.lane_kv_bytes(snap.seq_len) if detached else 0
        hidden = snap.mtp_hidden.nbytes if snap.mtp_hidden is not None else 0
        return int(snap.recurrent.nbytes) + int(kv) + int(hidden)

    def snapshot_layout(self) -> dict:
        """What a saved snapshot's bytes depend on besides the weights' files (engine.prefix_store's identity):
        the KV format and the weights' formats (the state is computed from the quantized weights), and the
        sizes the engine's save and load use."""
        recipe = self.recipe
        return {"backend": "native", "kv_dtype": self.kv_dtype,
                "recipe": None if recipe is None else [recipe.name, sorted(recipe.roles.items()),
                                                       sorted(recipe.tails.items())],
                "state_floats": int(self.engine.lane_state_floats()),
                "kv_bytes_1024": int(self.engine.lane_kv_bytes(1024)), "layout": SAVED_STATE_LAYOUT}

    def export_snapshot(self, snap: NativeSnapshot) -> tuple[dict, list[np.ndarray]]:
        """A detached snapshot as metadata and arrays, to save (engine.prefix_store)."""
        if snap.kv is None:
            raise NativeBackendError("only a detached snapshot (its KV in host memory) can be saved")
        meta = {"seq_len": snap.seq_len, "rope_delta": snap.rope_delta}
        if snap.mtp_pending is None:
            return meta, [snap.recurrent, snap.kv]
        meta["mtp_pending"] = [snap.mtp_pending[0], list(snap.mtp_pending[1])]
        return meta, [snap.recurrent, snap.kv, snap.mtp_hidden]

    def import_snapshot(self, meta: dict, arrays: list[np.ndarray]) -> NativeSnapshot | None:
        """A saved snapshot as a detached one (resumes on any lane); None where its sizes are not this engine's."""
        try:
            seq_len, rope_delta = int(meta["seq_len"]), int(meta["rope_delta"])
            recurrent, kv, *rest = arrays
            pending = meta.get("mtp_pending")
            pending = None if pending is None else (int(pending[0]), [int(t) for t in pending[1]])
        except (KeyError, TypeError, ValueError, IndexError):
            return None
        if (recurrent.dtype != np.float32 or recurrent.size != self.engine.lane_state_floats()
                or kv.dtype != np.uint8 or not 0 < seq_len <= self.max_context
                or kv.size != self.engine.lane_kv_bytes(seq_len)):
            return None
        hidden = None
        if pending is not None:   # the head's pending pairs: only where this engine holds the head, all consistent
            hidden = rest[0] if len(rest) == 1 else None
            rows = len(pending[1]) + 1
            if (not self.has_mtp or hidden is None or hidden.dtype != np.float32
                    or hidden.shape != (rows, self.config.text.hidden_size) or pending[0] + rows != seq_len):
                return None
        elif rest:
            return None
        return NativeSnapshot(lane=-1, epoch=-1, seq_len=seq_len, rope_delta=rope_delta,
                              recurrent=recurrent.reshape(-1), kv=kv.reshape(-1), mtp_pending=pending,
                              mtp_hidden=hidden)

    def resume(self, snap: NativeSnapshot, max_tokens: int) -> NativeState | None:
        """A sequence continuing from ``snap``: on its own lane, or None when that lane has served a fresh
        sequence since (its KV slots were overwritten); a detached snapshot loads its KV into a lane taken as
        new_state takes one. A sequence still holding the lane is revoked, as by new_state."""
        if max_tokens > self.max_context:
            raise NativeBackendError(f"max_tokens {max_tokens} exceeds the planned context {self.max_context}")
        if not isinstance(snap, NativeSnapshot) or not snap.seq_len < max_tokens:
            return None
        if snap.kv is not None:
            state = self.new_state(max_tokens)            # a fresh claim: other snapshots of the lane lapse
            self.engine.load_lane_kv(state.lane, snap.seq_len, snap.kv)
            self.engine.load_lane_state(state.lane, snap.recurrent)
            state.seq_len, state.rope_delta = snap.seq_len, snap.rope_delta
            self._resume_pending_pairs(snap, state)
            return state
        if self._lane_epoch[snap.lane] != snap.epoch:
            return None
        if snap.lane in self._free_lanes:
            self._free_lanes.remove(snap.lane)
        else:
            self._revoke_owner(snap.lane)
        state = self._claim(snap.lane, max_tokens)   # zeroes the penalty counts; the caller counts its prompt
        self.engine.load_lane_state(snap.lane, snap.recurrent)
        state.seq_len, state.rope_delta = snap.seq_len, snap.rope_delta
        self._resume_pending_pairs(snap, state)
        return state

    def _resume_pending_pairs(self, snap: NativeSnapshot, state: NativeState) -> None:
        """The head's pairs the snapshot's sequence left pending, pending again on the resumed one (their hidden rows
        back in the lane's rows), so that its next forward or draft closes them: the head's cache then misses no
        position. A snapshot without them (no head, or taken with none pending) leaves none."""
        if self.has_mtp and snap.mtp_pending is not None:
            self.engine.load_mtp_hidden(state.lane, 0, snap.mtp_hidden)
            slot, tokens = snap.mtp_pending
            state.mtp_pending = (0, slot, list(tokens))

    def _lane_dropped(self, lane: int, ref) -> None:
        if self._owners.get(lane) is ref:
            del self._owners[lane]
            self._free_lanes.append(lane)
            self._free_lanes.sort()

    def release(self, state: NativeState) -> None:
        ref = self._owners.get(state.lane)
        if ref is not None and ref() is state:
            self._lane_dropped(state.lane, ref)
        state.revoked = True

    def forward(self, input_ids, state: NativeState, position_ids=None, inputs_embeds=None, *,
                last_only: bool = False, keep_states: bool = False) -> NativeOutput:
        """Logits of the input's tokens (the last row only with last_only). keep_states: a speculative verify step
        (2..mtp_drafts + 1 tokens, one engine step, every row's logits) that also keeps the recurrent state after
        each of its tokens, so that commit(state, kept) can keep only the accepted ones."""
        import torch
        self._verify = None  # any forward changes the engine's state: the last verify step can commit no longer
        if inputs_embeds is not None:
            raise NativeBackendError("the native engine does not take input embeddings (images) yet")
        ids, rope = self._step_inputs(input_ids, state, position_ids)
        if keep_states:
            return self._verify_step(ids, rope, state)
        mtp = self.has_mtp
        if mtp and state.mtp_pending is not None:
            self._close_pending_pairs(state, ids[0])
        if last_only and len(ids) > max(self.step_tokens, self.step_path_max_tokens) and self.engine.prefill_chunk > 0:
            # with the MTP head, prefill also runs it over the input's pairs, all but the last (engine.cu prefill)
            self.engine.prefill(state.lane, ids, rope, state.seq_len)
            state.seq_len += len(ids)
            state.mtp_pending = (0, state.seq_len - 1, []) if mtp else None
            self._last_rows = 1
            return NativeOutput(torch.from_numpy(self.engine.logits(1)))
        outs = []
        step = self.step_tokens
        for s in range(0, len(ids), step):
            chunk = ids[s:s + step]
            self.engine.forward(state.lane, chunk, rope[3 * s:3 * (s + len(chunk))], state.seq_len)
            first = state.seq_len
            state.seq_len += len(chunk)
            self._last_rows = len(chunk)
            if not last_only or s + step >= len(ids):
                outs.append(torch.from_numpy(self.engine.logits(len(chunk))))
            if mtp:
                state.mtp_pending = (0, first, ids[s + 1:s + len(chunk)])
                if s + step < len(ids):   # the next chunk's first token closes this chunk's last pair
                    self.mtp_draft(state, ids[s + len(chunk)])
        logits = torch.cat(outs)
        return NativeOutput(logits[-1:] if last_only else logits)

    def _step_inputs(self, input_ids, state: NativeState, position_ids=None) -> tuple[list[int], list[int]]:
        """The token ids of a step on ``state`` after checking them (the lane still the state's, the sequence's
        limit, the vocabulary), and their rotary positions flattened [t][axis]: given (images), else text positions
        on all three axes."""
        import torch
        if state.revoked:
            raise NativeBackendError("this sequence's lane was released or given to a newer sequence")
        ids = [int(x) for x in torch.as_tensor(input_ids).reshape(-1).tolist()]
        if not ids:
            raise NativeBackendError("forward needs at least one token")
        if state.seq_len + len(ids) > state.max_tokens:
            raise NativeBackendError(f"{state.seq_len + len(ids)} tokens exceed this sequence's limit "
                                     f"of {state.max_tokens}")
        vocab = self.config.text.vocab_size
        if min(ids) < 0 or max(ids) >= vocab:
            raise NativeBackendError(f"token id out of range 0..{vocab - 1}")
        if position_ids is not None:
            return ids, [int(v) for v in torch.as_tensor(position_ids).reshape(3, len(ids)).T.reshape(-1).tolist()]
        base = state.seq_len + state.rope_delta
        return ids, [base + j for j in range(len(ids)) for _ in range(3)]

    def verify(self, ids: list[int], state: NativeState) -> None:
        """forward(ids, state, keep_states=True) without copying its logits to the host: the speculative rounds draw
        from them on the device (sample), and T rows of the 27B's 248K-entry logits are 4 MB a round."""
        self._verify = None
        self._verify_step(*self._step_inputs(ids, state), state, read_logits=False)

    def _verify_step(self, ids: list[int], rope: list[int], state: NativeState,
                     read_logits: bool = True) -> NativeOutput | None:
        import torch
        if not 2 <= len(ids) <= self.mtp_drafts + 1:
            raise NativeBackendError(f"a verify step runs 2..{self.mtp_drafts + 1} tokens (the last token and at most "
                                     f"mtp_drafts = {self.mtp_drafts} drafts), not {len(ids)}")
        start = state.seq_len
        self.engine.forward(state.lane, ids, rope, start, keep_states=True)
        state.seq_len += len(ids)
        self._last_rows = len(ids)
        self._verify = (weakref.ref(state), start, ids)
        return NativeOutput(torch.from_numpy(self.engine.logits(len(ids)))) if read_logits else None

    def commit(self, state: NativeState, kept: int) -> None:
        """After forward(..., keep_states=True) of T tokens (the last forward): the sequence keeps only the first
        `kept` of them (1 <= kept <= T: the last token and the accepted drafts). Its recurrent state becomes the one
        after them and seq_len the step's start + kept; the KV slots past that are rewritten by the next step. With
        the MTP head, the kept positions' pairs wait for the token after them (mtp_draft)."""
        verify = self._verify
        if verify is None or verify[0]() is not state:
            raise NativeBackendError("commit follows a verify step of this sequence (forward with keep_states=True) "
                                     "with no other forward in between")
        if state.revoked:
            raise NativeBackendError("this sequence's lane was released or given to a newer sequence")
        _, start, ids = verify
        if not 1 <= kept <= len(ids):
            raise NativeBackendError(f"commit keeps 1..{len(ids)} tokens of the verify step, not {kept}")
        self.engine.commit_states(state.lane, kept)
        self._verify = None
        state.seq_len = start + kept
        state.mtp_pending = (0, start, ids[1:kept]) if self.has_mtp else None

    # ---- the MTP head (engine planned with mtp_drafts > 0; engine.native_speculative) --------------------------
    def mtp_draft(self, state: NativeState, next_token: int) -> None:
        """The head over the pairs the state's last step left pending, the last one closed by ``next_token`` (the
        token sampled after that step): logits rows 0 .. pairs - 1 on the device, whose last (``sample(state)``,
        ``mtp_logits()``) drafts the token after ``next_token``."""
        if state.mtp_pending is None:
            raise NativeBackendError("no trunk step is pending for the MTP head (forward a token first)")
        row, slot, tokens = state.mtp_pending
        pairs = tokens + [int(next_token)]
        base = slot + state.rope_delta
        rope = [base + j for j in range(len(pairs)) for _ in range(3)]
        self.engine.mtp_step(state.lane, pairs, rope, slot, row, False)
        state.mtp_pending = None
        self._last_rows = len(pairs)

    def _close_pending_pairs(self, state: NativeState, next_token: int) -> None:
        """Before more input: the pairs the last forward left pending (a prompt fed in several calls, as Engine does
        to stay cancellable) closed by that input's first token, so that the head's cache has no hole at the
        boundary; dropped where the lane has moved on without the head since (the GPU decode loop)."""
        _, slot, tokens = state.mtp_pending
        if slot + len(tokens) + 1 == state.seq_len:
            self.mtp_draft(state, next_token)
        else:
            state.mtp_pending = None

    def mtp_chain(self, state: NativeState, draft: int, slot: int) -> None:
        """One more draft: the head on its own last output and the draft it made (at cache slot ``slot``, the
        position of that output); its logits row drafts the token after ``draft``."""
        base = slot + state.rope_delta
        self.engine.mtp_step(state.lane, [int(draft)], [base] * 3, slot, 0, True)
        self._last_rows = 1

    def mtp_logits(self):
        """The logits rows the last MTP call left (torch [rows, V] fp32)."""
        import torch
        return torch.from_numpy(self.engine.logits(self.last_logit_rows))

    @property
    def last_logit_rows(self) -> int:
        """Rows of logits the last forward left on the device (the last one is the last token's)."""
        return getattr(self, "_last_rows", 1)

    def sample(self, state: NativeState, *, temperature: float = 0.0, top_k: int = 0, top_p: float = 1.0,
               min_p: float = 0.0, repetition_penalty: float = 1.0, presence_penalty: float = 0.0,
               frequency_penalty: float = 0.0, seed: int = 0, vocab_limit: int | None = None,
               rows: int = 1, draw: int = 0, first_row: int | None = None) -> list[int]:
        """Sample from the last forward's logits on the device: `rows` rows from `first_row` (default: the last
        `rows`), drawn with indices draw, draw + 1, ... (engine/sampling.py: the response's token index) against
        the lane's penalty counts (count_tokens). Only those rows are drawn."""
        params = dict(temperature=temperature, top_k=top_k, top_p=top_p, min_p=min_p,
                      repetition_penalty=repetition_penalty, presence_penalty=presence_penalty,
                      frequency_penalty=frequency_penalty, seed=seed,
                      vocab_limit=vocab_limit or self.config.text.vocab_size)
        last = self.last_logit_rows
        first = last - rows if first_row is None else first_row
        if rows < 1 or first < 0 or first + rows > last:
            raise NativeBackendError(f"the last step produced {last} rows of logits; cannot sample {rows} from row "
                                     f"{first}")
        return list(self.engine.sample(state.lane, rows, params, draw, first))

    def count_tokens(self, state: NativeState, ids: list[int], *, in_prompt: bool = False,
                     remove: bool = False) -> None:
        """Feed tokens to the lane's penalty counts: generated ones, or the prompt's (in_prompt); ``remove`` takes
        generated ones off again (a speculative round's drafts)."""
        self.engine.count_tokens(state.lane, [int(i) for i in ids], in_prompt, remove)

    def decode_tokens(self, state: NativeState, params, *, seed: int, vocab_limit: int,
                      prompt_ids=(), ahead: int = 2, first_draw: int = 0):
        """Tokens drawn and stepped on the GPU from the state's last logits on (engine.native_loop)."""
        from engine.native_loop import decode_tokens
        self._verify = None  # the loop's steps change the lane's state
        return decode_tokens(self, state, params, seed=seed, vocab_limit=vocab_limit, prompt_ids=prompt_ids,
                             ahead=ahead, first_draw=first_draw)
