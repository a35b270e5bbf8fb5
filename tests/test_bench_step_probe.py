"""bench/step_probe.py --recipe: the weight formats a probe's random 27B engine is built with."""

import importlib.util
import pathlib

import pytest

from engine.plan import DEFAULT_RECIPE, streamed_weight_bytes
from engine.recipe import RecipeError
from engine.registry import config_27b

_spec = importlib.util.spec_from_file_location(
    "step_probe", pathlib.Path(__file__).resolve().parents[1] / "bench" / "step_probe.py")
_probe = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_probe)
native_recipe_named = _probe.native_recipe_named


def test_uniform_name_is_the_benchmark_recipe():
    r = native_recipe_named("q4g64")
    assert r.roles == DEFAULT_RECIPE.roles and not r.tails
    assert native_recipe_named("q6g32").spec("mlp_down") == (6, 32)


def test_converter_recipe_keeps_its_formats_per_role():
    r = native_recipe_named("q4-27b")
    assert r.spec("mlp_down") == (5, 64) and r.spec("gdn_out") == (5, 64) and r.spec("attn_o") == (5, 64)
    assert r.spec("lm_head") == (6, 64) and r.spec("mlp_gate_up") == (4, 64)
    assert r.tail_spec("gdn_in") == (8, 64) and r.tail_spec("attn_qkv") == (6, 64)
    t = config_27b(vision=False).text
    assert streamed_weight_bytes(t, r) > streamed_weight_bytes(t, DEFAULT_RECIPE)  # more bits, more bytes a step


def test_unknown_recipe_is_refused():
    with pytest.raises(RecipeError, match="unknown recipe"):
        native_recipe_named("q3-nonsense")
