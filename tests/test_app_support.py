"""Shared helpers for the app tests (no tests here): an isolated app with the fake engine."""

from __future__ import annotations

import os

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

from app.telemetry import GpuSample  # noqa: E402

FAKE_FACTORY = "test_worker_fakes:fake_factory"


class FakeGpu:
    """A scripted NVML source: a 24 GiB card whose energy counter advances 250 J per read."""

    available = True
    reason = ""

    def __init__(self) -> None:
        self.counter_mj = 1_000_000
        self.reads = 0

    def energy_mj(self) -> int:
        self.counter_mj += 250_000
        return self.counter_mj

    def read(self) -> GpuSample:
        self.reads += 1
        return GpuSample(t=1000.0 + self.reads, name="Fake RTX 4090", vram_used=(10 + self.reads % 5) << 30,
                         vram_total=24 << 30, power_w=250.0 + 10 * (self.reads % 7), energy_mj=self.energy_mj(),
                         temperature_c=61.0 + self.reads % 3, sm_clock_mhz=2520.0, utilization=97.0,
                         throttle_reasons=["software power cap"])


class NoGpu:
    available = False
    reason = "NVML Shared Library Not Found"

    def energy_mj(self):
        return None

    def read(self) -> GpuSample:
        return GpuSample(t=0.0)


def make_window(qtbot, tmp_path, monkeypatch, gpu=None, wait_model: bool = True, start: bool = True):
    """A main window over a fresh data dir, talking to the fake engine in a real spawned worker."""
    monkeypatch.setenv("MONORAIL_DATA_DIR", str(tmp_path))
    from app.main import build

    _, window = build(factory=FAKE_FACTORY, nvml_source=gpu if gpu is not None else FakeGpu())
    qtbot.addWidget(window)
    window.controller.save_interval_s = 0.0
    if start:
        window.controller.start()
        if wait_model:
            qtbot.waitUntil(lambda: window.controller.model is not None, timeout=30000)
    return window


def close_window(window) -> None:
    window.controller.shutdown()
    window.telemetry.stop()
    window.controller.store.close()
