"""Find loads waited for before a kernel's PDL wait, in the SASS of the decode step's kernels.

A kernel launched with programmatic dependent launch (csrc/cuda/pdl.cuh) issues its constant loads (weights, scales,
norm weights, a layer's state) before `griddepcontrol.wait` (SASS: ACQBULK) so that they are in flight while its
predecessor finishes. That gains nothing if the kernel also consumes one of them before the wait: the instruction
that reads the loaded register stalls until the load returns, and the wait (and everything after it) starts a DRAM
round trip late. Session 13 found three such kernels this way (the GDN step's conv sums, variant 4's and the sx
kernels' scale conversions; bench/NOTES.md).

    python3 bench/sass_prewait.py [--arch 90] [csrc/cuda/qgemv.cu ...]

Compiles each source to a cubin with nvcc, disassembles it with cuobjdump (on PATH, or from the
`nvidia-cuda-cuobjdump` wheel: `pip install nvidia-cuda-cuobjdump`), and prints, per kernel, each instruction before
its first ACQBULK that reads a register an earlier LDG of that stretch wrote (kernels without one are skipped). It
reads straight-line order only (a branch may skip a listed instruction), so treat its output as places to look, not
a proof.
"""

from __future__ import annotations

import argparse
import re
import tempfile

_INSN = re.compile(r"/\*(?P<addr>[0-9a-f]{4,})\*/\s+(?P<pred>@!?U?P\w+\s+)?(?P<op>[A-Z][A-Z0-9_.]*)\s*(?P<args>[^;]*);")
_REG = re.compile(r"\bR(\d+)\b")
# opcodes whose first register operand is read, not written (stores, branches, compares into predicates)
_NO_REG_DEST = ("ST", "RED", "ATOM", "BRA", "ISETP", "FSETP", "HSETP", "DSETP", "PLOP", "BAR", "WARPSYNC")


def pre_wait_stalls(sass: str) -> dict[str, list[str]]:
    """{kernel: [instructions before its first ACQBULK that read a register loaded by an earlier LDG]}."""
    found: dict[str, list[str]] = {}
    for name, body in _functions(sass):
        if "ACQBULK" not in body:
            continue  # no PDL wait in this kernel (launched plainly): nothing stands before one
        loaded: set[int] = set()
        hits = []
        for m in _INSN.finditer(body):
            op, args = m.group("op"), m.group("args")
            if op.startswith("ACQBULK"):
                break
            regs = [int(r) for r in _REG.findall(args)]
            if op.startswith("LDG"):
                if regs:
                    loaded.add(regs[0])  # the destination (a vector load writes the registers after it too)
                    width = 4 if ".128" in op else 2 if ".64" in op else 1
                    loaded.update(range(regs[0], regs[0] + width))
                continue
            writes = bool(regs) and not op.startswith(_NO_REG_DEST)
            sources = regs[1:] if writes else regs
            if any(r in loaded for r in sources):
                hits.append(f"{op} {args.strip()}")
            if writes:
                loaded.discard(regs[0])  # overwritten by something else: no longer waits on a load
        if hits:
            found[name] = hits
    return found


def _functions(sass: str):
    parts = re.split(r"\n\s*Function : (\S+)\n", sass)
    for i in range(1, len(parts) - 1, 2):
        yield parts[i], parts[i + 1]


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("sources", nargs="*", default=["csrc/cuda/qgemv.cu", "csrc/cuda/qgemv_generic.cu",
                                                   "csrc/cuda/qgemv_mma_4_8bit.cu", "csrc/cuda/qgemv_mma_5_6bit.cu",
                                                   "csrc/cuda/gdn.cu", "csrc/cuda/attention.cu"])
    ap.add_argument("--arch", default="90")
    args = ap.parse_args()
    from cuda_tools import compile_sass  # bench/ is the script's directory, first on sys.path

    with tempfile.TemporaryDirectory() as tmp:
        for src in args.sources:
            sass = compile_sass(src, args.arch, tmp)
            for name, hits in pre_wait_stalls(sass).items():
                print(f"{src}: {name}")
                for h in hits[:8]:
                    print(f"    {h}")
                if len(hits) > 8:
                    print(f"    ... {len(hits) - 8} more")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
