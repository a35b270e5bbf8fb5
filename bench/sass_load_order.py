"""When a kernel's global loads go out relative to its tensor-core products, in its SASS: one line per kernel, each
128-bit global load as W (a constant load: weights) or X (another: x), each run of mma as M<count>, other
instructions left out, and `|` at each PDL wait (ACQBULK).

    python3 bench/sass_load_order.py [--arch 90] [--kernel qgemv_mma_kernel] [csrc/cuda/qgemv.cu]

Session 44 read the tensor-core GEMV's loop this way: by default ptxas issues a 4-span pass's spans 2 and 3 of weight
loads only after spans 0 and 1 are multiplied (W's between M runs), and set_qgemv_mma_loads_first puts every W of
the pass before its first M (bench/results/sass-load-order-mma-s44.txt). Compiles as bench/sass_prewait.py does and
reads the SASS with its parser (cuda_tools.compile_sass; cuobjdump on PATH or the `nvidia-cuda-cuobjdump` wheel). Straight-line order only.
"""

from __future__ import annotations

import argparse
import subprocess
import tempfile

from sass_prewait import _INSN, _functions  # bench/ is the script's directory, first on sys.path


def load_order(body: str) -> str:
    """The W / X / M<n> / | sequence of one function's SASS."""
    out: list[str] = []
    mma = 0
    for m in _INSN.finditer(body):
        op = m.group("op")
        if op.startswith("HMMA"):
            mma += 1
            continue
        token = ""
        if op.startswith("LDG") and ".128" in op:
            token = "W" if ".CONSTANT" in op else "X"
        elif op == "ACQBULK":
            token = "|"
        if token:
            if mma:
                out.append(f"M{mma}")
                mma = 0
            out.append(token)
    if mma:
        out.append(f"M{mma}")
    return " ".join(out)


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("sources", nargs="*", default=["csrc/cuda/qgemv.cu"])
    ap.add_argument("--arch", default="90")
    ap.add_argument("--kernel", default="qgemv_mma_kernel", help="part of the (mangled) kernel names to print")
    args = ap.parse_args()
    from cuda_tools import compile_sass

    with tempfile.TemporaryDirectory() as tmp:
        for src in args.sources:
            sass = compile_sass(src, args.arch, tmp)
            for name, body in _functions(sass):
                if args.kernel in name:
                    demangled = subprocess.run(["c++filt", name], capture_output=True, text=True).stdout.strip()
                    short = demangled.replace("(anonymous namespace)::", "").split("(")[0]
                    print(f"{short}:\n    {load_order(body)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
