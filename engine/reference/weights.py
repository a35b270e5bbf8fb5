"""Gather the text decoder's tensors from a checkpoint-like source into per-layer dataclasses.

A source is anything with ``.config``, ``.text(rel_key)``, ``.get(full_key)``, ``.has(full_key)``
and ``.keys()``: ``engine.loader.Checkpoint`` or the converter's artifact reader. Norm weights,
``A_log`` and ``dt_bias`` stay fp32 (they are tiny and feed fp32 math); matrices take ``dtype``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol

import torch

from engine.config import TextConfig
from engine.reference.attention import AttentionWeights
from engine.reference.gdn import GDNWeights


class TensorSource(Protocol):
    config: Any

    def text(self, rel_key: str) -> torch.Tensor: ...
    def get(self, full_key: str) -> torch.Tensor: ...
    def has(self, full_key: str) -> bool: ...
    def keys(self) -> list[str]: ...


@dataclass
class LayerWeights:
    input_norm: torch.Tensor
    post_attention_norm: torch.Tensor
    gate_proj: torch.Tensor
    up_proj: torch.Tensor
    down_proj: torch.Tensor
    attention: AttentionWeights | None = None  # full-attention layers
    gdn: GDNWeights | None = None              # Gated DeltaNet layers


@dataclass
class MTPWeights:
    fc: torch.Tensor                  # [H, 2H], input is [norm_e(embed) | norm_h(hidden)]
    pre_fc_norm_embedding: torch.Tensor
    pre_fc_norm_hidden: torch.Tensor
    norm: torch.Tensor
    layer: LayerWeights


@dataclass
class TextWeights:
    embed_tokens: torch.Tensor  # [V, H]
    layers: list[LayerWeights]
    norm: torch.Tensor
    lm_head: torch.Tensor       # [V, H]
    mtp: MTPWeights | None


class _Reader:
    def __init__(self, src: TensorSource, device: torch.device | str, dtype: torch.dtype):
        self.src, self.device, self.dtype = src, device, dtype

    def mat(self, rel: str) -> torch.Tensor:
        return self.src.text(rel).to(device=self.device, dtype=self.dtype)

    def f32(self, rel: str) -> torch.Tensor:
        return self.src.text(rel).to(device=self.device, dtype=torch.float32)


def _attention(r: _Reader, p: str) -> AttentionWeights:
    return AttentionWeights(q_proj=r.mat(p + "self_attn.q_proj.weight"), k_proj=r.mat(p + "self_attn.k_proj.weight"),
                            v_proj=r.mat(p + "self_attn.v_proj.weight"), o_proj=r.mat(p + "self_attn.o_proj.weight"),
                            q_norm=r.f32(p + "self_attn.q_norm.weight"), k_norm=r.f32(p + "self_attn.k_norm.weight"))


def _gdn(r: _Reader, p: str) -> GDNWeights:
    a = p + "linear_attn."
    conv = r.mat(a + "conv1d.weight")
    return GDNWeights(in_proj_qkv=r.mat(a + "in_proj_qkv.weight"), in_proj_z=r.mat(a + "in_proj_z.weight"),
                      in_proj_b=r.mat(a + "in_proj_b.weight"), in_proj_a=r.mat(a + "in_proj_a.weight"),
                      conv1d=conv.reshape(conv.shape[0], conv.shape[-1]),
                      dt_bias=r.f32(a + "dt_bias"), A_log=r.f32(a + "A_log"),
                      norm=r.mat(a + "norm.weight"), out_proj=r.mat(a + "out_proj.weight"))


def _layer(r: _Reader, p: str, full_attention: bool) -> LayerWeights:
    return LayerWeights(
        input_norm=r.f32(p + "input_layernorm.weight"),
        post_attention_norm=r.f32(p + "post_attention_layernorm.weight"),
        gate_proj=r.mat(p + "mlp.gate_proj.weight"), up_proj=r.mat(p + "mlp.up_proj.weight"),
        down_proj=r.mat(p + "mlp.down_proj.weight"),
        attention=_attention(r, p) if full_attention else None,
        gdn=None if full_attention else _gdn(r, p))


def load_text_weights(src: TensorSource, t: TextConfig, *, device: torch.device | str = "cpu",
                      dtype: torch.dtype = torch.float32, mtp: bool = True) -> TextWeights:
    """Read every text-decoder tensor (and the MTP head when the config has one and ``mtp``)."""
    r = _Reader(src, device, dtype)
    layers = [_layer(r, f"layers.{i}.", t.is_full_attention(i)) for i in range(t.num_hidden_layers)]
    mtp_w = None
    if mtp and t.mtp_num_hidden_layers > 0:
        mtp_w = MTPWeights(fc=r.mat("mtp.fc.weight"), pre_fc_norm_embedding=r.f32("mtp.pre_fc_norm_embedding.weight"),
                           pre_fc_norm_hidden=r.f32("mtp.pre_fc_norm_hidden.weight"), norm=r.f32("mtp.norm.weight"),
                           layer=_layer(r, "mtp.layers.0.", True))
    return TextWeights(embed_tokens=r.mat("embed_tokens.weight"), layers=layers, norm=r.f32("norm.weight"),
                       lm_head=r.mat("lm_head.weight"), mtp=mtp_w)
