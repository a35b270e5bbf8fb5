"""Gated DeltaNet ops vs an independent fp64 oracle written here from MODEL.md's per-token formula.

Tolerance: relative error <= FP32_REL_TOL (fp32 implementation vs fp64 oracle). Cases cover T = 1,
both sides of the 64-token chunk boundary, a non-zero incoming state and strong decay.
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from engine.reference.gdn import causal_conv_silu, delta_rule_chunked, delta_rule_recurrent
from engine.reference.state import GDNState
from tiny_models import rel_err

FP32_REL_TOL = 1e-5
NV, DK, DV = 3, 16, 8


def oracle_delta_rule(q, k, v, g, beta, s0):
    """fp64, explicit loops over tokens and heads: S = e^g S; u = b(v - S^T k); S += k u^T; o = S^T q."""
    q, k, v, g, beta, s = (x.double() for x in (q, k, v, g, beta, s0.clone()))
    out = torch.zeros(v.shape, dtype=torch.float64)
    for t in range(q.shape[0]):
        for h in range(q.shape[1]):
            s[h] = torch.exp(g[t, h]) * s[h]
            u = beta[t, h] * (v[t, h] - s[h].T @ k[t, h])
            s[h] = s[h] + torch.outer(k[t, h], u)
            out[t, h] = s[h].T @ q[t, h]
    return out, s


def _inputs(t: int, seed: int, decay_scale: float = 1.0):
    g_ = torch.Generator().manual_seed(seed)
    q = F.normalize(torch.randn(t, NV, DK, generator=g_), dim=-1) * DK ** -0.5
    k = F.normalize(torch.randn(t, NV, DK, generator=g_), dim=-1)
    v = torch.randn(t, NV, DV, generator=g_)
    g = -decay_scale * torch.rand(t, NV, generator=g_)
    beta = torch.rand(t, NV, generator=g_)
    s0 = torch.randn(NV, DK, DV, generator=g_) * 0.5
    return q, k, v, g, beta, s0


@pytest.mark.parametrize("t", [1, 2, 63, 64, 65, 130])
@pytest.mark.parametrize("fn", [delta_rule_recurrent, delta_rule_chunked], ids=["recurrent", "chunked"])
def test_delta_rule_matches_fp64_oracle(fn, t):
    q, k, v, g, beta, s0 = _inputs(t, seed=t)
    want_o, want_s = oracle_delta_rule(q, k, v, g, beta, s0)
    state = s0.clone()
    o = fn(q, k, v, g, beta, state)
    assert o.dtype == torch.float32 and state.dtype == torch.float32
    assert rel_err(o, want_o) <= FP32_REL_TOL
    assert rel_err(state, want_s) <= FP32_REL_TOL


def test_chunked_survives_strong_decay_without_overflow():
    # cumulative log-decay over a chunk reaches about -64 * 20; exp of its negative would overflow
    q, k, v, g, beta, s0 = _inputs(100, seed=5, decay_scale=40.0)
    want_o, want_s = oracle_delta_rule(q, k, v, g, beta, s0)
    state = s0.clone()
    o = delta_rule_chunked(q, k, v, g, beta, state)
    assert torch.isfinite(o).all() and torch.isfinite(state).all()
    assert rel_err(o, want_o) <= FP32_REL_TOL
    assert rel_err(state, want_s) <= FP32_REL_TOL


@pytest.mark.parametrize("split", [[1], [5], [1, 1, 1, 4], [3, 9]])
def test_causal_conv_with_carried_window_matches_one_shot_conv(split):
    conv_dim, kernel = 6, 4
    g_ = torch.Generator().manual_seed(7)
    x = torch.randn(sum(split), conv_dim, generator=g_)
    w = torch.randn(conv_dim, kernel, generator=g_)
    # oracle: zero-padded depthwise conv over the whole sequence in fp64, then SiLU
    padded = F.pad(x.double().T, (kernel - 1, 0))
    want = F.silu(torch.stack([sum(w[c, j].double() * padded[c, j:j + x.shape[0]] for j in range(kernel))
                               for c in range(conv_dim)]).T)
    state = GDNState.empty(conv_dim, kernel, 1, 1, 1, dtype=torch.float32, device="cpu")
    outs, start = [], 0
    for n in split:
        outs.append(causal_conv_silu(x[start:start + n], w, state))
        start += n
    assert rel_err(torch.cat(outs), want) <= FP32_REL_TOL
    # the window holds the last kernel-1 inputs (zeros before the sequence start)
    tail = F.pad(x.T, (kernel - 1, 0))[:, -(kernel - 1):]
    assert torch.equal(state.conv, tail)
