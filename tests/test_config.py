"""config.json parsing: this family is accepted in both save layouts; anything else is refused by field."""

import copy
import json

import pytest

from engine.config import ConfigError, load_config, parse_config
from engine.demo import demo_config


def test_multimodal_config_parses_with_real_field_names():
    cfg = parse_config(demo_config())
    t = cfg.text
    assert cfg.model_type == "qwen3_5" and cfg.has_vision and cfg.has_mtp
    assert t.rotary_dim == 64 and t.gqa_group == 6 and t.linear_value_heads_per_key_head == 3
    assert t.full_attention_layers == (3,) and t.linear_attention_layers == (0, 1, 2)
    assert t.rope_theta == 1e7 and t.mrope_section == (11, 11, 10) and t.mrope_interleaved
    assert cfg.vision.patch_dim == 1536 and cfg.vision.merge_unit == 4


def test_text_only_config_and_legacy_rope_fields():
    raw = copy.deepcopy(demo_config()["text_config"])
    rope = raw.pop("rope_parameters")
    raw["rope_theta"] = rope["rope_theta"]  # older saves: top-level rope_theta + rope_scaling
    raw["rope_scaling"] = {"mrope_section": rope["mrope_section"], "mrope_interleaved": True, "type": "default"}
    raw["partial_rotary_factor"] = 0.25
    raw.pop("layer_types")  # derived from full_attention_interval (default 4)
    cfg = parse_config(raw)
    assert cfg.vision is None and cfg.text.rope_theta == 1e7
    assert cfg.text.layer_types == ("linear_attention",) * 3 + ("full_attention",)


@pytest.mark.parametrize("edit, field", [
    (lambda c: c.update(model_type="llama"), "'model_type' is 'llama'"),
    (lambda c: c.update(architectures=["LlamaForCausalLM"]), "'architectures'"),
    (lambda c: c["text_config"].update(hidden_act="gelu"), "'text_config.hidden_act' is 'gelu'"),
    (lambda c: c["text_config"]["layer_types"].reverse(), "'text_config.layer_types[0]'"),
    (lambda c: c["text_config"]["rope_parameters"].update(mrope_interleaved=False),
     "'text_config.rope_parameters.mrope_interleaved' is False"),
    (lambda c: c["text_config"]["rope_parameters"].update(mrope_section=[11, 11, 11]), "mrope_section"),
    (lambda c: c["text_config"].pop("hidden_size"), "'text_config.hidden_size' is missing"),
    (lambda c: c["text_config"].update(num_key_value_heads=4), "num_key_value_heads"),
    (lambda c: c["vision_config"].update(out_hidden_size=99), "'vision_config.out_hidden_size' is 99"),
])
def test_other_architectures_are_refused_naming_the_field(edit, field):
    raw = copy.deepcopy(demo_config())
    edit(raw)
    with pytest.raises(ConfigError) as err:
        parse_config(raw)
    assert field in str(err.value)


def test_load_config_errors_are_clear(tmp_path):
    with pytest.raises(ConfigError, match="no config.json"):
        load_config(tmp_path)
    (tmp_path / "config.json").write_text("{not json")
    with pytest.raises(ConfigError, match="not valid JSON"):
        load_config(tmp_path)
    (tmp_path / "config.json").write_text(json.dumps(demo_config()))
    assert load_config(tmp_path).text.vocab_size == 248320
