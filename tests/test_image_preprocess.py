"""engine.image against transformers' PIL image processor for this family (Qwen2VLImageProcessorPil,
the "pil" entry of the qwen3_5 auto mapping; the torchvision one is not installed here), configured
as the Qwen3.5 checkpoints' preprocessor_config.json is: patch 16, merge 2, temporal patch 2,
pixels in [65,536, 16,777,216], mean = std = 0.5.
"""

from __future__ import annotations

import io
import struct
import subprocess
import sys
import time
import zlib

import numpy as np
import pytest
import torch
from PIL import Image

from engine.image import (MAX_ASPECT_RATIO, MAX_PIXELS, MIN_PIXELS, ImageError, image_token_count, inspect_image,
                          preprocess_image, smart_resize)

transformers = pytest.importorskip("transformers")

PIXEL_ATOL = 1e-5  # pixel values are in [-1, 1]; both sides do the same 8-bit resize


def hf_processor(max_pixels: int = MAX_PIXELS):
    from transformers.models.qwen2_vl.image_processing_pil_qwen2_vl import Qwen2VLImageProcessorPil

    return Qwen2VLImageProcessorPil(patch_size=16, merge_size=2, temporal_patch_size=2, image_mean=[0.5] * 3,
                                    image_std=[0.5] * 3,
                                    size={"shortest_edge": MIN_PIXELS, "longest_edge": max_pixels})


def random_image(w: int, h: int, mode: str = "RGB", seed: int = 0) -> Image.Image:
    rng = np.random.default_rng(seed)
    # smooth-ish content (a gradient plus noise) so bicubic ringing and clipping both occur
    base = np.linspace(0, 255, w)[None, :, None] + np.linspace(0, 128, h)[:, None, None]
    arr = np.clip(base + rng.normal(0, 60, (h, w, 3)), 0, 255).astype(np.uint8)
    img = Image.fromarray(arr, "RGB")
    return img if mode == "RGB" else img.convert(mode)


def assert_matches_hf(ours, hf_out):
    assert tuple(hf_out["image_grid_thw"][0].tolist()) == ours.grid_thw
    ref = hf_out["pixel_values"]
    assert ours.pixel_values.dtype == torch.float32
    assert ours.pixel_values.shape == ref.shape
    torch.testing.assert_close(ours.pixel_values, ref.float(), rtol=0, atol=PIXEL_ATOL)
    t, h, w = ours.grid_thw
    assert ours.num_llm_tokens == t * h * w // 4


@pytest.mark.parametrize("size", [(300, 200), (77, 500), (1000, 37), (256, 256), (33, 20)])
def test_pixels_match_transformers(size):
    img = random_image(*size, seed=size[0])
    assert_matches_hf(preprocess_image(img), hf_processor()(images=[img], return_tensors="pt"))


def test_downscale_branch_matches_transformers():
    # the max-pixel branch, at a small budget so the test stays cheap
    img = random_image(900, 700, seed=3)
    ours = preprocess_image(img, max_pixels=200_000)
    assert_matches_hf(ours, hf_processor(max_pixels=200_000)(images=[img], return_tensors="pt"))
    assert ours.grid_thw[1] * ours.grid_thw[2] * 256 <= 200_000


@pytest.mark.parametrize("mode", ["L", "P", "CMYK", "1"])
def test_other_modes_match_transformers(mode):
    img = random_image(120, 90, mode=mode, seed=7)
    assert_matches_hf(preprocess_image(img), hf_processor()(images=[img], return_tensors="pt"))


def test_alpha_is_composited_on_white():
    rgb = random_image(100, 64, seed=11)
    alpha = Image.fromarray(np.tile(np.linspace(0, 255, 100).astype(np.uint8), (64, 1)), "L")
    rgba = rgb.copy()
    rgba.putalpha(alpha)
    # oracle: Pillow's own alpha compositing over an opaque white page, then transformers
    white = Image.new("RGBA", rgba.size, (255, 255, 255, 255))
    flat = Image.alpha_composite(white, rgba).convert("RGB")
    ours = preprocess_image(rgba)
    ref = hf_processor()(images=[flat], return_tensors="pt")
    assert ours.grid_thw == tuple(ref["image_grid_thw"][0].tolist())
    # paste-with-mask and alpha_composite may round differently by one 8-bit level
    torch.testing.assert_close(ours.pixel_values, ref["pixel_values"].float(), rtol=0, atol=2 * 2 / 255 + 1e-6)


def test_encoded_bytes_and_path_equal_pil(tmp_path):
    img = random_image(200, 150, seed=5)
    buf = io.BytesIO()
    img.save(buf, format="PNG")
    p = tmp_path / "x.png"
    p.write_bytes(buf.getvalue())
    a = preprocess_image(img)
    b = preprocess_image(buf.getvalue())
    c = preprocess_image(p)
    assert torch.equal(a.pixel_values, b.pixel_values) and torch.equal(a.pixel_values, c.pixel_values)


def test_exif_orientation_is_applied():
    img = random_image(160, 96, seed=9)
    exif = Image.Exif()
    exif[0x0112] = 6  # "rotate 90 CW to display"
    buf = io.BytesIO()
    img.save(buf, format="JPEG", exif=exif, quality=95)
    decoded = Image.open(io.BytesIO(buf.getvalue()))
    decoded.load()
    upright = decoded.transpose(Image.Transpose.ROTATE_270)
    ours = preprocess_image(buf.getvalue())
    assert_matches_hf(ours, hf_processor()(images=[upright.convert("RGB")], return_tensors="pt"))
    assert inspect_image(buf.getvalue()).width == 96


def test_smart_resize_and_token_count_match_transformers():
    from transformers.models.qwen2_vl.image_processing_pil_qwen2_vl import smart_resize as hf_smart_resize

    rng = np.random.default_rng(0)
    sizes = [(1, 1), (16, 16), (48, 80), (80, 48), (4096, 4096), (5000, 4000), (200, 1), (1, 200),
             (10000, 60), (3840, 2160), (32 * 7 + 16, 32 * 5 + 16)]
    sizes += [tuple(int(v) for v in rng.integers(1, 12000, 2)) for _ in range(300)]
    for h, w in sizes:
        if max(h, w) / min(h, w) > MAX_ASPECT_RATIO:
            continue
        ref = hf_smart_resize(h, w, factor=32, min_pixels=MIN_PIXELS, max_pixels=MAX_PIXELS)
        assert smart_resize(h, w) == ref, (h, w)
        assert image_token_count(w, h) == (ref[0] // 32) * (ref[1] // 32)


def test_llm_tokens_are_resized_pixels_over_1024():
    h, w = smart_resize(1080, 1920)
    assert image_token_count(1920, 1080) == h * w // 1024


def png_header_only(width: int, height: int) -> bytes:
    """A PNG signature + IHDR claiming a size, with no pixel data (what a decompression bomb looks like
    from the outside: a tiny file that promises a huge image)."""
    ihdr = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    chunk = struct.pack(">I", len(ihdr)) + b"IHDR" + ihdr + struct.pack(">I", zlib.crc32(b"IHDR" + ihdr))
    end = struct.pack(">I", 0) + b"IEND" + struct.pack(">I", zlib.crc32(b"IEND"))
    return b"\x89PNG\r\n\x1a\n" + chunk + end


def test_refuses_oversized_source_before_decoding():
    t0 = time.perf_counter()
    # above our limit only, and above Pillow's own bomb limit too: both give our message
    for w, h in [(12000, 10000), (60000, 60000)]:
        bomb = png_header_only(w, h)
        with pytest.raises(ImageError, match="megapixels"):
            preprocess_image(bomb)
        with pytest.raises(ImageError, match="megapixels"):
            inspect_image(bomb)
    assert time.perf_counter() - t0 < 1.0


def test_refuses_extreme_aspect_ratio():
    img = Image.new("RGB", (402, 2))
    with pytest.raises(ImageError, match="aspect ratio"):
        preprocess_image(img)
    with pytest.raises(ImageError, match="aspect ratio"):
        image_token_count(402, 2)
    image_token_count(400, 2)  # exactly 200:1 is allowed


def test_refuses_bad_files(tmp_path):
    with pytest.raises(ImageError, match="not an image"):
        preprocess_image(b"this is not an image at all")
    with pytest.raises(ImageError, match="empty"):
        preprocess_image(b"")
    with pytest.raises(ImageError, match="does not exist"):
        preprocess_image(tmp_path / "missing.png")
    buf = io.BytesIO()
    random_image(64, 64).save(buf, format="PNG")
    with pytest.raises(ImageError, match="damaged or truncated"):
        preprocess_image(buf.getvalue()[: len(buf.getvalue()) // 2])
    ppm = io.BytesIO()
    random_image(8, 8).save(ppm, format="PPM")
    with pytest.raises(ImageError, match="PPM image; supported formats"):
        preprocess_image(ppm.getvalue())
    with pytest.raises(ImageError, match="cannot read an image from a int"):
        preprocess_image(42)  # type: ignore[arg-type]


def test_image_error_is_a_prompt_error():
    from engine.errors import EngineError, PromptError

    assert issubclass(ImageError, PromptError) and issubclass(ImageError, EngineError)


def test_counting_and_validation_do_not_import_torch(tmp_path):
    buf = io.BytesIO()
    random_image(64, 48).save(buf, format="PNG")
    p = tmp_path / "a.png"
    p.write_bytes(buf.getvalue())
    code = ("import sys, engine.image as im; info = im.inspect_image(sys.argv[1]); "
            "assert info.num_llm_tokens == im.image_token_count(64, 48), info; "
            "assert 'torch' not in sys.modules, 'engine.image imported torch'")
    subprocess.run([sys.executable, "-c", code, str(p)], check=True, timeout=60)


def test_sixteen_bit_greyscale_maps_onto_eight_bits():
    rng = np.random.default_rng(2)
    eight = rng.integers(0, 256, (70, 90), dtype=np.uint8)
    sixteen = Image.fromarray(eight.astype(np.uint16) * 257)  # v * 257 is v on a 16-bit scale
    buf = io.BytesIO()
    sixteen.save(buf, format="PNG")
    ours = preprocess_image(buf.getvalue())
    ref = preprocess_image(Image.fromarray(eight, "L"))
    assert torch.equal(ours.pixel_values, ref.pixel_values)


def test_animated_gif_uses_the_first_frame():
    frames = [random_image(64, 64, seed=s).convert("P") for s in (20, 21)]
    buf = io.BytesIO()
    frames[0].save(buf, format="GIF", save_all=True, append_images=frames[1:], duration=100)
    first = Image.open(io.BytesIO(buf.getvalue()))
    first.load()
    ours = preprocess_image(buf.getvalue())
    assert_matches_hf(ours, hf_processor()(images=[first.convert("RGB")], return_tensors="pt"))
