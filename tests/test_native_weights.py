"""Which codes the native engine uploads (CPU: no GPU needed to decide it).

An artifact that already stores a tensor in the native recipe's format hands over its own codes
(no second quantization); any other source is quantized with round-to-nearest at load.
"""

import pytest
import torch

from engine.artifact import Artifact
from engine.convert import convert
from engine import native_recipe
from engine.native_recipe import native_weight
from engine.quant import QuantFormat, quantize


def test_artifact_codes_are_used_as_stored(tiny_checkpoint, tmp_path, monkeypatch):
    monkeypatch.setenv("MONORAIL_ALLOW_TEST_SHAPES", "1")
    out = tmp_path / "tiny-q4.monorail"
    convert(tiny_checkpoint, out, recipe="q4", method="search", allow_test_shapes=True)
    art = Artifact.open(out, allow_test_shapes=True)
    view = art.checkpoint_view()
    rel = "layers.0.mlp.gate_proj.weight"
    full = view.full_key(rel)
    assert art.weights[full].format == "q4g64"

    stored = art.quantized(full)
    calls = []
    real_quantize = native_recipe._quantize
    monkeypatch.setattr(native_recipe, "_quantize", lambda w, b, g: calls.append((b, g)) or real_quantize(w, b, g))

    same = native_weight(view, rel, 4, 64)
    assert calls == []  # the stored codes went through untouched
    assert torch.equal(same.codes, stored.codes) and torch.equal(same.scales, stored.scales)

    # A format the artifact does not store (8-bit here) is quantized at load from the dequantized weight.
    other = native_weight(view, rel, 8, 64)
    assert calls == [(8, 64)] and other.bits == 8
    err = (other.dequantize() - view.text(rel).float()).norm() / view.text(rel).float().norm()
    assert float(err) < 0.01


def test_hf_checkpoint_is_quantized_at_load(tiny_checkpoint):
    from engine.loader import Checkpoint

    ck = Checkpoint.open(tiny_checkpoint)
    rel = "layers.0.mlp.down_proj.weight"
    q = native_weight(ck, rel, 4, 64)
    ref = quantize(ck.text(rel).float(), QuantFormat(4, 64), method="rtn")
    assert torch.equal(q.codes, ref.codes) and torch.equal(q.scales, ref.scales)


@pytest.fixture(scope="module")
def q4_27b_artifact(tiny_checkpoint, tmp_path_factory):
    """The tiny checkpoint converted with the default recipe (every bit width the native roles mix)."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("MONORAIL_ALLOW_TEST_SHAPES", "1")
        out = tmp_path_factory.mktemp("q4_27b") / "tiny-q4-27b.monorail"
        convert(tiny_checkpoint, out, recipe="q4-27b", method="rtn", allow_test_shapes=True)
        yield Artifact.open(out, allow_test_shapes=True)


def test_native_recipe_keeps_every_stored_format(q4_27b_artifact, monkeypatch):
    """q4-27b stores GDN a/b in 8-bit and attention k/v in 6-bit beside 4-bit siblings of the same fused
    native matrix: those rows become the role's tail segment in their own format, so no tensor of the
    text model is quantized again at load."""
    from engine.native_recipe import native_segment, recipe_from_artifact
    from engine.recipe import get_recipe

    art = q4_27b_artifact
    recipe = recipe_from_artifact(art)
    stored = get_recipe("q4-27b").formats
    assert stored["gdn.ab"] == "q8g64" and stored["attn.kv"] == "q6g64"
    assert recipe.spec("embed") == (6, 64) and recipe.spec("lm_head") == (6, 64)   # q6g64 as stored
    assert recipe.spec("mlp_down") == (5, 64) and recipe.spec("gdn_out") == (5, 64) and recipe.spec("attn_o") == (5, 64)
    assert recipe.spec("mlp_gate_up") == (4, 64) and not recipe.is_split("mlp_gate_up")
    assert recipe.spec("gdn_in") == (4, 64) and recipe.tail_spec("gdn_in") == (8, 64)
    assert recipe.spec("attn_qkv") == (4, 64) and recipe.tail_spec("attn_qkv") == (6, 64)
    assert "gdn_in=q4g64(b|a=q8g64)" in recipe.name and "attn_qkv=q4g64(k|v=q6g64)" in recipe.name

    view = art.checkpoint_view()
    calls = []
    real_quantize = native_recipe._quantize
    monkeypatch.setattr(native_recipe, "_quantize", lambda w, b, g: calls.append((b, g)) or real_quantize(w, b, g))
    loaded = 0
    for key in art.weights:
        seg = native_segment(key)
        if seg is None:
            continue
        role, part = seg
        spec = recipe.tail_spec(role) if part == "tail" else recipe.spec(role)
        rel = key[len(view.text_prefix):] if key.startswith(view.text_prefix) else key
        native_weight(view, rel, *spec)
        loaded += 1
    assert loaded > 20 and calls == []  # every native tensor went up as stored


def test_gate_and_up_in_different_formats_are_refused():
    """Gate and up rows are interleaved pairs of one device matrix: one format or a clear refusal."""
    from engine.native_backend import NativeBackendError
    from engine.native_recipe import native_recipe

    pre = "model.language_model.layers.0.mlp."
    tensors = [(pre + "gate_proj.weight", "q4g64", (512, 256)), (pre + "up_proj.weight", "q5g64", (512, 256)),
               (pre + "down_proj.weight", "q5g64", (256, 512))]
    with pytest.raises(NativeBackendError) as info:
        native_recipe(tensors, "artifact")
    msg = str(info.value)
    assert pre + "gate_proj.weight" in msg and pre + "up_proj.weight" in msg and "q4g64" in msg and "q5g64" in msg
    same = native_recipe([tensors[0], (tensors[1][0], "q4g64", tensors[1][2]), tensors[2]], "artifact")
    assert same.spec("mlp_gate_up") == (4, 64)


def test_one_segment_in_mixed_formats_takes_its_majority():
    """Parts of one segment in different formats (GDN qkv and z here) cannot all be kept: the segment
    takes the format of most of its parameters; the tail keeps its own."""
    from engine.native_recipe import native_recipe

    pre = "model.language_model.layers.0.linear_attn."
    tensors = [(pre + "in_proj_qkv.weight", "q6g64", (1024, 256)), (pre + "in_proj_z.weight", "q5g32", (512, 256)),
               (pre + "in_proj_b.weight", "q8g32", (4, 256)), (pre + "in_proj_a.weight", "q8g32", (4, 256))]
    r = native_recipe(tensors, "artifact")
    assert r.spec("gdn_in") == (6, 64) and r.tail_spec("gdn_in") == (8, 32)
    assert r.spec("attn_qkv") == r.tail_spec("attn_qkv")  # absent: the fallback, unsplit


def test_split_recipe_uploads_each_segment_in_its_format(q4_27b_artifact, monkeypatch):
    """Loading a q4-27b artifact with its split recipe: k/v rows go up as 6-bit, b/a rows as 8-bit, at
    their rows of the fused role, all as stored (no quantization at load), and the bytes uploaded are
    exactly the plan's weight bytes."""
    from engine.native_backend import NativeModel
    from engine.native_recipe import recipe_from_artifact
    from engine.plan import PlanRequest, make_plan

    art = q4_27b_artifact
    view = art.checkpoint_view()
    recipe = recipe_from_artifact(art)
    plan = make_plan(view.config, PlanRequest(max_context=256, recipe=recipe, vram_budget=1 << 40))
    t = view.config.text
    rec = Recorder()
    calls = []
    monkeypatch.setattr(native_recipe, "_quantize", lambda w, b, g: calls.append((b, g)))
    NativeModel(view.config, rec, plan, max_context=256, kv_dtype="int8", lanes=1)._load_weights(
        view, recipe, lambda f, m: None)
    assert calls == []
    K = t.hidden_size  # the input projections' width: 8-bit codes K bytes a row, others K/2 (+ high bits)
    bits = {(role, row): 8 if codes.shape[1] == K else 4 if high is None else 4 + 8 * high.shape[1] // K
            for role, layer, row, codes, high in rec.uploads if role in ("gdn_in", "attn_qkv")}
    q_rows = 2 * t.num_attention_heads * t.head_dim
    kv_rows = t.num_key_value_heads * t.head_dim
    assert bits[("attn_qkv", 0)] == 4 and bits[("attn_qkv", q_rows)] == 6 and bits[("attn_qkv", q_rows + kv_rows)] == 6
    b_row = t.linear_conv_dim + t.linear_v_dim
    assert bits[("gdn_in", 0)] == 4 and bits[("gdn_in", b_row)] == 8
    assert bits[("gdn_in", b_row + t.linear_num_value_heads)] == 8
    planned = sum(a.bytes for a in plan.allocations if a.category.startswith("weights:")
                  and a.category not in ("weights:vision", "weights:small"))
    assert rec.matrix_bytes == planned


class Recorder:
    """A stand-in for the device engine that records what would be uploaded."""
    has_mtp = False   # planned without the MTP head: its tensors are not uploaded

    def __init__(self):
        self.matrix_bytes = 0
        self.uploads = []

    def load_matrix(self, role, layer, row_offset, row_stride, codes, high, scales):
        self.matrix_bytes += codes.nbytes + scales.nbytes + (0 if high is None else high.nbytes)
        self.uploads.append((role, layer, row_offset, codes, high))

    def load_vector(self, kind, layer, data):
        pass


def test_load_progress_counts_bytes_up_to_the_planned_weights(tiny_checkpoint):
    """Loading reports bytes uploaded into the arena against the plan's weight bytes, monotonically,
    ending at 100 % (CPU: a recording stand-in for the device engine)."""
    from engine.loader import Checkpoint
    from engine.native_backend import NativeModel
    from engine.plan import DEFAULT_RECIPE, PlanRequest, make_plan

    ck = Checkpoint.open(tiny_checkpoint)
    plan = make_plan(ck.config, PlanRequest(max_context=256, vram_budget=1 << 40))
    rec = Recorder()
    model = NativeModel(ck.config, rec, plan, max_context=256, kv_dtype="int8", lanes=1)
    events = []
    model._load_weights(ck, DEFAULT_RECIPE, lambda f, m: events.append((f, m)))
    fractions = [f for f, _ in events]
    assert fractions == sorted(fractions) and len(events) > 10
    assert events[-1][1].endswith("(100 %)")
    planned = sum(a.bytes for a in plan.allocations if a.category.startswith("weights:")
                  and a.category not in ("weights:vision", "weights:small"))
    assert rec.matrix_bytes == planned  # every planned matrix byte went up, once


def test_the_mtp_head_uploads_into_its_planned_bytes(tiny_native_mtp_ckpt):
    """A plan with drafts holds the MTP head: loading uploads its fc (load role mtp_fc, attn_qkv's format) and its
    layer's matrices as engine layer num_hidden_layers, so that every planned matrix byte (the "weights mtp" line
    included) goes up once (CPU: the recording stand-in)."""
    from engine.loader import Checkpoint
    from engine.native_backend import NativeModel
    from engine.plan import DEFAULT_RECIPE, PlanRequest, make_plan

    ck = Checkpoint.open(tiny_native_mtp_ckpt)
    plan = make_plan(ck.config, PlanRequest(max_context=256, speculative_window=3, mtp_drafts=3, vram_budget=1 << 40))
    rec = Recorder()
    rec.has_mtp = True
    model = NativeModel(ck.config, rec, plan, max_context=256, kv_dtype="int8", lanes=1, step_tokens=4, mtp_drafts=3)
    model._load_weights(ck, DEFAULT_RECIPE, lambda f, m: None)
    planned = sum(a.bytes for a in plan.allocations if a.category.startswith("weights:")
                  and a.category not in ("weights:vision", "weights:small"))
    assert plan.line("weights mtp").bytes > 0
    assert rec.matrix_bytes == planned
    n = ck.config.text.num_hidden_layers
    head = sorted({(role, layer) for role, layer, *_ in rec.uploads if layer == n or role == "mtp_fc"})
    assert head == [("attn_o", n), ("attn_qkv", n), ("mlp_down", n), ("mlp_gate_up", n), ("mtp_fc", -1)]
