"""Engine API on the demo model (real tokenizer, real template, reference backend on CPU)."""

import io
import threading

import pytest
import torch

from engine.api import Engine, EngineOptions, Finished, TextDelta
from engine.errors import EngineError, PromptError
from engine.sampling import SamplingParams


def _run(engine, messages, sampling, **kw):
    deltas, fin = [], None
    for ev in engine.generate(messages, sampling, **kw):
        if isinstance(ev, TextDelta):
            deltas.append(ev)
        else:
            assert isinstance(ev, Finished)
            fin = ev
    return deltas, fin


def test_demo_is_labelled_random(demo_engine):
    assert demo_engine.info.random_weights
    assert demo_engine.info.name == "monorail-demo-tiny"
    assert demo_engine.info.has_vision and demo_engine.info.has_mtp


def test_greedy_generation_equals_full_forward_argmax(demo_engine):
    """The incremental prefill/decode loop gives the tokens a from-scratch forward picks at every step."""
    msgs = [{"role": "user", "content": "Write a haiku about rails."}]
    n = 8
    deltas, fin = _run(demo_engine, msgs, SamplingParams(temperature=0.0, max_tokens=n, ignore_eos=True),
                       enable_thinking=False)
    assert fin.reason == "length" and fin.completion_tokens == n
    prompt = demo_engine._build_prompt(msgs, False, None)
    model = demo_engine._model
    ids = list(prompt.ids)
    expected = []
    for _ in range(n):
        state = model.new_state(len(ids) + 1)
        logits = model.forward(torch.tensor(ids), state).logits[-1]
        logits[demo_engine.tokenizer.vocab_size:] = float("-inf")
        tok = int(logits.argmax())
        expected.append(tok)
        ids.append(tok)
    text = "".join(d.text for d in deltas)
    # the content channel starts at the first non-blank character (the parser drops leading whitespace)
    assert text == demo_engine.tokenizer.decode(expected, skip_special=True).lstrip()


def test_seeded_sampling_is_reproducible(demo_engine):
    msgs = [{"role": "user", "content": "Hello"}]
    p = SamplingParams(temperature=0.8, top_k=50, top_p=0.9, seed=7, max_tokens=6, ignore_eos=True)
    a, _ = _run(demo_engine, msgs, p)
    b, _ = _run(demo_engine, msgs, p)
    c, _ = _run(demo_engine, msgs, p.with_(seed=8))
    assert [d.text for d in a] == [d.text for d in b]
    assert "".join(d.text for d in a) != "".join(d.text for d in c)


def test_thinking_prompt_streams_reasoning_channel(demo_engine):
    deltas, fin = _run(demo_engine, [{"role": "user", "content": "Hi"}],
                       SamplingParams(temperature=0.0, max_tokens=4, ignore_eos=True), enable_thinking=True)
    # The template opened <think>, so the first output belongs to the reasoning channel.
    assert deltas and deltas[0].channel == "reasoning"
    deltas, _ = _run(demo_engine, [{"role": "user", "content": "Hi"}],
                     SamplingParams(temperature=0.0, max_tokens=4, ignore_eos=True), enable_thinking=False)
    assert deltas and all(d.channel == "content" for d in deltas)


def test_cancel_stops_generation(demo_engine):
    cancel = threading.Event()
    seen = 0
    fin = None
    for ev in demo_engine.generate([{"role": "user", "content": "Go on"}],
                                   SamplingParams(temperature=0.0, max_tokens=200, ignore_eos=True), cancel=cancel):
        if isinstance(ev, TextDelta):
            seen += 1
            cancel.set()
        else:
            fin = ev
    assert fin.reason == "cancelled" and fin.completion_tokens < 200


def test_image_prompt_counts_vision_tokens(demo_engine):
    from PIL import Image

    buf = io.BytesIO()
    Image.new("RGB", (320, 256), (200, 30, 30)).save(buf, format="PNG")
    msgs = [{"role": "user", "content": [{"type": "image", "image": buf.getvalue()},
                                         {"type": "text", "text": "What colour is this?"}]}]
    counted = demo_engine.count_prompt_tokens(msgs, enable_thinking=False)
    _, fin = _run(demo_engine, msgs, SamplingParams(temperature=0.0, max_tokens=2), enable_thinking=False)
    assert fin.prompt_tokens == counted
    # 320x256 -> 80 merged patches (H*W/1024).
    text_only = demo_engine.count_prompt_tokens([{"role": "user", "content": "What colour is this?"}],
                                                enable_thinking=False)
    assert counted - text_only == 320 * 256 // 1024 + 2  # pads plus vision_start/vision_end


def test_bad_requests_get_clear_errors(demo_engine):
    with pytest.raises(PromptError, match="empty"):
        list(demo_engine.generate([{"role": "user", "content": "   "}], SamplingParams()))
    with pytest.raises(PromptError, match="context limit"):
        list(demo_engine.generate([{"role": "user", "content": "word " * 5000}], SamplingParams()))
    demo_engine.info.has_vision = False
    try:
        with pytest.raises(PromptError, match="no vision"):
            list(demo_engine.generate([{"role": "user", "content": [{"type": "image", "image": b"x"}]}],
                                      SamplingParams()))
    finally:
        demo_engine.info.has_vision = True


def test_engine_loads_a_converted_artifact(tmp_path, monkeypatch):
    """demo checkpoint -> monorail convert (8-bit) -> Engine.load(artifact): same greedy tokens as the
    bf16 checkpoint on a short prompt, and the chat template comes from the artifact."""
    from engine import demo
    from engine.convert import convert

    monkeypatch.setenv("MONORAIL_DATA_DIR", str(tmp_path / "data"))
    monkeypatch.setenv("MONORAIL_ALLOW_TEST_SHAPES", "1")
    src = demo.ensure_demo_model()
    out = tmp_path / "demo-q8.monorail"
    convert(src, out, recipe="q8", method="rtn", allow_test_shapes=True)
    art_engine = Engine.load(str(out), EngineOptions(max_context=512))
    ref_engine = Engine.load(str(src), EngineOptions(max_context=512))
    assert art_engine.chat_template == ref_engine.chat_template
    msgs = [{"role": "user", "content": "Count to three."}]
    p = SamplingParams(temperature=0.0, max_tokens=4, ignore_eos=True)
    a, fa = _run(art_engine, msgs, p, enable_thinking=False)
    b, fb = _run(ref_engine, msgs, p, enable_thinking=False)
    assert fa.prompt_tokens == fb.prompt_tokens and fa.completion_tokens == 4
    # 8-bit weights move logits by ~1e-2 relative: compare the first step's distribution, not exact text.
    ids = torch.tensor(art_engine._build_prompt(msgs, False, None).ids)
    la = art_engine._model.forward(ids, art_engine._model.new_state(len(ids)), last_only=True).logits[-1]
    lb = ref_engine._model.forward(ids, ref_engine._model.new_state(len(ids)), last_only=True).logits[-1]
    assert float((la - lb).norm() / lb.norm()) < 0.05


def test_native_backend_without_a_gpu_is_a_clear_error(tmp_path, monkeypatch):
    from engine.errors import BackendUnavailableError
    from engine.native import native_status

    if native_status().gpu_usable:
        pytest.skip("a usable GPU is present")
    monkeypatch.setenv("MONORAIL_DATA_DIR", str(tmp_path))
    with pytest.raises(BackendUnavailableError, match="needs a CUDA GPU"):
        Engine.load("demo", EngineOptions(backend="native"))


def test_auto_backend_is_native_where_a_gpu_is_usable_else_reference(monkeypatch):
    """DESIGN.md: the reference is the backend on machines without a usable GPU; "auto" (the app's and the CLI's
    default) picks the native engine wherever it can run, and says why it chose."""
    import engine.native as native
    from engine.api import choose_backend
    from engine.errors import EngineError

    here = native.native_status()
    backend, note = choose_backend("auto")
    assert backend == ("native" if here.gpu_usable else "reference") and note.startswith("chosen automatically")
    if not here.gpu_usable:
        assert here.reason in note                          # the user sees why their GPU was passed over

    usable = native.NativeStatus(importable=True, cuda_built=True, cuda_version="13.0", cuda_archs="89",
                                 gpu_usable=True, gpu_name="NVIDIA GeForce RTX 4090", compute_capability=89,
                                 total_memory=24 << 30, reason="")
    monkeypatch.setattr(native, "native_status", lambda: usable)
    assert choose_backend("auto") == ("native", "chosen automatically: NVIDIA GeForce RTX 4090 is usable by the "
                                                "native engine")
    unusable = native.NativeStatus(importable=True, cuda_built=False, cuda_version=None, cuda_archs="",
                                   gpu_usable=False, gpu_name="", compute_capability=0, total_memory=0,
                                   reason="this build has no CUDA")
    monkeypatch.setattr(native, "native_status", lambda: unusable)
    assert choose_backend("auto") == ("reference", "chosen automatically: the native engine cannot run here "
                                                   "(this build has no CUDA)")
    assert choose_backend("native") == ("native", "") and choose_backend("reference") == ("reference", "")
    with pytest.raises(EngineError, match="Unknown backend 'cuda'"):
        choose_backend("cuda")


def test_auto_backend_loads_and_reports_its_choice(tmp_path, monkeypatch):
    from engine.native import native_status

    if native_status().gpu_usable:
        pytest.skip("a usable GPU is present: auto loads the native engine (tests/test_native_engine.py)")
    monkeypatch.setenv("MONORAIL_DATA_DIR", str(tmp_path))
    eng = Engine.load("demo", EngineOptions(backend="auto", max_context=256))
    assert eng.info.backend == "reference" and eng.options.backend == "reference"
    assert eng.info.backend_note.startswith("chosen automatically: the native engine cannot run here")


def test_mtp_speculation_gives_the_same_greedy_reply_and_reports_acceptance(demo_engine):
    spec_engine = Engine.load("demo", EngineOptions(max_context=4096, mtp_speculation=True, mtp_draft_tokens=1))
    msgs = [{"role": "user", "content": "List three colours."}]
    p = SamplingParams(temperature=0.0, max_tokens=12, ignore_eos=True)
    plain, fin_plain = _run(demo_engine, msgs, p, enable_thinking=False)
    spec, fin_spec = _run(spec_engine, msgs, p, enable_thinking=False)
    assert "".join(d.text for d in spec) == "".join(d.text for d in plain)
    assert fin_spec.completion_tokens == fin_plain.completion_tokens == 12
    assert fin_plain.spec_accept_rate is None and 0.0 <= fin_spec.spec_accept_rate <= 1.0
    # Sampled requests draft too (the rejection rule keeps their distribution), and a seed replays them
    sampled = p.with_(temperature=0.7, seed=1)
    first, fin = _run(spec_engine, msgs, sampled, enable_thinking=False)
    again, _ = _run(spec_engine, msgs, sampled, enable_thinking=False)
    assert fin.spec_accept_rate is not None and fin.completion_tokens == 12
    assert "".join(d.text for d in first) == "".join(d.text for d in again)


def test_three_drafts_a_round_give_the_same_greedy_reply(demo_engine):
    chained = Engine.load("demo", EngineOptions(max_context=4096, mtp_speculation=True, mtp_draft_tokens=3))
    msgs = [{"role": "user", "content": "Name a river."}]
    p = SamplingParams(temperature=0.0, max_tokens=14, ignore_eos=True)
    plain, _ = _run(demo_engine, msgs, p, enable_thinking=False)
    spec, fin = _run(chained, msgs, p, enable_thinking=False)
    assert "".join(d.text for d in spec) == "".join(d.text for d in plain) and fin.completion_tokens == 14
    with pytest.raises(EngineError, match="1..5"):
        Engine.load("demo", EngineOptions(max_context=4096, mtp_draft_tokens=6))


def test_a_reply_without_max_tokens_runs_to_the_context_limit(tmp_path, monkeypatch):
    """SamplingParams(max_tokens=None) means until the end of the turn or the context limit (it raised TypeError in
    the budget until session 39): the demo model's reply runs to the limit and finishes as "length"."""
    from engine.api import Engine, EngineOptions, Finished
    from engine.sampling import SamplingParams
    monkeypatch.setenv("MONORAIL_DATA_DIR", str(tmp_path))
    engine = Engine.load("demo", EngineOptions(backend="reference", max_context=64))
    events = list(engine.generate([{"role": "user", "content": "hi"}],
                                  SamplingParams(temperature=0.0, max_tokens=None)))
    fin = events[-1]
    assert isinstance(fin, Finished)
    # (the demo's greedy reply for this prompt meets no end-of-turn token within the limit)
    assert (fin.reason, fin.prompt_tokens + fin.completion_tokens) == ("length", 64)
