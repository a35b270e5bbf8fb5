"""The built-in demo model: a tiny, deterministic, RANDOM-WEIGHT checkpoint of the real architecture.

It lets a new user (and CI) run the whole stack without downloading 54 GB: the real tokenizer,
the official chat template, the hybrid GDN + gated-attention decoder, the MTP head and a tiny
vision tower, all with the real Hugging Face key names. Its output is meaningless text — it is
labelled "random weights" wherever it appears.

The checkpoint is generated on first use into the user's data directory (a few seconds on a CPU)
and is bit-identical on every machine: weights come from a seeded torch.Generator in a fixed order.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from pathlib import Path

from engine.paths import models_dir, resources_dir

DEMO_NAME = "monorail-demo-tiny (random weights)"
DEMO_VERSION = 1
DEMO_SEED = 20261202
MARKER_FILE = "monorail_demo.json"

# Real ratios (head_dim 256, 64 rotary dims, GQA 6:1, 3 GDN value heads per key head, 3:1 layer
# pattern, theta 1e7) at toy widths, and the real 248,320-row vocabulary so the real tokenizer works.
DEMO_TEXT_CONFIG = {
    "model_type": "qwen3_5_text",
    "hidden_size": 128,
    "num_hidden_layers": 4,
    "layer_types": ["linear_attention"] * 3 + ["full_attention"],
    "intermediate_size": 384,
    "vocab_size": 248320,
    "rms_norm_eps": 1e-6,
    "max_position_embeddings": 262144,
    "num_attention_heads": 6,
    "num_key_value_heads": 1,
    "head_dim": 256,
    "hidden_act": "silu",
    "attention_bias": False,
    "rope_parameters": {
        "rope_type": "default",
        "rope_theta": 10000000.0,
        "partial_rotary_factor": 0.25,
        "mrope_section": [11, 11, 10],
        "mrope_interleaved": True,
    },
    "linear_num_key_heads": 2,
    "linear_key_head_dim": 32,
    "linear_num_value_heads": 6,
    "linear_value_head_dim": 32,
    "linear_conv_kernel_dim": 4,
    "mtp_num_hidden_layers": 1,
    "tie_word_embeddings": False,
    "eos_token_id": 248046,
}

DEMO_VISION_CONFIG = {
    "model_type": "qwen3_5_vision",
    "depth": 2,
    "hidden_size": 64,
    "intermediate_size": 128,
    "num_heads": 2,
    "in_channels": 3,
    "patch_size": 16,
    "temporal_patch_size": 2,
    "spatial_merge_size": 2,
    "out_hidden_size": 128,
    "num_position_embeddings": 2304,
    "hidden_act": "gelu_pytorch_tanh",
}


def demo_config() -> dict:
    return {
        "architectures": ["Qwen3_5ForConditionalGeneration"],
        "model_type": "qwen3_5",
        "text_config": DEMO_TEXT_CONFIG,
        "vision_config": DEMO_VISION_CONFIG,
        "image_token_id": 248056,
        "video_token_id": 248057,
        "vision_start_token_id": 248053,
        "vision_end_token_id": 248054,
        "tie_word_embeddings": False,
    }


def _attention_layer_shapes(prefix: str, t: dict) -> dict[str, tuple[int, ...]]:
    h, hd = t["hidden_size"], t["head_dim"]
    nh, nkv = t["num_attention_heads"], t["num_key_value_heads"]
    return {
        f"{prefix}self_attn.q_proj.weight": (2 * nh * hd, h),  # per head [q | gate]
        f"{prefix}self_attn.k_proj.weight": (nkv * hd, h),
        f"{prefix}self_attn.v_proj.weight": (nkv * hd, h),
        f"{prefix}self_attn.o_proj.weight": (h, nh * hd),
        f"{prefix}self_attn.q_norm.weight": (hd,),
        f"{prefix}self_attn.k_norm.weight": (hd,),
    }


def _common_layer_shapes(prefix: str, t: dict) -> dict[str, tuple[int, ...]]:
    h, i = t["hidden_size"], t["intermediate_size"]
    return {
        f"{prefix}input_layernorm.weight": (h,),
        f"{prefix}post_attention_layernorm.weight": (h,),
        f"{prefix}mlp.gate_proj.weight": (i, h),
        f"{prefix}mlp.up_proj.weight": (i, h),
        f"{prefix}mlp.down_proj.weight": (h, i),
    }


def _gdn_layer_shapes(prefix: str, t: dict) -> dict[str, tuple[int, ...]]:
    h = t["hidden_size"]
    qk = t["linear_num_key_heads"] * t["linear_key_head_dim"]
    hv = t["linear_num_value_heads"]
    vd = hv * t["linear_value_head_dim"]
    conv = 2 * qk + vd
    return {
        f"{prefix}linear_attn.in_proj_qkv.weight": (conv, h),
        f"{prefix}linear_attn.in_proj_z.weight": (vd, h),
        f"{prefix}linear_attn.in_proj_b.weight": (hv, h),
        f"{prefix}linear_attn.in_proj_a.weight": (hv, h),
        f"{prefix}linear_attn.conv1d.weight": (conv, 1, t["linear_conv_kernel_dim"]),
        f"{prefix}linear_attn.dt_bias": (hv,),
        f"{prefix}linear_attn.A_log": (hv,),
        f"{prefix}linear_attn.norm.weight": (t["linear_value_head_dim"],),
        f"{prefix}linear_attn.out_proj.weight": (h, vd),
    }


def _vision_shapes(v: dict) -> dict[str, tuple[int, ...]]:
    vh, vi = v["hidden_size"], v["intermediate_size"]
    merged = vh * v["spatial_merge_size"] ** 2
    p, tp, c = v["patch_size"], v["temporal_patch_size"], v["in_channels"]
    s: dict[str, tuple[int, ...]] = {
        "model.visual.patch_embed.proj.weight": (vh, c, tp, p, p),
        "model.visual.patch_embed.proj.bias": (vh,),
        "model.visual.pos_embed.weight": (v["num_position_embeddings"], vh),
    }
    for b in range(v["depth"]):
        pre = f"model.visual.blocks.{b}."
        s.update({
            pre + "norm1.weight": (vh,), pre + "norm1.bias": (vh,),
            pre + "norm2.weight": (vh,), pre + "norm2.bias": (vh,),
            pre + "attn.qkv.weight": (3 * vh, vh), pre + "attn.qkv.bias": (3 * vh,),
            pre + "attn.proj.weight": (vh, vh), pre + "attn.proj.bias": (vh,),
            pre + "mlp.linear_fc1.weight": (vi, vh), pre + "mlp.linear_fc1.bias": (vi,),
            pre + "mlp.linear_fc2.weight": (vh, vi), pre + "mlp.linear_fc2.bias": (vh,),
        })
    s.update({
        "model.visual.merger.norm.weight": (vh,), "model.visual.merger.norm.bias": (vh,),
        "model.visual.merger.linear_fc1.weight": (merged, merged), "model.visual.merger.linear_fc1.bias": (merged,),
        "model.visual.merger.linear_fc2.weight": (v["out_hidden_size"], merged),
        "model.visual.merger.linear_fc2.bias": (v["out_hidden_size"],),
    })
    return s


def demo_tensor_shapes(cfg: dict | None = None) -> dict[str, tuple[int, ...]]:
    """Every tensor of the demo checkpoint, by its real Hugging Face key, in a fixed order."""
    cfg = cfg or demo_config()
    t, v = cfg["text_config"], cfg["vision_config"]
    h, vocab = t["hidden_size"], t["vocab_size"]
    lm = "model.language_model."
    s: dict[str, tuple[int, ...]] = {lm + "embed_tokens.weight": (vocab, h)}
    for i, kind in enumerate(t["layer_types"]):
        pre = f"{lm}layers.{i}."
        s.update(_common_layer_shapes(pre, t))
        s.update(_attention_layer_shapes(pre, t) if kind == "full_attention" else _gdn_layer_shapes(pre, t))
    s[lm + "norm.weight"] = (h,)
    s["lm_head.weight"] = (vocab, h)
    s.update({
        "mtp.fc.weight": (h, 2 * h),
        "mtp.pre_fc_norm_embedding.weight": (h,),
        "mtp.pre_fc_norm_hidden.weight": (h,),
        "mtp.norm.weight": (h,),
    })
    s.update(_common_layer_shapes("mtp.layers.0.", t))
    s.update(_attention_layer_shapes("mtp.layers.0.", t))
    s.update(_vision_shapes(v))
    return s


def _init_tensor(key: str, shape: tuple[int, ...], gen):
    """Random values with roughly the statistics of a trained model, so activations stay finite."""
    import torch

    if key.endswith("A_log"):
        return torch.log(torch.empty(shape).uniform_(1.0, 16.0, generator=gen))
    if key.endswith("dt_bias"):
        return torch.empty(shape).uniform_(-1.0, 1.0, generator=gen)
    if "norm" in key and len(shape) == 1:
        if key.startswith("model.visual") and key.endswith("weight"):
            return 1.0 + 0.1 * torch.randn(shape, generator=gen)  # LayerNorm: plain weight
        return 0.1 * torch.randn(shape, generator=gen)  # zero-centred RMSNorm weight (1 + w)
    if key.endswith("bias"):
        return 0.02 * torch.randn(shape, generator=gen)
    fan_in = 1
    for d in shape[1:]:
        fan_in *= d
    std = 0.02 if key.endswith(("embed_tokens.weight", "pos_embed.weight")) else fan_in ** -0.5
    return std * torch.randn(shape, generator=gen)


def write_demo_checkpoint(out_dir: Path) -> Path:
    """Write the demo checkpoint (safetensors bf16 + config + template) into out_dir."""
    import torch
    from safetensors.torch import save_file

    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    cfg = demo_config()
    gen = torch.Generator().manual_seed(DEMO_SEED)
    tensors = {k: _init_tensor(k, shp, gen).to(torch.bfloat16).contiguous()
               for k, shp in demo_tensor_shapes(cfg).items()}
    save_file(tensors, str(out_dir / "model.safetensors"), metadata={"format": "pt"})
    (out_dir / "config.json").write_text(json.dumps(cfg, indent=2) + "\n")
    (out_dir / "generation_config.json").write_text(json.dumps(
        {"eos_token_id": [248046, 248044], "pad_token_id": 248044,
         "temperature": 0.6, "top_k": 20, "top_p": 0.95, "do_sample": True}, indent=2) + "\n")
    shutil.copyfile(resources_dir() / "chat_template.jinja", out_dir / "chat_template.jinja")
    (out_dir / MARKER_FILE).write_text(json.dumps(
        {"name": DEMO_NAME, "version": DEMO_VERSION, "seed": DEMO_SEED, "random_weights": True}, indent=2) + "\n")
    return out_dir


def demo_model_dir() -> Path:
    return models_dir() / f"demo-v{DEMO_VERSION}"


def ensure_demo_model() -> Path:
    """Return the demo checkpoint folder, generating it on first use (atomically: a crash mid-way leaves nothing)."""
    target = demo_model_dir()
    if (target / MARKER_FILE).exists():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=".demo-", dir=target.parent))
    try:
        write_demo_checkpoint(tmp)
        if target.exists():  # a half-written folder from an older version: replace it
            shutil.rmtree(target)
        os.replace(tmp, target)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)
    return target


def is_demo_model(model_dir: Path) -> bool:
    return (Path(model_dir) / MARKER_FILE).exists()
