"""Images in the composer: drag-and-drop, paste, validation, thumbnails, and the trip to the engine."""

from __future__ import annotations

import os

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

import pytest  # noqa: E402
from PySide6.QtCore import QMimeData, QPointF, Qt, QUrl  # noqa: E402
from PySide6.QtGui import QColor, QDragEnterEvent, QDropEvent, QGuiApplication, QImage  # noqa: E402
from PySide6.QtWidgets import QApplication  # noqa: E402

from app.attachments import AttachmentError, attachment_from_bytes, image_tokens  # noqa: E402
from test_app_support import close_window, make_window  # noqa: E402


@pytest.fixture
def window(qtbot, tmp_path, monkeypatch):
    w = make_window(qtbot, tmp_path / "data", monkeypatch)
    yield w
    close_window(w)


def _png(path, w=64, h=48, color="red"):
    img = QImage(w, h, QImage.Format.Format_RGB32)
    img.fill(QColor(color))
    assert img.save(str(path), "PNG")
    return path


def _drop(widget, mime: QMimeData) -> None:
    pos = QPointF(widget.rect().center())
    enter = QDragEnterEvent(pos, Qt.DropAction.CopyAction, mime, Qt.MouseButton.LeftButton,
                            Qt.KeyboardModifier.NoModifier)
    QApplication.sendEvent(widget, enter)
    assert enter.isAccepted()
    drop = QDropEvent(pos, Qt.DropAction.CopyAction, mime, Qt.MouseButton.LeftButton, Qt.KeyboardModifier.NoModifier)
    QApplication.sendEvent(widget, drop)


def test_drag_and_drop_file_then_send_reaches_engine(qtbot, window, tmp_path):
    mime = QMimeData()
    mime.setUrls([QUrl.fromLocalFile(str(_png(tmp_path / "chart.png")))])
    _drop(window.composer, mime)
    assert [a.name for a in window.composer.attachments] == ["chart.png"]
    chips = window.composer._chips()
    assert len(chips) == 1 and chips[0].remove_button.isVisibleTo(window.composer)
    assert window.context_meter.used >= image_tokens(64, 48)
    window.composer.set_text("what is this")
    qtbot.keyClick(window.composer.edit, Qt.Key.Key_Return)
    qtbot.waitUntil(lambda: not window.controller.busy, timeout=20000)
    msgs = window.controller.store.messages(window.controller.conversation_id)
    assert msgs[0].attachments[0].width == 64 and msgs[0].attachments[0].mime == "image/png"
    assert msgs[1].content == "You said: what is this (1 image)"     # the fake engine counted the image part
    assert window.composer.attachments == []


def test_drop_on_the_chat_area_attaches_too(window, tmp_path):
    mime = QMimeData()
    mime.setUrls([QUrl.fromLocalFile(str(_png(tmp_path / "shot.png")))])
    _drop(window, mime)
    assert [a.name for a in window.composer.attachments] == ["shot.png"]


def test_paste_image_and_remove_it(qtbot, window):
    img = QImage(300, 200, QImage.Format.Format_RGB32)
    img.fill(QColor("blue"))
    QGuiApplication.clipboard().setImage(img)
    window.composer.edit.paste()
    assert len(window.composer.attachments) == 1
    att = window.composer.attachments[0]
    assert (att.width, att.height, att.mime) == (300, 200, "image/png")
    window.composer._chips()[0].remove_button.click()
    assert window.composer.attachments == []


def test_paste_text_still_pastes_text(window):
    mime = QMimeData()
    mime.setText("plain words")
    QGuiApplication.clipboard().setMimeData(mime)
    window.composer.edit.paste()
    assert window.composer.text() == "plain words" and window.composer.attachments == []


def test_bad_files_are_refused_with_clear_messages(window, tmp_path):
    bad = tmp_path / "notes.png"
    bad.write_bytes(b"this is not an image")
    window.composer.add_images([str(bad)])
    assert window.composer.attachments == []
    assert "not a supported image" in window.banner.label.text()
    thin = _png(tmp_path / "thin.png", 1000, 4)
    window.composer.add_images([str(thin)])
    assert "aspect ratio" in window.banner.label.text()
    window.composer.add_images([str(_png(tmp_path / f"i{i}.png")) for i in range(9)])
    assert len(window.composer.attachments) == 8
    assert "At most 8 images" in window.banner.label.text()


def test_size_limit_message():
    with pytest.raises(AttachmentError, match="at most 20 MB"):
        attachment_from_bytes(b"\x89PNG" + b"0" * (21 * 1024 * 1024), "huge.png")


def test_model_without_vision_refuses_images(qtbot, window, tmp_path):
    from engine import protocol as P

    c = window.controller
    c._on_event(P.ModelLoaded(c.load_request, "text-only", False, 4096, False, "fake"))   # a text-only model
    assert not window.composer.attach_button.isEnabled()
    window.composer.add_images([str(_png(tmp_path / "x.png"))])
    assert window.composer.attachments == [] and "no vision" in window.banner.label.text()
    from app.store import Attachment
    refusal = c.send("look", [Attachment("x.png", "image/png", 8, 8, b"")], True)
    assert "no vision" in refusal and c.conversation_id is None      # nothing stored, nothing sent


def test_a_vision_model_on_the_native_backend_points_to_the_setting_that_fixes_it(qtbot, window, tmp_path):
    """The native engine has no vision path yet: the model has a tower, the backend cannot run it. The refusal must
    say that (and where to switch), not that the model has no vision tower."""
    from engine import protocol as P

    c = window.controller
    c._on_event(P.ModelLoaded(c.load_request, "demo", True, 4096, False, "native", vision_tower=True))
    assert not window.composer.attach_button.isEnabled()
    assert "native backend cannot read images" in window.composer.attach_button.toolTip()
    window.composer.add_images([str(_png(tmp_path / "x.png"))])
    assert window.composer.attachments == []
    assert "switch the engine backend to reference" in window.banner.label.text()
    assert "no vision tower" not in window.banner.label.text()
    from app.store import Attachment
    refusal = c.send("look", [Attachment("x.png", "image/png", 8, 8, b"")], True)
    assert "native backend cannot read images" in refusal and c.conversation_id is None


def test_images_dropped_while_no_model_is_loaded_wait_in_the_composer(qtbot, window, tmp_path):
    """A screenshot dragged in while no model is loaded (a 27B load takes a while) is kept, not refused as if the
    model had no vision; a model that then loads without vision refuses the send and disables the button."""
    from engine import protocol as P

    c = window.controller
    c.unload_model()
    assert c.model is None and window.composer.attach_button.isEnabled()
    window.composer.add_images([str(_png(tmp_path / "early.png"))])
    assert len(window.composer.attachments) == 1 and "no vision" not in window.banner.label.text()
    assert "No model is loaded" in c.send("look", list(window.composer.attachments), True)
    c._on_event(P.ModelLoaded(c.load_request, "text-only", False, 4096, False, "fake"))
    assert c.model is not None and not window.composer.attach_button.isEnabled()
    assert "no vision" in c.send("look", list(window.composer.attachments), True) and c.conversation_id is None


def test_image_token_count_follows_the_model_formula():
    from engine.image import image_token_count

    assert image_tokens(1024, 1024) == 1024 + 2
    assert image_tokens(64, 48) == 70 + 2           # upscaled to 320 x 224 (>= 65,536 pixels), plus start/end markers
    for w, h in [(1, 200), (333, 77), (1920, 1080), (4096, 4096), (8000, 6000), (12345, 67), (31, 33)]:
        assert image_tokens(w, h) == image_token_count(w, h) + 2, (w, h)


def test_huge_pixel_counts_are_refused_before_decoding(tmp_path):
    img = QImage(12_000, 9_000, QImage.Format.Format_Mono)     # 108 MP; 1 bit per pixel keeps the file small
    img.fill(0)
    path = tmp_path / "huge.png"
    assert img.save(str(path), "PNG")
    from app.attachments import attachment_from_file
    with pytest.raises(AttachmentError, match="at most 100 megapixels"):
        attachment_from_file(path)

