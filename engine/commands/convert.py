"""`monorail convert HF_DIR -o OUT`: Hugging Face checkpoint folder -> Monorail artifact."""

from __future__ import annotations

import argparse
import sys
import time
from typing import TextIO


def _fmt_bytes(n: float) -> str:
    for unit in ("B", "KB", "MB", "GB", "TB"):
        if abs(n) < 1000 or unit == "TB":
            return f"{n:.1f} {unit}" if unit != "B" else f"{int(n)} B"
        n /= 1000
    return f"{n:.1f} TB"


def _fmt_eta(s: float) -> str:
    if s == float("inf") or s != s:
        return "--:--"
    s = int(s + 0.5)
    h, rem = divmod(s, 3600)
    m, sec = divmod(rem, 60)
    return f"{h}:{m:02d}:{sec:02d}" if h else f"{m:02d}:{sec:02d}"


class TerminalProgress:
    """Draws ConvertProgress as one updating line on a terminal, or a line every few seconds elsewhere."""

    def __init__(self, stream: TextIO | None = None, width: int = 24, interval_s: float = 5.0):
        self.stream = stream or sys.stderr
        self.width = width
        self.tty = bool(getattr(self.stream, "isatty", lambda: False)())
        self.interval_s = interval_s
        self._last = 0.0

    def line(self, p) -> str:
        filled = int(self.width * p.percent / 100)
        bar = "#" * filled + "." * (self.width - filled)
        return (f"{p.percent:5.1f}% [{bar}] {_fmt_bytes(p.done_bytes)}/{_fmt_bytes(p.total_bytes)} "
                f"{_fmt_bytes(p.rate_bytes_s)}/s ETA {_fmt_eta(p.eta_s)} [{p.index}/{p.count}] {p.tensor}")

    def __call__(self, p) -> None:
        done = p.index == p.count
        if self.tty:
            self.stream.write("\r\x1b[2K" + self.line(p) + ("\n" if done else ""))
            self.stream.flush()
            return
        now = time.monotonic()
        if done or now - self._last >= self.interval_s:
            self._last = now
            self.stream.write(self.line(p) + "\n")
            self.stream.flush()


def _run(args: argparse.Namespace) -> int:
    from engine.convert import convert

    progress = None if args.quiet else TerminalProgress()
    try:
        result = convert(args.hf_dir, args.output, recipe=args.recipe, method=args.quantizer,
                         allow_test_shapes=True if args.allow_test_shapes else None, progress=progress,
                         threads=args.threads)
    except KeyboardInterrupt:
        print("\ninterrupted: no artifact was written (run the same command again to start over)", file=sys.stderr)
        return 130
    except (ValueError, OSError) as exc:
        print(f"monorail convert: error: {exc}", file=sys.stderr)
        return 2
    print(f"wrote {result.path} ({_fmt_bytes(result.artifact_bytes)}) from {_fmt_bytes(result.source_bytes)} "
          f"in {result.elapsed_s:.1f} s; family {result.family}, recipe {result.recipe}")
    print(f"source digest {result.source_digest}")
    print("largest relative reconstruction errors:")
    for r in result.worst(args.show_errors):
        print(f"  {r.rel_error:.4e}  {r.format:6s} {r.name}")
    return 0


def register(subparsers) -> None:
    p = subparsers.add_parser("convert", help="convert a Hugging Face checkpoint folder into a Monorail artifact",
                              description="Read a Qwen3.5/3.6/3.8-27B checkpoint (bf16 or official FP8) tensor by "
                                          "tensor and write a quantized, checksummed Monorail artifact.")
    p.add_argument("hf_dir", help="checkpoint folder (config.json, *.safetensors, tokenizer files)")
    p.add_argument("-o", "--output", required=True, help="artifact file to write (e.g. qwen3.6-27b.monorail)")
    p.add_argument("--recipe", default="q4-27b", help="weight recipe: q4-27b (default, fits 24 GiB), q8, q4, "
                                                      "test-mixed")
    p.add_argument("--quantizer", choices=("search", "search-act", "rtn"), default=None,
                   help="override the recipe's quantizer (search: per-group scale search, default; search-act: "
                        "the same weighted by activations of a built-in calibration text, one extra pass over "
                        "the checkpoint; rtn: round-to-nearest, fastest)")
    p.add_argument("--allow-test-shapes", action="store_true",
                   help="accept tiny test models with the 27B ratios (also MONORAIL_ALLOW_TEST_SHAPES=1)")
    p.add_argument("--threads", type=int, default=None, metavar="N",
                   help="CPU threads for quantization (default: torch's choice; 1 is best on a busy machine)")
    p.add_argument("--show-errors", type=int, default=5, metavar="N", help="list the N largest errors (default 5)")
    p.add_argument("-q", "--quiet", action="store_true", help="no progress bar")
    p.set_defaults(func=_run)
