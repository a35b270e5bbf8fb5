"""engine.registry: the accepted family, its exact tensor shapes, and refusals that name the mismatch."""

from __future__ import annotations

import pytest
from safetensors import safe_open

from engine.config import load_config
from engine.registry import (
    FAMILY_27B,
    FAMILY_TEST,
    ROLES,
    TEST_SHAPES_ENV,
    RegistryError,
    check_tensors,
    config_27b,
    expected_tensors,
    identify,
    parameter_counts,
    tensor_role,
)


def test_27b_parameter_counts_match_model_md():
    counts = parameter_counts(config_27b())
    assert counts == {"text": 26_895_998_464, "mtp": 424_699_392, "vision": 460_730_096}


def test_27b_roles_cover_every_tensor_with_the_expected_sizes():
    per_role = {r: 0 for r in ROLES}
    for key, shape in expected_tensors(config_27b()).items():
        n = 1
        for d in shape:
            n *= d
        per_role[tensor_role(key)] += n
    h, i = 5120, 17408
    # independent arithmetic from MODEL.md's dimensions
    assert per_role["mlp.gate_up"] == 64 * 2 * i * h
    assert per_role["mlp.down"] == 64 * h * i
    assert per_role["gdn.qkv"] == 48 * (2 * 16 * 128 + 48 * 128) * h
    assert per_role["attn.q"] == 16 * 24 * 256 * 2 * h
    assert per_role["attn.kv"] == 16 * 2 * 4 * 256 * h
    assert per_role["mtp.fc"] == h * 2 * h
    assert per_role["embed"] == per_role["lm_head"] == 248320 * h


def test_identify_27b_and_the_test_switch(tiny_checkpoint, monkeypatch):
    monkeypatch.delenv(TEST_SHAPES_ENV, raising=False)
    assert identify(config_27b()) == FAMILY_27B
    assert identify(config_27b(vision=False, mtp=False)) == FAMILY_27B
    tiny = load_config(tiny_checkpoint)
    with pytest.raises(RegistryError, match=r"text_config.hidden_size is 64; the 27B family has 5120"):
        identify(tiny)
    assert identify(tiny, allow_test_shapes=True) == FAMILY_TEST
    monkeypatch.setenv(TEST_SHAPES_ENV, "1")
    assert identify(tiny) == FAMILY_TEST
    # the argument wins over the environment
    with pytest.raises(RegistryError):
        identify(tiny, allow_test_shapes=False)


def _header_shapes(folder) -> dict[str, tuple[int, ...]]:
    out = {}
    for f in sorted(folder.glob("*.safetensors")):
        with safe_open(f, framework="pt") as h:
            for k in h.keys():
                out[k] = tuple(h.get_slice(k).get_shape())
    return out


def test_expected_tensors_equal_what_transformers_wrote(tiny_checkpoint, tiny_text_hf):
    # multimodal layout with vision + MTP
    cfg = load_config(tiny_checkpoint)
    found = _header_shapes(tiny_checkpoint)
    assert expected_tensors(cfg) == found
    check_tensors(cfg, found, "model.language_model.")
    # text-only layout (model.layers.*)
    folder = tiny_text_hf[1]
    cfg = load_config(folder)
    found = _header_shapes(folder)
    assert expected_tensors(cfg, "model.") == found
    for key in found:
        tensor_role(key, "model.")


def test_refusals_name_tensor_expected_and_actual(tiny_checkpoint):
    cfg = load_config(tiny_checkpoint)
    good = _header_shapes(tiny_checkpoint)
    key = "model.language_model.layers.0.mlp.down_proj.weight"

    missing = {k: v for k, v in good.items() if k != key}
    with pytest.raises(RegistryError, match=rf"'{key}' is missing \(expected shape \[64, 128\]\)"):
        check_tensors(cfg, missing, "model.language_model.")

    wrong = dict(good, **{key: (64, 96)})
    with pytest.raises(RegistryError, match=rf"'{key}' has shape \[64, 96\]; expected \[64, 128\]"):
        check_tensors(cfg, wrong, "model.language_model.")

    extra = dict(good, **{"model.language_model.layers.0.mlp.bias": (64,)})
    with pytest.raises(RegistryError, match=r"'model.language_model.layers.0.mlp.bias' \(shape \[64\]\) is not part"):
        check_tensors(cfg, extra, "model.language_model.")

    with pytest.raises(RegistryError, match="no recipe role"):
        tensor_role("model.language_model.layers.0.something.weight")
