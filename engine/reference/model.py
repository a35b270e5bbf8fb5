"""The reference text decoder: a stateful, incremental forward over one sequence (pure torch).

    model = ReferenceModel.from_checkpoint(folder_or_checkpoint)
    state = model.new_state(max_tokens=4096)
    out = model.forward(prompt_ids, state)         # prefill (any chunking: call repeatedly)
    out = model.forward(next_id[None], state)      # decode, T = 1
    mtp_logits = model.mtp_forward(out.hidden, following_ids, state)

Every layer is ``x += mixer(norm1(x)); x += mlp(norm2(x))`` with the mixer a Gated DeltaNet
(layers i with (i + 1) % 4 != 0) or gated full attention. Norm and recurrence math runs in fp32;
matmuls run in the weight dtype. Logits are returned in fp32.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

from engine.config import ModelConfig, TextConfig
from engine.reference.attention import gated_attention
from engine.reference.gdn import gated_delta_net
from engine.reference.layers import rms_norm_zero_centred, swiglu_mlp
from engine.reference.rope import inverse_frequencies, mrope_axis_of_pair, mrope_cos_sin
from engine.reference.state import GDNState, KVCache, ModelState
from engine.reference.weights import LayerWeights, TensorSource, TextWeights, load_text_weights

GDN_MODES = ("chunked", "recurrent", "auto")


@dataclass
class ForwardOutput:
    logits: torch.Tensor  # [T, V] fp32 (or [1, V] with last_only)
    hidden: torch.Tensor  # [T, H] after the final norm (what the MTP head consumes)


def text_position_ids(start: int, t: int, device: torch.device | str = "cpu") -> torch.Tensor:
    """``[3, T]`` positions of plain text tokens: the same position on the t, h and w axes."""
    return torch.arange(start, start + t, device=device).expand(3, t)


def decoder_layer(x: torch.Tensor, lw: LayerWeights, t: TextConfig, *, kv: KVCache | None = None,
                  gdn: GDNState | None = None, cos: torch.Tensor | None = None, sin: torch.Tensor | None = None,
                  gdn_mode: str = "chunked") -> torch.Tensor:
    """One decoder layer on the residual stream ``x [T, H]``: ``x += mixer(norm1(x)); x += mlp(norm2(x))``.

    A full-attention layer (``lw.attention``) needs ``kv`` and the rope tables ``cos``/``sin``; a
    Gated DeltaNet layer (``lw.gdn``) needs ``gdn``. Usable on its own, e.g. to check one
    full-size layer of a native backend against this reference.
    """
    h = rms_norm_zero_centred(x, lw.input_norm, t.rms_norm_eps)
    if lw.attention is not None:
        if kv is None or cos is None or sin is None:
            raise ValueError("a full-attention layer needs kv, cos and sin")
        mixed = gated_attention(h, lw.attention, kv, cos, sin, n_heads=t.num_attention_heads,
                                n_kv_heads=t.num_key_value_heads, head_dim=t.head_dim, eps=t.rms_norm_eps)
    else:
        if gdn is None:
            raise ValueError("a Gated DeltaNet layer needs its GDNState")
        mixed = gated_delta_net(h, lw.gdn, gdn, n_k_heads=t.linear_num_key_heads,
                                n_v_heads=t.linear_num_value_heads, dk=t.linear_key_head_dim,
                                dv=t.linear_value_head_dim, eps=t.rms_norm_eps, mode=gdn_mode)
    x = x + mixed
    h = rms_norm_zero_centred(x, lw.post_attention_norm, t.rms_norm_eps)
    return x + swiglu_mlp(h, lw.gate_proj, lw.up_proj, lw.down_proj)


class ReferenceModel:
    """Qwen3.5 hybrid text decoder (+ MTP head) evaluated with plain torch ops."""

    def __init__(self, config: ModelConfig, weights: TextWeights, *, device: torch.device | str = "cpu",
                 dtype: torch.dtype = torch.float32, gdn_mode: str = "chunked"):
        if gdn_mode not in GDN_MODES:
            raise ValueError(f"gdn_mode {gdn_mode!r}: expected one of {GDN_MODES}")
        self.config = config
        self.weights = weights
        self.device = torch.device(device)
        self.dtype = dtype
        self.gdn_mode = gdn_mode
        self._source: TensorSource | None = None  # kept by from_checkpoint so the vision tower loads lazily
        self._vision = None
        t = config.text
        self._inv_freq = inverse_frequencies(t.rotary_dim, t.rope_theta).to(self.device)
        self._axis_of_pair = mrope_axis_of_pair(t.mrope_section, t.rotary_dim // 2).to(self.device)
        # layer index -> index into ModelState.kv / ModelState.gdn
        self._cache_slot = {}
        n_attn = n_gdn = 0
        for i in range(t.num_hidden_layers):
            if t.is_full_attention(i):
                self._cache_slot[i], n_attn = n_attn, n_attn + 1
            else:
                self._cache_slot[i], n_gdn = n_gdn, n_gdn + 1

    @property
    def text_config(self) -> TextConfig:
        return self.config.text

    @property
    def has_mtp(self) -> bool:
        return self.weights.mtp is not None

    @classmethod
    def from_checkpoint(cls, ckpt_or_path: TensorSource | str | Path, *, device: torch.device | str = "cpu",
                        dtype: torch.dtype = torch.float32, gdn_mode: str = "chunked",
                        mtp: bool = True) -> "ReferenceModel":
        """Load from a checkpoint folder or any object with .config/.text/.get/.has/.keys."""
        if isinstance(ckpt_or_path, (str, Path)):
            from engine.loader import Checkpoint
            src = Checkpoint.open(ckpt_or_path)
        else:
            src = ckpt_or_path
        weights = load_text_weights(src, src.config.text, device=device, dtype=dtype, mtp=mtp)
        model = cls(src.config, weights, device=device, dtype=dtype, gdn_mode=gdn_mode)
        model._source = src
        return model

    # ---- images (engine.reference.vision) -------------------------------------------------------
    @property
    def vision(self):
        """The VisionTower, loaded on first use; None without a vision config or model.visual.* weights."""
        from engine.reference.vision import VisionTower, has_vision_weights
        if self._vision is None and self.config.vision is not None and self._source is not None \
                and has_vision_weights(self._source):
            self._vision = VisionTower.from_checkpoint(self._source, self.config.vision, self.device, self.dtype)
        return self._vision

    @torch.no_grad()
    def embed_multimodal(self, input_ids: torch.Tensor, images: list, *,
                         start: int = 0) -> tuple[torch.Tensor, torch.Tensor, int]:
        """``(inputs_embeds [T, H], position_ids [3, T], rope_delta)`` for a prompt with image placeholders.

        ``images`` are engine.image.ImageInput, in prompt order. ``start`` is the position of the first
        token (``state.seq_len + state.rope_delta`` for a continuing sequence). Feed the result to
        ``forward(None, state, position_ids, inputs_embeds)`` and then add ``rope_delta`` to
        ``state.rope_delta`` so decode positions continue after the images.
        """
        from engine.errors import PromptError
        from engine.positions import mrope_positions
        from engine.reference.vision import scatter_image_embeddings
        ids = input_ids.reshape(-1)
        grids = [im.grid_thw for im in images]
        position_ids, rope_delta = mrope_positions(ids, grids, self.config, start)
        x = self.embed(ids)
        if images:
            tower = self.vision
            if tower is None:
                raise PromptError("this model was loaded without a vision tower (no vision_config or no "
                                  "model.visual.* weights); remove the images or use a multimodal checkpoint")
            feats = tower(torch.cat([im.pixel_values for im in images]), grids)
            x = scatter_image_embeddings(x, ids, feats, self.config.image_token_id)
        return x, position_ids.to(self.device), rope_delta

    # ---- state -----------------------------------------------------------------------------
    def new_state(self, max_tokens: int) -> ModelState:
        """Empty KV caches (attention layers + MTP layer) for ``max_tokens`` and zero GDN states."""
        t = self.config.text
        kv = [KVCache.empty(t.num_key_value_heads, max_tokens, t.head_dim, dtype=self.dtype, device=self.device)
              for _ in t.full_attention_layers]
        gdn = [GDNState.empty(t.linear_conv_dim, t.linear_conv_kernel_dim, t.linear_num_value_heads,
                              t.linear_key_head_dim, t.linear_value_head_dim, dtype=self.dtype, device=self.device)
               for _ in t.linear_attention_layers]
        mtp_kv = (KVCache.empty(t.num_key_value_heads, max_tokens, t.head_dim, dtype=self.dtype, device=self.device)
                  if self.has_mtp else None)
        return ModelState(kv=kv, gdn=gdn, mtp_kv=mtp_kv, max_tokens=max_tokens)

    def snapshot(self, state: ModelState) -> ModelState:
        """A copy of the trunk's state as it stands, trimmed to its filled positions (engine.api's prefix
        reuse). The MTP layer's cache is left out: a prompt that speculates is prefilled whole."""
        n = state.seq_len
        return ModelState(kv=[KVCache(c.k[:, :n].clone(), c.v[:, :n].clone(), n) for c in state.kv],
                          gdn=[g.clone() for g in state.gdn], mtp_kv=None, seq_len=n, rope_delta=state.rope_delta,
                          max_tokens=n)

    def detach(self, snap: ModelState) -> ModelState:
        """A snapshot here is already a copy that outlives other sequences."""
        return snap

    @staticmethod
    def rebase(snap: ModelState, onto: ModelState) -> None:
        """No lanes here: nothing to rebase onto (engine.api asks only about snapshots that need a lane)."""
        return None

    @staticmethod
    def snapshot_needs_lane(snap: ModelState) -> bool:
        """A snapshot here copies everything (there are no lanes)."""
        return False

    def snapshot_bytes(self, snap: ModelState, *, detached: bool = False) -> int:
        """Memory the snapshot's tensors hold (on the model's device)."""
        tensors = [t for c in snap.kv for t in (c.k, c.v)] + [t for g in snap.gdn for t in (g.conv, g.recurrent)]
        return sum(t.numel() * t.element_size() for t in tensors)

    def snapshot_layout(self) -> dict:
        """What a saved snapshot depends on besides the weights' files (engine.prefix_store's identity)."""
        return {"backend": "reference", "dtype": str(self.dtype)}

    def export_snapshot(self, snap: ModelState) -> tuple[dict, list]:
        """A snapshot as metadata and numpy arrays, to save (engine.prefix_store): each attention layer's k and
        v, then each GDN layer's conv window and recurrent state."""
        tensors = [t for c in snap.kv for t in (c.k, c.v)] + [t for g in snap.gdn for t in (g.conv, g.recurrent)]
        return ({"seq_len": snap.seq_len, "rope_delta": snap.rope_delta},
                [t.detach().to("cpu", torch.float32).numpy() for t in tensors])

    def import_snapshot(self, meta: dict, arrays: list) -> ModelState | None:
        """A saved snapshot (export_snapshot's arrays) on this model's device; None where the shapes differ."""
        try:
            n, rope_delta = int(meta["seq_len"]), int(meta["rope_delta"])
        except (KeyError, TypeError, ValueError):
            return None
        probe = self.new_state(1)   # the layers' shapes and dtypes; a snapshot's KV holds n positions
        expected = [((c.k.shape[0], n, c.k.shape[2]), c.k.dtype) for c in probe.kv for _ in (0, 1)] \
            + [(tuple(x.shape), x.dtype) for g in probe.gdn for x in (g.conv, g.recurrent)]
        if n < 1 or len(arrays) != len(expected) \
                or any(tuple(a.shape) != shape for a, (shape, _dt) in zip(arrays, expected)):
            return None
        loaded = iter(torch.from_numpy(np.array(a)).to(self.device, dt) for a, (_s, dt) in zip(arrays, expected))
        kv = [KVCache(next(loaded), next(loaded), n) for _ in probe.kv]
        gdn = [GDNState(next(loaded), next(loaded)) for _ in probe.gdn]
        return ModelState(kv=kv, gdn=gdn, mtp_kv=None, seq_len=n, rope_delta=rope_delta, max_tokens=n)

    def resume(self, snap: ModelState, max_tokens: int) -> ModelState | None:
        """A new state for ``max_tokens`` that continues from ``snap`` (None if it would not fit)."""
        n = snap.seq_len
        if not n < max_tokens:
            return None
        state = self.new_state(max_tokens)
        for dst, src in zip(state.kv, snap.kv):
            dst.k[:, :n], dst.v[:, :n], dst.length = src.k, src.v, n
        for dst, src in zip(state.gdn, snap.gdn):
            dst.conv.copy_(src.conv)
            dst.recurrent.copy_(src.recurrent)
        state.seq_len, state.rope_delta = n, snap.rope_delta
        return state

    # ---- forward ---------------------------------------------------------------------------
    def embed(self, input_ids: torch.Tensor) -> torch.Tensor:
        vocab = self.weights.embed_tokens.shape[0]
        if input_ids.numel() and (int(input_ids.min()) < 0 or int(input_ids.max()) >= vocab):
            bad = input_ids[(input_ids < 0) | (input_ids >= vocab)][0]
            raise ValueError(f"token id {int(bad)} is outside this model's vocabulary (0..{vocab - 1})")
        return F.embedding(input_ids.to(self.device), self.weights.embed_tokens)

    def _positions(self, position_ids: torch.Tensor | None, start: int, t: int) -> torch.Tensor:
        if position_ids is None:
            return text_position_ids(start, t, self.device)
        if position_ids.shape != (3, t):
            raise ValueError(f"position_ids has shape {list(position_ids.shape)}; expected [3, {t}] (t, h, w axes)")
        return position_ids.to(self.device)

    def rope_tables(self, position_ids: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """cos/sin ``[T, rotary_dim]`` fp32 for positions ``[3, T]`` (what every attention layer uses)."""
        return mrope_cos_sin(position_ids.to(self.device), self._inv_freq, self._axis_of_pair)

    def _layer(self, x: torch.Tensor, lw: LayerWeights, attn_cache: KVCache | None, gdn_state: GDNState | None,
               cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        return decoder_layer(x, lw, self.config.text, kv=attn_cache, gdn=gdn_state, cos=cos, sin=sin,
                             gdn_mode=self.gdn_mode)

    def lm_head(self, hidden: torch.Tensor) -> torch.Tensor:
        return F.linear(hidden, self.weights.lm_head).float()

    @torch.no_grad()
    def forward(self, input_ids: torch.Tensor | None, state: ModelState, position_ids: torch.Tensor | None = None,
                inputs_embeds: torch.Tensor | None = None, *, last_only: bool = False,
                trace: list[torch.Tensor] | None = None) -> ForwardOutput:
        """Run ``T`` new tokens through the trunk, appending them to ``state``.

        ``input_ids [T]``; ``inputs_embeds [T, H]`` replaces the embedding gather (image tokens);
        ``position_ids [3, T]`` defaults to text positions ``seq_len + rope_delta + arange(T)``.
        ``last_only`` computes logits for the last token only (saves the [T, V] matmul).
        ``trace``, when given, receives the residual stream ``[T, H]`` entering layer 0 and leaving
        every layer (num_hidden_layers + 1 tensors), for per-layer comparison with other backends.
        """
        if inputs_embeds is None:
            if input_ids is None:
                raise ValueError("forward needs input_ids or inputs_embeds")
            x = self.embed(input_ids.reshape(-1))
        else:
            x = inputs_embeds.to(device=self.device, dtype=self.dtype)
        t = x.shape[0]
        if t == 0:
            raise ValueError("forward called with zero tokens")
        if state.seq_len + t > state.max_tokens:
            raise ValueError(f"state holds {state.max_tokens} tokens; {state.seq_len} used, {t} more requested")
        pos = self._positions(position_ids, state.seq_len + state.rope_delta, t)
        cos, sin = self.rope_tables(pos)
        tc = self.config.text
        if trace is not None:
            trace.append(x.clone())
        for i, lw in enumerate(self.weights.layers):
            slot = self._cache_slot[i]
            if tc.is_full_attention(i):
                x = self._layer(x, lw, state.kv[slot], None, cos, sin)
            else:
                x = self._layer(x, lw, None, state.gdn[slot], cos, sin)
            if trace is not None:
                trace.append(x.clone())
        state.seq_len += t
        hidden = rms_norm_zero_centred(x, self.weights.norm, tc.rms_norm_eps)
        logits = self.lm_head(hidden[-1:] if last_only else hidden)
        return ForwardOutput(logits=logits, hidden=hidden)

    @torch.no_grad()
    def mtp_forward(self, hidden: torch.Tensor, next_token_ids: torch.Tensor, state: ModelState,
                    position_ids: torch.Tensor | None = None, *, return_hidden: bool = False):
        """MTP head logits ``[T, V]`` (fp32) predicting token t+2 from trunk hidden h_t and token t+1.

        ``hidden [T, H]`` is the trunk output after the final norm; ``next_token_ids [T]`` are the
        tokens that follow each of those positions. The pairs are appended to ``state.mtp_kv``;
        positions default to ``mtp_kv.length + rope_delta + arange(T)`` (the position of h_t).
        ``return_hidden``: also the MTP layer's normed output ``[T, H]`` (what a chained draft feeds back in).
        """
        from engine.reference.mtp import mtp_hidden
        if self.weights.mtp is None:
            raise ValueError("this model has no MTP head (mtp_num_hidden_layers = 0 or loaded with mtp=False)")
        cache = state.mtp_kv
        t = hidden.shape[0]
        pos = self._positions(position_ids, cache.length + state.rope_delta, t)
        cos, sin = self.rope_tables(pos)
        h = mtp_hidden(self, hidden.to(self.dtype), next_token_ids.reshape(-1), cache, cos, sin)
        return (self.lm_head(h), h) if return_hidden else self.lm_head(h)
