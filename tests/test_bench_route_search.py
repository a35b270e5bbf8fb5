"""bench/route_search.py walks the GEMV shapes of the recipe's decode step, largest share first; a split projection is
its head and tail matrices (q4-27b's 4-bit heads and their 8-bit b|a / 6-bit k|v tails are separate launches)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest


def _search():
    pytest.importorskip("torch")  # engine.registry reads the checkpoint layout through the loader
    path = Path(__file__).resolve().parents[1] / "bench" / "route_search.py"
    spec = importlib.util.spec_from_file_location("route_search", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)  # its engine and step_probe imports are inside main()
    return mod


def test_uniform_recipe_walks_the_six_fused_shapes_by_share():
    from engine.plan import DEFAULT_RECIPE
    from engine.registry import config_27b
    shapes = _search().decode_shapes(DEFAULT_RECIPE, config_27b(vision=False).text)
    assert shapes == [(34816, 5120), (5120, 17408), (16480, 5120), (5120, 6144), (248320, 5120), (14336, 5120)]


def test_split_recipe_walks_heads_and_tails():
    from engine.native_recipe import recipe_named
    from engine.registry import config_27b
    cfg = config_27b(vision=False)
    shapes = _search().decode_shapes(recipe_named("q4-27b", cfg), cfg.text)
    assert set(shapes) == {(34816, 5120), (5120, 17408), (16384, 5120), (96, 5120), (5120, 6144), (248320, 5120),
                           (12288, 5120), (2048, 5120)}
    assert shapes[0] == (34816, 5120) and shapes[-1] == (96, 5120)
