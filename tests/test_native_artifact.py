"""A converted Monorail artifact loaded by the native engine (GPU): the codes as stored, the same logits
as the reference backend reading the same artifact, and generation through the public Engine API.

The checkpoint is written by transformers with real key names, including mtp.* and model.visual.*
tensors (which the native text engine skips), at widths the native kernels take (head_dim 256,
GDN heads 128)."""

from __future__ import annotations

import os

import pytest

from native_helpers import TOL_MODEL_INT8KV, requires_gpu
from test_native_model import teacher_forced

pytestmark = [pytest.mark.gpu, requires_gpu]
torch = pytest.importorskip("torch")


@pytest.fixture(scope="module")
def artifacts(tmp_path_factory):
    pytest.importorskip("transformers")
    from engine.convert import convert
    from tiny_models import TinyShape, make_tiny_hf_model
    os.environ["MONORAIL_ALLOW_TEST_SHAPES"] = "1"
    d = tmp_path_factory.mktemp("native_artifact")
    shape = TinyShape(hidden_size=256, intermediate_size=512, linear_head_dim=128)
    # the real vocabulary, so the Engine's real tokenizer can drive it
    _, ckpt = make_tiny_hf_model(d / "hf", seed=7, vision=True, mtp=True, vocab_size=248320, num_hidden_layers=4,
                                 shape=shape)
    out = {}
    for recipe in ("q4", "q4-27b"):
        out[recipe] = d / f"tiny-{recipe}.monorail"
        convert(ckpt, out[recipe], recipe=recipe, allow_test_shapes=True, threads=2)
    return out


def test_uniform_artifact_native_matches_reference_on_the_same_codes(artifacts):
    """q4 stores every native role in one format, so the native engine holds exactly the artifact's
    codes and the reference backend (dequantizing the same artifact) is an exact-weights oracle."""
    from engine.artifact import Artifact
    from engine.native_backend import NativeModel
    from engine.reference.model import ReferenceModel
    view = Artifact.open(artifacts["q4"], allow_test_shapes=True).checkpoint_view()
    native = NativeModel.from_checkpoint(view, kv_dtype="int8", max_context=256, vram_budget_bytes=2 << 30)
    assert native.plan.request.recipe.name.startswith("artifact:")
    ref = ReferenceModel.from_checkpoint(view, device="cuda", gdn_mode="recurrent", mtp=False)
    tokens = torch.randint(0, 1000, (48,), generator=torch.Generator().manual_seed(21)).tolist()
    worst, checked, agree = teacher_forced(native, ref, tokens, TOL_MODEL_INT8KV)
    print(f"q4 artifact, native vs reference: worst logits rel err {worst:.2e}, greedy agree {agree}/{checked}")
    assert worst < TOL_MODEL_INT8KV
    assert agree == checked >= 20


def test_default_recipe_artifact_generates_through_the_engine(artifacts):
    from engine.api import Engine, EngineOptions, Finished, TextDelta
    from engine.sampling import SamplingParams
    eng = Engine.load(str(artifacts["q4-27b"]), EngineOptions(backend="native", max_context=1024))
    assert eng.info.backend == "native"
    msgs = [{"role": "user", "content": "Describe a railway timetable in a few words, please."}]
    text, fin = [], None
    for ev in eng.generate(msgs, SamplingParams(temperature=0.0, max_tokens=12)):
        if isinstance(ev, TextDelta):
            text.append(ev.text)
        elif isinstance(ev, Finished):
            fin = ev
    assert fin is not None and fin.error is None and fin.reason in ("stop", "length")
    assert fin.completion_tokens >= 1 and fin.prompt_tokens > 16
