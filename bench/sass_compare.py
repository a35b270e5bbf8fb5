"""Whether a change to the CUDA sources changed any kernel's machine code: the kernels of some sources at a git
revision against those of (other) sources in the working tree, compiled here for one architecture, compared
instruction for instruction with their encodings. A refactor that moves kernels between files, renames namespaces or
edits only host code should print "same"; no GPU is needed. Names are compared demangled, with the anonymous
namespace dropped and `monorail::gemv` read as `monorail`, so a kernel that moved to another file or took a type from
the shared GEMV header is still matched with itself.

    python3 bench/sass_compare.py --rev HEAD~1 --old csrc/cuda/qgemv.cu \
        --new csrc/cuda/qgemv.cu csrc/cuda/qgemv_mma.cu [--arch 90]

Exit status 0 when every kernel is the same on both sides, 1 otherwise (kernels only on one side count as changes).
Session 49 ran it for each split of qgemv.cu (into qgemv.cu and qgemv_mma.cu, then five files: bench/NOTES.md "Second
split"): 171 kernels, all the same."""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from cuda_tools import compile_sass  # noqa: E402

_RENAMED = (("(anonymous namespace)::", ""), ("monorail::gemv::", "monorail::"))


def kernels(sass: str) -> dict[str, list[str]]:
    """Mangled name -> its instruction lines (address, instruction and encoding, whitespace collapsed)."""
    out: dict[str, list[str]] = {}
    body: list[str] | None = None
    for line in sass.splitlines():
        m = re.search(r"Function : (\S+)", line)
        if m:
            body = out.setdefault(m.group(1), [])
        elif body is not None and re.match(r"\s+/\*[0-9a-f]{4,}\*/", line):
            body.append(" ".join(line.split()))
    return out


def readable(names: list[str]) -> dict[str, str]:
    """Mangled -> demangled name, the namespaces that a move between files may change normalised (_RENAMED)."""
    shown = subprocess.run(["c++filt"], input="\n".join(names), capture_output=True, text=True,
                           check=True).stdout.splitlines()
    out = {}
    for mangled, name in zip(names, shown):
        for ns, to in _RENAMED:
            name = name.replace(ns, to)
        out[mangled] = name
    return out


def sass_of(sources: list[str], arch: str, root: str, tmp: str) -> dict[str, list[str]]:
    found: dict[str, list[str]] = {}
    here = os.getcwd()
    os.chdir(root)   # compile_sass runs from a repository root (its include paths)
    try:
        for src in sources:
            found.update(kernels(compile_sass(src, arch, tmp)))
    finally:
        os.chdir(here)
    names = readable(list(found))
    return {names[k]: v for k, v in found.items()}


def compare(old: dict[str, list[str]], new: dict[str, list[str]]) -> list[str]:
    """One line per difference (empty: the same)."""
    lines = [f"only at the revision: {k}" for k in sorted(old.keys() - new.keys())]
    lines += [f"only in the working tree: {k}" for k in sorted(new.keys() - old.keys())]
    for k in sorted(old.keys() & new.keys()):
        a, b = old[k], new[k]
        if a != b:
            i = next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))
            lines.append(f"differs: {k} ({len(a)} -> {len(b)} lines; first at line {i})")
    return lines


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rev", required=True, help="the git revision of the old sources")
    ap.add_argument("--old", nargs="+", required=True, help="sources at --rev (paths from the repository root)")
    ap.add_argument("--new", nargs="+", required=True, help="sources in the working tree")
    ap.add_argument("--arch", default="90")
    args = ap.parse_args()
    root = subprocess.run(["git", "rev-parse", "--show-toplevel"], capture_output=True, text=True,
                          check=True).stdout.strip()
    with tempfile.TemporaryDirectory() as tmp:
        tree = os.path.join(tmp, "old")
        os.makedirs(tree)
        # the revision's whole csrc/ (the sources' headers as they were), unpacked from git archive
        archive = subprocess.run(["git", "-C", root, "archive", args.rev, "csrc"], capture_output=True, check=True)
        subprocess.run(["tar", "-x", "-C", tree], input=archive.stdout, check=True)
        old = sass_of(args.old, args.arch, tree, tmp)
        new = sass_of(args.new, args.arch, root, tmp)
    diffs = compare(old, new)
    for line in diffs[:40]:
        print(line)
    if len(diffs) > 40:
        print(f"... and {len(diffs) - 40} more")
    print(f"{len(old)} kernels at {args.rev}, {len(new)} in the working tree: "
          + ("same" if not diffs else f"{len(diffs)} differences"))
    return 1 if diffs else 0


if __name__ == "__main__":
    sys.exit(main())
