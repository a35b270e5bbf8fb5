"""Time to first token of a long conversation's next turn, with and without prefix reuse (run on the GPU machine).

    python bench/prefix_reuse.py --out bench/results/prefix-reuse-h200.json [--histories 32768,131072]
                                 [--budget-gib 24] [--kv int8]
    python bench/prefix_reuse.py --demo --histories 700 --out /tmp/x.json     # the script's logic, on any machine

A conversation of about H tokens of history (alternating user / assistant messages of filler text) is sent through
engine.api.Engine.generate, as the app sends it, on random weights of the real 27B shapes (native engine, one lane,
the plan fitted to --budget-gib). Each history is timed in four turns:

  1. the conversation plus a new question: nothing to resume, the whole prompt is prefilled (what every turn cost
     before session 36);
  2. the next turn: turn 1's short reply and another question appended. The engine resumes from the snapshot it
     took where turn 1's history ended and prefills only what follows;
  3. the same messages again (a regenerated reply): the snapshot from turn 2's history end, only the generation
     prompt left to prefill;
  4. another, short conversation: the long one's snapshot is set aside into host memory first (its KV copied off
     the GPU: NativeModel.detach), then
  5. the long conversation's third turn: resumed from the snapshot set aside, its KV copied back;
  6. the third turn's question edited: resumed from the snapshot where turn 2's history ended (set aside in step 4,
     so the third turn's own snapshot is set aside first);
  7. a restart: the edited turn's state saved to disk (engine.prefix_store, as the app does when it closes; the
     file then dropped from the page cache, so reading it back reads the disk), every snapshot in memory forgotten,
     and the conversation's next turn resumed from the file;
  8. turn 2's messages with prefix reuse switched off: the same prompt prefilled whole, the comparison for turn 2.

Each turn's time to first token (Finished.ttft_s, measured by the engine from the call's start: rendering the
template, tokenizing, prefill and the first draw) is recorded with the tokens resumed, and the time the model spent
in snapshot() (the lane's recurrent state copied to host memory), detach() (the KV slots copied to host memory)
and resume() (copied back). Replies are greedy and
4 tokens long; the random weights make their text meaningless, and it is not used.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import statistics
import time
from dataclasses import replace

WORDS = ("alpha bravo charlie delta echo foxtrot golf hotel india juliet kilo lima mike november oscar papa "
         "quebec romeo sierra tango uniform victor whiskey xray yankee zulu").split()


def filler(seed: int, words: int) -> str:
    """Deterministic text of ``words`` words and numbers: tokenizes to a predictable, roughly even length."""
    out = []
    x = seed * 2654435761 % 2**32 or 1
    for i in range(words):
        x = (x * 1103515245 + 12345) % 2**31
        out.append(WORDS[x % len(WORDS)] if i % 4 else str(x % 1000))
    return " ".join(out)


def build_history(engine, tokens: int, max_block_words: int = 400) -> list[dict]:
    """Alternating user / assistant messages whose rendered length is about ``tokens`` (within one message):
    at least eight messages, none over ``max_block_words`` words."""
    probe_words = 200
    per_word = engine.count_prompt_tokens([{"role": "user", "content": filler(1, probe_words)}],
                                          enable_thinking=False) / probe_words
    block_words = int(max(20, min(max_block_words, tokens / (8 * per_word))))
    per_block = max(1, engine.count_prompt_tokens([{"role": "user", "content": filler(1, block_words)}],
                                                  enable_thinking=False))
    n = max(2, round(tokens / per_block))
    return [{"role": "user" if i % 2 == 0 else "assistant", "content": filler(i + 2, block_words)}
            for i in range(n - (n % 2))]


class CallTimer:
    """Wraps one method of an object and records each call's wall time (seconds), synchronising a CUDA device
    around it where there is one, so queued work before the call is not counted in it."""

    def __init__(self, obj, name: str):
        self.obj, self.name, self.seconds = obj, name, []
        self._original = getattr(obj, name)

        def timed(*args, **kwargs):
            _sync()
            t0 = time.perf_counter()
            try:
                return self._original(*args, **kwargs)
            finally:
                _sync()
                self.seconds.append(time.perf_counter() - t0)

        setattr(obj, name, timed)

    def take(self) -> float | None:
        """The total of the calls since the last take (None when there were none)."""
        total = sum(self.seconds) if self.seconds else None
        self.seconds = []
        return total


def _sync() -> None:
    try:
        import torch
    except ImportError:  # pragma: no cover
        return
    if torch.cuda.is_available():
        torch.cuda.synchronize()


def run_turn(engine, messages: list[dict]) -> dict:
    from engine.api import Finished
    from engine.sampling import SamplingParams

    params = SamplingParams(temperature=0.0, max_tokens=4, ignore_eos=True)
    text, done = [], None
    for ev in engine.generate(messages, params, enable_thinking=False):
        if isinstance(ev, Finished):
            done = ev
        else:
            text.append(ev.text)
    if done is None or done.error:
        raise RuntimeError(f"the turn did not finish: {done}")
    return {"prompt_tokens": done.prompt_tokens, "cached_tokens": done.cached_tokens,
            "prefilled_tokens": done.prompt_tokens - done.cached_tokens, "ttft_s": round(done.ttft_s, 4),
            "reply": "".join(text)}


def time_restart(engine, next_msgs: list[dict], states_dir: str) -> dict:
    """The newest snapshot saved to a store in ``states_dir`` (timed: the KV copied off the GPU and the file
    written and synced), the file evicted from the page cache, the in-memory snapshots forgotten (a new process
    has none), then ``next_msgs`` run: resumed from the file (read, digest-checked, copied to the GPU)."""
    import shutil
    from pathlib import Path

    from engine.prefix_store import PrefixStore

    root = Path(states_dir)
    shutil.rmtree(root, ignore_errors=True)
    engine._store = PrefixStore(root, "bench", 64 << 30, free_reserve=1 << 30)
    options = engine.options
    engine.options = replace(options, prefix_disk_min_tokens=0)   # (the demo's short histories too)
    try:
        _sync()
        t0 = time.perf_counter()
        engine._save_state(engine._prefixes[0], wait=True)
        files = sorted(root.rglob("*.state"))
        for path in files:   # written through to the disk, then out of the page cache: the read below is a cold one
            fd = os.open(path, os.O_RDONLY)
            try:
                os.fsync(fd)
                save_s = time.perf_counter() - t0
                os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
            finally:
                os.close(fd)
        if len(files) != 1:
            raise RuntimeError(f"expected one saved state, found {len(files)}")
        state_bytes = files[0].stat().st_size
        engine._prefixes = []
        turn = run_turn(engine, next_msgs)
    finally:
        engine._store, engine.options = None, options
        shutil.rmtree(root, ignore_errors=True)
    return {"restart_state_gb": round(state_bytes / 1e9, 3), "restart_save_s": round(save_s, 4),
            "restart_cached_tokens": turn["cached_tokens"], "restart_prompt_tokens": turn["prompt_tokens"],
            "restart_ttft_s": turn["ttft_s"]}


def time_history(engine, history_tokens: int, states_dir: str) -> dict:
    model = engine._model
    snap, resume, detach = CallTimer(model, "snapshot"), CallTimer(model, "resume"), CallTimer(model, "detach")
    try:
        history = build_history(engine, history_tokens)
        turn1_msgs = history + [{"role": "user", "content": "Summarise the list above in one line."}]
        turn1 = run_turn(engine, turn1_msgs)
        snapshot_s = snap.take()
        turn2_msgs = turn1_msgs + [{"role": "assistant", "content": "Noted."},
                                   {"role": "user", "content": "Which word came up most often?"}]
        turn2 = run_turn(engine, turn2_msgs)
        resume_s, turn2_snapshot_s = resume.take(), snap.take()
        regenerate = run_turn(engine, turn2_msgs)
        regenerate_resume_s = resume.take()
        snap.take()
        other = run_turn(engine, [{"role": "user", "content": filler(99, 300)}])
        detach_s, _ = detach.take(), snap.take()
        turn3_msgs = turn2_msgs + [{"role": "assistant", "content": "Noted."},
                                   {"role": "user", "content": "And which came up least often?"}]
        back = run_turn(engine, turn3_msgs)
        back_resume_s, _ = resume.take(), snap.take()
        detach.take()
        edited_msgs = turn3_msgs[:-1] + [{"role": "user", "content": "And which came up in the middle?"}]
        edit = run_turn(engine, edited_msgs)
        edit_detach_s, edit_resume_s, _ = detach.take(), resume.take(), snap.take()
        restart = time_restart(engine, edited_msgs + [{"role": "assistant", "content": "Noted."},
                                                      {"role": "user", "content": "Thanks."}], states_dir)
        resume.take(), detach.take(), snap.take()
        t0 = time.perf_counter()
        engine._build_prompt(turn2_msgs, False, None)
        render_tokenize_s = time.perf_counter() - t0
        reuse_on = engine.options
        engine.options = replace(reuse_on, prefix_reuse=False)
        try:
            without = run_turn(engine, turn2_msgs)
        finally:
            engine.options = reuse_on
        engine._prefixes = []   # the next history starts clean
    finally:
        for timer in (snap, resume, detach):
            setattr(model, timer.name, timer._original)

    def rounded(x):
        return None if x is None else round(x, 4)

    return {"history_tokens": history_tokens, "turn1_prompt_tokens": turn1["prompt_tokens"],
            "turn1_ttft_s": turn1["ttft_s"], "snapshot_s": rounded(snapshot_s),
            "turn2_prompt_tokens": turn2["prompt_tokens"], "turn2_cached_tokens": turn2["cached_tokens"],
            "turn2_prefilled_tokens": turn2["prefilled_tokens"], "turn2_ttft_s": turn2["ttft_s"],
            "turn2_resume_s": rounded(resume_s), "turn2_snapshot_s": rounded(turn2_snapshot_s),
            "regenerate_cached_tokens": regenerate["cached_tokens"], "regenerate_ttft_s": regenerate["ttft_s"],
            "regenerate_resume_s": rounded(regenerate_resume_s),
            "other_conversation_ttft_s": other["ttft_s"], "set_aside_detach_s": rounded(detach_s),
            "switch_back_prompt_tokens": back["prompt_tokens"], "switch_back_cached_tokens": back["cached_tokens"],
            "switch_back_ttft_s": back["ttft_s"], "switch_back_resume_s": rounded(back_resume_s),
            "edit_cached_tokens": edit["cached_tokens"], "edit_ttft_s": edit["ttft_s"],
            "edit_detach_s": rounded(edit_detach_s), "edit_resume_s": rounded(edit_resume_s),
            **restart,
            "turn2_without_reuse_cached_tokens": without["cached_tokens"],
            "turn2_without_reuse_ttft_s": without["ttft_s"],
            "render_tokenize_s": round(render_tokenize_s, 4),
            "ttft_speedup": round(without["ttft_s"] / turn2["ttft_s"], 1) if turn2["ttft_s"] else None}


def native_27b_engine(max_context: int, budget_gib: float, kv: str):
    """engine.api.Engine around random 27B-shaped weights synthesised on the GPU (no checkpoint exists here)."""
    from engine.api import Engine, EngineOptions, ModelInfo
    from engine.chat_template import load_chat_template
    from engine.native_backend import CHAT_STEP_PATH_MAX_TOKENS, STEP_TOKENS, NativeModel

    budget = int(budget_gib * (1 << 30))
    model = NativeModel.random_27b(kv_dtype=kv, max_context=max_context, seed=1, vram_budget_bytes=budget,
                                   step_tokens=STEP_TOKENS)   # the plan a loaded checkpoint gets
    model.step_path_max_tokens = CHAT_STEP_PATH_MAX_TOKENS       # as Engine._load_native sets it
    info = ModelInfo(name="random 27B shapes", path="", random_weights=True, context_limit=max_context,
                     has_vision=False, has_mtp=False, backend="native", device="cuda")
    options = EngineOptions(backend="native", max_context=max_context, kv_dtype=kv, vram_budget_bytes=budget)
    return Engine(model, None, info, options, load_chat_template(None))


def demo_engine(max_context: int):
    from engine.api import Engine, EngineOptions
    return Engine.load("demo", EngineOptions(backend="reference", max_context=max_context, device="cpu"))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default="bench/results/prefix-reuse-h200.json")
    ap.add_argument("--histories", default="32768,131072", help="history lengths in tokens, comma-separated")
    ap.add_argument("--budget-gib", type=float, default=24.0, help="VRAM budget of the simulated card")
    ap.add_argument("--kv", default="int8")
    ap.add_argument("--states-dir", default="/tmp/monorail-bench-states",
                    help="where the restart step saves its state (emptied before and after; a 128K history of the "
                         "27B needs ~4.3 GB)")
    ap.add_argument("--demo", action="store_true",
                    help="the built-in demo model on the reference backend (CPU): checks the script, times nothing "
                         "of interest")
    args = ap.parse_args(argv)
    histories = [int(h) for h in args.histories.split(",") if h]
    max_context = max(histories) + 4096
    if args.demo:
        engine, what, gpu = demo_engine(max_context), "the demo model, reference backend", "cpu"
    else:
        import torch
        engine = native_27b_engine(max_context, args.budget_gib, args.kv)
        what = f"random weights of the real 27B shapes, native engine, {args.kv} KV, one lane"
        gpu = torch.cuda.get_device_name(0)
    from provenance import commit as run_commit, write_result  # bench/ is the script's directory, first on sys.path

    result = {"gpu": gpu, "commit": run_commit(), "date": dt.date.today().isoformat(), "model": what,
              "budget_gib": None if args.demo else args.budget_gib, "max_context": max_context,
              "method": ("engine.api.Engine.generate as the app calls it; ttft_s is the engine's own time to first "
                         "token (template, tokenizer, prefill, first draw); greedy 4-token replies; turn 2 appends "
                         "a reply and a question to turn 1's messages; regenerate repeats turn 2; other_conversation "
                         "is a short new conversation (the long one's snapshot set aside: detach), switch_back the "
                         "long one's third turn after it, edit that turn's question changed; restart_* the edited "
                         "turn's state saved to disk (save_s: KV off the GPU, written, fsynced), dropped from the "
                         "page cache and resumed from the file by the next turn after the in-memory snapshots were "
                         "forgotten; "
                         "turn2_without_reuse repeats turn 2 with prefix reuse off"),
              "rows": []}
    run_turn(engine, [{"role": "user", "content": filler(0, 300)}])   # warm: kernels, tokenizer, template
    engine._prefixes = []
    for h in histories:   # the file is rewritten after every row: a cut-short run keeps what it measured
        row = time_history(engine, h, args.states_dir)
        result["rows"].append(row)
        result["median_speedup"] = statistics.median(r["ttft_speedup"] or 0 for r in result["rows"])
        print(json.dumps(row), flush=True)
        write_result(args.out, result)
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
