"""`monorail info`: version, native build, GPU, the backend a chat would use, and the model."""

from __future__ import annotations

import argparse
from pathlib import Path


def _model_line(model: str) -> str:
    from engine import demo
    from engine.config import ConfigError, load_config

    if model == "demo":
        path = demo.demo_model_dir()
        where = f"{path}" if demo.is_demo_model(path) else f"{path} (generated on first use)"
        return f"model: built-in demo '{demo.DEMO_NAME}', RANDOM WEIGHTS (meaningless output), at {where}"
    p = Path(model).expanduser()
    if p.is_file():
        return f"model: artifact {p} (run `monorail inspect {p}` for its recipe and plan)"
    try:
        cfg = load_config(p)
    except ConfigError as exc:
        return f"model: {p}: not usable: {exc}"
    t = cfg.text
    return (f"model: {p}: {t.num_hidden_layers} layers, hidden {t.hidden_size}, vocab {t.vocab_size:,}, "
            f"context {t.max_position_embeddings:,}, vision {'yes' if cfg.has_vision else 'no'}, "
            f"MTP {'yes' if cfg.has_mtp else 'no'}")


def _run(args: argparse.Namespace) -> int:
    from engine import __version__
    from engine.native import native_status

    st = native_status()
    print(f"monorail {__version__}")
    print(st.summary())
    if st.gpu_usable:
        print("backend: auto picks native (the CUDA engine); reference (torch) also available")
    else:
        print("backend: auto picks reference (torch on the CPU); the native backend needs a CUDA GPU and a CUDA build")
    print(_model_line(args.model))
    return 0


def register(subparsers) -> None:
    p = subparsers.add_parser("info", help="version, native build, GPU, backend and model")
    p.add_argument("--model", default="demo", help="'demo', an HF checkpoint folder or an artifact")
    p.set_defaults(func=_run)
