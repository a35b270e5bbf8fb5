"""bench/gemv_probe.py --shapes: the probe times other shapes than the 27B's (e.g. down's K with half or twice its
rows, to tell a per-launch cost from a streaming rate); bad text is refused before anything runs."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest


def _probe():
    pytest.importorskip("torch")  # the probe imports torch and the native loader at module level
    path = Path(__file__).resolve().parents[1] / "bench" / "gemv_probe.py"
    spec = importlib.util.spec_from_file_location("gemv_probe", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_shapes_parse_in_order():
    p = _probe()
    assert p.parse_shapes("half=2560x17408, down=5120x17408") == {"half": (2560, 17408), "down": (5120, 17408)}
    assert list(p.parse_shapes("b=1x64,a=2x128")) == ["b", "a"]


@pytest.mark.parametrize("text", ["down", "down=5120", "=5120x17408", "down=5120x100", "down=0x64", "down=ax64"])
def test_bad_shapes_are_refused(text):
    p = _probe()
    with pytest.raises(SystemExit, match="--shapes"):
        p.parse_shapes(text)
