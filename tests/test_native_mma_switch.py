"""MONORAIL_QGEMV_MMA turns the tensor-core T > 1 GEMV on or off for a whole process at the native module's first
import (engine/native.py), so a device call can run every GPU module with it; unset, the built-in default holds.
Needs the module built with CUDA, not a GPU."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest


def _state(value: str | None) -> str:
    env = {k: v for k, v in os.environ.items() if k != "MONORAIL_QGEMV_MMA"}
    if value is not None:
        env["MONORAIL_QGEMV_MMA"] = value
    code = ("from engine.native import load_native\nm = load_native()\n"
            "print(m.qgemv_mma() if hasattr(m, 'qgemv_mma') else 'absent')")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120)
    assert out.returncode == 0, out.stderr
    return out.stdout.strip()


def test_the_environment_switches_the_tensor_core_gemv():
    default = _state(None)
    if default == "absent":
        pytest.skip("engine._native was built without CUDA")
    assert default == "True"             # on since session 40 (qgemv.cu g_mma)
    assert _state("1") == "True"
    assert _state("0") == "False"
    assert _state("yes") == default      # anything else leaves the default
