"""`monorail chat`: a terminal chat that streams replies (reasoning dimmed, then content)."""

from __future__ import annotations

import argparse
import signal
import sys
import threading
from contextlib import contextmanager


def _print_stream(events, out) -> tuple[object, str, str]:
    """Write deltas as they come; reasoning in dim text. Returns (Finished, reasoning text, content text)."""
    from engine.api import Finished, TextDelta

    tty = out.isatty()
    channel = None
    finished = None
    texts = {"reasoning": [], "content": []}
    for ev in events:
        if isinstance(ev, TextDelta):
            if ev.channel != channel:
                if channel is not None:
                    out.write("\n")
                if ev.channel == "reasoning":
                    out.write("\x1b[2m[thinking] " if tty else "[thinking] ")
                elif tty:
                    out.write("\x1b[0m")
                channel = ev.channel
            out.write(ev.text)
            out.flush()
            texts[ev.channel].append(ev.text)
        elif isinstance(ev, Finished):
            finished = ev
    if tty:
        out.write("\x1b[0m")
    out.write("\n")
    return finished, "".join(texts["reasoning"]), "".join(texts["content"])


@contextmanager
def _ctrl_c_stops(cancel: threading.Event):
    """While a reply streams, Ctrl+C sets ``cancel`` (the engine stops between tokens and the partial reply is
    kept) instead of killing the session; a second Ctrl+C during the same reply interrupts as usual."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def stop(signum, frame):
        if cancel.is_set():
            raise KeyboardInterrupt
        cancel.set()

    previous = signal.signal(signal.SIGINT, stop)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)


def _stats_line(fin) -> str:
    prompt = f"{fin.prompt_tokens} prompt"
    if getattr(fin, "cached_tokens", 0):
        prompt += f" ({fin.cached_tokens} resumed from the last turn)"
    parts = [f"{prompt} + {fin.completion_tokens} output tokens", f"finish: {fin.reason}"]
    if fin.ttft_s is not None:
        parts.append(f"TTFT {fin.ttft_s * 1000:.0f} ms")
    if fin.decode_tok_s:
        parts.append(f"decode {fin.decode_tok_s:.1f} tok/s")
    if fin.spec_accept_rate is not None:
        parts.append(f"MTP acceptance {fin.spec_accept_rate:.0%}")
    return "(" + ", ".join(parts) + ")"


def _run(args: argparse.Namespace) -> int:
    from engine.api import Engine, EngineOptions, choose_backend, mtp_can_draft
    from engine.errors import EngineError
    from engine.sampling import SamplingParams, SamplingParamsError

    try:  # before the model loads: a bad setting is refused at once
        sampling = SamplingParams(temperature=args.temperature, top_k=args.top_k, top_p=args.top_p,
                                  max_tokens=args.max_tokens, seed=args.seed).validate()
    except SamplingParamsError as exc:
        print(f"monorail chat: error: {exc}", file=sys.stderr)
        return 2
    backend, backend_note = choose_backend(args.backend)
    if args.mtp and not mtp_can_draft(backend):
        print("note: --mtp drafts on the reference backend, and on the native one once its verify steps run on the "
              "tensor-core GEMV (README); these replies decode without it.", file=sys.stderr)
    opts = EngineOptions(backend=backend, max_context=args.max_context, kv_dtype=args.kv,
                         mtp_speculation=args.mtp, mtp_draft_tokens=args.mtp_drafts)
    try:
        engine = Engine.load(args.model, opts,
                             progress=lambda f, m: print(f"  [{f * 100:3.0f}%] {m}", file=sys.stderr))
    except EngineError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    info = engine.info
    print(f"Model: {info.name} on {info.backend}/{info.device}, context {info.context_limit:,} tokens", file=sys.stderr)
    if backend_note:
        print(f"backend: {backend}, {backend_note} (--backend picks one)", file=sys.stderr)
    if args.max_context is not None and args.max_context > info.context_limit:
        print(f"note: --max-context {args.max_context:,} is above this model's limit; "
              f"using {info.context_limit:,} tokens.", file=sys.stderr)
    if info.random_weights:
        print("NOTE: this is the built-in demo model with RANDOM WEIGHTS: its replies are meaningless text.",
              file=sys.stderr)
    messages: list[dict] = []
    if args.system:
        messages.append({"role": "system", "content": args.system})
    prompts = [args.prompt] if args.prompt is not None else None
    while True:
        if prompts is not None:
            if not prompts:
                return 0
            text = prompts.pop(0)
        else:
            try:
                text = input("you> ")
            except (EOFError, KeyboardInterrupt):   # Ctrl+D or Ctrl+C at the prompt: leave quietly
                print()
                return 0
            if text.strip() in ("/exit", "/quit"):
                return 0
        messages.append({"role": "user", "content": text})
        cancel = threading.Event()
        try:
            with _ctrl_c_stops(cancel):
                fin, reasoning, content = _print_stream(
                    engine.generate(messages, sampling, enable_thinking=not args.no_think, cancel=cancel), sys.stdout)
        except KeyboardInterrupt:   # a second Ctrl+C while the engine did not reach a token boundary
            print("\n(interrupted)", file=sys.stderr)
            return 130
        except EngineError as exc:
            print(f"error: {exc}", file=sys.stderr)
            messages.pop()
            if prompts is not None:
                return 2
            continue
        print(_stats_line(fin) + (" (stopped with Ctrl+C; the partial reply is kept)" if fin.reason == "cancelled"
                                  else ""), file=sys.stderr)
        # The template drops earlier turns' reasoning unless preserve_thinking; keep it for fidelity.
        messages.append({"role": "assistant", "content": content, "reasoning_content": reasoning})


def register(subparsers) -> None:
    from engine.api import DEFAULT_MTP_DRAFTS
    from engine.commands.engine_args import add_engine_arguments

    p = subparsers.add_parser("chat", help="chat in the terminal (streams the reply)",
                              description="Chat with a model in the terminal. Without --prompt it reads lines "
                                          "from standard input until EOF or /exit; Ctrl+C stops a reply, and "
                                          "at the prompt leaves.")
    add_engine_arguments(p)
    p.add_argument("--prompt", help="send one message, print the reply and exit")
    p.add_argument("--system", help="system prompt")
    p.add_argument("--no-think", action="store_true", help="disable the thinking phase")
    p.add_argument("--mtp", action="store_true",
                   help="speculative decoding with the model's MTP head (greedy replies keep their tokens; on the "
                        "reference backend sampled ones keep their distribution, on the native one their tokens "
                        "for the seed)")
    p.add_argument("--mtp-drafts", type=int, choices=range(1, 6), default=DEFAULT_MTP_DRAFTS, metavar="K",
                   help=f"with --mtp: tokens drafted a round, 1..5 (default {DEFAULT_MTP_DRAFTS})")
    p.add_argument("--temperature", type=float, default=0.7)
    p.add_argument("--top-k", type=int, default=20)
    p.add_argument("--top-p", type=float, default=0.95)
    p.add_argument("--max-tokens", type=int, default=256)
    p.add_argument("--seed", type=int, default=0)
    p.set_defaults(func=_run)
