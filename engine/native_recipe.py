"""How checkpoint tensors map onto the native engine's fused roles and formats (its recipe).

The engine holds each role as one device matrix (the GDN and attention input projections fused, MLP gate and up
interleaved), or as two row segments where the stored formats differ (GDN b|a, attention k|v); a native recipe gives
each role (and split role's tail) its format. ``native_recipe`` derives it from stored tensors (an artifact keeps its
formats), ``recipe_named`` from a name (`monorail plan --recipe`, the benchmarks), and ``native_weight`` yields the
quantized tensor to upload: the artifact's own codes where the format matches, else round-to-nearest here.
"""

from __future__ import annotations

from typing import Iterable

from engine.config import ModelConfig
from engine.errors import NativeBackendError
from engine.plan import DEFAULT_RECIPE, SPLIT_ROLES, Recipe


def _quantize(w, bits: int, group: int):
    from engine.quant import QuantFormat, quantize
    return quantize(w.float().contiguous(), QuantFormat(bits, group), method="rtn")


# Which checkpoint tensors each native role fuses (by key suffix). The MTP head's tensors are not a role's:
# NativeModel._load_mtp uploads them into the head's own matrices, in the formats of the roles they mirror.
NATIVE_ROLE_MEMBERS = {
    "embed": ("embed_tokens.weight",),
    "lm_head": ("lm_head.weight",),
    "gdn_in": ("linear_attn.in_proj_qkv.weight", "linear_attn.in_proj_z.weight",
               "linear_attn.in_proj_b.weight", "linear_attn.in_proj_a.weight"),
    "gdn_out": ("linear_attn.out_proj.weight",),
    "attn_qkv": ("self_attn.q_proj.weight", "self_attn.k_proj.weight", "self_attn.v_proj.weight"),
    "attn_o": ("self_attn.o_proj.weight",),
    "mlp_gate_up": ("mlp.gate_proj.weight", "mlp.up_proj.weight"),
    "mlp_down": ("mlp.down_proj.weight",),
}


def native_role(full_key: str) -> str | None:
    if full_key.startswith("mtp.") or full_key.startswith("model.visual."):
        return None
    for role, suffixes in NATIVE_ROLE_MEMBERS.items():
        if full_key.endswith(suffixes):
            return role
    return None


# The tail rows of the roles the engine may split (engine.plan.SPLIT_ROLES), by key suffix.
NATIVE_TAIL_MEMBERS = {
    "gdn_in": ("linear_attn.in_proj_b.weight", "linear_attn.in_proj_a.weight"),
    "attn_qkv": ("self_attn.k_proj.weight", "self_attn.v_proj.weight"),
}


def native_segment(full_key: str) -> tuple[str, str] | None:
    """(native role, "head" or "tail") of a checkpoint tensor; None for tensors the text engine skips."""
    role = native_role(full_key)
    if role is None:
        return None
    return role, "tail" if full_key.endswith(NATIVE_TAIL_MEMBERS.get(role, ())) else "head"


def _parse_spec(fmt: str) -> tuple[int, int]:
    bits, group = fmt.lstrip("q").split("g")
    return int(bits), int(group)


def _refuse_mixed_gate_up(formats: dict[str, str]) -> None:
    """MLP gate and up rows are interleaved pairs of one device matrix (the SwiGLU epilogue reads a
    pair at a time), so they can only be held in one format."""
    for key, fmt in formats.items():
        if key.startswith("mtp.") or not key.endswith("mlp.gate_proj.weight"):
            continue
        up = key[: -len("gate_proj.weight")] + "up_proj.weight"
        if up in formats and formats[up] != fmt:
            raise NativeBackendError(
                f"the native engine holds MLP gate and up as one matrix of interleaved rows in one format, but "
                f"'{key}' is stored as {fmt} and '{up}' as {formats[up]}; convert with one format for mlp.gate_up")


def native_recipe(tensors: Iterable[tuple[str, str, tuple]], name: str,
                  fallback: Recipe = DEFAULT_RECIPE) -> Recipe:
    """The native recipe that holds tensors stored as ``(full key, format, shape)`` in their own formats.

    Every role takes its stored format, and a split role's tail rows (GDN b|a, attention k|v) theirs,
    as a second device matrix when it differs (q4-27b: 8-bit a/b beside 4-bit qkv/z, 6-bit k/v beside
    4-bit q). Only parts of one segment stored in different formats (a recipe giving GDN z another
    format than qkv) cannot all be kept: the segment takes the format holding most of its parameters
    and the rest is re-quantized at load (native_weight). A segment stored unquantized takes the
    fallback's format (a tail: its head's). MLP gate and up stored in different formats are refused.
    """
    tensors = list(tensors)
    _refuse_mixed_gate_up({key: fmt for key, fmt, _ in tensors})
    params: dict[tuple[str, str], dict[str, int]] = {}
    for key, fmt, shape in tensors:
        seg = native_segment(key)
        if seg is None or not fmt.startswith("q"):
            continue
        n = 1
        for d in shape:
            n *= int(d)
        by_format = params.setdefault(seg, {})
        by_format[fmt] = by_format.get(fmt, 0) + n

    def stored(seg: tuple[str, str]) -> tuple[int, int] | None:
        by_format = params.get(seg)
        return _parse_spec(max(by_format, key=by_format.get)) if by_format else None

    roles = {role: stored((role, "head")) or fallback.spec(role) for role in fallback.roles}
    tails = {role: stored((role, "tail")) or roles[role] for role in SPLIT_ROLES}

    def label(role: str) -> str:
        b, g = roles[role]
        if role not in tails or tails[role] == roles[role]:
            return f"{role}=q{b}g{g}"
        tb, tg = tails[role]
        return f"{role}=q{b}g{g}({SPLIT_ROLES[role][1]}=q{tb}g{tg})"

    return Recipe(name + ":" + ",".join(label(r) for r in roles), roles, tails)


def recipe_from_artifact(artifact, fallback: Recipe = DEFAULT_RECIPE) -> Recipe:
    """The native recipe that keeps an artifact's tensors as stored (see native_recipe)."""
    return native_recipe(((i.key, i.format, i.shape) for i in artifact.weights.values()), "artifact", fallback)


def recipe_for_converter_recipe(recipe_id: str, config: ModelConfig) -> Recipe:
    """The native recipe an artifact converted with ``recipe_id`` (engine.recipe) would load with:
    for the memory plan of a model that has not been converted yet."""
    from engine.recipe import get_recipe
    from engine.registry import expected_tensors
    conv = get_recipe(recipe_id)
    tensors = ((key, conv.format_for(key, shape), shape) for key, shape in expected_tensors(config).items())
    return native_recipe(tensors, recipe_id)


def recipe_named(name: str, config: ModelConfig) -> Recipe:
    """A native recipe by name (`monorail plan --recipe`, the benchmarks' --recipe): a converter recipe id
    (engine.recipe, e.g. ``q4-27b``: the formats its artifact would store, per segment) or a uniform format
    ``qBgG`` for every role (``q4g64`` is DEFAULT_RECIPE). Anything else: ValueError."""
    from engine.plan import uniform_recipe
    from engine.recipe import RECIPES
    if name in RECIPES:
        return recipe_for_converter_recipe(name, config)
    try:
        bits, group = name.lower().lstrip("q").split("g")
        return uniform_recipe(int(bits), int(group))
    except ValueError:
        raise ValueError(f"recipe {name!r}: expected a converter recipe ({', '.join(RECIPES)}) or a uniform format "
                         f"like q4g64") from None


def native_weight(src, rel_key: str, bits: int, group: int):
    """The quantized tensor the native engine uploads for ``rel_key`` (relative to the text prefix).

    From a Monorail artifact that stores this tensor in exactly the format the native recipe asks
    for, the artifact's own codes and scales are used as they are (no second quantization, and the
    converter's better quantizer is kept). Anything else (an HF checkpoint, or a stored format the
    recipe does not use) is dequantized if need be and quantized here with round-to-nearest.
    """
    artifact = getattr(src, "artifact", None)
    if artifact is not None:
        full = src.full_key(rel_key)
        info = artifact.weights.get(full)
        if info is not None and info.format == f"q{bits}g{group}":
            return artifact.quantized(full)
    return _quantize(src.text(rel_key), bits, group)
