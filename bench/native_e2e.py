"""End-to-end check of the native backend through the public Engine API on the demo model:
the same greedy request on the reference and the native backend, token ids side by side."""

from __future__ import annotations

import time

from engine.api import Engine, EngineOptions, Finished, TextDelta
from engine.sampling import SamplingParams


def run(backend: str, kv: str = "int8"):
    eng = Engine.load("demo", EngineOptions(backend=backend, kv_dtype=kv, max_context=4096))
    msgs = [{"role": "user", "content": "Write three words about trains."}]
    t0 = time.perf_counter()
    text, fin = [], None
    for ev in eng.generate(msgs, SamplingParams(temperature=0.0, max_tokens=48)):
        if isinstance(ev, TextDelta):
            text.append(ev.text)
        elif isinstance(ev, Finished):
            fin = ev
    return "".join(text), fin, time.perf_counter() - t0


if __name__ == "__main__":
    for backend, kv in [("reference", "int8"), ("native", "int8"), ("native", "bf16")]:
        text, fin, dt = run(backend, kv)
        print(f"{backend}/{kv}: {dt:.2f} s, finish={getattr(fin, 'reason', None)}, "
              f"tokens={getattr(fin, 'completion_tokens', None)}\n  {text[:200]!r}")
