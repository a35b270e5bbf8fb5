"""Reference sampling: the distribution it draws from, measured empirically against an exact
truncated, renormalised distribution computed independently here (numpy, float64), plus the RNG,
determinism, validation and stop detection.

Statistical test: Pearson chi-square of N = 20,000 draws against the oracle probabilities, at
significance 0.001 (critical value by the Wilson-Hilferty approximation), plus a total-variation
distance below 0.02 (the expected TV for these sizes is under 0.009). Draws are seeded, so the
outcome is deterministic; the bounds are what a correct sampler meets with probability 0.999.
"""

from __future__ import annotations

import math
import random
import subprocess
import sys

import numpy as np
import pytest
import torch

from engine.sampling import (
    GUMBEL_MAX,
    PRESETS,
    Sampler,
    SamplingParams,
    SamplingParamsError,
    StopChecker,
    gumbel_noise,
    philox4x32_10,
    preset,
    uniforms,
)

N_DRAWS = 20_000
VALID = 10  # valid vocabulary; the logit vectors below have 2 extra padding entries
BASE_LOGITS = [2.0, 1.5, 1.2, 0.9, 0.3, -0.2, -0.7, -1.1, -1.8, -2.5]
PADDED = BASE_LOGITS + [50.0, 40.0]  # padding rows with huge logits must never be drawn


# ---- independent oracle -------------------------------------------------------------------------
def oracle_distribution(logits, valid, *, temperature=1.0, top_k=0, top_p=1.0, min_p=0.0,
                        presence=0.0, frequency=0.0, repetition=1.0, generated=(), prompt=()):
    """Exact probabilities over ids 0..valid-1, step by step in float64, written from the definitions."""
    x = np.array(logits[:valid], dtype=np.float64)
    for i in set(prompt) | set(generated):
        x[i] = x[i] / repetition if x[i] > 0 else x[i] * repetition
    for i in set(generated):
        x[i] -= frequency * list(generated).count(i) + presence
    x = x / temperature
    p = np.exp(x - x.max())
    p /= p.sum()
    keep = np.ones(valid, dtype=bool)
    order = sorted(range(valid), key=lambda i: -p[i])
    if top_k:
        keep[:] = False
        keep[order[:top_k]] = True
    if top_p < 1.0:
        q = np.where(keep, p, 0.0)
        q /= q.sum()
        total, chosen = 0.0, []
        for i in order:
            if not keep[i]:
                continue
            chosen.append(i)
            total += q[i]
            if total >= top_p:
                break
        keep[:] = False
        keep[chosen] = True
    if min_p > 0.0:
        q = np.where(keep, p, 0.0)
        keep &= q >= min_p * q.max()
    out = np.where(keep, p, 0.0)
    return out / out.sum()


def chi_square_critical(df: int, z: float = 3.0902) -> float:
    """Upper 0.001 quantile of chi-square(df), Wilson-Hilferty approximation."""
    return df * (1 - 2 / (9 * df) + z * math.sqrt(2 / (9 * df))) ** 3


def assert_matches(samples, expected):
    counts = np.bincount(samples, minlength=len(expected)).astype(np.float64)
    support = expected > 0
    assert counts[~support].sum() == 0, f"drew ids outside the support: {np.nonzero(counts * ~support)[0]}"
    observed = counts / counts.sum()
    tv = 0.5 * np.abs(observed - expected).sum()
    n = counts.sum()
    chi2 = (((counts - n * expected) ** 2)[support] / (n * expected[support])).sum()
    df = int(support.sum()) - 1
    assert tv < 0.02, f"total variation {tv:.4f}"
    if df > 0:
        assert chi2 < chi_square_critical(df), f"chi-square {chi2:.1f} > {chi_square_critical(df):.1f} (df {df})"


DISTRIBUTION_CASES = [
    ("temperature_1", dict(temperature=1.0)),
    ("temperature_0.5", dict(temperature=0.5)),
    ("temperature_2", dict(temperature=2.0)),
    ("top_k_3", dict(temperature=1.0, top_k=3)),
    ("top_p_0.8", dict(temperature=1.0, top_p=0.8)),
    ("min_p_0.1", dict(temperature=1.0, min_p=0.1)),
    ("repetition_1.5", dict(temperature=1.0, repetition=1.5, generated=(0, 6), prompt=(2, 7))),
    ("presence_0.8", dict(temperature=1.0, presence=0.8, generated=(0, 1, 1, 3))),
    ("frequency_0.5", dict(temperature=1.0, frequency=0.5, generated=(0, 0, 0, 1, 4, 4))),
    ("all_together", dict(temperature=0.7, top_k=6, top_p=0.9, min_p=0.05, presence=0.5, frequency=0.2,
                          repetition=1.2, generated=(0, 0, 2), prompt=(1, 5))),
]


def _params(case, seed=7):
    return SamplingParams(
        temperature=case.get("temperature", 1.0), top_k=case.get("top_k", 0), top_p=case.get("top_p", 1.0),
        min_p=case.get("min_p", 0.0), presence_penalty=case.get("presence", 0.0),
        frequency_penalty=case.get("frequency", 0.0), repetition_penalty=case.get("repetition", 1.0), seed=seed)


@pytest.mark.parametrize("name,case", DISTRIBUTION_CASES, ids=[c[0] for c in DISTRIBUTION_CASES])
def test_empirical_distribution_matches_oracle(name, case):
    sampler = Sampler(_params(case), VALID)
    generated, prompt = case.get("generated", ()), case.get("prompt", ())
    samples = sampler.sample_steps(torch.tensor(PADDED), generated, range(N_DRAWS), prompt_ids=prompt)
    expected = oracle_distribution(PADDED, VALID, **case)
    assert_matches(np.array(samples), expected)
    # And the same draws through sample() one at a time, for a few steps.
    for step in (0, 1, 12345):
        assert sampler.sample(torch.tensor(PADDED), generated, prompt_ids=prompt, step=step) == samples[step]


def test_truncation_changes_what_is_tested():
    # Guard against a vacuous oracle: the cases really differ from plain softmax.
    plain = oracle_distribution(PADDED, VALID)
    for name, case in DISTRIBUTION_CASES[1:]:
        assert np.abs(oracle_distribution(PADDED, VALID, **case) - plain).sum() > 0.05, name


# transformers has no presence/frequency penalty, so those cases have only the numpy oracle.
HF_CASES = [c for c in DISTRIBUTION_CASES if not c[1].get("presence") and not c[1].get("frequency")]


@pytest.mark.parametrize("name,case", HF_CASES, ids=[c[0] for c in HF_CASES])
def test_candidates_match_transformers_warpers(name, case):
    """Second oracle: transformers' own logits processors (repetition penalty, temperature, top-k,
    top-p, min-p, in generate()'s order) give the same probabilities as our candidate set."""
    from transformers.generation.logits_process import (
        LogitsProcessorList,
        MinPLogitsWarper,
        RepetitionPenaltyLogitsProcessor,
        TemperatureLogitsWarper,
        TopKLogitsWarper,
        TopPLogitsWarper,
    )

    chain = []
    if case.get("repetition", 1.0) != 1.0:
        chain.append(RepetitionPenaltyLogitsProcessor(case["repetition"]))
    chain.append(TemperatureLogitsWarper(case.get("temperature", 1.0)))
    if case.get("top_k"):
        chain.append(TopKLogitsWarper(case["top_k"]))
    if case.get("top_p", 1.0) < 1.0:
        chain.append(TopPLogitsWarper(case["top_p"]))
    if case.get("min_p"):
        chain.append(MinPLogitsWarper(case["min_p"]))
    seen = list(case.get("prompt", ())) + list(case.get("generated", ()))
    history = torch.tensor([seen], dtype=torch.long) if seen else torch.zeros((1, 0), dtype=torch.long)
    scores = LogitsProcessorList(chain)(history, torch.tensor([BASE_LOGITS], dtype=torch.float32))
    theirs = torch.softmax(scores[0].double(), dim=0).numpy()

    cand = Sampler(_params(case), VALID).candidates(torch.tensor(PADDED), case.get("generated", ()),
                                                      case.get("prompt", ()))
    ours = np.zeros(VALID)
    ours[cand.ids.numpy()] = cand.probabilities().numpy()
    np.testing.assert_allclose(ours, theirs, atol=1e-6)


def test_top_k_has_no_cap():
    generator = torch.Generator().manual_seed(0)
    logits = torch.randn(5000, generator=generator) * 0.05  # nearly flat: every kept id is likely
    for k in (21, 100, 1000, 4999):
        cand = Sampler(SamplingParams(temperature=1.0, top_k=k, seed=1), 5000).candidates(logits, [])
        assert cand.ids.numel() == k
        assert set(cand.ids.tolist()) == set(torch.topk(logits, k).indices.tolist())
    sampler = Sampler(SamplingParams(temperature=1.0, top_k=100, seed=3), 5000)
    drawn = set(sampler.sample_steps(logits, [], range(N_DRAWS)))
    assert drawn == set(torch.topk(logits, 100).indices.tolist())  # all 100 kept ids really get drawn


def test_top_k_ties_keep_lower_ids():
    logits = torch.tensor([0.0, 1.0, 1.0, 1.0, 1.0, 2.0, 1.0])
    cand = Sampler(SamplingParams(temperature=1.0, top_k=3, seed=1), 7).candidates(logits, [])
    assert cand.ids.tolist() == [5, 1, 2]


def test_greedy_is_argmax_with_penalties_and_masking():
    generator = torch.Generator().manual_seed(1)
    for _ in range(20):
        logits = torch.randn(300, generator=generator)
        logits[250:] = 100.0  # padding
        expected = int(logits[:250].argmax())
        sampler = Sampler(SamplingParams(temperature=0.0, seed=None), 250)
        assert sampler.sample(logits, []) == expected
        # A presence penalty large enough removes the winner, and greedy follows the penalised logits.
        penalised = Sampler(SamplingParams(temperature=0.0, presence_penalty=2.0), 250)
        top2 = torch.topk(logits[:250], 2)
        if float(top2.values[0] - top2.values[1]) < 2.0:
            assert penalised.sample(logits, [expected]) == int(top2.indices[1])
    tie = torch.tensor([1.0, 3.0, 3.0, 0.0])
    assert Sampler(SamplingParams(temperature=0.0), 4).sample(tie, []) == 1


def test_padding_ids_never_drawn_even_when_they_dominate():
    logits = torch.full((248320,), -100.0)  # every valid id but 42 has probability < 1e-37
    logits[248077:] = 1000.0
    logits[42] = 0.0
    for params in (SamplingParams(temperature=0.0), SamplingParams(temperature=1.0, seed=5)):
        assert Sampler(params, 248077).sample(logits, []) == 42


def test_seeded_draws_are_reproducible_and_depend_on_seed_and_step():
    logits = torch.tensor(PADDED)
    a = Sampler(SamplingParams(temperature=1.0, seed=123), VALID)
    b = Sampler(SamplingParams(temperature=1.0, seed=123), VALID)
    c = Sampler(SamplingParams(temperature=1.0, seed=124), VALID)
    history: list[int] = []
    run_a, run_b = [], []
    for _ in range(50):
        run_a.append(a.sample(logits, history))
        run_b.append(b.sample(logits, history))
        history.append(run_a[-1])
    assert run_a == run_b
    # The default step is the number of generated tokens, so history length picks the draw.
    assert a.sample(logits, [0] * 7) == a.sample(logits, [], step=7)
    assert a.sample_steps(logits, [], range(200)) != c.sample_steps(logits, [], range(200))
    # No seed given: the sampler picks one and reports it, and that seed replays the same draws.
    free = Sampler(SamplingParams(temperature=1.0), VALID)
    replay = Sampler(SamplingParams(temperature=1.0, seed=free.seed), VALID)
    assert free.sample_steps(logits, [], range(100)) == replay.sample_steps(logits, [], range(100))


def test_draw_is_argmax_of_logit_plus_gumbel_over_all_candidates():
    # The documented rule, computed here over every candidate (the sampler prunes hopeless ones).
    generator = torch.Generator().manual_seed(2)
    logits = torch.randn(1000, generator=generator) * 6.0  # spread enough that some ids cannot win
    cases = [(SamplingParams(temperature=1.0, seed=11), True), (SamplingParams(temperature=1.3, top_p=0.99, seed=12), False)]
    for params, prunes in cases:
        sampler = Sampler(params, 1000)
        cand = sampler.candidates(logits, [])
        steps = np.arange(2000)
        noise = gumbel_noise(sampler.seed, steps, cand.ids.numpy())
        expected = cand.ids.numpy()[(cand.logits.double().numpy()[None, :] + noise).argmax(axis=1)]
        assert sampler.sample_steps(logits, [], steps) == expected.tolist()
        hopeless = cand.logits.double().numpy() < cand.logits.double().max().item() - GUMBEL_MAX
        if prunes:
            assert hopeless.sum() > 100  # the pruning path really is exercised


def test_philox_known_answer_vectors():
    # Random123 tests/kat_vectors, "philox4x32 10" lines: counter[4] key[2] -> result[4].
    vectors = [
        ([0, 0, 0, 0], (0, 0), [0x6627E8D5, 0xE169C58D, 0xBC57AC4C, 0x9B00DBD8]),
        ([0xFFFFFFFF] * 4, (0xFFFFFFFF, 0xFFFFFFFF), [0x408F276D, 0x41C83B0E, 0xA20BC7C6, 0x6D5451FD]),
        ([0x243F6A88, 0x85A308D3, 0x13198A2E, 0x03707344], (0xA4093822, 0x299F31D0),
         [0xD16CFE09, 0x94FDCCEB, 0x5001E420, 0x24126EA1]),
    ]
    for counter, key, expected in vectors:
        assert philox4x32_10(np.array(counter), key).tolist() == expected
    batch = philox4x32_10(np.array([v[0] for v in vectors[:1]] * 3), (0, 0))
    assert batch.tolist() == [vectors[0][2]] * 3


def test_uniforms_are_uniform_and_keyed():
    u = uniforms(seed=2**40 + 5, steps=[0, 1, 2**33], token_ids=np.arange(20000))
    assert u.shape == (3, 20000) and (u > 0).all() and (u < 1).all()
    assert abs(u.mean() - 0.5) < 0.01 and abs(u.var() - 1 / 12) < 0.005
    assert not np.array_equal(u[0], u[1]) and not np.array_equal(u[1], u[2])
    assert not np.array_equal(uniforms(1, 0, [0, 1]), uniforms(2, 0, [0, 1]))
    assert not np.array_equal(uniforms(1, 0, [0, 1], purpose=1), uniforms(1, 0, [0, 1]))
    g = gumbel_noise(9, range(2000), np.arange(10)).ravel()
    assert abs(g.mean() - 0.5772) < 0.05  # Euler-Mascheroni constant: the Gumbel mean


# ---- parameters -------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "changes,field_name",
    [
        (dict(temperature=-0.1), "temperature"), (dict(temperature=float("nan")), "temperature"),
        (dict(top_k=-1), "top_k"), (dict(top_k=2.5), "top_k"), (dict(top_p=0.0), "top_p"),
        (dict(top_p=1.1), "top_p"), (dict(min_p=-0.1), "min_p"), (dict(presence_penalty=3.0), "presence_penalty"),
        (dict(frequency_penalty=-2.5), "frequency_penalty"), (dict(repetition_penalty=0.0), "repetition_penalty"),
        (dict(seed=-1), "seed"), (dict(seed=2**64), "seed"), (dict(max_tokens=0), "max_tokens"),
        (dict(stop=("",)), "stop"), (dict(stop_token_ids=(-3,)), "stop_token_ids"),
        (dict(ignore_eos="yes"), "ignore_eos"), (dict(temperature=True), "temperature"),
    ],
)
def test_validation_names_the_bad_field(changes, field_name):
    with pytest.raises(SamplingParamsError, match=field_name):
        SamplingParams(**changes).validate()


def test_presets_and_dict_round_trip():
    for name, params in PRESETS.items():
        params.validate()
        assert SamplingParams.from_dict(params.to_dict()) == params, name
    thinking = preset("thinking", seed=3)
    assert (thinking.temperature, thinking.top_p, thinking.top_k, thinking.presence_penalty, thinking.seed) == \
        (1.0, 0.95, 20, 1.5, 3)
    assert PRESETS["thinking"].seed is None  # presets are not modified by overrides
    assert preset("instruct").top_p == 0.8 and preset("greedy").greedy
    with pytest.raises(SamplingParamsError, match="unknown sampling preset"):
        preset("creative")
    with pytest.raises(SamplingParamsError, match="unknown sampling parameter"):
        SamplingParams.from_dict({"temprature": 1.0})
    assert SamplingParams(stop="END").stop == ("END",)


def test_sampler_refuses_bad_inputs():
    with pytest.raises(SamplingParamsError):
        Sampler(SamplingParams(top_p=2.0), 10)
    sampler = Sampler(SamplingParams(temperature=1.0, seed=1), 10)
    with pytest.raises(ValueError, match="NaN"):
        sampler.sample(torch.tensor([0.0] * 9 + [float("nan")]), [])
    with pytest.raises(ValueError, match="entries"):
        sampler.sample(torch.zeros(5), [])
    with pytest.raises(ValueError, match="token ids"):
        Sampler(SamplingParams(temperature=1.0, presence_penalty=1.0, seed=1), 10).sample(torch.zeros(10), [10])
    with pytest.raises(ValueError, match="-inf"):
        sampler.sample(torch.full((10,), float("-inf")), [])


# ---- stop detection -----------------------------------------------------------------------------
def _run_stop_checker(pieces, params, eos_ids=(), token_ids=None):
    checker = StopChecker(params, eos_ids)
    shown, decision = [], None
    for index, piece in enumerate(pieces):
        decision = checker.push(token_ids[index] if token_ids else 1000 + index, piece)
        shown.append(decision.text)
        if decision.stop:
            break
    else:
        shown.append(checker.flush())
    return "".join(shown), decision, shown


STOP_TEXTS = [
    ("Hello world. ###END### ignored", ("###END###",), "Hello world. "),
    ("no stop here at all #", ("##",), "no stop here at all #"),
    ("aaab", ("aab", "ab"), "a"),  # the earliest occurrence wins, whichever string it is
    ("x</s", ("</stop>",), "x</s"),  # a partial stop at the very end is released by flush()
    ("日本語のテキスト。終わり。以降", ("終わり",), "日本語のテキスト。"),
]


@pytest.mark.parametrize("text,stops,expected", STOP_TEXTS)
def test_stop_strings_across_any_token_boundaries(text, stops, expected):
    params = SamplingParams(stop=stops)
    chunkings = [[text[:i], text[i:]] for i in range(len(text) + 1)] + [list(text)]
    rng = random.Random(5)
    for _ in range(100):
        cuts = sorted(rng.sample(range(len(text) + 1), k=min(len(text) + 1, 4)))
        chunkings.append([text[a:b] for a, b in zip([0] + cuts, cuts + [len(text)])])
    for pieces in chunkings:
        shown, decision, parts = _run_stop_checker(pieces, params)
        assert shown == expected, pieces
        # Never show a piece of a stop string that later turns out to be one.
        if decision is not None and decision.stop:
            assert decision.finish_reason == "stop" and decision.matched in stops


def test_stop_text_is_held_back_then_released():
    checker = StopChecker(SamplingParams(stop=("STOP",)))
    assert checker.push(1, "abc ST").text == "abc "
    assert checker.push(2, "O").text == ""
    released = checker.push(3, "P? no, STOMP")
    assert released.text == "" and released.stop and released.matched == "STOP"

    checker = StopChecker(SamplingParams(stop=("STOP",)))
    assert checker.push(1, "ST").text == ""
    assert checker.push(2, "OMP").text == "STOMP"


def test_eos_stop_ids_and_length():
    params = SamplingParams(max_tokens=3, stop=("zz",), stop_token_ids=(77,))
    shown, decision, _ = _run_stop_checker(["a", "b", "c", "d"], params)
    assert shown == "abc" and decision.finish_reason == "length"
    shown, decision, _ = _run_stop_checker(["a", "z", "<|im_end|>"], SamplingParams(stop=("zz",)),
                                           eos_ids=(248046,), token_ids=[1, 2, 248046])
    assert shown == "az" and decision.finish_reason == "stop" and decision.matched == 248046
    shown, decision, _ = _run_stop_checker(["a", "!"], params, token_ids=[1, 77])
    assert shown == "a" and decision.matched == 77
    shown, decision, _ = _run_stop_checker(["a", "<|im_end|>", "b"], SamplingParams(ignore_eos=True),
                                           eos_ids=(248046,), token_ids=[1, 248046, 2])
    assert shown == "a<|im_end|>b" and decision.stop is False
    checker = StopChecker(SamplingParams(), (5,))
    checker.push(5, "")
    with pytest.raises(RuntimeError, match="after a stop"):
        checker.push(6, "x")


def test_stop_checker_with_real_tokens():
    from engine.tokenizer import load_tokenizer

    tok = load_tokenizer()
    text = "Réponse: 🦄 licorne. FIN🦄 reste"
    ids = tok.encode(text)
    decoder = tok.stream_decoder()
    checker = StopChecker(SamplingParams(stop=("FIN🦄",)), tok.eos_ids)
    shown = []
    for token_id in ids:
        decision = checker.push(token_id, decoder.push(token_id))
        shown.append(decision.text)
        if decision.stop:
            break
    assert "".join(shown) == "Réponse: 🦄 licorne. "


def test_gui_side_modules_import_without_torch_or_transformers():
    # The GUI process counts tokens and builds parameters without torch; transformers is test-only.
    code = (
        "import sys, engine.tokenizer, engine.chat_template, engine.output_parser, engine.sampling\n"
        "from engine.sampling import SamplingParams, StopChecker\n"
        "SamplingParams(temperature=0.5).validate()\n"
        "bad = [m for m in ('torch', 'transformers') if m in sys.modules]\n"
        "assert not bad, bad\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)
