"""The options every command that loads a model shares (chat, serve)."""

from __future__ import annotations


def add_engine_arguments(p) -> None:
    p.add_argument("--model", default="demo", help="'demo' (built-in, random weights), an HF folder or an artifact")
    p.add_argument("--backend", choices=["auto", "native", "reference"], default="auto",
                   help="auto (default): native where a CUDA GPU is usable, else reference")
    p.add_argument("--kv", choices=["bf16", "int8", "int4"], default="int8", help="KV cache format (native backend)")
    p.add_argument("--max-context", type=int, default=None)
