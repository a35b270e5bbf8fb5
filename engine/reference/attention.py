"""Gated full attention (the 1-in-4 attention layers and the MTP layer).

Per token: ``q_proj`` gives, per head, ``[q (head_dim) | gate (head_dim)]``; q and k get a
zero-centred RMSNorm over head_dim, then partial interleaved mRoPE; GQA (each KV head serves
``n_heads / n_kv_heads`` query heads); softmax(q k^T / sqrt(head_dim)) with a causal mask over
the cache; ``out = o_proj(attn * sigmoid(gate))``. Softmax runs in fp32.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from engine.reference.layers import rms_norm_zero_centred
from engine.reference.rope import apply_partial_rope
from engine.reference.state import KVCache


@dataclass
class AttentionWeights:
    q_proj: torch.Tensor  # [2 * n_heads * head_dim, H], per head [q | gate]
    k_proj: torch.Tensor  # [n_kv * head_dim, H]
    v_proj: torch.Tensor  # [n_kv * head_dim, H]
    o_proj: torch.Tensor  # [H, n_heads * head_dim]
    q_norm: torch.Tensor  # [head_dim]
    k_norm: torch.Tensor  # [head_dim]


def gated_attention(x: torch.Tensor, w: AttentionWeights, cache: KVCache, cos: torch.Tensor, sin: torch.Tensor,
                    *, n_heads: int, n_kv_heads: int, head_dim: int, eps: float) -> torch.Tensor:
    """Attention over ``x [T, H]`` (already input-normed) appended to ``cache``; returns ``[T, H]``."""
    t = x.shape[0]
    qg = F.linear(x, w.q_proj).view(t, n_heads, 2 * head_dim)
    q, gate = qg[..., :head_dim], qg[..., head_dim:]
    k = F.linear(x, w.k_proj).view(t, n_kv_heads, head_dim)
    v = F.linear(x, w.v_proj).view(t, n_kv_heads, head_dim)
    q = apply_partial_rope(rms_norm_zero_centred(q, w.q_norm, eps), cos, sin)
    k = apply_partial_rope(rms_norm_zero_centred(k, w.k_norm, eps), cos, sin)

    start = cache.length
    keys, values = cache.append(k.transpose(0, 1), v.transpose(0, 1))  # [n_kv, L, hd], L = start + T
    # queries in blocks so the fp32 score matrix stays bounded on long contexts
    block = max(1, SCORE_ELEMENTS_PER_BLOCK // (n_heads * keys.shape[1]))
    out = torch.cat([_attend(q[b0:b0 + block], keys, values, start + b0, n_kv_heads)
                     for b0 in range(0, t, block)])
    out = out.to(x.dtype) * torch.sigmoid(gate.reshape(t, n_heads * head_dim))
    return F.linear(out, w.o_proj)


SCORE_ELEMENTS_PER_BLOCK = 1 << 26  # 256 MiB of fp32 scores


def _attend(q: torch.Tensor, keys: torch.Tensor, values: torch.Tensor, first_pos: int,
            n_kv_heads: int) -> torch.Tensor:
    """Causal GQA softmax attention of queries ``[T, n_heads, hd]`` at positions first_pos.. over the cache."""
    t, n_heads, head_dim = q.shape
    group = n_heads // n_kv_heads
    qh = q.transpose(0, 1).reshape(n_kv_heads, group * t, head_dim)      # rows: (group member, token)
    scores = (qh.float() @ keys.float().transpose(1, 2)) / math.sqrt(head_dim)  # [n_kv, group*T, L]
    scores = scores.view(n_kv_heads, group, t, -1)
    q_pos = torch.arange(first_pos, first_pos + t, device=q.device)
    k_pos = torch.arange(keys.shape[1], device=q.device)
    scores = scores.masked_fill(k_pos[None, :] > q_pos[:, None], float("-inf"))
    probs = torch.softmax(scores, dim=-1).to(values.dtype).view(n_kv_heads, group * t, -1)
    return (probs @ values).view(n_heads, t, head_dim).transpose(0, 1).reshape(t, n_heads * head_dim)
