"""The multi-token-prediction head (one extra full-attention layer that drafts token t+2).

    h' = fc(concat[norm_e(embed(token_{t+1})), norm_h(h_t)])      (embedding half first)
    h' = decoder_layer(h')                                         (own KV cache)
    logits = lm_head(mtp.norm(h'))                                 (shared lm_head)

``h_t`` is the trunk hidden after the final norm. All norms are zero-centred RMSNorms.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch
import torch.nn.functional as F

from engine.reference.layers import rms_norm_zero_centred
from engine.reference.state import KVCache

if TYPE_CHECKING:
    from engine.reference.model import ReferenceModel


def mtp_hidden(model: "ReferenceModel", hidden: torch.Tensor, next_token_ids: torch.Tensor, cache: KVCache,
               cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """The MTP layer's normed output ``[T, H]`` (before lm_head); appends T entries to ``cache``."""
    w = model.weights.mtp
    eps = model.config.text.rms_norm_eps
    e = rms_norm_zero_centred(model.embed(next_token_ids), w.pre_fc_norm_embedding, eps)
    h = rms_norm_zero_centred(hidden, w.pre_fc_norm_hidden, eps)
    x = F.linear(torch.cat([e, h], dim=-1), w.fc)
    x = model._layer(x, w.layer, cache, None, cos, sin)
    return rms_norm_zero_centred(x, w.norm, eps)
