"""Tiny random checkpoints of the Qwen3.5 hybrid architecture, written by transformers itself.

They keep the real ratios of the 27B model (head_dim 256, 64 rotary dims, interleaved mRoPE
[11, 11, 10], theta 1e7, GQA 6:1, 3 GDN value heads per key head, the 3:1 layer pattern) at a
size that runs in milliseconds on a CPU. Every norm weight, ``A_log`` and ``dt_bias`` is pushed
away from its init with seeded noise, so a implementation that forgets the ``1 + w`` of the
zero-centred norm (or uses it on the GDN output norm) fails the oracle tests.

transformers has no MTP module (it drops ``mtp.*`` on load), so the MTP tensors are written
after ``save_pretrained`` as an extra shard with the real key names, listed in
``model.safetensors.index.json``.

transformers is a test-only dependency: this module lives under tests/ and nothing in engine/
or app/ may import it.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file

# Real ids (MODEL.md); tiny vocabularies use the top four ids of the vocabulary instead.
REAL_VOCAB = 248320
REAL_SPECIAL = {"image_token_id": 248056, "video_token_id": 248057,
                "vision_start_token_id": 248053, "vision_end_token_id": 248054}
REAL_EOS = [248046, 248044]

MTP_SHARD = "model-mtp.safetensors"
INDEX = "model.safetensors.index.json"


@dataclass(frozen=True)
class TinyShape:
    """Sizes of a tiny model; the ratios that matter are fixed to the 27B values."""
    hidden_size: int = 64
    intermediate_size: int = 128
    num_attention_heads: int = 6   # GQA 6:1
    num_key_value_heads: int = 1
    head_dim: int = 256            # 64 rotary dims at partial_rotary_factor 0.25
    linear_num_key_heads: int = 2
    linear_num_value_heads: int = 6  # 3 value heads per key head
    linear_head_dim: int = 32
    vision_depth: int = 2
    vision_hidden: int = 32
    vision_heads: int = 2
    vision_intermediate: int = 64


def special_token_ids(vocab_size: int) -> dict[str, int]:
    """Image/video/vision-start/vision-end ids that fit inside ``vocab_size``."""
    if vocab_size >= REAL_VOCAB:
        return dict(REAL_SPECIAL)
    return {"vision_start_token_id": vocab_size - 4, "vision_end_token_id": vocab_size - 3,
            "image_token_id": vocab_size - 2, "video_token_id": vocab_size - 1}


def eos_token_ids(vocab_size: int) -> list[int]:
    if vocab_size >= REAL_VOCAB:
        return list(REAL_EOS)
    return [vocab_size - 6, vocab_size - 5]


def _text_config_dict(vocab_size: int, num_hidden_layers: int, s: TinyShape) -> dict:
    return dict(
        vocab_size=vocab_size,
        hidden_size=s.hidden_size,
        intermediate_size=s.intermediate_size,
        num_hidden_layers=num_hidden_layers,
        num_attention_heads=s.num_attention_heads,
        num_key_value_heads=s.num_key_value_heads,
        head_dim=s.head_dim,
        linear_num_key_heads=s.linear_num_key_heads,
        linear_num_value_heads=s.linear_num_value_heads,
        linear_key_head_dim=s.linear_head_dim,
        linear_value_head_dim=s.linear_head_dim,
        linear_conv_kernel_dim=4,
        max_position_embeddings=4096,
        rms_norm_eps=1e-6,
        rope_parameters={"rope_type": "default", "rope_theta": 1e7, "partial_rotary_factor": 0.25,
                         "mrope_section": [11, 11, 10], "mrope_interleaved": True},
        # wider than transformers' 0.02 so attention patterns and GDN gates are not all flat
        initializer_range=0.05,
        tie_word_embeddings=False,
        eos_token_id=eos_token_ids(vocab_size),
    )


def _vision_config_dict(s: TinyShape) -> dict:
    return dict(
        depth=s.vision_depth,
        hidden_size=s.vision_hidden,
        intermediate_size=s.vision_intermediate,
        num_heads=s.vision_heads,
        in_channels=3,
        patch_size=16,
        temporal_patch_size=2,
        spatial_merge_size=2,
        out_hidden_size=s.hidden_size,
        num_position_embeddings=2304,
        hidden_act="gelu_pytorch_tanh",
        initializer_range=0.05,
    )


def _perturb(model: torch.nn.Module, gen: torch.Generator) -> None:
    """Move every norm weight/bias, A_log and dt_bias away from its init, deterministically."""
    with torch.no_grad():
        for name, p in model.named_parameters():
            leaf = name.rsplit(".", 1)[-1]
            owner = name.rsplit(".", 2)[-2] if name.count(".") >= 1 else ""
            if "norm" in owner or leaf in ("A_log", "dt_bias"):
                p.add_(0.1 * torch.randn(p.shape, generator=gen, dtype=torch.float32).to(p.dtype))


def make_mtp_tensors(hidden: int, intermediate: int, n_heads: int, n_kv: int, head_dim: int,
                     gen: torch.Generator, std: float = 0.05) -> dict[str, torch.Tensor]:
    """MTP head tensors with the real key names (fp32); norms are zero-centred around small noise."""
    def mat(o: int, i: int) -> torch.Tensor:
        return torch.randn(o, i, generator=gen) * std

    def norm(n: int) -> torch.Tensor:
        return torch.randn(n, generator=gen) * 0.1

    p = "mtp.layers.0."
    return {
        "mtp.fc.weight": mat(hidden, 2 * hidden),
        "mtp.pre_fc_norm_embedding.weight": norm(hidden),
        "mtp.pre_fc_norm_hidden.weight": norm(hidden),
        "mtp.norm.weight": norm(hidden),
        p + "input_layernorm.weight": norm(hidden),
        p + "post_attention_layernorm.weight": norm(hidden),
        p + "self_attn.q_proj.weight": mat(2 * n_heads * head_dim, hidden),
        p + "self_attn.k_proj.weight": mat(n_kv * head_dim, hidden),
        p + "self_attn.v_proj.weight": mat(n_kv * head_dim, hidden),
        p + "self_attn.o_proj.weight": mat(hidden, n_heads * head_dim),
        p + "self_attn.q_norm.weight": norm(head_dim),
        p + "self_attn.k_norm.weight": norm(head_dim),
        p + "mlp.gate_proj.weight": mat(intermediate, hidden),
        p + "mlp.up_proj.weight": mat(intermediate, hidden),
        p + "mlp.down_proj.weight": mat(hidden, intermediate),
    }


def _weight_map(path: Path) -> dict[str, str]:
    idx = path / INDEX
    if idx.exists():
        return dict(json.loads(idx.read_text())["weight_map"])
    single = path / "model.safetensors"
    from safetensors import safe_open
    with safe_open(single, framework="pt") as f:
        return {k: single.name for k in f.keys()}


def _write_index(path: Path, weight_map: dict[str, str]) -> None:
    total = 0
    from safetensors import safe_open
    for shard in sorted(set(weight_map.values())):
        with safe_open(path / shard, framework="pt") as f:
            for k in f.keys():
                t = f.get_slice(k)
                n = 1
                for d in t.get_shape():
                    n *= d
                total += n * {"F32": 4, "BF16": 2, "F16": 2}.get(t.get_dtype(), 4)
    index = {"metadata": {"total_size": total}, "weight_map": dict(sorted(weight_map.items()))}
    (path / INDEX).write_text(json.dumps(index, indent=2))


def _drop_vision(path: Path) -> None:
    """Remove model.visual.* from the saved shards and vision_config from config.json."""
    wm = _weight_map(path)
    for shard in sorted(set(wm.values())):
        tensors = load_file(path / shard)
        kept = {k: v for k, v in tensors.items() if not k.startswith("model.visual.")}
        if len(kept) != len(tensors):
            save_file(kept, path / shard, metadata={"format": "pt"})
    wm = {k: v for k, v in wm.items() if not k.startswith("model.visual.")}
    if (path / INDEX).exists():
        _write_index(path, wm)
    cfg = json.loads((path / "config.json").read_text())
    cfg.pop("vision_config", None)
    (path / "config.json").write_text(json.dumps(cfg, indent=2))


def _add_mtp(path: Path, tensors: dict[str, torch.Tensor], dtype: torch.dtype, text_only: bool) -> None:
    save_file({k: v.to(dtype).contiguous() for k, v in tensors.items()}, path / MTP_SHARD,
              metadata={"format": "pt"})
    wm = _weight_map(path)
    wm.update({k: MTP_SHARD for k in tensors})
    _write_index(path, wm)
    cfg = json.loads((path / "config.json").read_text())
    target = cfg if text_only else cfg["text_config"]
    target["mtp_num_hidden_layers"] = 1
    (path / "config.json").write_text(json.dumps(cfg, indent=2))


def _write_generation_config(path: Path, vocab_size: int) -> None:
    gen = {"eos_token_id": eos_token_ids(vocab_size), "do_sample": True, "temperature": 0.6,
           "top_k": 20, "top_p": 0.95, "transformers_version": "5.17.0"}
    (path / "generation_config.json").write_text(json.dumps(gen, indent=2))


def make_tiny_hf_model(path: str | Path, *, seed: int = 0, vision: bool = True, mtp: bool = True,
                       text_only_layout: bool = False, vocab_size: int = 1024, num_hidden_layers: int = 4,
                       dtype: str = "float32", max_shard_size: str | None = None,
                       shape: TinyShape = TinyShape()):
    """Build a tiny transformers model, save it to ``path`` and return ``(model, path)``.

    The returned model is in fp32 eval mode with exactly the weights written (before any cast to
    ``dtype``), so oracle tests can run transformers on it without reloading. ``max_shard_size``
    (e.g. ``"100KB"``) makes save_pretrained write several shards plus an index.
    """
    from transformers import (Qwen3_5Config, Qwen3_5ForCausalLM, Qwen3_5ForConditionalGeneration,
                              Qwen3_5TextConfig)

    path = Path(path)
    path.mkdir(parents=True, exist_ok=True)
    torch.manual_seed(seed)
    gen = torch.Generator().manual_seed(seed + 1)
    text = _text_config_dict(vocab_size, num_hidden_layers, shape)
    specials = special_token_ids(vocab_size)
    if text_only_layout:
        cfg = Qwen3_5TextConfig(**text)
        model = Qwen3_5ForCausalLM(cfg)
    else:
        cfg = Qwen3_5Config(text_config=text, vision_config=_vision_config_dict(shape),
                            tie_word_embeddings=False, **specials)
        model = Qwen3_5ForConditionalGeneration(cfg)
    model = model.float().eval()
    _perturb(model, gen)
    torch_dtype = getattr(torch, dtype)
    # round the in-memory model through the save dtype so it equals what a loader reads
    if torch_dtype != torch.float32:
        with torch.no_grad():
            for p in model.parameters():
                p.copy_(p.to(torch_dtype).float())
    save_kwargs = {"safe_serialization": True}
    if max_shard_size:
        save_kwargs["max_shard_size"] = max_shard_size
    # cast a copy of the state dict, not the model: .to(bf16) would also round buffers such as
    # the rotary inv_freq and leave the in-memory oracle subtly wrong
    state = {k: v.to(torch_dtype) for k, v in model.state_dict().items()}
    model.save_pretrained(path, state_dict=state, **save_kwargs)
    cfg_path = path / "config.json"
    cfg_json = json.loads(cfg_path.read_text())
    cfg_json["dtype"] = dtype  # what the shards hold, as real bf16 releases declare
    cfg_path.write_text(json.dumps(cfg_json, indent=2))
    if not vision and not text_only_layout:
        _drop_vision(path)
    if mtp:
        t = cfg if text_only_layout else cfg.text_config
        mtp_tensors = make_mtp_tensors(t.hidden_size, t.intermediate_size, t.num_attention_heads,
                                       t.num_key_value_heads, t.head_dim, gen)
        _add_mtp(path, mtp_tensors, torch_dtype, text_only_layout)
    _write_generation_config(path, vocab_size)
    return model, path


def make_tiny_checkpoint(path: str | Path, *, seed: int = 0, vision: bool = True, mtp: bool = True,
                         text_only_layout: bool = False, vocab_size: int = 1024, num_hidden_layers: int = 4,
                         dtype: str = "float32", max_shard_size: str | None = None) -> Path:
    """Write a tiny random checkpoint folder (config.json, safetensors, index, generation_config)."""
    _, p = make_tiny_hf_model(path, seed=seed, vision=vision, mtp=mtp, text_only_layout=text_only_layout,
                              vocab_size=vocab_size, num_hidden_layers=num_hidden_layers, dtype=dtype,
                              max_shard_size=max_shard_size)
    return p


def rel_err(a: torch.Tensor, b: torch.Tensor) -> float:
    """Relative error ``||a - b|| / ||b||`` in fp64 (b is the oracle)."""
    a64, b64 = a.detach().double().cpu(), b.detach().double().cpu()
    return float((a64 - b64).norm() / b64.norm())
