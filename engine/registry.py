"""Registry of the checkpoints Monorail accepts: architectures, exact sizes, and every tensor's shape.

The engine is specialised for one family (Qwen3.5 / 3.6 / 3.8 27B). A checkpoint is accepted when
its config has exactly the 27B sizes and its files hold exactly the tensors those sizes imply.
Tiny test models with the same ratios are accepted only behind an explicit switch
(``allow_test_shapes=True`` or the environment variable ``MONORAIL_ALLOW_TEST_SHAPES=1``), so a
user can never convert a mis-sized checkpoint by accident. Every refusal names the tensor or
config field, the expected value and the value found.

Each tensor also has a *role* (e.g. ``mlp.down``, ``gdn.qkv``, ``norm``): the unit in which a
weight recipe (engine/recipe.py) chooses a storage format.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Mapping

from engine.config import ModelConfig, TextConfig, VisionConfig, parse_config
from engine.loader import LM_HEAD, MTP_PREFIX, MULTIMODAL_TEXT_PREFIX, text_tensor_shapes

VISUAL_PREFIX = "model.visual."
TEST_SHAPES_ENV = "MONORAIL_ALLOW_TEST_SHAPES"

FAMILY_27B = "qwen3.5-27b"
FAMILY_TEST = "test-tiny"


class RegistryError(ValueError):
    """A checkpoint whose architecture, sizes or tensors are not the registered ones."""


# Exact sizes of the registered family (MODEL.md). Fields not listed (rope, eps, layer pattern)
# are already pinned by engine.config's parser.
TEXT_27B = {
    "hidden_size": 5120, "num_hidden_layers": 64, "intermediate_size": 17408, "vocab_size": 248320,
    "num_attention_heads": 24, "num_key_value_heads": 4, "head_dim": 256,
    "linear_num_key_heads": 16, "linear_key_head_dim": 128, "linear_num_value_heads": 48,
    "linear_value_head_dim": 128, "linear_conv_kernel_dim": 4,
}
VISION_27B = {
    "depth": 27, "hidden_size": 1152, "intermediate_size": 4304, "num_heads": 16, "in_channels": 3,
    "patch_size": 16, "temporal_patch_size": 2, "spatial_merge_size": 2, "out_hidden_size": 5120,
    "num_position_embeddings": 2304,
}
# The ratios a test model must keep so it exercises the same code paths as the 27B.
TEST_RATIOS = {"head_dim": 256, "linear_conv_kernel_dim": 4}
MTP_LAYERS_ACCEPTED = (0, 1)


def test_shapes_allowed(allow_test_shapes: bool | None = None) -> bool:
    """The explicit switch: the argument if given, else ``MONORAIL_ALLOW_TEST_SHAPES=1``."""
    if allow_test_shapes is not None:
        return allow_test_shapes
    return os.environ.get(TEST_SHAPES_ENV, "") == "1"


def _mismatches(obj, expected: Mapping[str, int], where: str) -> list[str]:
    return [f"{where}{k} is {getattr(obj, k)}; the 27B family has {v}"
            for k, v in expected.items() if getattr(obj, k) != v]


def identify(config: ModelConfig, *, allow_test_shapes: bool | None = None) -> str:
    """Return the registered family of ``config`` (``FAMILY_27B`` or ``FAMILY_TEST``) or refuse it."""
    t = config.text
    if t.mtp_num_hidden_layers not in MTP_LAYERS_ACCEPTED:
        raise RegistryError(f"config.json: mtp_num_hidden_layers is {t.mtp_num_hidden_layers}; "
                            f"Monorail accepts {list(MTP_LAYERS_ACCEPTED)}")
    if t.tie_word_embeddings and not test_shapes_allowed(allow_test_shapes):
        raise RegistryError("config.json: tie_word_embeddings is true; the 27B family has an untied lm_head")
    problems = _mismatches(t, TEXT_27B, "text_config.")
    if config.vision is not None:
        problems += _mismatches(config.vision, VISION_27B, "vision_config.")
    if not problems:
        return FAMILY_27B
    if test_shapes_allowed(allow_test_shapes):
        bad = _mismatches(t, TEST_RATIOS, "text_config.")
        if bad:
            raise RegistryError("test model does not keep the 27B ratios: " + "; ".join(bad))
        return FAMILY_TEST
    shown = "; ".join(problems[:4]) + (f"; and {len(problems) - 4} more" if len(problems) > 4 else "")
    raise RegistryError(f"unsupported model size: {shown}. Monorail serves only the Qwen3.5/3.6/3.8 27B "
                        f"family (tiny test models need {TEST_SHAPES_ENV}=1).")


# ---------------------------------------------------------------------------------------------
# shapes


def vision_tensor_shapes(v: VisionConfig) -> dict[str, tuple[int, ...]]:
    """Every ``model.visual.*`` tensor the vision config implies (full keys)."""
    hid, inter, merged = v.hidden_size, v.intermediate_size, v.hidden_size * v.merge_unit
    p = VISUAL_PREFIX
    s: dict[str, tuple[int, ...]] = {
        p + "patch_embed.proj.weight": (hid, v.in_channels, v.temporal_patch_size, v.patch_size, v.patch_size),
        p + "patch_embed.proj.bias": (hid,),
        p + "pos_embed.weight": (v.num_position_embeddings, hid),
    }

    def linear(name: str, out_f: int, in_f: int) -> None:
        s[p + name + ".weight"] = (out_f, in_f)
        s[p + name + ".bias"] = (out_f,)

    def layer_norm(name: str, n: int) -> None:
        s[p + name + ".weight"] = (n,)
        s[p + name + ".bias"] = (n,)

    for i in range(v.depth):
        b = f"blocks.{i}."
        layer_norm(b + "norm1", hid)
        layer_norm(b + "norm2", hid)
        linear(b + "attn.qkv", 3 * hid, hid)
        linear(b + "attn.proj", hid, hid)
        linear(b + "mlp.linear_fc1", inter, hid)
        linear(b + "mlp.linear_fc2", hid, inter)
    layer_norm("merger.norm", hid)
    linear("merger.linear_fc1", merged, merged)
    linear("merger.linear_fc2", v.out_hidden_size, merged)
    return s


def full_key(rel_key: str, text_prefix: str) -> str:
    """Text-relative key -> key in a checkpoint whose text prefix is ``text_prefix``."""
    if rel_key == LM_HEAD or rel_key.startswith(MTP_PREFIX):
        return rel_key
    return text_prefix + rel_key


def expected_tensors(config: ModelConfig, text_prefix: str = MULTIMODAL_TEXT_PREFIX) -> dict[str, tuple[int, ...]]:
    """Every tensor (full key -> shape) a checkpoint with ``config`` must hold, in model order.

    A tied lm_head (test models only) is not listed: it is the embedding.
    """
    out: dict[str, tuple[int, ...]] = {}
    for rel, shape in text_tensor_shapes(config.text).items():
        if rel == LM_HEAD and config.text.tie_word_embeddings:
            continue
        out[full_key(rel, text_prefix)] = shape
    if config.vision is not None:
        out.update(vision_tensor_shapes(config.vision))
    return out


def check_tensors(config: ModelConfig, found: Mapping[str, tuple[int, ...]], text_prefix: str) -> None:
    """Refuse a checkpoint whose tensor names/shapes differ from what ``config`` implies.

    ``found`` maps full key -> shape (from the safetensors headers). Missing, mis-shaped and
    unexpected tensors are all refused, naming the tensor, the expected and the actual shape.
    """
    expected = expected_tensors(config, text_prefix)
    problems: list[str] = []
    for key, shape in expected.items():
        if key not in found:
            problems.append(f"tensor '{key}' is missing (expected shape {list(shape)})")
        elif tuple(found[key]) != shape:
            problems.append(f"tensor '{key}' has shape {list(found[key])}; expected {list(shape)}")
    for key in found:
        if key not in expected:
            problems.append(f"tensor '{key}' (shape {list(found[key])}) is not part of this architecture")
    if problems:
        shown = "\n  ".join(problems[:8])
        more = f"\n  ... and {len(problems) - 8} more" if len(problems) > 8 else ""
        raise RegistryError(f"the checkpoint's tensors do not match its config.json:\n  {shown}{more}")


# ---------------------------------------------------------------------------------------------
# roles


# role -> what it covers; the order is the order of the bytes-by-role table
ROLES: dict[str, str] = {
    "embed": "token embedding table (row gather per token)",
    "lm_head": "output projection to the vocabulary",
    "mlp.gate_up": "MLP gate_proj + up_proj, 64 layers",
    "mlp.down": "MLP down_proj, 64 layers",
    "gdn.qkv": "Gated DeltaNet in_proj_qkv, 48 layers",
    "gdn.z": "Gated DeltaNet in_proj_z (output gate), 48 layers",
    "gdn.ab": "Gated DeltaNet in_proj_a / in_proj_b (decay and beta), 48 layers",
    "gdn.out": "Gated DeltaNet out_proj, 48 layers",
    "gdn.conv": "Gated DeltaNet depthwise conv1d",
    "gdn.decay": "Gated DeltaNet A_log and dt_bias (fp32 math)",
    "attn.q": "attention q_proj (query + gate), 16 layers",
    "attn.kv": "attention k_proj + v_proj, 16 layers",
    "attn.o": "attention o_proj, 16 layers",
    "norm": "RMSNorm weights (layers, final, q/k, GDN output, MTP)",
    "mtp.fc": "MTP input projection fc",
    "mtp.attn": "MTP attention projections",
    "mtp.mlp": "MTP MLP",
    "vision": "vision tower (model.visual.*)",
}
TEXT_ROLES = tuple(r for r in ROLES if r != "vision")
MTP_ROLES = ("mtp.fc", "mtp.attn", "mtp.mlp")


def tensor_role(key: str, text_prefix: str = MULTIMODAL_TEXT_PREFIX) -> str:
    """The recipe role of a tensor given its full key."""
    if key.startswith(VISUAL_PREFIX):
        return "vision"
    rel = key[len(text_prefix):] if key.startswith(text_prefix) else key
    leaf = rel.rsplit(".", 1)[-1]
    parts = rel.split(".")
    if len(parts) >= 2 and parts[-1] == "weight" and "norm" in parts[-2]:
        return "norm"
    if rel == "embed_tokens.weight":
        return "embed"
    if rel == LM_HEAD:
        return "lm_head"
    mtp = rel.startswith(MTP_PREFIX)
    if rel == "mtp.fc.weight":
        return "mtp.fc"
    if ".mlp." in rel:
        if mtp:
            return "mtp.mlp"
        return "mlp.down" if ".down_proj." in rel else "mlp.gate_up"
    if ".self_attn." in rel:
        if mtp:
            return "mtp.attn"
        if ".q_proj." in rel:
            return "attn.q"
        if ".o_proj." in rel:
            return "attn.o"
        return "attn.kv"
    if ".linear_attn." in rel:
        if leaf in ("A_log", "dt_bias"):
            return "gdn.decay"
        for part, role in (("in_proj_qkv", "gdn.qkv"), ("in_proj_z", "gdn.z"), ("in_proj_a", "gdn.ab"),
                           ("in_proj_b", "gdn.ab"), ("out_proj", "gdn.out"), ("conv1d", "gdn.conv")):
            if f".{part}." in rel:
                return role
    raise RegistryError(f"tensor '{key}' has no recipe role; it is not part of this architecture")


def parameter_counts(config: ModelConfig) -> dict[str, int]:
    """Parameters of the text decoder (with lm_head and embedding), the MTP head and the vision tower."""
    counts = {"text": 0, "mtp": 0, "vision": 0}
    for key, shape in expected_tensors(config).items():
        n = 1
        for d in shape:
            n *= d
        part = "vision" if key.startswith(VISUAL_PREFIX) else "mtp" if key.startswith(MTP_PREFIX) else "text"
        counts[part] += n
    return counts


# ---------------------------------------------------------------------------------------------
# the registered shape as a config (for sizing recipes and memory plans without a checkpoint)


def config_27b(*, vision: bool = True, mtp: bool = True) -> ModelConfig:
    """A ModelConfig with the exact 27B sizes, as the official config.json would parse."""
    text = dict(TEXT_27B, model_type="qwen3_5_text", rms_norm_eps=1e-6, max_position_embeddings=262144,
                hidden_act="silu", mtp_num_hidden_layers=1 if mtp else 0, tie_word_embeddings=False,
                rope_parameters={"rope_type": "default", "rope_theta": 1e7, "partial_rotary_factor": 0.25,
                                 "mrope_section": [11, 11, 10], "mrope_interleaved": True},
                eos_token_id=[248046, 248044])
    raw = {"model_type": "qwen3_5", "architectures": ["Qwen3_5ForConditionalGeneration"], "text_config": text}
    if vision:
        raw["vision_config"] = dict(VISION_27B, model_type="qwen3_5_vision", hidden_act="gelu_pytorch_tanh")
    return parse_config(raw)


@dataclass(frozen=True)
class ShapeSummary:
    family: str
    tensors: int
    parameters: dict[str, int]


def summarize(config: ModelConfig, *, allow_test_shapes: bool | None = None) -> ShapeSummary:
    return ShapeSummary(identify(config, allow_test_shapes=allow_test_shapes), len(expected_tensors(config)),
                        parameter_counts(config))


__all__ = [
    "FAMILY_27B", "FAMILY_TEST", "ROLES", "TEXT_ROLES", "MTP_ROLES", "RegistryError", "TEST_SHAPES_ENV",
    "check_tensors", "config_27b", "expected_tensors", "full_key", "identify", "parameter_counts",
    "summarize", "tensor_role", "test_shapes_allowed", "vision_tensor_shapes", "TextConfig",
]
