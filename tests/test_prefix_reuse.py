"""Prefix reuse (engine.api): a conversation's next turn resumes from the state where the previous prompt's
history ended instead of prefilling the whole conversation again. Checked on the demo model (reference backend)
against an engine that recomputes everything: the same logits and the same greedy reply, and the count of
resumed tokens."""

from __future__ import annotations

import pytest
import torch

from engine.api import Engine, EngineOptions
from turn_helpers import first_logits, greedy_reply, history_end
SYSTEM = {"role": "system", "content": "You are a careful assistant. " * 12}


@pytest.fixture(scope="module")
def engines(tmp_path_factory):
    mp = pytest.MonkeyPatch()
    mp.setenv("MONORAIL_DATA_DIR", str(tmp_path_factory.mktemp("data")))
    try:
        reusing = Engine.load("demo", EngineOptions(max_context=4096, prefix_reuse_min_tokens=0))
        fresh = Engine.load("demo", EngineOptions(max_context=4096, prefix_reuse=False))
        single = Engine.load("demo", EngineOptions(max_context=4096, prefix_reuse_min_tokens=0, prefix_cache_bytes=0))
        yield reusing, fresh, single
    finally:
        mp.undo()


def test_the_next_turn_resumes_where_the_history_ended_and_answers_the_same(engines):
    reusing, fresh, _ = engines
    turn1 = [SYSTEM, {"role": "user", "content": "Name a long railway."}]
    text1, fin1 = greedy_reply(reusing, turn1)
    assert fin1.cached_tokens == 0                                   # nothing to resume from yet
    assert text1 == greedy_reply(fresh, turn1)[0]
    turn2 = turn1 + [{"role": "assistant", "content": text1}, {"role": "user", "content": "And a short one?"}]
    text2, fin2 = greedy_reply(reusing, turn2)
    # resumed from the end of turn 1's history: the system prompt and the first question
    assert fin2.cached_tokens == history_end(reusing, turn1) > 50
    assert fin2.prompt_tokens == greedy_reply(fresh, turn2)[1].prompt_tokens
    assert text2 == greedy_reply(fresh, turn2)[0]
    # the state it resumed gives the logits a full prefill gives (a recurrent state not restored would not)
    resumed, cached = first_logits(reusing, turn2 + [{"role": "assistant", "content": text2},
                                                     {"role": "user", "content": "Thanks."}])
    whole, none = first_logits(fresh, turn2 + [{"role": "assistant", "content": text2},
                                               {"role": "user", "content": "Thanks."}])
    assert cached == history_end(reusing, turn2) and none == 0
    assert torch.allclose(resumed, whole, rtol=1e-4, atol=1e-4), float((resumed - whole).abs().max())


def test_regenerating_reuses_the_same_history_and_gives_the_same_reply(engines):
    reusing, _, _ = engines
    msgs = [SYSTEM, {"role": "user", "content": "Pick a colour."}]
    first, fin_a = greedy_reply(reusing, msgs)
    again, fin_b = greedy_reply(reusing, msgs)
    assert fin_b.cached_tokens == history_end(reusing, msgs) and again == first


A = [SYSTEM, {"role": "user", "content": "Question A?"}]
A2 = A + [{"role": "assistant", "content": "Answer A."}, {"role": "user", "content": "More?"}]
B = [{"role": "system", "content": "Another system prompt. " * 10}, {"role": "user", "content": "Question B?"}]


def test_a_conversation_set_aside_resumes_where_it_was_left(engines):
    reusing, fresh, _ = engines
    greedy_reply(reusing, A)
    text_b, fin_b = greedy_reply(reusing, B)
    assert fin_b.cached_tokens == 0 and text_b == greedy_reply(fresh, B)[0]
    # back to conversation A: its snapshot was set aside (kept in memory) while B ran, so A resumes, and is right
    text_a2, fin_a2 = greedy_reply(reusing, A2)
    assert fin_a2.cached_tokens == history_end(reusing, A) and text_a2 == greedy_reply(fresh, A2)[0]
    # and B's snapshot was set aside in turn
    b2 = B + [{"role": "assistant", "content": text_b}, {"role": "user", "content": "Go on."}]
    text_b2, fin_b2 = greedy_reply(reusing, b2)
    assert fin_b2.cached_tokens == history_end(reusing, B) and text_b2 == greedy_reply(fresh, b2)[0]


def test_without_a_cache_another_conversation_or_an_edited_history_starts_over(engines):
    _, fresh, single = engines                     # prefix_cache_bytes=0: only the newest snapshot is kept
    greedy_reply(single, A)
    assert greedy_reply(single, B)[1].cached_tokens == 0
    # conversation A again: its snapshot was dropped for B's, so it is recomputed, and still right
    text_a2, fin_a2 = greedy_reply(single, A2)
    assert fin_a2.cached_tokens == 0 and text_a2 == greedy_reply(fresh, A2)[0]
    # an edited earlier message: the prompt no longer starts with the snapshot's tokens
    edited = [SYSTEM, {"role": "user", "content": "Question A, edited?"}, {"role": "assistant", "content": "Answer A."},
              {"role": "user", "content": "More?"}]
    assert greedy_reply(single, edited)[1].cached_tokens == 0


def test_a_conversation_is_not_set_aside_when_host_memory_is_short(engines, monkeypatch):
    import engine.api as api

    reusing, _, _ = engines
    assert api.host_available_bytes() is None or api.host_available_bytes() > 0
    reusing._prefixes = []                          # what earlier tests left
    greedy_reply(reusing, A)
    monkeypatch.setattr(api, "host_available_bytes", lambda: api.HOST_MEMORY_RESERVE + 1000)   # nearly full
    greedy_reply(reusing, B)
    assert greedy_reply(reusing, A2)[1].cached_tokens == 0        # A's state was dropped rather than swap the machine


def test_the_cache_keeps_the_most_recently_used_conversations_within_its_budget(engines, tmp_path, monkeypatch):
    reusing = engines[0]
    convs = [[{"role": "system", "content": f"Conversation {i}. " * 30}, {"role": "user", "content": "Hi?"}]
             for i in range(3)]
    for c in convs:
        greedy_reply(reusing, c)
    sizes = [reusing._model.snapshot_bytes(p.state) for p in reusing._prefixes]
    assert len(sizes) >= 3 and all(s > 0 for s in sizes)
    monkeypatch.setenv("MONORAIL_DATA_DIR", str(tmp_path))
    small = Engine.load("demo", EngineOptions(max_context=4096, prefix_reuse_min_tokens=0,
                                              prefix_cache_bytes=int(1.5 * max(sizes))))   # room for one set aside
    for c in convs:
        greedy_reply(small, c)
    assert len(small._prefixes) == 2                # the newest, and the one set aside most recently
    follow_up = [{"role": "assistant", "content": "Hello."}, {"role": "user", "content": "Again?"}]
    assert greedy_reply(small, convs[1] + follow_up)[1].cached_tokens == history_end(small, convs[1])
    assert greedy_reply(small, convs[0] + follow_up)[1].cached_tokens == 0      # left the cache for conversation 1's


def test_short_histories_are_recomputed_and_the_switch_turns_it_off(engines, tmp_path, monkeypatch):
    _, fresh, _ = engines
    msgs = [SYSTEM, {"role": "user", "content": "One?"}]
    greedy_reply(fresh, msgs)
    assert greedy_reply(fresh, msgs)[1].cached_tokens == 0                 # prefix_reuse=False
    monkeypatch.setenv("MONORAIL_DATA_DIR", str(tmp_path))
    default = Engine.load("demo", EngineOptions(max_context=4096))   # snapshots from 512 tokens of history
    greedy_reply(default, msgs)
    assert history_end(default, msgs) < 512 and greedy_reply(default, msgs)[1].cached_tokens == 0


def test_the_snapshot_follows_a_long_conversation_turn_by_turn(tmp_path, monkeypatch):
    """With the default minimum (histories of 512 tokens and more), a turn that adds only a few dozen tokens still
    moves the snapshot to its own history's end: the third turn resumes after the second's question, not after the
    first's, so a session's later turns never recompute the turns since its first long prompt."""
    monkeypatch.setenv("MONORAIL_DATA_DIR", str(tmp_path))
    default = Engine.load("demo", EngineOptions(max_context=4096))
    long_system = {"role": "system", "content": "You are a careful assistant who checks every step. " * 60}
    turn1 = [long_system, {"role": "user", "content": "First?"}]
    assert history_end(default, turn1) >= 512
    text1, _ = greedy_reply(default, turn1)
    turn2 = turn1 + [{"role": "assistant", "content": text1}, {"role": "user", "content": "Second?"}]
    text2, fin2 = greedy_reply(default, turn2)
    assert fin2.cached_tokens == history_end(default, turn1)
    assert history_end(default, turn2) - fin2.cached_tokens < 512          # a short turn
    turn3 = turn2 + [{"role": "assistant", "content": text2}, {"role": "user", "content": "Third?"}]
    assert greedy_reply(default, turn3)[1].cached_tokens == history_end(default, turn2)


def test_a_prompt_with_an_image_is_prefilled_whole(engines):
    import io

    from PIL import Image

    reusing, fresh, _ = engines
    msgs = [SYSTEM, {"role": "user", "content": "Hello."}]
    greedy_reply(reusing, msgs)
    buf = io.BytesIO()
    Image.new("RGB", (64, 64), (200, 40, 40)).save(buf, format="PNG")
    img = buf.getvalue()
    with_image = msgs + [{"role": "assistant", "content": "Hi."},
                         {"role": "user", "content": [{"type": "image", "image": img},
                                                      {"type": "text", "text": "What colour?"}]}]
    text, fin = greedy_reply(reusing, with_image)
    assert fin.cached_tokens == 0 and text == greedy_reply(fresh, with_image)[0]


def test_unloading_frees_the_kept_snapshots(tmp_path, monkeypatch):
    monkeypatch.setenv("MONORAIL_DATA_DIR", str(tmp_path))
    e = Engine.load("demo", EngineOptions(max_context=4096, prefix_reuse_min_tokens=0))
    greedy_reply(e, A)
    greedy_reply(e, B)
    assert len(e._prefixes) == 2
    e.unload()
    assert e._prefixes == []


def test_a_snapshot_that_cannot_be_copied_costs_the_request_nothing(engines, tmp_path, monkeypatch):
    _, fresh, _ = engines
    monkeypatch.setenv("MONORAIL_DATA_DIR", str(tmp_path))
    e = Engine.load("demo", EngineOptions(max_context=4096, prefix_reuse_min_tokens=0))
    greedy_reply(e, A)

    def no_memory(*args, **kwargs):
        raise MemoryError

    monkeypatch.setattr(e._model, "detach", no_memory)
    text_b, fin_b = greedy_reply(e, B)              # setting A aside fails: B is answered all the same
    assert fin_b.reason == "length" and text_b == greedy_reply(fresh, B)[0]
    monkeypatch.setattr(e._model, "snapshot", no_memory)
    b2 = B + [{"role": "assistant", "content": text_b}, {"role": "user", "content": "More?"}]
    text, fin = greedy_reply(e, b2)                 # resumed from B's snapshot; taking the next one fails
    assert fin.cached_tokens == history_end(e, B) and text == greedy_reply(fresh, b2)[0]
    assert greedy_reply(e, A2)[1].cached_tokens == 0   # A was dropped, not lost halfway


def test_a_resumed_turn_reports_no_prefill_rate(engines):
    from engine.api import PREFILL_RATE_MIN_TOKENS

    reusing, _, _ = engines
    reusing._prefixes = []
    first = [{"role": "system", "content": "You are a careful assistant. " * 30}, {"role": "user", "content": "Hi?"}]
    _, fin1 = greedy_reply(reusing, first)
    assert fin1.prompt_tokens >= PREFILL_RATE_MIN_TOKENS and fin1.prefill_tok_s > 0
    after = first + [{"role": "assistant", "content": "Hello."}, {"role": "user", "content": "How are you?"}]
    _, fin2 = greedy_reply(reusing, after)          # a few dozen tokens after the resumed history
    assert fin2.prompt_tokens - fin2.cached_tokens < PREFILL_RATE_MIN_TOKENS and fin2.prefill_tok_s is None
