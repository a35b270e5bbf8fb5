"""engine.positions.mrope_positions against transformers' Qwen3_5Model.get_rope_index."""

from __future__ import annotations

import pytest
import torch

from engine.config import parse_config
from engine.errors import PromptError
from engine.positions import decode_positions, image_token_runs, mrope_positions

pytest.importorskip("transformers")


@pytest.fixture(scope="module")
def hf_and_config(tiny_hf):
    hf, _ = tiny_hf
    return hf.model, parse_config(hf.config.to_dict())


def build_prompt(cfg, parts: list) -> list[int]:
    """parts: ints (text token ids) and (t, h, w) grids (an image block with start/end markers)."""
    ids: list[int] = []
    for p in parts:
        if isinstance(p, tuple):
            t, h, w = p
            ids += [cfg.vision_start_token_id] + [cfg.image_token_id] * (t * h * w // 4) + [cfg.vision_end_token_id]
        else:
            ids.append(p)
    return ids


def hf_rope_index(hf_model, cfg, ids: list[int], grids: list[tuple[int, int, int]]):
    x = torch.tensor([ids])
    mm = (x == cfg.image_token_id).int()
    with torch.no_grad():
        pos, delta = hf_model.get_rope_index(x, mm, torch.tensor(grids) if grids else None)
    return pos[:, 0], int(delta.reshape(-1)[0])


CASES = {
    "no-image": [5, 6, 7, 8, 9],
    "one-image-text-after": [5, 6, (1, 4, 6), 7, 8, 9],
    "image-first": [(1, 8, 4), 11, 12],
    "image-last": [3, 4, (1, 2, 10)],
    "two-images-text-between": [1, 2, 3, (1, 4, 6), 10, 11, (1, 6, 2), 12, 13, 14],
    "two-images-adjacent-blocks": [1, (1, 2, 2), (1, 10, 4), 9],
}


@pytest.mark.parametrize("name", list(CASES))
def test_matches_transformers_rope_index(hf_and_config, name):
    hf_model, cfg = hf_and_config
    parts = CASES[name]
    grids = [p for p in parts if isinstance(p, tuple)]
    ids = build_prompt(cfg, parts)
    ref_pos, ref_delta = hf_rope_index(hf_model, cfg, ids, grids)
    pos, delta = mrope_positions(torch.tensor(ids), grids, cfg)
    assert pos.dtype == torch.long and pos.shape == (3, len(ids))
    assert torch.equal(pos, ref_pos)
    assert delta == ref_delta
    assert delta == int(pos.max()) + 1 - len(ids)


def test_decode_after_image_continues_like_transformers(hf_and_config):
    """Positions of tokens appended after the prompt = seq_len + rope_delta, equal to get_rope_index
    run on the whole extended sequence (the oracle for what decode must produce)."""
    hf_model, cfg = hf_and_config
    grids = [(1, 6, 8), (1, 4, 2)]
    prompt = build_prompt(cfg, [1, 2, grids[0], 3, grids[1], 4])
    extra = [20, 21, 22, 23]
    ref_pos, _ = hf_rope_index(hf_model, cfg, prompt + extra, grids)
    _, delta = mrope_positions(torch.tensor(prompt), grids, cfg)
    got = decode_positions(len(prompt), len(extra), delta)
    assert torch.equal(got, ref_pos[:, len(prompt):])


def test_chunked_prompt_with_start_offset(hf_and_config):
    """A prompt split into chunks (an image in each) gives the same positions; deltas add up."""
    hf_model, cfg = hf_and_config
    grids = [(1, 4, 4), (1, 2, 8)]
    first = build_prompt(cfg, [1, 2, grids[0], 3])
    second = build_prompt(cfg, [4, grids[1], 5, 6])
    ref_pos, ref_delta = hf_rope_index(hf_model, cfg, first + second, grids)
    p1, d1 = mrope_positions(torch.tensor(first), grids[:1], cfg)
    p2, d2 = mrope_positions(torch.tensor(second), grids[1:], cfg, start=len(first) + d1)
    assert torch.equal(torch.cat([p1, p2], dim=1), ref_pos)
    assert d1 + d2 == ref_delta


def test_placeholder_runs():
    ids = torch.tensor([0, 9, 9, 1, 9, 2, 9, 9, 9])
    assert image_token_runs(ids, 9) == [(1, 3), (4, 5), (6, 9)]


def test_mismatches_are_refused(hf_and_config):
    _, cfg = hf_and_config
    ids = torch.tensor(build_prompt(cfg, [1, (1, 4, 4), 2]))
    with pytest.raises(PromptError, match="needs 8 placeholder tokens"):
        mrope_positions(ids, [(1, 4, 8)], cfg)
    with pytest.raises(PromptError, match="2 image\\(s\\) were given but the prompt has placeholders for 1"):
        mrope_positions(ids, [(1, 4, 4), (1, 2, 2)], cfg)
    with pytest.raises(PromptError, match="only 1 image"):
        mrope_positions(ids, [(1, 2, 2)], cfg)
    with pytest.raises(PromptError, match="no image was given"):
        mrope_positions(ids, [], cfg)
    video = torch.tensor([1, cfg.video_token_id, 2])
    with pytest.raises(PromptError, match="video"):
        mrope_positions(video, [], cfg)


def test_text_only_model_refuses_images(hf_and_config):
    _, cfg = hf_and_config
    text_only = parse_config({**cfg.raw, "vision_config": None})
    ids = torch.tensor(build_prompt(cfg, [1, (1, 2, 2), 2]))
    with pytest.raises(PromptError, match="no vision tower"):
        mrope_positions(ids, [(1, 2, 2)], text_only)
