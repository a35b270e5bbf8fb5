"""A converted Monorail artifact loaded by the native engine (GPU): the codes as stored, the same logits
as the reference backend reading the same artifact, and generation through the public Engine API.

The checkpoint is written by transformers with real key names, including mtp.* and model.visual.*
tensors (which the native text engine skips), at widths the native kernels take (head_dim 256,
GDN heads 128)."""

from __future__ import annotations

import os

import pytest

from native_helpers import TOL_MODEL_INT8KV, rel_err, requires_gpu
from test_native_model import DictSource, source_from_checkpoint, teacher_forced

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


def test_default_recipe_artifact_holds_every_stored_format_and_matches_reference(artifacts, monkeypatch):
    """q4-27b mixes formats inside the fused native roles (8-bit GDN a/b beside 4-bit qkv/z, 6-bit k/v
    beside 4-bit q). The engine holds those rows as a second matrix in their stored format, so every
    tensor goes up with the artifact's own codes (nothing quantized at load), and it matches the
    reference reading the same artifact on the decode path (GEMV per segment) and the prefill path
    (GEMM per segment, chunks of 64 + 36 tokens)."""
    from engine import native_recipe
    from engine.artifact import Artifact
    from engine.native_backend import NativeModel
    from engine.reference.model import ReferenceModel
    view = Artifact.open(artifacts["q4-27b"], allow_test_shapes=True).checkpoint_view()
    calls = []
    real_quantize = native_recipe._quantize
    monkeypatch.setattr(native_recipe, "_quantize", lambda w, b, g: calls.append((b, g)) or real_quantize(w, b, g))
    native = NativeModel.from_checkpoint(view, kv_dtype="int8", max_context=256, vram_budget_bytes=2 << 30,
                                         prefill_chunk=64)
    assert calls == []
    recipe = native.plan.request.recipe
    assert recipe.spec("gdn_in") == (4, 64) and recipe.tail_spec("gdn_in") == (8, 64)
    assert recipe.spec("attn_qkv") == (4, 64) and recipe.tail_spec("attn_qkv") == (6, 64)
    assert {"weights gdn_in b|a", "weights attn_qkv k|v"} <= {ln.label for ln in native.plan.lines}

    ref = ReferenceModel.from_checkpoint(view, device="cuda", gdn_mode="recurrent", mtp=False)
    tokens = torch.randint(0, 1000, (48,), generator=torch.Generator().manual_seed(23)).tolist()
    worst, checked, agree = teacher_forced(native, ref, tokens, TOL_MODEL_INT8KV)
    prompt = torch.randint(0, 1000, (100,), generator=torch.Generator().manual_seed(24))
    ns, rs = native.new_state(128), ref.new_state(128)
    prefill_err = rel_err(native.forward(prompt, ns, last_only=True).logits[-1],
                          ref.forward(prompt, rs).logits[-1].cpu())
    print(f"q4-27b artifact, native vs reference: decode worst logits rel err {worst:.2e}, greedy agree "
          f"{agree}/{checked}; prefill {prefill_err:.2e}")
    assert worst < TOL_MODEL_INT8KV and prefill_err < TOL_MODEL_INT8KV
    assert agree == checked >= 20


# Split and fused engines hold bit-identical dequantized weights; only the GEMV/GEMM arithmetic of
# g32 against g64 groups differs. A tail written to the wrong rows or columns would be an O(1) error.
TOL_SPLIT_VS_FUSED = 1e-2


def _tail_groups_share_scales(w):
    """w with each 64-column group's absmax written into both of its 32-column halves, so that q8g32
    and q8g64 (round-to-nearest) find the same scales and codes: the same dequantized weight."""
    w = w.clone()
    groups = w.view(w.shape[0], -1, 64)
    amax = groups.abs().amax(-1)
    groups[:, :, 0] = amax
    groups[:, :, 32] = amax
    return w


def test_split_engine_equals_fused_engine_on_the_same_weights(tiny_native_ckpt):
    """The same dequantized weights held once as one matrix per input projection (q8g64) and once
    split (q8g64 head, q8g32 b|a and k|v tail): equal logits on the decode and prefill paths."""
    from engine.native_backend import NativeModel
    from engine.native_recipe import _quantize, NATIVE_TAIL_MEMBERS
    from engine.plan import Recipe, uniform_recipe
    src = source_from_checkpoint(tiny_native_ckpt)
    tails = {k: _tail_groups_share_scales(v) if k.endswith(sum(NATIVE_TAIL_MEMBERS.values(), ())) else v
             for k, v in src.tensors.items()}
    src = DictSource(src.config, tails)
    some_tail = next(v for k, v in tails.items() if k.endswith("k_proj.weight"))
    assert torch.equal(_quantize(some_tail, 8, 32).dequantize(), _quantize(some_tail, 8, 64).dequantize())

    roles = dict(uniform_recipe(4, 64).roles, gdn_in=(8, 64), attn_qkv=(8, 64))
    fused_recipe = Recipe("fused", roles)
    split_recipe = Recipe("split", roles, {"gdn_in": (8, 32), "attn_qkv": (8, 32)})

    def engine(recipe):
        return NativeModel.from_checkpoint(src, kv_dtype="bf16", max_context=256, vram_budget_bytes=2 << 30,
                                           recipe=recipe, prefill_chunk=64)
    fused, split = engine(fused_recipe), engine(split_recipe)
    assert "weights gdn_in b|a" in {ln.label for ln in split.plan.lines}
    assert "weights gdn_in" in {ln.label for ln in fused.plan.lines}

    g = torch.Generator().manual_seed(31)
    prompt = torch.randint(0, 1000, (100,), generator=g)
    fs, ss = fused.new_state(160), split.new_state(160)
    errs = [rel_err(split.forward(prompt, ss, last_only=True).logits[-1],
                    fused.forward(prompt, fs, last_only=True).logits[-1])]
    for tok in torch.randint(0, 1000, (24,), generator=g).tolist():
        x = torch.tensor([tok])
        errs.append(rel_err(split.forward(x, ss).logits[-1], fused.forward(x, fs).logits[-1]))
    print(f"split vs fused engine: prefill {errs[0]:.2e}, decode worst {max(errs[1:]):.2e}")
    assert max(errs) < TOL_SPLIT_VS_FUSED


@pytest.mark.parametrize("way", ["head writes x", "one kernel"])
def test_split_projection_fused_equals_the_norm_kernel(tiny_native_ckpt, way):
    """A split projection's head on the fused-norm variant 30 either leaves the normalised x for its tail (qgemv_normed's
    keep_x: the head's blocks write it) or runs the tail in the same kernel (qgemv_normed_split, set_qgemv_split_fused),
    instead of a norm kernel writing x first and two GEMVs: the same decode logits within the one-fp16-step differences
    of x (the sum of squares in another order) and the tail's sums in another order, with variant 30 forced on every
    4-bit matrix of a tiny engine whose 4-bit heads have 8-bit tails."""
    from engine.native import load_native
    from engine.native_backend import NativeModel
    from engine.plan import Recipe, uniform_recipe
    nat = load_native()
    src = source_from_checkpoint(tiny_native_ckpt)
    recipe = Recipe("split4", uniform_recipe(4, 64).roles, {"gdn_in": (8, 32), "attn_qkv": (8, 32)})
    model = NativeModel.from_checkpoint(src, kv_dtype="bf16", max_context=256, vram_budget_bytes=2 << 30,
                                        recipe=recipe, prefill_chunk=64)
    g = torch.Generator().manual_seed(5)
    prompt = torch.randint(0, 1000, (40,), generator=g)
    tokens = torch.randint(0, 1000, (8,), generator=g).tolist()

    def decode(keep_x: bool, split: bool):
        nat.set_qgemv_keep_x_fused(keep_x)
        nat.set_qgemv_split_fused(split)
        model.engine.reset_graphs()
        st = model.new_state(64)
        model.forward(prompt, st, last_only=True)
        return [model.forward(torch.tensor([t]), st).logits[-1] for t in tokens]

    nat.set_qgemv_variant(30)
    try:
        fused = decode(True, False) if way == "head writes x" else decode(False, True)
        normed = decode(False, False)
    finally:
        nat.set_qgemv_variant(0)
        nat.set_qgemv_keep_x_fused(True)  # the defaults
        nat.set_qgemv_split_fused(True)
        model.engine.reset_graphs()
    errs = [rel_err(a, b) for a, b in zip(fused, normed)]
    print(f"{way} vs norm kernel: worst decode logit rel err {max(errs):.2e}")
    assert max(errs) < 1e-2


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
