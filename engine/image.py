"""Image preprocessing for the vision tower: file -> validated RGB -> resized -> flat patches.

The steps and their order follow the model's own processor (the Qwen2-VL family image processor,
configured for Qwen3.5: patch 16, merge 2, temporal patch 2, pixel budget [65,536, 16,777,216],
mean = std = 0.5), so the tower sees exactly the pixels it was trained on:

1. open and validate (format, header size, aspect ratio) before decoding a single pixel;
2. convert to RGB (alpha is composited onto white, as vLLM and Qwen's own utilities do);
3. ``smart_resize`` to sides that are multiples of ``patch * merge`` (32) within the pixel budget,
   bicubic resampling of the 8-bit image;
4. ``/255``, then ``(x - 0.5) / 0.5``;
5. cut into 16x16 patches, the frame repeated twice along time (an image is a 2-frame clip),
   flattened as ``(channel, time, row, col)`` per patch, patches listed in merge-window order
   (each 2x2 block of patches is consecutive, blocks in raster order), because the merger
   concatenates four consecutive patch rows into one LLM token.

Nothing here needs torch except ``preprocess_image`` (imported there), so the GUI process can use
``image_token_count`` and ``inspect_image`` to count context and refuse bad files without torch.
"""

from __future__ import annotations

import io
import math
import os
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Union

from engine.errors import PromptError

if TYPE_CHECKING:  # pragma: no cover
    import torch
    from PIL import Image as PILImage

    from engine.config import VisionConfig


class ImageError(PromptError, ValueError):
    """An image the engine cannot use; the message says what is wrong and what to do."""


# Preprocessing facts of this model family (the checkpoint's preprocessor_config.json values).
PATCH_SIZE = 16
MERGE_SIZE = 2
TEMPORAL_PATCH_SIZE = 2
MIN_PIXELS = 65_536  # 256 x 256: smaller images are upscaled to at least this many pixels
MAX_PIXELS = 16_777_216  # 4096 x 4096: larger images are downscaled to at most this many
MAX_ASPECT_RATIO = 200
IMAGE_MEAN = 0.5
IMAGE_STD = 0.5

# Guards on the *source* file, checked before decoding (decompression-bomb protection).
MAX_FILE_BYTES = 256 * 1024 * 1024
MAX_SOURCE_PIXELS = 100_000_000  # 100 megapixels, e.g. 12,000 x 8,333
SUPPORTED_FORMATS = ("PNG", "JPEG", "MPO", "WEBP", "GIF", "BMP", "TIFF")

ImageSource = Union["PILImage.Image", bytes, bytearray, str, os.PathLike]


@dataclass
class ImageInput:
    """One preprocessed image, ready for the vision tower.

    pixel_values: float32 [grid_h * grid_w * t, channels * temporal_patch * patch * patch]
    grid_thw: (t, grid_h, grid_w) in patches (t = 1 for an image)
    num_llm_tokens: image placeholder tokens this image occupies in the prompt
    """

    pixel_values: "torch.Tensor"
    grid_thw: tuple[int, int, int]
    num_llm_tokens: int


@dataclass(frozen=True)
class ImageInfo:
    """What the header says about an image, without decoding it."""

    format: str
    width: int
    height: int
    num_llm_tokens: int


def smart_resize(
    height: int,
    width: int,
    factor: int = PATCH_SIZE * MERGE_SIZE,
    min_pixels: int = MIN_PIXELS,
    max_pixels: int = MAX_PIXELS,
) -> tuple[int, int]:
    """Target (height, width): multiples of ``factor``, pixel count in budget, aspect kept.

    Each side is first rounded to the nearest multiple (Python's round: halves go to even, as
    the model's processor does). If that overshoots ``max_pixels``, both sides are scaled down
    by the same factor and floored; if it undershoots ``min_pixels``, scaled up and ceiled.
    """
    if height <= 0 or width <= 0:
        raise ImageError(f"image has no pixels ({width} x {height}); attach a real picture")
    ratio = max(height, width) / min(height, width)
    if ratio > MAX_ASPECT_RATIO:
        raise ImageError(
            f"image is {width} x {height} pixels, an aspect ratio of {ratio:.0f}:1; the vision model accepts "
            f"at most {MAX_ASPECT_RATIO}:1. Crop it or split it into several images."
        )
    h_bar = round(height / factor) * factor
    w_bar = round(width / factor) * factor
    if h_bar * w_bar > max_pixels:
        scale = math.sqrt((height * width) / max_pixels)
        h_bar = max(factor, math.floor(height / scale / factor) * factor)
        w_bar = max(factor, math.floor(width / scale / factor) * factor)
    elif h_bar * w_bar < min_pixels:
        scale = math.sqrt(min_pixels / (height * width))
        h_bar = math.ceil(height * scale / factor) * factor
        w_bar = math.ceil(width * scale / factor) * factor
    return h_bar, w_bar


def image_token_count(width: int, height: int, *, patch_size: int = PATCH_SIZE, merge_size: int = MERGE_SIZE,
                      min_pixels: int = MIN_PIXELS, max_pixels: int = MAX_PIXELS) -> int:
    """LLM placeholder tokens an image of this size becomes (resized H * W / 1024 for this family)."""
    factor = patch_size * merge_size
    h, w = smart_resize(height, width, factor, min_pixels, max_pixels)
    return (h // factor) * (w // factor)


def check_source_size(width: int, height: int) -> None:
    """Refuse sizes that are absurd to decode, before any pixel is decoded."""
    if width <= 0 or height <= 0:
        raise ImageError(f"image header says {width} x {height} pixels; the file is damaged. Re-export it.")
    if width * height > MAX_SOURCE_PIXELS:
        raise ImageError(
            f"image is {width} x {height} = {width * height / 1e6:.0f} megapixels; the limit is "
            f"{MAX_SOURCE_PIXELS / 1e6:.0f} megapixels (it would be downscaled to at most "
            f"{MAX_PIXELS / 1e6:.1f} anyway). Scale it down before attaching it."
        )


def _describe(source: Any) -> str:
    if isinstance(source, (str, os.PathLike)):
        return f"'{os.fspath(source)}'"
    if isinstance(source, (bytes, bytearray)):
        return f"the attached data ({len(source)} bytes)"
    return "the image"


def _open_lazily(source: ImageSource) -> "PILImage.Image":
    """Open a file or bytes and read only the header; validate format and size."""
    from PIL import Image, UnidentifiedImageError

    what = _describe(source)
    if isinstance(source, (str, os.PathLike)):
        path = Path(source)
        if not path.is_file():
            raise ImageError(f"{what} does not exist or is not a file")
        size = path.stat().st_size
        if size > MAX_FILE_BYTES:
            raise ImageError(f"{what} is {size / 2**20:.0f} MiB; the limit is {MAX_FILE_BYTES // 2**20} MiB. "
                             "Save a smaller PNG or JPEG.")
        fp: Any = path
    elif isinstance(source, (bytes, bytearray)):
        if len(source) > MAX_FILE_BYTES:
            raise ImageError(f"{what} exceeds {MAX_FILE_BYTES // 2**20} MiB. Save a smaller PNG or JPEG.")
        if not source:
            raise ImageError("the attached image is empty (0 bytes)")
        fp = io.BytesIO(bytes(source))
    else:
        raise ImageError(f"cannot read an image from a {type(source).__name__}; give a file path, bytes or a "
                         "PIL image")
    try:
        with warnings.catch_warnings():  # our own size limit applies; Pillow's warning would only be noise
            warnings.simplefilter("ignore", Image.DecompressionBombWarning)
            img = Image.open(fp)  # reads the header only
    except UnidentifiedImageError:
        raise ImageError(f"{what} is not an image Monorail can read; supported formats: "
                         f"{', '.join(SUPPORTED_FORMATS)}. Convert it to PNG or JPEG.") from None
    except Image.DecompressionBombError:
        raise ImageError(f"{what} claims far more than {MAX_SOURCE_PIXELS / 1e6:.0f} megapixels (the limit); "
                         "scale it down before attaching it.") from None
    except (OSError, ValueError) as exc:
        raise ImageError(f"{what} could not be opened ({exc}). Re-export it as PNG or JPEG.") from None
    if img.format not in SUPPORTED_FORMATS:
        fmt = img.format
        img.close()
        raise ImageError(f"{what} is a {fmt} image; supported formats: {', '.join(SUPPORTED_FORMATS)}. "
                         "Convert it to PNG or JPEG.")
    try:
        check_source_size(*img.size)
    except ImageError:
        img.close()
        raise
    return img


def inspect_image(source: ImageSource) -> ImageInfo:
    """Validate an image from its header alone and say how many LLM tokens it will take.

    Raises ImageError for unreadable files, unsupported formats, absurd sizes or aspect ratios.
    Does not decode the pixels (cheap enough for the GUI thread; a damaged pixel stream is only
    found by ``preprocess_image``).
    """
    from PIL import Image

    if isinstance(source, Image.Image):
        check_source_size(*source.size)
        w, h = source.size
        return ImageInfo(source.format or "memory", w, h, image_token_count(w, h))
    img = _open_lazily(source)
    try:
        w, h = _oriented_size(img)
        return ImageInfo(img.format, w, h, image_token_count(w, h))
    finally:
        img.close()


def _oriented_size(img: "PILImage.Image") -> tuple[int, int]:
    """(width, height) as displayed: EXIF orientations 5-8 swap the sides."""
    try:
        orientation = img.getexif().get(0x0112, 1)
    except Exception:  # a damaged EXIF block must not make a good image unusable
        orientation = 1
    w, h = img.size
    return (h, w) if orientation in (5, 6, 7, 8) else (w, h)


def load_rgb(source: ImageSource) -> "PILImage.Image":
    """Decode ``source`` into an upright 8-bit RGB PIL image, or raise ImageError."""
    from PIL import Image, ImageOps

    if isinstance(source, Image.Image):
        check_source_size(*source.size)
        img = source
    else:
        img = _open_lazily(source)
        try:
            img.seek(0)  # animated GIF/WebP: the first frame
            img.load()
        except (OSError, ValueError, SyntaxError, Image.DecompressionBombError) as exc:
            img.close()
            raise ImageError(f"{_describe(source)} is damaged or truncated ({exc}). Re-export it as PNG "
                             "or JPEG.") from None
    try:
        img = ImageOps.exif_transpose(img)  # phone photos are stored sideways with an EXIF tag
    except Exception:  # a damaged EXIF block must not make a good image unusable
        pass
    return to_rgb(img)


def to_rgb(img: "PILImage.Image") -> "PILImage.Image":
    """8-bit RGB. Transparency is composited onto white (a transparent screenshot reads as on
    a light page rather than on whatever colour the hidden pixels happen to hold)."""
    from PIL import Image

    if img.mode == "RGB":
        return img
    if img.mode in ("I", "I;16", "I;16B", "I;16L", "I;16N", "F"):
        # 16-bit or float greyscale (e.g. 16-bit PNG): map the 0..65535 range onto 0..255.
        import numpy as np

        a = np.asarray(img, dtype=np.float64)
        scale = 255.0 / 65535.0 if a.max(initial=0) > 255 else 1.0
        img = Image.fromarray(np.clip(np.rint(a * scale), 0, 255).astype(np.uint8), mode="L")
    if img.mode == "P" and "transparency" in img.info:
        img = img.convert("RGBA")
    if img.mode in ("RGBA", "LA", "PA", "RGBa", "La"):
        rgba = img.convert("RGBA")
        background = Image.new("RGB", rgba.size, (255, 255, 255))
        background.paste(rgba, mask=rgba.getchannel("A"))
        return background
    return img.convert("RGB")


def patchify(pixels: "torch.Tensor", patch_size: int, merge_size: int, temporal_patch_size: int) -> "torch.Tensor":
    """[C, H, W] -> [H/p * W/p, C * tp * p * p], patches in merge-window order.

    Patch (r, c) sits in merge window (r // m, c // m); windows are listed in raster order and
    the m*m patches of a window consecutively, row-major inside the window. Each patch vector is
    (channel, time, row, col) to match the Conv3d weight layout [out, C, tp, p, p].
    """
    c, h, w = pixels.shape
    p, m = patch_size, merge_size
    gh, gw = h // p, w // p
    x = pixels.reshape(c, gh // m, m, p, gw // m, m, p)
    # -> (window row, window col, row in window, col in window, channel, pixel row, pixel col)
    x = x.permute(1, 4, 2, 5, 0, 3, 6)
    x = x.unsqueeze(5).expand(*x.shape[:5], temporal_patch_size, p, p)
    return x.reshape(gh * gw, c * temporal_patch_size * p * p).contiguous()


def preprocess_image(image: ImageSource, vision_cfg: "VisionConfig | None" = None, *,
                     min_pixels: int = MIN_PIXELS, max_pixels: int = MAX_PIXELS) -> ImageInput:
    """Turn a PIL image, encoded bytes or a file path into the vision tower's input.

    ``vision_cfg`` supplies patch/merge/temporal sizes and channels (defaults: this family's).
    Raises ImageError with an actionable message for anything unusable.
    """
    import numpy as np
    import torch
    from PIL import Image

    patch = vision_cfg.patch_size if vision_cfg else PATCH_SIZE
    merge = vision_cfg.spatial_merge_size if vision_cfg else MERGE_SIZE
    tpatch = vision_cfg.temporal_patch_size if vision_cfg else TEMPORAL_PATCH_SIZE
    if vision_cfg is not None and vision_cfg.in_channels != 3:
        raise ImageError(f"vision_config.in_channels is {vision_cfg.in_channels}; only RGB (3) is supported")
    factor = patch * merge

    rgb = load_rgb(image)
    height, width = smart_resize(rgb.height, rgb.width, factor, min_pixels, max_pixels)
    if (width, height) != rgb.size:
        rgb = rgb.resize((width, height), resample=Image.Resampling.BICUBIC)
    pixels = torch.from_numpy(np.array(rgb, dtype=np.uint8)).permute(2, 0, 1).to(torch.float32)
    pixels = (pixels / 255.0 - IMAGE_MEAN) / IMAGE_STD
    flat = patchify(pixels, patch, merge, tpatch)
    grid = (1, height // patch, width // patch)
    return ImageInput(pixel_values=flat, grid_thw=grid, num_llm_tokens=(height // factor) * (width // factor))
