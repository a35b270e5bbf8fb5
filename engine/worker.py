"""The engine worker process: owns the device, serves requests from the GUI over two queues.

Started by the GUI with the multiprocessing *spawn* context, so the child begins with a clean
interpreter (no inherited CUDA context, no Qt). Heavy imports (engine.api, hence torch and the
native module) happen here, lazily, inside the child: importing this module is cheap and safe
in the GUI process.

The engine is built by an injectable *factory*, named by a ``"module:function"`` string so it
survives pickling into the spawned child. The factory has the signature
``factory(model: str, options: dict, progress: Callable[[float, str], None]) -> engine`` and the
engine it returns follows engine.api.Engine (``info``, ``generate``, ``unload``). Tests inject a
scripted fake; the default is :func:`load_engine`.

Generation runs on a thread so that the main loop keeps reading the queue and a ``Cancel`` can
reach it: cancellation sets the ``threading.Event`` the engine polls between tokens.
"""

from __future__ import annotations

import importlib
import multiprocessing
import os
import queue
import threading
import traceback
from dataclasses import replace
from typing import Any, Callable

from engine import protocol as P

DEFAULT_FACTORY = "engine.worker:load_engine"


# ----------------------------------------------------------------------------- default factory
def load_engine(model: str, options: dict[str, Any], progress: Callable[[float, str], None]):
    """The real engine: the remote OpenAI-compatible client, or engine.api.Engine."""
    if options.get("backend") == "remote":
        from engine.remote import RemoteEngine

        return RemoteEngine(base_url=options.get("base_url", ""), api_key=options.get("api_key") or None,
                            model=options.get("remote_model") or model)
    from engine.api import Engine, EngineOptions

    known = {k: options[k] for k in ("backend", "max_context", "kv_dtype", "vram_budget_bytes",
                                     "mtp_speculation", "mtp_draft_tokens", "prefix_cache_bytes", "prefix_disk_bytes")
             if k in options}
    return _LocalEngineAdapter(Engine.load(model, EngineOptions(**known), progress=progress))


class _LocalEngineAdapter:
    """Turns the protocol's sampling dict into engine.sampling.SamplingParams for engine.api.Engine."""

    def __init__(self, engine: Any) -> None:
        self._engine = engine
        self.info = engine.info

    def generate(self, messages, sampling: dict, *, enable_thinking: bool, cancel: threading.Event):
        from engine.sampling import SamplingParams

        fields = getattr(SamplingParams, "__dataclass_fields__", {})
        params = SamplingParams(**{k: v for k, v in sampling.items() if k in fields})
        return self._engine.generate(messages, params, enable_thinking=enable_thinking, cancel=cancel)

    def unload(self) -> None:
        self._engine.unload()

    @property
    def api_engine(self) -> Any:
        """The engine.api.Engine itself, for the OpenAI API server (engine.server takes SamplingParams)."""
        return self._engine


def resolve_factory(spec: str) -> Callable[..., Any]:
    module, _, name = spec.partition(":")
    if not module or not name:
        raise ValueError(f"engine factory {spec!r} must look like 'package.module:function'")
    return getattr(importlib.import_module(module), name)


# ----------------------------------------------------------------------------- plan and convert
def _model_source(model: str):
    """(typed config, the artifact or None) of "demo", a checkpoint folder, or an artifact, without reading weights."""
    from pathlib import Path

    from engine.config import load_config, parse_config

    if model == "demo":
        from engine.demo import demo_config
        return parse_config(demo_config()), None
    path = Path(model).expanduser()
    if path.is_dir():
        return load_config(path), None
    if path.is_file():
        from engine.artifact import Artifact
        artifact = Artifact.open(path, verify=False)
        return artifact.config, artifact
    raise FileNotFoundError(f"No model at {path}: pick a Hugging Face checkpoint folder or a Monorail artifact.")


def _free_device_bytes() -> int | None:
    """Free device memory as NVML reports it, if there is a GPU (NVML makes no CUDA context in this process)."""
    try:
        import pynvml
        pynvml.nvmlInit()
        return int(pynvml.nvmlDeviceGetMemoryInfo(pynvml.nvmlDeviceGetHandleByIndex(0)).free)
    except Exception:
        return None


def _compute_plan(model: str, options: dict[str, Any]) -> tuple[dict | None, str]:
    """The memory plan the native engine would launch with for (model, options): the same function as a load
    (engine.native_backend.launch_plan), computed in the worker so the GUI never imports the engine.
    Returns (Plan.as_dict() for the dashboard, the plan's own table)."""
    from engine.api import DEFAULT_MTP_DRAFTS
    from engine.native_backend import DEFAULT_RECIPE, launch_plan, planned_mtp_drafts
    from engine.native_recipe import recipe_from_artifact

    cfg, artifact = _model_source(model)
    context = cfg.text.max_position_embeddings
    if options.get("max_context"):
        context = min(context, int(options["max_context"]))
    budget, free = options.get("vram_budget_bytes") or None, _free_device_bytes()
    _, plan = launch_plan(cfg, kv_dtype=options.get("kv_dtype", "int8"), max_context=context,
                          vram_budget_bytes=budget, free_bytes=free,
                          recipe=recipe_from_artifact(artifact) if artifact is not None else DEFAULT_RECIPE,
                          mtp_drafts=planned_mtp_drafts(cfg, bool(options.get("mtp_speculation")),
                                                        int(options.get("mtp_draft_tokens", DEFAULT_MTP_DRAFTS))))
    if budget:
        source = "the VRAM budget set in Settings"
    elif free is not None:
        source = f"the GPU's free memory now ({free / 2**30:.2f} GiB) less the engine's margin"
    else:
        source = f"no GPU found here, so a {plan.budget / 2**30:.0f} GiB card is assumed"
    text = f"budget: {source}\n{plan.format_table()}"
    from engine.api import choose_backend

    backend, note = choose_backend(options.get("backend") or "auto")
    if backend == "reference":   # say so: a plan shown for a backend that does not use it would mislead
        why = f": {note.removeprefix('chosen automatically: ')}" if note else " (chosen in Settings)"
        text += (f"\n\nThis is the native engine's plan. Loads with these settings use the reference backend{why}. "
                 "The reference allocates as it goes and has no fixed plan.")
    return plan.as_dict(), text


def _convert(source: str, destination: str, progress: Callable[[float, str], None]) -> None:
    try:
        from engine.convert import convert
    except ImportError as exc:
        raise RuntimeError("This build cannot convert Hugging Face checkpoints (engine.convert is missing).") from exc
    from pathlib import Path

    Path(destination).parent.mkdir(parents=True, exist_ok=True)

    def report(p: Any) -> None:
        total = getattr(p, "total_bytes", 0) or 0
        fraction = (p.done_bytes / total) if total else (p.index / max(p.count, 1))
        progress(fraction, f"{p.index}/{p.count} {p.tensor}")

    convert(source, destination, progress=report)


def _info_event(request_id: str, info: Any) -> P.ModelLoaded:
    def get(name: str, default: Any) -> Any:
        return info.get(name, default) if isinstance(info, dict) else getattr(info, name, default)

    return P.ModelLoaded(request_id=request_id, name=str(get("name", "model")),
                         random_weights=bool(get("random_weights", False)),
                         context_limit=int(get("context_limit", 0) or 0),
                         has_vision=bool(get("has_vision", False)), backend=str(get("backend", "")),
                         plan=get("plan", None), vision_tower=bool(get("vision_tower", False)),
                         backend_note=str(get("backend_note", "") or ""))


def _rss_bytes() -> int | None:
    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return None


def _error(request_id: str | None, exc: BaseException) -> P.WorkerError:
    return P.WorkerError(request_id=request_id, kind=type(exc).__name__, message=str(exc) or repr(exc))


# ----------------------------------------------------------------------------- the serving loop
class _Worker:
    def __init__(self, events: Any, factory: Callable[..., Any]) -> None:
        self.events = events
        self.factory = factory
        self.engine: Any = None
        self.gen_thread: threading.Thread | None = None
        self.gen_id: str | None = None
        self.cancel = threading.Event()
        self.api_server: Any = None   # engine.server.MonorailServer while the model is served (LoadModel api_port)
        # set when the generation thread has reported its Finished: what it still runs is the engine's clean-up
        # (closing the decode loop, releasing the model), which the next request waits for instead of being refused
        self.gen_reported = threading.Event()

    # generation ------------------------------------------------------------
    def _generate(self, req: P.Generate) -> None:
        finished = False
        try:
            for ev in self.engine.generate(req.messages, req.sampling, enable_thinking=req.enable_thinking,
                                           cancel=self.cancel):
                if hasattr(ev, "reason"):
                    finished = True
                    self.gen_reported.set()
                    self.events.put(P.Finished(
                        request_id=req.request_id, reason=ev.reason,
                        prompt_tokens=int(getattr(ev, "prompt_tokens", 0) or 0),
                        completion_tokens=int(getattr(ev, "completion_tokens", 0) or 0),
                        cached_tokens=int(getattr(ev, "cached_tokens", 0) or 0),
                        ttft_s=getattr(ev, "ttft_s", None), prefill_tok_s=getattr(ev, "prefill_tok_s", None),
                        decode_tok_s=getattr(ev, "decode_tok_s", None),
                        spec_accept_rate=getattr(ev, "spec_accept_rate", None),
                        tool_calls=list(getattr(ev, "tool_calls", None) or [])))
                else:
                    self.events.put(P.Delta(req.request_id, ev.channel, ev.text))
            if not finished:
                reason = "cancelled" if self.cancel.is_set() else "stop"
                self.gen_reported.set()
                self.events.put(P.Finished(request_id=req.request_id, reason=reason))
        except Exception as exc:  # an engine error ends this request, never the worker
            self.events.put(_error(req.request_id, exc))
            self.gen_reported.set()
            self.events.put(P.Finished(request_id=req.request_id, reason="error"))

    def _stop_generation(self) -> None:
        if self.gen_thread is not None:
            self.cancel.set()
            self.gen_thread.join()
            self.gen_thread = None
            self.gen_id = None

    # requests --------------------------------------------------------------
    def handle(self, req: Any) -> bool:
        """Serve one request; returns False when the worker should exit."""
        if self.gen_thread is not None and self.gen_reported.is_set():
            self.gen_thread.join()   # it has said Finished; only its engine's clean-up is left
        if self.gen_thread is not None and not self.gen_thread.is_alive():
            self.gen_thread, self.gen_id = None, None
        if isinstance(req, P.Shutdown):
            self._stop_generation()
            self._unload()
            return False
        if isinstance(req, P.Cancel):
            if req.request_id == self.gen_id:
                self.cancel.set()
            return True
        if isinstance(req, P.GetStats):
            self.events.put(self._stats(req.request_id))
            return True
        if isinstance(req, P.Generate):
            if self.engine is None:
                self.events.put(P.WorkerError(req.request_id, "NoModel", "No model is loaded. Pick one in Settings."))
                self.events.put(P.Finished(request_id=req.request_id, reason="error"))
            elif self.gen_thread is not None:
                self.events.put(P.WorkerError(req.request_id, "Busy", "A reply is still being generated; stop it first."))
                self.events.put(P.Finished(request_id=req.request_id, reason="error"))
            else:
                self.cancel = threading.Event()
                self.gen_reported = threading.Event()
                self.gen_id = req.request_id
                self.gen_thread = threading.Thread(target=self._generate, args=(req,), daemon=True)
                self.gen_thread.start()
            return True
        # Everything below replaces or inspects the model: finish any generation first.
        self._stop_generation()
        try:
            if isinstance(req, P.LoadModel):
                self._unload()
                if req.options.get("prefix_disk_bytes", None) == 0:   # the app's Settings turned saved states off
                    _remove_saved_states()
                progress = lambda f, m="": self.events.put(P.Progress(req.request_id, float(f), str(m)))  # noqa: E731
                self.engine = self.factory(req.model, dict(req.options), progress)
                api_url, api_error = self._start_api(req.options.get("api_port"))
                self.events.put(replace(_info_event(req.request_id, self.engine.info), api_url=api_url,
                                        api_error=api_error))
            elif isinstance(req, P.Unload):
                self._unload()
                self.events.put(P.Unloaded(req.request_id))
            elif isinstance(req, P.ComputePlan):
                plan, text = _compute_plan(req.model, dict(req.options))
                self.events.put(P.PlanResult(req.request_id, plan, text))
            elif isinstance(req, P.Convert):
                progress = lambda f, m="": self.events.put(P.Progress(req.request_id, float(f), str(m)))  # noqa: E731
                _convert(req.source, req.destination, progress)
                self.events.put(P.Converted(req.request_id, req.destination))
            else:
                self.events.put(P.WorkerError(getattr(req, "request_id", None), "ProtocolError",
                                              f"The worker does not understand {type(req).__name__}."))
        except Exception as exc:
            self.events.put(_error(getattr(req, "request_id", None), exc))
        return True

    def _stats(self, request_id: str) -> P.WorkerStats:
        info = getattr(self.engine, "info", None)
        return P.WorkerStats(request_id=request_id, pid=os.getpid(), rss_bytes=_rss_bytes(),
                             model=getattr(info, "name", None), backend=getattr(info, "backend", None),
                             generating=self.gen_thread is not None and self.gen_thread.is_alive())

    def _start_api(self, port: Any) -> tuple[str, str]:
        """Serve the loaded model over the OpenAI API on loopback (engine.server) from this process, so that agents
        and editors share the app's model; (its URL, "") or ("", why not)."""
        if not port:
            return "", ""
        target = getattr(self.engine, "api_engine", None)
        if target is None:
            return "", "the API server runs only for a local model"
        from engine.server import make_server

        try:
            server = make_server(target, port=int(port))
        except (OSError, ValueError, OverflowError) as exc:
            return "", f"port {port}: {exc}"
        threading.Thread(target=server.serve_forever, name="monorail-api", daemon=True).start()
        self.api_server = server
        host, bound = server.server_address[:2]
        return f"http://{host}:{bound}/v1", ""

    def _stop_api(self) -> None:
        if self.api_server is not None:
            self.api_server.stop()          # replies in flight are cancelled, so the unload below can save the state
            self.api_server = None

    def _unload(self) -> None:
        self._stop_api()
        if self.engine is not None:
            try:
                self.engine.unload()
            finally:
                self.engine = None


def _remove_saved_states() -> None:
    """Free the disk the saved conversation states held (Settings → Conversation cache (disk) set to off; the app
    keeps them in the default folder)."""
    from engine.paths import states_dir
    from engine.prefix_store import remove_all

    try:
        remove_all(states_dir())
    except OSError:
        pass


def worker_main(requests: Any, events: Any, factory_spec: str = DEFAULT_FACTORY) -> None:
    """Entry point of the spawned process."""
    try:
        factory = resolve_factory(factory_spec)
    except Exception as exc:
        events.put(P.WorkerError(None, "WorkerStartError", f"Engine factory {factory_spec!r}: {exc}"))
        return
    events.put(P.WorkerReady(P.PROTOCOL_VERSION, os.getpid()))
    worker = _Worker(events, factory)
    parent = multiprocessing.parent_process()
    while True:
        try:
            req = requests.get(timeout=1.0)
        except queue.Empty:
            # A GUI killed hard cannot send Shutdown: do not outlive it holding the GPU.
            if parent is not None and not parent.is_alive():
                worker.handle(P.Shutdown())
                break
            continue
        try:
            if not worker.handle(req):
                break
        except Exception as exc:  # last resort: report, keep serving
            events.put(P.WorkerError(getattr(req, "request_id", None), "InternalError",
                                     f"{exc}\n{traceback.format_exc(limit=3)}"))
