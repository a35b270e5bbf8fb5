"""When a kernel's global loads go out relative to its tensor-core products, in its SASS: one line per kernel, each
128-bit global load as W (a constant load: weights) or X (another: x), each run of mma as M<count>, other
instructions left out, and `|` at each PDL wait (ACQBULK).

    python3 bench/sass_load_order.py [--arch 90] [--kernel qgemv_mma_kernel] [--loops] [csrc/cuda/qgemv_mma_4_8bit.cu ...]

--loops prints instead, per kernel, its registers (cuobjdump -res-usage) and its main loop (main_loop: the backward
branch's body with the most HMMA): the instructions in it and its most frequent opcodes; session 45 counted a
tensor-core GEMV pass this way (bench/results/sass-loops-mma-s45.txt), session 47 again
(bench/results/sass-loops-mma-s47.txt).

Session 44 read the tensor-core GEMV's loop this way: by default ptxas issues a 4-span pass's spans 2 and 3 of weight
loads only after spans 0 and 1 are multiplied (W's between M runs), and set_qgemv_mma_loads_first puts every W of
the pass before its first M (bench/results/sass-load-order-mma-s44.txt). Compiles as bench/sass_prewait.py does and
reads the SASS with its parser (cuda_tools.compile_sass; cuobjdump on PATH or the `nvidia-cuda-cuobjdump` wheel). Straight-line order only.
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import tempfile
from collections import Counter

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


def main_loop(body: str) -> tuple[int, Counter]:
    """The instructions of a function's main loop and their opcodes (without modifiers): the body of the backward
    branch whose body holds the most tensor-core products (HMMA), the shortest such body on a tie; in a function
    without HMMA, the longest backward branch's body. (Since session 47 the tensor-core GEMV has two loops of the same
    products: unchecked passes, where its time goes, then checked ones, longer; other loops may be longer still.)"""
    insns = [(int(m.group("addr"), 16), m.group("op"), m.group("args")) for m in _INSN.finditer(body)]
    best = (-1, 0, 0, -1)   # (HMMA in the body, its length (negated where it holds HMMA), first address, last address)
    for addr, op, args in insns:
        target = re.search(r"0x([0-9a-f]+)", args) if op.startswith("BRA") else None
        if target and int(target.group(1), 16) < addr:
            lo = int(target.group(1), 16)
            mma = sum(o.startswith("HMMA") for a, o, _ in insns if lo <= a <= addr)
            best = max(best, (mma, -(addr - lo) if mma else addr - lo, lo, addr))
    ops = Counter(op.split(".")[0] for addr, op, _ in insns if best[2] <= addr <= best[3])
    return sum(ops.values()), ops


def registers(cubin: str) -> dict[str, int]:
    """Registers of each function of a cubin (cuobjdump -res-usage)."""
    from cuda_tools import find_cuda_tool
    out = subprocess.run([find_cuda_tool("cuobjdump"), "-res-usage", cubin], check=True, capture_output=True,
                         text=True).stdout
    return {m.group(1): int(m.group(2)) for m in re.finditer(r"Function (\S+):\s+REG:(\d+)", out)}


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("sources", nargs="*", default=["csrc/cuda/qgemv_mma_4_8bit.cu", "csrc/cuda/qgemv_mma_5_6bit.cu"])
    ap.add_argument("--arch", default="90")
    ap.add_argument("--kernel", default="qgemv_mma_kernel", help="part of the (mangled) kernel names to print")
    ap.add_argument("--loops", action="store_true", help="registers and the main loop's instructions instead")
    args = ap.parse_args()
    from cuda_tools import compile_sass

    with tempfile.TemporaryDirectory() as tmp:
        for src in args.sources:
            sass = compile_sass(src, args.arch, tmp)
            regs = registers(os.path.join(tmp, os.path.basename(src) + ".cubin")) if args.loops else {}
            for name, body in _functions(sass):
                if args.kernel in name:
                    demangled = subprocess.run(["c++filt", name], capture_output=True, text=True).stdout.strip()
                    short = demangled.replace("(anonymous namespace)::", "").split("(")[0]
                    if args.loops:
                        count, ops = main_loop(body)
                        top = ", ".join(f"{op} {n}" for op, n in ops.most_common(8))
                        print(f"{short}: {regs.get(name, '?')} registers; main loop {count} instructions ({top})")
                    else:
                        print(f"{short}:\n    {load_order(body)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
