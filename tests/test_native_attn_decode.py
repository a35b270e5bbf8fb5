"""Decode attention split-kernel variant 4 (flash-decode: cp.async rings, ldmatrix, both products on tensor
cores; csrc/cuda/attention.cu) on the GPU (marked gpu; skipped without one).

Covers: the fp64 oracle of test_native_ops._attention_case under variant 4 for bf16 and int8 KV on the same
(T, kv_start) grid as test_attention_decode plus the edges of this kernel (a single chunk, tokens whose last
split is empty, T = 16 across a split boundary); int4 KV on the same grid under variants 4..6 and 0 against
an fp64 oracle over the cache the kernel wrote (Cache.oracle), the appended rows within half a step; a long
cache (kv_start ~70,000, T = 1 and 4) compared with variant 0 on the same cache for all three formats;
variants 2 and 3 refusing int4; the variant bounds; and a timing probe at 128K (printed with -s, not
asserted). Outputs are poisoned with NaN before each call (inside _attention_case and Cache.run here)."""

from __future__ import annotations

import math

import pytest

from native_helpers import (TOL_ATTN, TOL_ATTN_INT4, from_perm8, int4_dequant, random_int4_cache, rel_err,
                            requires_gpu, split_qkv_f64, step_inputs)
from test_native_ops import _attention_case, rope_oracle

pytestmark = [pytest.mark.gpu, requires_gpu]

torch = pytest.importorskip("torch")

NH, NKV, HD, ROT, EPS = 24, 4, 256, 64, 1e-6
SEC = [11, 11, 10]
VARIANT = 4
V4_FAMILY = [4, 5, 6]  # 5 / 6: variant 4 with 3 / 4 warps per block and shallower rings (int8 / int4 KV)


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


@pytest.mark.parametrize("v", V4_FAMILY)
@pytest.mark.parametrize("kv_int8", [0, 1])
@pytest.mark.parametrize("T, kv_start", GRID)
def test_attention_decode_v4(nat, kv_int8, T, kv_start, v):
    with variant(nat, v):
        _attention_case(nat, kv_int8, T, kv_start)


def test_variant_bounds(nat):
    prev = nat.get_attn_variant()
    with pytest.raises(ValueError):
        nat.set_attn_variant(7)
    with pytest.raises(ValueError):
        nat.set_attn_variant(-2)
    assert nat.get_attn_variant() == prev
    assert prev == -1  # the route by KV format, unless a test left a variant forced


class Cache:
    """Random inputs and a filled cache of kv_start + T + 5 slots: kv 0 bf16, 1 int8 codes with fp16 scales,
    2 int4 codes (two per byte) with fp16 scales (the attention ops' kv format argument)."""

    def __init__(self, kv, T, kv_start, seed=0):
        g = torch.Generator(device="cuda").manual_seed(seed)
        self.kv, self.T, self.kv_start = kv, T, kv_start
        cap = kv_start + T + 5
        self.ldp = 2 * NH * HD + 2 * NKV * HD
        self.qkv = torch.randn(T, self.ldp, device="cuda", generator=g)
        self.q_norm = torch.randn(HD, device="cuda", generator=g) * 0.1
        self.k_norm = torch.randn(HD, device="cuda", generator=g) * 0.1
        self.inv_freq = (1.0 / (1e7 ** (torch.arange(0, ROT, 2, dtype=torch.float32) / ROT))).cuda()
        self.pos = pos = [(kv_start + t + 10, kv_start + t + 3, kv_start + t) for t in range(T)]
        self.inp = step_inputs([0] * T, pos, kv_start)
        shape = (cap, NKV, HD)
        if kv == 2:
            self.kc, self.ks = random_int4_cache(cap, NKV, HD, g)
            self.vc, self.vs = random_int4_cache(cap, NKV, HD, g)
        elif kv == 1:
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
        nat.op_attention(self.qkv.data_ptr(), self.ldp, self.T, NH, NKV, ROT, EPS, self.kv,
                         self.q_norm.data_ptr(), self.k_norm.data_ptr(), self.inv_freq.data_ptr(), SEC,
                         self.inp.data_ptr(), self.q_buf.data_ptr(), self.kc.data_ptr(), self.vc.data_ptr(),
                         self.ks.data_ptr(), self.vs.data_ptr(), self.parts.data_ptr(), self.out.data_ptr())
        return from_perm8(self.out.float())

    def oracle(self):
        """int4 only: the fp64 attention of the T tokens over the cache as run() left it (dequantized exactly),
        [T, NH * HD], after checking that the appended rows are the new K/V within half a quantization step."""
        assert self.kv == 2
        T, kv_start = self.T, self.kv_start
        q, gate, k_new, v_new = split_qkv_f64(self.qkv, NH, NKV, HD, self.q_norm, self.k_norm, EPS)
        q = torch.stack([rope_oracle(q[t], self.pos[t], self.inv_freq, SEC, ROT) for t in range(T)])
        k_new = torch.stack([rope_oracle(k_new[t], self.pos[t], self.inv_freq, SEC, ROT) for t in range(T)])
        K, V = int4_dequant(self.kc, self.ks), int4_dequant(self.vc, self.vs)
        new = slice(kv_start, kv_start + T)
        # half a step (the scale is absmax / 7 rounded to fp16, codes clamped to 7: still within half a
        # step), plus int8's allowance for the fp32 rotary angle at deep positions
        rope = 1e-3 * k_new.abs() + 4e-8 * (kv_start + T) * k_new.abs().amax(-1, keepdim=True)
        assert ((K[new] - k_new).abs() <= self.ks[new].double().repeat_interleave(64, -1) * 0.5 + rope).all()
        assert ((V[new] - v_new).abs() <= self.vs[new].double().repeat_interleave(64, -1) * 0.5
                + 1e-3 * v_new.abs()).all()
        G = NH // NKV
        ref = torch.empty(T, NH, HD, dtype=torch.float64, device="cuda")
        for t in range(T):
            L = kv_start + t + 1
            for hk in range(NKV):
                s = torch.einsum("gd,ld->gl", q[t, hk * G:(hk + 1) * G], K[:L, hk]) / math.sqrt(HD)
                ref[t, hk * G:(hk + 1) * G] = torch.softmax(s, -1) @ V[:L, hk]
        return (ref * torch.sigmoid(gate)).reshape(T, NH * HD)


@pytest.mark.parametrize("v", [*V4_FAMILY, 0])
@pytest.mark.parametrize("T, kv_start", GRID)
def test_attention_decode_int4(nat, v, T, kv_start):
    """int4 KV under the default variant (4) and the CUDA-core variant 0 against the fp64 oracle over the
    cache the kernel wrote: the kernel is compared, not the quantization (TOL_ATTN_INT4)."""
    c = Cache(2, T, kv_start, seed=T * 131 + kv_start)
    with variant(nat, v):
        got = c.run(nat)
    assert not got.isnan().any()
    err = rel_err(got, c.oracle())
    assert err < TOL_ATTN_INT4, f"variant {v}: rel err {err:.3e}"


@pytest.mark.parametrize("v", [2, 3])
def test_int4_refused_by_variants_2_and_3(nat, v):
    c = Cache(2, 1, 100)
    with variant(nat, v):
        with pytest.raises(ValueError, match=f"variant {v}"):
            c.run(nat)


@pytest.mark.parametrize("v", V4_FAMILY)
@pytest.mark.parametrize("kv", [0, 1, 2], ids=["bf16", "int8", "int4"])
@pytest.mark.parametrize("T, kv_start", [(1, 69_997), (4, 70_013)])
def test_long_cache_matches_variant0(nat, kv, T, kv_start, v):
    c = Cache(kv, T, kv_start, seed=T + 10 * kv)
    with variant(nat, 0):
        ref = c.run(nat).clone()
    with variant(nat, v):
        got = c.run(nat)
    assert not ref.isnan().any()
    assert not got.isnan().any()
    err = rel_err(got, ref)
    assert err < TOL_ATTN, f"variant {v} vs 0: rel err {err:.3e}"


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
    at 128K context, T = 1, variants 2 and 4..6, int8 and bf16 KV (int4: variants 0 and 4..6).

    Byte floor: the split kernel must read the whole K and V of its 4 kv heads once per call:
    131,072 positions x 4 heads x 256 dims x (1 byte int8 | 2 bytes bf16) x 2 (K and V), plus the int8 fp16
    group scales (4 per row, 2 x 16 B per position and kv head): 0.28 GB (int8) / 0.54 GB (bf16). At the
    H200's ~4.3 TB/s copy bandwidth that is ~0.065 ms / ~0.125 ms per layer, i.e. ~1.0 ms / ~2.0 ms for
    the 16 attention layers of a decode step. Each op_attention call also synchronizes the stream (test
    binding), so the call at kv_start 0 is printed as the fixed overhead to subtract."""
    L = 131072
    reps = 20
    for kv in (2, 1, 0):
        c = Cache(kv, 1, L - 1, seed=5)
        c0 = Cache(kv, 1, 0, seed=5)
        per_pos = NKV * HD * {0: 2, 1: 1, 2: 0.5}[kv] * 2 + (NKV * 16 if kv else 0)  # bytes per position
        gb = L * per_pos / 1e9
        floor_ms = gb / 4.3  # GB / (TB/s) = ms
        name = ("bf16", "int8", "int4")[kv]
        for v in ((0, *V4_FAMILY) if kv == 2 else (2, *V4_FAMILY)):
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
