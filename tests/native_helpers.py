"""Helpers shared by the native GPU tests: skip logic, perm8 layout, StepInputs, named tolerances."""

from __future__ import annotations

import pytest

from engine.native import native_status

STATUS = native_status()
requires_gpu = pytest.mark.skipif(not STATUS.gpu_usable, reason=f"no usable GPU: {STATUS.reason}")

# Named tolerances (relative Frobenius error unless said otherwise). Fix the kernel, not these.
TOL_FP32 = 1e-5          # fp32 arithmetic vs fp64 on identical inputs
TOL_GEMV_Q4 = 2e-3       # 4-bit path: 8 products summed in fp16 before fp32
TOL_FP16_OUT = 2e-3      # results rounded to fp16 (rel. rounding 4.9e-4 per element)
TOL_ATTN = 3e-3          # attention: exp/rsqrt intrinsics, fp16 output
TOL_MODEL_BF16KV = 2e-2  # whole model vs fp32 reference on the same dequantized weights (fp16 GEMV inputs)
TOL_MODEL_INT8KV = 5e-2  # same with int8 group-64 KV


def perm8_index(k: int):
    """Buffer position of each element: position perm8(k) holds element k."""
    import torch
    idx = torch.arange(k)
    return (idx & ~7) | ((idx & 3) << 1) | ((idx >> 2) & 1)


def to_perm8(x):
    """[T, K] tensor -> the same values in perm8 order (what the GEMV kernels read)."""
    out = x.clone()
    out[:, perm8_index(x.shape[1]).to(x.device)] = x
    return out


def from_perm8(x):
    return x[:, perm8_index(x.shape[1]).to(x.device)]


def step_inputs(tokens, rope_pos, kv_start: int, lane: int = 0):
    """An int32 CUDA tensor laid out as the native StepInputs struct."""
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
