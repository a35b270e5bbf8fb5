"""Explicit per-sequence state of the text decoder: what a backend must keep between forward calls.

Later backends (the native CUDA engine) mirror these objects field for field:

* ``KVCache`` per full-attention layer: post-norm, post-RoPE keys and values, ``[n_kv_heads,
  max_tokens, head_dim]``, and how many positions are filled.
* ``GDNState`` per Gated DeltaNet layer: the conv window (the last ``kernel - 1`` pre-conv
  ``in_proj_qkv`` outputs, ``[conv_dim, kernel - 1]``) and the recurrent state
  ``[n_value_heads, key_dim, value_dim]`` in fp32.
* ``ModelState``: all of the above plus the MTP layer's own KV cache, the number of tokens
  consumed and the multimodal rope delta (decode positions are ``seq_len + rope_delta`` on all
  three axes once an image has shifted them).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch


class StateOverflowError(RuntimeError):
    """More tokens than the state was sized for."""


@dataclass
class KVCache:
    k: torch.Tensor  # [n_kv_heads, max_tokens, head_dim]
    v: torch.Tensor  # [n_kv_heads, max_tokens, head_dim]
    length: int = 0

    @classmethod
    def empty(cls, n_kv_heads: int, max_tokens: int, head_dim: int, *, dtype: torch.dtype,
              device: torch.device | str) -> "KVCache":
        shape = (n_kv_heads, max_tokens, head_dim)
        return cls(torch.zeros(shape, dtype=dtype, device=device), torch.zeros(shape, dtype=dtype, device=device))

    @property
    def capacity(self) -> int:
        return self.k.shape[1]

    def append(self, k_new: torch.Tensor, v_new: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Store ``[n_kv, T, head_dim]`` at the end; return views of all filled positions."""
        t = k_new.shape[1]
        end = self.length + t
        if end > self.capacity:
            raise StateOverflowError(f"KV cache holds {self.capacity} tokens; appending {t} to {self.length} "
                                     f"would need {end}. Create the state with a larger max_tokens.")
        self.k[:, self.length:end] = k_new.to(self.k.dtype)
        self.v[:, self.length:end] = v_new.to(self.v.dtype)
        self.length = end
        return self.k[:, :end], self.v[:, :end]

    def clone(self) -> "KVCache":
        return KVCache(self.k.clone(), self.v.clone(), self.length)


@dataclass
class GDNState:
    conv: torch.Tensor       # [conv_dim, kernel - 1], activation dtype: the last pre-conv inputs
    recurrent: torch.Tensor  # [n_value_heads, key_dim, value_dim], fp32

    @classmethod
    def empty(cls, conv_dim: int, kernel: int, n_v_heads: int, dk: int, dv: int, *, dtype: torch.dtype,
              device: torch.device | str) -> "GDNState":
        return cls(torch.zeros(conv_dim, kernel - 1, dtype=dtype, device=device),
                   torch.zeros(n_v_heads, dk, dv, dtype=torch.float32, device=device))

    def clone(self) -> "GDNState":
        return GDNState(self.conv.clone(), self.recurrent.clone())


@dataclass
class ModelState:
    kv: list[KVCache]            # one per full-attention layer, in layer order
    gdn: list[GDNState]          # one per Gated DeltaNet layer, in layer order
    mtp_kv: KVCache | None = None
    seq_len: int = 0             # tokens consumed by the trunk
    rope_delta: int = 0          # text position = seq_len + rope_delta (non-zero after images)
    max_tokens: int = field(default=0)

    def clone(self) -> "ModelState":
        """A deep copy (a snapshot a caller can return to)."""
        return ModelState([c.clone() for c in self.kv], [g.clone() for g in self.gdn],
                          self.mtp_kv.clone() if self.mtp_kv is not None else None,
                          self.seq_len, self.rope_delta, self.max_tokens)
