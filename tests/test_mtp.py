"""MTP head vs an independent fp64 computation of MODEL.md's formula (transformers has no MTP).

    h' = fc(concat[norm_e(embed(tok_{t+1})), norm_h(h_t)]);  h' = full-attention layer(h');
    logits = lm_head(mtp.norm(h'))

The oracle below reads the tensors straight from the safetensors files (not through
engine.loader) and spells out every step in fp64 with explicit per-head loops. The trunk hidden
h_t comes from the reference model, whose trunk is checked against transformers elsewhere.
Tolerance: relative error <= FP32_REL_TOL.
"""

from __future__ import annotations

import json
import math

import pytest
import torch
from safetensors import safe_open

from engine.reference import ReferenceModel
from tiny_models import rel_err

FP32_REL_TOL = 1e-4


def _read_all(folder) -> dict[str, torch.Tensor]:
    index = json.loads((folder / "model.safetensors.index.json").read_text())
    out = {}
    for shard in set(index["weight_map"].values()):
        with safe_open(folder / shard, framework="pt") as f:
            for k in f.keys():
                if k.startswith("mtp.") or k in ("lm_head.weight", "model.language_model.embed_tokens.weight"):
                    out[k] = f.get_tensor(k).double()
    return out


def _norm(x, w, eps):
    return x / torch.sqrt((x * x).mean(-1, keepdim=True) + eps) * (1 + w)


def oracle_mtp_logits(w: dict, tc: dict, hidden: torch.Tensor, next_ids: torch.Tensor) -> torch.Tensor:
    eps, nh, nkv, hd = tc["rms_norm_eps"], tc["num_attention_heads"], tc["num_key_value_heads"], tc["head_dim"]
    rot = int(hd * tc["rope_parameters"]["partial_rotary_factor"])
    theta = tc["rope_parameters"]["rope_theta"]
    p = "mtp.layers.0."
    e = _norm(w["model.language_model.embed_tokens.weight"][next_ids], w["mtp.pre_fc_norm_embedding.weight"], eps)
    h = _norm(hidden.double(), w["mtp.pre_fc_norm_hidden.weight"], eps)
    x = torch.cat([e, h], dim=-1) @ w["mtp.fc.weight"].T
    T = x.shape[0]

    a_in = _norm(x, w[p + "input_layernorm.weight"], eps)
    qg = (a_in @ w[p + "self_attn.q_proj.weight"].T).view(T, nh, 2 * hd)
    q, gate = qg[..., :hd], qg[..., hd:]
    k = (a_in @ w[p + "self_attn.k_proj.weight"].T).view(T, nkv, hd)
    v = (a_in @ w[p + "self_attn.v_proj.weight"].T).view(T, nkv, hd)
    q = _norm(q, w[p + "self_attn.q_norm.weight"], eps)
    k = _norm(k, w[p + "self_attn.k_norm.weight"], eps)

    def rope(vec, pos):  # text positions: all three mRoPE axes equal, so plain NeoX rotation of dims i, i + rot/2
        out = vec.clone()
        for i in range(rot // 2):
            ang = pos * theta ** (-2 * i / rot)
            a, b = vec[..., i], vec[..., i + rot // 2]
            out[..., i] = a * math.cos(ang) - b * math.sin(ang)
            out[..., i + rot // 2] = b * math.cos(ang) + a * math.sin(ang)
        return out

    q = torch.stack([rope(q[t], t) for t in range(T)])
    k = torch.stack([rope(k[t], t) for t in range(T)])
    attn = torch.zeros(T, nh, hd, dtype=torch.float64)
    for head in range(nh):
        kvh = head // (nh // nkv)
        for t in range(T):
            scores = torch.stack([q[t, head] @ k[s, kvh] for s in range(t + 1)]) / math.sqrt(hd)
            attn[t, head] = torch.softmax(scores, 0) @ v[: t + 1, kvh]
    attn = attn.reshape(T, nh * hd) * torch.sigmoid(gate.reshape(T, nh * hd))
    x = x + attn @ w[p + "self_attn.o_proj.weight"].T
    m_in = _norm(x, w[p + "post_attention_layernorm.weight"], eps)
    act = torch.nn.functional.silu(m_in @ w[p + "mlp.gate_proj.weight"].T) * (m_in @ w[p + "mlp.up_proj.weight"].T)
    x = x + act @ w[p + "mlp.down_proj.weight"].T
    return _norm(x, w["mtp.norm.weight"], eps) @ w["lm_head.weight"].T


@pytest.fixture(scope="module")
def setup(tiny_checkpoint):
    model = ReferenceModel.from_checkpoint(tiny_checkpoint)
    tc = json.loads((tiny_checkpoint / "config.json").read_text())["text_config"]
    ids = torch.randint(0, 1000, (25,), generator=torch.Generator().manual_seed(21))
    hidden = model.forward(ids, model.new_state(64)).hidden
    return model, _read_all(tiny_checkpoint), tc, ids, hidden


def test_mtp_head_matches_fp64_formula(setup):
    model, weights, tc, ids, hidden = setup
    # pairs (h_t, tok_{t+1}) for the whole prompt, as speculative decoding feeds them
    state = model.new_state(64)
    logits = model.mtp_forward(hidden[:-1], ids[1:], state)
    want = oracle_mtp_logits(weights, tc, hidden[:-1], ids[1:])
    assert logits.dtype == torch.float32 and logits.shape == want.shape
    assert state.mtp_kv.length == len(ids) - 1
    assert rel_err(logits, want) <= FP32_REL_TOL


def test_mtp_incremental_calls_equal_one_call(setup):
    model, _, _, ids, hidden = setup
    whole = model.mtp_forward(hidden[:-1], ids[1:], model.new_state(64))
    state = model.new_state(64)
    parts = [model.mtp_forward(hidden[a:b], ids[a + 1:b + 1], state) for a, b in ((0, 10), (10, 11), (11, 24))]
    assert rel_err(torch.cat(parts), whole) <= FP32_REL_TOL


def test_mtp_absent_is_refused(tiny_checkpoint):
    model = ReferenceModel.from_checkpoint(tiny_checkpoint, mtp=False)
    state = model.new_state(8)
    assert state.mtp_kv is None
    out = model.forward(torch.tensor([1, 2]), state)
    with pytest.raises(ValueError, match="no MTP head"):
        model.mtp_forward(out.hidden, torch.tensor([2, 3]), state)
