"""GPU telemetry through NVML (nvidia-ml-py) and engine statistics for the dashboard.

A background thread reads the GPU once a second (four times a second while a reply is being
generated) and hands each ``GpuSample`` to the GUI thread, which keeps the history and the energy
ledger. Energy comes from NVML's total-energy counter (millijoules since driver load): the
difference between two readings is exactly what the board used, with no integration error.
Fields the GPU or driver does not support are ``None`` and shown as "n/a".

The NVML source (app.nvml_source) is injectable, so tests feed the dashboard from a scripted fake.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from dataclasses import dataclass, field

from PySide6.QtCore import QObject, Signal

from app.nvml_source import GpuSample, GpuSource, NvmlSource, decode_throttle  # noqa: F401 (re-exported)
from app.store import Store
from engine import protocol as P

HISTORY_SECONDS = 600


@dataclass
class EngineStats:
    prefill_tok_s: float | None = None
    decode_tok_s: float | None = None
    spec_accept_rate: float | None = None
    ttft_s: float | None = None
    last_reply_tokens: int = 0
    last_reply_joules: float | None = None
    plan: dict | None = None
    model: str = ""
    backend: str = ""
    worker: P.WorkerStats | None = None


@dataclass
class History:
    """(time, value) series of the last HISTORY_SECONDS, one per metric."""
    series: dict[str, deque] = field(default_factory=dict)

    def add(self, name: str, t: float, value: float | None) -> None:
        if value is None:
            return
        d = self.series.setdefault(name, deque(maxlen=4 * HISTORY_SECONDS))
        d.append((t, float(value)))
        while d and d[0][0] < t - HISTORY_SECONDS:
            d.popleft()

    def values(self, name: str) -> list[float]:
        return [v for _, v in self.series.get(name, ())]


class Telemetry(QObject):
    _read = Signal(object)          # from the sampler thread, queued to the GUI thread
    sampled = Signal(object)        # GpuSample, after history and energy were updated
    stats_changed = Signal(object)  # EngineStats
    energy_changed = Signal()

    def __init__(self, store: Store, source: GpuSource | None = None, idle_interval_s: float = 1.0,
                 busy_interval_s: float = 0.25, flush_interval_s: float = 10.0) -> None:
        super().__init__()
        self.store = store
        self.source = source if source is not None else NvmlSource()
        self.idle_interval_s = idle_interval_s
        self.busy_interval_s = busy_interval_s
        self.flush_interval_s = flush_interval_s
        self.history = History()
        self.stats = EngineStats()
        self.latest: GpuSample | None = None
        self._prev_energy: int | None = None
        self._pending_j = 0.0
        self._last_flush = time.monotonic()
        self._reply_energy_start: int | None = None
        self._generating = threading.Event()
        self._stop = threading.Event()
        self._wake = threading.Event()
        self._thread: threading.Thread | None = None
        self._read.connect(self.ingest)

    # -- sampling thread -------------------------------------------------------------------------
    def start(self) -> None:
        if self._thread is None and self.source.available:
            self._thread = threading.Thread(target=self._run, name="nvml-sampler", daemon=True)
            self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join(2.0)
            self._thread = None
        self.flush()

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self._read.emit(self.source.read())
            except Exception:
                pass   # a failing read is a gap in the plot, not a dead dashboard
            interval = self.busy_interval_s if self._generating.is_set() else self.idle_interval_s
            self._wake.wait(interval)
            self._wake.clear()

    @property
    def interval_s(self) -> float:
        return self.busy_interval_s if self._generating.is_set() else self.idle_interval_s

    # -- GUI thread --------------------------------------------------------------------------------
    def ingest(self, s: GpuSample) -> None:
        self.latest = s
        for name in ("power_w", "temperature_c", "sm_clock_mhz", "utilization"):
            self.history.add(name, s.t, getattr(s, name))
        if s.vram_used is not None:
            self.history.add("vram_gib", s.t, s.vram_used / 2**30)
        if s.energy_mj is not None:
            if self._prev_energy is not None and s.energy_mj >= self._prev_energy:
                self._pending_j += (s.energy_mj - self._prev_energy) / 1000.0
            self._prev_energy = s.energy_mj   # a counter reset (driver reload) just restarts the deltas
        if time.monotonic() - self._last_flush >= self.flush_interval_s:
            self.flush()
        self.sampled.emit(s)

    def flush(self) -> None:
        if self._pending_j > 0:
            self.store.add_energy(self._pending_j)
            self._pending_j = 0.0
            self.energy_changed.emit()
        self._last_flush = time.monotonic()

    def energy_today_j(self) -> float:
        return self.store.energy_day() + self._pending_j

    def energy_month_j(self) -> float:
        return self.store.energy_month() + self._pending_j

    # -- engine side -------------------------------------------------------------------------------
    def reply_started(self, _request_id: str = "") -> None:
        self._generating.set()
        self._wake.set()
        self._reply_energy_start = self.source.energy_mj()

    def reply_finished(self, completion_tokens: int) -> float | None:
        """Energy of the reply in joules from the counter difference, or None without NVML energy."""
        self._generating.clear()
        end = self.source.energy_mj()
        start, self._reply_energy_start = self._reply_energy_start, None
        joules = (end - start) / 1000.0 if start is not None and end is not None and end >= start else None
        self.stats.last_reply_tokens = completion_tokens
        self.stats.last_reply_joules = joules
        if completion_tokens:
            self.store.add_energy(0.0, completion_tokens)
        self.stats_changed.emit(self.stats)
        return joules

    def engine_event(self, ev) -> None:
        if isinstance(ev, P.Finished) and ev.reason != "error":
            st = self.stats
            st.prefill_tok_s = ev.prefill_tok_s or st.prefill_tok_s
            st.decode_tok_s = ev.decode_tok_s or st.decode_tok_s
            st.ttft_s = ev.ttft_s if ev.ttft_s is not None else st.ttft_s
            st.spec_accept_rate = ev.spec_accept_rate if ev.spec_accept_rate is not None else st.spec_accept_rate
            now = time.time()
            self.history.add("decode_tok_s", now, ev.decode_tok_s)
            self.history.add("prefill_tok_s", now, ev.prefill_tok_s)
            self.stats_changed.emit(st)
        elif isinstance(ev, P.WorkerStats):
            self.stats.worker = ev
            self.stats_changed.emit(self.stats)
        elif isinstance(ev, P.ModelLoaded):
            self.stats.plan, self.stats.model, self.stats.backend = ev.plan, ev.name, ev.backend
            self.stats_changed.emit(self.stats)
