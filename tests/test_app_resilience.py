"""A dead worker, and a restarted app, never lose the conversation."""

from __future__ import annotations

import os

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

from PySide6.QtCore import Qt  # noqa: E402

from test_app_support import close_window, make_window  # noqa: E402


def test_worker_crash_shows_restart_and_keeps_conversation(qtbot, tmp_path, monkeypatch):
    w = make_window(qtbot, tmp_path, monkeypatch)
    try:
        w.composer.set_text("hello")
        qtbot.keyClick(w.composer.edit, Qt.Key.Key_Return)
        qtbot.waitUntil(lambda: not w.controller.busy, timeout=20000)
        old_pid = w.controller.client.pid
        w.composer.set_text("please CRASH")
        qtbot.keyClick(w.composer.edit, Qt.Key.Key_Return)
        qtbot.waitUntil(lambda: w.banner.kind == "error" and not w.banner.isHidden(), timeout=20000)
        assert "stopped unexpectedly" in w.banner.label.text() and "exited with code 3" in w.banner.label.text()
        assert w.banner.button.isVisibleTo(w) and w.banner.button.text() == "Restart engine"
        assert not w.controller.busy and w.controller.model is None
        msgs = w.controller.store.messages(w.controller.conversation_id)
        assert [m.role for m in msgs] == ["user", "assistant", "user", "assistant"]
        assert msgs[2].content == "please CRASH"
        crashed = msgs[3]
        assert crashed.status == "error" and "worker stopped" in crashed.error
        assert crashed.reasoning.startswith("Let me think")          # partial text streamed before the crash is kept
        assert "worker stopped" in w.chat.widgets[crashed.id].status_label.text()

        w.composer.set_text("are you there?")                       # refused: the banner keeps its Restart button
        qtbot.keyClick(w.composer.edit, Qt.Key.Key_Return)
        assert "not running" in w.banner.label.text() and "Restart it from the banner" in w.banner.label.text()
        assert w.banner.button.isVisibleTo(w) and w.banner.button.text() == "Restart engine"
        assert w.composer.text() == "are you there?"                # the text stays for the retry
        assert len(w.controller.store.messages(w.controller.conversation_id)) == 4

        w.banner.button.click()                                     # restart
        qtbot.waitUntil(lambda: w.controller.model is not None, timeout=30000)
        assert w.controller.client.pid != old_pid
        w.composer.set_text("again")
        qtbot.keyClick(w.composer.edit, Qt.Key.Key_Return)
        qtbot.waitUntil(lambda: not w.controller.busy, timeout=20000)
        msgs = w.controller.store.messages(w.controller.conversation_id)
        assert len(msgs) == 6 and msgs[-1].content == "You said: again" and msgs[0].content == "hello"
    finally:
        close_window(w)


def test_app_restart_shows_history_and_marks_interrupted_replies(qtbot, tmp_path, monkeypatch):
    w = make_window(qtbot, tmp_path, monkeypatch)
    w.composer.set_text("remember me")
    qtbot.keyClick(w.composer.edit, Qt.Key.Key_Return)
    qtbot.waitUntil(lambda: not w.controller.busy, timeout=20000)
    cid = w.controller.conversation_id
    # simulate a reply that was streaming when the app died
    w.controller.store.add_message(cid, "assistant", "half a rep", status="streaming")
    close_window(w)
    w.close()

    w2 = make_window(qtbot, tmp_path, monkeypatch, start=False)
    try:
        assert w2.sidebar.list.count() == 1
        assert "remember me" in w2.sidebar.list.item(0).text()
        w2.sidebar.list.setCurrentRow(0)
        msgs = w2.controller.messages()
        assert [m.content for m in msgs] == ["remember me", "You said: remember me", "half a rep"]
        assert msgs[-1].status == "interrupted"
        assert len(w2.chat.widgets) == 3
        assert "Interrupted" in w2.chat.widgets[msgs[-1].id].status_label.text()
        assert not w2.banner.isHidden()
    finally:
        close_window(w2)


def test_worker_that_cannot_start_is_reported(qtbot, tmp_path, monkeypatch):
    """A broken engine install (the factory cannot be imported) is an error banner, not a hang."""
    monkeypatch.setenv("MONORAIL_DATA_DIR", str(tmp_path))
    from app.main import build
    from test_app_support import NoGpu

    _, w = build(factory="no_such_module:factory", nvml_source=NoGpu())
    qtbot.addWidget(w)
    w.controller.start()
    try:
        qtbot.waitUntil(lambda: w.banner.kind == "error", timeout=30000)
        qtbot.wait(300)
        text = w.banner.label.text()
        assert "no_such_module" in text
        assert w.banner.button.text() == "Restart engine"
        assert w.controller.send("hi", [], True) != ""            # refused with a reason, nothing stored
        assert w.controller.store.conversations() == []
    finally:
        w.controller.shutdown()
        w.controller.store.close()


def test_protocol_mismatch_is_refused_with_a_message(qtbot, tmp_path, monkeypatch):
    from engine import protocol as P

    w = make_window(qtbot, tmp_path, monkeypatch, start=False)
    monkeypatch.setattr(P, "PROTOCOL_VERSION", P.PROTOCOL_VERSION + 1)   # the GUI side only; the child is fresh
    w.controller.start()
    try:
        qtbot.waitUntil(lambda: w.banner.kind == "error", timeout=30000)
        assert "protocol" in w.banner.label.text() and "Reinstall" in w.banner.label.text()
        qtbot.wait(500)
        assert w.controller.model is None and w.controller.load_request is None   # nothing was loaded
    finally:
        close_window(w)


def test_an_unreadable_history_file_is_kept_and_the_app_opens_with_a_fresh_one(qtbot, tmp_path, monkeypatch):
    damaged = b"this was never an SQLite file" * 100
    (tmp_path / "history.sqlite3").write_bytes(damaged)
    w = make_window(qtbot, tmp_path, monkeypatch, start=False)
    try:
        kept = w.controller.store.set_aside
        assert kept is not None and kept.read_bytes() == damaged
        notice = w.start_notice
        assert notice.isVisible() and str(kept) in notice.text() and "not a database" in notice.text()
        assert w.controller.store.conversations() == []
    finally:
        close_window(w)


def test_a_history_from_a_newer_monorail_is_refused_and_left_alone(tmp_path, monkeypatch, capsys):
    import sqlite3

    from app import main
    from app.store import MIGRATIONS

    monkeypatch.setenv("MONORAIL_DATA_DIR", str(tmp_path))
    path = tmp_path / "history.sqlite3"
    con = sqlite3.connect(path)
    con.execute(f"PRAGMA user_version={len(MIGRATIONS) + 1}")
    con.close()
    before = path.read_bytes()
    shown = []
    monkeypatch.setattr("PySide6.QtWidgets.QMessageBox.critical", lambda parent, title, text: shown.append(text))
    assert main.run([]) == 1
    assert "newer Monorail" in capsys.readouterr().err and "newer Monorail" in shown[0]
    assert path.read_bytes() == before and [p.name for p in tmp_path.iterdir() if "damaged" in p.name] == []


def test_bad_settings_are_reported_at_start_and_the_dialog_opens(qtbot, tmp_path, monkeypatch):
    import json

    (tmp_path / "settings.json").write_text(json.dumps({"sampling": {"temperature": "hot"}, "theme": "neon"}))
    w = make_window(qtbot, tmp_path, monkeypatch, start=False)
    try:
        assert "back at their defaults: sampling, theme." in w.start_notice.text()
        from app.widgets.settings_dialog import SettingsDialog
        qtbot.addWidget(SettingsDialog(w.controller.settings))      # crashed on the string temperature before
    finally:
        close_window(w)
