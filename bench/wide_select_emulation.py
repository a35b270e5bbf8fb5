"""A Python copy of finish_wide's radix select (csrc/cuda/sampler.cu), before and after session 32: the old one took
8-bit digits of the keys from the first byte where the list's keys differ, the new one cuts the list's key range into
2048 equal buckets, then the chosen bucket again, until a bucket is one key. Both are checked against the direct
answer from the sorted keys (the key t* where the mass from the top reaches the target; the mass and count above it;
the count holding it) on lists of the shapes the device sees: a narrow band of large values, values straddling zero,
many ties, a single key. The bucket choice follows the device's parallel rule (the highest bucket whose mass from the
top reaches the target, else bucket 0). (Session 32 also checked here the score window of a draw change that
session 33 measured and did not land; it is in git history at 764f793.) CPU only:

    python3 bench/wide_select_emulation.py
"""
import numpy as np

def old_select(keys, mass, target):
    lo, hi = int(keys.min()), int(keys.max())
    top_shift = 0 if lo == hi else ((lo ^ hi).bit_length() - 1) // 8 * 8
    mask = 0 if top_shift == 24 else (~((1 << (top_shift + 8)) - 1)) & 0xFFFFFFFF
    prefix = lo & mask; cum = 0; ca = 0
    for shift in range(top_shift, -1, -8):
        sel = (keys & mask) == prefix
        digit = (keys[sel] >> shift) & 0xFF
        hm = np.zeros(256, dtype=object); hc = np.zeros(256, dtype=np.int64)
        for d, m in zip(digit, mass[sel]): hm[d] += int(m); hc[d] += 1
        cm, cc, b = cum, ca, 255
        while b > 0 and float(cm + hm[b]) < target:
            cm += hm[b]; cc += hc[b]; b -= 1
        prefix = prefix | (b << shift); cum, ca, cnt = cm, cc, hc[b]
        mask |= 0xFF << shift
    return prefix, cum, ca, int(cnt)

def new_select(keys, mass, target, digit_bits=11):
    B = 1 << digit_bits
    lo, hi = int(keys.min()), int(keys.max())
    base = lo; bits = 0 if lo == hi else (hi - lo).bit_length()
    cum = 0; ca = 0
    while True:
        shift = max(0, bits - digit_bits)
        inr = (keys >= base) & (((keys.astype(np.int64) - base) >> bits) == 0)
        hm = np.zeros(B, dtype=object); hc = np.zeros(B, dtype=np.int64)
        for k, m in zip(keys[inr], mass[inr]): b = (int(k) - base) >> shift; hm[b] += int(m); hc[b] += 1
        # parallel rule: highest b with incl >= target, else 0
        cm = cum; cc = ca; chosen = None
        for b in range(B - 1, -1, -1):
            reaches = float(cm + hm[b]) >= target
            if (reaches and (b == B - 1 or float(cm) < target)) or (b == 0 and not reaches):
                assert chosen is None; chosen = (base + (b << shift), cm, cc, int(hc[b]))
            cm += hm[b]; cc += hc[b]
        base, cum, ca, cnt = chosen
        bits = shift
        if shift == 0: return base, cum, ca, cnt

def direct(keys, mass, target):
    order = sorted(set(int(k) for k in keys), reverse=True)
    cum = 0; ca = 0
    for k in order:
        sel = keys == k; m = sum(int(x) for x in mass[sel])
        if float(cum + m) >= target: return k, cum, ca, int(sel.sum())
        cum += m; ca += int(sel.sum())
    return None

def f2key(f):
    u = np.float32(f).view(np.uint32).astype(np.int64)
    return np.where(u & 0x80000000, (~u) & 0xFFFFFFFF, u | 0x80000000).astype(np.int64)

rng = np.random.default_rng(1)
cases = 0
for trial in range(60):
    kind = trial % 5
    n = int(rng.integers(50, 3000))
    if kind == 0: v = 30000 - rng.random(n) * 0.4
    elif kind == 1: v = rng.random(n) * 0.4 - 0.2          # straddles zero
    elif kind == 2: v = rng.integers(-3, 1, n).astype(float)  # many ties
    elif kind == 3: v = np.full(n, 1.5)                      # one key
    else: v = -2.0 - rng.random(n) * 0.8
    v = v.astype(np.float32)
    keys = f2key(v)
    keys = np.where(v == 0, f2key(np.float32(0.0)), keys)  # -0 as +0
    M = float(v.max()) + float(rng.random())
    mass = np.array([int(np.exp(float(x) - M) * 2**44) for x in v], dtype=object)
    total = sum(int(m) for m in mass)
    for frac in (0.001, 0.3, 0.5, 0.9, 0.999, 1.0):
        target = frac * total
        d = direct(keys, mass, target)
        if d is None: continue
        o = old_select(keys, mass, target); w = new_select(keys, mass, target)
        assert o == d, (trial, frac, o, d)
        assert w == d, (trial, frac, w, d)
        cases += 1
print("ok", cases, "cases: old == new == direct")

