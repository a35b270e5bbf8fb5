"""`monorail info`: version, native build and GPU."""

from __future__ import annotations

import argparse


def _run(args: argparse.Namespace) -> int:
    from engine import __version__
    from engine.native import native_status

    print(f"monorail {__version__}")
    print(native_status().summary())
    return 0


def register(subparsers) -> None:
    p = subparsers.add_parser("info", help="version, native build, GPU, backend and model")
    p.set_defaults(func=_run)
