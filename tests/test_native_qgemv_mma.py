"""The GEMV of T = 2..16 tokens on tensor cores (4 / 5 / 6 / 8-bit) (csrc/cuda/qgemv_mma.cuh) against an fp64 oracle on the GPU:
every epilogue, group 32 and 64, shapes with a partial last row tile and a partial last 128-element span, unsplit
and with K split over a scratch buffer (the route of the 5120-row outputs in a decode step); the split's result is
the same on every run, and the per-token kernel it replaces agrees with it."""

from __future__ import annotations

import contextlib

import pytest

from native_helpers import TOL_FP16_OUT, TOL_GEMV_MMA, from_perm8, quantized, rel_err, requires_gpu, to_perm8

pytestmark = [pytest.mark.gpu, requires_gpu]

torch = pytest.importorskip("torch")

SCRATCH_FLOATS = 16 * 16 * 5120   # what a 27B decode workspace holds (alloc_sequence.cpp ws.gemv_part)


@contextlib.contextmanager
def switched(get, set_, *value):
    """A process-wide switch of the native module set for the block, then restored."""
    before = get()
    set_(*value)
    try:
        yield
    finally:
        set_(*before) if isinstance(before, tuple) else set_(before)


def mma(nat, on: bool):
    return switched(nat.qgemv_mma, nat.set_qgemv_mma, on)


@pytest.fixture(autouse=True)
def tensor_cores_on(nat):
    """Every test here runs the tensor-core kernel, whatever the process default (MONORAIL_QGEMV_MMA) says."""
    with mma(nat, True):
        yield


def _run(nat, codes, scales, N, K, group, x, T, epi, out, scratch=None, bits=4, high=None):
    """op_qgemv into ``out`` ([T, N] fp32 for store / add, [T, N / 2 padded to a multiple of 8] fp16 for SwiGLU,
    whose perm8 positions of an odd pair count reach the next multiple of 8), with split-K scratch."""
    ptr_f32, ptr_h, ldo = (0, out.data_ptr(), out.shape[1]) if epi == 2 else (out.data_ptr(), 0, N)
    nat.op_qgemv(codes.data_ptr(), 0 if high is None else high.data_ptr(), scales.data_ptr(), N, K, bits, group,
                 to_perm8(x).data_ptr(), T, epi, ptr_f32,
                 ptr_h, ldo, scratch=0 if scratch is None else scratch.data_ptr(),
                 scratch_floats=0 if scratch is None else scratch.numel())


def _oracle(wd, x, epi):
    y = (wd @ x.double().T).T
    return torch.nn.functional.silu(y[:, 0::2]) * y[:, 1::2] if epi == 2 else y


def _outputs_under(nat, forms, bits, N, K, group, T, epi, seed, scratch=None):
    """One random case (seeded) run under each form (a factory of the switches' context): the outputs, the fp64
    oracle's and the output's starting value (fp16 [T, N / 2 padded] for SwiGLU, else fp32 [T, N])."""
    gen = torch.Generator().manual_seed(seed)
    q, codes, high, scales, wd = quantized(N, K, bits, group, gen)
    x = torch.randn(T, K, generator=gen).half().cuda()
    width = (N // 2 + 7) // 8 * 8 if epi == 2 else N
    base = torch.randn(T, width, generator=gen).cuda().half() if epi == 2 else torch.randn(T, N, generator=gen).cuda()
    outs = []
    for form in forms:
        with form():
            out = base.clone()
            _run(nat, codes, scales, N, K, group, x, T, epi, out, scratch, bits, high)
            outs.append(out)
    return outs, _oracle(wd, x, epi), base


def _result(out, base, epi, N):
    """What the op computed: SwiGLU's outputs in element order, or an add's increment, or the stored values."""
    return from_perm8(out.float())[:, :N // 2] if epi == 2 else out - (base if epi == 1 else 0)


def _tol(epi):
    return TOL_GEMV_MMA + TOL_FP16_OUT if epi == 2 else 2 * TOL_GEMV_MMA


@pytest.mark.parametrize("split", [False, True])
@pytest.mark.parametrize("epi", [0, 1, 2])
@pytest.mark.parametrize("T", [2, 3, 8, 9, 16])
@pytest.mark.parametrize("N, K, group", [(250, 1152, 64), (5120, 6144, 64), (96, 160, 32), (2 * 17408, 5120, 64)])
@pytest.mark.parametrize("bits", [4, 5, 6, 8])
def test_tensor_core_gemv_against_fp64(nat, bits, N, K, group, T, epi, split):
    if (N, K) == (2 * 17408, 5120) and (epi != 2 or T not in (3, 16) or bits != 4):
        pytest.skip("the gate_up shape: its 4-bit SwiGLU at two widths is enough")
    if bits != 4 and (T not in (3, 16) or (N, K) == (96, 160)):
        pytest.skip("5 / 6 / 8 bits: two widths on two shapes")
    _check_against_fp64(nat, bits, N, K, group, T, epi, split)


@pytest.mark.parametrize("split", [False, True])
@pytest.mark.parametrize("T", [3, 16])
@pytest.mark.parametrize("bits", [4, 5, 6, 8])
def test_group_32_over_unchecked_passes_against_fp64(nat, bits, T, split):
    """A pass whose spans all hold four chunks loads without bounds checks and counts its scales' groups a span at a
    time (qgemv_mma.cuh load_pass, FULL); the shapes above reach it with group 64 only. Group 32 over a K of several
    such passes and a partial last span (37 chunks). Switched on here: they are off by default until a GPU has run
    them (qgemv_mma.cu g_mma_unchecked)."""
    with unchecked_passes(nat, True):
        _check_against_fp64(nat, bits, 250, 1184, 32, T, 1, split)


def work_shape(nat, warps_per_sm: int, spans: int, rows_per_warp: int = 32):
    return switched(nat.qgemv_mma_shape, nat.set_qgemv_mma_shape, warps_per_sm, spans, rows_per_warp)


# the shapes bench/mma_shape_sweep.py times: more warps an SM split K further; 4 spans a pass hold twice the weights;
# 0 (the default) chooses 4 or 2 by width; 16 rows a warp (one m16 tile, x read a span at a time) split K half as far
@pytest.mark.parametrize("warps, spans, rows", [(8, 0, 32), (8, 4, 32), (16, 2, 32), (16, 4, 32), (32, 2, 32),
                                                (8, 0, 16), (8, 2, 16), (8, 4, 16), (16, 4, 16)])
@pytest.mark.parametrize("N, K, group, T, epi", [(2 * 17408, 5120, 64, 3, 2), (5120, 6144, 64, 16, 1),
                                                 (250, 1152, 64, 9, 0), (96, 160, 32, 2, 0)])
@pytest.mark.parametrize("bits", [4, 6, 8])
def test_every_work_shape_against_fp64(nat, warps, spans, rows, bits, N, K, group, T, epi):
    if bits != 4 and N == 2 * 17408:
        pytest.skip("the gate_up shape at 4 bits only")
    with work_shape(nat, warps, spans, rows):
        _check_against_fp64(nat, bits, N, K, group, T, epi, split=True)


def loads_first(nat, on: bool):
    return switched(nat.qgemv_mma_loads_first, nat.set_qgemv_mma_loads_first, on)


# (N, K, T, epilogue): down split (16 tokens: two n8 tiles), gdn_out-like split, gate_up's SwiGLU unsplit, shapes with
# a partial last row tile and a partial last pass (the loads-first form reads chunk 0 for spans past the end)
@pytest.mark.parametrize("spans", [2, 4])
@pytest.mark.parametrize("bits", [4, 5, 6, 8])
@pytest.mark.parametrize("N, K, group, T, epi", [(5120, 17408, 64, 16, 1), (5120, 6144, 64, 4, 0),
                                                 (2 * 17408, 5120, 64, 3, 2), (1000, 2048 + 320, 64, 9, 2),
                                                 (96, 160, 32, 2, 0)])
def test_loads_first_gives_the_same_values(nat, bits, N, K, group, T, epi, spans):
    """Issuing a pass's weight loads before its first product changes when loads go out, not what is summed: the
    same values as the default form (its + 0.f can only turn a -0 accumulator into +0), and within the fp64
    tolerance."""
    if bits != 4 and N == 2 * 17408:
        pytest.skip("the gate_up shape at 4 bits only")
    scratch = torch.zeros(SCRATCH_FLOATS, device="cuda")
    with work_shape(nat, 8, spans):
        (off, on), ref, base = _outputs_under(nat, [lambda: loads_first(nat, False), lambda: loads_first(nat, True)],
                                              bits, N, K, group, T, epi, N + K + T + bits + spans, scratch)
    assert torch.equal(on, off)
    assert rel_err(_result(on, base, epi, N), ref) < _tol(epi)


def test_the_work_shape_is_checked(nat):
    for bad in ((-1, 2), (65, 2), (8, 3), (8, 1), (8, -1), (8, 4, 8), (8, 4, 24), (8, 4, 64), (8, 4, -16)):
        with pytest.raises(ValueError):
            nat.set_qgemv_mma_shape(*bad)
    assert nat.qgemv_mma_shape() == (0, 0, 0)   # the default (all by width), untouched by the refusals


# (N, K, T, epilogue) run unsplit (no scratch): each output row sums the same products in the same order whether its
# warp owns 16 rows or 32, so the values are the same; partial last row tiles of both sizes
@pytest.mark.parametrize("spans", [0, 2, 4])
@pytest.mark.parametrize("bits", [4, 5, 6, 8])
@pytest.mark.parametrize("N, K, group, T, epi", [(2 * 17408, 5120, 64, 4, 2), (5120, 6144, 64, 16, 1),
                                                 (1000, 2048 + 320, 64, 9, 2), (96 + 8, 160, 32, 2, 0)])
def test_sixteen_row_warps_give_the_same_values(nat, bits, N, K, group, T, epi, spans):
    if bits != 4 and N == 2 * 17408:
        pytest.skip("the gate_up shape at 4 bits only")
    (rows32, rows16), ref, base = _outputs_under(
        nat, [lambda: work_shape(nat, 8, spans, 32), lambda: work_shape(nat, 8, spans, 16)], bits, N, K, group, T, epi,
        N + K + T + bits + spans + 16)
    assert torch.equal(rows16, rows32)
    assert rel_err(_result(rows16, base, epi, N), ref) < _tol(epi)


def block_warps(nat, warps: int):
    return switched(nat.qgemv_mma_block_warps, nat.set_qgemv_mma_block_warps, warps)


# A block's warps share nothing: 1, 2 or 4 warps a block give the same values (the default shape at 3 tokens: 16
# rows a warp; at 9: 32 rows, two n8 tiles; split over scratch and not; partial last blocks of every size)
@pytest.mark.parametrize("bits", [4, 6, 8])
@pytest.mark.parametrize("N, K, group, T, epi, split", [(2 * 17408, 5120, 64, 3, 2, False),
                                                        (5120, 17408, 64, 9, 1, True), (5120, 6144, 64, 3, 0, True),
                                                        (1000 + 16, 2048, 32, 9, 2, False)])
def test_the_warps_a_block_change_no_value(nat, bits, N, K, group, T, epi, split):
    if bits != 4 and N == 2 * 17408:
        pytest.skip("the gate_up shape at 4 bits only")
    scratch = torch.zeros(SCRATCH_FLOATS, device="cuda") if split else None
    outs, ref, base = _outputs_under(nat, [lambda w=w: block_warps(nat, w) for w in (4, 2, 1)], bits, N, K, group, T,
                                     epi, N + K + T + bits + 41, scratch)
    assert torch.equal(outs[1], outs[0]) and torch.equal(outs[2], outs[0])
    assert rel_err(_result(outs[2], base, epi, N), ref) < _tol(epi)


def unchecked_passes(nat, on: bool):
    return switched(nat.qgemv_mma_unchecked_passes, nat.set_qgemv_mma_unchecked_passes, on)


# Passes without bounds checks load the same weights, scales and x as checked ones (x of tokens past T aside, whose
# output columns no epilogue stores): the same values, at both rows a warp, spans 2 and 4, 4 / 5 / 6 / 8 bits, group
# 32 and 64, splits whose span counts are not a multiple of a pass, a partial last span and a partial last row tile.
@pytest.mark.parametrize("spans", [2, 4])
@pytest.mark.parametrize("bits", [4, 5, 6, 8])
@pytest.mark.parametrize("N, K, group, T, epi, split", [(2 * 17408, 5120, 64, 3, 2, False),
                                                        (5120, 17408, 64, 9, 1, True), (5120, 6144, 64, 4, 0, True),
                                                        (250, 1184, 32, 16, 1, True), (1000 + 16, 2048, 32, 7, 2, False)])
def test_unchecked_passes_change_no_value(nat, bits, N, K, group, T, epi, split, spans):
    if bits != 4 and N == 2 * 17408:
        pytest.skip("the gate_up shape at 4 bits only")
    scratch = torch.zeros(SCRATCH_FLOATS, device="cuda") if split else None
    with work_shape(nat, 0, spans, 0):
        outs, ref, base = _outputs_under(nat, [lambda on=on: unchecked_passes(nat, on) for on in (False, True)], bits,
                                         N, K, group, T, epi, N + K + T + bits + 43, scratch)
    assert torch.equal(outs[1], outs[0])
    assert rel_err(_result(outs[1], base, epi, N), ref) < _tol(epi)


def _check_against_fp64(nat, bits, N, K, group, T, epi, split):
    gen = torch.Generator().manual_seed(N + K + T * 7 + epi + bits)
    q, codes, high, scales, wd = quantized(N, K, bits, group, gen)
    x = torch.randn(T, K, generator=gen).half().cuda()
    scratch = torch.zeros(SCRATCH_FLOATS, device="cuda") if split else None
    if split and nat.qgemv_mma_splits(N, K, T, SCRATCH_FLOATS) == 1 and nat.qgemv_mma_shape() == (0, 0, 0):  # default
        pytest.skip("this shape runs unsplit even with scratch")
    ref = _oracle(wd, x, epi)
    if epi == 2:
        out = torch.full((T, (N // 2 + 7) // 8 * 8), float("nan"), device="cuda").half()
        _run(nat, codes, scales, N, K, group, x, T, epi, out, scratch, bits, high)
        got = from_perm8(out.float())[:, :N // 2]
        tol = TOL_GEMV_MMA + TOL_FP16_OUT
    elif epi == 1:
        base = torch.randn(T, N, device="cuda")
        out = base.clone()
        _run(nat, codes, scales, N, K, group, x, T, epi, out, scratch, bits, high)
        got, tol = out - base, 2 * TOL_GEMV_MMA
    else:
        out = torch.full((T, N), float("nan"), device="cuda")
        _run(nat, codes, scales, N, K, group, x, T, epi, out, scratch, bits, high)
        got, tol = out, TOL_GEMV_MMA
    assert not got.isnan().any()
    assert rel_err(got, ref) < tol, rel_err(got, ref)


def test_the_split_is_the_same_on_every_run_and_the_splits_follow_the_shape(nat):
    assert nat.qgemv_mma_splits(5120, 17408, 16, SCRATCH_FLOATS) > 1      # down: 160 row tiles of 32
    assert nat.qgemv_mma_splits(5120, 17408, 16, 0) == 1                  # no scratch, no split
    assert nat.qgemv_mma_splits(248320, 5120, 16, SCRATCH_FLOATS) == 1    # lm_head: rows enough
    N, K, T = 5120, 17408, 16
    gen = torch.Generator().manual_seed(5)
    q, codes, high, scales, wd = quantized(N, K, 4, 64, gen)
    x = torch.randn(T, K, generator=gen).half().cuda()
    scratch = torch.zeros(SCRATCH_FLOATS, device="cuda")
    outs = []
    for _ in range(2):
        out = torch.zeros(T, N, device="cuda")
        _run(nat, codes, scales, N, K, 64, x, T, 0, out, scratch)
        outs.append(out)
    assert torch.equal(outs[0], outs[1])
    assert rel_err(outs[0], _oracle(wd, x, 0)) < TOL_GEMV_MMA


def test_the_per_token_kernel_it_replaces_agrees(nat):
    N, K, T = 1024, 2048, 5
    gen = torch.Generator().manual_seed(9)
    q, codes, high, scales, wd = quantized(N, K, 4, 64, gen)
    x = torch.randn(T, K, generator=gen).half().cuda()
    new, old = torch.zeros(T, N, device="cuda"), torch.zeros(T, N, device="cuda")
    _run(nat, codes, scales, N, K, 64, x, T, 0, new)
    with mma(nat, False):
        _run(nat, codes, scales, N, K, 64, x, T, 0, old)
    ref = _oracle(wd, x, 0)
    assert rel_err(new, ref) < TOL_GEMV_MMA and rel_err(old, ref) < 2e-3
    assert rel_err(new, old) < 3e-3


def test_engine_steps_on_tensor_cores_are_causal_and_match_one_token_steps(nat, tiny_native_ckpt):
    """A two-token step [a, b] and one [a, c] from the same state give the same first row, within rounding of the
    one-token step's logits; and a 16-token prompt run as one step ends where one-token steps end. (The op tests
    above pass; what this adds is the engine's sequence of kernels around the GEMV, launched with PDL: in sessions
    38-39 ptxas scheduled the GEMV's first x loads above its PDL wait, and these steps read x before it was written;
    fixed in session 40 by a coherent load, ld_after_wait, and guarded by tests/test_pdl_load_order.py.)"""
    from native_helpers import TOL_MODEL_BF16KV
    from test_native_model import source_from_checkpoint

    from engine.native_backend import NativeModel
    m = NativeModel.from_checkpoint(source_from_checkpoint(tiny_native_ckpt), kv_dtype="bf16", max_context=128,
                                    vram_budget_bytes=2 << 30, prefill_chunk=0)
    prompt = torch.randint(0, 1000, (16,), generator=torch.Generator().manual_seed(8)).tolist()

    def run(steps):
        s = m.new_state(64)
        try:
            out = None
            for chunk in steps:
                out = m.forward(torch.tensor(chunk), s).logits.double()
            return out
        finally:
            m.release(s)

    ab, ac = run([prompt, [5, 7]]), run([prompt, [5, 9]])
    assert torch.equal(ab[0], ac[0])
    assert rel_err(ab[0], run([prompt, [5]])[0]) < TOL_MODEL_BF16KV
    one_by_one = run([[t] for t in prompt])
    assert rel_err(run([prompt])[-1], one_by_one[-1]) < TOL_MODEL_BF16KV
