"""3-axis (t, h, w) positions for interleaved mRoPE, and the rope delta used while decoding.

Text tokens advance all three axes together (t = h = w = running position). An image of merged
grid (t, H, W) = (t, h/2, w/2) placed at running position p gives its token (i, j, k), listed in
raster order over (t, H, W), the position (p + i, p + j, p + k); the text after it resumes at
p + max(H, W) for an image (t = 1), i.e. one past the largest position used so far.

Because an image takes H * W tokens but only max(H, W) positions, positions run behind token
indices. ``rope_delta`` = (largest position + 1) - token count; during decode the position of the
token at sequence index n is n + rope_delta on all three axes.

Videos (video_token_id) are not handled here yet: a prompt containing video tokens is refused.
"""

from __future__ import annotations

from typing import Sequence

import torch

from engine.config import ModelConfig
from engine.errors import PromptError

Grid = tuple[int, int, int]


def image_token_runs(input_ids: torch.Tensor, image_token_id: int) -> list[tuple[int, int]]:
    """(start, end) of every maximal run of consecutive image placeholder tokens."""
    is_img = (input_ids == image_token_id).tolist()
    runs: list[tuple[int, int]] = []
    start = None
    for i, flag in enumerate(is_img):
        if flag and start is None:
            start = i
        elif not flag and start is not None:
            runs.append((start, i))
            start = None
    if start is not None:
        runs.append((start, len(is_img)))
    return runs


def _image_spans(input_ids: torch.Tensor, grids: Sequence[Grid], image_token_id: int,
                 merge: int) -> list[tuple[int, Grid]]:
    """Assign each image grid its first placeholder index, checking that the counts agree.

    A run of placeholders may hold several images back to back; it is cut by the grids' sizes.
    """
    runs = image_token_runs(input_ids, image_token_id)
    spans: list[tuple[int, Grid]] = []
    gi = 0
    for start, end in runs:
        pos = start
        while pos < end:
            if gi >= len(grids):
                raise PromptError(f"the prompt has image placeholder tokens at {pos}..{end - 1} but only "
                                  f"{len(grids)} image(s) were given")
            t, h, w = grids[gi]
            n = t * (h // merge) * (w // merge)
            if pos + n > end:
                raise PromptError(f"image {gi} (grid {grids[gi]}) needs {n} placeholder tokens, but the run at "
                                  f"{start} has only {end - pos} left; build the prompt with the grid's token count")
            spans.append((pos, (t, h // merge, w // merge)))
            pos += n
            gi += 1
    if gi != len(grids):
        raise PromptError(f"{len(grids)} image(s) were given but the prompt has placeholders for {gi}")
    return spans


def mrope_positions(input_ids: torch.Tensor, image_grids: Sequence[Sequence[int]], config: ModelConfig,
                    start: int = 0) -> tuple[torch.Tensor, int]:
    """Positions [3, T] (int64) for a chunk of tokens, and the rope delta this chunk adds.

    ``image_grids``: the (t, h, w) patch grid of each image, in prompt order (ImageInput.grid_thw).
    ``start``: the position of the chunk's first token (for a continuing sequence: its length so
    far plus its rope delta so far). The returned delta is relative to ``start``:
    (largest position + 1) - (start + T); the running delta of a sequence is the sum over its
    chunks, and equals transformers' ``rope_deltas`` for a whole prompt at start 0.
    """
    ids = torch.as_tensor(input_ids).reshape(-1)
    T = ids.numel()
    grids: list[Grid] = [tuple(int(v) for v in g) for g in image_grids]  # type: ignore[misc]
    if grids and config.vision is None:
        raise PromptError("this model has no vision tower; remove the images or load a multimodal checkpoint")
    if bool((ids == config.video_token_id).any()):
        raise PromptError("video input is not supported yet; attach still images instead")
    merge = config.vision.spatial_merge_size if config.vision is not None else 2
    spans = _image_spans(ids, grids, config.image_token_id, merge) if grids else []
    if not grids and bool((ids == config.image_token_id).any()):
        raise PromptError("the prompt has image placeholder tokens but no image was given")

    pos = torch.empty(3, T, dtype=torch.long)
    cursor = 0  # token index
    p = start  # running position
    for first, (t, gh, gw) in spans:
        n_text = first - cursor
        pos[:, cursor:first] = torch.arange(p, p + n_text).expand(3, n_text)
        p += n_text
        tt, hh, ww = torch.meshgrid(torch.arange(t), torch.arange(gh), torch.arange(gw), indexing="ij")
        n_img = t * gh * gw
        pos[:, first:first + n_img] = torch.stack([tt, hh, ww]).reshape(3, -1) + p
        p += max(t, gh, gw)
        cursor = first + n_img
    n_text = T - cursor
    pos[:, cursor:] = torch.arange(p, p + n_text).expand(3, n_text)
    p += n_text
    return pos, p - (start + T)


def decode_positions(seq_len: int, count: int, rope_delta: int) -> torch.Tensor:
    """Positions [3, count] of ``count`` tokens appended at sequence index ``seq_len``."""
    row = torch.arange(seq_len, seq_len + count, dtype=torch.long) + rope_delta
    return row.expand(3, count).clone()
