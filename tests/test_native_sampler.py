"""The device sampler against the host Sampler (engine/sampling.py), and the device-side decode loop (GPU).

The host Sampler is the oracle: for the same logits, history, seed and draw index both must pick the same
token (they share the RNG counter and each step's arithmetic; only float rounding of two equal scores could
part them, which these fixed cases do not hit). Every preset and the fallback paths (no top-k, top-k > 64) are
covered over many draws; the decode loop must give the host loop's tokens on a tiny model."""

from __future__ import annotations

import contextlib

import pytest

from native_helpers import requires_gpu, step_inputs
from sampler_rows import SLICE_DRAW_CASES, sampler_rows
from test_native_model import source_from_checkpoint

pytestmark = [pytest.mark.gpu, requires_gpu]
torch = pytest.importorskip("torch")

V, VALID = 248320, 248077  # the 27B's logits row and its tokenizer's vocabulary
PROMPT_SEEN = 1 << 30  # ops.h kPromptSeen

CASES = {
    "greedy": dict(temperature=0.0),
    "greedy-penalised": dict(temperature=0.0, repetition_penalty=1.3, presence_penalty=0.5, frequency_penalty=0.4),
    "thinking": dict(temperature=1.0, top_p=0.95, top_k=20, presence_penalty=1.5),
    "thinking-coding": dict(temperature=0.6, top_p=0.95, top_k=20),
    "instruct": dict(temperature=0.7, top_p=0.8, top_k=20, presence_penalty=1.5),
    "instruct-reasoning": dict(temperature=1.0, top_k=40, presence_penalty=2.0),
    "topk64-minp-repetition": dict(temperature=0.9, top_k=64, min_p=0.05, repetition_penalty=1.2, frequency_penalty=0.3),
    "topk1": dict(temperature=0.8, top_k=1),
    # the fallback (no top-k, or top-k above 64): thresholds over the whole row
    "temperature-only": dict(temperature=0.8),
    "top-p-only": dict(temperature=1.1, top_p=0.9),
    "topk100-top-p": dict(temperature=0.7, top_k=100, top_p=0.95, presence_penalty=1.0),
    "min-p-only": dict(temperature=1.0, min_p=0.1),
}


def _device_draws(nat, logits, params: dict, counts, draw: int, scratch_out: list | None = None,
                  scratch_fill: float | None = None) -> list[int]:
    T = logits.shape[0]
    inp = step_inputs([0] * T, [(0, 0, 0)] * T, 0, draw=draw)
    scratch = torch.empty(T, V, device="cuda") if scratch_fill is None else torch.full((T, V), scratch_fill, device="cuda")
    out = torch.full((T,), -7, dtype=torch.int32, device="cuda")
    nat.op_sample(logits.data_ptr(), T, V, params, counts.data_ptr(), inp.data_ptr(), scratch.data_ptr(),
                  out.data_ptr())
    if scratch_out is not None:
        scratch_out.append(scratch.cpu())
    return out.cpu().tolist()


SLICES = -(-V // 2048)  # sampler.cu kSlice


HEADER_BYTES = (812 * SLICES + 32 + 255) // 256 * 256  # sampler.cu CutoffLayout::header_bytes


def _packed_ids(scratch_row, n: int) -> list[int]:
    """The ids of a narrowed row's packed candidate list (Candidate: uint32 key, int32 id), in list order."""
    return scratch_row.view(torch.int32)[HEADER_BYTES // 4 + 1:HEADER_BYTES // 4 + 2 * n:2].tolist()


def _no_top_k_candidates(scratch_row) -> tuple[list[int], int]:
    """Each slice's candidate count and a slice's capacity, from the no-top-k mode's scratch header (sampler.cu
    CutoffLayout: float64 shares of the normaliser, float maxima, int32 counts, the slice draw's float64 scores and
    int32 winners, top-p's narrowing (float64 mass above, 64 int64 and 64 int32 bins a slice, the row's state,
    collect's counts), then the candidate regions)."""
    counts = scratch_row.view(torch.int32)[3 * SLICES:4 * SLICES].tolist()
    header = HEADER_BYTES
    return counts, (V * 4 - header) // (8 * SLICES)


def _narrowing(scratch_row) -> tuple[int, int, int]:
    """Top-p's narrowing state from the header: (1 when sample_narrow narrowed the row, 2 left it wide, b_in, b_out)."""
    narrowed, b_in, b_out = scratch_row.view(torch.int32)[202 * SLICES:202 * SLICES + 3].tolist()
    return narrowed, b_in, b_out


def _wide_verdict(scratch_row) -> tuple[int, int, int]:
    """finish_wide's record of a wide row: its verdict (0 the cut found inside the list, 1 every id kept, 2
    undecidable), how many of the list's ids top-p keeps, and the last of them in the host's order."""
    verdict, kept, last = scratch_row.view(torch.int32)[202 * SLICES + 3:202 * SLICES + 6].tolist()
    return verdict, kept, last


def _slice_winners(scratch_row) -> list[int]:
    """The slice draw's winner of each slice (INT_MAX where none of its ids was within reach), from the header."""
    return scratch_row.view(torch.int32)[6 * SLICES:7 * SLICES].tolist()


def _history(gen):
    prompt = torch.randint(0, VALID, (300,), generator=gen).tolist()
    generated = torch.randint(0, VALID, (40,), generator=gen).tolist() + [5] * 3  # one id generated 4 times
    counts = torch.zeros(V, dtype=torch.int32)
    for i in prompt:
        counts[i] |= PROMPT_SEEN
    for i in generated:
        counts[i] += 1
    return prompt, generated, counts.cuda()


def _oracle(sampling: dict, gen_seed: int, seed: int):
    """The host Sampler for these settings, the device sampler's parameters for the same request, and a history
    (prompt, generated ids, their penalty counts) drawn from a generator seeded gen_seed, returned for more draws."""
    from engine.native_loop import device_sampling
    from engine.sampling import Sampler, SamplingParams

    gen = torch.Generator().manual_seed(gen_seed)
    params = SamplingParams(**sampling, seed=seed)
    host = Sampler(params, valid_vocab_size=VALID)
    dev = device_sampling(params, seed=host.seed, vocab_limit=VALID)
    return params, host, dev, gen, _history(gen)


def _host_draws(host, logits, history, draw: int) -> list[int]:
    prompt, generated, _ = history
    return [host.sample(logits[t], generated, prompt_ids=prompt, step=draw + t) for t in range(logits.shape[0])]


@pytest.mark.parametrize("case", list(CASES))
def test_device_draw_is_the_host_samplers(nat, case):
    params, host, dev, gen, history = _oracle(CASES[case], list(CASES).index(case), 0xDEADBEEF12345)
    prompt, generated, counts = history
    T = 8
    # peaked rows (a real model's shape: a few strong candidates over a long tail), some of the history's
    # ids among the strongest so that the penalties change the draw
    logits = torch.randn(T, V, generator=gen) * 2.5
    logits[:, prompt[:5] + generated[:5] + [5]] += 9.0
    for draw in (0, 8, 1000, 2**31 - 64):
        got = _device_draws(nat, logits.cuda(), dev, counts, draw)
        assert got == _host_draws(host, logits, history, draw), f"{case}, draws {draw}..{draw + T - 1}"
    # one flat row (no dominant token) at eight draw indices: the same draws, and not one fixed token
    flat = (torch.randn(1, V, generator=gen) * 0.7).expand(T, V).contiguous()
    got = _device_draws(nat, flat.cuda(), dev, counts, 7)
    assert got == _host_draws(host, flat, history, 7)
    if not params.greedy and params.top_k != 1:
        assert len(set(got)) > 1


@pytest.mark.parametrize("case", ["temperature-only", "top-p-only", "topk100-top-p", "min-p-only"])
def test_fallback_draw_on_flat_or_tied_rows_is_the_host_samplers(nat, case):
    """The fallback scores a flat row's ids in float32 first and gives only the near-best the float64 noise: where
    logits are large (float32 steps of ~4e-3 at 3e4), the filter's margin must grow with them or it drops the
    float64 winner."""
    _, host, dev, gen, history = _oracle(CASES[case], 300 + list(CASES).index(case), 4242)
    T = 8
    rows = {offset: (torch.randn(1, V, generator=gen) * 0.7 + offset).expand(T, V).contiguous()
            for offset in (3.0e4, -1.0e5)}
    # whole-number logits: thousands of ids share each value, so top-k's k-th value is always tied (the host keeps
    # the lowest ids of the tie, and takes top-k before temperature)
    rows["integers"] = torch.round(torch.randn(T, V, generator=gen) * 2.0)
    for name, row in rows.items():
        for draw in (0, 123457):
            # with the slice draw on, temperature-only and min-p-only draws would take it instead of the fallback
            with _switch(nat, "slice_draw", False):
                got = _device_draws(nat, row.cuda(), dev, history[2], draw)
            assert got == _host_draws(host, row, history, draw), f"{case}, row {name}, draw {draw}"


TAIL_CASES = {
    "temperature-only": dict(temperature=0.8),
    "top-p-only": dict(temperature=1.1, top_p=0.9),
    "min-p-only": dict(temperature=1.0, min_p=0.02),
    "top-p-min-p-penalties": dict(temperature=0.7, top_p=0.95, min_p=0.01, presence_penalty=1.5,
                                  repetition_penalty=1.1, frequency_penalty=0.2),
}


@pytest.mark.parametrize("case", list(TAIL_CASES))
def test_device_draw_without_top_k_is_the_host_samplers(nat, case):
    """No top-k on rows with a long tail (a trained model's shape): only the few thousand ids near the top can win,
    and the device sorts just those (its scratch header shows that path ran: counts within capacity)."""
    _, host, dev, gen, history = _oracle(TAIL_CASES[case], 100 + list(TAIL_CASES).index(case), 77)
    prompt, generated, counts = history
    T = 8
    logits = torch.randn(T, V, generator=gen) * 12
    hot = prompt[:5] + generated[:5] + [5]  # near-tied leaders from the history, so the penalties and the draw matter
    logits[:, hot] = 60.0 + torch.randn(T, len(hot), generator=gen) * 0.5
    drawn = set()
    for draw in (0, 16, 2**31 - 64):
        scratch = []
        with _switch(nat, "slice_draw", False):  # the sorted-candidate path for every case (on, it serves top-p alone)
            got = _device_draws(nat, logits.cuda(), dev, counts, draw, scratch)
        assert got == _host_draws(host, logits, history, draw), f"{case}, draws {draw}..{draw + T - 1}"
        drawn.update(got)
        for t in range(T):
            per_slice, capacity = _no_top_k_candidates(scratch[0][t])
            assert 0 < sum(per_slice) <= 8192 and max(per_slice) <= capacity
    assert len(drawn) >= 4  # the near-tied leaders are all drawn at some index


TOP_K_CASES = {
    "topk100-top-p": dict(temperature=0.7, top_k=100, top_p=0.95, presence_penalty=1.0),
    "topk300-min-p-repetition": dict(temperature=0.75, top_k=300, min_p=0.001, repetition_penalty=1.1,
                                     frequency_penalty=0.2),
    "topk1000": dict(temperature=0.72, top_k=1000),
    "topk128-top-p-tight": dict(temperature=0.7, top_k=128, top_p=0.5),
}


@pytest.mark.parametrize("case", list(TOP_K_CASES))
def test_device_draw_with_top_k_above_64_is_the_host_samplers(nat, case):
    """Top-k above the fast path's 64 through the candidates (the ids within reach of the draw), where at least k of
    them lie there. The hot ids' logits are one float32 step apart, so the temperature rounds some of them to one
    value: the host's order among those is by id, and top-p's cut must keep the lowest ids of the boundary's value."""
    _, host, dev, gen, history = _oracle(TOP_K_CASES[case], 200 + list(TOP_K_CASES).index(case), 99)
    prompt, generated, counts = history
    T = 16  # the most a step takes
    logits = torch.randn(T, V, generator=gen) * 5.0  # ~2000 ids within 26.1 of the largest value after temperature
    hot = torch.randperm(VALID, generator=gen)[:150]
    steps = torch.arange(150, dtype=torch.float32)
    logits[:, hot] = torch.nextafter(torch.full((150,), 30.0), torch.tensor(31.0)).sub(30.0).mul(steps).add(30.0)
    logits[:, prompt[:3] + generated[:3]] = 29.9995  # penalties move some of the history among the leaders
    drawn = set()
    for draw in (0, 64, 4096, 70000, 1234567, 2**31 - 40):
        scratch = []
        got = _device_draws(nat, logits.cuda(), dev, counts, draw, scratch)
        assert got == _host_draws(host, logits, history, draw), f"{case}, draws {draw}..{draw + T - 1}"
        drawn.update(got)
        for t in (0, T - 1):  # the candidate path ran: at least k candidates, none overflowed
            per_slice, capacity = _no_top_k_candidates(scratch[0][t])
            assert TOP_K_CASES[case]["top_k"] <= sum(per_slice) <= 8192 and max(per_slice) <= capacity
    assert len(drawn) >= 10


# rows where sample_narrow must have narrowed these cases (more than 8192 ids within reach, the cut's bins fewer)
# (bench/narrowing_emulation.py on rows of these shapes: 3389, 34, 89 and 0 candidates left, all draws equal; not
# top-p-min-p-loose on the broad row, whose ids above min-p's floor number 6000-16000 with the row's largest value)
NARROWED = {("top-p-only", "broad"), ("top-p-tight-penalties", "broad"), ("top-p-tight-penalties", "peaked"),
            ("top-p-min-p", "flat at 30000"), ("top-p-only", "clustered"), ("top-p-tight-penalties", "clustered")}


@contextlib.contextmanager
def _switch(nat, name: str, on: bool):
    """nat.set_sampler_<name>(on) for the block (slice_draw, wide_select and top_k_narrowing are all on by default),
    the previous setting restored after it."""
    get, put = getattr(nat, f"get_sampler_{name}"), getattr(nat, f"set_sampler_{name}")
    before = get()
    put(on)
    try:
        yield
    finally:
        put(before)


@pytest.fixture
def slice_draw(nat):
    with _switch(nat, "slice_draw", True):
        yield


def _rows_for_slice_draw(gen, history):
    """tests/sampler_rows.py's row shapes, 8 rows each, the history's ids among the leaders."""
    prompt, generated, _ = history
    return sampler_rows(gen, prompt[:5] + generated[:5] + [5], T=8)


def _each_draw(nat, case, host, dev, gen, history, draws):
    """Every row shape at each of the draw indices: the device's draws, asserted equal to the host's, with the scratch
    they left (NaN-filled first, so nothing stale passes). Yields (row name, rows, scratch, tokens)."""
    for name, rows in _rows_for_slice_draw(gen, history).items():
        for draw in draws:
            scratch = []
            got = _device_draws(nat, rows.cuda(), dev, history[2], draw, scratch, scratch_fill=float("nan"))
            assert got == _host_draws(host, rows, history, draw), f"{case}, row {name}, draws {draw}.."
            yield name, rows, scratch[0], got


def _drawn_values(host, row, history, sampling: dict):
    """The values the draw ranks (penalised logits over the temperature, in float32 as both samplers divide), their
    largest M, and the reach of the draw, M - 26.1 (sampler.cu kCutoff)."""
    prompt, generated, _ = history
    v = host.penalised_logits(row, generated, prompt) / sampling["temperature"]
    M = v.max()
    return v, M, M - torch.tensor(26.1, dtype=torch.float32)


def _collected(host, row, history, sampling: dict) -> int:
    """How many ids the collect kernel keeps for one row: finite values at or above max(M - 26.1, M + log(min_p))."""
    import math
    v, M, floor = _drawn_values(host, row, history, sampling)
    if sampling.get("min_p", 0.0) > 0:
        floor = torch.maximum(floor, M + torch.tensor(math.log(sampling["min_p"]), dtype=torch.float32))
    return int(((v >= floor) & torch.isfinite(v)).sum())


def _collected_in_bins(host, row, history, sampling: dict, b_in: int, b_out: int) -> int:
    """How many ids within reach (no min-p here) fall in the value bins [b_in, b_out] (sampler.cu bin_of: float32
    (M - v) * (64 / 26.1f), truncated, at most 63)."""
    v, M, reach_floor = _drawn_values(host, row, history, sampling)
    reach = torch.isfinite(v) & (v >= reach_floor)
    scale = torch.tensor(64.0, dtype=torch.float32) / torch.tensor(26.1, dtype=torch.float32)
    bins = ((M - v) * scale).clamp(min=0).to(torch.int64).clamp(max=63)
    return int((reach & (bins >= b_in) & (bins <= b_out)).sum())


@pytest.mark.parametrize("case", list(SLICE_DRAW_CASES))
def test_slice_draw_is_the_host_samplers(nat, slice_draw, case):
    """set_sampler_slice_draw: with neither top-k nor top-p, each slice's Gumbel-max winner and the best of them (the
    header's winners show that path ran, on every row shape, flat ones included); with top-p, min-p's floor applied
    as the ids are collected (the header's counts are the host's count of ids at or above it), and where more ids lie
    within reach than finish sorts, sample_narrow's bins where the cut may fall (its state in the header: 1 narrowed,
    2 left wide for finish_wide where those bins still hold more than finish sorts)."""
    sampling = SLICE_DRAW_CASES[case]
    _, host, dev, gen, history = _oracle(sampling, 400 + list(SLICE_DRAW_CASES).index(case), 31337)
    drawn = set()
    for name, rows, scratch, got in _each_draw(nat, case, host, dev, gen, history, (0, 4097, 2**31 - 64)):
        drawn.update(got)
        for t in (0, rows.shape[0] - 1):
            if "top_p" in sampling:
                per_slice, capacity = _no_top_k_candidates(scratch[t])
                narrowed, b_in, b_out = _narrowing(scratch[t])
                collected = _collected(host, rows[t], history, sampling)
                if (case, name) in NARROWED:
                    assert narrowed == 1 and b_in <= 64 and b_out <= 63, f"{case}, row {name}: not narrowed"
                if narrowed == 1:  # the cut's bins only, fewer than collect kept, in one packed list
                    assert sum(per_slice) < collected and sum(per_slice) <= 8192, f"{case}, row {name}"
                    if name == "clustered":  # more than one slice's region holds: the packed list served
                        assert max(per_slice) > capacity, f"{case}, row {name}"
                elif narrowed == 2:  # left wide (the wide select, on by default): the cut's bins, too many to sort
                    assert nat.get_sampler_wide_select() and 8192 < sum(per_slice) <= collected, f"{case}, row {name}"
                else:
                    assert narrowed == 0 and sum(per_slice) == collected, f"{case}, row {name}"
            else:
                assert got[t] in _slice_winners(scratch[t]), f"{case}, row {name}: not the slice draw"
    assert len(drawn) >= 10


# (case, row) pairs whose top-p cut falls in bins of more than 8192 ids: the wide select's rows
# (bench/narrowing_emulation.py on rows of these shapes: 52000, 27000 and 16000 ids in the cut's bin, all draws equal)
WIDE = {("top-p-only", "flat at 30000"), ("top-p-only", "flat at -100000"), ("top-p-tight-penalties", "flat at 30000"),
        ("top-p-only", "integers")}


@pytest.mark.parametrize("case", [c for c in SLICE_DRAW_CASES if "top_p" in SLICE_DRAW_CASES[c]])
def test_wide_select_is_the_host_samplers(nat, slice_draw, case):
    """set_sampler_wide_select: where top-p's narrowed candidates outnumber what finish sorts, finish_wide's radix
    select over them (no fallback to the whole row); the header's state (2) shows the path ran where expected."""
    sampling = SLICE_DRAW_CASES[case]
    _, host, dev, gen, history = _oracle(sampling, 500 + list(SLICE_DRAW_CASES).index(case), 2718)
    with _switch(nat, "wide_select", True):
        for name, rows, scratch, _ in _each_draw(nat, case, host, dev, gen, history, (0, 65537)):
            if (case, name) in WIDE:
                prompt, generated, _ = history
                for t in (0, rows.shape[0] - 1):
                    per_slice, _ = _no_top_k_candidates(scratch[t])
                    assert _narrowing(scratch[t])[0] == 2 and sum(per_slice) > 8192, f"{case}, row {name}"
                    # finish_wide found the cut inside the list (no fallback), where the host's top-p puts it:
                    # the same ids of the list kept, the same last one (these cases have no min-p)
                    verdict, kept, last = _wide_verdict(scratch[t])
                    assert verdict == 0, f"{case}, row {name}"
                    host_kept = host.candidates(rows[t], generated, prompt).ids.tolist()
                    listed = set(_packed_ids(scratch[t], sum(per_slice)))
                    assert kept == len(listed.intersection(host_kept)), f"{case}, row {name}"
                    assert last == host_kept[-1], f"{case}, row {name}"


def test_wide_select_leaves_a_list_without_room_for_its_masses_to_the_fallback(nat, slice_draw):
    """The wide select stores each candidate's fixed-point mass after the packed list, so a list longer than half the
    candidate regions (~56K ids of the 27B's row) stays at state 0: finish_full takes the row, and the draw is still
    the host's. At temperature 2 the flat rows' cut falls in a bin of ~94K ids (bench/narrowing_emulation.py)."""
    sampling = dict(temperature=2.0, top_p=0.5)
    _, host, dev, gen, history = _oracle(sampling, 777, 4242)
    seen = 0
    with _switch(nat, "wide_select", True):
        for name, rows, scratch, _ in _each_draw(nat, "top-p at temperature 2", host, dev, gen, history, (0,)):
            if name.startswith("flat"):
                per_slice, capacity = _no_top_k_candidates(scratch[0])
                narrowed, b_in, b_out = _narrowing(scratch[0])
                assert narrowed == 0 and b_in == b_out, name
                listed = _collected_in_bins(host, rows[0], history, sampling, b_in, b_out)
                assert 2 * listed > capacity * len(per_slice) >= listed, f"{name}: {listed} ids in the cut's bin"
                seen += 1
    assert seen == 2


TOP_K_NARROWING_CASES = {
    "topk100": dict(temperature=0.9, top_k=100),
    "topk300-top-p": dict(temperature=0.8, top_k=300, top_p=0.9, presence_penalty=0.5),
    "topk1000-min-p": dict(temperature=1.0, top_k=1000, min_p=0.01, repetition_penalty=1.1),
}


@pytest.mark.parametrize("case", list(TOP_K_NARROWING_CASES))
def test_top_k_narrowing_is_the_host_samplers(nat, slice_draw, case):
    """set_sampler_top_k_narrowing: top-k above 64 on rows with every id within reach keeps the value bins that hold
    the k best (one packed list, at least k ids, no fallback); the header's state shows it ran on those rows."""
    sampling = TOP_K_NARROWING_CASES[case]
    _, host, dev, gen, history = _oracle(sampling, 600 + list(TOP_K_NARROWING_CASES).index(case), 1618)
    with _switch(nat, "top_k_narrowing", True):
        for name, rows, scratch, _ in _each_draw(nat, case, host, dev, gen, history, (0, 4099)):
            if name in ("peaked", "broad", "flat at 30000", "flat at -100000"):  # all ids within reach
                for t in (0, rows.shape[0] - 1):
                    per_slice, _ = _no_top_k_candidates(scratch[t])
                    narrowed, b_in, b_out = _narrowing(scratch[t])
                    assert narrowed == 1 and b_in == 0 and 0 <= b_out < 64, f"{case}, row {name}"
                    assert sampling["top_k"] <= sum(per_slice) <= 8192, f"{case}, row {name}"


@pytest.mark.parametrize("wide", [False, True])
def test_signed_zeros_are_one_value(nat, slice_draw, wide):
    """The host compares -0.0 and +0.0 equal, so where top-p's cut falls among zeros of both signs it keeps the lowest
    ids of them; the device's keys must not rank +0 above -0. A short row takes the sorted candidates; a long one
    the fallback (wide off) or the wide select (on)."""
    import math
    from engine.sampling import Sampler, SamplingParams
    ones, zeros = (100, 3000) if not wide else (20000, 100000)
    row = torch.full((V,), -30.0)
    row[:ones] = 1.0
    signs = torch.tensor([1.0, -1.0]).repeat(zeros // 2)
    row[ones:ones + zeros] = 0.0 * signs  # +0, -0, +0, ...
    assert str(float(row[ones + 1])) == "-0.0"
    z = ones + zeros * math.exp(-1.0) + (VALID - ones - zeros) * math.exp(-31.0)
    top_p = (ones + (zeros // 2 + 0.5) * math.exp(-1.0)) / z  # the cut halfway through the zeros
    sampling = dict(temperature=1.0, top_p=top_p, seed=99)
    host = Sampler(SamplingParams(**sampling), valid_vocab_size=VALID)
    kept = host.candidates(row, []).ids.tolist()
    assert len(kept) == ones + zeros // 2 + 1 and kept[-1] == ones + zeros // 2  # the lowest ids, both signs
    counts = torch.zeros(V, dtype=torch.int32, device="cuda")
    rows = row.expand(8, V).contiguous()
    with _switch(nat, "wide_select", wide):
        for draw in (0, 1000, 77777):
            want = [host.sample(rows[t], [], step=draw + t) for t in range(8)]
            assert _device_draws(nat, rows.cuda(), {**sampling, "vocab_limit": VALID}, counts, draw) == want


def test_broken_rows_get_minus_one(nat):
    counts = torch.zeros(V, dtype=torch.int32, device="cuda")
    logits = torch.randn(4, V)
    logits[0, 123] = float("nan")
    logits[1, 77] = float("inf")
    logits[2, :] = float("-inf")  # nothing to draw (greedy still answers id 0, as the host's argmax)
    for params, row2 in ((dict(temperature=0.0), 0), (dict(temperature=0.7, top_k=20), -1),
                         (dict(temperature=0.7, top_p=0.9), -1), (dict(temperature=0.7, top_k=100), -1)):
        got = _device_draws(nat, logits.cuda(), {**params, "vocab_limit": VALID}, counts, 0)
        assert got[:3] == [-1, -1, row2], params
        assert 0 <= got[3] < VALID
    with _switch(nat, "slice_draw", True):
        for params in (dict(temperature=0.7), dict(temperature=0.7, min_p=0.1)):
            got = _device_draws(nat, logits.cuda(), {**params, "vocab_limit": VALID}, counts, 0)
            assert got[:3] == [-1, -1, -1], ("slice draw", params)
            assert 0 <= got[3] < VALID


@pytest.mark.parametrize("slice_draw_on", [False, True])
def test_values_that_overflow_draw_the_lowest_id_holding_inf(nat, slice_draw_on):
    """A finite logit over a small temperature can overflow float32: the host then draws the lowest id whose value is
    +inf (every such score is +inf). The float32 filter before the float64 noise must keep those ids (inf - inf)."""
    from engine.sampling import Sampler, SamplingParams
    counts = torch.zeros(V, dtype=torch.int32, device="cuda")
    logits = torch.randn(2, V) * 2.0
    logits[:, [900, 500, 70000]] = 3.0e38
    with _switch(nat, "slice_draw", slice_draw_on):  # top-k 10000 takes the one-block pass (finish_full)
        for sampling in (dict(temperature=0.5), dict(temperature=0.5, min_p=0.05), dict(temperature=0.5, top_k=10000)):
            host = Sampler(SamplingParams(**sampling, seed=3), valid_vocab_size=VALID)
            want = [host.sample(logits[t], [], step=t) for t in range(2)]
            assert want == [500, 500]
            assert _device_draws(nat, logits.cuda(), {**sampling, "seed": 3, "vocab_limit": VALID}, counts, 0) == want


def _tiny(tiny_native_ckpt, chunk=0):
    from engine.native_backend import NativeModel
    return NativeModel.from_checkpoint(source_from_checkpoint(tiny_native_ckpt), kv_dtype="int8", max_context=256,
                                       vram_budget_bytes=2 << 30, prefill_chunk=chunk)


def _host_loop(model, prompt, params, seed, n, vocab, first_draw=0):
    from engine.sampling import Sampler
    sampler = Sampler(params.with_(seed=seed), valid_vocab_size=vocab)
    state = model.new_state(len(prompt) + n + 1)
    logits = model.forward(torch.tensor(prompt), state, last_only=True).logits[-1]
    out = []
    for i in range(n):
        out.append(sampler.sample(logits, out, prompt_ids=prompt, step=first_draw + i))
        logits = model.forward(torch.tensor([out[-1]]), state, last_only=True).logits[-1]
    model.release(state)
    return out


def test_decode_loop_from_a_later_draw_index(tiny_native_ckpt):
    """decode_tokens(first_draw=n) (where speculative rounds hand over): token i draws with index n + i, as the host
    Sampler does at that step."""
    from engine.sampling import preset as named
    m = _tiny(tiny_native_ckpt)
    vocab = m.config.text.vocab_size - 3
    prompt = torch.randint(0, vocab, (23,), generator=torch.Generator().manual_seed(12)).tolist()
    params = named("thinking")   # temperature 1, top-k, top-p and a presence penalty on the loop's own counts
    want = _host_loop(m, prompt, params, 31, 30, vocab, first_draw=57)
    assert want != _host_loop(m, prompt, params, 31, 30, vocab)
    state = m.new_state(len(prompt) + 31)
    m.forward(torch.tensor(prompt), state, last_only=True)
    got = [t for _, t in zip(range(30), m.decode_tokens(state, params, seed=31, vocab_limit=vocab, first_draw=57))]
    assert got == want


@pytest.mark.parametrize("chunk", [0, 32])
@pytest.mark.parametrize("preset", ["greedy", "thinking", "instruct"])
def test_decode_loop_gives_the_host_loops_tokens(tiny_native_ckpt, preset, chunk):
    """The prompt through the decode step (chunk 0: its last 16-token step leaves several logit rows) or the
    prefill path; then 40 tokens drawn and stepped on the GPU against the host's forward + Sampler loop."""
    from engine.sampling import preset as named
    m = _tiny(tiny_native_ckpt, chunk)
    vocab = m.config.text.vocab_size - 3
    gen = torch.Generator().manual_seed(5)
    prompt = torch.randint(0, vocab, (37,), generator=gen).tolist()
    params = named(preset).with_(repetition_penalty=1.1) if preset != "greedy" else named(preset)
    want = _host_loop(m, prompt, params, 99, 40, vocab)
    state = m.new_state(len(prompt) + 41)
    m.forward(torch.tensor(prompt), state, last_only=True)
    got = [t for _, t in zip(range(40), m.decode_tokens(state, params, seed=99, vocab_limit=vocab,
                                                        prompt_ids=prompt))]
    assert got == want
    assert state.revoked and not m.engine.decode_running  # closed: the queue drained, the lane returned


def test_decode_loop_with_the_slice_draw_gives_the_host_loops_tokens(nat, slice_draw, tiny_native_ckpt):
    """The loop's graph captured with the slice draw on (temperature and min-p, no top-k or top-p)."""
    from engine.sampling import SamplingParams
    m = _tiny(tiny_native_ckpt)
    assert nat.get_sampler_slice_draw()  # on when the loop's graph is captured (its first decode_tokens)
    vocab = m.config.text.vocab_size - 3
    prompt = torch.randint(0, vocab, (21,), generator=torch.Generator().manual_seed(6)).tolist()
    params = SamplingParams(temperature=1.2, min_p=0.02, presence_penalty=0.5)
    want = _host_loop(m, prompt, params, 7, 40, vocab)
    state = m.new_state(len(prompt) + 41)
    m.forward(torch.tensor(prompt), state, last_only=True)
    got = [t for _, t in zip(range(40), m.decode_tokens(state, params, seed=7, vocab_limit=vocab, prompt_ids=prompt))]
    assert got == want


def test_decode_loop_stops_at_the_states_limit_and_leaves_the_engine_usable(tiny_native_ckpt):
    from engine.native_backend import NativeBackendError
    from engine.sampling import SamplingParams
    m = _tiny(tiny_native_ckpt)
    state = m.new_state(20)
    m.forward(torch.arange(15), state, last_only=True)
    tokens = list(m.decode_tokens(state, SamplingParams(temperature=0.0), seed=0, vocab_limit=1000))
    assert len(tokens) == 6  # 5 steps fit (slots 15..19), and the draw from the last step's logits
    assert state.seq_len == 20 and state.revoked
    with pytest.raises(NativeBackendError):
        m.forward(torch.tensor([1]), state)
    # stopped early: the engine takes the next request at once
    s2 = m.new_state(64)
    m.forward(torch.arange(10), s2, last_only=True)
    loop = m.decode_tokens(s2, SamplingParams(temperature=0.0), seed=0, vocab_limit=1000)
    first = [next(loop) for _ in range(3)]
    loop.close()
    assert s2.seq_len >= 10 + 3 and not m.engine.decode_running
    s3 = m.new_state(64)
    m.forward(torch.arange(10), s3, last_only=True)
    assert list(zip(range(3), m.decode_tokens(s3, SamplingParams(temperature=0.0), seed=0, vocab_limit=1000))) \
        == list(enumerate(first))


def test_engine_refuses_host_steps_while_a_loop_runs(tiny_native_ckpt):
    from engine.sampling import SamplingParams
    m = _tiny(tiny_native_ckpt)
    state = m.new_state(64)
    m.forward(torch.arange(10), state, last_only=True)
    loop = m.decode_tokens(state, SamplingParams(temperature=0.0), seed=0, vocab_limit=1000)
    next(loop)
    with pytest.raises(RuntimeError, match="decode loop is running"):
        m.engine.forward(state.lane, [1], [], 40)
    loop.close()
    m.engine.forward(0, [1], [], 0)  # and works again once it stopped
