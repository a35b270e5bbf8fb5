"""The chat driven through real widgets offscreen, with a real worker process running the fake engine."""

from __future__ import annotations

import os

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

import pytest  # noqa: E402
from PySide6.QtCore import Qt  # noqa: E402
from PySide6.QtGui import QGuiApplication  # noqa: E402

from test_app_support import close_window, make_window  # noqa: E402


@pytest.fixture
def window(qtbot, tmp_path, monkeypatch):
    w = make_window(qtbot, tmp_path, monkeypatch)
    yield w
    close_window(w)


def _send(qtbot, window, text: str) -> None:
    window.composer.set_text(text)
    qtbot.keyClick(window.composer.edit, Qt.Key.Key_Return)


def _wait_idle(qtbot, window) -> None:
    qtbot.waitUntil(lambda: not window.controller.busy, timeout=20000)


def test_first_run_loads_demo_and_says_random_weights(window):
    assert window.controller.model.name == "demo"
    assert "random weights" in window.model_label.text()
    assert not window.banner.isHidden() and "random weights" in window.banner.label.text()


def test_dashboard_gets_worker_process_stats(qtbot, window):
    qtbot.waitUntil(lambda: window.telemetry.stats.worker is not None, timeout=10000)
    assert window.telemetry.stats.worker.pid == window.controller.client.pid
    assert window.dashboard.engine.value.text().endswith("resident")


def test_send_streams_thinking_then_content_and_saves(qtbot, window):
    seen_thinking = []
    window.controller.message_updated.connect(
        lambda m: seen_thinking.append(m.reasoning) if m.role == "assistant" and m.status == "streaming" else None)
    _send(qtbot, window, "hello **world**")
    assert window.composer.text() == ""
    assert window.composer.stop_button.isVisibleTo(window)
    _wait_idle(qtbot, window)
    assert any(seen_thinking), "reasoning should stream before the answer"
    msgs = window.controller.store.messages(window.controller.conversation_id)
    assert [m.role for m in msgs] == ["user", "assistant"]
    reply = msgs[1]
    assert reply.status == "done" and reply.content == "You said: hello **world**"
    assert reply.reasoning == "Let me think about it." and reply.thinking_seconds is not None
    assert reply.completion_tokens == 7 and reply.decode_tok_s == pytest.approx(56.7)
    widget = window.chat.widgets[reply.id]
    assert "<strong>world</strong>" in widget.body.toHtml() or "font-weight" in widget.body.toHtml()
    assert widget.thinking_toggle.text().startswith("Thought for")
    assert not widget.thinking_view.isVisibleTo(widget)          # collapsed once the answer came
    widget.thinking_toggle.click()
    assert widget.thinking_view.isVisibleTo(widget)
    assert "56.7 tok/s" in widget.stats_label.text() and "7 output tokens" in widget.stats_label.text()
    assert "acceptance 75%" in widget.stats_label.text()
    assert window.context_meter.used == reply.prompt_tokens + reply.completion_tokens
    assert window.sidebar.list.count() == 1
    assert reply.cached_tokens == 0 and "resumed" not in widget.stats_label.text()


def test_a_later_turn_shows_and_keeps_the_prompt_tokens_resumed_from_the_last(qtbot, window):
    _send(qtbot, window, "first")
    _wait_idle(qtbot, window)
    _send(qtbot, window, "second")
    _wait_idle(qtbot, window)
    reply = window.controller.store.messages(window.controller.conversation_id)[-1]
    assert (reply.prompt_tokens, reply.cached_tokens) == (10 + 7 * 3, 10 + 7)   # the fake engine's counts
    assert f"{reply.prompt_tokens} prompt tokens ({reply.cached_tokens} resumed)" in \
        window.chat.widgets[reply.id].stats_label.text()


def test_messages_are_on_disk_before_the_request_and_while_streaming(qtbot, window):
    from app.store import Store

    window.controller.save_interval_s = 0.25
    _send(qtbot, window, "SLOW story")
    other = Store(window.controller.store.path)          # a second connection sees only committed data
    try:
        msgs = other.messages(window.controller.conversation_id)
        assert [(m.role, m.status) for m in msgs] == [("user", "done"), ("assistant", "streaming")]
        assert msgs[0].content == "SLOW story" and window.controller.busy
        qtbot.waitUntil(lambda: "tick" in other.messages(window.controller.conversation_id)[1].content,
                        timeout=20000)
        assert window.controller.busy                       # saved while still streaming
    finally:
        window.controller.stop()
        qtbot.waitUntil(lambda: not window.controller.busy, timeout=20000)
        other.close()


def test_stop_with_escape_keeps_partial_reply(qtbot, window):
    _send(qtbot, window, "SLOW story")
    qtbot.waitUntil(lambda: window.controller.active is not None and "tick" in window.controller.active.message.content,
                    timeout=20000)
    qtbot.keyClick(window, Qt.Key.Key_Escape)
    _wait_idle(qtbot, window)
    reply = window.controller.store.messages(window.controller.conversation_id)[-1]
    assert reply.status == "cancelled"
    assert reply.content.startswith("You said: SLOW story") and reply.content.count("tick") < 400
    assert "Stopped" in window.chat.widgets[reply.id].status_label.text()


def test_regenerate_replaces_last_reply(qtbot, window):
    _send(qtbot, window, "first")
    _wait_idle(qtbot, window)
    old = window.controller.store.messages(window.controller.conversation_id)[-1]
    widget = window.chat.widgets[old.id]
    assert widget.regenerate_button.isVisibleTo(widget)
    widget.regenerate_button.click()
    _wait_idle(qtbot, window)
    msgs = window.controller.store.messages(window.controller.conversation_id)
    assert [m.role for m in msgs] == ["user", "assistant"]
    assert msgs[1].id != old.id and msgs[1].content == "You said: first" and msgs[1].status == "done"


def test_edit_and_resend_truncates_after_the_edited_message(qtbot, window):
    _send(qtbot, window, "one")
    _wait_idle(qtbot, window)
    _send(qtbot, window, "two")
    _wait_idle(qtbot, window)
    first_user = window.controller.store.messages(window.controller.conversation_id)[0]
    window.chat.widgets[first_user.id].edit_button.click()
    assert window.composer.text() == "one" and window.composer.edit_note.isVisibleTo(window)
    window.composer.set_text("uno")
    qtbot.mouseClick(window.composer.send_button, Qt.MouseButton.LeftButton)
    _wait_idle(qtbot, window)
    msgs = window.controller.store.messages(window.controller.conversation_id)
    assert [(m.role, m.content) for m in msgs] == [("user", "uno"), ("assistant", "You said: uno")]


def test_copy_message_and_code_block(qtbot, window):
    _send(qtbot, window, "code:\n```python\nprint('hi')\n```")
    _wait_idle(qtbot, window)
    reply = window.controller.store.messages(window.controller.conversation_id)[-1]
    widget = window.chat.widgets[reply.id]
    widget.copy_button.click()
    assert QGuiApplication.clipboard().text() == reply.content
    assert widget.body.code_blocks == ["print('hi')\n"]
    from PySide6.QtCore import QUrl
    widget.body.anchorClicked.emit(QUrl("copy:0"))
    assert QGuiApplication.clipboard().text() == "print('hi')\n"


def test_shift_enter_adds_a_line_instead_of_sending(qtbot, window):
    window.composer.set_text("line one")
    window.composer.edit.moveCursor(window.composer.edit.textCursor().MoveOperation.End)
    qtbot.keyClick(window.composer.edit, Qt.Key.Key_Return, Qt.KeyboardModifier.ShiftModifier)
    assert window.composer.text() == "line one\n" and window.controller.conversation_id is None


def test_unload_and_reload_from_the_menu(qtbot, window):
    unload = next(a for a in window.actions() if a.text().startswith("Unload model"))
    unload.trigger()
    assert window.controller.model is None
    assert window.composer.attach_button.isEnabled()  # images may wait for the next model (test_app_images)
    assert "No model is loaded" in window.controller.send("hi", [], True)
    reload_action = next(a for a in window.actions() if a.shortcut().toString() == "Ctrl+R")
    reload_action.trigger()
    qtbot.waitUntil(lambda: window.controller.model is not None, timeout=20000)


def test_ctrl_enter_sends_when_enter_is_set_to_add_lines(qtbot, window):
    window.composer.edit.enter_sends = False
    window.composer.set_text("a")
    window.composer.edit.moveCursor(window.composer.edit.textCursor().MoveOperation.End)
    qtbot.keyClick(window.composer.edit, Qt.Key.Key_Return)
    assert window.composer.text() == "a\n" and window.controller.conversation_id is None
    qtbot.keyClick(window.composer.edit, Qt.Key.Key_Return, Qt.KeyboardModifier.ControlModifier)
    assert window.controller.conversation_id is not None
    _wait_idle(qtbot, window)
    assert window.controller.store.messages(window.controller.conversation_id)[0].content == "a"


def test_a_load_error_with_the_plan_shows_its_sentence_and_the_table_on_demand(qtbot, window):
    """An over-budget load answers with one sentence and the plan's table under it: the banner shows the sentence and
    keeps its Open settings action; Details opens the whole text in a fixed-width window."""
    from engine import protocol as P

    c = window.controller
    table = "memory plan: recipe q4g64, context 262,144, KV bf16\nKV pool    17,179,869,184    16.000\nDOES NOT FIT"
    message = ("The memory plan needs 31.34 GiB, 7.34 GiB more than the VRAM budget of 24.00 GiB; the largest context "
               "that fits is 141,824 tokens.\n\n" + table)
    c.load_request = "L"
    c._on_event(P.WorkerError("L", "ModelLoadError", message))
    banner = window.banner
    assert banner.kind == "error" and "largest context that fits is 141,824" in banner.label.text()
    assert "KV pool" not in banner.label.text() and banner.button.isVisibleTo(window)
    assert banner.details_button.isVisibleTo(window)
    banner.details_button.click()
    from PySide6.QtWidgets import QPlainTextEdit
    shown = banner.details_dialog.findChild(QPlainTextEdit)
    assert table in shown.toPlainText() and shown.isReadOnly()
    banner.details_dialog.close()
    banner.show_message("warning", "One line only.")
    assert not banner.details_button.isVisibleTo(window) and banner.label.text() == "One line only."


def test_the_banner_says_where_the_model_is_served_or_why_not(qtbot, window):
    """Settings → Local API server port: the worker's ModelLoaded carries the URL (or why the server did not start)
    and the window says it (test_server.py checks the worker side)."""
    from engine import protocol as P

    c = window.controller
    c._on_event(P.ModelLoaded(c.load_request, "m", False, 4096, False, "native", api_url="http://127.0.0.1:8000/v1"))
    assert "http://127.0.0.1:8000/v1" in window.banner.label.text()
    c._on_event(P.ModelLoaded(c.load_request, "m", False, 4096, False, "native", api_error="port 80: denied"))
    assert "did not start (port 80: denied)" in window.banner.label.text()
