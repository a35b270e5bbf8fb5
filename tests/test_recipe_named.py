"""engine.native_recipe.recipe_named: the native recipe behind `monorail plan --recipe` and the benchmarks' --recipe
(bench/step_probe.py, bench/decode.py)."""

import pytest

from engine.cli import main
from engine.native_recipe import recipe_named
from engine.plan import DEFAULT_RECIPE, streamed_weight_bytes
from engine.registry import config_27b

CFG = config_27b(vision=False)


def test_uniform_name_is_one_format_everywhere():
    r = recipe_named("q4g64", CFG)
    assert r.roles == DEFAULT_RECIPE.roles and not r.tails
    assert recipe_named("q6g32", CFG).spec("mlp_down") == (6, 32)
    assert recipe_named("Q8G64", CFG).spec("lm_head") == (8, 64)


def test_converter_recipe_keeps_its_formats_per_role():
    r = recipe_named("q4-27b", CFG)
    assert r.spec("mlp_down") == (5, 64) and r.spec("gdn_out") == (5, 64) and r.spec("attn_o") == (5, 64)
    assert r.spec("lm_head") == (6, 64) and r.spec("mlp_gate_up") == (4, 64)
    assert r.tail_spec("gdn_in") == (8, 64) and r.tail_spec("attn_qkv") == (6, 64)
    assert streamed_weight_bytes(CFG.text, r) > streamed_weight_bytes(CFG.text, DEFAULT_RECIPE)  # more bits a step


@pytest.mark.parametrize("name", ["q3-nonsense", "bf16", "q4g"])
def test_unknown_recipe_is_refused(name):
    with pytest.raises(ValueError, match="expected a converter recipe"):
        recipe_named(name, CFG)


def test_plan_cli_refuses_an_unknown_recipe_with_its_name(capsys):
    assert main(["plan", "--recipe", "q3-nonsense"]) == 2
    assert "monorail plan: error: --recipe: recipe 'q3-nonsense'" in capsys.readouterr().err
