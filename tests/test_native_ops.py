"""Every native decode kernel against an fp64 torch oracle on the GPU (marked gpu; skipped without one).

Inputs are fresh random draws for each case, outputs are poisoned with NaN before the call, and the
tolerances are the named presets in native_helpers."""

from __future__ import annotations

import contextlib
import math

import pytest

from native_helpers import (TOL_ATTN, TOL_FP16_OUT, TOL_FP32, TOL_GEMV_IDOT, TOL_GEMV_MMA, TOL_GEMV_Q4, from_lanes,
                            from_perm8, gdn_oracle, quantized, rel_err, requires_gpu, split_qkv_f64, step_inputs,
                            to_lanes, to_perm8)

pytestmark = [pytest.mark.gpu, requires_gpu]

torch = pytest.importorskip("torch")


@pytest.mark.parametrize("bits", [4, 5, 6, 8])
@pytest.mark.parametrize("group", [32, 64])
@pytest.mark.parametrize("T", [1, 2, 3, 5, 16])
def test_qgemv_store_and_residual_add(nat, bits, group, T):
    gen = torch.Generator().manual_seed(bits * 100 + group + T)
    N, K = 250, 1152  # odd row pair at the end; K/32 = 36 chunks: a partial second round of lanes
    q, codes, high, scales, wd = quantized(N, K, bits, group, gen)
    x = torch.randn(T, K, generator=gen).half().cuda()
    xp = to_perm8(x)
    ref = (wd @ x.double().T).T  # [T, N]
    out = torch.full((T, N), float("nan"), device="cuda")
    nat.op_qgemv(codes.data_ptr(), 0 if high is None else high.data_ptr(), scales.data_ptr(), N, K, bits, group,
                 xp.data_ptr(), T, 0, out.data_ptr(), 0, N)
    # T = 1 of every width goes through the fp16 half2 path (ring kernel for 5/6/8-bit); T > 1 of 5/6/8-bit is fp32,
    # or the tensor-core kernel's fp16 weights where that is switched on (set_qgemv_mma)
    tol = TOL_GEMV_Q4 if bits == 4 or T == 1 else TOL_GEMV_MMA if nat.qgemv_mma() else TOL_FP32
    assert not out.isnan().any()
    assert rel_err(out, ref) < tol
    res = torch.randn(T, N, device="cuda")
    acc = res.clone()
    nat.op_qgemv(codes.data_ptr(), 0 if high is None else high.data_ptr(), scales.data_ptr(), N, K, bits, group,
                 xp.data_ptr(), T, 1, acc.data_ptr(), 0, N)
    assert rel_err(acc - res, ref) < tol * 2


QGEMV_VARIANTS = list(range(50))  # 0 = route by shape, 1..49 forced (qgemv.cu launch_bits)
QGEMV_COL_VARIANTS = [45, 46]  # the row split across K (qgemv_col_kernel), every width
QGEMV_RING_VARIANTS = [16, 17, 18, 19]  # cp.async ring kernel, every width
QGEMV_IDOT_VARIANTS = list(range(20, 33)) + [34, 35, 37, 38]  # 4-bit integer dot products on x staged as 16-bit integers


def gemv_tol(variant: int) -> float:
    """The 4-bit T = 1 tolerance of a forced variant: the integer-dot ones are held to their tighter bound."""
    return TOL_GEMV_IDOT if variant in QGEMV_IDOT_VARIANTS else TOL_GEMV_Q4


@pytest.mark.parametrize("variant", QGEMV_VARIANTS)
@pytest.mark.parametrize("N, K", [(250, 1152), (5120, 17408)])
def test_qgemv_launch_variants(nat, variant, N, K):
    # every T = 1 launch variant (U, persistent grid, software pipeline) computes the same product
    gen = torch.Generator().manual_seed(variant * 7 + N)
    q, codes, high, scales, wd = quantized(N, K, 4, 64, gen)
    x = torch.randn(1, K, generator=gen).half().cuda()
    out = torch.full((1, N), float("nan"), device="cuda")
    with forced_qgemv_variant(nat, variant):
        nat.op_qgemv(codes.data_ptr(), 0, scales.data_ptr(), N, K, 4, 64, to_perm8(x).data_ptr(), 1, 0,
                     out.data_ptr(), 0, N)
    assert not out.isnan().any()
    assert rel_err(out, (wd @ x.double().T).T) < gemv_tol(variant)


@pytest.mark.parametrize("bits", [4, 6])
@pytest.mark.parametrize("T", [1, 4, 9])
def test_qgemv_swiglu(nat, bits, T):
    gen = torch.Generator().manual_seed(7 + bits + T)
    I, K = 192, 512
    q, codes, high, scales, wd = quantized(2 * I, K, bits, 64, gen)  # rows interleaved gate/up
    x = torch.randn(T, K, generator=gen).half().cuda()
    y = (wd @ x.double().T).T
    ref = torch.nn.functional.silu(y[:, 0::2]) * y[:, 1::2]
    out = torch.full((T, I), float("nan"), device="cuda").half()
    nat.op_qgemv(codes.data_ptr(), 0 if high is None else high.data_ptr(), scales.data_ptr(), 2 * I, K, bits, 64,
                 to_perm8(x).data_ptr(), T, 2, 0, out.data_ptr(), I)
    got = from_perm8(out.float())
    assert not got.isnan().any()
    assert rel_err(got, ref) < TOL_GEMV_Q4 + TOL_FP16_OUT


def _gemv_out(epi, N, gen, swiglu_width=None, T=1):
    """The output rows of an op_qgemv with epilogue `epi` over N rows for T tokens, op_qgemv's (out_f32, out_h, ldo)
    for them, and their copy before the call: SwiGLU fp16 rows of `swiglu_width` (default N // 2), residual add
    random fp32 rows (the baseline to subtract), store fp32 rows of NaN (what the kernel leaves unwritten shows)."""
    if epi == 2:
        width = swiglu_width or N // 2
        out = torch.full((T, width), float("nan"), device="cuda").half()
        args = (0, out.data_ptr(), width)
    else:
        out = torch.randn(T, N, device="cuda", generator=gen) if epi == 1 else torch.full((T, N), float("nan"),
                                                                                           device="cuda")
        args = (out.data_ptr(), 0, N)
    return out, args, out.clone()


def _gemv_result(out, before, epi):
    """What the GEMV computed, from _gemv_out's rows after the call: SwiGLU back in natural order (fp32), the
    residual add minus its baseline, the stored rows as they are."""
    if epi == 2:
        return from_perm8(out.float())
    return out - before if epi == 1 else out


@contextlib.contextmanager
def forced_qgemv_variant(nat, variant):
    """Force one T = 1 GEMV variant for the body (0: the route), and restore the route after it, also on failure."""
    nat.set_qgemv_variant(variant)
    try:
        yield
    finally:
        nat.set_qgemv_variant(0)


def _random_q4(N, K, gen):
    # 4-bit group-64 codes drawn on the GPU (RTN-like spread around 8) and their fp64 dequantization
    codes = (torch.randn(N, K, device="cuda", generator=gen) * 2.5 + 8).round().clamp(0, 15).to(torch.uint8)
    scales = (torch.rand(N, K // 64, device="cuda", generator=gen) * 0.01 + 0.005).half()
    wd = (codes.double() - 8) * scales.double().repeat_interleave(64, dim=1)
    packed = (codes[:, 0::2] | (codes[:, 1::2] << 4)).contiguous()  # low nibble = even element
    return packed, scales, wd


@pytest.mark.parametrize("variant", QGEMV_VARIANTS)
@pytest.mark.parametrize("epi, N, K", [(2, 34816, 5120),   # gate_up: SwiGLU, several row groups per warp
                                       (1, 5120, 6144),    # gdn_out: residual add, 6 chunks per lane
                                       (0, 253, 1152),     # odd N: a last group of 1 row; 36 chunks: partial batch
                                       (2, 96, 512)])      # 16 chunks: half the lanes idle
def test_qgemv_launch_variants_epilogues(nat, variant, epi, N, K):
    # every T = 1 variant with each epilogue on shapes that exercise partial row groups and persistent rounds;
    # also bit-for-bit-close to variant 1 (same per-chunk arithmetic and order), except the integer-dot
    # variants (other arithmetic: held to their own, tighter bound against fp64 only)
    gen = torch.Generator(device="cuda").manual_seed(variant * 13 + N + K)
    codes, scales, wd = _random_q4(N, K, gen)
    x = torch.randn(1, K, device="cuda", generator=gen).half()
    xp = to_perm8(x)
    y = (wd @ x.double().T).T  # [1, N]

    def call(v):
        out, args, before = _gemv_out(epi, N, gen)
        with forced_qgemv_variant(nat, v):
            nat.op_qgemv(codes.data_ptr(), 0, scales.data_ptr(), N, K, 4, 64, xp.data_ptr(), 1, epi, *args)
        return _gemv_result(out, before, epi)

    got = call(variant)
    assert not got.isnan().any()
    tol = gemv_tol(variant)
    if epi == 2:
        ref = torch.nn.functional.silu(y[:, 0::2]) * y[:, 1::2]
        assert rel_err(got, ref) < tol + TOL_FP16_OUT
    else:
        assert rel_err(got, y) < tol * (2 if epi == 1 else 1)
    if variant in QGEMV_IDOT_VARIANTS or variant == 0:  # the route (0) may pick either arithmetic
        return
    base = call(1)
    assert rel_err(got, base) < (TOL_FP16_OUT if epi == 2 else 1e-5)


def _random_q(N, K, bits, group, gen):
    """Uniform codes of any width drawn on the GPU, packed in the canonical layout (engine/quant.py pack_codes:
    low nibbles two per byte; 5-bit bit 4 of element 8j+i at bit i of high byte j; 6-bit bits 4-5 of element
    4j+i at bits 2i..2i+1 of high byte j; 8-bit one byte per element), with their fp64 dequantization."""
    c = torch.randint(0, 1 << bits, (N, K), device="cuda", generator=gen).to(torch.uint8)
    scales = (torch.rand(N, K // group, device="cuda", generator=gen) * 0.01 + 0.005).half()
    wd = (c.double() - (1 << (bits - 1))) * scales.double().repeat_interleave(group, dim=1)
    if bits == 8:
        return c.contiguous(), None, scales, wd
    low = c & 15
    packed = (low[:, 0::2] | (low[:, 1::2] << 4)).contiguous()
    high = None
    if bits == 5:
        b = ((c >> 4) & 1).view(N, K // 8, 8)
        high = sum(b[:, :, i] << i for i in range(8)).to(torch.uint8).contiguous()
    elif bits == 6:
        b = ((c >> 4) & 3).view(N, K // 4, 4)
        high = sum(b[:, :, i] << (2 * i) for i in range(4)).to(torch.uint8).contiguous()
    return packed, high, scales, wd


def test_random_q_packing_matches_quant_module(nat):
    # the test's own packer against engine.quant (the layout the kernels are written for)
    from engine.quant import pack_codes
    gen = torch.Generator(device="cuda").manual_seed(5)
    for bits in (4, 5, 6, 8):
        codes, high, scales, wd = _random_q(6, 96, bits, 32, gen)
        s = scales.double().repeat_interleave(32, dim=1)
        unsigned = (wd / s).round().long() + (1 << (bits - 1))
        want_codes, want_high = pack_codes(unsigned.to(torch.uint8).cpu(), bits)
        if bits == 8:
            assert torch.equal(codes.cpu(), unsigned.to(torch.uint8).cpu())
        else:
            assert torch.equal(codes.cpu(), want_codes)
            assert (high is None and want_high is None) or torch.equal(high.cpu(), want_high)


@pytest.mark.parametrize("bits, variant", [(b, v) for b in (4, 5, 6, 8) for v in [0, 1] + QGEMV_RING_VARIANTS] +
                         [(4, v) for v in QGEMV_IDOT_VARIANTS] + [(5, 36), (6, 36)] +
                         [(b, v) for b in (4, 5, 6, 8) for v in QGEMV_COL_VARIANTS])
@pytest.mark.parametrize("epi, N, K, group", [
    (0, 253, 1120, 32),    # K = 32 * 35: last batch of 3 lanes; N odd: a last row group of 1 row (R2 and R4)
    (1, 250, 1152, 64),    # N = 4k + 2: the last R4 group is half empty
    (2, 198, 2080, 32),    # SwiGLU, 99 pairs (R4: a last group of one pair; output padded to 104); K = 32 * 65
    (1, 5120, 6144, 64),   # several row groups per warp (persistent rounds), ring wraps across groups
    (0, 5120, 17408, 32),  # x takes 34 KB: the fewest stages; 17 batches per row group
])
def test_qgemv_widths_t1(nat, bits, variant, epi, N, K, group):
    # T = 1 of every width through the route (0), the generic path (1: for 5/6/8-bit the per-element fp32
    # decode, kept for comparison) and the cp.async ring variants, with every epilogue, against fp64; 4-bit also
    # through the tensor-core variants (odd N: a partial last m16 tile; K / group not a multiple of the warps)
    gen = torch.Generator(device="cuda").manual_seed(bits * 1000 + variant * 13 + N + K + group)
    codes, high, scales, wd = _random_q(N, K, bits, group, gen)
    x = torch.randn(1, K, device="cuda", generator=gen).half()
    y = (wd @ x.double().T).T  # [1, N]
    pairs = N // 2
    padded = (pairs + 7) // 8 * 8  # perm8 output positions of an odd pair count reach the next multiple of 8
    out, args, before = _gemv_out(epi, N, gen, swiglu_width=padded)
    with forced_qgemv_variant(nat, variant):
        nat.op_qgemv(codes.data_ptr(), 0 if high is None else high.data_ptr(), scales.data_ptr(), N, K, bits, group,
                     to_perm8(x).data_ptr(), 1, epi, *args)
    tol = TOL_FP32 if (variant == 1 and bits != 4) else gemv_tol(variant)
    if epi == 2:
        got = from_perm8(out.float())[:, :pairs]
        assert not got.isnan().any()
        assert rel_err(got, torch.nn.functional.silu(y[:, 0::2]) * y[:, 1::2]) < tol + TOL_FP16_OUT
    else:
        got = out - before if epi == 1 else out
        assert not got.isnan().any()
        assert rel_err(got, y) < tol * (2 if epi == 1 else 1)


def test_qgemv_full_width_27b_shape(nat):
    # one real MLP down projection: K = 17408, N = 5120
    gen = torch.Generator().manual_seed(3)
    q, codes, high, scales, wd = quantized(5120, 17408, 4, 64, gen)
    x = torch.randn(1, 17408, generator=gen).half().cuda()
    out = torch.full((1, 5120), float("nan"), device="cuda")
    nat.op_qgemv(codes.data_ptr(), 0, scales.data_ptr(), 5120, 17408, 4, 64, to_perm8(x).data_ptr(), 1, 0,
                 out.data_ptr(), 0, 5120)
    assert rel_err(out, (wd @ x.double().T).T) < TOL_GEMV_Q4


@pytest.mark.parametrize("variant", QGEMV_IDOT_VARIANTS)
def test_qgemv_idot_x_range_and_poison(nat, variant):
    # x that strains the per-chunk integer staging: in every 32-element chunk one outlier 1000x the rest (the
    # others keep ~5 bits; the outliers dominate the product, so the bound still holds), an all-zero chunk
    # (scale 0), the fp16 extremes +-65504; then one NaN, and one infinity, in x each turn every output to NaN
    # (fmaxf alone would drop a NaN silently)
    gen = torch.Generator(device="cuda").manual_seed(variant)
    N, K = 250, 2048
    codes, scales, wd = _random_q4(N, K, gen)
    x = torch.randn(1, K, device="cuda", generator=gen)
    x[0, ::32] *= 1000
    x[0, 64:96] = 0
    x[0, 96] = 65504.0
    x[0, 128] = -65504.0
    x = x.half()

    def run(xin):
        out = torch.full((1, N), float("nan"), device="cuda")
        with forced_qgemv_variant(nat, variant):
            nat.op_qgemv(codes.data_ptr(), 0, scales.data_ptr(), N, K, 4, 64, to_perm8(xin).data_ptr(), 1, 0,
                         out.data_ptr(), 0, N)
        return out

    out = run(x)
    assert not out.isnan().any()
    assert rel_err(out, (wd @ x.double().T).T) < TOL_GEMV_IDOT
    for bad in (float("nan"), float("inf")):
        xb = x.clone()
        xb[0, 200] = bad
        assert run(xb).isnan().all()


@pytest.mark.parametrize("T", [1, 3, 16])
@pytest.mark.parametrize("add_one", [True, False])
def test_rmsnorm(nat, T, add_one):
    H = 5120
    x = torch.randn(T, H, device="cuda") * 3
    w = torch.randn(H, device="cuda") * 0.2
    out = torch.full((T, H), float("nan"), device="cuda").half()
    nat.op_rmsnorm(x.data_ptr(), T, H, w.data_ptr(), 1e-6, add_one, out.data_ptr())
    xd = x.double()
    ref = xd * torch.rsqrt(xd.pow(2).mean(-1, keepdim=True) + 1e-6) * (w.double() + (1 if add_one else 0))
    assert rel_err(from_perm8(out.float()), ref) < TOL_FP16_OUT


def _normed_gemv_reference(resid, w, wd):
    """fp64 W (rmsnorm(resid) * (w + 1)), eps 1e-6: [T, N]."""
    rd = resid.double()
    xd = rd * torch.rsqrt(rd.pow(2).mean(-1, keepdim=True) + 1e-6) * (w.double() + 1)
    return (wd @ xd.T).T


def _check_normed(run, resid, y, epi, tol, fused):
    """run(resid) against the fp64 y within tol (SwiGLU on y's row pairs, the residual add at twice tol); where the norm
    is fused, one NaN in the residual must turn every output to NaN (every block normalises the whole row)."""
    got = run(resid)
    assert not got.isnan().any()
    if epi == 2:
        assert rel_err(got, torch.nn.functional.silu(y[:, 0::2]) * y[:, 1::2]) < tol + TOL_FP16_OUT
    else:
        assert rel_err(got, y) < tol * (2 if epi == 1 else 1)
    if fused:
        bad = resid.clone()
        bad[0, 77] = float("nan")
        assert run(bad).isnan().all()


@pytest.mark.parametrize("variant, epi, N, K, T, fused", [
    (0, 2, 34816, 5120, 1, True),    # gate_up on the route (34): the norm inside the GEMV
    (0, 0, 16480, 5120, 1, True),    # gdn_in (30)
    (0, 0, 24576, 1152, 1, True),    # the route's 34 on a short K
    (23, 1, 250, 1152, 1, True),     # forced 23 / 27 on small shapes: partial row groups, residual add
    (27, 0, 253, 2048, 1, True),
    (29, 2, 34816, 5120, 1, True),   # 23 and 27 as one block per SM
    (30, 1, 16480, 5120, 1, True),
    (30, 0, 250, 1152, 1, True),
    (34, 2, 34816, 5120, 1, True),   # 29 / 30 with 22 / 14 warps per SM
    (35, 0, 14336, 5120, 1, True),
    (37, 2, 34816, 5120, 1, True),   # 34 / 30 with their scales and norm weights converted where used (LAZY)
    (38, 0, 16480, 5120, 1, True),
    (0, 0, 5120, 6144, 1, False),    # route 4 (gdn_out's shape): norm kernel, then the GEMV
    (6, 0, 16480, 5120, 1, False),   # a forced variant without the fused norm
    (24, 2, 34816, 5120, 1, False),  # an integer-dot variant without it
    (0, 0, 16480, 5120, 3, False),   # T > 1
])
def test_qgemv_normed(nat, variant, epi, N, K, T, fused):
    # qgemv on the zero-centred RMSNorm of a residual row: fused (every block normalises the fp32 row itself while it
    # stages x) or not (the norm kernel into xin, then the GEMV), against fp64; where fused, one NaN in the residual
    # turns every output to NaN
    gen = torch.Generator(device="cuda").manual_seed(variant * 7 + N + K + T)
    codes, high, scales, wd = _random_q(N, K, 4, 64, gen)
    resid = torch.randn(T, K, device="cuda", generator=gen) * 3
    w = torch.randn(K, device="cuda", generator=gen) * 0.2
    xin = torch.empty(T, K, device="cuda").half()
    y = _normed_gemv_reference(resid, w, wd)

    def run(r):
        out, args, before = _gemv_out(epi, N, gen, T=T)
        with forced_qgemv_variant(nat, variant):
            assert nat.qgemv_fuses_norm(N, K, 4, 64, T) == fused
            nat.op_qgemv_normed(codes.data_ptr(), 0, scales.data_ptr(), N, K, 4, 64, r.data_ptr(), w.data_ptr(), 1e-6,
                                True, T, epi, *args, xin.data_ptr())
        return _gemv_result(out, before, epi)

    tol = TOL_GEMV_IDOT if fused else gemv_tol(variant) + TOL_FP16_OUT  # unfused: x rounded to fp16 by the norm
    _check_normed(run, resid, y, epi, tol, fused)


@contextlib.contextmanager
def switched(setter, on, default=True):
    """A native on/off switch (set_qgemv_keep_x_fused, set_qgemv_split_fused, ...) set for the body, restored to its
    default after it, also on failure."""
    setter(on)
    try:
        yield
    finally:
        setter(default)


@pytest.mark.parametrize("fused", [True, False])
@pytest.mark.parametrize("variant, epi, N", [(30, 0, 16384),   # a split GDN projection's head (forced)
                                             (0, 0, 12288),    # the attention q head: routed to 30
                                             (0, 0, 16480),    # routed to 30, a last partial row group
                                             (38, 0, 16384),   # another fused variant: the norm kernel writes x
                                             (0, 2, 34816)])   # gate_up's route (37): the norm kernel writes x
def test_qgemv_normed_keeps_x(nat, variant, epi, N, fused):
    """keep_x: xin holds the normalised x afterwards, as the norm kernel writes it (fp16, perm8), whether variant 30's
    blocks wrote it (XOUT) or the norm kernel ran first (other routes, or set_qgemv_keep_x_fused(False)); the GEMV
    is right against fp64 either way."""
    K = 5120
    gen = torch.Generator(device="cuda").manual_seed(variant * 3 + N + epi + fused)
    codes, high, scales, wd = _random_q(N, K, 4, 64, gen)
    resid = torch.randn(1, K, device="cuda", generator=gen) * 3
    w = torch.randn(K, device="cuda", generator=gen) * 0.2
    want = torch.empty(1, K, device="cuda").half()
    nat.op_rmsnorm(resid.data_ptr(), 1, K, w.data_ptr(), 1e-6, True, want.data_ptr())
    xin = torch.full((1, K), float("nan"), device="cuda").half()
    out, args, before = _gemv_out(epi, N, gen)
    with forced_qgemv_variant(nat, variant), switched(nat.set_qgemv_keep_x_fused, fused):
        nat.op_qgemv_normed(codes.data_ptr(), 0, scales.data_ptr(), N, K, 4, 64, resid.data_ptr(), w.data_ptr(), 1e-6,
                            True, 1, epi, *args, xin.data_ptr(), keep_x=True)
    assert not xin.isnan().any()  # every element written
    # the same rounding as the norm kernel; only the sum of squares' order may differ: at most one fp16 step
    step = torch.finfo(torch.float16).eps * want.float().abs().clamp_min(2 ** -14)
    assert ((xin.float() - want.float()).abs() <= step).all()
    if not (fused and variant in (0, 30) and epi == 0):  # the norm kernel wrote it: exactly its output
        assert torch.equal(xin, want)
    got = _gemv_result(out, before, epi)
    y = _normed_gemv_reference(resid, w, wd)
    tol = TOL_GEMV_IDOT + TOL_FP16_OUT
    if epi == 2:
        assert rel_err(got, torch.nn.functional.silu(y[:, 0::2]) * y[:, 1::2]) < tol + TOL_FP16_OUT
    else:
        assert rel_err(got, y) < tol


@pytest.mark.parametrize("fused", [True, False])
@pytest.mark.parametrize("variant, head_rows, tail_rows, tail_bits, tail_group",
                         [(0, 16384, 96, 8, 64),     # q4-27b's GDN projection: 4-bit qkvz head, 8-bit b|a tail
                          (0, 12288, 2048, 6, 64),   # q4-27b's attention: 4-bit q head, 6-bit k|v tail
                          (0, 16480, 1001, 5, 32),   # a last partial group in both segments; 5-bit, group 32
                          (30, 64, 3000, 8, 32)])    # forced: the tail has far more row groups than the head
def test_qgemv_normed_split(nat, variant, head_rows, tail_rows, tail_bits, tail_group, fused):
    """A split projection in one kernel (qgemv_normed_split with set_qgemv_split_fused): the head's rows as variant 30
    computes them alone (bit for bit), the tail's on x rounded to fp16 as the norm kernel rounds it, both against
    fp64, every row written; one NaN in the residual reaches every output. Off: qgemv_normed(head, keep_x) and the
    tail's own GEMV, the same figures within tolerance."""
    K = 5120
    gen = torch.Generator(device="cuda").manual_seed(head_rows + tail_rows + tail_bits + variant)
    hcodes, hscales, hwd = _random_q4(head_rows, K, gen)
    tcodes, thigh, tscales, twd = _random_q(tail_rows, K, tail_bits, tail_group, gen)
    resid = torch.randn(1, K, device="cuda", generator=gen) * 3
    w = torch.randn(K, device="cuda", generator=gen) * 0.2

    def run(r):
        out = torch.full((1, head_rows + tail_rows), float("nan"), device="cuda")
        xin = torch.full((1, K), float("nan"), device="cuda").half()
        with forced_qgemv_variant(nat, variant), switched(nat.set_qgemv_split_fused, fused):
            assert nat.qgemv_split_fuses(head_rows, tail_rows, K, tail_bits, tail_group, 1) == fused
            nat.op_qgemv_normed_split(hcodes.data_ptr(), hscales.data_ptr(), head_rows, tcodes.data_ptr(),
                                      0 if thigh is None else thigh.data_ptr(), tscales.data_ptr(), tail_rows,
                                      tail_bits, tail_group, K, r.data_ptr(), w.data_ptr(), 1e-6, True, 1,
                                      out.data_ptr(), head_rows + tail_rows, xin.data_ptr())
        return out

    got = run(resid)
    assert not got.isnan().any()  # every row of both segments written
    head, tail = got[:, :head_rows], got[:, head_rows:]
    assert rel_err(head, _normed_gemv_reference(resid, w, hwd)) < TOL_GEMV_IDOT
    assert rel_err(tail, _normed_gemv_reference(resid, w, twd)) < TOL_GEMV_Q4 + TOL_FP16_OUT
    if fused:  # the head's rows are variant 30's own: the same walk of each row, only more blocks in the grid
        alone = torch.full((1, head_rows), float("nan"), device="cuda")
        xin = torch.empty(1, K, device="cuda").half()
        with forced_qgemv_variant(nat, 30):
            nat.op_qgemv_normed(hcodes.data_ptr(), 0, hscales.data_ptr(), head_rows, K, 4, 64, resid.data_ptr(),
                                w.data_ptr(), 1e-6, True, 1, 0, alone.data_ptr(), 0, head_rows, xin.data_ptr())
        assert torch.equal(head, alone)
        poisoned = resid.clone()
        poisoned[0, 77] = float("nan")
        assert run(poisoned).isnan().all()


@pytest.mark.parametrize("variant, bits, group, N, K", [(47, 6, 64, 4099, 5120), (47, 8, 32, 1000, 5120),
                                                        (47, 5, 64, 517, 5120),
                                                        (47, 6, 64, 248320, 128),  # the demo model's lm_head, forced
                                                        (0, 6, 64, 65539, 5120),   # routed: lm_head sizes
                                                        (0, 5, 64, 16480, 5120),   # a uniform recipe's gdn_in
                                                        (0, 8, 64, 14338, 5120)])  # the attention qkv, a partial group
def test_qgemv_normed_headless_split_walk(nat, variant, bits, group, N, K):
    """Variant 47 (qgemv_normed only; the route of 5/6/8-bit matrices of 8192 rows or more at K >= 2048 with the store
    or SwiGLU epilogue): the split kernel with no head rows walks a whole 5/6/8-bit matrix with the norm fused, on x
    rounded to fp16 as the norm kernel rounds it: against fp64, every row written, a NaN reaching every row."""
    gen = torch.Generator(device="cuda").manual_seed(bits * 1000 + N)
    codes, high, scales, wd = _random_q(N, K, bits, group, gen)
    resid = torch.randn(1, K, device="cuda", generator=gen) * 3
    w = torch.randn(K, device="cuda", generator=gen) * 0.2
    if variant == 0:  # the route: many rows at K >= 2048 only
        assert not nat.qgemv_fuses_norm(4096, K, bits, 64, 1)  # few rows: the width's own route
        assert not nat.qgemv_fuses_norm(248320, 128, 6, 64, 1)  # small K (the demo model) stays on its ring

    def run(r):
        out = torch.full((1, N), float("nan"), device="cuda")
        xin = torch.empty(1, K, device="cuda").half()
        with forced_qgemv_variant(nat, variant):
            assert nat.qgemv_fuses_norm(N, K, bits, group, 1)
            nat.op_qgemv_normed(codes.data_ptr(), 0 if high is None else high.data_ptr(), scales.data_ptr(), N, K,
                                bits, group, r.data_ptr(), w.data_ptr(), 1e-6, True, 1, 0, out.data_ptr(), 0, N,
                                xin.data_ptr())
        return out

    got = run(resid)
    assert not got.isnan().any()
    assert rel_err(got, _normed_gemv_reference(resid, w, wd)) < TOL_GEMV_Q4 + TOL_FP16_OUT
    poisoned = resid.clone()
    poisoned[0, 5] = float("inf")
    assert run(poisoned).isnan().all()


@pytest.mark.parametrize("variant", [47, 0])
@pytest.mark.parametrize("bits, group, N", [(5, 64, 34816),   # a uniform recipe's gate_up (routed to 47)
                                            (6, 32, 8196),    # a last group of one pair (8196 rows: 2049 groups of 4)
                                            (8, 64, 1030)])   # few rows: forced only
@pytest.mark.parametrize("layout", [0, 1])  # the SwiGLU output in perm8 order or in down's lanes layout
def test_qgemv_normed_walk_swiglu(nat, variant, bits, group, N, layout):
    """Variant 47 with the SwiGLU epilogue (gate_up of the 5/6/8-bit recipes, session 17): pairs (2p, 2p + 1) of the
    normalised walk give silu(gate) * up in fp16, written in perm8 order or in the lanes layout of N / 2 elements;
    against fp64 on x rounded to fp16, every pair written, a NaN in the residual reaching every output."""
    if layout == 1 and N % 64:
        pytest.skip("the lanes layout needs N / 2 a multiple of 32")
    if variant == 0 and N < 8192:
        pytest.skip("routed to 47 from 8192 rows only")
    K = 5120
    gen = torch.Generator(device="cuda").manual_seed(bits * 77 + N + layout)
    codes, high, scales, wd = _random_q(N, K, bits, group, gen)
    resid = torch.randn(1, K, device="cuda", generator=gen) * 3
    w = torch.randn(K, device="cuda", generator=gen) * 0.2
    width = (N // 2 + 7) // 8 * 8

    def run(r):
        out = torch.full((1, width), float("nan"), device="cuda").half()
        xin = torch.empty(1, K, device="cuda").half()
        with forced_qgemv_variant(nat, variant):
            nat.op_qgemv_normed(codes.data_ptr(), 0 if high is None else high.data_ptr(), scales.data_ptr(), N, K,
                                bits, group, r.data_ptr(), w.data_ptr(), 1e-6, True, 1, 2, 0, out.data_ptr(), width,
                                xin.data_ptr(), out_layout=layout)
        got = from_lanes(out.float()) if layout == 1 else from_perm8(out.float())
        return got[:, :N // 2]

    y = _normed_gemv_reference(resid, w, wd)
    got = run(resid)
    assert not got.isnan().any()
    assert rel_err(got, torch.nn.functional.silu(y[:, 0::2]) * y[:, 1::2]) < TOL_GEMV_Q4 + 2 * TOL_FP16_OUT
    poisoned = resid.clone()
    poisoned[0, 77] = float("nan")
    assert run(poisoned).isnan().all()


@pytest.mark.parametrize("bits", [5, 6, 8])
@pytest.mark.parametrize("epi, N, K", [(1, 5120, 17408),  # down: 17 chunks a lane
                                       (1, 5120, 6144),   # gdn_out / the attention output
                                       (0, 1001, 5120),   # a last partial group
                                       (2, 8196, 5120),   # SwiGLU, a last group of one pair
                                       (0, 96, 512)])     # 16 chunks: half the lanes idle
def test_qgemv_walk_variant48(nat, bits, epi, N, K):
    """Variant 48 (plain qgemv at 5 / 6 / 8 bits; the 8-bit route at K >= 2048): variant 47's walk on the given fp16 x,
    with the store, residual-add and SwiGLU epilogues, against fp64 (every row written); and the route: 48 for 8-bit
    matrices at K >= 2048, the generic path below."""
    gen = torch.Generator(device="cuda").manual_seed(bits * 31 + N + K + epi)
    group = 64
    codes, high, scales, wd = _random_q(N, K, bits, group, gen)
    x = torch.randn(1, K, device="cuda", generator=gen).half()
    y = (wd @ x.double().T).T
    padded = (N // 2 + 7) // 8 * 8

    def call(variant):
        out, args, before = _gemv_out(epi, N, torch.Generator(device="cuda").manual_seed(99), swiglu_width=padded)
        with forced_qgemv_variant(nat, variant):
            nat.op_qgemv(codes.data_ptr(), 0 if high is None else high.data_ptr(), scales.data_ptr(), N, K, bits,
                         group, to_perm8(x).data_ptr(), 1, epi, *args)
        got = _gemv_result(out, before, epi)
        return got[:, :N // 2] if epi == 2 else got

    got = call(48)
    assert not got.isnan().any()
    assert torch.equal(call(48), got)  # the balanced walk's leftover sums are added in a fixed order
    if bits == 8 and N > 2048:  # the route is 48 itself (the same kernel: the same bits)
        assert torch.equal(call(0), got)
    if epi == 2:
        assert rel_err(got, torch.nn.functional.silu(y[:, 0::2]) * y[:, 1::2]) < TOL_GEMV_Q4 + TOL_FP16_OUT
    else:
        assert rel_err(got, y) < TOL_GEMV_Q4 * (2 if epi == 1 else 1)


@pytest.mark.parametrize("bits", [4, 5, 6, 8])
@pytest.mark.parametrize("variant", QGEMV_COL_VARIANTS + [0])
@pytest.mark.parametrize("epi, N, K", [(0, 96, 5120), (0, 2048, 5120), (1, 253, 1152), (2, 198, 2080)])
def test_qgemv_col_normed(nat, bits, variant, epi, N, K):
    """The column split takes the norm fused at every width (each block sums the squares of the residual row, each
    warp normalises its own column and rounds x to fp16 as the norm kernel does): against fp64; one NaN in the
    residual turns every output to NaN. Variant 0: the route, which sends these few-row shapes to 45 at 5 / 6 / 8 bits
    (the split projections' tails) and not at 4."""
    gen = torch.Generator(device="cuda").manual_seed(bits * 100 + variant + N + K + epi)
    codes, high, scales, wd = _random_q(N, K, bits, 32 if K % 64 else 64, gen)
    group = 32 if K % 64 else 64
    resid = torch.randn(1, K, device="cuda", generator=gen) * 3
    w = torch.randn(K, device="cuda", generator=gen) * 0.2
    xin = torch.empty(1, K, device="cuda").half()
    y = _normed_gemv_reference(resid, w, wd)
    fused = variant != 0 or bits != 4

    padded = (N // 2 + 7) // 8 * 8  # SwiGLU: perm8 positions of an odd pair count reach the next multiple of 8

    def run(r):
        out, args, before = _gemv_out(epi, N, gen, swiglu_width=padded)
        with forced_qgemv_variant(nat, variant):
            assert nat.qgemv_fuses_norm(N, K, bits, group, 1) == fused
            nat.op_qgemv_normed(codes.data_ptr(), 0 if high is None else high.data_ptr(), scales.data_ptr(), N, K,
                                bits, group, r.data_ptr(), w.data_ptr(), 1e-6, True, 1, epi, *args, xin.data_ptr())
        got = _gemv_result(out, before, epi)
        return got[:, :N // 2] if epi == 2 else got

    tol = gemv_tol(variant) + TOL_FP16_OUT  # x rounded to fp16 as the norm kernel rounds it
    _check_normed(run, resid, y, epi, tol, fused)


# ---- the lanes input layout (ops.h GEMV_X_LANES): read by variant 4, written by the SwiGLU epilogue ----
X_PERM8, X_LANES = 0, 1


@pytest.mark.parametrize("epi, N, K", [(1, 5120, 17408),  # down: 17 runs of 32 chunks
                                       (0, 5120, 6144),   # gdn_out / attention output
                                       (0, 253, 1152),    # a last run of 4 chunks, an odd last row
                                       (2, 96, 512),      # one run of 16 chunks: half the lanes idle
                                       (0, 64, 64)])      # two chunks
def test_qgemv_lanes_input_equals_perm8(nat, epi, N, K):
    # variant 4 on x in the lanes layout runs the same sums in the same order as on perm8 x: equal bit for bit, and
    # right against fp64
    gen = torch.Generator(device="cuda").manual_seed(N + K + epi)
    codes, scales, wd = _random_q4(N, K, gen)
    x = torch.randn(1, K, device="cuda", generator=gen).half()

    def call(xbuf, layout):
        # the same residual baseline for both calls (a different one would round the sum differently)
        out, args, before = _gemv_out(epi, N, torch.Generator(device="cuda").manual_seed(99))
        with forced_qgemv_variant(nat, 4):
            nat.op_qgemv(codes.data_ptr(), 0, scales.data_ptr(), N, K, 4, 64, xbuf.data_ptr(), 1, epi, *args,
                         x_layout=layout)
        return _gemv_result(out, before, epi)

    got = call(to_lanes(x), X_LANES)
    assert not got.isnan().any()
    assert torch.equal(got, call(to_perm8(x), X_PERM8))
    y = (wd @ x.double().T).T
    if epi == 2:
        assert rel_err(got, torch.nn.functional.silu(y[:, 0::2]) * y[:, 1::2]) < TOL_GEMV_Q4 + TOL_FP16_OUT
    else:
        assert rel_err(got, y) < TOL_GEMV_Q4 * (2 if epi == 1 else 1)


@pytest.mark.parametrize("epi, N, K", [(1, 5120, 17408),  # down: 17 batches of two chunks a lane
                                       (1, 5120, 6144),   # gdn_out / the attention output: 3 batches
                                       (0, 253, 1152),    # an odd last row, a last batch of one chunk for some lanes
                                       (2, 96, 512),      # SwiGLU; 16 chunks: half the lanes idle
                                       (2, 98, 512),      # 4 rows a warp (41, 42): a last group of one pair
                                       (0, 64, 64)])      # two chunks: lanes past them load nothing
@pytest.mark.parametrize("layout", [X_LANES, X_PERM8])
@pytest.mark.parametrize("pp", [36, 39, 40, 41, 42, 43, 44, 49])
def test_qgemv_pp_variants_equal_variant4(nat, epi, N, K, layout, pp):
    """Variants 36 / 39 / 40 / 41 / 42 (qgemv_pp_kernel with 2 / 1 / 0 / 2 / 1 batches before the PDL wait and 2 or
    (41, 42) 4 rows a warp), 43 / 44 (36 / 41 with the weights past L1) and 49 (36 with idle warps that spread its
    blocks evenly over the SMs): variant 4 with two register buffers in turn and the scales kept in fp16 until their product, so that the next batch is in flight while the
    current one is computed) run variant 4's products in variant 4's order: equal bit for bit, on either input layout
    and with each epilogue."""
    gen = torch.Generator(device="cuda").manual_seed(N + K + epi + 7 * layout)
    codes, scales, _ = _random_q4(N, K, gen)
    x = torch.randn(1, K, device="cuda", generator=gen).half()
    xbuf = to_lanes(x) if layout == X_LANES else to_perm8(x)

    def call(variant):
        out, args, before = _gemv_out(epi, N, torch.Generator(device="cuda").manual_seed(99))
        with forced_qgemv_variant(nat, variant):
            nat.op_qgemv(codes.data_ptr(), 0, scales.data_ptr(), N, K, 4, 64, xbuf.data_ptr(), 1, epi, *args,
                         x_layout=layout)
        return _gemv_result(out, before, epi)

    got = call(pp)
    assert not got.isnan().any()
    assert torch.equal(got, call(4))


@pytest.mark.parametrize("bits", [5, 6])
@pytest.mark.parametrize("epi, N, K", [(1, 5120, 17408),  # down (q4-27b: 5-bit)
                                       (1, 5120, 6144),   # gdn_out / the attention output (5-bit)
                                       (0, 253, 1152),    # an odd last row, a last batch of one chunk for some lanes
                                       (2, 96, 512),      # SwiGLU; 16 chunks: half the lanes idle
                                       (0, 64, 64)])      # two chunks: lanes past them load nothing
@pytest.mark.parametrize("layout", [X_LANES, X_PERM8])
def test_qgemv_pp_wide_equals_ring(nat, bits, epi, N, K, layout):
    """Variant 36 at 5 / 6 bits (qgemv_pp_kernel with the high plane) runs ring variant 17's chunk products
    (chunk_dot_fast) over the same chunks in the same order, with x read from L1 (either layout) instead of the
    ring's shared copy: equal bit for bit."""
    gen = torch.Generator(device="cuda").manual_seed(bits * 100 + N + K + epi + 7 * layout)
    group = 32 if K == 64 else 64
    codes, high, scales, _ = _random_q(N, K, bits, group, gen)
    x = torch.randn(1, K, device="cuda", generator=gen).half()

    def call(variant, lay):
        xbuf = to_lanes(x) if lay == X_LANES else to_perm8(x)
        out, args, before = _gemv_out(epi, N, torch.Generator(device="cuda").manual_seed(99))
        with forced_qgemv_variant(nat, variant):
            nat.op_qgemv(codes.data_ptr(), high.data_ptr(), scales.data_ptr(), N, K, bits, group, xbuf.data_ptr(), 1,
                         epi, *args, x_layout=lay)
        return _gemv_result(out, before, epi)

    got = call(36, layout)
    assert not got.isnan().any()
    assert torch.equal(got, call(17, X_PERM8))


@pytest.mark.parametrize("lanes", [True, False])
@pytest.mark.parametrize("N", [5120, 1024, 250])
def test_qgemv_spread_launch_holds_the_fair_share(nat, N, lanes):
    """Variant 49 (down's route) gives its blocks idle warps only to hold an SM to ceil(blocks / SMs) of them: where
    the kernel alone would put more on an SM, the launch it takes puts at most that many; where it would not, it adds
    no idle warps."""
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    s = nat.qgemv_spread_launch(N, lanes)
    blocks = -(-(-(-N // 2)) // 4)  # ceil(ceil(N / 2) / 4): one row pair a working warp, 4 working warps a block
    assert s["blocks"] == blocks
    assert s["fair_share"] == -(-blocks // sms)
    assert s["threads"] % 32 == 0 and 128 <= s["threads"] <= 224
    assert s["blocks_per_sm"] >= 1
    if s["threads"] > 128:  # idle warps only where they bring the SM within its share
        assert s["blocks_per_sm"] <= s["fair_share"]
    if N == 5120 and sms >= 108:  # down on an H200 / RTX 4090-class SM count: a share of 5-6 is always reachable
        assert s["blocks_per_sm"] <= s["fair_share"]
    assert nat.qgemv_spread_launch(N, lanes) == s  # found once, then the same


def test_qgemv_x_layout_of_wide_widths(nat):
    assert nat.qgemv_x_layout(5120, 17408, 5, 64, 1) == X_LANES  # the route: 36 on down
    assert nat.qgemv_x_layout(5120, 6144, 5, 64, 1) == X_LANES  # and on gdn_out / o
    assert nat.qgemv_x_layout(6144, 5120, 5, 64, 1) == X_PERM8  # other 5-bit shapes: ring 18
    assert nat.qgemv_x_layout(2048, 5120, 6, 64, 1) == X_PERM8  # few rows (split tails): the column split 45
    assert nat.qgemv_x_layout(96, 5120, 8, 64, 1) == X_PERM8
    assert nat.qgemv_x_layout(5120, 6144, 6, 64, 1) == X_PERM8  # 6-bit: the rings
    with forced_qgemv_variant(nat, 36):
        assert nat.qgemv_x_layout(5120, 17408, 5, 64, 1) == X_LANES
        assert nat.qgemv_x_layout(5120, 6144, 6, 64, 1) == X_LANES
        assert nat.qgemv_x_layout(5120, 6144, 8, 64, 1) == X_PERM8  # 8-bit: the generic path
    for v in QGEMV_COL_VARIANTS:  # the column split reads perm8 at every width
        with forced_qgemv_variant(nat, v):
            for bits in (4, 5, 6, 8):
                assert nat.qgemv_x_layout(5120, 17408, bits, 64, 1) == X_PERM8


@pytest.mark.parametrize("lazy, eager, epi, N, K", [(37, 34, 2, 34816, 5120), (37, 34, 1, 250, 1152),
                                                      (38, 30, 0, 16480, 5120), (38, 30, 1, 253, 2048)])
@pytest.mark.parametrize("fused", [True, False])
def test_qgemv_lazy_scale_variants_equal_theirs(nat, lazy, eager, epi, N, K, fused):
    """Variants 37 / 38 are 34 / 30 with the batches' fp16 scales and the fused norm's weights (plus nadd) converted
    where they are used instead of right after their loads: the same arithmetic, so equal bit for bit, with the norm
    fused into the GEMV or not."""
    gen = torch.Generator(device="cuda").manual_seed(lazy * 11 + N + K + epi)
    codes, scales, _ = _random_q4(N, K, gen)
    resid = torch.randn(1, K, device="cuda", generator=gen) * 3
    w = torch.randn(K, device="cuda", generator=gen) * 0.2
    x = to_perm8(torch.randn(1, K, device="cuda", generator=gen).half())
    xin = torch.empty(1, K, device="cuda").half()

    def call(variant):
        out, args, before = _gemv_out(epi, N, torch.Generator(device="cuda").manual_seed(5))
        with forced_qgemv_variant(nat, variant):
            if fused:
                assert nat.qgemv_fuses_norm(N, K, 4, 64, 1)
                nat.op_qgemv_normed(codes.data_ptr(), 0, scales.data_ptr(), N, K, 4, 64, resid.data_ptr(),
                                    w.data_ptr(), 1e-6, True, 1, epi, *args, xin.data_ptr())
            else:
                nat.op_qgemv(codes.data_ptr(), 0, scales.data_ptr(), N, K, 4, 64, x.data_ptr(), 1, epi, *args)
        return _gemv_result(out, before, epi)

    got = call(lazy)
    assert not got.isnan().any()
    assert torch.equal(got, call(eager))


def test_qgemv_x_layout_follows_the_route(nat):
    assert nat.qgemv_x_layout(5120, 17408, 4, 64, 1) == X_LANES  # down: routed to variant 49 (variant 4's walk)
    assert nat.qgemv_x_layout(5120, 6144, 4, 32, 1) == X_LANES   # gdn_out / o: variant 4 too
    assert nat.qgemv_x_layout(34816, 5120, 4, 64, 1) == X_PERM8  # gate_up: an integer-dot sx kernel
    assert nat.qgemv_x_layout(5120, 17408, 4, 64, 2) == X_PERM8  # T > 1
    assert nat.qgemv_x_layout(5120, 17408, 6, 64, 1) == X_PERM8  # 6-bit: the ring kernel
    with forced_qgemv_variant(nat, 6):
        assert nat.qgemv_x_layout(5120, 17408, 4, 64, 1) == X_PERM8
    for pp in (36, 39, 40, 41, 42, 43, 44):  # variant 4's walk, pipelined: they read the lanes layout too
        with forced_qgemv_variant(nat, pp):
            assert nat.qgemv_x_layout(5120, 6144, 4, 64, 1) == X_LANES
    nat.set_qgemv_lanes(False)
    try:
        assert nat.qgemv_x_layout(5120, 17408, 4, 64, 1) == X_PERM8
    finally:
        nat.set_qgemv_lanes(True)


def test_qgemv_lanes_layout_rejected_where_not_read(nat):
    gen = torch.Generator(device="cuda").manual_seed(3)
    N, K = 64, 512
    codes, scales, wd = _random_q4(N, K, gen)
    x = torch.zeros(2, K, device="cuda").half()
    out = torch.zeros(2, N, device="cuda")
    half = torch.zeros(2, N // 2, device="cuda").half()
    with forced_qgemv_variant(nat, 6), pytest.raises(ValueError, match="lanes"):  # a kernel that reads perm8
        nat.op_qgemv(codes.data_ptr(), 0, scales.data_ptr(), N, K, 4, 64, x.data_ptr(), 1, 0, out.data_ptr(), 0, N,
                     x_layout=X_LANES)
    with pytest.raises(ValueError, match="lanes"):  # T > 1
        nat.op_qgemv(codes.data_ptr(), 0, scales.data_ptr(), N, K, 4, 64, x.data_ptr(), 2, 0, out.data_ptr(), 0, N,
                     x_layout=X_LANES)
    with pytest.raises(ValueError, match="SwiGLU"):  # the lanes output is the SwiGLU epilogue's only
        nat.op_qgemv(codes.data_ptr(), 0, scales.data_ptr(), N, K, 4, 64, x.data_ptr(), 1, 0, out.data_ptr(), 0, N,
                     out_layout=X_LANES)
    with pytest.raises(ValueError, match="multiple of 32"):  # N / 2 = 24 outputs: no whole chunk
        nat.op_qgemv(codes.data_ptr(), 0, scales.data_ptr(), 48, K, 4, 64, x.data_ptr(), 1, 2, 0, half.data_ptr(),
                     24, out_layout=X_LANES)
    with pytest.raises(ValueError, match="layout"):
        nat.op_qgemv(codes.data_ptr(), 0, scales.data_ptr(), N, K, 4, 64, x.data_ptr(), 1, 0, out.data_ptr(), 0, N,
                     x_layout=2)


@pytest.mark.parametrize("variant, T", [(0, 1), (1, 1), (4, 1), (6, 1), (16, 1), (34, 1), (0, 3)])
def test_qgemv_swiglu_lanes_output(nat, variant, T):
    # every kernel's SwiGLU epilogue writes the same values in the lanes order when asked (T > 1: the generic kernel)
    gen = torch.Generator(device="cuda").manual_seed(variant + 31 * T)
    N, K = 2 * 1088, 1024  # 1088 outputs: 34 chunks, a last run of 2
    codes, scales, wd = _random_q4(N, K, gen)
    x = to_perm8(torch.randn(T, K, device="cuda", generator=gen).half())

    def call(layout):
        out = torch.full((T, N // 2), float("nan"), device="cuda").half()
        with forced_qgemv_variant(nat, variant):
            nat.op_qgemv(codes.data_ptr(), 0, scales.data_ptr(), N, K, 4, 64, x.data_ptr(), T, 2, 0, out.data_ptr(),
                         N // 2, out_layout=layout)
        return out

    lanes = call(X_LANES)
    assert not lanes.isnan().any()
    assert torch.equal(from_lanes(lanes), from_perm8(call(X_PERM8)))


def test_mlp_chain_in_lanes_layout_changes_no_bit(nat):
    # the decode step's MLP (engine.cu): the fused-norm gate_up writes its SwiGLU output in the layout down reads
    # (qgemv_x_layout), and down reads it; the same bits as the perm8 chain
    gen = torch.Generator(device="cuda").manual_seed(17)
    H, I = 1024, 9216  # down's K = I > 8192: routed to variant 49 (variant 4's walk), like the 27B's 17408
    assert nat.qgemv_x_layout(H, I, 4, 64, 1) == X_LANES
    gu, gu_s, _ = _random_q4(2 * I, H, gen)
    dn, dn_s, _ = _random_q4(H, I, gen)
    resid = torch.randn(1, H, device="cuda", generator=gen)
    nw = torch.randn(H, device="cuda", generator=gen) * 0.2
    xin = torch.empty(1, H, device="cuda").half()

    def chain(layout):
        act = torch.full((1, I), float("nan"), device="cuda").half()
        out = resid.clone()
        nat.op_qgemv_normed(gu.data_ptr(), 0, gu_s.data_ptr(), 2 * I, H, 4, 64, resid.data_ptr(), nw.data_ptr(), 1e-6,
                            True, 1, 2, 0, act.data_ptr(), I, xin.data_ptr(), out_layout=layout)
        nat.op_qgemv(dn.data_ptr(), 0, dn_s.data_ptr(), H, I, 4, 64, act.data_ptr(), 1, 1, out.data_ptr(), 0, H,
                     x_layout=layout)
        return out

    lanes = chain(X_LANES)
    assert torch.isfinite(lanes).all()
    assert torch.equal(lanes, chain(X_PERM8))


@pytest.mark.parametrize("bits", [4, 8])
@pytest.mark.parametrize("K", [256, 320])  # 320: the row's last block only partly filled
def test_embed_gather(nat, bits, K):
    gen = torch.Generator().manual_seed(11)
    q, codes, high, scales, wd = quantized(1000, K, bits, 64, gen)
    tok = torch.tensor([5, 999, 0, 5], dtype=torch.int32, device="cuda")
    out = torch.full((4, K), float("nan"), device="cuda")
    nat.op_embed(codes.data_ptr(), 0, scales.data_ptr(), 1000, K, bits, 64, tok.data_ptr(), 4, out.data_ptr())
    assert rel_err(out, wd[tok.long()]) < TOL_FP32


def _ring(hist, p0, Kc):
    """The conv state ring [C, Kc] for a step at position p0 whose window is hist [Kc - 1, C] (oldest first): the
    input at position p in slot p mod Kc; the slot of p0 itself holds junk (no step at p0 reads it)."""
    C = hist.shape[1]
    ring = torch.randn(C, Kc, device="cuda")
    for j in range(Kc - 1):
        ring[:, (p0 - (Kc - 1) + j) % Kc] = hist[j].float()
    return ring


def _window(ring, p0, Kc):
    """The window [Kc - 1, C] (oldest first) a step at position p0 reads from the ring."""
    return torch.stack([ring[:, (p0 - (Kc - 1) + j) % Kc] for j in range(Kc - 1)]) if Kc > 1 else ring[:, :0].T


@pytest.mark.parametrize("pos_on_device", [False, True])
def test_conv_update_carries_state(nat, pos_on_device):
    # the ring carries the last Kc - 1 inputs across calls of several lengths, wrapping (positions 6..), with the
    # position from the host or (as a captured decode step reads it) from device memory
    C, Kc, ld = 1000, 4, 1100
    w = torch.randn(C, Kc, device="cuda")
    p = 6
    hist = torch.randn(Kc - 1, C, device="cuda").double()  # oldest first
    state = _ring(hist, p, Kc)
    for T in (3, 1, 5):
        x = torch.randn(T, ld, device="cuda")
        out = torch.full((T, C), float("nan"), device="cuda")
        pos_dev = torch.tensor([p], dtype=torch.int32, device="cuda")
        nat.op_conv(x.data_ptr(), ld, T, C, Kc, w.data_ptr(), state.data_ptr(), -999 if pos_on_device else p,
                    out.data_ptr(), pos_dev.data_ptr() if pos_on_device else 0)
        seq = torch.cat([hist, x[:, :C].double()])  # [Kc-1+T, C]
        ref = torch.stack([(seq[t:t + Kc] * w.double().T).sum(0) for t in range(T)])
        assert rel_err(out, torch.nn.functional.silu(ref)) < TOL_FP32
        p += T
        hist = seq[-(Kc - 1):]
        assert rel_err(_window(state, p, Kc), hist) < TOL_FP32


@pytest.mark.parametrize("Kc", [4, 2])
def test_conv_prefill_path_equals_token_steps(nat, Kc):
    """T > 16 takes the token-parallel kernel and a separate window update: its outputs and the ring it
    leaves must be bit-identical to feeding the same inputs in steps of at most 16 (the sequential
    kernel), across a mix of long and short calls and a run boundary (T = 100 = 6 runs of 16 + 4)."""
    C, ld = 1000, 1037
    w = torch.randn(C, Kc, device="cuda")
    s0 = torch.randn(C, Kc, device="cuda")
    xs = [torch.randn(T, ld, device="cuda") for T in (100, 17, 3, 4096)]
    par_state, seq_state = s0.clone(), s0.clone()
    p = 3
    for x in xs:
        T = x.shape[0]
        out_par = torch.full((T, C), float("nan"), device="cuda")
        nat.op_conv(x.data_ptr(), ld, T, C, Kc, w.data_ptr(), par_state.data_ptr(), p, out_par.data_ptr())
        out_seq = torch.full((T, C), float("nan"), device="cuda")
        for t0 in range(0, T, 16):
            n = min(16, T - t0)
            nat.op_conv(x[t0:].data_ptr(), ld, n, C, Kc, w.data_ptr(), seq_state.data_ptr(), p + t0,
                        out_seq[t0:].data_ptr())
        assert torch.equal(out_par, out_seq)
        p += T
        assert torch.equal(_window(par_state, p, Kc), _window(seq_state, p, Kc))


@pytest.mark.parametrize("T", [1, 2, 4])
def test_gdn_step(nat, T):
    kh, vh, eps = 4, 12, 1e-6
    conv_dim = 2 * kh * 128 + vh * 128
    ldp = vh * 128 + 2 * vh + 7
    conv_out = torch.randn(T, conv_dim, device="cuda")
    zba = torch.randn(T, ldp, device="cuda")
    z, b, a = zba[:, :vh * 128], zba[:, vh * 128:vh * 128 + vh], zba[:, vh * 128 + vh:vh * 128 + 2 * vh]
    a_log = torch.randn(vh, device="cuda") * 0.5
    dt_bias = torch.randn(vh, device="cuda") * 0.5
    norm_w = torch.rand(128, device="cuda") + 0.5
    S0 = torch.randn(vh, 128, 128, device="cuda") * 0.1  # [h, k, v]
    state = S0.transpose(1, 2).contiguous()               # device layout [h, v, k]
    out = torch.full((T, vh * 128), float("nan"), device="cuda").half()
    # z/b/a are addressed with row stride ldp from their own base pointers
    nat.op_gdn(conv_out.data_ptr(), zba.data_ptr(), zba.data_ptr() + vh * 128 * 4, zba.data_ptr() + (vh * 128 + vh) * 4,
               ldp, T, kh, vh, eps, a_log.data_ptr(), dt_bias.data_ptr(), norm_w.data_ptr(), state.data_ptr(),
               out.data_ptr())
    ref, S = gdn_oracle(conv_out.double(), z.double(), b.double(), a.double(), a_log.double(), dt_bias.double(),
                        norm_w.double(), S0.double().clone(), kh, vh, eps)
    assert rel_err(from_perm8(out.float()), ref) < TOL_FP16_OUT
    assert rel_err(state.transpose(1, 2), S) < TOL_FP32 * 10  # exp/softplus intrinsics in the decay


@pytest.mark.parametrize("Kc, p0", [(4, 0), (4, 2), (4, 1001), (2, 5), (3, 7)])
@pytest.mark.parametrize("T", [2, 4, 16])
@pytest.mark.parametrize("pos_on_device", [False, True])
def test_conv_checkpoints_are_the_rings_after_each_token(nat, Kc, p0, T, pos_on_device):
    """A verify step's conv checkpoints (conv_ring_checkpoints, run before the step's conv): image t is, bit for bit,
    the whole ring the conv leaves after the step's first t + 1 tokens, for t < T - 1; from a zero ring at position 0
    (the slots of negative positions stay zero), below Kc - 1 and wrapped, with more tokens than slots (T = 16:
    later inputs over earlier ones in a slot); the ring itself and the images past T - 2 untouched."""
    gen = torch.Generator(device="cuda").manual_seed(Kc * 1000 + p0 + T)
    C, ld = 1000, 1037
    x = torch.randn(T, ld, device="cuda", generator=gen)
    ring0 = torch.zeros(C, Kc, device="cuda") if p0 == 0 else torch.randn(C, Kc, device="cuda", generator=gen)
    w = torch.randn(C, Kc, device="cuda", generator=gen)
    stride = C * Kc + 37                          # images apart by more than one ring
    ckpt = torch.full((T, stride), float("nan"), device="cuda")  # one image more than written: stays NaN
    ring = ring0.clone()
    pos_dev = torch.tensor([p0], dtype=torch.int32, device="cuda")
    nat.op_conv_checkpoints(x.data_ptr(), ld, T, C, Kc, ring.data_ptr(), -999 if pos_on_device else p0,
                            ckpt.data_ptr(), stride, pos_dev.data_ptr() if pos_on_device else 0)
    assert torch.equal(ring, ring0)
    out = torch.empty(T, C, device="cuda")
    for t in range(T - 1):
        expect = ring0.clone()
        nat.op_conv(x.data_ptr(), ld, t + 1, C, Kc, w.data_ptr(), expect.data_ptr(), p0, out.data_ptr())
        assert torch.equal(ckpt[t, :C * Kc].view(C, Kc), expect), t
        assert ckpt[t, C * Kc:].isnan().all()
    assert ckpt[T - 1].isnan().all()


@pytest.mark.parametrize("T", [2, 4, 16])
def test_gdn_checkpoints_are_the_states_after_each_token(nat, T):
    """gdn_step with checkpoints (a verify step): image t is the state after the first t + 1 tokens, bit for bit as
    the kernel without checkpoints leaves it after t + 1 tokens (the same source and the same float instructions,
    scheduled differently), at the state's own offsets; the final state and outputs are as without checkpoints,
    and image T - 1 is not written (the final state is the lane's own)."""
    kh, vh, eps = 4, 12, 1e-6
    gen = torch.Generator(device="cuda").manual_seed(T)
    conv_dim = 2 * kh * 128 + vh * 128
    ldp = vh * 128 + 2 * vh + 7
    conv_out = torch.randn(T, conv_dim, device="cuda", generator=gen)
    zba = torch.randn(T, ldp, device="cuda", generator=gen)
    zp, bp, ap = (zba.data_ptr() + off * 4 for off in (0, vh * 128, vh * 128 + vh))
    a_log, dt_bias = (torch.randn(vh, device="cuda", generator=gen) * 0.5 for _ in range(2))
    norm_w = torch.rand(128, device="cuda", generator=gen) + 0.5
    S0 = torch.randn(vh, 128, 128, device="cuda", generator=gen) * 0.1
    state_floats = vh * 128 * 128
    stride = state_floats + 4 * 37               # images apart by more than one state (16-byte aligned)

    def run(n, ckpt=None):
        S = S0.clone()
        out = torch.full((n, vh * 128), float("nan"), device="cuda").half()
        nat.op_gdn(conv_out.data_ptr(), zp, bp, ap, ldp, n, kh, vh, eps, a_log.data_ptr(), dt_bias.data_ptr(),
                   norm_w.data_ptr(), S.data_ptr(), out.data_ptr(), 0 if ckpt is None else ckpt.data_ptr(),
                   0 if ckpt is None else stride)
        return S, out

    ckpt = torch.full((T, stride), float("nan"), device="cuda")
    S_kept, out_kept = run(T, ckpt)
    S_plain, out_plain = run(T)
    assert torch.equal(S_kept, S_plain) and torch.equal(out_kept, out_plain)
    for t in range(T - 1):
        assert torch.equal(ckpt[t, :state_floats].view(vh, 128, 128), run(t + 1)[0]), t
        assert ckpt[t, state_floats:].isnan().all()
    assert ckpt[T - 1].isnan().all()


def _gdn_conv_case(kh: int, vh: int, Kc: int, p0: int, gen: torch.Generator, device: str = "cuda"):
    """The inputs of a GDN decode step with the conv inside: (conv_dim, conv_w, a_log, dt_bias, norm_w, the conv ring
    (zeros at position 0, else random: a wrapped ring), the recurrent state S [vh, 128, 128])."""
    conv_dim = 2 * kh * 128 + vh * 128
    conv_w = torch.randn(conv_dim, Kc, device=device, generator=gen) * 0.5
    a_log = torch.randn(vh, device=device, generator=gen) * 0.5
    dt_bias = torch.randn(vh, device=device, generator=gen) * 0.5
    norm_w = torch.rand(128, device=device, generator=gen) + 0.5
    ring0 = (torch.zeros(conv_dim, Kc, device=device) if p0 == 0
             else torch.randn(conv_dim, Kc, device=device, generator=gen))
    S0 = (torch.randn(vh, 128, 128, device=device, generator=gen) * 0.1).contiguous()
    return conv_dim, conv_w, a_log, dt_bias, norm_w, ring0, S0


@pytest.mark.parametrize("kh, vh, Kc, p0", [(4, 12, 4, 0), (4, 12, 4, 1001), (2, 2, 4, 7), (4, 8, 2, 5)])
@pytest.mark.parametrize("pos_on_device", [False, True])
def test_gdn_conv_step_equals_conv_then_step(nat, kh, vh, Kc, p0, pos_on_device):
    """The one-token step with the conv inside (gdn_conv_step, gdn_conv_decode_kernel: several blocks read a key
    head's q / k window, one writes the new input) against the conv kernel then the GDN step kernel (gdn_kernel), at
    the first position (empty window) and at wrapped ones; three steps in a row, so each reads what the one before
    wrote. The conv ring holds raw inputs: equal. Outputs and the recurrent state: the same arithmetic in the same
    order, but the session 8 final call found the state different in the last bits (outputs equal) although every
    product is written the same way (two kernels may compile to different contractions); held to fp32 closeness,
    the outputs to their fp16 rounding."""
    gen = torch.Generator(device="cuda").manual_seed(kh * 100 + vh + Kc + p0)
    conv_dim, conv_w, a_log, dt_bias, norm_w, ring0, S0 = _gdn_conv_case(kh, vh, Kc, p0, gen)
    ldp = conv_dim + vh * 128 + 2 * vh + 5
    eps = 1e-6
    ring_a, ring_b, S_a, S_b = ring0.clone(), ring0.clone(), S0.clone(), S0.clone()
    for step in range(3):
        p = p0 + step
        x = torch.randn(1, ldp, device="cuda", generator=gen)
        zp, bp, ap = (x.data_ptr() + off * 4 for off in (conv_dim, conv_dim + vh * 128, conv_dim + vh * 128 + vh))
        pos_dev = torch.tensor([p], dtype=torch.int32, device="cuda")
        pos, pdev = (-5, pos_dev.data_ptr()) if pos_on_device else (p, 0)
        conv_out = torch.full((1, conv_dim), float("nan"), device="cuda")
        nat.op_conv(x.data_ptr(), ldp, 1, conv_dim, Kc, conv_w.data_ptr(), ring_a.data_ptr(), pos, conv_out.data_ptr(),
                    pdev)
        out_a = torch.full((1, vh * 128), float("nan"), device="cuda").half()
        nat.op_gdn(conv_out.data_ptr(), zp, bp, ap, ldp, 1, kh, vh, eps, a_log.data_ptr(), dt_bias.data_ptr(),
                   norm_w.data_ptr(), S_a.data_ptr(), out_a.data_ptr())
        out_b = torch.full((1, vh * 128), float("nan"), device="cuda").half()
        nat.op_gdn_conv(x.data_ptr(), zp, bp, ap, kh, vh, eps, Kc, conv_w.data_ptr(), ring_b.data_ptr(), pos,
                        a_log.data_ptr(), dt_bias.data_ptr(), norm_w.data_ptr(), S_b.data_ptr(), out_b.data_ptr(), pdev)
        assert not out_b.isnan().any()
        assert torch.equal(ring_a, ring_b)
        assert rel_err(S_b, S_a) < TOL_FP32
        assert rel_err(out_b.float(), out_a.float()) < TOL_FP16_OUT


@pytest.mark.parametrize("Kc, p0", [(4, 0), (4, 1001), (2, 5), (3, 2)])
def test_gdn_conv_step_ring_loads_equal_window_loads(nat, Kc, p0):
    """set_gdn_conv_ring: the decode step's conv windows read as whole rings before the PDL wait and picked out by the
    position after it give the same outputs, state and ring as the windows addressed by the position: equal bit for
    bit, over three steps in a row with the position on the device (as in a captured step)."""
    kh, vh = 4, 12
    gen = torch.Generator(device="cuda").manual_seed(Kc * 10 + p0)
    conv_dim, conv_w, a_log, dt_bias, norm_w, ring0, S0 = _gdn_conv_case(kh, vh, Kc, p0, gen)
    ldp = conv_dim + vh * 128 + 2 * vh
    runs = {on: (ring0.clone(), S0.clone(), []) for on in (True, False)}
    xs = [torch.randn(1, ldp, device="cuda", generator=gen) for _ in range(3)]
    try:
        for on, (ring, S, outs) in runs.items():
            nat.set_gdn_conv_ring(on)
            for step, x in enumerate(xs):
                zp, bp, ap = (x.data_ptr() + off * 4 for off in (conv_dim, conv_dim + vh * 128, conv_dim + vh * 128 + vh))
                pos_dev = torch.tensor([p0 + step], dtype=torch.int32, device="cuda")
                out = torch.full((1, vh * 128), float("nan"), device="cuda").half()
                nat.op_gdn_conv(x.data_ptr(), zp, bp, ap, kh, vh, 1e-6, Kc, conv_w.data_ptr(), ring.data_ptr(), -5,
                                a_log.data_ptr(), dt_bias.data_ptr(), norm_w.data_ptr(), S.data_ptr(), out.data_ptr(),
                                pos_dev.data_ptr())
                outs.append(out)
    finally:
        nat.set_gdn_conv_ring(True)
    (ring_a, S_a, outs_a), (ring_b, S_b, outs_b) = runs[True], runs[False]
    assert not any(o.isnan().any() for o in outs_a)
    assert all(torch.equal(a, b) for a, b in zip(outs_a, outs_b))
    assert torch.equal(ring_a, ring_b) and torch.equal(S_a, S_b)


def test_gdn_conv_step_writes_the_lanes_layout(nat):
    # with out_layout 1 the step writes the same values in the order gdn_out's GEMV reads (ops.h GEMV_X_LANES)
    gen = torch.Generator(device="cuda").manual_seed(41)
    kh, vh, Kc, p = 4, 12, 4, 9
    conv_dim = 2 * kh * 128 + vh * 128
    ldp = conv_dim + vh * 128 + 2 * vh
    conv_w = torch.randn(conv_dim, Kc, device="cuda", generator=gen) * 0.5
    a_log, dt_bias = (torch.randn(vh, device="cuda", generator=gen) * 0.5 for _ in range(2))
    norm_w = torch.rand(128, device="cuda", generator=gen) + 0.5
    ring0 = torch.randn(conv_dim, Kc, device="cuda", generator=gen)
    S0 = (torch.randn(vh, 128, 128, device="cuda", generator=gen) * 0.1).contiguous()
    x = torch.randn(1, ldp, device="cuda", generator=gen)
    zp, bp, ap = (x.data_ptr() + off * 4 for off in (conv_dim, conv_dim + vh * 128, conv_dim + vh * 128 + vh))

    def step(layout):
        ring, S = ring0.clone(), S0.clone()
        out = torch.full((1, vh * 128), float("nan"), device="cuda").half()
        nat.op_gdn_conv(x.data_ptr(), zp, bp, ap, kh, vh, 1e-6, Kc, conv_w.data_ptr(), ring.data_ptr(), p,
                        a_log.data_ptr(), dt_bias.data_ptr(), norm_w.data_ptr(), S.data_ptr(), out.data_ptr(),
                        out_layout=layout)
        return out

    lanes = step(X_LANES)
    assert not lanes.isnan().any()
    assert torch.equal(from_lanes(lanes), from_perm8(step(X_PERM8)))


def rope_oracle(x, pos3, inv_freq, sec, rot):
    """x [..., hd] fp64, pos3 (t, h, w); NeoX partial rope with interleaved mRoPE."""
    half = rot // 2
    axis = []
    for i in range(half):
        ax = 1 if (i % 3 == 1 and i < 3 * sec[1]) else 2 if (i % 3 == 2 and i < 3 * sec[2]) else 0
        axis.append(ax)
    ang = torch.tensor([pos3[axis[i]] * float(inv_freq[i]) for i in range(half)], dtype=torch.float64, device=x.device)
    ang = torch.cat([ang, ang])
    xr = x[..., :rot]
    rotated = torch.cat([-xr[..., half:], xr[..., :half]], -1)
    return torch.cat([xr * ang.cos() + rotated * ang.sin(), x[..., rot:]], -1)


@pytest.mark.parametrize("variant", [0, 1, 2, 3])
@pytest.mark.parametrize("kv_int8", [0, 1])
@pytest.mark.parametrize("T, kv_start", [(1, 0), (1, 5000), (3, 777), (16, 300), (1, 70001)])
def test_attention_decode(nat, variant, kv_int8, T, kv_start):
    default = nat.get_attn_variant()
    nat.set_attn_variant(variant)
    try:
        _attention_case(nat, kv_int8, T, kv_start)
    finally:
        nat.set_attn_variant(default)


def _attention_case(nat, kv_int8, T, kv_start):
    nh, nkv, hd, rot, eps = 24, 4, 256, 64, 1e-6
    sec = [11, 11, 10]
    cap = kv_start + T + 5
    ldp = 2 * nh * hd + 2 * nkv * hd
    qkv = torch.randn(T, ldp, device="cuda")
    q_norm = torch.randn(hd, device="cuda") * 0.1
    k_norm = torch.randn(hd, device="cuda") * 0.1
    inv_freq = (1.0 / (1e7 ** (torch.arange(0, rot, 2, dtype=torch.float32) / rot))).cuda()
    pos = [(kv_start + t + 10, kv_start + t + 3, kv_start + t) for t in range(T)]  # distinct axes
    inp = step_inputs([0] * T, pos, kv_start)
    if kv_int8:
        kc = torch.randint(-127, 128, (cap, nkv, hd), dtype=torch.int8, device="cuda")
        vc = torch.randint(-127, 128, (cap, nkv, hd), dtype=torch.int8, device="cuda")
        ks = (torch.rand(cap, nkv, hd // 64, device="cuda") * 0.02 + 0.001).half()
        vs = (torch.rand(cap, nkv, hd // 64, device="cuda") * 0.02 + 0.001).half()
    else:
        kc = torch.randn(cap, nkv, hd, device="cuda").bfloat16()
        vc = torch.randn(cap, nkv, hd, device="cuda").bfloat16()
        ks = vs = torch.zeros(1, device="cuda")
    q_buf = torch.empty(T, nh, hd, device="cuda")
    parts = torch.empty(T, nh, nat.MAX_ATTN_SPLITS, hd + 2, device="cuda")
    out = torch.full((T, nh * hd), float("nan"), device="cuda").half()
    nat.op_attention(qkv.data_ptr(), ldp, T, nh, nkv, rot, eps, kv_int8, q_norm.data_ptr(), k_norm.data_ptr(),
                     inv_freq.data_ptr(), sec, inp.data_ptr(), q_buf.data_ptr(), kc.data_ptr(), vc.data_ptr(),
                     ks.data_ptr(), vs.data_ptr(), parts.data_ptr(), out.data_ptr())
    q, gate, k_new, v_new = split_qkv_f64(qkv, nh, nkv, hd, q_norm, k_norm, eps)
    q = torch.stack([rope_oracle(q[t], pos[t], inv_freq, sec, rot) for t in range(T)])
    k_new = torch.stack([rope_oracle(k_new[t], pos[t], inv_freq, sec, rot) for t in range(T)])
    # the appended entries: exact for bf16 rounding, within half a quantization step for int8
    if kv_int8:
        deq = lambda c, s: c.double() * s.double().repeat_interleave(64, -1)  # noqa: E731
        K = deq(kc, ks)
        V = deq(vc, vs)
        new = slice(kv_start, kv_start + T)
        step_k = ks[new].double().repeat_interleave(64, -1)
        # half a quantization step plus the fp32 rotary error, which grows with the position: the fp32
        # angle pos * inv_freq carries about pos * 2^-24 rad (2e-3 at 70K), a fraction of k's row
        rope = 1e-3 * k_new.abs() + 4e-8 * (kv_start + T) * k_new.abs().amax(-1, keepdim=True)
        assert ((K[new] - k_new).abs() <= step_k * 0.5 + rope).all()
        assert ((V[new] - v_new).abs() <= vs[new].double().repeat_interleave(64, -1) * 0.5 + 1e-3 * v_new.abs()).all()
    else:
        K, V = kc.double(), vc.double()
        assert rel_err(K[kv_start:kv_start + T], k_new) < 4e-3  # bf16 rounding
    ref = torch.empty(T, nh, hd, dtype=torch.float64, device="cuda")
    for t in range(T):
        L = kv_start + t + 1
        for h in range(nh):
            s = (K[:L, h // (nh // nkv)] @ q[t, h]) / math.sqrt(hd)
            ref[t, h] = torch.softmax(s, 0) @ V[:L, h // (nh // nkv)]
    ref = (ref * torch.sigmoid(gate)).reshape(T, nh * hd)
    got = from_perm8(out.float())
    assert not got.isnan().any()
    assert rel_err(got, ref) < TOL_ATTN


def _sample(nat, logits, params, counts=None, kv_start=0):
    """Row t draws with index kv_start + t (the draw index stands in for the position here)."""
    T, V = logits.shape
    inp = step_inputs([0] * T, [(kv_start + t,) * 3 for t in range(T)], kv_start, draw=kv_start)
    scratch = torch.empty(T, V, device="cuda")
    out = torch.full((T,), -1, dtype=torch.int32, device="cuda")
    nat.op_sample(logits.data_ptr(), T, V, params, 0 if counts is None else counts.data_ptr(), inp.data_ptr(),
                  scratch.data_ptr(), out.data_ptr())
    return out.cpu().tolist()


def test_sampling_greedy_and_penalties(nat):
    V = 248320
    logits = torch.randn(4, V, device="cuda") * 3
    assert _sample(nat, logits, {}) == logits.argmax(-1).tolist()
    # ids at or above vocab_limit are never chosen
    lim = 248077
    logits[:, lim + 5] = 100.0
    assert _sample(nat, logits, {"vocab_limit": lim}) == logits[:, :lim].argmax(-1).tolist()
    # repetition penalty on the top token of row 0 (HF rule: divide positive logits by the penalty)
    counts = torch.zeros(V, dtype=torch.int32, device="cuda")
    top = int(logits[0, :lim].argmax())
    counts[top] = 2
    adj = logits[0, :lim].clone()
    adj[top] = adj[top] / 50.0 - 0.5 - 0.25 * 2
    got = _sample(nat, logits[:1].contiguous(), {"vocab_limit": lim, "repetition_penalty": 50.0,
                                                  "presence_penalty": 0.5, "frequency_penalty": 0.25}, counts)
    assert got == [int(adj.argmax())]


def test_sampling_distribution_topk_topp_minp_and_replay(nat):
    V = 1000
    base = torch.randn(V, device="cuda") * 2
    params = {"temperature": 0.8, "top_k": 40, "top_p": 0.8, "min_p": 0.02, "seed": 1234}
    # expected distribution (HF order: temperature, top-k, top-p, min-p), in fp64
    l = base.double() / 0.8
    keep = l >= torch.topk(l, 40).values[-1]
    p = torch.softmax(torch.where(keep, l, torch.tensor(-math.inf, dtype=torch.float64, device="cuda")), 0)
    order = torch.argsort(p, descending=True)
    csum = torch.cumsum(p[order], 0)
    n_keep = int((csum < 0.8).sum()) + 1
    keep2 = torch.zeros(V, dtype=torch.bool, device="cuda")
    keep2[order[:n_keep]] = True
    p2 = torch.where(keep2, p, torch.zeros_like(p))
    keep3 = keep2 & (p2 >= 0.02 * p2.max())
    expect = torch.where(keep3, p2, torch.zeros_like(p2))
    expect = expect / expect.sum()
    T, rounds = 16, 250
    logits = base.expand(T, V).contiguous()
    counts = torch.zeros(V, dtype=torch.float64)
    for r in range(rounds):
        for tok in _sample(nat, logits, params, kv_start=r * T):
            counts[tok] += 1
    n = T * rounds
    freq = counts / n
    assert counts[~keep3.cpu()].sum() == 0, "sampled a token outside the kept set"
    sigma = torch.sqrt(expect.cpu() * (1 - expect.cpu()) / n)
    assert ((freq - expect.cpu()).abs() <= 5 * sigma + 1e-9).all()
    # replay: same seed and positions give the same tokens; another seed differs somewhere
    a = _sample(nat, logits, params, kv_start=4096)
    assert a == _sample(nat, logits, params, kv_start=4096)
    assert a != _sample(nat, logits, {**params, "seed": 99}, kv_start=4096)


def test_cuda_error_becomes_exception_naming_the_op(nat):
    x = torch.zeros(1, 64, device="cuda")
    w = torch.zeros(64, device="cuda")
    out = torch.zeros(1, 64, device="cuda").half()
    with pytest.raises(nat.CudaError, match="rmsnorm"):
        nat.op_rmsnorm(x.data_ptr(), 0, 64, w.data_ptr(), 1e-6, True, out.data_ptr())  # empty grid
    # the process and the context survive: the next op works
    x.normal_()
    nat.op_rmsnorm(x.data_ptr(), 1, 64, w.data_ptr(), 1e-6, True, out.data_ptr())
    assert torch.isfinite(out.float()).all()


@pytest.mark.parametrize("variant", QGEMV_COL_VARIANTS)
def test_qgemv_col_variants_are_deterministic_and_close_to_the_row_walk(nat, variant):
    """The column split sums a row's columns in a fixed order: the same bits on every call (no atomics, no
    launch-order dependence), and within float reassociation of variant 1 (the same per-chunk arithmetic)."""
    N, K = 5120, 17408
    gen = torch.Generator(device="cuda").manual_seed(variant)
    codes, scales, wd = _random_q4(N, K, gen)
    x = to_perm8(torch.randn(1, K, device="cuda", generator=gen).half())
    outs = []
    for v in (variant, variant, 1):
        out = torch.full((1, N), float("nan"), device="cuda")
        with forced_qgemv_variant(nat, v):
            nat.op_qgemv(codes.data_ptr(), 0, scales.data_ptr(), N, K, 4, 64, x.data_ptr(), 1, 0, out.data_ptr(), 0, N)
        outs.append(out)
    assert torch.equal(outs[0], outs[1])
    assert rel_err(outs[0], outs[2]) < 1e-5
