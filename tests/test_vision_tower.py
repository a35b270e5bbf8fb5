"""engine.reference.vision.VisionTower against transformers' Qwen3_5VisionModel (fp32, CPU).

Tiny tower: depth 2, hidden 32, 2 heads of 16, MLP 64, the real patch 16 / temporal 2 / merge 2
and the real 48 x 48 position table. Norms are perturbed away from their init and the position
table is scaled up, so that a wrong interpolation, rotary or merge order cannot hide under the
tolerance.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from engine.config import parse_vision_config
from engine.errors import ModelLoadError, PromptError
from engine.image import preprocess_image
from engine.reference.vision import VisionTower, bilinear_matrix, split_by_image, vision_tensor_shapes

transformers = pytest.importorskip("transformers")
sys.path.insert(0, str(Path(__file__).parent))
from tiny_models import TinyShape, _vision_config_dict  # noqa: E402

RTOL_FP32 = 1e-4  # relative to the largest magnitude of the reference output


def assert_rel_close(out: torch.Tensor, ref: torch.Tensor, rtol: float = RTOL_FP32) -> None:
    assert out.shape == ref.shape
    err = ((out - ref).abs().max() / ref.abs().max()).item()
    assert err <= rtol, f"relative error {err:.3g} > {rtol}"


@pytest.fixture(scope="module")
def hf_and_tower():
    from transformers import Qwen3_5VisionConfig
    from transformers.models.qwen3_5.modeling_qwen3_5 import Qwen3_5VisionModel

    cfg_dict = _vision_config_dict(TinyShape())
    torch.manual_seed(0)
    hf = Qwen3_5VisionModel(Qwen3_5VisionConfig(**cfg_dict)).float().eval()
    gen = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for name, p in hf.named_parameters():
            if "norm" in name:
                p.add_(0.1 * torch.randn(p.shape, generator=gen))
        hf.pos_embed.weight.mul_(20.0)  # make positions as large as the patch content
    # the real key names, as in a checkpoint
    weights = {"model.visual." + k: v for k, v in hf.state_dict().items()}
    tower = VisionTower.from_checkpoint(weights, parse_vision_config(cfg_dict), device="cpu", dtype=torch.float32)
    return hf, tower, weights, cfg_dict


def hf_forward(hf, pixel_values: torch.Tensor, grids: list[tuple[int, int, int]]):
    with torch.no_grad():
        out = hf(pixel_values, grid_thw=torch.tensor(grids))
    return out.last_hidden_state, out.pooler_output


@pytest.mark.parametrize("grids", [[(1, 8, 8)], [(1, 4, 10)], [(1, 6, 4), (1, 2, 12)], [(2, 4, 6)]],
                         ids=["square", "non-square", "two-images", "two-frames"])
def test_matches_transformers(hf_and_tower, grids):
    hf, tower, _, _ = hf_and_tower
    n = sum(t * h * w for t, h, w in grids)
    pv = torch.randn(n, 1536, generator=torch.Generator().manual_seed(n))
    ref_hidden, ref_merged = hf_forward(hf, pv, grids)
    assert_rel_close(tower.encode_patches(pv, grids), ref_hidden)
    out = tower(pv, grids)
    assert out.shape == (n // 4, 64)
    assert_rel_close(out, ref_merged)
    parts = split_by_image(out, grids)
    assert [p.shape[0] for p in parts] == [t * h * w // 4 for t, h, w in grids]


def test_images_do_not_attend_to_each_other(hf_and_tower):
    _, tower, _, _ = hf_and_tower
    g = torch.Generator().manual_seed(3)
    a, b = torch.randn(16, 1536, generator=g), torch.randn(24, 1536, generator=g)
    both = tower(torch.cat([a, b]), [(1, 4, 4), (1, 4, 6)])
    assert_rel_close(both[:4], tower(a, [(1, 4, 4)]))
    assert_rel_close(both[4:], tower(b, [(1, 4, 6)]))


def test_grid_shape_matters(hf_and_tower):
    """Sensitivity check of the tolerance: the same patches read as a transposed grid must differ."""
    _, tower, _, _ = hf_and_tower
    pv = torch.randn(40, 1536, generator=torch.Generator().manual_seed(4))
    a, b = tower(pv, [(1, 4, 10)]), tower(pv, [(1, 10, 4)])
    assert ((a - b).abs().max() / a.abs().max()).item() > 100 * RTOL_FP32


def test_real_image_end_to_end(hf_and_tower):
    hf, tower, _, _ = hf_and_tower
    from PIL import Image

    rng = np.random.default_rng(0)
    img = Image.fromarray(rng.integers(0, 256, (150, 230, 3), dtype=np.uint8))
    inp = preprocess_image(img)
    _, ref = hf_forward(hf, inp.pixel_values, [inp.grid_thw])
    out = tower(inp.pixel_values, [inp.grid_thw])
    assert out.shape[0] == inp.num_llm_tokens
    assert_rel_close(out, ref)


@pytest.mark.parametrize("out_size", [1, 2, 5, 48, 77])
def test_bilinear_matrix_is_align_corners_interpolation(out_size):
    table = torch.randn(48, 3, dtype=torch.float64)
    ref = F.interpolate(table.T[None], size=out_size, mode="linear", align_corners=True)[0].T
    got = bilinear_matrix(out_size, 48, torch.float64) @ table
    if out_size == 1:  # F.interpolate samples the first entry for a single output, as transformers does
        ref = table[:1]
    torch.testing.assert_close(got, ref, rtol=1e-12, atol=1e-12)


def test_load_errors_name_the_tensor(hf_and_tower):
    _, _, weights, cfg_dict = hf_and_tower
    vc = parse_vision_config(cfg_dict)
    missing = {k: v for k, v in weights.items() if k != "model.visual.blocks.1.attn.qkv.bias"}
    with pytest.raises(ModelLoadError, match="model.visual.blocks.1.attn.qkv.bias"):
        VisionTower.from_checkpoint(missing, vc)
    wrong = dict(weights)
    wrong["model.visual.merger.linear_fc2.weight"] = torch.zeros(3, 3)
    with pytest.raises(ModelLoadError, match=r"merger.linear_fc2.weight' has shape \[3, 3\]"):
        VisionTower.from_checkpoint(wrong, vc)


def test_bad_inputs_are_refused(hf_and_tower):
    _, tower, _, _ = hf_and_tower
    with pytest.raises(PromptError, match="multiples of the merge size"):
        tower(torch.zeros(15, 1536), [(1, 3, 5)])
    with pytest.raises(PromptError, match="pixel_values has shape"):
        tower(torch.zeros(15, 1536), [(1, 4, 4)])


def test_shape_table_matches_transformers_and_the_27b_count(hf_and_tower):
    _, _, weights, cfg_dict = hf_and_tower
    table = vision_tensor_shapes(parse_vision_config(cfg_dict))
    assert table == {k: tuple(v.shape) for k, v in weights.items()}
    real = parse_vision_config({"depth": 27, "hidden_size": 1152, "intermediate_size": 4304, "num_heads": 16,
                                "out_hidden_size": 5120})
    n = sum(int(np.prod(s)) for s in vision_tensor_shapes(real).values())
    assert n == 460_730_096  # MODEL.md: vision parameter count of the 27B checkpoints
