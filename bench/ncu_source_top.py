"""The source lines of one kernel where Nsight Compute's warp-state sampler found the warps most often, from the CSV
of `ncu --import <report> --page source --csv --print-source cuda` (one row a source line, each sampling column a
count). Prints the top lines with their share of all samples, so a slow kernel's time can be put on its code.

    python3 bench/ncu_source_top.py finish-source.csv [25]
"""

from __future__ import annotations

import csv
import sys


def main() -> None:
    path, top = sys.argv[1], int(sys.argv[2]) if len(sys.argv) > 2 else 25
    with open(path, newline="") as f:
        lines = [r for r in csv.reader(f) if r]
    # the header: the first row naming a warp-stall sampling column (not a source line that says "Sampling"); rows
    # before it are ncu's own messages or source without metrics (a build without -lineinfo, or no samples)
    head = next((i for i, r in enumerate(lines) if any(c.startswith("Warp Stall Sampling") for c in r)), None)
    if head is None:
        sys.exit(f"{path}: no 'Warp Stall Sampling' column (was the report taken with --section SourceCounters?)")
    cols = lines[head]
    sample_col = next(i for i, c in enumerate(cols) if "Warp Stall Sampling (All" in c or c.endswith("Sampling (All Samples)"))
    src_col = next((i for i, c in enumerate(cols) if c.strip().lower() in ("source", "source code")), 1)
    line_col = next((i for i, c in enumerate(cols) if c.strip().lower() in ("#", "line", "line number")), 0)
    rows = []
    for r in lines[head + 1:]:
        try:
            rows.append((float(r[sample_col].replace(",", "") or 0), r[line_col], r[src_col].strip()))
        except (ValueError, IndexError):
            continue
    total = sum(s for s, _, _ in rows) or 1.0
    print(f"{path}: {int(total)} samples over {len(rows)} lines; column '{cols[sample_col]}'")
    for s, ln, src in sorted(rows, reverse=True)[:top]:
        print(f"{100 * s / total:6.2f} %  {ln:>6}  {src[:150]}")


if __name__ == "__main__":
    main()
