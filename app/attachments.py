"""Image attachments in the composer: load from a file, bytes or a pasted QImage, and validate.

Validation happens here, before anything is sent, with messages that tell the user what to do.
Token counts come from the model's preprocessing (engine.image, importable without torch).
"""

from __future__ import annotations

from pathlib import Path

from PySide6.QtCore import QBuffer, QByteArray, QIODevice
from PySide6.QtGui import QImage, QImageReader

from app.i18n import tr
from app.store import Attachment

MAX_IMAGE_BYTES = 20 * 1024 * 1024
MAX_IMAGES_PER_MESSAGE = 8
MAX_ASPECT_RATIO = 200
MAX_SOURCE_PIXELS = 100_000_000   # the engine refuses larger sources (decompression-bomb guard)
ACCEPTED_FORMATS = {"png": "image/png", "jpeg": "image/jpeg", "jpg": "image/jpeg", "webp": "image/webp",
                    "gif": "image/gif", "bmp": "image/bmp"}
FILE_DIALOG_FILTER = "Images (*.png *.jpg *.jpeg *.webp *.gif *.bmp)"


class AttachmentError(ValueError):
    """An image the composer refuses; the message is shown to the user."""


def image_refusal(model) -> str:
    """Why the loaded model cannot take images, or "" when it can. ``model`` is the worker's ModelLoaded.
    A checkpoint whose vision tower the chosen backend does not run (the native engine has no vision
    path yet) is told apart from one that has none: the first is fixed in Settings, the second is not."""
    if model.has_vision:
        return ""
    if getattr(model, "vision_tower", False):
        return tr("The {backend} backend cannot read images yet. To send images, switch the engine backend to "
                  "reference in Settings.").format(backend=model.backend)
    return tr("This model has no vision tower, so it cannot read images. Pick a model with vision in Settings.")


def image_tokens(width: int, height: int) -> int:
    """LLM tokens one image costs (plus its two vision start/end markers), by the engine's own formula."""
    from engine.image import image_token_count  # no torch at import (tests/test_app_isolation.py)

    return int(image_token_count(width, height)) + 2


def attachment_from_bytes(data: bytes, name: str) -> Attachment:
    if len(data) > MAX_IMAGE_BYTES:
        raise AttachmentError(tr("{name} is {size:.1f} MB; images must be at most {limit} MB.").format(
            name=name, size=len(data) / 1e6, limit=MAX_IMAGE_BYTES // (1024 * 1024)))
    buf = QBuffer()
    buf.setData(QByteArray(data))
    buf.open(QIODevice.OpenModeFlag.ReadOnly)
    reader = QImageReader(buf)
    fmt = bytes(reader.format().data()).decode().lower()
    if fmt not in ACCEPTED_FORMATS:
        raise AttachmentError(tr("{name} is not a supported image (PNG, JPEG, WebP, GIF or BMP).").format(name=name))
    size = reader.size()
    w, h = size.width(), size.height()
    if w <= 0 or h <= 0:
        raise AttachmentError(tr("{name} could not be read as an image; the file may be damaged.").format(name=name))
    if w * h > MAX_SOURCE_PIXELS:
        raise AttachmentError(tr("{name} is {w}x{h} ({mp:.0f} megapixels); images must be at most {limit} megapixels. "
                                 "Scale it down first.").format(name=name, w=w, h=h, mp=w * h / 1e6,
                                                                 limit=MAX_SOURCE_PIXELS // 1_000_000))
    if max(w, h) / min(w, h) > MAX_ASPECT_RATIO:
        raise AttachmentError(tr("{name} is {w}x{h}: too long and thin (aspect ratio above {r}:1).").format(
            name=name, w=w, h=h, r=MAX_ASPECT_RATIO))
    return Attachment(name=name, mime=ACCEPTED_FORMATS[fmt], width=w, height=h, data=bytes(data))


def attachment_from_file(path: str | Path) -> Attachment:
    p = Path(path)
    try:
        if p.stat().st_size > MAX_IMAGE_BYTES:
            raise AttachmentError(tr("{name} is {size:.1f} MB; images must be at most {limit} MB.").format(
                name=p.name, size=p.stat().st_size / 1e6, limit=MAX_IMAGE_BYTES // (1024 * 1024)))
        data = p.read_bytes()
    except OSError as exc:
        raise AttachmentError(tr("Cannot open {name}: {reason}").format(name=p.name, reason=exc.strerror)) from exc
    return attachment_from_bytes(data, p.name)


def attachment_from_qimage(image: QImage, name: str = "pasted.png") -> Attachment:
    if image.isNull():
        raise AttachmentError(tr("The clipboard image is empty."))
    buf = QBuffer()
    buf.open(QIODevice.OpenModeFlag.WriteOnly)
    image.save(buf, "PNG")
    return attachment_from_bytes(bytes(buf.data().data()), name)


def check_count(existing: int, adding: int = 1) -> None:
    if existing + adding > MAX_IMAGES_PER_MESSAGE:
        raise AttachmentError(tr("At most {n} images per message.").format(n=MAX_IMAGES_PER_MESSAGE))


def thumbnail(att: Attachment, side: int = 64) -> QImage:
    img = QImage.fromData(att.data)
    return img.scaled(side, side, aspectMode=_keep_aspect(), mode=_smooth())


def _keep_aspect():
    from PySide6.QtCore import Qt
    return Qt.AspectRatioMode.KeepAspectRatio


def _smooth():
    from PySide6.QtCore import Qt
    return Qt.TransformationMode.SmoothTransformation
