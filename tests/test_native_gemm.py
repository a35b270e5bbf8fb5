"""The prefill GEMM (qgemm: dequantize slice by slice + cuBLAS) against an fp64 torch oracle of the
dequantized weight (marked gpu; skipped without one).

Inputs are fresh random draws, outputs are poisoned with NaN first (columns past N in a row stride
ldo > N must stay NaN), and small workspaces force several slices. `pytest -s` also prints a
performance probe (TFLOP/s of qgemm vs torch fp16 matmul on the 27B shapes); nothing is asserted on it."""

from __future__ import annotations

import pytest

from native_helpers import TOL_FP16_OUT, from_perm8, perm8_index, quantized, rel_err, requires_gpu, to_perm8

pytestmark = [pytest.mark.gpu, requires_gpu]

torch = pytest.importorskip("torch")

# The dequantized weight is rounded once to fp16 (relative <= 2^-11 = 4.9e-4 per element, ~3e-4 rms),
# x is fp16 already, products and sums are fp32 in cuBLAS: relative Frobenius error ~3e-4.
TOL_GEMM = 1e-3

STORE, ADD, SWIGLU = 0, 1, 2
MiB = 1 << 20


class Workspace:
    """Device buffers of a GemmWorkspace (torch allocations are >= 256-byte aligned)."""

    def __init__(self, dequant_bytes, scratch_bytes=0, cublas_bytes=4 * MiB):
        self.dq = torch.empty(max(dequant_bytes, 1), dtype=torch.uint8, device="cuda")
        self.cb = torch.empty(max(cublas_bytes, 1), dtype=torch.uint8, device="cuda")
        self.sc = torch.empty(max(scratch_bytes, 1), dtype=torch.uint8, device="cuda")
        self.sizes = (dequant_bytes, cublas_bytes, scratch_bytes)

    def args(self):
        d, c, s = self.sizes
        return (self.dq.data_ptr(), d, self.cb.data_ptr(), c, self.sc.data_ptr(), s)


def call(nat, codes, high, scales, N, K, bits, group, xp, T, epi, out_f32, out_h, ldo, ws):
    nat.op_qgemm(codes.data_ptr(), 0 if high is None else high.data_ptr(), scales.data_ptr(), N, K, bits, group,
                 xp.data_ptr(), T, epi, 0 if out_f32 is None else out_f32.data_ptr(),
                 0 if out_h is None else out_h.data_ptr(), ldo, *ws.args())


@pytest.mark.parametrize("bits", [4, 5, 6, 8])
@pytest.mark.parametrize("group", [32, 64])
@pytest.mark.parametrize("T", [17, 33, 100, 1024])
def test_qgemm_store_and_residual_add_in_slices(nat, bits, group, T):
    gen = torch.Generator().manual_seed(bits * 1000 + group * 10 + T)
    N, K = 300, 1152  # N not a multiple of 64: slices 64, 64, 64, 64, 44
    ldo = N + 3       # odd row stride: unaligned output rows for cuBLAS
    q, codes, high, scales, wd = quantized(N, K, bits, group, gen)
    ws = Workspace(dequant_bytes=100 * K * 2)  # 100 rows fit -> 64-row slices
    assert nat.qgemm_slice_rows(N, K, T, STORE, 100 * K * 2, 0) == 64
    x = torch.randn(T, K, generator=gen).half().cuda()
    xp = to_perm8(x)
    ref = (wd @ x.double().T).T  # [T, N]

    out = torch.full((T, ldo), float("nan"), device="cuda")
    call(nat, codes, high, scales, N, K, bits, group, xp, T, STORE, out, None, ldo, ws)
    assert not out[:, :N].isnan().any()
    assert out[:, N:].isnan().all()  # nothing written past N
    assert rel_err(out[:, :N], ref) < TOL_GEMM

    res = torch.randn(T, ldo, device="cuda")
    res[:, N:] = float("nan")
    acc = res.clone()
    call(nat, codes, high, scales, N, K, bits, group, xp, T, ADD, acc, None, ldo, ws)
    assert acc[:, N:].isnan().all()
    assert rel_err(acc[:, :N] - res[:, :N], ref) < 2 * TOL_GEMM


@pytest.mark.parametrize("bits", [4, 8])
@pytest.mark.parametrize("N", [250, 64, 40])
def test_qgemm_one_slice_when_all_rows_fit(nat, bits, N):
    # all N rows in one slice (N = 250 and 40: not a multiple of 64; 40 < 64 with a workspace of exactly N rows)
    gen = torch.Generator().manual_seed(N + bits)
    K, T = 512, 17
    q, codes, high, scales, wd = quantized(N, K, bits, 64, gen)
    ws = Workspace(dequant_bytes=N * K * 2)
    assert nat.qgemm_slice_rows(N, K, T, STORE, N * K * 2, 0) == N
    x = torch.randn(T, K, generator=gen).half().cuda()
    out = torch.full((T, N), float("nan"), device="cuda")
    call(nat, codes, high, scales, N, K, bits, 64, to_perm8(x), T, STORE, out, None, N, ws)
    assert not out.isnan().any()
    assert rel_err(out, (wd @ x.double().T).T) < TOL_GEMM


@pytest.mark.parametrize("bits", [4, 5, 6, 8])
@pytest.mark.parametrize("T", [17, 100, 1024])
@pytest.mark.parametrize("bound", ["scratch", "dequant"])
def test_qgemm_swiglu_in_slices(nat, bits, T, bound):
    gen = torch.Generator().manual_seed(bits * 100 + T + len(bound))
    I, K = 200, 512  # 2I = 400 rows (not a multiple of 64), interleaved (gate_p, up_p)
    N, ldo = 2 * I, I + 8
    q, codes, high, scales, wd = quantized(N, K, bits, 64, gen)
    if bound == "scratch":  # scratch holds 130 rows of T tokens -> 128-row slices; dequant is roomy
        dq, sc, rows = N * K * 2, 130 * T * 4, 128
    else:                   # dequant holds 70 rows -> 64-row slices; scratch is roomy
        dq, sc, rows = 70 * K * 2, N * T * 4, 64
    assert nat.qgemm_slice_rows(N, K, T, SWIGLU, dq, sc) == rows
    ws = Workspace(dequant_bytes=dq, scratch_bytes=sc)
    x = torch.randn(T, K, generator=gen).half().cuda()
    y = (wd @ x.double().T).T
    ref = torch.nn.functional.silu(y[:, 0::2]) * y[:, 1::2]
    out = torch.full((T, ldo), float("nan"), device="cuda").half()
    call(nat, codes, high, scales, N, K, bits, 64, to_perm8(x), T, SWIGLU, None, out, ldo, ws)
    assert out[:, I:].isnan().all()
    got = from_perm8(out[:, :I].float())
    assert not got.isnan().any()
    assert rel_err(got, ref) < TOL_GEMM + TOL_FP16_OUT


@pytest.fixture
def overlap_off(nat):
    nat.set_qgemm_overlap(False)
    yield
    nat.set_qgemm_overlap(True)


@pytest.mark.parametrize("bits", [4, 5, 6, 8])
@pytest.mark.parametrize("epi", [STORE, ADD, SWIGLU])
def test_qgemm_overlapped_slices_match_oracle(nat, bits, epi):
    """Dequant of slice i + 1 on the side stream while slice i multiplies: a workspace of 300 rows is two
    buffers of 150 -> 128-row slices, so N = 704 takes 6 slices through both buffers. Three calls on
    different weights are queued back to back before any result is read, so a buffer rewritten before
    the GEMM that reads it would show up as a wrong output."""
    gen = torch.Generator().manual_seed(bits * 10 + epi)
    N, K, T = 704, 640, 96  # N / 2 a multiple of 8 (perm8 output)
    ws = Workspace(dequant_bytes=300 * K * 2, scratch_bytes=N * T * 4)
    x = torch.randn(T, K, generator=gen).half().cuda()
    mats = [quantized(N, K, bits, 64, gen) for _ in range(3)]
    ldo = N // 2 if epi == SWIGLU else N
    outs, refs = [], []
    for q, codes, high, scales, wd in mats:
        y = (wd @ x.double().T).T
        if epi == SWIGLU:
            out = torch.full((T, ldo), float("nan"), device="cuda").half()
            refs.append(torch.nn.functional.silu(y[:, 0::2]) * y[:, 1::2])
            call(nat, codes, high, scales, N, K, bits, 64, to_perm8(x), T, epi, None, out, ldo, ws)
        else:
            base = torch.randn(T, N, generator=gen).cuda() if epi == ADD else torch.zeros(T, N, device="cuda")
            out = base.clone()
            refs.append(y + base.double())
            call(nat, codes, high, scales, N, K, bits, 64, to_perm8(x), T, epi, out, None, ldo, ws)
        outs.append(out)
    for out, ref in zip(outs, refs):
        got = from_perm8(out.float()) if epi == SWIGLU else out
        assert not got.isnan().any()
        assert rel_err(got, ref) < TOL_GEMM + TOL_FP16_OUT


@pytest.mark.parametrize("bits", [4, 6])
def test_qgemm_without_overlap_matches_oracle(nat, overlap_off, bits):
    gen = torch.Generator().manual_seed(77 + bits)
    N, K, T = 700, 640, 33
    q, codes, high, scales, wd = quantized(N, K, bits, 64, gen)
    ws = Workspace(dequant_bytes=300 * K * 2)
    x = torch.randn(T, K, generator=gen).half().cuda()
    out = torch.full((T, N), float("nan"), device="cuda")
    call(nat, codes, high, scales, N, K, bits, 64, to_perm8(x), T, STORE, out, None, N, ws)
    assert rel_err(out, (wd @ x.double().T).T) < TOL_GEMM


def test_qgemm_workspace_too_small(nat):
    gen = torch.Generator().manual_seed(5)
    N, K, T = 300, 1152, 33
    q, codes, high, scales, wd = quantized(N, K, 4, 64, gen)
    x = to_perm8(torch.randn(T, K, generator=gen).half().cuda())
    out = torch.full((T, N), float("nan"), device="cuda")
    ws = Workspace(dequant_bytes=63 * K * 2)  # not even 64 rows
    with pytest.raises(ValueError, match="workspace too small"):
        call(nat, codes, high, scales, N, K, 4, 64, x, T, STORE, out, None, N, ws)
    with pytest.raises(ValueError, match="workspace too small"):
        nat.qgemm_slice_rows(N, K, T, STORE, 63 * K * 2, 0)
    # SwiGLU: the dequant slice fits, the fp32 scratch for T tokens does not
    outh = torch.full((T, N // 2), float("nan"), device="cuda").half()
    ws = Workspace(dequant_bytes=N * K * 2, scratch_bytes=63 * T * 4)
    with pytest.raises(ValueError, match="SwiGLU scratch"):
        call(nat, codes, high, scales, N, K, 4, 64, x, T, SWIGLU, None, outh, N // 2, ws)
    # the failed calls left the op usable
    ws = Workspace(dequant_bytes=N * K * 2)
    call(nat, codes, high, scales, N, K, 4, 64, x, T, STORE, out, None, N, ws)
    assert rel_err(out, (wd @ from_perm8(x).double().T).T) < TOL_GEMM


def random_q4(n, k, gen, device="cpu"):
    """A random 4-bit group-64 matrix (codes and scales drawn directly: fast at 27B sizes)."""
    from engine.quant import QuantizedTensor
    codes = torch.randint(0, 256, (n, k // 2), generator=gen, dtype=torch.uint8)
    scales = (torch.rand(n, k // 64, generator=gen) * 0.01 + 0.005).half()
    return QuantizedTensor(4, 64, codes, None, scales, (n, k))


def test_qgemm_27b_gate_up_swiglu(nat):
    # the real MLP gate_up: 2 x 17408 interleaved rows from K = 5120, a 1024-token prefill chunk,
    # 64 MiB dequant workspace (6528-row slices); checked against the oracle on rows of every slice
    from engine.quant import QuantizedTensor
    gen = torch.Generator().manual_seed(27)
    N, K, T = 34816, 5120, 1024
    I = N // 2
    q = random_q4(N, K, gen)
    rows = nat.qgemm_slice_rows(N, K, T, SWIGLU, 64 * MiB, 32 * MiB)
    assert rows == 6528
    ws = Workspace(dequant_bytes=64 * MiB, scratch_bytes=32 * MiB, cublas_bytes=32 * MiB)
    x = torch.randn(T, K, generator=gen).half()
    out = torch.full((T, I), float("nan"), device="cuda").half()
    call(nat, q.codes.cuda(), None, q.scales.cuda(), N, K, 4, 64, to_perm8(x).cuda(), T, SWIGLU, None, out, I, ws)
    pairs = sorted({0, 1, 7, rows // 2 - 1, rows // 2, rows // 2 + 5, 2 * rows // 2 + 3, 5 * rows // 2 - 1,
                    5 * rows // 2, I - 9, I - 1})
    sel = torch.tensor([r for p in pairs for r in (2 * p, 2 * p + 1)])
    wq = QuantizedTensor(4, 64, q.codes[sel].contiguous(), None, q.scales[sel].contiguous(), (len(sel), K))
    y = (wq.dequantize().double() @ x.double().T).T  # [T, 2 * len(pairs)]
    ref = torch.nn.functional.silu(y[:, 0::2]) * y[:, 1::2]
    pos = perm8_index(I)[torch.tensor(pairs)]  # buffer column of pair p
    got = out[:, pos.cuda()].double().cpu()
    assert not got.isnan().any()
    assert rel_err(got, ref) < TOL_GEMM + TOL_FP16_OUT
    assert not out.isnan().any()  # every pair was written


def _time_torch(fn, reps):
    for _ in range(3):
        fn()
    a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    a.record()
    for _ in range(reps):
        fn()
    b.record()
    torch.cuda.synchronize()
    return a.elapsed_time(b) / reps


def test_qgemm_performance_probe(nat):
    """Printed with -s, not asserted: qgemm (4-bit g64, 64 MiB dequant workspace) vs torch fp16 matmul."""
    gen = torch.Generator(device="cuda").manual_seed(1)
    shapes = [("gate_up", 2 * 17408, 5120, SWIGLU), ("down", 5120, 17408, ADD), ("gdn_in", 16480, 5120, STORE)]
    props = torch.cuda.get_device_properties(0)
    lines = [f"qgemm probe on {props.name}: 4-bit g64, dequant 64 MiB, cuBLAS ws 32 MiB"]
    for name, N, K, epi in shapes:
        codes = torch.randint(0, 256, (N, K // 2), generator=gen, device="cuda", dtype=torch.uint8)
        scales = (torch.rand(N, K // 64, generator=gen, device="cuda") * 0.01 + 0.005).half()
        wh = torch.randn(N, K, generator=gen, device="cuda").half() * 0.02
        for T in (1024, 2048, 4096):
            scratch = 4 * T * min(N, 8192) if epi == SWIGLU else 0
            ws = Workspace(dequant_bytes=64 * MiB, scratch_bytes=scratch, cublas_bytes=32 * MiB)
            x = (torch.randn(T, K, generator=gen, device="cuda") * 0.5).half()
            if epi == SWIGLU:
                out_f32, out_h, ldo = None, torch.empty(T, N // 2, device="cuda").half(), N // 2
            else:
                out_f32, out_h, ldo = torch.zeros(T, N, device="cuda"), None, N
            reps = 10
            ms = nat.op_qgemm_time(codes.data_ptr(), 0, scales.data_ptr(), N, K, 4, 64, x.data_ptr(), T, epi,
                                   0 if out_f32 is None else out_f32.data_ptr(),
                                   0 if out_h is None else out_h.data_ptr(), ldo, *ws.args(), reps)
            ms_t = _time_torch(lambda: torch.matmul(x, wh.T), reps)
            flop = 2.0 * T * N * K
            rows = nat.qgemm_slice_rows(N, K, T, epi, 64 * MiB, scratch)
            lines.append(f"  {name:8s} N={N:5d} K={K:5d} T={T:4d}: qgemm {ms:7.3f} ms {flop / ms / 1e9:6.1f} TFLOP/s "
                         f"({-(-N // rows)} slices of {rows}); torch fp16 {ms_t:7.3f} ms {flop / ms_t / 1e9:6.1f} TFLOP/s")
            del ws, x, out_f32, out_h
        del codes, scales, wh
    print("\n" + "\n".join(lines))
