"""The app as a new user meets it: no settings, the real engine worker, the built-in demo model."""

from __future__ import annotations

import os

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

import pytest  # noqa: E402
from PySide6.QtCore import Qt  # noqa: E402

from test_app_support import NoGpu  # noqa: E402


@pytest.mark.slow   # 8-30 s on 2 CPU cores: the demo model runs on the torch reference backend
def test_first_run_chats_with_the_demo_model(qtbot, tmp_path, monkeypatch):
    monkeypatch.setenv("MONORAIL_DATA_DIR", str(tmp_path))
    from app.main import build

    _, w = build(nvml_source=NoGpu())            # the default factory: engine.api in the worker
    qtbot.addWidget(w)
    w.controller.settings.max_tokens = 12
    w.controller.start()
    try:
        qtbot.waitUntil(lambda: w.controller.model is not None or w.banner.kind == "error", timeout=120000)
        assert w.controller.model is not None, w.banner.label.text()
        assert "random weights" in w.model_label.text() and "random weights" in w.banner.label.text()
        assert w.controller.model.has_vision
        from PySide6.QtGui import QColor, QImage
        img = QImage(96, 64, QImage.Format.Format_RGB32)
        img.fill(QColor("green"))
        png = tmp_path / "green.png"
        img.save(str(png), "PNG")
        w.composer.add_images([str(png)])              # through the real preprocessing and vision tower
        w.composer.set_text("Hello there, what is in this picture?")
        qtbot.keyClick(w.composer.edit, Qt.Key.Key_Return)
        qtbot.waitUntil(lambda: not w.controller.busy, timeout=120000)
        reply = w.controller.store.messages(w.controller.conversation_id)[-1]
        assert reply.status == "done", reply.error
        assert 1 <= reply.completion_tokens <= 12 and reply.decode_tok_s
        assert reply.prompt_tokens > 70                  # the image alone is 70 placeholder tokens
        assert "output tokens" in w.chat.widgets[reply.id].stats_label.text()
        assert "No NVIDIA GPU" in w.dashboard.gpu_label.text()
        assert w.dashboard.speed.value.text().endswith("tok/s")
    finally:
        w.controller.shutdown()
        w.controller.store.close()
