"""The one place that imports the compiled module ``engine._native``.

Everything else asks this module what the native build can do, so that a missing or
CPU-only build is a clear message rather than an ImportError deep in a call stack.
"""

from __future__ import annotations

import importlib
import os
from dataclasses import dataclass


@dataclass(frozen=True)
class NativeStatus:
    importable: bool
    cuda_built: bool
    cuda_version: str | None
    cuda_archs: str
    gpu_usable: bool
    gpu_name: str
    compute_capability: int
    total_memory: int
    reason: str  # why the GPU path is unavailable, or "" when it is available

    def summary(self) -> str:
        if not self.importable:
            return f"native module unavailable: {self.reason}"
        archs = ",".join(f"sm_{a}" for a in self.cuda_archs.replace(";", ",").split(",") if a)
        build = (f"CUDA {self.cuda_version} for {archs}"
                 if self.cuda_built else "CPU-only")
        if self.gpu_usable:
            gpu = f"{self.gpu_name} (sm_{self.compute_capability}, {self.total_memory / 2**30:.1f} GiB)"
        else:
            gpu = f"no usable GPU ({self.reason})"
        return f"native build: {build}; {gpu}"


CUBLAS_WHEEL = "nvidia-cublas==13.10.0.20"  # the cuBLAS the CUDA build is tested with (pyproject extra `cuda`)


def _preload_wheel_cublas() -> bool:
    """Load libcublas from an installed `nvidia-cublas` wheel (RTLD_GLOBAL); True if one was loaded.

    Only a fallback: the CUDA build links cuBLAS with an RPATH to the folder it was built against,
    which is enough unless that folder has moved (e.g. a relocated virtual environment)."""
    import ctypes
    import glob
    import importlib.util
    import os
    try:
        spec = importlib.util.find_spec("nvidia")
    except (ImportError, ValueError):
        return False
    for base in (spec.submodule_search_locations or []) if spec else []:
        for sub in ("cu13", "cublas"):
            for lib in sorted(glob.glob(os.path.join(base, sub, "lib", "libcublas.so.[0-9]*")), key=len):
                try:
                    ctypes.CDLL(lib, mode=ctypes.RTLD_GLOBAL)
                    return True
                except OSError:
                    continue
    return False


def load_native():
    """Import and return ``engine._native``; raises ImportError with an actionable message."""
    try:
        return _configured(importlib.import_module("engine._native"))
    except ImportError as exc:  # pragma: no cover - exercised only on broken installs
        if "libcublas" not in str(exc):
            raise ImportError(
                "engine._native is not built. Install the package with "
                "`pip install -e .` (see README.md) so that csrc/ is compiled."
            ) from exc
        first = exc
    # The CUDA build needs cuBLAS at run time (libcublas.so.13 for CUDA 13) and the loader did not
    # find it where the build found it: try an installed wheel, else say how to get one.
    if _preload_wheel_cublas():  # pragma: no cover - broken installs only
        try:
            return _configured(importlib.import_module("engine._native"))
        except ImportError as exc:
            first = exc
    raise ImportError(  # pragma: no cover - broken installs only
        f"engine._native was built with CUDA and needs cuBLAS, which could not be loaded ({first}). "
        f"Install it with `pip install {CUBLAS_WHEEL}` (or `pip install -e .[cuda]`) and rebuild with "
        "`pip install -e .`; with a CUDA toolkit's cuBLAS instead, put its lib64 folder on LD_LIBRARY_PATH."
    ) from first


# MONORAIL_QGEMV_MMA=1 / 0 turns the tensor-core GEMV of T = 2..16 tokens on / off for the whole process (on by
# default: csrc/cuda/qgemv.cu g_mma), so a device call can run every GPU test module either way without a rebuild.
# MONORAIL_QGEMV_MMA_SHAPE="W,S[,R]" sets its shape of work (set_qgemv_mma_shape: W warps an SM, S spans a pass, R rows
# a warp; 0 is the default's choice by width), MONORAIL_QGEMV_MMA_BLOCK_WARPS=1 / 2 / 4 its warps a block
# (set_qgemv_mma_block_warps; 4 by default) and MONORAIL_QGEMV_MMA_LOADS_FIRST=1 / 0 whether a pass's weight loads
# all go out before its first product (set_qgemv_mma_loads_first; on by default), and
# MONORAIL_QGEMV_MMA_UNCHECKED=1 / 0 whether passes wholly inside K run without bounds checks
# (set_qgemv_mma_unchecked_passes; off by default until its GPU tests have passed), for a device call to run the tests
# under a candidate. Applied once, at the first import.
_MMA_ENV = "MONORAIL_QGEMV_MMA"
_MMA_SHAPE_ENV = "MONORAIL_QGEMV_MMA_SHAPE"
_MMA_LOADS_FIRST_ENV = "MONORAIL_QGEMV_MMA_LOADS_FIRST"
_MMA_BLOCK_WARPS_ENV = "MONORAIL_QGEMV_MMA_BLOCK_WARPS"
_MMA_UNCHECKED_ENV = "MONORAIL_QGEMV_MMA_UNCHECKED"
_configured_once = False


def _configured(mod):
    global _configured_once
    if not _configured_once:
        _configured_once = True
        value = os.environ.get(_MMA_ENV)
        if value in ("0", "1") and hasattr(mod, "set_qgemv_mma"):
            mod.set_qgemv_mma(value == "1")
        shape = os.environ.get(_MMA_SHAPE_ENV, "").strip()
        if shape and hasattr(mod, "set_qgemv_mma_shape"):
            try:
                fields = [int(v) for v in shape.split(",")]
                if len(fields) not in (2, 3):
                    raise ValueError
            except ValueError:
                raise ValueError(f"{_MMA_SHAPE_ENV} must be 'warps_per_sm,spans[,rows_per_warp]', "
                                 f"got {shape!r}") from None
            mod.set_qgemv_mma_shape(*fields)
        block_warps = os.environ.get(_MMA_BLOCK_WARPS_ENV, "").strip()
        if block_warps and hasattr(mod, "set_qgemv_mma_block_warps"):
            if block_warps not in ("1", "2", "4"):
                raise ValueError(f"{_MMA_BLOCK_WARPS_ENV} must be 1, 2 or 4, got {block_warps!r}")
            mod.set_qgemv_mma_block_warps(int(block_warps))
        on = os.environ.get(_MMA_LOADS_FIRST_ENV)
        if on in ("0", "1") and hasattr(mod, "set_qgemv_mma_loads_first"):
            mod.set_qgemv_mma_loads_first(on == "1")
        unchecked = os.environ.get(_MMA_UNCHECKED_ENV)
        if unchecked in ("0", "1") and hasattr(mod, "set_qgemv_mma_unchecked_passes"):
            mod.set_qgemv_mma_unchecked_passes(unchecked == "1")
    return mod


def native_status() -> NativeStatus:
    try:
        mod = load_native()
    except ImportError as exc:
        return NativeStatus(False, False, None, "", False, "", 0, 0, str(exc))
    build = mod.build_info()
    dev = mod.device_info()
    reason = ""
    if not build["cuda"]:
        reason = "built without CUDA"
    elif not dev["usable"]:
        reason = dev["reason"]
    return NativeStatus(
        importable=True,
        cuda_built=bool(build["cuda"]),
        cuda_version=build["cuda_version"],
        cuda_archs=build["cuda_archs"],
        gpu_usable=bool(build["cuda"]) and bool(dev["usable"]),
        gpu_name=dev["name"],
        compute_capability=int(dev["compute_capability"]),
        total_memory=int(dev["total_memory"]),
        reason=reason,
    )


def verify_steps_pay() -> bool:
    """Whether a speculative verify step of k + 1 tokens costs about one decode step, so that drafting with the MTP
    head speeds the native engine up: only with the tensor-core GEMV of T = 2..16 (set_qgemv_mma, on by default). The
    per-token GEMV (MONORAIL_QGEMV_MMA=0) makes a step of T tokens cost nearly T steps (H100, depth 0: 5.9 ms for
    T = 1, 18.0 for T = 4 against 9.4 on tensor cores; bench/results/step-widths-h100-s41-call1.json), so rounds would
    be slower than plain decoding at any acceptance. Engine plans the head and drafts only where this holds."""
    try:
        return bool(load_native().qgemv_mma())
    except ImportError:
        return False
