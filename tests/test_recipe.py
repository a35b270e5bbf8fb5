"""engine.recipe: formats per role, bytes per role from the 27B shapes, and the 24 GiB budget."""

from __future__ import annotations

import pytest

from engine.config import load_config
from engine.recipe import (
    BUDGET_TEXT_MTP_27B,
    DEFAULT_RECIPE,
    GIB,
    RECIPES,
    Recipe,
    RecipeError,
    bytes_table_markdown,
    get_recipe,
    recipe_bytes_by_part,
    recipe_bytes_by_role,
)
from engine.registry import ROLES, config_27b

KV_4BIT_262K = 262_144 * 17_408  # MODEL.md: rotated int4 K + int4 V, 17,408 bytes per token


def test_default_recipe_fits_the_24gib_plan():
    r = get_recipe(DEFAULT_RECIPE)
    parts = recipe_bytes_by_part(r, config_27b())
    text_mtp = parts["text"] + parts["mtp"]
    print(f"{r.tag}: text+MTP {text_mtp / GIB:.3f} GiB, vision {parts['vision'] / GIB:.3f} GiB")
    assert text_mtp <= BUDGET_TEXT_MTP_27B
    # weights + 4-bit KV for 262,144 tokens + vision leave >= 2 GiB for state, workspaces and context
    assert text_mtp + KV_4BIT_262K + parts["vision"] <= 22 * GIB


def test_bytes_by_role_against_hand_arithmetic():
    by_role = recipe_bytes_by_role(get_recipe("q4-27b"), config_27b())
    assert list(by_role) == list(ROLES)
    n, k = 5120, 17408  # down_proj [5120, 17408] at q5g64, 64 layers
    assert by_role["mlp.down"] == 64 * (n * k // 2 + n * k // 8 + n * (k // 64) * 2)
    n, k = 17408, 5120  # gate + up at q4g64
    assert by_role["mlp.gate_up"] == 128 * (n * k // 2 + n * (k // 64) * 2)
    assert by_role["gdn.decay"] == 48 * 2 * 48 * 4  # A_log + dt_bias in f32
    assert by_role["vision"] == 460_730_096 * 2  # bf16
    q8 = recipe_bytes_by_part(get_recipe("q8"), config_27b())
    assert sum(q8.values()) == sum(recipe_bytes_by_role(get_recipe("q8"), config_27b()).values())
    assert q8["vision"] == by_role["vision"]


def test_every_recipe_applies_to_tiny_and_27b_shapes(tiny_checkpoint):
    tiny = load_config(tiny_checkpoint)
    for r in RECIPES.values():
        assert sum(recipe_bytes_by_role(r, tiny).values()) > 0
        assert sum(recipe_bytes_by_role(r, config_27b()).values()) > 0
    table = bytes_table_markdown(get_recipe("q4-27b"), config_27b())
    assert "| mlp.down | q5g64 |" in table


def test_recipe_refusals():
    base = dict(get_recipe("q4").formats)
    with pytest.raises(RecipeError, match="roles missing"):
        Recipe("x", 1, "", {k: v for k, v in base.items() if k != "norm"})
    with pytest.raises(RecipeError, match="must stay unquantized"):
        Recipe("x", 1, "", dict(base, norm="q8g64"))
    with pytest.raises(RecipeError, match="unknown tensor format"):
        Recipe("x", 1, "", dict(base, embed="q3g64"))
    with pytest.raises(RecipeError, match="quantizer"):
        Recipe("x", 1, "", base, method="gptq")
    with pytest.raises(RecipeError, match="unknown recipe"):
        get_recipe("q2")
    with pytest.raises(RecipeError, match=r"multiple of\s+64"):
        get_recipe("q4").format_for("model.language_model.layers.0.mlp.down_proj.weight", (64, 96))
