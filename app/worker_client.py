"""The GUI side of the engine worker: starts the spawned process, sends requests, relays events.

Events are drained from the queue by a QTimer in the GUI thread (no extra thread, so every
signal arrives in order on the GUI thread). The same timer notices a dead process: a crash is
reported through ``crashed`` with the exit code, and ``restart()`` starts a fresh worker.

Importing this module pulls in engine.protocol and engine.worker only, both free of torch.
"""

from __future__ import annotations

import itertools
import multiprocessing as mp
import queue
import signal

from PySide6.QtCore import QObject, QTimer, Signal

from engine import protocol as P
from engine.worker import DEFAULT_FACTORY, worker_main

_ids = itertools.count(1)


def new_request_id(prefix: str = "r") -> str:
    return f"{prefix}{next(_ids)}"


def describe_exit(code: int | None) -> str:
    if code is None:
        return "stopped"
    if code < 0:
        try:
            return f"killed by signal {signal.Signals(-code).name}"
        except ValueError:
            return f"killed by signal {-code}"
    return f"exited with code {code}"


class WorkerClient(QObject):
    ready = Signal(int)             # pid
    event = Signal(object)          # any protocol event
    crashed = Signal(str)           # human-readable cause

    def __init__(self, factory: str = DEFAULT_FACTORY, poll_ms: int = 15, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self.factory = factory
        self._ctx = mp.get_context("spawn")
        self._proc = None
        self._requests = None
        self._events = None
        self._stopping = False
        self._timer = QTimer(self)
        self._timer.setInterval(poll_ms)
        self._timer.timeout.connect(self._poll)

    # -- lifecycle ----------------------------------------------------------------
    @property
    def alive(self) -> bool:
        return self._proc is not None and self._proc.is_alive()

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc else None

    def start(self) -> None:
        self._requests, self._events = self._ctx.Queue(), self._ctx.Queue()
        self._proc = self._ctx.Process(target=worker_main, args=(self._requests, self._events, self.factory),
                                       name="monorail-engine", daemon=True)
        self._stopping = False
        self._proc.start()
        self._timer.start()

    def restart(self) -> None:
        self.stop(timeout=2.0)
        self.start()

    def stop(self, timeout: float = 5.0) -> None:
        self._stopping = True
        self._timer.stop()
        if self._proc is None:
            return
        if self._proc.is_alive():
            try:
                self._requests.put(P.Shutdown())
            except (OSError, ValueError):
                pass
            self._proc.join(timeout)
            if self._proc.is_alive():
                self._proc.terminate()
                self._proc.join(2.0)
        for q in (self._requests, self._events):
            q.cancel_join_thread()
            q.close()
        self._proc = None

    # -- requests -----------------------------------------------------------------
    def send(self, request) -> str:
        if not self.alive:
            raise RuntimeError("The engine worker is not running. Restart it from the banner.")
        self._requests.put(request)
        return request.request_id

    def load(self, model: str, options: dict) -> str:
        return self.send(P.LoadModel(new_request_id("load"), model, options))

    def generate(self, messages: list[dict], sampling: dict, enable_thinking: bool) -> str:
        return self.send(P.Generate(new_request_id("gen"), messages, sampling, enable_thinking))

    def cancel(self, request_id: str) -> None:
        if self.alive:
            self._requests.put(P.Cancel(request_id))

    def compute_plan(self, model: str, options: dict) -> str:
        return self.send(P.ComputePlan(new_request_id("plan"), model, options))

    def request_stats(self) -> None:
        if self.alive:
            self._requests.put(P.GetStats(new_request_id("stats")))

    def convert(self, source: str, destination: str) -> str:
        return self.send(P.Convert(new_request_id("convert"), source, destination))

    # -- events -------------------------------------------------------------------
    def _poll(self) -> None:
        for _ in range(500):   # bound the work per tick so the GUI stays responsive
            try:
                ev = self._events.get_nowait()
            except queue.Empty:
                break
            except (OSError, ValueError, EOFError):
                break
            if isinstance(ev, P.WorkerReady):
                if ev.protocol_version != P.PROTOCOL_VERSION:
                    self.event.emit(P.WorkerError(None, "ProtocolError",
                                                  f"Engine worker speaks protocol {ev.protocol_version}, the app "
                                                  f"{P.PROTOCOL_VERSION}. Reinstall Monorail."))
                    continue
                self.ready.emit(ev.pid)
            else:
                self.event.emit(ev)
        if self._proc is not None and not self._proc.is_alive() and not self._stopping:
            try:   # deliver what the worker managed to say before it died
                while True:
                    self.event.emit(self._events.get_nowait())
            except (queue.Empty, OSError, ValueError, EOFError):
                pass
            self._timer.stop()
            self._stopping = True
            self.crashed.emit(describe_exit(self._proc.exitcode))
