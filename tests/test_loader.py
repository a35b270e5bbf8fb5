"""engine.loader.Checkpoint: both key layouts, lazy memory-mapped reads, and every refusal."""

from __future__ import annotations

import gc
import json
import shutil

import pytest
import torch
from safetensors import safe_open
from safetensors.torch import load_file, save_file

from engine.config import ConfigError
from engine.loader import Checkpoint, CheckpointError, text_tensor_shapes
from engine.reference import ReferenceModel


def _copy(src, tmp_path, name="ckpt"):
    dst = tmp_path / name
    shutil.copytree(src, dst)
    return dst


def _raw(folder, key):
    """The tensor as stored, read with safetensors directly (oracle for the loader)."""
    index = json.loads((folder / "model.safetensors.index.json").read_text())
    with safe_open(folder / index["weight_map"][key], framework="pt") as f:
        return f.get_tensor(key)


def test_multimodal_layout(tiny_checkpoint):
    ck = Checkpoint.open(tiny_checkpoint)
    assert ck.text_prefix == "model.language_model."
    assert ck.config.model_type == "qwen3_5"
    assert ck.has("model.visual.patch_embed.proj.weight") and ck.has("mtp.fc.weight")
    key = "model.language_model.layers.0.linear_attn.A_log"
    assert torch.equal(ck.text("layers.0.linear_attn.A_log"), _raw(tiny_checkpoint, key))
    assert torch.equal(ck.text("lm_head.weight"), _raw(tiny_checkpoint, "lm_head.weight"))
    assert torch.equal(ck.text("mtp.fc.weight"), _raw(tiny_checkpoint, "mtp.fc.weight"))
    assert ck.get(key, dtype=torch.bfloat16).dtype == torch.bfloat16
    ck.validate_text()


def test_text_only_layout(tiny_text_hf):
    folder = tiny_text_hf[1]
    ck = Checkpoint.open(folder)
    assert ck.text_prefix == "model."
    assert ck.config.model_type == "qwen3_5_text"
    assert not any(k.startswith("model.language_model.") for k in ck.keys())
    assert torch.equal(ck.text("embed_tokens.weight"), _raw(folder, "model.embed_tokens.weight"))
    assert torch.equal(ck.text("layers.3.self_attn.q_norm.weight"), _raw(folder, "model.layers.3.self_attn.q_norm.weight"))
    ck.validate_text()


def test_every_expected_tensor_is_in_the_tiny_checkpoint(tiny_checkpoint):
    ck = Checkpoint.open(tiny_checkpoint)
    expected = {ck.full_key(rel) for rel in text_tensor_shapes(ck.config.text)}
    text_keys = {k for k in ck.keys() if not k.startswith("model.visual.")}
    assert expected == text_keys  # nothing missing, nothing unaccounted for


def test_tied_embeddings_serve_lm_head(tiny_text_hf, tmp_path):
    folder = _copy(tiny_text_hf[1], tmp_path)
    cfg = json.loads((folder / "config.json").read_text())
    cfg["tie_word_embeddings"] = True
    (folder / "config.json").write_text(json.dumps(cfg))
    tensors = load_file(folder / "model.safetensors")
    del tensors["lm_head.weight"]
    save_file(tensors, folder / "model.safetensors")
    index = json.loads((folder / "model.safetensors.index.json").read_text())
    del index["weight_map"]["lm_head.weight"]
    (folder / "model.safetensors.index.json").write_text(json.dumps(index))
    ck = Checkpoint.open(folder)
    assert torch.equal(ck.text("lm_head.weight"), tensors["model.embed_tokens.weight"])


def test_single_file_without_index(tiny_text_hf, tmp_path):
    folder = _copy(tiny_text_hf[1], tmp_path)
    (folder / "model.safetensors.index.json").unlink()
    (folder / "model-mtp.safetensors").unlink()
    cfg = json.loads((folder / "config.json").read_text())
    cfg["mtp_num_hidden_layers"] = 0
    (folder / "config.json").write_text(json.dumps(cfg))
    ck = Checkpoint.open(folder)
    assert not ck.has("mtp.fc.weight")
    ck.validate_text()
    model = ReferenceModel.from_checkpoint(ck)
    assert not model.has_mtp


def test_missing_shard_names_file_and_index(tiny_checkpoint, tmp_path):
    folder = _copy(tiny_checkpoint, tmp_path)
    (folder / "model-mtp.safetensors").unlink()
    with pytest.raises(CheckpointError, match=r"model-mtp\.safetensors.*model\.safetensors\.index\.json"):
        Checkpoint.open(folder)


def test_missing_tensor_is_named(tiny_checkpoint, tmp_path):
    ck = Checkpoint.open(tiny_checkpoint)
    with pytest.raises(CheckpointError, match=r"'model\.language_model\.layers\.9\.mlp\.up_proj\.weight' is missing"):
        ck.text("layers.9.mlp.up_proj.weight")
    # listed in the index but absent from the shard it names
    folder = _copy(tiny_checkpoint, tmp_path)
    mtp = load_file(folder / "model-mtp.safetensors")
    del mtp["mtp.norm.weight"]
    save_file(mtp, folder / "model-mtp.safetensors")
    with pytest.raises(CheckpointError, match=r"'mtp\.norm\.weight'.*does not contain it"):
        Checkpoint.open(folder).text("mtp.norm.weight")


def test_wrong_shape_names_tensor_and_both_shapes(tiny_checkpoint, tmp_path):
    folder = _copy(tiny_checkpoint, tmp_path)
    mtp = load_file(folder / "model-mtp.safetensors")
    mtp["mtp.fc.weight"] = torch.zeros(64, 64)  # config implies [64, 128]
    save_file(mtp, folder / "model-mtp.safetensors")
    ck = Checkpoint.open(folder)
    pattern = r"'mtp\.fc\.weight' has shape \[64, 64\]; the config implies \[64, 128\]"
    with pytest.raises(CheckpointError, match=pattern):
        ck.text("mtp.fc.weight")
    with pytest.raises(CheckpointError, match=pattern):
        ck.validate_text()
    with pytest.raises(CheckpointError, match=pattern):
        ReferenceModel.from_checkpoint(folder)
    ReferenceModel.from_checkpoint(folder, mtp=False)  # the trunk alone is still fine


def test_non_qwen35_config_is_refused(tiny_text_hf, tmp_path):
    folder = _copy(tiny_text_hf[1], tmp_path)
    cfg = json.loads((folder / "config.json").read_text())
    cfg["model_type"] = "llama"
    (folder / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(ConfigError, match="model_type"):
        Checkpoint.open(folder)


def test_folder_without_safetensors_is_refused(tiny_text_hf, tmp_path):
    folder = tmp_path / "empty"
    folder.mkdir()
    shutil.copy(tiny_text_hf[1] / "config.json", folder)
    with pytest.raises(CheckpointError, match="no model.safetensors"):
        Checkpoint.open(folder)
    with pytest.raises(CheckpointError, match="not a checkpoint folder"):
        Checkpoint.open(tmp_path / "does-not-exist")


def _rss_anon_mib() -> float:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("RssAnon:"):
                return int(line.split()[1]) / 1024
    pytest.skip("no /proc/self/status RssAnon on this platform")


def test_reads_are_lazy_and_never_a_second_copy(tiny_text_hf, tmp_path):
    """A 64 MiB tensor: opening costs nothing; reading it costs at most one copy of it in anonymous memory."""
    size_mib = 64
    folder = _copy(tiny_text_hf[1], tmp_path)
    save_file({"model.big": torch.ones(size_mib * 1024 * 1024 // 4)}, folder / "big.safetensors")
    index = json.loads((folder / "model.safetensors.index.json").read_text())
    index["weight_map"]["model.big"] = "big.safetensors"
    (folder / "model.safetensors.index.json").write_text(json.dumps(index))
    gc.collect()
    before = _rss_anon_mib()
    ck = Checkpoint.open(folder)
    assert ck.shape("model.big") == (size_mib * 1024 * 1024 // 4,)
    assert _rss_anon_mib() - before < 8, "opening read tensor data"
    t = ck.get("model.big")
    assert float(t.sum()) == t.numel()  # touch every page
    grown = _rss_anon_mib() - before
    assert grown < 1.25 * size_mib, f"reading one {size_mib} MiB tensor grew anonymous memory by {grown:.0f} MiB"


@pytest.mark.parametrize("shard", ["model.safetensors", "model-mtp.safetensors"])
def test_corrupt_shard_is_named_at_open(tiny_text_hf, tmp_path, shard):
    folder = _copy(tiny_text_hf[1], tmp_path)
    data = (folder / shard).read_bytes()
    (folder / shard).write_bytes(data[:8] + b"{not json" + data[17:64])  # header mangled and file truncated
    with pytest.raises(CheckpointError, match=rf"{shard}.*not a readable safetensors file"):
        Checkpoint.open(folder)


def test_index_shard_names_must_stay_inside_the_folder(tiny_text_hf, tmp_path):
    folder = _copy(tiny_text_hf[1], tmp_path)
    index = json.loads((folder / "model.safetensors.index.json").read_text())
    index["weight_map"]["mtp.fc.weight"] = "../elsewhere.safetensors"
    (folder / "model.safetensors.index.json").write_text(json.dumps(index))
    with pytest.raises(CheckpointError, match="not a plain file name"):
        Checkpoint.open(folder)


def test_expected_shapes_add_up_to_the_27b_parameter_counts():
    """text_tensor_shapes on the 27B config sums to MODEL.md's published counts (text and MTP)."""
    import math
    from engine.config import parse_config
    cfg = parse_config(dict(
        model_type="qwen3_5_text", hidden_size=5120, num_hidden_layers=64, intermediate_size=17408,
        vocab_size=248320, num_attention_heads=24, num_key_value_heads=4, head_dim=256,
        rope_parameters=dict(rope_type="default", rope_theta=1e7, partial_rotary_factor=0.25,
                             mrope_section=[11, 11, 10], mrope_interleaved=True),
        linear_num_key_heads=16, linear_key_head_dim=128, linear_num_value_heads=48, linear_value_head_dim=128,
        linear_conv_kernel_dim=4, mtp_num_hidden_layers=1))
    shapes = text_tensor_shapes(cfg.text)
    assert sum(math.prod(s) for k, s in shapes.items() if not k.startswith("mtp.")) == 26_895_998_464
    assert sum(math.prod(s) for k, s in shapes.items() if k.startswith("mtp.")) == 424_699_392
