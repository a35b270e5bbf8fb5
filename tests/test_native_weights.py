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
