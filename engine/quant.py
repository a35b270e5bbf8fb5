"""Groupwise symmetric integer weight formats: quantize, pack, unpack, dequantize.

This module is the reference for the native kernels. The format is a fixed contract:

Weight W [N out, K in], row-major as in the checkpoint. Group size G in {32, 64} along K
(K % G == 0), B in {4, 5, 6, 8} bits, symmetric:

    q = clamp(round(w / s), -(2^(B-1) - 1), 2^(B-1) - 1)     s: fp16 per (row, group)
    c = q + 2^(B-1)                                           stored unsigned code
    dequantized value = (c - 2^(B-1)) * s                     computed in fp32

Stored tensors (suffixes appended to the weight's key):
    .qscales  fp16  [N, K/G]
    .qcodes   uint8 [N, K]    for B = 8
              uint8 [N, K/2]  for B = 4, 5, 6: byte j holds element 2j in the low nibble and
                              2j+1 in the high nibble (the low 4 bits of the code)
    .qhigh    uint8 [N, K/8]  for B = 5: bit i of byte j is bit 4 of the code of element 8j+i
              uint8 [N, K/4]  for B = 6: bits 2i..2i+1 of byte j are bits 4..5 of element 4j+i

Two quantizers produce that format: round-to-nearest with the absmax scale (``quantize_rtn``)
and a per-group scale search (``quantize_search``) that tries a grid of clipping ratios and
keeps, per group, the scale with the smallest (optionally importance-weighted) squared error.
The grid contains ratio 1.0, i.e. the RTN scale, so the search is never worse than RTN.
All work is vectorised over row blocks so that peak memory stays a small multiple of one block.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import torch

SUPPORTED_BITS = (4, 5, 6, 8)
SUPPORTED_GROUPS = (32, 64)

# Clipping ratios tried by the scale search (1.0 first: the RTN scale). 0.02 steps down to
# 0.70 are enough: below that, clipping error dominates for every weight distribution we saw.
# Coarse-to-fine: the coarse grid, then +-0.02 and +-0.01 around each group's best ratio, which
# reaches 0.01 resolution over [0.67, 1.03] in 10 passes instead of 37.
DEFAULT_CLIP_RATIOS: tuple[float, ...] = (1.0, 0.94, 0.88, 0.82, 0.76, 0.70)
DEFAULT_FINE_STEPS: tuple[float, ...] = (0.02, 0.01)

# Elements processed per block: bounds the temporaries (a few fp32 copies of one block).
_BLOCK_ELEMENTS = 1 << 22

_ROUND_MAGIC = 12582912.0  # 1.5 * 2**23
FP16_MAX = 65504.0
FP16_TINY = 2.0 ** -24  # smallest positive fp16 (subnormal)


class QuantError(ValueError):
    """A weight or format that the groupwise quantizer cannot represent."""


@dataclass(frozen=True)
class QuantFormat:
    """One groupwise integer format: B bits, group size G, fp16 scales."""

    bits: int
    group: int

    def __post_init__(self) -> None:
        if self.bits not in SUPPORTED_BITS:
            raise QuantError(f"unsupported bit width {self.bits}; supported: {SUPPORTED_BITS}")
        if self.group not in SUPPORTED_GROUPS:
            raise QuantError(f"unsupported group size {self.group}; supported: {SUPPORTED_GROUPS}")

    @property
    def name(self) -> str:
        return f"q{self.bits}g{self.group}"

    @property
    def qmax(self) -> int:
        return (1 << (self.bits - 1)) - 1

    @property
    def offset(self) -> int:
        return 1 << (self.bits - 1)

    @property
    def bits_per_weight(self) -> float:
        """Storage cost including the fp16 scale of each group."""
        return self.bits + 16.0 / self.group

    def check_shape(self, shape: Sequence[int]) -> None:
        if len(shape) != 2:
            raise QuantError(f"groupwise formats need a 2-D weight [N, K]; got shape {tuple(shape)}")
        if shape[1] % self.group:
            raise QuantError(f"K = {shape[1]} is not a multiple of the group size {self.group} ({self.name})")

    def tensor_shapes(self, shape: Sequence[int]) -> dict[str, tuple[tuple[int, ...], torch.dtype]]:
        """Stored tensors for a weight of ``shape``: suffix -> (shape, dtype)."""
        self.check_shape(shape)
        n, k = int(shape[0]), int(shape[1])
        out: dict[str, tuple[tuple[int, ...], torch.dtype]] = {}
        out["qcodes"] = ((n, k), torch.uint8) if self.bits == 8 else ((n, k // 2), torch.uint8)
        if self.bits == 5:
            out["qhigh"] = ((n, k // 8), torch.uint8)
        elif self.bits == 6:
            out["qhigh"] = ((n, k // 4), torch.uint8)
        out["qscales"] = ((n, k // self.group), torch.float16)
        return out

    def nbytes(self, shape: Sequence[int]) -> int:
        """Exact stored bytes of a weight of ``shape`` (codes + high bits + scales)."""
        total = 0
        for shp, dt in self.tensor_shapes(shape).values():
            total += shp[0] * shp[1] * (2 if dt == torch.float16 else 1)
        return total

    @classmethod
    def parse(cls, name: str) -> "QuantFormat":
        """``"q4g64"`` -> QuantFormat(4, 64)."""
        try:
            b, g = name[1:].split("g")
            if name[0] != "q":
                raise ValueError
            return cls(int(b), int(g))
        except (ValueError, IndexError):
            raise QuantError(f"not a groupwise format name: {name!r} (expected e.g. 'q4g64')") from None


@dataclass
class QuantizedTensor:
    """The stored form of one quantized weight (CPU tensors, or views of a memory-mapped file)."""

    bits: int
    group: int
    codes: torch.Tensor  # uint8 [N, K] (B=8) or [N, K/2]
    high: torch.Tensor | None  # uint8 [N, K/8] (B=5) or [N, K/4] (B=6); None otherwise
    scales: torch.Tensor  # fp16 [N, K/G]
    shape: tuple[int, int]  # logical [N, K]

    @property
    def format(self) -> QuantFormat:
        return QuantFormat(self.bits, self.group)

    @property
    def nbytes(self) -> int:
        n = self.codes.numel() + self.scales.numel() * 2
        return n + (self.high.numel() if self.high is not None else 0)

    def unpacked_codes(self) -> torch.Tensor:
        return unpack_codes(self.codes, self.high, self.bits, self.shape[1])

    def dequantize(self, dtype: torch.dtype = torch.float32) -> torch.Tensor:
        return dequantize(self, dtype)


# --------------------------------------------------------------------------------------------
# packing


def pack_codes(codes: torch.Tensor, bits: int) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Unsigned codes uint8 [N, K] -> (codes tensor, high-bits tensor or None) in the stored layout."""
    if bits not in SUPPORTED_BITS:
        raise QuantError(f"unsupported bit width {bits}; supported: {SUPPORTED_BITS}")
    if codes.dtype != torch.uint8 or codes.dim() != 2:
        raise QuantError(f"codes must be uint8 [N, K]; got {codes.dtype} {tuple(codes.shape)}")
    n, k = codes.shape
    if bits == 8:
        return codes.contiguous(), None
    if k % 8:
        raise QuantError(f"K = {k} must be a multiple of 8 to pack {bits}-bit codes")
    low = codes & 0x0F
    packed = (low[:, 0::2] | (low[:, 1::2] << 4)).contiguous()
    if bits == 4:
        return packed, None
    top = codes >> 4  # bit 4 (B=5) or bits 4..5 (B=6)
    if bits == 5:
        t = top.reshape(n, k // 8, 8) & 1
        high = torch.zeros(n, k // 8, dtype=torch.uint8)
        for i in range(8):
            high |= t[:, :, i] << i
    else:
        t = top.reshape(n, k // 4, 4) & 3
        high = torch.zeros(n, k // 4, dtype=torch.uint8)
        for i in range(4):
            high |= t[:, :, i] << (2 * i)
    return packed, high


def unpack_codes(codes: torch.Tensor, high: torch.Tensor | None, bits: int, k: int) -> torch.Tensor:
    """Inverse of ``pack_codes``: stored tensors -> unsigned codes uint8 [N, K]."""
    if bits == 8:
        return codes
    n = codes.shape[0]
    out = torch.empty(n, k, dtype=torch.uint8)
    out[:, 0::2] = codes & 0x0F
    out[:, 1::2] = codes >> 4
    if bits == 5:
        if high is None:
            raise QuantError("5-bit codes need their .qhigh tensor")
        bit = torch.stack([(high >> i) & 1 for i in range(8)], dim=-1).reshape(n, k)
        out |= bit << 4
    elif bits == 6:
        if high is None:
            raise QuantError("6-bit codes need their .qhigh tensor")
        two = torch.stack([(high >> (2 * i)) & 3 for i in range(4)], dim=-1).reshape(n, k)
        out |= two << 4
    return out


# --------------------------------------------------------------------------------------------
# quantize / dequantize


def _rows_per_block(k: int) -> int:
    return max(1, _BLOCK_ELEMENTS // max(k, 1))


def _fp16_scale(scale: torch.Tensor) -> torch.Tensor:
    """Round scales to fp16, keeping a nonzero group's scale nonzero; returned as fp32."""
    if torch.any(scale > FP16_MAX):
        raise QuantError(f"a group scale of {float(scale.max()):.4g} overflows fp16 (max {FP16_MAX}); "
                         "the checkpoint holds weights far outside any trained model's range")
    nonzero = scale > 0
    s16 = scale.to(torch.float16).float()
    return torch.where(nonzero & (s16 == 0), torch.full_like(s16, FP16_TINY), s16)


def _quantize_block(wg: torch.Tensor, s: torch.Tensor, qmax: int, out: torch.Tensor | None = None) -> torch.Tensor:
    """wg fp32 [n, g_count, G], s fp32 [n, g_count] -> integer q (as fp32) clamped to ±qmax."""
    inv = torch.where(s > 0, 1.0 / torch.where(s > 0, s, torch.ones_like(s)), torch.zeros_like(s))
    q = torch.mul(wg, inv.unsqueeze(-1), out=out)
    # Clamp first, then round to nearest even by adding and subtracting 1.5 * 2^23: exact for
    # |x| < 2^22 and several times faster than torch.round on CPU.
    return q.clamp_(-qmax, qmax).add_(_ROUND_MAGIC).sub_(_ROUND_MAGIC)


def _as_groups(w: torch.Tensor, group: int) -> torch.Tensor:
    n, k = w.shape
    return w.float().reshape(n, k // group, group)


def quantize_rtn(w: torch.Tensor, fmt: QuantFormat) -> QuantizedTensor:
    """Round-to-nearest with the absmax scale s = max|w| / qmax per group."""
    return quantize_search(w, fmt, clip_ratios=(1.0,), fine_steps=(), refine=False)


def quantize_search(
    w: torch.Tensor,
    fmt: QuantFormat,
    *,
    clip_ratios: Sequence[float] = DEFAULT_CLIP_RATIOS,
    fine_steps: Sequence[float] = DEFAULT_FINE_STEPS,
    importance: torch.Tensor | None = None,
    refine: bool = True,
) -> QuantizedTensor:
    """Per-group scale search minimising squared reconstruction error.

    For every group, scales ``r * max|w| / qmax`` for each ratio r in ``clip_ratios`` are tried
    (after fp16 rounding, as stored) and the one with the smallest error is kept; then, for each
    d in ``fine_steps``, the ratios best_r - d and best_r + d of each group. With ``refine``, one
    least-squares step s* = <w, q> / <q, q> on the chosen codes is tried as well. A candidate
    replaces the current best only when its error is strictly smaller. ``importance`` (fp [K], non-negative, e.g. mean squared input activation per column)
    weights the error per input column: the activation-aware variant.
    """
    if w.dim() != 2:
        raise QuantError(f"groupwise formats need a 2-D weight [N, K]; got shape {tuple(w.shape)}")
    fmt.check_shape(w.shape)
    if 1.0 not in clip_ratios:
        raise QuantError("clip_ratios must contain 1.0 (the RTN scale) so the search is never worse than RTN")
    n, k = w.shape
    g, qmax = fmt.group, fmt.qmax
    imp = None
    if importance is not None:
        if importance.shape != (k,):
            raise QuantError(f"importance must have shape ({k},); got {tuple(importance.shape)}")
        imp = importance.float().reshape(1, k // g, g)
    # Stored tensors are allocated once and filled block by block (no full-size code array).
    shapes = fmt.tensor_shapes((n, k))
    packed = torch.empty(shapes["qcodes"][0], dtype=torch.uint8)
    high = torch.empty(shapes["qhigh"][0], dtype=torch.uint8) if "qhigh" in shapes else None
    scales = torch.empty(n, k // g, dtype=torch.float16)
    rows = _rows_per_block(k)
    for r0 in range(0, n, rows):
        wg = _as_groups(w[r0:r0 + rows], g)
        amax = wg.abs().amax(dim=-1)
        if not torch.isfinite(amax).all():  # amax propagates NaN and inf: a per-block check is enough
            raise QuantError(f"weight contains NaN or infinity (rows {r0}..{min(n, r0 + rows) - 1})")
        buf = torch.empty_like(wg)
        best_s = _fp16_scale(amax / qmax)
        if len(clip_ratios) > 1 or fine_steps or refine:
            # Only the per-group scale, ratio and error are carried across candidates; the codes
            # are recomputed once from the winning scale (cheaper than selecting full-size tensors).
            best_err = _group_error(wg, best_s, qmax, imp, buf)
            best_r = torch.ones_like(amax)
            candidates = [torch.full_like(amax, float(r)) for r in clip_ratios if float(r) != 1.0]
            for r in candidates:
                best_s, best_err, best_r = _keep_better(wg, _fp16_scale(amax * r / qmax), qmax, imp, buf,
                                                        best_s, best_err, r, best_r)
            for d in fine_steps:
                center = best_r
                for r in (center - float(d), center + float(d)):
                    best_s, best_err, best_r = _keep_better(wg, _fp16_scale(amax * r.clamp(min=0) / qmax), qmax,
                                                            imp, buf, best_s, best_err, r, best_r)
            if refine:
                q = _quantize_block(wg, best_s, qmax, buf)
                qw = q * q
                if imp is not None:
                    qw.mul_(imp)
                den = qw.sum(-1)
                num = qw.copy_(q).mul_(wg)
                if imp is not None:
                    num.mul_(imp)
                num = num.sum(-1)
                s_ls = torch.where(den > 0, num / torch.where(den > 0, den, torch.ones_like(den)), best_s)
                best_s, best_err, _ = _keep_better(wg, _fp16_scale(s_ls.clamp(min=0)), qmax, imp, buf,
                                                   best_s, best_err, best_r, best_r)
        q = _quantize_block(wg, best_s, qmax, buf)
        block_packed, block_high = pack_codes(q.add_(fmt.offset).to(torch.uint8).reshape(-1, k), fmt.bits)
        packed[r0:r0 + rows] = block_packed
        if high is not None:
            high[r0:r0 + rows] = block_high
        scales[r0:r0 + rows] = best_s.to(torch.float16)
    return QuantizedTensor(fmt.bits, fmt.group, packed, high, scales, (n, k))


def _group_error(wg: torch.Tensor, s: torch.Tensor, qmax: int, imp: torch.Tensor | None,
                 buf: torch.Tensor) -> torch.Tensor:
    """Per-group squared error of quantizing ``wg`` with scales ``s`` (``buf`` is scratch)."""
    d = _quantize_block(wg, s, qmax, buf).mul_(s.unsqueeze(-1)).sub_(wg)
    d.mul_(d)
    if imp is not None:
        d.mul_(imp)
    return d.sum(-1)


def _keep_better(wg, s, qmax, imp, buf, best_s, best_err, r, best_r):
    err = _group_error(wg, s, qmax, imp, buf)
    better = err < best_err
    return torch.where(better, s, best_s), torch.where(better, err, best_err), torch.where(better, r, best_r)


def quantize(w: torch.Tensor, fmt: QuantFormat, *, method: str = "search",
             importance: torch.Tensor | None = None) -> QuantizedTensor:
    """Quantize with ``method`` "rtn" or "search" (the default)."""
    if method == "rtn":
        return quantize_rtn(w, fmt)
    if method == "search":
        return quantize_search(w, fmt, importance=importance)
    raise QuantError(f"unknown quantization method {method!r}; expected 'rtn' or 'search'")


def dequantize(qt: QuantizedTensor, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """Stored tensors -> weight [N, K]: (c - 2^(B-1)) * s in fp32, then cast to ``dtype``."""
    n, k = qt.shape
    g = qt.group
    offset = 1 << (qt.bits - 1)
    out = torch.empty(n, k, dtype=dtype)
    rows = _rows_per_block(k)
    for r0 in range(0, n, rows):
        r1 = min(n, r0 + rows)
        high = qt.high[r0:r1] if qt.high is not None else None
        c = unpack_codes(qt.codes[r0:r1], high, qt.bits, k)
        q = (c.to(torch.int16) - offset).float().reshape(r1 - r0, k // g, g)
        s = qt.scales[r0:r1].float().unsqueeze(-1)
        out[r0:r1] = (q * s).reshape(r1 - r0, k).to(dtype)
    return out


def relative_error(w: torch.Tensor, w_hat: torch.Tensor | QuantizedTensor) -> float:
    """||w - w_hat||_F / ||w||_F, sums of squares accumulated in fp64 over small row blocks.

    ``w_hat`` may be a QuantizedTensor, dequantized block by block; the blocks are kept small
    (a quarter of the quantizer's) because this runs on every converted tensor and its
    temporaries set the converter's peak memory. An all-zero ``w`` reproduced exactly has error 0.
    """
    if w.dim() != 2:
        w = w.reshape(w.shape[0] if w.dim() else 1, -1)
    n, k = w.shape
    rows = max(1, (_BLOCK_ELEMENTS // 4) // max(k, 1))
    num = den = 0.0
    for r0 in range(0, n, rows):
        r1 = min(n, r0 + rows)
        if isinstance(w_hat, QuantizedTensor):
            high = w_hat.high[r0:r1] if w_hat.high is not None else None
            part = QuantizedTensor(w_hat.bits, w_hat.group, w_hat.codes[r0:r1], high,
                                   w_hat.scales[r0:r1], (r1 - r0, k))
            h = dequantize(part, torch.float32)
        else:
            h = w_hat.reshape(n, k)[r0:r1].to(torch.float32, copy=True)  # modified in place below
        x = w[r0:r1].float()
        den += float(torch.linalg.vector_norm(x, dtype=torch.float64)) ** 2
        num += float(torch.linalg.vector_norm(h.sub_(x), dtype=torch.float64)) ** 2
    if den == 0.0:
        return 0.0 if num == 0.0 else float("inf")
    return (num / den) ** 0.5
