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
