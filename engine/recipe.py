"""Weight recipes: which storage format each tensor role gets, and what that costs in bytes.

A recipe maps every role of engine.registry.ROLES to a format name: a groupwise integer format
(``q4g64``, ``q5g64``, ``q6g32``, ``q8g64``, ...: see engine/quant.py) or an unquantized float
(``bf16``, ``f16``, ``f32``). Small or numerically delicate tensors stay float: norm weights,
the depthwise conv, ``A_log`` / ``dt_bias`` (they feed fp32 math) and the vision tower (its
``linear_fc2`` has K = 4304, which no supported group size divides).

The default ``q4-27b`` keeps text + MTP of the 27B at 15.2 GiB, under the 16.5 GiB that leaves
room in 24 GiB for 262,144 tokens of 4-bit KV (4.25 GiB) and the bf16 vision tower. The choices:
4-bit for the bulk (MLP gate/up, GDN qkv/z, attention q), 5-bit for the projections that write
back into the residual stream (MLP down, GDN out, attention o), 6-bit for the small but
sensitive ones (k/v, lm_head, MTP) and for the embedding (a row gather per token, so its
size costs VRAM, not decode bandwidth), 8-bit for the tiny GDN a/b projections that set the
decay and the write strength of the recurrence.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Mapping

from engine.config import ModelConfig
from engine.loader import MULTIMODAL_TEXT_PREFIX
from engine.quant import QuantError, QuantFormat
from engine.registry import MTP_PREFIX, ROLES, VISUAL_PREFIX, expected_tensors, tensor_role

FLOAT_FORMATS = {"bf16": 2, "f16": 2, "f32": 4}
# Roles that must never be quantized (1-D or 3-D tensors, or fp32 math).
FLOAT_ONLY_ROLES = ("norm", "gdn.conv", "gdn.decay", "vision")
QUANTIZERS = ("search", "search-act", "rtn")  # search-act: scale search weighted by calibration activations

GIB = 1 << 30
# Text + MTP weights must fit here for the 24 GiB / 262,144-token plan (issue 5).
BUDGET_TEXT_MTP_27B = int(16.5 * GIB)


class RecipeError(ValueError):
    """A recipe that is malformed or cannot be applied to a tensor."""


def is_quantized(fmt: str) -> bool:
    return fmt not in FLOAT_FORMATS


def parse_format(fmt: str) -> QuantFormat | None:
    """Format name -> QuantFormat, or None for a float format."""
    if fmt in FLOAT_FORMATS:
        return None
    try:
        return QuantFormat.parse(fmt)
    except QuantError as exc:
        raise RecipeError(f"unknown tensor format {fmt!r}: expected one of {sorted(FLOAT_FORMATS)} or a "
                          f"groupwise format like 'q4g64' ({exc})") from None


def format_nbytes(fmt: str, shape: tuple[int, ...]) -> int:
    """Stored bytes of one tensor of ``shape`` in ``fmt``."""
    q = parse_format(fmt)
    if q is None:
        n = 1
        for d in shape:
            n *= d
        return n * FLOAT_FORMATS[fmt]
    return q.nbytes(shape)


@dataclass(frozen=True)
class Recipe:
    id: str
    version: int
    description: str
    formats: Mapping[str, str] = field(default_factory=dict)  # role -> format name
    method: str = "search"  # quantizer: "search" (per-group scale search), "search-act" or "rtn"

    def __post_init__(self) -> None:
        missing = [r for r in ROLES if r not in self.formats]
        unknown = [r for r in self.formats if r not in ROLES]
        if missing or unknown:
            raise RecipeError(f"recipe '{self.id}': roles missing {missing}, unknown roles {unknown}")
        for role, fmt in self.formats.items():
            q = parse_format(fmt)
            if q is not None and role in FLOAT_ONLY_ROLES:
                raise RecipeError(f"recipe '{self.id}': role '{role}' must stay unquantized "
                                  f"({sorted(FLOAT_FORMATS)}); got {fmt!r}")
        if self.method not in QUANTIZERS:
            raise RecipeError(f"recipe '{self.id}': quantizer {self.method!r} is not one of {QUANTIZERS}")

    @property
    def tag(self) -> str:
        """Identity written into artifacts: id, version and quantizer."""
        return f"{self.id}@v{self.version}/{self.method}"

    def with_method(self, method: str) -> "Recipe":
        return replace(self, method=method)

    def format_for(self, key: str, shape: tuple[int, ...], text_prefix: str = MULTIMODAL_TEXT_PREFIX) -> str:
        """The format of one tensor; refuses a groupwise format the tensor's shape cannot take."""
        fmt = self.formats[tensor_role(key, text_prefix)]
        q = parse_format(fmt)
        if q is not None:
            if len(shape) != 2 or shape[1] % q.group:
                raise RecipeError(f"recipe '{self.id}' gives tensor '{key}' (shape {list(shape)}) the format "
                                  f"{fmt}, which needs a 2-D weight whose second dimension is a multiple of "
                                  f"{q.group}")
        return fmt


def _recipe(id: str, version: int, description: str, **by_role: str) -> Recipe:
    base = {"norm": "bf16", "gdn.conv": "bf16", "gdn.decay": "f32", "vision": "bf16"}
    formats = {r: by_role.get(r.replace(".", "_"), base.get(r)) for r in ROLES}
    return Recipe(id, version, description, {r: f for r, f in formats.items() if f is not None})


RECIPES: dict[str, Recipe] = {r.id: r for r in (
    _recipe("q4-27b", 1, "default for 24 GiB cards: 4-bit bulk, 5-bit residual writers, 6-bit sensitive tensors",
            embed="q6g64", lm_head="q6g64", mlp_gate_up="q4g64", mlp_down="q5g64",
            gdn_qkv="q4g64", gdn_z="q4g64", gdn_ab="q8g64", gdn_out="q5g64",
            attn_q="q4g64", attn_kv="q6g64", attn_o="q5g64",
            mtp_fc="q6g64", mtp_attn="q6g64", mtp_mlp="q6g64"),
    _recipe("q8", 1, "8-bit everywhere (quality reference; the 27B needs a 32+ GiB card)",
            embed="q8g64", lm_head="q8g64", mlp_gate_up="q8g64", mlp_down="q8g64",
            gdn_qkv="q8g64", gdn_z="q8g64", gdn_ab="q8g64", gdn_out="q8g64",
            attn_q="q8g64", attn_kv="q8g64", attn_o="q8g64",
            mtp_fc="q8g64", mtp_attn="q8g64", mtp_mlp="q8g64"),
    _recipe("q4", 1, "4-bit group-64 everywhere that can be quantized (smallest; for tests and comparisons)",
            embed="q4g64", lm_head="q4g64", mlp_gate_up="q4g64", mlp_down="q4g64",
            gdn_qkv="q4g64", gdn_z="q4g64", gdn_ab="q4g64", gdn_out="q4g64",
            attn_q="q4g64", attn_kv="q4g64", attn_o="q4g64",
            mtp_fc="q4g64", mtp_attn="q4g64", mtp_mlp="q4g64"),
    _recipe("test-mixed", 1, "every bit width and both group sizes across roles (format coverage in tests)",
            embed="q8g32", lm_head="q6g32", mlp_gate_up="q4g32", mlp_down="q5g64",
            gdn_qkv="q6g64", gdn_z="q5g32", gdn_ab="q8g32", gdn_out="q4g64",
            attn_q="q5g64", attn_kv="q8g64", attn_o="q6g64",
            mtp_fc="q4g32", mtp_attn="q5g32", mtp_mlp="q6g64"),
)}
DEFAULT_RECIPE = "q4-27b"


def get_recipe(name: str) -> Recipe:
    if name not in RECIPES:
        raise RecipeError(f"unknown recipe {name!r}; available: {', '.join(RECIPES)}")
    return RECIPES[name]


def recipe_bytes_by_role(recipe: Recipe, config: ModelConfig) -> dict[str, int]:
    """Stored bytes of every role (all ROLES, in table order; 0 where the model has none)."""
    out = {r: 0 for r in ROLES}
    for key, shape in expected_tensors(config).items():
        out[tensor_role(key)] += format_nbytes(recipe.format_for(key, shape), shape)
    return out


def recipe_bytes_by_part(recipe: Recipe, config: ModelConfig) -> dict[str, int]:
    """Stored bytes of the text decoder, the MTP head and the vision tower."""
    out = {"text": 0, "mtp": 0, "vision": 0}
    for key, shape in expected_tensors(config).items():
        part = "vision" if key.startswith(VISUAL_PREFIX) else "mtp" if key.startswith(MTP_PREFIX) else "text"
        out[part] += format_nbytes(recipe.format_for(key, shape), shape)
    return out


def role_parameters(config: ModelConfig) -> dict[str, int]:
    out = {r: 0 for r in ROLES}
    for key, shape in expected_tensors(config).items():
        n = 1
        for d in shape:
            n *= d
        out[tensor_role(key)] += n
    return out


def bytes_table_markdown(recipe: Recipe, config: ModelConfig) -> str:
    """The bytes-per-role table (Markdown) used in docs/artifact.md and by `monorail inspect`."""
    params, nbytes = role_parameters(config), recipe_bytes_by_role(recipe, config)
    lines = ["| role | format | parameters | bytes | GiB | bits/weight |", "|---|---|---:|---:|---:|---:|"]
    for role in ROLES:
        if not params[role]:
            continue
        lines.append(f"| {role} | {recipe.formats[role]} | {params[role]:,} | {nbytes[role]:,} | "
                     f"{nbytes[role] / GIB:.3f} | {8 * nbytes[role] / params[role]:.2f} |")
    parts = recipe_bytes_by_part(recipe, config)
    tm = parts["text"] + parts["mtp"]
    lines.append(f"| **text + MTP** | | | {tm:,} | {tm / GIB:.3f} | |")
    lines.append(f"| **vision** | | | {parts['vision']:,} | {parts['vision'] / GIB:.3f} | |")
    return "\n".join(lines)
