"""Static memory plan: every device allocation of the native engine, computed without a GPU.

The rows come from a dry run of the engine's own allocation sequence (csrc/alloc_sequence.cpp,
compiled into every build of ``engine._native``), so the plan and what the engine allocates at
launch cannot disagree. This module only chooses the inputs (shapes, recipe, context, KV format,
lanes, budget) and groups the allocations into a table.

``weight_bytes_by_role`` computes the same weight bytes from shapes and bits alone; it is the
independent check of the dry run and the one function to swap for a recipe module's figures
(``weight_bytes_by_line`` gives them per plan line, the two segments of a split role apart).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from engine.config import ModelConfig, TextConfig

GiB = 1 << 30
MiB = 1 << 20

ROLES = ("embed", "lm_head", "gdn_in", "gdn_out", "attn_qkv", "attn_o", "mlp_gate_up", "mlp_down")
# Fused roles whose last rows (the tail) may keep a format of their own, as (head, tail) row names;
# the same names label the plan lines of a split role (csrc/alloc_sequence.cpp, role_*_label).
SPLIT_ROLES = {"gdn_in": ("qkv|z", "b|a"), "attn_qkv": ("q", "k|v")}
# KV cache formats of the native engine: bf16, int8 group 64 and int4 group 64 (one fp16 scale per 64 dims
# of a (position, kv head) row; int4 packs two codes per byte): 2, 1 + 2/64 and 0.5 + 2/64 bytes per element.
KV_DTYPES = ("bf16", "int8", "int4")

# Held back beside the arena: instantiated decode graphs (a few hundred kernel nodes each).
DEFAULT_GRAPH_ALLOWANCE = 64 * MiB
# Left free for the CUDA context's own allocations, the driver and fragmentation.
DEFAULT_MARGIN = 512 * MiB


@dataclass(frozen=True)
class Recipe:
    """Bits and group size per matrix role (groupwise symmetric integer, fp16 scales).

    ``tails`` gives a split role's tail rows (GDN b|a, attention k|v: SPLIT_ROLES) their own format;
    a role without an entry, or with its head's format, is one matrix in one format."""

    name: str
    roles: dict[str, tuple[int, int]]
    tails: dict[str, tuple[int, int]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        others = sorted(set(self.tails) - set(SPLIT_ROLES))
        if others:
            raise ValueError(f"recipe {self.name}: roles {others} hold all their rows in one format; only "
                             f"{sorted(SPLIT_ROLES)} may give their tail rows a second one")

    def spec(self, role: str) -> tuple[int, int]:
        """The format of the role (of its head rows when it is split)."""
        return self.roles[role]

    def tail_spec(self, role: str) -> tuple[int, int]:
        """The format of the role's tail rows (its head's format when it has no tail of its own)."""
        return self.tails.get(role, self.roles[role])

    def is_split(self, role: str) -> bool:
        return self.tail_spec(role) != self.spec(role)


def uniform_recipe(bits: int = 4, group: int = 64) -> Recipe:
    return Recipe(f"q{bits}g{group}", {r: (bits, group) for r in ROLES})


DEFAULT_RECIPE = uniform_recipe(4, 64)


def model_dims(cfg: ModelConfig | TextConfig) -> dict:
    """The shape dict the native allocation sequence takes."""
    t = cfg.text if isinstance(cfg, ModelConfig) else cfg
    d = dict(
        hidden=t.hidden_size, n_layers=t.num_hidden_layers, intermediate=t.intermediate_size,
        vocab=t.vocab_size, layer_is_full=[1 if t.is_full_attention(i) else 0 for i in range(t.num_hidden_layers)],
        n_heads=t.num_attention_heads, n_kv_heads=t.num_key_value_heads, head_dim=t.head_dim,
        rotary_dim=t.rotary_dim, lin_k_heads=t.linear_num_key_heads, lin_k_dim=t.linear_key_head_dim,
        lin_v_heads=t.linear_num_value_heads, lin_v_dim=t.linear_value_head_dim,
        conv_kernel=t.linear_conv_kernel_dim,
    )
    v = cfg.vision if isinstance(cfg, ModelConfig) else None
    if v is not None:
        d.update(vision_hidden=v.hidden_size, vision_intermediate=v.intermediate_size,
                 vision_params=vision_param_count(cfg), vision_merge=v.merge_unit)
    return d


def vision_param_count(cfg: ModelConfig) -> int:
    """Parameters of the vision tower (patch embed, position table, blocks, merger)."""
    v = cfg.vision
    assert v is not None
    h, i, out = v.hidden_size, v.intermediate_size, v.out_hidden_size
    block = 4 * h + (h * 3 * h + 3 * h) + (h * h + h) + (h * i + i) + (i * h + h)
    merged = h * v.merge_unit
    return (h * v.patch_dim + h + v.num_position_embeddings * h + v.depth * block
            + 2 * h + merged * merged + merged + merged * out + out)


def matrix_shapes(t: TextConfig) -> dict[str, list[tuple[int, int]]]:
    """[N, K] of every matrix per role, as the native engine fuses them."""
    h = t.hidden_size
    gdn_in = 2 * t.linear_q_dim + t.linear_v_dim + t.linear_v_dim + 2 * t.linear_num_value_heads
    qkv = 2 * t.num_attention_heads * t.head_dim + 2 * t.num_key_value_heads * t.head_dim
    n_full = len(t.full_attention_layers)
    n_lin = t.num_hidden_layers - n_full
    return {
        "embed": [(t.vocab_size, h)],
        "lm_head": [(t.vocab_size, h)],
        "gdn_in": [(gdn_in, h)] * n_lin,
        "gdn_out": [(h, t.linear_v_dim)] * n_lin,
        "attn_qkv": [(qkv, h)] * n_full,
        "attn_o": [(h, t.num_attention_heads * t.head_dim)] * n_full,
        "mlp_gate_up": [(2 * t.intermediate_size, h)] * t.num_hidden_layers,
        "mlp_down": [(h, t.intermediate_size)] * t.num_hidden_layers,
    }


def tail_rows(t: TextConfig, role: str) -> int:
    """Rows of a split role's tail: GDN b|a (one row per value head each), attention k|v."""
    return {"gdn_in": 2 * t.linear_num_value_heads,
            "attn_qkv": 2 * t.num_key_value_heads * t.head_dim}.get(role, 0)


def quantized_bytes(n: int, k: int, bits: int, group: int) -> int:
    """Bytes of one matrix in the canonical groupwise format: codes (+ high bits) + fp16 scales."""
    return n * k * bits // 8 + n * (k // group) * 2


def weight_bytes_by_line(t: TextConfig, recipe: Recipe) -> dict[str, int]:
    """Independent formula (shapes x bits) for the matrix bytes of each plan line ("weights <key>"):
    the role, or for a split role "<role> <head rows>" and "<role> <tail rows>" (e.g. "gdn_in b|a")."""
    out = {}
    for role, shapes in matrix_shapes(t).items():
        if not recipe.is_split(role):
            out[role] = sum(quantized_bytes(n, k, *recipe.spec(role)) for n, k in shapes)
            continue
        head, tail = SPLIT_ROLES[role]
        tr = tail_rows(t, role)
        out[f"{role} {head}"] = sum(quantized_bytes(n - tr, k, *recipe.spec(role)) for n, k in shapes)
        out[f"{role} {tail}"] = sum(quantized_bytes(tr, k, *recipe.tail_spec(role)) for _, k in shapes)
    return out


def weight_bytes_by_role(t: TextConfig, recipe: Recipe) -> dict[str, int]:
    """Independent formula (shapes x bits) for the matrix bytes of each role (both segments of a split one)."""
    out = {role: 0 for role in ROLES}
    for line, nbytes in weight_bytes_by_line(t, recipe).items():
        out[line.split(" ", 1)[0]] += nbytes
    return out


def streamed_weight_bytes(t: TextConfig, recipe: Recipe) -> int:
    """Weight bytes read by one decode step: every matrix except the embedding (a row gather)."""
    b = weight_bytes_by_role(t, recipe)
    return sum(v for r, v in b.items() if r != "embed")


def kv_bytes_per_token(t: TextConfig, kv_dtype: str) -> int:
    elems = len(t.full_attention_layers) * 2 * t.num_key_value_heads * t.head_dim
    if kv_dtype == "bf16":
        return elems * 2
    if kv_dtype == "int8":
        return elems + elems // 64 * 2
    if kv_dtype == "int4":
        return elems // 2 + elems // 64 * 2
    raise ValueError(f"kv_dtype {kv_dtype!r} is not built in the native engine ({', '.join(KV_DTYPES)})")


@dataclass(frozen=True)
class PlanRequest:
    max_context: int = 32768
    kv_dtype: str = "int8"
    max_concurrency: int = 1
    kv_capacity: int | None = None  # default: max_concurrency x max_context
    speculative_window: int = 0     # drafted tokens per step; the step runs window + 1 tokens
    mtp_drafts: int = 0             # drafts a round from the MTP head (native): its weights, KV and state checkpoints
    vision: bool = False
    vision_max_tokens: int = 4096   # LLM tokens of the largest image (a 2048 x 2048 picture)
    prefill_chunk: int = 1024       # tokens per prefill chunk (native engine); 0: prefill through the decode path
    vram_budget: int = 24 * GiB
    recipe: Recipe = DEFAULT_RECIPE
    graph_allowance: int = DEFAULT_GRAPH_ALLOWANCE
    margin: int = DEFAULT_MARGIN

    def shape_dict(self) -> dict:
        if self.kv_dtype not in KV_DTYPES:
            raise ValueError(f"kv_dtype {self.kv_dtype!r} is not built in the native engine "
                             f"({', '.join(KV_DTYPES)})")
        if not 0 <= self.speculative_window <= 15:
            raise ValueError("speculative_window must be in 0..15 (steps run at most 16 tokens)")
        if not 0 <= self.mtp_drafts <= self.speculative_window:
            raise ValueError("mtp_drafts must be in 0..speculative_window (a verify step runs the drafts + 1 tokens)")
        return dict(
            max_context=self.max_context,
            kv_capacity=self.kv_capacity or self.max_concurrency * self.max_context,
            kv_dtype=self.kv_dtype, max_lanes=self.max_concurrency,
            max_step_tokens=self.speculative_window + 1, mtp_drafts=self.mtp_drafts, prefill_chunk=self.prefill_chunk,
            vision_max_tokens=self.vision_max_tokens if self.vision else 0,
            graph_allowance=self.graph_allowance, margin=self.margin,
            recipe={r: self.recipe.spec(r) for r in ROLES},
            recipe_tail={r: self.recipe.tail_spec(r) for r in SPLIT_ROLES},
        )


@dataclass(frozen=True)
class Allocation:
    name: str
    category: str
    bytes: int
    align: int
    offset: int


@dataclass(frozen=True)
class PlanLine:
    label: str
    bytes: int
    count: int  # allocations grouped into this line


@dataclass
class MemoryPlan:
    request: PlanRequest
    allocations: list[Allocation]
    lines: list[PlanLine]
    total: int           # arena end + allowances, alignment padding included
    arena_bytes: int     # what the engine takes with one device allocation
    budget: int
    largest_context: int | None = field(default=None)

    @property
    def fits(self) -> bool:
        return self.total <= self.budget

    @property
    def deficit(self) -> int:
        return max(0, self.total - self.budget)

    def shortfall(self) -> str:
        """One sentence for an error message: by how much the plan misses its budget and what would fit;
        "" when it fits. (format_table has the lines behind it.)"""
        if self.fits:
            return ""
        text = (f"The memory plan needs {self.total / GiB:.2f} GiB, {self.deficit / GiB:.2f} GiB more than the "
                f"VRAM budget of {self.budget / GiB:.2f} GiB")
        if self.largest_context:
            return text + f"; the largest context that fits is {self.largest_context:,} tokens."
        return text + "; even a 256-token context does not fit: raise the budget or pick a smaller model or recipe."

    def line(self, label: str) -> PlanLine:
        for ln in self.lines:
            if ln.label == label:
                return ln
        raise KeyError(label)

    def as_dict(self) -> dict:
        """Plain data for the worker protocol and the dashboard."""
        return {"lines": [{"label": ln.label, "bytes": ln.bytes} for ln in self.lines], "total": self.total,
                "arena_bytes": self.arena_bytes, "budget": self.budget, "fits": self.fits, "deficit": self.deficit,
                "largest_context": self.largest_context, "max_context": self.request.max_context,
                "kv_dtype": self.request.kv_dtype, "recipe": self.request.recipe.name}

    def format_table(self) -> str:
        r = self.request
        head = (f"memory plan: recipe {r.recipe.name}, context {r.max_context:,}, KV {r.kv_dtype}, "
                f"lanes {r.max_concurrency}, step tokens {r.speculative_window + 1}, MTP drafts {r.mtp_drafts}, "
                f"vision {'on' if r.vision else 'off'}, prefill chunk {r.prefill_chunk or 'decode path'}")
        rows = [head, f"{'line':<34}{'bytes':>18}{'GiB':>10}"]
        for ln in self.lines:
            rows.append(f"{ln.label:<34}{ln.bytes:>18,}{ln.bytes / GiB:>10.3f}")
        rows.append(f"{'total':<34}{self.total:>18,}{self.total / GiB:>10.3f}")
        rows.append(f"{'budget':<34}{self.budget:>18,}{self.budget / GiB:>10.3f}")
        if self.fits:
            rows.append(f"fits, {self.budget - self.total:,} bytes to spare")
        else:
            rows.append(f"DOES NOT FIT: {self.deficit:,} bytes ({self.deficit / GiB:.3f} GiB) over the budget")
            for ln in self.lines:
                if ln.bytes >= self.deficit:
                    rows.append(f"  alone, shrinking '{ln.label}' by {self.deficit:,} bytes would make it fit")
            if self.largest_context:
                rows.append(f"largest context that fits: {self.largest_context:,} tokens")
            else:
                rows.append("no context fits: the fixed part alone exceeds the budget")
        return "\n".join(rows)


def _line_label(a: Allocation) -> str:
    c = a.category
    if c.startswith("weights:"):
        return "weights " + c.split(":", 1)[1]
    return {"kv": "KV pool", "gdn_state": "GDN recurrent state", "conv_state": "GDN conv state",
            "lane_state": "lane state (penalty counts)", "graphs": "decode-graph allowance",
            "mtp_kv": "MTP KV", "mtp_hidden": "MTP hidden rows", "spec_ckpt": "GDN state checkpoints (verify)",
            "margin": "margin"}.get(c, a.name if c == "workspace" else c)


def dry_run(cfg: ModelConfig | TextConfig, req: PlanRequest) -> list[Allocation]:
    from engine.native import load_native

    native = load_native()
    return [Allocation(*row) for row in native.dry_run(model_dims(cfg), req.shape_dict())]


def _summarise(cfg, req: PlanRequest) -> MemoryPlan:
    allocs = dry_run(cfg, req)
    lines: dict[str, list[int]] = {}
    for a in allocs:
        ln = lines.setdefault(_line_label(a), [0, 0])
        ln[0] += a.bytes
        ln[1] += 1
    end = max(a.offset + a.bytes for a in allocs)
    arena_end = max(a.offset + a.bytes for a in allocs if a.category not in ("graphs", "margin"))
    # alignment padding is real memory: fold it into the last arena line so the lines add up
    padding = arena_end - sum(a.bytes for a in allocs if a.category not in ("graphs", "margin"))
    out = [PlanLine(k, v[0], v[1]) for k, v in lines.items()]
    if padding:
        out.append(PlanLine("alignment padding", padding, 0))
    return MemoryPlan(req, allocs, out, total=end, arena_bytes=arena_end, budget=req.vram_budget)


# Prefill chunks the engine may pick, largest first: 4096 runs the GEMMs at ~83 % of the H200's matmul
# peak against ~75 % at 1024 (bench/NOTES.md, session 3 calls 1-2); each halving saves workspace.
PREFILL_CHUNK_CHOICES = (4096, 2048, 1024, 512, 256)


def fit_prefill_chunk(config: ModelConfig | TextConfig, req: "PlanRequest") -> "PlanRequest":
    """The request with the largest prefill chunk of PREFILL_CHUNK_CHOICES whose plan fits the budget.

    The budget is fixed at launch, so VRAM that nothing else is planned for goes to a larger prefill
    workspace (faster prompts) rather than staying idle. When no choice fits, the smallest is kept and
    the plan reports the deficit as usual."""
    for chunk in PREFILL_CHUNK_CHOICES:
        candidate = replace(req, prefill_chunk=chunk)
        if _summarise(config, candidate).fits:  # (make_plan would also search the largest context)
            return candidate
    return replace(req, prefill_chunk=PREFILL_CHUNK_CHOICES[-1])


def make_plan(cfg: ModelConfig | TextConfig, req: PlanRequest) -> MemoryPlan:
    """The plan for `req`; when it does not fit, also the largest context that would."""
    plan = _summarise(cfg, req)
    if not plan.fits:
        plan.largest_context = largest_fitting_context(cfg, req)
    return plan


def largest_fitting_context(cfg: ModelConfig | TextConfig, req: PlanRequest) -> int | None:
    """Binary search over max_context (multiples of 256) with every other input fixed."""
    def fits(ctx: int) -> bool:
        r = replace(req, max_context=ctx, kv_capacity=None if req.kv_capacity is None else
                    max(req.kv_capacity * ctx // req.max_context, ctx * req.max_concurrency))
        return _summarise(cfg, r).fits

    lo, hi = 0, max(req.max_context, 256) // 256  # in units of 256 tokens
    if not fits(256):
        return None
    lo = 1
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if fits(mid * 256):
            lo = mid
        else:
            hi = mid - 1
    return lo * 256
