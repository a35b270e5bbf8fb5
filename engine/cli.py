"""`monorail` command line: argparse subcommands, one module each under engine/commands/.

Heavy imports (torch, the native module) happen inside the commands, never at import time,
so `monorail --help` is instant.
"""

from __future__ import annotations

import argparse
import importlib
import sys

# Each module exposes register(subparsers).
COMMAND_MODULES = [
    "engine.commands.info",
    "engine.commands.plan",
    "engine.commands.chat",
    "engine.commands.serve",
    "engine.commands.convert",
    "engine.commands.inspect",
]


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="monorail", description="Monorail: one strong open model on one GPU at home.")
    sub = p.add_subparsers(dest="command", metavar="COMMAND")
    for name in COMMAND_MODULES:
        importlib.import_module(name).register(sub)
    return p


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        # No subcommand: open the desktop app (imported lazily so the CLI never needs Qt).
        from app.main import run

        return int(run() or 0)
    return int(args.func(args) or 0)


if __name__ == "__main__":
    sys.exit(main())
