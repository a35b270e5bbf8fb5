"""Typed configuration of the Qwen3.5 / 3.6 / 3.8 hybrid family, parsed from a Hugging Face config.json.

Only this architecture is accepted. Anything else is refused with a ``ConfigError`` that
names the offending field, the value found and the value expected, so a user who points
Monorail at the wrong folder learns exactly why.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any


class ConfigError(ValueError):
    """A config.json that does not describe a model this engine serves."""


LINEAR = "linear_attention"
FULL = "full_attention"


@dataclass(frozen=True)
class TextConfig:
    hidden_size: int
    num_hidden_layers: int
    layer_types: tuple[str, ...]
    intermediate_size: int
    vocab_size: int
    rms_norm_eps: float
    max_position_embeddings: int
    # gated full attention
    num_attention_heads: int
    num_key_value_heads: int
    head_dim: int
    rope_theta: float
    partial_rotary_factor: float
    mrope_section: tuple[int, int, int]
    mrope_interleaved: bool
    # Gated DeltaNet
    linear_num_key_heads: int
    linear_key_head_dim: int
    linear_num_value_heads: int
    linear_value_head_dim: int
    linear_conv_kernel_dim: int
    # multi-token prediction head
    mtp_num_hidden_layers: int = 0
    tie_word_embeddings: bool = False
    eos_token_ids: tuple[int, ...] = ()

    @property
    def rotary_dim(self) -> int:
        return int(self.head_dim * self.partial_rotary_factor)

    @property
    def gqa_group(self) -> int:
        return self.num_attention_heads // self.num_key_value_heads

    @property
    def linear_q_dim(self) -> int:
        return self.linear_num_key_heads * self.linear_key_head_dim

    @property
    def linear_v_dim(self) -> int:
        return self.linear_num_value_heads * self.linear_value_head_dim

    @property
    def linear_conv_dim(self) -> int:
        """Channels of the depthwise conv: q | k | v."""
        return 2 * self.linear_q_dim + self.linear_v_dim

    @property
    def linear_value_heads_per_key_head(self) -> int:
        return self.linear_num_value_heads // self.linear_num_key_heads

    def is_full_attention(self, layer: int) -> bool:
        return self.layer_types[layer] == FULL

    @property
    def full_attention_layers(self) -> tuple[int, ...]:
        return tuple(i for i, t in enumerate(self.layer_types) if t == FULL)

    @property
    def linear_attention_layers(self) -> tuple[int, ...]:
        return tuple(i for i, t in enumerate(self.layer_types) if t == LINEAR)


@dataclass(frozen=True)
class VisionConfig:
    depth: int
    hidden_size: int
    intermediate_size: int
    num_heads: int
    in_channels: int
    patch_size: int
    temporal_patch_size: int
    spatial_merge_size: int
    out_hidden_size: int
    num_position_embeddings: int
    hidden_act: str
    rope_theta: float = 10000.0

    @property
    def head_dim(self) -> int:
        return self.hidden_size // self.num_heads

    @property
    def patch_dim(self) -> int:
        return self.in_channels * self.temporal_patch_size * self.patch_size * self.patch_size

    @property
    def merge_unit(self) -> int:
        return self.spatial_merge_size * self.spatial_merge_size


@dataclass(frozen=True)
class ModelConfig:
    model_type: str
    text: TextConfig
    vision: VisionConfig | None
    image_token_id: int = 248056
    video_token_id: int = 248057
    vision_start_token_id: int = 248053
    vision_end_token_id: int = 248054
    raw: dict = field(default_factory=dict, compare=False, repr=False)

    @property
    def has_vision(self) -> bool:
        return self.vision is not None

    @property
    def has_mtp(self) -> bool:
        return self.text.mtp_num_hidden_layers > 0


ACCEPTED_MODEL_TYPES = ("qwen3_5", "qwen3_5_text")
ACCEPTED_ARCHITECTURES = ("Qwen3_5ForConditionalGeneration", "Qwen3_5ForCausalLM")


def _need(d: dict, key: str, where: str) -> Any:
    if key not in d:
        raise ConfigError(f"config.json: field '{where}{key}' is missing")
    return d[key]


def _expect(value: Any, expected: Any, name: str) -> None:
    if value != expected:
        raise ConfigError(f"config.json: field '{name}' is {value!r}; this engine expects {expected!r}")


def _rope_fields(tc: dict) -> dict:
    """rope settings: transformers 5 writes ``rope_parameters``; older saves use rope_theta/rope_scaling."""
    rp = dict(tc.get("rope_parameters") or {})
    legacy = tc.get("rope_scaling") or {}
    for k in ("mrope_section", "mrope_interleaved", "rope_type", "type"):
        if k in legacy and k not in rp:
            rp[k] = legacy[k]
    if "rope_theta" not in rp and "rope_theta" in tc:
        rp["rope_theta"] = tc["rope_theta"]
    if "partial_rotary_factor" not in rp and "partial_rotary_factor" in tc:
        rp["partial_rotary_factor"] = tc["partial_rotary_factor"]
    return rp


def parse_text_config(tc: dict, prefix: str = "text_config.") -> TextConfig:
    mt = tc.get("model_type", "qwen3_5_text")
    _expect(mt, "qwen3_5_text", prefix + "model_type")
    n_layers = int(_need(tc, "num_hidden_layers", prefix))
    layer_types = tc.get("layer_types")
    if layer_types is None:
        interval = int(tc.get("full_attention_interval", 4))
        layer_types = [FULL if (i + 1) % interval == 0 else LINEAR for i in range(n_layers)]
    layer_types = tuple(layer_types)
    if len(layer_types) != n_layers:
        raise ConfigError(f"config.json: field '{prefix}layer_types' has {len(layer_types)} entries; "
                          f"expected num_hidden_layers = {n_layers}")
    for i, t in enumerate(layer_types):
        expected = FULL if (i + 1) % 4 == 0 else LINEAR
        _expect(t, expected, f"{prefix}layer_types[{i}]")
    act = tc.get("hidden_act", "silu")
    _expect(act, "silu", prefix + "hidden_act")
    if tc.get("attention_bias", False):
        _expect(tc.get("attention_bias"), False, prefix + "attention_bias")

    rp = _rope_fields(tc)
    rope_type = rp.get("rope_type", rp.get("type", "default"))
    _expect(rope_type, "default", prefix + "rope_parameters.rope_type")
    if "rope_theta" not in rp:
        raise ConfigError(f"config.json: field '{prefix}rope_parameters.rope_theta' is missing")
    mrope_section = tuple(int(x) for x in rp.get("mrope_section", (11, 11, 10)))
    if len(mrope_section) != 3:
        raise ConfigError(f"config.json: field '{prefix}rope_parameters.mrope_section' is {list(mrope_section)}; "
                          "expected three entries (t, h, w)")
    interleaved = bool(rp.get("mrope_interleaved", False))
    _expect(interleaved, True, prefix + "rope_parameters.mrope_interleaved")

    cfg = TextConfig(
        hidden_size=int(_need(tc, "hidden_size", prefix)),
        num_hidden_layers=n_layers,
        layer_types=layer_types,
        intermediate_size=int(_need(tc, "intermediate_size", prefix)),
        vocab_size=int(_need(tc, "vocab_size", prefix)),
        rms_norm_eps=float(tc.get("rms_norm_eps", 1e-6)),
        max_position_embeddings=int(tc.get("max_position_embeddings", 262144)),
        num_attention_heads=int(_need(tc, "num_attention_heads", prefix)),
        num_key_value_heads=int(_need(tc, "num_key_value_heads", prefix)),
        head_dim=int(tc.get("head_dim", 256)),
        rope_theta=float(rp["rope_theta"]),
        partial_rotary_factor=float(rp.get("partial_rotary_factor", 0.25)),
        mrope_section=mrope_section,  # type: ignore[arg-type]
        mrope_interleaved=interleaved,
        linear_num_key_heads=int(_need(tc, "linear_num_key_heads", prefix)),
        linear_key_head_dim=int(_need(tc, "linear_key_head_dim", prefix)),
        linear_num_value_heads=int(_need(tc, "linear_num_value_heads", prefix)),
        linear_value_head_dim=int(_need(tc, "linear_value_head_dim", prefix)),
        linear_conv_kernel_dim=int(tc.get("linear_conv_kernel_dim", 4)),
        mtp_num_hidden_layers=int(tc.get("mtp_num_hidden_layers", 0)),
        tie_word_embeddings=bool(tc.get("tie_word_embeddings", False)),
        eos_token_ids=_eos_ids(tc.get("eos_token_id")),
    )
    _check_text_ratios(cfg, prefix)
    return cfg


def _eos_ids(v: Any) -> tuple[int, ...]:
    if v is None:
        return ()
    if isinstance(v, int):
        return (v,)
    return tuple(int(x) for x in v)


def _check_text_ratios(c: TextConfig, prefix: str) -> None:
    if c.num_attention_heads % c.num_key_value_heads:
        raise ConfigError(f"config.json: field '{prefix}num_attention_heads' ({c.num_attention_heads}) is not a "
                          f"multiple of num_key_value_heads ({c.num_key_value_heads})")
    if c.linear_num_value_heads % c.linear_num_key_heads:
        raise ConfigError(f"config.json: field '{prefix}linear_num_value_heads' ({c.linear_num_value_heads}) is not "
                          f"a multiple of linear_num_key_heads ({c.linear_num_key_heads})")
    if c.linear_key_head_dim != c.linear_value_head_dim:
        raise ConfigError(f"config.json: field '{prefix}linear_value_head_dim' is {c.linear_value_head_dim}; "
                          f"expected it to equal linear_key_head_dim ({c.linear_key_head_dim})")
    rot = c.head_dim * c.partial_rotary_factor
    if rot != int(rot) or int(rot) % 2 or sum(c.mrope_section) * 2 != int(rot):
        raise ConfigError(f"config.json: field '{prefix}rope_parameters.mrope_section' {list(c.mrope_section)} "
                          f"does not cover the {rot:g} rotary dims (expected sum = {int(rot) // 2})")


def parse_vision_config(vc: dict, prefix: str = "vision_config.") -> VisionConfig:
    mt = vc.get("model_type", "qwen3_5_vision")
    if mt == "qwen3_5":  # some saves write the parent's type here; transformers remaps it too
        mt = "qwen3_5_vision"
    _expect(mt, "qwen3_5_vision", prefix + "model_type")
    patch = vc.get("patch_size", 16)
    tpatch = vc.get("temporal_patch_size", 2)
    if isinstance(patch, (list, tuple)):
        patch = patch[0]
    if isinstance(tpatch, (list, tuple)):
        tpatch = tpatch[0]
    rp = vc.get("rope_parameters") or {}
    return VisionConfig(
        depth=int(_need(vc, "depth", prefix)),
        hidden_size=int(_need(vc, "hidden_size", prefix)),
        intermediate_size=int(_need(vc, "intermediate_size", prefix)),
        num_heads=int(_need(vc, "num_heads", prefix)),
        in_channels=int(vc.get("in_channels", 3)),
        patch_size=int(patch),
        temporal_patch_size=int(tpatch),
        spatial_merge_size=int(vc.get("spatial_merge_size", 2)),
        out_hidden_size=int(_need(vc, "out_hidden_size", prefix)),
        num_position_embeddings=int(vc.get("num_position_embeddings", 2304)),
        hidden_act=str(vc.get("hidden_act", "gelu_pytorch_tanh")),
        rope_theta=float(rp.get("rope_theta", 10000.0)),
    )


def parse_config(raw: dict) -> ModelConfig:
    """Parse a config.json dict (multimodal ``qwen3_5`` or text-only ``qwen3_5_text``)."""
    if not isinstance(raw, dict):
        raise ConfigError("config.json: top level is not a JSON object")
    mt = raw.get("model_type")
    if mt not in ACCEPTED_MODEL_TYPES:
        raise ConfigError(f"config.json: field 'model_type' is {mt!r}; this engine expects 'qwen3_5' "
                          "(Qwen3.5 / 3.6 / 3.8 hybrid family) or 'qwen3_5_text'")
    archs = raw.get("architectures")
    if archs:
        bad = [a for a in archs if a not in ACCEPTED_ARCHITECTURES]
        if bad:
            raise ConfigError(f"config.json: field 'architectures' is {archs!r}; this engine expects one of "
                              f"{list(ACCEPTED_ARCHITECTURES)}")
    if mt == "qwen3_5_text":
        text = parse_text_config(raw, prefix="")
        return ModelConfig(model_type=mt, text=text, vision=None, raw=raw)
    tc = _need(raw, "text_config", "")
    text = parse_text_config(tc)
    vc = raw.get("vision_config")
    vision = parse_vision_config(vc) if vc else None
    if vision is not None and vision.out_hidden_size != text.hidden_size:
        raise ConfigError(f"config.json: field 'vision_config.out_hidden_size' is {vision.out_hidden_size}; "
                          f"expected text_config.hidden_size = {text.hidden_size}")
    if not text.tie_word_embeddings and raw.get("tie_word_embeddings"):
        text = TextConfig(**{**text.__dict__, "tie_word_embeddings": True})
    return ModelConfig(
        model_type=mt,
        text=text,
        vision=vision,
        image_token_id=int(raw.get("image_token_id", 248056)),
        video_token_id=int(raw.get("video_token_id", 248057)),
        vision_start_token_id=int(raw.get("vision_start_token_id", 248053)),
        vision_end_token_id=int(raw.get("vision_end_token_id", 248054)),
        raw=raw,
    )


def load_config(path: str | Path) -> ModelConfig:
    """Read ``config.json`` from a file or a checkpoint folder."""
    p = Path(path)
    if p.is_dir():
        p = p / "config.json"
    if not p.exists():
        raise ConfigError(f"no config.json at {p}")
    try:
        raw = json.loads(p.read_text(encoding="utf-8"))
    except json.JSONDecodeError as exc:
        raise ConfigError(f"{p}: not valid JSON ({exc})") from exc
    return parse_config(raw)
