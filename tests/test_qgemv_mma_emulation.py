"""The data layout of the tensor-core GEMV (csrc/cuda/qgemv_mma.cuh), emulated in numpy on the CPU: each lane's A and
B fragments are built from the packed 4-bit rows and the perm8-ordered x exactly as the kernel builds them (word j
of the lane's chunk, pairs i and i + 1, the magic-number decode, the scale product rounded to fp16), the
m16n8k16 products follow the PTX ISA's fragment definitions, and the C fragment is read back as the kernel's
epilogue reads it. The result must be W x: this checks the k-slot map and the fragment indices without a GPU (the
kernel itself is checked against fp64 on the GPU by tests/test_native_qgemv_mma.py)."""

from __future__ import annotations

import numpy as np
import pytest


def perm8(k: int) -> int:
    return (k & ~7) | ((k & 3) << 1) | ((k >> 2) & 1)


def pack_rows(codes: np.ndarray) -> np.ndarray:
    """[N, K] codes 0..15 -> [N, K / 8] uint32 words, element 8j + i in nibble i of word j (the engine's layout)."""
    n, k = codes.shape
    c = codes.reshape(n, k // 8, 8).astype(np.uint32)
    return np.bitwise_or.reduce(c << (4 * np.arange(8, dtype=np.uint32)), axis=2)


def to_perm8(x: np.ndarray) -> np.ndarray:
    out = np.empty_like(x)
    for k in range(x.shape[1]):
        out[:, perm8(k)] = x[:, k]
    return out


def half2(u32: int) -> tuple[np.float16, np.float16]:
    """(low, high) halves of a 32-bit register."""
    return (np.array([u32 & 0xFFFF], np.uint16).view(np.float16)[0],
            np.array([u32 >> 16], np.uint16).view(np.float16)[0])


def decode_pairs(w: int, i: int) -> tuple[tuple, tuple]:
    """qgemv_mma.cuh decode_pairs: pairs i and i + 1 of word w as (code - 8), fp16, exactly."""
    v = w if i == 0 else w >> 8
    lo = half2((v & 0x000F000F) | 0x64006400)
    hi = half2((v & 0x00F000F0) | 0x64006400)
    p0 = tuple(np.float16(h - np.float16(1032)) for h in lo)
    p1 = tuple(np.float16(h * np.float16(1 / 16) + np.float16(-72)) for h in hi)
    return p0, p1


def x_half2(xp_row: np.ndarray, chunk: int, j: int, i: int) -> tuple:
    """x half2 4j + i of a chunk, x in perm8 order (its halves: positions 2 (4j + i) and 2 (4j + i) + 1)."""
    base = chunk * 32 + 2 * (4 * j + i)
    return (xp_row[base], xp_row[base + 1])


def emulate(codes, scales, x, group):
    """The kernel's sums for all rows (one warp tile of 32 rows after another, all spans, no split)."""
    n, k = codes.shape
    words = pack_rows(codes)                      # [N, K / 8]
    xp = to_perm8(x.astype(np.float16))           # [T, K]
    t_count = x.shape[0]
    nt_tiles = 1 if t_count <= 8 else 2
    out = np.zeros((t_count, n))
    nch = k // 32
    for row0 in range(0, n, 32):
        acc = np.zeros((2, nt_tiles, 32, 4))      # [mt][nt][lane][e]
        for span in range((k + 127) // 128):
            for s in range(8):
                j, i = s >> 1, (s & 1) * 2
                # every lane's fragments for this k-step: A [mt][lane][4 regs x 2 halves], B [nt][lane][2 x 2]
                a_frag = np.zeros((2, 32, 4, 2))
                b_frag = np.zeros((nt_tiles, 32, 2, 2))
                for lane in range(32):
                    g, c = lane >> 2, lane & 3
                    ch = span * 4 + c
                    valid = ch < nch
                    for mt in range(2):
                        parts = []
                        for m in (2 * mt, 2 * mt + 1):   # rows g + 8 m
                            r = min(row0 + g + 8 * m, n - 1)
                            w = int(words[r, ch * 4 + j]) if valid else 0x88888888
                            sc = np.float16(scales[r, (ch * 32) // group]) if valid else np.float16(0)
                            p0, p1 = decode_pairs(w, i)
                            parts.append(([np.float16(v * sc) for v in p0], [np.float16(v * sc) for v in p1]))
                        (lo0, lo1), (hi0, hi1) = parts
                        a_frag[mt, lane] = [lo0, hi0, lo1, hi1]          # a0 a1 a2 a3
                    for nt in range(nt_tiles):
                        t = g + 8 * nt
                        if valid and t < t_count:
                            b_frag[nt, lane] = [x_half2(xp[t], ch, j, i), x_half2(xp[t], ch, j, i + 1)]
                # mma.m16n8k16 per the PTX fragments (g = lane / 4, c = lane % 4):
                #   A: a0 (g, 2c..2c+1), a1 (g+8, 2c..), a2 (g, 2c+8..), a3 (g+8, 2c+8..); B: b0 (k 2c.., n g), b1 (k 2c+8.., n g)
                #   C: c0 c1 (g, 2c..2c+1), c2 c3 (g+8, 2c..2c+1)
                for mt in range(2):
                    A = np.zeros((16, 16))
                    for lane in range(32):
                        g, c = lane >> 2, lane & 3
                        for reg, (row, col) in enumerate(((g, 2 * c), (g + 8, 2 * c), (g, 2 * c + 8), (g + 8, 2 * c + 8))):
                            A[row, col:col + 2] = a_frag[mt, lane, reg]
                    for nt in range(nt_tiles):
                        B = np.zeros((16, 8))
                        for lane in range(32):
                            g, c = lane >> 2, lane & 3
                            B[2 * c:2 * c + 2, g] = b_frag[nt, lane, 0]
                            B[2 * c + 8:2 * c + 10, g] = b_frag[nt, lane, 1]
                        D = A @ B
                        for lane in range(32):
                            g, c = lane >> 2, lane & 3
                            acc[mt, nt, lane] += [D[g, 2 * c], D[g, 2 * c + 1], D[g + 8, 2 * c], D[g + 8, 2 * c + 1]]
        for mt in range(2):
            for nt in range(nt_tiles):
                for lane in range(32):
                    g, c = lane >> 2, lane & 3
                    for e in range(4):
                        row = row0 + g + 16 * mt + 8 * (e >> 1)
                        t = 2 * c + (e & 1) + 8 * nt
                        if row < n and t < t_count:
                            out[t, row] = acc[mt, nt, lane, e]
    return out


@pytest.mark.parametrize("n, k, t, group", [(40, 160, 3, 32), (64, 256, 9, 64), (33, 128, 16, 64)])
def test_the_fragment_layout_computes_w_times_x(n, k, t, group):
    rng = np.random.default_rng(n + k + t)
    codes = rng.integers(0, 16, (n, k))
    scales = (rng.random((n, k // group)) * 0.02 + 0.005).astype(np.float16)
    x = rng.standard_normal((t, k)).astype(np.float16).astype(np.float64)
    w = (codes - 8) * np.repeat(scales.astype(np.float64), group, axis=1)
    ref = x @ w.T
    got = emulate(codes, scales, x, group)
    assert np.linalg.norm(got - ref) / np.linalg.norm(ref) < 1e-3


def test_a_wrong_k_slot_map_is_caught():
    """The same emulation with lane c's two pairs swapped in B only (A and B no longer on the same elements) is
    far from W x: the comparison above can fail."""
    global x_half2
    rng = np.random.default_rng(1)
    codes = rng.integers(0, 16, (32, 128))
    scales = np.full((32, 2), 0.01, np.float16)
    x = rng.standard_normal((4, 128)).astype(np.float16).astype(np.float64)
    ref = x @ ((codes - 8) * 0.01).T
    original = x_half2
    try:
        x_half2 = lambda xp_row, chunk, j, i: original(xp_row, chunk, j, i ^ 1)  # noqa: E731
        got = emulate(codes, scales, x, 64)
    finally:
        x_half2 = original
    assert np.linalg.norm(got - ref) / np.linalg.norm(ref) > 0.1
