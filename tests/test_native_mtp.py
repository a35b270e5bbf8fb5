"""The native MTP head and speculative decoding (GPU), against the reference model on the same dequantized weights
(engine/reference/mtp.py is the head's oracle) and against the native trunk's own one-token steps: greedy rounds give
its argmaxes, sampled rounds the host Sampler's draws for the seed (plain decoding's tokens)."""

from __future__ import annotations

import pytest

from native_helpers import TOL_MODEL_BF16KV, rel_err, requires_gpu
from test_native_model import dequantized_source, source_from_checkpoint

pytestmark = [pytest.mark.gpu, requires_gpu]
torch = pytest.importorskip("torch")

VOCAB_LIMIT = 1000


@pytest.fixture(scope="module")
def models(tiny_native_mtp_ckpt):
    """(native with the head and 3-draft verify steps, reference with the head), both on the same weights."""
    from engine.native_backend import NativeModel
    from engine.plan import DEFAULT_RECIPE
    from engine.reference.model import ReferenceModel
    src = source_from_checkpoint(tiny_native_mtp_ckpt, mtp=True)
    native = NativeModel.from_checkpoint(src, kv_dtype="bf16", max_context=512, vram_budget_bytes=2 << 30,
                                         mtp_drafts=3, lanes=2)
    ref = ReferenceModel.from_checkpoint(dequantized_source(src, DEFAULT_RECIPE), device="cuda", gdn_mode="recurrent",
                                         mtp=True)
    return native, ref


def _prompt(n: int, seed: int) -> list[int]:
    return torch.randint(0, VOCAB_LIMIT, (n,), generator=torch.Generator().manual_seed(seed)).tolist()


# 200 tokens: the prefill path (the head runs over each chunk's pairs inside prefill); 40 tokens through forward with
# every row's logits: steps of 16, 16 and 8 (each step's pairs closed by the next step's first token)
@pytest.mark.parametrize("n, last_only", [(200, True), (40, False)], ids=["prefill", "steps"])
def test_mtp_draft_logits_match_reference(models, n, last_only):
    native, ref = models
    prompt = _prompt(n, seed=n)
    ns, rs = native.new_state(n + 8), ref.new_state(n + 8)
    try:
        first = int(native.forward(torch.tensor(prompt), ns, last_only=last_only).logits[-1].argmax())
        out = ref.forward(torch.tensor(prompt), rs)
        assert int(out.logits[-1].argmax()) == first
        native.mtp_draft(ns, first)
        got = native.mtp_logits().double()
        want, h = ref.mtp_forward(out.hidden, torch.tensor(prompt[1:] + [first]), rs, return_hidden=True)
        want = want[-got.shape[0]:].double().cpu()   # the rows of the pairs this call closed
        err = rel_err(got, want)
        # a chained draft: the head on its own last output and the draft it made
        draft = int(got[-1].argmax())
        native.mtp_chain(ns, draft, slot=n)
        chained = native.mtp_logits()[-1].double()
        want_chained = ref.mtp_forward(h[-1:], torch.tensor([draft]), rs)[-1].double().cpu()
        err_chained = rel_err(chained, want_chained)
        print(f"MTP {n} tokens ({'prefill' if last_only else 'steps'}): draft logits rel err {err:.2e} over "
              f"{got.shape[0]} rows, chained {err_chained:.2e}")
        assert err < TOL_MODEL_BF16KV
        assert err_chained < TOL_MODEL_BF16KV
    finally:
        native.release(ns)


def _teacher_forced(native, prompt: list[int], tokens: list[int], expected) -> int:
    """Teacher-forces ``tokens`` after ``prompt`` by one-token steps: ``expected(i, logits)`` gives the token due at
    position i, or None where the margin between the best two candidates is within the rounding a step of another
    width may bring (a verify step's kernels sum in another order than a one-token step's). Asserts each token that
    has one; returns the positions checked."""
    s = native.new_state(len(prompt) + len(tokens) + 8)
    checked = 0
    try:
        logits = native.forward(torch.tensor(prompt), s, last_only=True).logits[-1]
        for i, tok in enumerate(tokens):
            want = expected(i, logits)
            if want is not None:
                assert tok == want, f"token {i}: {tok}, the trunk's {want}"
                checked += 1
            logits = native.forward(torch.tensor([tok]), s).logits[-1]
    finally:
        native.release(s)
    return checked


def _rounding_margin(row) -> float:
    """4 x TOL_MODEL_BF16KV of the logits' rms: the rounding a step of another width may bring."""
    return 4 * TOL_MODEL_BF16KV * float(row.norm() / row.numel() ** 0.5)


def _check_greedy(native, prompt: list[int], tokens: list[int]) -> int:
    """Each token must be the trunk's argmax wherever its top-2 margin is clear of the rounding."""
    def argmax(i, logits):
        row = logits[:VOCAB_LIMIT].double()
        top2 = torch.topk(row, 2).values
        return int(row.argmax()) if float(top2[0] - top2[1]) > _rounding_margin(row) else None
    return _teacher_forced(native, prompt, tokens, argmax)


def _speculate(native, prompt: list[int], n: int, k: int, **kw) -> tuple[list[int], "object"]:
    """n tokens: the prompt's greedy token, then speculative rounds (kw: draft_filter, and the list the filter reads
    the tokens from)."""
    from engine.native_speculative import greedy_speculative_tokens
    from engine.speculative import SpecStats
    got = kw.pop("got", [])
    stats = SpecStats()
    s = native.new_state(len(prompt) + n + 2 * k + 8)
    try:
        first = int(native.forward(torch.tensor(prompt), s, last_only=True).logits[-1][:VOCAB_LIMIT].argmax())
        got.append(first)
        for tok in greedy_speculative_tokens(native, s, first, k=k, vocab_limit=VOCAB_LIMIT, stats=stats, **kw):
            got.append(tok)
            if len(got) >= n:
                break
    finally:
        native.release(s)
    return got, stats


@pytest.mark.parametrize("k", [1, 3])
def test_speculative_with_mtp_drafts_gives_the_greedy_tokens(models, k):
    native, _ = models
    prompt = _prompt(30, seed=7)
    got, stats = _speculate(native, prompt, 41, k)
    checked = _check_greedy(native, prompt, got)
    print(f"k={k}: {checked} of {len(got)} tokens checked, {stats.accepted}/{stats.drafted} drafts kept")
    assert checked >= len(got) // 3
    assert stats.drafted > 0


@pytest.mark.parametrize("k", [1, 3])
def test_speculative_commits_every_kept_length(models, k):
    """Drafts from an oracle, the trunk's own greedy continuation of the tokens committed so far (a second lane that
    follows them, looks k tokens ahead by one-token steps and goes back to a snapshot), with one draft spoiled at a
    position that cycles through 0 .. k (k: none spoiled), so that rounds keep every count of drafts and every
    checkpoint is committed."""
    native, _ = models
    prompt, n = _prompt(25, seed=11), 48
    got, rounds = [], []
    shadow = {"state": native.new_state(len(prompt) + n + 4 * k + 8), "fed": 0}
    shadow["logits"] = native.forward(torch.tensor(prompt), shadow["state"], last_only=True).logits[-1]

    def oracle(base: int, drafts: list[int]) -> list[int]:
        sh = shadow["state"]
        for tok in got[shadow["fed"]:]:          # the committed tokens, up to the round's last one
            shadow["logits"] = native.forward(torch.tensor([tok]), sh).logits[-1]
        shadow["fed"] = len(got)
        snap = native.snapshot(sh)
        logits, out = shadow["logits"], []
        for _ in range(k):
            out.append(int(logits[:VOCAB_LIMIT].argmax()))
            logits = native.forward(torch.tensor([out[-1]]), sh).logits[-1]
        shadow["state"] = native.resume(snap, sh.max_tokens)
        spoil = len(rounds) % (k + 1)
        rounds.append(spoil)
        if spoil < k:
            out[spoil] = (out[spoil] + 1) % VOCAB_LIMIT
        return out

    try:
        got, stats = _speculate(native, prompt, n, k, draft_filter=oracle, got=got)
    finally:
        native.release(shadow["state"])
    checked = _check_greedy(native, prompt, got)
    print(f"k={k} oracle drafts: {checked} of {len(got)} tokens checked, {stats.accepted}/{stats.drafted} kept, "
          f"{len(rounds)} rounds")
    assert checked >= len(got) // 3
    assert len(rounds) >= 2 * (k + 1)   # every spoiled position (and none) at least twice
    # the rounds keep 0 .. k drafts in turn (half of all drafts), less where a near tie resolved otherwise
    assert stats.accepted >= stats.drafted // (2 * (k + 1))


# a temperature alone; Qwen's instruct preset (top-k, top-p, presence penalty) with a repetition penalty added
SAMPLED = {"temperature": dict(temperature=0.8, seed=0x5EED),
           "penalised": dict(temperature=0.7, top_k=20, top_p=0.8, presence_penalty=1.5, repetition_penalty=1.05,
                             seed=0xC0FFEE)}


def _check_sampled(native, prompt: list[int], tokens: list[int], sampling: dict) -> int:
    """Token i must be the host Sampler's draw (index i, the history before it) from the trunk's logits wherever the
    best two Gumbel-perturbed scores of the sampler's candidates are apart by more than the rounding."""
    from engine.sampling import Sampler, SamplingParams, gumbel_noise
    host = Sampler(SamplingParams(**sampling), valid_vocab_size=VOCAB_LIMIT)

    def draw(i, logits):
        cand = host.candidates(logits, tokens[:i], prompt)
        scores = cand.logits.double() + torch.from_numpy(gumbel_noise(host.seed, i, cand.ids.numpy())[0])
        top2 = torch.topk(scores, 2).values if scores.numel() > 1 else torch.tensor([0.0, -1e9])
        if float(top2[0] - top2[1]) <= _rounding_margin(logits[:VOCAB_LIMIT].double()) / sampling["temperature"]:
            return None
        want = host.sample(logits, tokens[:i], prompt_ids=prompt)
        assert want == int(cand.ids[scores.argmax()])
        return want
    return _teacher_forced(native, prompt, tokens, draw)


@pytest.mark.parametrize("mode", list(SAMPLED))
@pytest.mark.parametrize("k", [1, 3])
def test_sampled_speculation_gives_plain_decodings_tokens(models, k, mode):
    """A sampled request (a seed; with penalties too): the head's drafts and the verify step's rows draw with the
    Gumbel noise of their place in the response and the penalty counts of the tokens before it, so each committed
    token is the draw plain decoding makes there. Drafts come from the head, and in a second run from plain GPU
    decoding with the same seed (one spoiled a round, cycling through the positions), so that rounds keep every
    count of drafts."""
    from engine.native_loop import device_sampling
    from engine.native_speculative import speculative_tokens
    from engine.sampling import Sampler, SamplingParams
    from engine.speculative import SpecStats
    native, _ = models
    sampling = SAMPLED[mode]
    prompt, n = _prompt(27, seed=5), 40
    dev = device_sampling(SamplingParams(**sampling), seed=sampling["seed"], vocab_limit=VOCAB_LIMIT)
    s = native.new_state(len(prompt) + n + 8)
    native.forward(torch.tensor(prompt), s, last_only=True)
    loop = native.decode_tokens(s, SamplingParams(**sampling), seed=sampling["seed"], vocab_limit=VOCAB_LIMIT,
                                prompt_ids=prompt)
    plain = [next(loop) for _ in range(n + k + 1)]
    loop.close()   # drains the loop's queued steps and releases the state
    rounds = []

    def from_plain(base: int, drafts: list[int]) -> list[int]:
        at = base - len(prompt) + 1            # the response index of the round's first draft
        out = list(plain[at:at + len(drafts)])
        spoil = len(rounds) % (k + 1)
        rounds.append(spoil)
        if spoil < len(out):
            out[spoil] = (out[spoil] + 1) % VOCAB_LIMIT
        return out

    for draft_filter in (None, from_plain):
        stats, got = SpecStats(), []
        s = native.new_state(len(prompt) + n + 2 * k + 8)
        try:
            logits = native.forward(torch.tensor(prompt), s, last_only=True).logits[-1]
            got.append(Sampler(SamplingParams(**sampling), valid_vocab_size=VOCAB_LIMIT).sample(logits, [],
                                                                                               prompt_ids=prompt))
            for tok in speculative_tokens(native, s, got[0], k=k, sampling=dev, prompt_ids=prompt, stats=stats,
                                          draft_filter=draft_filter):
                got.append(tok)
                if len(got) >= n:
                    break
        finally:
            native.release(s)
        checked = _check_sampled(native, prompt, got, sampling)
        same = next((i for i, (a, b) in enumerate(zip(got, plain)) if a != b), len(got))
        print(f"k={k} {mode}, {'plain' if draft_filter else 'head'} drafts: {checked} of {len(got)} tokens checked, "
              f"{stats.accepted}/{stats.drafted} kept, plain decoding's tokens up to {same}")
        assert checked >= len(got) // 2 and stats.drafted > 0
    assert stats.accepted >= stats.drafted // (2 * (k + 1))


@pytest.mark.parametrize("mode", list(SAMPLED))
def test_rounds_that_keep_nothing_hand_over_to_the_decode_loop(models, mode):
    """Every draft spoiled: after FALLBACK_WINDOW rounds the GPU decode loop takes over from the state as the rounds
    left it (`last` consumed, the draw index and the penalty counts carried on); each token is still the host
    Sampler's draw at its place."""
    from engine.native_loop import device_sampling
    from engine.native_speculative import FALLBACK_WINDOW, speculative_tokens
    from engine.sampling import Sampler, SamplingParams
    from engine.speculative import SpecStats
    native, _ = models
    sampling, k, n = SAMPLED[mode], 3, FALLBACK_WINDOW + 24
    params = SamplingParams(**sampling)
    dev = device_sampling(params, seed=sampling["seed"], vocab_limit=VOCAB_LIMIT)
    prompt = _prompt(21, seed=8)
    s = native.new_state(len(prompt) + n + 2 * k + 8)
    stats, got, handed = SpecStats(), [], []

    def plain_from(draw: int):
        handed.append(draw)
        return native.decode_tokens(s, params, seed=sampling["seed"], vocab_limit=VOCAB_LIMIT, first_draw=draw)

    gen = None
    try:
        logits = native.forward(torch.tensor(prompt), s, last_only=True).logits[-1]
        got.append(Sampler(params, valid_vocab_size=VOCAB_LIMIT).sample(logits, [], prompt_ids=prompt))
        gen = speculative_tokens(native, s, got[0], k=k, sampling=dev, prompt_ids=prompt, stats=stats,
                                 draft_filter=lambda base, d: [(t + 1) % VOCAB_LIMIT for t in d],
                                 plain_from=plain_from)
        for tok in gen:
            got.append(tok)
            if len(got) >= n:
                break
    finally:
        if gen is not None:
            gen.close()
        native.release(s)
    checked = _check_sampled(native, prompt, got, sampling)
    print(f"{mode}: handed over at draw {handed}, {checked} of {len(got)} tokens checked")
    # a spoiled draft can still match the trunk's draw (a near tie resolved the other way): then a round keeps more
    assert handed and handed[0] >= 1 + FALLBACK_WINDOW and stats.drafted >= FALLBACK_WINDOW * k
    assert checked >= len(got) // 2


def test_mtp_refusals(models, tiny_native_ckpt):
    from engine.native_backend import NativeBackendError, NativeModel
    native, _ = models
    s = native.new_state(64)
    try:
        with pytest.raises(NativeBackendError, match="no trunk step is pending"):
            native.mtp_draft(s, 1)
        with pytest.raises(ValueError, match="chained"):
            native.engine.mtp_step(s.lane, [1, 2], [], 0, 0, True)
    finally:
        native.release(s)
    with pytest.raises(NativeBackendError, match="no MTP head"):
        NativeModel.from_checkpoint(source_from_checkpoint(tiny_native_ckpt), kv_dtype="bf16", max_context=64,
                                    vram_budget_bytes=1 << 30, mtp_drafts=2)


def test_a_resumed_snapshot_drafts_as_the_sequence_it_was_taken_from(models):
    """A detached snapshot carries the head's cache and its pending pairs (their hidden rows): resumed after both
    lanes served other sequences (whose steps overwrote the head's cache and hidden rows), directly or read back from
    its saved form, its next draft is the original sequence's, bit for bit. Stripped of the pending pairs, nothing is
    left for the head to close."""
    from dataclasses import replace

    from engine.native_backend import NativeBackendError
    native, _ = models
    prompt, nxt = _prompt(60, seed=11), 17
    s = native.new_state(128)
    first = int(native.forward(torch.tensor(prompt), s, last_only=True).logits[-1, :VOCAB_LIMIT].argmax())
    native.forward(torch.tensor([first]), s)       # closes the prompt's last pair; leaves position 60 pending
    snap = native.detach(native.snapshot(s))
    assert snap.mtp_pending == (60, []) and snap.mtp_hidden.shape == (1, native.config.text.hidden_size)
    native.mtp_draft(s, nxt)
    want = native.mtp_logits()[-1].clone()
    native.release(s)
    others = [native.new_state(128) for _ in range(2)]   # every lane serves another sequence, head steps included
    for i, other in enumerate(others):
        native.forward(torch.tensor(_prompt(80, seed=91 + i)), other, last_only=True)
        native.mtp_draft(other, 5)
    assert {o.lane for o in others} == {0, 1}
    for other in others:
        native.release(other)
    back = native.import_snapshot(*native.export_snapshot(snap))
    assert back is not None and back.mtp_pending == snap.mtp_pending
    for resumable in (snap, back):
        r = native.resume(resumable, 128)
        try:
            native.mtp_draft(r, nxt)
            assert torch.equal(native.mtp_logits()[-1], want)
        finally:
            native.release(r)
    r = native.resume(replace(snap, mtp_pending=None, mtp_hidden=None), 128)
    try:
        with pytest.raises(NativeBackendError, match="no trunk step is pending"):
            native.mtp_draft(r, nxt)
    finally:
        native.release(r)


def reply(engine, messages, sampling):
    from engine.api import TextDelta
    events = list(engine.generate(messages, sampling))
    return "".join(e.text for e in events if isinstance(e, TextDelta)), events[-1]


def test_engine_drafts_replies_on_the_native_engine(tmp_path_factory):
    """engine.api with mtp_speculation on the native backend: a greedy reply drafts (an acceptance rate is reported)
    and runs to the same length as the plain engine's; sampled ones draft too, with a penalty as well. (Token
    for token the
    speculative reply is the trunk's greedy one up to near ties: the model-level tests above check that; the demo
    model's random logits over 248K ids have near ties that a verify step's other summation order may resolve
    otherwise, so the texts are not compared.)"""
    from engine import native
    from engine.api import Engine, EngineOptions, Finished
    from engine.sampling import SamplingParams
    mp = pytest.MonkeyPatch()
    mp.setenv("MONORAIL_DATA_DIR", str(tmp_path_factory.mktemp("data")))
    # drafting engages where verify steps pay (the tensor-core GEMV); here it runs on the default route to be checked
    mp.setattr(native, "verify_steps_pay", lambda: True)
    try:
        spec = Engine.load("demo", EngineOptions(backend="native", max_context=2048, mtp_speculation=True,
                                                 mtp_draft_tokens=3, prefix_reuse=False))
        plain = Engine.load("demo", EngineOptions(backend="native", max_context=2048, prefix_reuse=False))
        messages = [{"role": "user", "content": "Name three kinds of trains."}]
        greedy = SamplingParams(temperature=0.0, max_tokens=80)
        text, fin = reply(spec, messages, greedy)
        _, fin_plain = reply(plain, messages, greedy)
        _, fin_sampled = reply(spec, messages, SamplingParams(temperature=0.8, seed=3, max_tokens=20))
        _, fin_penalty = reply(spec, messages, SamplingParams(temperature=0.8, seed=3, max_tokens=20,
                                                             presence_penalty=0.5))
    finally:
        mp.undo()

    assert isinstance(fin, Finished) and fin.spec_accept_rate is not None
    assert fin_plain.spec_accept_rate is None
    print(f"engine: {fin.completion_tokens} tokens, drafts kept {fin.spec_accept_rate:.2f}")
    assert fin.completion_tokens == fin_plain.completion_tokens and text
    assert fin_sampled.spec_accept_rate is not None and fin_sampled.completion_tokens > 0
    assert fin_penalty.spec_accept_rate is not None and fin_penalty.completion_tokens > 0
