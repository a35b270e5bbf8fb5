"""Time the T = 1 decode GEMV on the 27B layer shapes, for every launch variant and weight width, and/or launch
it a few times for `ncu` to profile.

    python3 bench/gemv_probe.py                           # 4-bit table: shape x variant -> us, GB/s
    python3 bench/gemv_probe.py --bits 4,5,6,8            # one table per width
    python3 bench/gemv_probe.py --bits 5 --variants 1,16  # a subset
    python3 bench/gemv_probe.py --variants 36 --shapes half=2560x17408,down=5120x17408,double=10240x17408
                                                          # other shapes (step ms then counts the 27B's shapes only)
    ncu --clock-control none -k regex:qgemv --launch-skip 3 --launch-count 4 --section ... \\
        python3 bench/gemv_probe.py --variants 16 --reps 5

Variants (csrc/cuda/qgemv.cu launch_bits): 0 = route by shape (default), 1..15 and 20..28 forced 4-bit launch
variants (20..28: integer dot products on x staged as 16-bit integers), 16..19 the per-warp cp.async ring kernel
(every width). For 5/6/8-bit, 1..15 and 20..28 all run the generic per-element path, so the default list there is 0
(route: the ring), 1 (generic, for comparison) and 16..19.

Bytes counted: codes + high-bit plane + scales (x and the output are < 0.1 % of them); all random, group 64.
Each figure is the mean of `reps` back-to-back launches after 3 warm-up launches (op_qgemv_time). The launches
cycle through enough copies of each matrix to stream at least 256 MB (H200 L2: 50 MB), so every matrix is read
from DRAM as in a decode step, where the other layers evict it (before session 5 the table timed one copy: the
matrices that fit in L2, gdn_in and gdn_out, were partly served from it).
"""

from __future__ import annotations

import argparse
import json

import torch

from engine.native import load_native

SHAPES = {  # name: (N, K), group 64; gdn_out is also the attention output projection's shape
    "gate_up": (34816, 5120),
    "down": (5120, 17408),
    "gdn_in": (16480, 5120),
    "gdn_out": (5120, 6144),
    "attn_qkv": (14336, 5120),
    "lm_head": (248320, 5120),
}
STREAM_BYTES = 256 << 20  # each timing cycles through copies of a matrix adding up to at least this
PER_STEP = {"gate_up": 64, "down": 64, "gdn_in": 48, "gdn_out": 64, "attn_qkv": 16, "lm_head": 1}  # launches per
# decode step of the 27B (48 GDN + 16 attention layers; gdn_out's shape also serves the 16 attention outputs)
GROUP = 64
VARIANTS_4BIT = list(range(29))
VARIANTS_WIDE = [0, 1, 16, 17, 18, 19]  # 5/6/8-bit: 1..15 are one and the same generic path


def make_matrix(n: int, k: int, bits: int, copies: int = 1):
    """`copies` random matrices in the canonical layout, each array's copies contiguous: (codes, high, scales,
    bytes of one copy); codes[i], high[i], scales[i] are copy i."""
    code_cols = k if bits == 8 else k // 2
    codes = torch.randint(0, 256, (copies, n, code_cols), dtype=torch.uint8, device="cuda")
    high = None
    if bits in (5, 6):
        high = torch.randint(0, 256, (copies, n, k // 8 if bits == 5 else k // 4), dtype=torch.uint8, device="cuda")
    scales = (torch.rand(copies, n, k // GROUP, device="cuda") * 1e-3).half()
    nbytes = (codes[0].numel() + (high[0].numel() if high is not None else 0) + scales[0].numel() * 2)
    return codes, high, scales, nbytes


def parse_shapes(text: str) -> dict[str, tuple[int, int]]:
    """'down=5120x17408,half=2560x17408' -> {"down": (5120, 17408), "half": (2560, 17408)}; K a multiple of 64."""
    shapes = {}
    for item in text.split(","):
        name, _, shape = item.strip().partition("=")
        n, _, k = shape.partition("x")
        if not (name and n.isdigit() and k.isdigit() and int(n) > 0 and int(k) > 0 and int(k) % GROUP == 0):
            raise SystemExit(f"--shapes: {item.strip()!r} is not name=NxK with K a multiple of {GROUP}")
        shapes[name] = (int(n), int(k))
    return shapes


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--bits", default="4", help="comma-separated widths out of 4,5,6,8")
    ap.add_argument("--variants", default="", help="comma-separated variant ids (default: every one that differs)")
    ap.add_argument("--reps", type=int, default=50)
    ap.add_argument("--json", default="", help="write {bits: {shape: {variant: us}}, 'best': ...} here")
    ap.add_argument("--shapes", default="", help="name=NxK,... instead of the 27B's layer shapes")
    args = ap.parse_args()
    shapes = parse_shapes(args.shapes) if args.shapes.strip() else SHAPES
    report = {}
    widths = [int(b) for b in args.bits.split(",") if b != ""]
    nat = load_native()
    for bits in widths:
        if bits not in (4, 5, 6, 8):
            raise SystemExit(f"--bits: {bits} is not one of 4, 5, 6, 8")
        if args.variants:
            variants = [int(v) for v in args.variants.split(",") if v != ""]
        else:
            variants = VARIANTS_4BIT if bits == 4 else VARIANTS_WIDE
        data = {}
        for name, (n, k) in shapes.items():
            one = n * k * bits // 8 + n * (k // GROUP) * 2
            codes, high, scales, nbytes = make_matrix(n, k, bits, copies=max(1, -(-STREAM_BYTES // one)))
            x = torch.randn(1, k, device="cuda").half()
            out = torch.empty(1, n, device="cuda")
            data[name] = (codes, high, scales, x, out, nbytes)

        res = {}  # (variant, shape) -> (us, GB/s)
        try:
            for v in variants:
                nat.set_qgemv_variant(v)
                for name, (n, k) in shapes.items():
                    codes, high, scales, x, out, nbytes = data[name]
                    ms = nat.op_qgemv_time(codes.data_ptr(), 0 if high is None else high.data_ptr(),
                                           scales.data_ptr(), n, k, bits, GROUP, x.data_ptr(), 1, out.data_ptr(),
                                           args.reps, copies=codes.shape[0], codes_stride=codes[0].numel(),
                                           high_stride=0 if high is None else high[0].numel(),
                                           scales_stride=scales[0].numel() * 2)
                    res[v, name] = (ms * 1000, nbytes / ms / 1e6)
        finally:
            nat.set_qgemv_variant(0)
        del data
        torch.cuda.empty_cache()

        names = list(shapes)
        print(f"\n{bits}-bit, group {GROUP}")
        head = "variant " + "".join(f"{nm + f' {shapes[nm][0]}x{shapes[nm][1]}':>24s}" for nm in names)
        print(head + f"{'step ms':>10s}")
        print(" " * 8 + "".join(f"{'us':>12s}{'GB/s':>12s}" for _ in names))
        best = {nm: min(variants, key=lambda v: res[v, nm][0]) for nm in names}
        for v in variants:
            row = f"{v:7d} "
            for nm in names:
                us, gbs = res[v, nm]
                row += f"{us:11.1f}{'*' if best[nm] == v else ' '}{gbs:12.0f}"
            row += f"{sum(PER_STEP.get(nm, 0) * res[v, nm][0] for nm in names) / 1000:10.3f}"
            print(row)
        report[bits] = {"us": {nm: {v: round(res[v, nm][0], 2) for v in variants} for nm in names},
                        "best": {f"{shapes[nm][0]}x{shapes[nm][1]}": best[nm] for nm in names}}
        route = ", ".join(f"{nm} {best[nm]}" for nm in names)
        print(f"per-shape best ({route}): step ms "
              f"{sum(PER_STEP.get(nm, 0) * res[best[nm], nm][0] for nm in names) / 1000:.3f}")
    print("* fastest for the shape; step ms = the GEMVs of one decode step with this variant for every shape "
          "(PER_STEP launches of each)")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(report, f, indent=1)


if __name__ == "__main__":
    main()
