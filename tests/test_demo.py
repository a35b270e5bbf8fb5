"""The demo checkpoint: real key names and shapes (oracle: transformers' own model), deterministic, labelled."""

import copy
import json

import pytest

from engine import demo
from engine.config import load_config


def _small_vocab_config():
    cfg = copy.deepcopy(demo.demo_config())
    cfg["text_config"]["vocab_size"] = 1024
    for k, v in (("image_token_id", 1020), ("video_token_id", 1021),
                 ("vision_start_token_id", 1022), ("vision_end_token_id", 1023)):
        cfg[k] = v
    return cfg


def test_demo_keys_and_shapes_match_transformers():
    transformers = pytest.importorskip("transformers")
    cfg = _small_vocab_config()
    hf_cfg = transformers.Qwen3_5Config(**copy.deepcopy(cfg))
    model = transformers.Qwen3_5ForConditionalGeneration(hf_cfg)
    hf_shapes = {k: tuple(v.shape) for k, v in model.state_dict().items()}
    ours = demo.demo_tensor_shapes(cfg)
    ours_no_mtp = {k: v for k, v in ours.items() if not k.startswith("mtp.")}
    assert ours_no_mtp == hf_shapes
    # MTP (transformers has none): one full-attention layer + fc + three norms.
    mtp = {k for k in ours if k.startswith("mtp.")}
    assert "mtp.fc.weight" in mtp and ours["mtp.fc.weight"] == (128, 256)
    assert "mtp.layers.0.self_attn.q_proj.weight" in mtp


def test_demo_checkpoint_is_deterministic_and_labelled(tmp_path, monkeypatch):
    monkeypatch.setenv("MONORAIL_DATA_DIR", str(tmp_path / "data"))
    path = demo.ensure_demo_model()
    assert demo.is_demo_model(path)
    marker = json.loads((path / demo.MARKER_FILE).read_text())
    assert marker["random_weights"] is True and "random weights" in marker["name"]
    cfg = load_config(path)
    assert cfg.text.vocab_size == 248320 and cfg.has_vision and cfg.has_mtp
    # A second generation elsewhere gives identical bytes.
    other = demo.write_demo_checkpoint(tmp_path / "again")
    assert (other / "model.safetensors").read_bytes() == (path / "model.safetensors").read_bytes()
    # Reuse: a second call does not regenerate.
    mtime = (path / "model.safetensors").stat().st_mtime_ns
    assert demo.ensure_demo_model() == path
    assert (path / "model.safetensors").stat().st_mtime_ns == mtime
