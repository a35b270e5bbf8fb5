"""Gated DeltaNet (the 3-in-4 linear-attention layers): causal conv, then the gated delta rule.

Per token t and value head (state S is [key_dim, value_dim], fp32):
    S = exp(g_t) S;   u = beta_t (v_t - S^T k_t);   S = S + k_t u^T;   o_t = S^T q_t
with beta = sigmoid(b), g = -exp(A_log) softplus(a + dt_bias), q and k L2-normalised (eps 1e-6)
and q scaled by 1/sqrt(key_dim); value head j reads key head j // (n_v / n_k).

Two evaluations of the same recurrence, which must agree:
* ``delta_rule_recurrent``: the loop above, one token at a time (decode, verify).
* ``delta_rule_chunked``: chunks of C tokens (prefill). Inside a chunk, with cumulative log-decay
  G_t = g_1 + .. + g_t and the incoming state S0, the updates u satisfy a unit lower-triangular
  system (I + A) U = beta (V - exp(G) K S0) with A[t, s] = beta_t exp(G_t - G_s) k_t.k_s (s < t),
  solved by triangular substitution; then
  O = exp(G) Q S0 + (exp(G_t - G_s) q_t.k_s)_{s <= t} U   and
  S_C = exp(G_C) S0 + sum_s exp(G_C - G_s) k_s u_s^T.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F

from engine.reference.layers import l2_normalize, rms_norm_gated
from engine.reference.state import GDNState

CHUNK = 64


@dataclass
class GDNWeights:
    in_proj_qkv: torch.Tensor  # [2*nk*dk + nv*dv, H]
    in_proj_z: torch.Tensor    # [nv*dv, H]
    in_proj_b: torch.Tensor    # [nv, H]
    in_proj_a: torch.Tensor    # [nv, H]
    conv1d: torch.Tensor       # [conv_dim, kernel] (checkpoint stores [conv_dim, 1, kernel])
    dt_bias: torch.Tensor      # [nv] fp32
    A_log: torch.Tensor        # [nv] fp32
    norm: torch.Tensor         # [dv] (plain scale, not zero-centred)
    out_proj: torch.Tensor     # [H, nv*dv]


def causal_conv_silu(x: torch.Tensor, weight: torch.Tensor, state: GDNState) -> torch.Tensor:
    """Depthwise causal conv (no bias) + SiLU over ``x [T, conv_dim]``; updates ``state.conv`` in place.

    The window seen by token t is the previous ``kernel - 1`` inputs (from earlier calls via the
    state) and itself; output[t, c] = sum_j weight[c, j] * window[c, j].
    """
    t = x.shape[0]
    kernel = weight.shape[-1]
    window = torch.cat([state.conv.to(x.dtype), x.T], dim=1)            # [C, kernel-1+T]
    taps = window.unfold(1, kernel, 1)                                  # [C, T, kernel]
    out = (taps.float() * weight.float()[:, None, :]).sum(-1).to(x.dtype)  # [C, T]
    state.conv.copy_(window[:, -(kernel - 1):])
    assert out.shape[1] == t
    return F.silu(out.T)


def delta_rule_recurrent(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, g: torch.Tensor, beta: torch.Tensor,
                         state: torch.Tensor) -> torch.Tensor:
    """One token at a time. q, k: [T, nv, dk] (normalised, q scaled); v: [T, nv, dv]; g, beta: [T, nv].

    ``state`` [nv, dk, dv] fp32 is updated in place; returns o [T, nv, dv] fp32.
    """
    out = torch.empty(v.shape, dtype=torch.float32, device=v.device)
    s = state
    for t in range(q.shape[0]):
        s.mul_(g[t].exp()[:, None, None])
        predicted = torch.einsum("hkv,hk->hv", s, k[t])
        u = beta[t][:, None] * (v[t] - predicted)
        s.add_(k[t][:, :, None] * u[:, None, :])
        out[t] = torch.einsum("hkv,hk->hv", s, q[t])
    return out


def delta_rule_chunked(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, g: torch.Tensor, beta: torch.Tensor,
                       state: torch.Tensor, chunk: int = CHUNK) -> torch.Tensor:
    """Same contract as ``delta_rule_recurrent``, evaluated chunk by chunk (the last chunk may be short)."""
    # heads first: [nv, T, d]
    q, k, v = (x.transpose(0, 1) for x in (q, k, v))
    g, beta = g.T, beta.T
    out = torch.empty(v.shape, dtype=torch.float32, device=v.device)
    s = state
    n = q.shape[1]
    for c0 in range(0, n, chunk):
        c1 = min(c0 + chunk, n)
        qc, kc, vc, bc = q[:, c0:c1], k[:, c0:c1], v[:, c0:c1], beta[:, c0:c1]
        G = g[:, c0:c1].cumsum(-1)                                        # [nv, C]
        L = c1 - c0
        strictly_lower = torch.ones(L, L, dtype=torch.bool, device=q.device).tril(-1)
        lower = torch.ones(L, L, dtype=torch.bool, device=q.device).tril()
        # exp(G_t - G_s) only where s <= t (elsewhere it could overflow and is unused)
        log_decay = G[:, :, None] - G[:, None, :]
        decay = torch.where(lower, log_decay, torch.full_like(log_decay, float("-inf"))).exp()
        kk = kc @ kc.transpose(1, 2)                                      # [nv, C, C]
        A = torch.where(strictly_lower, bc[:, :, None] * decay * kk, torch.zeros_like(kk))
        system = A + torch.eye(L, dtype=A.dtype, device=A.device)
        rhs = bc[:, :, None] * (vc - G.exp()[:, :, None] * (kc @ s))      # [nv, C, dv]
        # a one-token chunk has the identity as its system (decode): skip the solver call
        u = rhs if L == 1 else torch.linalg.solve_triangular(system, rhs, upper=False, unitriangular=True)
        qk = (qc @ kc.transpose(1, 2)) * decay                            # masked to s <= t by decay
        out[:, c0:c1] = G.exp()[:, :, None] * (qc @ s) + qk @ u
        tail = (G[:, -1:] - G).exp()                                      # exp(G_C - G_s)
        s.mul_(G[:, -1].exp()[:, None, None]).add_((kc * tail[:, :, None]).transpose(1, 2) @ u)
    return out.transpose(0, 1)


# "auto" mode: below this many tokens the per-token recurrence beats the chunked (WY) form on a CPU.
AUTO_CHUNKED_MIN_TOKENS = 16


def gated_delta_net(x: torch.Tensor, w: GDNWeights, state: GDNState, *, n_k_heads: int, n_v_heads: int,
                    dk: int, dv: int, eps: float, mode: str = "chunked") -> torch.Tensor:
    """The mixer of a GDN layer over ``x [T, H]`` (already input-normed); returns ``[T, H]``."""
    t = x.shape[0]
    qkv = causal_conv_silu(F.linear(x, w.in_proj_qkv), w.conv1d, state)
    q, k, v = torch.split(qkv, [n_k_heads * dk, n_k_heads * dk, n_v_heads * dv], dim=-1)
    z = F.linear(x, w.in_proj_z).view(t, n_v_heads, dv)
    beta = torch.sigmoid(F.linear(x, w.in_proj_b).float())
    g = -w.A_log.float().exp() * F.softplus(F.linear(x, w.in_proj_a).float() + w.dt_bias.float())

    per_key = n_v_heads // n_k_heads
    q = l2_normalize(q.float().view(t, n_k_heads, dk)) * dk ** -0.5
    k = l2_normalize(k.float().view(t, n_k_heads, dk))
    q = q.repeat_interleave(per_key, dim=1)  # value head j reads key head j // per_key
    k = k.repeat_interleave(per_key, dim=1)
    v = v.float().view(t, n_v_heads, dv)

    if mode == "auto":  # the two forms agree (tests); the step loop is cheaper for a few tokens
        mode = "recurrent" if t < AUTO_CHUNKED_MIN_TOKENS else "chunked"
    if mode == "recurrent":
        o = delta_rule_recurrent(q, k, v, g, beta, state.recurrent)
    elif mode == "chunked":
        o = delta_rule_chunked(q, k, v, g, beta, state.recurrent)
    else:
        raise ValueError(f"gdn mode {mode!r}: expected 'chunked', 'recurrent' or 'auto'")

    o = rms_norm_gated(o.to(x.dtype), z, w.norm, eps).reshape(t, n_v_heads * dv)
    return F.linear(o, w.out_proj)
