"""MONORAIL_QGEMV_MMA turns the tensor-core T > 1 GEMV on or off for a whole process at the native module's first
import (engine/native.py), so a device call can run every GPU module with it; unset, the built-in default holds.
Needs the module built with CUDA, not a GPU."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest


def _run(code: str, var: str, value: str | None) -> str:
    env = {k: v for k, v in os.environ.items() if not k.startswith("MONORAIL_QGEMV_MMA")}
    if value is not None:
        env[var] = value
    out = subprocess.run([sys.executable, "-c", "from engine.native import load_native\nm = load_native()\n" + code],
                         capture_output=True, text=True, env=env, timeout=120)
    assert out.returncode == 0, out.stderr
    return out.stdout.strip()


def _state(value: str | None) -> str:
    return _run("print(m.qgemv_mma() if hasattr(m, 'qgemv_mma') else 'absent')", "MONORAIL_QGEMV_MMA", value)


def _shapes(value: str | None) -> str:
    """The shape as set, then the shape GEMVs of 2, 6, 7, 8, 9 and 16 tokens run under."""
    return _run("print(m.qgemv_mma_shape(), [m.qgemv_mma_shape_for(T) for T in (2, 6, 7, 8, 9, 16)]) "
                "if hasattr(m, 'qgemv_mma_shape_for') else print('absent')", "MONORAIL_QGEMV_MMA_SHAPE", value)


def test_the_environment_switches_the_tensor_core_gemv():
    default = _state(None)
    if default == "absent":
        pytest.skip("engine._native was built without CUDA")
    assert default == "True"             # on since session 40 (qgemv.cu g_mma)
    assert _state("1") == "True"
    assert _state("0") == "False"
    assert _state("yes") == default      # anything else leaves the default


def test_the_default_shape_of_work_follows_the_width():
    default = _shapes(None)
    if default == "absent":
        pytest.skip("engine._native was built without CUDA")
    # 16 rows a warp at 16 warps an SM up to 6 tokens, 32 rows at 8 above (session 46, qgemv_mma.cu
    # g_mma_rows_per_warp); 4 spans a pass for one n8 tile of tokens, 2 for two
    assert default == ("(0, 0, 0) [(16, 4, 16), (16, 4, 16), (8, 4, 32), (8, 4, 32), (8, 2, 32), (8, 2, 32)]")
    # what is set wins over the width; a zero field is still chosen by width (rows) or by form (warps)
    assert _shapes("12,2,32") == "(12, 2, 32) " + str([(12, 2, 32)] * 6)
    assert _shapes("0,0,16") == "(0, 0, 16) " + str([(16, 4, 16)] * 4 + [(16, 2, 16)] * 2)
    assert _shapes("8,4") == "(8, 4, 0) " + str([(8, 4, 16)] * 2 + [(8, 4, 32)] * 4)


def test_the_warps_a_block_are_checked_and_set():
    code = ("import sys\n"
            "if not hasattr(m, 'set_qgemv_mma_block_warps'):\n    print('absent'); sys.exit()\n"
            "seen = [m.qgemv_mma_block_warps()]\n"
            "for bad in (0, 3, 8, -1):\n"
            "    try:\n        m.set_qgemv_mma_block_warps(bad)\n"
            "    except ValueError:\n        seen.append('refused')\n"
            "m.set_qgemv_mma_block_warps(1)\nseen.append(m.qgemv_mma_block_warps())\nprint(seen)")
    got = _run(code, "MONORAIL_QGEMV_MMA_BLOCK_WARPS", None)
    if got == "absent":
        pytest.skip("engine._native was built without CUDA")
    assert got == str([4, "refused", "refused", "refused", "refused", 1])
    assert _run("print(m.qgemv_mma_block_warps())", "MONORAIL_QGEMV_MMA_BLOCK_WARPS", "2") == "2"


def test_whole_passes_run_checked_by_default_and_the_switches_set_them():
    got = _run("print([m.qgemv_mma_unchecked_passes(), m.set_qgemv_mma_unchecked_passes(True), "
               "m.qgemv_mma_unchecked_passes()] if hasattr(m, 'set_qgemv_mma_unchecked_passes') else 'absent')",
               "MONORAIL_QGEMV_MMA_UNCHECKED", None)
    if got == "absent":
        pytest.skip("engine._native was built without CUDA")
    assert got == "[False, None, True]"   # off until a GPU has run it (qgemv_mma.cu g_mma_unchecked, session 49)
    ask = "print(m.qgemv_mma_unchecked_passes())"
    assert _run(ask, "MONORAIL_QGEMV_MMA_UNCHECKED", "1") == "True"
    assert _run(ask, "MONORAIL_QGEMV_MMA_UNCHECKED", "0") == "False"
    assert _run(ask, "MONORAIL_QGEMV_MMA_UNCHECKED", "yes") == "False"   # neither 0 nor 1: the default holds
