"""The conversation sidebar: new (Ctrl+N), search (Ctrl+K), rename, delete, export."""

from __future__ import annotations

import json
import os

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

from PySide6.QtCore import Qt  # noqa: E402
from PySide6.QtWidgets import QMessageBox  # noqa: E402

from test_app_support import close_window, make_window  # noqa: E402


def _chat(qtbot, w, text):
    w.composer.set_text(text)
    qtbot.keyClick(w.composer.edit, Qt.Key.Key_Return)
    qtbot.waitUntil(lambda: not w.controller.busy, timeout=20000)


def test_new_search_rename_delete_export(qtbot, tmp_path, monkeypatch):
    w = make_window(qtbot, tmp_path / "data", monkeypatch)
    try:
        _chat(qtbot, w, "about penguins")
        first = w.controller.conversation_id
        new_action = next(a for a in w.actions() if a.shortcut().toString() == "Ctrl+N")
        new_action.trigger()
        assert w.controller.conversation_id is None and w.chat.widgets == {}
        _chat(qtbot, w, "about volcanoes")
        assert w.sidebar.list.count() == 2

        search_action = next(a for a in w.actions() if a.shortcut().toString() == "Ctrl+K")
        search_action.trigger()
        qtbot.keyClicks(w.sidebar.search, "PENGUIN")
        assert w.sidebar.ids() == [first]
        w.sidebar.search.clear()
        qtbot.keyClicks(w.sidebar.search, "said: about volc")     # matches reply text, not only titles
        assert len(w.sidebar.ids()) == 1 and w.sidebar.ids()[0] != first
        w.sidebar.search.clear()

        w.sidebar.list.setCurrentRow(w.sidebar.ids().index(first))
        assert w.controller.conversation_id == first
        assert [m.message.content for m in w.chat.widgets.values()][0] == "about penguins"

        w.sidebar.rename_requested.emit(first, "Birds")
        assert w.controller.store.conversation(first).title == "Birds"
        assert any(w.sidebar.list.item(i).text().startswith("Birds") for i in range(w.sidebar.list.count()))

        w.export_conversation(first, "md", str(tmp_path / "c.md"))
        w.export_conversation(first, "json", str(tmp_path / "c.json"))
        assert (tmp_path / "c.md").read_text().startswith("# Birds")
        assert json.loads((tmp_path / "c.json").read_text())["messages"][0]["content"] == "about penguins"

        monkeypatch.setattr(QMessageBox, "question", lambda *a, **k: QMessageBox.StandardButton.Yes)
        w.sidebar.delete_requested.emit(first)
        assert first not in w.sidebar.ids() and w.controller.store.conversation(first) is None
        assert w.controller.conversation_id is None
    finally:
        close_window(w)


def test_a_long_title_is_elided_in_the_sidebar_not_scrolled(qtbot, tmp_path, monkeypatch):
    w = make_window(qtbot, tmp_path, monkeypatch, start=False)
    try:
        w.resize(1100, 700)
        w.show()
        title = "What does this chart show? Answer briefly, and name every series in the legend " * 2
        c = w.controller.store.create_conversation(title)
        w.sidebar.set_conversations(w.controller.store.conversations(), c.id)
        qtbot.wait(50)
        assert not w.sidebar.list.horizontalScrollBar().isVisible()
        assert w.sidebar.list.item(0).toolTip() == title            # the whole title is a hover away
    finally:
        close_window(w)
