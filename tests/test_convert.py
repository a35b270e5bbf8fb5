"""convert -> artifact -> reference model, on tiny transformers-written checkpoints (vision + MTP).

Oracles: the source tensors read by safetensors' own loader and quantized directly with
engine.quant (the artifact must reproduce them bit for bit), the unquantized reference model's
logits (bounded drift per recipe), an independent fp64 FP8 block dequantization.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file, save_file

from engine.artifact import Artifact
from engine.config import ConfigError
from engine.convert import ConvertError, SourceCheckpoint, convert
from engine.loader import Checkpoint
from engine.quant import quantize, relative_error
from engine.recipe import get_recipe, parse_format
from engine.reference.model import ReferenceModel
from engine.registry import RegistryError, TEST_SHAPES_ENV

PROMPT = torch.tensor([3, 17, 250, 999, 42, 7, 512, 64, 1000, 5])


def _source_tensors(folder: Path) -> dict[str, torch.Tensor]:
    out: dict[str, torch.Tensor] = {}
    for f in sorted(folder.glob("*.safetensors")):
        out.update(load_file(f))
    return out


@pytest.fixture(scope="module")
def artifacts(tiny_checkpoint, tmp_path_factory):
    """The tiny multimodal checkpoint converted with the 8-bit and the default 4-bit recipe."""
    out = tmp_path_factory.mktemp("artifacts")
    events: dict[str, list] = {}
    paths = {}
    for name in ("q8", "q4-27b"):
        events[name] = []
        convert(tiny_checkpoint, out / f"{name}.monorail", recipe=name, allow_test_shapes=True, threads=1,
                progress=events[name].append)
        paths[name] = out / f"{name}.monorail"
    return paths, events


def test_artifact_reproduces_direct_quantization_bit_for_bit(tiny_checkpoint, artifacts):
    paths, _ = artifacts
    src = _source_tensors(tiny_checkpoint)
    for name, path in paths.items():
        rec = get_recipe(name)
        art = Artifact.open(path, allow_test_shapes=True)
        assert set(art.weights) == set(src)  # every tensor, original names (text, mtp.*, model.visual.*)
        view = art.checkpoint()
        for key, w in src.items():
            fmt = art.info(key).format
            assert fmt == rec.format_for(key, tuple(w.shape))
            got = view.get(key)
            q = parse_format(fmt)
            if q is None:
                want = w.to({"bf16": torch.bfloat16, "f32": torch.float32}[fmt]).float()
                assert torch.equal(got.float(), want), key
            else:
                qt = quantize(w, q, method=rec.method)
                assert torch.equal(got, qt.dequantize()), key
                stored = art.quantized(key)
                assert torch.equal(stored.codes, qt.codes) and torch.equal(stored.scales, qt.scales)
                # the error written into the metadata is the error of what was stored
                assert art.info(key).rel_error == pytest.approx(relative_error(w, qt), rel=1e-3, abs=1e-9)


def _logits(model: ReferenceModel, ids: torch.Tensor) -> torch.Tensor:
    return model.forward(ids, model.new_state(64)).logits


@pytest.mark.parametrize("recipe,bound", [("q8", 0.10), ("q4-27b", 0.65)])
def test_logits_within_bound_of_unquantized_reference(tiny_checkpoint, artifacts, recipe, bound):
    """Relative logit drift ||l_q - l|| / ||l|| over a 10-token prompt.

    Measured on this random tiny model: q8 0.04, q4-27b 0.40 (random weights have no outlier
    structure for the scale search to exploit and amplify errors through 4 layers); the bounds
    are about 1.5x those.
    """
    base = _logits(ReferenceModel.from_checkpoint(Checkpoint.open(tiny_checkpoint)), PROMPT)
    art = Artifact.open(artifacts[0][recipe], allow_test_shapes=True)
    got = _logits(ReferenceModel.from_checkpoint(art.checkpoint()), PROMPT)
    drift = float((got - base).norm() / base.norm())
    print(f"{recipe}: relative logit drift {drift:.4f}")
    assert drift < bound


def _greedy(model: ReferenceModel, prompt: torch.Tensor, n: int) -> list[int]:
    state = model.new_state(len(prompt) + n)
    out = model.forward(prompt, state)
    ids = []
    for _ in range(n):
        nxt = int(out.logits[-1].argmax())
        ids.append(nxt)
        out = model.forward(torch.tensor([nxt]), state)
    return ids


def test_convert_load_generate_greedy(tiny_checkpoint, artifacts):
    base = ReferenceModel.from_checkpoint(Checkpoint.open(tiny_checkpoint))
    want = _greedy(base, PROMPT, 8)
    art = Artifact.open(artifacts[0]["q8"], allow_test_shapes=True)
    model = ReferenceModel.from_checkpoint(art.checkpoint())
    assert model.has_mtp
    got = _greedy(model, PROMPT, 8)
    agree = sum(a == b for a, b in zip(got, want))
    print(f"q8 greedy: {got} vs unquantized {want} ({agree}/8 agree)")
    assert len(got) == 8 and all(0 <= t < art.config.text.vocab_size for t in got)
    assert got[0] == want[0]  # the first token follows from the prompt alone


def test_progress_reports_every_tensor(artifacts):
    ev = artifacts[1]["q8"]
    assert [e.index for e in ev] == list(range(1, len(ev) + 1))
    assert all(a.done_bytes < b.done_bytes for a, b in zip(ev, ev[1:]))
    assert ev[-1].done_bytes == ev[-1].total_bytes and ev[-1].percent == 100.0 and ev[-1].eta_s == 0.0
    assert any(e.tensor.startswith("mtp.") for e in ev) and any(e.tensor.startswith("model.visual.") for e in ev)


def test_metadata_provenance_and_determinism(tiny_checkpoint, artifacts, tmp_path):
    art = Artifact.open(artifacts[0]["q4-27b"], allow_test_shapes=True)
    assert art.recipe["tag"] == "q4-27b@v1/search" and art.recipe["formats"]["mlp.down"] == "q5g64"
    assert art.family == "test-tiny" and art.architecture == "Qwen3_5ForConditionalGeneration"
    assert art.source["tensors"] == len(_source_tensors(tiny_checkpoint))
    assert art.generation_config()["eos_token_id"] == list(art.config.text.eos_token_ids)
    # same input, same recipe: byte-identical artifact (and so the same source digest)
    again = convert(tiny_checkpoint, tmp_path / "again.monorail", recipe="q4-27b", allow_test_shapes=True, threads=1)
    assert again.source_digest == art.source["digest"]
    assert (tmp_path / "again.monorail").read_bytes() == artifacts[0]["q4-27b"].read_bytes()


def test_embedded_tokenizer_files_and_chat_template(tiny_checkpoint, tmp_path):
    src = tmp_path / "hf"
    shutil.copytree(tiny_checkpoint, src)
    template = "{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}"
    (src / "chat_template.jinja").write_text(template)
    (src / "tokenizer_config.json").write_text(json.dumps({"model_max_length": 262144, "eos_token": "<|im_end|>"}))
    (src / "preprocessor_config.json").write_text(json.dumps({"patch_size": 16, "merge_size": 2}))
    convert(src, tmp_path / "a.monorail", recipe="q4", method="rtn", allow_test_shapes=True, threads=1)
    art = Artifact.open(tmp_path / "a.monorail", allow_test_shapes=True)
    assert art.chat_template() == template
    assert art.preprocessor_config() == {"patch_size": 16, "merge_size": 2}
    out = art.extract_files(tmp_path / "files")
    from engine.chat_template import load_chat_template
    assert load_chat_template(out) == template
    assert json.loads((out / "tokenizer_config.json").read_text())["model_max_length"] == 262144


# ---------------------------------------------------------------------------------------------
# FP8 block-scaled sources


def _to_fp8_checkpoint(src: Path, dst: Path, block: int = 128) -> dict[str, tuple[torch.Tensor, torch.Tensor]]:
    """Rewrite the text projections of ``src`` as float8_e4m3fn + ``weight_scale_inv`` per block,
    as the official FP8 releases do (embeddings, lm_head, norms and vision stay as they were)."""
    shutil.copytree(src, dst)
    fp8: dict[str, tuple[torch.Tensor, torch.Tensor]] = {}
    index = json.loads((dst / "model.safetensors.index.json").read_text())
    for shard in sorted(set(index["weight_map"].values())):
        tensors = load_file(dst / shard)
        out = {}
        for k, w in tensors.items():
            if w.dim() == 2 and k.endswith("_proj.weight") and "visual" not in k:
                n, kk = w.shape
                nb, kb = -(-n // block), -(-kk // block)
                pad = torch.zeros(nb * block, kb * block)
                pad[:n, :kk] = w.float()
                amax = pad.reshape(nb, block, kb, block).abs().amax(dim=(1, 3))
                scale = (amax / 448.0).clamp(min=1e-12)
                q = (w.float() / scale.repeat_interleave(block, 0)[:n].repeat_interleave(block, 1)[:, :kk])
                q = q.to(torch.float8_e4m3fn)
                out[k], out[k + "_scale_inv"] = q, scale
                fp8[k] = (q, scale)
                index["weight_map"][k + "_scale_inv"] = shard
            else:
                out[k] = w
        save_file(out, dst / shard, metadata={"format": "pt"})
    (dst / "model.safetensors.index.json").write_text(json.dumps(index))
    cfg = json.loads((dst / "config.json").read_text())
    cfg["quantization_config"] = {"quant_method": "fp8", "fmt": "e4m3", "activation_scheme": "dynamic",
                                  "weight_block_size": [block, block]}
    (dst / "config.json").write_text(json.dumps(cfg))
    return fp8


def test_fp8_block_scaled_source(tiny_checkpoint, tmp_path):
    fp8 = _to_fp8_checkpoint(tiny_checkpoint, tmp_path / "fp8")
    assert len(fp8) > 20
    cfg = Checkpoint.open(tiny_checkpoint).config
    source = SourceCheckpoint(tmp_path / "fp8", cfg)
    assert source.fp8 and source.block == (128, 128)
    for key, (q, scale) in list(fp8.items())[:12]:
        got, _ = source.read(key)
        n, k = q.shape
        # independent fp64 oracle: every element times the scale of its 128 x 128 block
        s = scale.double()[torch.arange(n)[:, None] // 128, torch.arange(k)[None, :] // 128]
        want = q.double() * s
        assert torch.allclose(got.double(), want, rtol=2.0 ** -23, atol=0), key
    source.close()

    convert(tmp_path / "fp8", tmp_path / "fp8.monorail", recipe="q8", allow_test_shapes=True, threads=1)
    art = Artifact.open(tmp_path / "fp8.monorail", allow_test_shapes=True)
    assert art.source["dtype"].startswith("fp8-e4m3 block 128x128")
    assert not any(k.endswith("_scale_inv") for k in art.weights)
    assert art.info(next(iter(fp8))).source_dtype == "F8_E4M3"
    base = _logits(ReferenceModel.from_checkpoint(Checkpoint.open(tiny_checkpoint)), PROMPT)
    got = _logits(ReferenceModel.from_checkpoint(art.checkpoint()), PROMPT)
    drift = float((got - base).norm() / base.norm())
    print(f"fp8 source -> q8 artifact: relative logit drift vs the fp32 original {drift:.4f}")
    assert drift < 0.15  # fp8 e4m3 (3 mantissa bits) then 8-bit: measured 0.099


def test_fp8_refusals(tiny_checkpoint, tmp_path):
    _to_fp8_checkpoint(tiny_checkpoint, tmp_path / "fp8")
    index = json.loads((tmp_path / "fp8" / "model.safetensors.index.json").read_text())
    key = "model.language_model.layers.0.mlp.up_proj.weight"
    shard = tmp_path / "fp8" / index["weight_map"][key]
    tensors = load_file(shard)
    del tensors[key + "_scale_inv"]
    save_file(tensors, shard)
    with pytest.raises(ConvertError, match=rf"'{key}' is FP8 .* block scale '{key}_scale_inv' is missing"):
        convert(tmp_path / "fp8", tmp_path / "x.monorail", allow_test_shapes=True, threads=1)


# ---------------------------------------------------------------------------------------------
# refusals


def _edit_tensor(folder: Path, key: str, new: torch.Tensor | None) -> None:
    index = json.loads((folder / "model.safetensors.index.json").read_text())
    shard = folder / index["weight_map"][key]
    tensors = load_file(shard)
    if new is None:
        del tensors[key]
    else:
        tensors[key] = new
    save_file(tensors, shard)


def test_refusals(tiny_checkpoint, tmp_path, monkeypatch):
    monkeypatch.delenv(TEST_SHAPES_ENV, raising=False)
    out = tmp_path / "out.monorail"
    with pytest.raises(RegistryError, match="hidden_size is 64; the 27B family has 5120"):
        convert(tiny_checkpoint, out)

    bad = tmp_path / "arch"
    shutil.copytree(tiny_checkpoint, bad)
    cfg = json.loads((bad / "config.json").read_text())
    cfg["model_type"], cfg["architectures"] = "llama", ["LlamaForCausalLM"]
    (bad / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(ConfigError, match="'model_type' is 'llama'"):
        convert(bad, out, allow_test_shapes=True, threads=1)

    key = "model.language_model.layers.1.mlp.down_proj.weight"
    missing = tmp_path / "missing"
    shutil.copytree(tiny_checkpoint, missing)
    _edit_tensor(missing, key, None)
    with pytest.raises(RegistryError, match=rf"'{key}' is missing \(expected shape \[64, 128\]\)"):
        convert(missing, out, allow_test_shapes=True, threads=1)

    wrong = tmp_path / "wrong"
    shutil.copytree(tiny_checkpoint, wrong)
    _edit_tensor(wrong, key, torch.zeros(64, 96))
    with pytest.raises(RegistryError, match=rf"'{key}' has shape \[64, 96\]; expected \[64, 128\]"):
        convert(wrong, out, allow_test_shapes=True, threads=1)

    extra = tmp_path / "extra"
    shutil.copytree(tiny_checkpoint, extra)
    _edit_tensor(extra, "model.language_model.norm.weight", torch.zeros(64))  # rewrite the shard ...
    shard = next(p for p in extra.glob("model*.safetensors") if "mtp" not in p.name)
    tensors = load_file(shard)
    tensors["model.language_model.layers.0.mlp.gate_proj.bias"] = torch.zeros(128)  # ... with a stranger
    save_file(tensors, shard)
    with pytest.raises(RegistryError, match=r"'model.language_model.layers.0.mlp.gate_proj.bias' \(shape \[128\]\) "
                                            r"is not part of this architecture"):
        convert(extra, out, allow_test_shapes=True, threads=1)

    noshard = tmp_path / "noshard"
    shutil.copytree(tiny_checkpoint, noshard)
    (noshard / "model-mtp.safetensors").unlink()
    with pytest.raises(ConvertError, match="shard 'model-mtp.safetensors' listed in .* is missing"):
        convert(noshard, out, allow_test_shapes=True, threads=1)

    with pytest.raises(ConvertError, match="not a folder"):
        convert(tmp_path / "nowhere", out, allow_test_shapes=True, threads=1)
    assert not out.exists() and not Path(str(out) + ".partial").exists()


def test_text_only_layout_round_trip(tiny_text_hf, tmp_path):
    """A text-only save (model.layers.*, Qwen3_5ForCausalLM) converts and loads under its own names."""
    folder = tiny_text_hf[1]
    convert(folder, tmp_path / "text.monorail", recipe="q8", method="rtn", allow_test_shapes=True, threads=1)
    art = Artifact.open(tmp_path / "text.monorail", allow_test_shapes=True)
    assert art.text_prefix == "model." and "model.layers.0.mlp.up_proj.weight" in art.weights
    assert not art.config.has_vision and art.config.has_mtp
    base = _logits(ReferenceModel.from_checkpoint(Checkpoint.open(folder)), PROMPT)
    got = _logits(ReferenceModel.from_checkpoint(art.checkpoint()), PROMPT)
    assert float((got - base).norm() / base.norm()) < 0.10  # same bound as the multimodal q8 case


def test_refused_up_front_when_the_disk_is_too_small(tiny_checkpoint, tmp_path, monkeypatch):
    import shutil as _shutil
    from collections import namedtuple
    usage = namedtuple("usage", "total used free")
    monkeypatch.setattr(_shutil, "disk_usage", lambda path: usage(10**9, 10**9 - 1000, 1000))
    with pytest.raises(ConvertError, match=r"needs 0\.\d+ GB but only 0\.00 GB are free"):
        convert(tiny_checkpoint, tmp_path / "x.monorail", allow_test_shapes=True, threads=1)
    assert not (tmp_path / "x.monorail").exists() and not (tmp_path / "x.monorail.partial").exists()
