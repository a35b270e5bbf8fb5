"""A scripted fake engine for worker and app tests (no torch): importable by the spawned worker.

The worker is told to use it with the factory spec ``"test_worker_fakes:fake_factory"`` (the tests
folder is on sys.path, which the spawn context hands to the child).

Behaviour, steered by the last user message text so tests can script it through the real GUI:
- it streams a few reasoning deltas, then content that echoes the user's text, with a delay each;
- "CRASH" in the text kills the process with os._exit mid-reply (a dead worker);
- "SLOW" makes it stream 400 deltas so a test has time to press stop;
- the cancel event is polled between deltas and ends the reply with reason "cancelled".
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, field


@dataclass
class FakeInfo:
    name: str = "fake-model"
    random_weights: bool = True
    context_limit: int = 4096
    has_vision: bool = True
    backend: str = "fake"
    plan: dict | None = field(default_factory=lambda: {"weights": 100 << 20, "kv_pool": 50 << 20,
                                                        "total": 150 << 20})


@dataclass
class FakeDelta:
    channel: str
    text: str


@dataclass
class FakeFinished:
    reason: str
    prompt_tokens: int
    completion_tokens: int
    ttft_s: float
    prefill_tok_s: float
    decode_tok_s: float
    tool_calls: list = field(default_factory=list)
    spec_accept_rate: float | None = None
    cached_tokens: int = 0


def _last_user_text(messages: list[dict]) -> str:
    for m in reversed(messages):
        if m["role"] == "user":
            c = m["content"]
            if isinstance(c, str):
                return c
            return " ".join(p.get("text", "") for p in c if p.get("type") == "text")
    return ""


def _image_count(messages: list[dict]) -> int:
    return sum(1 for m in messages if isinstance(m["content"], list)
               for p in m["content"] if p.get("type") == "image")


class FakeEngine:
    def __init__(self, model: str, options: dict) -> None:
        self.info = FakeInfo(name=model, has_vision=options.get("has_vision", True),
                             context_limit=options.get("max_context") or 4096)
        self.delay = float(options.get("delay", 0.01))
        self.unloaded = False

    def generate(self, messages, sampling, *, enable_thinking=True, cancel=None):
        text = _last_user_text(messages)
        n_images = _image_count(messages)
        reasoning = ["Let me ", "think ", "about ", "it."] if enable_thinking else []
        content = ["You ", "said: ", text]
        if n_images:
            content.append(f" ({n_images} image{'s' if n_images > 1 else ''})")
        if "SLOW" in text:
            content += [" tick"] * 400
        count = 0
        for channel, pieces in (("reasoning", reasoning), ("content", content)):
            for piece in pieces:
                if cancel is not None and cancel.is_set():
                    yield FakeFinished("cancelled", 10, count, 0.01, 1000.0, 50.0)
                    return
                if "CRASH" in text and count == 3:
                    os._exit(3)
                time.sleep(self.delay)
                count += 1
                yield FakeDelta(channel, piece)
        # from the second turn on, the earlier turns' tokens count as resumed (as engine.api's prefix reuse reports)
        yield FakeFinished("stop", 10 + 7 * len(messages), count, 0.02, 1234.0, 56.7,
                           spec_accept_rate=0.75, cached_tokens=10 + 7 * (len(messages) - 2) if len(messages) > 2 else 0)

    def unload(self) -> None:
        self.unloaded = True


def fake_factory(model: str, options: dict, progress):
    if model == "broken":
        raise RuntimeError("cannot load model 'broken': config.json is missing")
    for i in range(3):
        progress((i + 1) / 3, f"loading part {i + 1} of 3")
    return FakeEngine(model, options)


def collect_events(events, until, timeout: float = 20.0) -> list:
    """Read worker events until one satisfies ``until``; all of them, in order. Fails on timeout."""
    import queue

    got = []
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            ev = events.get(timeout=0.2)
        except queue.Empty:
            continue
        got.append(ev)
        if until(ev):
            return got
    raise AssertionError(f"timed out; last events: {got[-5:]}")
