"""Where one kernel spends its time, from Nsight Compute's source page: the SASS instructions (or, with --lines, the
CUDA source lines) where the warp-state sampler found the warps most often, and how many warp instructions each
executed.

The CSV comes from a report taken with `--section SourceCounters`:

    ncu --import finish.ncu-rep --page source --csv --print-source sass > finish-sass.csv
    python3 bench/ncu_source_top.py finish-sass.csv [--top 25]
    python3 bench/ncu_source_top.py finish-sass.csv --lines csrc/cuda/sampler.cu --kernel sample_finish_kernel

ncu's CUDA-source view came back without metric columns on the device (session 31-32), so --lines maps the SASS rows
to source lines itself: it compiles the source here for the same arch with -lineinfo, disassembles the cubin with
nvdisasm (on PATH, or from the `nvidia-cuda-nvdisasm` wheel), and pairs the kernel's instructions with the CSV's rows
in order. The pairing holds only when both builds emitted the same SASS (same nvcc major version and flags); it
checks every opcode and stops where they differ. Inlined code is charged to the innermost line (cub's and CUDA's
headers appear under their own file names).
"""

from __future__ import annotations

import argparse
import collections
import csv
import os
import re
import subprocess
import sys
import tempfile

_LINE = re.compile(r'//## File "([^"]+)", line (\d+)')
_INSN = re.compile(r"\s*/\*[0-9a-f]{4,}\*/\s+(.*?);")


def read_rows(path: str) -> tuple[list[str], list[list[str]]]:
    """The header and the instruction rows of ncu's source-page CSV (rows before the header are ncu's messages)."""
    with open(path, newline="") as f:
        lines = [r for r in csv.reader(f) if r]
    # the header names a warp-stall sampling column (a source row may contain the word "Sampling" too)
    head = next((i for i, r in enumerate(lines) if any(c.startswith("Warp Stall Sampling") for c in r)), None)
    if head is None:
        sys.exit(f"{path}: no 'Warp Stall Sampling' column (was the report taken with --section SourceCounters?)")
    cols = lines[head]
    return cols, [r for r in lines[head + 1:] if len(r) == len(cols)]


def number(cell: str) -> float:
    try:
        return float(cell.replace(",", "") or 0)
    except ValueError:
        return 0.0


def opcode(text: str) -> str:
    """The opcode of one SASS instruction, its predicate dropped."""
    words = text.split()
    if words and words[0].startswith("@"):
        words = words[1:]
    return words[0] if words else ""


def kernel_lines(source: str, kernel: str, arch: str) -> list[tuple[str, tuple[str, int] | None]]:
    """[(instruction, (file, line))] of the kernel whose mangled name contains `kernel`, from a local -lineinfo build."""
    from cuda_tools import find_cuda_tool  # bench/ is the script's directory, first on sys.path

    with tempfile.TemporaryDirectory() as tmp:
        cubin = os.path.join(tmp, "k.cubin")
        subprocess.run(["nvcc", "-std=c++17", "-O3", f"-arch=sm_{arch}", "--expt-relaxed-constexpr", "-lineinfo",
                        "-cubin", source, "-Icsrc", "-Icsrc/cuda", "-o", cubin], check=True)
        text = subprocess.run([find_cuda_tool("nvdisasm"), "--print-line-info", cubin], check=True, capture_output=True,
                              text=True).stdout.splitlines()
    start = next((i for i, l in enumerate(text) if l.startswith(".text.") and kernel in l), None)
    if start is None:
        sys.exit(f"{source}: no kernel named like {kernel}")
    out, where = [], None
    for l in text[start + 1:]:
        if l.startswith(".text.") or l.startswith("//----"):
            break
        m = _LINE.search(l)
        if m:
            where = (os.path.basename(m.group(1)), int(m.group(2)))
            continue
        m = _INSN.match(l)
        if m:
            out.append((m.group(1).strip(), where))
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("csv")
    ap.add_argument("--top", type=int, default=25)
    ap.add_argument("--lines", metavar="SOURCE.cu", help="map the SASS rows to this source's lines")
    ap.add_argument("--kernel", default="", help="with --lines: part of the kernel's mangled name")
    ap.add_argument("--arch", default="90")
    args = ap.parse_args()
    cols, rows = read_rows(args.csv)
    sampled = next(i for i, c in enumerate(cols) if c.startswith("Warp Stall Sampling (All"))
    executed = cols.index("Instructions Executed") if "Instructions Executed" in cols else None
    source = cols.index("Source") if "Source" in cols else 1
    samples = [number(r[sampled]) for r in rows]
    counts = [number(r[executed]) if executed is not None else 0.0 for r in rows]
    total_s, total_e = sum(samples) or 1.0, sum(counts) or 1.0
    print(f"{args.csv}: {int(sum(samples))} samples, {int(sum(counts))} warp instructions executed, {len(rows)} rows")
    if not args.lines:
        for s, e, r in sorted(zip(samples, counts, rows), key=lambda x: -x[0])[:args.top]:
            print(f"{100 * s / total_s:6.2f} % samples {100 * e / total_e:6.2f} % executed  {r[0]}  {r[source].strip()}")
        return
    local = kernel_lines(args.lines, args.kernel, args.arch)
    if len(local) != len(rows):
        sys.exit(f"the local build has {len(local)} instructions, the report {len(rows)}: not the same SASS")
    for i, ((text, _), r) in enumerate(zip(local, rows)):
        if opcode(text) != opcode(r[source]):
            sys.exit(f"instruction {i} differs: local {text!r}, report {r[source].strip()!r}: not the same SASS")
    by_line_s: collections.Counter = collections.Counter()
    by_line_e: collections.Counter = collections.Counter()
    for (_, where), s, e in zip(local, samples, counts):
        by_line_s[where] += s
        by_line_e[where] += e
    text = open(args.lines).read().splitlines()
    name = os.path.basename(args.lines)
    for where, e in by_line_e.most_common(args.top):
        code = text[where[1] - 1].strip()[:100] if where and where[0] == name else ""
        label = f"{where[0]}:{where[1]}" if where else "?"
        print(f"{100 * e / total_e:6.2f} % executed {100 * by_line_s[where] / total_s:6.2f} % samples  {label}  {code}")


if __name__ == "__main__":
    main()
