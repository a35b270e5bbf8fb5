"""bench/step_timeline.py names each kernel of a traced step by its role in the layer (from the kernel order of
engine.cu enqueue_step) and knows each GEMV role's weight bytes; the per-role table of the decode notes rests on both."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest


def _timeline():
    path = Path(__file__).resolve().parents[1] / "bench" / "step_timeline.py"
    spec = importlib.util.spec_from_file_location("step_timeline", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


GDN_LAYER = ["qgemv4_sx_kernel", "gdn_conv_decode_kernel", "qgemv_kernel", "qgemv4_sx_kernel", "qgemv_kernel"]
ATTN_LAYER = ["qgemv4_sx_kernel", "attn_prep_kernel", "attn_split_v4_kernel", "attn_combine_kernel", "qgemv_kernel",
              "qgemv4_sx_kernel", "qgemv_kernel"]


def test_roles_follow_the_step_order():
    t = _timeline()
    names = ["embed_kernel"] + GDN_LAYER * 3 + ATTN_LAYER + GDN_LAYER + ["qgemv4_sx_kernel"]
    roles = t.role_names(names)
    gdn = ["gdn_in", "gdn_step", "gdn_out", "gate_up", "down"]
    attn = ["attn_qkv", "attn_prep", "attn_split", "attn_combine", "attn_o", "gate_up", "down"]
    assert roles == ["embed"] + gdn * 3 + attn + gdn + ["lm_head"]


def test_two_kernel_gdn_and_separate_norm_are_named_too():
    t = _timeline()
    # T > 1 (conv then the recurrence) and a norm kernel in front of gate_up (leave-one-out timings)
    names = ["embed_kernel", "qgemv4_sx_kernel", "conv_kernel", "gdn_kernel", "qgemv_kernel", "rmsnorm_kernel",
             "qgemv_kernel", "qgemv_kernel", "qgemv4_sx_kernel"]
    assert t.role_names(names) == ["embed", "gdn_in", "conv", "gdn_step", "gdn_out", "rmsnorm", "gate_up", "down",
                                   "lm_head"]


def test_tensor_core_split_k_reduces_are_a_role_of_their_own():
    t = _timeline()
    # a step of T > 1 tokens: each tensor-core GEMV with few row tiles is followed by its split-K reduce
    r = "qgemv_mma_reduce_kernel"
    gdn = ["qgemv_mma_kernel", "conv_kernel", "gdn_kernel", "qgemv_mma_kernel", r, "qgemv_mma_kernel",
           "qgemv_mma_kernel", r]
    names = ["embed_kernel"] + gdn * 2 + ["qgemv_mma_kernel"]
    g = ["gdn_in", "conv", "gdn_step", "gdn_out", "mma_reduce", "gate_up", "down", "mma_reduce"]
    assert t.role_names(names) == ["embed"] + g * 2 + ["lm_head"]


def test_split_input_projections_name_their_tails():
    t = _timeline()
    # a recipe with GDN b|a and attention k|v in formats of their own (q4-27b): the norm runs first, then two GEMVs
    gdn = ["rmsnorm_kernel", "qgemv4_sx_kernel", "qgemv_kernel", "gdn_conv_decode_kernel", "qgemv_pp_wide_kernel",
           "qgemv4_sx_kernel", "qgemv_pp_wide_kernel"]
    attn = ["rmsnorm_kernel", "qgemv4_sx_kernel", "qgemv_ring_kernel", "attn_prep_kernel", "attn_split_v4_kernel",
            "attn_combine_kernel", "qgemv_pp_wide_kernel", "qgemv4_sx_kernel", "qgemv_pp_wide_kernel"]
    names = ["embed_kernel"] + gdn + attn + gdn + ["rmsnorm_kernel", "qgemv_ring_kernel"]
    g = ["rmsnorm", "gdn_in", "gdn_ba", "gdn_step", "gdn_out", "gate_up", "down"]
    a = ["rmsnorm", "attn_qkv", "attn_kv", "attn_prep", "attn_split", "attn_combine", "attn_o", "gate_up", "down"]
    assert t.role_names(names) == ["embed"] + g + a + g + ["rmsnorm", "lm_head"]


def test_role_bytes_are_the_4bit_group64_sizes():
    pytest.importorskip("torch")  # engine.registry reads the checkpoint layout through the loader
    from engine.plan import DEFAULT_RECIPE
    b = _timeline().role_bytes(DEFAULT_RECIPE)
    per_weight = 0.5 + 2 / 64  # a nibble of code and an fp16 scale per 64 weights
    assert b["gate_up"] == 2 * 17408 * 5120 * per_weight
    assert b["down"] == 5120 * 17408 * per_weight
    assert b["gdn_out"] == b["attn_o"] == 5120 * 6144 * per_weight
    assert b["lm_head"] == 248320 * 5120 * per_weight


def test_role_bytes_follow_the_recipe():
    pytest.importorskip("torch")
    from engine.native_recipe import recipe_named
    from engine.registry import config_27b
    b = _timeline().role_bytes(recipe_named("q4-27b", config_27b(vision=False)))
    assert b["gate_up"] == 2 * 17408 * 5120 * (0.5 + 2 / 64)  # q4g64
    assert b["down"] == 5120 * 17408 * (5 / 8 + 2 / 64)  # q5g64
    assert b["lm_head"] == 248320 * 5120 * (6 / 8 + 2 / 64)  # q6g64
