"""The native engine end to end against the reference model on the same dequantized weights (GPU).

- a tiny checkpoint written by transformers (27B head sizes, small widths): 64 teacher-forced decode
  steps, logits within tolerance at every step, greedy tokens equal wherever the reference's top-2
  margin exceeds the tolerance; int4 KV against a reference whose KV cache holds the same int4 round trip;
- full-width layers (27B hidden/intermediate/head shapes, 3 GDN + 1 attention layer, small vocab);
- the arena: device memory identical before and after many requests; an impossible budget fails
  before anything is allocated."""

from __future__ import annotations

import copy

import pytest

from native_helpers import (TOL_MODEL_BF16KV, TOL_MODEL_INT4KV, TOL_MODEL_INT8KV, reference_kv_int4, rel_err,
                            requires_gpu)

pytestmark = [pytest.mark.gpu, requires_gpu]
torch = pytest.importorskip("torch")


class DictSource:
    """A tensor source (the interface ReferenceModel and NativeModel load from) over a dict."""

    def __init__(self, config, tensors: dict):
        self.config = config
        self.tensors = tensors

    def text(self, rel_key, dtype=None):
        t = self.tensors[rel_key]
        return t if dtype is None else t.to(dtype)

    def get(self, full_key, dtype=None):
        return self.text(full_key, dtype)

    def has(self, full_key):
        return full_key in self.tensors

    def keys(self):
        return list(self.tensors)


def dequantized_source(src: DictSource, recipe) -> DictSource:
    """The same checkpoint with every quantized matrix replaced by its dequantized value (RTN, as loaded)."""
    from engine.native_recipe import _quantize
    # the MTP head's fc is held in attn_qkv's format (csrc/alloc_sequence.h kMtpFcRole); its layer's matrices match
    # the trunk's by name below
    roles = {"embed_tokens.weight": "embed", "lm_head.weight": "lm_head", "mtp.fc.weight": "attn_qkv"}
    out = {}
    for k, v in src.tensors.items():
        role = roles.get(k)
        if role is None and k.endswith(".weight") and v.dim() == 2:
            if ".mlp.gate_proj" in k or ".mlp.up_proj" in k:
                role = "mlp_gate_up"
            elif ".mlp.down_proj" in k:
                role = "mlp_down"
            elif ".linear_attn.out_proj" in k:
                role = "gdn_out"
            elif ".linear_attn.in_proj" in k:
                role = "gdn_in"
            elif ".self_attn.o_proj" in k:
                role = "attn_o"
            elif ".self_attn." in k:
                role = "attn_qkv"
        if role is not None:
            bits, group = recipe.spec(role)
            out[k] = _quantize(v, bits, group).dequantize().to(v.dtype)
        else:
            out[k] = v
    return DictSource(src.config, out)


def source_from_checkpoint(path, *, mtp: bool = False) -> DictSource:
    """The checkpoint's text tensors in fp32 (and the MTP head's with ``mtp``)."""
    from engine.loader import Checkpoint
    from engine.loader import text_tensor_shapes
    ck = Checkpoint.open(path)
    keys = [k for k in text_tensor_shapes(ck.config.text) if mtp or not k.startswith("mtp.")]
    return DictSource(ck.config, {k: ck.text(k).float() for k in keys})


def teacher_forced(native_model, ref_model, tokens, tol):
    """Logits of both models at every step; returns the worst relative error and greedy agreement."""
    ns = native_model.new_state(len(tokens) + 1)
    rs = ref_model.new_state(len(tokens) + 1)
    worst, checked, agree = 0.0, 0, 0
    try:
        for tok in tokens:
            x = torch.tensor([tok])
            ln = native_model.forward(x, ns).logits[-1].double()
            lr = ref_model.forward(x, rs).logits[-1].double().cpu()
            err = rel_err(ln, lr)
            worst = max(worst, err)
            top2 = torch.topk(lr, 2).values
            # greedy must agree where the reference's margin is beyond the logit error scale
            if float(top2[0] - top2[1]) > tol * float(lr.norm()) / lr.numel() ** 0.5 * 4:
                checked += 1
                agree += int(int(ln.argmax()) == int(lr.argmax()))
    finally:
        native_model.release(ns)
    return worst, checked, agree


@pytest.mark.parametrize("attn_variant", [0, 2, 3, 4, -1])  # -1: the route by KV format (int8: variant 6)
@pytest.mark.parametrize("kv, tol", [("bf16", TOL_MODEL_BF16KV), ("int8", TOL_MODEL_INT8KV)])
def test_tiny_model_64_teacher_forced_steps(tiny_native_ckpt, kv, tol, attn_variant):
    from engine.native import load_native
    nat = load_native()
    default = nat.get_attn_variant()
    nat.set_attn_variant(attn_variant)
    try:
        _tiny_model_case(tiny_native_ckpt, kv, tol, attn_variant)
    finally:
        nat.set_attn_variant(default)


@pytest.mark.parametrize("attn_variant", [0, 4])
def test_tiny_model_int4_kv_teacher_forced_steps(tiny_native_ckpt, attn_variant, monkeypatch):
    """int4 KV (variants 0 and 4; 2 and 3 refuse it): the reference stores the int4 round trip of its K/V
    (reference_kv_int4), so the logits are held to TOL_MODEL_INT4KV (native_helpers: the codes the two
    models round differently), and greedy tokens must agree wherever the reference's top-2 margin is more
    than 4 x TOL_MODEL_INT4KV x the logits' rms. At least 12 of the 64 steps must be that clear, so the
    greedy check cannot pass vacuously: the H200 measured 14 clear steps for both variants, all agreeing,
    with the worst logits error 6.2e-2 (bench/NOTES.md, session 3 final call; the first guess, 16, was
    above what this margin leaves on the tiny model)."""
    from engine.native import load_native
    reference_kv_int4(monkeypatch)
    nat = load_native()
    default = nat.get_attn_variant()
    nat.set_attn_variant(attn_variant)
    try:
        _tiny_model_case(tiny_native_ckpt, "int4", TOL_MODEL_INT4KV, attn_variant, min_checked=12)
    finally:
        nat.set_attn_variant(default)


def _tiny_model_case(tiny_native_ckpt, kv, tol, attn_variant, min_checked=32):
    from engine.native_backend import NativeModel
    from engine.plan import DEFAULT_RECIPE
    from engine.reference.model import ReferenceModel
    src = source_from_checkpoint(tiny_native_ckpt)
    native = NativeModel.from_checkpoint(src, kv_dtype=kv, max_context=256, vram_budget_bytes=2 << 30)
    ref = ReferenceModel.from_checkpoint(dequantized_source(src, DEFAULT_RECIPE), device="cuda", gdn_mode="recurrent",
                                         mtp=False)
    tokens = torch.randint(0, 1000, (64,), generator=torch.Generator().manual_seed(1)).tolist()
    worst, checked, agree = teacher_forced(native, ref, tokens, tol)
    print(f"tiny {kv} attention variant {attn_variant}: worst logits rel err {worst:.2e}, greedy agree {agree}/{checked}")
    assert worst < tol
    assert checked >= min_checked and agree == checked


def test_multi_token_step_equals_single_steps(tiny_native_ckpt):
    from engine.native_backend import NativeModel
    src = source_from_checkpoint(tiny_native_ckpt)
    m = NativeModel.from_checkpoint(src, kv_dtype="bf16", max_context=128, vram_budget_bytes=2 << 30)
    tokens = torch.randint(0, 1000, (21,), generator=torch.Generator().manual_seed(2))
    s1 = m.new_state(64)
    a = m.forward(tokens, s1).logits  # steps of 16 + 5 tokens
    m.release(s1)
    s2 = m.new_state(64)
    b = torch.cat([m.forward(tokens[i:i + 1], s2).logits for i in range(21)])
    m.release(s2)
    assert rel_err(a, b) < 5e-3  # same ops, different token-tile instantiations


def full_width_source(n_layers=4, vocab=2048, seed=0):
    """27B widths (hidden 5120, intermediate 17408, 24/4 x 256 attention, 16/48 x 128 GDN), few layers."""
    from engine.config import parse_config
    from engine.loader import text_tensor_shapes
    from engine.registry import config_27b
    raw = copy.deepcopy(config_27b(vision=False).raw)
    raw["text_config"].update(num_hidden_layers=n_layers, vocab_size=vocab, mtp_num_hidden_layers=0)
    cfg = parse_config(raw)
    g = torch.Generator().manual_seed(seed)
    tensors = {}
    for k, shp in text_tensor_shapes(cfg.text).items():
        if k.startswith("mtp."):
            continue
        if len(shp) == 1 or k.endswith("conv1d.weight"):
            t = torch.randn(shp, generator=g) * 0.1
            if k.endswith("A_log"):
                t = torch.rand(shp, generator=g) * 2 - 1
        else:
            t = torch.randn(shp, generator=g) * (0.5 / shp[-1] ** 0.5)
        tensors[k] = t
    return DictSource(cfg, tensors)


def test_full_width_layers_vs_reference():
    from engine.native_backend import NativeModel
    from engine.plan import DEFAULT_RECIPE
    from engine.reference.model import ReferenceModel
    src = full_width_source()
    native = NativeModel.from_checkpoint(src, kv_dtype="bf16", max_context=64, vram_budget_bytes=8 << 30)
    ref = ReferenceModel.from_checkpoint(dequantized_source(src, DEFAULT_RECIPE), device="cuda", gdn_mode="recurrent",
                                         mtp=False)
    tokens = torch.randint(0, 2000, (8,), generator=torch.Generator().manual_seed(3)).tolist()
    worst, checked, agree = teacher_forced(native, ref, tokens, TOL_MODEL_BF16KV)
    print(f"full-width 3 GDN + 1 attention layers: worst logits rel err {worst:.2e}")
    assert worst < TOL_MODEL_BF16KV


def test_device_memory_constant_across_requests(tiny_native_ckpt):
    from engine.native import load_native
    from engine.native_backend import NativeModel
    nat = load_native()
    m = NativeModel.from_checkpoint(source_from_checkpoint(tiny_native_ckpt), kv_dtype="int8", max_context=256,
                                    vram_budget_bytes=2 << 30)
    from engine.sampling import SamplingParams
    params = SamplingParams(temperature=0.7, top_k=20, top_p=0.9, seed=1)

    def decode(s, n):  # the app's loop: tokens drawn and stepped on the device
        return [t for _, t in zip(range(n), m.decode_tokens(s, params, seed=1, vocab_limit=1000))]

    warm = m.new_state(64)  # first uses capture the decode loop's graph
    m.forward(torch.arange(5), warm, last_only=True)
    decode(warm, 4)
    torch.cuda.synchronize()
    free_before = nat.device_memory()[0]
    g = torch.Generator().manual_seed(4)
    for n in (1, 7, 16, 33, 100, 3, 200):
        s = m.new_state(256)
        m.forward(torch.randint(0, 1000, (n,), generator=g), s)
        m.sample(s, temperature=0.7, top_p=0.9, seed=n)
        assert len(decode(s, 9)) == 9
        m.release(s)
    assert nat.device_memory()[0] == free_before


def test_over_budget_launch_allocates_nothing(tiny_native_ckpt):
    from engine.native import load_native
    from engine.native_backend import NativeModel
    nat = load_native()
    free_before = nat.device_memory()[0]
    with pytest.raises(MemoryError, match="DOES NOT FIT|budget"):
        NativeModel.from_checkpoint(source_from_checkpoint(tiny_native_ckpt), kv_dtype="bf16", max_context=1 << 20,
                                    vram_budget_bytes=64 << 20)
    assert nat.device_memory()[0] == free_before


def _step_logits_off_and_on(switch, n_tokens, seed):
    """The logits of n_tokens decode steps of the full-width model with switch(False), then with switch(True) (each
    with freshly captured graphs); switch(True) is restored afterwards, also on failure."""
    from engine.native_backend import NativeModel
    m = NativeModel.from_checkpoint(full_width_source(), kv_dtype="int8", max_context=64, vram_budget_bytes=8 << 30)
    tokens = torch.randint(0, 2000, (n_tokens,), generator=torch.Generator().manual_seed(seed))

    def decode_all(on):
        switch(on)
        m.engine.reset_graphs()
        s = m.new_state(64)
        out = torch.cat([m.forward(tokens[i:i + 1], s).logits for i in range(len(tokens))])
        m.release(s)
        return out

    try:
        off = decode_all(False)
        on = decode_all(True)
    finally:
        switch(True)
        m.engine.reset_graphs()
    assert torch.isfinite(off).all()
    return off, on


def test_programmatic_dependent_launch_changes_no_bit():
    """Inside a decode step each kernel may start during its predecessor's tail and prefetch weights or its
    layer's state before griddepcontrol.wait (csrc/cuda/pdl.cuh). A kernel that read or wrote a predecessor's
    data before its wait would race: the logits of PDL-launched steps must equal plain launches bit for bit."""
    from engine.native import load_native
    nat = load_native()
    if not nat.pdl_supported():
        pytest.skip("programmatic dependent launch needs compute capability 9.0 or newer")
    plain, overlapped = _step_logits_off_and_on(nat.set_pdl, 24, 4)
    assert torch.equal(plain, overlapped)


def test_lanes_layout_changes_no_bit():
    """In a decode step the producers of down's, gdn_out's and the attention output's inputs (gate_up's SwiGLU
    epilogue, the GDN step, the attention combine) write them in the order those GEMVs read fastest (csrc/cuda/ops.h
    GEMV_X_LANES, where they run variant 4); the logits must equal the perm8 step's bit for bit."""
    from engine.native import load_native
    nat = load_native()
    assert nat.qgemv_x_layout(5120, 17408, 4, 64, 1) == 1  # the layout is in use for 4-bit down weights
    assert nat.qgemv_x_layout(5120, 6144, 4, 64, 1) == 1   # and for gdn_out / the attention output
    perm8, lanes = _step_logits_off_and_on(nat.set_qgemv_lanes, 12, 5)
    assert torch.equal(perm8, lanes)


def test_norm_weights_before_the_wait_change_no_bit():
    """The GEMVs with the fused norm (gdn_in, the attention qkv, gate_up, lm_head) load the norm's weights before the
    PDL wait (csrc/cuda/qgemv.cu load_norm_w): the same values in the same arithmetic, so the logits must equal those
    of steps that load them after the wait, bit for bit."""
    from engine.native import load_native
    nat = load_native()
    late, early = _step_logits_off_and_on(nat.set_qgemv_norm_weights_early, 12, 7)
    assert torch.equal(late, early)


def test_one_carveout_for_the_step_changes_no_bit():
    """set_step_smem_carveout asks every kernel of the step for one L1 / shared-memory split (a launch attribute,
    csrc/cuda/pdl.cuh), a measurement knob of bench/step_probe.py: where the SMs put their memory cannot change a sum,
    so the logits must equal those of the default launches (each kernel's own split) bit for bit."""
    from engine.native import load_native
    nat = load_native()
    one_split, own = _step_logits_off_and_on(lambda on: nat.set_step_smem_carveout(-1 if on else 100), 8, 9)
    assert torch.equal(one_split, own)
