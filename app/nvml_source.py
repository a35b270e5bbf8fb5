"""Reading the GPU through NVML (nvidia-ml-py): one ``GpuSample`` per call, no Qt.

Kept apart from app.telemetry (which needs Qt for its signals) so that a GPU machine without a
display stack can exercise the real NVML calls (tests/test_native_worker.py). Fields the GPU or
driver does not support are ``None``, shown as "n/a" by the dashboard.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Protocol


@dataclass
class GpuSample:
    t: float
    name: str = ""
    vram_used: int | None = None
    vram_total: int | None = None
    power_w: float | None = None
    energy_mj: int | None = None            # NVML total energy counter
    temperature_c: float | None = None
    sm_clock_mhz: float | None = None
    utilization: float | None = None
    throttle_reasons: list[str] | None = None


class GpuSource(Protocol):
    available: bool
    reason: str        # why not available

    def read(self) -> GpuSample: ...
    def energy_mj(self) -> int | None: ...


THROTTLE_NAMES = {  # nvmlClocksEventReason* / nvmlClocksThrottleReason* bits
    0x1: "idle", 0x2: "application clocks", 0x4: "software power cap", 0x8: "hardware slowdown",
    0x10: "sync boost", 0x20: "software thermal", 0x40: "hardware thermal", 0x80: "power brake",
    0x100: "display clocks",
}


def decode_throttle(mask: int) -> list[str]:
    return [name for bit, name in THROTTLE_NAMES.items() if mask & bit]


class NvmlSource:
    """The first NVIDIA GPU through pynvml; ``available`` is False (with a reason) when there is none."""

    def __init__(self, index: int = 0) -> None:
        self.available = False
        self.reason = ""
        try:
            import pynvml
            pynvml.nvmlInit()
            self._nvml = pynvml
            self._handle = pynvml.nvmlDeviceGetHandleByIndex(index)
            name = pynvml.nvmlDeviceGetName(self._handle)
            self.name = name.decode() if isinstance(name, bytes) else str(name)
            self.available = True
        except Exception as exc:   # no driver, no GPU, or the library is missing
            self.reason = str(exc) or type(exc).__name__

    def _try(self, fn, *args):
        try:
            return fn(self._handle, *args)
        except Exception:
            return None

    def energy_mj(self) -> int | None:
        return self._try(self._nvml.nvmlDeviceGetTotalEnergyConsumption) if self.available else None

    def read(self) -> GpuSample:
        s = GpuSample(t=time.time())
        if not self.available:
            return s
        n = self._nvml
        s.name = self.name
        mem = self._try(n.nvmlDeviceGetMemoryInfo)
        if mem is not None:
            s.vram_used, s.vram_total = int(mem.used), int(mem.total)
        power = self._try(n.nvmlDeviceGetPowerUsage)
        s.power_w = power / 1000.0 if power is not None else None
        s.energy_mj = self.energy_mj()
        s.temperature_c = self._try(n.nvmlDeviceGetTemperature, n.NVML_TEMPERATURE_GPU)
        s.sm_clock_mhz = self._try(n.nvmlDeviceGetClockInfo, n.NVML_CLOCK_SM)
        util = self._try(n.nvmlDeviceGetUtilizationRates)
        s.utilization = float(util.gpu) if util is not None else None
        reasons_fn = getattr(n, "nvmlDeviceGetCurrentClocksEventReasons", None) or \
            getattr(n, "nvmlDeviceGetCurrentClocksThrottleReasons", None)
        mask = self._try(reasons_fn) if reasons_fn else None
        s.throttle_reasons = decode_throttle(int(mask)) if mask is not None else None
        return s
