"""Reference vision tower (pure torch): flat patches -> one embedding per 2x2 patch window.

Math (MODEL.md, "Vision tower"), for each image of grid (t, h, w) patches:
  x   = patches @ W_patch^T + b          (the Conv3d with stride = kernel is a matmul)
  x  += P(h, w)                          (48x48 learned table, bilinear, align-corners, to h x w)
  27 x { x += proj(attn(rope2d(LN1(x)))) ; x += fc2(gelu_tanh(fc1(LN2(x)))) }
  out = fc2(gelu_erf(fc1(concat4(LN(x)))))   (four consecutive patches = one merge window)
Attention is full (non-causal) within one frame of one image, never across images. The 2-D
rotary gives each head dim pair an angle from the patch row (first quarter of frequencies) or
column (second quarter), duplicated over the two halves of the head (rotate-half convention).

Patches arrive in merge-window order (engine.image.patchify), so every per-patch table here
(position embedding, rotary angles) is built in that order too.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol, Sequence

import torch
import torch.nn.functional as F

from engine.config import VisionConfig
from engine.errors import ModelLoadError, PromptError

LAYER_NORM_EPS = 1e-6
VISUAL_PREFIX = "model.visual."

Grid = tuple[int, int, int]


class TensorSource(Protocol):
    """Anything with ``get(full_key) -> Tensor`` (engine.loader.Checkpoint, or a dict in tests).

    If it also has ``has(full_key) -> bool`` that is asked first, so a missing tensor is reported
    as a ModelLoadError that names it."""

    def get(self, key: str) -> Any: ...


@dataclass
class _Linear:
    weight: torch.Tensor  # [out, in]
    bias: torch.Tensor  # [out]

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        return F.linear(x, self.weight, self.bias)


@dataclass
class _LayerNorm:
    weight: torch.Tensor
    bias: torch.Tensor

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        return F.layer_norm(x, (x.shape[-1],), self.weight, self.bias, LAYER_NORM_EPS)


@dataclass
class VisionBlock:
    norm1: _LayerNorm
    qkv: _Linear
    proj: _Linear
    norm2: _LayerNorm
    fc1: _Linear
    fc2: _Linear


@dataclass
class VisionMerger:
    norm: _LayerNorm
    fc1: _Linear
    fc2: _Linear


def _activation(name: str):
    if name in ("gelu_pytorch_tanh", "gelu_new", "gelu_fast"):
        return lambda x: F.gelu(x, approximate="tanh")
    if name == "gelu":
        return F.gelu
    raise ModelLoadError(f"vision_config.hidden_act is {name!r}; the reference vision tower supports "
                         "'gelu_pytorch_tanh' (this family) and 'gelu'")


def bilinear_matrix(out_size: int, side: int, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """[out_size, side] weights resampling a length-``side`` axis to ``out_size`` points.

    Align-corners: output i samples the source at i * (side - 1) / (out_size - 1), so the first
    and last outputs hit the table's edge entries exactly. Each row holds two hat-kernel taps.
    """
    src = torch.arange(out_size, dtype=torch.float64) * (side - 1) / max(out_size - 1, 1)
    lo = src.floor().long().clamp(0, side - 1)
    hi = (lo + 1).clamp(max=side - 1)
    frac = src - lo.to(torch.float64)
    m = torch.zeros(out_size, side, dtype=torch.float64)
    rows = torch.arange(out_size)
    m[rows, lo] += 1.0 - frac
    m[rows, hi] += frac
    return m.to(dtype)


def merge_window_order(grid: torch.Tensor, merge: int) -> torch.Tensor:
    """[h, w, ...] laid out row-major -> [h * w, ...] in merge-window order."""
    h, w = grid.shape[:2]
    rest = grid.shape[2:]
    g = grid.reshape(h // merge, merge, w // merge, merge, *rest)
    return g.transpose(1, 2).reshape(h * w, *rest)


def patch_rows_cols(h: int, w: int, merge: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Row and column index of each patch of an h x w grid, in merge-window order."""
    rows = torch.arange(h).view(h, 1).expand(h, w)
    cols = torch.arange(w).view(1, w).expand(h, w)
    return merge_window_order(rows, merge), merge_window_order(cols, merge)


def rotate_half(x: torch.Tensor) -> torch.Tensor:
    a, b = x.chunk(2, dim=-1)
    return torch.cat((-b, a), dim=-1)


def check_grids(grid_thw: Sequence[Sequence[int]], merge: int) -> list[Grid]:
    grids: list[Grid] = []
    for i, g in enumerate(grid_thw):
        t, h, w = (int(v) for v in g)
        if t < 1 or h < 1 or w < 1 or h % merge or w % merge:
            raise PromptError(f"image {i}: grid (t, h, w) = {(t, h, w)} is not valid; h and w must be positive "
                              f"multiples of the merge size {merge} (use engine.image.preprocess_image)")
        grids.append((t, h, w))
    return grids


def vision_tensor_shapes(c: VisionConfig, prefix: str = VISUAL_PREFIX) -> dict[str, tuple[int, ...]]:
    """Every tensor of the vision tower + merger, by its checkpoint key (under ``prefix``), with its shape.

    The table itself lives in engine.registry (the one place that knows this family's shapes)."""
    from engine.registry import vision_tensor_shapes as registry_shapes

    return {prefix + k[len(VISUAL_PREFIX):]: v for k, v in registry_shapes(c).items()}


class VisionTower:
    """The vision encoder + merger of a Qwen3.5 checkpoint, as plain tensors and torch ops."""

    def __init__(self, cfg: VisionConfig, patch_weight: torch.Tensor, patch_bias: torch.Tensor,
                 pos_table: torch.Tensor, blocks: list[VisionBlock], merger: VisionMerger):
        self.cfg = cfg
        self.patch_embed = _Linear(patch_weight, patch_bias)  # weight flattened to [hidden, patch_dim]
        self.pos_table = pos_table  # [side * side, hidden]
        self.side = int(round(cfg.num_position_embeddings ** 0.5))
        if self.side * self.side != cfg.num_position_embeddings:
            raise ModelLoadError(f"vision_config.num_position_embeddings is {cfg.num_position_embeddings}; "
                                 "expected a square number (48 x 48 = 2304 for this family)")
        self.blocks = blocks
        self.merger = merger
        self.act = _activation(cfg.hidden_act)
        hd = cfg.head_dim
        # hd/4 frequencies: half of the rotated pairs follow the row, half the column.
        quarter = hd // 2
        self.inv_freq = 1.0 / (cfg.rope_theta ** (torch.arange(0, quarter, 2, dtype=torch.float32) / quarter))
        self.dtype = patch_weight.dtype
        self.device = patch_weight.device

    # ---- construction -------------------------------------------------------------------------
    @classmethod
    def from_checkpoint(cls, ckpt: TensorSource, vision_cfg: VisionConfig, device: str | torch.device = "cpu",
                        dtype: torch.dtype = torch.float32, prefix: str = VISUAL_PREFIX) -> "VisionTower":
        """Take the ``model.visual.*`` tensors by their real names and check every shape."""
        c = vision_cfg
        shapes = vision_tensor_shapes(c, prefix)
        has = getattr(ckpt, "has", None)  # engine.loader.Checkpoint; a plain dict answers get() with None

        def get(name: str) -> torch.Tensor:
            key = prefix + name
            t = None if has is not None and not has(key) else ckpt.get(key)
            if t is None:
                raise ModelLoadError(f"checkpoint has no tensor '{key}' (vision tower); the checkpoint is incomplete "
                                     "or not a Qwen3.5 multimodal checkpoint")
            if tuple(t.shape) != shapes[key]:
                raise ModelLoadError(f"tensor '{key}' has shape {list(t.shape)}; vision_config implies "
                                     f"{list(shapes[key])}")
            return t.to(device=device, dtype=dtype)

        def linear(name: str) -> _Linear:
            return _Linear(get(name + ".weight"), get(name + ".bias"))

        def norm(name: str) -> _LayerNorm:
            return _LayerNorm(get(name + ".weight"), get(name + ".bias"))

        pw, pb, table = get("patch_embed.proj.weight"), get("patch_embed.proj.bias"), get("pos_embed.weight")
        blocks = []
        for i in range(c.depth):
            b = f"blocks.{i}."
            blocks.append(VisionBlock(norm1=norm(b + "norm1"), qkv=linear(b + "attn.qkv"), proj=linear(b + "attn.proj"),
                                      norm2=norm(b + "norm2"), fc1=linear(b + "mlp.linear_fc1"),
                                      fc2=linear(b + "mlp.linear_fc2")))
        merger = VisionMerger(norm=norm("merger.norm"), fc1=linear("merger.linear_fc1"),
                              fc2=linear("merger.linear_fc2"))
        hid = c.hidden_size
        return cls(c, pw.reshape(hid, -1), pb, table, blocks, merger)

    # ---- per-grid tables ----------------------------------------------------------------------
    def position_embedding(self, grids: Sequence[Grid]) -> torch.Tensor:
        """[sum t*h*w, hidden]: the learned table resampled to each grid, in merge-window order."""
        table = self.pos_table.view(self.side, self.side, -1).to(torch.float32)
        out = []
        for t, h, w in grids:
            wh = bilinear_matrix(h, self.side).to(table.device)
            ww = bilinear_matrix(w, self.side).to(table.device)
            grid = torch.einsum("hi,ijd,wj->hwd", wh, table, ww)
            out.append(merge_window_order(grid, self.cfg.spatial_merge_size).repeat(t, 1))
        return torch.cat(out).to(self.dtype)

    def rotary_cos_sin(self, grids: Sequence[Grid]) -> tuple[torch.Tensor, torch.Tensor]:
        """cos, sin [sum t*h*w, head_dim] (fp32) of the 2-D rotary for every patch."""
        angles = []
        inv = self.inv_freq.to(self.device)
        for t, h, w in grids:
            rows, cols = patch_rows_cols(h, w, self.cfg.spatial_merge_size)
            a = torch.cat([rows.to(self.device)[:, None] * inv, cols.to(self.device)[:, None] * inv], dim=-1)
            angles.append(a.repeat(t, 1))
        a = torch.cat(angles)
        a = torch.cat([a, a], dim=-1)
        return a.cos(), a.sin()

    # ---- forward ------------------------------------------------------------------------------
    def _attention(self, blk: VisionBlock, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor,
                   segments: list[int]) -> torch.Tensor:
        n = x.shape[0]
        heads, hd = self.cfg.num_heads, self.cfg.head_dim
        q, k, v = blk.qkv(x).view(n, 3, heads, hd).unbind(1)  # each [n, heads, hd]
        c, s = cos[:, None, :], sin[:, None, :]
        q = (q.float() * c + rotate_half(q.float()) * s).to(x.dtype)
        k = (k.float() * c + rotate_half(k.float()) * s).to(x.dtype)
        outs = []
        for qs, ks, vs in zip(q.split(segments), k.split(segments), v.split(segments)):
            # [heads, len, hd]; full attention inside one frame of one image
            o = F.scaled_dot_product_attention(qs.transpose(0, 1), ks.transpose(0, 1), vs.transpose(0, 1),
                                               scale=hd ** -0.5)
            outs.append(o.transpose(0, 1).reshape(-1, heads * hd))
        return blk.proj(torch.cat(outs))

    @torch.no_grad()
    def encode_patches(self, pixel_values: torch.Tensor, grid_thw: Sequence[Sequence[int]]) -> torch.Tensor:
        """[N, patch_dim] -> [N, hidden]: the tower before the merger (last block output)."""
        c = self.cfg
        grids = check_grids(grid_thw, c.spatial_merge_size)
        n_expected = sum(t * h * w for t, h, w in grids)
        if pixel_values.dim() != 2 or pixel_values.shape != (n_expected, c.patch_dim):
            raise PromptError(f"pixel_values has shape {list(pixel_values.shape)}; the grids {grids} need "
                              f"[{n_expected}, {c.patch_dim}]")
        x = self.patch_embed(pixel_values.to(device=self.device, dtype=self.dtype))
        x = x + self.position_embedding(grids)
        cos, sin = self.rotary_cos_sin(grids)
        segments = [h * w for t, h, w in grids for _ in range(t)]
        for blk in self.blocks:
            x = x + self._attention(blk, blk.norm1(x), cos, sin, segments)
            x = x + blk.fc2(self.act(blk.fc1(blk.norm2(x))))
        return x

    @torch.no_grad()
    def forward(self, pixel_values: torch.Tensor, grid_thw: Sequence[Sequence[int]]) -> torch.Tensor:
        """[N, patch_dim] patches of one or more images -> [N / 4, out_hidden] LLM embeddings.

        Rows are image after image, each in raster order of its merged (h/2 x w/2) grid: exactly
        the order of that image's placeholder tokens in the prompt.
        """
        x = self.encode_patches(pixel_values, grid_thw)
        m = self.merger
        x = m.norm(x).reshape(-1, self.cfg.hidden_size * self.cfg.merge_unit)
        return m.fc2(F.gelu(m.fc1(x)))

    __call__ = forward


def split_by_image(embeddings: torch.Tensor, grid_thw: Sequence[Sequence[int]], merge: int = 2) -> list[torch.Tensor]:
    """Split the tower output into one [tokens_i, out_hidden] tensor per image."""
    sizes = [int(t) * int(h) * int(w) // (merge * merge) for t, h, w in grid_thw]
    return list(embeddings.split(sizes))


def has_vision_weights(ckpt: TensorSource, prefix: str = VISUAL_PREFIX) -> bool:
    """Whether a checkpoint carries a vision tower (text-only saves and conversions drop it)."""
    key = prefix + "patch_embed.proj.weight"
    has = getattr(ckpt, "has", None)
    return bool(has(key)) if has is not None else ckpt.get(key) is not None


def scatter_image_embeddings(text_embeds: torch.Tensor, input_ids: torch.Tensor, image_embeds: torch.Tensor,
                             image_token_id: int) -> torch.Tensor:
    """Replace the rows of image placeholder tokens, in order, by the tower's output rows."""
    ids = input_ids.reshape(-1).to(text_embeds.device)
    mask = ids == image_token_id
    n = int(mask.sum())
    if n != image_embeds.shape[0]:
        raise PromptError(f"the prompt has {n} image placeholder tokens but the images give "
                          f"{image_embeds.shape[0]} embeddings; size each image's placeholder run by its grid "
                          "(ImageInput.num_llm_tokens)")
    out = text_embeds.clone()
    out[mask] = image_embeds.to(device=out.device, dtype=out.dtype)
    return out
