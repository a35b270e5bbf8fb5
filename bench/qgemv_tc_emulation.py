"""CPU emulation of qgemv4_tc_kernel (csrc/cuda/qgemv.cu, variants 20/21): one warp, one m16 tile, a few groups.

Packs random 4-bit codes as engine/quant.py does, builds every lane's A/B registers as the kernel does (magic ORs,
the -bias quads from the constant-A mma), applies the PTX m16n8k16 fragment mapping, sums each mma in fp32
(round-to-nearest, or truncation as a tensor-core model), applies scales, and compares with fp64.
    python3 bench/qgemv_tc_emulation.py
"""
# Emulates qgemv4_tc_kernel's per-warp data flow (one m16 tile, a few groups) with the mma fragment mapping.
import numpy as np
rng = np.random.default_rng(0)

def perm8(k): return (k & ~7) | ((k & 3) << 1) | ((k >> 2) & 1)
def h2(u32):  # uint32 -> (lo half, hi half) as float64
    return np.array([u32 & 0xFFFF, u32 >> 16], dtype=np.uint16).view(np.float16).astype(np.float64)
def tofp32_trunc(v):  # fp32 truncation toward zero (tensor-core accumulation model)
    f = np.float32(v)
    if abs(float(f)) > abs(v): f = np.nextafter(f, np.float32(0))
    return float(f)

def mma(A, B, C, trunc):  # A[16][16], B[16][8], C[16][8]; D = A B + C, products exact, sum rounded to fp32
    D = np.zeros((16, 8))
    for r in range(16):
        for c in range(8):
            s = C[r][c] + sum(A[r][k] * B[k][c] for k in range(16))
            D[r][c] = tofp32_trunc(s) if trunc else float(np.float32(s))
    return D

def frag_A(lane_regs):  # lane_regs[lane] = 4 uint32 -> A[16][16] (PTX m16n8k16 f16 layout)
    A = np.zeros((16, 16))
    for lane in range(32):
        g, t = lane >> 2, lane & 3
        for i, (row, k) in enumerate([(g, 2*t), (g+8, 2*t), (g, 2*t+8), (g+8, 2*t+8)]):
            A[row][k:k+2] = h2(lane_regs[lane][i])
    return A
def frag_B(lane_regs):  # lane_regs[lane] = 2 uint32 -> B[16][8]
    B = np.zeros((16, 8))
    for lane in range(32):
        g, t = lane >> 2, lane & 3
        for i, k in enumerate([2*t, 2*t+8]):
            B[k:k+2, g] = h2(lane_regs[lane][i])
    return B
def D_lane(D, lane):
    g, t = lane >> 2, lane & 3
    return [D[g][2*t], D[g][2*t+1], D[g+8][2*t], D[g+8][2*t+1]]

def run(G, K, trunc, codes_kind):
    N = 16
    if codes_kind == 'rtn':
        codes = np.clip(np.round(rng.standard_normal((N, K)) * 2.5 + 8), 0, 15).astype(np.uint8)
    else:
        codes = rng.integers(0, 16, (N, K)).astype(np.uint8)
    packed = (codes[:, 0::2] | (codes[:, 1::2] << 4)).astype(np.uint8)  # engine/quant.py pack_codes (4-bit)
    scales = (rng.random((N, K // G)) * 0.01 + 0.005).astype(np.float16)
    x = rng.standard_normal(K).astype(np.float16)
    xp = np.zeros(K, np.float16)
    for k in range(K): xp[perm8(k)] = x[k]                               # x in perm8 order
    xw = xp.view(np.uint32)                                               # half2 words
    words = packed.view('<u4')                                            # [N][K/8] code words
    ng = K // G
    # bias quads: mma with A = -1032 (a0,a1) / -72 (a2,a3); B col n = group n; lane t takes uint2 4s+t
    kLo, kHi = 0xE408E408, 0xD480D480
    assert list(h2(kLo)) == [-1032, -1032] and list(h2(kHi)) == [-72, -72]
    A_b = frag_A([[kLo, kLo, kHi, kHi]] * 32)
    nbias = np.zeros(ng)
    for m in range(0, ng, 8):
        D = np.zeros((16, 8))
        for s in range(G // 16):
            regs = []
            for lane in range(32):
                g, t = lane >> 2, lane & 3
                grp = min(m + g, ng - 1)
                q = grp * (G // 4) + 4 * s + t        # uint2 index
                regs.append([xw[2*q], xw[2*q+1]])
            D = mma(A_b, frag_B(regs), D, trunc)
        for lane in range(4):
            d = D_lane(D, lane)
            for c in range(2):
                if m + 2*lane + c < ng: nbias[m + 2*lane + c] = d[c]
    acc = np.zeros((32, 2))
    for j in range(ng):
        C = np.full((16, 8), nbias[j])  # {-bias x 4} quad loaded into every lane's C
        for i in range(G // 32):        # word i of the lane's row segment
            # lane t: word index within the row = j*G/8 + (G==64 ? 2t+i : t); x uint4 index the same
            def wi(t): return j * (G // 8) + (2*t + i if G == 64 else t)
            for step in range(2):
                Aregs, Bregs = [], []
                for lane in range(32):
                    g, t = lane >> 2, lane & 3
                    w0, w1 = int(words[g][wi(t)]), int(words[g+8][wi(t)])
                    if step == 1: w0, w1 = w0 >> 8, w1 >> 8
                    lo = lambda w: (w & 0x000F000F) | 0x64006400
                    hi = lambda w: (w & 0x00F000F0) | 0x54005400
                    Aregs.append([lo(w0), lo(w1), hi(w0), hi(w1)])
                    xv = [int(v) for v in xw[4*wi(t):4*wi(t)+4]]  # uint4 of x (perm8)
                    Bregs.append([xv[0], xv[1]] if step == 0 else [xv[2], xv[3]])
                C = mma(frag_A(Aregs), frag_B(Bregs), C, trunc)
        for lane in range(32):
            g, t = lane >> 2, lane & 3
            d = D_lane(C, lane)
            acc[lane][0] = float(np.float32(np.float32(scales[g][j]) * np.float32(d[0]) + np.float32(acc[lane][0])))
            acc[lane][1] = float(np.float32(np.float32(scales[g+8][j]) * np.float32(d[2]) + np.float32(acc[lane][1])))
    got = np.zeros(N)
    for g in range(8): got[g], got[g+8] = acc[4*g][0], acc[4*g][1]
    # also check every t lane holds the same value (all B columns are x)
    for lane in range(32):
        g = lane >> 2
        assert abs(acc[lane][0] - got[g]) <= 1e-6 * abs(got[g]) + 1e-9
    wd = (codes.astype(np.float64) - 8) * np.repeat(scales.astype(np.float64), G, axis=1)
    ref = wd @ x.astype(np.float64)
    return np.linalg.norm(got - ref) / np.linalg.norm(ref), np.abs(got - ref).max() / np.abs(ref).max()

for G in (64, 32):
    for K in (G * 3, 1152 if G == 64 else 640):
        for trunc in (False, True):
            for kind in ('rtn', 'uniform'):
                e, m = run(G, K, trunc, kind)
                print(f"G={G} K={K} {'trunc' if trunc else 'rn   '} {kind:8s} rel_err={e:.2e} max_rel={m:.2e}")
