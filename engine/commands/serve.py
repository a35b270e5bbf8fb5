"""`monorail serve`: an OpenAI-compatible chat-completions endpoint on loopback (engine/server.py)."""

from __future__ import annotations

import sys


def _run(args) -> int:
    from engine.api import Engine, EngineOptions, choose_backend
    from engine.errors import EngineError
    from engine.server import LOOPBACK_HOSTS, make_server

    if args.host not in LOOPBACK_HOSTS and not args.api_key:   # before the model loads: refused at once
        print(f"monorail serve: error: serving on {args.host} would open the model to the network without a key: "
              "pass --api-key, or serve on 127.0.0.1 (the default).", file=sys.stderr)
        return 2
    backend, note = choose_backend(args.backend)
    opts = EngineOptions(backend=backend, max_context=args.max_context, kv_dtype=args.kv,
                         prefix_disk_bytes=int(args.saved_states_gib * 2**30))
    try:
        engine = Engine.load(args.model, opts, progress=lambda f, m: print(f"  [{f * 100:3.0f}%] {m}", file=sys.stderr))
    except EngineError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    try:
        server = make_server(engine, host=args.host, port=args.port, model_id=args.model_id, api_key=args.api_key)
    except (ValueError, OSError) as exc:
        print(f"monorail serve: error: {exc}", file=sys.stderr)
        engine.unload()
        return 2
    host, port = server.server_address[:2]
    info = engine.info
    print(f"Serving {server.model_id} ({info.backend}/{info.device}, context {info.context_limit:,} tokens) at "
          f"http://{host}:{port}/v1" + (f"  [{note}]" if note else ""), file=sys.stderr)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        print("stopping", file=sys.stderr)
    finally:
        server.server_close()
        engine.unload()   # saves the newest conversation state when --saved-states-gib is set
    return 0


def register(subparsers) -> None:
    from engine.commands.engine_args import add_engine_arguments

    p = subparsers.add_parser("serve", help="serve the model over the OpenAI chat-completions protocol",
                              description="Serve one model at http://HOST:PORT/v1 (chat completions, streaming, "
                                          "reasoning_content, tools, images as data URLs). One reply at a time; "
                                          "prefix reuse resumes an agent's growing conversation. Ctrl+C stops.")
    add_engine_arguments(p)
    p.add_argument("--model-id", default=None, help="the name clients use (default: the model's name)")
    p.add_argument("--host", default="127.0.0.1", help="loopback by default; another host needs --api-key")
    p.add_argument("--port", type=int, default=8000)
    p.add_argument("--api-key", default=None, help="require 'Authorization: Bearer KEY'")
    p.add_argument("--saved-states-gib", type=float, default=0.0,
                   help="disk for conversation states kept across restarts (0: off)")
    p.set_defaults(func=_run)
