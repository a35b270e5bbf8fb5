"""Partial NeoX rotary embedding with interleaved multimodal (t, h, w) positions.

Only the first ``rotary_dim`` (64 of 256) dims of each head rotate, as two halves
(rotate-half / NeoX convention). Frequency pair ``i`` (of rotary_dim / 2) takes its position from
one of the three axes. With ``mrope_section = (s_t, s_h, s_w)`` the interleaved layout gives pair
``i`` to axis h when ``i % 3 == 1 and i < 3 * s_h``, to axis w when ``i % 3 == 2 and i < 3 * s_w``,
otherwise to axis t. For [11, 11, 10] and 32 pairs that is simply axis ``i % 3``. Text tokens have
the same position on all three axes, which reduces this to ordinary RoPE.
"""

from __future__ import annotations

import torch


def mrope_axis_of_pair(mrope_section: tuple[int, int, int], n_pairs: int) -> torch.Tensor:
    """For each frequency pair, which position axis (0 = t, 1 = h, 2 = w) drives it."""
    axis = torch.zeros(n_pairs, dtype=torch.long)
    for a in (1, 2):
        for i in range(a, min(3 * mrope_section[a], n_pairs), 3):
            axis[i] = a
    return axis


def inverse_frequencies(rotary_dim: int, theta: float) -> torch.Tensor:
    """``theta ** (-2i / rotary_dim)`` for i = 0 .. rotary_dim/2 - 1, fp32."""
    return 1.0 / (theta ** (torch.arange(0, rotary_dim, 2, dtype=torch.float32) / rotary_dim))


def mrope_cos_sin(position_ids: torch.Tensor, inv_freq: torch.Tensor,
                  axis_of_pair: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """cos/sin tables ``[T, rotary_dim]`` (fp32) for positions ``[3, T]``."""
    pos = position_ids.to(torch.float32)                       # [3, T]
    per_pair_pos = pos[axis_of_pair.to(pos.device)]           # [n_pairs, T]: each pair's own axis
    angles = per_pair_pos.T * inv_freq.to(pos.device)          # [T, n_pairs]
    angles = torch.cat([angles, angles], dim=-1)               # NeoX: both halves share a frequency
    return angles.cos(), angles.sin()


def apply_partial_rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Rotate the first ``cos.shape[-1]`` dims of ``x [..., T, heads, head_dim]``.

    ``cos``/``sin`` are ``[T, rotary_dim]``; they broadcast over the heads axis.
    """
    rot = cos.shape[-1]
    xr, xp = x[..., :rot], x[..., rot:]
    c = cos[:, None, :].to(x.dtype)
    s = sin[:, None, :].to(x.dtype)
    half = rot // 2
    rotated_half = torch.cat([-xr[..., half:], xr[..., :half]], dim=-1)
    return torch.cat([xr * c + rotated_half * s, xp], dim=-1)
