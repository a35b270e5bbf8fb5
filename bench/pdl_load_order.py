"""Find global loads that ptxas moved above a kernel's PDL wait (sm_90 SASS against the PTX it was built from).

A kernel launched with programmatic dependent launch (csrc/cuda/pdl.cuh) may start while its predecessor still runs;
`griddepcontrol.wait` (SASS: ACQBULK) blocks until the predecessor's writes are visible. Loads of what the predecessor
wrote must stay after it. The PTX keeps them there (the wait's asm has a memory clobber), but ptxas treats a
read-only-path load (ld.global.nc, what __ldg emits) as reading data that cannot change while the kernel runs, and may
schedule it above the wait: session 40 found the tensor-core GEMV's first x loads there, so that inside a decode step
it read x before the previous kernel had written it (bench/results/mma-probe-h100-s40-call1.txt).

For every kernel with an ACQBULK this compares the global loads before the first ACQBULK in SASS with the global loads
before the first griddepcontrol.wait in the PTX; more in SASS means a load was hoisted above the wait. (ptxas may
also sink a load below the wait, which costs overlap but not correctness; that is not reported.)

    python3 bench/pdl_load_order.py [csrc/cuda/qgemv.cu ...]      exit status 1 when a kernel has hoisted loads

Needs nvcc, and cuobjdump + nvdisasm on PATH or from the `nvidia-cuda-cuobjdump` / `nvidia-cuda-nvdisasm` wheels
(bench/cuda_tools.py). The test extra installs the wheels; tests/test_pdl_load_order.py runs this over the engine's
kernel sources where nvcc is present.
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
# the sources with kernels that wait on a PDL predecessor (pdl_wait / ld_after_wait, in the file or a local header it
# includes: tests/test_pdl_load_order.py test_every_source_with_pdl_waits_is_checked finds them)
SOURCES = ["qgemv.cu", "qgemv_generic.cu", "qgemv_mma.cu", "qgemv_mma_4_8bit.cu", "qgemv_mma_5_6bit.cu", "attention.cu",
           "gdn.cu", "norm_embed.cu"]

_PTX_ENTRY = re.compile(r"\.entry\s+(\S+)\s*\(")
_SASS_FUNC = re.compile(r"\n\s*Function : (\S+)\n")


@dataclass
class Hoisted:
    kernel: str
    sass_loads: int   # LDG before the first ACQBULK
    ptx_loads: int    # ld.global before the first griddepcontrol.wait


def ptx_pre_wait_loads(ptx: str) -> dict[str, int]:
    """{kernel: global loads before its first griddepcontrol.wait} for the PTX entries that have one."""
    out = {}
    starts = [(m.group(1), m.start()) for m in _PTX_ENTRY.finditer(ptx)]
    for i, (name, start) in enumerate(starts):
        body = ptx[start: starts[i + 1][1] if i + 1 < len(starts) else len(ptx)]
        wait = body.find("griddepcontrol.wait")
        if wait >= 0:
            out[name] = len(re.findall(r"\bld\.global\b", body[:wait]))
    return out


def sass_pre_wait_loads(sass: str) -> dict[str, int]:
    """{kernel: LDG instructions before its first ACQBULK} for the SASS functions that have one."""
    out = {}
    parts = _SASS_FUNC.split(sass)
    for i in range(1, len(parts) - 1, 2):
        name, body = parts[i], parts[i + 1]
        wait = body.find("ACQBULK")
        if wait >= 0:
            out[name] = len(re.findall(r"\bLDG\b", body[:wait]))
    return out


def hoisted_loads(ptx: str, sass: str) -> list[Hoisted]:
    """Kernels whose SASS issues more global loads before the PDL wait than their PTX has before it. (A vector load
    is one instruction in both; ptxas may merge loads, which lowers the SASS count, never raises it.)"""
    before = ptx_pre_wait_loads(ptx)
    return [Hoisted(name, n, before[name]) for name, n in sass_pre_wait_loads(sass).items()
            if name in before and n > before[name]]


def compile_and_check(source: Path, arch: str, cuobjdump: str, tmp: str) -> list[Hoisted]:
    """One nvcc run (the cubin, with the PTX kept beside it), then cuobjdump's SASS."""
    keep = os.path.join(tmp, source.stem)
    os.makedirs(keep, exist_ok=True)
    cubin = os.path.join(keep, source.stem + ".cubin")
    subprocess.run(["nvcc", "-std=c++17", "-O3", "-DNDEBUG", f"-arch=sm_{arch}", "--expt-relaxed-constexpr", "-cubin",
                    "-keep", "-keep-dir", keep, str(source), f"-I{ROOT / 'csrc'}", "-o", cubin], check=True)
    ptx_files = [f for f in os.listdir(keep) if f.endswith(".ptx")]
    if len(ptx_files) != 1:
        raise RuntimeError(f"{source}: expected one kept .ptx, found {ptx_files}")
    ptx = Path(keep, ptx_files[0]).read_text()
    sass = subprocess.run([cuobjdump, "-sass", cubin], check=True, capture_output=True, text=True).stdout
    return hoisted_loads(ptx, sass)


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("sources", nargs="*", default=[str(ROOT / "csrc" / "cuda" / s) for s in SOURCES])
    ap.add_argument("--arch", default="90", help="an architecture with PDL (90 or 120)")
    args = ap.parse_args()
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from cuda_tools import find_cuda_tool

    cuobjdump = find_cuda_tool("cuobjdump")
    nvdisasm = find_cuda_tool("nvdisasm")   # cuobjdump runs it from PATH
    os.environ["PATH"] = os.path.dirname(nvdisasm) + os.pathsep + os.environ.get("PATH", "")
    found = 0
    with tempfile.TemporaryDirectory() as tmp:
        for src in args.sources:
            for h in compile_and_check(Path(src), args.arch, cuobjdump, tmp):
                found += 1
                print(f"{src}: {h.kernel}: {h.sass_loads} loads before ACQBULK in SASS, {h.ptx_loads} before the wait "
                      f"in PTX")
    print(f"{found} kernel(s) with a load moved above the PDL wait")
    return 1 if found else 0


if __name__ == "__main__":
    raise SystemExit(main())
