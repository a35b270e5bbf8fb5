"""Which codes the native engine uploads (CPU: no GPU needed to decide it).

An artifact that already stores a tensor in the native recipe's format hands over its own codes
(no second quantization); any other source is quantized with round-to-nearest at load.
"""

import torch

from engine.artifact import Artifact
from engine.convert import convert
from engine import native_backend
from engine.native_backend import native_weight
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
    real_quantize = native_backend._quantize
    monkeypatch.setattr(native_backend, "_quantize", lambda w, b, g: calls.append((b, g)) or real_quantize(w, b, g))

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


def test_native_recipe_keeps_the_converters_formats_where_roles_allow(tiny_checkpoint, tmp_path, monkeypatch):
    """q4-27b stores GDN a/b in 8-bit and attention k/v in 6-bit beside 4-bit siblings of the same fused
    native matrix: those roles take the majority format, every other role keeps its stored format,
    and only the minority parts are quantized again at load."""
    from engine.native_backend import native_role, recipe_from_artifact
    from engine.recipe import get_recipe

    monkeypatch.setenv("MONORAIL_ALLOW_TEST_SHAPES", "1")
    out = tmp_path / "tiny-q4-27b.monorail"
    convert(tiny_checkpoint, out, recipe="q4-27b", method="rtn", allow_test_shapes=True)
    art = Artifact.open(out, allow_test_shapes=True)
    recipe = recipe_from_artifact(art)
    stored = get_recipe("q4-27b").formats
    assert recipe.spec("embed") == (6, 64) and recipe.spec("lm_head") == (6, 64)   # q6g64 as stored
    assert recipe.spec("mlp_down") == (5, 64) and recipe.spec("gdn_out") == (5, 64) and recipe.spec("attn_o") == (5, 64)
    assert recipe.spec("mlp_gate_up") == (4, 64)
    assert recipe.spec("gdn_in") == (4, 64) and recipe.spec("attn_qkv") == (4, 64)  # majority of mixed roles
    assert stored["gdn.ab"] == "q8g64" and stored["attn.kv"] == "q6g64"

    view = art.checkpoint_view()
    calls = []
    real_quantize = native_backend._quantize
    monkeypatch.setattr(native_backend, "_quantize", lambda w, b, g: calls.append((b, g)) or real_quantize(w, b, g))
    requantized = []
    for key, info in art.weights.items():
        role = native_role(key)
        if role is None:
            continue
        before = len(calls)
        rel = key[len(view.text_prefix):] if key.startswith(view.text_prefix) else key
        native_weight(view, rel, *recipe.spec(role))
        if len(calls) > before:
            requantized.append(key.rsplit(".", 2)[-2])
    assert requantized and set(requantized) <= {"in_proj_a", "in_proj_b", "k_proj", "v_proj"}


def test_load_progress_counts_bytes_up_to_the_planned_weights(tiny_checkpoint):
    """Loading reports bytes uploaded into the arena against the plan's weight bytes, monotonically,
    ending at 100 % (CPU: a recording stand-in for the device engine)."""
    from engine.loader import Checkpoint
    from engine.native_backend import NativeModel
    from engine.plan import DEFAULT_RECIPE, PlanRequest, make_plan

    class Recorder:
        def __init__(self):
            self.matrix_bytes = 0

        def load_matrix(self, role, layer, row_offset, row_stride, codes, high, scales):
            self.matrix_bytes += codes.nbytes + scales.nbytes + (0 if high is None else high.nbytes)

        def load_vector(self, kind, layer, data):
            pass

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
