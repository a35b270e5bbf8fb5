"""Image prompts through the whole reference model equal Qwen3_5ForConditionalGeneration (fp32, CPU).

Path under test: engine.image.preprocess_image -> ReferenceModel.embed_multimodal (vision tower
loaded lazily from the checkpoint's model.visual.* tensors, placeholder scatter, 3-axis positions)
-> ReferenceModel.forward; then decode steps that rely on the rope delta alone. The oracle is
transformers given pixel_values + image_grid_thw on the same tiny checkpoint; for decode it is a
full forward over the extended sequence (with the images again).
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from PIL import Image

from engine.errors import PromptError
from engine.image import preprocess_image

pytest.importorskip("transformers")

RTOL_FP32 = 1e-4  # max |ours - oracle| / max |oracle| over the compared logits


def rel_err(a: torch.Tensor, b: torch.Tensor) -> float:
    return ((a.float() - b.float()).abs().max() / b.float().abs().max()).item()


@pytest.fixture(scope="module")
def setup(tiny_hf):
    from engine.config import parse_config
    from engine.reference.model import ReferenceModel

    hf, folder = tiny_hf
    model = ReferenceModel.from_checkpoint(folder, dtype=torch.float32)
    cfg = parse_config(hf.config.to_dict())
    rng = np.random.default_rng(0)
    # one square-ish and one non-square picture, both small enough for the minimum pixel budget path
    images = [preprocess_image(Image.fromarray(rng.integers(0, 256, (h, w, 3), dtype=np.uint8)), cfg.vision)
              for (w, h) in [(256, 256), (300, 200)]]
    return hf, model, cfg, images


def prompt_ids(cfg, images, text_chunks: list[list[int]]) -> list[int]:
    """text, <vision_start> image placeholders <vision_end>, text, ... , text."""
    ids = list(text_chunks[0])
    for im, text in zip(images, text_chunks[1:]):
        ids += [cfg.vision_start_token_id] + [cfg.image_token_id] * im.num_llm_tokens + [cfg.vision_end_token_id]
        ids += text
    return ids


def hf_logits(hf, cfg, ids: list[int], images) -> torch.Tensor:
    x = torch.tensor([ids])
    with torch.no_grad():
        out = hf(input_ids=x, pixel_values=torch.cat([im.pixel_values for im in images]),
                 image_grid_thw=torch.tensor([im.grid_thw for im in images]),
                 mm_token_type_ids=(x == cfg.image_token_id).int(), use_cache=False)
    return out.logits[0]


@pytest.mark.parametrize("n_images", [1, 2])
def test_image_prompt_then_decode_matches_transformers(setup, n_images):
    hf, model, cfg, all_images = setup
    images = all_images[:n_images]
    g = torch.Generator().manual_seed(n_images)
    text = [torch.randint(0, 1000, (n,), generator=g).tolist() for n in (7, 5, 4)[: n_images + 1]]
    prompt = prompt_ids(cfg, images, text)
    continuation = torch.randint(0, 1000, (4,), generator=g).tolist()
    oracle = hf_logits(hf, cfg, prompt + continuation, images)

    embeds, positions, rope_delta = model.embed_multimodal(torch.tensor(prompt), images)
    assert embeds.shape == (len(prompt), cfg.text.hidden_size) and positions.shape == (3, len(prompt))
    state = model.new_state(len(prompt) + len(continuation))
    prefill = model.forward(None, state, position_ids=positions, inputs_embeds=embeds).logits
    assert rel_err(prefill, oracle[: len(prompt)]) <= RTOL_FP32

    state.rope_delta += rope_delta
    for i, tok in enumerate(continuation):
        step = model.forward(torch.tensor([tok]), state).logits
        assert rel_err(step, oracle[len(prompt) + i: len(prompt) + i + 1]) <= RTOL_FP32, f"decode step {i}"


def test_images_change_the_logits(setup):
    """Sensitivity: the same prompt with the image content replaced gives different logits."""
    hf, model, cfg, images = setup
    im = images[0]
    ids = torch.tensor(prompt_ids(cfg, [im], [[1, 2, 3], [4, 5]]))
    a, pos, _ = model.embed_multimodal(ids, [im])
    other = type(im)(pixel_values=-im.pixel_values, grid_thw=im.grid_thw, num_llm_tokens=im.num_llm_tokens)
    b, _, _ = model.embed_multimodal(ids, [other])
    la = model.forward(None, model.new_state(len(ids)), position_ids=pos, inputs_embeds=a).logits
    lb = model.forward(None, model.new_state(len(ids)), position_ids=pos, inputs_embeds=b).logits
    assert rel_err(la[-1:], lb[-1:]) > 100 * RTOL_FP32


def test_text_only_checkpoint_refuses_images(tiny_text_hf, setup):
    from engine.reference.model import ReferenceModel

    _, _, cfg, images = setup
    _, folder = tiny_text_hf
    model = ReferenceModel.from_checkpoint(folder)
    assert model.vision is None
    ids = torch.tensor(prompt_ids(cfg, images[:1], [[1], [2]]))
    with pytest.raises(PromptError):
        model.embed_multimodal(ids, images[:1])
