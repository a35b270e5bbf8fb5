"""Decode attention split-kernel variant 4 (flash-decode: cp.async rings, ldmatrix, both products on tensor
cores; csrc/cuda/attention.cu) on the GPU (marked gpu; skipped without one).

Covers: the fp64 oracle of test_native_ops._attention_case under variant 4 for bf16 and int8 KV on the same
(T, kv_start) grid as test_attention_decode plus the edges of this kernel (a single chunk, tokens whose last
split is empty, T = 16 across a split boundary); a long cache (kv_start ~70,000, T = 1 and 4) compared with
variant 0 on the same cache; the variant bounds; and a timing probe at 128K (printed with -s, not asserted).
Outputs are poisoned with NaN before each call (inside _attention_case and _run here)."""

from __future__ import annotations

import pytest

from native_helpers import TOL_ATTN, from_perm8, rel_err, requires_gpu, step_inputs
from test_native_ops import _attention_case

pytestmark = [pytest.mark.gpu, requires_gpu]

torch = pytest.importorskip("torch")

NH, NKV, HD, ROT, EPS = 24, 4, 256, 64, 1e-6
SEC = [11, 11, 10]
VARIANT = 4


class variant:
    """Context manager: run under attention variant v, restore the previous one afterwards."""

    def __init__(self, nat, v):
        self.nat, self.v = nat, v

    def __enter__(self):
        self.prev = self.nat.get_attn_variant()
        self.nat.set_attn_variant(self.v)

    def __exit__(self, *exc):
        self.nat.set_attn_variant(self.prev)


# test_attention_decode's grid, then this kernel's edges: (2, 0) two tokens in one 16-position chunk;
# (16, 250) tokens 0..5 see an empty second split (early-exit partials); (5, 4093) a partial last chunk in
# the 16th split; (1, 33000) 256-position splits, 8 chunks per warp.
GRID = [(1, 0), (1, 5000), (3, 777), (16, 300), (1, 70001), (2, 0), (16, 250), (5, 4093), (1, 33000)]


@pytest.mark.parametrize("kv_int8", [0, 1])
@pytest.mark.parametrize("T, kv_start", GRID)
def test_attention_decode_v4(nat, kv_int8, T, kv_start):
    with variant(nat, VARIANT):
        _attention_case(nat, kv_int8, T, kv_start)


def test_variant_bounds(nat):
    prev = nat.get_attn_variant()
    with pytest.raises(ValueError):
        nat.set_attn_variant(5)
    with pytest.raises(ValueError):
        nat.set_attn_variant(-1)
    assert nat.get_attn_variant() == prev


class Cache:
    """Random inputs and a filled cache of kv_start + T + 5 slots (int8 codes with fp16 scales, or bf16)."""

    def __init__(self, kv_int8, T, kv_start, seed=0):
        g = torch.Generator(device="cuda").manual_seed(seed)
        self.kv_int8, self.T, self.kv_start = kv_int8, T, kv_start
        cap = kv_start + T + 5
        self.ldp = 2 * NH * HD + 2 * NKV * HD
        self.qkv = torch.randn(T, self.ldp, device="cuda", generator=g)
        self.q_norm = torch.randn(HD, device="cuda", generator=g) * 0.1
        self.k_norm = torch.randn(HD, device="cuda", generator=g) * 0.1
        self.inv_freq = (1.0 / (1e7 ** (torch.arange(0, ROT, 2, dtype=torch.float32) / ROT))).cuda()
        pos = [(kv_start + t + 10, kv_start + t + 3, kv_start + t) for t in range(T)]
        self.inp = step_inputs([0] * T, pos, kv_start)
        shape = (cap, NKV, HD)
        if kv_int8:
            self.kc = torch.randint(-127, 128, shape, dtype=torch.int8, device="cuda", generator=g)
            self.vc = torch.randint(-127, 128, shape, dtype=torch.int8, device="cuda", generator=g)
            self.ks = (torch.rand(cap, NKV, HD // 64, device="cuda", generator=g) * 0.02 + 0.001).half()
            self.vs = (torch.rand(cap, NKV, HD // 64, device="cuda", generator=g) * 0.02 + 0.001).half()
        else:
            self.kc = torch.randn(shape, device="cuda", generator=g).bfloat16()
            self.vc = torch.randn(shape, device="cuda", generator=g).bfloat16()
            self.ks = self.vs = torch.zeros(1, device="cuda")
        self.q_buf = torch.empty(T, NH, HD, device="cuda")
        self.parts = None
        self.out = torch.empty(T, NH * HD, device="cuda").half()

    def run(self, nat):
        """One attention call (prep + split + combine); the cache append is the same for every variant."""
        if self.parts is None:
            self.parts = torch.empty(self.T, NH, nat.MAX_ATTN_SPLITS, HD + 2, device="cuda")
        self.out.fill_(float("nan"))
        nat.op_attention(self.qkv.data_ptr(), self.ldp, self.T, NH, NKV, ROT, EPS, self.kv_int8,
                         self.q_norm.data_ptr(), self.k_norm.data_ptr(), self.inv_freq.data_ptr(), SEC,
                         self.inp.data_ptr(), self.q_buf.data_ptr(), self.kc.data_ptr(), self.vc.data_ptr(),
                         self.ks.data_ptr(), self.vs.data_ptr(), self.parts.data_ptr(), self.out.data_ptr())
        return from_perm8(self.out.float())


@pytest.mark.parametrize("kv_int8", [0, 1])
@pytest.mark.parametrize("T, kv_start", [(1, 69_997), (4, 70_013)])
def test_long_cache_matches_variant0(nat, kv_int8, T, kv_start):
    c = Cache(kv_int8, T, kv_start, seed=T + 10 * kv_int8)
    with variant(nat, 0):
        ref = c.run(nat).clone()
    with variant(nat, VARIANT):
        got = c.run(nat)
    assert not ref.isnan().any()
    assert not got.isnan().any()
    err = rel_err(got, ref)
    assert err < TOL_ATTN, f"variant {VARIANT} vs 0: rel err {err:.3e}"


def _time_call(nat, c, reps):
    for _ in range(3):
        c.run(nat)
    a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    a.record()
    for _ in range(reps):
        c.run(nat)
    b.record()
    torch.cuda.synchronize()
    return a.elapsed_time(b) / reps


def test_attention_decode_timing_probe(nat):
    """Printed with -s, not asserted: ms per attention call (attn_prep + attn_split + attn_combine, one layer)
    at 128K context, T = 1, variants 2 and 4, int8 and bf16 KV.

    Byte floor: the split kernel must read the whole K and V of its 4 kv heads once per call:
    131,072 positions x 4 heads x 256 dims x (1 byte int8 | 2 bytes bf16) x 2 (K and V), plus the int8 fp16
    group scales (4 per row, 2 x 16 B per position and kv head): 0.28 GB (int8) / 0.54 GB (bf16). At the
    H200's ~4.3 TB/s copy bandwidth that is ~0.065 ms / ~0.125 ms per layer, i.e. ~1.0 ms / ~2.0 ms for
    the 16 attention layers of a decode step. Each op_attention call also synchronizes the stream (test
    binding), so the call at kv_start 0 is printed as the fixed overhead to subtract."""
    L = 131072
    reps = 20
    for kv_int8 in (1, 0):
        c = Cache(kv_int8, 1, L - 1, seed=5)
        c0 = Cache(kv_int8, 1, 0, seed=5)
        per_pos = NKV * HD * (1 if kv_int8 else 2) * 2 + (NKV * 16 if kv_int8 else 0)
        gb = L * per_pos / 1e9
        floor_ms = gb / 4.3  # GB / (TB/s) = ms
        name = "int8" if kv_int8 else "bf16"
        for v in (2, VARIANT):
            with variant(nat, v):
                base = _time_call(nat, c0, reps)
                t = _time_call(nat, c, reps)
                assert not c.run(nat).isnan().any()
            net = t - base
            print(f"\nattention decode {name} KV, T 1, 128K, variant {v}: {t:.3f} ms per call "
                  f"(kv_start 0: {base:.3f} ms; context part {net:.3f} ms = {gb / max(net, 1e-6):.2f} "
                  f"TB/s for {gb:.3f} GB; byte floor {floor_ms:.3f} ms at 4.3 TB/s); "
                  f"x16 layers: {16 * t:.2f} ms (floor {16 * floor_ms:.2f} ms)")
        del c, c0
        torch.cuda.empty_cache()
