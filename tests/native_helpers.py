"""Helpers shared by the native GPU tests: skip logic, perm8 layout, StepInputs, named tolerances."""

from __future__ import annotations

import pytest

from engine.native import native_status

STATUS = native_status()
requires_gpu = pytest.mark.skipif(not STATUS.gpu_usable, reason=f"no usable GPU: {STATUS.reason}")

# Named tolerances (relative Frobenius error unless said otherwise). Fix the kernel, not these.
TOL_FP32 = 1e-5          # fp32 arithmetic vs fp64 on identical inputs
TOL_GEMV_Q4 = 2e-3       # 4-bit path: 8 products summed in fp16 before fp32
# tensor-core GEMV (T = 2..16, every width): each weight (code - offset) * scale rounded once to fp16 (4.9e-4
# relative, random over the row), products and sums in fp32
TOL_GEMV_MMA = 1e-3
# 4-bit integer-dot GEMV (qgemv.cu stage_xq): x rounded to 16-bit integers per 32-element chunk (half a step is
# 1/65024 of the chunk's absmax, ~2e-5 of a Gaussian chunk's rms), then exact int32 sums: ~2e-5 relative
TOL_GEMV_IDOT = 1e-4
TOL_FP16_OUT = 2e-3      # results rounded to fp16 (rel. rounding 4.9e-4 per element)
TOL_ATTN = 3e-3          # attention: exp/rsqrt intrinsics, fp16 output
TOL_MODEL_BF16KV = 2e-2  # whole model vs fp32 reference on the same dequantized weights (fp16 GEMV inputs)
TOL_MODEL_INT8KV = 5e-2  # same with int8 group-64 KV
# int4 group-64 KV, the kernels against an oracle on the cache the kernel wrote (quantization excluded): the
# int4 paths round exactly what the int8 paths round (q, P and the dequantized code * scale to fp16, fp16
# output); the nibble conversion is exact, the hi nibbles' x16 / q/16 are powers of two (exact outside fp16
# subnormals), and the folded 1032 / 1152 code offsets cancel in fp32 at ~1032/7 x 2^-24 relative per
# group, <1e-5: so the int8 bound holds.
TOL_ATTN_INT4 = TOL_ATTN
# whole model with int4 KV vs the reference whose KV cache holds the same int4 round trip (int4_roundtrip):
# what remains is the codes the two models round differently because their K/V inputs differ by the fp16
# GEMV path (~1e-3 of an element, 2e-2 model-level as TOL_MODEL_BF16KV): a step is ~0.34 sigma of a 64-dim
# Gaussian group (absmax ~2.4 sigma / 7), so ~0.3 % of the codes move by one step, ~0.02 sigma rms: about
# 3-4x int8's whole quantization noise (step / sqrt(12) = 0.0055 sigma), hence twice TOL_MODEL_INT8KV.
TOL_MODEL_INT4KV = 1e-1

KV_FMT = {"bf16": 0, "int8": 1, "int4": 2}  # the attention ops' kv format argument (csrc/cuda/ops.h KvFormat)


def perm8_index(k: int):
    """Buffer position of each element: position perm8(k) holds element k."""
    import torch
    idx = torch.arange(k)
    return (idx & ~7) | ((idx & 3) << 1) | ((idx >> 2) & 1)


def _to_buffer(x, position):
    """[T, K] tensor -> its buffer in an element order: buffer column position[k] holds element k."""
    out = x.clone()
    out[:, position.to(x.device)] = x
    return out


def to_perm8(x):
    """[T, K] tensor -> the same values in perm8 order (what the GEMV kernels read)."""
    return _to_buffer(x, perm8_index(x.shape[1]))


def from_perm8(x):
    return x[:, perm8_index(x.shape[1]).to(x.device)]


def lanes_index(k: int):
    """Buffer position of each element in the lanes layout (csrc/cuda/common.cuh lanes_pos, written here again from
    its definition): each run of 32 chunks of 32 elements stored piece-major, piece p of chunk c at
    run * 1024 + (p * run_chunks + c % 32) * 8, the 8 elements of a piece in perm8 order."""
    import torch
    idx = torch.arange(k)
    chunk, run = idx >> 5, idx >> 10
    run_chunks = torch.clamp((k >> 5) - 32 * run, max=32)
    piece = (idx >> 3) & 3
    return run * 1024 + (piece * run_chunks + (chunk & 31)) * 8 + (perm8_index(k) & 7)


def to_lanes(x):
    """[T, K] tensor -> the same values in the lanes layout (what qgemv's variant 4 reads with x_layout 1)."""
    return _to_buffer(x, lanes_index(x.shape[1]))


def from_lanes(x):
    return x[:, lanes_index(x.shape[1]).to(x.device)]


def step_inputs(tokens, rope_pos, kv_start: int, lane: int = 0, draw: int = 0):
    """An int32 CUDA tensor laid out as the native StepInputs struct (its sampling parameters zero: op_sample
    writes them)."""
    import torch
    from engine.native import load_native
    n = load_native().STEP_INPUTS_INT32
    buf = torch.zeros(n, dtype=torch.int32)
    T = len(tokens)
    buf[:T] = torch.tensor(tokens, dtype=torch.int32)
    for t in range(T):
        for a in range(3):
            buf[16 + 3 * t + a] = int(rope_pos[t][a])
    buf[64] = kv_start
    buf[65] = T
    buf[66] = lane
    buf[67] = draw
    return buf.cuda()


def rel_err(a, b) -> float:
    a = a.double()
    b = b.double()
    return float((a - b).norm() / b.norm().clamp_min(1e-30))


def quantized(n, k, bits, group, gen):
    """A random [n, k] matrix quantized with round-to-nearest: (QuantizedTensor, device codes, high bits,
    scales, and the fp64 dequantized value on the device as the oracle's weight)."""
    import torch
    from engine.quant import QuantFormat, quantize
    w = torch.randn(n, k, generator=gen) * 0.05
    q = quantize(w, QuantFormat(bits, group), method="rtn")
    dev = lambda t: None if t is None else t.cuda()  # noqa: E731
    return q, dev(q.codes), dev(q.high), dev(q.scales), q.dequantize().double().cuda()


def gdn_oracle(conv_out, z, b, a, a_log, dt_bias, norm_w, S, kh, vh, eps):
    """fp64 delta rule (token by token, all heads at once) + gated norm; S [vh, dk, dv] (k-major).
    Returns (outputs [T, vh*dv], final state); the state passed in is not modified."""
    import math

    import torch
    T = conv_out.shape[0]
    dk = dv = 128
    q = conv_out[:, :kh * dk].view(T, kh, dk)
    k = conv_out[:, kh * dk:2 * kh * dk].view(T, kh, dk)
    v = conv_out[:, 2 * kh * dk:].view(T, vh, dv)
    rep = vh // kh
    q = (q / torch.sqrt((q * q).sum(-1, keepdim=True) + 1e-6) / math.sqrt(dk)).repeat_interleave(rep, dim=1)
    k = (k / torch.sqrt((k * k).sum(-1, keepdim=True) + 1e-6)).repeat_interleave(rep, dim=1)
    g = -torch.exp(a_log) * torch.nn.functional.softplus(a + dt_bias)  # [T, vh]
    beta = torch.sigmoid(b)
    outs = []
    for t in range(T):
        S = S * torch.exp(g[t])[:, None, None]
        u = beta[t][:, None] * (v[t] - torch.einsum("hkv,hk->hv", S, k[t]))
        S = S + k[t][:, :, None] * u[:, None, :]
        o = torch.einsum("hkv,hk->hv", S, q[t])
        r = torch.rsqrt(o.pow(2).mean(-1, keepdim=True) + eps)
        outs.append((o * r * norm_w * torch.nn.functional.silu(z[t].view(vh, dv))).reshape(-1))
    return torch.stack(outs), S


# ---- int4 group-64 KV (ops.h kKvInt4): codes + 8 as nibbles, even dim low, one fp16 scale per 64 dims

def split_qkv_f64(qkv, nh, nkv, hd, q_norm, k_norm, eps):
    """The attention projection rows [T, 2 nh hd + 2 nkv hd] (q and gate interleaved per head, then k, then v) as
    fp64 (q [T, nh, hd] and k [T, nkv, hd] zero-centred-RMS-normed with (1 + w), before rope; gate; v)."""
    import torch
    T = qkv.shape[0]
    x = qkv.double()
    qh = x[:, :2 * nh * hd].view(T, nh, 2 * hd)
    k = x[:, 2 * nh * hd:2 * nh * hd + nkv * hd].view(T, nkv, hd)
    v = x[:, 2 * nh * hd + nkv * hd:].view(T, nkv, hd)

    def norm(y, w):
        return y * torch.rsqrt(y.pow(2).mean(-1, keepdim=True) + eps) * (1 + w.double())

    return norm(qh[..., :hd], q_norm), qh[..., hd:], norm(k, k_norm), v


def random_int4_cache(cap, nkv, hd, gen):
    """Random int4 cache rows on the device: codes -7..7 (nibbles 1..15, as attn_prep writes) packed two per
    byte [cap, nkv, hd / 2] uint8, and fp16 scales [cap, nkv, hd / 64] in [0.02, 0.4] (values up to ~2.8,
    the magnitude of the int8 tests' random caches)."""
    import torch
    lo = torch.randint(1, 16, (cap, nkv, hd // 2), device="cuda", generator=gen, dtype=torch.int32)
    hi = torch.randint(1, 16, (cap, nkv, hd // 2), device="cuda", generator=gen, dtype=torch.int32)
    scales = (torch.rand(cap, nkv, hd // 64, device="cuda", generator=gen) * 0.38 + 0.02).half()
    return (lo | (hi << 4)).to(torch.uint8), scales


def int4_unpack(codes):
    """uint8 [..., n / 2] -> int32 quantized values [..., n] (nibble - 8; even dims from the low nibbles)."""
    import torch
    c = codes.to(torch.int32)
    return torch.stack([c & 15, c >> 4], -1).flatten(-2) - 8


def int4_dequant(codes, scales):
    """fp64 values of an int4 cache: code * its group's fp16 scale."""
    return int4_unpack(codes).double() * scales.double().repeat_interleave(64, -1)


def int4_roundtrip(x):
    """x [..., n] (n a multiple of 64) quantized as attn_prep does for an int4 cache, then dequantized: per 64
    dims an fp16 scale fp16(absmax / 7) (fp32 division), codes round-half-even(x / scale) clamped to -7..7."""
    import torch
    xf = x.float()
    g = xf.reshape(*xf.shape[:-1], -1, 64)
    s = (g.abs().amax(-1, keepdim=True) / 7).half().float()
    q = torch.where(s > 0, torch.round(g / s), torch.zeros_like(g)).clamp(-7, 7)
    return (q * s).reshape(xf.shape).to(x.dtype)


def reference_kv_int4(monkeypatch):
    """Make every reference-model KV cache (engine.reference.state.KVCache) store the int4 round trip of what
    it is given, i.e. what the native int4 cache holds: the model comparison then measures the engine, not
    the quantization."""
    from engine.reference.state import KVCache
    orig = KVCache.append

    def append(self, k_new, v_new):
        return orig(self, int4_roundtrip(k_new), int4_roundtrip(v_new))

    monkeypatch.setattr(KVCache, "append", append)
