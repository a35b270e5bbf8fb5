"""`monorail` command line: argparse subcommands. Heavy imports (torch) happen inside commands."""

from __future__ import annotations

import argparse
import sys


def _cmd_info(args: argparse.Namespace) -> int:
    from engine import __version__
    from engine.native import native_status

    st = native_status()
    print(f"monorail {__version__}")
    print(st.summary())
    return 0


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="monorail", description="Monorail: one strong open model on one GPU at home.")
    sub = p.add_subparsers(dest="command", metavar="COMMAND")
    s = sub.add_parser("info", help="version, native build, GPU, backend and model")
    s.set_defaults(func=_cmd_info)
    return p


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help()
        return 0
    return int(args.func(args) or 0)


if __name__ == "__main__":
    sys.exit(main())
