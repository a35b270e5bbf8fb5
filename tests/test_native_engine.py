"""The public Engine API and `monorail chat` on the native backend, end to end on the demo model (GPU).

The demo's weights are random, so the text is nonsense; what is checked is the path: the prompt
(longer than CHAT_STEP_PATH_MAX_TOKENS, so it takes the prefill path), streaming, stop/length handling, the
statistics, determinism of greedy decoding, cancellation, and that the reference and native backends
tokenize and count the same prompt identically."""

from __future__ import annotations

import subprocess
import sys
import threading

import pytest

from native_helpers import requires_gpu

pytestmark = [pytest.mark.gpu, requires_gpu]


def _run(engine, max_tokens=24, cancel=None):
    from engine.api import Finished, TextDelta
    from engine.sampling import SamplingParams
    msgs = [{"role": "system", "content": "You are a terse assistant that answers in one line. " * 12},
            {"role": "user", "content": "Name three famous railway lines and say why each one matters."}]
    text, fin = [], None
    for ev in engine.generate(msgs, SamplingParams(temperature=0.0, max_tokens=max_tokens), cancel=cancel):
        if isinstance(ev, TextDelta):
            text.append(ev.text)
        elif isinstance(ev, Finished):
            fin = ev
    return "".join(text), fin


@pytest.fixture(scope="module")
def native_engine():
    from engine.api import Engine, EngineOptions
    return Engine.load("demo", EngineOptions(backend="native", kv_dtype="int8", max_context=4096))


def test_native_engine_generates_deterministically(native_engine):
    from engine.api import Engine, EngineOptions
    text1, fin1 = _run(native_engine)
    text2, fin2 = _run(native_engine)
    assert fin1 is not None and fin1.reason in ("stop", "length") and fin1.error is None
    from engine.native_backend import CHAT_STEP_PATH_MAX_TOKENS
    assert fin1.prompt_tokens > CHAT_STEP_PATH_MAX_TOKENS  # the prompt went through the prefill path
    assert 0 < fin1.completion_tokens <= 24
    assert fin1.decode_tok_s and fin1.prefill_tok_s and fin1.ttft_s is not None
    assert (text1, fin1.completion_tokens) == (text2, fin2.completion_tokens)  # greedy replays exactly
    ref = Engine.load("demo", EngineOptions(backend="reference", max_context=4096))
    _, fin_ref = _run(ref, max_tokens=1)
    assert fin_ref.prompt_tokens == fin1.prompt_tokens


def test_native_engine_cancel_between_tokens(native_engine):
    cancel = threading.Event()
    cancel.set()
    _, fin = _run(native_engine, cancel=cancel)
    assert fin.reason == "cancelled"
    text, fin = _run(native_engine, max_tokens=4)  # and the engine still serves the next request
    assert fin.reason in ("stop", "length") and fin.completion_tokens >= 1


def test_monorail_chat_native_backend_cli():
    r = subprocess.run([sys.executable, "-m", "engine.cli", "chat", "--backend", "native", "--prompt",
                        "Say hello to the trains.", "--temperature", "0", "--max-tokens", "8"],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    assert "output tokens" in r.stdout + r.stderr


def test_monorail_chat_picks_the_native_engine_by_default_on_a_gpu():
    """`--backend auto` (the default of the CLI and the app) loads the native engine where a CUDA GPU is usable."""
    r = subprocess.run([sys.executable, "-m", "engine.cli", "chat", "--prompt", "Say hello to the trains.",
                        "--temperature", "0", "--max-tokens", "8"], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    assert "on native/cuda" in r.stderr and "backend: native, chosen automatically:" in r.stderr, r.stderr[-2000:]
