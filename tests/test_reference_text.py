"""Reference text decoder vs transformers' qwen3_5 (the external oracle), CPU fp32.

Tolerance: relative error ||ours - oracle|| / ||oracle|| <= FP32_REL_TOL on logits and states.
Both sides compute in fp32 with different operation orders (our chunked GDN uses chunk
boundaries relative to each forward call; transformers' are absolute), so agreement to ~1e-6 is
expected; 1e-4 leaves room for summation-order noise without hiding a wrong formula (a missing
``1 + w``, a wrong rotary pair or a wrong GQA mapping all give errors > 1e-2).
"""

from __future__ import annotations

import pytest
import torch

from engine.reference import ReferenceModel
from tiny_models import rel_err

FP32_REL_TOL = 1e-4
PROMPT_LEN = 150  # crosses two 64-token chunk boundaries
DECODE_STEPS = 16


def _ids(n: int, vocab: int, seed: int) -> torch.Tensor:
    # stay below the special ids at the top of the tiny vocabulary
    return torch.randint(0, vocab - 8, (n,), generator=torch.Generator().manual_seed(seed))


@pytest.fixture(scope="module")
def mm(tiny_hf):
    """Multimodal-layout model: our model, transformers model, ids and transformers' full outputs."""
    hf, path = tiny_hf
    ids = _ids(PROMPT_LEN + DECODE_STEPS, hf.config.text_config.vocab_size, seed=10)
    with torch.no_grad():
        prefill = hf(input_ids=ids[None, :PROMPT_LEN], use_cache=True)
        full = hf(input_ids=ids[None], use_cache=False)
    return dict(ours=ReferenceModel.from_checkpoint(path), hf=hf, ids=ids, prefill=prefill,
                full_logits=full.logits[0])


@pytest.fixture(scope="module")
def text_only(tiny_text_hf):
    hf, path = tiny_text_hf
    ids = _ids(PROMPT_LEN, hf.config.vocab_size, seed=11)
    with torch.no_grad():
        out = hf(input_ids=ids[None], use_cache=True)
    return dict(ours=ReferenceModel.from_checkpoint(path), ids=ids, out=out)


def test_text_logits_match_transformers_multimodal_layout(mm):
    model, ids = mm["ours"], mm["ids"]
    out = model.forward(ids, model.new_state(256))
    assert out.logits.shape == mm["full_logits"].shape
    assert out.logits.dtype == torch.float32
    assert rel_err(out.logits, mm["full_logits"]) <= FP32_REL_TOL


def test_text_logits_match_transformers_text_only_layout(text_only):
    model, ids = text_only["ours"], text_only["ids"]
    out = model.forward(ids, model.new_state(256))
    assert rel_err(out.logits, text_only["out"].logits[0]) <= FP32_REL_TOL


def test_prefill_then_decode_equals_full_forward(mm):
    model, ids = mm["ours"], mm["ids"]
    state = model.new_state(256)
    logits = [model.forward(ids[:PROMPT_LEN], state).logits]
    for i in range(PROMPT_LEN, PROMPT_LEN + DECODE_STEPS):
        logits.append(model.forward(ids[i:i + 1], state).logits)
    incremental = torch.cat(logits)
    assert state.seq_len == PROMPT_LEN + DECODE_STEPS
    assert rel_err(incremental, mm["full_logits"]) <= FP32_REL_TOL
    # decode steps alone (the part a cache bug would break)
    assert rel_err(incremental[PROMPT_LEN:], mm["full_logits"][PROMPT_LEN:]) <= FP32_REL_TOL


@pytest.mark.parametrize("gdn_mode", ["chunked", "recurrent"])
def test_chunked_prefill_at_odd_boundaries_equals_unchunked(mm, gdn_mode):
    model, ids = mm["ours"], mm["ids"][:PROMPT_LEN]
    model.gdn_mode = gdn_mode
    try:
        whole = model.forward(ids, model.new_state(256)).logits
        state = model.new_state(256)
        pieces, start = [], 0
        for size in (1, 7, 13, 64 + 3, PROMPT_LEN - 88):
            pieces.append(model.forward(ids[start:start + size], state).logits)
            start += size
        assert start == PROMPT_LEN
    finally:
        model.gdn_mode = "chunked"
    assert rel_err(torch.cat(pieces), whole) <= FP32_REL_TOL
    assert rel_err(whole, mm["full_logits"][:PROMPT_LEN]) <= FP32_REL_TOL


def test_recurrent_gdn_equals_chunked_gdn(mm):
    model, ids = mm["ours"], mm["ids"][:PROMPT_LEN]
    chunked_state, recurrent_state = model.new_state(256), model.new_state(256)
    a = model.forward(ids, chunked_state).logits
    model.gdn_mode = "recurrent"
    try:
        b = model.forward(ids, recurrent_state).logits
    finally:
        model.gdn_mode = "chunked"
    assert rel_err(a, b) <= FP32_REL_TOL
    for sa, sb in zip(chunked_state.gdn, recurrent_state.gdn):
        assert rel_err(sa.recurrent, sb.recurrent) <= FP32_REL_TOL


def _check_states_against_hf_cache(state, cache, model):
    t = model.config.text
    for layer in range(t.num_hidden_layers):
        hf_layer = cache.layers[layer]
        if t.is_full_attention(layer):
            kv = state.kv[t.full_attention_layers.index(layer)]
            n = kv.length
            # transformers caches post-norm, post-RoPE keys: [batch, n_kv, T, head_dim]
            assert rel_err(kv.k[:, :n], hf_layer.keys[0]) <= FP32_REL_TOL
            assert rel_err(kv.v[:, :n], hf_layer.values[0]) <= FP32_REL_TOL
        else:
            g = state.gdn[t.linear_attention_layers.index(layer)]
            hf_conv = hf_layer.conv_states[0][0]          # [conv_dim, kernel]: transformers keeps one more column
            assert hf_conv.shape[-1] == t.linear_conv_kernel_dim
            assert rel_err(g.conv, hf_conv[:, 1:]) <= FP32_REL_TOL
            assert g.recurrent.dtype == torch.float32
            assert rel_err(g.recurrent, hf_layer.recurrent_states[0][0]) <= FP32_REL_TOL


def test_states_after_prefill_equal_transformers_cache(mm):
    model, ids = mm["ours"], mm["ids"]
    state = model.new_state(256)
    model.forward(ids[:PROMPT_LEN], state)
    _check_states_against_hf_cache(state, mm["prefill"].past_key_values, model)


def test_states_after_prefill_equal_transformers_cache_text_only_layout(text_only):
    model, ids = text_only["ours"], text_only["ids"]
    state = model.new_state(256)
    model.forward(ids, state)
    _check_states_against_hf_cache(state, text_only["out"].past_key_values, model)


def test_states_after_decode_equal_transformers_cache(tiny_hf):
    hf, path = tiny_hf
    model = ReferenceModel.from_checkpoint(path)
    ids = _ids(20, hf.config.text_config.vocab_size, seed=12)
    state = model.new_state(64)
    model.forward(ids[:17], state)
    with torch.no_grad():
        out = hf(input_ids=ids[None, :17], use_cache=True)
        cache = out.past_key_values
        for i in range(17, 20):
            out = hf(input_ids=ids[None, i:i + 1], past_key_values=cache, use_cache=True)
            cache = out.past_key_values
            ours = model.forward(ids[i:i + 1], state)
            assert rel_err(ours.logits, out.logits[0]) <= FP32_REL_TOL
    _check_states_against_hf_cache(state, cache, model)


def test_three_axis_positions_and_rope_delta_match_transformers(mm):
    """Distinct t/h/w positions (as an image produces) through the whole trunk, then decode with a delta.

    The oracle is transformers given the same explicit [3, 1, T] position ids; decode positions
    there are seq_len + rope_delta on all axes, which is what our state's rope_delta must produce.
    """
    model, hf = mm["ours"], mm["hf"]
    ids = mm["ids"][:40]
    g = torch.Generator().manual_seed(13)
    prefill_pos = torch.arange(30).expand(3, 30).clone()
    prefill_pos[1:, 10:20] = torch.randint(0, 12, (2, 10), generator=g) + 10  # an "image" block
    prefill_pos[:, 20:] -= 5                                                  # text after it resumes lower
    rope_delta = int(prefill_pos.max()) + 1 - 30
    decode_pos = (torch.arange(30, 40) + rope_delta).expand(3, 10)
    all_pos = torch.cat([prefill_pos, decode_pos], dim=1)
    with torch.no_grad():
        oracle = hf(input_ids=ids[None], position_ids=all_pos[:, None, :], use_cache=False).logits[0]
    state = model.new_state(64)
    logits = [model.forward(ids[:30], state, position_ids=prefill_pos).logits]
    state.rope_delta = rope_delta
    for i in range(30, 40):
        logits.append(model.forward(ids[i:i + 1], state).logits)
    assert rel_err(torch.cat(logits), oracle) <= FP32_REL_TOL


def test_inputs_embeds_replace_the_embedding_gather(mm):
    model, ids = mm["ours"], mm["ids"][:20]
    a = model.forward(ids, model.new_state(32)).logits
    b = model.forward(None, model.new_state(32), inputs_embeds=model.embed(ids)).logits
    assert torch.equal(a, b)


def test_last_only_logits_equal_the_last_row(mm):
    model, ids = mm["ours"], mm["ids"][:20]
    full = model.forward(ids, model.new_state(32)).logits
    last = model.forward(ids, model.new_state(32), last_only=True).logits
    assert last.shape == (1, full.shape[1])
    assert rel_err(last, full[-1:]) <= FP32_REL_TOL


def test_state_overflow_is_refused_before_any_state_changes(mm):
    model, ids = mm["ours"], mm["ids"]
    state = model.new_state(10)
    model.forward(ids[:8], state)
    before = state.clone()
    with pytest.raises(ValueError, match="holds 10 tokens"):
        model.forward(ids[8:12], state)
    assert state.seq_len == 8
    for a, b in zip(state.gdn, before.gdn):
        assert torch.equal(a.recurrent, b.recurrent) and torch.equal(a.conv, b.conv)


BF16_REL_TOL = 5e-2  # bf16 activations and weights vs the fp32 oracle: about 2e-2 measured


def test_bf16_checkpoint_in_fp32_and_bf16(tmp_path):
    """A bf16 checkpoint: fp32 math reproduces the oracle (which holds the same bf16-rounded weights)."""
    from tiny_models import make_tiny_hf_model
    hf, path = make_tiny_hf_model(tmp_path / "bf16", seed=3, dtype="bfloat16", vision=False, mtp=False,
                                  num_hidden_layers=4)
    ids = _ids(70, hf.config.text_config.vocab_size, seed=14)
    with torch.no_grad():
        oracle = hf(input_ids=ids[None]).logits[0]
    fp32 = ReferenceModel.from_checkpoint(path, dtype=torch.float32)
    assert rel_err(fp32.forward(ids, fp32.new_state(80)).logits, oracle) <= FP32_REL_TOL
    bf16 = ReferenceModel.from_checkpoint(path, dtype=torch.bfloat16)
    state = bf16.new_state(80)
    out = bf16.forward(ids, state)
    assert state.gdn[0].recurrent.dtype == torch.float32  # the recurrent state stays fp32
    assert rel_err(out.logits, oracle) <= BF16_REL_TOL


@pytest.mark.gpu
def test_reference_on_gpu_matches_cpu(tiny_checkpoint):
    from engine.native import native_status
    if not native_status().gpu_usable or not torch.cuda.is_available():
        pytest.skip("no usable GPU")
    ids = _ids(100, 1024, seed=15)
    cpu = ReferenceModel.from_checkpoint(tiny_checkpoint)
    gpu = ReferenceModel.from_checkpoint(tiny_checkpoint, device="cuda")
    a = cpu.forward(ids, cpu.new_state(128)).logits
    b = gpu.forward(ids, gpu.new_state(128)).logits
    assert rel_err(b.cpu(), a) <= FP32_REL_TOL


def test_per_layer_trace_matches_transformers_hidden_states(mm):
    """trace = embedding + every layer's residual output; transformers' last entry is after the final norm."""
    model, hf, ids = mm["ours"], mm["hf"], mm["ids"][:30]
    with torch.no_grad():
        oracle = hf(input_ids=ids[None], output_hidden_states=True).hidden_states
    trace: list[torch.Tensor] = []
    out = model.forward(ids, model.new_state(32), trace=trace)
    n = model.config.text.num_hidden_layers
    assert len(trace) == n + 1 == len(oracle)
    for layer in range(n):  # entries 0..n-1: embedding and outputs of layers 0..n-2
        assert rel_err(trace[layer], oracle[layer][0]) <= FP32_REL_TOL, f"entry {layer}"
    assert rel_err(out.hidden, oracle[n][0]) <= FP32_REL_TOL


def test_attention_in_query_blocks_equals_oracle(mm, monkeypatch):
    """Long contexts split queries into blocks to bound the score matrix; force 7-query blocks here."""
    import engine.reference.attention as attention
    model, ids = mm["ours"], mm["ids"][:PROMPT_LEN]
    heads = model.config.text.num_attention_heads
    monkeypatch.setattr(attention, "SCORE_ELEMENTS_PER_BLOCK", heads * PROMPT_LEN * 7)
    out = model.forward(ids, model.new_state(PROMPT_LEN))
    assert rel_err(out.logits, mm["full_logits"][:PROMPT_LEN]) <= FP32_REL_TOL


def test_bad_inputs_are_refused_with_a_reason(mm):
    model = mm["ours"]
    vocab = model.config.text.vocab_size
    with pytest.raises(ValueError, match=f"token id {vocab} is outside"):
        model.forward(torch.tensor([1, vocab]), model.new_state(4))
    with pytest.raises(ValueError, match="zero tokens"):
        model.forward(torch.tensor([], dtype=torch.long), model.new_state(4))
    with pytest.raises(ValueError, match=r"position_ids has shape \[1, 2\]"):
        model.forward(torch.tensor([1, 2]), model.new_state(4), position_ids=torch.tensor([[0, 1]]))
